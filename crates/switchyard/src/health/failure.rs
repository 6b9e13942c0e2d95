//! What a failed call does to the records: one step per health effect of its error kind
//! ([`HealthEffect`]).

use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{self, BreakerInput};
use super::status::StatusChange;
use super::{CredentialRecord, HealthEvent, HealthSettings, HealthStatus, Records, Subject, cooldown};
use crate::credential::CredentialId;
use crate::error::HealthEffect;
use crate::{ProviderError, Target};

/// How long a key the provider refused is benched before it is tried again: long enough not
/// to spend requests on a revoked key, short enough that a key fixed upstream, or a provider's
/// passing auth outage, is back in use without an operator.
pub(crate) const AUTH_REST: Duration = Duration::from_secs(60);

/// How long a key whose quota ran out with no reset said (OpenAI's `insufficient_quota`: a
/// balance to top up) is benched before calls try it again: an operator who paid need not
/// restart the gateway or reset it, and a key still spent costs the calls that try it then
/// (refused at once, each going on to the next key or target) once in that time.
pub(crate) const QUOTA_RECHECK: Duration = Duration::from_secs(300);

/// One failed call, as the rules see it.
pub(super) struct Failure<'a> {
    target: &'a Target,
    /// The index of the credential the call used, in the provider's list.
    credential: usize,
    /// That credential, when the provider has one at that index.
    credential_id: Option<CredentialId>,
    /// The provider said the limit is the account's, not the model's.
    account_wide: bool,
    reason: String,
    retry_after: Option<Duration>,
    /// `retry_after` from the time of the failure.
    retry_until: Option<Instant>,
    now: Instant,
}

impl<'a> Failure<'a> {
    /// A failure of a call of `target` with `credentials[credential]` that ended in `error`.
    pub(super) fn new(
        target: &'a Target,
        credentials: &[CredentialId],
        credential: usize,
        error: &ProviderError,
        now: Instant,
    ) -> Self {
        let retry_after = error.retry_after();
        Self {
            target,
            credential,
            credential_id: credentials.get(credential).cloned(),
            account_wide: error.is_account_wide(),
            reason: error.to_string(),
            retry_after,
            retry_until: retry_after.map(|d| now + d),
            now,
        }
    }

    /// Applies `effect` (the error kind's) to `records` and appends what it announces.
    pub(super) fn apply(
        &self,
        effect: HealthEffect,
        settings: &HealthSettings,
        records: &mut Records,
        events: &mut Vec<HealthEvent>,
    ) {
        match effect {
            HealthEffect::None => {}
            HealthEffect::RateLimited => self.rate_limited(settings, records, events),
            HealthEffect::Exhausted => self.exhausted(records, events),
            HealthEffect::TemporarilyUnavailable => self.temporarily_unavailable(settings, records, events),
            HealthEffect::Unauthorized => self.unauthorized(records, events),
            HealthEffect::ModelUnavailable => self.model_unavailable(records, events),
        }
    }

    /// The key rests so that the next call rotates to a sibling: for this target's model, or,
    /// when the provider said the limit is the account's, for every model (the credential is
    /// marked rate limited then). The target is marked but not skipped for it.
    fn rate_limited(&self, settings: &HealthSettings, records: &mut Records, events: &mut Vec<HealthEvent>) {
        let rest = self.now + settings.rest_after_rate_limit(self.retry_after);
        if !self.account_wide {
            if let Some(id) = &self.credential_id {
                cooldown::rest_for_model(&mut records.target.key_cooldowns, id, rest, self.now);
            }
        } else if let Some((c, change)) =
            self.credential_change(&mut records.credentials, HealthStatus::RateLimited)
        {
            c.cooldown_until = self.later(c.cooldown_until, Some(rest));
            change.apply(c, events);
        }
        // The provider's wait is held to the same bound as the key's rest.
        let t = &mut records.target;
        t.retry_until = self.later(t.retry_until, self.retry_until.map(|until| until.min(rest)));
        self.target_change(HealthStatus::RateLimited).apply(t, events);
    }

    /// The credential is benched until its quota resets (with no reset said, for
    /// [`QUOTA_RECHECK`]); the target too once every key is.
    fn exhausted(&self, records: &mut Records, events: &mut Vec<HealthEvent>) {
        let resets = self.retry_until.or(Some(self.now + QUOTA_RECHECK));
        if let Some((c, change)) = self.credential_change(&mut records.credentials, HealthStatus::Exhausted) {
            c.retry_until = self.later(c.retry_until, resets);
            change.until(c.retry_until).apply(c, events);
        }
        if cooldown::all_spent(&records.credentials) {
            let t = &mut records.target;
            t.retry_until = cooldown::target_reset(&records.credentials, resets);
            let until = t.retry_until;
            self.target_change(HealthStatus::Exhausted).until(until).apply(t, events);
        }
    }

    /// The provider is unwell: the target is skipped for the health TTL and the failure counts
    /// towards opening its circuit.
    fn temporarily_unavailable(
        &self,
        settings: &HealthSettings,
        records: &mut Records,
        events: &mut Vec<HealthEvent>,
    ) {
        if let Some(rest) = cooldown::after_error(settings)
            && let Some((c, change)) =
                self.credential_change(&mut records.credentials, HealthStatus::TemporarilyUnavailable)
        {
            c.cooldown_until = self.later(c.cooldown_until, Some(self.now + rest));
            change.apply(c, events);
        }
        let t = &mut records.target;
        t.failed_at = Some(self.now);
        t.retry_until = self.later(t.retry_until, self.retry_until);
        t.consecutive_failures = t.consecutive_failures.saturating_add(1);
        self.target_change(HealthStatus::TemporarilyUnavailable).apply(t, events);
        let input = BreakerInput::Failure { now: self.now, failures: t.consecutive_failures };
        breaker::drive(t, self.target, input, settings, events);
    }

    /// The key is refused: benched for [`AUTH_REST`], then tried again; the target is marked
    /// once every key of it is.
    fn unauthorized(&self, records: &mut Records, events: &mut Vec<HealthEvent>) {
        if let Some((c, change)) =
            self.credential_change(&mut records.credentials, HealthStatus::Unauthorized)
        {
            // From this refusal on, whatever a trying call held it for.
            c.retry_until = Some(self.now + AUTH_REST);
            change.apply(c, events);
        }
        if records.credentials.iter().all(|c| c.status == HealthStatus::Unauthorized) {
            self.target_change(HealthStatus::Unauthorized).apply(&mut records.target, events);
        }
    }

    /// The provider does not serve the model: skip the target for the health TTL, but a
    /// missing model says nothing about the provider's health, so the breaker does not count
    /// it.
    fn model_unavailable(&self, records: &mut Records, events: &mut Vec<HealthEvent>) {
        let t = &mut records.target;
        t.failed_at = Some(self.now);
        self.target_change(HealthStatus::TemporarilyUnavailable).apply(t, events);
    }

    /// A wait after this failure: `new`, unless a wait still running ends later. A later,
    /// shorter rest never shortens a longer one (and a failure that names no time leaves the
    /// running one alone).
    fn later(&self, current: Option<Instant>, new: Option<Instant>) -> Option<Instant> {
        match current.filter(|until| *until > self.now) {
            Some(running) => Some(new.map_or(running, |new| new.max(running))),
            None => new,
        }
    }

    fn target_change(&self, to: HealthStatus) -> StatusChange<'_> {
        StatusChange::new(Subject::Target(self.target.clone()), to, &self.reason, self.now)
    }

    /// The record of the credential the call used and its change to `to`; `None` when the
    /// provider has no credential at that index.
    fn credential_change<'r>(
        &self,
        credentials: &'r mut [CredentialRecord],
        to: HealthStatus,
    ) -> Option<(&'r mut CredentialRecord, StatusChange<'_>)> {
        let record = credentials.get_mut(self.credential)?;
        let subject = Subject::Credential(self.credential_id.clone()?);
        Some((record, StatusChange::new(subject, to, &self.reason, self.now)))
    }
}
