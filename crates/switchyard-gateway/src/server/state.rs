//! What every handler shares ([`AppState`]): the configuration in force ([`Live`]: the router,
//! the settings), the metrics, the history and its feed, the Responses API's conversations,
//! the trace exporter, and the configuration's life (its hash, reloads).
//!
//! A reload swaps the [`Live`] whole. A request reads the one in force once, as it starts
//! ([`AppState::live`]), and keeps it to its end: a stream runs on the configuration it began
//! with.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock, RwLock};

use switchyard::trail::Via;
use switchyard::{Router, Target};
use switchyard_state::responses::{KeptBounds, SharedResponses};
use switchyard_state::spend::SharedSpend;

use super::events;
use super::finished::metrics::describe;
use super::ids::IdSource;
use crate::config::{Exposure, GatewaySettings};
use crate::logging::AccessLog;
use crate::metrics::{LabelValue, Metrics};
use crate::recent::Recent;
use crate::responses::ResponseStore;
use crate::telemetry::Telemetry;

/// What one configuration made: the router every request goes through, the gateway's
/// settings, and the targets the configuration names.
pub struct Live {
    /// The router every request goes through.
    pub router: Router,
    /// The gateway's settings.
    pub gateway: GatewaySettings,
    /// The targets the configuration names; others (named by clients) share one metric label.
    /// Keys from the configuration only (a client's target is looked up, never inserted).
    listed: HashSet<Target, crate::metrics::FxBuild>,
    /// The patterns' `{model}` and `{*}` targets, by route: a target one fills in is labelled
    /// by it.
    templates: Vec<(Arc<str>, Target)>,
    /// Whether `/metrics` asks for the admin key (beyond loopback, unless `metrics_open`).
    pub(crate) guard_metrics: bool,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").field("router", &self.router).finish_non_exhaustive()
    }
}

impl Live {
    /// The configuration of `router` and `gateway`, reachable as `exposure` says.
    pub fn new(router: Router, gateway: GatewaySettings, exposure: &Exposure) -> Self {
        let guard_metrics = exposure.guards_metrics(&gateway);
        // A pattern's `{model}` targets are filled in per request: not targets to list.
        let mut templates = Vec::new();
        let mut listed = HashSet::default();
        for route in router.routes() {
            for target in route.all_targets() {
                if switchyard::route::is_template(target) {
                    templates.push((Arc::from(route.name()), target.clone()));
                } else {
                    listed.insert(target.clone());
                }
            }
        }
        Self { router, gateway, listed, templates, guard_metrics }
    }

    /// The target of pattern route `route` that `target` was filled in from:
    /// `anthropic:us.{model}` for `anthropic:us.claude-x`. The first that fits, in the route's
    /// order; none on any other route (a target a client named directly is no pattern's).
    fn template_of(&self, route: &str, target: &Target) -> Option<&Target> {
        let of_route = self.templates.iter().filter(|(name, _)| &**name == route).map(|(_, t)| t);
        of_route.into_iter().find(|template| {
            let model = template.model();
            let split = model
                .split_once(switchyard::route::MODEL_PLACEHOLDER)
                .or_else(|| model.split_once(switchyard::route::MATCH_PLACEHOLDER));
            let Some((before, after)) = split else { return false };
            let model = target.model();
            template.provider() == target.provider()
                && model.len() > before.len() + after.len()
                && model.starts_with(before)
                && model.ends_with(after)
        })
    }

    /// Whether the configuration names `target`.
    pub fn is_listed(&self, target: &Target) -> bool {
        self.listed.contains(target)
    }

    /// The metric label of `via`, of a request `route` governed: a target of the configuration
    /// by name, one a pattern route filled in by the pattern's target (`anthropic:{model}`: the
    /// models clients name never make labels), any other as one label, a candidate by its name.
    pub(crate) fn target_label(&self, via: &Via, route: &str) -> LabelValue {
        match via {
            Via::Target(target) if self.is_listed(target) => LabelValue::Shared(target.shared()),
            Via::Target(target) => match self.template_of(route, target) {
                Some(template) => LabelValue::Shared(template.shared()),
                None => LabelValue::Static("(unlisted)"),
            },
            Via::Candidate(_) => LabelValue::from(via.to_string()),
        }
    }
}

/// Everything handlers share.
pub struct AppState {
    /// The configuration in force; a reload swaps it whole.
    live: RwLock<Arc<Live>>,
    /// Who can reach the gateway: what `/metrics` asks of a configuration swapped in.
    exposure: Exposure,
    /// The configuration's life, for `serve`: its hash, its reloads.
    config: OnceLock<Arc<crate::reload::ConfigLife>>,
    /// The finished requests kept (`/admin/requests`).
    pub recent: Recent,
    /// The counters and histograms of `/metrics`.
    pub metrics: Metrics,
    /// The Responses API's conversations.
    pub responses: ResponseStore,
    /// Finished requests and the router's recent events, for `/admin/events` subscribers.
    pub feed: events::RequestFeed,
    /// The trace exporter, when traces are exported.
    pub telemetry: Option<Arc<Telemetry>>,
    /// Turns `true` when the gateway begins to shut down: endless streams (`/admin/events`) end.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Turns `true` when the shutdown's grace period is over: the streams still open end, each
    /// with an error event its client reads and a record of its own.
    cutting: tokio::sync::watch::Sender<bool>,
    /// Told when the grace period is over, for the requests still waiting for their answer's
    /// head ([`AppState::cut_waiting`]): each takes a place in its list while it waits (an
    /// uncontended lock as it starts and as it ends waiting).
    cut_waiting: Arc<tokio::sync::Notify>,
    /// Whether the shutdown began: what a stream checks (a load) before it waits on `cutting`.
    stopped: std::sync::atomic::AtomicBool,
    pub(crate) access: AccessLog,
    pub(crate) ids: IdSource,
    /// This replica's name: the fleet's (`state.replica`), else the host name.
    pub replica: Arc<str>,
    /// The fleet's trails, once [`AppState::share_trails`] started them.
    pub(crate) trails: OnceLock<crate::fleet::FleetTrails>,
    /// Requests begun and ended, for the in-flight count the fleet's heartbeat carries.
    pub(crate) begun: std::sync::atomic::AtomicU64,
    pub(crate) ended: std::sync::atomic::AtomicU64,
    /// When the gateway started, for `process_start_time_seconds`.
    pub(crate) started: std::time::SystemTime,
    /// What client keys spent, counted for the fleet in its Redis (with shared state).
    pub(crate) spend: Option<Arc<SharedSpend>>,
    /// Claude's thinking of the tool turns it answered clients of OpenAI's dialect.
    pub(crate) kept_thinking: super::kept_thinking::KeptThinking,
}

impl AppState {
    /// The state of a gateway without an access log; see [`AppState::with_access_log`].
    pub fn new(router: Router, gateway: GatewaySettings) -> Arc<Self> {
        Self::with_access_log(router, gateway, AccessLog::off())
    }

    /// The state of a gateway on loopback, logging to `access`.
    pub fn with_access_log(router: Router, gateway: GatewaySettings, access: AccessLog) -> Arc<Self> {
        Self::exposed(router, gateway, access, &Exposure::Loopback)
    }

    /// The state of a gateway reachable as `exposure` says: beyond loopback, `/metrics` asks
    /// for the admin key unless `gateway.metrics_open`.
    pub fn exposed(
        router: Router,
        gateway: GatewaySettings,
        access: AccessLog,
        exposure: &Exposure,
    ) -> Arc<Self> {
        let metrics = Metrics::new();
        describe(&metrics);
        super::finished::metrics::born_at_zero(&metrics, &router);
        if let Some(store) = &gateway.shared_state {
            share_answers(&router, store);
            share_pins(&router, store);
        }
        let telemetry = gateway.telemetry.as_ref().and_then(|settings| start_telemetry(settings, &router));
        let feed = events::RequestFeed::new(&router);
        let replica: Arc<str> = match &gateway.shared_state {
            Some(store) => store.replica().into(),
            None => switchyard_state::host_name().into(),
        };
        let spend = gateway.shared_state.as_ref().map(|store| Arc::new(SharedSpend::new(store)));
        let kept_thinking = super::kept_thinking::KeptThinking::new(
            gateway.responses,
            gateway
                .shared_state
                .as_ref()
                .map(|store| SharedResponses::named(store, "thinking", kept_bounds(gateway.responses))),
        );
        Arc::new(Self {
            spend,
            telemetry,
            recent: Recent::new(gateway.recent_requests),
            responses: match &gateway.shared_state {
                Some(store) => {
                    let index = crate::responses::index_bounds(gateway.responses);
                    ResponseStore::shared(
                        gateway.responses,
                        SharedResponses::new(store, kept_bounds(gateway.responses)),
                        SharedResponses::named(store, "response_item", kept_bounds(index)),
                    )
                }
                None => ResponseStore::new(gateway.responses),
            },
            live: RwLock::new(Arc::new(Live::new(router, gateway, exposure))),
            exposure: exposure.clone(),
            config: OnceLock::new(),
            metrics,
            feed,
            stopping: tokio::sync::watch::Sender::new(false),
            cutting: tokio::sync::watch::Sender::new(false),
            cut_waiting: Arc::default(),
            stopped: std::sync::atomic::AtomicBool::new(false),
            kept_thinking,
            access,
            ids: IdSource::new(),
            replica,
            trails: OnceLock::new(),
            begun: Default::default(),
            ended: Default::default(),
            started: std::time::SystemTime::now(),
        })
    }

    /// The configuration in force: read once by a request as it starts, and kept to its end.
    pub fn live(&self) -> Arc<Live> {
        // A panic while holding this lock cannot leave a half-written `Arc` behind.
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts the configuration of `router` and `gateway` in force for every request from now
    /// on; requests running keep the one they started with. Returns the one it replaced.
    pub(crate) fn swap(&self, router: Router, mut gateway: GatewaySettings) -> Arc<Live> {
        // A key kept across the reload keeps what it used and spent.
        gateway.keys.adopt(&self.live().gateway.keys);
        if let Some(store) = &gateway.shared_state {
            share_answers(&router, store);
            share_pins(&router, store);
        }
        super::finished::metrics::born_at_zero(&self.metrics, &router);
        let live = Arc::new(Live::new(router, gateway, &self.exposure));
        std::mem::replace(&mut *self.live.write().unwrap_or_else(|p| p.into_inner()), live)
    }

    /// The configuration's life (hash, load time, last error, reloads), once `serve` set it.
    pub fn config(&self) -> Option<&Arc<crate::reload::ConfigLife>> {
        self.config.get()
    }

    /// Sets the configuration's life: its hash and how it reloads. Once; later calls do
    /// nothing.
    pub fn set_config(&self, life: Arc<crate::reload::ConfigLife>) {
        let _ = self.config.set(life);
    }

    /// Publishes each finished request's trail to the fleet's Redis from now on (this
    /// replica's newest `gateway.recent_requests`, each kept an hour), so that every replica
    /// finds it. Once; later calls do nothing. Needs a tokio runtime.
    pub fn share_trails(&self, store: &switchyard_state::RedisStore) {
        let kept = self.recent.capacity();
        if kept > 0 && store.settings().trails && self.trails.get().is_none() {
            let events = self.live().router.subscribe();
            let _ = self.trails.set(crate::fleet::FleetTrails::start(
                store,
                kept,
                crate::fleet::TRAIL_TTL,
                events,
            ));
        }
    }

    /// The configured targets this replica sees unwell (a status other than `available` or
    /// `unknown`, or a circuit not closed), for the fleet's heartbeat.
    pub fn unwell_targets(&self) -> Vec<switchyard_state::TargetView> {
        let live = self.live();
        let snapshot = live.router.health();
        snapshot
            .targets
            .iter()
            .filter(|t| live.is_listed(&t.target))
            .filter(|t| !matches!(t.status.as_str(), "available" | "unknown") || t.breaker != "closed")
            .map(|t| switchyard_state::TargetView {
                target: t.target.to_string(),
                status: t.status.as_str().to_owned(),
                breaker: t.breaker.to_owned(),
            })
            .collect()
    }

    /// Reads the fleet's spend of every key that has a budget or spent here, and so writes
    /// again what a Redis that restarted empty lost of this replica's.
    pub async fn read_spends(&self) {
        super::keys::read_spends(self, &self.live()).await;
    }

    /// The requests being served: begun and not yet ended.
    pub fn in_flight(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        // Ended read first: a request ending between the two reads is not counted below zero.
        let ended = self.ended.load(Relaxed);
        self.begun.load(Relaxed).saturating_sub(ended)
    }

    /// A receiver that turns `true` once [`AppState::stop`] is called.
    pub fn stop_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Begins shutting down: the workers stop accepting and the admin event streams end, so
    /// they do not hold the drain of requests.
    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::Release);
        self.stopping.send_replace(true);
    }

    /// Whether the shutdown began ([`AppState::stop`]).
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ends the streams still open (the shutdown's grace period is over): each writes its
    /// client an error event and its record, rather than being cut off without a word.
    pub fn cut_streams(&self) {
        self.cutting.send_replace(true);
        self.cut_waiting.notify_waiters();
    }

    /// Ready once the grace period is over ([`AppState::cut_streams`]): what a request waiting
    /// for its answer's head ends on, answered `503` rather than cut off without a word.
    pub(crate) fn cut_waiting(&self) -> tokio::sync::futures::OwnedNotified {
        self.cut_waiting.clone().notified_owned()
    }

    /// What a stream waits on to be cut short ([`AppState::cut_streams`]).
    pub(crate) fn cut_signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut cut = self.cutting.subscribe();
        async move {
            let _ = cut.wait_for(|cut| *cut).await;
        }
    }
}

/// Starts the trace exporter; a gateway that cannot export serves on, untraced, and says why.
fn start_telemetry(
    settings: &crate::telemetry::TelemetrySettings,
    router: &Router,
) -> Option<Arc<Telemetry>> {
    let runtime = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime,
        Err(_) => {
            tracing::error!("traces are not exported: the gateway was built outside a Tokio runtime");
            return None;
        }
    };
    let kinds = router
        .provider_ids()
        .into_iter()
        .map(|id| (id.to_owned(), router.provider_kind(id).unwrap_or_default().to_owned()));
    match Telemetry::start(settings, runtime, kinds) {
        Ok(telemetry) => Some(Arc::new(telemetry)),
        Err(error) => {
            tracing::error!(%error, "traces are not exported");
            None
        }
    }
}

/// Keeps every `cache` candidate's answers in the fleet's Redis too, with the candidate's
/// bounds for the fleet: `P:answer:<route>:<candidate>:<scope>:<key>`.
fn share_answers(router: &Router, store: &switchyard_state::RedisStore) {
    for route in router.routes() {
        for candidate in route.candidates() {
            let Some(cache) = candidate.answer_cache() else { continue };
            let settings = cache.settings();
            let bounds = KeptBounds {
                max_entries: settings.max_entries,
                max_age: settings.max_age,
                max_bytes: settings.max_bytes,
            };
            let kind = format!("answer:{}:{}", route.name(), candidate.name());
            cache.share(Arc::new(RedisAnswers(SharedResponses::named(store, &kind, bounds))));
        }
    }
}

/// Keeps the sessions' pins in the fleet's Redis too (`P:affinity:<key>`), so that every
/// replica honours them: at most 100,000, each for the longest `affinity_ttl` of the routes.
fn share_pins(router: &Router, store: &switchyard_state::RedisStore) {
    let ttl = router.routes().map(|route| route.affinity_ttl()).max().unwrap_or_default();
    let bounds = KeptBounds { max_entries: 100_000, max_age: ttl, max_bytes: 32 << 20 };
    router.pins().share(Arc::new(RedisAnswers(SharedResponses::named(store, "affinity", bounds))));
}

/// Entries of the fleet's Redis: a `cache` candidate's answers, the sessions' pins.
#[derive(Debug)]
struct RedisAnswers(SharedResponses);

impl switchyard::shared::SharedEntries for RedisAnswers {
    fn put(&self, key: String, value: Vec<u8>) -> switchyard::provider::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.put(&key, &value).await })
    }

    fn get(&self, key: String) -> switchyard::provider::BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move { self.0.get(&key).await })
    }
}

/// The fleet's bounds for what is kept in Redis like the Responses API's conversations.
fn kept_bounds(bounds: crate::config::ResponsesBounds) -> KeptBounds {
    KeptBounds { max_entries: bounds.max_entries, max_age: bounds.max_age, max_bytes: bounds.max_bytes }
}
