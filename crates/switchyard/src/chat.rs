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
    /// A route name or a `provider:model` target; empty takes the router's default route.
    #[serde(default)]
    pub model: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call; empty for none (and then left out of the JSON).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether and which tool the model must call; `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Sampling temperature; `None` for the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling: the probability mass to sample from; `None` for the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The most tokens the answer may have; `None` for the provider's default (adapters whose API
    /// requires a limit supply one). Counted into pacing's token estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end the answer when the model produces them; `None` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Asks for reproducible sampling where the provider supports it; `None` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// The shape the answer must take; `None` for free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Whether the client asked for a streamed answer: the gateway reads it to choose
    /// [`Router::chat_stream`](crate::Router::chat_stream). The router and the adapters ignore
    /// it: they stream when called to stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Fields of the request not modelled here, kept verbatim; adapters forward them only to a
    /// provider that speaks `origin`'s dialect.
    #[serde(flatten)]
    pub extra: Extra,
    /// The dialect the request arrived in. `extra` holds fields of that dialect, so adapters
    /// pass them through only to a provider that speaks it.
    #[serde(skip)]
    pub origin: Dialect,
    /// The request as the client wrote it, when it came over the wire. An adapter that speaks
    /// its dialect sends these bytes (with only the model, and what streaming needs, changed)
    /// instead of translating the canonical fields; the canonical fields are what routing
    /// reads. Whoever changes the canonical request in a way the provider must see clears it.
    #[serde(skip)]
    pub verbatim: Option<Verbatim>,
}

/// A body as its writer wrote it, with the dialect it is in: a client's request, a provider's
/// answer, or one event of a provider's stream (the whole server-sent-event frame). Carried
/// beside the canonical value, so that what passes between a client and a provider of the
/// same dialect is passed on byte for byte.
#[derive(Clone, PartialEq, Eq)]
pub struct Verbatim {
    dialect: Dialect,
    bytes: bytes::Bytes,
    /// These bytes, a provider's own stream event, tell of progress (see
    /// [`Verbatim::telling_progress`]).
    progress: bool,
}

impl Verbatim {
    /// `bytes` in `dialect`.
    pub fn new(dialect: Dialect, bytes: impl Into<bytes::Bytes>) -> Self {
        Self { dialect, bytes: bytes.into(), progress: false }
    }

    /// These bytes, one of a provider's own stream events that carries no canonical content,
    /// tell of progress all the same, as its adapter reads them: an Anthropic server tool's
    /// block, a ping while that tool runs, a Responses API event. A stream that sends them is
    /// not idle. A keep-alive of a stalled stream is not marked.
    pub fn telling_progress(mut self) -> Self {
        self.progress = true;
        self
    }

    /// Whether its adapter marked these bytes as telling of progress.
    pub fn tells_progress(&self) -> bool {
        self.progress
    }

    /// The dialect the bytes are in.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The bytes.
    pub fn bytes(&self) -> &bytes::Bytes {
        &self.bytes
    }

    /// The bytes, when they are in `dialect`.
    pub fn in_dialect(&self, dialect: Dialect) -> Option<&bytes::Bytes> {
        (self.dialect == dialect).then_some(&self.bytes)
    }
}

impl std::fmt::Debug for Verbatim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The length, not the content: bodies are large and they are the user's data.
        write!(f, "Verbatim({:?}, {} bytes)", self.dialect, self.bytes.len())
    }
}

/// An API dialect a request can arrive in and a provider can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// OpenAI Chat Completions, and servers compatible with it. The default.
    #[default]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Google's Gemini API (`generateContent`).
    Gemini,
    /// OpenAI's Responses API (`/v1/responses`). Requests of this dialect carry OpenAI
    /// extras, so adapters treat their `extra` as [`Dialect::OpenAi`]'s; only their
    /// [`Verbatim`] body is in this dialect.
    Responses,
}

deserialize_with_extra!(ChatRequest {
    "model" => model: OrDefault,
    "messages" => messages: Required,
    "tools" => tools: NullAsDefault,
    "tool_choice" => tool_choice: OrDefault,
    "temperature" => temperature: OrDefault,
    "top_p" => top_p: OrDefault,
    "max_tokens" => max_tokens: OrDefault,
    "stop" => stop: OrDefault,
    "seed" => seed: OrDefault,
    "response_format" => response_format: OrDefault,
    "stream" => stream: NullAsDefault,
} defaults: origin, verbatim);

/// The parameters a route's [`drop_params`](crate::route::Route::drop_params) may leave out
/// toward a target whose API has no equivalent: sampling (`temperature`, `top_p`, `top_k`,
/// `seed`, the penalties, `logit_bias`), log-probabilities, effort and verbosity, who the end
/// user is, caching and billing hints, and the fields LiteLLM's clients send for LiteLLM
/// itself (`fallbacks`, `num_retries`, `mock_response`, ...).
pub const DROPPABLE: [&str; 25] = [
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "reasoning_effort",
    "verbosity",
    "user",
    "safety_identifier",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "parallel_tool_calls",
    "fallbacks",
    "context_window_fallbacks",
    "num_retries",
    "mock_response",
    "caching",
    "tags",
];

impl ChatRequest {
    /// A request for `model` (a route name or a target) with default parameters.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self { model: model.into(), messages, ..Self::default() }
    }

    /// Takes the parameter `name` out of this request, when it is one a route's
    /// [`drop_params`](crate::route::Route::drop_params) may leave out: one that tunes how the
    /// answer is sampled or billed, never what it is about or its shape ([`DROPPABLE`]: not the
    /// conversation, tools or functions, `response_format`, `n`, a hosted tool's settings).
    /// False for any other name, or one the request does not set. (Only the name is ever said
    /// of it.)
    ///
    /// ```
    /// use switchyard::chat::{ChatRequest, Message};
    ///
    /// let mut request = ChatRequest::new("default", vec![Message::user("hi")]);
    /// request.extra.insert("frequency_penalty".into(), serde_json::json!(0.1));
    /// request.extra.insert("functions".into(), serde_json::json!([{"name": "f"}]));
    /// request.extra.insert("n".into(), serde_json::json!(2));
    /// assert!(request.remove_param("frequency_penalty"));
    /// assert!(!request.extra.contains_key("frequency_penalty"));
    /// assert!(!request.remove_param("functions"), "a client's functions are its tools");
    /// assert!(!request.remove_param("n"), "two choices asked are not one");
    /// assert!(!request.remove_param("messages"));
    /// ```
    pub fn remove_param(&mut self, name: &str) -> bool {
        if !DROPPABLE.contains(&name) {
            return false;
        }
        match name {
            "temperature" => self.temperature.take().is_some(),
            "top_p" => self.top_p.take().is_some(),
            "seed" => self.seed.take().is_some(),
            _ => self.extra.remove(name).is_some(),
        }
    }

    /// How many choices the request asks for (`n`, 1 when it does not say).
    pub fn choices_asked(&self) -> u64 {
        self.extra.get("n").and_then(serde_json::Value::as_u64).unwrap_or(1).max(1)
    }

    /// The most this request can cost in tokens, as pacing reserves it: the prompt's estimate
    /// plus `max_tokens`.
    pub fn estimated_tokens(&self) -> u32 {
        self.estimated_prompt_tokens().saturating_add(self.max_tokens.unwrap_or(0))
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
    /// Instructions for the model, ahead of the conversation.
    System,
    /// OpenAI's newer name for system instructions; adapters of other dialects treat it as system.
    Developer,
    /// What the person (or the calling program) said.
    User,
    /// An earlier answer of the model: text, tool calls or both.
    Assistant,
    /// A tool's result, answering the assistant's call named by `tool_call_id`.
    Tool,
    /// A function's result in OpenAI's legacy function calling (`functions`, an assistant's
    /// `function_call`), named by `name`: passed on to a provider of OpenAI's dialect as
    /// written; other dialects cannot express it.
    Function,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// Who wrote it: the instructions, the user, the model or a tool.
    pub role: Role,
    /// The text or parts; `None` for an assistant turn that only calls tools, or an answer the
    /// content filter withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// An optional participant name (OpenAI's `name`), to tell apart speakers of one role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tools an assistant message calls; empty for other messages and plain answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`Role::Tool`] message, the [`ToolCall::id`] it answers; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Fields of the message not modelled here, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(Message {
    "role" => role: Required,
    "content" => content: OrDefault,
    "name" => name: OrDefault,
    "tool_calls" => tool_calls: NullAsDefault,
    "tool_call_id" => tool_call_id: OrDefault,
});

impl Message {
    /// The Claude thinking blocks this (assistant) message carries under [`THINKING_BLOCKS`], as
    /// an OpenAI-dialect client sends them back; empty when it carries none or the member is
    /// not a list.
    pub fn thinking_blocks(&self) -> &[Value] {
        match self.extra.get(THINKING_BLOCKS) {
            Some(Value::Array(blocks)) => blocks,
            _ => &[],
        }
    }

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

    /// A [`Role::System`] message with plain `text`: instructions for the model.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    /// A [`Role::User`] message with plain `text`: what the person says.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// A [`Role::Assistant`] message with plain `text`: an earlier answer, for multi-turn
    /// conversations.
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
    /// Plain text.
    Text(String),
    /// Text and image parts, in order.
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
                    ContentPart::ImageUrl { .. } | ContentPart::Other(_) => None,
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
                    // Files and audio: their size, or the nominal amount when smaller.
                    ContentPart::Other(value) => json_len(value).max(1024),
                })
                .sum(),
        }
    }
}

/// The length of `value` written as JSON, counted without writing it.
fn json_len(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len() + 2,
        Value::Array(items) => items.iter().map(json_len).sum::<usize>() + items.len() + 1,
        Value::Object(members) => members.iter().map(|(k, v)| k.len() + 4 + json_len(v)).sum::<usize>() + 1,
        other => other.to_string().len(),
    }
}

/// One part of a multi-part message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// A run of text.
    Text {
        /// The text; [`Content::to_text`] joins a message's text parts without separator.
        text: String,
    },
    /// An image, by URL.
    ImageUrl {
        /// Where the image is, and the detail wanted.
        image_url: ImageUrl,
    },
    /// A part the canonical types do not model (OpenAI's `file` and `input_audio`,
    /// Anthropic's `document`, ...), as the client wrote it in the request's dialect
    /// ([`ChatRequest::origin`]). A provider of that dialect receives it as it is; an adapter of
    /// another dialect refuses the request, naming the part's type.
    #[serde(untagged)]
    Other(Value),
}

impl ContentPart {
    /// The part's `type`, as its dialect names it (`text`, `image_url`, `file`, ...).
    pub fn kind(&self) -> &str {
        match self {
            ContentPart::Text { .. } => "text",
            ContentPart::ImageUrl { .. } => "image_url",
            ContentPart::Other(value) => value.get("type").and_then(Value::as_str).unwrap_or("(untyped)"),
        }
    }
}

/// An image by URL, which may be a `data:` URL carrying the bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// An `http(s)` URL, or a `data:` URL with the image's bytes in base64.
    pub url: String,
    /// OpenAI's fidelity hint (`low`, `high`, `auto`); `None` for the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tool {
    /// `function`, or a kind of the request's dialect that the canonical types do not model
    /// (OpenAI's `custom`, Anthropic's versioned server tools).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its name, description and argument schema. A tool of another kind has the name its
    /// definition gives, and nothing else.
    pub function: FunctionDefinition,
    /// Members of the tool not modelled here, kept verbatim: a `custom` tool's definition
    /// (`"custom": {"name", "format", ...}`) is here. Empty for a function.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Tool {
    /// A function tool.
    pub fn function(function: FunctionDefinition) -> Self {
        Self { kind: function_type(), function, extra: Extra::new() }
    }

    /// Whether the tool is a function, which every dialect can express.
    pub fn is_function(&self) -> bool {
        self.kind == "function"
    }
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "type", default = "function_type")]
            kind: String,
            #[serde(default)]
            function: Option<FunctionDefinition>,
            #[serde(flatten)]
            extra: Extra,
        }
        let Wire { kind, function, extra } = Wire::deserialize(deserializer)?;
        let function = match function {
            Some(function) => function,
            None if kind != "function" => {
                // `{"type": "custom", "custom": {"name": ...}}`: the definition under its kind.
                let name = extra.get(&kind).and_then(|d| d.get("name")).and_then(Value::as_str);
                FunctionDefinition {
                    name: name.unwrap_or_default().to_owned(),
                    description: None,
                    parameters: None,
                    extra: Extra::new(),
                }
            }
            None => return Err(serde::de::Error::missing_field("function")),
        };
        Ok(Tool { kind, function, extra })
    }
}

fn function_type() -> String {
    "function".to_owned()
}

/// The signature of a callable function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDefinition {
    /// The name the model calls it by, echoed in [`FunctionCall::name`].
    pub name: String,
    /// What it does and when to use it, for the model; `None` for no description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object describing the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Fields of the definition not modelled here (`strict`, ...), kept verbatim.
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
        /// Always `function`.
        #[serde(rename = "type")]
        kind: String,
        /// The function to call.
        function: ToolChoiceFunction,
    },
}

/// The function a [`ToolChoice::Function`] forces the model to call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolChoiceFunction {
    /// The [`FunctionDefinition::name`] of one of the request's tools.
    pub name: String,
}

/// A call of a tool by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for this call; the [`Role::Tool`] message with the result names it in
    /// `tool_call_id`.
    pub id: String,
    /// `function`, which every dialect can express, or a kind of the answer's dialect that the
    /// canonical types do not model (OpenAI's `custom`, GPT-5's free-form tools).
    pub kind: String,
    /// Which function, with which arguments; empty for a call of another kind.
    pub function: FunctionCall,
    /// Members of the call not modelled here, kept as written: a `custom` call's
    /// `"custom": {"name", "input"}` is here. Empty for a function call.
    pub extra: Extra,
}

impl ToolCall {
    /// A call of the function `name` with `arguments` (JSON text).
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall { name: name.into(), arguments: arguments.into() },
            extra: Extra::new(),
        }
    }

    /// Whether the call is a function call, which every dialect can express.
    pub fn is_function(&self) -> bool {
        self.kind == "function"
    }

    /// Adds a streamed fragment: its id, the next pieces of the name and arguments, and of
    /// any unmodelled member (strings are concatenated, objects merged, anything else
    /// replaced), as OpenAI-dialect clients put fragments together.
    pub fn absorb(&mut self, delta: &ToolCallDelta) {
        if let Some(id) = &delta.id {
            self.id.clone_from(id);
        }
        if let Some(kind) = &delta.kind {
            self.kind.clone_from(kind);
        }
        if let Some(function) = &delta.function {
            if let Some(name) = &function.name {
                self.function.name.push_str(name);
            }
            if let Some(arguments) = &function.arguments {
                self.function.arguments.push_str(arguments);
            }
        }
        for (name, piece) in &delta.extra {
            merge_fragment(self.extra.entry(name.clone()).or_insert(Value::Null), piece);
        }
    }
}

/// Puts a streamed `piece` onto `so_far`: strings concatenate, objects merge member by
/// member, anything else replaces.
fn merge_fragment(so_far: &mut Value, piece: &Value) {
    match (so_far, piece) {
        (Value::String(so_far), Value::String(piece)) => so_far.push_str(piece),
        (Value::Object(so_far), Value::Object(piece)) => {
            for (name, piece) in piece {
                merge_fragment(so_far.entry(name.clone()).or_insert(Value::Null), piece);
            }
        }
        (so_far, piece) => *so_far = piece.clone(),
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let function = self.is_function() || self.function != FunctionCall::default();
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("type", &self.kind)?;
        if function {
            map.serialize_entry("function", &self.function)?;
        }
        for (name, value) in &self.extra {
            if !matches!(name.as_str(), "id" | "type" | "function") {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The call as written: `function` is required of a function call only.
        struct Wire {
            id: String,
            kind: Option<String>,
            function: Option<FunctionCall>,
            extra: Extra,
        }
        deserialize_with_extra!(Wire {
            "id" => id: Required,
            "type" => kind: OrDefault,
            "function" => function: OrDefault,
        });
        let wire = Wire::deserialize(deserializer)?;
        let kind = wire.kind.unwrap_or_else(function_type);
        let function = match wire.function {
            Some(function) => function,
            None if kind == "function" => return Err(serde::de::Error::missing_field("function")),
            None => FunctionCall::default(),
        };
        Ok(Self { id: wire.id, kind, function, extra: wire.extra })
    }
}

/// The function a tool call invokes, with its arguments as a JSON string.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The [`FunctionDefinition::name`] the model called.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not guaranteed to parse or to match the
    /// schema.
    pub arguments: String,
}

/// Stop sequences: one string or several.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Stop {
    /// A single sequence.
    One(String),
    /// Several sequences; any of them ends the answer.
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_or_list(deserializer, "a string or a list of strings", Stop::One, Stop::Many)
    }
}

impl Stop {
    /// The sequences as a list, whichever form the request used.
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
    /// Free text (what a request without a format gets).
    Text,
    /// Any valid JSON object (JSON mode); the schema is not enforced.
    JsonObject,
    /// JSON that matches the given schema (structured output).
    JsonSchema {
        /// The schema, with its name and strictness.
        json_schema: JsonSchemaFormat,
    },
}

/// A named JSON Schema for structured output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsonSchemaFormat {
    /// The schema's name, which OpenAI requires.
    pub name: String,
    /// The JSON Schema the answer must match; `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// Whether the provider must follow the schema exactly (OpenAI's strict mode); `None` for the
    /// provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Fields of the format not modelled here, kept verbatim.
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
    /// The provider's id of the answer (`chatcmpl-...`); empty when it gave none.
    #[serde(default)]
    pub id: String,
    /// The upstream model that answered, as the provider named it.
    #[serde(default)]
    pub model: String,
    /// When the answer was created, in Unix seconds; 0 when the provider did not say.
    #[serde(default)]
    pub created: u64,
    /// The alternative answers; [`ChatResponse::text`] reads the first.
    pub choices: Vec<Choice>,
    /// Token counts as the provider reported them; `None` when it did not (and the cost is then
    /// unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Fields of the answer not modelled here, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
    /// The answer as the provider wrote it, when the request went out verbatim: a server
    /// answering a client of that dialect sends these bytes rather than the canonical fields.
    /// Whoever changes the canonical answer clears it.
    #[serde(skip)]
    pub verbatim: Option<Verbatim>,
    /// The events of the stream the answer was put together from, as the provider wrote
    /// them, when the request went out verbatim and was streamed upstream (see
    /// [`assembly`](crate::assembly)): the client codec of that dialect writes from them the
    /// whole answer the provider would have written. Empty otherwise.
    #[serde(skip)]
    pub frames: Vec<Verbatim>,
    /// What the stream the answer was put together from did short of failing (it ended
    /// without its terminator, an unreadable event was skipped): the router writes it on the
    /// attempt's record, as for a stream. Empty otherwise.
    #[serde(skip)]
    pub notices: Vec<StreamNotice>,
}

deserialize_with_extra!(ChatResponse {
    "id" => id: OrDefault,
    "model" => model: OrDefault,
    "created" => created: OrDefault,
    "choices" => choices: Required,
    "usage" => usage: OrDefault,
} defaults: verbatim, frames, notices);

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

    /// The answer as the chunks a stream of it would be: per choice, one chunk with all it
    /// says (role, text, refusal, reasoning, whole tool calls) and one with its finish reason;
    /// then, when the answer tells usage, a usage chunk.
    pub fn into_chunks(self) -> Vec<ChatChunk> {
        let header = |choices| ChatChunk {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            choices,
            ..ChatChunk::default()
        };
        let mut chunks = Vec::with_capacity(2 * self.choices.len() + 1);
        for choice in &self.choices {
            let delta = Delta::of_message(&choice.message);
            chunks.push(header(vec![ChunkChoice { index: choice.index, delta, finish_reason: None }]));
            let finish = ChunkChoice {
                index: choice.index,
                finish_reason: choice.finish_reason.clone(),
                ..ChunkChoice::default()
            };
            chunks.push(header(vec![finish]));
        }
        if self.usage.is_some() {
            chunks.push(ChatChunk { usage: self.usage, ..header(Vec::new()) });
        }
        chunks
    }
}

/// One alternative answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// Position among the answer's choices, from 0.
    #[serde(default)]
    pub index: u32,
    /// The assistant's message: text, tool calls or both.
    pub message: Message,
    /// Why generation stopped; `None` when the provider did not say.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// Fields of the choice not modelled here, kept verbatim.
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
    /// A natural end, or one of the request's stop sequences (`stop`).
    Stop,
    /// The answer reached `max_tokens` or the model's context window and was cut (`length`).
    Length,
    /// The model called tools and waits for their results (`tool_calls`).
    ToolCalls,
    /// The provider's safety system withheld or cut the answer (a refusal counts too).
    ContentFilter,
    /// Any other reason, kept verbatim.
    Other(String),
}

impl FinishReason {
    /// The name on the OpenAI wire (`stop`, `length`, `tool_calls`, `content_filter`), or the
    /// other reason verbatim.
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
    /// Tokens of the prompt (input), as the provider counted them.
    #[serde(default)]
    pub prompt_tokens: u32,
    /// Tokens of the answer (output).
    #[serde(default)]
    pub completion_tokens: u32,
    /// Both together, as the provider reported them.
    #[serde(default)]
    pub total_tokens: u32,
    /// What the prompt count holds of the prompt cache, when the provider says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// What the answer count holds of reasoning, when the provider says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

impl Usage {
    /// The counts of two calls together (their details, which say how each was billed, are
    /// not added up: none are given).
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self.completion_tokens.saturating_add(other.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            ..Usage::default()
        }
    }
}

/// The prompt count's details (OpenAI's `prompt_tokens_details`; Anthropic's
/// `cache_read_input_tokens` and `cache_creation_input_tokens`). Both are part of
/// `prompt_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens read from the provider's cache (billed at its cached rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    /// Prompt tokens written to the cache (Anthropic's `cache_creation_input_tokens`; OpenAI
    /// has no such count, so it is not written in its dialect).
    #[serde(default, skip)]
    pub cache_write_tokens: Option<u32>,
}

/// The answer count's details (OpenAI's `completion_tokens_details`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Answer tokens spent on reasoning before the visible answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
}

impl Usage {
    /// Counts with `total_tokens` the sum of the two.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
            completion_tokens_details: None,
        }
    }

    /// Prompt tokens read from the cache, when the provider said.
    pub fn cached_tokens(&self) -> Option<u32> {
        self.prompt_tokens_details.and_then(|d| d.cached_tokens)
    }

    /// Prompt tokens written to the cache, when the provider said.
    pub fn cache_write_tokens(&self) -> Option<u32> {
        self.prompt_tokens_details.and_then(|d| d.cache_write_tokens)
    }
}

/// One piece of a streamed answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatChunk {
    /// The provider's id of the whole answer, repeated on every chunk; empty when it gave none.
    #[serde(default)]
    pub id: String,
    /// The upstream model that answered, as the provider named it.
    #[serde(default)]
    pub model: String,
    /// When the answer was created, in Unix seconds; 0 when the provider did not say.
    #[serde(default)]
    pub created: u64,
    /// The choices this chunk extends; empty for a chunk that carries only usage.
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Token counts, usually on the last chunk only and only when the provider reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Fields of the chunk not modelled here, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
    /// The stream event as the provider wrote it (the whole frame, `event:` and `data:`
    /// lines), when the request went out verbatim. Some events carry nothing canonical
    /// (Anthropic's `ping`, `content_block_stop`): their chunk is empty but for this.
    #[serde(skip)]
    pub verbatim: Option<Verbatim>,
    /// What the provider's stream did that the trail should say, short of a failure: the
    /// router takes it off the chunk (and drops a chunk that carried nothing else).
    #[serde(skip)]
    pub notice: Option<StreamNotice>,
}

/// What a provider's stream did that its request's trail says, short of a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamNotice {
    /// The stream ended after its finish without its terminator (`data: [DONE]`,
    /// `message_stop`): the answer is whole all the same.
    Unterminated,
    /// The stream broke after its finish, before its terminator: the answer is whole all the
    /// same; what broke it (scrubbed).
    BrokenAfterFinish(String),
    /// An event that could not be read was skipped; what was wrong with it (scrubbed).
    Skipped(String),
    /// The request was sent again, changed, to be answered (without a past turn's thinking the
    /// target refused as not its own); what was done and why, with no secret in it.
    Resent(String),
    /// The request went without parameters the target's API has no equivalent for (the
    /// route's `drop_params`): which, by name.
    LeftOut(Vec<String>),
    /// The stream's terminator (`data: [DONE]`) came before every choice said why it stopped:
    /// the answer is taken as whole, as a server that never writes a finish reason needs,
    /// and said, as a proxy that cut it would look the same.
    TerminatedUnfinished,
}

deserialize_with_extra!(ChatChunk {
    "id" => id: OrDefault,
    "model" => model: OrDefault,
    "created" => created: OrDefault,
    "choices" => choices: OrDefault,
    "usage" => usage: OrDefault,
} defaults: verbatim, notice);

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

    /// A chunk that only carries what its stream did short of failing (see [`StreamNotice`]).
    pub fn notice(notice: StreamNotice) -> Self {
        Self { notice: Some(notice), ..Self::default() }
    }

    /// A chunk that only says why the answer ended.
    pub fn finish(reason: FinishReason) -> Self {
        Self {
            choices: vec![ChunkChoice { finish_reason: Some(reason), ..ChunkChoice::default() }],
            ..Self::default()
        }
    }

    /// Whether any choice of this chunk finished (with its reason).
    pub fn finishes(&self) -> bool {
        self.choices.iter().any(|choice| choice.finish_reason.is_some())
    }

    /// Whether this chunk carries content (text, a model's refusal or reasoning, a thinking
    /// block, a tool call): the upstream is answering, and the stream's first-byte wait is
    /// over. Reasoning counts: a model that thinks for a minute is answering. Whether the
    /// caller is shown it, which is what commits a stream, is
    /// [`shows_content`](Self::shows_content).
    pub fn has_content(&self) -> bool {
        self.content(true)
    }

    /// Whether this chunk begins the answer: content (reasoning counts) or a finish (an empty
    /// answer is an answer). It ends the first-byte wait; a provider's `message_start`, a role
    /// or a keep-alive does not.
    pub fn answers(&self) -> bool {
        self.has_content() || self.finishes()
    }

    /// Whether this chunk shows the upstream answering, once it began: [`answers`](Self::answers),
    /// or a provider's own event that tells of progress (an Anthropic server tool's block as it
    /// runs, a Responses API event). A keep-alive (an Anthropic `ping`, an empty delta) does
    /// not: an upstream that stalled and pings is still stalled, so it does not end the idle
    /// wait.
    pub fn shows_life(&self) -> bool {
        self.answers() || self.verbatim.as_ref().is_some_and(Verbatim::tells_progress)
    }

    /// Whether a caller who is shown `reasoning` is shown something of this chunk beyond its
    /// role: text, a refusal, a tool call, or reasoning it reads.
    pub fn shows_content(&self, reasoning: ReasoningShown) -> bool {
        let reasoning_shown = match reasoning {
            ReasoningShown::Any => true,
            ReasoningShown::Verbatim(dialect) => {
                self.verbatim.as_ref().is_some_and(|v| v.dialect() == dialect)
            }
        };
        self.content(reasoning_shown)
    }

    /// Whether any choice carries text, a refusal or a tool call, or (when `reasoning` counts)
    /// reasoning or a thinking block.
    fn content(&self, reasoning: bool) -> bool {
        let text = |t: &Option<String>| t.as_deref().is_some_and(|t| !t.is_empty());
        self.choices.iter().any(|c| {
            text(&c.delta.content)
                || text(&c.delta.refusal)
                || !c.delta.tool_calls.is_empty()
                || (reasoning && (text(&c.delta.reasoning_content) || !c.delta.thinking_blocks.is_empty()))
        })
    }

    /// Whether any choice ended because of the content filter.
    pub fn is_content_filtered(&self) -> bool {
        self.choices.iter().any(|c| c.finish_reason == Some(FinishReason::ContentFilter))
    }
}

/// Which reasoning a caller is shown, said by the caller (the gateway, for its client's
/// dialect): what commits a stream is the first chunk the caller is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningShown {
    /// Any model's reasoning (a client that reads it as text).
    #[default]
    Any,
    /// Only reasoning a provider wrote in this dialect, passed on as that provider wrote it
    /// (a client that sends thinking blocks back with their signatures: another model's
    /// reasoning, unsigned, would be refused then, so it is not written to it).
    Verbatim(Dialect),
}

/// One choice's part of a chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    /// Which choice of the answer this extends.
    #[serde(default)]
    pub index: u32,
    /// What this chunk adds to the choice.
    #[serde(default)]
    pub delta: Delta,
    /// Set on the choice's last chunk: why generation stopped.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// The most tool calls one choice of a streamed answer may make: a fragment's index is below
/// it. Adapters refuse a stream that names a call past it as malformed, and what assembles a
/// stream never makes room for one (a provider naming call 4,000,000,000 would otherwise have
/// it fill gigabytes with empty calls).
pub const MAX_TOOL_CALLS: u32 = 1024;

/// The assistant message field of Claude's signed thinking blocks, whole, as
/// [`Delta::thinking_blocks`] streams them: how the gateway hands them to an OpenAI-dialect
/// client, how that client sends them back, and what only an Anthropic target reads.
pub const THINKING_BLOCKS: &str = "thinking_blocks";

/// What a chunk adds to a choice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// The author, usually on a choice's first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The next piece of text; `None` or empty when this chunk carries none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Fragments of tool calls; empty when this chunk carries none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
    /// The next piece of a refusal: the model declining in its own words (OpenAI's
    /// `delta.refusal`). An answer like any other, not a content-filter stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The next piece of the model's reasoning before its answer: Anthropic's thinking
    /// (`thinking_delta`), or `delta.reasoning_content` as OpenAI-compatible reasoning servers
    /// (DeepSeek, vLLM, Qwen) stream it, and as it is written to OpenAI-dialect clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Whole Anthropic `thinking` blocks (`{type, thinking, signature}`) and
    /// `redacted_thinking` blocks (`{type, data}`), in the form LiteLLM gave Chat Completions:
    /// an OpenAI-dialect client that sends them back on its assistant turn lets an Anthropic
    /// model continue a tool-use turn it thought through. A thinking block comes once its
    /// signature is known, after its text streamed as `reasoning_content`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking_blocks: Vec<Value>,
}

impl Delta {
    /// All of `message` as one delta: its role, text, refusal, reasoning and thinking blocks
    /// (the last three from its `extra`, as OpenAI-dialect answers carry them), and each tool
    /// call whole.
    pub fn of_message(message: &Message) -> Self {
        let text = |name: &str| message.extra.get(name).and_then(Value::as_str).map(str::to_owned);
        let tool_calls = (0u32..)
            .zip(&message.tool_calls)
            .map(|(index, call)| ToolCallDelta {
                index,
                id: Some(call.id.clone()),
                kind: Some(call.kind.clone()),
                function: (call.is_function() || call.function != FunctionCall::default()).then(|| {
                    FunctionCallDelta {
                        name: Some(call.function.name.clone()),
                        arguments: Some(call.function.arguments.clone()),
                    }
                }),
                extra: call.extra.clone(),
            })
            .collect();
        Self {
            role: Some(message.role),
            content: message.text_content(),
            tool_calls,
            refusal: text("refusal"),
            reasoning_content: text("reasoning_content"),
            thinking_blocks: message.thinking_blocks().to_vec(),
        }
    }
}

/// A fragment of a tool call; fragments with the same `index` concatenate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which tool call of the choice this fragment extends: below [`MAX_TOOL_CALLS`].
    pub index: u32,
    /// The call's id, on its first fragment only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function` (or another kind, such as `custom`), on the call's first fragment only.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The function's name and a piece of its arguments, when this fragment carries them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
    /// Pieces of members not modelled here, as written: a `custom` call's
    /// `"custom": {"name"}` first, then `"custom": {"input": "..."}` pieces.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A fragment of a [`FunctionCall`]: the name comes first, the arguments in pieces to
/// concatenate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    /// The function's name, on the first fragment only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The next piece of the arguments' JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A request for embedding vectors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingsRequest {
    /// A route name or a `provider:model` target, as for chat; empty takes the default route.
    #[serde(default)]
    pub model: String,
    /// One text or several; the answer has one vector per text.
    pub input: EmbeddingInput,
    /// The vector length wanted, for models that can shorten their vectors; `None` for the model's
    /// own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    /// Fields of the request not modelled here, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

deserialize_with_extra!(EmbeddingsRequest {
    "model" => model: OrDefault,
    "input" => input: Required,
    "dimensions" => dimensions: OrDefault,
});

/// What to embed: one text or several, or token ids (OpenAI's `int[]` and `int[][]`, which
/// LangChain sends), which only a provider of OpenAI's dialect reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// A single text: the answer has one vector.
    One(String),
    /// Several texts: the answer has one vector each.
    Many(Vec<String>),
    /// Inputs of token ids, each a list: the answer has one vector each.
    Tokens(Vec<Vec<u32>>),
}

/// One element of an `input` list: a text, a token id, or a list of token ids.
enum InputItem {
    Text(String),
    Token(u32),
    Tokens(Vec<u32>),
}

impl<'de> Deserialize<'de> for InputItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Item;
        impl<'de> serde::de::Visitor<'de> for Item {
            type Value = InputItem;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, a token id or a list of token ids")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<InputItem, E> {
                Ok(InputItem::Text(text.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<InputItem, E> {
                Ok(InputItem::Text(text))
            }
            fn visit_u64<E: serde::de::Error>(self, id: u64) -> Result<InputItem, E> {
                u32::try_from(id).map(InputItem::Token).map_err(|_| E::custom("a token id past u32"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<InputItem, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(InputItem::Tokens)
            }
        }
        deserializer.deserialize_any(Item)
    }
}

impl<'de> Deserialize<'de> for EmbeddingInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = string_or_list(
            deserializer,
            "a string, a list of strings, a list of token ids or a list of token-id lists",
            |one| Ok(EmbeddingInput::One(one)),
            EmbeddingInput::of_items,
        )?;
        read.map_err(serde::de::Error::custom)
    }
}

impl EmbeddingInput {
    /// A list's elements as one kind of input; `Err` when they mix kinds.
    fn of_items(items: Vec<InputItem>) -> Result<Self, &'static str> {
        /// Every element as `take` reads it, or the refusal of a list that mixes kinds.
        fn all<T>(items: Vec<InputItem>, take: fn(InputItem) -> Option<T>) -> Result<Vec<T>, &'static str> {
            let mixed = "mixes strings, token ids and token-id lists: send one kind";
            items.into_iter().map(|item| take(item).ok_or(mixed)).collect()
        }
        match items.first() {
            None | Some(InputItem::Text(_)) => {
                all(items, |item| if let InputItem::Text(text) = item { Some(text) } else { None })
                    .map(EmbeddingInput::Many)
            }
            Some(InputItem::Token(_)) => {
                all(items, |item| if let InputItem::Token(id) = item { Some(id) } else { None })
                    .map(|ids| EmbeddingInput::Tokens(vec![ids]))
            }
            Some(InputItem::Tokens(_)) => {
                all(items, |item| if let InputItem::Tokens(ids) = item { Some(ids) } else { None })
                    .map(EmbeddingInput::Tokens)
            }
        }
    }

    /// The texts in input order (one for [`EmbeddingInput::One`]); none for token ids.
    pub fn texts(&self) -> Vec<&str> {
        match self {
            EmbeddingInput::One(one) => vec![one.as_str()],
            EmbeddingInput::Many(many) => many.iter().map(String::as_str).collect(),
            EmbeddingInput::Tokens(_) => Vec::new(),
        }
    }

    /// How many inputs, so vectors, the answer holds.
    pub fn len(&self) -> usize {
        match self {
            EmbeddingInput::One(_) => 1,
            EmbeddingInput::Many(many) => many.len(),
            EmbeddingInput::Tokens(lists) => lists.len(),
        }
    }

    /// Whether there is nothing to embed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the inputs are token ids, which only OpenAI's dialect takes.
    pub fn is_tokens(&self) -> bool {
        matches!(self, EmbeddingInput::Tokens(_))
    }
}

/// How many input tokens a request would take, as the provider counts them (Anthropic's
/// `count_tokens`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenCount {
    /// The prompt's tokens: messages, system, tools.
    pub input_tokens: u32,
    /// The provider's answer as it wrote it, when the request went out verbatim.
    pub verbatim: Option<Verbatim>,
}

/// Embedding vectors, one per input, in input order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EmbeddingsResponse {
    /// The vectors, one per input, in input order.
    pub data: Vec<Embedding>,
    /// The upstream model that answered, as the provider named it.
    #[serde(default)]
    pub model: String,
    /// Token counts (embeddings count prompt tokens only); `None` when the provider did not report
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Fields of the answer not modelled here, kept verbatim.
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
    /// Position of the input this vector embeds.
    pub index: u32,
    /// The vector; its length is the model's (or the request's `dimensions`). Comparable only with
    /// vectors of the same model.
    pub embedding: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{
        ChatChunk, ChatRequest, ChunkChoice, Delta, Dialect, ReasoningShown, ToolCall, ToolCallDelta,
        Verbatim,
    };

    #[test]
    fn a_custom_tool_call_is_kept_as_written_and_a_function_call_needs_its_function() {
        let written =
            json!({"id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}});
        let call: ToolCall = serde_json::from_value(written.clone()).unwrap();
        assert!(!call.is_function());
        assert_eq!(serde_json::to_value(&call).unwrap(), written, "it goes back as it came");
        let function = json!({"id": "call_2", "function": {"name": "f", "arguments": "{}"}});
        let function: ToolCall = serde_json::from_value(function).unwrap();
        assert!(function.is_function(), "a call without a type is a function call");
        let missing = serde_json::from_value::<ToolCall>(json!({"id": "call_3", "type": "function"}));
        assert!(missing.unwrap_err().to_string().contains("missing field `function`"));
    }

    #[test]
    fn streamed_fragments_of_a_custom_call_are_put_together() {
        let fragments = [
            json!({"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": ""}}),
            json!({"index": 0, "custom": {"input": "print("}}),
            json!({"index": 0, "custom": {"input": "1)"}}),
        ];
        let mut call = ToolCall::function("", "", "");
        for fragment in fragments {
            call.absorb(&serde_json::from_value::<ToolCallDelta>(fragment).unwrap());
        }
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}})
        );
    }

    #[test]
    fn an_anthropic_caller_is_shown_only_an_anthropic_providers_own_reasoning() {
        let delta = Delta { reasoning_content: Some("Hmm.".to_owned()), ..Delta::default() };
        let mut thinking = ChatChunk {
            choices: vec![ChunkChoice { delta, ..ChunkChoice::default() }],
            ..ChatChunk::default()
        };
        assert!(thinking.has_content());
        assert!(thinking.shows_content(ReasoningShown::Any));
        assert!(
            !thinking.shows_content(ReasoningShown::Verbatim(Dialect::Anthropic)),
            "another dialect's reasoning is not written to it"
        );
        thinking.verbatim = Some(Verbatim::new(Dialect::Anthropic, "event: content_block_delta\n..."));
        assert!(
            thinking.shows_content(ReasoningShown::Verbatim(Dialect::Anthropic)),
            "the provider's own signed thinking passes"
        );
        assert!(ChatChunk::text("Hi").shows_content(ReasoningShown::Verbatim(Dialect::Anthropic)));
        assert!(!ChatChunk::default().shows_content(ReasoningShown::Any));
    }

    #[test]
    fn null_lists_and_flags_read_as_absent_as_clients_send_them() {
        // Clients that echo an assistant turn back send `tool_calls: null`; some send
        // `tools: null` and `stream: null` for "not set".
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes","tool_calls":null}],"tools":null,"stream":null}"#;
        let request: ChatRequest = serde_json::from_str(body).expect("null reads as absent");
        assert!(request.tools.is_empty());
        assert!(!request.stream);
        assert!(request.messages[1].tool_calls.is_empty());
    }
}
