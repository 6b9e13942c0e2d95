//! How long a credential rests after a failure, and when an exhausted target is back.
//!
//! A resting (cooling down) credential is passed over while a fresh sibling exists, so that a
//! provider with several keys rotates away from the one that just failed; an exhausted one is
//! passed over until its quota resets. Both are read by the gate's credential choice.

use std::time::Duration;

use tokio::time::Instant;

use super::{CredentialRecord, HealthSettings, HealthStatus};

/// The rest after a rate limit: the configured one, or the provider's Retry-After when longer
/// (resting less than the provider asked would only earn another 429).
pub(super) fn after_rate_limit(settings: &HealthSettings, retry_after: Option<Duration>) -> Duration {
    settings.cooldown_on_rate_limit.max(retry_after.unwrap_or_default())
}

/// The rest after a breaker-counted failure, when one is configured.
pub(super) fn after_error(settings: &HealthSettings) -> Option<Duration> {
    Some(settings.cooldown_on_error).filter(|rest| !rest.is_zero())
}

/// Whether the target is out of quota: only when no credential of it has quota left (a
/// provider without credentials: as soon as its one call said so).
pub(super) fn all_spent(credentials: &[CredentialRecord]) -> bool {
    credentials.iter().all(|c| c.status == HealthStatus::Exhausted)
}

/// When an exhausted target is back: as soon as its first key is, so the earliest reset, and
/// unknown if any key's reset is unknown. Without credentials, when the provider said
/// (`retry_until`).
pub(super) fn target_reset(
    credentials: &[CredentialRecord],
    retry_until: Option<Instant>,
) -> Option<Instant> {
    if credentials.is_empty() {
        return retry_until;
    }
    credentials
        .iter()
        .map(|c| c.retry_until)
        .try_fold(None, |soonest: Option<Instant>, until| {
            until.map(|u| Some(soonest.map_or(u, |s| s.min(u))))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(retry_until: Option<Instant>) -> CredentialRecord {
        CredentialRecord { status: HealthStatus::Exhausted, retry_until, ..CredentialRecord::default() }
    }

    #[test]
    fn an_exhausted_target_is_back_with_its_first_key() {
        let now = Instant::now();
        let (soon, late) = (Some(now + Duration::from_secs(60)), Some(now + Duration::from_secs(600)));
        assert_eq!(target_reset(&[spent(late), spent(soon)], late), soon);
        assert_eq!(target_reset(&[spent(soon), spent(None)], soon), None, "one reset unknown");
        assert_eq!(target_reset(&[], late), late, "no credentials: the provider's word");
    }

    #[test]
    fn a_target_is_spent_only_when_every_key_is() {
        let fresh = CredentialRecord::default();
        assert!(all_spent(&[spent(None), spent(None)]));
        assert!(!all_spent(&[spent(None), fresh]));
        assert!(all_spent(&[]));
    }

    #[test]
    fn a_rate_limit_rests_at_least_as_long_as_the_provider_asked() {
        let settings = HealthSettings::default();
        let configured = settings.cooldown_on_rate_limit;
        assert_eq!(after_rate_limit(&settings, None), configured);
        assert_eq!(after_rate_limit(&settings, Some(configured * 3)), configured * 3);
        assert_eq!(after_rate_limit(&settings, Some(Duration::from_millis(1))), configured);
        assert_eq!(after_error(&settings), None, "off by default");
    }
}
