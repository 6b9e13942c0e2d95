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
            since: record.since.map(|s| now.saturating_duration_since(s)),
        }
    }
}

fn ser_opt_ms<S: serde::Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(d) => s.serialize_some(&crate::trail::millis(*d)),
        None => s.serialize_none(),
    }
}

/// Health of everything the board knows, in the store's order (sorted by target and by id).
/// A target or credential never called, or forgotten by the store, has no entry.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct HealthSnapshot {
    /// Every target with a record.
    pub targets: Vec<TargetHealth>,
    /// Every credential with a record.
    pub credentials: Vec<CredentialHealth>,
}

impl HealthSnapshot {
    pub(super) fn of((targets, credentials): AllRecords, now: Instant) -> Self {
        HealthSnapshot {
            targets: targets.into_iter().map(|(t, r)| TargetHealth::of(t, &r, now)).collect(),
            credentials: credentials.into_iter().map(|(id, r)| CredentialHealth::of(id, &r, now)).collect(),
        }
    }
}
