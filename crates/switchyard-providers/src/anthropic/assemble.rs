//! A Messages API answer written from the events of its stream, as Anthropic would have written
//! it whole: what a client of this dialect receives when its non-streamed request was sent
//! upstream as a stream. The message of `message_start`, each content block as
//! `content_block_start` opened it with its deltas applied (text, a tool's input JSON, thinking
//! and its signature, citations), and the stop reason, stop sequence and usage of
//! `message_delta`. Blocks and members Switchyard does not model pass as they came.

use std::borrow::Cow;

use bytes::Bytes;
use serde::de::IgnoredAny;

use crate::pieces::{self, Object, Part};

/// The members each event is read into, the rest left as written.
const OPENED: [&str; 4] = ["message", "content_block", "delta", "usage"];

/// The whole message the `frames` (server-sent events) stream; `None` without a
/// `message_start`.
pub fn answer_of_frames(frames: &[Bytes]) -> Option<Bytes> {
    let data: Vec<_> = frames.iter().filter_map(|frame| pieces::data_of(frame)).collect();
    let mut message: Option<Object> = None;
    let mut blocks: Vec<Block> = Vec::new();
    for mut event in data.iter().filter_map(|data| pieces::read(data, &OPENED)) {
        let kind = event.get("type").and_then(Part::text);
        let index = event.get("index").and_then(|index| index.as_u64()).unwrap_or_default() as usize;
        match kind.as_deref() {
            Some("message_start") => message = event.remove("message").and_then(Part::into_object),
            // Past the most blocks a stream may open: its decoder refused the stream.
            Some("content_block_start") if index >= super::stream::MAX_BLOCKS as usize => {}
            Some("content_block_start") => {
                let object = event.remove("content_block").and_then(Part::into_object).unwrap_or_default();
                while blocks.len() <= index {
                    blocks.push(Block::default());
                }
                blocks[index] = Block { object, input_json: String::new() };
            }
            Some("content_block_delta") => {
                if let (Some(block), Some(delta)) =
                    (blocks.get_mut(index), event.remove("delta").and_then(Part::into_object))
                {
                    block.apply(delta);
                }
            }
            Some("message_delta") => {
                if let Some(message) = message.as_mut() {
                    message_delta(message, event);
                }
            }
            _ => {}
        }
    }
    let mut message = message?;
    let content = blocks.into_iter().map(Block::finish).collect();
    message.insert(Cow::Borrowed("content"), Part::Items(content));
    let mut out = Vec::with_capacity(frames.iter().map(Bytes::len).sum::<usize>() / 2);
    message.write(&mut out);
    Some(Bytes::from(out))
}

/// The stop reason, stop sequence and usage of a `message_delta`, onto the message: a null
/// does not undo what came before (a count the delta leaves null keeps what `message_start`
/// said; a later delta with only a count keeps the stop reason).
fn message_delta<'a>(message: &mut Object<'a>, mut event: Object<'a>) {
    if let Some(delta) = event.remove("delta").and_then(Part::into_object) {
        pieces::merge(message, delta, &[]);
    }
    if let Some(usage) = event.remove("usage") {
        pieces::merge(message, [(Cow::Borrowed("usage"), usage)].into_iter().collect(), &[]);
    }
}

/// One content block as it streams.
#[derive(Default)]
struct Block<'a> {
    /// The block as `content_block_start` opened it, deltas applied.
    object: Object<'a>,
    /// A tool's input as its JSON pieces came, kept when the block is whole.
    input_json: String,
}

impl<'a> Block<'a> {
    /// Applies one `content_block_delta`.
    fn apply(&mut self, mut delta: Object<'a>) {
        let text = |name: &str| delta.get(name).and_then(Part::text).unwrap_or_default();
        match text("type").as_ref() {
            "text_delta" => self.append("text", &text("text")),
            "thinking_delta" => self.append("thinking", &text("thinking")),
            "signature_delta" => self.append("signature", &text("signature")),
            "input_json_delta" => self.input_json.push_str(&text("partial_json")),
            "citations_delta" => {
                if let Some(citation) = delta.remove("citation") {
                    let citations = [(Cow::Borrowed("citations"), Part::Items(vec![citation]))];
                    pieces::merge(&mut self.object, citations.into_iter().collect(), &[]);
                }
            }
            _ => {}
        }
    }

    fn append(&mut self, name: &'static str, piece: &str) {
        let slot = self.object.entry(Cow::Borrowed(name));
        match slot.text_mut() {
            Some(so_far) => so_far.push_str(piece),
            None => *slot = Part::Text(piece.to_owned()),
        }
    }

    /// The whole block: a tool's input as its pieces wrote it, once they make JSON.
    fn finish(mut self) -> Part<'a> {
        if !self.input_json.is_empty() && serde_json::from_str::<IgnoredAny>(&self.input_json).is_ok() {
            self.object.insert(Cow::Borrowed("input"), Part::Json(self.input_json));
        }
        Part::Object(self.object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn frame(name: &str, data: Value) -> Bytes {
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
    }

    #[test]
    fn a_block_past_the_most_a_message_opens_is_given_no_room() {
        let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}}});
        let far = json!({"type": "content_block_start", "index": 4_000_000_000u32, "content_block": {"type": "text", "text": "x"}});
        let answer =
            answer_of_frames(&[frame("message_start", start), frame("content_block_start", far)]).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["content"], json!([]), "{answer}");
    }

    #[test]
    fn the_whole_message_has_each_block_its_deltas_made_and_the_final_usage() {
        let frames = [
            frame(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 1}}}),
            ),
            frame(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Look it up."}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}}),
            ),
            frame("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            frame(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking"}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "."}}),
            ),
            frame(
                "content_block_start",
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"city\""}}),
            ),
            frame(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ": \"Paris\"}"}}),
            ),
            frame("ping", json!({"type": "ping"})),
            frame(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 29, "input_tokens": null}}),
            ),
            // A later delta with only a count: its null stop reason does not undo the first's.
            frame(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": null}, "usage": {"output_tokens": 30}}),
            ),
            frame("message_stop", json!({"type": "message_stop"})),
        ];
        let message: Value = serde_json::from_slice(&answer_of_frames(&frames).unwrap()).unwrap();
        assert_eq!(
            message,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                "content": [
                    {"type": "thinking", "thinking": "Look it up.", "signature": "EqQB"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 30}})
        );
        assert!(answer_of_frames(&frames[1..]).is_none(), "no message_start, no message");
    }
}
