//! Client-side pacing's seam: the router asks a [`Pacer`] for a permit before each call and
//! holds it for the whole exchange, streams included, and tells it what each answer's
//! rate-limit headers said. The pacer of configured limits (concurrency, requests and tokens
//! per minute, a minimum interval, the provider's own rate-limit headers, one allowance for a
//! fleet of replicas) is `LimitPacer`, in the `switchyard-pacing` crate; with no limits
//! configured the router has no pacer at all and pays nothing for pacing.

mod snapshot;

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::ProviderError;
use crate::credential::CredentialId;
use crate::provider::BoxFuture;
use crate::ratelimit::RateLimits;

pub use snapshot::{FleetLevels, FleetSnapshot, HeadersSnapshot, LaneSnapshot, StatedSnapshot};

/// A call's place in its lane's dispatch order: handed out with a permit
/// ([`Permit::dispatch`]) and given back with the call's answer ([`Pacer::observe_answer`]), so
/// that the pacer knows which of its calls in flight the answer's headers counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dispatch(u64);

impl Dispatch {
    /// The call numbered `sequence` in its lane's order (later calls get higher numbers).
    pub const fn new(sequence: u64) -> Self {
        Self(sequence)
    }
}

/// Why the pacer held a request back; reported in [`Permit::reason`] and in the router's
/// `RateLimitWaited` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Every concurrency slot of the lane was taken.
    Concurrency,
    /// The minimum interval since the previous call had not passed.
    Interval,
    /// The requests-per-minute budget was spent.
    Rpm,
    /// The tokens-per-minute budget could not cover the request's estimate.
    Tpm,
    /// The provider's own rate-limit headers said to wait.
    ProviderHeaders,
}

impl WaitReason {
    /// The snake_case name, the same as the serialized form, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Concurrency => "concurrency",
            WaitReason::Interval => "interval",
            WaitReason::Rpm => "rpm",
            WaitReason::Tpm => "tpm",
            WaitReason::ProviderHeaders => "provider_headers",
        }
    }
}

/// What the router asks a pacer for.
#[derive(Debug, Clone, Copy)]
pub struct PaceRequest<'a> {
    /// The provider's id: its lane.
    pub provider: &'a str,
    /// The key the call will use (its lane, with `per_credential`).
    pub credential_id: &'a CredentialId,
    /// A rough size of the request in tokens (prompt estimate plus `max_tokens`).
    pub estimated_tokens: u32,
    /// The request's deadline: a pacer that cannot admit the call before it fails fast.
    pub deadline: Option<Instant>,
    /// Give up (with a rate-limit error) rather than wait longer than this: set when the route
    /// spills over to its next target instead of waiting.
    pub spill_after: Option<Duration>,
}

/// What a permit releases or corrects when the call is over.
pub trait PermitGuard: Send + Sync {
    /// The call is over: `used_tokens` is what the provider counted, or `None` when the call
    /// failed (a token reservation is then refunded).
    fn settle(&mut self, used_tokens: Option<u32>);
}

/// Leave to send one call. Dropping it releases what it holds (a concurrency slot); settle it
/// first to correct a token reservation.
pub struct Permit {
    /// How long the call waited for this permit.
    pub waited: Duration,
    /// Why it waited, when it did.
    pub reason: Option<WaitReason>,
    /// The call's place in its lane's dispatch order, for [`Pacer::observe_answer`].
    pub dispatch: Option<Dispatch>,
    guard: Option<Box<dyn PermitGuard>>,
}

impl Permit {
    /// A permit that waited `waited` for `reason` and holds `guard` until dropped.
    pub fn new(waited: Duration, reason: Option<WaitReason>, guard: Option<Box<dyn PermitGuard>>) -> Self {
        Self { waited, reason, dispatch: None, guard }
    }

    /// The same permit, for the call dispatched as `dispatch`.
    pub fn with_dispatch(mut self, dispatch: Dispatch) -> Self {
        self.dispatch = Some(dispatch);
        self
    }

    /// A permit given at once, holding nothing.
    pub fn immediate() -> Self {
        Self { waited: Duration::ZERO, reason: None, dispatch: None, guard: None }
    }

    /// Whether the permit holds a resource that dropping it releases.
    pub fn holds_guard(&self) -> bool {
        self.guard.is_some()
    }

    /// Ends the call: corrects (or, with `None`, refunds) the token reservation.
    pub fn settle(&mut self, used_tokens: Option<u32>) {
        if let Some(guard) = self.guard.as_mut() {
            guard.settle(used_tokens);
        }
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

/// Decides when a call may be sent.
pub trait Pacer: Send + Sync + 'static {
    /// Waits until the call may go, or fails (`rate_limited`) when it cannot go in time. Must be
    /// cancel-safe: a dropped future gives back what it reserved.
    fn acquire<'a>(&'a self, request: PaceRequest<'a>) -> BoxFuture<'a, Result<Permit, ProviderError>>;

    /// What a provider said about its allowance in one response's headers, from no known
    /// call (taken as the newest word).
    fn observe(&self, provider: &str, credential_id: &CredentialId, limits: &RateLimits) {
        self.observe_answer(provider, credential_id, None, limits);
    }

    /// What a provider said about its allowance in the answer to the call dispatched as
    /// `answer_to` (its permit's [`Permit::dispatch`]): the pacer then counts that call as
    /// answered, no longer in flight against the stated budget.
    fn observe_answer(
        &self,
        provider: &str,
        credential_id: &CredentialId,
        answer_to: Option<Dispatch>,
        limits: &RateLimits,
    ) {
        let _ = (provider, credential_id, answer_to, limits);
    }

    /// The current allowance of every paced provider, for operators.
    fn snapshot(&self) -> Vec<LaneSnapshot> {
        Vec::new()
    }
}
