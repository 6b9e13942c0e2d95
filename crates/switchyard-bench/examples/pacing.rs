//! Measures what pacing costs a request: the same chats through a router without limits (no
//! pacer at all) and with limits high enough never to wait (the pacer's bookkeeping alone).
//!
//! `bench/run micro pacing [requests]` (`cargo run --release -p switchyard-bench --example pacing`)

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::chat::{ChatRequest, Message};
use switchyard::route::Route;
use switchyard::simulated::SimulatedProvider;
use switchyard::{ProviderEntry, Router};
use switchyard_pacing::{LimitPacer, Limits};

fn router(limits: Option<Limits>) -> Result<Router, Box<dyn std::error::Error>> {
    let mut builder = Router::builder()
        .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
        .route(Route::builder("default").target("sim:model").build()?);
    if let Some(limits) = limits {
        builder = builder.pacer(Arc::new(LimitPacer::new([("sim".to_owned(), limits)])));
    }
    Ok(builder.build()?)
}

async fn per_request(router: &Router, requests: u32) -> Result<Duration, Box<dyn std::error::Error>> {
    let request = ChatRequest::new("default", vec![Message::user("hello")]);
    for _ in 0..requests / 10 {
        router.chat(&request).await?; // warm up
    }
    let start = Instant::now();
    for _ in 0..requests {
        router.chat(&request).await?;
    }
    Ok(start.elapsed() / requests)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    let unlimited = router(None)?;
    let limits = Limits {
        max_concurrent: Some(10_000),
        requests_per_minute: Some(u32::MAX),
        tokens_per_minute: Some(u32::MAX),
        ..Limits::default()
    };
    let paced = router(Some(limits))?;

    let mut best = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        best.0 = best.0.min(per_request(&unlimited, requests).await?);
        best.1 = best.1.min(per_request(&paced, requests).await?);
    }
    println!("requests per run:          {requests}");
    println!("no limits (no pacer):      {:>8.0} ns/request", best.0.as_nanos() as f64);
    println!("limits set, never waiting: {:>8.0} ns/request", best.1.as_nanos() as f64);
    println!(
        "pacer cost:                {:>8.0} ns/request",
        best.1.as_nanos() as f64 - best.0.as_nanos() as f64
    );
    Ok(())
}
