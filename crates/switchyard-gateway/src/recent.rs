//! The trails of recent requests, for `GET /admin/requests/{id}`, and their list, for
//! `GET /admin/requests` and the operator page.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use switchyard::trail::{Trail, Via};

/// What is kept of one request: enough to answer "which model answered, and why was it slow".
/// Kept as values and rendered only when asked for, so recording costs the hot path little.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub id: String,
    /// The replica that served it.
    pub replica: Arc<str>,
    /// When the request arrived.
    pub at: SystemTime,
    pub endpoint: &'static str,
    pub route: Arc<str>,
    pub served_by: Option<Via>,
    pub status: u16,
    pub duration: Duration,
    pub queued: Duration,
    pub first_token: Option<Duration>,
    pub trail: Trail,
    /// The label of the client key it came with (its name, never the key).
    pub key: Option<Arc<str>>,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Serialize for RequestRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("request_id", &self.id)?;
        map.serialize_entry("replica", &*self.replica)?;
        map.serialize_entry("time", &crate::logging::rfc3339(self.at))?;
        map.serialize_entry("endpoint", self.endpoint)?;
        map.serialize_entry("route", &*self.route)?;
        map.serialize_entry("key", &self.key.as_deref())?;
        map.serialize_entry("served_by", &self.served_by.as_ref().map(ToString::to_string))?;
        map.serialize_entry("fallback", &self.fell_back())?;
        map.serialize_entry("status", &self.status)?;
        map.serialize_entry("stream_error", &self.stream_error())?;
        map.serialize_entry("duration_ms", &ms(self.duration))?;
        map.serialize_entry("queued_ms", &ms(self.queued))?;
        map.serialize_entry("first_token_ms", &self.first_token.map(ms))?;
        map.serialize_entry("attempts", &self.trail)?;
        map.end()
    }
}

impl RequestRecord {
    /// Whether the request fell back: served by anything but its chain's first target
    /// ([`Trail::fell_back_to`], the one definition).
    pub fn fell_back(&self) -> bool {
        self.trail.fell_back_to(self.served_by.as_ref())
    }

    /// For a stream that broke after its first content reached the client (its status is
    /// the 200 already sent): the kind of the failure the client was told of, the last break.
    /// A break another target continued to the end is none.
    pub fn stream_error(&self) -> Option<switchyard::ErrorKind> {
        let attempts = self.trail.attempts();
        if attempts.iter().any(|a| a.outcome == switchyard::trail::Outcome::Continued) {
            return None;
        }
        attempts.iter().rev().find(|a| a.mid_stream).and_then(|a| a.error_kind())
    }

    /// The request as a line of the history: no trail, only how many attempts it took.
    pub fn summary(&self) -> Summary<'_> {
        Summary(self)
    }
}

/// A request's line in `GET /admin/requests`: id, time, route, target, attempts, whether it
/// fell back, status (and `stream_error`, the kind of failure that broke a stream after its
/// 200), failed targets and latency.
pub struct Summary<'a>(&'a RequestRecord);

impl Serialize for Summary<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let record = self.0;
        let unix = record.at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("request_id", &record.id)?;
        map.serialize_entry("replica", &*record.replica)?;
        map.serialize_entry("time", &crate::logging::rfc3339(record.at))?;
        map.serialize_entry("time_ms", &(unix.as_millis() as u64))?;
        map.serialize_entry("endpoint", record.endpoint)?;
        map.serialize_entry("route", &*record.route)?;
        map.serialize_entry("key", &record.key.as_deref())?;
        map.serialize_entry("served_by", &record.served_by.as_ref().map(ToString::to_string))?;
        map.serialize_entry("status", &record.status)?;
        map.serialize_entry("stream_error", &record.stream_error())?;
        map.serialize_entry("attempts", &record.trail.len())?;
        map.serialize_entry("fallback", &record.fell_back())?;
        let failed: Vec<String> = record
            .trail
            .attempts()
            .iter()
            .filter(|a| a.error.is_some() && !a.outcome.is_skip())
            .map(|a| a.via.to_string())
            .collect();
        map.serialize_entry("failed", &failed)?;
        map.serialize_entry("duration_ms", &ms(record.duration))?;
        map.serialize_entry("first_token_ms", &record.first_token.map(ms))?;
        map.end()
    }
}

/// A bounded ring of recent requests' records, oldest dropped first.
#[derive(Debug)]
pub struct Recent {
    capacity: usize,
    entries: Mutex<VecDeque<Arc<RequestRecord>>>,
}

impl Recent {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))) }
    }

    /// Keeps `record`, dropping the oldest when full.
    pub fn insert(&self, record: Arc<RequestRecord>) {
        if self.capacity == 0 {
            return;
        }
        let evicted = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let evicted = if entries.len() == self.capacity { entries.pop_front() } else { None };
            entries.push_back(record);
            evicted
        };
        // Freed outside the lock.
        drop(evicted);
    }

    /// The `limit` newest records, newest first.
    pub fn latest(&self, limit: usize) -> Vec<Arc<RequestRecord>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().rev().take(limit).cloned().collect()
    }

    /// How many records it keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The record of request `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Arc<RequestRecord>> {
        self.get_where(id, |_| true)
    }

    /// The newest record of request `id` that `admits`, if one is still kept: a client may
    /// name its requests (`x-request-id`), and two clients may pick one name.
    pub fn get_where(&self, id: &str, admits: impl Fn(&RequestRecord) -> bool) -> Option<Arc<RequestRecord>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().rev().find(|record| record.id == id && admits(record)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> RequestRecord {
        RequestRecord {
            id: id.to_owned(),
            replica: "a".into(),
            at: SystemTime::UNIX_EPOCH,
            endpoint: "chat_completions",
            route: "default".into(),
            served_by: None,
            status: 200,
            duration: Duration::ZERO,
            queued: Duration::ZERO,
            first_token: None,
            trail: Trail::default(),
            key: None,
        }
    }

    #[test]
    fn the_oldest_record_leaves_first() {
        let recent = Recent::new(2);
        for id in ["a", "b", "c"] {
            recent.insert(Arc::new(record(id)));
        }
        assert!(recent.get("a").is_none());
        assert_eq!(recent.get("c").map(|r| r.id.clone()), Some("c".to_owned()));
        let latest: Vec<String> = recent.latest(5).into_iter().map(|r| r.id.clone()).collect();
        assert_eq!(latest, ["c", "b"], "newest first, only what is kept");
        assert_eq!(recent.latest(1).len(), 1);
    }
}
