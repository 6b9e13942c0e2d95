//! The global retry budget.

use std::time::Duration;

use switchyard::ErrorKind;
use switchyard::RetryBudgetSettings;
use switchyard::route::Route;
use switchyard::simulated::SimulatedProvider;

use crate::support::*;

/// A provider that is down, behind a route that retries it `max_attempts` times, under `budget`.
fn outage(max_attempts: u32, budget: RetryBudgetSettings) -> (SimulatedProvider, switchyard::Router) {
    let down = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let route = Route::builder("default").target("p:m").retry(quick_retry(max_attempts)).health_gate(false);
    let router = builder(&[("p", &down)])
        .route(route.build().unwrap())
        .health(no_breaker())
        .retry_budget(budget)
        .build()
        .unwrap();
    (down, router)
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_caps_retries_during_an_outage() {
    let budget = RetryBudgetSettings { ratio: 0.2, min_retries: 5, window: Duration::from_secs(60) };
    let (down, router) = outage(3, budget);

    let mut budget_notes = 0;
    for _ in 0..100 {
        let error = router.chat(&request("default")).await.expect_err("the provider is down");
        budget_notes += error
            .trail()
            .iter()
            .filter(|a| a.note.as_deref() == Some("retry budget spent: not retrying"))
            .count();
    }

    // Without a budget: 300 calls. With it: 100 first tries plus at most 20% of 100 retries.
    assert!(down.calls() <= 120, "retries were capped, got {} calls", down.calls());
    assert!(down.calls() >= 105, "the floor and the ratio still allow some retries, got {}", down.calls());
    assert!(budget_notes > 0, "the trail says when the budget stopped a retry");
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_refills_as_the_window_slides() {
    let budget = RetryBudgetSettings { ratio: 0.0, min_retries: 2, window: Duration::from_secs(10) };
    let (down, router) = outage(2, budget);

    for _ in 0..5 {
        let _ = router.chat(&request("default")).await;
    }
    assert_eq!(down.calls(), 7, "five first tries and the two retries of the floor");

    tokio::time::advance(Duration::from_secs(11)).await;
    for _ in 0..5 {
        let _ = router.chat(&request("default")).await;
    }
    assert_eq!(down.calls(), 14, "a new window, two more retries");
}
