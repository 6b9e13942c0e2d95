//! A non-streamed chat sent upstream as a stream and put back together (the route's
//! `stream_upstream`, on by default, for a provider across a network): the stream's limits
//! guard it, and a break before its end is retried or failed over whole.

use std::sync::Arc;
use std::time::Duration;

use switchyard::route::{Route, Timeouts};
use switchyard::simulated::{Latency, SimulatedProvider, Step};
use switchyard::trail::Outcome;
use tokio::time::Instant;

use crate::support::*;

/// A provider across a network: it answers a whole chat through its stream.
fn remote() -> SimulatedProvider {
    SimulatedProvider::new()
        .streams_upstream(true)
        .reply("a whole answer in pieces")
        .stream(5, Duration::ZERO)
}

fn limits(first_byte: u64, idle: u64) -> Timeouts {
    Timeouts {
        first_byte: Duration::from_secs(first_byte),
        idle: Duration::from_secs(idle),
        total: Duration::from_secs(120),
        whole: Duration::from_secs(120),
        deadline: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_asked_as_a_stream_is_the_whole_answer() {
    let primary = remote();
    let router = router(&[("p", &primary)], Route::builder("default").target("p:m"));
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert!(answer.usage.is_some(), "the stream's usage");
    assert_eq!(primary.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_target_of_a_whole_request_is_left_at_the_first_byte_limit_not_the_total() {
    let silent = remote().latency(Latency::Fixed(Duration::from_secs(600)));
    let backup = remote();
    let route = Route::builder("default")
        .target("silent:m")
        .target("backup:m")
        .retry(quick_retry(1))
        .timeouts(limits(5, 30));
    let router = router(&[("silent", &silent), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(start.elapsed(), Duration::from_secs(5), "the first-byte limit, not the 120 s total");
    assert_eq!(answer.trail.attempts()[0].error_kind(), Some(switchyard::ErrorKind::Timeout));
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_breaks_or_stalls_is_retried_whole() {
    for step in [Step::CutAfter(2), Step::StallAfter(2)] {
        let flaky = remote().script([step.clone()]);
        let route = Route::builder("default").target("p:m").retry(quick_retry(2)).timeouts(limits(5, 3));
        let router = router(&[("p", &flaky)], route);
        let answer = router.chat(&request("default")).await.unwrap();
        assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"), "{step:?}");
        assert_eq!(answer.trail.outcomes(), [Outcome::Retried, Outcome::Ok], "{step:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_stalls_goes_to_the_next_target_after_one_idle_wait() {
    let stalling = remote().stream(5, Duration::from_secs(1)).script([Step::StallAfter(2)]);
    let backup = remote();
    let route = Route::builder("default")
        .target("p:m")
        .target("backup:m")
        .retry(quick_retry(3))
        .timeouts(limits(5, 30));
    let router = router(&[("p", &stalling), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(stalling.calls(), 1, "three tries, but a stall is not retried while backup remains");
    // Two pieces a second apart, then 30 s of nothing: one idle wait, not three.
    assert!(start.elapsed() < Duration::from_secs(40), "{:?}", start.elapsed());
    assert!(
        answer.trail.attempts()[0].note.as_deref().is_some_and(|n| n.contains("stalled")),
        "{:?}",
        answer.trail
    );
}

#[tokio::test(start_paused = true)]
async fn a_stall_within_a_deadline_leaves_the_next_target_its_share() {
    let stalling = remote().stream(5, Duration::from_secs(1)).script([Step::StallAfter(2)]);
    let backup = remote();
    let mut timeouts = limits(30, 30);
    timeouts.deadline = Some(Duration::from_secs(10));
    let route =
        Route::builder("default").target("p:m").target("backup:m").retry(quick_retry(3)).timeouts(timeouts);
    let router = router(&[("p", &stalling), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    // Its idle wait is the deadline's share (5 s of 10, the backup after it), not 30 s.
    assert!(start.elapsed() <= Duration::from_secs(8), "{:?}", start.elapsed());
    let stalled = answer.trail.attempts()[0].error.clone().unwrap();
    assert!(stalled.is_stall() && stalled.detail().contains("share of the request deadline"), "{stalled:?}");
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_stalls_and_pings_fails_over_at_the_idle_limit() {
    let pinging = remote().stream(5, Duration::from_secs(1)).script([Step::PingAfter(2)]);
    let backup = remote();
    let route = Route::builder("default")
        .target("p:m")
        .target("backup:m")
        .retry(quick_retry(1))
        .timeouts(limits(5, 4));
    let router = router(&[("p", &pinging), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    // Two pieces a second apart, then 4 s of pings: the idle limit from the last content.
    assert_eq!(start.elapsed(), Duration::from_secs(5), "not held for the 120 s total");
    let failed = &answer.trail.attempts()[0];
    assert!(failed.error.as_ref().unwrap().detail().contains("idle"), "{failed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_ends_after_its_role_alone_is_no_answer() {
    let empty = remote().script([Step::RoleOnly]);
    let backup = remote();
    let route = Route::builder("default").target("p:m").target("backup:m").retry(quick_retry(1));
    let router = router(&[("p", &empty), ("backup", &backup)], route);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    let failed = &answer.trail.attempts()[0];
    assert_eq!(failed.error_kind(), Some(switchyard::ErrorKind::MalformedResponse), "{failed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_is_held_open_or_cut_after_its_finish_is_answered() {
    // Held open after the finish: answered a second later, not at the 30 s idle limit; cut
    // after it: answered at once, not retried.
    let cases = [
        (Step::StallAfterFinish, switchyard::AFTER_FINISH, "without its terminator"),
        (Step::CutAfterFinish, Duration::ZERO, "broke after its finish, before its terminator: simulated"),
    ];
    for (step, ends_at, said) in cases {
        let held = remote().script([step.clone()]);
        let route = Route::builder("default").target("p:m").retry(quick_retry(2)).timeouts(limits(5, 30));
        let router = router(&[("p", &held)], route);
        let start = Instant::now();
        let answer = router.chat(&request("default")).await.unwrap();
        assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"), "{step:?}");
        assert!(answer.usage.is_some(), "{step:?}: the usage that came before the end");
        assert_eq!(start.elapsed(), ends_at, "{step:?}");
        assert_eq!((held.calls(), answer.trail.outcomes()), (1, vec![Outcome::Ok]), "{step:?}");
        let note = answer.trail.attempts()[0].note.clone().unwrap_or_default();
        assert!(note.contains(said), "{step:?}: {note}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_held_open_up_to_the_attempts_limit_is_the_answer_not_a_silence() {
    // The finish comes at 8 s, half a second before the attempt's 8.5 s limit; the stream is
    // then held open: the answer is whole at the limit, not cut by it and asked again.
    let held = remote().stream(5, Duration::from_secs(2)).script([Step::StallAfterFinish]);
    let timeouts = Timeouts { total: Duration::from_millis(8500), ..limits(5, 30) };
    let route = Route::builder("default").target("p:m").retry(quick_retry(2)).timeouts(timeouts);
    let router = router(&[("p", &held)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert_eq!((start.elapsed(), held.calls()), (Duration::from_millis(8500), 1));
    assert_eq!(answer.trail.outcomes(), [Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn an_empty_whole_answer_held_open_after_its_finish_is_the_answer_not_a_silence() {
    let empty = remote().script([Step::EmptyThenStall]);
    let backup = remote();
    let route = Route::builder("default").target("a:m").target("b:m").timeouts(limits(5, 30));
    let router = router(&[("a", &empty), ("b", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:m");
    assert_eq!(answer.response.choices[0].finish_reason, Some(switchyard::chat::FinishReason::Stop));
    assert_eq!((start.elapsed(), backup.calls()), (switchyard::AFTER_FINISH, 0));
}

#[tokio::test(start_paused = true)]
async fn an_empty_whole_answer_that_then_breaks_is_asked_again() {
    let flaky = remote().script([Step::EmptyThenCut]);
    let route = Route::builder("default").target("p:m").retry(quick_retry(2)).timeouts(limits(5, 30));
    let router = router(&[("p", &flaky)], route);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert_eq!((flaky.calls(), answer.trail.outcomes()), (2, vec![Outcome::Retried, Outcome::Ok]));
}

#[tokio::test(start_paused = true)]
async fn a_route_that_does_not_stream_upstream_asks_for_the_whole_answer() {
    let slow = remote().latency(Latency::Fixed(Duration::from_secs(10)));
    let route = Route::builder("default").target("p:m").timeouts(limits(5, 5)).stream_upstream(false);
    let router = router(&[("p", &slow)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert_eq!(start.elapsed(), Duration::from_secs(10), "only the total limit guards a whole call");
}

#[tokio::test(start_paused = true)]
async fn a_target_silent_to_a_whole_request_is_not_asked_again_while_another_remains() {
    let silent = remote().latency(Latency::Fixed(Duration::from_secs(600)));
    let backup = remote();
    let route = Route::builder("default")
        .target("silent:m")
        .target("backup:m")
        .retry(quick_retry(3))
        .timeouts(limits(5, 30));
    let router = router(&[("silent", &silent), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(silent.calls(), 1, "three tries, but silence is not retried while backup remains");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn what_the_stream_of_a_whole_answer_said_short_of_failing_is_on_its_attempt() {
    use switchyard::chat::{ChatChunk, FinishReason, StreamNotice};
    let router = Scripted(vec![
        Ok(ChatChunk::text("whole")),
        Ok(ChatChunk::notice(StreamNotice::Skipped("not JSON".into()))),
        Ok(ChatChunk::notice(StreamNotice::Unterminated)),
        Ok(ChatChunk::finish(FinishReason::Stop)),
    ])
    .router();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("whole"));
    let attempt = &answer.trail.attempts()[0];
    assert_eq!((attempt.outcome, attempt.skipped_events), (Outcome::Ok, 1));
    let note = attempt.note.as_deref().unwrap_or_default();
    assert!(note.contains("skipped: not JSON") && note.contains("without its terminator"), "{note}");
}

/// A route of a provider whose stream calls `get_weather` with `arguments`, finished with
/// `finish`, then a simulated provider that answers in words.
fn broken_call_then_words(
    arguments: &str,
    finish: switchyard::chat::FinishReason,
) -> (switchyard::Router, SimulatedProvider) {
    use switchyard::chat::ChatChunk;
    let call: ChatChunk = serde_json::from_value(serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    ]}}]}))
    .unwrap();
    let words = SimulatedProvider::new().reply("in words");
    let router = switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new(
            "p",
            Scripted(vec![Ok(call), Ok(ChatChunk::finish(finish))]),
        ))
        .provider(switchyard::ProviderEntry::new("s", words.clone()))
        .route(Route::builder("default").target("p:m").target("s:m").retry(quick_retry(1)).build().unwrap())
        .build()
        .unwrap();
    (router, words)
}

#[tokio::test(start_paused = true)]
async fn a_tool_input_an_anthropic_client_cannot_be_written_is_a_malformed_answer_and_the_next_target_answers()
 {
    use switchyard::chat::{Dialect, FinishReason};
    let mut anthropic = request("default");
    anthropic.origin = Dialect::Anthropic;
    let (router, words) = broken_call_then_words(r#"{"city": "Par"#, FinishReason::ToolCalls);
    let answer = router.chat(&anthropic).await.unwrap();
    assert_eq!((answer.served_by.to_string(), words.calls()), ("s:m".to_owned(), 1));
    let failed = &answer.trail.attempts()[0];
    assert_eq!(failed.error_kind(), Some(switchyard::ErrorKind::MalformedResponse));
    assert!(failed.error.as_ref().unwrap().detail().contains("`get_weather`"), "{failed:?}");

    // An OpenAI client takes the arguments as a string, as the provider wrote them.
    let (router, words) = broken_call_then_words(r#"{"city": "Par"#, FinishReason::ToolCalls);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!((answer.served_by.to_string(), words.calls()), ("p:m".to_owned(), 0));
    // A call its length limit cut stands: the client reads the limit.
    let (router, words) = broken_call_then_words(r#"{"city": "Par"#, FinishReason::Length);
    let answer = router.chat(&anthropic).await.unwrap();
    assert_eq!((answer.served_by.to_string(), words.calls()), ("p:m".to_owned(), 0));
    assert_eq!(answer.response.choices[0].message.tool_calls[0].function.arguments, r#"{"city": "Par"#);
}

/// A provider across a network that refuses to stream (an Azure api-version without
/// `stream_options`, an organisation OpenAI has not verified to stream a model) and answers
/// whole; it counts the streams it was asked.
#[derive(Clone)]
struct Unstreamed(Arc<std::sync::atomic::AtomicUsize>, &'static str);

impl Default for Unstreamed {
    fn default() -> Self {
        Self(Arc::default(), "Unrecognized request argument supplied: stream_options")
    }
}

impl switchyard::provider::Provider for Unstreamed {
    fn kind(&self) -> &str {
        "unstreamed"
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        Box::pin(async { Ok(switchyard::chat::ChatResponse::from_text("m", "whole")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        let refusal = self.1;
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            Err(switchyard::ProviderError::new(switchyard::ErrorKind::InvalidRequest, refusal)
                .with_status(400))
        })
    }
}

/// A router whose one route goes to `unstreamed` alone.
fn alone(unstreamed: &Unstreamed) -> switchyard::Router {
    switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new("p", unstreamed.clone()))
        .route(Route::builder("default").target("p:m").build().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_a_provider_refuses_to_stream_is_asked_of_it_whole_and_whole_at_once_for_an_hour() {
    let unstreamed = Unstreamed::default();
    let router = alone(&unstreamed);
    let streams = || unstreamed.0.load(std::sync::atomic::Ordering::SeqCst);
    let answer = router.chat(&request("default")).await.expect("answered whole");
    assert_eq!(answer.response.text().as_deref(), Some("whole"));
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Ok]);
    let note = answer.trail.attempts()[0].note.clone().unwrap_or_default();
    assert!(note.contains("refused to stream the answer: asked whole"), "one attempt, two calls: {note}");
    assert_eq!(streams(), 1);
    // The refusal is remembered: the next requests are asked whole at once.
    for _ in 0..3 {
        assert_eq!(router.chat(&request("default")).await.unwrap().response.text().as_deref(), Some("whole"));
    }
    assert_eq!(streams(), 1, "not refused again on every request");
    tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    router.chat(&request("default")).await.unwrap();
    assert_eq!(streams(), 2, "after an hour it is asked as a stream again");

    // A refusal that may be this request's alone is not remembered.
    let once = Unstreamed(Arc::default(), "'stream' is not allowed with these parameters");
    let router = alone(&once);
    for _ in 0..2 {
        router.chat(&request("default")).await.unwrap();
    }
    assert_eq!(once.0.load(std::sync::atomic::Ordering::SeqCst), 2, "asked as a stream each time");
}

#[tokio::test(start_paused = true)]
async fn a_stream_a_provider_refuses_is_asked_of_it_whole_and_replayed_whole_at_once_for_an_hour() {
    // The client asked for a stream; the target streams nothing ("Streaming is not supported"):
    // its whole answer, replayed as the stream, rather than a 400 for what the client did not
    // choose (how the answer travels is the gateway's business).
    let unstreamed = Unstreamed(Arc::default(), "Streaming is not supported for this model");
    let router = alone(&unstreamed);
    let streams = || unstreamed.0.load(std::sync::atomic::Ordering::SeqCst);
    let mut streamed = request("default");
    streamed.stream = true;
    for _ in 0..3 {
        let stream = router.chat_stream(&streamed, &Default::default()).await.expect("replayed");
        let chunks: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(stream).await;
        let text: String = chunks
            .iter()
            .filter_map(|chunk| chunk.as_ref().ok())
            .filter_map(|chunk| chunk.choices.first()?.delta.content.clone())
            .collect();
        assert_eq!(text, "whole");
    }
    assert_eq!(streams(), 1, "refused once, then asked whole at once");
}

#[tokio::test(start_paused = true)]
async fn a_whole_answers_refusal_does_not_keep_a_clients_stream_from_streaming() {
    // Refused for the `stream_options` a whole answer's stream asks for: whole answers are
    // asked whole from then on, but a client's stream is still tried as a stream (the adapter
    // sends it without them).
    let unstreamed = Unstreamed::default();
    let router = alone(&unstreamed);
    let streams = || unstreamed.0.load(std::sync::atomic::Ordering::SeqCst);
    router.chat(&request("default")).await.unwrap();
    assert_eq!(streams(), 1);
    let mut streamed = request("default");
    streamed.stream = true;
    router.chat_stream(&streamed, &Default::default()).await.expect("replayed");
    assert_eq!(streams(), 2, "the client's stream was tried as one");
}
