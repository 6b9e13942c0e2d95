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
    /// One whole attempt that streams. Default 600 s, as the OpenAI and Anthropic SDKs wait: an
    /// agent's long answer streams for minutes, and `first_byte` and `idle` catch a provider
    /// gone quiet.
    pub total: Duration,
    /// One attempt answered whole (embeddings; a chat asked whole: `stream_upstream: false`, or
    /// a provider that refuses to stream it), which says nothing until its end: its silence is
    /// caught only here. Default 120 s (a configuration that sets `total` alone sets this too).
    pub whole: Duration,
    /// The whole request, queueing, retries and fallbacks included. Default none.
    pub deadline: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            first_byte: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            total: Duration::from_secs(600),
            whole: Duration::from_secs(120),
            deadline: None,
        }
    }
}

/// The least an attempt waits for its first byte when a deadline's share shortens the wait.
pub(crate) const SHARE_FLOOR: Duration = Duration::from_secs(1);

/// How long an attempt may wait for its first byte (its first content; a call answered whole:
/// its answer) when the request's deadline leaves `left` and `later` targets of the chain are
/// still to try after it: an equal share of what is left for it and each of them, never below
/// [`SHARE_FLOOR`] (nor above `left`, which the deadline bounds anyway). `None` when nothing
/// follows it: the deadline alone bounds the last target.
pub(crate) fn deadline_share(left: Duration, later: usize) -> Option<Duration> {
    if later == 0 {
        return None;
    }
    let parts = u32::try_from(later).unwrap_or(u32::MAX).saturating_add(1);
    Some((left / parts).max(SHARE_FLOOR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_shared_between_an_attempt_and_the_targets_after_it() {
        let secs = Duration::from_secs;
        assert_eq!(deadline_share(secs(10), 1), Some(secs(5)));
        assert_eq!(deadline_share(secs(9), 2), Some(secs(3)));
        assert_eq!(deadline_share(secs(2), 3), Some(SHARE_FLOOR), "never below the floor");
        assert_eq!(deadline_share(secs(10), 0), None, "the last target has what is left");
    }
}
