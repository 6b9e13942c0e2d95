//! Client-side pacing under paused time: bucket shapes, reservations, provider headers,
//! deadlines, cancellation, fairness, spill-over.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use switchyard::credential::CredentialId;
use switchyard::events::{EventKind, WaitReason};
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard::ratelimit::RateLimits;
use switchyard::route::{Retry, Route};
use switchyard::simulated::SimulatedProvider;
use switchyard::time::parse_rfc3339;
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, RequestOptions, Router};
use switchyard_pacing::{LimitPacer, Limits};
use tokio::time::Instant;

use crate::support::*;

fn key() -> CredentialId {
    CredentialId::derive("test", "", None)
}

fn pacer(limits: Limits) -> LimitPacer {
    LimitPacer::new([("p".to_owned(), limits)])
}

fn ask(tokens: u32, deadline: Option<Instant>) -> PaceRequest<'static> {
    // Leaked once per test call: a tiny, bounded leak that keeps the requests 'static.
    let key: &'static CredentialId = Box::leak(Box::new(key()));
    PaceRequest { provider: "p", credential_id: key, estimated_tokens: tokens, deadline, spill_after: None }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Dispatch offsets of `n` calls made at once.
async fn dispatch_times(pacer: &LimitPacer, n: usize, tokens: u32) -> Vec<Duration> {
    let start = Instant::now();
    let calls = (0..n).map(|_| async {
        let permit = pacer.acquire(ask(tokens, None)).await.unwrap();
        let at = start.elapsed();
        drop(permit);
        at
    });
    join_all(calls).await
}

#[tokio::test(start_paused = true)]
async fn requests_per_minute_allow_a_burst_of_one_seconds_share_then_pace_evenly() {
    let pacer = pacer(Limits { requests_per_minute: Some(600), ..Limits::default() });
    let times = dispatch_times(&pacer, 14, 0).await;
    let mut expected = vec![Duration::ZERO; 10];
    expected.extend([ms(100), ms(200), ms(300), ms(400)]);
    assert_eq!(times, expected);
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_reserve_the_estimate_and_the_answer_corrects_it() {
    let pacer = pacer(Limits { tokens_per_minute: Some(6000), ..Limits::default() }); // 100 a second
    let start = Instant::now();
    let mut first = pacer.acquire(ask(100, None)).await.unwrap();
    first.settle(Some(20)); // the answer used far less than reserved: 80 come back
    let second = pacer.acquire(ask(80, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO, "the correction made room at once");
    drop(second);
    pacer.acquire(ask(50, None)).await.unwrap();
    assert_eq!(start.elapsed(), ms(500), "then the bucket refills at 100 tokens a second");
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_refunds_its_token_reservation() {
    let pacer = pacer(Limits { tokens_per_minute: Some(6000), ..Limits::default() });
    let start = Instant::now();
    let mut failed = pacer.acquire(ask(100, None)).await.unwrap();
    failed.settle(None);
    pacer.acquire(ask(100, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_request_larger_than_the_burst_waits_for_a_full_bucket_not_forever() {
    let pacer = pacer(Limits { tokens_per_minute: Some(6000), ..Limits::default() });
    let times = dispatch_times(&pacer, 2, 250).await;
    // The first goes on a full bucket and leaves a debt of 150; the second waits for the
    // bucket to be full again: 250 tokens at 100 a second.
    assert_eq!(times, vec![Duration::ZERO, ms(2500)]);
}

#[tokio::test(start_paused = true)]
async fn min_interval_spaces_dispatches() {
    let pacer = pacer(Limits { min_interval: ms(250), ..Limits::default() });
    assert_eq!(dispatch_times(&pacer, 4, 0).await, vec![ms(0), ms(250), ms(500), ms(750)]);
}

#[tokio::test(start_paused = true)]
async fn openai_reset_durations_hold_requests_until_the_window_resets() {
    let pacer = pacer(Limits { requests_per_minute: Some(6000), ..Limits::default() });
    let headers = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "1.5s")];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));

    let start = Instant::now();
    let permit = pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), ms(1500));
    assert_eq!(permit.reason, Some(WaitReason::ProviderHeaders));
}

#[tokio::test(start_paused = true)]
async fn anthropic_reset_instants_hold_requests_until_then() {
    let pacer = pacer(Limits { max_concurrent: Some(4), ..Limits::default() });
    let now = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let headers = [
        ("anthropic-ratelimit-tokens-limit", "80000"),
        ("anthropic-ratelimit-tokens-remaining", "0"),
        ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:03Z"),
    ];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, now));

    let start = Instant::now();
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn header_waits_are_clamped_to_max_header_wait() {
    let pacer = pacer(Limits {
        max_concurrent: Some(1),
        max_header_wait: Duration::from_secs(20),
        ..Limits::default()
    });
    let headers = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "6m0s")];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));

    let start = Instant::now();
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(20));
}

#[tokio::test(start_paused = true)]
async fn headers_are_ignored_when_respect_headers_is_off() {
    let pacer = pacer(Limits { max_concurrent: Some(1), respect_headers: false, ..Limits::default() });
    let headers = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "30s")];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));
    let start = Instant::now();
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn reserve_fraction_leaves_part_of_the_stated_allowance_untouched() {
    let pacer = pacer(Limits { max_concurrent: Some(4), reserve_fraction: 0.1, ..Limits::default() });
    let headers = [
        ("x-ratelimit-limit-requests", "100"),
        ("x-ratelimit-remaining-requests", "10"),
        ("x-ratelimit-reset-requests", "2s"),
    ];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));
    let start = Instant::now();
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2), "10 left of 100 is the 10% kept for others");

    // The configured rate is reduced by the same share: 600 a minute keeps 540, 9 a second.
    let paced = LimitPacer::new([(
        "p".to_owned(),
        Limits { requests_per_minute: Some(600), reserve_fraction: 0.1, ..Limits::default() },
    )]);
    let times = dispatch_times(&paced, 10, 0).await;
    assert_eq!(times[8], Duration::ZERO);
    assert!(times[9] > Duration::from_millis(100) && times[9] < Duration::from_millis(120), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_deadline_fails_fast_naming_the_limit() {
    let pacer = pacer(Limits { requests_per_minute: Some(60), ..Limits::default() }); // 1 a second
    pacer.acquire(ask(0, None)).await.unwrap();

    let start = Instant::now();
    let error = pacer.acquire(ask(0, Some(start + ms(500)))).await.expect_err("no slot before the deadline");
    assert_eq!(start.elapsed(), Duration::ZERO, "fails at once instead of waiting and timing out");
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert!(error.detail().contains("requests_per_minute 60"), "{}", error.detail());
    assert!(error.detail().contains("deadline"), "{}", error.detail());

    // The refused call took nothing: the next one still gets the slot one second in.
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_gives_back_its_reservation() {
    let pacer = pacer(Limits { requests_per_minute: Some(60), ..Limits::default() });
    pacer.acquire(ask(0, None)).await.unwrap();
    let start = Instant::now();

    // This caller gives up while queued for the slot at 1 s.
    let cancelled = tokio::time::timeout(ms(100), pacer.acquire(ask(0, None))).await;
    assert!(cancelled.is_err());

    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1), "the slot at 1 s went to the next caller, not 2 s");
}

#[tokio::test(start_paused = true)]
async fn waiters_for_a_concurrency_slot_are_served_in_arrival_order() {
    let pacer = Arc::new(pacer(Limits { max_concurrent: Some(1), ..Limits::default() }));
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = pacer.acquire(ask(0, None)).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..5 {
        let (pacer, order) = (pacer.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = pacer.acquire(ask(0, None)).await.unwrap();
            order.lock().unwrap().push(n);
            tokio::time::sleep(ms(10)).await;
            drop(permit);
        }));
        tokio::task::yield_now().await; // arrive one after the other
    }
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

fn paced_router(limits: Limits, route: Route, providers: &[(&str, &SimulatedProvider)]) -> Router {
    let pacer = LimitPacer::new([("a".to_owned(), limits)]);
    builder(providers).route(route).pacer(Arc::new(pacer)).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_stream_holds_its_concurrency_slot_until_it_ends() {
    let a = SimulatedProvider::new().reply("abcdefgh").stream(4, ms(250)); // chunks at 0, 250, 500, 750 ms
    let route = Route::builder("default").target("a:m").build().unwrap();
    let router = paced_router(Limits { max_concurrent: Some(1), ..Limits::default() }, route, &[("a", &a)]);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let start = Instant::now();
    let short = request("default");
    let (_, second) = tokio::join!(
        async {
            use futures_util::StreamExt;
            while stream.next().await.is_some() {}
        },
        router.chat(&short)
    );
    let second = second.unwrap();
    assert_eq!(second.timing.queued, ms(750), "the short request waited for the stream to end");
    assert_eq!(start.elapsed(), ms(750));
}

#[tokio::test(start_paused = true)]
async fn a_paced_wait_is_reported_in_the_trail_timing_and_events() {
    let a = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").build().unwrap();
    let router =
        paced_router(Limits { requests_per_minute: Some(60), ..Limits::default() }, route, &[("a", &a)]);
    let mut events = router.subscribe();

    router.chat(&request("default")).await.unwrap();
    let second = router.chat(&request("default")).await.unwrap();

    assert_eq!(second.timing.queued, Duration::from_secs(1));
    assert_eq!(second.trail.attempts()[0].queued, Duration::from_secs(1));
    let waited: Vec<(Duration, WaitReason)> = events
        .drain()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RateLimitWaited { waited, reason, .. } => Some((*waited, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(waited, vec![(Duration::from_secs(1), WaitReason::Rpm)]);
}

#[tokio::test(start_paused = true)]
async fn the_request_deadline_counts_queue_time() {
    let a = SimulatedProvider::new();
    let route = Route::builder("default")
        .target("a:m")
        .timeouts(switchyard::route::Timeouts { deadline: Some(ms(500)), ..Default::default() })
        .build()
        .unwrap();
    let router =
        paced_router(Limits { requests_per_minute: Some(60), ..Limits::default() }, route, &[("a", &a)]);

    router.chat(&request("default")).await.unwrap();
    let start = Instant::now();
    let error =
        router.chat(&request("default")).await.expect_err("a 1 s wait does not fit a 500 ms deadline");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(error.kind(), Some(ErrorKind::RateLimited));
    assert_eq!(a.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn spill_over_sends_a_long_paced_wait_to_the_next_target() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let retry = Retry { max_wait: ms(500), ..Retry::default() };
    let spill =
        Route::builder("default").target("a:m").target("b:m").retry(retry).spill_over(true).build().unwrap();
    let router = paced_router(
        Limits { requests_per_minute: Some(60), ..Limits::default() },
        spill,
        &[("a", &a), ("b", &b)],
    );

    router.chat(&request("default")).await.unwrap();
    let start = Instant::now();
    let spilled = router.chat(&request("default")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(spilled.served_by.to_string(), "b:m");
    assert_eq!(spilled.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(spilled.trail.attempts()[0].error.as_ref().and_then(|e| e.code()), Some("paced"));
    let sent: Vec<bool> = spilled.trail.attempts().iter().map(|a| a.sent()).collect();
    assert_eq!(sent, [false, true], "the paced call was never sent");
}

#[tokio::test(start_paused = true)]
async fn without_spill_over_pacing_waits_instead_of_rerouting() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let retry = Retry { max_wait: ms(500), ..Retry::default() };
    let route = Route::builder("default").target("a:m").target("b:m").retry(retry).build().unwrap();
    let router = paced_router(
        Limits { requests_per_minute: Some(60), ..Limits::default() },
        route,
        &[("a", &a), ("b", &b)],
    );

    router.chat(&request("default")).await.unwrap();
    let second = router.chat(&request("default")).await.unwrap();
    assert_eq!(second.served_by.to_string(), "a:m");
    assert_eq!(b.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_router_without_limits_has_no_pacer() {
    let a = SimulatedProvider::new();
    let router = router(&[("a", &a)], Route::builder("default").target("a:m"));
    assert!(!router.is_paced());
    assert!(router.pacing().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_hold_learned_while_a_call_waits_for_its_slot_still_applies() {
    let pacer = Arc::new(pacer(Limits { requests_per_minute: Some(60), ..Limits::default() }));
    pacer.acquire(ask(0, None)).await.unwrap();
    let start = Instant::now();
    let waiting = {
        let pacer = pacer.clone();
        tokio::spawn(async move {
            let permit = pacer.acquire(ask(0, None)).await.unwrap();
            (start.elapsed(), permit.reason)
        })
    };
    tokio::time::sleep(ms(500)).await;
    let headers = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "2s")];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));

    let (at, reason) = waiting.await.unwrap();
    assert_eq!(at, ms(2500), "its slot at 1 s fell inside the hold until 2.5 s");
    assert_eq!(reason, Some(WaitReason::ProviderHeaders));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_token_waiter_gives_back_its_place_in_the_queue_too() {
    let pacer = pacer(Limits { tokens_per_minute: Some(6000), ..Limits::default() }); // 100 a second
    pacer.acquire(ask(100, None)).await.unwrap(); // spends the bucket
    let start = Instant::now();
    // A large waiter queues for 1 s, then gives up after 100 ms.
    assert!(tokio::time::timeout(ms(100), pacer.acquire(ask(100, None))).await.is_err());
    tokio::time::sleep(ms(400)).await;
    // At 500 ms the bucket holds 50 tokens: a 10-token call goes at once, not at 1 s.
    let permit = pacer.acquire(ask(10, None)).await.unwrap();
    assert_eq!(start.elapsed(), ms(500));
    assert_eq!(permit.reason, None);
}

// ---- The provider's stated allowance as a budget (respect_headers, no numeric limit) ----

/// A lane paced by headers only: `limits: { respect_headers: true }`.
fn headers_only() -> Arc<LimitPacer> {
    Arc::new(pacer(Limits::default()))
}

fn requests(limit: Option<u64>, remaining: u64, reset: &str) -> RateLimits {
    let limit = limit.map(|l| l.to_string());
    let mut headers = vec![("x-ratelimit-remaining-requests", remaining.to_string())];
    headers.push(("x-ratelimit-reset-requests", reset.to_owned()));
    if let Some(limit) = limit {
        headers.push(("x-ratelimit-limit-requests", limit));
    }
    RateLimits::from_headers(headers.iter().map(|(n, v)| (*n, v.as_str())), SystemTime::now())
}

/// Starts `n` callers at once; each holds its permit (an answer not back yet) until the test
/// lets go. Returns the permits as they are granted, with their dispatch offsets.
fn callers(
    pacer: &Arc<LimitPacer>,
    n: usize,
    tokens: u32,
) -> tokio::sync::mpsc::UnboundedReceiver<(Duration, switchyard::pacing::Permit)> {
    let (granted, permits) = tokio::sync::mpsc::unbounded_channel();
    let start = Instant::now();
    for _ in 0..n {
        let pacer = pacer.clone();
        let granted = granted.clone();
        tokio::spawn(async move {
            let permit = pacer.acquire(ask(tokens, None)).await.unwrap();
            let _ = granted.send((start.elapsed(), permit));
        });
    }
    permits
}

/// The permits granted so far, without waiting for more.
async fn granted_now(
    permits: &mut tokio::sync::mpsc::UnboundedReceiver<(Duration, switchyard::pacing::Permit)>,
) -> Vec<(Duration, switchyard::pacing::Permit)> {
    // Let every runnable task run, without letting paused time advance.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    while let Ok(permit) = permits.try_recv() {
        out.push(permit);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_stated_allowance_is_a_budget_that_counts_calls_still_in_flight() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(5), 3, "1s"));
    let mut permits = callers(&pacer, 5, 0);
    let first = granted_now(&mut permits).await;
    assert_eq!(first.len(), 3, "3 were left: the 3 in flight spend them, answered or not");
    assert!(first.iter().all(|(at, p)| at.is_zero() && p.reason.is_none()));

    // The rest wait for the reset, then go: the stated limit of 5 covers them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rest = granted_now(&mut permits).await;
    assert_eq!(rest.len(), 2);
    assert!(
        rest.iter()
            .all(|(at, p)| *at == Duration::from_secs(1) && p.reason == Some(WaitReason::ProviderHeaders))
    );
    let snapshot = &pacer.snapshot()[0];
    assert_eq!(snapshot.in_flight, 5, "counted without max_concurrent");
    // The new window's 5, less the 3 still in flight, less the 2 that went: none left.
    assert_eq!(snapshot.headers.requests.as_ref().map(|r| (r.limit, r.remaining)), Some((Some(5), 0)));
}

#[tokio::test(start_paused = true)]
async fn after_a_reset_at_most_the_known_limit_goes_before_new_headers_arrive() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(3), 0, "1s"));
    let mut permits = callers(&pacer, 8, 0);
    assert!(granted_now(&mut permits).await.is_empty(), "held at zero");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let window = granted_now(&mut permits).await;
    assert_eq!(window.len(), 3, "the limit, and no more, before any answer");

    // Much later, still no answer: nobody else goes.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(granted_now(&mut permits).await.is_empty());

    // The first answer says the new window is spent until 2 s from now: the rest wait for it.
    pacer.observe_answer("p", &key(), window[0].1.dispatch, &requests(Some(3), 0, "2s"));
    drop(window); // the other two answered without headers
    tokio::time::sleep(Duration::from_millis(1999)).await;
    assert!(granted_now(&mut permits).await.is_empty());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(granted_now(&mut permits).await.len(), 3, "then the next window's limit");
}

#[tokio::test(start_paused = true)]
async fn with_no_known_limit_one_probe_goes_after_the_reset_and_its_headers_release_the_rest() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(None, 0, "1s"));
    let mut permits = callers(&pacer, 5, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let probe = granted_now(&mut permits).await;
    assert_eq!(probe.len(), 1, "one probe first");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(granted_now(&mut permits).await.is_empty(), "the rest wait for its headers");

    pacer.observe_answer("p", &key(), probe[0].1.dispatch, &requests(None, 10, "1s"));
    assert_eq!(granted_now(&mut permits).await.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_answer_has_no_allowance_headers_releases_the_rest() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(None, 0, "1s"));
    let mut permits = callers(&pacer, 5, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut probe = granted_now(&mut permits).await;
    assert_eq!(probe.len(), 1);
    // Answered without rate-limit headers: nothing more will come for this window.
    probe[0].1.settle(Some(10));
    let rest = granted_now(&mut permits).await;
    assert_eq!(rest.len(), 4);
    assert!(rest.iter().all(|(at, _)| *at == Duration::from_secs(1)), "at once, not at some later time");
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_fails_releases_the_rest() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(None, 0, "1s"));
    let mut permits = callers(&pacer, 3, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut probe = granted_now(&mut permits).await;
    probe[0].1.settle(None);
    drop(probe);
    assert_eq!(granted_now(&mut permits).await.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn within_a_window_no_answer_raises_the_budget_whatever_order_answers_arrive_in() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(10), 3, "10s"));
    let mut permits = callers(&pacer, 3, 0);
    let sent = granted_now(&mut permits).await;
    assert_eq!(sent.len(), 3);
    // The third call's answer says none are left ...
    pacer.observe_answer("p", &key(), sent[2].1.dispatch, &requests(Some(10), 0, "10s"));
    // ... then the first call's answer says 2 were left when it was counted: stale.
    pacer.observe_answer("p", &key(), sent[0].1.dispatch, &requests(Some(10), 2, "10s"));
    let mut later = callers(&pacer, 1, 0);
    assert!(granted_now(&mut later).await.is_empty(), "an older answer did not raise the budget");
    // Nor does the answer of a call sent later but counted earlier (calls sent together reach
    // the provider in any order).
    pacer.observe_answer("p", &key(), sent[1].1.dispatch, &requests(Some(10), 1, "10s"));
    assert!(granted_now(&mut later).await.is_empty(), "a newer call's stale answer did not either");
    assert_eq!(pacer.snapshot()[0].headers.requests.as_ref().map(|r| r.remaining), Some(0));
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_read_less_every_call_still_in_flight() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(10), 0, "1s"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A new window of 10, and the lane has not heard of it yet: four calls go; the first
    // one's answer says 9 are left. The other three may not have reached the provider when it
    // counted: 6 remain for new callers.
    let mut permits = callers(&pacer, 4, 0);
    let sent = granted_now(&mut permits).await;
    assert_eq!(sent.len(), 4);
    pacer.observe_answer("p", &key(), sent[0].1.dispatch, &requests(Some(10), 9, "1s"));
    let mut more = callers(&pacer, 8, 0);
    assert_eq!(granted_now(&mut more).await.len(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_token_budget_counts_each_calls_estimate() {
    let pacer = headers_only();
    let headers = [
        ("x-ratelimit-limit-tokens", "1000"),
        ("x-ratelimit-remaining-tokens", "300"),
        ("x-ratelimit-reset-tokens", "1s"),
    ];
    pacer.observe("p", &key(), &RateLimits::from_headers(headers, SystemTime::now()));
    let mut permits = callers(&pacer, 5, 100);
    assert_eq!(granted_now(&mut permits).await.len(), 3, "300 tokens, 100 a call");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(granted_now(&mut permits).await.len(), 2);
    assert_eq!(pacer.snapshot()[0].headers.tokens.as_ref().map(|t| t.remaining), Some(800));
}

#[tokio::test(start_paused = true)]
async fn the_reserve_share_of_a_stated_budget_is_left_untouched() {
    let pacer = Arc::new(pacer(Limits { reserve_fraction: 0.2, ..Limits::default() }));
    pacer.observe("p", &key(), &requests(Some(10), 5, "1s"));
    let mut permits = callers(&pacer, 6, 0);
    assert_eq!(granted_now(&mut permits).await.len(), 3, "5 left, 2 of them kept for others");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(granted_now(&mut permits).await.len(), 3, "then the window's 8 of 10");
}

#[tokio::test(start_paused = true)]
async fn a_429s_retry_after_holds_every_caller_of_the_lane() {
    let pacer = headers_only();
    let first = pacer.acquire(ask(0, None)).await.unwrap();
    let mut before = callers(&pacer, 2, 0);
    assert_eq!(granted_now(&mut before).await.len(), 2, "calls before the 429 went");
    // One call's 429 says to retry after 2 s, with the window far from spent.
    let limited = [("retry-after", "2"), ("x-ratelimit-remaining-requests", "5")];
    pacer.observe_answer("p", &key(), first.dispatch, &RateLimits::from_headers(limited, SystemTime::now()));
    let mut later = callers(&pacer, 3, 0);
    assert!(granted_now(&mut later).await.is_empty(), "every caller of the lane is held, not just the one");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let released = granted_now(&mut later).await;
    assert_eq!(released.len(), 3);
    assert!(
        released
            .iter()
            .all(|(at, p)| *at == Duration::from_secs(2) && p.reason == Some(WaitReason::ProviderHeaders))
    );
}

#[tokio::test(start_paused = true)]
async fn a_stated_reset_is_clamped_to_max_header_wait() {
    let pacer = Arc::new(pacer(Limits { max_header_wait: Duration::from_secs(5), ..Limits::default() }));
    pacer.observe("p", &key(), &requests(Some(10), 0, "1h"));
    let start = Instant::now();
    pacer.acquire(ask(0, None)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn waiters_for_the_header_budget_go_in_arrival_order() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(1), 0, "1s"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let pacer = pacer.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let permit = pacer.acquire(ask(0, None)).await.unwrap();
            order.lock().unwrap().push(i);
            // Answered at once: each window of 1 refills a second later.
            let headers = requests(Some(1), 0, "1s");
            pacer.observe_answer("p", &key(), permit.dispatch, &headers);
        }));
        tokio::task::yield_now().await;
    }
    join_all(tasks).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_header_wait_past_the_deadline_fails_fast() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(10), 0, "5s"));
    let start = Instant::now();
    let error = pacer.acquire(ask(0, Some(start + Duration::from_secs(1)))).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert!(error.to_string().contains("rate-limit headers"), "{error}");
    assert_eq!(start.elapsed(), Duration::ZERO, "it did not wait to find out");
}

#[tokio::test(start_paused = true)]
async fn an_answer_without_allowance_headers_is_no_longer_in_flight() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(10), 0, "1s"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The new window's 10: a call goes and is answered without rate-limit headers, its permit
    // still held (a stream still running).
    let first = pacer.acquire(ask(0, None)).await.unwrap();
    pacer.observe_answer("p", &key(), first.dispatch, &RateLimits::default());
    // The next answer says 9 are left: nothing else is in flight, so 9 may go.
    let second = pacer.acquire(ask(0, None)).await.unwrap();
    pacer.observe_answer("p", &key(), second.dispatch, &requests(Some(10), 9, "1s"));
    let mut more = callers(&pacer, 12, 0);
    assert_eq!(granted_now(&mut more).await.len(), 9, "the answered call was not counted again");
    drop((first, second));
}

#[tokio::test(start_paused = true)]
async fn a_spill_over_certain_to_come_is_refused_at_once_not_after_queueing() {
    let pacer = headers_only();
    pacer.observe("p", &key(), &requests(Some(10), 0, "10s"));
    // One caller waits for the reset at the gate, with all the patience in the world.
    let _waiting = callers(&pacer, 1, 0);
    tokio::task::yield_now().await;
    // Another would spill over after 1 s: the reset is 10 s away, so it is refused now.
    let key: &'static CredentialId = Box::leak(Box::new(key()));
    let hurried = PaceRequest {
        provider: "p",
        credential_id: key,
        estimated_tokens: 0,
        deadline: None,
        spill_after: Some(Duration::from_secs(1)),
    };
    let start = Instant::now();
    let error = pacer.acquire(hurried).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(error.to_string().contains("spilling over"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_call_the_provider_refused_gives_the_calls_waiting_behind_it_their_tokens_at_once() {
    // 6,000 tokens a minute; two calls that may write 1,000 each. The first is refused with a
    // 500 after 100 ms: it generated nothing, so the second goes then, not 10 s on.
    let a = SimulatedProvider::new().script([
        switchyard::simulated::Step::Delay(
            ms(100),
            Box::new(switchyard::simulated::Step::fail(ErrorKind::Unavailable)),
        ),
        switchyard::simulated::Step::Reply,
    ]);
    let route = Route::builder("default").target("a:m").retry(quick_retry(1)).build().unwrap();
    let router =
        paced_router(Limits { tokens_per_minute: Some(6000), ..Limits::default() }, route, &[("a", &a)]);
    let asking = || {
        let mut request = request("default");
        request.max_tokens = Some(1000);
        request
    };
    let (first, second) = (asking(), asking());
    let start = Instant::now();
    let (refused, answered) = tokio::join!(router.chat(&first), async {
        tokio::task::yield_now().await;
        let answer = router.chat(&second).await;
        (answer, start.elapsed())
    });
    assert!(refused.is_err());
    let (answer, at) = answered;
    answer.unwrap();
    assert!(at < Duration::from_secs(1), "went once the refusal gave its tokens back: {at:?}");
}
