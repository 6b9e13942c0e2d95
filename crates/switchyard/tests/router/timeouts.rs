//! Time and silence: a target that says nothing is not waited on again while another could
//! answer, and a request's deadline leaves the targets after the first their share.

use std::time::Duration;

use switchyard::route::{Route, Timeouts};
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, RequestOptions, Router};
use tokio::time::Instant;

use crate::support::*;

/// `silent:m`, which accepts every call and never answers, then a healthy `ok:m`; three tries
/// per target, with `timeouts`.
fn silent_then_ok(timeouts: Timeouts) -> (Router, SimulatedProvider, SimulatedProvider) {
    let silent = SimulatedProvider::new().script(std::iter::repeat_n(Step::Hang, 10));
    let ok = SimulatedProvider::new();
    let route =
        Route::builder("default").target("silent:m").target("ok:m").retry(quick_retry(3)).timeouts(timeouts);
    (router(&[("silent", &silent), ("ok", &ok)], route), silent, ok)
}

#[tokio::test(start_paused = true)]
async fn a_stream_silent_past_its_first_byte_wait_goes_to_the_next_target_at_once() {
    let timeouts = Timeouts { first_byte: Duration::from_secs(15), ..Timeouts::default() };
    let (router, silent, ok) = silent_then_ok(timeouts);

    let start = Instant::now();
    let stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();

    assert_eq!(start.elapsed(), Duration::from_secs(15), "one first-byte wait, not three");
    assert_eq!(stream.served_by().to_string(), "ok:m");
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    let first = &stream.trail().attempts()[0];
    assert_eq!(
        (first.target().unwrap().as_str(), first.error_kind()),
        ("silent:m", Some(ErrorKind::Timeout))
    );
    assert!(first.error.as_ref().is_some_and(|e| e.is_silence()), "{first:?}");
    assert!(first.note.as_deref().unwrap_or_default().contains("not asked again"), "{first:?}");
    assert_eq!((silent.calls(), ok.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_call_unanswered_within_its_limit_goes_to_the_next_target_at_once() {
    let timeouts = Timeouts { total: Duration::from_secs(15), ..Timeouts::default() };
    let (router, silent, _) = silent_then_ok(timeouts);

    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();

    assert_eq!(start.elapsed(), Duration::from_secs(15));
    assert_eq!(answer.served_by.to_string(), "ok:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(silent.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_last_target_is_still_retried() {
    let silent = SimulatedProvider::new().script([Step::Hang, Step::Reply]);
    let timeouts = Timeouts { first_byte: Duration::from_secs(15), ..Timeouts::default() };
    let route = Route::builder("default").target("silent:m").retry(quick_retry(3)).timeouts(timeouts);
    let router = router(&[("silent", &silent)], route);

    let stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();

    assert_eq!(stream.trail().outcomes(), vec![Outcome::Retried, Outcome::Ok]);
    assert_eq!(silent.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_leaves_the_fallback_its_share_when_the_first_target_is_silent() {
    let timeouts = Timeouts {
        first_byte: Duration::from_secs(30),
        deadline: Some(Duration::from_secs(10)),
        ..Timeouts::default()
    };
    let (router, silent, ok) = silent_then_ok(timeouts);

    let start = Instant::now();
    let stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();

    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "half of the 10 s deadline, with one target after it"
    );
    assert_eq!(stream.served_by().to_string(), "ok:m");
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    let first = stream.trail().attempts()[0].error.clone().unwrap();
    assert!(first.is_silence() && first.detail().contains("share of the request deadline"), "{first:?}");
    assert_eq!((silent.calls(), ok.calls()), (1, 1));
    let health = router.target_health(&"silent:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 0, "a wait the deadline shortened is not held against it");
}

#[tokio::test(start_paused = true)]
async fn a_callers_timeout_is_the_deadline_of_an_answer_given_whole_and_of_a_streams_first_chunk() {
    // An SDK that gives up after 8 s: the silent first target gets half, the fallback answers.
    let patient = |secs| RequestOptions {
        caller_timeout: Some(Duration::from_secs(secs)),
        ..RequestOptions::default()
    };
    let timeouts = Timeouts { first_byte: Duration::from_secs(30), ..Timeouts::default() };
    let (router, silent, ok) = silent_then_ok(timeouts);
    let start = Instant::now();
    let answer = router.chat_with(&request("default"), &patient(8)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(4), "half of the caller's 8 s");
    assert_eq!(answer.served_by.to_string(), "ok:m");
    assert_eq!((silent.calls(), ok.calls()), (1, 1));

    // The route's deadline, when sooner, stands.
    let sooner = Timeouts { deadline: Some(Duration::from_secs(6)), ..timeouts };
    let (router, _, _) = silent_then_ok(sooner);
    let start = Instant::now();
    router.chat_with(&request("default"), &patient(8)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3), "half of the route's 6 s");

    // A stream's caller waits that long for its first chunk (the response's head): the silent
    // first target gets half of it too. Once it answers, the stream runs past it: the caller's
    // timeout then bounds each gap, not the stream.
    let silent = SimulatedProvider::new().script(std::iter::repeat_n(Step::Hang, 10));
    let slow =
        SimulatedProvider::new().reply("one two three four five six").stream(6, Duration::from_secs(3));
    let route = Route::builder("default")
        .target("silent:m")
        .target("slow:m")
        .retry(quick_retry(3))
        .timeouts(timeouts);
    let streams = crate::support::router(&[("silent", &silent), ("slow", &slow)], route);
    let start = Instant::now();
    let mut stream = streams.chat_stream(&request("default"), &patient(8)).await.unwrap();
    assert!(start.elapsed() <= Duration::from_secs(8), "{:?}", start.elapsed());
    assert_eq!(stream.served_by().to_string(), "slow:m");
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, "one two three four five six");
    assert!(start.elapsed() > Duration::from_secs(12), "the stream was not cut at the caller's 8 s");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_gives_up_may_ask_again_a_route_whose_deadline_passed_says_not_to() {
    // Both targets silent: the request ends at its deadline either way. A route's deadline
    // would meet the same end again; a caller's own timeout is its own choice, and its SDK
    // asks again as it would have on its own timeout.
    let silent = || SimulatedProvider::new().script(std::iter::repeat_n(Step::Hang, 10));
    let route = || Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1));
    let ended = |route: switchyard::route::RouteBuilder, options: RequestOptions| async move {
        let (a, b) = (silent(), silent());
        let router = router(&[("a", &a), ("b", &b)], route);
        let switchyard::RouteError::AllTargetsFailed { trail, .. } =
            router.chat_with(&request("default"), &options).await.unwrap_err()
        else {
            panic!("every target is silent")
        };
        trail
    };
    let patient =
        RequestOptions { caller_timeout: Some(Duration::from_secs(4)), ..RequestOptions::default() };
    let trail = ended(route(), patient).await;
    let last = trail.attempts().last().unwrap().note.clone();
    assert_eq!(last.as_deref(), Some(switchyard::trail::CALLER_TIMEOUT_PASSED));
    assert!(!trail.out_of_time());

    let timeouts = Timeouts { deadline: Some(Duration::from_secs(4)), ..Timeouts::default() };
    let trail = ended(route().timeouts(timeouts), RequestOptions::default()).await;
    assert!(trail.out_of_time(), "{trail:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_leaves_the_fallback_its_share_of_a_call_answered_whole() {
    let options = RequestOptions { deadline: Some(Duration::from_secs(9)), ..RequestOptions::default() };
    let silent = SimulatedProvider::new().script([Step::Hang]);
    let slow = SimulatedProvider::new().script([Step::Hang]);
    let ok = SimulatedProvider::new();
    let route = Route::builder("default").target("silent:m").target("slow:m").target("ok:m");
    let router = router(&[("silent", &silent), ("slow", &slow), ("ok", &ok)], route);

    let start = Instant::now();
    let answer = router.chat_with(&request("default"), &options).await.unwrap();

    // A third of 9 s, then half of the 6 s left.
    assert_eq!(start.elapsed(), Duration::from_secs(6));
    assert_eq!(answer.served_by.to_string(), "ok:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Failed, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_count_unanswered_within_the_first_byte_wait_goes_to_the_next_target_at_once() {
    let timeouts = Timeouts { first_byte: Duration::from_secs(5), ..Timeouts::default() };
    let (router, silent, ok) = silent_then_ok(timeouts);

    let start = Instant::now();
    let answer = router.count_tokens(&request("default"), &RequestOptions::default()).await.unwrap();

    assert_eq!(start.elapsed(), Duration::from_secs(5), "a count waits first_byte, not total");
    assert!(answer.count.input_tokens > 0);
    assert_eq!(answer.served_by.to_string(), "ok:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert!(answer.trail.attempts()[0].error.as_ref().is_some_and(|e| e.is_silence()));
    assert_eq!((silent.calls(), ok.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_the_requests_error_when_the_target_after_it_was_only_skipped() {
    let silent = SimulatedProvider::new().script([Step::Hang]);
    let cannot = SimulatedProvider::new().script([Step::Fail(switchyard::ProviderError::unsupported(
        "this request cannot be written in its API",
    ))]);
    let route = Route::builder("default")
        .target("silent:m")
        .target("cannot:m")
        .retry(quick_retry(1))
        .timeouts(Timeouts { total: Duration::from_secs(5), ..Timeouts::default() });
    let router = router(&[("silent", &silent), ("cannot", &cannot)], route);

    let error = router.chat(&request("default")).await.unwrap_err();

    let outcomes: Vec<Outcome> = error.trail().iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [Outcome::Failed, Outcome::SkippedUnsupported]);
    assert_eq!(error.kind(), Some(ErrorKind::Timeout), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_shares_only_the_first_byte_wait_of_a_whole_answer_asked_as_a_stream() {
    // Twenty pieces 200 ms apart: over 3 s to the end, the first at once. With a 6 s deadline and
    // one target after it, its first-byte wait is 3 s: the answer that shows life at once is
    // not cut at 3 s as silent.
    let options = RequestOptions { deadline: Some(Duration::from_secs(6)), ..RequestOptions::default() };
    let words = (1..=20).map(|n| format!("w{n} ")).collect::<String>();
    let slow =
        SimulatedProvider::new().reply(words).streams_upstream(true).stream(20, Duration::from_millis(200));
    let ok = SimulatedProvider::new().streams_upstream(true);
    let route = Route::builder("default").target("slow:m").target("ok:m");
    let router = router(&[("slow", &slow), ("ok", &ok)], route);

    let start = Instant::now();
    let answer = router.chat_with(&request("default"), &options).await.unwrap();

    assert!(start.elapsed() > Duration::from_secs(3), "{:?}", start.elapsed());
    assert_eq!(answer.served_by.to_string(), "slow:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Ok]);

    // A silent one is still cut at its share, and the next answers within the deadline.
    let silent = SimulatedProvider::new().streams_upstream(true).script([Step::Hang]);
    let route = Route::builder("default").target("silent:m").target("ok:m");
    let second = crate::support::router(&[("silent", &silent), ("ok", &ok)], route);
    let start = Instant::now();
    let answer = second.chat_with(&request("default"), &options).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(answer.served_by.to_string(), "ok:m");
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_asked_as_a_stream_that_outlasts_its_total_is_its_timeout_not_the_deadlines_share() {
    // The share (6 s of a 12 s deadline) shortens only the first-byte wait; the answer begins at
    // once and runs past its 4 s total: the provider's timeout, not a cut of the router's.
    let options = RequestOptions { deadline: Some(Duration::from_secs(12)), ..RequestOptions::default() };
    let words = (1..=20).map(|n| format!("w{n} ")).collect::<String>();
    let slow =
        SimulatedProvider::new().reply(words).streams_upstream(true).stream(20, Duration::from_millis(500));
    let ok = SimulatedProvider::new().streams_upstream(true);
    let timeouts = Timeouts { total: Duration::from_secs(4), ..Timeouts::default() };
    let route =
        Route::builder("default").target("slow:m").target("ok:m").retry(quick_retry(1)).timeouts(timeouts);
    let router = router(&[("slow", &slow), ("ok", &ok)], route);

    let answer = router.chat_with(&request("default"), &options).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "ok:m");
    let first = &answer.trail.attempts()[0];
    let error = first.error.as_ref().unwrap();
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert!(error.detail().contains("total timeout of 4s"), "not the share's cut: {error:?}");
}

#[tokio::test(start_paused = true)]
async fn an_attempt_answered_whole_waits_whole_not_a_streams_total() {
    // Embeddings say nothing until their end: a silent provider is left after `whole` (120 s by
    // default), not the 600 s a long stream may take.
    let silent = SimulatedProvider::new().script([Step::Hang]);
    let ok = SimulatedProvider::new();
    let route = Route::builder("default").target("silent:e").target("ok:e");
    let router = router(&[("silent", &silent), ("ok", &ok)], route);
    let request = switchyard::chat::EmbeddingsRequest {
        model: "default".into(),
        input: switchyard::chat::EmbeddingInput::One("a".into()),
        dimensions: None,
        extra: Default::default(),
    };
    let start = Instant::now();
    let answer = router.embeddings(&request, &RequestOptions::default()).await.unwrap();
    assert_eq!(start.elapsed(), Timeouts::default().whole);
    assert_eq!(Timeouts::default().whole, Duration::from_secs(120));
    assert_eq!(answer.served_by.to_string(), "ok:e");
}
