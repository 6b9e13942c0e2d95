//! A Chat Completions answer written from the events of its stream, as the provider would have
//! written it whole: what a client of this dialect receives when its non-streamed request was
//! sent upstream as a stream. Every member the chunks carry is kept: text, refusal and
//! reasoning pieces joined, tool calls put together by their index, log-probabilities and
//! annotations appended, the usage with its details, and members Switchyard does not model
//! (`system_fingerprint`, `service_tier`, a vendor's own) as they came. Stream-only members
//! (`obfuscation`) are left out, and `object` says `chat.completion`.

use std::borrow::Cow;

use bytes::Bytes;
use switchyard::chat::Usage;

use crate::pieces::{self, Object, Part};

/// Members whose pieces are joined: the text a choice streams in fragments.
const JOINED: [&str; 6] = ["content", "refusal", "reasoning_content", "reasoning", "arguments", "input"];

/// Members a stream carries that a whole answer does not.
const STREAM_ONLY: [&str; 2] = ["obfuscation", "stream_options"];

/// The members each event is read into, the rest left as written: what every chunk adds to.
const OPENED: [&str; 2] = ["choices", "delta"];

/// The whole answer the `frames` (server-sent events, `data:` lines) stream, with `usage` when
/// no event told it (the gateway asked for it; the client did not); `None` when no frame is a
/// chunk.
pub fn answer_of_frames(frames: &[Bytes], usage: Option<&Usage>) -> Option<Bytes> {
    let data: Vec<_> = frames.iter().filter_map(|frame| pieces::data_of(frame)).collect();
    let mut answer = Object::default();
    let mut choices: Vec<(u64, Object)> = Vec::new();
    for chunk in data.iter().filter_map(|data| pieces::read(data, &OPENED)) {
        add_chunk(&mut answer, &mut choices, chunk);
    }
    if answer.is_empty() && choices.is_empty() {
        return None;
    }
    choices.sort_by_key(|(index, _)| *index);
    choices.iter_mut().for_each(|(_, choice)| calls_without_words(choice));
    let choices = Part::Items(choices.into_iter().map(|(_, choice)| Part::Object(choice)).collect());
    let usage = match answer.remove("usage") {
        Some(told) if !told.is_null() => told,
        _ => usage.and_then(|usage| serde_json::to_string(usage).ok()).map_or(Part::Null, Part::Json),
    };
    let mut out = Vec::with_capacity(frames.iter().map(Bytes::len).sum::<usize>() / 2);
    ordered(answer, choices, usage).write(&mut out);
    Some(Bytes::from(out))
}

/// Adds one chunk to the answer's members and its choices.
fn add_chunk<'a>(answer: &mut Object<'a>, choices: &mut Vec<(u64, Object<'a>)>, chunk: Object<'a>) {
    for (name, value) in chunk.into_members() {
        match name.as_ref() {
            "choices" => {
                for choice in value.into_items().into_iter().flatten() {
                    if let Some(choice) = choice.into_object() {
                        add_choice(choices, choice);
                    }
                }
            }
            // The first of each, as every chunk repeats them.
            "id" | "created" | "model" => {
                let slot = answer.entry(name);
                if slot.is_null() {
                    *slot = value;
                }
            }
            name if STREAM_ONLY.contains(&name) || name == "object" => {}
            // A later usage or fingerprint is the answer's; a null one says nothing.
            _ if value.is_null() => {
                answer.entry(name);
            }
            _ => answer.insert(name, value),
        }
    }
}

/// Adds one chunk's choice: its delta to the choice's message, its log-probabilities, its
/// finish reason.
fn add_choice<'a>(choices: &mut Vec<(u64, Object<'a>)>, mut choice: Object<'a>) {
    let index = choice.remove("index").and_then(|index| index.as_u64()).unwrap_or_default();
    let at = match choices.iter().position(|(i, _)| *i == index) {
        Some(at) => at,
        None => {
            let fresh = [
                ("index", Part::number(index)),
                ("message", Part::Object(Object::default())),
                ("logprobs", Part::Null),
                ("finish_reason", Part::Null),
            ];
            choices
                .push((index, fresh.into_iter().map(|(name, part)| (Cow::Borrowed(name), part)).collect()));
            choices.len() - 1
        }
    };
    let target = &mut choices[at].1;
    // The delta goes to the message; log-probabilities, the finish reason and the rest merge.
    if let (Some(message), Some(delta)) = (
        target.get_mut("message").and_then(Part::object_mut),
        choice.remove("delta").and_then(Part::into_object),
    ) {
        merge(message, delta);
    }
    pieces::merge(target, choice, &[]);
}

/// A choice whose message only calls tools says `content: null`, as a whole answer writes it,
/// though its stream's first chunk said `""` (OpenAI's does).
fn calls_without_words(choice: &mut Object<'_>) {
    let Some(message) = choice.get_mut("message").and_then(Part::object_mut) else { return };
    let calls =
        message.get_mut("tool_calls").and_then(Part::items_mut).is_some_and(|calls| !calls.is_empty());
    let wordless = message.get("content").and_then(Part::text).is_some_and(|text| text.is_empty());
    if calls && wordless {
        message.insert(Cow::Borrowed("content"), Part::Null);
    }
}

/// Merges a delta (or a tool call's fragment) into what came before: text members joined,
/// tool-call fragments put together by their index, other arrays appended, objects merged,
/// anything else replaced.
fn merge<'a>(so_far: &mut Object<'a>, mut piece: Object<'a>) {
    if let Some(calls) = piece.remove("tool_calls") {
        merge_calls(so_far.entry(Cow::Borrowed("tool_calls")), calls);
    }
    pieces::merge(so_far, piece, &JOINED);
}

/// Tool-call fragments put together by their `index`, which a whole answer does not carry.
fn merge_calls<'a>(slot: &mut Part<'a>, fragments: Part<'a>) {
    if slot.items_mut().is_none() {
        *slot = Part::Items(Vec::new());
    }
    let (Some(calls), Some(fragments)) = (slot.items_mut(), fragments.into_items()) else { return };
    for (position, fragment) in fragments.into_iter().enumerate() {
        let Some(mut fragment) = fragment.into_object() else { continue };
        let index = fragment.remove("index").and_then(|index| index.as_u64());
        let index = index.map_or(position, |index| index as usize);
        // Past the most a stream may make: its reader refused the stream; no room is made.
        if index >= switchyard::chat::MAX_TOOL_CALLS as usize {
            continue;
        }
        while calls.len() <= index {
            calls.push(Part::Object(Object::default()));
        }
        if let Some(call) = calls[index].object_mut() {
            merge(call, fragment);
        }
    }
}

/// The answer's members in the order a whole answer writes them, the others after.
fn ordered<'a>(mut answer: Object<'a>, choices: Part<'a>, usage: Part<'a>) -> Object<'a> {
    let mut take = |name: &str| answer.remove(name).unwrap_or(Part::Null);
    let head = [
        ("id", take("id")),
        ("object", Part::Raw("\"chat.completion\"")),
        ("created", take("created")),
        ("model", take("model")),
        ("choices", choices),
    ];
    let mut ordered: Object = head.into_iter().map(|(name, part)| (Cow::Borrowed(name), part)).collect();
    if !usage.is_null() {
        ordered.insert(Cow::Borrowed("usage"), usage);
    }
    for (name, part) in answer.into_members() {
        ordered.insert(name, part);
    }
    ordered
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

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
    fn a_message_that_only_calls_tools_says_no_content_as_a_whole_answer_does() {
        let chunk = |delta: Value, finish: Value| {
            frame(json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
        };
        let call = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        let called = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(call, json!("tool_calls")),
        ];
        let answer: Value = serde_json::from_slice(&answer_of_frames(&called, None).unwrap()).unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], Value::Null, "{answer}");
        assert_eq!(answer["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
        // An answer of no words and no call keeps its empty text.
        let empty = [chunk(json!({"role": "assistant", "content": ""}), json!("stop"))];
        let answer: Value = serde_json::from_slice(&answer_of_frames(&empty, None).unwrap()).unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], "", "{answer}");
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

    #[test]
    fn numbers_and_escapes_are_kept_as_the_provider_wrote_them() {
        let frames = [
            Bytes::from_static(
                br#"data: {"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"line\n\"one\""},"logprobs":{"content":[{"token":"x","logprob":-1.0000000000000002e-7}]}}]}

"#,
            ),
            Bytes::from_static(
                br#"data: {"id":"c","choices":[{"index":0,"delta":{"content":" caf\u00e9"},"finish_reason":"stop"}],"x_vendor":{"score":0.10}}

"#,
            ),
            Bytes::from_static(b"data: [DONE]\n\n"),
        ];
        let body = answer_of_frames(&frames, None).unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.contains(r#""logprob":-1.0000000000000002e-7"#), "{text}");
        assert!(text.contains(r#""x_vendor":{"score":0.10}"#), "{text}");
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], "line\n\"one\" caf\u{e9}");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop");
        assert_eq!(answer["object"], "chat.completion");
    }
}
