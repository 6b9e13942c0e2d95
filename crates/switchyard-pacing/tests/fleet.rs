//! A pacer sharing one allowance with other replicas' pacers through a fleet: stand-in
//! fleets (a model of the Redis bucket, and one holding a header window) behind
//! [`FleetPacing`], and several `LimitPacer::shared` leasing from them at once.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use switchyard::credential::CredentialId;
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard::provider::BoxFuture;
use switchyard_pacing::fleet::{
    BucketSpec, FleetPacing, FleetReport, FleetSink, HEADERS, LeaseAsk, LeaseGrant, RPM, Window, slice_size,
};
use switchyard_pacing::{LimitPacer, Limits};
use tokio::time::Instant;

/// A grant of `units` of the header dimension, the fleet's level `level`, for a stated
/// window of 10 that ends in `ends_ms` (a probe window when `probe`).
fn header_grant(units: f64, level: f64, ends_ms: u64, probe: bool) -> LeaseGrant {
    let mut grant = LeaseGrant::default();
    grant.granted[HEADERS] = units;
    grant.level[HEADERS] = Some(level);
    grant.windows[0] = Some(Window { limit: Some(10), ends_in: Duration::from_millis(ends_ms), probe });
    grant
}

/// The fleet's bucket as the Redis script keeps it: refilled at its rate up to its
/// capacity, granting a slice when a need can be met.
struct ModelFleet {
    state: Mutex<(f64, Instant)>,
    spec: BucketSpec,
    replicas: usize,
    up: std::sync::atomic::AtomicBool,
}

impl FleetPacing for ModelFleet {
    fn lease(&self, _lane: &str, ask: LeaseAsk) -> BoxFuture<'static, Option<LeaseGrant>> {
        let up = self.up.load(std::sync::atomic::Ordering::Relaxed);
        let grant = up.then(|| {
            let now = Instant::now();
            let mut state = self.state.lock().unwrap();
            let (level, at) = &mut *state;
            *level =
                (*level + now.duration_since(*at).as_secs_f64() * self.spec.per_sec).min(self.spec.capacity);
            *at = now;
            let mut grant = LeaseGrant::default();
            let need = ask.need[RPM].min(self.spec.capacity);
            if *level < need {
                grant.retry_in = Some(Duration::from_secs_f64((need - *level) / self.spec.per_sec));
            } else {
                let take = ask.want[RPM].min(*level).max(ask.need[RPM]).max(0.0);
                *level -= take;
                grant.granted[RPM] = take;
            }
            grant.level[RPM] = Some(*level);
            grant
        });
        Box::pin(async move {
            // A round trip.
            tokio::time::sleep(Duration::from_micros(200)).await;
            grant
        })
    }
    fn report(&self, _lane: &str, _report: FleetReport) {}
    fn give_back(&self, _lane: &str, units: [f64; 2], _buckets: [Option<BucketSpec>; 2]) {
        let mut state = self.state.lock().unwrap();
        state.0 = (state.0 + units[RPM]).min(self.spec.capacity);
    }
    fn shared(&self) -> bool {
        self.up.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn replicas(&self) -> usize {
        self.replicas
    }
    fn watch(&self, _sink: Weak<dyn FleetSink>) {}
}

fn model(per_minute: f64, replicas: usize) -> Arc<ModelFleet> {
    let per_sec = per_minute / 60.0;
    let spec = BucketSpec { capacity: per_sec.max(1.0), per_sec };
    Arc::new(ModelFleet {
        state: Mutex::new((spec.capacity, Instant::now())),
        spec,
        replicas,
        up: true.into(),
    })
}

/// Three replicas' pacers, each sending as fast as its pacer lets it for `seconds`; every
/// dispatch's instant.
async fn fan_out(pacers: &[Arc<LimitPacer>], seconds: u64) -> Vec<Instant> {
    let end = Instant::now() + Duration::from_secs(seconds);
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for pacer in pacers {
        for _ in 0..4 {
            let (pacer, sent) = (pacer.clone(), sent.clone());
            tasks.push(tokio::spawn(async move {
                let credential = CredentialId::derive("openai", "http://up", None);
                loop {
                    let request = PaceRequest {
                        provider: "up",
                        credential_id: &credential,
                        estimated_tokens: 10,
                        deadline: Some(end),
                        spill_after: None,
                    };
                    let Ok(mut permit) = pacer.acquire(request).await else { break };
                    sent.lock().unwrap().push(Instant::now());
                    permit.settle(Some(10));
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut sent = std::mem::take(&mut *sent.lock().unwrap());
    sent.sort();
    sent
}

/// The most dispatches within any stretch of `window`.
fn most_within(sent: &[Instant], window: Duration) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, at) in sent.iter().enumerate() {
        while *at - sent[first] >= window {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

fn limits(rpm: u32) -> Vec<(String, Limits)> {
    vec![("up".to_owned(), Limits { requests_per_minute: Some(rpm), ..Limits::default() })]
}

/// A fleet whose requests window runs with `level` left: a lease of it gets one unit.
/// It keeps what the replica reports.
struct WindowFleet {
    level: f64,
    reports: Mutex<Vec<FleetReport>>,
}

impl FleetPacing for WindowFleet {
    fn lease(&self, _lane: &str, ask: LeaseAsk) -> BoxFuture<'static, Option<LeaseGrant>> {
        let grant = if ask.want[HEADERS] > 0.0 {
            header_grant(1.0, self.level, 500, false)
        } else {
            LeaseGrant::default()
        };
        Box::pin(async move { Some(grant) })
    }
    fn report(&self, _lane: &str, report: FleetReport) {
        self.reports.lock().unwrap().push(report);
    }
    fn give_back(&self, _lane: &str, _units: [f64; 2], _buckets: [Option<BucketSpec>; 2]) {}
    fn shared(&self) -> bool {
        true
    }
    fn replicas(&self) -> usize {
        3
    }
    fn watch(&self, _sink: Weak<dyn FleetSink>) {}
}

#[tokio::test(start_paused = true)]
async fn a_call_sent_before_the_lane_knew_the_fleets_window_is_told_to_the_fleet_with_its_answer() {
    let fleet = Arc::new(WindowFleet { level: 5.0, reports: Mutex::default() });
    let limits = vec![("up".to_owned(), Limits { respect_headers: true, ..Limits::default() })];
    let pacer = LimitPacer::shared(limits, fleet.clone() as Arc<dyn FleetPacing>);
    let credential = CredentialId::derive("openai", "http://up", None);
    let request = || PaceRequest {
        provider: "up",
        credential_id: &credential,
        estimated_tokens: 10,
        deadline: None,
        spill_after: None,
    };
    let stated = |remaining: u64| switchyard::ratelimit::RateLimits {
        requests: Some(switchyard::ratelimit::Allowance {
            limit: Some(10),
            remaining: Some(remaining),
            reset_after: Some(Duration::from_millis(490)),
        }),
        ..Default::default()
    };
    // The lane knows no window: its first call goes without the fleet's units.
    let early = pacer.acquire(request()).await.unwrap();
    // Another replica's answer opens the window; the next call leases a unit of it, and
    // the fleet says 5 are left.
    pacer.window_opened("up", 0);
    let counted = pacer.acquire(request()).await.unwrap();
    // The first call's answer says 8 left (7 with the other call in flight): more than the
    // fleet counts, and news all the same, since the fleet never counted this call.
    pacer.observe_answer("up", &credential, early.dispatch, &stated(8));
    let told = fleet.reports.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    let told = told[0].stated[0].expect("the requests window");
    assert_eq!((told.remaining, told.uncounted), (7.0, 1.0), "{told:?}");
    // The counted call's answer, no lower than what the fleet counts, is not news.
    pacer.observe_answer("up", &credential, counted.dispatch, &stated(7));
    assert_eq!(fleet.reports.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn three_replicas_leasing_from_one_bucket_stay_within_its_bound_and_alone_they_do_not() {
    let (rpm, replicas) = (300, 3);
    let fleet = model(f64::from(rpm), replicas);
    let pacers: Vec<_> = (0..replicas)
        .map(|_| LimitPacer::shared(limits(rpm), fleet.clone() as Arc<dyn FleetPacing>))
        .collect();
    let sent = fan_out(&pacers, 10).await;
    // 5 a second with a burst of 5; slices of 3 (1% of 300): at most 3 of them outstanding.
    let (burst, per_sec, slice) = (5.0, 5.0, slice_size(f64::from(rpm), replicas));
    for window in [1, 2, 5] {
        let most = most_within(&sent, Duration::from_secs(window)) as f64;
        let bound = burst + per_sec * window as f64 + replicas as f64 * slice;
        assert!(most <= bound, "{most} within {window}s, bound {bound}");
    }
    let total = sent.len() as f64;
    assert!(total <= burst + per_sec * 10.0 + 1.0, "{total} over 10 s: never more than the bucket gave");
    assert!(total >= per_sec * 10.0 - 2.0 * replicas as f64 * slice, "{total}: the allowance is used");

    // The control: each replica pacing alone at the account's 300 a minute sends three times it.
    let alone: Vec<_> = (0..replicas).map(|_| Arc::new(LimitPacer::new(limits(rpm)))).collect();
    let sent = fan_out(&alone, 10).await;
    assert!(sent.len() as f64 > 2.5 * per_sec * 10.0, "{} alone", sent.len());
}

#[tokio::test(start_paused = true)]
async fn out_of_the_fleets_reach_each_replica_paces_at_its_share() {
    let (rpm, replicas) = (600, 3);
    let fleet = model(f64::from(rpm), replicas);
    let pacers: Vec<_> = (0..replicas)
        .map(|_| LimitPacer::shared(limits(rpm), fleet.clone() as Arc<dyn FleetPacing>))
        .collect();
    fleet.up.store(false, std::sync::atomic::Ordering::Relaxed);
    let sent = fan_out(&pacers, 6).await;
    // 10 a second shared by 3: each a burst of 3.33 and 3.33 a second.
    let bound = 10.0 + 10.0 * 6.0 + f64::from(replicas as u32);
    assert!((sent.len() as f64) <= bound, "{} sent, bound {bound}", sent.len());
    assert!(
        (sent.len() as f64) >= 10.0 * 6.0 - 3.0,
        "{} sent: the shares add up to the allowance",
        sent.len()
    );
    let snapshot = pacers[0].snapshot();
    let fleet = snapshot[0].fleet.as_ref().unwrap();
    assert_eq!((fleet.mode, fleet.replicas), ("degraded", 3));
}

#[tokio::test(start_paused = true)]
async fn what_a_replica_did_not_spend_goes_back_when_it_surrenders() {
    let fleet = model(6_000.0, 1);
    let pacer = LimitPacer::shared(limits(6_000), fleet.clone() as Arc<dyn FleetPacing>);
    let credential = CredentialId::derive("openai", "http://up", None);
    let request = PaceRequest {
        provider: "up",
        credential_id: &credential,
        estimated_tokens: 0,
        deadline: None,
        spill_after: None,
    };
    drop(pacer.acquire(request).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1)).await;
    let lease = pacer.snapshot()[0].fleet.as_ref().unwrap().lease.requests.unwrap();
    let before = fleet.state.lock().unwrap().0;
    assert!(lease >= 59.0, "a slice of 60 (1% of 6000), one spent: {lease}");
    pacer.surrender();
    assert_eq!(pacer.snapshot()[0].fleet.as_ref().unwrap().lease.requests, Some(0.0));
    let after = fleet.state.lock().unwrap().0;
    assert!(after - before >= lease - 1e-9, "{before} → {after}: the {lease} unspent went back");
}
