//! Retrying the same target: Retry-After, max_wait, the deadline, and what is never retried.

use std::time::Duration;

use switchyard::health::HealthStatus;
use switchyard::route::{ErrorFilter, Retry, Route, Timeouts};
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, RequestOptions, RouteError, Router};
use tokio::time::Instant;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let sim = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(3))]);
    let router = router(&[("p", &sim)], Route::builder("default").target("p:m").retry(quick_retry(2)));

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.expect("second attempt answers");

    assert_eq!(start.elapsed(), Duration::from_secs(3), "waited exactly the Retry-After");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Ok]);
    let first = &answer.trail.attempts()[0];
    assert_eq!(first.error_kind(), Some(ErrorKind::RateLimited));
    assert_eq!(first.error.as_ref().and_then(|e| e.status()), Some(429));
    assert_eq!(answer.trail.attempts()[1].started, Duration::from_secs(3));
    assert_eq!(sim.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_after_longer_than_the_backoff_is_honoured_on_the_second_retry_too() {
    let sim = SimulatedProvider::new()
        .script([Step::rate_limited(Duration::from_secs(2)), Step::rate_limited(Duration::from_secs(4))]);
    let router = router(&[("p", &sim)], Route::builder("default").target("p:m").retry(quick_retry(3)));

    let answer = router.chat(&request("default")).await.expect("third attempt answers");

    let starts: Vec<Duration> = answer.trail.attempts().iter().map(|a| a.started).collect();
    assert_eq!(starts, vec![Duration::ZERO, Duration::from_secs(2), Duration::from_secs(6)]);
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Retried, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn retry_after_above_max_wait_moves_on_at_once() {
    let primary = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(60))]);
    let secondary = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(3));
    let router = router(&[("a", &primary), ("b", &secondary)], route);

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.expect("secondary answers");

    assert_eq!(start.elapsed(), Duration::ZERO, "did not wait for the 60 s Retry-After");
    assert_eq!(answer.served_by.to_string(), "b:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    let note = answer.trail.attempts()[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("exceeds max_wait"), "the trail says why it moved on: {note}");
    assert_eq!(primary.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_above_max_wait_on_the_last_target_fails_at_once_with_the_providers_wait() {
    let sim = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(8))]);
    let router = router(&[("p", &sim)], Route::builder("default").target("p:m").retry(quick_retry(2)));

    let start = Instant::now();
    let error = router.chat(&request("default")).await.expect_err("max_wait is 5 s: never sleep 8 s");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(error.kind(), Some(ErrorKind::RateLimited));
    assert_eq!(error.provider_error().and_then(|e| e.retry_after()), Some(Duration::from_secs(8)));
    assert_eq!(sim.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_above_max_wait_goes_to_the_candidates() {
    let sim = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(3600))]);
    let route = Route::builder("default")
        .target("p:m")
        .retry(quick_retry(2))
        .candidate(switchyard::route::Candidate::text("apology", "busy"));
    let router = router(&[("p", &sim)], route);

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.expect("the candidate answers at once");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Candidate]);
}

#[tokio::test(start_paused = true)]
async fn auth_error_is_never_retried_on_the_same_key_and_benches_it_for_a_minute() {
    let primary = SimulatedProvider::new()
        .script([Step::fail(ErrorKind::Auth), Step::Delay(Duration::from_secs(1), Box::new(Step::Reply))]);
    let secondary = SimulatedProvider::new();
    let router = Router::builder()
        .provider(keyed("a", &primary, &["sk-only-key-0001"]))
        .provider(keyed("b", &secondary, &[]))
        .route(Route::builder("default").target("a:m").target("b:m").retry(quick_retry(3)).build().unwrap())
        .build()
        .unwrap();

    let answer = router.chat(&request("default")).await.expect("fallback answers");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(primary.calls(), 1, "an auth failure is not retried with the same key");

    let a_key = router.credentials("a").unwrap()[0].id().clone();
    let health = router.health();
    let credential = health.credentials.iter().find(|c| c.credential_id == a_key).expect("recorded");
    assert_eq!(credential.status, HealthStatus::Unauthorized);

    let again = router.chat(&request("default")).await.unwrap();
    assert_eq!(again.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert_eq!(primary.calls(), 1, "a benched key is not used again while benched");

    // A minute on (a key fixed upstream, a provider's auth outage over), it is tried again, by
    // one call: another meanwhile goes to the fallback rather than try it too.
    tokio::time::advance(Duration::from_secs(60)).await;
    let (first, second) = (request("default"), request("default"));
    let (back, meanwhile) = tokio::join!(router.chat(&first), async {
        tokio::task::yield_now().await;
        router.chat(&second).await
    });
    let (back, meanwhile) = (back.unwrap(), meanwhile.unwrap());
    assert_eq!((back.served_by.to_string(), primary.calls()), ("a:m".to_owned(), 2));
    assert_eq!(meanwhile.served_by.to_string(), "b:m");
    let health = router.health();
    let credential = health.credentials.iter().find(|c| c.credential_id == a_key).expect("recorded");
    assert_eq!(credential.status, HealthStatus::Available);
}

#[tokio::test(start_paused = true)]
async fn auth_error_rotates_to_the_providers_next_credential() {
    let sim = SimulatedProvider::new().script([Step::fail(ErrorKind::Auth)]);
    let router = Router::builder()
        .provider(keyed("p", &sim, &["sk-first-key-0001", "sk-second-key-0002"]))
        .route(Route::builder("default").target("p:m").retry(quick_retry(1)).build().unwrap())
        .build()
        .unwrap();

    let answer = router.chat(&request("default")).await.expect("the second key answers");

    let attempts = answer.trail.attempts();
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Ok]);
    assert_ne!(attempts[0].credential_id, attempts[1].credential_id);
    let ids = router.credentials("p").unwrap();
    assert_eq!(attempts[0].credential_id.as_ref(), Some(ids[0].id()));
    assert_eq!(attempts[1].credential_id.as_ref(), Some(ids[1].id()));
}

#[tokio::test(start_paused = true)]
async fn invalid_request_is_neither_retried_nor_masked_by_fallback() {
    let primary = SimulatedProvider::new().script([Step::fail(ErrorKind::InvalidRequest)]);
    let secondary = SimulatedProvider::new();
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(3))
        .candidate(switchyard::route::Candidate::text("apology", "sorry"));
    let router = router(&[("a", &primary), ("b", &secondary)], route);

    let error = router.chat(&request("default")).await.expect_err("the request itself is wrong");

    assert!(matches!(error, RouteError::Upstream { .. }), "returned unchanged: {error:?}");
    assert_eq!(error.kind(), Some(ErrorKind::InvalidRequest));
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed]);
    assert_eq!((primary.calls(), secondary.calls()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn retry_on_override_retries_only_the_listed_kinds() {
    let sim = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("p:m")
        .retry(quick_retry(3))
        .retry_on(ErrorFilter::Kinds(vec![ErrorKind::RateLimited]));
    let router = router(&[("p", &sim)], route);

    let error = router.chat(&request("default")).await.expect_err("503 is not retried under this policy");
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed]);
    assert_eq!(sim.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_on_predicate_sees_the_error() {
    let sim = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("p:m")
        .retry(quick_retry(3))
        .retry_on(ErrorFilter::predicate(|e| e.status() == Some(503)));
    let router = router(&[("p", &sim)], route);

    let answer = router.chat(&request("default")).await.expect("retried on 503");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn request_deadline_stops_a_retry_that_would_outlive_it() {
    let sim = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(4))]);
    let timeouts = Timeouts { deadline: Some(Duration::from_secs(3)), ..Timeouts::default() };
    let route = Route::builder("default").target("p:m").retry(quick_retry(3)).timeouts(timeouts);
    let router = router(&[("p", &sim)], route);

    let start = Instant::now();
    let error = router.chat(&request("default")).await.expect_err("no time for the retry");
    assert_eq!(start.elapsed(), Duration::ZERO, "fails fast instead of waiting past the deadline");
    assert_eq!(error.kind(), Some(ErrorKind::RateLimited));
    let note = error.trail()[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("deadline"), "{note}");
}

#[tokio::test(start_paused = true)]
async fn total_timeout_ends_a_hanging_attempt_as_a_timeout() {
    let primary = SimulatedProvider::new().script([Step::Hang]);
    let secondary = SimulatedProvider::new();
    let timeouts = Timeouts { total: Duration::from_secs(7), ..Timeouts::default() };
    let route =
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).timeouts(timeouts);
    let router = router(&[("a", &primary), ("b", &secondary)], route);

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.expect("fallback answers");
    assert_eq!(start.elapsed(), Duration::from_secs(7));
    assert_eq!(answer.trail.attempts()[0].error_kind(), Some(ErrorKind::Timeout));
    assert_eq!(answer.trail.attempts()[0].duration, Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn no_fallback_tries_only_the_first_target_and_returns_its_error() {
    let primary = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
    let secondary = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(2));
    let router = router(&[("a", &primary), ("b", &secondary)], route);

    let options = RequestOptions { no_fallback: true, ..RequestOptions::default() };
    let error = router.chat_with(&request("default"), &options).await.expect_err("no fallback");

    assert!(matches!(error, RouteError::Upstream { .. }));
    assert_eq!(error.kind(), Some(ErrorKind::Unavailable));
    assert_eq!(outcomes_of(&error), vec![Outcome::Retried, Outcome::Failed]);
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn max_attempts_bounds_the_tries_of_one_target() {
    let sim = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 5));
    let retry = Retry { max_attempts: 3, ..quick_retry(3) };
    let router = router(&[("p", &sim)], Route::builder("default").target("p:m").retry(retry));

    let error = router.chat(&request("default")).await.expect_err("every try fails");
    assert!(matches!(error, RouteError::AllTargetsFailed { .. }));
    assert_eq!(outcomes_of(&error), vec![Outcome::Retried, Outcome::Retried, Outcome::Failed]);
    assert_eq!(sim.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_is_not_held_against_a_healthy_provider() {
    let slow =
        SimulatedProvider::new().latency(switchyard::simulated::Latency::Fixed(Duration::from_secs(2)));
    let route =
        Route::builder("default").target("p:m").retry(quick_retry(1)).health_ttl(Duration::from_secs(30));
    let settings = switchyard::health::HealthSettings { failure_threshold: 1, ..Default::default() };
    let router = router_with(&[("p", &slow)], route, settings);

    let impatient =
        RequestOptions { deadline: Some(Duration::from_millis(500)), ..RequestOptions::default() };
    let error = router.chat_with(&request("default"), &impatient).await.expect_err("2 s does not fit 500 ms");
    assert_eq!(error.kind(), Some(ErrorKind::Timeout));

    let health = router.target_health(&"p:m".parse().unwrap());
    assert_eq!(
        (health.status, health.breaker),
        (HealthStatus::Unknown, "closed"),
        "the provider did nothing wrong"
    );
    let patient = router.chat(&request("default")).await.expect("the next caller is not turned away");
    assert_eq!(patient.trail.outcomes(), vec![Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opening_mid_retry_returns_that_error_not_a_masked_fallback() {
    let sim = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Timeout), 3));
    let route = Route::builder("default")
        .target("p:m")
        .retry(quick_retry(3))
        .fallback_on(ErrorFilter::Kinds(vec![ErrorKind::Unavailable]))
        .candidate(switchyard::route::Candidate::text("apology", "busy"));
    let settings = switchyard::health::HealthSettings { failure_threshold: 2, ..Default::default() };
    let router = router_with(&[("p", &sim)], route, settings);

    let error = router.chat(&request("default")).await.expect_err("timeouts are outside fallback_on");
    assert!(matches!(error, RouteError::Upstream { .. }), "{error:?}");
    assert_eq!(error.kind(), Some(ErrorKind::Timeout));
    assert_eq!(
        outcomes_of(&error),
        vec![Outcome::Retried, Outcome::Failed],
        "the open circuit stopped the retries"
    );
    assert_eq!(sim.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_opens_the_circuit_goes_to_the_fallback_without_waiting_its_retry_after() {
    // 503 with Retry-After: 4 s, within max_wait: a retry would wait 4 s, for a circuit that
    // this very failure opened and that would refuse it.
    let busy = || {
        Step::Fail(
            switchyard::ProviderError::new(ErrorKind::Unavailable, "busy")
                .with_retry_after(Duration::from_secs(4)),
        )
    };
    let sim = SimulatedProvider::new().script(std::iter::repeat_n(busy(), 3));
    let backup = SimulatedProvider::new();
    let retry = Retry { max_wait: Duration::from_secs(5), ..quick_retry(3) };
    let route = Route::builder("default").target("p:m").target("backup:m").retry(retry);
    let settings = switchyard::health::HealthSettings { failure_threshold: 1, ..Default::default() };
    let router = router_with(&[("p", &sim), ("backup", &backup)], route, settings);

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(start.elapsed(), Duration::ZERO, "no Retry-After slept for a retry the circuit refuses");
    assert_eq!(sim.calls(), 1);
    let note = answer.trail.attempts()[0].note.clone().unwrap_or_default();
    assert!(note.contains("circuit opened"), "{note}");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opening_mid_retry_with_fallback_off_returns_the_error() {
    let sim = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Timeout), 3));
    let settings = switchyard::health::HealthSettings { failure_threshold: 2, ..Default::default() };
    let router = builder(&[("p", &sim)])
        .route(Route::builder("default").target("p:m").retry(quick_retry(3)).build().unwrap())
        .health(settings)
        .build()
        .unwrap();

    let options = RequestOptions { no_fallback: true, ..RequestOptions::default() };
    let error = router.chat_with(&request("default"), &options).await.expect_err("fails");
    assert!(matches!(error, RouteError::Upstream { .. }), "{error:?}");
    assert_eq!(error.kind(), Some(ErrorKind::Timeout));
}

#[tokio::test(start_paused = true)]
async fn a_key_echoed_by_any_provider_is_redacted_everywhere() {
    const KEY: &str = "sk-live-ECHOED-0123456789";
    let echo = switchyard::ProviderEntry::new("echo", Echo)
        .key(switchyard::credential::Secret::new(KEY))
        .secret(switchyard::credential::Secret::new(ECHO_PROXY_TOKEN));
    let router = Router::builder()
        .provider(echo)
        .route(Route::builder("default").target("echo:m").build().unwrap())
        .build()
        .unwrap();
    let mut events = router.subscribe();

    let error = router.chat(&request("default")).await.expect_err("fails");
    let texts = [
        format!("{error:?}"),
        error.to_string(),
        serde_json::to_string(&error.trail()).unwrap(),
        format!("{:?}", events.drain()),
        format!("{:?}", router.health()),
    ];
    for text in &texts {
        assert!(!text.contains("ECHOED"), "the key, or its excerpt, leaked: {text}");
        assert!(!text.contains("proxy-TOKEN"), "the provider's other secret leaked: {text}");
    }
    assert!(texts[0].contains("[redacted]"), "{}", texts[0]);
}

/// The credential ids the answers were served with, in order.
async fn keys_used(router: &switchyard::Router, n: usize) -> Vec<String> {
    let mut used = Vec::new();
    for _ in 0..n {
        let answer = router.chat(&request("default")).await.unwrap();
        let last = answer.trail.attempts().last().unwrap();
        used.push(last.credential_id.as_ref().unwrap().to_string());
    }
    used
}

fn keys_router(
    sim: &SimulatedProvider,
    keys: &[(&str, u32)],
    rotation: switchyard::KeyRotation,
) -> switchyard::Router {
    let entry = keys.iter().fold(switchyard::ProviderEntry::new("p", sim.clone()), |e, (k, priority)| {
        e.key_with_priority(switchyard::credential::Secret::new(*k), *priority)
    });
    switchyard::Router::builder()
        .provider(entry.key_rotation(rotation))
        .route(Route::builder("default").target("p:m").retry(quick_retry(2)).build().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn round_robin_keys_alternate_and_lower_priorities_stay_fallback() {
    let sim = SimulatedProvider::new();
    let router = keys_router(
        &sim,
        &[("sk-a-000", 0), ("sk-b-000", 0), ("sk-c-000", 1)],
        switchyard::KeyRotation::RoundRobin,
    );
    let ids = router.credentials("p").unwrap().iter().map(|c| c.id().to_string()).collect::<Vec<_>>();
    let used = keys_used(&router, 4).await;
    assert_eq!(used, [ids[0].clone(), ids[1].clone(), ids[0].clone(), ids[1].clone()]);
    // Ordered keys: the first takes everything.
    let ordered = keys_router(&sim, &[("sk-a-000", 0), ("sk-b-000", 0)], switchyard::KeyRotation::Ordered);
    let first = ordered.credentials("p").unwrap()[0].id().to_string();
    assert_eq!(keys_used(&ordered, 3).await, vec![first; 3]);
}

#[tokio::test(start_paused = true)]
async fn a_key_cooling_down_drops_out_of_the_rotation_until_it_recovers() {
    let sim = SimulatedProvider::new().script([Step::rate_limited(Duration::from_secs(3))]);
    let router = keys_router(&sim, &[("sk-a-000", 0), ("sk-b-000", 0)], switchyard::KeyRotation::RoundRobin);
    let ids = router.credentials("p").unwrap().iter().map(|c| c.id().to_string()).collect::<Vec<_>>();
    // The first call (key a) is rate limited: the request moves to key b at once (not after
    // a's Retry-After), and a rests for the rate-limit cooldown (5 s, above its Retry-After).
    let start = Instant::now();
    assert_eq!(keys_used(&router, 3).await, vec![ids[1].clone(); 3]);
    assert_eq!(start.elapsed(), Duration::ZERO);
    tokio::time::advance(Duration::from_secs(6)).await;
    let used = keys_used(&router, 4).await;
    assert_eq!(used.iter().filter(|id| **id == ids[0]).count(), 2, "a is back in the rotation: {used:?}");
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_goes_on_at_once_only_to_a_key_that_is_not_resting_itself() {
    let limited = || Step::rate_limited(Duration::from_secs(60));
    let sim = SimulatedProvider::new().script([limited(), Step::Text("ok".into()), limited()]);
    let router = keys_router(&sim, &[("sk-a-000", 0), ("sk-b-000", 0)], switchyard::KeyRotation::RoundRobin);
    // Key a is limited: b answers at once, and a rests for a minute.
    router.chat(&request("default")).await.unwrap();
    assert_eq!(sim.calls(), 2);
    tokio::time::advance(Duration::from_secs(10)).await;
    // Now b is limited too: a, still resting, is not asked within the wait the provider named.
    let error = router.chat(&request("default")).await.unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::RateLimited));
    assert_eq!(sim.calls(), 3, "no call to the resting key");
}

#[tokio::test(start_paused = true)]
async fn a_lower_priority_key_is_used_only_when_every_key_above_is_out() {
    let sim = SimulatedProvider::new()
        .script([Step::fail(ErrorKind::QuotaExceeded), Step::fail(ErrorKind::QuotaExceeded)]);
    let router = keys_router(
        &sim,
        &[("sk-a-000", 0), ("sk-b-000", 0), ("sk-c-000", 1)],
        switchyard::KeyRotation::RoundRobin,
    );
    let ids = router.credentials("p").unwrap().iter().map(|c| c.id().to_string()).collect::<Vec<_>>();
    // a and b run out of quota on the first request; c, the fallback, answers from then on.
    assert_eq!(keys_used(&router, 3).await, vec![ids[2].clone(); 3]);
}

#[tokio::test(start_paused = true)]
async fn a_single_call_makes_one_call_and_returns_its_failure_unretried_and_unrotated() {
    let a =
        SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::fail(ErrorKind::Auth)]);
    let b = SimulatedProvider::new();
    let hedged = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(3))
        .health_gate(false)
        .hedge(switchyard::route::Hedge::after(Duration::from_millis(1)))
        .candidate(switchyard::route::Candidate::text("apology", "sorry"));
    let router = builder(&[("b", &b)])
        .provider(keyed("a", &a, &["sk-first-key-0001", "sk-second-key-0002"]))
        .route(hedged.build().unwrap())
        .build()
        .unwrap();
    let once = RequestOptions { single_call: true, ..RequestOptions::default() };

    let error = router.chat_with(&request("default"), &once).await.expect_err("the one call fails");
    assert_eq!(a.calls(), 1, "no retry");
    assert_eq!(b.calls(), 0, "no fallback, no hedge");
    assert!(
        matches!(&error, RouteError::Upstream { error, .. } if error.kind() == ErrorKind::Unavailable),
        "{error:?}"
    );
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed]);

    let error = router.chat_with(&request("a:m"), &once).await.expect_err("an auth failure");
    assert_eq!(a.calls(), 2, "no other key");
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed]);
    assert_eq!(router.chat_with(&request("a:m"), &once).await.unwrap().served_by.to_string(), "a:m");
}
