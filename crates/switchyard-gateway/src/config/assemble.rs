//! Assembly: the router, the providers' adapters, the pacer and the fleet's store, built from a
//! configuration already checked ([`super::check`]). What can still fail here (an HTTP client
//! the platform cannot set up) is reported as the file's problem, as a check would.

use std::sync::Arc;

use switchyard::provider::Provider;
use switchyard::{ProviderEntry, Router};
use switchyard_pacing::{LimitPacer, Limits};
use switchyard_state::RedisStore;

use super::check::{Adapter, CheckedConfig, CheckedProvider};
use super::{BedrockSummary, ConfigError, Loaded, ProviderSummary, Source};
use crate::drills::Drills;
use switchyard_providers::ProviderKind;
use switchyard_providers::bedrock::BedrockProvider;

/// The router and the gateway of `checked`, which came from `source` (named `name` in errors).
pub(crate) fn assemble(checked: CheckedConfig, source: Source, name: &str) -> Result<Loaded, ConfigError> {
    let CheckedConfig { listen, providers, routes, default_route, health, budget, mut gateway, state, log } =
        checked;
    let store = match state.map(RedisStore::new).transpose() {
        Ok(store) => store.map(Arc::new),
        Err(error) => return Err(ConfigError::one(name, "state.redis", error.to_string())),
    };
    let mut builder = Router::builder().health(health).retry_budget(budget);
    if let Some(store) = &store {
        builder = builder.health_store(store.clone());
    }
    let paced: Vec<(String, Limits)> =
        providers.iter().filter_map(|p| p.limits.clone().map(|limits| (p.id.clone(), limits))).collect();
    // No limits, no pacer: unpaced calls pay nothing for pacing.
    if !paced.is_empty() {
        builder = match &store {
            // One allowance for the fleet: rpm, tpm, header budgets and 429 holds.
            Some(store) => builder.pacer(LimitPacer::shared(paced, store.clone())),
            None => builder.pacer(Arc::new(LimitPacer::new(paced))),
        };
    }
    let mut summaries = Vec::new();
    for provider in providers {
        let (entry, summary) = entry(provider, name)?;
        builder = builder.provider(entry);
        summaries.push(summary);
    }
    for route in routes {
        builder = builder.route(route);
    }
    if let Some(default) = &default_route {
        builder = builder.default_route(default);
    }
    let router = builder.build().map_err(|e| ConfigError::one(name, "routes", e.to_string()))?;
    gateway.shared_state = store;
    gateway.drills = Drills::new(summaries.iter().map(|s| (s.id.clone(), s.kind, s.simulated.clone())));
    Ok(Loaded { source, reason: None, listen, router, gateway, providers: summaries, log })
}

/// A provider's router entry (its adapter, keys, rotation and prices) and its summary.
fn entry(provider: CheckedProvider, name: &str) -> Result<(ProviderEntry, ProviderSummary), ConfigError> {
    let CheckedProvider { id, kind, adapter, keys, origins, round_robin, prices, models, limits } = provider;
    let failed = |error: switchyard_providers::BuildError| {
        ConfigError::one(name, format!("providers.{id}"), error.to_string())
    };
    let mut bedrock = None;
    let mut notes = Vec::new();
    let (adapter, base_url, simulated): (Arc<dyn Provider>, String, _) = match adapter {
        Adapter::Simulated(sim) => (Arc::new(sim.clone()), String::new(), Some(sim)),
        // Built as itself, so that `doctor` can ask its credential cache what it found.
        Adapter::Http { settings, base_url } if settings.kind == ProviderKind::Bedrock => {
            let adapter = BedrockProvider::new(&settings).map_err(failed)?;
            let credentials = adapter.credentials().clone();
            bedrock = Some(BedrockSummary { region: adapter.region().to_owned(), credentials });
            (Arc::new(adapter), base_url, None)
        }
        Adapter::Http { settings, base_url } => match switchyard_providers::build(&settings) {
            Ok(adapter) => {
                notes = vertex_notes(&settings);
                (adapter, base_url, None)
            }
            Err(error) => return Err(failed(error)),
        },
    };
    let mut entry = ProviderEntry::from_arc(id.as_str(), adapter);
    for (key, priority) in keys {
        entry = entry.key_with_priority(key, priority);
    }
    if round_robin {
        entry = entry.key_rotation(switchyard::KeyRotation::RoundRobin);
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
    Ok((entry, summary))
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
