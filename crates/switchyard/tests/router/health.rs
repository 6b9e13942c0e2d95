//! The health board through the router: the gate, the breaker, exhaustion, cooldowns, resets.

use std::time::Duration;

use switchyard::health::{HealthSettings, HealthStatus};
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step, typical_error};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderError, Router, Target};
use tokio::time::Instant;

use crate::support::*;

/// `a` then a healthy `b`, with `settings`; a zero TTL isolates the breaker from the gate.
fn behind_breaker(a: &SimulatedProvider, b: &SimulatedProvider, settings: HealthSettings) -> Router {
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::ZERO);
    router_with(&[("a", a), ("b", b)], route, settings)
}

/// A router whose breaker on `a` (whose first call must fail) opened on that failure for
/// `open_for`, which has just passed: the next request to `a` is the half-open probe.
async fn half_open(a: &SimulatedProvider, b: &SimulatedProvider, open_for: Duration) -> Router {
    let settings = HealthSettings { failure_threshold: 1, open_for, ..HealthSettings::default() };
    let router = behind_breaker(a, b, settings);
    router.chat(&request("default")).await.unwrap(); // opens the circuit
    assert_eq!(router.target_health(&target("a:m")).breaker, "open");
    tokio::time::advance(open_for).await;
    router
}

fn target(text: &str) -> Target {
    text.parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_health_gate_skips_a_recently_failed_target_until_its_ttl_expires() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::from_secs(10));
    let router = router_with(&[("a", &a), ("b", &b)], route, no_breaker());

    router.chat(&request("default")).await.unwrap();
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::TemporarilyUnavailable);

    let gated = router.chat(&request("default")).await.unwrap();
    assert_eq!(gated.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert_eq!(a.calls(), 1);

    tokio::time::advance(Duration::from_secs(10)).await;
    let recovered = router.chat(&request("default")).await.unwrap();
    assert_eq!(recovered.served_by.to_string(), "a:m", "after the TTL the target is tried again");
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Available);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_the_ttl_gates_until_it_passes() {
    let a = SimulatedProvider::new().script([Step::Fail(
        typical_error(ErrorKind::Unavailable).with_retry_after(Duration::from_secs(40)),
    )]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::from_secs(10));
    let router = router_with(&[("a", &a), ("b", &b)], route, no_breaker());

    router.chat(&request("default")).await.unwrap();
    tokio::time::advance(Duration::from_secs(39)).await;
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "b:m");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "a:m");
}

#[tokio::test(start_paused = true)]
async fn with_the_health_gate_off_every_target_is_attempted() {
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
    let b = SimulatedProvider::new();
    let route =
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(false);
    let router = router_with(&[("a", &a), ("b", &b)], route, no_breaker());

    router.chat(&request("default")).await.unwrap();
    let again = router.chat(&request("default")).await.unwrap();
    assert_eq!(again.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(a.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn when_every_target_is_gated_the_one_that_recovers_first_is_tried() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::from_secs(30));
    let router = router_with(&[("a", &a), ("b", &b)], route, no_breaker());

    router.chat(&request("default")).await.expect_err("both fail once");
    // a failed first, so its gate expires first.
    tokio::time::advance(Duration::from_secs(5)).await;
    let answer = router.chat(&request("default")).await.expect("a stale verdict must not become an outage");

    assert_eq!(answer.served_by.to_string(), "a:m");
    assert_eq!(
        answer.trail.outcomes(),
        vec![Outcome::SkippedUnhealthy, Outcome::SkippedUnhealthy, Outcome::Ok]
    );
    let note = answer.trail.attempts()[2].note.as_deref().unwrap_or_default();
    assert!(note.contains("every target was gated"), "{note}");
}

/// A target's answer to a request it cannot carry (an image in a tool result, a token count).
fn cannot_take_it() -> Step {
    Step::Fail(switchyard::ProviderError::unsupported("an image in a tool result"))
}

/// Route `default` over `a:m` then `b:m`, one try each, a failed target gated for 30 s.
fn gated_for_30s(a: &SimulatedProvider, b: &SimulatedProvider) -> switchyard::Router {
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::from_secs(30));
    router_with(&[("a", a), ("b", b)], route, no_breaker())
}

#[tokio::test(start_paused = true)]
async fn a_gated_target_is_still_tried_when_the_only_other_cannot_take_the_request() {
    // b cannot carry what the request holds (an image in a tool result, a token count): it is
    // no target that served, so a gated a is tried rather than an outage answered.
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new().script([cannot_take_it(), cannot_take_it()]);
    let router = gated_for_30s(&a, &b);

    router.chat(&request("default")).await.expect_err("a fails once, b cannot");
    let answer = router.chat(&request("default")).await.expect("a stale verdict must not become an outage");
    assert_eq!(answer.served_by.to_string(), "a:m");
    assert_eq!(
        answer.trail.outcomes(),
        vec![Outcome::SkippedUnhealthy, Outcome::SkippedUnsupported, Outcome::Ok]
    );
}

#[tokio::test(start_paused = true)]
async fn a_gated_target_tried_after_all_that_cannot_take_the_request_either_makes_it_the_requests_fault() {
    // Neither can take it (a token count no target gives): a 400 naming why, not the outage
    // a resting target's skip would make of it.
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), cannot_take_it()]);
    let b = SimulatedProvider::new().script([cannot_take_it(), cannot_take_it()]);
    let router = gated_for_30s(&a, &b);

    router.chat(&request("default")).await.expect_err("a fails once, b cannot");
    let error = router.chat(&request("default")).await.expect_err("neither can take it");
    assert_eq!(error.kind(), Some(ErrorKind::InvalidRequest), "{error}");
    assert!(error.to_string().contains("can serve this request"), "{error}");
    let outcomes: Vec<Outcome> = error.trail().iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::SkippedUnhealthy, Outcome::SkippedUnsupported, Outcome::SkippedUnsupported],
        "{error}"
    );
    assert!(switchyard::trail::none_could_serve(error.trail()));
}

#[tokio::test(start_paused = true)]
async fn a_target_that_refuses_the_request_as_too_large_was_called_and_its_health_is_untouched() {
    // A 413 from the provider: the target's lack, as an adapter's refusal is, but it was asked.
    let too_large = || Step::Fail(ProviderError::unsupported("request entity too large").with_status(413));
    let a = SimulatedProvider::new().script([too_large(), too_large()]);
    let b = SimulatedProvider::new();
    let router = gated_for_30s(&a, &b);
    let mut events = router.subscribe();

    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok], "a call, not a skip");
    assert!(event_names(&mut events).contains(&"attempt_failed"), "announced as the call it was");
    let refused = &answer.trail.attempts()[0];
    assert!(refused.credential_id.is_some() && refused.unsupported(), "{refused:?}");
    assert_eq!(refused.error.as_ref().and_then(ProviderError::status), Some(413));
    assert_eq!(router.target_health(&target("a:m")).consecutive_failures, 0);

    // Refused by every target: the request is the problem, named as such.
    let c = SimulatedProvider::new().script([too_large(), too_large()]);
    let only = router_with(&[("c", &c)], Route::builder("default").target("c:m"), no_breaker());
    let error = only.chat(&request("default")).await.expect_err("no target can take it");
    assert_eq!(error.kind(), Some(ErrorKind::InvalidRequest));
    assert!(error.to_string().contains("can serve this request: c:m: request entity too large"), "{error}");
    assert!(error.to_string().contains("route `default`"), "{error}");
    // Asked of the target by name: the default route, whose settings it runs on, is not named.
    let error = only.chat(&request("c:m")).await.expect_err("the target cannot take it");
    assert!(
        error
            .to_string()
            .contains("the target asked for cannot serve this request: c:m: request entity too large"),
        "{error}"
    );
    assert!(!error.to_string().contains("route `default`"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn when_every_target_is_gated_and_the_first_to_recover_cannot_take_the_request_the_next_is_tried() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), cannot_take_it()]);
    let b = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let router = gated_for_30s(&a, &b);

    router.chat(&request("default")).await.expect_err("both fail once");
    let answer = router.chat(&request("default")).await.expect("the next gated target answers");
    assert_eq!(answer.served_by.to_string(), "b:m");
    assert_eq!(
        answer.trail.outcomes(),
        vec![Outcome::SkippedUnhealthy, Outcome::SkippedUnhealthy, Outcome::SkippedUnsupported, Outcome::Ok]
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_after_the_threshold_then_half_opens_and_closes_on_a_probe_success() {
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 3));
    let b = SimulatedProvider::new();
    let settings = HealthSettings {
        failure_threshold: 3,
        open_for: Duration::from_secs(30),
        ..HealthSettings::default()
    };
    let router = behind_breaker(&a, &b, settings);
    let mut events = router.subscribe();

    for _ in 0..3 {
        router.chat(&request("default")).await.unwrap();
    }
    let health = router.target_health(&target("a:m"));
    assert_eq!((health.breaker, health.consecutive_failures), ("open", 3));
    assert!(event_names(&mut events).contains(&"circuit_opened"));

    let skipped = router.chat(&request("default")).await.unwrap();
    assert_eq!(skipped.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert!(skipped.trail.attempts()[0].note.as_deref().unwrap_or_default().starts_with("circuit open"));
    assert_eq!(a.calls(), 3);

    tokio::time::advance(Duration::from_secs(30)).await;
    let probe = router.chat(&request("default")).await.unwrap();
    assert_eq!(probe.served_by.to_string(), "a:m", "the probe goes through and succeeds");
    let names = event_names(&mut events);
    let (half, closed) = (
        names.iter().position(|n| *n == "circuit_half_open"),
        names.iter().position(|n| *n == "circuit_closed"),
    );
    assert!(half.is_some() && closed.is_some() && half < closed, "{names:?}");
    assert!(names.contains(&"provider_recovered"), "{names:?}");
    let health = router.target_health(&target("a:m"));
    assert_eq!(
        (health.breaker, health.status, health.consecutive_failures),
        ("closed", HealthStatus::Available, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_the_circuit_for_longer_within_a_bound() {
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 4));
    let b = SimulatedProvider::new();
    let settings = HealthSettings {
        failure_threshold: 1,
        open_for: Duration::from_secs(10),
        open_max: Duration::from_secs(25),
        ..HealthSettings::default()
    };
    let router = behind_breaker(&a, &b, settings);

    router.chat(&request("default")).await.unwrap(); // opens for 10 s
    let mut opened_for = Vec::new();
    for _ in 0..3 {
        let opened_at = Instant::now();
        // Step second by second until a probe is let through.
        loop {
            tokio::time::advance(Duration::from_secs(1)).await;
            let calls = a.calls();
            router.chat(&request("default")).await.unwrap();
            if a.calls() > calls {
                break;
            }
        }
        opened_for.push(opened_at.elapsed());
    }
    assert_eq!(opened_for, [Duration::from_secs(10), Duration::from_secs(20), Duration::from_secs(25)]);
}

#[tokio::test(start_paused = true)]
async fn a_half_open_circuit_lets_one_probe_through_at_a_time() {
    let a = SimulatedProvider::new().script([
        Step::fail(ErrorKind::Unavailable),
        Step::Delay(Duration::from_secs(5), Box::new(Step::Reply)),
    ]);
    let b = SimulatedProvider::new();
    let router = half_open(&a, &b, Duration::from_secs(10)).await;

    let (first, second) = (request("default"), request("default"));
    let (probe, other) = tokio::join!(router.chat(&first), async {
        tokio::task::yield_now().await;
        router.chat(&second).await
    });
    assert_eq!(probe.unwrap().served_by.to_string(), "a:m");
    let other = other.unwrap();
    assert_eq!(other.served_by.to_string(), "b:m");
    assert_eq!(other.trail.attempts()[0].note.as_deref(), Some("circuit half-open: probe in flight"));
    assert_eq!(a.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_target_is_skipped_until_a_direct_call_recovers_it() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(3));
    let router = router(&[("a", &a), ("b", &b)], route);
    let mut events = router.subscribe();

    let first = router.chat(&request("default")).await.unwrap();
    assert_eq!(first.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok], "quota is not retried");
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Exhausted);
    assert!(event_names(&mut events).contains(&"exhausted"));

    tokio::time::advance(Duration::from_secs(240)).await;
    let skipped = router.chat(&request("default")).await.unwrap();
    assert_eq!(
        skipped.trail.outcomes(),
        vec![Outcome::SkippedExhausted, Outcome::Ok],
        "no reset time: exhausted until it is tried again"
    );

    let direct = router.chat(&request("a:m")).await.expect("a call naming the target bypasses the skip");
    assert_eq!(direct.trail.outcomes(), vec![Outcome::Ok]);
    let names = event_names(&mut events);
    assert!(names.contains(&"provider_recovered") && names.contains(&"capacity_restored"), "{names:?}");

    let back = router.chat(&request("default")).await.unwrap();
    assert_eq!(back.served_by.to_string(), "a:m");
}

#[tokio::test(start_paused = true)]
async fn a_target_whose_providers_every_key_is_spent_shows_as_exhausted_though_never_called() {
    // `a:big` spends the provider's one key; `a:small`, never called, is skipped all the same.
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let b = SimulatedProvider::new();
    let router = builder(&[("b", &b)])
        .provider(keyed("a", &a, &["sk-a-0123456789"]))
        .route(Route::builder("default").target("a:big").target("a:small").target("b:m").build().unwrap())
        .build()
        .unwrap();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::SkippedExhausted, Outcome::Ok]);
    let health = router.health();
    let small = health.targets.iter().find(|t| t.target == target("a:small")).unwrap();
    assert_eq!(small.status, HealthStatus::Exhausted, "{small:?}");
    assert!(small.reason.contains("out of quota"), "{small:?}");
    let other = health.targets.iter().find(|t| t.target == target("b:m")).unwrap();
    assert_eq!(other.status, HealthStatus::Available);
}

#[tokio::test(start_paused = true)]
async fn a_key_spent_with_no_reset_said_is_tried_again_every_five_minutes() {
    // Still spent at the first try again, topped up by the second.
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::QuotaExceeded), 2));
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(3));
    let router = router(&[("a", &a), ("b", &b)], route);
    let served_by = async || router.chat(&request("default")).await.unwrap().served_by.to_string();

    assert_eq!(served_by().await, "b:m");
    let benched = router.health().credentials.into_iter().find(|c| c.status == HealthStatus::Exhausted);
    let retry_after = benched.expect("a's key is benched").retry_after;
    assert_eq!(retry_after, Some(Duration::from_secs(300)), "the operator is told when it is tried again");
    tokio::time::advance(Duration::from_secs(299)).await;
    assert_eq!(served_by().await, "b:m");
    assert_eq!(a.calls(), 1, "benched, not asked");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(served_by().await, "b:m", "tried again, still spent: on to the fallback at once");
    assert_eq!(a.calls(), 2);
    tokio::time::advance(Duration::from_secs(300)).await;
    assert_eq!(served_by().await, "a:m", "topped up: back in use");
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Available);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_target_is_tried_again_once_its_reset_time_passed() {
    let quota = typical_error(ErrorKind::QuotaExceeded).with_retry_after(Duration::from_secs(60));
    let a = SimulatedProvider::new().script([Step::Fail(quota)]);
    let b = SimulatedProvider::new();
    let router = router(&[("a", &a), ("b", &b)], Route::builder("default").target("a:m").target("b:m"));

    router.chat(&request("default")).await.unwrap();
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(
        router.chat(&request("default")).await.unwrap().trail.outcomes()[0],
        Outcome::SkippedExhausted
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "a:m");
}

#[tokio::test(start_paused = true)]
async fn quota_on_one_key_rotates_to_the_next_key_without_exhausting_the_target() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let router = Router::builder()
        .provider(keyed("a", &a, &["sk-spent-key-0001", "sk-fresh-key-0002"]))
        .route(Route::builder("default").target("a:m").build().unwrap())
        .build()
        .unwrap();

    let answer = router.chat(&request("default")).await.expect("the second key has quota");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Ok]);
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Available);
    let statuses: Vec<HealthStatus> = router.health().credentials.iter().map(|c| c.status).collect();
    assert!(statuses.contains(&HealthStatus::Exhausted) && statuses.contains(&HealthStatus::Available));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_cools_the_key_down_and_rotates_to_a_fresh_one() {
    let a = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(1))]);
    let settings =
        HealthSettings { cooldown_on_rate_limit: Duration::from_secs(60), ..HealthSettings::default() };
    let router = Router::builder()
        .provider(keyed("a", &a, &["sk-busy-key-0001", "sk-idle-key-0002"]))
        .route(Route::builder("default").target("a:m").retry(quick_retry(2)).build().unwrap())
        .health(settings)
        .build()
        .unwrap();
    let ids: Vec<_> = router.credentials("a").unwrap().iter().map(|c| c.id().clone()).collect();

    let answer = router.chat(&request("default")).await.unwrap();
    let used: Vec<_> = answer.trail.attempts().iter().map(|a| a.credential_id.clone().unwrap()).collect();
    assert_eq!(used, vec![ids[0].clone(), ids[1].clone()]);

    // The busy key is still resting: the next request starts on the idle one.
    let next = router.chat(&request("default")).await.unwrap();
    assert_eq!(next.trail.attempts()[0].credential_id.as_ref(), Some(&ids[1]));

    tokio::time::advance(Duration::from_secs(60)).await;
    let rested = router.chat(&request("default")).await.unwrap();
    assert_eq!(
        rested.trail.attempts()[0].credential_id.as_ref(),
        Some(&ids[0]),
        "back in rotation after the cooldown"
    );
}

#[tokio::test(start_paused = true)]
async fn reset_clears_one_target_and_reset_all_clears_everything() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let b = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let c = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").target("c:m").retry(quick_retry(1));
    let router = router(&[("a", &a), ("b", &b), ("c", &c)], route);
    let mut events = router.subscribe();

    router.chat(&request("default")).await.unwrap();
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Exhausted);
    events.drain();

    router.reset(&target("a:m")).unwrap();
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Unknown);
    assert_eq!(router.target_health(&target("b:m")).status, HealthStatus::TemporarilyUnavailable);
    let names = event_names(&mut events);
    assert!(names.contains(&"capacity_restored"), "{names:?}");

    router.reset_all();
    let listed: Vec<(String, HealthStatus)> =
        router.health().targets.iter().map(|t| (t.target.to_string(), t.status)).collect();
    assert_eq!(
        listed,
        [("a:m", HealthStatus::Unknown), ("b:m", HealthStatus::Unknown), ("c:m", HealthStatus::Unknown)]
            .map(|(t, s)| (t.to_owned(), s)),
        "every record forgotten: the configured targets are listed as unknown"
    );
    assert_eq!(router.target_health(&target("b:m")).status, HealthStatus::Unknown);
    assert!(event_names(&mut events).contains(&"provider_recovered"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_requests_give_consistent_health_counts() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let route =
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(false);
    let router = router_with(&[("a", &a), ("b", &b)], route, no_breaker());

    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let router = router.clone();
            tokio::spawn(async move { router.chat(&request("default")).await })
        })
        .collect();
    for task in tasks {
        let answer = task.await.expect("no panic").expect("b answers");
        assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    }

    assert_eq!((a.calls(), b.calls()), (200, 200));
    let a_health = router.target_health(&target("a:m"));
    assert_eq!(a_health.consecutive_failures, 200, "no failure lost to a race");
    assert_eq!(a_health.status, HealthStatus::TemporarilyUnavailable);
    assert_eq!(router.target_health(&target("b:m")).status, HealthStatus::Available);
}

#[tokio::test(start_paused = true)]
async fn a_probe_answered_with_a_rate_limit_gives_its_slot_back() {
    let a = SimulatedProvider::new()
        .script([Step::fail(ErrorKind::Unavailable), Step::rate_limited(Duration::from_secs(1))]);
    let b = SimulatedProvider::new();
    let router = half_open(&a, &b, Duration::from_secs(30)).await;
    router.chat(&request("default")).await.unwrap(); // the probe meets a 429

    let next = router.chat(&request("default")).await.unwrap();
    assert_eq!(next.served_by.to_string(), "a:m", "the next request probes at once, not 30 s later");
    assert_eq!(router.target_health(&target("a:m")).breaker, "closed");
}

#[tokio::test(start_paused = true)]
async fn with_the_health_gate_off_an_open_circuit_still_skips() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let route =
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(false);
    let settings = HealthSettings { failure_threshold: 2, ..HealthSettings::default() };
    let router = router_with(&[("a", &a), ("b", &b)], route, settings);

    for _ in 0..2 {
        router.chat(&request("default")).await.unwrap();
    }
    let skipped = router.chat(&request("default")).await.unwrap();
    assert_eq!(skipped.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert_eq!(a.calls(), 2, "the gate is off, the breaker is not");
}

#[tokio::test(start_paused = true)]
async fn a_target_exhausted_on_every_key_recovers_when_the_first_key_resets() {
    let soon = typical_error(ErrorKind::QuotaExceeded).with_retry_after(Duration::from_secs(60));
    let late = typical_error(ErrorKind::QuotaExceeded).with_retry_after(Duration::from_secs(3600));
    let a = SimulatedProvider::new().script([Step::Fail(soon), Step::Fail(late)]);
    let b = SimulatedProvider::new();
    let router = Router::builder()
        .provider(keyed("a", &a, &["sk-key-resets-soon-01", "sk-key-resets-late-02"]))
        .provider(keyed("b", &b, &[]))
        .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
        .build()
        .unwrap();

    let first = router.chat(&request("default")).await.unwrap();
    assert_eq!(first.served_by.to_string(), "b:m");
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Exhausted);

    tokio::time::advance(Duration::from_secs(61)).await;
    let back = router.chat(&request("default")).await.unwrap();
    assert_eq!(back.served_by.to_string(), "a:m", "the first key's quota is back after 60 s");
}

/// Two environment variables holding the same key give one credential twice.
#[tokio::test(start_paused = true)]
async fn a_key_listed_twice_keeps_what_either_copy_recorded() {
    use switchyard::credential::{CredentialId, Secret};
    use switchyard::health::{HealthStore, MemoryStore};

    let store = MemoryStore::default();
    let id = CredentialId::derive("openai", "https://api.example", Some(&Secret::new("sk-the-same-key")));
    let ids = [id.clone(), id];
    let until = Instant::now() + Duration::from_secs(30);
    for written in [0, 1] {
        store.clear();
        store.update(&target("p:m"), &ids, &mut |records| {
            records.credentials[written].cooldown_until = Some(until);
        });
        let mut seen = Vec::new();
        store.update(&target("p:m"), &ids, &mut |records| {
            seen = records.credentials.iter().map(|r| r.cooldown_until).collect();
        });
        assert_eq!(seen, [Some(until), Some(until)], "written through copy {written}");
    }
}

/// The targets a store of capacity 100 holds, checking it holds no more.
fn kept_within_capacity(store: &switchyard::health::MemoryStore) -> Vec<String> {
    use switchyard::health::HealthStore;
    let kept: Vec<String> = store.all().0.iter().map(|(t, _)| t.to_string()).collect();
    assert!(kept.len() <= 100, "{} records kept", kept.len());
    kept
}

/// Clients may name any `provider:model`; each new name must not stay in memory for good.
#[tokio::test(start_paused = true)]
async fn the_store_stays_bounded_and_forgets_quiet_records_before_troubled_ones() {
    use switchyard::health::{Breaker, HealthStore, MemoryStore};

    let store = MemoryStore::with_capacity(100);
    let write = |name: &str, status: HealthStatus, failures: u32, breaker: Breaker| {
        let since = Some(Instant::now());
        store.update(&target(name), &[], &mut |records| {
            records.target.status = status;
            records.target.since = since;
            records.target.consecutive_failures = failures;
            records.target.breaker = breaker;
        });
    };
    let closed = Breaker::Closed;
    write("listed:m", HealthStatus::TemporarilyUnavailable, 3, closed);
    for n in 0..1000 {
        tokio::time::advance(Duration::from_millis(1)).await;
        write(&format!("listed:invented-{n}"), HealthStatus::Available, 0, closed);
    }
    let kept = kept_within_capacity(&store);
    assert!(kept.contains(&"listed:m".to_owned()), "the troubled record was forgotten");
    assert!(kept.contains(&"listed:invented-999".to_owned()), "the newest record was forgotten");
    assert!(!kept.contains(&"listed:invented-0".to_owned()), "the oldest quiet record was kept");

    // Full of troubled records, the ones that changed longest ago go first.
    store.clear();
    for n in 0..300 {
        tokio::time::advance(Duration::from_millis(1)).await;
        write(&format!("p:failing-{n}"), HealthStatus::RateLimited, 1, closed);
    }
    let kept = kept_within_capacity(&store);
    assert!(kept.contains(&"p:failing-299".to_owned()));
    assert!(!kept.contains(&"p:failing-0".to_owned()));

    // A real outage (an open circuit, heard of long ago) outlives a flood of invented names
    // that each failed once since (a 404 marks a model unavailable).
    store.clear();
    let open = Breaker::Open { until: Instant::now() + Duration::from_secs(600) };
    write("listed:down", HealthStatus::TemporarilyUnavailable, 5, open);
    for n in 0..1000 {
        tokio::time::advance(Duration::from_millis(1)).await;
        write(&format!("listed:no-such-model-{n}"), HealthStatus::TemporarilyUnavailable, 1, closed);
    }
    let kept = kept_within_capacity(&store);
    assert!(kept.contains(&"listed:down".to_owned()), "the open circuit was forgotten");
}

#[tokio::test(start_paused = true)]
async fn the_health_view_lists_every_configured_target_and_key_as_unknown_before_any_call_and_after_a_reset()
{
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let router = Router::builder()
        .provider(keyed("a", &a, &["sk-first-key-0001", "sk-second-key-0002"]))
        .provider(keyed("b", &b, &[]))
        .route(Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).build().unwrap())
        .route(Route::builder("cheap").target("b:m").target("a:small").build().unwrap())
        .build()
        .unwrap();
    let mut keys: Vec<_> = ["a", "b"]
        .into_iter()
        .flat_map(|p| router.credentials(p).unwrap().iter().map(|c| c.id().clone()))
        .collect();
    keys.sort();
    let view = |router: &Router| {
        let health = router.health();
        let targets: Vec<(String, HealthStatus)> =
            health.targets.iter().map(|t| (t.target.to_string(), t.status)).collect();
        let credentials: Vec<_> =
            health.credentials.iter().map(|c| (c.credential_id.clone(), c.status)).collect();
        (targets, credentials)
    };
    let all_unknown = (
        ["a:m", "a:small", "b:m"].map(|t| (t.to_owned(), HealthStatus::Unknown)).to_vec(),
        keys.iter().map(|id| (id.clone(), HealthStatus::Unknown)).collect::<Vec<_>>(),
    );
    assert_eq!(keys.len(), 3, "two keys of a, b's keyless credential");

    assert_eq!(view(&router), all_unknown, "before any call");

    router.chat(&request("default")).await.unwrap();
    let (targets, _) = view(&router);
    assert_eq!(
        targets,
        [
            ("a:m".to_owned(), HealthStatus::TemporarilyUnavailable),
            ("a:small".to_owned(), HealthStatus::Unknown),
            ("b:m".to_owned(), HealthStatus::Available),
        ]
    );

    router.reset_all();
    assert_eq!(view(&router), all_unknown, "after a reset");
}

/// One key of provider `p`, whose `model-a` fails with `failure` on every call and whose
/// `model-b` answers; the route tries `model-a` three times, then `model-b`.
fn one_key_two_models(failure: Step) -> (Router, SimulatedProvider, SimulatedProvider) {
    use switchyard::ProviderEntry;
    use switchyard::credential::Secret;
    let a = SimulatedProvider::new().script(std::iter::repeat_n(failure, 100));
    let b = SimulatedProvider::new();
    let provider = ByModel(vec![("model-a", a.clone()), ("model-b", b.clone())]);
    let route = Route::builder("default").target("p:model-a").target("p:model-b").retry(quick_retry(3));
    let router = Router::builder()
        .provider(ProviderEntry::new("p", provider).key(Secret::new("sk-the-only-key-0001")))
        .route(route.build().unwrap())
        .build()
        .unwrap();
    (router, a, b)
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_of_one_model_rests_the_key_for_that_model_only() {
    let (router, a, b) = one_key_two_models(Step::fail(ErrorKind::RateLimited));

    let answer = router.chat(&request("default")).await.expect("the other model answers");
    assert_eq!(answer.served_by.to_string(), "p:model-b");
    assert_eq!(
        answer.trail.outcomes(),
        vec![Outcome::Retried, Outcome::Retried, Outcome::Failed, Outcome::Ok]
    );
    assert_eq!((a.calls(), b.calls()), (3, 1));

    // The key still rests for model-a, and serves model-b.
    let next = router.chat(&request("default")).await.unwrap();
    assert_eq!(next.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert_eq!(next.trail.attempts()[0].note.as_deref(), Some("every credential is cooling down"));
    let key = router.credentials("p").unwrap()[0].id().clone();
    let health = router.target_health(&target("p:model-a"));
    assert_eq!(health.status, HealthStatus::RateLimited);
    assert_eq!(health.key_cooldowns.iter().map(|k| &k.credential_id).collect::<Vec<_>>(), [&key]);
    let credential = router.health().credentials.into_iter().find(|c| c.credential_id == key).unwrap();
    assert_eq!((credential.status, credential.cooldown), (HealthStatus::Available, None), "not benched");
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_the_provider_says_is_the_account_s_rests_the_key_for_every_model() {
    let account = typical_error(ErrorKind::RateLimited).account_wide();
    let (router, a, b) = one_key_two_models(Step::Fail(account));

    let error = router.chat(&request("default")).await.expect_err("the only key rests for every model");
    assert_eq!(error.kind(), Some(ErrorKind::RateLimited));
    assert_eq!(
        outcomes_of(&error),
        vec![Outcome::Retried, Outcome::Retried, Outcome::Failed, Outcome::SkippedUnhealthy]
    );
    assert_eq!((a.calls(), b.calls()), (3, 0));
    assert!(error.to_string().starts_with("all targets failed after 3 calls and 1 skip; last: "), "{error}");
}

#[tokio::test(start_paused = true)]
async fn quota_spent_on_one_model_benches_the_key_for_every_model() {
    let (router, a, b) = one_key_two_models(Step::fail(ErrorKind::QuotaExceeded));

    let error = router.chat(&request("default")).await.expect_err("the only key is out of quota");
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed, Outcome::SkippedExhausted]);
    assert_eq!((a.calls(), b.calls()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_probe_the_target_refuses_as_unsupported_gives_the_slot_back_for_the_next_request() {
    let unsupported = ProviderError::unsupported("this request cannot be written in its API");
    let a = SimulatedProvider::new().script([
        Step::fail(ErrorKind::Unavailable),
        Step::Fail(unsupported),
        Step::Reply,
    ]);
    let b = SimulatedProvider::new();
    let router = half_open(&a, &b, Duration::from_secs(10)).await;

    let refused = router.chat(&request("default")).await.unwrap();
    assert_eq!(refused.trail.outcomes(), vec![Outcome::SkippedUnsupported, Outcome::Ok]);
    assert_eq!(router.target_health(&target("a:m")).breaker, "half_open", "nothing was learned");
    // The slot is free: the next request is the probe, and closes the circuit.
    let probe = router.chat(&request("default")).await.unwrap();
    assert_eq!(probe.served_by.to_string(), "a:m", "{:?}", probe.trail.outcomes());
    assert_eq!(router.target_health(&target("a:m")).breaker, "closed");
    assert_eq!(a.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_caller_went_away_gives_its_slot_back_at_once() {
    // The probe hangs, and its caller gives up: the next request probes, not waits the limit.
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::Hang, Step::Reply]);
    let b = SimulatedProvider::new();
    let router = half_open(&a, &b, Duration::from_secs(10)).await;

    let gone = tokio::time::timeout(Duration::from_secs(1), router.chat(&request("default"))).await;
    assert!(gone.is_err(), "the caller went away mid-probe");
    let next = router.chat(&request("default")).await.unwrap();
    assert_eq!(next.served_by.to_string(), "a:m", "probed again at once: {:?}", next.trail.outcomes());
}

#[tokio::test(start_paused = true)]
async fn a_pooled_connection_gone_stale_says_nothing_of_the_providers_health() {
    // The server's keep-alive ran out as the request went on a reused connection: the walk
    // goes on, and the provider stays in use (it is not gated for the health TTL).
    let stale = ProviderError::new(
        ErrorKind::Transport,
        "the request failed: connection closed before message completed",
    )
    .stale_connection();
    let a = SimulatedProvider::new().script([Step::Fail(stale), Step::Reply, Step::Reply]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(true);
    let router = router(&[("a", &a), ("b", &b)], route);

    let first = router.chat(&request("default")).await.unwrap();
    assert_eq!(first.served_by.to_string(), "b:m");
    let next = router.chat(&request("default")).await.unwrap();
    assert_eq!(next.served_by.to_string(), "a:m", "not gated: {:?}", next.trail.outcomes());
    assert_ne!(router.target_health(&target("a:m")).status, HealthStatus::TemporarilyUnavailable);
}

#[tokio::test(start_paused = true)]
async fn a_probe_another_replica_took_first_is_not_sent_and_the_chain_goes_on() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::Reply]);
    let b = SimulatedProvider::new();
    let store = std::sync::Arc::new(ProbedElsewhere::default());
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1));
    let open_for = Duration::from_secs(10);
    let router = builder(&[("a", &a), ("b", &b)])
        .route(route.health_ttl(Duration::ZERO).build().unwrap())
        .health(HealthSettings { failure_threshold: 1, open_for, ..HealthSettings::default() })
        .health_store(store.clone())
        .build()
        .unwrap();
    router.chat(&request("default")).await.unwrap(); // opens the circuit
    tokio::time::advance(open_for).await;

    store.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "b:m");
    assert_eq!(answer.trail.outcomes()[0], Outcome::SkippedUnhealthy);
    assert_eq!(answer.trail.attempts()[0].note.as_deref(), Some("circuit half-open: another replica probes"));
    assert_eq!(a.calls(), 1, "the probe was not sent");
    // Its slot was given back: once the probe is this replica's, it goes.
    store.refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    let probe = router.chat(&request("default")).await.unwrap();
    assert_eq!(probe.served_by.to_string(), "a:m", "{:?}", probe.trail.outcomes());
    assert_eq!(router.target_health(&target("a:m")).breaker, "closed");
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_asking_a_day_rests_the_key_at_most_the_configured_bound() {
    // One 429 says "retry after 86400 s" (a proxy's, or over-cautious); the model answers again
    // a moment later. The key rests five minutes, not a day: then one call finds it back.
    let day = Duration::from_secs(86_400);
    let a = SimulatedProvider::new().script([Step::rate_limited(day), Step::Reply]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1));
    let router = router_with(&[("a", &a), ("b", &b)], route, HealthSettings::default());
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "b:m");
    let resting = router.target_health(&target("a:m")).key_cooldowns[0].cooldown;
    assert_eq!(resting, Duration::from_secs(300), "bounded by max_cooldown_on_rate_limit");
    let wait = router.target_health(&target("a:m")).retry_after;
    assert_eq!(wait, Some(Duration::from_secs(300)), "the provider's wait is held to it too");

    tokio::time::advance(Duration::from_secs(299)).await;
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "b:m");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "a:m");
    assert_eq!(a.calls(), 2);
}
