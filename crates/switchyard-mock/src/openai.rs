//! The OpenAI Chat Completions dialect: answers, SSE chunks and error bodies as
//! docs/wire-formats.md §1 describes them.

use std::fmt::Write as _;

use bytes::Bytes;
use hyper::Response;

use crate::body::MockBody;
use crate::reply::NO_PREFILL;
use crate::reply::{
    self, Answer, CUSTOM_INPUT, CUSTOM_TOOL, Content, Events, Fault, PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_NAME,
};
use crate::text::Said;
use crate::wire::{next_id, push_json_escaped, push_json_str, split_even, unix_now};

/// The data of a stream's unreadable event (`badevent`): a chunk cut off mid-object.
const UNREADABLE: &[u8] =
    b"data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"choices\":[{\n\n";

/// A stalled stream's keep-alive (`keepalive`): a chunk whose delta adds nothing.
const EMPTY: &[u8] = b"data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":null}]}\n\n";

/// A chat completion answer, streamed when `stream` is set.
pub(crate) fn answer(answer: &Answer<'_>, stream: bool, include_usage: bool) -> Response<MockBody> {
    let id = next_id();
    let created = unix_now();
    let mut response = if stream {
        reply::sse(events(answer, include_usage, id, created), &answer.shape)
    } else {
        reply::json(hyper::StatusCode::OK, completion(answer, id, created))
    };
    reply::add_header(&mut response, "x-request-id", &format!("req_mock{id}"));
    response
}

fn completion(answer: &Answer<'_>, id: u64, created: u64) -> String {
    let Answer { content, model, .. } = *answer;
    let mut s = String::with_capacity(512 + 2 * model.len());
    let _ =
        write!(s, r#"{{"id":"chatcmpl-mock{id}","object":"chat.completion","created":{created},"model":"#);
    push_json_str(&mut s, model);
    s.push_str(r#","choices":[{"index":0,"message":{"role":"assistant","content":"#);
    let finish = match content {
        Content::Text | Content::Think => {
            s.push('"');
            for piece in answer.said.pieces() {
                push_json_escaped(&mut s, piece);
            }
            s.push('"');
            "stop"
        }
        Content::Tools => {
            s.push_str(r#"null,"tool_calls":[{"id":"call_mock"#);
            let _ = write!(s, r#"{id}","type":"function","function":{{"name":"{TOOL_NAME}","arguments":"#);
            push_json_str(&mut s, TOOL_ARGUMENTS);
            s.push_str("}}]");
            "tool_calls"
        }
        Content::Custom => {
            s.push_str(r#"null,"tool_calls":[{"id":"call_mock"#);
            let _ = write!(s, r#"{id}","type":"custom","custom":{{"name":"{CUSTOM_TOOL}","input":"#);
            push_json_str(&mut s, CUSTOM_INPUT);
            s.push_str("}}]");
            "tool_calls"
        }
        Content::Filter => {
            s.push_str(r#""""#);
            "content_filter"
        }
        Content::Refuse => {
            s.push_str("null");
            "stop"
        }
    };
    if content == Content::Think {
        s.push_str(r#","reasoning_content":"#);
        push_json_str(&mut s, crate::reply::THOUGHT);
    }
    s.push_str(r#","refusal":"#);
    if matches!(content, Content::Refuse) {
        push_json_str(&mut s, crate::reply::REFUSAL);
    } else {
        s.push_str("null");
    }
    let _ = write!(s, r#","annotations":[]}},"logprobs":null,"finish_reason":"{finish}"}}],"usage":"#);
    push_usage(&mut s, answer.tokens());
    s.push_str(r#","service_tier":"default","system_fingerprint":"fp_mock"}"#);
    s
}

fn push_usage(s: &mut String, completion: u32) {
    let _ = write!(
        s,
        r#"{{"prompt_tokens":{PROMPT_TOKENS},"completion_tokens":{completion},"total_tokens":{}}}"#,
        PROMPT_TOKENS + completion
    );
}

/// Formats chunks that share one id, model and creation time.
struct Chunker {
    /// `data: {"id":…,"system_fingerprint":"fp_mock"` — everything before `choices`.
    head: String,
    /// Whether every chunk carries `"usage":null` (OpenAI does so under `include_usage`).
    usage_null: bool,
}

impl Chunker {
    /// The chunker of one streamed answer: `id` by `model`, created at `created`.
    fn new(model: &str, include_usage: bool, id: u64, created: u64) -> Self {
        let mut head = format!(
            r#"data: {{"id":"chatcmpl-mock{id}","object":"chat.completion.chunk","created":{created},"model":"#
        );
        push_json_str(&mut head, model);
        head.push_str(r#","system_fingerprint":"fp_mock""#);
        Self { head, usage_null: include_usage }
    }

    /// One chunk of `delta`, with `finish` as its finish reason.
    fn chunk(&self, delta: &str, finish: Option<&str>) -> Bytes {
        let mut s = String::with_capacity(self.head.len() + delta.len() + 96);
        s.push_str(&self.head);
        s.push_str(r#","choices":[{"index":0,"delta":"#);
        s.push_str(delta);
        s.push_str(r#","logprobs":null,"finish_reason":"#);
        match finish {
            Some(reason) => push_json_str(&mut s, reason),
            None => s.push_str("null"),
        }
        s.push_str("}]");
        if self.usage_null {
            s.push_str(r#","usage":null"#);
        }
        s.push_str("}\n\n");
        Bytes::from(s)
    }

    /// The closing usage chunk: no choices, the token counts.
    fn usage(&self, completion: u32) -> Bytes {
        let mut s = self.head.clone();
        s.push_str(r#","choices":[],"usage":"#);
        push_usage(&mut s, completion);
        s.push_str("}\n\n");
        Bytes::from(s)
    }

    /// `text` in `pieces` chunks, each a delta of the one string member `field`.
    fn deltas(&self, field: &str, text: &str, pieces: u32) -> Vec<Bytes> {
        self.deltas_of(field, split_even(text, pieces))
    }

    /// One chunk per piece, each a delta of the one string member `field`.
    fn deltas_of<'p>(&self, field: &str, pieces: impl IntoIterator<Item = &'p str>) -> Vec<Bytes> {
        pieces
            .into_iter()
            .map(|piece| {
                let mut delta = format!(r#"{{"{field}":"#);
                push_json_str(&mut delta, piece);
                delta.push('}');
                self.chunk(&delta, None)
            })
            .collect()
    }

    /// `text` in `pieces` chunks, each a delta of the first tool call's `kind.member`
    /// (`function.arguments`, `custom.input`).
    fn tool_call_deltas(&self, kind: &str, member: &str, text: &str, pieces: u32) -> Vec<Bytes> {
        split_even(text, pieces)
            .into_iter()
            .map(|piece| {
                let mut delta = format!(r#"{{"tool_calls":[{{"index":0,"{kind}":{{"{member}":"#);
                push_json_str(&mut delta, piece);
                delta.push_str("}}]}");
                self.chunk(&delta, None)
            })
            .collect()
    }

    /// What `content` streams as: the chunks before the first piece, one chunk per piece, and
    /// the finish reason.
    fn content(
        &self,
        content: Content,
        said: &Said,
        pieces: u32,
        id: u64,
    ) -> (Vec<Bytes>, Vec<Bytes>, &'static str) {
        let text = || self.deltas_of("content", said.pieces().iter().map(String::as_str));
        match content {
            Content::Text => (
                vec![self.chunk(r#"{"role":"assistant","content":"","refusal":null}"#, None)],
                text(),
                "stop",
            ),
            Content::Think => {
                // As DeepSeek streams it: the reasoning first, in `reasoning_content`, then the text.
                let first = r#"{"role":"assistant","content":null,"reasoning_content":""}"#;
                let mut head = vec![self.chunk(first, None)];
                head.extend(self.deltas("reasoning_content", crate::reply::THOUGHT, 1));
                (head, text(), "stop")
            }
            Content::Tools => {
                let first = format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{{"index":0,"id":"call_mock{id}","type":"function","function":{{"name":"{TOOL_NAME}","arguments":""}}}}]}}"#
                );
                let pieces = self.tool_call_deltas("function", "arguments", TOOL_ARGUMENTS, pieces);
                (vec![self.chunk(&first, None)], pieces, "tool_calls")
            }
            Content::Custom => {
                let first = format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{{"index":0,"id":"call_mock{id}","type":"custom","custom":{{"name":"{CUSTOM_TOOL}","input":""}}}}]}}"#
                );
                let pieces = self.tool_call_deltas("custom", "input", CUSTOM_INPUT, pieces);
                (vec![self.chunk(&first, None)], pieces, "tool_calls")
            }
            Content::Filter => {
                (vec![self.chunk(r#"{"role":"assistant","content":""}"#, None)], Vec::new(), "content_filter")
            }
            Content::Refuse => {
                let pieces = self.deltas("refusal", crate::reply::REFUSAL, pieces);
                (
                    vec![self.chunk(r#"{"role":"assistant","content":null,"refusal":""}"#, None)],
                    pieces,
                    "stop",
                )
            }
        }
    }

    /// The chunks after the last piece: the finish and the usage when asked for.
    fn tail(&self, finish: &str, include_usage: bool, completion: u32) -> Vec<Bytes> {
        let mut tail = vec![self.chunk("{}", Some(finish))];
        if include_usage {
            tail.push(self.usage(completion));
        }
        tail
    }
}

/// A chat completion streamed: its chunks before, of and after the pieces, then `[DONE]`.
fn events(answer: &Answer<'_>, include_usage: bool, id: u64, created: u64) -> Events {
    let chunker = Chunker::new(answer.model, include_usage, id, created);
    let (head, pieces, finish) = chunker.content(answer.content, &answer.said, answer.shape.pieces, id);
    let tail = chunker.tail(finish, include_usage, answer.tokens());
    let end = Some(Bytes::from_static(b"data: [DONE]\n\n"));
    let extra = answer.extra_event(stream_error, (UNREADABLE, EMPTY));
    Events { head, pieces, tail, end, extra }
}

/// The in-band error a stream sends when it fails after its 200 (`errevent`): an `error`
/// object in a `data:` line, as OpenAI sends one.
fn stream_error() -> Bytes {
    let error = status_error(500);
    Bytes::from(format!("data: {}\n\n", error.json()))
}

/// An OpenAI error body's members, with its status.
struct ErrorBody {
    status: u16,
    /// `type`.
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
    message: String,
}

impl ErrorBody {
    /// An error with no `param`.
    fn new(status: u16, kind: &'static str, code: Option<&'static str>, message: String) -> Self {
        Self { status, kind, code, param: None, message }
    }

    /// `{"error":{"message","type","param","code"}}`.
    fn json(&self) -> String {
        let mut body = String::with_capacity(self.message.len() + 128);
        body.push_str(r#"{"error":{"message":"#);
        push_json_str(&mut body, &self.message);
        body.push_str(r#","type":"#);
        push_json_str(&mut body, self.kind);
        body.push_str(r#","param":"#);
        push_opt(&mut body, self.param);
        body.push_str(r#","code":"#);
        push_opt(&mut body, self.code);
        body.push_str("}}");
        body
    }
}

/// An OpenAI error response: `{"error":{"message","type","param","code"}}` with the status and
/// headers the real API uses for that failure.
pub(crate) fn fault(fault: &Fault<'_>) -> Response<MockBody> {
    let error = error_body(fault);
    let mut response = reply::json(reply::status(error.status), error.json());
    reply::add_header(&mut response, "x-request-id", &format!("req_mock{}", next_id()));
    if let Fault::RateLimit(seconds) = fault {
        add_rate_limit_headers(&mut response, seconds);
    }
    response
}

/// The status and body the real API answers `fault` with.
fn error_body(fault: &Fault<'_>) -> ErrorBody {
    match fault {
        Fault::Status(401) | Fault::Auth => ErrorBody::new(
            401,
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided: sk-mock***. You can find your API key at \
             https://platform.openai.com/account/api-keys."
                .to_owned(),
        ),
        Fault::Status(429) => ErrorBody::new(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached in organization org-mock on requests per min (RPM): Limit 60, Used 60, \
             Requested 1. Visit https://platform.openai.com/account/rate-limits to learn more."
                .to_owned(),
        ),
        Fault::Status(code) => status_error(*code),
        Fault::RateLimit(seconds) => ErrorBody::new(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            format!(
                "Rate limit reached in organization org-mock on requests per min (RPM): Limit 60, Used 60, \
                 Requested 1. Please try again in {seconds}s. Visit \
                 https://platform.openai.com/account/rate-limits to learn more."
            ),
        ),
        Fault::Quota => ErrorBody::new(
            429,
            "insufficient_quota",
            Some("insufficient_quota"),
            "You exceeded your current quota, please check your plan and billing details. For more \
             information on this error, read the docs: \
             https://platform.openai.com/docs/guides/error-codes/api-errors."
                .to_owned(),
        ),
        Fault::Context => ErrorBody {
            param: Some("messages"),
            ..ErrorBody::new(
                400,
                "invalid_request_error",
                Some("context_length_exceeded"),
                "This model's maximum context length is 128000 tokens. However, your messages resulted in \
                 210000 tokens. Please reduce the length of the messages."
                    .to_owned(),
            )
        },
        Fault::ModelRateLimit(model) => ErrorBody::new(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            format!(
                "Rate limit reached for {model} in organization org-mock on requests per min (RPM): Limit 60, \
                 Used 60, Requested 1. Visit https://platform.openai.com/account/rate-limits to learn more."
            ),
        ),
        Fault::NoPrefill => ErrorBody {
            param: Some("messages"),
            ..ErrorBody::new(400, "invalid_request_error", None, NO_PREFILL.to_owned())
        },
        Fault::Invalid { status, message } => {
            let kind = if *status >= 500 { "server_error" } else { "invalid_request_error" };
            ErrorBody::new(*status, kind, None, message.clone())
        }
    }
}

/// The headers of a 429 that asks to wait `seconds`: `retry-after` and the rate-limit state.
fn add_rate_limit_headers(response: &mut Response<MockBody>, seconds: &str) {
    let reset = format!("{seconds}s");
    for (name, value) in [
        ("retry-after", seconds),
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", &reset),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-tokens", "149990"),
        ("x-ratelimit-reset-tokens", &reset),
    ] {
        reply::add_header(response, name, value);
    }
}

fn push_opt(s: &mut String, value: Option<&str>) {
    match value {
        Some(value) => push_json_str(s, value),
        None => s.push_str("null"),
    }
}

/// The canned body for a bare `status=NNN`.
fn status_error(code: u16) -> ErrorBody {
    let (kind, error_code, message) = match code {
        403 => ("invalid_request_error", None, "You are not allowed to access this resource."),
        404 => (
            "invalid_request_error",
            Some("model_not_found"),
            "The model does not exist or you do not have access to it.",
        ),
        500 => {
            ("server_error", None, "The server had an error while processing your request. Sorry about that!")
        }
        502 => ("server_error", None, "Bad gateway."),
        503 => (
            "server_error",
            None,
            "That model is currently overloaded with other requests. You can retry your request, or \
             contact us through our help center at help.openai.com if the error persists.",
        ),
        code if code >= 500 => {
            ("server_error", None, "The server had an error while processing your request.")
        }
        _ => ("invalid_request_error", None, "Invalid request."),
    };
    ErrorBody::new(code, kind, error_code, message.to_owned())
}
