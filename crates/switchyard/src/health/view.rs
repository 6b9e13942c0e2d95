//! The operator's view: records turned into what an admin endpoint shows. Instants become
//! durations from now, because an `Instant` means nothing to a reader.

use std::time::Duration;

use tokio::time::Instant;

use super::{AllRecords, CredentialRecord, HealthStatus, TargetRecord};
use crate::Target;
use crate::credential::CredentialId;

/// The public view of a target's health. Durations serialize as milliseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TargetHealth {
    /// The target this is about.
    pub target: Target,
    /// Its status (`unknown` when never called).
    pub status: HealthStatus,
    /// The error behind the status; empty when available or unknown.
    pub reason: String,
    /// How long until the provider's Retry-After or reset passes, when known.
    #[serde(serialize_with = "ser_opt_ms")]
    pub retry_after: Option<Duration>,
    /// Breaker-counted failures since the last success.
    pub consecutive_failures: u32,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// For an open circuit: how long until it lets a probe through.
    #[serde(serialize_with = "ser_opt_ms")]
    pub probe_in: Option<Duration>,
    /// How long the status has held.
    #[serde(serialize_with = "ser_opt_ms")]
    pub since: Option<Duration>,
    /// The provider's keys resting for this model only (after a rate limit of the model), and
    /// for how long still; absent when none does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_cooldowns: Vec<KeyCooldown>,
}

/// A key of a target's provider resting for the target's model only.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyCooldown {
    /// The key (an id, never the key).
    pub credential_id: CredentialId,
    /// How long it still rests for the model.
    #[serde(serialize_with = "ser_ms")]
    pub cooldown: Duration,
}

impl TargetHealth {
    pub(super) fn of(target: Target, record: &TargetRecord, now: Instant) -> Self {
        TargetHealth {
            target,
            status: record.status,
            reason: record.reason.to_string(),
            retry_after: record.retry_until.and_then(|u| u.checked_duration_since(now)),
            consecutive_failures: record.consecutive_failures,
            breaker: record.breaker.name(),
            probe_in: match record.breaker {
                super::Breaker::Open { until } => Some(until.saturating_duration_since(now)),
                _ => None,
            },
            since: record.since.map(|s| now.saturating_duration_since(s)),
            key_cooldowns: record
                .key_cooldowns
                .iter()
                .filter(|(_, until)| *until > now)
                .map(|(id, until)| KeyCooldown { credential_id: id.clone(), cooldown: *until - now })
                .collect(),
        }
    }
}

/// The public view of a credential's health. Durations serialize as milliseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CredentialHealth {
    /// The credential this is about (an id, never the key).
    pub credential_id: CredentialId,
    /// Its status (`unknown` when never used).
    pub status: HealthStatus,
    /// The error behind the status; empty when available or unknown.
    pub reason: String,
    /// How long the credential still rests (not picked while a sibling is fresh), when it does.
    #[serde(serialize_with = "ser_opt_ms")]
    pub cooldown: Option<Duration>,
    /// For a credential out of quota or refused: how long until it is tried again (its quota's
    /// reset, or the recheck when none was said), when it is benched.
    #[serde(serialize_with = "ser_opt_ms")]
    pub retry_after: Option<Duration>,
    /// How long the status has held.
    #[serde(serialize_with = "ser_opt_ms")]
    pub since: Option<Duration>,
}

impl CredentialHealth {
    fn of(credential_id: CredentialId, record: &CredentialRecord, now: Instant) -> Self {
        CredentialHealth {
            credential_id,
            status: record.status,
            reason: record.reason.to_string(),
            cooldown: record.cooldown_until.and_then(|u| u.checked_duration_since(now)),
            retry_after: matches!(record.status, HealthStatus::Exhausted | HealthStatus::Unauthorized)
                .then_some(record.retry_until)
                .flatten()
                .and_then(|u| u.checked_duration_since(now)),
            since: record.since.map(|s| now.saturating_duration_since(s)),
        }
    }
}

fn ser_ms<S: serde::Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(crate::trail::millis(*value))
}

fn ser_opt_ms<S: serde::Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(d) => s.serialize_some(&crate::trail::millis(*d)),
        None => s.serialize_none(),
    }
}

/// Health of everything the board knows, sorted by target and by credential id. A target or
/// credential never called, or forgotten by the store, has no entry unless it was listed (see
/// [`HealthSnapshot::listing`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct HealthSnapshot {
    /// Every target with a record, and every listed one.
    pub targets: Vec<TargetHealth>,
    /// Every credential with a record, and every listed one.
    pub credentials: Vec<CredentialHealth>,
}

impl HealthSnapshot {
    pub(super) fn of((targets, credentials): AllRecords, now: Instant) -> Self {
        HealthSnapshot {
            targets: targets.into_iter().map(|(t, r)| TargetHealth::of(t, &r, now)).collect(),
            credentials: credentials.into_iter().map(|(id, r)| CredentialHealth::of(id, &r, now)).collect(),
        }
    }

    /// The records, with every listed target and credential that has none added as
    /// `unknown`: an operator sees the whole configuration from the start, and
    /// again right after a reset, not only what traffic has touched. Sorted as the store
    /// sorts, so a listed entry sits where its record would.
    pub(super) fn listing(
        (mut targets, mut credentials): AllRecords,
        listed: (&[Target], &[CredentialId]),
        now: Instant,
    ) -> Self {
        let (listed_targets, listed_credentials) = listed;
        // After the records: the sort is stable and `dedup_by` keeps the first of equals, so a
        // record wins over its listed default.
        targets.extend(listed_targets.iter().map(|t| (t.clone(), TargetRecord::default())));
        credentials.extend(listed_credentials.iter().map(|id| (id.clone(), CredentialRecord::default())));
        targets.sort_by(|a, b| a.0.cmp(&b.0));
        targets.dedup_by(|a, b| a.0 == b.0);
        credentials.sort_by(|a, b| a.0.cmp(&b.0));
        credentials.dedup_by(|a, b| a.0 == b.0);
        Self::of((targets, credentials), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str) -> Target {
        name.parse().unwrap()
    }

    #[test]
    fn a_listing_adds_what_has_no_record_as_unknown_and_keeps_every_record() {
        let now = Instant::now();
        let failing = TargetRecord {
            status: HealthStatus::TemporarilyUnavailable,
            consecutive_failures: 2,
            ..TargetRecord::default()
        };
        let key = CredentialId::derive("openai", "http://x", None);
        let records = (vec![(target("b:m"), failing), (target("z:m"), TargetRecord::default())], Vec::new());
        let listed = [target("c:m"), target("b:m"), target("a:m"), target("c:m")];

        let snapshot = HealthSnapshot::listing(records, (&listed, std::slice::from_ref(&key)), now);
        let targets: Vec<(&str, HealthStatus)> =
            snapshot.targets.iter().map(|t| (t.target.as_str(), t.status)).collect();
        assert_eq!(
            targets,
            [
                ("a:m", HealthStatus::Unknown),
                ("b:m", HealthStatus::TemporarilyUnavailable),
                ("c:m", HealthStatus::Unknown),
                ("z:m", HealthStatus::Unknown),
            ],
            "sorted, each once, a record over its listed default, unlisted records kept"
        );
        assert_eq!(snapshot.targets[1].consecutive_failures, 2);
        assert_eq!(snapshot.credentials.len(), 1);
        assert_eq!(
            (&snapshot.credentials[0].credential_id, snapshot.credentials[0].status),
            (&key, HealthStatus::Unknown)
        );
    }
}
