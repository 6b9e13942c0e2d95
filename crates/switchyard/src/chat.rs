//! Canonical request and response types shared by the whole project.
//!
//! The shapes follow the OpenAI Chat Completions dialect, the lingua franca of LLM APIs, so that
//! a request arriving in that dialect maps onto these types one to one. Every struct keeps the
//! fields it does not model in `extra`, so parameters Switchyard knows nothing about still reach
//! a provider that speaks the same dialect.
//!
//! ```
//! use switchyard::chat::{ChatRequest, Message};
//!
//! let request = ChatRequest::new("default", vec![Message::user("Hello!")]);
//! let json = serde_json::to_value(&request).unwrap();
//! assert_eq!(json["messages"][0]["role"], "user");
//! ```

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::deserialize_with_extra;
use crate::serde_extra::string_or_list;

/// Fields a type does not model, kept verbatim for a round trip.
pub type Extra = Map<String, Value>;

/// One chat request: the messages, the tools, the sampling parameters.
///
/// `model` is what the client asked for: a route name or a `provider:model` target. The router
/// never rewrites it; adapters receive the upstream model separately.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    #[serde(flatten)]
    pub extra: Extra,
    /// The dialect the request arrived in. `extra` holds fields of that dialect, so adapters
    /// pass them through only to a provider that speaks it.
    #[serde(skip)]
    pub origin: Dialect,
}

/// An API dialect a request can arrive in and a provider can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    #[default]
    OpenAi,
    Anthropic,
    Gemini,
}

deserialize_with_extra!(ChatRequest {
    "model" => model: OrDefault,
    "messages" => messages: Required,
    "tools" => tools: OrDefault,
    "tool_choice" => tool_choice: OrDefault,
    "temperature" => temperature: OrDefault,
    "top_p" => top_p: OrDefault,
    "max_tokens" => max_tokens: OrDefault,
    "stop" => stop: OrDefault,
    "seed" => seed: OrDefault,
    "response_format" => response_format: OrDefault,
    "stream" => stream: OrDefault,
} defaults: origin);

impl ChatRequest {
    /// A request for `model` (a route name or a target) with default parameters.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self { model: model.into(), messages, ..Self::default() }
    }

    /// A rough size of the prompt in tokens (four characters a token), for budgeting before
    /// a provider has counted.
    pub fn estimated_prompt_tokens(&self) -> u32 {
        let chars: usize =
            self.messages.iter().map(|m| m.content.as_ref().map_or(0, Content::text_len)).sum();
        u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's newer name for system instructions; adapters of other dialects treat it as system.
    Developer,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Message {
    "role" => role: Required,
    "content" => content: OrDefault,
    "name" => name: OrDefault,
    "tool_calls" => tool_calls: OrDefault,
    "tool_call_id" => tool_call_id: OrDefault,
});

impl Message {
    /// A message with `role` and plain text.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(Content::Text(text.into())),
            name: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            extra: Extra::new(),
        }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// The text of the message, parts joined; `None` when it has no text.
    pub fn text_content(&self) -> Option<String> {
        self.content.as_ref().map(Content::to_text)
    }
}

/// A message's content: plain text, or a list of parts (text and images).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_or_list(deserializer, "a string or a list of content parts", Content::Text, Content::Parts)
    }
}

impl Content {
    /// All text of the content, parts joined without separator.
    pub fn to_text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect(),
        }
    }

    fn text_len(&self) -> usize {
        match self {
            Content::Text(text) => text.len(),
            Content::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text { text } => text.len(),
                    // Providers bill images in the hundreds of tokens; count a nominal amount.
                    ContentPart::ImageUrl { .. } => 1024,
                })
                .sum(),
        }
    }
}

/// One part of a multi-part message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

/// An image by URL, which may be a `data:` URL carrying the bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Always `function` in every dialect Switchyard speaks today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDefinition,
}

fn function_type() -> String {
    "function".to_owned()
}

/// The signature of a callable function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object describing the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(FunctionDefinition {
    "name" => name: Required,
    "description" => description: OrDefault,
    "parameters" => parameters: OrDefault,
});

/// How the model should choose tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `"auto"`, `"none"` or `"required"`.
    Mode(String),
    /// `{"type": "function", "function": {"name": ...}}`: call this function.
    Function {
        #[serde(rename = "type")]
        kind: String,
        function: ToolChoiceFunction,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolChoiceFunction {
    pub name: String,
}

/// A call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function a tool call invokes, with its arguments as a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// Stop sequences: one string or several.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_or_list(deserializer, "a string or a list of strings", Stop::One, Stop::Many)
    }
}

impl Stop {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Stop::One(one) => vec![one.clone()],
            Stop::Many(many) => many.clone(),
        }
    }
}

/// The shape the answer must take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// A named JSON Schema for structured output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsonSchemaFormat {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(JsonSchemaFormat {
    "name" => name: Required,
    "schema" => schema: OrDefault,
    "strict" => strict: OrDefault,
});

/// One complete answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub id: String,
    /// The upstream model that answered, as the provider named it.
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub created: u64,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChatResponse {
    "id" => id: OrDefault,
    "model" => model: OrDefault,
    "created" => created: OrDefault,
    "choices" => choices: Required,
    "usage" => usage: OrDefault,
});

impl ChatResponse {
    /// An answer with one assistant choice holding `text`.
    pub fn from_text(model: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            choices: vec![Choice {
                index: 0,
                message: Message::assistant(text),
                finish_reason: Some(FinishReason::Stop),
                extra: Extra::new(),
            }],
            ..Self::default()
        }
    }

    /// The first choice's text, if any.
    pub fn text(&self) -> Option<String> {
        self.choices.first().and_then(|choice| choice.message.text_content())
    }

    /// Whether any choice was stopped by the provider's content filter.
    pub fn is_content_filtered(&self) -> bool {
        self.choices.iter().any(|c| c.finish_reason == Some(FinishReason::ContentFilter))
    }
}

/// One alternative answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: Message,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Choice {
    "index" => index: OrDefault,
    "message" => message: Required,
    "finish_reason" => finish_reason: OrDefault,
});

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    /// The provider's safety system withheld or cut the answer (a refusal counts too).
    ContentFilter,
    /// Any other reason, kept verbatim.
    Other(String),
}

impl FinishReason {
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

impl From<&str> for FinishReason {
    fn from(value: &str) -> Self {
        match value {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "tool_calls" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Ok(FinishReason::from(value.as_str()))
    }
}

/// Token counts of one exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }
    }
}

/// One piece of a streamed answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(ChatChunk {
    "id" => id: OrDefault,
    "model" => model: OrDefault,
    "created" => created: OrDefault,
    "choices" => choices: OrDefault,
    "usage" => usage: OrDefault,
});

impl ChatChunk {
    /// A chunk carrying `text` as the first choice's delta.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            choices: vec![ChunkChoice {
                delta: Delta { content: Some(text.into()), ..Delta::default() },
                ..ChunkChoice::default()
            }],
            ..Self::default()
        }
    }

    /// A chunk that only says why the answer ended.
    pub fn finish(reason: FinishReason) -> Self {
        Self {
            choices: vec![ChunkChoice { finish_reason: Some(reason), ..ChunkChoice::default() }],
            ..Self::default()
        }
    }

    /// Whether this chunk carries content a client would render or act on (text or a tool
    /// call). Once such a chunk reaches the client, the router can no longer fail over.
    pub fn has_content(&self) -> bool {
        self.choices.iter().any(|c| {
            c.delta.content.as_deref().is_some_and(|t| !t.is_empty()) || !c.delta.tool_calls.is_empty()
        })
    }

    /// Whether any choice ended because of the content filter.
    pub fn is_content_filtered(&self) -> bool {
        self.choices.iter().any(|c| c.finish_reason == Some(FinishReason::ContentFilter))
    }
}

/// One choice's part of a chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// What a chunk adds to a choice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A fragment of a tool call; fragments with the same `index` concatenate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A request for embedding vectors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingsRequest {
    #[serde(default)]
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(EmbeddingsRequest {
    "model" => model: OrDefault,
    "input" => input: Required,
    "dimensions" => dimensions: OrDefault,
});

/// What to embed: one text or several.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for EmbeddingInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_or_list(
            deserializer,
            "a string or a list of strings",
            EmbeddingInput::One,
            EmbeddingInput::Many,
        )
    }
}

impl EmbeddingInput {
    pub fn texts(&self) -> Vec<&str> {
        match self {
            EmbeddingInput::One(one) => vec![one.as_str()],
            EmbeddingInput::Many(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// Embedding vectors, one per input, in input order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EmbeddingsResponse {
    pub data: Vec<Embedding>,
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(EmbeddingsResponse {
    "data" => data: Required,
    "model" => model: OrDefault,
    "usage" => usage: OrDefault,
});

/// One embedding vector.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    pub index: u32,
    pub embedding: Vec<f32>,
}
