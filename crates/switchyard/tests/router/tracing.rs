//! Trace context: every attempt sent is a child span of the request, and the call that goes
//! upstream carries the very span the trail records.

use std::sync::{Arc, Mutex};

use switchyard::chat::{ChatRequest, ChatResponse};
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trace::TraceContext;
use switchyard::{ErrorKind, ProviderEntry, ProviderError, RequestOptions, Router};

use crate::support::*;

/// A simulated provider that keeps the trace context of every call it receives.
#[derive(Clone)]
struct Recording {
    inner: SimulatedProvider,
    seen: Arc<Mutex<Vec<Option<TraceContext>>>>,
}

impl Recording {
    fn new(inner: SimulatedProvider) -> Self {
        Self { inner, seen: Arc::default() }
    }

    fn seen(&self) -> Vec<Option<TraceContext>> {
        self.seen.lock().unwrap().clone()
    }
}

impl Provider for Recording {
    fn kind(&self) -> &str {
        "recording"
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        self.seen.lock().unwrap().push(call.trace);
        self.inner.chat(call, request)
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        self.seen.lock().unwrap().push(call.trace);
        self.inner.chat_stream(call, request)
    }
}

/// `a`, which fails twice (its first call and its retry), `b`, which answers, and a router
/// whose route tries them in that order.
fn failing_then_ok() -> (Recording, Recording, Router) {
    let a = Recording::new(
        SimulatedProvider::new()
            .script([Step::fail(ErrorKind::Unavailable), Step::fail(ErrorKind::Unavailable)]),
    );
    let b = Recording::new(SimulatedProvider::new());
    let router = Router::builder()
        .provider(ProviderEntry::new("a", a.clone()))
        .provider(ProviderEntry::new("b", b.clone()))
        .route(Route::builder("default").target("a:m").target("b:m").retry(quick_retry(2)).build().unwrap())
        .build()
        .unwrap();
    (a, b, router)
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_a_child_span_and_its_call_carries_it() {
    let (a, b, router) = failing_then_ok();
    let request_span = TraceContext::root(true);
    let options = RequestOptions { trace: Some(request_span), ..RequestOptions::default() };

    let answer = router.chat_with(&request("default"), &options).await.unwrap();

    let sent: Vec<TraceContext> = a.seen().into_iter().chain(b.seen()).map(Option::unwrap).collect();
    assert_eq!(sent.len(), 3, "a retried, then b");
    let spans: Vec<u64> = answer.trail.attempts().iter().map(|attempt| attempt.span_id.unwrap()).collect();
    assert_eq!(
        spans,
        sent.iter().map(|span| span.span_id).collect::<Vec<_>>(),
        "the trail keeps the span each call carried"
    );
    for span in &sent {
        assert_eq!((span.trace_id, span.sampled), (request_span.trace_id, true));
        assert_ne!(span.span_id, request_span.span_id);
    }
    let distinct: std::collections::HashSet<_> = spans.iter().collect();
    assert_eq!(distinct.len(), 3, "every attempt its own span");
}

#[tokio::test(start_paused = true)]
async fn an_untraced_request_sends_no_context_and_a_skipped_target_has_no_span() {
    let (a, b, router) = failing_then_ok();

    router.chat(&request("default")).await.unwrap();
    assert!(a.seen().iter().chain(&b.seen()).all(Option::is_none));

    // a is gated now: its skip was never sent, so it has no span.
    let options = RequestOptions { trace: Some(TraceContext::root(false)), ..RequestOptions::default() };
    let answer = router.chat_with(&request("default"), &options).await.unwrap();
    let attempts = answer.trail.attempts();
    assert!(attempts[0].outcome.is_skip() && attempts[0].span_id.is_none(), "{attempts:?}");
    assert_eq!(attempts[1].span_id, b.seen().last().copied().flatten().map(|span| span.span_id));
    assert_eq!(
        b.seen().last().copied().flatten().map(|span| span.sampled),
        Some(false),
        "the flag travels as given"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_pair_each_carries_the_span_its_trail_record_keeps() {
    use std::time::Duration;
    use switchyard::route::Hedge;
    use switchyard::simulated::Latency;
    use switchyard::trail::Outcome;
    let slow = Recording::new(SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(1000))));
    let fast = Recording::new(SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(100))));
    let hedge = Hedge { max_share: 1.0, ..Hedge::after(Duration::from_millis(300)) };
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).hedge(hedge);
    let router = Router::builder()
        .provider(ProviderEntry::new("a", slow.clone()))
        .provider(ProviderEntry::new("b", fast.clone()))
        .route(route.build().unwrap())
        .build()
        .unwrap();
    let options = RequestOptions { trace: Some(TraceContext::root(true)), ..RequestOptions::default() };

    let answer = router.chat_with(&request("default"), &options).await.unwrap();

    let attempts = answer.trail.attempts();
    assert_eq!(
        attempts.iter().map(|a| (a.outcome, a.hedge)).collect::<Vec<_>>(),
        [(Outcome::Cancelled, false), (Outcome::Ok, true)]
    );
    let (first, hedged) = (slow.seen()[0].unwrap(), fast.seen()[0].unwrap());
    assert_eq!(
        attempts[0].span_id,
        Some(first.span_id),
        "the cancelled first keeps the span its call carried"
    );
    assert_eq!(attempts[1].span_id, Some(hedged.span_id), "the hedge keeps its own");
    assert_ne!(first.span_id, hedged.span_id);
}
