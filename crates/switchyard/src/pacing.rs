//! The seam for client-side pacing: the router asks a [`Pacer`] for a permit before each call
//! and holds it for the whole exchange, streams included.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::ProviderError;
use crate::credential::CredentialId;
use crate::events::WaitReason;
use crate::provider::BoxFuture;

/// What the router asks a pacer for.
#[derive(Debug, Clone, Copy)]
pub struct PaceRequest<'a> {
    pub provider: &'a str,
    pub credential_id: &'a CredentialId,
    /// A rough size of the request in tokens (prompt estimate plus `max_tokens`).
    pub estimated_tokens: u32,
    /// The request's deadline: a pacer that cannot admit the call before it fails fast.
    pub deadline: Option<Instant>,
}

/// Leave to send one call. Dropping it releases whatever it holds (a concurrency slot, a
/// token reservation).
pub struct Permit {
    /// How long the call waited for this permit.
    pub waited: Duration,
    /// Why it waited, when it did.
    pub reason: Option<WaitReason>,
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Permit {
    /// A permit that waited `waited` for `reason` and holds `guard` until dropped.
    pub fn new(
        waited: Duration,
        reason: Option<WaitReason>,
        guard: Option<Box<dyn Any + Send + Sync>>,
    ) -> Self {
        Self { waited, reason, guard }
    }

    /// A permit given at once, holding nothing.
    pub fn immediate() -> Self {
        Self { waited: Duration::ZERO, reason: None, guard: None }
    }

    /// Whether the permit holds a resource that dropping it releases.
    pub fn holds_guard(&self) -> bool {
        self.guard.is_some()
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("waited", &self.waited)
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

/// Decides when a call may be sent. With no pacer configured, the router sends at once and
/// pays nothing for pacing.
pub trait Pacer: Send + Sync + 'static {
    /// Waits until the call may go, or fails (typically `rate_limited`) when it cannot go in
    /// time. Must be cancel-safe: a dropped future gives back what it reserved.
    fn acquire<'a>(&'a self, request: PaceRequest<'a>) -> BoxFuture<'a, Result<Permit, ProviderError>>;
}
