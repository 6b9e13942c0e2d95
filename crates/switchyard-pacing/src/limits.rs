//! What a lane is configured to keep to.

use std::time::Duration;

/// Limits of one provider (or, with `per_credential`, of each of its keys).
///
/// ```
/// use std::time::Duration;
/// use switchyard_pacing::Limits;
///
/// let limits = Limits { max_concurrent: Some(8), requests_per_minute: Some(300), ..Limits::default() };
/// assert!(limits.is_set());
/// assert!(!Limits::default().is_set());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Most calls in flight at once; the permit is held for the whole exchange.
    pub max_concurrent: Option<u32>,
    /// Sustained request rate: a token bucket holding about one second's share as a burst.
    pub requests_per_minute: Option<u32>,
    /// Sustained token rate: each call reserves its estimate, corrected by the answer's usage.
    pub tokens_per_minute: Option<u32>,
    /// Smallest gap between two dispatches.
    pub min_interval: Duration,
    /// Slow down when the provider's headers say its window is nearly spent. Default on.
    pub respect_headers: bool,
    /// Share of every stated allowance to leave untouched for other consumers of the key.
    pub reserve_fraction: f64,
    /// The longest wait any provider header can impose (a skewed clock or a garbled header
    /// costs at most this). Default 60 s.
    pub max_header_wait: Duration,
    /// One allowance per key instead of one for the whole provider.
    pub per_credential: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrent: None,
            requests_per_minute: None,
            tokens_per_minute: None,
            min_interval: Duration::ZERO,
            respect_headers: true,
            reserve_fraction: 0.0,
            max_header_wait: Duration::from_secs(60),
            per_credential: false,
        }
    }
}

impl Limits {
    /// Whether any limit is set (`respect_headers` alone paces nothing until a provider speaks).
    pub fn is_set(&self) -> bool {
        self.max_concurrent.is_some()
            || self.requests_per_minute.is_some()
            || self.tokens_per_minute.is_some()
            || !self.min_interval.is_zero()
    }
}
