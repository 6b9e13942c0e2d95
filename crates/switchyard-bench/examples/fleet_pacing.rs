//! What pacing one allowance across the fleet costs a request, against a real `redis-server`
//! on loopback: permits from a lane paced alone (`LimitPacer::new`) and from one leasing
//! slices of the fleet's bucket (`LimitPacer::shared` over a connected `RedisStore`), in
//! interleaved rounds, CPU of every thread of the process (the store's background task
//! included), with the Redis commands the shared runs caused per request.
//!
//! `bench/run micro fleet_pacing [permits] [rpm]` (`cargo run --release -p switchyard-bench --example
//! fleet_pacing`)
//!
//! Runs are long (a million permits, a quarter million requests) because the CPU clock it
//! reads (`schedstat`) moves in scheduler ticks of a few milliseconds.
//!
//! The default allowance, 600,000,000 a minute (10,000,000 a second), is there so that the
//! bucket never holds a permit back: what is measured is the bookkeeping, not the waiting
//! (slices of 6,000,000, so the lease calls are the once-a-second ones). At an allowance the
//! runs meet (`rpm` 6,000,000: 100,000 a second, slices of 60,000), permits wait for the
//! bucket and the figures show what pacing at the allowance costs, Redis calls included.
//!
//! `fleet_pacing PERMITS RPM local|shared [chat]` runs one pacer only, once, for counting
//! instructions under callgrind (`chat`: requests through a router instead of bare permits).

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::chat::{ChatRequest, Message};
use switchyard::credential::CredentialId;
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard::route::Route;
use switchyard::simulated::SimulatedProvider;
use switchyard::{ProviderEntry, Router};
use switchyard_pacing::fleet::FleetPacing;
use switchyard_pacing::{LimitPacer, Limits};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

mod common;

use common::{commands, cpu_ns};

type Error = Box<dyn std::error::Error>;

/// Runs of each, taking turns at going first.
const ROUNDS: u32 = 6;

/// A router whose one provider, simulated and answering at once, is paced by `pacer`.
fn router(pacer: Arc<LimitPacer>) -> Result<Router, Error> {
    let route = Route::builder("default").target("openai:model").build()?;
    Ok(Router::builder()
        .provider(ProviderEntry::new("openai", SimulatedProvider::new()))
        .route(route)
        .pacer(pacer)
        .build()?)
}

/// CPU per request through `router`.
async fn per_chat(router: &Router, requests: u32) -> Result<Duration, Error> {
    let request = ChatRequest::new("default", vec![Message::user("hello")]);
    for _ in 0..requests / 10 {
        router.chat(&request).await?;
    }
    let start = cpu_ns();
    for _ in 0..requests {
        router.chat(&request).await?;
    }
    Ok(Duration::from_nanos((cpu_ns() - start) / u64::from(requests)))
}

/// CPU per permit over `requests` permits (each settled with its usage and dropped).
async fn per_request(pacer: &LimitPacer, requests: u32) -> Result<Duration, Error> {
    let credential = CredentialId::derive("openai", "https://api.openai.com/v1", None);
    let request = PaceRequest {
        provider: "openai",
        credential_id: &credential,
        estimated_tokens: 100,
        deadline: None,
        spill_after: None,
    };
    for _ in 0..requests / 10 {
        pacer.acquire(request).await?.settle(Some(80));
    }
    let start = cpu_ns();
    for _ in 0..requests {
        pacer.acquire(request).await?.settle(Some(80));
    }
    Ok(Duration::from_nanos((cpu_ns() - start) / u64::from(requests)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let requests: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    let rpm: u32 = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(600_000_000);
    let server = RedisServer::start();
    // The store's task runs on another thread, as the gateway runs it beside its workers.
    let links = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let mut settings = StateSettings::new(server.url());
    settings.replica = "bench".to_owned();
    let store = Arc::new(RedisStore::new(settings)?);
    {
        let _on_links = links.enter();
        store.start();
    }
    while !store.shared() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let limits = || {
        let limits = Limits {
            requests_per_minute: Some(rpm),
            tokens_per_minute: Some(rpm.saturating_mul(100)),
            ..Limits::default()
        };
        vec![("openai".to_owned(), limits)]
    };
    let local = Arc::new(LimitPacer::new(limits()));
    let shared = LimitPacer::shared(limits(), store.clone());
    // `fleet_pacing N RPM local|shared [chat]`: one pacer only, for counting
    // instructions under callgrind.
    if let Some(only) = std::env::args().nth(3) {
        let pacer = if only == "shared" { &shared } else { &local };
        if std::env::args().nth(4).as_deref() == Some("chat") {
            per_chat(&router(pacer.clone())?, requests).await?;
        } else {
            per_request(pacer, requests).await?;
        }
        links.shutdown_background();
        return Ok(());
    }

    let mut best = (Duration::MAX, Duration::MAX);
    let mut caused = 0;
    let started = Instant::now();
    for round in 0..ROUNDS {
        if round % 2 == 1 {
            best.0 = best.0.min(per_request(&local, requests).await?);
        }
        let before = commands(&server);
        best.1 = best.1.min(per_request(&shared, requests).await?);
        caused += commands(&server).saturating_sub(before);
        if round % 2 == 0 {
            best.0 = best.0.min(per_request(&local, requests).await?);
        }
    }
    let shared_requests = ROUNDS as u64 * u64::from(requests) * 11 / 10;
    println!(
        "{rpm} requests and {} tokens a minute, {requests} permits per run, best of {ROUNDS} interleaved (CPU of all threads):",
        u64::from(rpm) * 100
    );
    println!("  paced alone:        {:>7.0} ns CPU/request", best.0.as_nanos() as f64);
    println!("  paced with the fleet: {:>5.0} ns CPU/request", best.1.as_nanos() as f64);
    println!("  difference:         {:>+7.1}%", (best.1.as_secs_f64() / best.0.as_secs_f64() - 1.0) * 100.0);
    println!(
        "  redis commands during the shared runs: {caused} for {shared_requests} requests ({:.5} per request; {:.1} s in all)",
        caused as f64 / shared_requests as f64,
        started.elapsed().as_secs_f64()
    );

    // The same, as requests through a router (the provider simulated, answering at once).
    let (local_router, shared_router) = (router(local.clone())?, router(shared.clone())?);
    // A quarter as many: a request through the router costs about five permits.
    let requests = requests / 4;
    let mut best = (Duration::MAX, Duration::MAX);
    for round in 0..ROUNDS {
        // Each goes first in turn: neither gains from running second.
        if round % 2 == 0 {
            best.0 = best.0.min(per_chat(&local_router, requests).await?);
            best.1 = best.1.min(per_chat(&shared_router, requests).await?);
        } else {
            best.1 = best.1.min(per_chat(&shared_router, requests).await?);
            best.0 = best.0.min(per_chat(&local_router, requests).await?);
        }
    }
    println!("requests through a router, {requests} per run, best of {ROUNDS} interleaved:");
    println!("  paced alone:        {:>7.0} ns CPU/request", best.0.as_nanos() as f64);
    println!("  paced with the fleet: {:>5.0} ns CPU/request", best.1.as_nanos() as f64);
    println!("  difference:         {:>+7.1}%", (best.1.as_secs_f64() / best.0.as_secs_f64() - 1.0) * 100.0);
    links.shutdown_background();
    Ok(())
}
