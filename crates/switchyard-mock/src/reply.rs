//! What the dialects render: the kinds of answer and of failure, and the response plumbing they
//! share (JSON bodies, SSE scripts, truncation).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

use crate::body::{Ending, MockBody, Part};

/// The text of every normal answer is this prefix followed by the requested model.
pub(crate) const ANSWER_PREFIX: &str = "mock answer from ";
/// The tool every `tools` answer calls.
pub(crate) const TOOL_NAME: &str = "get_weather";
/// The arguments of that call, as a JSON text.
pub(crate) const TOOL_ARGUMENTS: &str = r#"{"city":"Paris"}"#;
/// The custom tool every `custom` answer calls, and its free-form input.
pub(crate) const CUSTOM_TOOL: &str = "code_exec";
pub(crate) const CUSTOM_INPUT: &str = "print(\"hello\")\nprint(42)";
/// Prompt tokens reported in every usage block; fixed so tests can assert them.
pub(crate) const PROMPT_TOKENS: u32 = 10;

/// The kind of successful answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    Text,
    Tools,
    /// A call of a `custom` tool (GPT-5's free-form tools): OpenAI's chat dialect only; the
    /// others answer it as `Tools`.
    Custom,
    Filter,
    /// The model declines in words: OpenAI's `refusal`, Anthropic's text.
    Refuse,
    /// The model reasons, then answers the text of `Text`: a signed thinking block (Anthropic),
    /// `reasoning_content` (OpenAI-compatible reasoning servers).
    Think,
}

/// What the model reasons (`think`).
pub(crate) const THOUGHT: &str = "The user wants the mock answer.";
/// The signature of that reasoning (Anthropic's thinking blocks carry one).
pub(crate) const THOUGHT_SIGNATURE: &str = "EqQBCkYIBxgCKkBmocksignature";

/// What the model says when it declines (`refuse`).
pub(crate) const REFUSAL: &str = "I'm sorry, I can't help with that.";

/// How a successful answer is delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Content pieces: text or tool-argument fragments. Also the completion token count.
    pub(crate) pieces: u32,
    /// Pause between consecutive pieces of a stream.
    pub(crate) gap: Duration,
    /// Send only this many pieces, then drop the connection.
    pub(crate) cut: Option<u32>,
}

/// A failure rendered in the request's dialect.
#[derive(Debug)]
pub(crate) enum Fault<'a> {
    /// The canned error for this status.
    Status(u16),
    /// 429 with `retry-after` set to these seconds.
    RateLimit(&'a str),
    /// Out of quota (OpenAI) or credit (Anthropic).
    Quota,
    /// Bad API key.
    Auth,
    /// Prompt longer than the context window.
    Context,
    /// The mock itself rejects the request (bad scenario, bad JSON, body too large).
    Invalid { status: u16, message: String },
}

/// A streamed answer before it is scripted: the events before the first piece, one event per
/// piece, and the events after the last piece.
pub(crate) struct Events {
    pub(crate) head: Vec<Bytes>,
    pub(crate) pieces: Vec<Bytes>,
    pub(crate) tail: Vec<Bytes>,
}

/// The status as a `StatusCode`; scenarios only allow 400..=599, which are all valid.
pub(crate) fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A JSON response with an exact `content-length`.
pub(crate) fn json(status: StatusCode, body: String) -> Response<MockBody> {
    let mut response = Response::new(MockBody::full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An SSE response playing `events`: pieces separated by `gap`, and with `cut` only the head and
/// the first `cut` pieces followed by a dropped connection.
pub(crate) fn sse(events: Events, shape: &Shape) -> Response<MockBody> {
    let Events { head, pieces, tail } = events;
    let sent = shape.cut.map_or(pieces.len(), |n| (n as usize).min(pieces.len()));
    let mut parts = VecDeque::with_capacity(head.len() + 2 * sent + tail.len());
    parts.extend(head.into_iter().map(Part::Data));
    for (i, piece) in pieces.into_iter().take(sent).enumerate() {
        if i > 0 && !shape.gap.is_zero() {
            parts.push_back(Part::Pause(shape.gap));
        }
        parts.push_back(Part::Data(piece));
    }
    let ending = if shape.cut.is_some() {
        Ending::Cut
    } else {
        parts.extend(tail.into_iter().map(Part::Data));
        Ending::Clean
    };
    let mut response = Response::new(MockBody::script(parts, ending));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Turns a whole JSON answer into one that announces its full length but sends only the first
/// half before dropping the connection: the non-streamed form of `cut`.
pub(crate) fn truncate(response: Response<MockBody>) -> Response<MockBody> {
    let (mut parts, body) = response.into_parts();
    let Some(bytes) = body.into_full() else {
        return Response::from_parts(parts, MockBody::script(VecDeque::new(), Ending::Cut));
    };
    parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    let half = bytes.slice(..bytes.len() / 2);
    Response::from_parts(parts, MockBody::script(VecDeque::from([Part::Data(half)]), Ending::Cut))
}

/// Adds a header whose value the mock formatted itself; a value that is not a valid header
/// (impossible for the digits and timestamps passed here) is skipped rather than panicking.
pub(crate) fn add_header(response: &mut Response<MockBody>, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(HeaderName::from_static(name), value);
    }
}

/// Formats one Anthropic-style SSE event.
pub(crate) fn named_event(name: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
