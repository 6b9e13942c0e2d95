//! Pacing as one fleet: the [`FleetPacing`] side of the store, whose calls the background
//! task makes (see `switchyard_pacing::fleet` for the arithmetic and its bounds).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use switchyard::provider::BoxFuture;
use switchyard_pacing::fleet::{
    BucketSpec, DIMENSIONS, FleetPacing, FleetReport, FleetSink, LeaseAsk, LeaseGrant, Window,
};
use tokio::sync::oneshot;

use crate::RedisStore;
use crate::scripts::Scripts;

/// How long the fleet gives a header window that has reset before an answer states the next
/// one: one request goes as the probe, and another after this if no answer came.
pub(crate) const PROBE_MS: u64 = 1_000;

/// A pacing call for the background task.
pub(crate) enum PaceOp {
    Lease {
        lane: String,
        ask: LeaseAsk,
        reply: oneshot::Sender<Option<LeaseGrant>>,
    },
    Report {
        lane: String,
        report: FleetReport,
    },
    Return {
        lane: String,
        units: [f64; 2],
        buckets: [Option<BucketSpec>; 2],
    },
    /// At shutdown: answered once every call before it was made.
    Close {
        done: oneshot::Sender<()>,
    },
}

/// `x` as the scripts read a number: `''` for none.
fn opt(x: Option<f64>) -> String {
    x.map_or_else(String::new, |x| format!("{x}"))
}

impl PaceOp {
    /// The script call, when the op is one.
    pub(crate) fn invocation<'s>(
        &self,
        scripts: &'s Scripts,
        prefix: &str,
        replica: &str,
    ) -> Option<redis::ScriptInvocation<'s>> {
        match self {
            PaceOp::Lease { lane, ask, .. } => {
                let mut call = scripts.pace_lease.prepare_invoke();
                call.arg(prefix).arg(lane).arg(replica).arg(PROBE_MS);
                for d in 0..DIMENSIONS {
                    call.arg(format!("{}", ask.need[d])).arg(format!("{}", ask.want[d]));
                }
                for bucket in ask.buckets {
                    call.arg(opt(bucket.map(|b| b.capacity))).arg(opt(bucket.map(|b| b.per_sec)));
                }
                for seen in ask.seen {
                    call.arg(opt(seen));
                }
                Some(call)
            }
            PaceOp::Report { lane, report } => {
                let mut call = scripts.pace_report.prepare_invoke();
                call.arg(prefix).arg(lane).arg(replica).arg(PROBE_MS);
                call.arg(opt(report.hold.map(|h| h.as_millis() as f64)));
                for stated in &report.stated {
                    match stated {
                        Some(stated) => {
                            call.arg("1")
                                .arg(opt(stated.limit.map(|l| l as f64)))
                                .arg(format!("{}", stated.remaining.floor()))
                                .arg(opt(stated.reset_in.map(|r| r.as_millis() as f64)))
                                .arg(format!("{}", stated.uncounted.max(0.0)));
                        }
                        None => {
                            call.arg("").arg("").arg("0").arg("").arg("0");
                        }
                    }
                }
                Some(call)
            }
            PaceOp::Return { lane, units, buckets } => {
                let mut call = scripts.pace_return.prepare_invoke();
                call.arg(prefix).arg(lane).arg(replica);
                for (units, bucket) in units.iter().zip(buckets) {
                    call.arg(format!("{units}"))
                        .arg(opt(bucket.map(|b| b.capacity)))
                        .arg(opt(bucket.map(|b| b.per_sec)));
                }
                Some(call)
            }
            PaceOp::Close { .. } => None,
        }
    }
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

fn millis(value: &Value) -> Option<Duration> {
    number(value).map(|ms| Duration::from_millis(ms.max(0.0) as u64))
}

/// A lease script's answer.
pub(crate) fn grant(reply: &str) -> Option<LeaseGrant> {
    let value: Value = serde_json::from_str(reply).ok()?;
    let mut grant = LeaseGrant::default();
    for d in 0..DIMENSIONS {
        grant.granted[d] = number(&value["granted"][d]).unwrap_or(0.0);
        grant.level[d] = number(&value["levels"][d]);
    }
    for h in 0..4 {
        let window = &value["windows"][h];
        if let Some(ends_in) = millis(&window["ends"]) {
            let limit = window["lim"].as_f64().map(|l| l as u64);
            grant.windows[h] = Some(Window { limit, ends_in, probe: window["probe"] == 1 });
        }
    }
    grant.retry_in = millis(&value["retry"]);
    grant.hold = millis(&value["hold"]);
    Some(grant)
}

/// What another replica's pacing message says: the lane, a hold, the windows it opened.
pub(crate) fn message(payload: &str) -> Option<(String, Option<Duration>, Vec<usize>)> {
    let value: Value = serde_json::from_str(payload).ok()?;
    if value["op"] != "pace" {
        return None;
    }
    let lane = value["lane"].as_str()?.to_owned();
    let opened = value["opened"]
        .as_array()
        .map(|o| o.iter().filter_map(Value::as_u64).map(|h| h as usize).collect())
        .unwrap_or_default();
    Some((lane, millis(&value["hold"]), opened))
}

/// Tells this process's lanes what another replica's pacing message says.
pub(crate) fn tell(sink: &Option<Weak<dyn FleetSink>>, payload: &str) {
    let Some(sink) = sink.as_ref().and_then(Weak::upgrade) else { return };
    let Some((lane, hold, opened)) = message(payload) else { return };
    if let Some(hold) = hold {
        sink.held(&lane, hold);
    }
    for header in opened {
        sink.window_opened(&lane, header);
    }
}

impl FleetPacing for RedisStore {
    fn lease(&self, lane: &str, ask: LeaseAsk) -> BoxFuture<'static, Option<LeaseGrant>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.pace.send(PaceOp::Lease { lane: lane.to_owned(), ask, reply }).is_ok();
        // The call waits its turn behind the link's others (writes, reads, leases), each bounded
        // by the timeout: a request waits for at most one timeout, whatever is ahead of it.
        let wait = self.shared.settings.timeout;
        Box::pin(async move {
            if !sent {
                return None;
            }
            tokio::time::timeout(wait, answer).await.ok()?.ok().flatten()
        })
    }

    fn report(&self, lane: &str, report: FleetReport) {
        let _ = self.pace.send(PaceOp::Report { lane: lane.to_owned(), report });
    }

    fn give_back(&self, lane: &str, units: [f64; 2], buckets: [Option<BucketSpec>; 2]) {
        let _ = self.pace.send(PaceOp::Return { lane: lane.to_owned(), units, buckets });
    }

    fn shared(&self) -> bool {
        self.shared.fleet.up.load(Ordering::Relaxed)
    }

    fn replicas(&self) -> usize {
        self.shared.fleet.replicas.load(Ordering::Relaxed).max(1)
    }

    fn watch(&self, sink: Weak<dyn FleetSink>) {
        *self.shared.fleet.sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(sink);
    }
}

impl RedisStore {
    /// At shutdown: gives the fleet back what the lanes leased and did not spend, then leaves
    /// the membership. Bounded by a few timeouts; the store stops calling Redis after it.
    pub async fn close(&self) {
        let sink = self.shared.fleet.sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(sink) = sink.as_ref().and_then(Weak::upgrade) {
            sink.surrender();
        }
        let (done, closed) = oneshot::channel();
        if self.pace.send(PaceOp::Close { done }).is_ok() {
            let _ = tokio::time::timeout(self.shared.settings.timeout * 8, closed).await;
        }
    }
}

/// Pacing's view of the link, kept up to date by the background task and read on the
/// request path without a lock.
#[derive(Default)]
pub(crate) struct FleetView {
    pub up: std::sync::atomic::AtomicBool,
    pub replicas: std::sync::atomic::AtomicUsize,
    pub sink: std::sync::Mutex<Option<Weak<dyn FleetSink>>>,
}
