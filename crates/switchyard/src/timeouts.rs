//! Time limits: of one attempt (connect is the adapter's; first byte, idle between chunks,
//! total) and of the whole request. Its own module so that providers (which honour the
//! attempt's limits) and routes (which configure them) need not import each other.

use std::time::Duration;

/// Time limits of one attempt and of the whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Until the first content chunk of a stream. Default 30 s.
    pub first_byte: Duration,
    /// Between two chunks of a stream. Default 30 s.
    pub idle: Duration,
    /// One whole attempt. Default 120 s.
    pub total: Duration,
    /// The whole request, queueing, retries and fallbacks included. Default none.
    pub deadline: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            first_byte: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            total: Duration::from_secs(120),
            deadline: None,
        }
    }
}
