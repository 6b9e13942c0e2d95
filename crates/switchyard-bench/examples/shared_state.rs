//! Measures what sharing health through Redis costs and how fast it travels, against a real
//! `redis-server` on loopback:
//!
//! - **propagation**: one replica records a failure, the time until another replica's board
//!   sees it (p50, p99 over many changes);
//! - **request path**: chats through a router over the memory store and over a connected
//!   Redis store, in interleaved rounds, when every call succeeds (nothing to share) and when
//!   half the calls fail over, each failure and recovery shared (each one changes shared health), with the Redis commands the
//!   runs caused.
//!
//! `bench/run micro shared_state [requests]` (`cargo run --release -p switchyard-bench --example
//! shared_state`)
//!
//! `shared_state REQUESTS memory|redis` runs only the answered path over one store, once, for
//! counting instructions under callgrind (two counts at two request numbers give the cost of
//! one request, startup excluded).

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::chat::{ChatRequest, Message};
use switchyard::health::{HealthBoard, HealthSettings, HealthStatus, HealthStore, MemoryStore};
use switchyard::route::{Retry, Route};
use switchyard::simulated::SimulatedProvider;
use switchyard::{ErrorKind, ProviderEntry, ProviderError, Router, Target};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

mod common;

use common::{commands, cpu_ns};

type Error = Box<dyn std::error::Error>;

/// A store whose background task runs on `links`, another thread, as the gateway runs it
/// beside its workers.
async fn connected(server: &RedisServer, id: &str, links: &tokio::runtime::Runtime) -> Arc<RedisStore> {
    let mut settings = StateSettings::new(server.url());
    settings.replica = id.to_owned();
    let store = Arc::new(RedisStore::new(settings).expect("valid settings"));
    {
        let _on_links = links.enter();
        store.start();
    }
    while store.status().status != "ok" {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    store
}

/// Time from a failure recorded on one replica to the other's board seeing it.
async fn propagation(server: &RedisServer, changes: usize, links: &tokio::runtime::Runtime) -> Vec<Duration> {
    let a = HealthBoard::with_store(HealthSettings::default(), connected(server, "a", links).await);
    let b = HealthBoard::with_store(HealthSettings::default(), connected(server, "b", links).await);
    let error = ProviderError::new(ErrorKind::QuotaExceeded, "quota");
    let mut delays = Vec::with_capacity(changes);
    for i in 0..changes {
        let target: Target = format!("sim:model-{i}").parse().expect("a target");
        let start = Instant::now();
        a.record_failure(&target, &[], 0, &error);
        while b.target(&target).status != HealthStatus::Exhausted {
            tokio::task::yield_now().await;
        }
        delays.push(start.elapsed());
    }
    delays.sort();
    delays
}

fn router(store: Arc<dyn HealthStore>, failing: bool) -> Result<Router, Error> {
    let primary = if failing {
        SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 0.5).seed(7)
    } else {
        SimulatedProvider::new()
    };
    let route = Route::builder("default")
        .target("sim:model")
        .target("spare:model")
        .retry(Retry { max_attempts: 1, ..Retry::default() })
        .health_gate(false)
        .build()?;
    Ok(Router::builder()
        .provider(ProviderEntry::new("sim", primary))
        .provider(ProviderEntry::new("spare", SimulatedProvider::new()))
        .route(route)
        // The breaker never opens: every failure and every recovery is a change to share.
        .health(HealthSettings { failure_threshold: u32::MAX, ..HealthSettings::default() })
        .health_store(store)
        .build()?)
}

/// CPU per request, the background writes the requests caused included (the run ends when
/// the store has written everything).
async fn per_request(router: &Router, store: Option<&RedisStore>, requests: u32) -> Result<Duration, Error> {
    let request = ChatRequest::new("default", vec![Message::user("hello")]);
    for _ in 0..requests / 10 {
        router.chat(&request).await?;
    }
    let written = || store.is_none_or(|s| s.status().pending_writes == 0);
    while !written() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start = cpu_ns();
    for _ in 0..requests {
        router.chat(&request).await?;
    }
    while !written() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(Duration::from_nanos((cpu_ns() - start) / u64::from(requests)))
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let requests: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let server = RedisServer::start();
    let links = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    if let Some(only) = std::env::args().nth(2) {
        let store: Arc<dyn HealthStore> = match only.as_str() {
            "memory" => Arc::new(MemoryStore::default()),
            "redis" => connected(&server, "counted", &links).await,
            other => return Err(format!("unknown store `{other}`: memory or redis").into()),
        };
        let router = router(store, false)?;
        let request = ChatRequest::new("default", vec![Message::user("hello")]);
        for _ in 0..requests {
            router.chat(&request).await?;
        }
        links.shutdown_background();
        return Ok(());
    }

    let delays = propagation(&server, 2_000, &links).await;
    println!("propagation over {} changes (record on a, seen on b):", delays.len());
    for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        println!("  {name}: {:>7.1} µs", quantile(&delays, q).as_secs_f64() * 1e6);
    }

    for failing in [false, true] {
        let memory = router(Arc::new(MemoryStore::default()), failing)?;
        let store = connected(&server, if failing { "r-fail" } else { "r-ok" }, &links).await;
        let shared = router(store.clone(), failing)?;
        let mut best = (Duration::MAX, Duration::MAX);
        let before = commands(&server);
        let started = Instant::now();
        for _ in 0..3 {
            best.0 = best.0.min(per_request(&memory, None, requests).await?);
            best.1 = best.1.min(per_request(&shared, Some(&store), requests).await?);
        }
        let caused = commands(&server).saturating_sub(before);
        let label = if failing {
            "half the calls fail over, each failure and recovery shared"
        } else {
            "every call succeeds"
        };
        println!("{label} ({requests} requests per run, best of 3 interleaved; CPU of all threads):");
        println!("  memory store: {:>7.0} ns CPU/request", best.0.as_nanos() as f64);
        println!("  redis store:  {:>7.0} ns CPU/request", best.1.as_nanos() as f64);
        println!("  difference:   {:>+7.1}%", (best.1.as_secs_f64() / best.0.as_secs_f64() - 1.0) * 100.0);
        println!(
            "  redis commands during the runs: {caused} ({:.1} s of runs, {} requests through the redis store)",
            started.elapsed().as_secs_f64(),
            u64::from(requests) * 33 / 10
        );
    }
    links.shutdown_background();
    Ok(())
}
