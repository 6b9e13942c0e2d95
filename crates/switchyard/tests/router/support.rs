//! Shared fixtures: routers over simulated providers, requests, event names.

use std::time::Duration;

use futures_util::StreamExt;

use switchyard::chat::{ChatRequest, Message};
use switchyard::credential::Secret;
use switchyard::events::Subscription;
use switchyard::health::HealthSettings;
use switchyard::route::{Retry, RouteBuilder};
use switchyard::simulated::SimulatedProvider;
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderEntry, RouteError, RoutedStream, Router, RouterBuilder, StreamError};

pub fn request(model: &str) -> ChatRequest {
    ChatRequest::new(model, vec![Message::user("hello")])
}

/// Retries with a tiny backoff, so that Retry-After decides the waits.
pub fn quick_retry(max_attempts: u32) -> Retry {
    Retry {
        max_attempts,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(10),
        max_wait: Duration::from_secs(5),
    }
}

/// A router builder with keyless simulated providers.
pub fn builder(providers: &[(&str, &SimulatedProvider)]) -> RouterBuilder {
    providers
        .iter()
        .fold(Router::builder(), |b, (id, sim)| b.provider(ProviderEntry::new(*id, (*sim).clone())))
}

/// A router with the given providers, one route, and these health settings.
pub fn router_with(
    providers: &[(&str, &SimulatedProvider)],
    route: RouteBuilder,
    health: HealthSettings,
) -> Router {
    builder(providers)
        .route(route.build().expect("valid route"))
        .health(health)
        .build()
        .expect("valid router")
}

/// A router with the given providers and one route.
pub fn router(providers: &[(&str, &SimulatedProvider)], route: RouteBuilder) -> Router {
    builder(providers).route(route.build().expect("valid route")).build().expect("valid router")
}

/// A provider entry with keys.
pub fn keyed(id: &str, sim: &SimulatedProvider, keys: &[&str]) -> ProviderEntry {
    keys.iter().fold(ProviderEntry::new(id, sim.clone()), |e, k| e.key(Secret::new(*k)))
}

/// Health settings that never open the breaker, to isolate other rules.
pub fn no_breaker() -> HealthSettings {
    HealthSettings { failure_threshold: u32::MAX, ..HealthSettings::default() }
}

/// The names of the events waiting on a subscription.
pub fn event_names(events: &mut Subscription) -> Vec<&'static str> {
    events.drain().iter().map(|e| e.kind.name()).collect()
}

pub fn outcomes_of(error: &RouteError) -> Vec<Outcome> {
    error.trail().iter().map(|a| a.outcome).collect()
}

/// A provider whose errors repeat the key it was given, as some servers do.
pub struct Echo;

/// The token of a proxy in front of [`Echo`], which it quotes in its errors too.
pub const ECHO_PROXY_TOKEN: &str = "proxy-TOKEN-0123456789";

impl switchyard::provider::Provider for Echo {
    fn kind(&self) -> &str {
        "echo"
    }

    fn chat<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        let key = call.credential.key().map(|k| k.expose().to_owned()).unwrap_or_default();
        // As a proxy quotes the request it refused: the key cut short, and its own token.
        let excerpt: String = key.chars().take(18).collect();
        let detail = format!(
            "Incorrect API key provided: {key} (request: 'Bearer {excerpt}', x-proxy-token: {ECHO_PROXY_TOKEN})"
        );
        Box::pin(async move {
            Err(switchyard::ProviderError::new(ErrorKind::Auth, detail)
                .with_status(401)
                .with_code(format!("bad_key_{key}")))
        })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        Box::pin(async { Err(switchyard::ProviderError::new(ErrorKind::Unavailable, "no streams")) })
    }
}

/// A provider whose models answer apart, each as its own simulated provider scripts it (a
/// model it does not list fails as not found).
pub struct ByModel(pub Vec<(&'static str, SimulatedProvider)>);

impl ByModel {
    fn model(&self, name: &str) -> Result<&SimulatedProvider, switchyard::ProviderError> {
        self.0.iter().find(|(model, _)| *model == name).map(|(_, sim)| sim).ok_or_else(|| {
            switchyard::ProviderError::new(ErrorKind::ModelNotFound, format!("no model {name}"))
        })
    }
}

impl switchyard::provider::Provider for ByModel {
    fn kind(&self) -> &str {
        "by-model"
    }

    fn chat<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        request: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        match self.model(call.model) {
            Ok(sim) => sim.chat(call, request),
            Err(error) => Box::pin(async move { Err(error) }),
        }
    }

    fn chat_stream<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        request: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        match self.model(call.model) {
            Ok(sim) => sim.chat_stream(call, request),
            Err(error) => Box::pin(async move { Err(error) }),
        }
    }
}

/// A provider across a network whose every stream is `items`, as written; it takes a prefill
/// (its items are then what follows it).
pub struct Scripted(pub Vec<Result<switchyard::chat::ChatChunk, switchyard::ProviderError>>);

impl Scripted {
    /// A router of this provider alone, as `p`, on route `default`.
    pub fn router(self) -> Router {
        Router::builder()
            .provider(ProviderEntry::new("p", self))
            .route(switchyard::route::Route::builder("default").target("p:m").build().unwrap())
            .build()
            .unwrap()
    }
}

impl switchyard::provider::Provider for Scripted {
    fn kind(&self) -> &str {
        "scripted"
    }

    fn accepts_prefill(&self, _: &str) -> bool {
        true
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        unreachable!("asked as a stream")
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        let stream = futures_util::stream::iter(self.0.clone());
        Box::pin(async move { Ok(Box::pin(stream) as switchyard::provider::ChunkStream) })
    }
}

/// The memory store of a replica whose probes another replica of the fleet takes first while
/// `refuse` is set.
#[derive(Default)]
pub struct ProbedElsewhere {
    pub memory: switchyard::health::MemoryStore,
    pub refuse: std::sync::atomic::AtomicBool,
}

impl switchyard::health::HealthStore for ProbedElsewhere {
    fn update(
        &self,
        target: &switchyard::Target,
        credentials: &[switchyard::credential::CredentialId],
        apply: &mut dyn FnMut(&mut switchyard::health::Records),
    ) {
        self.memory.update(target, credentials, apply);
    }

    fn claim_probe(&self, _: &switchyard::Target) -> Option<switchyard::health::ProbeClaim> {
        let mine = !self.refuse.load(std::sync::atomic::Ordering::SeqCst);
        Some(Box::pin(std::future::ready(mine)))
    }

    fn all(&self) -> switchyard::health::AllRecords {
        self.memory.all()
    }

    fn clear(&self) {
        self.memory.clear();
    }

    fn drop_records(
        &self,
        targets: &[switchyard::Target],
        credentials: &[switchyard::credential::CredentialId],
    ) {
        self.memory.drop_records(targets, credentials);
    }
}

/// The text a stream delivers, and the error that ended it, if one did.
pub async fn collect(stream: &mut RoutedStream) -> (String, Option<StreamError>) {
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => text.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone())),
            Err(error) => return (text, Some(error)),
        }
    }
    (text, None)
}
