//! The Messages API on the wire: request, response, stream event and error shapes, shared by
//! the adapter (which sends requests and reads answers) and the codec (which reads requests and
//! writes answers), so that both directions agree on one spelling of every field.
//!
//! Shapes follow anthropic-sdk-python's `types/` and docs.claude.com's Messages reference.
//! Blocks and events of types this module does not model are kept as raw JSON
//! ([`Block::Raw`], [`StreamEvent::Unknown`]): the API adds new ones without a version bump.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use switchyard::deserialize_with_extra;

/// `POST /v1/messages` body, as the adapter sends it.
#[derive(Debug, Serialize)]
pub(crate) struct MessagesRequest<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    pub messages: Vec<Turn>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolParam>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoiceParam>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Fields of an Anthropic-dialect request that the canonical types do not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The top-level system prompt: a string, or text blocks (which may carry `cache_control`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum System {
    Text(String),
    Blocks(Vec<Block>),
}

/// One message of the conversation. Anthropic knows two roles and wants them to alternate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Turn {
    pub role: &'static str,
    pub content: Vec<Block>,
}

/// A content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    /// Any other block (thinking, server tool results, ...), or a block kept verbatim.
    #[serde(untagged)]
    Raw(Value),
}

/// Where an image's bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ImageSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

/// A tool result's content: a string, or text and image blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum ToolResultContent {
    Text(String),
    Blocks(Vec<Block>),
}

/// A tool definition. Client tools have `input_schema` and no `type` (or `custom`); server
/// tools (`web_search_20250305`, `bash_20250124`, ...) have a versioned `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolParam {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolChoiceParam {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

/// A complete answer (also the `message` of `message_start`, with empty content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageResponse {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "message_type")]
    pub kind: String,
    #[serde(default = "assistant_role")]
    pub role: String,
    #[serde(default)]
    pub model: String,
    /// Raw blocks: the adapter needs the exact JSON to tell whether the canonical form loses
    /// anything (see `response.rs`). Required, so that a 200 without it is malformed.
    pub content: Vec<Value>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    #[serde(default)]
    pub usage: Usage,
}

fn message_type() -> String {
    "message".to_owned()
}

fn assistant_role() -> String {
    "assistant".to_owned()
}

/// Token counts. Every field may be absent or null depending on where it appears
/// (`message_delta` carries only the cumulative `output_tokens` on older models).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u32>,
    /// `cache_creation`, `service_tier`, `server_tool_use`, ...
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

deserialize_with_extra!(Usage {
    "input_tokens" => input_tokens: OrDefault,
    "output_tokens" => output_tokens: OrDefault,
    "cache_creation_input_tokens" => cache_creation_input_tokens: OrDefault,
    "cache_read_input_tokens" => cache_read_input_tokens: OrDefault,
});

impl Usage {
    /// All input tokens: uncached, written to the cache and read from it. The canonical
    /// `prompt_tokens` follows OpenAI, where cached tokens are part of the prompt count.
    pub fn prompt_tokens(&self) -> u32 {
        [self.input_tokens, self.cache_creation_input_tokens, self.cache_read_input_tokens]
            .into_iter()
            .flatten()
            .fold(0u32, u32::saturating_add)
    }
}

/// One event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StreamEvent {
    MessageStart {
        message: MessageResponse,
    },
    ContentBlockStart {
        index: u32,
        content_block: Block,
    },
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Usage,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    /// An event type added after this code was written: ignored, as the docs ask.
    #[serde(untagged)]
    Unknown(Value),
}

impl StreamEvent {
    /// The SSE `event:` name of this event.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Ping => "ping",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Unknown(_) => "unknown",
        }
    }
}

/// What a `content_block_delta` adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// `thinking_delta`, `signature_delta`, `citations_delta`, ...
    #[serde(untagged)]
    Other(Value),
}

/// The top-level changes of a `message_delta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageDeltaBody {
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// `{"type": "error", "error": {...}, "request_id": ...}`: every non-2xx body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorResponse {
    /// Always `error` from Anthropic; tolerated missing from proxies that drop it.
    #[serde(rename = "type", default = "error_type")]
    pub kind: String,
    pub error: ErrorBody,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

fn error_type() -> String {
    "error".to_owned()
}

/// The error itself: its type (`rate_limit_error`, ...) and message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub message: String,
    /// Seen on spend-limit 429s: `{"error_code": "enforced_spend_limit_reached"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}
