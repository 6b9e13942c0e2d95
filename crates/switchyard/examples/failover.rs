//! Builds a router in code over two simulated providers (a flaky primary and a steady
//! fallback), sends a few chats, and prints each answer, who served it, the trail, and the
//! events the router published.
//!
//! Run it with `cargo run -p switchyard-core --example failover`.

use std::time::Duration;

use switchyard::chat::{ChatRequest, Message};
use switchyard::route::{Candidate, Retry, Route};
use switchyard::simulated::{Latency, SimulatedProvider, Step};
use switchyard::{ErrorKind, ProviderEntry, Router};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The primary rate-limits once (with a Retry-After), then goes down for a while.
    let flaky = SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(40))).script([
        Step::rate_limited(Duration::from_millis(300)),
        Step::Reply,
        Step::fail(ErrorKind::Unavailable),
        Step::fail(ErrorKind::Unavailable),
    ]);
    let steady = SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(60)));

    let router = Router::builder()
        .provider(ProviderEntry::new("flaky", flaky))
        .provider(ProviderEntry::new("steady", steady))
        .route(
            Route::builder("default")
                .target("flaky:fast-model")
                .target("steady:solid-model")
                .retry(Retry {
                    max_attempts: 2,
                    backoff_base: Duration::from_millis(100),
                    ..Retry::default()
                })
                .candidate(Candidate::text("apology", "The assistant is busy, please retry shortly."))
                .build()?,
        )
        .build()?;

    // Events arrive on a bus; a subscriber never slows routing down.
    let mut events = router.subscribe();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            println!("    event: {}", event.kind.name());
        }
    });

    for prompt in ["Hello!", "Still there?", "One more time."] {
        let request = ChatRequest::new("default", vec![Message::user(prompt)]);
        match router.chat(&request).await {
            Ok(answer) => {
                println!("> {prompt}");
                println!("  answer:    {}", answer.response.text().unwrap_or_default());
                println!("  served by: {} in {:?}", answer.served_by, answer.timing.total);
                print!("{}", indent(&answer.trail.to_string()));
            }
            Err(error) => {
                println!("> {prompt}\n  failed: {error}");
                for attempt in error.trail() {
                    println!("    {} {}", attempt.via, attempt.outcome);
                }
            }
        }
        tokio::task::yield_now().await;
    }

    println!("health:");
    for target in router.health().targets {
        println!(
            "  {:<22} {:<24} breaker {}",
            target.target.to_string(),
            target.status.as_str(),
            target.breaker
        );
    }
    drop(router);
    printer.await?;
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}
