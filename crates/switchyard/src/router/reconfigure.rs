//! A router handed a new configuration: the router of the new providers and routes, over what
//! this one has learned. One owner of each store: the health store, the latency board, the
//! event bus, the retry budget and the jitter are handed on, not copied, so the requests still
//! running on the old configuration and those starting on the new one write the same records.
//!
//! What is kept is found by key, the keys the records already have:
//!
//! - a target (`provider:model`) keeps its health, breaker, cooldowns and latency while its
//!   provider's kind and base URL are unchanged (the model is in the key itself, and the
//!   provider's own id of it, `models:`, is unchanged too) and, when the old configuration
//!   named it, the new one names it too;
//! - a credential keeps its record while its [`CredentialId`] is configured: the id hashes
//!   kind, base URL and key, so a rotated key or a moved provider is a new credential; a
//!   target exhausted because every key of its provider was is forgotten when the provider
//!   gets a key it did not have (that key has not been refused);
//! - a route that hedges as it did keeps its hedge budget; the retry budget is kept while its
//!   settings are; sessions stay pinned where they were served (a pin to a target no longer
//!   routed to is passed over); which credentials' models refused a stream is kept;
//! - a route's `cache` candidate keeps the answers it remembered while the route and the
//!   candidate keep their names and the candidate its settings.
//!
//! Everything else the old configuration knew is dropped from this process
//! ([`HealthStore::drop_records`](crate::health::HealthStore::drop_records)).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::inner::Inner;
use super::{ConfigError, Router, RouterBuilder};
use crate::Target;
use crate::answer_cache::AnswerCache;
use crate::backoff::Jitter;
use crate::budget::RetryBudget;
use crate::credential::CredentialId;
use crate::events::EventBus;
use crate::health::{HealthBoard, HealthStatus};
use crate::latency::LatencyBoard;

/// What a router is built over: fresh for a new router, handed on by a reconfigured one.
pub(super) struct Kept {
    pub(super) health: HealthBoard,
    pub(super) latency: Arc<LatencyBoard>,
    pub(super) events: EventBus,
    pub(super) budget: Arc<RetryBudget>,
    pub(super) jitter: Arc<Jitter>,
    /// Each hedged route's budget, by route name.
    pub(super) hedges: HashMap<Arc<str>, Arc<RetryBudget>>,
    /// Where sessions were served: a pin to a target the new configuration no longer routes
    /// to is passed over when it is recalled.
    pub(super) pins: Arc<crate::affinity::Pins>,
    /// Which credentials' models refused a stream lately.
    pub(super) stream_refusals: Arc<super::refusals::Refusals>,
    /// Each route's `cache` candidates' answers, by route and candidate name: a candidate of
    /// the same name and settings keeps them.
    pub(super) caches: AnswerCaches,
}

/// `cache` candidates' answers by route and candidate name.
pub(crate) type AnswerCaches = HashMap<(Arc<str>, Arc<str>), Arc<AnswerCache>>;

/// What a reconfiguration forgot: the targets and credentials the old configuration knew that
/// the new one removed or changed. Sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Targets whose records and latency were dropped.
    pub targets: Vec<Target>,
    /// Credentials whose records (and rests of any target) were dropped.
    pub credentials: Vec<CredentialId>,
}

impl Router {
    /// The router of `next`'s providers, routes and settings, keeping what this one learned
    /// of every target and credential `next` leaves unchanged (see the [module](self)), and
    /// the same event bus. `next`'s health store, seed and event capacity are not used: the
    /// store, the jitter and the bus are this router's.
    ///
    /// This router is left as it was, so requests already running on it finish on it; send
    /// new ones to the returned router.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use switchyard::route::Route;
    /// use switchyard::simulated::SimulatedProvider;
    /// use switchyard::{ProviderEntry, Router};
    ///
    /// let build = |route: &str| {
    ///     Router::builder()
    ///         .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
    ///         .route(Route::builder(route).target("sim:echo").build().unwrap())
    /// };
    /// let router = build("default").build().unwrap();
    /// let (next, forgotten) = router.reconfigure(build("renamed")).unwrap();
    /// assert!(next.route("renamed").is_some() && router.route("renamed").is_none());
    /// assert!(forgotten.targets.is_empty(), "sim:echo is still configured");
    /// # }
    /// ```
    pub fn reconfigure(&self, next: RouterBuilder) -> Result<(Router, Forgotten), ConfigError> {
        let old = &self.inner;
        let budget = if *old.budget.settings() == next.budget {
            old.budget.clone()
        } else {
            Arc::new(RetryBudget::new(next.budget))
        };
        let hedges =
            old.routes.iter().filter_map(|(name, slot)| Some((name.clone(), slot.hedges.clone()?))).collect();
        let kept = Kept {
            health: old.health.reconfigured(next.health.clone()),
            latency: old.latency.clone(),
            events: old.events.clone(),
            budget,
            jitter: old.jitter.clone(),
            hedges,
            pins: old.pins.clone(),
            stream_refusals: old.stream_refusals.clone(),
            caches: answer_caches(old),
        };
        let router = next.build_over(kept)?;
        let forgotten = forgotten(old, &router.inner);
        router.inner.health.drop_records(&forgotten.targets, &forgotten.credentials);
        router.inner.latency.forget(&forgotten.targets);
        Ok((router, forgotten))
    }
}

/// Every route's `cache` candidates' answers in `inner`.
fn answer_caches(inner: &Inner) -> AnswerCaches {
    let routes = inner.routes.values().map(|slot| &slot.route);
    let candidates = routes.flat_map(|route| route.candidates().iter().map(move |c| (route.name_arc(), c)));
    candidates
        .filter_map(|(route, candidate)| {
            let cache = candidate.answer_cache()?;
            Some(((route.clone(), candidate.name().clone()), cache.clone()))
        })
        .collect()
}

/// What `old` knew that `new` removed or changed (see the [module](self)).
fn forgotten(old: &Inner, new: &Inner) -> Forgotten {
    let identity = |inner: &Inner, provider: &str| {
        inner
            .providers
            .get(provider)
            .map(|slot| (slot.provider.kind().to_owned(), slot.provider.base_url().to_owned()))
    };
    let (was, is) = (old.configured_targets(), new.configured_targets());
    let recorded = old.health.recorded_targets();
    let exhausted: HashSet<&Target> =
        recorded.iter().filter(|(_, status)| *status == HealthStatus::Exhausted).map(|(t, _)| t).collect();
    let keys = |inner: &Inner, provider: &str| -> HashSet<CredentialId> {
        inner
            .providers
            .get(provider)
            .map(|slot| slot.credential_ids.iter().cloned().collect())
            .unwrap_or_default()
    };
    let new_key = |provider: &str| !keys(new, provider).is_subset(&keys(old, provider));
    // The provider's own id of the target's model (`models:`): another id is another model.
    let mapped = |inner: &Inner, target: &Target| {
        inner.providers.get(target.provider()).and_then(|slot| slot.provider_model(target.model()).cloned())
    };
    let mut known: Vec<Target> = recorded.iter().map(|(target, _)| target.clone()).collect();
    known.extend(old.latency.targets());
    known.extend(was.iter().cloned());
    known.sort();
    known.dedup();
    let targets = known
        .into_iter()
        .filter(|target| {
            let provider = target.provider();
            let now = identity(new, provider);
            now.is_none()
                || now != identity(old, provider)
                || (was.contains(target) && !is.contains(target))
                || (exhausted.contains(target) && new_key(provider))
                || mapped(old, target) != mapped(new, target)
        })
        .collect();
    let ids = |inner: &Inner| -> HashSet<CredentialId> {
        inner.providers.values().flat_map(|slot| slot.credential_ids.iter().cloned()).collect()
    };
    let still = ids(new);
    let mut credentials: Vec<CredentialId> = ids(old).into_iter().filter(|id| !still.contains(id)).collect();
    credentials.sort();
    Forgotten { targets, credentials }
}
