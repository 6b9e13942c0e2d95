//! A map held to a count, an age and a byte bound, oldest entries going first: what the
//! `cache` candidate's answers and the gateway's kept Responses conversations are stored in.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use tokio::time::Instant;

/// The bounds of a [`Bounded`] map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Entries at most.
    pub max_entries: usize,
    /// How long an entry is kept.
    pub max_age: Duration,
    /// The entries' bytes (as their owner counts them) at most.
    pub max_bytes: usize,
}

/// A bounded map. Not synchronised: its owner holds it behind a lock.
#[derive(Debug)]
pub struct Bounded<K, V, S = RandomState> {
    bounds: Bounds,
    map: HashMap<K, Slot<V>, S>,
    /// Keys oldest first, with when each was written: a key written again is here twice, and
    /// only the place matching its entry's time counts.
    order: VecDeque<(K, Instant)>,
    bytes: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    at: Instant,
    bytes: usize,
}

impl<K: Hash + Eq + Clone, V, S: BuildHasher + Default> Bounded<K, V, S> {
    /// An empty map held to `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        Self { bounds, map: HashMap::default(), order: VecDeque::new(), bytes: 0 }
    }

    /// Keeps `value` (counted as `bytes`) under `key` as of `now`, replacing what was there and
    /// dropping the oldest entries until the bounds hold; `false` (and nothing kept) when it is
    /// larger than the byte bound alone.
    pub fn insert(&mut self, key: K, value: V, bytes: usize, now: Instant) -> bool {
        if bytes > self.bounds.max_bytes {
            return false;
        }
        self.expire(now);
        if let Some(old) = self.map.remove(&key) {
            self.bytes -= old.bytes;
        }
        while self.map.len() >= self.bounds.max_entries || self.bytes + bytes > self.bounds.max_bytes {
            if !self.drop_oldest() {
                break;
            }
        }
        self.bytes += bytes;
        self.order.push_back((key.clone(), now));
        self.map.insert(key, Slot { value, at: now, bytes });
        self.compact();
        true
    }

    /// The entry under `key` and its age, when it is no older than the age bound.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<(&V, Duration)> {
        self.expire(now);
        let max_age = self.bounds.max_age;
        let slot = self.map.get(key).filter(|slot| now.duration_since(slot.at) <= max_age)?;
        Some((&slot.value, now.duration_since(slot.at)))
    }

    /// The entry under `key`, to change in place (its age and place stay).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key).map(|slot| &mut slot.value)
    }

    /// Takes the entry under `key` out.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.map.remove(key)?;
        self.bytes -= slot.bytes;
        Some(slot.value)
    }

    /// How many entries are kept, and their bytes, as of `now`.
    pub fn usage(&mut self, now: Instant) -> (usize, usize) {
        self.expire(now);
        (self.map.len(), self.bytes)
    }

    /// Drops what is older than the age bound.
    fn expire(&mut self, now: Instant) {
        while let Some((_, at)) = self.order.front() {
            if now.duration_since(*at) <= self.bounds.max_age {
                break;
            }
            self.drop_oldest();
        }
    }

    /// Drops the oldest entry (skipping places of keys written again since); `false` when none.
    fn drop_oldest(&mut self) -> bool {
        while let Some((key, at)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|slot| slot.at == at)
                && let Some(slot) = self.map.remove(&key)
            {
                self.bytes -= slot.bytes;
                return true;
            }
        }
        false
    }

    /// Forgets the places of keys written again (or removed) since, once they are half of
    /// all: a key written again and again must not grow the order without bound.
    fn compact(&mut self) {
        if self.order.len() <= 2 * self.map.len() + 64 {
            return;
        }
        // The last place of each key is its own; earlier ones (even at the same instant) go.
        let mut seen = HashSet::with_capacity(self.map.len());
        let mut kept = Vec::with_capacity(self.map.len());
        for (key, at) in self.order.drain(..).rev() {
            if self.map.get(&key).is_some_and(|slot| slot.at == at) && seen.insert(key.clone()) {
                kept.push((key, at));
            }
        }
        self.order = kept.into_iter().rev().collect();
    }

    #[cfg(test)]
    fn places(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max_entries: usize, max_age: u64, max_bytes: usize) -> Bounds {
        Bounds { max_entries, max_age: Duration::from_secs(max_age), max_bytes }
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_go_first_when_the_count_the_bytes_or_the_age_is_reached() {
        let now = Instant::now();
        let mut map: Bounded<&str, u32> = Bounded::new(bounds(2, 60, 25));
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            assert!(map.insert(key, i as u32, 10, now));
        }
        assert!(map.get(&"a", now).is_none(), "three do not fit");
        assert_eq!(map.usage(now), (2, 20));
        assert!(!map.insert("huge", 9, 26, now), "larger than the byte bound alone");
        assert!(map.insert("d", 3, 15, now));
        assert_eq!(map.usage(now), (2, 25), "the count made room: b went");
        assert!(map.insert("e", 4, 20, now));
        assert_eq!(map.usage(now), (1, 20), "the bytes made room: c and d went");
        let later = now + Duration::from_secs(61);
        assert!(map.get(&"e", later).is_none());
        assert_eq!(map.usage(later), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_written_again_is_one_entry_and_its_old_places_neither_evict_nor_pile_up() {
        let start = Instant::now();
        let mut map: Bounded<&str, u32> = Bounded::new(bounds(2, 60, 1 << 20));
        map.insert("old", 0, 1, start);
        for i in 1..=5 {
            map.insert("hot", i, 1, start + Duration::from_secs(10 * u64::from(i)));
        }
        assert_eq!(map.usage(start + Duration::from_secs(50)), (2, 2));
        let later = start + Duration::from_secs(61);
        assert!(map.get(&"old", later).is_none(), "expiry goes past the hot key's old places");
        assert_eq!(map.get(&"hot", later), Some((&5, Duration::from_secs(11))));
        map.insert("new", 6, 1, later);
        map.insert("newer", 7, 1, later);
        assert!(map.get(&"hot", later).is_none(), "the oldest real entry went, not a stale place");
        assert!(map.get(&"new", later).is_some() && map.get(&"newer", later).is_some());
        for i in 0..500 {
            map.insert("newer", i, 1, later);
        }
        assert!(map.places() <= 2 * 2 + 64 + 1, "{}", map.places());
        assert_eq!(map.usage(later), (2, 2));
    }
}
