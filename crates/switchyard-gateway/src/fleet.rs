//! What this replica tells the fleet for its operators, through Redis: each finished request's
//! record ([`SharedTrails`]), so that `/admin/requests` on any replica finds a request another
//! served, and its events with its finished requests ([`SharedEvents`]), so that
//! `/admin/events?scope=fleet` follows every replica. Background tasks write both: the request
//! path only queues an `Arc` (dropped, and counted, when the queue is full: trails are for
//! operators, never worth a request's time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use switchyard::events::Subscription;
use switchyard_state::RedisStore;
use switchyard_state::feed::SharedEvents;
use switchyard_state::trails::{SharedTrails, TrailEntry};
use tokio::sync::mpsc;

use crate::recent::RequestRecord;

/// Records waiting for the writer at most; more are dropped.
const QUEUE: usize = 4096;
/// Records written in one script call at most.
const BATCH: usize = 512;
/// How long the writer gathers records after the first of a batch: one round trip to Redis
/// for all of them, rather than one per request (a trail appears this much later).
const GATHER: Duration = Duration::from_millis(50);

/// How long the fleet keeps a trail.
pub(crate) const TRAIL_TTL: Duration = Duration::from_secs(3600);

/// This replica's side of the fleet's trails.
pub(crate) struct FleetTrails {
    shared: Arc<SharedTrails>,
    events: Arc<SharedEvents>,
    queue: mpsc::Sender<Arc<RequestRecord>>,
    /// Records not written: the queue was full, or Redis was away for longer than the
    /// backlog holds.
    pub(crate) lost: Arc<AtomicU64>,
}

impl std::fmt::Debug for FleetTrails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetTrails").field("shared", &self.shared).finish_non_exhaustive()
    }
}

impl FleetTrails {
    /// Starts the writer on the current runtime: this replica's newest `kept` trails, each for
    /// `ttl` at most.
    /// `ttl` at most; and the router's events (of `events`) with them.
    pub(crate) fn start(store: &RedisStore, kept: usize, ttl: Duration, events: Subscription) -> Self {
        let shared = Arc::new(SharedTrails::new(store, kept, ttl));
        let stream = Arc::new(SharedEvents::new(store));
        let (queue, inbox) = mpsc::channel(QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        tokio::spawn(write(shared.clone(), inbox, lost.clone()));
        tokio::spawn(tell(stream.clone(), events, store.replica().to_owned()));
        Self { shared, events: stream, queue, lost }
    }

    /// Queues `record` for the fleet; never waits.
    pub(crate) fn publish(&self, record: Arc<RequestRecord>) {
        if self.queue.try_send(record).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The fleet's store of trails, for reading.
    pub(crate) fn shared(&self) -> &SharedTrails {
        &self.shared
    }

    /// The fleet's event stream, for reading.
    pub(crate) fn events(&self) -> &SharedEvents {
        &self.events
    }
}

/// The writer: what is queued, in batches gathered for [`GATHER`], until the sender is
/// dropped. Each batch is one script call, which also tells the fleet's event stream. What
/// Redis did not take waits in a backlog ([`Backlog`]) and goes again, first, once Redis
/// answers: what was served while Redis was away is not missing from the fleet's history.
async fn write(
    shared: Arc<SharedTrails>,
    mut inbox: mpsc::Receiver<Arc<RequestRecord>>,
    lost: Arc<AtomicU64>,
) {
    let mut records = Vec::with_capacity(BATCH);
    let mut backlog = Backlog::default();
    loop {
        let received = match backlog.retry_at {
            Some(at) => tokio::select! {
                received = inbox.recv_many(&mut records, BATCH) => received,
                () = tokio::time::sleep_until(at) => 1,
            },
            None => inbox.recv_many(&mut records, BATCH).await,
        };
        if received == 0 {
            return;
        }
        tokio::time::sleep(GATHER).await;
        while records.len() < BATCH
            && let Ok(record) = inbox.try_recv()
        {
            records.push(record);
        }
        backlog.add(records.drain(..).filter_map(|record| entry(&record)), &lost);
        if backlog.retry_at.is_some_and(|at| tokio::time::Instant::now() < at) {
            continue;
        }
        backlog.send(&shared).await;
    }
}

/// Records Redis has not taken yet, oldest first, up to [`QUEUE`] (the oldest beyond are
/// dropped, and counted lost), and when to send them again after a failure (1 s, doubling
/// to 30 s).
#[derive(Default)]
struct Backlog {
    entries: std::collections::VecDeque<TrailEntry>,
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
}

impl Backlog {
    fn add(&mut self, entries: impl Iterator<Item = TrailEntry>, lost: &AtomicU64) {
        self.entries.extend(entries);
        let over = self.entries.len().saturating_sub(QUEUE);
        if over > 0 {
            self.entries.drain(..over);
            lost.fetch_add(over as u64, Ordering::Relaxed);
        }
    }

    /// Sends what waits, a batch at a time, until Redis fails; then waits to send it again.
    async fn send(&mut self, shared: &SharedTrails) {
        while !self.entries.is_empty() {
            let sent = self.entries.len().min(BATCH);
            if let Err(error) = shared.put(&self.entries.make_contiguous()[..sent]).await {
                tracing::debug!(target: "switchyard::shared_state", %error, "trails not written yet");
                self.backoff = (self.backoff * 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
                self.retry_at = Some(tokio::time::Instant::now() + self.backoff);
                return;
            }
            self.entries.drain(..sent);
        }
        self.retry_at = None;
        self.backoff = Duration::ZERO;
    }
}

/// Tells the fleet this replica's router events, each naming the replica, until the bus ends.
async fn tell(stream: Arc<SharedEvents>, mut events: Subscription, replica: String) {
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH
            && let Some(next) = events.try_recv()
        {
            batch.push(next);
        }
        let told: Vec<(&'static str, String)> = batch
            .iter()
            .filter_map(|event| {
                let mut json = serde_json::to_value(&**event).ok()?;
                json["replica"] = replica.as_str().into();
                Some((event.kind.name(), json.to_string()))
            })
            .collect();
        let told: Vec<(&str, &str)> = told.iter().map(|(name, json)| (*name, json.as_str())).collect();
        if let Err(error) = stream.add(&told).await {
            tracing::debug!(target: "switchyard::shared_state", %error, "events not told to the fleet");
        }
    }
}

/// The name the fleet keeps request `id` of the client key `label` under: the id and the
/// label, so that a client naming its request (`x-request-id`) as another key's was named does
/// not write over that key's trail (an id a client sends holds no `@`).
pub(crate) fn trail_name(id: &str, label: Option<&str>) -> String {
    match label {
        Some(label) => format!("{id}@{label}"),
        None => id.to_owned(),
    }
}

/// A record as the fleet keeps it: the whole of it, and its line in the list.
fn entry(record: &RequestRecord) -> Option<TrailEntry> {
    let at_ms = record.at.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    Some(TrailEntry {
        id: trail_name(&record.id, record.key.as_deref()),
        at_ms,
        record: serde_json::to_vec(record).ok()?,
        line: serde_json::to_vec(&record.summary()).ok()?,
    })
}
