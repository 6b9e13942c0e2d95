//! What the dialects render: the kinds of answer and of failure, and the response plumbing they
//! share (JSON bodies, SSE scripts, truncation).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

pub(crate) use crate::body::Ending;
use crate::body::{MockBody, Part};
use crate::text::Said;

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

/// Why a model that takes no prefill (`noprefill`) refuses a request that ends with one.
pub(crate) const NO_PREFILL: &str =
    "This model does not support assistant message prefill. The conversation must end with a user message.";

/// What the model says when it declines (`refuse`).
pub(crate) const REFUSAL: &str = "I'm sorry, I can't help with that.";

/// How a successful answer is delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Content pieces of answers that are not text (tool-argument and refusal fragments); a
    /// text answer's pieces are its [`Said`]'s. Also the completion token
    /// count.
    pub(crate) pieces: u32,
    /// Pause between consecutive pieces of a stream.
    pub(crate) gap: Duration,
    /// How the stream misbehaves, if it does.
    pub(crate) fault: Option<StreamFault>,
}

/// A stream's misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFault {
    /// Only this many pieces, then the connection drops.
    Cut(u32),
    /// Only this many pieces, then nothing while the connection stays open.
    Stall(u32),
    /// Only this many pieces, then an empty delta every [`KEEPALIVE_EVERY`] while the
    /// connection stays open: a stalled server that keeps it alive.
    KeepAlive(u32),
    /// This many pieces, then the dialect's in-band error event, then the end of the body.
    ErrorEvent(u32),
    /// Every event but the terminator (`data: [DONE]`, `message_stop`), then the end of the body.
    Unterminated,
    /// Every event but the terminator, then nothing while the connection stays open.
    Held,
    /// One more event, not JSON, as the event at this position (1-based) of a whole stream.
    BadEvent(u32),
}

impl StreamFault {
    /// The pieces a stream sends before it breaks, when it breaks.
    fn breaks_after(self) -> Option<u32> {
        match self {
            StreamFault::Cut(n)
            | StreamFault::Stall(n)
            | StreamFault::KeepAlive(n)
            | StreamFault::ErrorEvent(n) => Some(n),
            StreamFault::Unterminated | StreamFault::Held | StreamFault::BadEvent(_) => None,
        }
    }
}

/// One successful answer to render: its kind, the model it is from, what its text says (for
/// `Text` and `Think`) and how it is delivered.
pub(crate) struct Answer<'a> {
    pub(crate) content: Content,
    pub(crate) model: &'a str,
    pub(crate) said: Said,
    pub(crate) shape: Shape,
}

impl Answer<'_> {
    /// Completion tokens: one per piece of the text or of the other content.
    pub(crate) fn tokens(&self) -> u32 {
        match self.content {
            Content::Text | Content::Think => self.said.tokens(),
            _ => self.shape.pieces,
        }
    }

    /// The extra event `fault` needs in a stream: `error` for an error event, an unreadable
    /// event for a bad one, an empty delta for a keep-alive.
    pub(crate) fn extra_event(
        &self,
        error: impl FnOnce() -> Bytes,
        (unreadable, empty): (&'static [u8], &'static [u8]),
    ) -> Option<Bytes> {
        match self.shape.fault {
            Some(StreamFault::ErrorEvent(_)) => Some(error()),
            Some(StreamFault::BadEvent(_)) => Some(Bytes::from_static(unreadable)),
            Some(StreamFault::KeepAlive(_)) => Some(Bytes::from_static(empty)),
            _ => None,
        }
    }
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
    /// 429 for this model, without `retry-after` or rate-limit headers.
    ModelRateLimit(&'a str),
    /// 400: the model does not take an assistant message last (a prefill).
    NoPrefill,
    /// The mock itself rejects the request (bad scenario, bad JSON, body too large).
    Invalid { status: u16, message: String },
}

/// A streamed answer before it is scripted: the events before the first piece, one event per
/// piece, the events after the last piece, and the terminator after those.
pub(crate) struct Events {
    pub(crate) head: Vec<Bytes>,
    pub(crate) pieces: Vec<Bytes>,
    pub(crate) tail: Vec<Bytes>,
    /// `data: [DONE]`, `message_stop`; none in a dialect whose last event is its finish.
    pub(crate) end: Option<Bytes>,
    /// The extra event a fault sends: the dialect's in-band error for
    /// [`StreamFault::ErrorEvent`], an unreadable event for [`StreamFault::BadEvent`].
    pub(crate) extra: Option<Bytes>,
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

/// An SSE response playing `events` as `shape` says: pieces separated by `gap`, and with a
/// fault the stream broken, unterminated or spoiled by one event.
pub(crate) fn sse(events: Events, shape: &Shape) -> Response<MockBody> {
    let Events { head, pieces, tail, end, extra } = events;
    let sent = shape
        .fault
        .and_then(StreamFault::breaks_after)
        .map_or(pieces.len(), |n| (n as usize).min(pieces.len()));
    let mut parts = VecDeque::with_capacity(head.len() + 2 * sent + tail.len() + 2);
    parts.extend(head.into_iter().map(Part::Data));
    for (i, piece) in pieces.into_iter().take(sent).enumerate() {
        if i > 0 && !shape.gap.is_zero() {
            parts.push_back(Part::Pause(shape.gap));
        }
        parts.push_back(Part::Data(piece));
    }
    let whole = |parts: &mut VecDeque<Part>, end: Option<Bytes>| {
        parts.extend(tail.into_iter().chain(end).map(Part::Data));
    };
    let ending = match shape.fault {
        None => {
            whole(&mut parts, end);
            Ending::Clean
        }
        Some(StreamFault::Cut(_)) => Ending::Cut,
        Some(StreamFault::Stall(_)) => Ending::Stall,
        Some(StreamFault::KeepAlive(_)) => {
            let mut response = sse_response(parts, Ending::Stall);
            if let Some(empty) = extra {
                response.body_mut().keep_alive(empty, KEEPALIVE_EVERY);
            }
            return response;
        }
        Some(StreamFault::ErrorEvent(_)) => {
            parts.extend(extra.map(Part::Data));
            Ending::Clean
        }
        Some(StreamFault::Unterminated) => {
            whole(&mut parts, None);
            Ending::Clean
        }
        Some(StreamFault::Held) => {
            whole(&mut parts, None);
            Ending::Stall
        }
        Some(StreamFault::BadEvent(position)) => {
            whole(&mut parts, end);
            insert_event(&mut parts, position, extra);
            Ending::Clean
        }
    };
    sse_response(parts, ending)
}

/// How often a `keepalive` stream sends its empty delta once it stalled.
pub(crate) const KEEPALIVE_EVERY: Duration = Duration::from_millis(200);

/// An SSE response that plays `parts`, then ends as `ending` says.
fn sse_response(parts: VecDeque<Part>, ending: Ending) -> Response<MockBody> {
    let mut response = Response::new(MockBody::script(parts, ending));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Puts `event` in `parts` as their `position`th event (1-based; last when there are fewer).
fn insert_event(parts: &mut VecDeque<Part>, position: u32, event: Option<Bytes>) {
    let Some(event) = event else { return };
    let mut seen = 0;
    let at = parts
        .iter()
        .position(|part| {
            let data = matches!(part, Part::Data(_));
            seen += u32::from(data);
            data && seen == position
        })
        .unwrap_or(parts.len());
    parts.insert(at, Part::Data(event));
}

/// Turns a whole JSON answer into one that announces its full length but sends only the first
/// half, then ends as `ending` says: dropped (`Cut`, the non-streamed form of `cut`) or held
/// open (`Stall`, of `stall`).
pub(crate) fn truncate(response: Response<MockBody>, ending: Ending) -> Response<MockBody> {
    let (mut parts, body) = response.into_parts();
    let Some(bytes) = body.into_full() else {
        return Response::from_parts(parts, MockBody::script(VecDeque::new(), ending));
    };
    parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    let half = bytes.slice(..bytes.len() / 2);
    Response::from_parts(parts, MockBody::script(VecDeque::from([Part::Data(half)]), ending))
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
