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
    /// The upstream model (`claude-sonnet-4-5`, ...), not the route name the client asked for.
    pub model: &'a str,
    /// `max_tokens`, required by Anthropic: the request's limit, else OpenAI's
    /// `max_completion_tokens`, else the model's default (`request::default_max_tokens`).
    pub max_tokens: u32,
    /// The top-level `system` prompt, gathered from the system and developer messages; left
    /// out when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    /// The conversation, user and assistant turns alternating.
    pub messages: Vec<Turn>,
    /// `tools[]`; left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolParam>,
    /// `tool_choice`; left out when the request has no tools and asks for nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoiceParam>,
    /// Sampling temperature, 0 to 1 on Anthropic (a value outside is refused before sending).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass, 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// `stop_sequences`, from the canonical `stop`; left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// `metadata`: `{"user_id": ...}` from OpenAI's `user`; `None` for an Anthropic-dialect
    /// request, whose own `metadata` travels in `extra`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// `output_config`: `{"format": {"type": "json_schema", "schema"}}` from OpenAI's
    /// `response_format`; `None` for an Anthropic-dialect request, whose own travels in `extra`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
    /// `thinking`, from OpenAI's `reasoning_effort`; `None` for an Anthropic-dialect request,
    /// whose own travels in `extra`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    /// `stream: true` on streaming calls; left out (not `false`) otherwise.
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
    /// A plain string: the system messages amount to one text block, none kept verbatim.
    Text(String),
    /// Several blocks, or blocks kept verbatim from an Anthropic client (`cache_control`, ...).
    Blocks(Vec<Block>),
}

/// One message of the conversation. Anthropic knows two roles and wants them to alternate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Turn {
    /// `user` (which also carries tool results) or `assistant`.
    pub role: &'static str,
    /// The turn's blocks, never empty: consecutive messages of one role are merged into one
    /// turn.
    pub content: Vec<Block>,
}

/// A content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    /// `{"type": "text", "text"}`. Anthropic refuses an empty text block.
    Text {
        /// The text.
        text: String,
    },
    /// `{"type": "image", "source"}`, in user turns and tool results.
    Image {
        /// Where the image's bytes are.
        source: ImageSource,
    },
    /// `{"type": "tool_use", "id", "name", "input"}`: an assistant's tool call.
    ToolUse {
        /// The call's id (`toolu_...`), which the `tool_result` quotes.
        id: String,
        /// The called tool's name.
        name: String,
        /// The arguments, a JSON object (OpenAI's `arguments` string, parsed).
        input: Value,
    },
    /// `{"type": "tool_result", "tool_use_id", "content"?, "is_error"?}`, in a user turn.
    ToolResult {
        /// The `id` of the `tool_use` block this answers.
        tool_use_id: String,
        /// What the tool returned; `None` when it returned nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent>,
        /// `true` when the tool failed; `None` (left out) reads as `false`.
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
    /// `{"type": "base64", "media_type", "data"}`, from a `data:` URL.
    Base64 {
        /// The MIME type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
        media_type: String,
        /// The image bytes, base64-encoded.
        data: String,
    },
    /// `{"type": "url", "url"}`: Anthropic fetches the image itself.
    Url {
        /// The image's http(s) URL.
        url: String,
    },
}

/// A tool result's content: a string, or text and image blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum ToolResultContent {
    /// A plain string, from a tool message with string content.
    Text(String),
    /// Text and image blocks, from a tool message with content parts.
    Blocks(Vec<Block>),
}

/// A tool definition. Client tools have `input_schema` and no `type` (or `custom`); server
/// tools (`web_search_20250305`, `bash_20250124`, ...) have a versioned `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolParam {
    /// `type`: `None` (left out) for a client tool, the versioned type of a server tool.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The tool's `name`, what the model calls it by.
    pub name: String,
    /// `description`, shown to the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `input_schema`, the JSON Schema of the input; always set for a client tool (an empty
    /// object schema when the function has no parameters), as Anthropic requires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Other fields of the definition (`cache_control`, a server tool's settings, ...), from
    /// an Anthropic-dialect request only.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolChoiceParam {
    /// `auto`, `any` (OpenAI's `required`), `tool` (a named function) or `none`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The tool to call, with `type: tool` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Some(true)` for OpenAI's `parallel_tool_calls: false` (at most one tool use); never
    /// sent with `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

/// A complete answer (also the `message` of `message_start`, with empty content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageResponse {
    /// The message id (`msg_...`), passed through to the client; empty when missing.
    #[serde(default)]
    pub id: String,
    /// `type`, always `message`; defaults to it when missing.
    #[serde(rename = "type", default = "message_type")]
    pub kind: String,
    /// `role`, always `assistant`; defaults to it when missing.
    #[serde(default = "assistant_role")]
    pub role: String,
    /// The model that answered (often a dated version of the one asked for); empty when
    /// missing.
    #[serde(default)]
    pub model: String,
    /// Raw blocks: the adapter needs the exact JSON to tell whether the canonical form loses
    /// anything (see `response.rs`). Required, so that a 200 without it is malformed.
    pub content: Vec<Value>,
    /// Anthropic `stop_reason` (`end_turn`, `max_tokens`, `stop_sequence`, `tool_use`,
    /// `pause_turn`, `refusal`, ...); `None` in `message_start`, where it comes later.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The custom stop sequence that matched; `None` unless `stop_reason` is `stop_sequence`.
    #[serde(default)]
    pub stop_sequence: Option<String>,
    /// Token counts; all `None` when missing.
    #[serde(default)]
    pub usage: Usage,
}

/// The default of [`MessageResponse::kind`].
fn message_type() -> String {
    "message".to_owned()
}

/// The default of [`MessageResponse::role`].
fn assistant_role() -> String {
    "assistant".to_owned()
}

/// Token counts. Every field may be absent or null depending on where it appears
/// (`message_delta` carries only the cumulative `output_tokens` on older models).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Usage {
    /// `input_tokens`: input tokens neither written to nor read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u32>,
    /// `output_tokens`; cumulative in `message_delta` (the total so far, not an increment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// `cache_creation_input_tokens`: input tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u32>,
    /// `cache_read_input_tokens`: input tokens read from the prompt cache.
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

    /// The canonical counts, the cache's part of the prompt told apart.
    pub fn canonical(&self) -> switchyard::chat::Usage {
        let mut usage = switchyard::chat::Usage::new(self.prompt_tokens(), self.output_tokens.unwrap_or(0));
        if self.cache_read_input_tokens.is_some() || self.cache_creation_input_tokens.is_some() {
            usage.prompt_tokens_details = Some(switchyard::chat::PromptTokensDetails {
                cached_tokens: self.cache_read_input_tokens,
                cache_write_tokens: self.cache_creation_input_tokens,
            });
        }
        usage
    }

    /// Anthropic's counts for canonical ones: `input_tokens` is what was neither read from
    /// the cache nor written to it.
    pub fn of(usage: &switchyard::chat::Usage) -> Self {
        let (read, write) = (usage.cached_tokens(), usage.cache_write_tokens());
        let cached = read.unwrap_or(0).saturating_add(write.unwrap_or(0));
        Usage {
            input_tokens: Some(usage.prompt_tokens.saturating_sub(cached)),
            output_tokens: Some(usage.completion_tokens),
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
            extra: Map::new(),
        }
    }
}

/// One event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StreamEvent {
    /// `message_start`, the first event.
    MessageStart {
        /// The message so far: id, model, initial usage; empty `content`, null `stop_reason`.
        message: MessageResponse,
    },
    /// `content_block_start`: a block begins.
    ContentBlockStart {
        /// The block's place among the message's content blocks (all kinds counted).
        index: u32,
        /// The block's start: a `tool_use` block's `input` is always `{}` here.
        content_block: Block,
    },
    /// `content_block_delta`: more of an open block.
    ContentBlockDelta {
        /// The block this adds to.
        index: u32,
        /// What it adds.
        delta: BlockDelta,
    },
    /// `content_block_stop`: the block is complete.
    ContentBlockStop {
        /// The block that ended.
        index: u32,
    },
    /// `message_delta`: top-level changes near the end (one or more).
    MessageDelta {
        /// The `stop_reason` and `stop_sequence`.
        delta: MessageDeltaBody,
        /// Cumulative token counts; all `None` when missing.
        #[serde(default)]
        usage: Usage,
    },
    /// `message_stop`, the last event: the answer is complete.
    MessageStop,
    /// `ping`, a keep-alive that may come anywhere.
    Ping,
    /// `error`: the stream fails (after an HTTP 200), for instance with `overloaded_error`.
    Error {
        /// The error's type and message.
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
    /// `text_delta`: more text of a text block.
    TextDelta {
        /// The next piece of text.
        text: String,
    },
    /// `input_json_delta`: more of a `tool_use` block's input.
    InputJsonDelta {
        /// The next piece of the input's JSON text, to be concatenated (the first is often
        /// empty).
        partial_json: String,
    },
    /// `thinking_delta`: more of a thinking block's reasoning.
    ThinkingDelta {
        /// The next piece of the reasoning.
        thinking: String,
    },
    /// `signature_delta`, `citations_delta`, ...
    #[serde(untagged)]
    Other(Value),
}

/// The top-level changes of a `message_delta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageDeltaBody {
    /// Anthropic `stop_reason`, why the answer ended; `None` when this delta does not say.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The custom stop sequence that matched, if any.
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// `{"type": "error", "error": {...}, "request_id": ...}`: every non-2xx body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorResponse {
    /// Always `error` from Anthropic; tolerated missing from proxies that drop it.
    #[serde(rename = "type", default = "error_type")]
    pub kind: String,
    /// The error's type and message.
    pub error: ErrorBody,
    /// Anthropic's `request_id` (`req_...`), for support requests; `None` when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The default of [`ErrorResponse::kind`].
fn error_type() -> String {
    "error".to_owned()
}

/// The error itself: its type (`rate_limit_error`, ...) and message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorBody {
    /// `error.type`: `invalid_request_error`, `authentication_error`, `rate_limit_error`,
    /// `overloaded_error`, ...; what classification reads first.
    #[serde(rename = "type")]
    pub kind: String,
    /// `error.message`, human-readable; empty when missing.
    #[serde(default)]
    pub message: String,
    /// Seen on spend-limit 429s: `{"error_code": "enforced_spend_limit_reached"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}
