//! What the board remembers of one target and of one credential. Public so that stores can
//! keep the records; the board's rules are their only writer.

use std::sync::Arc;

use tokio::time::Instant;

use super::status::HasStatus;
use super::{Breaker, HealthStatus};
use crate::credential::CredentialId;

/// What the board remembers of one target. The default is a target never heard of.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetRecord {
    /// The target's status, as the last call that said anything about it left it.
    pub status: HealthStatus,
    /// Why it has that status: the error that caused it, empty after a success.
    pub reason: Arc<str>,
    /// When the status last changed (not when its reason did).
    pub since: Option<Instant>,
    /// When the last failure that gates the target happened: the health TTL runs from here.
    pub failed_at: Option<Instant>,
    /// The provider's own word on when to come back (Retry-After, a quota reset).
    pub retry_until: Option<Instant>,
    /// Breaker-counted failures since the last success.
    pub consecutive_failures: u32,
    /// The target's circuit.
    pub breaker: Breaker,
    /// How many times in a row a half-open probe failed; grows the open time.
    pub reopens: u32,
    /// The provider's credentials resting for this target's model only, each until its time:
    /// a rate limit of the model rests the key for the model, and its other models are still
    /// called with it (a limit the provider says is the account's rests the credential
    /// itself, [`CredentialRecord::cooldown_until`]).
    pub key_cooldowns: Vec<(CredentialId, Instant)>,
}

/// What the board remembers of one credential. The default is a credential never used.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CredentialRecord {
    /// The credential's status, as the last call with it left it.
    pub status: HealthStatus,
    /// Why it has that status: the error that caused it, empty after a success.
    pub reason: Arc<str>,
    /// When the status last changed (not when its reason did).
    pub since: Option<Instant>,
    /// Not picked (while a fresh sibling exists) until then.
    pub cooldown_until: Option<Instant>,
    /// When an exhausted credential's quota is known to reset.
    pub retry_until: Option<Instant>,
}

impl HasStatus for TargetRecord {
    fn status_fields(&mut self) -> (&mut HealthStatus, &mut Arc<str>, &mut Option<Instant>) {
        (&mut self.status, &mut self.reason, &mut self.since)
    }
}

impl HasStatus for CredentialRecord {
    fn status_fields(&mut self) -> (&mut HealthStatus, &mut Arc<str>, &mut Option<Instant>) {
        (&mut self.status, &mut self.reason, &mut self.since)
    }
}
