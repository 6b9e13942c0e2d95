//! How long a credential rests after a failure, and when an exhausted target is back.
//!
//! A resting (cooling down) credential is passed over while a fresh sibling exists, so that a
//! provider with several keys rotates away from the one that just failed; an exhausted one is
//! passed over until its quota resets. Both are read by the gate's credential choice.
//!
//! A rest is the credential's own (every model) or the (credential, model)'s: providers limit
//! rates per model, so a rate limit rests the key for the model it came from, unless the
//! provider said the limit is the account's.

use std::time::Duration;

use tokio::time::Instant;

use super::{CredentialRecord, HealthSettings, HealthStatus};
use crate::credential::CredentialId;

/// Rests `id` for the target's model until `until`, or longer when a rest of it still runs;
/// rests that have ended are dropped.
pub(super) fn rest_for_model(
    rests: &mut Vec<(CredentialId, Instant)>,
    id: &CredentialId,
    until: Instant,
    now: Instant,
) {
    rests.retain(|(_, ends)| *ends > now);
    match rests.iter_mut().find(|(resting, _)| resting == id) {
        Some((_, ends)) => *ends = (*ends).max(until),
        None => rests.push((id.clone(), until)),
    }
}

/// Ends the model's rest of `id` (a call with it succeeded), and the rests that have ended.
pub(super) fn end_model_rest(
    rests: &mut Vec<(CredentialId, Instant)>,
    id: Option<&CredentialId>,
    now: Instant,
) {
    rests.retain(|(resting, ends)| Some(resting) != id && *ends > now);
}

/// When `id` is free for the target's model: the later of its own rest and the model's rest
/// of it.
pub(super) fn rests_until(
    credential: &CredentialRecord,
    model_rests: &[(CredentialId, Instant)],
    id: Option<&CredentialId>,
) -> Option<Instant> {
    let model = model_rests.iter().find(|(resting, _)| Some(resting) == id).map(|(_, ends)| *ends);
    credential.cooldown_until.max(model)
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
    fn a_model_rest_never_shortens_and_ends_with_a_success_or_its_time() {
        let now = Instant::now();
        let at = |secs| now + Duration::from_secs(secs);
        let id = |n: u8| {
            CredentialId::derive(
                "openai",
                "http://x",
                Some(&crate::credential::Secret::new(format!("sk-{n}"))),
            )
        };
        let mut rests = vec![(id(9), now)];
        rest_for_model(&mut rests, &id(1), at(20), now);
        rest_for_model(&mut rests, &id(1), at(5), now);
        rest_for_model(&mut rests, &id(2), at(5), now);
        assert_eq!(rests, [(id(1), at(20)), (id(2), at(5))], "the ended rest dropped, the longer kept");
        let fresh = CredentialRecord::default();
        assert_eq!(rests_until(&fresh, &rests, Some(&id(1))), Some(at(20)));
        let own = CredentialRecord { cooldown_until: Some(at(30)), ..CredentialRecord::default() };
        assert_eq!(rests_until(&own, &rests, Some(&id(1))), Some(at(30)), "the later of the two");
        assert_eq!(rests_until(&fresh, &rests, Some(&id(3))), None);
        end_model_rest(&mut rests, Some(&id(1)), now);
        assert_eq!(rests, [(id(2), at(5))]);
        end_model_rest(&mut rests, None, at(5));
        assert!(rests.is_empty(), "ended by its time");
    }

    #[test]
    fn a_rate_limit_rests_at_least_as_long_as_the_provider_asked() {
        let settings = HealthSettings::default();
        let configured = settings.cooldown_on_rate_limit;
        assert_eq!(settings.rest_after_rate_limit(None), configured);
        assert_eq!(settings.rest_after_rate_limit(Some(configured * 3)), configured * 3);
        assert_eq!(settings.rest_after_rate_limit(Some(Duration::from_millis(1))), configured);
        assert_eq!(after_error(&settings), None, "off by default");
    }
}
