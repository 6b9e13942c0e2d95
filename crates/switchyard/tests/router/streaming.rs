//! Streaming through the router: failover until the first content chunk, never after.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use switchyard::chat::ChatChunk;
use switchyard::events::{EventKind, WaitReason};
use switchyard::health::HealthStatus;
use switchyard::pacing::{PaceRequest, Pacer, Permit, PermitGuard};
use switchyard::provider::BoxFuture;
use switchyard::route::{Route, Timeouts};
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderError, RequestOptions};
use tokio::time::Instant;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_stream_fails_over_before_its_first_content_chunk() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new().reply("all good here").stream(3, Duration::from_millis(50));
    let router = router(
        &[("a", &a), ("b", &b)],
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)),
    );

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    assert_eq!(stream.served_by().to_string(), "b:m");
    let (text, error) = collect(&mut stream).await;

    assert_eq!(text, "all good here");
    assert!(error.is_none());
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert!(stream.usage().is_some(), "usage from the final chunk");
}

#[tokio::test(start_paused = true)]
async fn chunks_are_forwarded_as_they_arrive() {
    let a = SimulatedProvider::new().reply("one two three four").stream(4, Duration::from_millis(50));
    let router = router(&[("a", &a)], Route::builder("default").target("a:m"));

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let start = Instant::now();
    let mut arrivals = Vec::new();
    while let Some(item) = stream.next().await {
        if item.unwrap().has_content() {
            arrivals.push(start.elapsed());
        }
    }
    let ms = |n| Duration::from_millis(n);
    assert_eq!(arrivals, vec![ms(0), ms(50), ms(100), ms(150)], "no buffering of the whole answer");
}

#[tokio::test(start_paused = true)]
async fn a_first_byte_timeout_counts_as_a_failure_and_falls_over() {
    // With a total of its own, and with the total equal to it (as `first_byte: 1s, total: 1s`
    // configures a hanging target): either way the wait that ran out is the first byte's.
    for total in [Timeouts::default().total, Duration::from_secs(2)] {
        let a = SimulatedProvider::new().script([Step::Hang]);
        let b = SimulatedProvider::new();
        let timeouts = Timeouts { first_byte: Duration::from_secs(2), total, ..Timeouts::default() };
        let route =
            Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).timeouts(timeouts);
        let router = router(&[("a", &a), ("b", &b)], route);

        let start = Instant::now();
        let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let first = &stream.trail().attempts()[0];
        assert_eq!(first.error_kind(), Some(ErrorKind::Timeout));
        assert!(first.error.as_ref().unwrap().detail().contains("first_byte"), "total {total:?}");
        assert_eq!(
            router.target_health(&"a:m".parse().unwrap()).status,
            HealthStatus::TemporarilyUnavailable
        );
        assert!(collect(&mut stream).await.1.is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn without_continuation_a_mid_stream_cut_ends_with_a_typed_error_and_is_not_restarted() {
    let a = SimulatedProvider::new()
        .reply("abcdefgh")
        .stream(4, Duration::from_millis(10))
        .script([Step::CutAfter(2)]);
    let b = SimulatedProvider::new();
    let route = Route::builder("default").target("a:m").target("b:m").continuation(false);
    let router = router(&[("a", &a), ("b", &b)], route);
    let mut events = router.subscribe();

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;
    let error = error.expect("the cut surfaces as an error item");

    assert_eq!(text, "abcd", "what was sent stays sent");
    assert_eq!(error.error.kind(), ErrorKind::Transport);
    assert_eq!(error.error.target().map(|t| t.as_str()), Some("a:m"));
    let last = error.trail.last().unwrap();
    assert_eq!((last.outcome, last.mid_stream), (Outcome::Failed, true));
    assert_eq!(stream.trail(), &error.trail);
    assert!(stream.next().await.is_none(), "the stream ends after the error");
    assert_eq!(b.calls(), 0, "never restarted silently elsewhere");
    let health = router.target_health(&"a:m".parse().unwrap());
    assert_eq!((health.status, health.consecutive_failures), (HealthStatus::TemporarilyUnavailable, 1));
    assert!(event_names(&mut events).contains(&"attempt_failed"));
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_ends_a_stalled_stream() {
    let a = SimulatedProvider::new().script([Step::StallAfter(1)]);
    let timeouts = Timeouts { idle: Duration::from_secs(5), ..Timeouts::default() };
    let router = router(&[("a", &a)], Route::builder("default").target("a:m").timeouts(timeouts));

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let start = Instant::now();
    let (text, error) = collect(&mut stream).await;

    assert!(!text.is_empty());
    let error = error.expect("stall ends in an error");
    assert_eq!(error.error.kind(), ErrorKind::Timeout);
    assert!(error.error.detail().contains("idle"), "{}", error.error.detail());
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_stream_held_open_after_its_finish_ends_whole_soon_after() {
    // The provider sent the whole answer, its finish and usage, then neither its terminator
    // nor the end of the stream: the caller's stream ends whole a second later, not at the
    // 30 s idle limit and not in an error, and the target stays healthy.
    let a = SimulatedProvider::new().script([Step::StallAfterFinish]);
    let timeouts = Timeouts { idle: Duration::from_secs(30), ..Timeouts::default() };
    let router = router(&[("a", &a)], Route::builder("default").target("a:m").timeouts(timeouts));

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let start = Instant::now();
    let (text, error) = collect(&mut stream).await;

    assert!(error.is_none(), "{error:?}");
    assert!(!text.is_empty());
    assert_eq!(start.elapsed(), switchyard::AFTER_FINISH);
    assert!(stream.usage().is_some(), "the usage that came before the stall");
    let attempt = &stream.trail().attempts()[0];
    assert_eq!(attempt.outcome, Outcome::Ok);
    assert!(attempt.note.as_deref().unwrap_or_default().contains("without its terminator"), "{attempt:?}");
    let statuses: Vec<_> = router.health().targets.iter().map(|t| t.status).collect();
    assert_eq!(statuses, [HealthStatus::Available]);
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_is_not_failed_by_a_break_or_the_total_limit_before_its_terminator() {
    // Cut after the finish: whole at once. Held open after a finish that came half a second
    // before the total limit: whole at that limit, not failed by it.
    let cut = SimulatedProvider::new().script([Step::CutAfterFinish]);
    let held = SimulatedProvider::new().stream(5, Duration::from_secs(2)).script([Step::StallAfterFinish]);
    let total = Duration::from_millis(8500);
    let cases = [(&cut, Duration::ZERO, "broke after its finish"), (&held, total, "without its terminator")];
    for (provider, ends_at, note) in cases {
        let timeouts = Timeouts { idle: Duration::from_secs(30), total, ..Timeouts::default() };
        let router = router(&[("a", provider)], Route::builder("default").target("a:m").timeouts(timeouts));
        let start = Instant::now();
        let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
        let (text, error) = collect(&mut stream).await;
        assert!(error.is_none() && !text.is_empty(), "{error:?}");
        assert_eq!(start.elapsed(), ends_at);
        let attempt = &stream.trail().attempts()[0];
        assert_eq!(attempt.outcome, Outcome::Ok);
        assert!(attempt.note.as_deref().unwrap_or_default().contains(note), "{attempt:?}");
        let statuses: Vec<_> = router.health().targets.iter().map(|t| t.status).collect();
        assert_eq!(statuses, [HealthStatus::Available]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_empty_answer_held_open_after_its_finish_is_the_answer_not_a_silence() {
    // No content, only a finish, then the stream held open: the answer came (an empty one), so
    // neither the 5 s first-byte wait fails it over nor is the backup asked.
    let empty = SimulatedProvider::new().script([Step::EmptyThenStall]);
    let backup = SimulatedProvider::new();
    let timeouts = Timeouts { first_byte: Duration::from_secs(5), ..Timeouts::default() };
    let route = Route::builder("default").target("a:m").target("b:m").timeouts(timeouts);
    let router = router(&[("a", &empty), ("b", &backup)], route);
    let start = Instant::now();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none() && text.is_empty(), "{error:?} {text:?}");
    assert_eq!(start.elapsed(), switchyard::AFTER_FINISH);
    assert_eq!((backup.calls(), stream.served_by().to_string()), (0, "a:m".to_owned()));
    let note = stream.trail().attempts()[0].note.clone().unwrap_or_default();
    assert!(note.contains("without its terminator"), "{note}");
}

#[tokio::test(start_paused = true)]
async fn an_empty_answer_that_then_breaks_is_asked_again() {
    let flaky = SimulatedProvider::new().script([Step::EmptyThenCut]);
    let route = Route::builder("default").target("a:m").retry(quick_retry(2));
    let router = router(&[("a", &flaky)], route);
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none() && !text.is_empty(), "{error:?} {text:?}");
    assert_eq!(flaky.calls(), 2);
    assert_eq!(stream.trail().outcomes(), [Outcome::Retried, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_whole_only_once_every_choice_asked_for_finished() {
    // Choice 0 finished, then the stream broke: whole for one choice asked, broken for two.
    for (n, whole) in [(None, true), (Some(2), false)] {
        let router = Scripted(vec![
            Ok(ChatChunk::text("A")),
            Ok(ChatChunk::finish(switchyard::chat::FinishReason::Stop)),
            Err(ProviderError::new(ErrorKind::Transport, "connection reset")),
        ])
        .router();
        let mut asked = request("default");
        if let Some(n) = n {
            asked.extra.insert("n".into(), n.into());
        }
        let mut stream = router.chat_stream(&asked, &RequestOptions::default()).await.unwrap();
        let (text, error) = collect(&mut stream).await;
        assert_eq!((text.as_str(), error.is_none()), ("A", whole), "n = {n:?}: {error:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_idle_limit_runs_from_the_last_chunk() {
    // Chunks 3 s apart under a 5 s idle limit: the stream outlives the limit many times over,
    // and the stall after its fourth chunk is cut 5 s after that chunk, not before.
    let a = SimulatedProvider::new().stream(8, Duration::from_secs(3)).script([Step::StallAfter(4)]);
    let timeouts = Timeouts { idle: Duration::from_secs(5), ..Timeouts::default() };
    let router = router(&[("a", &a)], Route::builder("default").target("a:m").timeouts(timeouts));

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut last_chunk = Instant::now();
    let error = loop {
        match stream.next().await {
            Some(Ok(_)) => last_chunk = Instant::now(),
            Some(Err(error)) => break error,
            None => panic!("a stalled stream ends in an error"),
        }
    };
    assert_eq!(error.error.kind(), ErrorKind::Timeout);
    assert!(error.error.detail().contains("idle"), "{}", error.error.detail());
    assert_eq!(last_chunk.elapsed(), Duration::from_secs(5), "cut this long after the last chunk");
    assert_eq!(a.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn keep_alives_after_content_do_not_reset_the_idle_limit() {
    // An upstream that stalled after its second chunk and pings once a second: cut 5 s after
    // its last content, not held for the `total` limit (ten minutes by default).
    let a = SimulatedProvider::new().stream(8, Duration::from_secs(1)).script([Step::PingAfter(2)]);
    let timeouts = Timeouts { idle: Duration::from_secs(5), ..Timeouts::default() };
    let router = router(&[("a", &a)], Route::builder("default").target("a:m").timeouts(timeouts));

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut last_content = Instant::now();
    let error = loop {
        match stream.next().await {
            Some(Ok(chunk)) if chunk.has_content() => last_content = Instant::now(),
            Some(Ok(_)) => {}
            Some(Err(error)) => break error,
            None => panic!("a stalled stream ends in an error"),
        }
    };
    assert_eq!(error.error.kind(), ErrorKind::Timeout);
    assert!(error.error.detail().contains("idle"), "{}", error.error.detail());
    assert_eq!(last_content.elapsed(), Duration::from_secs(5), "cut this long after the last content");
}

/// A Claude upstream streaming its own events: a word, then a server tool that runs for 40 s
/// sending only pings (marked as telling of progress, as the Anthropic decoder marks them),
/// then the rest of the answer.
struct ToolRunning;

impl switchyard::provider::Provider for ToolRunning {
    fn kind(&self) -> &str {
        "tool-running"
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::chat::ChatResponse, ProviderError>> {
        Box::pin(async { Err(ProviderError::unsupported("streams only")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::provider::ChunkStream, ProviderError>> {
        use switchyard::chat::{Dialect, FinishReason, Verbatim};
        let ping = || {
            let frame =
                Verbatim::new(Dialect::Anthropic, &b"event: ping\ndata: {\"type\": \"ping\"}\n\n"[..]);
            ChatChunk { verbatim: Some(frame.telling_progress()), ..ChatChunk::default() }
        };
        let mut finish = ChatChunk::text(" done");
        finish.choices[0].finish_reason = Some(FinishReason::Stop);
        let mut items: Vec<(u64, ChatChunk)> = vec![(0, ChatChunk::text("Running"))];
        items.extend((0..4).map(|_| (10, ping())));
        items.push((1, finish));
        let chunks = futures_util::stream::iter(items).then(|(wait, chunk)| async move {
            tokio::time::sleep(Duration::from_secs(wait)).await;
            Ok(chunk)
        });
        Box::pin(async move { Ok(Box::pin(chunks) as switchyard::provider::ChunkStream) })
    }
}

#[tokio::test(start_paused = true)]
async fn pings_while_a_server_tool_runs_keep_the_stream_alive_past_the_idle_limit() {
    let timeouts = Timeouts { idle: Duration::from_secs(30), ..Timeouts::default() };
    let router = switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new("t", ToolRunning))
        .route(Route::builder("default").target("t:m").timeouts(timeouts).build().unwrap())
        .build()
        .unwrap();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text, "Running done", "41 s of a tool's work, 30 s idle limit");
}

#[tokio::test(start_paused = true)]
async fn a_candidate_answers_a_stream_when_every_target_failed() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let route = Route::builder("default")
        .target("a:m")
        .retry(quick_retry(1))
        .candidate(switchyard::route::Candidate::text("apology", "busy"));
    let router = router(&[("a", &a)], route);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    assert_eq!(collect(&mut stream).await.0, "busy");
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Candidate]);
}

/// A pacer that makes every call wait `wait` and counts the permits alive.
struct CountingPacer {
    wait: Duration,
    live: Arc<AtomicUsize>,
}

struct LiveGuard(Arc<AtomicUsize>);

impl PermitGuard for LiveGuard {
    fn settle(&mut self, _: Option<u32>) {}
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pacer for CountingPacer {
    fn acquire<'a>(&'a self, _: PaceRequest<'a>) -> BoxFuture<'a, Result<Permit, ProviderError>> {
        Box::pin(async move {
            tokio::time::sleep(self.wait).await;
            self.live.fetch_add(1, Ordering::SeqCst);
            let guard = LiveGuard(self.live.clone());
            Ok(Permit::new(self.wait, Some(WaitReason::Rpm), Some(Box::new(guard))))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_holds_its_pacing_permit_until_it_ends() {
    let live = Arc::new(AtomicUsize::new(0));
    let a = SimulatedProvider::new().stream(3, Duration::from_millis(10));
    let pacer = Arc::new(CountingPacer { wait: Duration::ZERO, live: live.clone() });
    let router = builder(&[("a", &a)])
        .route(Route::builder("default").target("a:m").build().unwrap())
        .pacer(pacer)
        .build()
        .unwrap();

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let first: ChatChunk = stream.next().await.unwrap().unwrap();
    assert!(first.choices.len() == 1);
    assert_eq!(live.load(Ordering::SeqCst), 1, "held while the stream is open");
    assert!(stream.holds_permit());
    collect(&mut stream).await;
    assert_eq!(live.load(Ordering::SeqCst), 0, "released when it ends");
}

#[tokio::test(start_paused = true)]
async fn time_queued_by_the_pacer_is_reported_in_the_trail_timing_and_events() {
    let live = Arc::new(AtomicUsize::new(0));
    let a = SimulatedProvider::new();
    let pacer = Arc::new(CountingPacer { wait: Duration::from_secs(2), live: live.clone() });
    let router = builder(&[("a", &a)])
        .route(Route::builder("default").target("a:m").build().unwrap())
        .pacer(pacer)
        .build()
        .unwrap();
    let mut events = router.subscribe();

    let answer = router.chat(&request("default")).await.unwrap();

    assert_eq!(answer.timing.queued, Duration::from_secs(2));
    assert_eq!(answer.trail.attempts()[0].queued, Duration::from_secs(2));
    assert_eq!(answer.timing.total, Duration::from_secs(2));
    let waited = events.drain().into_iter().find_map(|e| match &e.kind {
        EventKind::RateLimitWaited { waited, reason, provider, .. } => {
            Some((*waited, *reason, provider.to_string()))
        }
        _ => None,
    });
    assert_eq!(waited, Some((Duration::from_secs(2), WaitReason::Rpm, "a".to_owned())));
    assert_eq!(live.load(Ordering::SeqCst), 0, "a plain chat releases its permit on return");
}

#[tokio::test(start_paused = true)]
async fn a_delayed_failure_fails_a_stream_after_the_delay() {
    let a = SimulatedProvider::new()
        .script([Step::Delay(Duration::from_secs(1), Box::new(Step::fail(ErrorKind::Unavailable)))]);
    let b = SimulatedProvider::new();
    let router = router(
        &[("a", &a), ("b", &b)],
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)),
    );

    let start = Instant::now();
    let stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_by_the_callers_deadline_says_nothing_about_the_providers_health() {
    // A healthy stream of 10 chunks a second apart, and a caller who gives it 3 seconds.
    let a = SimulatedProvider::new().stream(10, Duration::from_secs(1));
    let router = router(&[("a", &a)], Route::builder("default").target("a:m"));
    let options = RequestOptions { deadline: Some(Duration::from_secs(3)), ..RequestOptions::default() };

    let mut stream = router.chat_stream(&request("default"), &options).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(!text.is_empty());
    let error = error.expect("the deadline ends the stream with an error");
    assert_eq!(error.error.kind(), ErrorKind::Timeout);
    assert!(error.error.detail().contains("request deadline"), "{}", error.error.detail());
    let health = router.target_health(&"a:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 0, "the caller's deadline is not the provider's failure");
    assert_ne!(health.status, HealthStatus::TemporarilyUnavailable);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_outlasts_its_total_timeout_is_cut_there_and_counted_against_the_provider() {
    // Chunks a second apart, each well within the idle limit, for longer than the 3 s total.
    let a = SimulatedProvider::new().stream(10, Duration::from_secs(1));
    let timeouts = Timeouts { total: Duration::from_secs(3), ..Timeouts::default() };
    let router = router(&[("a", &a)], Route::builder("default").target("a:m").timeouts(timeouts));

    let start = Instant::now();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (text, error) = collect(&mut stream).await;

    assert!(!text.is_empty());
    let error = error.expect("the total timeout ends the stream with an error");
    assert_eq!(error.error.kind(), ErrorKind::Timeout);
    assert!(error.error.detail().contains("total timeout"), "{}", error.error.detail());
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let health = router.target_health(&"a:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 1, "a stream past its own total is the provider's failure");
}

/// A reasoning model of the OpenAI dialect: its thinking streams at once; `after` it (five
/// seconds unless said) it answers, or fails when `fails`.
struct Thinker {
    fails: bool,
    after: Duration,
}

impl Default for Thinker {
    fn default() -> Self {
        Self { fails: false, after: Duration::from_secs(5) }
    }
}

impl Thinker {
    fn failing_after(seconds: u64) -> Self {
        Self { fails: true, after: Duration::from_secs(seconds) }
    }
}

impl switchyard::provider::Provider for Thinker {
    fn kind(&self) -> &str {
        "thinker"
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::chat::ChatResponse, ProviderError>> {
        Box::pin(async { Err(ProviderError::new(ErrorKind::Unavailable, "streams only")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::provider::ChunkStream, ProviderError>> {
        use switchyard::chat::{ChunkChoice, Delta, FinishReason};
        let reasoning = ChatChunk {
            choices: vec![ChunkChoice {
                delta: Delta { reasoning_content: Some("Six times seven...".to_owned()), ..Delta::default() },
                ..ChunkChoice::default()
            }],
            ..ChatChunk::default()
        };
        let answer = match self.fails {
            false => Ok(ChatChunk::text("42")),
            true => Err(ProviderError::new(ErrorKind::Unavailable, "connection reset while thinking")),
        };
        let steps = vec![(Duration::ZERO, Ok(reasoning)), (self.after, answer)];
        let steps = steps.into_iter().chain([(Duration::ZERO, Ok(ChatChunk::finish(FinishReason::Stop)))]);
        let stream = futures_util::stream::iter(steps).then(|(wait, chunk)| async move {
            tokio::time::sleep(wait).await;
            chunk
        });
        Box::pin(async move { Ok(Box::pin(stream) as switchyard::provider::ChunkStream) })
    }
}

/// A route of the thinker, then `b:m`, with a first-byte limit of 2 s: less than the thinking.
fn thinking_route(thinker: Thinker, fallback: &SimulatedProvider) -> switchyard::Router {
    let timeouts = Timeouts { first_byte: Duration::from_secs(2), ..Timeouts::default() };
    thinking_route_with(thinker, fallback, timeouts)
}

fn thinking_route_with(
    thinker: Thinker,
    fallback: &SimulatedProvider,
    timeouts: Timeouts,
) -> switchyard::Router {
    let route =
        Route::builder("default").target("thinker:m").target("b:m").retry(quick_retry(1)).timeouts(timeouts);
    builder(&[("b", fallback)])
        .provider(switchyard::ProviderEntry::new("thinker", thinker))
        .route(route.build().unwrap())
        .build()
        .unwrap()
}

fn anthropic_request() -> switchyard::chat::ChatRequest {
    let mut request = request("default");
    request.origin = switchyard::chat::Dialect::Anthropic;
    request
}

/// The options of a caller shown only an Anthropic provider's own signed thinking (as the
/// gateway asks for an Anthropic client).
fn signed_thinking_only() -> RequestOptions {
    use switchyard::chat::{Dialect, ReasoningShown};
    RequestOptions { reasoning: ReasoningShown::Verbatim(Dialect::Anthropic), ..RequestOptions::default() }
}

#[tokio::test(start_paused = true)]
async fn reasoning_is_content_it_streams_at_once_and_the_first_byte_timeout_stops_there() {
    let router = thinking_route(Thinker::default(), &SimulatedProvider::new());

    let start = Instant::now();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    // The thinking reached the caller at once: it is not held back until the answer's text
    // (which comes after the first-byte limit, and would have failed the attempt over).
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(stream.served_by().to_string(), "thinker:m");
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.choices[0].delta.reasoning_content.as_deref(), Some("Six times seven..."));
    let (text, error) = collect(&mut stream).await;
    assert_eq!((text.as_str(), error.is_none()), ("42", true));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn reasoning_a_caller_is_not_shown_is_held_for_the_first_byte_limit_at_most() {
    // An Anthropic caller is not shown another dialect's reasoning, so the stream is not
    // committed by it, but the model is alive: it is not failed over at the first-byte limit.
    // Held until the answer when it comes within that limit; committed at the limit when it
    // does not, so that the caller hears from the stream within it either way.
    for (answers_after, committed_after) in [(1, 1), (5, 2)] {
        let thinker = Thinker { after: Duration::from_secs(answers_after), ..Thinker::default() };
        let router = thinking_route(thinker, &SimulatedProvider::new());

        let start = Instant::now();
        let mut stream = router.chat_stream(&anthropic_request(), &signed_thinking_only()).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(committed_after),
            "answering after {answers_after} s"
        );
        assert_eq!(stream.served_by().to_string(), "thinker:m");
        // What it held was the reasoning alone, which the caller is not shown: let go as it
        // came, so a long think does not pile up. The answer is the first thing it gets.
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.choices[0].delta.content.as_deref(), Some("42"));
        assert!(first.choices[0].delta.reasoning_content.is_none());
        assert_eq!(start.elapsed(), Duration::from_secs(answers_after));
        let (text, error) = collect(&mut stream).await;
        assert_eq!((text.as_str(), error.is_none()), ("", true));
        assert_eq!(stream.trail().outcomes(), vec![Outcome::Ok]);
        // The model answered at once (with its thinking): that is its latency, not the hold.
        let latency = router.latency(&"thinker:m".parse().unwrap()).expect("measured");
        assert!(latency.p50 < Duration::from_millis(1), "{:?}, not the hold", latency.p50);
    }
}

#[tokio::test(start_paused = true)]
async fn a_failure_during_reasoning_the_caller_is_not_shown_falls_back() {
    let fallback = SimulatedProvider::new();
    let router = thinking_route(Thinker::failing_after(1), &fallback);

    let start = Instant::now();
    let mut stream = router.chat_stream(&anthropic_request(), &signed_thinking_only()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(
        stream.served_by().to_string(),
        "b:m",
        "the caller saw nothing of the thinker: no restart shows"
    );
    let (text, error) = collect(&mut stream).await;
    assert!(!text.is_empty() && error.is_none(), "{text:?} {error:?}");
    let outcomes = stream.trail().outcomes();
    assert_eq!(outcomes.last(), Some(&Outcome::Ok));
    assert!(outcomes.len() >= 2 && outcomes[0] != Outcome::Ok, "{outcomes:?}");
    assert_eq!(fallback.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_hold_is_a_mid_stream_break_the_next_target_answers() {
    let fallback = SimulatedProvider::new();
    let router = thinking_route(Thinker::failing_after(5), &fallback);

    let mut stream = router.chat_stream(&anthropic_request(), &signed_thinking_only()).await.unwrap();
    assert_eq!(stream.served_by().to_string(), "thinker:m", "committed at the 2 s limit");
    let (text, error) = collect(&mut stream).await;
    // The caller was shown thinking alone: the next target answers from the start.
    assert!(error.is_none() && !text.is_empty(), "{text:?} {error:?}");
    assert_eq!(stream.trail().outcomes(), [Outcome::Failed, Outcome::Continued]);
    assert_eq!(fallback.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_model_that_goes_quiet_while_thinking_unseen_is_failed_over_at_the_idle_limit() {
    let fallback = SimulatedProvider::new();
    let timeouts =
        Timeouts { first_byte: Duration::from_secs(10), idle: Duration::from_secs(3), ..Timeouts::default() };
    let router = thinking_route_with(Thinker::default(), &fallback, timeouts);

    let start = Instant::now();
    let stream = router.chat_stream(&anthropic_request(), &signed_thinking_only()).await.unwrap();
    assert_eq!(stream.served_by().to_string(), "b:m");
    assert_eq!(start.elapsed(), Duration::from_secs(3), "cut at the idle limit, not at the answer 5 s in");
    let trail = stream.trail();
    let detail = trail.attempts()[0].error.as_ref().map(|e| e.detail().to_owned());
    assert!(detail.as_deref().is_some_and(|d| d.contains("idle timeout")), "{detail:?}");
}

#[tokio::test(start_paused = true)]
async fn a_model_thinking_unseen_is_answering_so_it_is_not_hedged() {
    let fallback = SimulatedProvider::new();
    let hedge = switchyard::route::Hedge {
        max_share: 1.0,
        ..switchyard::route::Hedge::after(Duration::from_secs(1))
    };
    let route =
        Route::builder("default").target("thinker:m").target("b:m").retry(quick_retry(1)).hedge(hedge);
    let router = builder(&[("b", &fallback)])
        .provider(switchyard::ProviderEntry::new("thinker", Thinker::default()))
        .route(route.build().unwrap())
        .build()
        .unwrap();

    let stream = router.chat_stream(&anthropic_request(), &signed_thinking_only()).await.unwrap();
    assert_eq!(stream.served_by().to_string(), "thinker:m");
    assert_eq!(fallback.calls(), 0, "thinking since the first instant: nothing slow to hedge");
    assert_eq!(stream.trail().attempts().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failure_during_reasoning_the_caller_was_shown_is_answered_by_the_next_target_and_said() {
    let fallback = SimulatedProvider::new();
    let router = thinking_route(Thinker::failing_after(5), &fallback);

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    assert_eq!(stream.served_by().to_string(), "thinker:m");
    let (text, error) = collect(&mut stream).await;
    assert!(error.is_none() && !text.is_empty(), "{text:?} {error:?}");
    // Not a silent restart: the trail says the answer came from another target.
    let trail = stream.trail();
    assert_eq!(trail.outcomes(), [Outcome::Failed, Outcome::Continued]);
    assert!(trail.attempts()[0].mid_stream);
    assert_eq!(fallback.calls(), 1);

    // With continuation off, the break is the caller's to see.
    let fallback = SimulatedProvider::new();
    let route = Route::builder("default").target("thinker:m").target("b:m").continuation(false);
    let router = builder(&[("b", &fallback)])
        .provider(switchyard::ProviderEntry::new("thinker", Thinker::failing_after(5)))
        .route(route.build().unwrap())
        .build()
        .unwrap();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let (_, error) = collect(&mut stream).await;
    assert_eq!(error.expect("continuation is off").error.kind(), ErrorKind::Unavailable);
    assert_eq!(fallback.calls(), 0);
}

/// Answers its first (non-streamed) call with a tool call and usage, then fails every call.
#[derive(Default)]
struct CallsOnce(AtomicUsize);

impl switchyard::provider::Provider for CallsOnce {
    fn kind(&self) -> &str {
        "calls-once"
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::chat::ChatResponse, ProviderError>> {
        use switchyard::chat::{ChatResponse, ToolCall, Usage};
        let first = self.0.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            if !first {
                return Err(ProviderError::new(ErrorKind::Unavailable, "down"));
            }
            let mut answer = ChatResponse::from_text("m", "");
            answer.choices[0].message.content = None;
            answer.choices[0].message.tool_calls =
                vec![ToolCall::function("call_1", "get_weather", r#"{"city":"Paris"}"#)];
            answer.usage = Some(Usage::new(12, 7));
            Ok(answer)
        })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> BoxFuture<'a, Result<switchyard::provider::ChunkStream, ProviderError>> {
        Box::pin(async { Err(ProviderError::new(ErrorKind::Unavailable, "down")) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_remembered_answer_streams_whole_with_its_tool_calls_and_usage() {
    use switchyard::answer_cache::AnswerCacheSettings;
    let cache = AnswerCacheSettings { tool_calls: true, ..AnswerCacheSettings::default() };
    let route = Route::builder("default")
        .target("p:m")
        .retry(quick_retry(1))
        .health_gate(false)
        .candidate(switchyard::route::Candidate::cache("last-good", cache));
    let router = switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new("p", CallsOnce::default()))
        .route(route.build().unwrap())
        .build()
        .unwrap();
    router.chat(&request("default")).await.unwrap();

    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut calls = Vec::new();
    while let Some(chunk) = stream.next().await {
        for choice in chunk.unwrap().choices {
            calls.extend(choice.delta.tool_calls.into_iter().filter_map(|c| c.function?.name));
        }
    }
    assert_eq!(stream.trail().outcomes(), vec![Outcome::Failed, Outcome::Candidate]);
    assert_eq!(calls, ["get_weather"], "the remembered tool call reaches the caller");
    assert_eq!(stream.usage().map(|u| u.total_tokens), Some(19));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_ends_with_no_answer_is_malformed_and_the_next_target_answers() {
    // Only its terminator, or chunks of nothing (a role, an empty choice list).
    let nothing = switchyard::chat::ChatChunk::default();
    let words = SimulatedProvider::new().reply("in words");
    let router = switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new("p", Scripted(vec![Ok(nothing)])))
        .provider(switchyard::ProviderEntry::new("s", words.clone()))
        .route(Route::builder("default").target("p:m").target("s:m").retry(quick_retry(1)).build().unwrap())
        .build()
        .unwrap();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        text.extend(chunk.unwrap().choices.iter().filter_map(|c| c.delta.content.clone()));
    }
    assert_eq!(text, "in words");
    let failed = &stream.trail().attempts()[0];
    assert_eq!(failed.error_kind(), Some(switchyard::ErrorKind::MalformedResponse));
}
