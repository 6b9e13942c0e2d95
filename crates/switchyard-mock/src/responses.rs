//! OpenAI's Responses API (`/v1/responses`): the response object and its numbered stream
//! events, for the same kinds of answer as the other dialects. Errors are OpenAI's.

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use crate::body::MockBody;
use crate::reply::{self, Answer, Content, Events, PROMPT_TOKENS, REFUSAL, TOOL_ARGUMENTS, TOOL_NAME};
use crate::wire::{next_id, split_even, unix_now};

/// A stream's unreadable event (`badevent`): a text delta cut off mid-object.
const UNREADABLE: &[u8] =
    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\n\n";

/// A stalled stream's keep-alive (`keepalive`): a text delta that adds nothing.
const EMPTY: &[u8] = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_mock\",\"output_index\":0,\"content_index\":0,\"delta\":\"\",\"logprobs\":[]}\n\n";

/// A Responses answer, streamed when `stream` is set.
pub(crate) fn answer(answer: &Answer<'_>, stream: bool) -> Response<MockBody> {
    let id = next_id();
    let mut response = if stream {
        reply::sse(events(answer, id), &answer.shape)
    } else {
        reply::json(StatusCode::OK, object(answer, id, true).to_string())
    };
    reply::add_header(&mut response, "x-request-id", &format!("req_mock{id}"));
    response
}

/// The one output item of `content` (saying `text`), whole; `None` for a filtered answer.
fn item(content: Content, text: &str, id: u64) -> Option<Value> {
    let message = |part: Value| json!({"type": "message", "id": format!("msg_mock{id}"), "status": "completed", "role": "assistant", "content": [part]});
    match content {
        Content::Text | Content::Think => {
            Some(message(json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})))
        }
        Content::Refuse => Some(message(json!({"type": "refusal", "refusal": REFUSAL}))),
        Content::Tools | Content::Custom => Some(
            json!({"type": "function_call", "id": format!("fc_mock{id}"), "call_id": format!("call_mock{id}"),
            "name": TOOL_NAME, "arguments": TOOL_ARGUMENTS, "status": "completed"}),
        ),
        Content::Filter => None,
    }
}

/// The response object: in progress (no output yet) or done.
fn object(answer: &Answer<'_>, id: u64, done: bool) -> Value {
    let Answer { content, model, .. } = *answer;
    let filtered = content == Content::Filter;
    let status = match (done, filtered) {
        (false, _) => "in_progress",
        (true, true) => "incomplete",
        (true, false) => "completed",
    };
    let output: Vec<Value> =
        if done { item(content, &answer.said.text(), id).into_iter().collect() } else { Vec::new() };
    let usage = done.then(|| {
        json!({"input_tokens": PROMPT_TOKENS, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": answer.tokens(), "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": PROMPT_TOKENS + answer.tokens()})
    });
    json!({
        "id": format!("resp_mock{id}"), "object": "response", "created_at": unix_now(), "status": status,
        "error": null, "incomplete_details": if done && filtered { json!({"reason": "content_filter"}) } else { Value::Null },
        "instructions": null, "max_output_tokens": null, "metadata": {}, "model": model, "output": output,
        "parallel_tool_calls": true, "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
        "store": false, "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": null,
    })
}

/// Numbers a stream's events in order (`sequence_number`).
struct Numbered(u64);

impl Numbered {
    /// The event `kind` with `data`, numbered next.
    fn event(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.0);
        self.0 += 1;
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    }
}

/// The in-band error a stream sends when it fails after its start (`errevent`).
fn stream_error() -> Value {
    json!({"code": "server_error", "message": "The server had an error while processing your request.", "param": null})
}

/// The numbered events of a streamed answer.
fn events(answer: &Answer<'_>, id: u64) -> Events {
    let Answer { content, ref shape, .. } = *answer;
    let mut numbered = Numbered(0);
    let mut event = |kind: &str, data: Value| numbered.event(kind, data);
    let opened = object(answer, id, false);
    let mut head = vec![
        event("response.created", json!({"response": opened})),
        event("response.in_progress", json!({"response": opened})),
    ];
    let text = answer.said.text();
    let done = item(content, &text, id);
    let item_id = format!("msg_mock{id}");
    let (mut pieces, mut tail) = (Vec::new(), Vec::new());
    match content {
        Content::Text | Content::Refuse | Content::Think => {
            let refuse = content == Content::Refuse;
            let item_opened = json!({"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []});
            head.push(event("response.output_item.added", json!({"output_index": 0, "item": item_opened})));
            let (part, whole) = if refuse {
                (json!({"type": "refusal", "refusal": ""}), REFUSAL.to_owned())
            } else {
                (json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []}), text)
            };
            let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
            let with = |extra: Value| {
                let mut data = at.clone();
                if let (Value::Object(data), Value::Object(extra)) = (&mut data, extra) {
                    data.extend(extra);
                }
                data
            };
            head.push(event("response.content_part.added", with(json!({"part": part}))));
            let split: Vec<&str> = if refuse {
                split_even(&whole, shape.pieces)
            } else {
                answer.said.pieces().iter().map(String::as_str).collect()
            };
            for piece in split {
                pieces.push(if refuse {
                    event("response.refusal.delta", with(json!({"delta": piece})))
                } else {
                    event("response.output_text.delta", with(json!({"delta": piece, "logprobs": []})))
                });
            }
            let done_item = done.clone().unwrap_or(Value::Null);
            tail.push(if refuse {
                event("response.refusal.done", with(json!({"refusal": whole})))
            } else {
                event("response.output_text.done", with(json!({"text": whole, "logprobs": []})))
            });
            tail.push(event("response.content_part.done", with(json!({"part": done_item["content"][0]}))));
            tail.push(event("response.output_item.done", json!({"output_index": 0, "item": done_item})));
        }
        Content::Tools | Content::Custom => {
            let call_id = format!("call_mock{id}");
            let fc = format!("fc_mock{id}");
            let item_opened = json!({"type": "function_call", "id": fc, "call_id": call_id, "name": TOOL_NAME, "arguments": "", "status": "in_progress"});
            head.push(event("response.output_item.added", json!({"output_index": 0, "item": item_opened})));
            for piece in split_even(TOOL_ARGUMENTS, shape.pieces) {
                pieces.push(event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": fc, "output_index": 0, "delta": piece}),
                ));
            }
            tail.push(event(
                "response.function_call_arguments.done",
                json!({"item_id": fc, "output_index": 0, "name": TOOL_NAME, "arguments": TOOL_ARGUMENTS}),
            ));
            tail.push(event("response.output_item.done", json!({"output_index": 0, "item": done})));
        }
        Content::Filter => {}
    }
    let finished = object(answer, id, true);
    let last = if content == Content::Filter { "response.incomplete" } else { "response.completed" };
    let extra = answer.extra_event(|| event("error", stream_error()), (UNREADABLE, EMPTY));
    // The finish is also the end: `noterm` leaves it out (every item done, the response never
    // said complete).
    Events { head, pieces, tail, end: Some(event(last, json!({"response": finished}))), extra }
}
