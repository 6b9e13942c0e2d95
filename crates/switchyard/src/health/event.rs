//! What the board announces. The board returns these instead of publishing them so that it
//! never runs subscriber code under the store's lock, and so that it does not depend on the
//! event bus: the router converts them (`EventKind: From<HealthEvent>`) and publishes them
//! once every lock is released.

use std::time::Duration;

use tokio::time::Instant;

use super::{HealthStatus, Subject};
use crate::Target;

/// A change of health the board made, in the order it made them. Each variant has a
/// same-named, same-shaped `EventKind` variant on the bus.
#[derive(Debug, Clone, PartialEq)]
pub enum HealthEvent {
    /// A target's or credential's status changed; `reason` is the failure that caused it
    /// (empty on a success, `reset` on an operator's reset).
    HealthChanged {
        /// Whose status.
        subject: Subject,
        /// The status before.
        from: HealthStatus,
        /// The status now.
        to: HealthStatus,
        /// The failure that caused it.
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
    /// A target's circuit opened: calls are refused for `open_for`, after
    /// `consecutive_failures` breaker-counted failures in a row.
    CircuitOpened {
        /// The target whose circuit opened.
        target: Target,
        /// How long calls are refused before a probe.
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
}
