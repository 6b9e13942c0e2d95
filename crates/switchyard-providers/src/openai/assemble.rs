//! A Chat Completions answer written from the events of its stream, as the provider would have
//! written it whole: what a client of this dialect receives when its non-streamed request was
//! sent upstream as a stream. Every member the chunks carry is kept: text, refusal and
//! reasoning pieces joined, tool calls put together by their index, log-probabilities and
//! annotations appended, the usage with its details, and members Switchyard does not model
//! (`system_fingerprint`, `service_tier`, a vendor's own) as they came. Stream-only members
//! (`obfuscation`) are left out, and `object` says `chat.completion`.

use bytes::Bytes;
use serde_json::{Map, Value};
use switchyard::chat::Usage;

/// Members whose pieces are joined: the text a choice streams in fragments.
const JOINED: [&str; 6] = ["content", "refusal", "reasoning_content", "reasoning", "arguments", "input"];

/// Members a stream carries that a whole answer does not.
const STREAM_ONLY: [&str; 2] = ["obfuscation", "stream_options"];

/// The whole answer the `frames` (server-sent events, `data:` lines) stream, with `usage` when
/// no event told it (the gateway asked for it; the client did not); `None` when no frame is a
/// chunk.
pub fn answer_of_frames(frames: &[Bytes], usage: Option<&Usage>) -> Option<Bytes> {
    let mut answer = Map::new();
    let mut choices: Vec<Map<String, Value>> = Vec::new();
    for frame in frames {
        let Some(Value::Object(chunk)) = data_of(frame) else { continue };
        add_chunk(&mut answer, &mut choices, chunk);
    }
    if answer.is_empty() {
        return None;
    }
    answer.insert("object".to_owned(), Value::from("chat.completion"));
    choices.sort_by_key(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or_default());
    answer.insert("choices".to_owned(), Value::Array(choices.into_iter().map(Value::Object).collect()));
    if answer.get("usage").is_none_or(Value::is_null)
        && let Some(usage) = usage
    {
        answer.insert("usage".to_owned(), serde_json::to_value(usage).unwrap_or(Value::Null));
    }
    serde_json::to_vec(&order(answer)).ok().map(Bytes::from)
}

/// The JSON of a frame's `data:` lines; `None` for `[DONE]`, a comment or anything else.
fn data_of(frame: &Bytes) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: Vec<&str> =
        text.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
    serde_json::from_str(&data.join("\n")).ok()
}

/// Adds one chunk to the answer's members and its choices.
fn add_chunk(
    answer: &mut Map<String, Value>,
    choices: &mut Vec<Map<String, Value>>,
    chunk: Map<String, Value>,
) {
    for (name, value) in chunk {
        match name.as_str() {
            "choices" => {
                for choice in value.as_array().into_iter().flatten().filter_map(Value::as_object) {
                    add_choice(choices, choice);
                }
            }
            // The first of each, as every chunk repeats them.
            "id" | "created" | "model" => {
                answer.entry(name).or_insert(value);
            }
            name if STREAM_ONLY.contains(&name) || name == "object" => {}
            // A later usage or fingerprint is the answer's; a null one says nothing.
            _ if value.is_null() => {
                answer.entry(name).or_insert(Value::Null);
            }
            _ => {
                answer.insert(name, value);
            }
        }
    }
}

/// Adds one chunk's choice: its delta to the choice's message, its log-probabilities, its
/// finish reason.
fn add_choice(choices: &mut Vec<Map<String, Value>>, choice: &Map<String, Value>) {
    let index = choice.get("index").and_then(Value::as_u64).unwrap_or_default();
    let at = match choices.iter().position(|c| c.get("index").and_then(Value::as_u64) == Some(index)) {
        Some(at) => at,
        None => {
            let mut fresh = Map::new();
            fresh.insert("index".to_owned(), Value::from(index));
            fresh.insert("message".to_owned(), Value::Object(Map::new()));
            fresh.insert("logprobs".to_owned(), Value::Null);
            fresh.insert("finish_reason".to_owned(), Value::Null);
            choices.push(fresh);
            choices.len() - 1
        }
    };
    let target = &mut choices[at];
    for (name, value) in choice {
        match name.as_str() {
            "index" => {}
            "delta" => {
                if let (Some(Value::Object(message)), Value::Object(delta)) =
                    (target.get_mut("message"), value)
                {
                    merge(message, delta);
                }
            }
            "finish_reason" if value.is_null() => {}
            "logprobs" => match (target.get_mut("logprobs"), value) {
                (Some(Value::Object(so_far)), Value::Object(more)) => merge(so_far, more),
                (Some(slot), more) if !more.is_null() => *slot = more.clone(),
                _ => {}
            },
            _ => {
                target.insert(name.clone(), value.clone());
            }
        }
    }
}

/// Merges a fragment into what came before: text members joined, arrays appended (tool-call
/// fragments by their index), objects merged, anything else replaced.
fn merge(so_far: &mut Map<String, Value>, piece: &Map<String, Value>) {
    for (name, value) in piece {
        let slot = so_far.entry(name.clone()).or_insert(Value::Null);
        match (slot, value) {
            (slot, value) if name == "tool_calls" => merge_calls(slot, value),
            (Value::String(text), Value::String(more)) if JOINED.contains(&name.as_str()) => {
                text.push_str(more)
            }
            (Value::Array(items), Value::Array(more)) => items.extend(more.iter().cloned()),
            (Value::Object(object), Value::Object(more)) => merge(object, more),
            // A null piece does not undo what came before.
            (slot, Value::Null) if !slot.is_null() => {}
            (slot, value) => *slot = value.clone(),
        }
    }
}

/// Tool-call fragments put together by their `index`, which a whole answer does not carry.
fn merge_calls(slot: &mut Value, fragments: &Value) {
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let (Value::Array(calls), Value::Array(fragments)) = (slot, fragments) else { return };
    for (position, fragment) in fragments.iter().enumerate() {
        let Value::Object(fragment) = fragment else { continue };
        let index = fragment.get("index").and_then(Value::as_u64).map_or(position, |i| i as usize);
        while calls.len() <= index {
            calls.push(Value::Object(Map::new()));
        }
        if let Value::Object(call) = &mut calls[index] {
            let mut fragment = fragment.clone();
            fragment.remove("index");
            merge(call, &fragment);
        }
    }
}

/// The answer's members in the order a whole answer writes them, the others after.
fn order(mut answer: Map<String, Value>) -> Value {
    let mut ordered = Map::new();
    for name in ["id", "object", "created", "model", "choices", "usage"] {
        if let Some(value) = answer.remove(name) {
            ordered.insert(name.to_owned(), value);
        }
    }
    ordered.extend(answer);
    Value::Object(ordered)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn frame(chunk: Value) -> Bytes {
        Bytes::from(format!("data: {chunk}\n\n"))
    }

    #[test]
    fn the_whole_answer_keeps_every_member_the_chunks_carried() {
        let head = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "system_fingerprint": "fp", "obfuscation": "x"});
        let with = |choices: Value, usage: Value| {
            let mut chunk = head.clone();
            chunk["choices"] = choices;
            chunk["usage"] = usage;
            frame(chunk)
        };
        let frames = [
            with(
                json!([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": {"content": [{"token": "Hi"}]}, "finish_reason": null}]),
                Value::Null,
            ),
            with(
                json!([{"index": 0, "delta": {"content": "Hi", "annotations": [{"type": "url_citation"}]}, "logprobs": {"content": [{"token": "!"}]}, "finish_reason": null}]),
                Value::Null,
            ),
            with(
                json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}, "finish_reason": null}]),
                Value::Null,
            ),
            with(
                json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}, "finish_reason": null}]),
                Value::Null,
            ),
            with(
                json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "tool_calls"}]),
                Value::Null,
            ),
            with(
                json!([]),
                json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}}),
            ),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ];
        let answer: Value = serde_json::from_slice(&answer_of_frames(&frames, None).unwrap()).unwrap();
        assert_eq!(
            answer,
            json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "refusal": null,
                    "annotations": [{"type": "url_citation"}],
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                    "logprobs": {"content": [{"token": "Hi"}, {"token": "!"}]}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}},
                "system_fingerprint": "fp"})
        );
    }

    #[test]
    fn choices_stay_apart_and_the_usage_comes_from_the_gateway_when_no_event_told_it() {
        let frames = [
            frame(
                json!({"id": "c", "choices": [{"index": 1, "delta": {"content": "B"}, "finish_reason": "stop"}]}),
            ),
            frame(
                json!({"id": "c", "choices": [{"index": 0, "delta": {"content": "A"}, "finish_reason": "stop"}]}),
            ),
        ];
        let usage = Usage::new(1, 2);
        let answer: Value =
            serde_json::from_slice(&answer_of_frames(&frames, Some(&usage)).unwrap()).unwrap();
        let texts: Vec<&str> = answer["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["message"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["A", "B"]);
        assert_eq!(answer["usage"]["total_tokens"], 3);
        assert!(answer_of_frames(&[Bytes::from_static(b"data: [DONE]\n\n")], None).is_none());
    }
}
