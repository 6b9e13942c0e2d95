//! The health board: what the router knows about each target and credential.
//!
//! One place decides health. The router asks it whether a target may be called ([`Gate`]),
//! which credential to use, and tells it how each attempt ended; the board applies the
//! contract's rules (docs/ARCHITECTURE.md) (statuses, circuit breaker, cooldowns, exhaustion) and returns the events the change
//! caused, which the router publishes after every lock is released.
//!
//! The records live behind [`HealthStore`], a small trait: the in-memory [`MemoryStore`] is the
//! default, and a shared store (Redis) can replace it without touching the rules.
//!
//! Where each rule lives:
//!
//! - `status`: [`HealthStatus`], [`Subject`], and the one type that changes a status and
//!   says what the change announces;
//! - `breaker`: the circuit [`Breaker`] and every transition of it;
//! - `gate`: [`Gate`], [`GateQuery`], the checks before a call and the choice of a credential;
//! - `failure` and `cooldown`: what each kind of failure does, how long credentials rest and
//!   when an exhausted target is back;
//! - `store` and `record`: the [`HealthStore`] seam and the records it keeps;
//! - `view`: the operator's [`HealthSnapshot`];
//! - `event`: the [`HealthEvent`]s the board returns.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use crate::credential::CredentialId;
use crate::{ProviderError, Target};

mod breaker;
mod cooldown;
mod event;
mod failure;
mod gate;
mod record;
mod settings;
mod status;
mod store;
mod view;

pub use breaker::Breaker;
use breaker::BreakerInput;
pub use event::HealthEvent;
use failure::Failure;
pub use gate::{Gate, GateQuery};
pub use record::{CredentialRecord, TargetRecord};
pub use settings::HealthSettings;
pub use status::{HealthStatus, Subject};
use status::{StatusChange, recovery_events};
pub use store::{AllRecords, HealthStore, MemoryStore, ProbeClaim, Records};
pub use view::{CredentialHealth, HealthSnapshot, KeyCooldown, TargetHealth};

/// The health rules over a [`HealthStore`]. Each method is one store update (or one read of
/// every record), so the board keeps nothing but its settings, takes no lock of its own and is
/// cheap to share behind an `Arc`.
///
/// The methods that change health return the [`HealthEvent`]s of the change instead of
/// publishing them, so that the caller publishes them once the store's lock is released.
pub struct HealthBoard {
    settings: HealthSettings,
    store: Arc<dyn HealthStore>,
}

impl fmt::Debug for HealthBoard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthBoard").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl HealthBoard {
    /// A board over a fresh [`MemoryStore`] of the default capacity.
    pub fn new(settings: HealthSettings) -> Self {
        Self::with_store(settings, Arc::new(MemoryStore::default()))
    }

    /// A board over `store`, which may already hold records (a shared store).
    pub fn with_store(settings: HealthSettings, store: Arc<dyn HealthStore>) -> Self {
        Self { settings, store }
    }

    /// A board of `settings` over this board's store: what a reconfiguration keeps.
    pub fn reconfigured(&self, settings: HealthSettings) -> Self {
        Self { settings, store: self.store.clone() }
    }

    /// Every target the store holds a record of, with its status.
    pub fn recorded_targets(&self) -> Vec<(Target, HealthStatus)> {
        self.store.all().0.into_iter().map(|(target, record)| (target, record.status)).collect()
    }

    /// Drops the records of `targets` and `credentials` from this process, announcing nothing
    /// (see [`HealthStore::drop_records`]).
    pub fn drop_records(&self, targets: &[Target], credentials: &[CredentialId]) {
        self.store.drop_records(targets, credentials);
    }

    /// Tells the store which targets the configuration names (see
    /// [`HealthStore::configured`]).
    pub fn configured(&self, targets: &[Target]) {
        self.store.configured(targets);
    }

    /// The settings the board was built with.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// Whether `query.target` may be called now, without changing anything: no probe slot is
    /// taken, so a pass here is no promise that [`admit`](Self::admit) passes too.
    pub fn peek(&self, query: &GateQuery<'_>) -> Gate {
        let now = Instant::now();
        let mut gate = None;
        self.store.update(query.target, query.credentials, &mut |records| {
            let mut scratch = records.clone();
            gate = Some(gate::decide(&self.settings, &mut scratch, query, now).0);
        });
        gate.unwrap_or_else(unanswered)
    }

    /// Whether `query.target` may be called now; a pass in a half-open circuit takes a probe
    /// slot. Returns the events the decision caused.
    pub fn admit(&self, query: &GateQuery<'_>) -> (Gate, Vec<HealthEvent>) {
        let now = Instant::now();
        let mut out = None;
        self.store.update(query.target, query.credentials, &mut |records| {
            out = Some(gate::decide(&self.settings, records, query, now));
        });
        out.unwrap_or_else(|| (unanswered(), Vec::new()))
    }

    /// Whether the probe [`admit`](Self::admit) just gave this process is the fleet's one
    /// probe of `target` ([`HealthStore::claim_probe`]): yes at once over a store of one
    /// process; over a shared store, no when another replica took it first.
    pub async fn claim_probe(&self, target: &Target) -> bool {
        match self.store.claim_probe(target) {
            None => true,
            Some(claim) => claim.await,
        }
    }

    /// Records a successful call of `target` with `credentials[credential]`: both become
    /// available, the target's failure count and wait are cleared and its circuit closes, and
    /// the credential's rest ends (its own, and the model's rest of it). Returns the events of the change.
    pub fn record_success(
        &self,
        target: &Target,
        credentials: &[CredentialId],
        credential: usize,
    ) -> Vec<HealthEvent> {
        let mut events = Vec::new();
        self.store.update(target, credentials, &mut |records| {
            events.clear();
            let now = Instant::now();
            let t = &mut records.target;
            t.consecutive_failures = 0;
            t.failed_at = None;
            t.retry_until = None;
            cooldown::end_model_rest(&mut t.key_cooldowns, credentials.get(credential), now);
            breaker::drive(t, target, BreakerInput::Success, &self.settings, &mut events);
            StatusChange::new(Subject::Target(target.clone()), HealthStatus::Available, "", now)
                .apply(t, &mut events);
            if let (Some(c), Some(id)) =
                (records.credentials.get_mut(credential), credentials.get(credential))
            {
                c.cooldown_until = None;
                c.retry_until = None;
                StatusChange::new(Subject::Credential(id.clone()), HealthStatus::Available, "", now)
                    .apply(c, &mut events);
            }
        });
        events
    }

    /// Records a failed call of `target` with `credentials[credential]`, applying the
    /// [`HealthEffect`](crate::HealthEffect) of the error's kind (a rate limit rests the
    /// credential, a quota error benches it, an outage gates the target and counts towards its
    /// breaker, ...). Errors that say nothing about the provider change nothing. Returns the
    /// events of the change.
    pub fn record_failure(
        &self,
        target: &Target,
        credentials: &[CredentialId],
        credential: usize,
        error: &ProviderError,
    ) -> Vec<HealthEvent> {
        let effect = error.kind().health_effect();
        let mut events = Vec::new();
        self.store.update(target, credentials, &mut |records| {
            events.clear();
            let failure = Failure::new(target, credentials, credential, error, Instant::now());
            failure.apply(effect, &self.settings, records, &mut events);
        });
        events
    }

    /// Gives back a half-open circuit's probe slot that a call took but whose outcome said
    /// nothing about the provider (a rate limit, an invalid request, a pacer refusal, the
    /// caller's deadline): the next call may probe at once instead of waiting out the lease.
    pub fn release_probe(&self, target: &Target, credentials: &[CredentialId]) {
        self.store.update(target, credentials, &mut |records| {
            // Releasing a slot announces nothing.
            let mut silent = Vec::new();
            breaker::drive(
                &mut records.target,
                target,
                BreakerInput::ReleaseProbe,
                &self.settings,
                &mut silent,
            );
        });
    }

    /// The health of one target (`unknown` when never called or forgotten).
    pub fn target(&self, target: &Target) -> TargetHealth {
        let mut out = None;
        self.store.update(target, &[], &mut |records| out = Some(records.target.clone()));
        TargetHealth::of(target.clone(), &out.unwrap_or_default(), Instant::now())
    }

    /// The health of every target and credential the store holds a record of.
    pub fn snapshot(&self) -> HealthSnapshot {
        HealthSnapshot::of(self.store.all(), Instant::now())
    }

    /// [`snapshot`](Self::snapshot), with every target of `targets` and every credential of
    /// `credentials` listed too, as `unknown` when the store holds no record of it (never
    /// called, or reset): the operator's view of a configuration.
    pub fn snapshot_listing(&self, targets: &[Target], credentials: &[CredentialId]) -> HealthSnapshot {
        HealthSnapshot::listing(self.store.all(), (targets, credentials), Instant::now())
    }

    /// Forgets what is known of `target` and of the given credentials (its provider's): a
    /// reset by an operator. Returns what the reset announces: the circuit closing, each
    /// status change to `unknown` (reason `reset`) and the recoveries.
    pub fn reset(&self, target: &Target, credentials: &[CredentialId]) -> Vec<HealthEvent> {
        let mut events = Vec::new();
        self.store.update(target, credentials, &mut |records| {
            events.clear();
            let now = Instant::now();
            breaker::drive(&mut records.target, target, BreakerInput::Reset, &self.settings, &mut events);
            // The records are forgotten; the change is applied to the taken copies only to
            // learn what it announces.
            let mut forgotten = std::mem::take(&mut records.target);
            StatusChange::new(Subject::Target(target.clone()), HealthStatus::Unknown, "reset", now)
                .apply(&mut forgotten, &mut events);
            for (c, id) in records.credentials.iter_mut().zip(credentials) {
                let mut forgotten = std::mem::take(c);
                StatusChange::new(Subject::Credential(id.clone()), HealthStatus::Unknown, "reset", now)
                    .apply(&mut forgotten, &mut events);
            }
        });
        self.store.forget(target, credentials);
        events
    }

    /// Forgets everything: every target and credential is `unknown` again. Returns the circuits
    /// closing and the recoveries, but no status-change events, unlike [`reset`](Self::reset).
    pub fn reset_all(&self) -> Vec<HealthEvent> {
        let (targets, credentials) = self.store.all();
        self.store.clear();
        let mut events = Vec::new();
        for (target, mut record) in targets {
            breaker::drive(&mut record, &target, BreakerInput::Reset, &self.settings, &mut events);
            recovery_events(Subject::Target(target), record.status, &mut events);
        }
        for (id, record) in credentials {
            recovery_events(Subject::Credential(id), record.status, &mut events);
        }
        events
    }
}

/// The gate of a store that returned without running the decision: refuse rather than call a
/// target whose health is unknown to the store.
fn unanswered() -> Gate {
    Gate::Skip { exhausted: false, until: None, reason: "health store did not answer".into() }
}
