//! Moving on: ordered fallback, the all-failed error, candidates, named targets, rotation.

use std::collections::HashMap;
use std::time::Duration;

use switchyard::chat::ChatResponse;
use switchyard::route::{Candidate, Rotation, Route};
use switchyard::simulated::{Latency, SimulatedProvider, Step};
use switchyard::trail::{Outcome, Via};
use switchyard::{ErrorKind, Price, ProviderEntry, RequestOptions, RouteError, Router};

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn unavailable_primary_falls_over_to_the_secondary_with_a_full_trail() {
    let primary = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
    let secondary = SimulatedProvider::new().reply("from b");
    let route = Route::builder("default").target("a:m1").target("b:m2").retry(quick_retry(2));
    let router = router(&[("a", &primary), ("b", &secondary)], route);

    let answer = router.chat(&request("default")).await.expect("secondary answers");

    assert_eq!(answer.response.text().as_deref(), Some("from b"));
    assert_eq!(answer.served_by.to_string(), "b:m2");
    assert_eq!(&*answer.route, "default");
    let trail = answer.trail.attempts();
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Failed, Outcome::Ok]);
    assert_eq!(trail[0].target().map(|t| t.as_str()), Some("a:m1"));
    assert_eq!(
        trail[0].error.as_ref().map(|e| (e.kind(), e.status())),
        Some((ErrorKind::Unavailable, Some(503)))
    );
    assert_eq!(trail[0].error.as_ref().and_then(|e| e.code()), Some("service_unavailable"));
    assert!(trail.iter().all(|a| a.credential_id.is_some()), "every call names its credential");
    assert!(trail[2].started >= trail[1].started && trail[1].started >= trail[0].started);
    assert_eq!(answer.usage.map(|u| u.prompt_tokens > 0), Some(true));
}

#[tokio::test(start_paused = true)]
async fn every_target_failing_returns_all_targets_failed_with_every_attempt() {
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
    let b = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Timeout), 2));
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(2));
    let router = router(&[("a", &a), ("b", &b)], route);
    let mut events = router.subscribe();

    let error = router.chat(&request("default")).await.expect_err("everything fails");

    let RouteError::AllTargetsFailed { trail, last, .. } = &error else {
        panic!("expected all-failed: {error:?}")
    };
    assert_eq!(trail.outcomes(), vec![Outcome::Retried, Outcome::Failed, Outcome::Retried, Outcome::Failed]);
    assert_eq!(last.as_ref().map(|e| e.kind()), Some(ErrorKind::Timeout));
    assert_eq!(last.as_ref().and_then(|e| e.target()).map(|t| t.as_str()), Some("b:m"));
    assert!(event_names(&mut events).contains(&"all_targets_failed"));
    assert!(error.to_string().contains("all targets failed after 4 calls; last: "), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_candidate_answers_after_every_target_failed() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("a:m")
        .retry(quick_retry(1))
        .candidate(Candidate::text("apology", "The assistant is busy."));
    let router = router(&[("a", &a)], route);
    let mut events = router.subscribe();

    let answer = router.chat(&request("default")).await.expect("the candidate answers");

    assert_eq!(answer.response.text().as_deref(), Some("The assistant is busy."));
    assert_eq!(answer.served_by, Via::Candidate("apology".into()));
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Candidate]);
    let names = event_names(&mut events);
    assert!(names.contains(&"candidate_started") && names.contains(&"candidate_succeeded"), "{names:?}");
}

#[tokio::test(start_paused = true)]
async fn a_candidate_rejected_by_validation_fails_and_the_next_one_runs() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let cache = Candidate::function("cache", |_| async { Ok(ChatResponse::from_text("cache", "")) })
        .validate(
            |r| if r.text().unwrap_or_default().is_empty() { Err("empty answer".into()) } else { Ok(()) },
        );
    let route = Route::builder("default")
        .target("a:m")
        .retry(quick_retry(1))
        .candidate(cache)
        .candidate(Candidate::text("apology", "sorry"));
    let router = router(&[("a", &a)], route);
    let mut events = router.subscribe();

    let answer = router.chat(&request("default")).await.expect("the second candidate answers");

    assert_eq!(answer.served_by, Via::Candidate("apology".into()));
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Failed, Outcome::Candidate]);
    let rejected =
        answer.trail.attempts()[1].error.as_ref().map(|e| e.detail().to_owned()).unwrap_or_default();
    assert!(rejected.contains("rejected by validation: empty answer"), "{rejected}");
    assert!(event_names(&mut events).contains(&"candidate_failed"));
}

#[tokio::test(start_paused = true)]
async fn candidates_never_mask_an_error_outside_fallback_on() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::ContextLength)]);
    let route = Route::builder("default").target("a:m").candidate(Candidate::text("apology", "sorry"));
    let router = router(&[("a", &a)], route);

    let error = router.chat(&request("default")).await.expect_err("context length is not masked");
    assert_eq!(error.kind(), Some(ErrorKind::ContextLength));
    assert_eq!(outcomes_of(&error), vec![Outcome::Failed]);
}

#[tokio::test(start_paused = true)]
async fn every_candidate_failing_returns_all_targets_failed() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let broken = Candidate::function("broken", |_| async { Err("cache is cold".to_owned()) });
    let router =
        router(&[("a", &a)], Route::builder("default").target("a:m").retry(quick_retry(1)).candidate(broken));

    let error = router.chat(&request("default")).await.expect_err("nothing answers");
    let RouteError::AllTargetsFailed { trail, last, .. } = &error else { panic!("{error:?}") };
    assert_eq!(trail.outcomes(), vec![Outcome::Failed, Outcome::Failed]);
    assert_eq!(last.as_ref().map(|e| e.kind()), Some(ErrorKind::Unavailable), "the last provider error");
}

#[tokio::test(start_paused = true)]
async fn a_named_target_keeps_the_default_routes_retry_policy() {
    let a = SimulatedProvider::new().script(std::iter::repeat_n(Step::fail(ErrorKind::Unavailable), 2));
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("b:m").retry(quick_retry(3));
    let router = router(&[("a", &a), ("b", &b)], route);

    let answer = router.chat(&request("a:some-model")).await.expect("third try answers");

    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Retried, Outcome::Ok]);
    assert_eq!(answer.served_by.to_string(), "a:some-model");
    assert_eq!(b.calls(), 0, "naming a target changes where the request goes");
}

#[tokio::test(start_paused = true)]
async fn a_named_target_does_not_inherit_special_chains_or_candidates() {
    let a = SimulatedProvider::new()
        .script([Step::fail(ErrorKind::ContextLength), Step::fail(ErrorKind::Unavailable)]);
    let big = SimulatedProvider::new();
    let route = Route::builder("default")
        .target("big:m")
        .context_window("big:m")
        .retry(quick_retry(1))
        .candidate(Candidate::text("apology", "sorry"));
    let router = router(&[("a", &a), ("big", &big)], route);

    let error = router.chat(&request("a:m")).await.expect_err("no context-window chain for named targets");
    assert_eq!(error.kind(), Some(ErrorKind::ContextLength));

    let error = router.chat(&request("a:m")).await.expect_err("no candidates for named targets");
    assert_eq!(error.kind(), Some(ErrorKind::Unavailable));
    assert_eq!(big.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_model_lists_the_routes_and_targets() {
    let a = SimulatedProvider::new();
    let router = router(&[("a", &a)], Route::builder("default").target("a:m"));

    for model in ["gpt-5", "nope:m"] {
        let error = router.chat(&request(model)).await.expect_err("unknown");
        let RouteError::UnknownModel { known, .. } = &error else { panic!("{error:?}") };
        assert_eq!(known, &vec!["default".to_owned(), "a:m".to_owned()]);
        assert!(error.to_string().contains(&format!("unknown model `{model}`")), "{error}");
    }
    assert_eq!(a.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_target_several_routes_share_is_listed_once_among_the_known_models() {
    let router = Router::builder()
        .provider(ProviderEntry::new("a", SimulatedProvider::new()))
        .provider(ProviderEntry::new("b", SimulatedProvider::new()))
        .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
        .route(Route::builder("fast").target("b:m").target("a:m").build().unwrap())
        .build()
        .unwrap();
    let error = router.chat(&request("gpt-5")).await.expect_err("unknown");
    let RouteError::UnknownModel { known, .. } = &error else { panic!("{error:?}") };
    assert_eq!(known, &["default", "fast", "a:m", "b:m"]);
}

#[tokio::test(start_paused = true)]
async fn round_robin_rotates_the_first_target_within_a_tier() {
    let (a, b, c) = (SimulatedProvider::new(), SimulatedProvider::new(), SimulatedProvider::new());
    let route = Route::builder("default")
        .tiered_target("a:m", 0, 1)
        .tiered_target("b:m", 0, 1)
        .tiered_target("c:m", 1, 1)
        .rotation(Rotation::RoundRobin);
    let router = router(&[("a", &a), ("b", &b), ("c", &c)], route);

    let mut served = Vec::new();
    for _ in 0..4 {
        served.push(router.chat(&request("default")).await.unwrap().served_by.to_string());
    }
    assert_eq!(served, ["a:m", "b:m", "a:m", "b:m"]);
    assert_eq!(c.calls(), 0, "a lower tier is pure fallback");
}

#[tokio::test(start_paused = true)]
async fn a_lower_tier_is_reached_only_when_the_tier_above_failed() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let c = SimulatedProvider::new();
    let route = Route::builder("default")
        .tiered_target("c:m", 1, 1)
        .tiered_target("a:m", 0, 1)
        .tiered_target("b:m", 0, 1)
        .retry(quick_retry(1));
    let router = router(&[("a", &a), ("b", &b), ("c", &c)], route);

    let answer = router.chat(&request("default")).await.unwrap();
    let order: Vec<String> = answer.trail.attempts().iter().map(|a| a.via.to_string()).collect();
    assert_eq!(order, ["a:m", "b:m", "c:m"]);
}

#[tokio::test(start_paused = true)]
async fn weighted_rotation_follows_the_weights() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let route = Route::builder("default")
        .tiered_target("a:m", 0, 3)
        .tiered_target("b:m", 0, 1)
        .rotation(Rotation::Weighted);
    let router = router(&[("a", &a), ("b", &b)], route);

    let mut counts: HashMap<String, u32> = HashMap::new();
    for _ in 0..1000 {
        *counts.entry(router.chat(&request("default")).await.unwrap().served_by.to_string()).or_default() +=
            1;
    }
    let a_share = counts["a:m"];
    assert!((700..=800).contains(&a_share), "about 75% to the weight-3 target, got {counts:?}");
}

#[tokio::test(start_paused = true)]
async fn least_latency_prefers_the_faster_target_and_still_probes_the_slower_one() {
    let slow = SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(400)));
    let fast = SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(50)));
    let route = Route::builder("default").target("slow:m").target("fast:m").rotation(Rotation::LeastLatency);
    let router = router(&[("slow", &slow), ("fast", &fast)], route);
    // Neither is measured yet: each is tried (the configured order breaks the tie), then the
    // faster one takes the traffic.
    for _ in 0..2 {
        router.chat(&request("default")).await.unwrap();
    }
    assert_eq!((slow.calls(), fast.calls()), (1, 1));
    for _ in 0..400 {
        router.chat(&request("default")).await.unwrap();
    }
    let explored = slow.calls() - 1;
    assert!(fast.calls() > 350, "fast {}", fast.calls());
    assert!((5..=40).contains(&explored), "about one in twenty probes the slower target: {explored}");
    let latency = router.latency(&"fast:m".parse().unwrap()).unwrap();
    assert!(
        latency.p50 >= Duration::from_millis(47) && latency.p50 <= Duration::from_millis(53),
        "{latency:?}"
    );
    let slow_latency = router.latency(&"slow:m".parse().unwrap()).unwrap();
    assert!(slow_latency.p99 >= Duration::from_millis(380), "{slow_latency:?}");
}

#[tokio::test(start_paused = true)]
async fn a_target_that_fails_slowly_counts_as_slow_and_one_that_is_rate_limited_does_not_count() {
    let hanging = SimulatedProvider::new()
        .latency(Latency::Fixed(Duration::from_secs(2)))
        .script([Step::fail(ErrorKind::Timeout)]);
    let limited = SimulatedProvider::new().script([Step::fail(ErrorKind::RateLimited)]);
    let route = Route::builder("default").target("hanging:m").target("limited:m").retry(quick_retry(1));
    let router = router(&[("hanging", &hanging), ("limited", &limited)], route);
    let _ = router.chat(&request("default")).await;
    let hanging_latency = router.latency(&"hanging:m".parse().unwrap()).unwrap();
    assert!(hanging_latency.p50 >= Duration::from_millis(1900), "{hanging_latency:?}");
    assert_eq!(router.latency(&"limited:m".parse().unwrap()), None);
}

#[tokio::test(start_paused = true)]
async fn cheapest_orders_by_price_with_unpriced_targets_last_and_ties_by_latency() {
    let down = || SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let (dear, cheap, unpriced) = (down(), down(), down());
    let cheap_slow = down().latency(Latency::Fixed(Duration::from_millis(300)));
    let price = |input, output| Price { input_per_million: input, output_per_million: output };
    let router = Router::builder()
        .provider(ProviderEntry::new("dear", dear.clone()).price("m", price(10.0, 30.0)))
        .provider(ProviderEntry::new("cheap", cheap.clone()).price("m", price(0.5, 1.5)))
        .provider(ProviderEntry::new("unpriced", unpriced.clone()))
        .provider(ProviderEntry::new("cheapslow", cheap_slow.clone()).price("m", price(1.0, 1.0)))
        .route(
            Route::builder("default")
                .target("unpriced:m")
                .target("dear:m")
                .target("cheapslow:m")
                .target("cheap:m")
                .rotation(Rotation::Cheapest)
                .retry(quick_retry(1))
                .health_gate(false)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    // Everything fails once: the trail is the chain. The two that cost 2 per million, not yet
    // measured, keep their configured order; the unpriced target comes last.
    let RouteError::AllTargetsFailed { trail, .. } = router.chat(&request("default")).await.unwrap_err()
    else {
        panic!("every target fails")
    };
    let order: Vec<String> = trail.attempts().iter().map(|a| a.via.to_string()).collect();
    assert_eq!(order, ["cheapslow:m", "cheap:m", "dear:m", "unpriced:m"]);
    // Measured now, the faster of the two equally cheap targets comes first.
    assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "cheap:m");
}

#[tokio::test(start_paused = true)]
async fn a_cache_candidate_serves_the_last_good_answer_streamed_or_not_when_every_target_fails() {
    use futures_util::StreamExt;
    use switchyard::answer_cache::AnswerCacheSettings;
    let sim = SimulatedProvider::new().reply("the good answer").stream(3, Duration::from_millis(5));
    let route = Route::builder("default").target("p:m").retry(quick_retry(1)).health_gate(false).candidate(
        Candidate::cache(
            "last-good",
            AnswerCacheSettings { max_age: Duration::from_secs(60), ..Default::default() },
        ),
    );
    let router = router(&[("p", &sim)], route);
    let scoped = |scope: &str| RequestOptions { cache_scope: scope.to_owned(), ..RequestOptions::default() };
    // Streamed while the provider is up: the whole answer is remembered at the end.
    let mut stream = router.chat_stream(&request("default"), &scoped("alice")).await.unwrap();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
    }
    sim.push_steps([
        Step::fail(ErrorKind::Unavailable),
        Step::fail(ErrorKind::Unavailable),
        Step::fail(ErrorKind::Unavailable),
    ]);
    let answer = router.chat_with(&request("default"), &scoped("alice")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("the good answer"));
    assert_eq!(answer.served_by.to_string(), "candidate last-good");
    let last = answer.trail.attempts().last().unwrap();
    assert_eq!(last.age, Some(Duration::ZERO));
    // Another scope was never told it; a request that opts out is not answered from it.
    assert!(router.chat_with(&request("default"), &scoped("bob")).await.is_err());
    let opted_out = RequestOptions { no_cache: true, ..scoped("alice") };
    sim.push_steps([Step::fail(ErrorKind::Unavailable)]);
    assert!(router.chat_with(&request("default"), &opted_out).await.is_err());
    // Too old is no answer.
    tokio::time::advance(Duration::from_secs(61)).await;
    sim.push_steps([Step::fail(ErrorKind::Unavailable)]);
    assert!(router.chat_with(&request("default"), &scoped("alice")).await.is_err());
}
