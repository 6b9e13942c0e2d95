//! The router: executes one request along a route and returns the answer with its trail.
//!
//! One concept a file: [`entry`] (providers as the router holds them, prices, and the one
//! redaction of a provider's errors), [`inner`] (what every clone of a router shares),
//! [`options`] (per-request switches), [`resolve`] (which route governs and which targets,
//! rotation), [`run`] (one request's walk along its plan), whose state has owners: [`plan`]
//! (what is left to try), [`record`] (the trail and the events of attempts) and [`verdict`]
//! (the answer, a refusal kept aside, the last error); [`attempt`] (one attempt: gate, pacing
//! permit, the call within its timeouts, returned as a value), [`apply`] (that value written
//! down: health, plan, record, verdict, and the policy's word), [`hedge`] (the race of a slow
//! first attempt and its hedge), [`policy`] (what follows a failure: a pure function over the
//! error catalog), [`candidates`] (non-provider answers at the end), [`exchange`] (what
//! differs between a chat, a stream and embeddings), [`stream`] (a routed stream after its
//! first chunk), [`continuation`] (another target finishing a stream that broke after its
//! first content) and [`settler`] (that stream's only window on the router).

mod apply;
mod assembled;
mod attempt;
mod candidates;
mod continuation;
mod entry;
mod exchange;
mod hedge;
mod inner;
mod options;
mod plan;
mod policy;
mod reconfigure;
mod record;
mod refusals;
mod resolve;
mod run;
mod sessions;
mod settler;
pub(crate) mod stream;
mod verdict;

/// How long a stream whose every choice has finished waits for what may still follow (the
/// usage, the terminator) before it ends as whole without them: a provider that holds its
/// stream open after the answer (no `[DONE]`, no `message_stop`) neither keeps the caller
/// waiting for the `idle` limit nor fails a complete answer.
pub const AFTER_FINISH: std::time::Duration = std::time::Duration::from_secs(1);

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Jitter;
use crate::budget::{RetryBudget, RetryBudgetSettings};
use crate::chat::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, TokenCount, Usage};
use crate::credential::{Credential, CredentialId};
use crate::events::{EventBus, Subscription};
use crate::health::{HealthBoard, HealthSettings, HealthSnapshot, HealthStore, TargetHealth};
use crate::latency::LatencySummary;
use crate::pacing::Pacer;
use crate::route::{Route, RouteConfigError};
use crate::trail::{Timing, Trail, Via};
use crate::{RouteError, Target};

use continuation::Resume;
pub(crate) use entry::ProviderSlot;
pub use entry::{KeyRotation, Price, ProviderEntry};
use exchange::{ChatExchange, CountTokensExchange, EmbeddingsExchange, Exchange, Served};
use inner::{Inner, RouteSlot};
pub use options::RequestOptions;
pub(crate) use reconfigure::AnswerCaches;
pub use reconfigure::Forgotten;
use reconfigure::Kept;
use run::Run;
use settler::StreamSettler;
use stream::{Keeping, RoutedStream, StreamExchange};

/// A router that cannot be built, naming what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A route broke its own rules; the error lists every problem with it.
    #[error(transparent)]
    Route(#[from] RouteConfigError),
    /// A route names a target whose provider is not configured.
    #[error(
        "route `{route}` names target `{target}`, but no provider `{provider}` is configured (configured: {known})"
    )]
    UnknownProvider {
        /// The route's name.
        route: String,
        /// The target as the route names it.
        target: String,
        /// The provider part of the target.
        provider: String,
        /// The configured provider ids, sorted and comma-separated; `none` when there are none.
        known: String,
    },
    /// Two providers share this id.
    #[error("provider `{0}` is configured twice")]
    DuplicateProvider(String),
    /// Two routes share this name.
    #[error("route `{0}` is configured twice")]
    DuplicateRoute(String),
    /// A provider id no target could name (see [`ProviderEntry::check_id`]).
    #[error("{0}")]
    InvalidProviderId(crate::problem::Problem),
    /// The builder was given no route.
    #[error("no routes are configured: add at least one route")]
    NoRoutes,
    /// [`RouterBuilder::default_route`] names a route that is not configured.
    #[error("default route `{0}` is not configured")]
    UnknownDefaultRoute(String),
}

/// A hedged route's window on one replica (see [`Router::hedge_windows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HedgeWindow {
    /// The route.
    pub route: Arc<str>,
    /// Requests over the last 10 s.
    pub requests: u64,
    /// Hedges started over the last 10 s.
    pub hedges: u64,
}

/// A successful chat: the response and how it came about.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The answer as the provider sent it, or the candidate's when one served.
    pub response: ChatResponse,
    /// Who answered: a target or a candidate.
    pub served_by: Via,
    /// The route that governed the request.
    pub route: Arc<str>,
    /// Every attempt of the request, in order, the serving one included.
    pub trail: Trail,
    /// Where the request's time went: in total, and queued by pacing.
    pub timing: Timing,
    /// Token counts, as in `response.usage`; `None` when the answer did not report them.
    pub usage: Option<Usage>,
    /// The cost of this answer at the provider's configured price, when one is set.
    pub cost: Option<f64>,
}

/// A successful embeddings request.
#[derive(Debug, Clone)]
pub struct EmbeddingsAnswer {
    /// The vectors, one per input, in input order.
    pub response: EmbeddingsResponse,
    /// The target that answered (embeddings have no candidates, so always a target).
    pub served_by: Via,
    /// The route that governed the request (the default route's name when `model` named a target).
    pub route: Arc<str>,
    /// Every attempt of the request, in order, the serving one included.
    pub trail: Trail,
    /// Where the request's time went: in total, and queued by pacing.
    pub timing: Timing,
    /// The cost of the embedded input at the provider's configured price (its `input` price a
    /// million tokens), when one is set and the provider counted the tokens.
    pub cost: Option<f64>,
}

/// A successful token count.
#[derive(Debug, Clone)]
pub struct TokenCountAnswer {
    /// The count.
    pub count: TokenCount,
    /// The target that counted.
    pub served_by: Via,
    /// The route that governed the request.
    pub route: Arc<str>,
    /// Every attempt of the request, in order, the serving one included.
    pub trail: Trail,
    /// Where the request's time went.
    pub timing: Timing,
}

/// Routes requests along routes to providers. Cheap to clone: clones share providers, health,
/// events and budgets.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use switchyard::chat::{ChatRequest, Message};
/// use switchyard::route::Route;
/// use switchyard::simulated::SimulatedProvider;
/// use switchyard::{ProviderEntry, Router};
///
/// let router = Router::builder()
///     .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
///     .route(Route::builder("default").target("sim:echo").build().unwrap())
///     .build()
///     .unwrap();
/// let answer = router.chat(&ChatRequest::new("default", vec![Message::user("hi")])).await.unwrap();
/// assert_eq!(answer.served_by.to_string(), "sim:echo");
/// # }
/// ```
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.inner.route_order)
            .field("default_route", &self.inner.default_route)
            .finish_non_exhaustive()
    }
}

/// Collects providers and routes; [`RouterBuilder::build`] validates them together.
pub struct RouterBuilder {
    providers: Vec<ProviderEntry>,
    routes: Vec<Route>,
    default_route: Option<String>,
    health: HealthSettings,
    store: Option<Arc<dyn HealthStore>>,
    budget: RetryBudgetSettings,
    pacer: Option<Arc<dyn Pacer>>,
    seed: u64,
    event_capacity: usize,
}

impl RouterBuilder {
    /// Adds a provider; targets name it by its id.
    pub fn provider(mut self, entry: ProviderEntry) -> Self {
        self.providers.push(entry);
        self
    }

    /// Adds a route; clients name it as their `model`.
    pub fn route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// The route that governs requests naming a target directly, and requests with an empty
    /// model. Defaults to the route named `default`, else the first route.
    pub fn default_route(mut self, name: impl Into<String>) -> Self {
        self.default_route = Some(name.into());
        self
    }

    /// The health board's thresholds, open times and cooldowns, shared by all routes.
    pub fn health(mut self, settings: HealthSettings) -> Self {
        self.health = settings;
        self
    }

    /// Keeps health records in `store` instead of this process's memory.
    pub fn health_store(mut self, store: Arc<dyn HealthStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// How many retries recent requests may add, across all routes.
    pub fn retry_budget(mut self, settings: RetryBudgetSettings) -> Self {
        self.budget = settings;
        self
    }

    /// Paces calls through `pacer`; without one, calls go at once.
    pub fn pacer(mut self, pacer: Arc<dyn Pacer>) -> Self {
        self.pacer = Some(pacer);
        self
    }

    /// Seeds the jitter and weighted rotation, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How many events each subscriber buffers before losing the oldest. Default 1024.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity;
        self
    }

    /// Validates providers and routes together and builds the router.
    pub fn build(self) -> Result<Router, ConfigError> {
        let health = match self.store.clone() {
            Some(store) => HealthBoard::with_store(self.health.clone(), store),
            None => HealthBoard::new(self.health.clone()),
        };
        let kept = Kept {
            health,
            latency: Arc::default(),
            events: EventBus::new(self.event_capacity),
            budget: Arc::new(RetryBudget::new(self.budget)),
            jitter: Arc::new(Jitter::new(self.seed)),
            hedges: HashMap::new(),
            pins: Arc::default(),
            stream_refusals: Arc::default(),
            caches: HashMap::new(),
        };
        self.build_over(kept)
    }

    /// Builds the router of these providers and routes over `kept`: the boards, bus and
    /// budgets of a new router, or those a reconfigured one hands on.
    fn build_over(self, kept: Kept) -> Result<Router, ConfigError> {
        let providers = Self::providers(self.providers)?;
        let mut routes = self.routes;
        for route in &mut routes {
            route.keep_answer_caches(&kept.caches);
        }
        let (routes, route_order) = Self::routes(routes, &providers, &kept.hedges)?;
        let default_route: Arc<str> = match self.default_route {
            Some(name) => routes
                .get_key_value(name.as_str())
                .map(|(k, _)| k.clone())
                .ok_or(ConfigError::UnknownDefaultRoute(name))?,
            None => routes
                .get_key_value("default")
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| route_order[0].clone()),
        };
        let inner = Inner {
            providers,
            patterns: Self::patterns(&routes, &route_order),
            pins: kept.pins,
            routes,
            route_order,
            default_route,
            health: kept.health,
            latency: kept.latency,
            events: kept.events,
            budget: kept.budget,
            pacer: self.pacer,
            jitter: kept.jitter,
            stream_refusals: kept.stream_refusals,
        };
        let configured: Vec<Target> = inner.configured_targets().into_iter().collect();
        inner.health.configured(&configured);
        Ok(Router { inner: Arc::new(inner) })
    }

    fn providers(entries: Vec<ProviderEntry>) -> Result<HashMap<Arc<str>, ProviderSlot>, ConfigError> {
        let mut providers = HashMap::new();
        for entry in entries {
            if let Err(problem) = ProviderEntry::check_id(&entry.id) {
                return Err(ConfigError::InvalidProviderId(problem));
            }
            let id = entry.id.clone();
            if providers.insert(id.clone(), entry.into_slot()).is_some() {
                return Err(ConfigError::DuplicateProvider(id.to_string()));
            }
        }
        Ok(providers)
    }

    /// The names of the pattern routes, the longest prefix first (configured order breaking
    /// ties, which only equal patterns could be).
    fn patterns(routes: &HashMap<Arc<str>, RouteSlot>, order: &[Arc<str>]) -> Vec<Arc<str>> {
        let mut patterns: Vec<Arc<str>> =
            order.iter().filter(|name| routes[*name].route.pattern().is_some()).cloned().collect();
        patterns.sort_by_key(|name| std::cmp::Reverse(name.len()));
        patterns
    }

    /// The routes by name and in configuration order; every target must name a provider. A
    /// route that hedges as one of `hedges` did keeps that budget.
    #[allow(clippy::type_complexity)]
    fn routes(
        routes: Vec<Route>,
        providers: &HashMap<Arc<str>, ProviderSlot>,
        hedges: &HashMap<Arc<str>, Arc<RetryBudget>>,
    ) -> Result<(HashMap<Arc<str>, RouteSlot>, Vec<Arc<str>>), ConfigError> {
        if routes.is_empty() {
            return Err(ConfigError::NoRoutes);
        }
        let mut known: Vec<&str> = providers.keys().map(|k| &**k).collect();
        known.sort_unstable();
        let mut slots = HashMap::new();
        let mut order = Vec::new();
        for route in routes {
            if let Some(target) =
                route.all_targets().into_iter().find(|t| !providers.contains_key(t.provider()))
            {
                return Err(ConfigError::UnknownProvider {
                    route: route.name().to_owned(),
                    target: target.to_string(),
                    provider: target.provider().to_owned(),
                    known: if known.is_empty() { "none".to_owned() } else { known.join(", ") },
                });
            }
            let name = route.name_arc().clone();
            order.push(name.clone());
            let hedges = route.hedge().map(|hedge| {
                let settings = RetryBudgetSettings {
                    ratio: hedge.max_share,
                    min_retries: hedge.min_hedges,
                    window: Duration::from_secs(10),
                };
                match hedges.get(&name) {
                    Some(kept) if *kept.settings() == settings => kept.clone(),
                    _ => Arc::new(RetryBudget::new(settings)),
                }
            });
            let rotates_keys = route
                .all_targets()
                .iter()
                .any(|t| providers.get(t.provider()).is_some_and(|p| p.rotates_keys()));
            let slot = RouteSlot::new(route, hedges, rotates_keys);
            if slots.insert(name.clone(), slot).is_some() {
                return Err(ConfigError::DuplicateRoute(name.to_string()));
            }
        }
        Ok((slots, order))
    }
}

impl Router {
    /// A builder with the defaults: no providers or routes yet, default health settings and
    /// retry budget, no pacer.
    pub fn builder() -> RouterBuilder {
        RouterBuilder {
            providers: Vec::new(),
            routes: Vec::new(),
            default_route: None,
            health: HealthSettings::default(),
            store: None,
            budget: RetryBudgetSettings::default(),
            pacer: None,
            seed: 0x5eed,
            event_capacity: 1024,
        }
    }

    /// The engine: walks the plan, retrying, skipping, switching chains and falling back,
    /// until an answer or a final error.
    async fn run<X: Exchange>(
        &self,
        x: &X,
        mut resolved: resolve::Resolved,
        options: &RequestOptions,
    ) -> Result<Served<X::Output>, RouteError> {
        let session = x.pins_sessions().then(|| self.inner.session(&resolved, options)).flatten();
        let pin = match session {
            Some(key) => self.inner.pinned(&mut resolved, key).await,
            None => None,
        };
        let served = Run::new(&self.inner, x, resolved, options).pinned(pin).go().await?;
        if let (Some(key), Some((target, credential))) = (session, &served.answered) {
            self.inner.pin(key, target, *credential);
        }
        Ok(served)
    }

    /// Sends a chat along the route (or to the target) its `model` names.
    pub async fn chat(&self, request: &ChatRequest) -> Result<Answer, RouteError> {
        self.chat_with(request, &RequestOptions::default()).await
    }

    /// Like [`Router::chat`], with per-request options.
    pub async fn chat_with(
        &self,
        request: &ChatRequest,
        options: &RequestOptions,
    ) -> Result<Answer, RouteError> {
        let resolved = self.inner.resolve(&request.model)?;
        let streamed = resolved.route.stream_upstream();
        let drop_params = resolved.route.drop_params();
        let served = self
            .run(
                &ChatExchange { request, streamed, refusals: &self.inner.stream_refusals.whole, drop_params },
                resolved,
                options,
            )
            .await?;
        if !options.no_cache && matches!(served.via, Via::Target(_)) {
            for cache in served.route.answer_caches() {
                cache.remember(&options.cache_scope, served.route.name(), request, &served.output);
            }
        }
        let usage = served.output.usage;
        let cost = self.cost(served.answered.as_ref(), usage.as_ref());
        Ok(Answer {
            response: served.output,
            served_by: served.via,
            route: served.route.name_arc().clone(),
            trail: served.trail,
            timing: served.timing,
            usage,
            cost,
        })
    }

    /// Streams a chat. Retries and fallbacks happen until the first content chunk; the stream
    /// then forwards chunks as they arrive, and a later failure ends it with an error item.
    pub async fn chat_stream(
        &self,
        request: &ChatRequest,
        options: &RequestOptions,
    ) -> Result<RoutedStream, RouteError> {
        let resolved = self.inner.resolve(&request.model)?;
        let resume = Resume::for_request(&resolved.route, request, options);
        let settings = (options.reasoning, resolved.route.drop_params());
        let exchange = StreamExchange::new(request, settings, &self.inner.stream_refusals.streams);
        let served = self.run(&exchange, resolved, options).await?;
        // One choice only: a stream of several is not put back together.
        let keep = !options.no_cache
            && request.choices_asked() == 1
            && matches!(served.via, Via::Target(_))
            && served.route.answer_caches().next().is_some();
        let router = StreamSettler::new(self.inner.clone(), served.route.clone());
        let stream = RoutedStream::new(router, served, resume).answering(request);
        Ok(if keep {
            stream.keeping(Keeping::new(request.clone(), options.cache_scope.clone()))
        } else {
            stream
        })
    }

    /// Embeds along a route. Fallback stays within one embedding space: vectors of two models
    /// are not interchangeable. The space is the first target's, unless no target of it can
    /// embed (a chat model first on the route): then the next space's.
    pub async fn embeddings(
        &self,
        request: &EmbeddingsRequest,
        options: &RequestOptions,
    ) -> Result<EmbeddingsAnswer, RouteError> {
        let resolved = self.inner.resolve(&request.model)?;
        let chains = match resolved.explicit {
            true => vec![resolved.chain.clone()],
            false => self.inner.embedding_spaces(&resolved),
        };
        let mut outcome = None;
        for chain in chains {
            let resolved = resolve::Resolved { chain, ..resolved.clone() };
            let attempt = self.run(&EmbeddingsExchange(request), resolved, options).await;
            let unsupported = |error: &RouteError| {
                let trail = error.trail();
                !trail.is_empty() && trail.iter().all(crate::trail::Attempt::unsupported)
            };
            let go_on = attempt.as_ref().is_err_and(unsupported);
            outcome = Some(attempt);
            if !go_on {
                break;
            }
        }
        let served = outcome.expect("a route has at least one target")?;
        let usage = served.output.usage.map(|u| Usage::new(u.prompt_tokens, 0));
        let cost = self.cost(served.answered.as_ref(), usage.as_ref());
        Ok(EmbeddingsAnswer {
            response: served.output,
            served_by: served.via,
            route: served.route.name_arc().clone(),
            trail: served.trail,
            timing: served.timing,
            cost,
        })
    }

    /// Counts the input tokens of `request` along its route: the first target whose provider
    /// counts (Anthropic's; a simulated one's estimate) answers, each attempt within the
    /// route's `first_byte` wait; targets of providers that do not count are skipped as
    /// unsupported, and a route with none answers `invalid_request` naming it.
    pub async fn count_tokens(
        &self,
        request: &ChatRequest,
        options: &RequestOptions,
    ) -> Result<TokenCountAnswer, RouteError> {
        let resolved = self.inner.resolve(&request.model)?;
        let served = self.run(&CountTokensExchange(request), resolved, options).await?;
        Ok(TokenCountAnswer {
            count: served.output,
            served_by: served.via,
            route: served.route.name_arc().clone(),
            trail: served.trail,
            timing: served.timing,
        })
    }

    /// What `usage` cost at the price of the target that answered, when it has one.
    fn cost(&self, answered: Option<&(Target, usize)>, usage: Option<&Usage>) -> Option<f64> {
        let ((target, _), usage) = (answered?, usage?);
        Some(self.inner.price(target)?.cost(usage))
    }

    /// A new subscription to the router's events.
    pub fn subscribe(&self) -> Subscription {
        self.inner.events.subscribe()
    }

    /// The bus itself, for publishing from integrations (the pacer, the gateway).
    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }

    /// Prepares every provider's per-thread state on the calling thread ([`Provider::warm`](crate::provider::Provider::warm)).
    pub fn warm(&self) {
        for slot in self.inner.providers.values() {
            slot.provider.warm();
        }
    }

    /// The health of every configured target (every chain of every route) and of every
    /// credential of every provider, `unknown` until first used and again after a reset, and
    /// of any other target called so far (a `provider:model` a client named).
    pub fn health(&self) -> HealthSnapshot {
        // A pattern's `{model}` target is no target until a request fills it in: the filled
        // ones are listed by their records.
        let targets: Vec<Target> = self
            .routes()
            .flat_map(|route| route.all_targets())
            .filter(|t| !crate::route::is_template(t))
            .cloned()
            .collect();
        let credentials: Vec<CredentialId> =
            self.inner.providers.values().flat_map(|slot| slot.credential_ids.iter().cloned()).collect();
        let mut snapshot = self.inner.health.snapshot_listing(&targets, &credentials);
        self.show_spent_keys(&mut snapshot);
        snapshot
    }

    /// A target its own calls left `unknown` or `available` whose provider's every key is out
    /// of quota (spent by another model's calls) is skipped by every request: shown so.
    fn show_spent_keys(&self, snapshot: &mut HealthSnapshot) {
        let spent: std::collections::HashSet<CredentialId> = snapshot
            .credentials
            .iter()
            .filter(|c| c.status == crate::health::HealthStatus::Exhausted)
            .map(|c| c.credential_id.clone())
            .collect();
        for target in &mut snapshot.targets {
            let Some(slot) = self.inner.providers.get(target.target.provider()) else { continue };
            let all_spent =
                !slot.credential_ids.is_empty() && slot.credential_ids.iter().all(|id| spent.contains(id));
            if all_spent
                && matches!(
                    target.status,
                    crate::health::HealthStatus::Unknown | crate::health::HealthStatus::Available
                )
            {
                target.status = crate::health::HealthStatus::Exhausted;
                target.reason = "every key of its provider is out of quota".to_owned();
            }
        }
    }

    /// The health board's settings (thresholds, open times, cooldowns), shared by all routes.
    pub fn health_settings(&self) -> &HealthSettings {
        self.inner.health.settings()
    }

    /// How many retries recent requests may add, across all routes.
    pub fn retry_budget(&self) -> &RetryBudgetSettings {
        self.inner.budget.settings()
    }

    /// How fast `target` has answered lately (see [`latency`](crate::latency)); `None` before
    /// its first counted attempt.
    pub fn latency(&self, target: &Target) -> Option<LatencySummary> {
        self.inner.latency.summary(target)
    }

    /// Every target's recent latency, by target.
    pub fn latencies(&self) -> Vec<(Target, LatencySummary)> {
        self.inner.latency.all()
    }

    /// The health of one target.
    pub fn target_health(&self, target: &Target) -> TargetHealth {
        self.inner.health.target(target)
    }

    /// Resets one target (and its provider's credentials) to `unknown`.
    pub fn reset(&self, target: &Target) -> Result<(), RouteError> {
        let slot = self
            .inner
            .providers
            .get(target.provider())
            .ok_or_else(|| self.inner.unknown_model(target.as_str()))?;
        let events = self.inner.health.reset(target, &slot.credential_ids);
        self.inner.publish_all(events);
        Ok(())
    }

    /// Resets every target and credential to `unknown`.
    pub fn reset_all(&self) {
        let events = self.inner.health.reset_all();
        self.inner.publish_all(events);
    }

    /// The configured routes, in configuration order.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.inner.routes()
    }

    /// The routes' targets whose answers cost nothing for want of a price: a target without
    /// one (its own, or the model it is a dated snapshot of), and a pattern route's
    /// `provider:{model}` whose provider prices no `name*` prefix. Each once, in configuration
    /// order.
    pub fn unpriced_targets(&self) -> Vec<String> {
        let mut unpriced: Vec<String> = Vec::new();
        for target in self.routes().flat_map(|route| route.targets()).map(|t| &t.target) {
            let Some(slot) = self.inner.providers.get(target.provider()) else { continue };
            let priced = match crate::route::is_template(target) {
                true => slot.prices_a_prefix(),
                false => slot.price(target.model()).is_some(),
            };
            if !priced && !unpriced.iter().any(|known| known == target.as_str()) {
                unpriced.push(target.as_str().to_owned());
            }
        }
        unpriced
    }

    /// The configured route named `name`; `None` for any other name, targets included.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.inner.routes.get(name).map(|slot| &*slot.route)
    }

    /// Where sessions were last served: give it the fleet's store with
    /// [`Pins::share`](crate::affinity::Pins::share) so every replica honours a pin.
    pub fn pins(&self) -> &crate::affinity::Pins {
        &self.inner.pins
    }

    /// The name of the route that would govern a request for `model`: the route of that name,
    /// the default route for a `provider:model` target, else the pattern route of the longest
    /// prefix `model` begins with; `None` when `model` names nothing.
    pub fn governing_route(&self, model: &str) -> Option<&str> {
        self.inner.governing(model)
    }

    /// The route that governs requests naming a target or an empty model: the one given to
    /// [`RouterBuilder::default_route`], else `default`, else the first configured.
    pub fn default_route(&self) -> &Route {
        self.inner.default_route()
    }

    /// The allowance of every paced provider right now (empty without pacing).
    pub fn pacing(&self) -> Vec<crate::pacing::LaneSnapshot> {
        self.inner.pacer.as_ref().map(|p| p.snapshot()).unwrap_or_default()
    }

    /// Whether calls go through a pacer (only when some provider has limits).
    pub fn is_paced(&self) -> bool {
        self.inner.pacer.is_some()
    }

    /// The configured provider ids, sorted.
    pub fn provider_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.inner.providers.keys().map(|k| &**k).collect();
        ids.sort_unstable();
        ids
    }

    /// Each hedged route's window on this replica: its requests and hedges over the last 10 s,
    /// for a fleet that counts hedge budgets together.
    pub fn hedge_windows(&self) -> Vec<HedgeWindow> {
        self.inner
            .route_order
            .iter()
            .filter_map(|name| {
                let (requests, hedges) = self.inner.hedge_budget(name)?.window();
                Some(HedgeWindow { route: name.clone(), requests, hedges })
            })
            .collect()
    }

    /// What the rest of the fleet counted in `route`'s window, as last read: this replica's
    /// hedge budget counts it with its own (`max_share` of the fleet's requests, less the
    /// fleet's hedges).
    pub fn set_fleet_hedges(&self, route: &str, requests: u64, hedges: u64) {
        if let Some(budget) = self.inner.hedge_budget(route) {
            budget.set_others((requests, hedges));
        }
    }

    /// How many hedges `route` may still start now; `None` when it does not hedge.
    pub fn hedges_left(&self, route: &str) -> Option<u64> {
        self.inner.hedge_budget(route).map(RetryBudget::left)
    }

    /// The kind of provider `id` (`openai`, `anthropic`, `simulated`, ...).
    pub fn provider_kind(&self, id: &str) -> Option<&str> {
        self.inner.providers.get(id).map(|slot| slot.provider.kind())
    }

    /// The credentials of a provider (ids and masked keys only leave through them).
    pub fn credentials(&self, provider: &str) -> Option<&[Credential]> {
        self.inner.providers.get(provider).map(|slot| slot.credentials.as_slice())
    }
}

#[cfg(test)]
mod send_check {
    #[allow(dead_code)]
    fn futures_are_send(
        router: &super::Router,
        request: &crate::chat::ChatRequest,
        options: &super::RequestOptions,
    ) {
        fn send<T: Send>(_: T) {}
        send(router.chat_with(request, options));
        send(router.chat_stream(request, options));
    }
}
