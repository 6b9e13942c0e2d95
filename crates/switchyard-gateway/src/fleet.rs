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
    /// Records not written: the queue was full, or Redis refused or did not answer.
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
/// dropped. Each batch is one script call, which also tells the fleet's event stream.
async fn write(
    shared: Arc<SharedTrails>,
    mut inbox: mpsc::Receiver<Arc<RequestRecord>>,
    lost: Arc<AtomicU64>,
) {
    let mut records = Vec::with_capacity(BATCH);
    while inbox.recv_many(&mut records, BATCH).await > 0 {
        tokio::time::sleep(GATHER).await;
        while records.len() < BATCH
            && let Ok(record) = inbox.try_recv()
        {
            records.push(record);
        }
        let batch: Vec<TrailEntry> = records.drain(..).filter_map(|record| entry(&record)).collect();
        if let Err(error) = shared.put(&batch).await {
            lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
            tracing::debug!(target: "switchyard::shared_state", %error, "trails not written");
        }
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

/// A record as the fleet keeps it: the whole of it, and its line in the list.
fn entry(record: &RequestRecord) -> Option<TrailEntry> {
    let at_ms = record.at.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    Some(TrailEntry {
        id: record.id.clone(),
        at_ms,
        record: serde_json::to_vec(record).ok()?,
        line: serde_json::to_vec(&record.summary()).ok()?,
    })
}
