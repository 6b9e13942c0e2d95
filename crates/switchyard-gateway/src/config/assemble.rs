//! Assembly: the router, the providers' adapters, the pacer and the fleet's store, built from a
//! configuration already checked ([`super::check`]). What can still fail here (an HTTP client
//! the platform cannot set up) is reported as the file's problem, as a check would.
//!
//! A reload assembles over the running configuration ([`reassemble`]): the router is
//! reconfigured rather than built, so it keeps what it learned, the fleet's store and the
//! pacer's lanes are handed on, and the adapter of a provider whose settings did not change is
//! the running one ([`BuiltAdapters`]): its connections, and a cloud's credentials or token,
//! stay warm.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard::provider::Provider;
use switchyard::{Forgotten, ProviderEntry, Router, RouterBuilder};
use switchyard_pacing::{LimitPacer, Limits};
use switchyard_state::RedisStore;

use super::check::{Adapter, CheckedConfig, CheckedProvider};
use super::{BedrockSummary, ConfigError, Loaded, ProviderSummary, Source};
use crate::drills::Drills;
use switchyard_providers::bedrock::BedrockProvider;
use switchyard_providers::{ProviderKind, ProviderSettings};

/// An HTTP provider's adapter as built, and what it was built of.
#[derive(Clone)]
pub(crate) struct BuiltAdapter {
    settings: ProviderSettings,
    adapter: Arc<dyn Provider>,
    bedrock: Option<BedrockSummary>,
    notes: Vec<String>,
}

impl std::fmt::Debug for BuiltAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The settings hold keys; the kind and URL say which adapter it is.
        f.debug_struct("BuiltAdapter")
            .field("kind", &self.settings.kind)
            .field("base_url", &self.adapter.base_url())
            .finish_non_exhaustive()
    }
}

/// The HTTP providers' adapters of a configuration, by provider id.
pub(crate) type BuiltAdapters = HashMap<String, BuiltAdapter>;

/// The router and the gateway of `checked`, which came from `source` (named `name` in errors).
pub(crate) fn assemble(checked: CheckedConfig, source: Source, name: &str) -> Result<Loaded, ConfigError> {
    let store = match checked.state.clone().map(RedisStore::new).transpose() {
        Ok(store) => store.map(Arc::new),
        Err(error) => return Err(ConfigError::one(name, "state.redis", error.to_string())),
    };
    let paced = paced(&checked);
    // No limits, no pacer: unpaced calls pay nothing for pacing.
    let pacer = match (&store, paced.is_empty()) {
        (_, true) => None,
        // One allowance for the fleet: rpm, tpm, header budgets and 429 holds.
        (Some(store), false) => Some(LimitPacer::shared(paced, store.clone())),
        (None, false) => Some(Arc::new(LimitPacer::new(paced))),
    };
    let mut builder = Router::builder();
    if let Some(store) = &store {
        builder = builder.health_store(store.clone());
    }
    let (builder, parts) = configure(builder, checked, pacer, name, &BuiltAdapters::new())?;
    let router = builder.build().map_err(|e| ConfigError::one(name, "routes", e.to_string()))?;
    Ok(parts.loaded(router, store, source))
}

/// What a running gateway hands a reload: its router (whose learned state is kept), its
/// fleet's store and its pacer.
pub(crate) struct Running<'a> {
    pub router: &'a Router,
    pub store: Option<Arc<RedisStore>>,
    pub pacer: Option<&'a LimitPacer>,
    /// The running adapters: reused for providers whose settings are unchanged.
    pub adapters: &'a BuiltAdapters,
}

/// [`assemble`] for a running gateway: the router reconfigured from `running`'s (what it
/// learned kept by key), the running store kept whatever `state:` now says (it is fixed at
/// start), and the pacer's lanes of unchanged limits handed on. Returns what was forgotten.
/// A reload refused here leaves the running gateway as it was, its pacer included.
pub(crate) fn reassemble(
    checked: CheckedConfig,
    source: Source,
    name: &str,
    running: Running<'_>,
) -> Result<(Loaded, Forgotten), ConfigError> {
    let paced = paced(&checked);
    let pacer = match (running.pacer, &running.store, paced.is_empty()) {
        (_, _, true) => None,
        (Some(pacer), _, false) => Some(pacer.following(paced)),
        (None, Some(store), false) => Some(LimitPacer::shared(paced, store.clone())),
        (None, None, false) => Some(Arc::new(LimitPacer::new(paced))),
    };
    let (builder, parts) = configure(Router::builder(), checked, pacer.clone(), name, running.adapters)?;
    let (router, forgotten) =
        running.router.reconfigure(builder).map_err(|e| ConfigError::one(name, "routes", e.to_string()))?;
    if let Some(pacer) = &pacer {
        // Only now, the reload accepted, do the new limits bound the calls in flight.
        if let Some(running) = running.pacer {
            pacer.take_over(running);
        }
        // A rotated or removed key's own lane goes with it.
        pacer.retain_keys(|provider, id| {
            router.credentials(provider).is_some_and(|keys| keys.iter().any(|key| key.id() == id))
        });
    }
    Ok((parts.loaded(router, running.store, source), forgotten))
}

/// Each paced provider's limits.
fn paced(checked: &CheckedConfig) -> Vec<(String, Limits)> {
    checked.providers.iter().filter_map(|p| p.limits.clone().map(|limits| (p.id.clone(), limits))).collect()
}

/// What assembly makes beside the router.
struct Parts {
    listen: std::net::SocketAddr,
    gateway: crate::config::GatewaySettings,
    summaries: Vec<ProviderSummary>,
    log: crate::config::LogSettings,
    pacer: Option<Arc<LimitPacer>>,
    adapters: BuiltAdapters,
}

impl Parts {
    fn loaded(mut self, router: Router, store: Option<Arc<RedisStore>>, source: Source) -> Loaded {
        self.gateway.shared_state = store;
        self.gateway.pacer = self.pacer;
        self.gateway.adapters = Arc::new(self.adapters);
        self.gateway.drills =
            Drills::new(self.summaries.iter().map(|s| (s.id.clone(), s.kind, s.simulated.clone())));
        let (listen, gateway, providers, log) = (self.listen, self.gateway, self.summaries, self.log);
        Loaded { source, reason: None, listen, router, gateway, providers, log, hash: String::new() }
    }
}

/// `builder` given `checked`'s settings, providers, routes and `pacer`.
fn configure(
    builder: RouterBuilder,
    checked: CheckedConfig,
    pacer: Option<Arc<LimitPacer>>,
    name: &str,
    running: &BuiltAdapters,
) -> Result<(RouterBuilder, Parts), ConfigError> {
    let CheckedConfig { listen, providers, routes, default_route, health, budget, gateway, state: _, log } =
        checked;
    let mut builder = builder.health(health).retry_budget(budget);
    if let Some(pacer) = &pacer {
        builder = builder.pacer(pacer.clone());
    }
    let mut summaries = Vec::new();
    let mut adapters = BuiltAdapters::new();
    for provider in providers {
        let (entry, summary, built) = entry(provider, name, running)?;
        builder = builder.provider(entry);
        if let Some(built) = built {
            adapters.insert(summary.id.clone(), built);
        }
        summaries.push(summary);
    }
    for route in routes {
        builder = builder.route(route);
    }
    if let Some(default) = &default_route {
        builder = builder.default_route(default);
    }
    Ok((builder, Parts { listen, gateway, summaries, log, pacer, adapters }))
}

/// A provider's router entry (its adapter, keys, rotation and prices), its summary, and its
/// adapter as built when it speaks HTTP (the running one's when `running` holds the same).
fn entry(
    provider: CheckedProvider,
    name: &str,
    running: &BuiltAdapters,
) -> Result<(ProviderEntry, ProviderSummary, Option<BuiltAdapter>), ConfigError> {
    let CheckedProvider { id, kind, adapter, keys, origins, round_robin, prices, models, limits } = provider;
    let mut secrets = Vec::new();
    let (adapter, base_url, simulated, built): (Arc<dyn Provider>, String, _, _) = match adapter {
        Adapter::Simulated(sim) => (Arc::new(sim.clone()), String::new(), Some(sim), None),
        Adapter::Http { settings, base_url, secrets: carried } => {
            secrets = carried;
            let built = match running.get(&id).filter(|kept| kept.settings == *settings) {
                Some(kept) => kept.clone(),
                None => build(*settings)
                    .map_err(|error| ConfigError::one(name, format!("providers.{id}"), error.to_string()))?,
            };
            (built.adapter.clone(), base_url, None, Some(built))
        }
    };
    let (bedrock, notes) =
        built.as_ref().map_or((None, Vec::new()), |b| (b.bedrock.clone(), b.notes.clone()));
    let mut entry = ProviderEntry::from_arc(id.as_str(), adapter);
    for (key, priority) in keys {
        entry = entry.key_with_priority(key, priority);
    }
    if round_robin {
        entry = entry.key_rotation(switchyard::KeyRotation::RoundRobin);
    }
    for secret in secrets {
        entry = entry.secret(secret);
    }
    for (model, price) in prices {
        entry = entry.price(model, price);
    }
    for (model, provider_model) in models {
        entry = entry.model(model, provider_model);
    }
    let summary = ProviderSummary {
        id,
        kind: kind.as_str(),
        base_url,
        credentials: origins,
        limits,
        simulated,
        bedrock,
        notes,
    };
    Ok((entry, summary, built))
}

/// The adapter of `settings`: Bedrock's built as itself, so that `doctor` can ask its credential
/// cache what it found; a Vertex provider's with its project and credentials noted.
fn build(settings: ProviderSettings) -> Result<BuiltAdapter, switchyard_providers::BuildError> {
    if settings.kind == ProviderKind::Bedrock {
        let adapter = BedrockProvider::new(&settings)?;
        let credentials = adapter.credentials().clone();
        let bedrock = Some(BedrockSummary { region: adapter.region().to_owned(), credentials });
        return Ok(BuiltAdapter { settings, adapter: Arc::new(adapter), bedrock, notes: Vec::new() });
    }
    let adapter = switchyard_providers::build(&settings)?;
    let notes = vertex_notes(&settings);
    Ok(BuiltAdapter { settings, adapter, bedrock: None, notes })
}

/// A `vertex` provider's project and region, and its credentials as found (masked).
fn vertex_notes(settings: &switchyard_providers::ProviderSettings) -> Vec<String> {
    let Some(vertex) = &settings.vertex else { return Vec::new() };
    let credentials = vertex.credentials().describe().unwrap_or_else(|error| error.to_string());
    vec![
        format!("project {}, region {}", vertex.project(), vertex.region()),
        format!("google credentials: {credentials}"),
    ]
}
