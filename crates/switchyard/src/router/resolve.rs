//! Which route governs a request and which targets it walks: a route by name, or a named
//! target under the default route's policy; tiers in order, rotation within a tier.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::inner::{Inner, RouteSlot};
use crate::route::{Rotation, Route, RouteTarget};
use crate::{RouteError, Target};

/// What a request resolved to: the governing route, the chain, and whether it named a target.
#[derive(Clone)]
pub(super) struct Resolved {
    pub(super) route: Arc<Route>,
    pub(super) chain: Vec<Target>,
    pub(super) explicit: bool,
}

impl Inner {
    /// The targets of `resolved`'s chain by embedding space: the spaces in the order the
    /// route's configured targets first name them (rotation never changes which space serves:
    /// vectors of two spaces do not mix), the targets of each in the chain's order (tiers, and
    /// rotation within them). A target's space is its `embedding_space`, else the provider's
    /// own id of its model (two route-side names of one model are one space; one name over two
    /// providers' models, two).
    pub(super) fn embedding_spaces(&self, resolved: &Resolved) -> Vec<Vec<Target>> {
        let space = |target: &Target| -> String {
            let configured = resolved.route.targets().iter().find(|t| t.target == *target);
            if let Some(space) = configured.and_then(|t| t.embedding_space.as_ref()) {
                return space.clone();
            }
            let slot = self.providers.get(target.provider());
            let model = slot.and_then(|slot| slot.provider_model(target.model()));
            model.map_or_else(|| target.model().to_owned(), |model| model.to_string())
        };
        let mut spaces: Vec<(String, Vec<Target>)> = Vec::new();
        for configured in resolved.route.targets() {
            let name = space(&configured.target);
            if !spaces.iter().any(|(known, _)| *known == name) {
                spaces.push((name, Vec::new()));
            }
        }
        for target in &resolved.chain {
            let name = space(target);
            match spaces.iter_mut().find(|(known, _)| *known == name) {
                Some((_, chain)) => chain.push(target.clone()),
                None => spaces.push((name, vec![target.clone()])),
            }
        }
        spaces.into_iter().map(|(_, chain)| chain).filter(|chain| !chain.is_empty()).collect()
    }

    /// The route or target `model` names; an empty model takes the default route.
    ///
    /// A route's own name first; then a `provider:model` target of a configured provider;
    /// then the pattern route (a name ending in `*`) of the longest prefix `model` begins with,
    /// its `{model}` targets filled in with it.
    pub(super) fn resolve(&self, model: &str) -> Result<Resolved, RouteError> {
        let name = if model.is_empty() { &*self.default_route } else { model };
        if let Some(slot) = self.routes.get(name)
            && slot.route.pattern().is_none()
        {
            let route = slot.route.clone();
            let chain = self.rotate(&route, &slot.turn);
            return Ok(Resolved { route, chain, explicit: false });
        }
        if let Ok(target) = model.parse::<Target>()
            && self.providers.contains_key(target.provider())
        {
            let route = Arc::new(self.default_route().for_named_target(target.clone()));
            return Ok(Resolved { route, chain: vec![target], explicit: true });
        }
        let Some(slot) = self.pattern_for(model) else { return Err(self.unknown_model(model)) };
        let route = slot.for_model(model).map_err(|_| self.unknown_model(model))?;
        let chain = self.rotate(&route, &slot.turn);
        Ok(Resolved { route, chain, explicit: false })
    }

    /// The pattern route of the longest prefix `model` begins with.
    pub(super) fn pattern_for(&self, model: &str) -> Option<&RouteSlot> {
        self.patterns.iter().map(|name| &self.routes[name]).find(|slot| {
            slot.route.pattern().is_some_and(|prefix| !model.is_empty() && model.starts_with(prefix))
        })
    }

    /// The name of the route that governs `model` (see [`Inner::resolve`]), if any.
    pub(super) fn governing(&self, model: &str) -> Option<&str> {
        if let Some(slot) = self.routes.get(model)
            && slot.route.pattern().is_none()
        {
            return Some(slot.route.name());
        }
        if model.parse::<Target>().is_ok_and(|target| self.providers.contains_key(target.provider())) {
            return Some(&self.default_route);
        }
        self.pattern_for(model).map(|slot| slot.route.name())
    }

    /// The error for a model that names nothing, listing what can be named.
    pub(super) fn unknown_model(&self, model: &str) -> RouteError {
        let mut known: Vec<String> = self.route_order.iter().map(ToString::to_string).collect();
        let nameable = self.routes().flat_map(|r| r.all_targets()).filter(|t| !crate::route::is_template(t));
        for target in nameable {
            let name = target.to_string();
            // A target of several routes is listed once, where it first appears.
            if !known.contains(&name) {
                known.push(name);
            }
        }
        RouteError::UnknownModel { model: crate::said_back(model).into_owned(), known }
    }

    /// The general chain: tiers in order, rotation applied within each tier.
    fn rotate(&self, route: &Route, turn: &AtomicU64) -> Vec<Target> {
        let targets = route.targets();
        if route.rotation() == Rotation::Ordered || targets.len() < 2 {
            return targets.iter().map(|t| t.target.clone()).collect();
        }
        let turn = turn.fetch_add(1, Ordering::Relaxed);
        let mut chain = Vec::with_capacity(targets.len());
        for tier in targets.chunk_by(|a, b| a.tier == b.tier) {
            if matches!(route.rotation(), Rotation::LeastLatency | Rotation::Cheapest) {
                chain.extend(self.by_measure(route.rotation(), tier));
                continue;
            }
            let start = match route.rotation() {
                Rotation::RoundRobin => (turn % tier.len() as u64) as usize,
                Rotation::Weighted => self.weighted_pick(tier),
                Rotation::Ordered | Rotation::LeastLatency | Rotation::Cheapest => 0,
            };
            match route.rotation() {
                Rotation::Weighted => {
                    chain.push(tier[start].target.clone());
                    chain.extend(
                        tier.iter().enumerate().filter(|(i, _)| *i != start).map(|(_, t)| t.target.clone()),
                    );
                }
                _ => chain.extend(tier[start..].iter().chain(&tier[..start]).map(|t| t.target.clone())),
            }
        }
        chain
    }

    /// `tier` ordered fastest first or cheapest first (see [`Rotation`]).
    fn by_measure(&self, rotation: Rotation, tier: &[RouteTarget]) -> Vec<Target> {
        // Unmeasured targets first: they are probed until they have a latency.
        let latency = |t: &Target| self.latency.quantile(t, 0.5).map_or(Duration::ZERO, |(p50, _)| p50);
        let mut ordered: Vec<(Option<f64>, Duration, Target)> = tier
            .iter()
            .map(|t| {
                let price = match rotation {
                    Rotation::Cheapest => Some(
                        self.providers
                            .get(t.target.provider())
                            .and_then(|slot| slot.price(t.target.model()))
                            .map_or(f64::INFINITY, |p| p.input_per_million + p.output_per_million),
                    ),
                    _ => None,
                };
                (price, latency(&t.target), t.target.clone())
            })
            .collect();
        // Stable: configured order breaks the last ties.
        ordered.sort_by(|a, b| a.0.unwrap_or(0.0).total_cmp(&b.0.unwrap_or(0.0)).then(a.1.cmp(&b.1)));
        let mut chain: Vec<Target> = ordered.into_iter().map(|(_, _, t)| t).collect();
        if rotation == Rotation::LeastLatency && chain.len() > 1 && self.jitter.next_u64().is_multiple_of(20)
        {
            // Now and then another target first, so a slower one's latency stays known.
            let other = 1 + (self.jitter.next_u64() % (chain.len() as u64 - 1)) as usize;
            let explored = chain.remove(other);
            chain.insert(0, explored);
        }
        chain
    }

    /// A target of `tier` drawn by weight (the first when every weight is 0).
    fn weighted_pick(&self, tier: &[RouteTarget]) -> usize {
        let total: u64 = tier.iter().map(|t| u64::from(t.weight)).sum();
        if total == 0 {
            return 0;
        }
        let mut draw = self.jitter.next_u64() % total;
        tier.iter()
            .position(|t| {
                let w = u64::from(t.weight);
                if draw < w {
                    true
                } else {
                    draw -= w;
                    false
                }
            })
            .unwrap_or(0)
    }
}
