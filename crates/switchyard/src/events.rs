//! Typed events on a bus that any number of subscribers read.
//!
//! Publishing never waits: the bus is a bounded ring, and a subscriber that falls behind loses
//! the oldest events (and can see how many) instead of slowing routing down. The router
//! publishes only after it has released every internal lock, so subscriber code never runs
//! under one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use switchyard::events::{EventBus, EventKind};
//!
//! let bus = EventBus::new(64);
//! let mut events = bus.subscribe();
//! bus.publish(EventKind::CandidateStarted { name: "apology".into() });
//! let event = events.recv().await.unwrap();
//! assert!(matches!(event.kind, EventKind::CandidateStarted { .. }));
//! # }
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::credential::CredentialId;
use crate::health::{HealthEvent, HealthStatus, Subject};
use crate::{ErrorKind, ProviderError, Target};

/// Kept here too: `switchyard::events::WaitReason` predates the type's move to [`crate::pacing`].
pub use crate::pacing::WaitReason;

/// One event: when it happened and what.
#[derive(Debug, Clone)]
pub struct Event {
    /// On the router's clock (tokio's, so paused-time tests see exact offsets).
    pub at: Instant,
    /// Wall-clock time, for logs.
    pub wall: SystemTime,
    /// What happened.
    pub kind: EventKind,
}

/// What happened. Events name targets and credential ids, never keys.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// One attempt failed; `will_retry` says whether the same target is tried again.
    AttemptFailed {
        /// The target called.
        target: Target,
        /// The credential used, when the provider has keys.
        credential_id: Option<CredentialId>,
        /// The classified failure, redacted.
        error: ProviderError,
        /// Whether the router tries the same target again (a retry or its next key).
        will_retry: bool,
    },
    /// A hedge started: `first` had not answered after `after`, so `hedge` was called beside it.
    HedgeStarted {
        /// The route.
        route: String,
        /// The slow first attempt's target.
        first: Target,
        /// The hedge's target.
        hedge: Target,
        /// How long the first attempt had run.
        after: Duration,
    },
    /// A hedge answered before the attempt it was started beside.
    HedgeWon {
        /// The route.
        route: String,
        /// The hedge's target, which answered.
        hedge: Target,
        /// The first attempt's target, cancelled.
        first: Target,
    },
    /// The router moved from one target to the next.
    ProviderSwitch {
        /// The target tried before.
        from: Target,
        /// The target tried now.
        to: Target,
        /// The kind of the failure that made it move, if one did.
        reason: Option<ErrorKind>,
    },
    /// A target's or credential's status changed.
    HealthChanged {
        /// Whose status.
        subject: Subject,
        /// The status before.
        from: HealthStatus,
        /// The status now.
        to: HealthStatus,
        /// The failure that caused it (empty on a success, `reset` on an operator's reset).
        reason: String,
    },
    /// A target or credential ran out of quota; `until` when the provider said.
    Exhausted {
        /// What ran out.
        subject: Subject,
        /// When the quota resets, if the provider said.
        until: Option<Instant>,
    },
    /// A target or credential left a non-available state through a success or a reset.
    Recovered {
        /// What recovered.
        subject: Subject,
        /// The status it left.
        from: HealthStatus,
    },
    /// A target or credential left the exhausted state.
    CapacityRestored {
        /// What has capacity again.
        subject: Subject,
    },
    /// A target's circuit opened: calls are refused for `open_for`.
    CircuitOpened {
        /// The target whose circuit opened.
        target: Target,
        /// How long calls are refused before a probe (grows with each failed probe).
        open_for: Duration,
        /// Breaker-counted failures in a row that opened it.
        consecutive_failures: u32,
    },
    /// An open circuit let its first probe through.
    CircuitHalfOpen {
        /// The target being probed.
        target: Target,
    },
    /// A circuit that was open or half-open closed again (a success or a reset).
    CircuitClosed {
        /// The target whose circuit closed.
        target: Target,
    },
    /// Every target and candidate of a request failed.
    AllTargetsFailed {
        /// The route that governed the request.
        route: String,
        /// How many attempts the trail holds.
        attempts: usize,
        /// The kind of the last failure (`None` when every target was skipped).
        last: Option<ErrorKind>,
    },
    /// The pacer held a request back before sending it.
    RateLimitWaited {
        /// The paced provider.
        provider: Arc<str>,
        /// The key whose lane it waited in.
        credential_id: CredentialId,
        /// How long it waited.
        waited: Duration,
        /// Which limit held it longest.
        reason: WaitReason,
    },
    /// A candidate (a non-provider fallback) is being tried.
    CandidateStarted {
        /// The candidate's name in the route.
        name: Arc<str>,
    },
    /// A candidate answered.
    CandidateSucceeded {
        /// The candidate's name in the route.
        name: Arc<str>,
    },
    /// A candidate failed; the next one (or the all-failed error) follows.
    CandidateFailed {
        /// The candidate's name in the route.
        name: Arc<str>,
        /// What went wrong, as the candidate said.
        detail: String,
    },
    /// The shared health store (Redis) stopped answering: this replica carries on from its own
    /// memory, and writes what it learns back when the store returns.
    SharedStateDegraded {
        /// Why, with no password in it.
        reason: String,
    },
    /// The shared health store answers again: this replica resynced and wrote back what it
    /// learned meanwhile.
    SharedStateRestored,
    /// A new configuration was swapped in ([`Router::reconfigure`](crate::Router::reconfigure)):
    /// requests from now on use it, those running finish on the one they started with.
    ConfigReloaded {
        /// A hash of the new configuration, as the operator's view shows it.
        hash: String,
        /// What changed, one line each (`routes.fast: added`).
        changes: Vec<String>,
    },
    /// A new configuration was refused: the running one stays.
    ConfigRejected {
        /// A hash of the refused configuration.
        hash: String,
        /// Every problem found, each as `key.path: what is wrong and the fix`.
        problems: Vec<String>,
    },
}

impl EventKind {
    /// A short snake_case name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::AttemptFailed { .. } => "attempt_failed",
            EventKind::ProviderSwitch { .. } => "provider_switch",
            EventKind::HedgeStarted { .. } => "hedge_started",
            EventKind::HedgeWon { .. } => "hedge_won",
            EventKind::HealthChanged { .. } => "health_changed",
            EventKind::Exhausted { .. } => "exhausted",
            EventKind::Recovered { .. } => "provider_recovered",
            EventKind::CapacityRestored { .. } => "capacity_restored",
            EventKind::CircuitOpened { .. } => "circuit_opened",
            EventKind::CircuitHalfOpen { .. } => "circuit_half_open",
            EventKind::CircuitClosed { .. } => "circuit_closed",
            EventKind::AllTargetsFailed { .. } => "all_targets_failed",
            EventKind::RateLimitWaited { .. } => "rate_limit_waited",
            EventKind::CandidateStarted { .. } => "candidate_started",
            EventKind::CandidateSucceeded { .. } => "candidate_succeeded",
            EventKind::CandidateFailed { .. } => "candidate_failed",
            EventKind::SharedStateDegraded { .. } => "shared_state_degraded",
            EventKind::SharedStateRestored => "shared_state_restored",
            EventKind::ConfigReloaded { .. } => "config_reloaded",
            EventKind::ConfigRejected { .. } => "config_rejected",
        }
    }
}

/// An event as JSON, for streams and logs: `event` (its [`EventKind::name`]), `time_ms` (Unix
/// milliseconds) and the kind's fields. Durations are milliseconds; an instant is how long
/// after the event it falls (`until_ms`). Targets and credential ids, never keys.
impl serde::Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("event", self.kind.name())?;
        let unix = self.wall.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        map.serialize_entry("time_ms", &(unix.as_millis() as u64))?;
        let ms = crate::trail::millis;
        match &self.kind {
            EventKind::AttemptFailed { target, credential_id, error, will_retry } => {
                map.serialize_entry("target", target)?;
                map.serialize_entry("credential_id", credential_id)?;
                map.serialize_entry("error", &crate::trail::ErrorView(error))?;
                map.serialize_entry("will_retry", will_retry)?;
            }
            EventKind::HedgeStarted { route, first, hedge, after } => {
                map.serialize_entry("route", route)?;
                map.serialize_entry("first", first)?;
                map.serialize_entry("hedge", hedge)?;
                map.serialize_entry("after_ms", &ms(*after))?;
            }
            EventKind::HedgeWon { route, hedge, first } => {
                map.serialize_entry("route", route)?;
                map.serialize_entry("hedge", hedge)?;
                map.serialize_entry("first", first)?;
            }
            EventKind::ProviderSwitch { from, to, reason } => {
                map.serialize_entry("from", from)?;
                map.serialize_entry("to", to)?;
                map.serialize_entry("reason", reason)?;
            }
            EventKind::HealthChanged { subject, from, to, reason } => {
                subject_entries(&mut map, subject)?;
                map.serialize_entry("from", from)?;
                map.serialize_entry("to", to)?;
                map.serialize_entry("reason", reason)?;
            }
            EventKind::Exhausted { subject, until } => {
                subject_entries(&mut map, subject)?;
                let until = until.map(|u| ms(u.saturating_duration_since(self.at)));
                map.serialize_entry("until_ms", &until)?;
            }
            EventKind::Recovered { subject, from } => {
                subject_entries(&mut map, subject)?;
                map.serialize_entry("from", from)?;
            }
            EventKind::CapacityRestored { subject } => subject_entries(&mut map, subject)?,
            EventKind::CircuitOpened { target, open_for, consecutive_failures } => {
                map.serialize_entry("target", target)?;
                map.serialize_entry("open_for_ms", &ms(*open_for))?;
                map.serialize_entry("consecutive_failures", consecutive_failures)?;
            }
            EventKind::CircuitHalfOpen { target } | EventKind::CircuitClosed { target } => {
                map.serialize_entry("target", target)?;
            }
            EventKind::AllTargetsFailed { route, attempts, last } => {
                map.serialize_entry("route", route)?;
                map.serialize_entry("attempts", attempts)?;
                map.serialize_entry("last", last)?;
            }
            EventKind::RateLimitWaited { provider, credential_id, waited, reason } => {
                map.serialize_entry("provider", &**provider)?;
                map.serialize_entry("credential_id", credential_id)?;
                map.serialize_entry("waited_ms", &ms(*waited))?;
                map.serialize_entry("reason", reason)?;
            }
            EventKind::CandidateStarted { name } | EventKind::CandidateSucceeded { name } => {
                map.serialize_entry("candidate", &**name)?;
            }
            EventKind::CandidateFailed { name, detail } => {
                map.serialize_entry("candidate", &**name)?;
                map.serialize_entry("detail", detail)?;
            }
            EventKind::SharedStateDegraded { reason } => map.serialize_entry("reason", reason)?,
            EventKind::SharedStateRestored => {}
            EventKind::ConfigReloaded { hash, changes } => hashed(&mut map, hash, ("changes", changes))?,
            EventKind::ConfigRejected { hash, problems } => hashed(&mut map, hash, ("problems", problems))?,
        }
        map.end()
    }
}

/// A configuration's `hash` and the lines of what befell it (`changes`, `problems`).
fn hashed<M: serde::ser::SerializeMap>(
    map: &mut M,
    hash: &str,
    lines: (&str, &[String]),
) -> Result<(), M::Error> {
    map.serialize_entry("hash", hash)?;
    map.serialize_entry(lines.0, lines.1)
}

/// `target` or `credential_id`, as the subject is.
fn subject_entries<M: serde::ser::SerializeMap>(map: &mut M, subject: &Subject) -> Result<(), M::Error> {
    match subject {
        Subject::Target(target) => map.serialize_entry("target", target),
        Subject::Credential(id) => map.serialize_entry("credential_id", id),
    }
}

impl From<HealthEvent> for EventKind {
    fn from(event: HealthEvent) -> Self {
        match event {
            HealthEvent::HealthChanged { subject, from, to, reason } => {
                EventKind::HealthChanged { subject, from, to, reason }
            }
            HealthEvent::Exhausted { subject, until } => EventKind::Exhausted { subject, until },
            HealthEvent::Recovered { subject, from } => EventKind::Recovered { subject, from },
            HealthEvent::CapacityRestored { subject } => EventKind::CapacityRestored { subject },
            HealthEvent::CircuitOpened { target, open_for, consecutive_failures } => {
                EventKind::CircuitOpened { target, open_for, consecutive_failures }
            }
            HealthEvent::CircuitHalfOpen { target } => EventKind::CircuitHalfOpen { target },
            HealthEvent::CircuitClosed { target } => EventKind::CircuitClosed { target },
        }
    }
}

/// The publishing side of the bus. Cheap to clone; all clones publish to the same subscribers.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<Event>>,
}

impl EventBus {
    /// A bus whose subscribers each buffer up to `capacity` events before losing the oldest.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        Self { sender }
    }

    /// Publishes an event to every current subscriber. Never blocks; free when nobody listens.
    pub fn publish(&self, kind: EventKind) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let event = Event { at: Instant::now(), wall: SystemTime::now(), kind };
        // An error only means the last subscriber left in the meantime.
        let _ = self.sender.send(Arc::new(event));
    }

    /// A new subscription that sees every event published from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription { receiver: self.sender.subscribe(), missed: 0 }
    }
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(1024)
    }
}

/// One subscriber's view of the bus.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Arc<Event>>,
    missed: u64,
}

impl Subscription {
    /// The next event, waiting for one; `None` once the bus is gone. Events lost because this
    /// subscriber fell behind are skipped and counted in [`Subscription::missed`].
    pub async fn recv(&mut self) -> Option<Arc<Event>> {
        loop {
            match self.receiver.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(n)) => self.missed += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Event>> {
        loop {
            match self.receiver.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(n)) => self.missed += n,
                Err(_) => return None,
            }
        }
    }

    /// Every event waiting now, without waiting.
    pub fn drain(&mut self) -> Vec<Arc<Event>> {
        std::iter::from_fn(|| self.try_recv()).collect()
    }

    /// How many events this subscriber lost by falling behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }
}
