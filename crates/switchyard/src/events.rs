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
    pub kind: EventKind,
}

/// What happened. Events name targets and credential ids, never keys.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// One attempt failed; `will_retry` says whether the same target is tried again.
    AttemptFailed {
        target: Target,
        credential_id: Option<CredentialId>,
        error: ProviderError,
        will_retry: bool,
    },
    /// The router moved from one target to the next.
    ProviderSwitch {
        from: Target,
        to: Target,
        reason: Option<ErrorKind>,
    },
    /// A target's or credential's status changed.
    HealthChanged {
        subject: Subject,
        from: HealthStatus,
        to: HealthStatus,
        reason: String,
    },
    /// A target or credential ran out of quota; `until` when the provider said.
    Exhausted {
        subject: Subject,
        until: Option<Instant>,
    },
    /// A target or credential left a non-available state through a success or a reset.
    Recovered {
        subject: Subject,
        from: HealthStatus,
    },
    /// A target or credential left the exhausted state.
    CapacityRestored {
        subject: Subject,
    },
    CircuitOpened {
        target: Target,
        open_for: Duration,
        consecutive_failures: u32,
    },
    CircuitHalfOpen {
        target: Target,
    },
    CircuitClosed {
        target: Target,
    },
    /// Every target and candidate of a request failed.
    AllTargetsFailed {
        route: String,
        attempts: usize,
        last: Option<ErrorKind>,
    },
    /// The pacer held a request back before sending it.
    RateLimitWaited {
        provider: Arc<str>,
        credential_id: CredentialId,
        waited: Duration,
        reason: WaitReason,
    },
    CandidateStarted {
        name: Arc<str>,
    },
    CandidateSucceeded {
        name: Arc<str>,
    },
    CandidateFailed {
        name: Arc<str>,
        detail: String,
    },
}

impl EventKind {
    /// A short snake_case name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::AttemptFailed { .. } => "attempt_failed",
            EventKind::ProviderSwitch { .. } => "provider_switch",
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
        }
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
