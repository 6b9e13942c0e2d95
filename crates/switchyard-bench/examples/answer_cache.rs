//! Measures what a `cache` candidate costs a request that a provider answers: the same chats
//! through a route without candidates and through one with a cache candidate (which remembers
//! every answer).
//!
//! `bench/run micro answer_cache [requests] [plain|cache]` (`cargo run --release -p switchyard-bench
//! --example answer_cache`).
//! With a mode, runs only that router (for callgrind: instructions at two request counts).

use std::time::{Duration, Instant};

use switchyard::answer_cache::AnswerCacheSettings;
use switchyard::chat::{ChatRequest, Message};
use switchyard::route::{Candidate, Route};
use switchyard::simulated::SimulatedProvider;
use switchyard::{ProviderEntry, RequestOptions, Router};

fn router(cache: bool) -> Result<Router, Box<dyn std::error::Error>> {
    let mut route = Route::builder("default").target("sim:model");
    if cache {
        route = route.candidate(Candidate::cache("last-good", AnswerCacheSettings::default()));
    }
    Ok(Router::builder()
        .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
        .route(route.build()?)
        .build()?)
}

async fn per_request(router: &Router, requests: u32) -> Result<Duration, Box<dyn std::error::Error>> {
    // A short conversation, as a chat client sends: the key is computed over all of it.
    let messages = vec![
        Message::system("You are a helpful assistant. Answer briefly."),
        Message::user("What is the capital of France?"),
        Message::assistant("Paris."),
        Message::user("And of Italy?"),
    ];
    let request = ChatRequest::new("default", messages);
    let options = RequestOptions { cache_scope: "a1b2c3d4e5f6".into(), ..RequestOptions::default() };
    let start = Instant::now();
    for _ in 0..requests {
        router.chat_with(&request, &options).await?;
    }
    Ok(start.elapsed() / requests.max(1))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    if let Some(mode) = std::env::args().nth(2) {
        per_request(&router(mode == "cache")?, requests).await?;
        return Ok(());
    }
    let (plain, cached) = (router(false)?, router(true)?);
    let mut best = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        best.0 = best.0.min(per_request(&plain, requests).await?);
        best.1 = best.1.min(per_request(&cached, requests).await?);
    }
    println!("requests per run:            {requests}");
    println!("no cache candidate:          {:>8.0} ns/request", best.0.as_nanos() as f64);
    println!("cache candidate remembering: {:>8.0} ns/request", best.1.as_nanos() as f64);
    println!(
        "cost:                        {:>8.0} ns/request",
        best.1.as_nanos() as f64 - best.0.as_nanos() as f64
    );
    Ok(())
}
