//! Client-side pacing: the router asks a [`Pacer`] for a permit before each call and holds it
//! for the whole exchange, streams included. [`LimitPacer`] is the pacer of configured limits
//! (concurrency, requests and tokens per minute, a minimum interval, the provider's own
//! rate-limit headers); with no limits configured the router has no pacer at all and pays
//! nothing for pacing.

pub mod fleet;
mod headers;
mod lane;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::ProviderError;
use crate::credential::CredentialId;
use crate::provider::BoxFuture;
use crate::ratelimit::RateLimits;

use fleet::{FleetPacing, FleetSink};
pub use headers::{Dispatch, Stated};
use lane::Lane;
pub use lane::{HeadersSnapshot, LaneSnapshot, StatedSnapshot};

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

/// Limits of one provider (or, with `per_credential`, of each of its keys).
///
/// ```
/// use std::time::Duration;
/// use switchyard::pacing::Limits;
///
/// let limits = Limits { max_concurrent: Some(8), requests_per_minute: Some(300), ..Limits::default() };
/// assert!(limits.is_set());
/// assert!(!Limits::default().is_set());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Most calls in flight at once; the permit is held for the whole exchange.
    pub max_concurrent: Option<u32>,
    /// Sustained request rate: a token bucket holding about one second's share as a burst.
    pub requests_per_minute: Option<u32>,
    /// Sustained token rate: each call reserves its estimate, corrected by the answer's usage.
    pub tokens_per_minute: Option<u32>,
    /// Smallest gap between two dispatches.
    pub min_interval: Duration,
    /// Slow down when the provider's headers say its window is nearly spent. Default on.
    pub respect_headers: bool,
    /// Share of every stated allowance to leave untouched for other consumers of the key.
    pub reserve_fraction: f64,
    /// The longest wait any provider header can impose (a skewed clock or a garbled header
    /// costs at most this). Default 60 s.
    pub max_header_wait: Duration,
    /// One allowance per key instead of one for the whole provider.
    pub per_credential: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrent: None,
            requests_per_minute: None,
            tokens_per_minute: None,
            min_interval: Duration::ZERO,
            respect_headers: true,
            reserve_fraction: 0.0,
            max_header_wait: Duration::from_secs(60),
            per_credential: false,
        }
    }
}

impl Limits {
    /// Whether any limit is set (`respect_headers` alone paces nothing until a provider speaks).
    pub fn is_set(&self) -> bool {
        self.max_concurrent.is_some()
            || self.requests_per_minute.is_some()
            || self.tokens_per_minute.is_some()
            || !self.min_interval.is_zero()
    }
}

/// The pacer of configured limits, one lane per provider (or per key).
pub struct LimitPacer {
    providers: HashMap<Arc<str>, ProviderLanes>,
}

struct ProviderLanes {
    limits: Limits,
    shared: Option<Arc<Lane>>,
    per_key: std::sync::Mutex<HashMap<CredentialId, Arc<Lane>>>,
    fleet: Option<Arc<dyn FleetPacing>>,
}

impl ProviderLanes {
    fn lane(&self, provider: &str, credential: &CredentialId) -> Arc<Lane> {
        if let Some(lane) = &self.shared {
            return lane.clone();
        }
        let mut lanes = self.per_key.lock().unwrap_or_else(|p| p.into_inner());
        lanes
            .entry(credential.clone())
            .or_insert_with(|| {
                Arc::new(Lane::new(
                    provider,
                    Some(credential.clone()),
                    self.limits.clone(),
                    self.fleet.clone(),
                ))
            })
            .clone()
    }

    /// Every lane made so far.
    fn each(&self, mut visit: impl FnMut(&Lane)) {
        if let Some(lane) = &self.shared {
            visit(lane);
        }
        for lane in self.per_key.lock().unwrap_or_else(|p| p.into_inner()).values() {
            visit(lane);
        }
    }
}

impl fmt::Debug for LimitPacer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitPacer").field("providers", &self.providers.keys().collect::<Vec<_>>()).finish()
    }
}

impl LimitPacer {
    /// A pacer for these providers' limits. Providers not named are not paced.
    pub fn new(limits: impl IntoIterator<Item = (String, Limits)>) -> Self {
        Self::build(limits, None)
    }

    /// A pacer whose requests and tokens per minute, header budgets and 429 holds are one
    /// allowance for every replica sharing `fleet` (see [`fleet`]). `max_concurrent` and
    /// `min_interval` stay this replica's own.
    pub fn shared(
        limits: impl IntoIterator<Item = (String, Limits)>,
        fleet: Arc<dyn FleetPacing>,
    ) -> Arc<Self> {
        let pacer = Arc::new(Self::build(limits, Some(fleet.clone())));
        let sink: Weak<dyn FleetSink> = Arc::downgrade(&pacer) as Weak<dyn FleetSink>;
        fleet.watch(sink);
        pacer
    }

    fn build(
        limits: impl IntoIterator<Item = (String, Limits)>,
        fleet: Option<Arc<dyn FleetPacing>>,
    ) -> Self {
        let providers = limits
            .into_iter()
            .map(|(provider, limits)| {
                let shared = (!limits.per_credential)
                    .then(|| Arc::new(Lane::new(&provider, None, limits.clone(), fleet.clone())));
                let lanes =
                    ProviderLanes { limits, shared, per_key: Default::default(), fleet: fleet.clone() };
                (provider.into(), lanes)
            })
            .collect();
        Self { providers }
    }

    /// The lane named `key` in the fleet (`provider` or `provider/credential`), if made.
    fn with_fleet_lane(&self, key: &str, visit: impl FnOnce(&Lane)) {
        let provider = key.split_once('/').map_or(key, |(provider, _)| provider);
        let Some(lanes) = self.providers.get(provider) else { return };
        let mut visit = Some(visit);
        lanes.each(|lane| {
            if lane.fleet_key() == Some(key)
                && let Some(visit) = visit.take()
            {
                visit(lane);
            }
        });
    }
}

impl FleetSink for LimitPacer {
    fn held(&self, lane: &str, hold: Duration) {
        self.with_fleet_lane(lane, |lane| lane.held_by_fleet(hold));
    }

    fn window_opened(&self, lane: &str, header: usize) {
        self.with_fleet_lane(lane, |lane| lane.window_opened(header));
    }

    fn surrender(&self) {
        for lanes in self.providers.values() {
            lanes.each(Lane::surrender);
        }
    }
}

impl Pacer for LimitPacer {
    fn acquire<'a>(&'a self, request: PaceRequest<'a>) -> BoxFuture<'a, Result<Permit, ProviderError>> {
        let lane = self
            .providers
            .get(request.provider)
            .map(|lanes| lanes.lane(request.provider, request.credential_id));
        Box::pin(async move {
            match lane {
                None => Ok(Permit::immediate()),
                Some(lane) => lane.acquire(request).await,
            }
        })
    }

    fn observe_answer(
        &self,
        provider: &str,
        credential_id: &CredentialId,
        answer_to: Option<Dispatch>,
        limits: &RateLimits,
    ) {
        if let Some(lanes) = self.providers.get(provider) {
            lanes.lane(provider, credential_id).observe(answer_to, limits);
        }
    }

    fn snapshot(&self) -> Vec<LaneSnapshot> {
        let mut lanes: Vec<LaneSnapshot> = Vec::new();
        for lanes_of in self.providers.values() {
            lanes_of.each(|lane| lanes.push(lane.snapshot()));
        }
        lanes.sort_by(|a, b| (&a.provider, &a.credential_id).cmp(&(&b.provider, &b.credential_id)));
        lanes
    }
}
