//! A Messages API answer written from the events of its stream, as Anthropic would have written
//! it whole: what a client of this dialect receives when its non-streamed request was sent
//! upstream as a stream. The message of `message_start`, each content block as
//! `content_block_start` opened it with its deltas applied (text, a tool's input JSON, thinking
//! and its signature, citations), and the stop reason, stop sequence and usage of
//! `message_delta`. Blocks and members Switchyard does not model pass as they came.

use bytes::Bytes;
use serde_json::{Map, Value};

/// The whole message the `frames` (server-sent events) stream; `None` without a
/// `message_start`.
pub fn answer_of_frames(frames: &[Bytes]) -> Option<Bytes> {
    let mut message: Option<Map<String, Value>> = None;
    let mut blocks: Vec<Block> = Vec::new();
    for frame in frames {
        let Some(Value::Object(event)) = data_of(frame) else { continue };
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                message = event.get("message").and_then(Value::as_object).cloned();
            }
            Some("content_block_start") => {
                let index = index_of(&event);
                let block =
                    event.get("content_block").and_then(Value::as_object).cloned().unwrap_or_default();
                while blocks.len() <= index {
                    blocks.push(Block::default());
                }
                blocks[index] = Block { object: block, input_json: String::new() };
            }
            Some("content_block_delta") => {
                if let (Some(block), Some(Value::Object(delta))) =
                    (blocks.get_mut(index_of(&event)), event.get("delta"))
                {
                    block.apply(delta);
                }
            }
            Some("message_delta") => {
                if let Some(message) = message.as_mut() {
                    message_delta(message, &event);
                }
            }
            _ => {}
        }
    }
    let mut message = message?;
    let content = blocks.into_iter().map(Block::finish).collect();
    message.insert("content".to_owned(), Value::Array(content));
    serde_json::to_vec(&message).ok().map(Bytes::from)
}

/// The JSON of a frame's `data:` lines.
fn data_of(frame: &Bytes) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: Vec<&str> =
        text.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
    serde_json::from_str(&data.join("\n")).ok()
}

/// An event's block `index`.
fn index_of(event: &Map<String, Value>) -> usize {
    event.get("index").and_then(Value::as_u64).unwrap_or_default() as usize
}

/// The stop reason, stop sequence and usage of a `message_delta`, onto the message.
fn message_delta(message: &mut Map<String, Value>, event: &Map<String, Value>) {
    if let Some(Value::Object(delta)) = event.get("delta") {
        for (name, value) in delta {
            message.insert(name.clone(), value.clone());
        }
    }
    if let Some(Value::Object(usage)) = event.get("usage") {
        let so_far = message.entry("usage").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(so_far) = so_far {
            for (name, value) in usage {
                // A count the delta leaves null keeps what `message_start` said.
                if !value.is_null() {
                    so_far.insert(name.clone(), value.clone());
                }
            }
        }
    }
}

/// One content block as it streams.
#[derive(Default)]
struct Block {
    /// The block as `content_block_start` opened it, deltas applied.
    object: Map<String, Value>,
    /// A tool's input as its JSON pieces came, parsed when the block is whole.
    input_json: String,
}

impl Block {
    /// Applies one `content_block_delta`.
    fn apply(&mut self, delta: &Map<String, Value>) {
        let text = |name: &str| delta.get(name).and_then(Value::as_str).unwrap_or_default();
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.append("text", text("text")),
            Some("thinking_delta") => self.append("thinking", text("thinking")),
            Some("signature_delta") => self.append("signature", text("signature")),
            Some("input_json_delta") => self.input_json.push_str(text("partial_json")),
            Some("citations_delta") => {
                if let Some(citation) = delta.get("citation") {
                    let citations =
                        self.object.entry("citations").or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(citations) = citations {
                        citations.push(citation.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn append(&mut self, name: &str, piece: &str) {
        match self.object.get_mut(name) {
            Some(Value::String(so_far)) => so_far.push_str(piece),
            _ => {
                self.object.insert(name.to_owned(), Value::from(piece));
            }
        }
    }

    /// The whole block: a tool's input parsed from its pieces.
    fn finish(mut self) -> Value {
        if !self.input_json.is_empty()
            && let Ok(input) = serde_json::from_str::<Value>(&self.input_json)
        {
            self.object.insert("input".to_owned(), input);
        }
        Value::Object(self.object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn frame(name: &str, data: Value) -> Bytes {
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
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
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30, "input_tokens": null}}),
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
