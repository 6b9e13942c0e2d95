//! The trails of recent requests, for `GET /admin/requests/{id}`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use switchyard::trail::{Trail, Via};

/// What is kept of one request: enough to answer "which model answered, and why was it slow".
/// Kept as values and rendered only when asked for, so recording costs the hot path little.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub id: String,
    pub endpoint: &'static str,
    pub route: Arc<str>,
    pub served_by: Option<Via>,
    pub status: u16,
    pub duration: Duration,
    pub queued: Duration,
    pub first_token: Option<Duration>,
    pub trail: Trail,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl Serialize for RequestRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("request_id", &self.id)?;
        map.serialize_entry("endpoint", self.endpoint)?;
        map.serialize_entry("route", &*self.route)?;
        map.serialize_entry("served_by", &self.served_by.as_ref().map(ToString::to_string))?;
        map.serialize_entry("status", &self.status)?;
        map.serialize_entry("duration_ms", &ms(self.duration))?;
        map.serialize_entry("queued_ms", &ms(self.queued))?;
        map.serialize_entry("first_token_ms", &self.first_token.map(ms))?;
        map.serialize_entry("attempts", &self.trail)?;
        map.end()
    }
}

/// A bounded ring of recent requests' records, oldest dropped first.
#[derive(Debug)]
pub struct Recent {
    capacity: usize,
    entries: Mutex<VecDeque<RequestRecord>>,
}

impl Recent {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))) }
    }

    /// Keeps `record`, dropping the oldest when full.
    pub fn insert(&self, record: RequestRecord) {
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

    /// The record of request `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<RequestRecord> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().rev().find(|record| record.id == id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> RequestRecord {
        RequestRecord {
            id: id.to_owned(),
            endpoint: "chat_completions",
            route: "default".into(),
            served_by: None,
            status: 200,
            duration: Duration::ZERO,
            queued: Duration::ZERO,
            first_token: None,
            trail: Trail::default(),
        }
    }

    #[test]
    fn the_oldest_record_leaves_first() {
        let recent = Recent::new(2);
        for id in ["a", "b", "c"] {
            recent.insert(record(id));
        }
        assert!(recent.get("a").is_none());
        assert_eq!(recent.get("c").map(|r| r.id), Some("c".to_owned()));
    }
}
