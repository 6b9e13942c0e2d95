//! The Anthropic Messages dialect: answers, the named SSE event sequence and error bodies as
//! docs/wire-formats.md §2 describes them.

use std::fmt::Write as _;

use bytes::Bytes;
use hyper::{Response, StatusCode};

use crate::body::MockBody;
use crate::reply::{
    self, Answer, Content, Events, Fault, NO_PREFILL, PROMPT_TOKENS, TOOL_ARGUMENTS, TOOL_NAME, named_event,
};
use crate::wire::{next_id, push_json_escaped, push_json_str, rfc3339, split_even, unix_now};

/// A stream's unreadable event (`badevent`): a text delta cut off mid-object.
const UNREADABLE: &[u8] =
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\n\n";

/// A stalled stream's keep-alive (`keepalive`): a text delta that adds nothing.
const EMPTY: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n";

/// A Messages answer, streamed when `stream` is set.
pub(crate) fn answer(answer: &Answer<'_>, stream: bool) -> Response<MockBody> {
    let id = next_id();
    let mut response = if stream {
        reply::sse(events(answer, id), &answer.shape)
    } else {
        reply::json(StatusCode::OK, message(answer, id))
    };
    reply::add_header(&mut response, "request-id", &format!("req_mock{id}"));
    response
}

fn stop_reason(content: Content) -> &'static str {
    match content {
        Content::Text => "end_turn",
        Content::Tools | Content::Custom => "tool_use",
        Content::Filter => "refusal",
        Content::Refuse | Content::Think => "end_turn",
    }
}

fn message(answer: &Answer<'_>, id: u64) -> String {
    let Answer { content, model, .. } = *answer;
    let mut s = String::with_capacity(512 + 2 * model.len());
    let _ = write!(s, r#"{{"id":"msg_mock{id}","type":"message","role":"assistant","model":"#);
    push_json_str(&mut s, model);
    s.push_str(r#","content":["#);
    match content {
        Content::Text | Content::Think => {
            if content == Content::Think {
                s.push_str(r#"{"type":"thinking","thinking":"#);
                push_json_str(&mut s, crate::reply::THOUGHT);
                s.push_str(r#","signature":"#);
                push_json_str(&mut s, crate::reply::THOUGHT_SIGNATURE);
                s.push_str("},");
            }
            s.push_str(r#"{"type":"text","text":""#);
            for piece in answer.said.pieces() {
                push_json_escaped(&mut s, piece);
            }
            s.push_str(r#""}"#);
        }
        Content::Tools | Content::Custom => {
            let _ = write!(
                s,
                r#"{{"type":"tool_use","id":"toolu_mock{id}","name":"{TOOL_NAME}","input":{TOOL_ARGUMENTS}}}"#
            );
        }
        Content::Filter => {}
        Content::Refuse => {
            s.push_str(r#"{"type":"text","text":"#);
            push_json_str(&mut s, crate::reply::REFUSAL);
            s.push('}');
        }
    }
    let _ = write!(
        s,
        r#"],"stop_reason":"{}","stop_sequence":null,"usage":{{"input_tokens":{PROMPT_TOKENS},"output_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"service_tier":"standard"}}}}"#,
        stop_reason(content),
        answer.tokens()
    );
    s
}

fn events(answer: &Answer<'_>, id: u64) -> Events {
    let Answer { content, model, ref shape, .. } = *answer;
    let mut start = format!(
        r#"{{"type":"message_start","message":{{"id":"msg_mock{id}","type":"message","role":"assistant","content":[],"model":"#
    );
    push_json_str(&mut start, model);
    let _ = write!(
        start,
        r#","stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{PROMPT_TOKENS},"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}}}}"#
    );
    let mut head = vec![named_event("message_start", &start)];

    // With thinking, its block is index 0 and whole before the answer's block, index 1.
    let index = u32::from(content == Content::Think);
    if content == Content::Think {
        head.extend(thinking_events());
    }
    let (block, pieces) = match content {
        Content::Text | Content::Think => {
            let said = answer.said.pieces().iter().map(String::as_str);
            let pieces = delta_events(said, index, "text_delta", "text");
            (Some(r#"{"type":"text","text":""}"#.to_owned()), pieces)
        }
        Content::Tools | Content::Custom => {
            let block =
                format!(r#"{{"type":"tool_use","id":"toolu_mock{id}","name":"{TOOL_NAME}","input":{{}}}}"#);
            let pieces = split_even(TOOL_ARGUMENTS, shape.pieces);
            (Some(block), delta_events(pieces, 0, "input_json_delta", "partial_json"))
        }
        Content::Filter => (None, Vec::new()),
        Content::Refuse => {
            let pieces =
                delta_events(split_even(crate::reply::REFUSAL, shape.pieces), 0, "text_delta", "text");
            (Some(r#"{"type":"text","text":""}"#.to_owned()), pieces)
        }
    };
    if let Some(block) = &block {
        head.push(named_event(
            "content_block_start",
            &format!(r#"{{"type":"content_block_start","index":{index},"content_block":{block}}}"#),
        ));
    }
    head.push(named_event("ping", r#"{"type": "ping"}"#));

    let mut tail = Vec::with_capacity(3);
    if block.is_some() {
        tail.push(named_event(
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        ));
    }
    tail.push(named_event(
        "message_delta",
        &format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
            stop_reason(content),
            answer.tokens()
        ),
    ));
    let end = Some(named_event("message_stop", r#"{"type":"message_stop"}"#));
    let extra = answer.extra_event(stream_error, (UNREADABLE, EMPTY));
    Events { head, pieces, tail, end, extra }
}

/// The in-band error a stream sends when it fails after its 200 (`errevent`): an `error`
/// event, `overloaded_error`, as Anthropic sends one.
fn stream_error() -> Bytes {
    named_event("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
}

/// A whole thinking block, index 0, as Anthropic streams one: its start, the thinking, the
/// signature, its stop.
fn thinking_events() -> Vec<Bytes> {
    let mut thinking = String::from(
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"#,
    );
    push_json_str(&mut thinking, crate::reply::THOUGHT);
    thinking.push_str("}}");
    let mut signature = String::from(
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"#,
    );
    push_json_str(&mut signature, crate::reply::THOUGHT_SIGNATURE);
    signature.push_str("}}");
    vec![
        named_event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        ),
        named_event("content_block_delta", &thinking),
        named_event("content_block_delta", &signature),
        named_event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
    ]
}

/// One `content_block_delta` event of block `index` per piece, in the delta type and field
/// given.
fn delta_events<'p>(
    pieces: impl IntoIterator<Item = &'p str>,
    index: u32,
    delta_type: &str,
    field: &str,
) -> Vec<Bytes> {
    pieces
        .into_iter()
        .map(|piece| {
            let mut data = format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{delta_type}","{field}":"#
            );
            push_json_str(&mut data, piece);
            data.push_str("}}");
            named_event("content_block_delta", &data)
        })
        .collect()
}

/// An Anthropic error response: `{"type":"error","error":{"type","message"},"request_id"}` with
/// the status and headers the real API uses for that failure.
pub(crate) fn fault(fault: &Fault<'_>) -> Response<MockBody> {
    let (status, kind, message): (u16, &str, String) = match fault {
        Fault::Status(code) => {
            let (kind, message) = status_error(*code);
            (*code, kind, message.to_owned())
        }
        Fault::RateLimit(_) => (
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests per minute. \
             For details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the \
             response headers for current usage. Please reduce the prompt length or the maximum tokens \
             requested, or try again later."
                .to_owned(),
        ),
        Fault::Quota => (
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to \
             upgrade or purchase credits."
                .to_owned(),
        ),
        Fault::Auth => (401, "authentication_error", "invalid x-api-key".to_owned()),
        Fault::Context => {
            (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum".to_owned())
        }
        Fault::ModelRateLimit(model) => (
            429,
            "rate_limit_error",
            format!(
                "This request would exceed the rate limit for your organization of 50 requests per minute \
                 for {model}. For details, refer to: https://docs.anthropic.com/en/api/rate-limits."
            ),
        ),
        Fault::NoPrefill => (400, "invalid_request_error", NO_PREFILL.to_owned()),
        Fault::Invalid { status, message } => (*status, status_error(*status).0, message.clone()),
    };

    let request_id = format!("req_mock{}", next_id());
    let mut body = String::with_capacity(message.len() + 128);
    body.push_str(r#"{"type":"error","error":{"type":"#);
    push_json_str(&mut body, kind);
    body.push_str(r#","message":"#);
    push_json_str(&mut body, &message);
    let _ = write!(body, r#"}},"request_id":"{request_id}"}}"#);

    let mut response = reply::json(reply::status(status), body);
    reply::add_header(&mut response, "request-id", &request_id);
    if let Fault::RateLimit(seconds) = fault {
        // Anthropic resets are absolute timestamps; round the wait up to whole seconds.
        let wait = seconds.parse::<f64>().map_or(0, |s| s.ceil() as u64);
        let reset = rfc3339(unix_now() + wait);
        for (name, value) in [
            ("retry-after", *seconds),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", &reset),
            ("anthropic-ratelimit-tokens-limit", "100000"),
            ("anthropic-ratelimit-tokens-remaining", "99990"),
            ("anthropic-ratelimit-tokens-reset", &reset),
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "79990"),
            ("anthropic-ratelimit-input-tokens-reset", &reset),
            ("anthropic-ratelimit-output-tokens-limit", "20000"),
            ("anthropic-ratelimit-output-tokens-remaining", "20000"),
            ("anthropic-ratelimit-output-tokens-reset", &reset),
        ] {
            reply::add_header(&mut response, name, value);
        }
    }
    response
}

/// The error type and canned message Anthropic uses for a status.
fn status_error(code: u16) -> (&'static str, &'static str) {
    match code {
        401 => ("authentication_error", "invalid x-api-key"),
        402 => ("billing_error", "Your account has a billing problem."),
        403 => ("permission_error", "Your API key does not have permission to use the specified resource."),
        404 => ("not_found_error", "The requested resource could not be found."),
        413 => ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
        429 => ("rate_limit_error", "Number of requests has exceeded your rate limit."),
        504 => ("timeout_error", "Request timed out."),
        529 => ("overloaded_error", "Overloaded"),
        code if code >= 500 => ("api_error", "Internal server error"),
        _ => ("invalid_request_error", "Invalid request."),
    }
}
