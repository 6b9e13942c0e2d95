//! # switchyard-pacing
//!
//! The pacer of configured limits for Switchyard's router: [`LimitPacer`] implements the
//! engine's [`Pacer`] seam with one lane per provider (or per key), each holding its
//! concurrency slots, request and token buckets, minimum interval, and the budget the
//! provider's own rate-limit headers state; and, with [`LimitPacer::shared`], one allowance
//! for a fleet of replicas leased through a [`fleet::FleetPacing`] store (`switchyard-state`
//! implements it over Redis).
//!
//! ```
//! use std::sync::Arc;
//! use switchyard::route::Route;
//! use switchyard::simulated::SimulatedProvider;
//! use switchyard::{ProviderEntry, Router};
//! use switchyard_pacing::{LimitPacer, Limits};
//!
//! let limits = Limits { max_concurrent: Some(8), requests_per_minute: Some(300), ..Limits::default() };
//! let router = Router::builder()
//!     .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
//!     .route(Route::builder("default").target("sim:model").build().unwrap())
//!     .pacer(Arc::new(LimitPacer::new([("sim".to_owned(), limits)])))
//!     .build()
//!     .unwrap();
//! assert_eq!(router.pacing().len(), 1, "one lane, for the provider `sim`");
//! ```

#![warn(missing_docs)]

mod bucket;
pub mod fleet;
mod headers;
mod lane;
mod limits;
mod slots;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use switchyard::ProviderError;
use switchyard::credential::CredentialId;
use switchyard::pacing::{Dispatch, LaneSnapshot, PaceRequest, Pacer, Permit};
use switchyard::provider::BoxFuture;
use switchyard::ratelimit::RateLimits;

use fleet::{FleetPacing, FleetSink};
pub use headers::Stated;
use lane::Lane;
pub use limits::Limits;

/// The pacer of configured limits, one lane per provider (or per key).
pub struct LimitPacer {
    /// Each paced provider's lanes; shared with the pacer of the next configuration while the
    /// provider's limits are unchanged ([`LimitPacer::reconfigured`]).
    providers: HashMap<Arc<str>, Arc<ProviderLanes>>,
    fleet: Option<Arc<dyn FleetPacing>>,
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
                    None,
                ))
            })
            .clone()
    }

    /// The concurrency slots of each key's lane.
    fn keys_slots(&self) -> Vec<(CredentialId, Arc<slots::Slots>)> {
        let lanes = self.per_key.lock().unwrap_or_else(|p| p.into_inner());
        lanes.iter().map(|(id, lane)| (id.clone(), lane.slots().clone())).collect()
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
        Self::build_over(limits, fleet, &HashMap::new())
    }

    /// A pacer of `limits` whose providers of unchanged limits keep the lanes of `kept`.
    fn build_over(
        limits: impl IntoIterator<Item = (String, Limits)>,
        fleet: Option<Arc<dyn FleetPacing>>,
        kept: &HashMap<Arc<str>, Arc<ProviderLanes>>,
    ) -> Self {
        let providers = limits
            .into_iter()
            .map(|(provider, limits)| {
                let provider: Arc<str> = provider.into();
                let before = kept.get(&provider);
                if let Some(lanes) = before.filter(|lanes| lanes.limits == limits) {
                    return (provider, lanes.clone());
                }
                // Limits changed: the calls in flight count against the new ones, on the slots
                // they hold (per key or for the provider, as before).
                let before = before.filter(|lanes| lanes.limits.per_credential == limits.per_credential);
                let shared = (!limits.per_credential).then(|| {
                    let slots =
                        before.and_then(|lanes| lanes.shared.as_ref()).map(|lane| lane.slots().clone());
                    Arc::new(Lane::new(&provider, None, limits.clone(), fleet.clone(), slots))
                });
                let per_key = before.map(|lanes| lanes.keys_slots()).unwrap_or_default().into_iter();
                let per_key = per_key.map(|(key, slots)| {
                    let lane =
                        Lane::new(&provider, Some(key.clone()), limits.clone(), fleet.clone(), Some(slots));
                    (key, Arc::new(lane))
                });
                let per_key = std::sync::Mutex::new(per_key.collect());
                (provider, Arc::new(ProviderLanes { limits, shared, per_key, fleet: fleet.clone() }))
            })
            .collect();
        Self { providers, fleet }
    }

    /// The pacer of a new configuration's `limits`: a provider whose limits are unchanged
    /// keeps its lanes as they are (what its buckets hold, what its headers said, its holds,
    /// the fleet's slices in hand, the calls in flight); a provider whose limits changed, or
    /// a new one, starts with fresh lanes, but the concurrency slots of the lanes it had stay
    /// (bounded anew: the calls in flight count against the new `max_concurrent`, and callers
    /// queued for a slot have a raised bound's room at once). Lanes of providers no longer paced (or paced
    /// anew) give their unspent fleet slices back. With a fleet, the new pacer is the one the
    /// fleet tells of holds and windows from now on. This pacer keeps working for the calls
    /// still running on it.
    ///
    /// ```
    /// use switchyard_pacing::{LimitPacer, Limits};
    ///
    /// let rpm = |n| Limits { requests_per_minute: Some(n), ..Limits::default() };
    /// let pacer = LimitPacer::new([("a".to_owned(), rpm(60)), ("b".to_owned(), rpm(60))]);
    /// let next = pacer.reconfigured([("a".to_owned(), rpm(60)), ("b".to_owned(), rpm(120))]);
    /// assert!(next.keeps_lanes_of(&pacer, "a") && !next.keeps_lanes_of(&pacer, "b"));
    /// ```
    pub fn reconfigured(&self, limits: impl IntoIterator<Item = (String, Limits)>) -> Arc<Self> {
        let next = self.following(limits);
        next.take_over(self);
        next
    }

    /// [`LimitPacer::reconfigured`] in two steps, for a caller that may still give the new
    /// limits up: the pacer of `limits`, built over this one's lanes, that changes nothing of
    /// this pacer until it [takes over](LimitPacer::take_over). Until then the calls this
    /// pacer runs keep their bounds, its fleet slices and its place in the fleet.
    pub fn following(&self, limits: impl IntoIterator<Item = (String, Limits)>) -> Arc<Self> {
        Arc::new(Self::build_over(limits, self.fleet.clone(), &self.providers))
    }

    /// Puts this pacer, made by `previous`'s [`LimitPacer::following`], in `previous`'s
    /// place: the concurrency slots it carried are bounded by its limits, the lanes it did not
    /// keep give their fleet slices back, and the fleet tells this pacer of holds and windows.
    pub fn take_over(self: &Arc<Self>, previous: &LimitPacer) {
        for (provider, lanes) in &self.providers {
            if !self.keeps_lanes_of(previous, provider) {
                lanes.each(Lane::bind_slots);
            }
        }
        for (provider, lanes) in &previous.providers {
            if !self.keeps_lanes_of(previous, provider) {
                lanes.each(Lane::surrender);
            }
        }
        if let Some(fleet) = &self.fleet {
            fleet.watch(Arc::downgrade(self) as Weak<dyn FleetSink>);
        }
    }

    /// Whether this pacer paces `provider` on the very lanes `other` does.
    pub fn keeps_lanes_of(&self, other: &LimitPacer, provider: &str) -> bool {
        match (self.providers.get(provider), other.providers.get(provider)) {
            (Some(mine), Some(theirs)) => Arc::ptr_eq(mine, theirs),
            _ => false,
        }
    }

    /// Drops the per-key lanes of keys `keep` turns down (a rotated or removed key: its
    /// allowance was its own).
    pub fn retain_keys(&self, keep: impl Fn(&str, &CredentialId) -> bool) {
        for (provider, lanes) in &self.providers {
            let mut per_key = lanes.per_key.lock().unwrap_or_else(|p| p.into_inner());
            per_key.retain(|id, lane| {
                let kept = keep(provider, id);
                if !kept {
                    lane.surrender();
                }
                kept
            });
        }
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
