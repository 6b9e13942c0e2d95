//! The board's settings.

use std::time::Duration;

/// Settings of the board, shared by every route.
///
/// ```
/// use std::time::Duration;
/// use switchyard::health::HealthSettings;
///
/// let settings = HealthSettings { failure_threshold: 5, ..HealthSettings::default() };
/// assert_eq!(settings.open_for, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSettings {
    /// Consecutive breaker-counted failures that open a target's circuit (0 counts as 1).
    /// Default 3.
    pub failure_threshold: u32,
    /// How long an opened circuit stays open before it lets a probe through. Default 5 s: a
    /// short outage costs a few seconds after the provider is back, not minutes.
    pub open_for: Duration,
    /// The longest an often re-opened circuit stays open (each failed probe in a row doubles
    /// the time: 5, 10, 20, 30 s by default; never less than `open_for`). Default 30 s: a
    /// target is let through again at most this long after its last failed probe.
    pub open_max: Duration,
    /// How many probe requests a half-open circuit lets through at once (0 counts as 1).
    /// Default 1.
    pub half_open_probes: u32,
    /// How long a credential rests after a rate limit (or the provider's Retry-After, when
    /// longer), so that a provider with several keys rotates to a fresh one. Default 5 s.
    pub cooldown_on_rate_limit: Duration,
    /// The longest a rate limit rests a credential, whatever the provider's Retry-After or
    /// reset headers say (never less than `cooldown_on_rate_limit`): a header that asks a day
    /// (a proxy's, or over-cautious) costs one call that fails again each time, not a day of
    /// the target unused. Quota spent (exhausted) is not bounded by it. Default 5 min.
    pub max_cooldown_on_rate_limit: Duration,
    /// How long a credential rests after a breaker-counted failure. Default 0 (off).
    pub cooldown_on_error: Duration,
}

impl HealthSettings {
    /// How long a credential rests after a rate limit whose provider said to wait
    /// `retry_after`: the configured rest, or the provider's wait when longer (resting less
    /// than it asked would only earn another 429), up to `max_cooldown_on_rate_limit`.
    pub fn rest_after_rate_limit(&self, retry_after: Option<Duration>) -> Duration {
        self.cooldown_on_rate_limit.max(retry_after.unwrap_or_default()).min(self.longest_rate_limit_rest())
    }

    /// The longest a rate limit rests a credential: `max_cooldown_on_rate_limit`, never less
    /// than `cooldown_on_rate_limit`.
    pub fn longest_rate_limit_rest(&self) -> Duration {
        self.max_cooldown_on_rate_limit.max(self.cooldown_on_rate_limit)
    }
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            open_for: Duration::from_secs(5),
            open_max: Duration::from_secs(30),
            half_open_probes: 1,
            cooldown_on_rate_limit: Duration::from_secs(5),
            max_cooldown_on_rate_limit: Duration::from_secs(300),
            cooldown_on_error: Duration::ZERO,
        }
    }
}
