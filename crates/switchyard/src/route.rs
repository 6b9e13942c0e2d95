//! Routes: named policies that say where a request goes and what happens when an attempt fails.
//!
//! ```
//! use std::time::Duration;
//! use switchyard::route::{Candidate, Retry, Route};
//!
//! let route = Route::builder("default")
//!     .target("openai:gpt-4o-mini")
//!     .target("anthropic:claude-sonnet-4-5")
//!     .context_window("anthropic:claude-sonnet-4-5")
//!     .retry(Retry { max_attempts: 3, ..Retry::default() })
//!     .health_ttl(Duration::from_secs(10))
//!     .candidate(Candidate::text("apology", "The assistant is busy, please retry shortly."))
//!     .build()
//!     .unwrap();
//! assert_eq!(route.targets().len(), 2);
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::chat::{ChatRequest, ChatResponse};
use crate::problem::Problem;
use crate::provider::BoxFuture;
pub use crate::timeouts::Timeouts;
use crate::{ErrorKind, ProviderError, Target};

/// How often and how patiently one target is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Tries per target, the first included. Default 2.
    pub max_attempts: u32,
    /// The first backoff; each retry doubles it, with full jitter. Default 250 ms.
    pub backoff_base: Duration,
    /// The longest backoff (before Retry-After raises it). Default 10 s.
    pub backoff_max: Duration,
    /// The longest wait for a retry of the same target: a Retry-After beyond it moves on to
    /// the next target at once when there is one. Default 5 s.
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_attempts: 2,
            backoff_base: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
            max_wait: Duration::from_secs(5),
        }
    }
}

/// How traffic spreads across the targets of one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rotation {
    /// Always in the configured order: pure fallback. The default.
    #[default]
    Ordered,
    /// Each request starts one further along the tier.
    RoundRobin,
    /// Each request starts at a target drawn by weight; the rest follow in order.
    Weighted,
    /// Fastest first: the tier ordered by each target's recent median latency (see
    /// [`latency`](crate::latency)), targets not yet measured first; one request in twenty
    /// starts at another target instead, so every target's latency stays known.
    LeastLatency,
    /// Cheapest first: the tier ordered by input plus output price per million tokens
    /// (the providers' `prices`), unpriced targets last, ties broken by latency.
    Cheapest,
}

/// In a target of a pattern route, the model the client asked for (`anthropic:{model}`).
pub const MODEL_PLACEHOLDER: &str = "{model}";

/// In a target of a pattern route, what the pattern's `*` stood for in the model the client
/// asked for: `openai/*` with `openai:{*}` sends `openai/gpt-4o` to OpenAI as `gpt-4o`.
pub const MATCH_PLACEHOLDER: &str = "{*}";

/// Whether `target` is a pattern route's stand-in, filled in per request: its model names
/// [`MODEL_PLACEHOLDER`] or [`MATCH_PLACEHOLDER`].
pub fn is_template(target: &Target) -> bool {
    let model = target.model();
    model.contains(MODEL_PLACEHOLDER) || model.contains(MATCH_PLACEHOLDER)
}

/// One target of a route, with its tier and weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    /// The `provider:model` this entry calls.
    pub target: Target,
    /// Lower tiers are tried first; a tier is reached only after every target above it.
    pub tier: u32,
    /// Share of traffic under [`Rotation::Weighted`].
    pub weight: u32,
    /// For embeddings: targets answer interchangeably only within one space. Defaults to the
    /// model name.
    pub embedding_space: Option<String>,
}

impl RouteTarget {
    /// The embedding space of this target: explicit, or the model's name.
    pub fn embedding_space(&self) -> &str {
        self.embedding_space.as_deref().unwrap_or(self.target.model())
    }
}

/// Which errors a rule applies to: the catalog's default, a list of kinds, or a predicate.
#[derive(Clone, Default)]
pub enum ErrorFilter {
    /// The catalog's default for the rule (see [`ErrorKind::retries_by_default`] and
    /// [`ErrorKind::falls_back_by_default`]).
    #[default]
    Catalog,
    /// Exactly these kinds, in place of the catalog's list.
    Kinds(Vec<ErrorKind>),
    /// Whatever the function says of each error; build one with [`ErrorFilter::predicate`].
    Predicate(Arc<dyn Fn(&ProviderError) -> bool + Send + Sync>),
}

impl ErrorFilter {
    /// A filter from a closure.
    pub fn predicate(f: impl Fn(&ProviderError) -> bool + Send + Sync + 'static) -> Self {
        ErrorFilter::Predicate(Arc::new(f))
    }

    fn matches(&self, error: &ProviderError, catalog: fn(ErrorKind) -> bool) -> bool {
        match self {
            ErrorFilter::Catalog => catalog(error.kind()),
            ErrorFilter::Kinds(kinds) => kinds.contains(&error.kind()),
            ErrorFilter::Predicate(f) => f(error),
        }
    }
}

impl fmt::Debug for ErrorFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorFilter::Catalog => f.write_str("Catalog"),
            ErrorFilter::Kinds(kinds) => f.debug_tuple("Kinds").field(kinds).finish(),
            ErrorFilter::Predicate(_) => f.write_str("Predicate(..)"),
        }
    }
}

/// A candidate's answer function.
pub type CandidateFn =
    Arc<dyn Fn(&ChatRequest) -> BoxFuture<'static, Result<ChatResponse, String>> + Send + Sync>;
/// A check of a candidate's answer; an `Err` counts as the candidate failing.
pub type Validator = Arc<dyn Fn(&ChatResponse) -> Result<(), String> + Send + Sync>;

/// A non-provider fallback, run after every target failed with a kind the route falls back on.
#[derive(Clone)]
pub struct Candidate {
    name: Arc<str>,
    source: CandidateSource,
    validate: Option<Validator>,
}

#[derive(Clone)]
enum CandidateSource {
    Text(String),
    Function(CandidateFn),
    Cache(Arc<crate::answer_cache::AnswerCache>),
}

impl Candidate {
    /// A fixed degraded answer.
    pub fn text(name: impl Into<Arc<str>>, text: impl Into<String>) -> Self {
        Self { name: name.into(), source: CandidateSource::Text(text.into()), validate: None }
    }

    /// An answer computed by an async function (a cache, a smaller local model, ...).
    pub fn function<F, Fut>(name: impl Into<Arc<str>>, f: F) -> Self
    where
        F: Fn(&ChatRequest) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<ChatResponse, String>> + Send + 'static,
    {
        let f: CandidateFn = Arc::new(move |request| Box::pin(f(request)));
        Self { name: name.into(), source: CandidateSource::Function(f), validate: None }
    }

    /// The last good answer to the same request on this route, no older than the settings'
    /// `max_age`: every successful answer on the route is remembered (see
    /// [`answer_cache`](crate::answer_cache)).
    pub fn cache(name: impl Into<Arc<str>>, settings: crate::answer_cache::AnswerCacheSettings) -> Self {
        let cache = Arc::new(crate::answer_cache::AnswerCache::new(settings));
        Self { name: name.into(), source: CandidateSource::Cache(cache), validate: None }
    }

    /// The answers a `cache` candidate keeps; `None` for other kinds.
    pub fn answer_cache(&self) -> Option<&Arc<crate::answer_cache::AnswerCache>> {
        match &self.source {
            CandidateSource::Cache(cache) => Some(cache),
            _ => None,
        }
    }

    /// Checks each answer; a rejection counts as this candidate failing.
    pub fn validate(
        mut self,
        check: impl Fn(&ChatResponse) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validate = Some(Arc::new(check));
        self
    }

    /// The name the trail ([`Via::Candidate`](crate::trail::Via::Candidate)) and events know it by;
    /// a text candidate's answer carries `candidate:{name}` as its model.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Produces the candidate's answer, validated, with its age when it was remembered.
    pub(crate) async fn answer(
        &self,
        request: &ChatRequest,
        scope: &str,
        route: &str,
    ) -> Result<(ChatResponse, Option<Duration>), String> {
        let (response, age) = match &self.source {
            CandidateSource::Text(text) => {
                (ChatResponse::from_text(format!("candidate:{}", self.name), text.clone()), None)
            }
            CandidateSource::Function(f) => (f(request).await?, None),
            CandidateSource::Cache(cache) => match cache.recall_shared(scope, route, request).await {
                Some((answer, age)) => (answer, Some(age)),
                None => {
                    let max_age = cache.settings().max_age;
                    return Err(format!("no answer to this request younger than {max_age:?} is kept"));
                }
            },
        };
        if let Some(check) = &self.validate {
            check(&response).map_err(|why| format!("rejected by validation: {why}"))?;
        }
        Ok((response, age))
    }
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            CandidateSource::Text(_) => "text",
            CandidateSource::Function(_) => "function",
            CandidateSource::Cache(_) => "cache",
        };
        f.debug_struct("Candidate").field("name", &self.name).field("source", &source).finish()
    }
}

/// A named routing policy. Build one with [`Route::builder`]; a `Route` that exists is valid.
#[derive(Debug, Clone)]
pub struct Route {
    name: Arc<str>,
    targets: Vec<RouteTarget>,
    rotation: Rotation,
    retry: Retry,
    health_gate: bool,
    health_ttl: Duration,
    context_window: Vec<Target>,
    content_policy: Vec<Target>,
    timeouts: Timeouts,
    candidates: Vec<Candidate>,
    retry_on: ErrorFilter,
    fallback_on: ErrorFilter,
    spill_over: bool,
    hedge: Option<Hedge>,
    stream_upstream: bool,
    continuation: bool,
    affinity: Option<bool>,
    affinity_ttl: Duration,
    drop_params: bool,
}

/// When a request is hedged: a second attempt on the chain's next target, started beside the
/// first when the first has not answered (or sent its first content, reasoning included) after a
/// delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hedge {
    /// The delay.
    pub after: HedgeAfter,
    /// The delay's floor, and the delay itself while the target has fewer than 20 samples.
    /// Default 300 ms.
    pub min_after: Duration,
    /// Hedges allowed, as a share of the route's requests over the last 10 s. Default 0.1.
    pub max_share: f64,
    /// Hedges always allowed over the last 10 s, whatever the share allows, so a quiet route
    /// hedges its first slow requests too. With shared state the floor is the fleet's: the
    /// other replicas' hedges count against it. Default 3.
    pub min_hedges: u32,
}

impl Hedge {
    /// A hedge after the target's recent p95, with the defaults.
    pub fn p95() -> Self {
        Self::with(HedgeAfter::P95)
    }

    /// A hedge after a fixed delay, with the default budget.
    pub fn after(delay: Duration) -> Self {
        Self::with(HedgeAfter::Fixed(delay))
    }

    fn with(after: HedgeAfter) -> Self {
        Self { after, min_after: Duration::from_millis(300), max_share: 0.1, min_hedges: 3 }
    }
}

/// What a hedge waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeAfter {
    /// The first attempt's target's recent p95 (see [`latency`](crate::latency)).
    P95,
    /// A fixed delay.
    Fixed(Duration),
}

impl Route {
    /// A builder for a route named `name`: what clients send as `model`, so not empty and without a
    /// colon. Defaults: ordered rotation, [`Retry::default`], health gate on with a 5 s TTL,
    /// [`Timeouts::default`], no special chains or candidates, the catalog's retry and fallback
    /// rules, no spill-over.
    pub fn builder(name: impl Into<String>) -> RouteBuilder {
        RouteBuilder {
            name: name.into(),
            targets: Vec::new(),
            rotation: Rotation::Ordered,
            retry: Retry::default(),
            health_gate: true,
            health_ttl: Duration::from_secs(5),
            context_window: Vec::new(),
            content_policy: Vec::new(),
            timeouts: Timeouts::default(),
            candidates: Vec::new(),
            retry_on: ErrorFilter::Catalog,
            fallback_on: ErrorFilter::Catalog,
            spill_over: false,
            hedge: None,
            stream_upstream: true,
            continuation: true,
            affinity: None,
            affinity_ttl: Duration::from_secs(3600),
            drop_params: false,
            errors: Vec::new(),
            given: [0; 3],
        }
    }

    /// The name clients send as `model`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The general chain: never empty, sorted by tier, in configured order within a tier.
    pub fn targets(&self) -> &[RouteTarget] {
        &self.targets
    }

    /// How traffic spreads within a tier.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// How each target is retried.
    pub fn retry(&self) -> &Retry {
        &self.retry
    }

    /// Whether targets that recently failed are skipped (`skipped_unhealthy`) until their gate
    /// expires.
    pub fn health_gate(&self) -> bool {
        self.health_gate
    }

    /// How long a breaker-counted failure gates its target (a later Retry-After extends it), when
    /// the health gate is on.
    pub fn health_ttl(&self) -> Duration {
        self.health_ttl
    }

    /// The chain a context-length failure switches to; when empty, such a failure ends the request
    /// unless `fallback_on` names it (the catalog does not).
    pub fn context_window(&self) -> &[Target] {
        &self.context_window
    }

    /// The chain a content-filter refusal is redirected to, once per request; when empty, the
    /// refusal is what the caller gets.
    pub fn content_policy(&self) -> &[Target] {
        &self.content_policy
    }

    /// Time limits of each attempt and of the whole request.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Non-provider fallbacks, tried in order after every target failed with a kind the route falls
    /// back on; never for a request that named a target or turned fallback off.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// Whether a call that would wait longer than `retry.max_wait` for pacing goes to the next
    /// target instead.
    pub fn spill_over(&self) -> bool {
        self.spill_over
    }

    /// Whether a non-streamed chat is sent upstream as a stream and put back together
    /// ([`assembly`](crate::assembly)), so that the `first_byte` and `idle` limits guard it as
    /// they guard a stream, and a break before its end is retried or failed over whole (the
    /// client has seen nothing). Default on; off for a server that streams badly.
    pub fn stream_upstream(&self) -> bool {
        self.stream_upstream
    }

    /// Whether a target whose API has no equivalent for a parameter of the request (an
    /// OpenAI client's `frequency_penalty` toward Claude) is sent the request without it, the
    /// attempt's note naming what was left out, rather than skipped as unsupported. Only
    /// parameters that tune an answer go ([`ChatRequest::remove_param`](crate::chat::ChatRequest::remove_param)):
    /// never the conversation, the tools, or what shapes the answer (`n`, `response_format`).
    /// Default off: a request is never served with a meaningful parameter silently dropped.
    pub fn drop_params(&self) -> bool {
        self.drop_params
    }

    /// Whether a stream that breaks after its first text (cut, stalled past `idle`, failed by an
    /// error event) is finished by the route's other targets: one that accepts a prefill
    /// ([`Provider::accepts_prefill`](crate::provider::Provider::accepts_prefill)) continues from
    /// what the caller already has; another may regenerate the answer, kept only when it begins
    /// with exactly that text. Its text follows on the caller's stream, so the caller receives
    /// one whole answer; the trail marks the attempt `continued`. Only text (not a tool call, a
    /// refusal, a structured answer or several choices), once per request, never when the
    /// caller's deadline cut the stream; when no target continues, the caller is told of the
    /// original break. Default on.
    pub fn continuation(&self) -> bool {
        self.continuation
    }

    /// The answers this route's `cache` candidates keep.
    pub fn answer_caches(&self) -> impl Iterator<Item = &Arc<crate::answer_cache::AnswerCache>> {
        self.candidates.iter().filter_map(Candidate::answer_cache)
    }

    /// Takes over the answers `kept` holds of each `cache` candidate of this route's name and
    /// the candidate's, when their settings are the same (a reconfiguration keeps what its
    /// caches learned).
    pub(crate) fn keep_answer_caches(&mut self, kept: &crate::router::AnswerCaches) {
        for candidate in &mut self.candidates {
            let CandidateSource::Cache(cache) = &mut candidate.source else { continue };
            let key = (self.name.clone(), candidate.name.clone());
            if let Some(old) = kept.get(&key).filter(|old| old.settings() == cache.settings()) {
                *cache = old.clone();
            }
        }
    }

    /// When requests are hedged; `None` for never (the default). A route with one target
    /// never hedges.
    pub fn hedge(&self) -> Option<&Hedge> {
        self.hedge.as_ref().filter(|_| self.targets.len() > 1)
    }

    /// Every target this route may call, special chains included, without repeats.
    pub fn all_targets(&self) -> Vec<&Target> {
        let mut all: Vec<&Target> = Vec::new();
        let chains =
            self.targets.iter().map(|t| &t.target).chain(&self.context_window).chain(&self.content_policy);
        for target in chains {
            if !all.contains(&target) {
                all.push(target);
            }
        }
        all
    }

    /// Whether the same target is retried after `error`.
    pub fn retries_on(&self, error: &ProviderError) -> bool {
        self.retry_on.matches(error, ErrorKind::retries_by_default)
    }

    /// Whether the router moves on to the next target after `error`.
    pub fn falls_back_on(&self, error: &ProviderError) -> bool {
        self.fallback_on.matches(error, ErrorKind::falls_back_by_default)
    }

    /// The same policy over different targets, without special chains or candidates: what a
    /// request that names a target directly is governed by.
    /// Whether a session's requests go back to where it was served ([`affinity`](crate::affinity)):
    /// `None` leaves it to the router (on when a tier rotates or a provider rotates its keys).
    pub fn affinity(&self) -> Option<bool> {
        self.affinity
    }

    /// How long a session's pin lasts without a request. Default 1 h.
    pub fn affinity_ttl(&self) -> Duration {
        self.affinity_ttl
    }

    /// The prefix of a pattern route (its name ends in `*`, as `claude-*`): it governs every
    /// model a client names that begins with it and no route has as its exact name (the
    /// longest prefix first). `None` for a route of one name.
    pub fn pattern(&self) -> Option<&str> {
        self.name.strip_suffix('*')
    }

    /// This pattern route for the model `model` a client asked for: [`MODEL_PLACEHOLDER`] in
    /// each target replaced by it, [`MATCH_PLACEHOLDER`] by what follows the pattern's prefix.
    /// `Err` when a target would not be a target (white space, nothing after the prefix).
    pub(crate) fn for_model(&self, model: &str) -> Result<Route, crate::TargetError> {
        let matched = self.pattern().and_then(|prefix| model.strip_prefix(prefix)).unwrap_or(model);
        let fill = |target: &Target| match is_template(target) {
            true => {
                let filled =
                    target.model().replace(MODEL_PLACEHOLDER, model).replace(MATCH_PLACEHOLDER, matched);
                Target::new(target.provider(), &filled)
            }
            false => Ok(target.clone()),
        };
        let targets = self
            .targets
            .iter()
            .map(|t| Ok(RouteTarget { target: fill(&t.target)?, ..t.clone() }))
            .collect::<Result<_, crate::TargetError>>()?;
        let context_window = self.context_window.iter().map(fill).collect::<Result<_, _>>()?;
        let content_policy = self.content_policy.iter().map(fill).collect::<Result<_, _>>()?;
        Ok(Route { targets, context_window, content_policy, ..self.clone() })
    }

    /// Whether a target names [`MODEL_PLACEHOLDER`] or [`MATCH_PLACEHOLDER`], to be filled per
    /// request.
    pub(crate) fn fills_model(&self) -> bool {
        self.all_targets().iter().any(|t| is_template(t))
    }

    pub(crate) fn for_named_target(&self, target: Target) -> Route {
        // Field by field rather than `..self.clone()`, which would copy the chains it drops.
        Route {
            name: self.name.clone(),
            targets: vec![RouteTarget { target, tier: 0, weight: 1, embedding_space: None }],
            rotation: Rotation::Ordered,
            retry: self.retry,
            health_gate: self.health_gate,
            health_ttl: self.health_ttl,
            context_window: Vec::new(),
            content_policy: Vec::new(),
            timeouts: self.timeouts,
            candidates: Vec::new(),
            retry_on: self.retry_on.clone(),
            fallback_on: self.fallback_on.clone(),
            spill_over: self.spill_over,
            // One target: nothing to hedge with.
            hedge: None,
            stream_upstream: self.stream_upstream,
            continuation: self.continuation,
            affinity: self.affinity,
            affinity_ttl: self.affinity_ttl,
            drop_params: self.drop_params,
        }
    }
}

/// Collects a route's settings; [`RouteBuilder::build`] validates them all at once.
#[derive(Debug)]
pub struct RouteBuilder {
    name: String,
    targets: Vec<RouteTarget>,
    rotation: Rotation,
    retry: Retry,
    health_gate: bool,
    health_ttl: Duration,
    context_window: Vec<Target>,
    content_policy: Vec<Target>,
    timeouts: Timeouts,
    candidates: Vec<Candidate>,
    retry_on: ErrorFilter,
    fallback_on: ErrorFilter,
    spill_over: bool,
    hedge: Option<Hedge>,
    stream_upstream: bool,
    continuation: bool,
    drop_params: bool,
    errors: Vec<Problem>,
    /// Targets given so far to each list (targets, context window, content policy), so a
    /// problem names its place in the list as configured.
    given: [usize; 3],
    affinity: Option<bool>,
    affinity_ttl: Duration,
}

impl RouteBuilder {
    fn parse(&mut self, list: usize, text: &str) -> Option<Target> {
        let index = self.given[list];
        self.given[list] += 1;
        match text.parse() {
            Ok(target) => Some(target),
            Err(error) => {
                let key = ["targets", "context_window", "content_policy"][list];
                self.errors.push(error.at(format!("{key}[{index}]")));
                None
            }
        }
    }

    /// Appends a target in tier 0 with weight 1.
    pub fn target(self, target: &str) -> Self {
        self.tiered_target(target, 0, 1)
    }

    /// Appends a target in `tier` with `weight`.
    pub fn tiered_target(mut self, target: &str, tier: u32, weight: u32) -> Self {
        if let Some(target) = self.parse(0, target) {
            self.targets.push(RouteTarget { target, tier, weight, embedding_space: None });
        }
        self
    }

    /// Appends a fully described target.
    pub fn route_target(mut self, target: RouteTarget) -> Self {
        self.given[0] += 1;
        self.targets.push(target);
        self
    }

    /// How traffic spreads within each tier. Default [`Rotation::Ordered`].
    pub fn rotation(mut self, rotation: Rotation) -> Self {
        self.rotation = rotation;
        self
    }

    /// How each target is retried. Default [`Retry::default`]; `build` rejects `max_attempts` 0
    /// and `backoff_base` above `backoff_max`.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Skip targets that recently failed (default on).
    pub fn health_gate(mut self, on: bool) -> Self {
        self.health_gate = on;
        self
    }

    /// How long a failure gates its target. Default 5 s, the breaker's first open time: a
    /// failure below the breaker's threshold keeps a target out no longer than an opened circuit
    /// would, so a target back from a short outage is used again within 5 s.
    pub fn health_ttl(mut self, ttl: Duration) -> Self {
        self.health_ttl = ttl;
        self
    }

    /// Appends a target of the context-window chain (larger models for prompts that are too long).
    pub fn context_window(mut self, target: &str) -> Self {
        if let Some(target) = self.parse(1, target) {
            self.context_window.push(target);
        }
        self
    }

    /// Appends a target of the content-policy chain (differently governed models for refusals).
    pub fn content_policy(mut self, target: &str) -> Self {
        if let Some(target) = self.parse(2, target) {
            self.content_policy.push(target);
        }
        self
    }

    /// Time limits of each attempt and of the request. Default [`Timeouts::default`]; `build`
    /// rejects a zero first-byte, idle or total limit.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Appends a candidate, tried after those appended before it.
    pub fn candidate(mut self, candidate: Candidate) -> Self {
        self.candidates.push(candidate);
        self
    }

    /// Which errors retry the same target (default: the catalog's).
    pub fn retry_on(mut self, filter: ErrorFilter) -> Self {
        self.retry_on = filter;
        self
    }

    /// Which errors move on to the next target (default: the catalog's).
    pub fn fallback_on(mut self, filter: ErrorFilter) -> Self {
        self.fallback_on = filter;
        self
    }

    /// Lets a call that would wait longer than `retry.max_wait` for pacing go to the next
    /// target instead (default off: pacing waits, it does not reroute).
    pub fn spill_over(mut self, on: bool) -> Self {
        self.spill_over = on;
        self
    }

    /// Sends non-streamed chats upstream as streams and puts them back together (default on).
    /// See [`Route::stream_upstream`].
    pub fn stream_upstream(mut self, on: bool) -> Self {
        self.stream_upstream = on;
        self
    }

    /// Sends a target the request without a parameter its API has no equivalent for, rather
    /// than skipping it (default off). See [`Route::drop_params`].
    pub fn drop_params(mut self, on: bool) -> Self {
        self.drop_params = on;
        self
    }

    /// Sends a session's requests back to the target and key that served it (`true`), or not
    /// (`false`). Default: on when a tier rotates or a provider of the route rotates its keys.
    /// See [`affinity`](crate::affinity).
    pub fn affinity(mut self, on: bool) -> Self {
        self.affinity = Some(on);
        self
    }

    /// How long a session's pin lasts without a request (default 1 h).
    pub fn affinity_ttl(mut self, ttl: Duration) -> Self {
        self.affinity_ttl = ttl;
        self
    }

    /// Continues a stream broken after its first text on the next target (default on). See
    /// [`Route::continuation`].
    pub fn continuation(mut self, on: bool) -> Self {
        self.continuation = on;
        self
    }

    /// Hedges requests (default: never). See [`Hedge`].
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = Some(hedge);
        self
    }

    /// Every rule a route must keep, checked once here: the gateway maps these problems onto
    /// its file's keys instead of checking them again.
    /// What a pattern route's name and `{model}` targets must be.
    fn pattern_problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let stars = self.name.matches('*').count();
        if stars > 1 || (stars == 1 && !self.name.ends_with('*')) {
            let message =
                format!("route name `{}` can never match a model: `*` may only end a name", self.name);
            problems.push(Problem::new("", message, "end the pattern with its one `*`, as `claude-*`"));
        }
        if stars == 0 {
            let named = self
                .targets
                .iter()
                .map(|t| &t.target)
                .chain(&self.context_window)
                .chain(&self.content_policy);
            if let Some(target) = named.into_iter().find(|t| is_template(t)) {
                let message = format!(
                    "target `{target}` names `{MODEL_PLACEHOLDER}` or `{MATCH_PLACEHOLDER}`, the model a client asked for, which only a pattern route has"
                );
                problems.push(Problem::new(
                    "targets",
                    message,
                    "end the route's name with `*` (as `claude-*`) or name the model",
                ));
            }
        }
        problems
    }

    fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if let Some(hedge) = &self.hedge
            && !(hedge.max_share > 0.0 && hedge.max_share <= 1.0)
        {
            let message = format!(
                "hedge.max_share is {}: a share of requests from 0 (exclusive) to 1",
                hedge.max_share
            );
            problems.push(Problem::new("hedge.max_share", message, "use a share such as 0.1"));
        }
        if self.name.is_empty() {
            problems.push(Problem::new("", "the route name is empty", "name it"));
        }
        if self.name.contains(':') {
            let message = format!(
                "route name `{}` contains a colon, which would read as a `provider:model` target",
                self.name
            );
            problems.push(Problem::new("", message, "rename it"));
        }
        if self.targets.is_empty() && self.given[0] == 0 {
            problems.push(Problem::new("targets", "it has no targets", "list at least one `provider:model`"));
        }
        if self.retry.max_attempts == 0 {
            let message = "retry.max_attempts is 0, which would never call the target";
            problems.push(Problem::new("retry.max_attempts", message, "use 1 for no retries"));
        }
        if self.retry.backoff_base > self.retry.backoff_max {
            let message = format!(
                "retry.backoff_base ({:?}) is above retry.backoff_max ({:?})",
                self.retry.backoff_base, self.retry.backoff_max
            );
            problems.push(Problem::new("retry.backoff_base", message, "lower it or raise backoff_max"));
        }
        if self.rotation == Rotation::Weighted && self.targets.iter().all(|t| t.weight == 0) {
            let message = "rotation is weighted but every weight is 0";
            problems.push(Problem::new("rotation", message, "give at least one target a weight above 0"));
        }
        for (what, value) in [
            ("timeouts.first_byte", self.timeouts.first_byte),
            ("timeouts.idle", self.timeouts.idle),
            ("timeouts.total", self.timeouts.total),
            ("timeouts.whole", self.timeouts.whole),
        ] {
            if value.is_zero() {
                problems.push(Problem::new(
                    what,
                    format!("{what} is 0"),
                    "give a positive duration such as 30s",
                ));
            }
        }
        problems
    }

    /// Validates and builds the route: every problem found is in the error at once, with its
    /// path within the route.
    pub fn build(self) -> Result<Route, RouteConfigError> {
        let mut problems = self.errors.clone();
        problems.extend(self.problems());
        problems.extend(self.pattern_problems());
        if !problems.is_empty() {
            return Err(RouteConfigError { route: self.name, problems });
        }
        let mut targets = self.targets;
        // Stable: keeps the configured order within each tier.
        targets.sort_by_key(|t| t.tier);
        Ok(Route {
            name: self.name.into(),
            targets,
            rotation: self.rotation,
            retry: self.retry,
            health_gate: self.health_gate,
            health_ttl: self.health_ttl,
            context_window: self.context_window,
            content_policy: self.content_policy,
            timeouts: self.timeouts,
            candidates: self.candidates,
            retry_on: self.retry_on,
            fallback_on: self.fallback_on,
            spill_over: self.spill_over,
            hedge: self.hedge,
            stream_upstream: self.stream_upstream,
            continuation: self.continuation,
            affinity: self.affinity,
            affinity_ttl: self.affinity_ttl,
            drop_params: self.drop_params,
        })
    }
}

/// A route that cannot be built, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route `{route}`: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct RouteConfigError {
    /// The route's name as given.
    pub route: String,
    /// Every problem, with paths relative to the route (`retry.max_attempts`, `targets[1]`).
    pub problems: Vec<Problem>,
}
