//! The background task between this replica's memory and Redis.
//!
//! One task, so that every change to the shared bookkeeping happens in one order: it writes
//! the board's changes (each one script, in the order they happened), applies the changes
//! other replicas publish, and once a second renews the heartbeat and reconciles every record.
//! Every call to Redis is bounded by the configured timeout; after `failures_to_degrade` calls
//! in a row fail, the link is *degraded*: it stops calling Redis except for one probe per
//! reconciliation period (a breaker around Redis itself), keeps what the board learns in its
//! outbox, and when a probe answers it reconnects, resubscribes, writes the outbox back and
//! resyncs.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubStream};
use switchyard::events::EventKind;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::pace::{self, PaceOp};
use crate::scripts::Scripts;
use switchyard::health::{HealthStatus, HealthStore, Subject};

use crate::wire::{self, Change, Key};
use crate::{Op, Replica, Shared, SharedStateStatus, StateSettings, scrub};

/// How long a shared record outlives its last deadline (or its last write).
const RECORD_FLOOR_MS: u64 = 3_600_000;

/// At most this many changes wait for Redis; beyond it the oldest are dropped, with a warning.
const OUTBOX_BOUND: usize = 10_000;

/// The status before the first reconciliation.
pub(crate) fn initial_status(settings: &StateSettings) -> SharedStateStatus {
    SharedStateStatus {
        backend: "redis",
        status: "degraded",
        url: crate::mask_url(&settings.url),
        prefix: settings.prefix.clone(),
        replica: settings.replica.clone(),
        replicas: Vec::new(),
        reason: Some("not connected yet".to_owned()),
        pending_writes: 0,
    }
}

/// A change as a script publishes it (and answers its writer).
#[derive(Debug, serde::Deserialize)]
struct Message {
    op: String,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(rename = "gen")]
    generation: f64,
    now: f64,
    #[serde(default)]
    by: String,
    #[serde(default)]
    rec: HashMap<String, String>,
}

/// What the periodic round trip reads.
#[derive(Debug, serde::Deserialize)]
struct Snapshot {
    now: f64,
    replicas: Vec<Replica>,
    /// The fleet's write counter when read.
    #[serde(default)]
    seq: f64,
    /// The counter still read what the replica said it had applied: no records sent.
    #[serde(default)]
    unchanged: bool,
    /// The name of this Redis's copy of the records.
    #[serde(default)]
    epoch: String,
    #[serde(default)]
    recs: HashMap<String, HashMap<String, String>>,
    /// Another run holds this replica's name (this one was paused past its heartbeat).
    #[serde(default)]
    taken: Option<Replica>,
}

/// What woke the task.
enum Wake {
    Op(Option<Op>),
    Pace(Option<PaceOp>),
    Message(Option<redis::Msg>),
    Tick,
}

pub(crate) struct Link {
    shared: Arc<Shared>,
    client: redis::Client,
    inbox: mpsc::UnboundedReceiver<Op>,
    pace: mpsc::UnboundedReceiver<PaceOp>,
    outbox: VecDeque<Op>,
    scripts: Arc<Scripts>,
    conn: Option<ConnectionManager>,
    messages: Option<PubSubStream>,
    /// Whether Redis answers; `None` before the first attempt.
    up: Option<bool>,
    failures: u32,
    reason: Option<String>,
    replicas: Vec<Replica>,
    /// The generation of this replica's last write of each record: a clear queued after it
    /// recovered from that write.
    own: HashMap<Key, u64>,
    /// The highest generation applied here; the periodic round trip skips the records when
    /// the fleet's counter still reads it (nothing was missed).
    highest: u64,
    /// Whether the next round trip must read every record (after (re)subscribing).
    full_resync: bool,
    /// Another run holds this replica's name: said once when it starts, and when it ends.
    name_taken: bool,
    /// `"by":"<this replica>"`, as this replica's published changes carry it.
    own_mark: String,
    /// The epoch of the records last read.
    epoch: Option<String>,
    warned_overflow: bool,
}

impl Link {
    pub(crate) fn new(
        shared: Arc<Shared>,
        client: redis::Client,
        inbox: mpsc::UnboundedReceiver<Op>,
        pace: mpsc::UnboundedReceiver<PaceOp>,
    ) -> Self {
        let own_mark = serde_json::json!({ "by": shared.settings.replica }).to_string();
        let own_mark = own_mark.trim_start_matches('{').trim_end_matches('}').to_owned();
        Self {
            shared,
            client,
            inbox,
            pace,
            outbox: VecDeque::new(),
            scripts: Arc::new(Scripts::new()),
            conn: None,
            messages: None,
            up: None,
            failures: 0,
            reason: None,
            replicas: Vec::new(),
            own: HashMap::new(),
            highest: 0,
            full_resync: true,
            name_taken: false,
            own_mark,
            epoch: None,
            warned_overflow: false,
        }
    }

    fn settings(&self) -> &StateSettings {
        &self.shared.settings
    }

    pub(crate) async fn run(mut self) {
        self.restore().await;
        let mut tick = tokio::time::interval(self.settings().reconcile_every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.reset();
        loop {
            let wake = tokio::select! {
                op = self.inbox.recv() => Wake::Op(op),
                op = self.pace.recv() => Wake::Pace(op),
                message = next_message(&mut self.messages) => Wake::Message(message),
                _ = tick.tick() => Wake::Tick,
            };
            match wake {
                Wake::Op(None) | Wake::Pace(None) => break,
                Wake::Pace(Some(PaceOp::Close { done })) => {
                    // Whatever the board learned goes first (what is still on its way too);
                    // nothing is called after this, and pacing stops asking.
                    while let Ok(op) = self.inbox.try_recv() {
                        self.queue(op);
                    }
                    if self.up == Some(true) {
                        self.flush().await;
                    }
                    self.leave().await;
                    self.up = Some(false);
                    self.shared.fleet.up.store(false, std::sync::atomic::Ordering::Relaxed);
                    let _ = done.send(());
                    return;
                }
                Wake::Pace(Some(op)) => self.pace(op).await,
                Wake::Op(Some(op)) => {
                    self.queue(op);
                    while let Ok(op) = self.inbox.try_recv() {
                        self.queue(op);
                    }
                }
                Wake::Message(Some(message)) => self.on_message(&message),
                Wake::Message(None) => {
                    tracing::warn!(target: "switchyard::shared_state", "subscription to shared state lost: resubscribing and resyncing");
                    self.messages = None;
                    if self.up == Some(true) && self.subscribe().await {
                        self.reconcile().await;
                    }
                }
                Wake::Tick if self.up == Some(true) => {
                    // A subscription that could not be made again is retried every period.
                    if self.messages.is_none() {
                        self.subscribe().await;
                    }
                    self.reconcile().await;
                }
                Wake::Tick => self.restore().await,
            }
            if self.up == Some(true) {
                self.flush().await;
            }
        }
        self.leave().await;
    }

    /// Makes one pacing call. Pacing is never queued for later: a lease the fleet cannot
    /// answer now is answered `None` (the lane paces at its share), and a report or a return
    /// is dropped (the lane keeps what it learned).
    async fn pace(&mut self, op: PaceOp) {
        // A lease its caller stopped waiting for (it waited behind other calls) is not asked:
        // what it would be granted would go unused.
        if let PaceOp::Lease { reply, .. } = &op
            && reply.is_closed()
        {
            return;
        }
        let reply = match self.pace_call(&op).await {
            Some(Ok(reply)) => reply,
            Some(Err(reason)) => {
                tracing::debug!(target: "switchyard::shared_state", %reason, "a pacing call failed");
                return;
            }
            None => return,
        };
        let PaceOp::Lease { lane, ask, reply: answer } = op else { return };
        // Its caller gave up while the call ran: the buckets' grant goes back to the fleet (a
        // header window's share lapses with its window, as a surrendered lane's does).
        if let Err(Some(late)) = answer.send(pace::grant(&reply))
            && late.granted[..2].iter().any(|units| *units > 0.0)
        {
            let units = [late.granted[0], late.granted[1]];
            let back = PaceOp::Return { lane, units, buckets: ask.buckets };
            let _ = self.pace_call(&back).await;
        }
    }

    /// Makes `op`'s script call while Redis is up; `None` when it is not, or `op` is no call.
    async fn pace_call(&mut self, op: &PaceOp) -> Option<Result<String, String>> {
        let (Some(mut conn), true) = (self.conn.clone(), self.up == Some(true)) else {
            return None;
        };
        let scripts = self.scripts.clone();
        let call = op.invocation(&scripts, &self.settings().prefix, &self.settings().replica)?;
        Some(self.bounded(call.invoke_async::<String>(&mut conn)).await)
    }

    /// Reconnects, resubscribes, writes the outbox back and resyncs; up only if all worked.
    async fn restore(&mut self) {
        if self.conn.is_none() {
            let settings = self.settings();
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(settings.timeout))
                .set_connection_timeout(Some(settings.timeout * 2))
                .set_number_of_retries(2);
            let connect = self.client.get_connection_manager_with_config(config);
            match tokio::time::timeout(self.settings().timeout * 4, connect).await {
                Ok(Ok(conn)) => self.conn = Some(conn),
                Ok(Err(error)) => return self.down(&error.to_string()),
                Err(_) => return self.down("connecting timed out"),
            }
        }
        let Some(mut conn) = self.conn.clone() else { return };
        // A write, not a ping: a Redis out of memory or read-only answers a ping, and nothing
        // this replica must share.
        let mut probe = redis::cmd("SET");
        let key = format!("{}:probe:{}", self.settings().prefix, self.settings().replica);
        probe.arg(key).arg(1).arg("PX").arg(PROBE_TTL_MS);
        if let Err(reason) = self.bounded(probe.query_async::<String>(&mut conn)).await {
            // Built afresh next time: a connection refused its password does not recover.
            self.conn = None;
            return self.down(&reason);
        }
        if !self.subscribe().await {
            return;
        }
        let was = self.up;
        self.up = Some(true);
        self.failures = 0;
        self.flush().await;
        self.reconcile().await;
        if self.up == Some(true) {
            self.reason = None;
            match was {
                Some(false) => {
                    tracing::info!(target: "switchyard::shared_state", url = %crate::mask_url(&self.settings().url), "shared state restored: resynced and wrote back what this replica learned");
                    self.shared.publish(EventKind::SharedStateRestored);
                }
                _ => {
                    tracing::info!(target: "switchyard::shared_state", url = %crate::mask_url(&self.settings().url), replica = %self.settings().replica, "shared state connected")
                }
            }
        }
        self.report();
    }

    /// A fresh subscription to the change channel (an old one may be stalled, not closed).
    async fn subscribe(&mut self) -> bool {
        self.messages = None;
        let channel = format!("{}:changes", self.settings().prefix);
        let client = self.client.clone();
        let subscribe = async move {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub.into_on_message())
        };
        match tokio::time::timeout(self.settings().timeout * 4, subscribe).await {
            Ok(Ok(stream)) => {
                self.messages = Some(stream);
                // Whatever was published before this subscription is read by a full resync.
                self.full_resync = true;
                true
            }
            Ok(Err(error)) => {
                self.failed(&error.to_string());
                false
            }
            Err(_) => {
                self.failed("subscribing timed out");
                false
            }
        }
    }

    /// Runs one call to Redis within the timeout, counting its failure towards degrading when
    /// it is Redis's absence (not an error Redis answered with).
    /// Fails with the reason, with no password in it.
    async fn bounded<T>(&mut self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, String> {
        match tokio::time::timeout(self.settings().timeout, call).await {
            Ok(Ok(value)) => {
                self.failures = 0;
                Ok(value)
            }
            Ok(Err(error)) => {
                let reason = scrub(&error.to_string(), &self.settings().url);
                if refusing(&error) {
                    self.down(&reason);
                } else if absent(&error) {
                    self.failed(&reason);
                }
                Err(reason)
            }
            Err(_) => {
                self.failed("timed out");
                Err("timed out".to_owned())
            }
        }
    }

    fn failed(&mut self, reason: &str) {
        self.failures += 1;
        if self.up != Some(true) || self.failures >= self.settings().failures_to_degrade.max(1) {
            self.down(reason);
        }
    }

    /// Stops calling Redis until a probe answers; reports it once per change.
    fn down(&mut self, reason: &str) {
        let reason = scrub(reason, &self.settings().url);
        let was = self.up;
        self.up = Some(false);
        self.messages = None;
        self.reason = Some(reason.clone());
        self.shared.book().release_claims();
        if was != Some(false) {
            tracing::warn!(
                target: "switchyard::shared_state",
                url = %crate::mask_url(&self.settings().url),
                %reason,
                "shared state degraded: carrying on from this replica's memory until Redis answers"
            );
            self.shared.publish(EventKind::SharedStateDegraded { reason });
        }
        self.report();
    }

    /// Adds an op to the outbox, folding it into the ones already waiting.
    fn queue(&mut self, op: Op) {
        match &op {
            Op::ResetAll { .. } => {
                let dropped: Vec<Op> = self.outbox.drain(..).collect();
                for op in dropped {
                    self.dropped(&op);
                }
                if self.up != Some(true) {
                    tracing::warn!(target: "switchyard::shared_state", "health reset applied here; the fleet-wide reset waits until Redis answers");
                }
            }
            Op::Write { key, change: Change::Reset, .. } => {
                let (dropped, kept): (Vec<Op>, Vec<Op>) = self
                    .outbox
                    .drain(..)
                    .partition(|queued| matches!(queued, Op::Write { key: k, .. } if k == key));
                self.outbox = kept.into();
                for op in dropped {
                    self.dropped(&op);
                }
                if self.up != Some(true) {
                    tracing::warn!(target: "switchyard::shared_state", key = %key.name(), "health reset applied here; the fleet-wide reset waits until Redis answers");
                }
            }
            Op::Write { key, change: Change::Put(fields), .. } => {
                let last = self
                    .outbox
                    .iter_mut()
                    .rev()
                    .find(|queued| matches!(queued, Op::Write { key: k, .. } if k == key));
                if let Some(Op::Write { change: Change::Put(queued), .. }) = last {
                    for (name, value) in fields {
                        match queued.iter_mut().find(|(n, _)| n == name) {
                            Some(slot) => slot.1 = value.clone(),
                            None => queued.push((name, value.clone())),
                        }
                    }
                    self.done(&op);
                    return;
                }
            }
            Op::Write { .. } => {}
        }
        self.outbox.push_back(op);
        if self.outbox.len() > OUTBOX_BOUND
            && let Some(oldest) = self.outbox.pop_front()
        {
            if !self.warned_overflow {
                tracing::warn!(target: "switchyard::shared_state", bound = OUTBOX_BOUND, "shared state outbox full: dropping the oldest changes");
                self.warned_overflow = true;
            }
            self.dropped(&oldest);
        }
    }

    /// Bookkeeping for an op dropped unwritten: a probe waiting on its record is told from
    /// what this replica knows.
    fn dropped(&self, op: &Op) {
        if self.done(op)
            && let Op::Write { key, .. } = op
        {
            self.shared.book().settle_claims(&self.shared.memory, key);
        }
    }

    /// Whether no other write of `op`'s record waits (its answer is the record to apply).
    fn is_last(&self, op: &Op) -> bool {
        let Op::Write { key, .. } = op else { return true };
        self.shared.book().pending.get(key).is_none_or(|count| *count <= 1)
    }

    /// Bookkeeping for an op that left the outbox; returns whether no other write of its
    /// record is still waiting.
    fn done(&self, op: &Op) -> bool {
        let Op::Write { key, .. } = op else { return true };
        let mut book = self.shared.book();
        match book.pending.get_mut(key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            _ => {
                book.pending.remove(key);
                true
            }
        }
    }

    /// Writes the outbox in order, stopping at the first call that fails for want of Redis.
    /// Up to [`BATCH`] writes go at once on the one connection (Redis runs them in the order
    /// sent), so a burst of changes costs a few round trips, not one each.
    async fn flush(&mut self) {
        while self.up == Some(true) && !self.outbox.is_empty() {
            let Some(conn) = self.conn.clone() else { return };
            let count = batch_len(&self.outbox);
            let scripts = self.scripts.clone();
            let calls: Vec<redis::ScriptInvocation<'_>> = self
                .outbox
                .iter()
                .take(count)
                .map(|op| invocation(&scripts, &self.shared, &self.own, op))
                .collect();
            let sent = futures_util::future::join_all(calls.iter().map(|call| {
                let mut conn = conn.clone();
                async move { call.invoke_async::<String>(&mut conn).await }
            }));
            let Ok(replies) = tokio::time::timeout(self.settings().timeout, sent).await else {
                self.failed("timed out");
                return;
            };
            drop(calls);
            for reply in replies {
                let Some(op) = self.outbox.pop_front() else { return };
                match reply {
                    Ok(reply) => {
                        self.failures = 0;
                        // The answer is in memory before the write leaves the bookkeeping: a
                        // probe asking meanwhile waits for it, rather than reading memory as
                        // it was before it.
                        match &op {
                            Op::Write { key, .. } => {
                                self.on_reply(key, &reply, self.is_last(&op));
                                if self.done(&op) {
                                    self.shared.book().settle_claims(&self.shared.memory, key);
                                }
                            }
                            Op::ResetAll { .. } => {
                                self.done(&op);
                                if let Ok(message) = serde_json::from_str::<Message>(&reply) {
                                    self.apply(&message, true);
                                }
                            }
                        }
                    }
                    Err(error) if absent(&error) || refusing(&error) => {
                        // This write and the rest of the batch go again when Redis answers
                        // (the merges make a repeated write harmless).
                        self.outbox.push_front(op);
                        let reason = scrub(&error.to_string(), &self.settings().url);
                        match refusing(&error) {
                            true => self.down(&reason),
                            false => self.failed(&reason),
                        }
                        return;
                    }
                    Err(error) => {
                        // Redis answered with an error: the op itself is at fault, so retrying
                        // it would only repeat the error.
                        let reason = scrub(&error.to_string(), &self.settings().url);
                        tracing::warn!(target: "switchyard::shared_state", %reason, "shared state write refused; dropped");
                        self.dropped(&op);
                        // Changes skipped while it was pending are read back in full.
                        self.full_resync = true;
                    }
                }
            }
        }
    }
}

/// How long the key a reconnecting replica writes to probe Redis lasts, in ms.
const PROBE_TTL_MS: u64 = 60_000;

/// At most this many writes are sent at once.
const BATCH: usize = 64;

/// How many writes from the front of `outbox` go in the next batch: up to [`BATCH`], ending
/// before a clear of a record written earlier in the batch (the clear carries the generation
/// that write returns).
fn batch_len(outbox: &VecDeque<Op>) -> usize {
    let mut written: Vec<&Key> = Vec::new();
    let mut count = 0;
    for op in outbox.iter().take(BATCH) {
        if let Op::Write { key, change, .. } = op {
            if *change == Change::Clear && written.contains(&key) {
                break;
            }
            written.push(key);
        }
        count += 1;
    }
    count.max(1)
}

/// Whether an error says Redis is away (not an error it answered with).
fn absent(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
}

/// Whether Redis answered with a refusal it gives every write now, not one op's own error: out
/// of memory, read-only after a failover, loading, its password changed. Said outright, it
/// degrades the link at once (no count of failures, as for silence), and what was refused is
/// written back once Redis serves again.
fn refusing(error: &redis::RedisError) -> bool {
    // Not NOPERM: an ACL refuses one command or key, not every write.
    const REFUSALS: [&str; 7] =
        ["OOM", "READONLY", "MASTERDOWN", "LOADING", "NOAUTH", "WRONGPASS", "MISCONF"];
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || error.code().is_some_and(|code| REFUSALS.contains(&code))
}

/// The script call that writes `op`.
fn invocation<'s>(
    scripts: &'s Scripts,
    shared: &Shared,
    own: &HashMap<Key, u64>,
    op: &Op,
) -> redis::ScriptInvocation<'s> {
    let settings = &shared.settings;
    match op {
        Op::Write { key, change: Change::Put(fields), .. } => {
            let mut call = scripts.put.prepare_invoke();
            call.arg(&settings.prefix).arg(key.name()).arg(&settings.replica).arg(RECORD_FLOOR_MS);
            call.arg(if shared.bounded(key) { crate::MOST_RECORDS } else { 0 });
            let now = Instant::now();
            for (name, value) in fields {
                call.arg(*name).arg(value.encode(now));
            }
            call
        }
        Op::Write { key, change: Change::Clear, seen, .. } => {
            let seen = (*seen).max(own.get(key).copied().unwrap_or(0));
            let mut call = scripts.clear.prepare_invoke();
            call.arg(&settings.prefix).arg(key.name()).arg(&settings.replica).arg(seen);
            call
        }
        Op::Write { key, change: Change::Reset, id, .. } => {
            let mut call = scripts.reset.prepare_invoke();
            call.arg(&settings.prefix).arg(&settings.replica).arg(format!("{}-{id}", settings.replica));
            call.arg(key.name());
            call
        }
        Op::ResetAll { id } => {
            let mut call = scripts.reset.prepare_invoke();
            call.arg(&settings.prefix).arg(&settings.replica).arg(format!("{}-{id}", settings.replica));
            call
        }
    }
}

impl Link {
    /// A script's answer to this replica's write: the merged record, applied unless another
    /// write of it is still waiting here.
    fn on_reply(&mut self, key: &Key, reply: &str, last: bool) {
        let Ok(message) = serde_json::from_str::<Message>(reply) else { return };
        // Refused as one record too many (`MOST_RECORDS`): the record is this replica's alone,
        // and no resync may take Redis's missing copy for a forgetting.
        if message.op == "full" {
            self.own.remove(key);
            self.shared.book().seen.remove(key);
            return;
        }
        let generation = message.generation as u64;
        if message.op == "put" && message.by == self.settings().replica {
            self.own.insert(key.clone(), generation);
        }
        // A later write of the record is still waiting: its answer, the newer merge, is the
        // one to apply.
        if last {
            self.apply(&message, true);
        } else {
            self.highest = self.highest.max(generation);
        }
    }

    fn on_message(&mut self, message: &redis::Msg) {
        let Ok(payload) = message.get_payload::<String>() else { return };
        // This replica's own changes come back too; their answers were applied already (the
        // answers of a batch are read before the next message), so they are not even parsed.
        if payload.contains(&self.own_mark) {
            return;
        }
        if payload.contains(r#""op":"pace""#) {
            let sink = self.shared.fleet.sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
            pace::tell(&sink, &payload);
            return;
        }
        match serde_json::from_str::<Message>(&payload) {
            Ok(message) => self.apply(&message, false),
            Err(error) => {
                tracing::debug!(target: "switchyard::shared_state", %error, "ignored a change message")
            }
        }
    }

    /// Applies a published change (or a write's answer) to this replica's memory.
    fn apply(&mut self, message: &Message, reply: bool) {
        let generation = message.generation as u64;
        self.highest = self.highest.max(generation);
        let me = self.settings().replica.as_str();
        let memory = &self.shared.memory;
        match message.op.as_str() {
            "put" | "clear" | "forget" => {
                let Some(key) = message.key.as_deref().and_then(Key::parse) else { return };
                let mut book = self.shared.book();
                let seen = book.seen.get(&key).copied().unwrap_or(0);
                let waiting = book.pending.get(&key).is_some_and(|n| *n > 0);
                if !reply && (generation <= seen || waiting) {
                    return;
                }
                let now = Instant::now();
                if message.op == "put" {
                    book.seen.insert(key.clone(), generation);
                    let shared = wire::Shared {
                        fields: &message.rec,
                        server_now: message.now as i64,
                        local_now: Some(now),
                        me,
                    };
                    edit(&self.shared, &key, Edit::Adopt(&shared));
                } else {
                    book.seen.remove(&key);
                    // A write refused for a reset that ran before it: forgotten, as the reset did.
                    let edit_of = if message.op == "forget" { Edit::Forget } else { Edit::Clear(now) };
                    edit(&self.shared, &key, edit_of);
                }
            }
            "reset" => {
                let mut book = self.shared.book();
                for key in message.keys.iter().filter_map(|name| Key::parse(name)) {
                    // A record written since the reset (a later generation, or a write of
                    // this replica on its way) stays.
                    let newer = book.seen.get(&key).is_some_and(|seen| *seen > generation);
                    if newer || book.pending.contains_key(&key) {
                        continue;
                    }
                    book.seen.remove(&key);
                    edit(&self.shared, &key, Edit::Forget);
                }
            }
            "reset_all" => {
                // Everything not written since is forgotten: where another replica reset, all
                // of it; where this one did (its memory was cleared when asked), what it
                // adopted from the others before Redis ran the reset.
                let mine = message.by == me;
                let (targets, credentials) = memory.all();
                let rests: Vec<Key> = targets
                    .iter()
                    .flat_map(|(target, record)| {
                        record.key_cooldowns.iter().map(|(credential, _)| Key::KeyCooldown {
                            credential: credential.clone(),
                            target: target.clone(),
                        })
                    })
                    .collect();
                let keys = targets
                    .into_iter()
                    .map(|(target, _)| Key::Target(target))
                    .chain(credentials.into_iter().map(|(id, _)| Key::Credential(id)))
                    .chain(rests);
                let mut book = self.shared.book();
                for key in keys {
                    let seen = book.seen.get(&key).copied();
                    let newer = seen.is_some_and(|seen| seen > generation) || book.pending.contains_key(&key);
                    if newer || (mine && seen.is_none()) {
                        continue;
                    }
                    book.seen.remove(&key);
                    edit(&self.shared, &key, Edit::Forget);
                }
            }
            _ => {}
        }
    }

    /// The periodic round trip: heartbeat, membership, and every record resynced.
    async fn reconcile(&mut self) {
        let Some(mut conn) = self.conn.clone() else { return };
        let config_hash = self.shared.config_hash.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let info = self.shared.member.describe(&self.settings().replica, &config_hash);
        let info = serde_json::to_string(&info).unwrap_or_default();
        let scripts = self.scripts.clone();
        let mut call = scripts.sync.prepare_invoke();
        let ttl = crate::members::heartbeat_ttl(self.settings().reconcile_every).as_millis() as u64;
        call.arg(&self.settings().prefix).arg(&self.settings().replica).arg(ttl).arg(info);
        let known = if self.full_resync { -1 } else { self.highest as i64 };
        // A fresh proposal each time: a replica that finds the records gone must not set the
        // epoch it already knows, or it would not notice.
        call.arg(known).arg(proposed_epoch(&self.settings().replica));
        let Ok(reply) = self.bounded(call.invoke_async::<String>(&mut conn)).await else { return };
        let Ok(snapshot) = serde_json::from_str::<Snapshot>(&reply) else {
            tracing::warn!(target: "switchyard::shared_state", "unreadable shared state snapshot");
            return;
        };
        self.replicas = snapshot.replicas;
        match (&snapshot.taken, self.name_taken) {
            (Some(other), false) => tracing::error!(
                target: "switchyard::shared_state",
                replica = %self.settings().replica,
                holder_host = %other.host,
                holder_pid = other.pid,
                "another run holds this replica's name (this one was paused past its heartbeat): it no longer heartbeats; restart it, or give it a name of its own"
            ),
            (None, true) => tracing::info!(
                target: "switchyard::shared_state",
                replica = %self.settings().replica,
                "this replica's name is no longer held by another run"
            ),
            _ => {}
        }
        self.name_taken = snapshot.taken.is_some();
        self.report();
        let lost = self.epoch.as_ref().is_some_and(|epoch| *epoch != snapshot.epoch);
        self.epoch = Some(snapshot.epoch.clone());
        if lost {
            tracing::warn!(target: "switchyard::shared_state", "Redis lost the shared records (restarted empty?): writing back what this replica knows");
            self.shared.losses.send_modify(|losses| *losses += 1);
            // Generations restart with the records: what was seen of the old ones means nothing.
            self.own.clear();
            self.shared.book().seen.clear();
            self.refill();
        }
        if !snapshot.unchanged {
            self.resync(&snapshot.recs, snapshot.now as i64);
            self.highest = snapshot.seq as u64;
            self.full_resync = false;
        }
    }

    /// Queues every record this replica knows of that gates anything, for a Redis that lost
    /// them: merged like any write, so the fleet ends with the longest of what each knew.
    fn refill(&mut self) {
        let (targets, credentials) = self.shared.memory.all();
        let rests: Vec<(Key, Change)> = targets
            .iter()
            .flat_map(|(target, record)| wire::key_cooldown_changes(target, &Default::default(), record))
            .collect();
        let targets = targets.into_iter().filter_map(|(target, record)| {
            let change = wire::target_change(&Default::default(), &record)?;
            Some((Key::Target(target), change))
        });
        let credentials = credentials.into_iter().filter_map(|(id, record)| {
            let change = wire::credential_change(&Default::default(), &record)?;
            Some((Key::Credential(id), change))
        });
        // Marked as written back (`wb`): a reset that ran on the emptied Redis before them
        // holds against what they bring back, a key's rest included, which carries no start.
        let writes: Vec<(Key, Change)> = targets
            .chain(credentials)
            .chain(rests)
            .filter_map(|(key, change)| match change {
                Change::Put(mut fields) => {
                    fields.push(("wb", wire::Value::Count(1)));
                    Some((key, Change::Put(fields)))
                }
                _ => None,
            })
            .collect();
        for (key, change) in writes {
            *self.shared.book().pending.entry(key.clone()).or_default() += 1;
            let id = self.shared.op_id();
            self.queue(Op::Write { key, change, seen: 0, id });
        }
    }

    /// Makes this replica's memory match the shared records, except records with a write of
    /// its own still waiting.
    fn resync(&self, records: &HashMap<String, HashMap<String, String>>, server_now: i64) {
        let now = Instant::now();
        let me = self.settings().replica.as_str();
        let mut book = self.shared.book();
        let mut present = std::collections::HashSet::with_capacity(records.len());
        for (name, fields) in records {
            let Some(key) = Key::parse(name) else { continue };
            present.insert(key.clone());
            if book.pending.contains_key(&key) {
                continue;
            }
            let shared = wire::Shared { fields, server_now, local_now: Some(now), me };
            let generation = shared.generation();
            if book.seen.get(&key) != Some(&generation) {
                book.seen.insert(key.clone(), generation);
                edit(&self.shared, &key, Edit::Adopt(&shared));
            }
        }
        let gone: Vec<Key> = book
            .seen
            .keys()
            .filter(|key| !present.contains(*key) && !book.pending.contains_key(*key))
            .cloned()
            .collect();
        for key in gone {
            book.seen.remove(&key);
            edit(&self.shared, &key, Edit::Forget);
        }
    }

    /// Publishes the status for `/admin/health`.
    fn report(&self) {
        let status = SharedStateStatus {
            status: if self.up == Some(true) { "ok" } else { "degraded" },
            replicas: self.replicas.clone(),
            reason: if self.up == Some(true) { None } else { self.reason.clone() },
            ..initial_status(self.settings())
        };
        let fleet = &self.shared.fleet;
        fleet.up.store(self.up == Some(true), std::sync::atomic::Ordering::Relaxed);
        if !self.replicas.is_empty() {
            fleet.replicas.store(self.replicas.len(), std::sync::atomic::Ordering::Relaxed);
        }
        self.shared.book().status = status;
    }

    /// At shutdown: writes what it can and leaves the membership.
    async fn leave(&mut self) {
        if self.up != Some(true) {
            return;
        }
        self.flush().await;
        let Some(mut conn) = self.conn.clone() else { return };
        let scripts = self.scripts.clone();
        let mut call = scripts.leave.prepare_invoke();
        call.arg(&self.settings().prefix).arg(&self.settings().replica).arg(&self.shared.member.instance);
        let _ = self.bounded(call.invoke_async::<i64>(&mut conn)).await;
    }
}

/// What another replica's change does to a record here.
enum Edit<'a> {
    /// Take the shared record's fields.
    Adopt(&'a wire::Shared<'a>),
    /// It recovered (a success elsewhere), at this instant.
    Clear(Instant),
    /// It was forgotten (a reset, or gone from Redis).
    Forget,
}

/// Applies another replica's change to the record of `key` in this replica's memory, and
/// publishes the status change it makes (`health_changed`, as the board announces its own),
/// so that this replica's events follow the fleet.
fn edit(shared: &Shared, key: &Key, edit: Edit<'_>) {
    let memory = &shared.memory;
    let (subject, change) = match key {
        Key::Target(target) => {
            let mut change = None;
            memory.edit_target(target, |r| {
                let from = r.status;
                match edit {
                    Edit::Adopt(fields) => wire::adopt_target(r, fields),
                    Edit::Clear(now) => wire::clear_target(r, now),
                    Edit::Forget => wire::forget_target(r),
                }
                change = Some((from, r.status, r.reason.to_string()));
            });
            (Subject::Target(target.clone()), change)
        }
        Key::Credential(id) => {
            let mut change = None;
            memory.edit_credential(id, |r| {
                let from = r.status;
                match edit {
                    Edit::Adopt(fields) => wire::adopt_credential(r, fields),
                    Edit::Clear(now) => wire::clear_credential(r, now),
                    Edit::Forget => *r = Default::default(),
                }
                change = Some((from, r.status, r.reason.to_string()));
            });
            (Subject::Credential(id.clone()), change)
        }
        // A key's rest for one model changes no status: nothing to announce.
        Key::KeyCooldown { credential, target } => {
            memory.edit_target(target, |r| match edit {
                Edit::Adopt(fields) => wire::adopt_key_cooldown(r, credential, fields),
                Edit::Clear(_) | Edit::Forget => wire::drop_key_cooldown(r, credential),
            });
            return;
        }
    };
    if let Some((from, to, reason)) = change
        && from != to
    {
        let reason = if to == HealthStatus::Unknown { "reset".to_owned() } else { reason };
        shared.publish(EventKind::HealthChanged { subject, from, to, reason });
    }
}

/// An epoch no other replica proposes: this replica's id and the wall clock's nanoseconds
/// (for uniqueness only; no deadline is read from it).
fn proposed_epoch(replica: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{replica}-{nanos:x}")
}

async fn next_message(messages: &mut Option<PubSubStream>) -> Option<redis::Msg> {
    match messages {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// For `switchyard doctor`: whether Redis answers, and the replicas alive on it.
pub(crate) async fn check(settings: &StateSettings) -> Result<Vec<Replica>, String> {
    let masked = crate::mask_url(&settings.url);
    let client =
        redis::Client::open(settings.url.as_str()).map_err(|e| scrub(&e.to_string(), &settings.url))?;
    let work = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let ids: Vec<String> = redis::cmd("SMEMBERS")
            .arg(format!("{}:replicas", settings.prefix))
            .query_async(&mut conn)
            .await?;
        let mut replicas = Vec::new();
        for id in ids {
            let about: Option<String> = redis::cmd("GET")
                .arg(format!("{}:replica:{id}", settings.prefix))
                .query_async(&mut conn)
                .await?;
            if let Some(replica) = about.and_then(|a| serde_json::from_str::<Replica>(&a).ok()) {
                replicas.push(replica);
            }
        }
        Ok::<_, redis::RedisError>(replicas)
    };
    match tokio::time::timeout(settings.timeout * 8, work).await {
        Ok(Ok(replicas)) => Ok(replicas),
        Ok(Err(error)) => Err(format!("{masked}: {}", scrub(&error.to_string(), &settings.url))),
        Err(_) => Err(format!("{masked}: no answer within {:?}", settings.timeout * 8)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(target: &str, change: Change) -> Op {
        Op::Write { key: Key::Target(target.parse().expect("a target")), change, seen: 0, id: 0 }
    }

    #[test]
    fn a_batch_ends_before_a_clear_of_a_record_it_writes() {
        let put = || Change::Put(vec![("st", wire::Value::Text("exhausted".into()))]);
        let outbox: VecDeque<Op> = [
            write("p:a", put()),
            write("p:b", put()),
            write("p:b", Change::Clear),
            write("p:c", Change::Clear),
        ]
        .into();
        assert_eq!(batch_len(&outbox), 2, "the clear of p:b waits for what its write returns");
        let clears: VecDeque<Op> = [write("p:a", Change::Clear), write("p:b", Change::Clear)].into();
        assert_eq!(batch_len(&clears), 2);
        let many: VecDeque<Op> = (0..100).map(|i| write(&format!("p:m{i}"), put())).collect();
        assert_eq!(batch_len(&many), BATCH);
        assert_eq!(batch_len(&[Op::ResetAll { id: 1 }].into()), 1);
    }
}
