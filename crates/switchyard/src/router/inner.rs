//! What every clone of a [`Router`](super::Router) shares: providers, routes, the health and
//! latency boards, the event bus, the budgets, the pacer and the jitter.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

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
}

/// What every clone of a router shares. The providers and routes are one configuration's; the
/// boards, the bus, the budgets and the jitter are what the router has learned and are handed
/// on to the router of the next configuration ([`Router::reconfigure`](super::Router::reconfigure)).
pub(crate) struct Inner {
    pub(crate) providers: HashMap<Arc<str>, ProviderSlot>,
    pub(super) routes: HashMap<Arc<str>, RouteSlot>,
    pub(super) route_order: Vec<Arc<str>>,
    pub(super) default_route: Arc<str>,
    pub(crate) health: HealthBoard,
    pub(crate) latency: Arc<LatencyBoard>,
    pub(crate) events: EventBus,
    pub(super) budget: Arc<RetryBudget>,
    pub(super) pacer: Option<Arc<dyn Pacer>>,
    pub(super) jitter: Arc<Jitter>,
}

impl Inner {
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

    /// The route that governs requests naming a target or an empty model.
    pub(super) fn default_route(&self) -> &Route {
        &self.routes[&self.default_route].route
    }
}
