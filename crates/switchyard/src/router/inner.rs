//! What every clone of a [`Router`](super::Router) shares: providers, routes, the health and
//! latency boards, the event bus, the budgets, the pacer and the jitter.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::entry::ProviderSlot;
use crate::backoff::Jitter;
use crate::budget::RetryBudget;
use crate::events::{EventBus, EventKind};
use crate::health::HealthBoard;
use crate::latency::LatencyBoard;
use crate::pacing::Pacer;
use crate::route::Route;

/// A route with its rotation counter.
pub(super) struct RouteSlot {
    pub(super) route: Arc<Route>,
    pub(super) turn: AtomicU64,
    /// The route's hedge budget, when it hedges (kept across a reconfiguration that leaves the
    /// route's hedging as it was).
    pub(super) hedges: Option<Arc<RetryBudget>>,
    /// A pattern route whose targets name `{model}`: the route filled in for each model a
    /// client asked for, kept so a model is filled once (see [`Route::for_model`]).
    pub(super) filled: Option<Mutex<HashMap<Box<str>, Arc<Route>>>>,
    /// Sessions go back to where they were served ([`affinity`](crate::affinity)).
    pub(super) affinity: bool,
}

/// How many models a pattern route keeps filled in; past it the kept ones are let go (a
/// client inventing names cannot grow memory).
const FILLED_MAX: usize = 1024;

impl RouteSlot {
    /// `route` with its hedge budget; `rotates_keys` says whether a provider of it rotates
    /// its keys, which (like a rotating tier) turns affinity on unless the route says.
    pub(super) fn new(route: Route, hedges: Option<Arc<RetryBudget>>, rotates_keys: bool) -> Self {
        let filled = (route.pattern().is_some() && route.fills_model()).then(|| Mutex::new(HashMap::new()));
        let rotates = route.rotation() != crate::route::Rotation::Ordered || rotates_keys;
        let affinity = route.affinity().unwrap_or(rotates);
        Self { route: Arc::new(route), turn: AtomicU64::new(0), hedges, filled, affinity }
    }

    /// The route for `model`: this one, or for a pattern whose targets name `{model}`, this
    /// one filled in for it.
    pub(super) fn for_model(&self, model: &str) -> Result<Arc<Route>, crate::TargetError> {
        let Some(filled) = &self.filled else { return Ok(self.route.clone()) };
        let mut filled = filled.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(route) = filled.get(model) {
            return Ok(route.clone());
        }
        let route = Arc::new(self.route.for_model(model)?);
        if filled.len() >= FILLED_MAX {
            filled.clear();
        }
        filled.insert(model.into(), route.clone());
        Ok(route)
    }
}

/// What every clone of a router shares. The providers and routes are one configuration's; the
/// boards, the bus, the budgets and the jitter are what the router has learned and are handed
/// on to the router of the next configuration ([`Router::reconfigure`](super::Router::reconfigure)).
pub(crate) struct Inner {
    pub(crate) providers: HashMap<Arc<str>, ProviderSlot>,
    pub(super) routes: HashMap<Arc<str>, RouteSlot>,
    pub(super) route_order: Vec<Arc<str>>,
    /// Where sessions were last served.
    pub(crate) pins: Arc<crate::affinity::Pins>,
    /// The pattern routes' names, the longest prefix first.
    pub(super) patterns: Vec<Arc<str>>,
    pub(super) default_route: Arc<str>,
    pub(crate) health: HealthBoard,
    pub(crate) latency: Arc<LatencyBoard>,
    pub(crate) events: EventBus,
    pub(super) budget: Arc<RetryBudget>,
    pub(super) pacer: Option<Arc<dyn Pacer>>,
    pub(super) jitter: Arc<Jitter>,
    /// Which credentials' models refused a stream lately (asked whole at once).
    pub(super) stream_refusals: Arc<super::refusals::Refusals>,
}

impl Inner {
    /// The configured price of `target`'s model.
    pub(crate) fn price(&self, target: &crate::Target) -> Option<&crate::router::entry::Price> {
        self.providers.get(target.provider())?.price(target.model())
    }

    /// The hedge budget of the route `name`, when it hedges.
    pub(crate) fn hedge_budget(&self, name: &str) -> Option<&RetryBudget> {
        self.routes.get(name)?.hedges.as_deref()
    }

    pub(crate) fn publish_all<E: Into<EventKind>>(&self, events: impl IntoIterator<Item = E>) {
        for event in events {
            self.events.publish(event.into());
        }
    }

    /// The configured routes, in configuration order.
    pub(super) fn routes(&self) -> impl Iterator<Item = &Route> {
        self.route_order.iter().filter_map(|name| self.routes.get(name)).map(|slot| &*slot.route)
    }

    /// Every target the routes name (their chains and special chains).
    pub(super) fn configured_targets(&self) -> std::collections::HashSet<crate::Target> {
        self.routes().flat_map(|route| route.all_targets()).cloned().collect()
    }

    /// The route that governs requests naming a target or an empty model.
    pub(super) fn default_route(&self) -> &Route {
        &self.routes[&self.default_route].route
    }
}
