//! Streams give their upstream connection back: sequential streamed calls through one
//! adapter reuse one keep-alive connection, in every streaming dialect (OpenAI's, Anthropic's,
//! Gemini's, Bedrock's Converse and InvokeModel event streams), even when the end of the body
//! comes a moment after the last event (as it does from real servers); a body held open after
//! the answer does not hold the stream; and a caller that goes away mid-stream closes the
//! upstream call at once.

#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::Method;
use base64::Engine as _;
use futures_util::StreamExt;
use support::{Caller, Fake, Seen, respond};
use switchyard::chat::{ChatRequest, Message};
use switchyard::provider::Provider;
use switchyard_providers::anthropic::AnthropicProvider;
use switchyard_providers::bedrock::eventstream::encode_frame;
use switchyard_providers::bedrock::{AwsAuth, BedrockProvider, BedrockSettings};
use switchyard_providers::gemini::GeminiProvider;
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

/// One streaming dialect: the adapter, the model asked for, the path it posts to, and the
/// pieces of a whole answer's body as that dialect's server writes it.
struct Dialect {
    kind: ProviderKind,
    model: &'static str,
    path: &'static str,
    content_type: &'static str,
    pieces: Vec<Bytes>,
    /// The client's body, for a dialect that passes it on as written (the Responses API).
    verbatim: Option<switchyard::chat::Verbatim>,
}

/// A server streaming `dialect`'s pieces (one write each), the last a moment before the body
/// ends; with `hold`, it then keeps the body open for good.
async fn upstream(dialect: &Dialect, hold: bool) -> Upstream {
    let (ended, cut) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (seen_ended, seen_cut) = (ended.clone(), cut.clone());
    let (pieces, path, content_type) = (dialect.pieces.clone(), dialect.path, dialect.content_type);
    let reply = move |seen: &Seen| {
        if seen.method != Method::POST || seen.uri != path {
            return respond(404, &[], "text/plain", Body::from(format!("no route for {}", seen.uri)));
        }
        let watch = Watch { ended: seen_ended.clone(), cut: seen_cut.clone(), finished: false };
        let pieces = pieces.clone();
        let body = futures_util::stream::unfold((0, watch), move |(i, mut watch)| {
            let pieces = pieces.clone();
            async move {
                if i < pieces.len() {
                    return Some((Ok::<_, Infallible>(pieces[i].clone()), (i + 1, watch)));
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
        respond(200, &[], content_type, Body::from_stream(body))
    };
    let fake = Fake::start(reply).await;
    Upstream { fake, ended, cut }
}

fn sse(events: Vec<String>) -> Vec<Bytes> {
    events.into_iter().map(Bytes::from).collect()
}

fn openai() -> Dialect {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let events = vec![
        chunk(r#"{"role":"assistant","content":"Hi"}"#, "null"),
        chunk("{}", r#""stop""#),
        "data: [DONE]\n\n".to_owned(),
    ];
    Dialect {
        kind: ProviderKind::OpenAi,
        model: "m",
        path: "/v1/chat/completions",
        content_type: "text/event-stream",
        pieces: sse(events),
        verbatim: None,
    }
}

/// Anthropic's events of one short answer, as `(name, data)`.
fn anthropic_events() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

fn anthropic() -> Dialect {
    let events =
        anthropic_events().into_iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"));
    Dialect {
        kind: ProviderKind::Anthropic,
        model: "m",
        path: "/v1/messages",
        content_type: "text/event-stream",
        pieces: sse(events.collect()),
        verbatim: None,
    }
}

fn gemini() -> Dialect {
    let events = vec![
        r#"data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"index":0}],"modelVersion":"m"}"#,
        r#"data: {"candidates":[{"content":{"role":"model","parts":[{"text":"."}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"totalTokenCount":5}}"#,
    ];
    Dialect {
        kind: ProviderKind::Gemini,
        model: "m",
        path: "/v1beta/models/m:streamGenerateContent?alt=sse",
        content_type: "text/event-stream",
        pieces: sse(events.into_iter().map(|event| format!("{event}\r\n\r\n")).collect()),
        verbatim: None,
    }
}

/// An AWS event-stream frame of `kind` with a JSON `payload`.
fn frame(kind: &str, payload: &str) -> Bytes {
    let headers = [(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")];
    Bytes::from(encode_frame(&headers, payload.as_bytes()))
}

/// Bedrock's Converse stream, for the models that are not Claude.
fn bedrock_converse() -> Dialect {
    let frames = [
        ("messageStart", r#"{"role":"assistant"}"#),
        ("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        ("messageStop", r#"{"stopReason":"end_turn"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4},"metrics":{"latencyMs":5}}"#,
        ),
    ];
    Dialect {
        kind: ProviderKind::Bedrock,
        model: "meta.llama3-70b-instruct-v1:0",
        path: "/model/meta.llama3-70b-instruct-v1%3A0/converse-stream",
        content_type: "application/vnd.amazon.eventstream",
        pieces: frames.iter().map(|(kind, payload)| frame(kind, payload)).collect(),
        verbatim: None,
    }
}

/// Bedrock's InvokeModel stream for Claude: Anthropic's events, each in a `chunk` frame.
fn bedrock_claude() -> Dialect {
    let chunk = |data: &str| {
        let bytes = base64::engine::general_purpose::STANDARD.encode(data);
        frame("chunk", &format!(r#"{{"bytes":"{bytes}"}}"#))
    };
    Dialect {
        kind: ProviderKind::Bedrock,
        model: "anthropic.claude-sonnet-4-5-20250929-v1:0",
        path: "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream",
        content_type: "application/vnd.amazon.eventstream",
        pieces: anthropic_events().into_iter().map(|(_, data)| chunk(data)).collect(),
        verbatim: None,
    }
}

/// OpenAI's Responses API, spoken natively for a Responses client (Codex).
fn responses() -> Dialect {
    let events = [
        (
            "response.created",
            r#"{"type":"response.created","response":{"id":"resp_1","model":"m","status":"in_progress","output":[]}}"#,
        ),
        (
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}"#,
        ),
        (
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"resp_1","model":"m","status":"completed","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}"#,
        ),
    ];
    let body = Bytes::from_static(br#"{"model":"default","input":"hi","stream":true}"#);
    Dialect {
        kind: ProviderKind::OpenAi,
        model: "m",
        path: "/v1/responses",
        content_type: "text/event-stream",
        pieces: sse(events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()),
        verbatim: Some(switchyard::chat::Verbatim::new(switchyard::chat::Dialect::Responses, body)),
    }
}

fn every_dialect() -> [Dialect; 6] {
    [openai(), anthropic(), gemini(), bedrock_converse(), bedrock_claude(), responses()]
}

fn provider(kind: ProviderKind, base: &str) -> Box<dyn Provider> {
    let settings = ProviderSettings::new(kind);
    match kind {
        ProviderKind::Anthropic => {
            Box::new(AnthropicProvider::new(&settings.base_url(base.to_owned())).unwrap())
        }
        ProviderKind::Gemini => {
            Box::new(GeminiProvider::new(&settings.base_url(format!("{base}/v1beta"))).unwrap())
        }
        ProviderKind::Bedrock => {
            let mut settings = settings.base_url(base.to_owned());
            settings.bedrock = Some(BedrockSettings { region: "us-east-1".into(), aws: AwsAuth::default() });
            Box::new(BedrockProvider::new(&settings).unwrap())
        }
        _ => Box::new(OpenAiProvider::new(&settings.base_url(format!("{base}/v1"))).unwrap()),
    }
}

/// Streams one answer of `dialect` through `provider` (with a bearer key, which Bedrock takes
/// as its API key), reading `take` chunks (all of them with `None`).
async fn stream_once(provider: &dyn Provider, dialect: &Dialect, take: Option<usize>) -> usize {
    let caller = Caller::new(provider, Some(KEY));
    let mut request = ChatRequest::new("default", vec![Message::user("hi")]);
    request.verbatim.clone_from(&dialect.verbatim);
    let mut chunks = provider.chat_stream(caller.call(dialect.model, None), &request).await.unwrap();
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

#[tokio::test]
async fn sequential_streams_reuse_one_connection_in_every_dialect() {
    for dialect in every_dialect() {
        let upstream = upstream(&dialect, false).await;
        let provider = provider(dialect.kind, &upstream.fake.origin());
        let name = dialect.path;
        for sent in 1..=8 {
            // The stream reads the body to its end, which puts the connection back in the pool.
            assert!(stream_once(&*provider, &dialect, None).await > 0, "{name}");
            // On a loaded machine the end may come later than the stream waits for it inline;
            // it is then read in the background. Let that run, as the time until a gateway's
            // next request does: until the server has sent the end, then a few turns for it to
            // arrive.
            let started = std::time::Instant::now();
            while upstream.ended.load(Ordering::SeqCst) < sent {
                assert!(started.elapsed() < Duration::from_secs(2), "{name}: the body never ended");
                tokio::task::yield_now().await;
            }
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(upstream.fake.connections(), 1, "{name}: eight streams, one connection");
    }
}

#[tokio::test]
async fn a_body_that_never_ends_after_its_last_event_still_ends_the_stream() {
    // The server keeps the body open after the answer's last event: the stream ends anyway
    // (the connection is given up, not waited on).
    for dialect in every_dialect() {
        let upstream = upstream(&dialect, true).await;
        let provider = provider(dialect.kind, &upstream.fake.origin());
        let started = std::time::Instant::now();
        let read =
            tokio::time::timeout(Duration::from_secs(2), stream_once(&*provider, &dialect, None)).await;
        assert!(read.is_ok_and(|read| read > 0), "{}: the stream did not end", dialect.path);
        assert!(started.elapsed() < Duration::from_millis(500), "{}: {:?}", dialect.path, started.elapsed());
    }
}

#[tokio::test]
async fn a_caller_that_goes_away_mid_stream_closes_the_upstream_call() {
    for dialect in every_dialect() {
        let upstream = upstream(&dialect, true).await;
        let provider = provider(dialect.kind, &upstream.fake.origin());
        assert_eq!(stream_once(&*provider, &dialect, Some(1)).await, 1);
        // The stream was dropped after one chunk: the server sees its body dropped.
        let started = std::time::Instant::now();
        while upstream.cut.load(Ordering::SeqCst) == 0 {
            let name = dialect.path;
            assert!(started.elapsed() < Duration::from_secs(2), "{name}: the upstream call was not closed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
