//! Streams give their upstream connection back: sequential streamed calls through one
//! adapter reuse one keep-alive connection, for both dialects, even when the end of the body
//! comes a moment after the last event (as it does from real servers); and a caller that
//! goes away mid-stream closes the upstream call at once.

#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use support::{Caller, Fake, Seen, only_posts_to, respond};
use switchyard::chat::{ChatRequest, Message};
use switchyard::provider::Provider;
use switchyard_providers::anthropic::AnthropicProvider;
use switchyard_providers::openai::OpenAiProvider;
use switchyard_providers::{ProviderKind, ProviderSettings};

const KEY: &str = "sk-test-connections-0123456789";

/// Counts the streams whose body the server sent to its end, and those it dropped before
/// (the client went away).
struct Watch {
    ended: Arc<AtomicUsize>,
    cut: Arc<AtomicUsize>,
    finished: bool,
}

impl Watch {
    fn finish(&mut self) {
        self.finished = true;
        self.ended.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.finished {
            self.cut.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The fake, and how many of its streams it ended, and how many the client went away from.
struct Upstream {
    fake: Fake,
    ended: Arc<AtomicUsize>,
    cut: Arc<AtomicUsize>,
}

/// A server streaming `events` (SSE text, one piece each), the last a moment before the body
/// ends; with `hold`, it then keeps the body open for good.
async fn upstream(events: Vec<String>, hold: bool) -> Upstream {
    let (ended, cut) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (seen_ended, seen_cut) = (ended.clone(), cut.clone());
    let reply = move |_: &Seen| {
        let watch = Watch { ended: seen_ended.clone(), cut: seen_cut.clone(), finished: false };
        let events = events.clone();
        let body = futures_util::stream::unfold((0, watch), move |(i, mut watch)| {
            let events = events.clone();
            async move {
                if i < events.len() {
                    return Some((Ok::<_, Infallible>(Bytes::from(events[i].clone())), (i + 1, watch)));
                }
                // The end of the body comes a moment (a millisecond) after the last event,
                // in a write of its own.
                tokio::time::sleep(Duration::from_millis(1)).await;
                if hold {
                    std::future::pending::<()>().await;
                }
                watch.finish();
                None
            }
        });
        respond(200, &[], "text/event-stream", Body::from_stream(body))
    };
    let fake = Fake::start(only_posts_to(&["/v1/chat/completions", "/v1/messages"], reply)).await;
    Upstream { fake, ended, cut }
}

fn openai_events() -> Vec<String> {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    vec![
        chunk(r#"{"role":"assistant","content":"Hi"}"#, "null"),
        chunk("{}", r#""stop""#),
        "data: [DONE]\n\n".to_owned(),
    ]
}

fn anthropic_events() -> Vec<String> {
    let event = |name: &str, data: &str| format!("event: {name}\ndata: {data}\n\n");
    vec![
        event(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ),
        event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        event(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        event(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#,
        ),
        event("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

fn provider(kind: ProviderKind, base: &str) -> Box<dyn Provider> {
    match kind {
        ProviderKind::Anthropic => {
            Box::new(AnthropicProvider::new(&ProviderSettings::new(kind).base_url(base.to_owned())).unwrap())
        }
        _ => Box::new(
            OpenAiProvider::new(&ProviderSettings::new(kind).base_url(format!("{base}/v1"))).unwrap(),
        ),
    }
}

/// Streams one answer through `provider`, reading `take` chunks (all of them with `None`).
async fn stream_once(provider: &dyn Provider, take: Option<usize>) -> usize {
    let caller = Caller::new(provider, Some(KEY));
    let request = ChatRequest::new("default", vec![Message::user("hi")]);
    let mut chunks = provider.chat_stream(caller.call("m", None), &request).await.unwrap();
    let mut read = 0;
    while take.is_none_or(|n| read < n) {
        match chunks.next().await {
            Some(item) => {
                item.unwrap();
                read += 1;
            }
            None => break,
        }
    }
    read
}

async fn sequential_streams_reuse_one_connection(kind: ProviderKind, events: Vec<String>) {
    let upstream = upstream(events, false).await;
    let provider = provider(kind, &upstream.fake.origin());
    for sent in 1..=8 {
        // The stream reads the body to its end, which puts the connection back in the pool.
        assert!(stream_once(&*provider, None).await > 0);
        // On a loaded machine the end may come later than the stream waits for it inline; it
        // is then read in the background. Let that run, as the time until a gateway's next
        // request does: until the server has sent the end, then a few turns for it to arrive.
        let started = std::time::Instant::now();
        while upstream.ended.load(Ordering::SeqCst) < sent {
            assert!(started.elapsed() < Duration::from_secs(2), "{kind:?}: the body never ended");
            tokio::task::yield_now().await;
        }
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(upstream.fake.connections(), 1, "{kind:?}: eight streams, one connection");
}

#[tokio::test]
async fn sequential_openai_streams_reuse_one_connection() {
    sequential_streams_reuse_one_connection(ProviderKind::OpenAi, openai_events()).await;
}

#[tokio::test]
async fn sequential_anthropic_streams_reuse_one_connection() {
    sequential_streams_reuse_one_connection(ProviderKind::Anthropic, anthropic_events()).await;
}

#[tokio::test]
async fn a_body_that_never_ends_after_its_last_event_still_ends_the_stream() {
    // The server keeps the body open after `[DONE]`: the stream ends anyway (the connection
    // is given up, not waited on).
    let upstream = upstream(openai_events(), true).await;
    let provider = provider(ProviderKind::OpenAi, &upstream.fake.origin());
    let started = std::time::Instant::now();
    assert!(stream_once(&*provider, None).await > 0);
    assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_caller_that_goes_away_mid_stream_closes_the_upstream_call() {
    for (kind, events) in
        [(ProviderKind::OpenAi, openai_events()), (ProviderKind::Anthropic, anthropic_events())]
    {
        let upstream = upstream(events, true).await;
        let provider = provider(kind, &upstream.fake.origin());
        assert_eq!(stream_once(&*provider, Some(1)).await, 1);
        // The stream was dropped after one chunk: the server sees its body dropped.
        let started = std::time::Instant::now();
        while upstream.cut.load(Ordering::SeqCst) == 0 {
            assert!(started.elapsed() < Duration::from_secs(2), "{kind:?}: the upstream call was not closed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
