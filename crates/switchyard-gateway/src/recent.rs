//! The trails of recent requests, for `GET /admin/requests/{id}`.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::Value;

/// A bounded ring of recent requests' records, oldest dropped first.
#[derive(Debug)]
pub struct Recent {
    capacity: usize,
    entries: Mutex<VecDeque<(String, Value)>>,
}

impl Recent {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))) }
    }

    /// Keeps `record` under `id`, dropping the oldest when full.
    pub fn insert(&self, id: String, record: Value) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() == self.capacity {
            entries.pop_front();
        }
        entries.push_back((id, record));
    }

    /// The record of request `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Value> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().rev().find(|(key, _)| key == id).map(|(_, record)| record.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_record_leaves_first() {
        let recent = Recent::new(2);
        for id in ["a", "b", "c"] {
            recent.insert(id.to_owned(), Value::from(id));
        }
        assert_eq!(recent.get("a"), None);
        assert_eq!(recent.get("c"), Some(Value::from("c")));
    }
}
