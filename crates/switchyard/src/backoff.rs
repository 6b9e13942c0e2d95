//! Backoff between retries of one target: exponential from `backoff_base`, full jitter, capped
//! at `backoff_max`, then raised to the provider's Retry-After.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::route::Retry;

/// The backoff before retry number `retry` (1 for the first retry), given `unit`, a uniform
/// draw from `[0, 1)`. Never above `backoff_max`.
///
/// ```
/// use std::time::Duration;
/// use switchyard::backoff::backoff;
/// use switchyard::route::Retry;
///
/// let retry = Retry { backoff_base: Duration::from_millis(100), backoff_max: Duration::from_secs(1), ..Retry::default() };
/// assert_eq!(backoff(&retry, 1, 0.5), Duration::from_millis(50));
/// assert!(backoff(&retry, 30, 0.999) <= Duration::from_secs(1));
/// ```
pub fn backoff(retry: &Retry, retry_number: u32, unit: f64) -> Duration {
    let doublings = retry_number.saturating_sub(1).min(32);
    let ceiling = retry.backoff_base.saturating_mul(1u32 << doublings.min(31)).min(retry.backoff_max);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// The wait before retry number `retry_number`: the backoff, raised to `retry_after` when the
/// provider asked for longer.
pub fn retry_delay(retry: &Retry, retry_number: u32, unit: f64, retry_after: Option<Duration>) -> Duration {
    backoff(retry, retry_number, unit).max(retry_after.unwrap_or_default())
}

/// A small lock-free random source (SplitMix64 over an atomic counter): seeded, so tests and
/// simulations replay exactly; shared across tasks without a lock.
#[derive(Debug)]
pub struct Jitter {
    state: AtomicU64,
}

impl Jitter {
    /// A source whose draws follow from `seed`: the same seed replays the same draws.
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw from `[0, 1)`.
    pub fn unit(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
