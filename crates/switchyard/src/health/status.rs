//! Statuses, what they are about, and how one status changes.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use super::HealthEvent;
use crate::Target;
use crate::credential::CredentialId;

/// The status of a target or credential, as the last call that said anything about it left
/// it. What each status keeps from being called is the gate's business (see [`Gate`]).
///
/// [`Gate`]: super::Gate
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Never called, or forgotten (an operator's reset, a store that dropped the record).
    #[default]
    Unknown,
    /// The last call that said anything about it succeeded.
    Available,
    /// The provider answered with a rate limit: the credential rests for
    /// `cooldown_on_rate_limit` (or the provider's Retry-After, when longer); the target is
    /// not skipped for it.
    RateLimited,
    /// Out of quota: skipped, unless the request named the target, until the provider's reset
    /// time (with no reset time given, until a success or a reset). A target is exhausted once
    /// every credential of it is.
    Exhausted,
    /// A failure that says the provider is unwell (timeout, transport, 5xx, a malformed
    /// answer) or does not serve the model: the target is skipped for the route's health TTL,
    /// and a credential rests for `cooldown_on_error` when that is set.
    TemporarilyUnavailable,
    /// The provider refused the key: the credential is benched for a minute, then tried again
    /// (a refusal again benches it again). A target is unauthorized once every credential of
    /// it is.
    Unauthorized,
}

impl HealthStatus {
    /// The snake_case name, the same as the serialized form, for logs, metrics and the admin
    /// view.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Unknown => "unknown",
            HealthStatus::Available => "available",
            HealthStatus::RateLimited => "rate_limited",
            HealthStatus::Exhausted => "exhausted",
            HealthStatus::TemporarilyUnavailable => "temporarily_unavailable",
            HealthStatus::Unauthorized => "unauthorized",
        }
    }

    /// Whether leaving this status is a recovery worth announcing.
    pub(super) fn is_troubled(self) -> bool {
        !matches!(self, HealthStatus::Unknown | HealthStatus::Available)
    }
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a health record, and so an event, is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A `provider:model` target.
    Target(Target),
    /// One credential (API key) of a provider, by its id, never the key.
    Credential(CredentialId),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Target(target) => write!(f, "{target}"),
            Subject::Credential(id) => write!(f, "credential {id}"),
        }
    }
}

/// The fields a status change writes; target and credential records both have them.
pub(super) trait HasStatus {
    /// The record's status, its reason and when the status last changed.
    fn status_fields(&mut self) -> (&mut HealthStatus, &mut Arc<str>, &mut Option<Instant>);
}

/// One status change of one subject. What a change announces lives here, in one place: a
/// move to another status emits `HealthChanged`, preceded by `Exhausted` when the subject runs
/// out of quota and followed by `Recovered` (and `CapacityRestored`) when it leaves trouble
/// through a success or a reset.
#[derive(Debug, Clone)]
pub(super) struct StatusChange<'a> {
    subject: Subject,
    to: HealthStatus,
    reason: &'a str,
    at: Instant,
    until: Option<Instant>,
}

impl<'a> StatusChange<'a> {
    /// A change of `subject` to `to` at `at`, because of `reason`.
    pub(super) fn new(subject: Subject, to: HealthStatus, reason: &'a str, at: Instant) -> Self {
        Self { subject, to, reason, at, until: None }
    }

    /// When a change to `Exhausted` is known to end, for its `Exhausted` event.
    pub(super) fn until(self, until: Option<Instant>) -> Self {
        Self { until, ..self }
    }

    /// Writes the change into `record` and appends its events to `events`. A record that
    /// already has the status keeps its `since` and emits nothing; only a troubled one takes
    /// the newer reason (a success says nothing new).
    pub(super) fn apply(self, record: &mut impl HasStatus, events: &mut Vec<HealthEvent>) {
        let (status, reason, since) = record.status_fields();
        if *status == self.to {
            if self.to.is_troubled() && **reason != *self.reason {
                *reason = self.reason.into();
            }
            return;
        }
        let from = std::mem::replace(status, self.to);
        *reason = self.reason.into();
        *since = Some(self.at);
        if self.to == HealthStatus::Exhausted {
            events.push(HealthEvent::Exhausted { subject: self.subject.clone(), until: self.until });
        }
        events.push(HealthEvent::HealthChanged {
            subject: self.subject.clone(),
            from,
            to: self.to,
            reason: self.reason.to_owned(),
        });
        if matches!(self.to, HealthStatus::Available | HealthStatus::Unknown) {
            recovery_events(self.subject, from, events);
        }
    }
}

/// Appends what leaving `from` through a success or a reset announces.
pub(super) fn recovery_events(subject: Subject, from: HealthStatus, events: &mut Vec<HealthEvent>) {
    if from.is_troubled() {
        events.push(HealthEvent::Recovered { subject: subject.clone(), from });
    }
    if from == HealthStatus::Exhausted {
        events.push(HealthEvent::CapacityRestored { subject });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::TargetRecord;

    fn subject() -> Subject {
        Subject::Target("p:m".parse().unwrap())
    }

    fn record(status: HealthStatus, reason: &str, since: Option<Instant>) -> TargetRecord {
        TargetRecord { status, reason: reason.into(), since, ..TargetRecord::default() }
    }

    fn names(events: &[HealthEvent]) -> Vec<&'static str> {
        events
            .iter()
            .map(|event| match event {
                HealthEvent::HealthChanged { .. } => "health_changed",
                HealthEvent::Exhausted { .. } => "exhausted",
                HealthEvent::Recovered { .. } => "recovered",
                HealthEvent::CapacityRestored { .. } => "capacity_restored",
                _ => "breaker",
            })
            .collect()
    }

    #[test]
    fn each_change_announces_what_it_means() {
        use HealthStatus::*;
        let rows: &[(HealthStatus, HealthStatus, &[&str])] = &[
            (Unknown, Available, &["health_changed"]),
            (Available, RateLimited, &["health_changed"]),
            (Available, Exhausted, &["exhausted", "health_changed"]),
            (RateLimited, Available, &["health_changed", "recovered"]),
            (TemporarilyUnavailable, Unknown, &["health_changed", "recovered"]),
            (Exhausted, Available, &["health_changed", "recovered", "capacity_restored"]),
            (Exhausted, Unknown, &["health_changed", "recovered", "capacity_restored"]),
            // Trouble replaced by other trouble is no recovery.
            (Exhausted, TemporarilyUnavailable, &["health_changed"]),
            (RateLimited, RateLimited, &[]),
            (Available, Available, &[]),
        ];
        let now = Instant::now();
        for &(from, to, expected) in rows {
            let mut r = record(from, "before", None);
            let mut events = Vec::new();
            StatusChange::new(subject(), to, "after", now).apply(&mut r, &mut events);
            assert_eq!(names(&events), expected, "{from} -> {to}");
            assert_eq!(r.status, to);
        }
    }

    #[test]
    fn a_repeated_status_keeps_its_since_and_only_trouble_takes_the_new_reason() {
        let then = Instant::now();
        let later = then + std::time::Duration::from_secs(5);
        let mut events = Vec::new();

        let mut troubled = record(HealthStatus::RateLimited, "first 429", Some(then));
        StatusChange::new(subject(), HealthStatus::RateLimited, "second 429", later)
            .apply(&mut troubled, &mut events);
        assert_eq!((&*troubled.reason, troubled.since), ("second 429", Some(then)));

        let mut fine = record(HealthStatus::Available, "", Some(then));
        StatusChange::new(subject(), HealthStatus::Available, "ignored", later).apply(&mut fine, &mut events);
        assert_eq!((&*fine.reason, fine.since), ("", Some(then)));
        assert!(events.is_empty());
    }

    #[test]
    fn a_change_records_its_time_reason_and_when_exhaustion_ends() {
        let now = Instant::now();
        let until = Some(now + std::time::Duration::from_secs(60));
        let mut r = record(HealthStatus::Available, "", None);
        let mut events = Vec::new();
        StatusChange::new(subject(), HealthStatus::Exhausted, "quota", now)
            .until(until)
            .apply(&mut r, &mut events);
        assert_eq!((&*r.reason, r.since), ("quota", Some(now)));
        assert_eq!(
            events,
            [
                HealthEvent::Exhausted { subject: subject(), until },
                HealthEvent::HealthChanged {
                    subject: subject(),
                    from: HealthStatus::Available,
                    to: HealthStatus::Exhausted,
                    reason: "quota".to_owned(),
                },
            ]
        );
    }
}
