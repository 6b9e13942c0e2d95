//! Continuation: a stream broken after the caller saw text is finished by another target, and
//! the caller receives one whole answer, or the original break.

use std::time::Duration;

use futures_util::StreamExt;
use switchyard::chat::{
    ChatChunk, ChatRequest, ChunkChoice, Delta, FinishReason, ReasoningShown, ResponseFormat,
};
use switchyard::health::HealthStatus;
use switchyard::route::{Route, Timeouts};
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderEntry, RequestOptions, RoutedStream, StreamError};
use tokio::time::Instant;

use crate::support::*;

const ANSWER: &str = "one two three four five six";

/// A primary that streams `ANSWER` in six pieces and does `step` first.
fn breaking(step: Step) -> SimulatedProvider {
    SimulatedProvider::new().reply(ANSWER).stream(6, Duration::from_millis(10)).script([step])
}

fn two_targets(a: &SimulatedProvider, b: &SimulatedProvider) -> switchyard::Router {
    router(&[("a", a), ("b", b)], Route::builder("default").target("a:m").target("b:m"))
}

fn outcomes(stream: &RoutedStream) -> Vec<(Outcome, bool)> {
    stream.trail().attempts().iter().map(|a| (a.outcome, a.mid_stream)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_its_first_text_is_finished_by_a_target_that_takes_a_prefill() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let router = two_targets(&a, &b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, ANSWER, "the text already sent, then only what follows it");
    assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)]);
    let attempts = stream.trail().attempts();
    assert_eq!(attempts[0].error.as_ref().map(|e| e.kind()), Some(ErrorKind::Transport));
    assert!(attempts[1].usage.is_some(), "the continuing attempt's usage is on its record");
    assert_eq!(stream.usage(), attempts[1].usage);
    // What the broken call delivered (its usage never came: estimated) is the caller's answer
    // too, apart from the continuing call's.
    let broken = stream.broken_call().expect("the broken call, for its bill");
    assert_eq!(broken.target.to_string(), "a:m");
    assert!(broken.usage.completion_tokens > 0 && broken.usage.prompt_tokens > 0, "{broken:?}");
    assert_eq!(attempts[0].usage, Some(broken.usage), "its record says what it delivered");
    assert_eq!(stream.served_by().to_string(), "b:m");
    let health = router.target_health(&"a:m".parse().unwrap());
    assert_eq!(health.status, HealthStatus::TemporarilyUnavailable, "the break still counts against a");
}

#[tokio::test(start_paused = true)]
async fn the_caller_is_told_its_whole_answers_usage_after_a_prefilled_continuation() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let router = two_targets(&a, &b);
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut told = None;
    while let Some(item) = stream.next().await {
        if let Some(usage) = item.unwrap().usage {
            told = Some(usage);
        }
    }
    let told = told.expect("a usage chunk");
    let own = stream.usage().expect("the continuing call's usage");
    let before = stream.broken_call().expect("the broken call").usage.completion_tokens;
    assert!(before > 0);
    // Each call is billed its own; the caller's answer holds both calls' words.
    assert_eq!(told.completion_tokens, own.completion_tokens + before, "{told:?} {own:?}");
    assert_eq!(told.total_tokens, own.total_tokens + before);
}

#[tokio::test(start_paused = true)]
async fn whitespace_the_caller_has_is_not_sent_twice() {
    // Cut after "one t" + "wo th": no whitespace at the end. Cut after a piece that ends in a
    // space: the prefill leaves it out, so the continuation begins with one, which is dropped.
    let a = SimulatedProvider::new().reply("abcd efgh").stream(2, Duration::from_millis(10));
    let a = a.script([Step::CutAfter(1)]);
    let b = SimulatedProvider::new().reply("abcd efgh").accepts_prefill(true);
    let router = two_targets(&a, &b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, "abcd efgh");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_stream_is_continued_once_its_idle_limit_passes() {
    let a = breaking(Step::StallAfter(2));
    let timeouts = Timeouts { idle: Duration::from_secs(5), ..Timeouts::default() };
    let (_, stream, text, waited) = continued_after_stall(&a, timeouts).await;
    assert_eq!(text, ANSWER);
    assert!(waited >= Duration::from_secs(5) && waited < Duration::from_secs(6), "{waited:?}");
    assert_eq!(stream.trail().attempts()[0].error_kind(), Some(ErrorKind::Timeout));
}

/// A stream of `a` (which stalls) under `timeouts`, continued by a target that takes a prefill:
/// the router, the stream read to its end without an error, its text, and how long it took.
async fn continued_after_stall(
    a: &SimulatedProvider,
    timeouts: Timeouts,
) -> (switchyard::Router, RoutedStream, String, Duration) {
    let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let route = Route::builder("default").target("a:m").target("b:m").timeouts(timeouts);
    let router = router(&[("a", a), ("b", &b)], route);
    let start = Instant::now();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none(), "{error:?}");
    (router, stream, text, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_stall_within_a_deadline_leaves_the_continuation_its_share() {
    // A word a second; after the fourth (4 s in), nothing.
    let a = SimulatedProvider::new()
        .reply(ANSWER)
        .stream(6, Duration::from_secs(1))
        .script([Step::StallAfter(4)]);
    let timeouts = Timeouts {
        idle: Duration::from_secs(30),
        deadline: Some(Duration::from_secs(10)),
        ..Timeouts::default()
    };
    let (router, _, text, waited) = continued_after_stall(&a, timeouts).await;

    // The wait after the last word is half of the 6 s then left (not 30 s, which the deadline
    // would cut first, nor half of the 10 s at the start).
    assert_eq!(text, ANSWER);
    assert!(waited >= Duration::from_secs(6) && waited < Duration::from_secs(8), "{waited:?}");
    // A pause the share cut says nothing of the provider's health.
    let a_m: switchyard::Target = "a:m".parse().unwrap();
    assert_eq!(router.target_health(&a_m).consecutive_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_target_without_prefills_rescues_the_answer_by_regenerating_what_the_caller_has() {
    let a = breaking(Step::CutAfter(4));
    let b = SimulatedProvider::new().reply(ANSWER).stream(3, Duration::from_millis(10));
    let router = two_targets(&a, &b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, ANSWER, "the regenerated beginning is not sent again");
    assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_regenerated_answer_that_begins_otherwise_leaves_the_original_break() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().reply("something else entirely");
    let router = two_targets(&a, &b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    let error = error.expect("no whole answer: the break stands");
    assert_eq!(text, "one two three f", "nothing of the other answer reaches the caller");
    assert_eq!(
        (error.error.kind(), error.error.target().map(|t| t.as_str())),
        (ErrorKind::Transport, Some("a:m"))
    );
    // b was called, answered and billed: a call that failed, with its key, not a skip.
    let called = &error.trail.attempts()[1];
    assert_eq!((called.outcome, called.credential_id.is_some()), (Outcome::Failed, true), "{called:?}");
    let refusal = called.error.as_ref().unwrap();
    assert!(refusal.detail().contains("did not begin with"), "{called:?}");
    assert_eq!((refusal.is_unsupported(), refusal.status()), (true, Some(200)));
    let health = router.target_health(&"b:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 0, "b did nothing wrong");
    assert_ne!(health.status, HealthStatus::TemporarilyUnavailable);
}

#[tokio::test(start_paused = true)]
async fn a_refused_prefill_never_masks_the_real_break() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().accepts_prefill(true).script([Step::fail(ErrorKind::InvalidRequest)]);
    let router = two_targets(&a, &b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (_, error) = collect(&mut stream).await;

    let error = error.expect("the break stands");
    assert_eq!(error.error.kind(), ErrorKind::Transport, "the caller hears of the cut, not of the refusal");
    assert_eq!(error.trail.outcomes(), [Outcome::Failed, Outcome::Failed], "b was called and refused");
    assert!(error.trail.attempts()[1].unsupported(), "the refusal is b's lack, not a failure of health");
    assert_eq!(b.calls(), 1, "a refusal is not retried");
    let health = router.target_health(&"b:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 0);
    // Nothing continued it: what a delivered is the stream's own estimate, not a call beside.
    assert!(stream.broken_call().is_none());
    assert!(stream.usage_so_far().is_some_and(|usage| usage.completion_tokens > 0));
}

#[tokio::test(start_paused = true)]
async fn the_continuation_walks_on_past_a_target_that_cannot_continue() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().reply("another answer");
    let c = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let route = Route::builder("default").target("a:m").target("b:m").target("c:m");
    let router = router(&[("a", &a), ("b", &b), ("c", &c)], route);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, ANSWER);
    assert_eq!(stream.trail().outcomes(), [Outcome::Failed, Outcome::Failed, Outcome::Continued]);
    assert!(stream.trail().attempts()[1].unsupported(), "b could not continue: it was asked, and refused");
}

#[tokio::test(start_paused = true)]
async fn a_request_is_continued_once_and_a_second_break_ends_it() {
    let a = breaking(Step::CutAfter(2));
    let b = SimulatedProvider::new().reply(ANSWER).stream(6, Duration::from_millis(10)).accepts_prefill(true);
    let b = b.script([Step::CutAfter(1)]);
    let c = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let route = Route::builder("default").target("a:m").target("b:m").target("c:m");
    let router = router(&[("a", &a), ("b", &b), ("c", &c)], route);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (_, error) = collect(&mut stream).await;

    let error = error.expect("the continuation broke too");
    assert_eq!(error.error.target().map(|t| t.as_str()), Some("b:m"), "the caller hears of the last break");
    assert_eq!(c.calls(), 0, "at most one continuation per request");
    let attempts = error.trail.attempts();
    assert_eq!(
        attempts.iter().map(|a| (a.outcome, a.mid_stream)).collect::<Vec<_>>(),
        [(Outcome::Failed, true), (Outcome::Failed, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn what_is_not_plain_text_is_not_continued() {
    let structured = {
        let mut request = request("default");
        request.response_format = Some(ResponseFormat::JsonObject);
        request
    };
    let several = {
        let mut request = request("default");
        request.extra.insert("n".to_owned(), 2.into());
        request
    };
    for request in [structured, several] {
        let a = breaking(Step::CutAfter(3));
        let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
        let router = two_targets(&a, &b);

        let mut stream = router.chat_stream(&request, &RequestOptions::default()).await.unwrap();
        let (_, error) = collect(&mut stream).await;

        assert!(error.is_some());
        assert_eq!(b.calls(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_the_callers_deadline_cut_is_not_continued() {
    let a = SimulatedProvider::new().reply(ANSWER).stream(6, Duration::from_secs(1));
    let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let router = two_targets(&a, &b);
    let options = RequestOptions { deadline: Some(Duration::from_millis(2500)), ..RequestOptions::default() };

    let mut stream = router.chat_stream(&request("default"), &options).await.unwrap();
    let (_, error) = collect(&mut stream).await;

    assert_eq!(error.map(|e| e.error.kind()), Some(ErrorKind::Timeout));
    assert_eq!(b.calls(), 0, "the caller's time is up: nothing more is asked");
}

#[tokio::test(start_paused = true)]
async fn a_single_call_ends_at_the_break() {
    let a = breaking(Step::CutAfter(3));
    let b = SimulatedProvider::new().reply(ANSWER).accepts_prefill(true);
    let router = two_targets(&a, &b);
    let options = RequestOptions { single_call: true, ..RequestOptions::default() };

    let mut stream = router.chat_stream(&request("default"), &options).await.unwrap();
    assert!(collect(&mut stream).await.1.is_some());
    assert_eq!(b.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_prefill_carries_the_text_without_thinking_or_the_callers_bytes() {
    // A provider that records what it was asked: the continuation's last message is the text
    // the caller has, trimmed, and the request asks for no thinking.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<ChatRequest>));
    let recorder =
        Recorder { seen: seen.clone(), inner: SimulatedProvider::new().reply(ANSWER).accepts_prefill(true) };
    let a = SimulatedProvider::new().reply("abcd efgh").stream(2, Duration::from_millis(10));
    let a = a.script([Step::CutAfter(1)]);
    let router = builder(&[("a", &a)])
        .provider(switchyard::ProviderEntry::new("b", recorder))
        .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
        .build()
        .unwrap();
    let mut request = request("default");
    request
        .extra
        .insert("thinking".to_owned(), serde_json::json!({"type": "enabled", "budget_tokens": 1024}));

    let mut stream = router.chat_stream(&request, &RequestOptions::default()).await.unwrap();
    collect(&mut stream).await;

    let sent = seen.lock().unwrap().take().expect("b was asked to continue");
    let last = sent.messages.last().unwrap();
    assert_eq!(
        (last.role, last.text_content().as_deref()),
        (switchyard::chat::Role::Assistant, Some("abcd"))
    );
    assert!(!sent.extra.contains_key("thinking"));
    assert!(sent.verbatim.is_none());
}

/// A provider that keeps the last streamed request it was sent.
struct Recorder {
    seen: std::sync::Arc<std::sync::Mutex<Option<ChatRequest>>>,
    inner: SimulatedProvider,
}

impl switchyard::provider::Provider for Recorder {
    fn kind(&self) -> &str {
        "recorder"
    }

    fn accepts_prefill(&self, _model: &str) -> bool {
        true
    }

    fn chat<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        request: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        self.inner.chat(call, request)
    }

    fn chat_stream<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        request: &'a ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        *self.seen.lock().unwrap() = Some(request.clone());
        self.inner.chat_stream(call, request)
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_broken_while_it_reasoned_is_answered_from_the_start_by_the_next_target() {
    // DeepSeek thinks aloud for a minute, then its connection drops: the caller was shown
    // reasoning alone, and the next target (which takes prefills: there is no text to prefill)
    // answers it whole.
    let think = |text: &str| {
        Ok(ChatChunk {
            choices: vec![ChunkChoice {
                delta: Delta { reasoning_content: Some(text.into()), ..Delta::default() },
                ..ChunkChoice::default()
            }],
            ..ChatChunk::default()
        })
    };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<ChatRequest>));
    let prefilling =
        Recorder { seen: seen.clone(), inner: SimulatedProvider::new().reply(ANSWER).accepts_prefill(true) };
    let regenerating = SimulatedProvider::new().reply(ANSWER);
    let next: [std::sync::Arc<dyn switchyard::provider::Provider>; 2] =
        [std::sync::Arc::new(prefilling), std::sync::Arc::new(regenerating)];
    for (n, b) in next.into_iter().enumerate() {
        let router = switchyard::Router::builder()
            .provider(ProviderEntry::new("a", Scripted(vec![think("Hmm,"), think(" let me see."), cut()])))
            .provider(ProviderEntry::from_arc("b", b))
            .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
            .build()
            .unwrap();
        let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
        let (mut reasoning, mut text) = (String::new(), String::new());
        while let Some(item) = stream.next().await {
            let chunk = item.unwrap_or_else(|error| panic!("target {n}: {error:?}"));
            for choice in &chunk.choices {
                reasoning.extend(choice.delta.reasoning_content.clone());
                text.extend(choice.delta.content.clone());
            }
        }
        assert_eq!((reasoning.as_str(), text.as_str()), ("Hmm, let me see.", ANSWER), "target {n}");
        assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)], "target {n}");
    }
    let asked = seen.lock().unwrap().take().expect("the prefilling target was asked");
    let last = asked.messages.last().unwrap();
    assert_eq!(last.role, switchyard::chat::Role::User, "the question, with no empty prefill");
}

#[tokio::test(start_paused = true)]
async fn the_continuing_models_reasoning_is_not_shown_inside_the_answer() {
    let a = breaking(Step::CutAfter(3));
    let think = ChatChunk {
        choices: vec![ChunkChoice {
            delta: Delta { reasoning_content: Some("Let me think.".into()), ..Delta::default() },
            ..ChunkChoice::default()
        }],
        ..ChatChunk::default()
    };
    // What follows the prefill "one two three f" (three of six pieces), after a thought.
    let mut pieces = vec![Ok(think)];
    pieces.extend(["our", " five", " six"].map(|word| Ok(ChatChunk::text(word))));
    pieces.push(Ok(ChatChunk::finish(FinishReason::Stop)));
    let router = builder(&[("a", &a)])
        .provider(ProviderEntry::new("b", Scripted(pieces)))
        .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
        .build()
        .unwrap();
    // The default: a caller shown any model's reasoning.
    assert_eq!(RequestOptions::default().reasoning, ReasoningShown::Any);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        chunks.push(item.unwrap());
    }

    let text: String =
        chunks.iter().flat_map(|c| c.choices.iter().filter_map(|c| c.delta.content.clone())).collect();
    assert_eq!(text, ANSWER);
    assert!(
        chunks.iter().all(|c| c.choices.iter().all(|c| c.delta.reasoning_content.is_none())),
        "reasoning in the middle of the text: {chunks:?}"
    );
    assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)]);
}

/// A chunk of the first tool call: its start (`id`, `name`), or a piece of its arguments.
fn call_chunk(start: bool, arguments: &str) -> Result<ChatChunk, switchyard::ProviderError> {
    let call = switchyard::chat::ToolCallDelta {
        index: 0,
        id: start.then(|| "call_1".to_owned()),
        kind: start.then(|| "function".to_owned()),
        function: Some(switchyard::chat::FunctionCallDelta {
            name: start.then(|| "write_file".to_owned()),
            arguments: Some(arguments.to_owned()),
        }),
        extra: Default::default(),
    };
    let delta = Delta { tool_calls: vec![call], ..Delta::default() };
    Ok(ChatChunk { choices: vec![ChunkChoice { delta, ..ChunkChoice::default() }], ..ChatChunk::default() })
}

/// An agent's turn: "I'll write it.", then a call whose arguments come in `pieces`, then `end`.
fn agent_turn(pieces: &[&str], end: Result<ChatChunk, switchyard::ProviderError>) -> Scripted {
    let mut chunks = vec![Ok(ChatChunk::text("I'll write it.")), call_chunk(true, "")];
    chunks.extend(pieces.iter().map(|piece| call_chunk(false, piece)));
    chunks.push(end);
    Scripted(chunks)
}

/// A break of the connection.
fn cut() -> Result<ChatChunk, switchyard::ProviderError> {
    Err(switchyard::ProviderError::new(ErrorKind::Transport, "connection reset"))
}

/// `a` then `b`, on route `default`.
fn scripted_then(a: Scripted, b: SimulatedProvider) -> switchyard::Router {
    switchyard::Router::builder()
        .provider(ProviderEntry::new("a", a))
        .provider(ProviderEntry::new("b", b))
        .route(Route::builder("default").target("a:m").target("b:m").build().unwrap())
        .build()
        .unwrap()
}

/// Each chunk's text and tool-call arguments, in order, and the stream's error.
async fn pieces(stream: &mut RoutedStream) -> (Vec<String>, Option<StreamError>) {
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        let chunk = match item {
            Ok(chunk) => chunk,
            Err(error) => return (seen, Some(error)),
        };
        for choice in &chunk.choices {
            seen.extend(choice.delta.content.clone());
            let calls = choice.delta.tool_calls.iter().filter_map(|c| c.function.as_ref()?.arguments.clone());
            seen.extend(calls.map(|arguments| format!("call:{arguments}")));
            seen.extend(choice.finish_reason.as_ref().map(|reason| format!("finish:{reason:?}")));
        }
    }
    (seen, None)
}

#[tokio::test(start_paused = true)]
async fn a_stream_broken_inside_a_tool_call_after_its_text_is_continued_the_call_never_shown() {
    // An agent's turn: "I'll write it." then the call, cut halfway through its arguments. Shown,
    // half a call is of no use and ends the turn; held back until the answer's finish, the
    // caller has only the text, which the next target continues.
    let a = agent_turn(&["{\"path\": \"out"], cut());
    let b = SimulatedProvider::new().reply("I'll write it. Done.").accepts_prefill(true);
    let router = scripted_then(a, b);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (seen, error) = pieces(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert!(!seen.iter().any(|piece| piece.starts_with("call:")), "no half call shown: {seen:?}");
    assert_eq!(seen.concat().replace("finish:Stop", ""), "I'll write it. Done.", "{seen:?}");
    assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)]);
    let note = stream.trail().attempts()[0].note.clone().unwrap_or_default();
    assert!(note.contains("held back"), "{note}");
    // The held arguments were generated and billed though never shown: "I'll write it." and
    // `{"path": "out`, 27 characters, 7 tokens, on the broken call's bill and its record.
    let broken = stream.broken_call().expect("the broken call");
    assert_eq!(broken.usage.completion_tokens, 7, "{broken:?}");
    assert_eq!(stream.trail().attempts()[0].usage, Some(broken.usage));
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_held_back_goes_on_whole_and_in_order_at_the_answers_finish() {
    let a = agent_turn(&["{\"path\": ", "\"out.txt\"}"], Ok(ChatChunk::finish(FinishReason::ToolCalls)));
    let router = scripted_then(a, SimulatedProvider::new());

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (seen, error) = pieces(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    let expected = ["I'll write it.", "call:", "call:{\"path\": ", "call:\"out.txt\"}", "finish:ToolCalls"];
    assert_eq!(seen, expected);
    assert_eq!(outcomes(&stream), [(Outcome::Ok, false)]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_cannot_be_continued_shows_its_calls_as_they_come() {
    // One target: nothing could continue a break, so nothing is held back.
    let a = agent_turn(&["{\"pa"], cut());
    let mut stream = a.router().chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (seen, error) = pieces(&mut stream).await;
    assert_eq!(seen, ["I'll write it.", "call:", "call:{\"pa"]);
    assert_eq!(error.map(|e| e.error.kind()), Some(ErrorKind::Transport));
}

/// A turn with no preamble: its first chunk carries the role and the call's start, as
/// OpenAI's does; then `pieces` of arguments, then `end`.
fn opening_call(pieces: &[&str], end: Result<ChatChunk, switchyard::ProviderError>) -> Scripted {
    let mut first = call_chunk(true, "").unwrap();
    first.id = "chatcmpl-1".to_owned();
    first.choices[0].delta.role = Some(switchyard::chat::Role::Assistant);
    let mut chunks = vec![Ok(first)];
    chunks.extend(pieces.iter().map(|piece| call_chunk(false, piece)));
    chunks.push(end);
    Scripted(chunks)
}

/// Every chunk the caller is shown, and the stream's error.
async fn chunks(stream: &mut RoutedStream) -> (Vec<ChatChunk>, Option<StreamError>) {
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => seen.push(chunk),
            Err(error) => return (seen, Some(error)),
        }
    }
    (seen, None)
}

fn roles(chunks: &[ChatChunk]) -> usize {
    chunks.iter().flat_map(|chunk| &chunk.choices).filter(|choice| choice.delta.role.is_some()).count()
}

fn calls(chunks: &[ChatChunk]) -> usize {
    chunks
        .iter()
        .flat_map(|chunk| &chunk.choices)
        .filter(|choice| !choice.delta.tool_calls.is_empty())
        .count()
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_opens_with_its_call_cut_halfway_is_answered_again_by_the_next_target() {
    // The call committed the stream: it is held back all the same. The caller is shown its
    // opener (the answer's id and role, so that its message begins), and after the cut the next
    // target's answer from the start, under the same id and without a second role.
    let a = opening_call(&["{\"pa"], cut());
    let b = SimulatedProvider::new().reply("Done.").accepts_prefill(true);
    let mut stream =
        scripted_then(a, b).chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (seen, error) = chunks(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(calls(&seen), 0, "no half call shown: {seen:?}");
    assert_eq!(seen[0].choices[0].delta.role, Some(switchyard::chat::Role::Assistant), "the opener first");
    assert_eq!(roles(&seen), 1, "one role: {seen:?}");
    assert!(seen.iter().all(|chunk| chunk.id == "chatcmpl-1"), "{seen:?}");
    let text: String = seen.iter().flat_map(|c| &c.choices).filter_map(|c| c.delta.content.clone()).collect();
    assert_eq!(text, "Done.");
    assert_eq!(outcomes(&stream), [(Outcome::Failed, true), (Outcome::Continued, false)]);
    let note = stream.trail().attempts()[0].note.clone().unwrap_or_default();
    assert!(note.contains("held back"), "{note}");
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_opens_with_its_call_shows_it_whole_at_its_finish_with_one_role() {
    let a = opening_call(&["{\"path\": ", "\"out.txt\"}"], Ok(ChatChunk::finish(FinishReason::ToolCalls)));
    let mut stream = scripted_then(a, SimulatedProvider::new())
        .chat_stream(&request("default"), &RequestOptions::default())
        .await
        .unwrap();
    let (seen, error) = chunks(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(roles(&seen), 1, "{seen:?}");
    assert_eq!(calls(&seen), 3, "the call's three chunks, in order: {seen:?}");
    let call = &seen[1].choices[0].delta.tool_calls[0];
    assert_eq!(call.id.as_deref(), Some("call_1"), "the call's start follows the opener");
    assert_eq!(outcomes(&stream), [(Outcome::Ok, false)]);
}
