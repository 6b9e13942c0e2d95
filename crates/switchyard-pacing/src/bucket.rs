//! The token bucket a lane paces its requests and tokens per minute with, and a degraded
//! fleet lane its share.

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket that may go into debt: a request larger than the burst goes once the bucket
/// is full, and later requests wait for the debt to be paid back, so the average rate holds.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    capacity: f64,
    per_sec: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A bucket refilling `per_minute` and holding one second's share (at least one unit).
    pub(crate) fn new(per_minute: f64, now: Instant) -> Self {
        let per_sec = per_minute / 60.0;
        let capacity = per_sec.max(1.0);
        Self { capacity, per_sec, level: capacity, at: now }
    }

    pub(crate) fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_sec).min(self.capacity);
        self.at = now;
    }

    /// How long until `units` may be taken (for more than the burst: until the bucket is full).
    pub(crate) fn wait_for(&self, units: f64) -> Duration {
        let needed = units.min(self.capacity);
        if self.level >= needed || self.per_sec <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(((needed - self.level) / self.per_sec).min(1e6))
    }

    pub(crate) fn give(&mut self, units: f64) {
        self.level = (self.level + units).min(self.capacity);
    }

    /// Takes `units` (into debt, when more than it holds).
    pub(crate) fn take(&mut self, units: f64) {
        self.level -= units;
    }

    /// What it refills a second.
    pub(crate) fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// What it holds now (negative: debt being paid back).
    pub(crate) fn level(&self) -> f64 {
        self.level
    }
}
