//! OpenAI's Responses API (`POST /v1/responses`) as a client dialect: its requests into the
//! canonical types, and canonical answers and streams back into its response object and
//! events.
//!
//! The gateway serves the Responses API by translation: a Responses request becomes a
//! canonical chat request, which any target of the route can answer, and the answer becomes a
//! response object (or its stream of events). Conversation state is the gateway's (see its
//! `responses` store): [`decode`] reads one request's own input, and the gateway puts the
//! conversation it kept for `previous_response_id` in front.
//!
//! ```
//! use switchyard_providers::responses::decode;
//!
//! let request = decode::request_from_slice(br#"{"model": "default", "input": "Hello", "instructions": "Be brief."}"#).unwrap();
//! assert_eq!(request.chat.messages.len(), 2);
//! assert!(request.store);
//! ```

pub mod decode;
pub mod encode;
pub mod native;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// How the gateway gives a Responses client Claude's signed thinking blocks: as a reasoning
/// item's `encrypted_content`, this prefix then the blocks' JSON in base64. Encoded, not
/// encrypted (the text is the item's summary too, and a signature cannot be forged), and read
/// back into the conversation when it goes on, so that an Anthropic target continues a
/// tool-use turn it thought through. Only an Anthropic target reads them: OpenAI could not.
/// The thinking's text is in the item twice, which counts against the store's and a
/// request's byte bounds.
const CLAUDE_THINKING: &str = "switchyard.claude-thinking.v1:";

/// Claude's thinking blocks, sealed as a reasoning item's `encrypted_content`.
pub(crate) fn seal_thinking(blocks: &[Value]) -> String {
    let json = serde_json::to_vec(blocks).unwrap_or_default();
    format!("{CLAUDE_THINKING}{}", URL_SAFE_NO_PAD.encode(json))
}

/// The thinking blocks a reasoning item carries, when the gateway sealed them.
pub(crate) fn unseal_thinking(item: &Value) -> Option<Vec<Value>> {
    let sealed = item["encrypted_content"].as_str()?.strip_prefix(CLAUDE_THINKING)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(sealed).ok()?).ok()
}

/// Another dialect's reasoning (`text`, the `reasoning_content` of `model`), sealed as a
/// reasoning item's `encrypted_content`: sent back, it reaches that model again as the turn's
/// `reasoning_content` (see [`crate::codec::REASONING_SEAL`]).
pub(crate) fn seal_reasoning(model: &str, text: &str) -> String {
    let json = serde_json::to_vec(&serde_json::json!({ "model": model, "text": text })).unwrap_or_default();
    format!("{}{}", crate::codec::REASONING_SEAL, URL_SAFE_NO_PAD.encode(json))
}

/// The reasoning a reasoning item carries (`{"model", "text"}`), when the gateway sealed it.
pub(crate) fn unseal_reasoning(item: &Value) -> Option<Value> {
    let sealed = item["encrypted_content"].as_str()?.strip_prefix(crate::codec::REASONING_SEAL)?;
    let reasoning: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(sealed).ok()?).ok()?;
    (reasoning["model"].is_string() && reasoning["text"].is_string()).then_some(reasoning)
}

/// Whether `item` is a reasoning item the gateway sealed (Claude's thinking, another
/// dialect's reasoning), whose `encrypted_content` no provider of the Responses API can read.
pub fn is_sealed_by_gateway(item: &Value) -> bool {
    let sealed = item["encrypted_content"].as_str().unwrap_or_default();
    item["type"] == "reasoning"
        && (sealed.starts_with(CLAUDE_THINKING) || sealed.starts_with(crate::codec::REASONING_SEAL))
}

/// Whether `item` is a reasoning item of Claude's thinking as the gateway sealed it, which
/// only an Anthropic target can read.
pub fn is_claude_thinking(item: &Value) -> bool {
    item["type"] == "reasoning"
        && item["encrypted_content"].as_str().is_some_and(|sealed| sealed.starts_with(CLAUDE_THINKING))
}

pub use crate::codec::CodecError;
