//! The router: executes one request along a route and returns the answer with its trail.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Jitter, retry_delay};
use crate::budget::{RetryBudget, RetryBudgetSettings};
use crate::chat::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, Usage};
use crate::credential::{Credential, CredentialId, Secret};
use crate::events::{EventBus, EventKind, Subscription};
use crate::health::{
    Gate, GateQuery, HealthBoard, HealthSettings, HealthSnapshot, HealthStore, TargetHealth,
};
use crate::pacing::{PaceRequest, Pacer, Permit};
use crate::provider::{BoxFuture, Call, Provider, RateLimitSink};
use crate::route::{Rotation, Route, RouteConfigError};
use crate::stream::{Prefetched, RoutedStream, StreamExchange};
use crate::trail::{Attempt, Outcome, Timing, Trail, Via};
use crate::{ErrorKind, ProviderError, RouteError, Target};

/// Price of one model, in a currency of your choice per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl Price {
    /// The cost of `usage` at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (f64::from(usage.prompt_tokens) * self.input_per_million
            + f64::from(usage.completion_tokens) * self.output_per_million)
            / 1_000_000.0
    }
}

/// One configured provider: an id, its implementation, its keys and prices.
///
/// ```
/// use switchyard::ProviderEntry;
/// use switchyard::simulated::SimulatedProvider;
///
/// let entry = ProviderEntry::new("local", SimulatedProvider::new());
/// assert_eq!(entry.id(), "local");
/// ```
pub struct ProviderEntry {
    id: Arc<str>,
    provider: Arc<dyn Provider>,
    keys: Vec<Secret>,
    prices: HashMap<String, Price>,
}

impl ProviderEntry {
    /// A provider under `id` (the part of a target before the colon), keyless until
    /// [`ProviderEntry::key`] adds keys.
    pub fn new(id: impl Into<Arc<str>>, provider: impl Provider) -> Self {
        Self::from_arc(id, Arc::new(provider))
    }

    pub fn from_arc(id: impl Into<Arc<str>>, provider: Arc<dyn Provider>) -> Self {
        Self { id: id.into(), provider, keys: Vec::new(), prices: HashMap::new() }
    }

    /// Adds an API key; with several, the router rotates to the next on auth failures,
    /// exhaustion and cooldowns.
    pub fn key(mut self, key: Secret) -> Self {
        self.keys.push(key);
        self
    }

    /// Sets the price of `model`, for the cost of each answer.
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("id", &self.id)
            .field("kind", &self.provider.kind())
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl ProviderSlot {
    pub(crate) fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }
}

pub(crate) struct ProviderSlot {
    pub(crate) id: Arc<str>,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) credentials: Vec<Credential>,
    pub(crate) credential_ids: Vec<CredentialId>,
    prices: HashMap<String, Price>,
}

/// A router that cannot be built, naming what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Route(#[from] RouteConfigError),
    #[error(
        "route `{route}` names target `{target}`, but no provider `{provider}` is configured (configured: {known})"
    )]
    UnknownProvider { route: String, target: String, provider: String, known: String },
    #[error("provider `{0}` is configured twice")]
    DuplicateProvider(String),
    #[error("route `{0}` is configured twice")]
    DuplicateRoute(String),
    #[error("provider id `{0}` is invalid: use letters, digits, `-`, `_` or `.`, and no colon")]
    InvalidProviderId(String),
    #[error("no routes are configured: add at least one route")]
    NoRoutes,
    #[error("default route `{0}` is not configured")]
    UnknownDefaultRoute(String),
}

/// Per-request switches.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Try only the first target (with its retries); no fallback, no candidates.
    pub no_fallback: bool,
    /// Overrides the route's request deadline.
    pub deadline: Option<Duration>,
}

/// A successful chat: the response and how it came about.
#[derive(Debug, Clone)]
pub struct Answer {
    pub response: ChatResponse,
    /// Who answered: a target or a candidate.
    pub served_by: Via,
    /// The route that governed the request.
    pub route: Arc<str>,
    pub trail: Trail,
    pub timing: Timing,
    pub usage: Option<Usage>,
    /// The cost of this answer at the provider's configured price, when one is set.
    pub cost: Option<f64>,
}

/// A successful embeddings request.
#[derive(Debug, Clone)]
pub struct EmbeddingsAnswer {
    pub response: EmbeddingsResponse,
    pub served_by: Via,
    pub route: Arc<str>,
    pub trail: Trail,
    pub timing: Timing,
}

struct RouteSlot {
    route: Arc<Route>,
    turn: AtomicU64,
}

pub(crate) struct Inner {
    pub(crate) providers: HashMap<Arc<str>, ProviderSlot>,
    routes: HashMap<Arc<str>, RouteSlot>,
    route_order: Vec<Arc<str>>,
    default_route: Arc<str>,
    pub(crate) health: HealthBoard,
    pub(crate) events: EventBus,
    budget: RetryBudget,
    pacer: Option<Arc<dyn Pacer>>,
    jitter: Jitter,
}

impl Inner {
    pub(crate) fn publish_all<E: Into<EventKind>>(&self, events: impl IntoIterator<Item = E>) {
        for event in events {
            self.events.publish(event.into());
        }
    }
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
    pub fn provider(mut self, entry: ProviderEntry) -> Self {
        self.providers.push(entry);
        self
    }

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

    pub fn health(mut self, settings: HealthSettings) -> Self {
        self.health = settings;
        self
    }

    /// Keeps health records in `store` instead of this process's memory.
    pub fn health_store(mut self, store: Arc<dyn HealthStore>) -> Self {
        self.store = Some(store);
        self
    }

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

    pub fn build(self) -> Result<Router, ConfigError> {
        let mut providers = HashMap::new();
        for entry in self.providers {
            let valid_id = !entry.id.is_empty()
                && entry.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !valid_id {
                return Err(ConfigError::InvalidProviderId(entry.id.to_string()));
            }
            let (kind, base_url) = (entry.provider.kind().to_owned(), entry.provider.base_url().to_owned());
            let credentials: Vec<Credential> = if entry.keys.is_empty() {
                vec![Credential::keyless(&kind, &base_url, &entry.id)]
            } else {
                entry.keys.into_iter().map(|key| Credential::new(&kind, &base_url, Some(key))).collect()
            };
            let slot = ProviderSlot {
                id: entry.id.clone(),
                provider: entry.provider,
                credential_ids: credentials.iter().map(|c| c.id().clone()).collect(),
                credentials,
                prices: entry.prices,
            };
            if providers.insert(entry.id.clone(), slot).is_some() {
                return Err(ConfigError::DuplicateProvider(entry.id.to_string()));
            }
        }
        if self.routes.is_empty() {
            return Err(ConfigError::NoRoutes);
        }
        let mut known: Vec<&str> = providers.keys().map(|k| &**k).collect();
        known.sort_unstable();
        let mut routes = HashMap::new();
        let mut route_order = Vec::new();
        for route in self.routes {
            for target in route.all_targets() {
                if !providers.contains_key(target.provider()) {
                    return Err(ConfigError::UnknownProvider {
                        route: route.name().to_owned(),
                        target: target.to_string(),
                        provider: target.provider().to_owned(),
                        known: if known.is_empty() { "none".to_owned() } else { known.join(", ") },
                    });
                }
            }
            let name = route.name_arc().clone();
            route_order.push(name.clone());
            if routes
                .insert(name.clone(), RouteSlot { route: Arc::new(route), turn: AtomicU64::new(0) })
                .is_some()
            {
                return Err(ConfigError::DuplicateRoute(name.to_string()));
            }
        }
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
        let health = match self.store {
            Some(store) => HealthBoard::with_store(self.health, store),
            None => HealthBoard::new(self.health),
        };
        Ok(Router {
            inner: Arc::new(Inner {
                providers,
                routes,
                route_order,
                default_route,
                health,
                events: EventBus::new(self.event_capacity),
                budget: RetryBudget::new(self.budget),
                pacer: self.pacer,
                jitter: Jitter::new(self.seed),
            }),
        })
    }
}

/// What a request resolved to: the governing route, the chain, and whether it named a target.
struct Resolved {
    route: Arc<Route>,
    chain: Vec<Target>,
    explicit: bool,
}

/// What one kind of exchange (a chat, a stream, embeddings) does at the points where they differ.
pub(crate) trait Exchange: Sync {
    type Output: Send;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<Self::Output, ProviderError>>;

    /// The longest one attempt may take before it counts as a timeout, and the name of the
    /// limit for the error message.
    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str);

    /// Whether the answer is a content-filter refusal.
    fn is_content_filtered(&self, output: &Self::Output) -> bool;

    /// The chat request, for candidates; `None` when candidates cannot answer this exchange.
    fn chat_request(&self) -> Option<&ChatRequest>;

    fn candidate_output(&self, response: ChatResponse) -> Option<Self::Output>;

    fn estimated_tokens(&self) -> u32;

    /// The tokens the provider counted for an answer, when the answer says (streams settle
    /// their pacing reservation when they end instead).
    fn used_tokens(&self, output: &Self::Output) -> Option<u32>;
}

struct ChatExchange<'r>(&'r ChatRequest);

impl Exchange for ChatExchange<'_> {
    type Output = ChatResponse;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        provider.chat(call, self.0)
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        (route.timeouts().total, "total")
    }

    fn is_content_filtered(&self, output: &ChatResponse) -> bool {
        output.is_content_filtered()
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        Some(self.0)
    }

    fn candidate_output(&self, response: ChatResponse) -> Option<ChatResponse> {
        Some(response)
    }

    fn estimated_tokens(&self) -> u32 {
        self.0.estimated_prompt_tokens().saturating_add(self.0.max_tokens.unwrap_or(0))
    }

    fn used_tokens(&self, output: &ChatResponse) -> Option<u32> {
        output.usage.map(|u| u.total_tokens)
    }
}

struct EmbeddingsExchange<'r>(&'r EmbeddingsRequest);

impl Exchange for EmbeddingsExchange<'_> {
    type Output = EmbeddingsResponse;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        provider.embeddings(call, self.0)
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        (route.timeouts().total, "total")
    }

    fn is_content_filtered(&self, _: &EmbeddingsResponse) -> bool {
        false
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        None
    }

    fn candidate_output(&self, _: ChatResponse) -> Option<EmbeddingsResponse> {
        None
    }

    fn estimated_tokens(&self) -> u32 {
        let chars: usize = self.0.input.texts().iter().map(|t| t.len()).sum();
        u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
    }

    fn used_tokens(&self, output: &EmbeddingsResponse) -> Option<u32> {
        output.usage.map(|u| u.total_tokens)
    }
}

/// Forwards what a provider's headers say to the pacer, for one attempt's provider and key.
struct PacerSink<'a> {
    pacer: &'a dyn Pacer,
    provider: &'a str,
    credential_id: &'a CredentialId,
    /// The attempt's place in its lane's dispatch order.
    dispatch: Option<crate::pacing::Dispatch>,
}

impl RateLimitSink for PacerSink<'_> {
    fn observe(&self, limits: &crate::ratelimit::RateLimits) {
        self.pacer.observe_answer(self.provider, self.credential_id, self.dispatch, limits);
    }
}

/// What the engine hands back on success.
pub(crate) struct Served<O> {
    pub(crate) output: O,
    pub(crate) via: Via,
    pub(crate) route: Arc<str>,
    pub(crate) trail: Trail,
    pub(crate) timing: Timing,
    /// The target and credential index that answered (none for candidates).
    pub(crate) answered: Option<(Target, usize)>,
    pub(crate) permit: Option<Permit>,
    pub(crate) attempt_started: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) timeouts: crate::route::Timeouts,
}

/// Which chain the router is walking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    General,
    ContextWindow,
    ContentPolicy,
}

impl Router {
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
        let resolved = self.resolve(&request.model)?;
        let served = self.run(&ChatExchange(request), resolved, options).await?;
        let usage = served.output.usage;
        let cost = match (&served.answered, &usage) {
            (Some((target, _)), Some(usage)) => self
                .inner
                .providers
                .get(target.provider())
                .and_then(|slot| slot.prices.get(target.model()))
                .map(|price| price.cost(usage)),
            _ => None,
        };
        Ok(Answer {
            response: served.output,
            served_by: served.via,
            route: served.route,
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
        let resolved = self.resolve(&request.model)?;
        let served = self.run(&StreamExchange(request), resolved, options).await?;
        Ok(RoutedStream::new(self.inner.clone(), served))
    }

    /// Embeds along a route. Fallback stays within one embedding space: vectors of two models
    /// are not interchangeable.
    pub async fn embeddings(
        &self,
        request: &EmbeddingsRequest,
        options: &RequestOptions,
    ) -> Result<EmbeddingsAnswer, RouteError> {
        let mut resolved = self.resolve(&request.model)?;
        if !resolved.explicit {
            let targets = resolved.route.targets();
            let space = targets[0].embedding_space().to_owned();
            resolved.chain =
                targets.iter().filter(|t| t.embedding_space() == space).map(|t| t.target.clone()).collect();
        }
        let served = self.run(&EmbeddingsExchange(request), resolved, options).await?;
        Ok(EmbeddingsAnswer {
            response: served.output,
            served_by: served.via,
            route: served.route,
            trail: served.trail,
            timing: served.timing,
        })
    }

    /// A new subscription to the router's events.
    pub fn subscribe(&self) -> Subscription {
        self.inner.events.subscribe()
    }

    /// The bus itself, for publishing from integrations (the pacer, the gateway).
    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }

    /// Prepares every provider's per-thread state on the calling thread ([`Provider::warm`]).
    pub fn warm(&self) {
        for slot in self.inner.providers.values() {
            slot.provider.warm();
        }
    }

    /// The health of every target and credential called so far.
    pub fn health(&self) -> HealthSnapshot {
        self.inner.health.snapshot()
    }

    /// The health of one target.
    pub fn target_health(&self, target: &Target) -> TargetHealth {
        self.inner.health.target(target)
    }

    /// Resets one target (and its provider's credentials) to `unknown`.
    pub fn reset(&self, target: &Target) -> Result<(), RouteError> {
        let slot =
            self.inner.providers.get(target.provider()).ok_or_else(|| self.unknown_model(target.as_str()))?;
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
        self.inner.route_order.iter().filter_map(|name| self.inner.routes.get(name)).map(|slot| &*slot.route)
    }

    pub fn route(&self, name: &str) -> Option<&Route> {
        self.inner.routes.get(name).map(|slot| &*slot.route)
    }

    pub fn default_route(&self) -> &Route {
        &self.inner.routes[&self.inner.default_route].route
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

    /// The credentials of a provider (ids and masked keys only leave through them).
    pub fn credentials(&self, provider: &str) -> Option<&[Credential]> {
        self.inner.providers.get(provider).map(|slot| slot.credentials.as_slice())
    }

    fn unknown_model(&self, model: &str) -> RouteError {
        let mut known: Vec<String> = self.inner.route_order.iter().map(ToString::to_string).collect();
        known.extend(self.routes().flat_map(|r| r.all_targets()).map(ToString::to_string));
        known.dedup();
        RouteError::UnknownModel { model: model.to_owned(), known }
    }

    fn resolve(&self, model: &str) -> Result<Resolved, RouteError> {
        let inner = &self.inner;
        let name = if model.is_empty() { &*inner.default_route } else { model };
        if let Some(slot) = inner.routes.get(name) {
            let route = slot.route.clone();
            let chain = self.rotate(&route, &slot.turn);
            return Ok(Resolved { route, chain, explicit: false });
        }
        match model.parse::<Target>() {
            Ok(target) if inner.providers.contains_key(target.provider()) => {
                let route = Arc::new(self.default_route().for_named_target(target.clone()));
                Ok(Resolved { route, chain: vec![target], explicit: true })
            }
            _ => Err(self.unknown_model(model)),
        }
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
            let start = match route.rotation() {
                Rotation::RoundRobin => (turn % tier.len() as u64) as usize,
                Rotation::Weighted => {
                    let total: u64 = tier.iter().map(|t| u64::from(t.weight)).sum();
                    if total == 0 {
                        0
                    } else {
                        let mut draw = self.inner.jitter.next_u64() % total;
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
                Rotation::Ordered => 0,
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

    /// What to do after a failed attempt: one place holds the catalog's rules and the route's
    /// overrides, so the engine loop only carries them out.
    fn after_failure(
        &self,
        route: &Route,
        error: &ProviderError,
        at: &FailurePoint,
    ) -> (Next, Option<String>) {
        let kind = error.kind();
        if kind == ErrorKind::Cancelled {
            return (Next::Stop, None);
        }
        // Another key of the same provider can fix what this key broke.
        if at.can_rotate && matches!(kind, ErrorKind::Auth | ErrorKind::QuotaExceeded) {
            return (Next::Rotate, Some("trying the provider's next credential".to_owned()));
        }
        let retry = route.retry();
        let mut note = None;
        if route.retries_on(error) && at.retries + 1 < retry.max_attempts {
            let retry_after = error.retry_after();
            let delay = retry_delay(retry, at.retries + 1, self.inner.jitter.unit(), retry_after);
            if let Some(wait) = retry_after.filter(|wait| *wait > retry.max_wait) {
                // Never sleep longer than max_wait: move on, or let the caller see the
                // provider's Retry-After, rather than hold the request for minutes.
                note = Some(format!(
                    "Retry-After {wait:?} exceeds max_wait {:?}; not waiting for it",
                    retry.max_wait
                ));
            } else if at.deadline.is_some_and(|d| Instant::now() + delay >= d) {
                note = Some(format!("a retry in {delay:?} would pass the request deadline"));
            } else if !self.inner.budget.try_spend() {
                note = Some("retry budget spent: not retrying".to_owned());
            } else {
                return (Next::Retry(delay), None);
            }
        }
        if !at.no_fallback {
            if kind == ErrorKind::ContextLength
                && at.chain == Chain::General
                && !route.context_window().is_empty()
            {
                return (Next::Switch(Chain::ContextWindow), note);
            }
            if kind == ErrorKind::ContentFiltered
                && at.chain != Chain::ContentPolicy
                && !route.content_policy().is_empty()
            {
                return (
                    Next::Switch(Chain::ContentPolicy),
                    Some("redirected to the content-policy targets".to_owned()),
                );
            }
        }
        if at.no_fallback || !route.falls_back_on(error) {
            return (Next::Stop, note);
        }
        (Next::MoveOn, note)
    }

    /// The engine: walks the chain, retrying, skipping, switching chains and falling back,
    /// until an answer or a final error.
    async fn run<X: Exchange>(
        &self,
        x: &X,
        resolved: Resolved,
        options: &RequestOptions,
    ) -> Result<Served<X::Output>, RouteError> {
        let inner = &*self.inner;
        let Resolved { route, chain, explicit } = resolved;
        let started = Instant::now();
        let deadline = options.deadline.or(route.timeouts().deadline).map(|d| started + d);
        let health_ttl = route.health_gate().then(|| route.health_ttl());
        let no_fallback = options.no_fallback;
        inner.budget.record_request();

        let mut trail = Trail::default();
        let mut queued_total = Duration::ZERO;
        let mut last_error: Option<ProviderError> = None;
        let mut queue: VecDeque<(Target, bool)> = chain.into_iter().map(|t| (t, false)).collect();
        if no_fallback {
            queue.truncate(1);
        }
        let mut chain_kind = Chain::General;
        let mut chain_called = false;
        let mut chain_soonest: Option<(Target, Instant)> = None;
        let mut previous: Option<Target> = None;
        let mut out_of_time = false;
        // A refusal redirected to the content-policy chain: served after all if that chain
        // produces nothing, since it is the provider's real answer.
        let mut refusal: Option<(X::Output, Target, usize, Instant)> = None;

        'chain: loop {
            let Some((target, force)) = queue.pop_front() else {
                // Every target of this chain was gated: a stale verdict must not become an
                // outage, so try the one that recovers first.
                if !chain_called && let Some((target, _)) = chain_soonest.take() {
                    queue.push_back((target, true));
                    continue 'chain;
                }
                break 'chain;
            };
            let Some(slot) = inner.providers.get(target.provider()) else { continue };
            let mut exclude = 0u64;
            let mut retries = 0u32;
            // The error of the previous attempt on this target, while retrying or rotating keys.
            let mut pending: Option<ProviderError> = None;
            let mut note_next: Option<String> =
                force.then(|| "every target was gated; trying the one that recovers first".to_owned());

            loop {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    out_of_time = true;
                    last_error = Some(pending.take().unwrap_or_else(|| {
                        ProviderError::new(
                            ErrorKind::Timeout,
                            "request deadline passed before the next attempt",
                        )
                        .with_target(target.clone())
                    }));
                    break 'chain;
                }
                let query = GateQuery {
                    target: &target,
                    credentials: &slot.credential_ids,
                    // Within one request, a retry is not stopped by the failure it retries.
                    health_ttl: if pending.is_some() { None } else { health_ttl },
                    explicit,
                    force,
                    exclude,
                };
                let (gate, events) = inner.health.admit(&query);
                inner.publish_all(events);
                let (credential, probe) = match gate {
                    Gate::Pass { credential, probe } => (credential, probe),
                    Gate::Skip { exhausted, until, reason } => {
                        let Some(error) = pending.take() else {
                            let error = exhausted.then(|| {
                                let error = ProviderError::new(ErrorKind::QuotaExceeded, reason.clone())
                                    .with_target(target.clone());
                                match until.and_then(|u| u.checked_duration_since(now)) {
                                    Some(wait) => error.with_retry_after(wait),
                                    None => error,
                                }
                            });
                            trail.push(Attempt {
                                via: Via::Target(target.clone()),
                                credential_id: None,
                                outcome: if exhausted {
                                    Outcome::SkippedExhausted
                                } else {
                                    Outcome::SkippedUnhealthy
                                },
                                error,
                                started: now - started,
                                duration: Duration::ZERO,
                                queued: Duration::ZERO,
                                mid_stream: false,
                                note: Some(reason),
                            });
                            if !exhausted
                                && let Some(until) = until
                                && chain_soonest.as_ref().is_none_or(|(_, best)| until < *best)
                            {
                                chain_soonest = Some((target.clone(), until));
                            }
                            continue 'chain;
                        };
                        // The breaker opened (or the keys ran out) during this request: the
                        // previous attempt's failure decides, as if it had been the last try.
                        if let Some(last) = trail.last_mut() {
                            last.outcome = Outcome::Failed;
                            last.note = Some(reason);
                        }
                        if no_fallback || !route.falls_back_on(&error) {
                            return Err(RouteError::Upstream { error, trail });
                        }
                        last_error = Some(error);
                        continue 'chain;
                    }
                };
                chain_called = true;
                let cred = &slot.credentials[credential];
                if pending.is_none()
                    && let Some(from) = previous.replace(target.clone())
                    && from != target
                {
                    inner.events.publish(EventKind::ProviderSwitch {
                        from,
                        to: target.clone(),
                        reason: last_error.as_ref().map(ProviderError::kind),
                    });
                }

                // Pacing: wait for a permit, counted against the deadline.
                let attempt_started = Instant::now();
                let mut permit = match &inner.pacer {
                    None => None,
                    Some(pacer) => {
                        let request = PaceRequest {
                            provider: &slot.id,
                            credential_id: cred.id(),
                            estimated_tokens: x.estimated_tokens(),
                            deadline,
                            // Pacing waits; it reroutes only when the route asks it to.
                            spill_after: (route.spill_over() && !queue.is_empty())
                                .then_some(route.retry().max_wait),
                        };
                        match pacer.acquire(request).await {
                            Ok(permit) => {
                                if let Some(reason) = permit.reason {
                                    inner.events.publish(EventKind::RateLimitWaited {
                                        provider: slot.id.clone(),
                                        credential_id: cred.id().clone(),
                                        waited: permit.waited,
                                        reason,
                                    });
                                }
                                Some(permit)
                            }
                            Err(error) => {
                                if probe {
                                    inner.health.release_probe(&target, &slot.credential_ids);
                                }
                                let error =
                                    error.with_target(target.clone()).with_credential(cred.id().clone());
                                trail.push(Attempt {
                                    via: Via::Target(target.clone()),
                                    credential_id: Some(cred.id().clone()),
                                    outcome: Outcome::Failed,
                                    error: Some(error.clone()),
                                    started: attempt_started - started,
                                    duration: attempt_started.elapsed(),
                                    queued: attempt_started.elapsed(),
                                    mid_stream: false,
                                    note: Some("the pacer refused the call".to_owned()),
                                });
                                if !no_fallback && route.falls_back_on(&error) {
                                    last_error = Some(error);
                                    continue 'chain;
                                }
                                return Err(RouteError::Upstream { error, trail });
                            }
                        }
                    }
                };
                let queued = permit.as_ref().map_or(Duration::ZERO, |p| p.waited);
                queued_total += queued;

                let (limit, limit_name) = x.attempt_limit(&route);
                let sent = Instant::now();
                let remaining = deadline.map_or(limit, |d| d.saturating_duration_since(sent).min(limit));
                let sink = inner.pacer.as_ref().map(|pacer| PacerSink {
                    pacer: &**pacer,
                    provider: &slot.id,
                    credential_id: cred.id(),
                    dispatch: permit.as_ref().and_then(|p| p.dispatch),
                });
                let call = Call {
                    model: target.model(),
                    credential: cred,
                    timeouts: route.timeouts(),
                    rate_limits: sink.as_ref().map(|s| s as &dyn RateLimitSink),
                };
                // A timeout forced by the caller's deadline says nothing about the provider.
                let mut cut_by_deadline = false;
                let result = match tokio::time::timeout(remaining, x.call(&*slot.provider, call)).await {
                    Ok(result) => result,
                    Err(_) if remaining < limit => {
                        cut_by_deadline = true;
                        out_of_time = true;
                        Err(ProviderError::new(
                            ErrorKind::Timeout,
                            format!("request deadline passed after {remaining:?} of waiting"),
                        ))
                    }
                    Err(_) => Err(ProviderError::new(
                        ErrorKind::Timeout,
                        format!("no answer within the {limit_name} timeout of {limit:?}"),
                    )),
                };
                let finished = Instant::now();
                let mut attempt = Attempt {
                    via: Via::Target(target.clone()),
                    credential_id: Some(cred.id().clone()),
                    outcome: Outcome::Ok,
                    error: None,
                    started: attempt_started - started,
                    duration: finished - attempt_started,
                    queued,
                    mid_stream: false,
                    note: note_next.take(),
                };

                let error = match result {
                    Ok(output) => {
                        if let Some(permit) = permit.as_mut()
                            && let Some(used) = x.used_tokens(&output)
                        {
                            permit.settle(Some(used));
                        }
                        let events = inner.health.record_success(&target, &slot.credential_ids, credential);
                        inner.publish_all(events);
                        let redirect = x.is_content_filtered(&output)
                            && chain_kind != Chain::ContentPolicy
                            && !route.content_policy().is_empty()
                            && !no_fallback;
                        if redirect {
                            attempt.outcome = Outcome::Redirected;
                            attempt.error = Some(
                                ProviderError::new(
                                    ErrorKind::ContentFiltered,
                                    "the answer was withheld by the content filter; redirecting to the content-policy targets",
                                )
                                .with_target(target.clone())
                                .with_credential(cred.id().clone()),
                            );
                            trail.push(attempt);
                            refusal = Some((output, target.clone(), credential, sent));
                            queue = route.content_policy().iter().map(|t| (t.clone(), false)).collect();
                            chain_kind = Chain::ContentPolicy;
                            (chain_called, chain_soonest) = (false, None);
                            continue 'chain;
                        }
                        trail.push(attempt);
                        return Ok(Served {
                            output,
                            via: Via::Target(target.clone()),
                            route: route.name_arc().clone(),
                            trail,
                            timing: Timing {
                                total: finished - started,
                                queued: queued_total,
                                first_token: None,
                            },
                            answered: Some((target, credential)),
                            permit,
                            attempt_started: sent,
                            deadline,
                            timeouts: *route.timeouts(),
                        });
                    }
                    Err(error) => {
                        redact(error, cred).with_target(target.clone()).with_credential(cred.id().clone())
                    }
                };
                if let Some(mut permit) = permit {
                    permit.settle(None);
                }
                let events = if cut_by_deadline {
                    Vec::new()
                } else {
                    inner.health.record_failure(&target, &slot.credential_ids, credential, &error)
                };
                // A probe whose outcome says nothing about the provider's health leaves the
                // circuit half-open for the next probe, instead of holding the slot.
                if probe && (cut_by_deadline || !error.kind().counts_for_breaker()) {
                    inner.health.release_probe(&target, &slot.credential_ids);
                }

                let can_rotate = credential < 63 && {
                    let rotated =
                        GateQuery { exclude: exclude | (1 << credential), health_ttl: None, ..query };
                    matches!(inner.health.peek(&rotated), Gate::Pass { .. })
                };
                let at = FailurePoint { retries, can_rotate, chain: chain_kind, no_fallback, deadline };
                let (next, note) = if cut_by_deadline {
                    (Next::MoveOn, Some("request deadline passed".to_owned()))
                } else {
                    self.after_failure(&route, &error, &at)
                };
                attempt.outcome = match next {
                    Next::Rotate | Next::Retry(_) => Outcome::Retried,
                    Next::Switch(Chain::ContentPolicy) => Outcome::Redirected,
                    _ => Outcome::Failed,
                };
                attempt.error = Some(error.clone());
                if note.is_some() {
                    attempt.note = note;
                }
                trail.push(attempt);
                inner.publish_all(events);
                inner.events.publish(EventKind::AttemptFailed {
                    target: target.clone(),
                    credential_id: Some(cred.id().clone()),
                    error: error.clone(),
                    will_retry: matches!(next, Next::Rotate | Next::Retry(_)),
                });
                match next {
                    Next::Rotate => {
                        exclude |= 1 << credential;
                        pending = Some(error);
                    }
                    Next::Retry(delay) => {
                        retries += 1;
                        pending = Some(error);
                        tokio::time::sleep(delay).await;
                    }
                    Next::Switch(kind) => {
                        let targets = match kind {
                            Chain::ContextWindow => route.context_window(),
                            _ => route.content_policy(),
                        };
                        queue = targets.iter().map(|t| (t.clone(), false)).collect();
                        chain_kind = kind;
                        (chain_called, chain_soonest) = (false, None);
                        last_error = Some(error);
                        continue 'chain;
                    }
                    Next::MoveOn => {
                        last_error = Some(error);
                        if cut_by_deadline {
                            break 'chain;
                        }
                        continue 'chain;
                    }
                    Next::Stop => return Err(RouteError::Upstream { error, trail }),
                }
            }
        }

        // The content-policy chain produced nothing: the refusal it replaced is the answer.
        if let Some((output, target, credential, sent)) = refusal {
            if let Some(redirected) =
                trail.attempts_mut().iter_mut().find(|a| a.outcome == Outcome::Redirected)
            {
                redirected.note =
                    Some("the content-policy chain failed: this refusal is the answer".to_owned());
            }
            return Ok(Served {
                output,
                via: Via::Target(target.clone()),
                route: route.name_arc().clone(),
                trail,
                timing: Timing { total: started.elapsed(), queued: queued_total, first_token: None },
                answered: Some((target, credential)),
                permit: None,
                attempt_started: sent,
                deadline,
                timeouts: *route.timeouts(),
            });
        }

        // Candidates: non-provider answers, once each, in order.
        if !explicit
            && !no_fallback
            && let Some(request) = x.chat_request()
        {
            for candidate in route.candidates() {
                let name = candidate.name().clone();
                inner.events.publish(EventKind::CandidateStarted { name: name.clone() });
                let at = Instant::now();
                let result = candidate.answer(request).await;
                let mut attempt = Attempt {
                    via: Via::Candidate(name.clone()),
                    credential_id: None,
                    outcome: Outcome::Candidate,
                    error: None,
                    started: at - started,
                    duration: at.elapsed(),
                    queued: Duration::ZERO,
                    mid_stream: false,
                    note: None,
                };
                match result.map(|response| x.candidate_output(response)) {
                    Ok(Some(output)) => {
                        trail.push(attempt);
                        inner.events.publish(EventKind::CandidateSucceeded { name: name.clone() });
                        return Ok(Served {
                            output,
                            via: Via::Candidate(name),
                            route: route.name_arc().clone(),
                            trail,
                            timing: Timing {
                                total: started.elapsed(),
                                queued: queued_total,
                                first_token: None,
                            },
                            answered: None,
                            permit: None,
                            attempt_started: at,
                            deadline,
                            timeouts: *route.timeouts(),
                        });
                    }
                    Ok(None) => {}
                    Err(detail) => {
                        attempt.outcome = Outcome::Failed;
                        attempt.error = Some(ProviderError::new(ErrorKind::Unavailable, detail.clone()));
                        trail.push(attempt);
                        inner.events.publish(EventKind::CandidateFailed { name, detail });
                    }
                }
            }
        }

        if out_of_time
            && let Some(last) = trail.last_mut()
            && last.note.is_none()
        {
            last.note = Some("request deadline passed".to_owned());
        }
        inner.events.publish(EventKind::AllTargetsFailed {
            route: route.name().to_owned(),
            attempts: trail.len(),
            last: last_error.as_ref().map(ProviderError::kind),
        });
        if no_fallback && let Some(error) = last_error {
            return Err(RouteError::Upstream { error, trail });
        }
        Err(RouteError::AllTargetsFailed { trail, last: last_error })
    }
}

/// Where a failed attempt stands, for [`Router::after_failure`].
struct FailurePoint {
    retries: u32,
    can_rotate: bool,
    chain: Chain,
    no_fallback: bool,
    deadline: Option<Instant>,
}

/// What the engine does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The same target at once, with the provider's next credential.
    Rotate,
    /// The same target again, after this wait.
    Retry(Duration),
    /// A special chain instead of what is left of the current one.
    Switch(Chain),
    /// The next target, or the candidates.
    MoveOn,
    /// Give up: the error is returned unchanged.
    Stop,
}

/// Removes the credential's key from whatever an upstream put in an error, so that no
/// provider (adapters, custom providers) can leak a key into trails, events, health or logs.
fn redact(error: ProviderError, credential: &Credential) -> ProviderError {
    match credential.key() {
        Some(key) => error.redacted(key),
        None => error,
    }
}

/// Prefetched streams are served through the same engine.
pub(crate) type StreamServed = Served<Prefetched>;
