//! Request bodies and response shapes of the OpenAI dialect.
//!
//! Bodies borrow from the canonical request and are serialised once, straight to bytes. Answers
//! are read through tolerant shapes (null where a list is expected, missing ids, arguments
//! sent as objects) and turned into canonical values, because compatible servers bend the
//! format in small ways that should not fail an otherwise good answer.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use switchyard::chat::{
    ChatRequest, ChatResponse, Choice, CompletionTokensDetails, Content, ContentPart, Dialect, Embedding,
    EmbeddingInput, EmbeddingsRequest, EmbeddingsResponse, Extra, FinishReason, FunctionCall, Message,
    PromptTokensDetails, ResponseFormat, Role, Stop, THINKING_BLOCKS, Tool, ToolCall, ToolChoice, Usage,
};
use switchyard::credential::Secret;
use switchyard::deserialize_with_extra;
use switchyard::{ErrorKind, ProviderError};

use super::errors;
use crate::ProviderKind;

/// Request fields the body writes itself; an `extra` entry of the same name never overrides
/// them. `stream_options` is merged, not copied (see [`chat_body`]).
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "response_format",
    "stream",
    "stream_options",
];
/// Message fields [`MessageBody`] writes itself; a message `extra` entry of the same name is
/// not copied. Nor is Claude's signed thinking ([`THINKING_BLOCKS`]), which only an Anthropic
/// target reads.
const MESSAGE_FIELDS: &[&str] = &[
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    THINKING_BLOCKS,
    crate::codec::SEALED_REASONING,
];
/// Tool function fields [`FunctionBody`] writes itself.
const FUNCTION_FIELDS: &[&str] = &["name", "description", "parameters"];
/// `response_format.json_schema` fields [`JsonSchemaBody`] writes itself.
const SCHEMA_FIELDS: &[&str] = &["name", "schema", "strict"];
/// Embeddings request fields [`EmbeddingsBody`] writes itself (`encoding_format` included, so
/// that a client's `base64` never travels).
const EMBEDDINGS_FIELDS: &[&str] = &["model", "input", "dimensions", "encoding_format"];

/// Members of a tool the adapter writes itself.
const TOOL_FIELDS: &[&str] = &["type", "function"];

/// Refuses a request of another dialect holding a part or a tool the canonical types do not
/// model (an Anthropic `document` block, a server tool): written into Chat Completions as it
/// is, it would mean nothing.
///
/// OpenAI's own API takes text only in a tool message ("Image URLs are only allowed for messages
/// with role 'user'"): a tool result's other parts are lifted into a user message
/// ([`lift_tool_media`]); servers that speak its dialect may take more (OpenRouter, vLLM), and
/// are sent them where they are.
fn refuse_foreign_parts(request: &ChatRequest) -> Result<(), ProviderError> {
    if let Some((i, tool)) = request.tools.iter().enumerate().find(|(_, tool)| !tool.is_function()) {
        return Err(ProviderError::unsupported(format!(
            "tools[{i}] is a `{}` tool; only `function` tools translate to the Chat Completions API",
            tool.kind
        )));
    }
    for (i, message) in request.messages.iter().enumerate() {
        let Some(Content::Parts(parts)) = &message.content else { continue };
        let untranslatable = |part: &&ContentPart| match part {
            ContentPart::Other(value) => file_part(value).is_none(),
            ContentPart::Text { .. } | ContentPart::ImageUrl { .. } => false,
        };
        if let Some((j, part)) = parts.iter().enumerate().find(|(_, part)| untranslatable(part)) {
            return Err(ProviderError::unsupported(format!(
                "messages[{i}].content[{j}] is a `{}` part, which Switchyard cannot translate to the Chat Completions API",
                part.kind()
            )));
        }
    }
    Ok(())
}

/// The Chat Completions `file` part for a part of another dialect, when it is one: an
/// Anthropic `document` carrying a PDF inline (base64) becomes a `file` with that PDF as a
/// `data:` URL.
fn file_part(part: &Value) -> Option<Vec<ContentPart>> {
    if part.get("type")?.as_str()? != "document" {
        return None;
    }
    let source = part.get("source")?;
    let pdf =
        source.get("type")?.as_str()? == "base64" && source.get("media_type")?.as_str()? == "application/pdf";
    if !pdf {
        return None;
    }
    let data = source.get("data")?.as_str()?;
    let mut file = Map::new();
    file.insert(
        "filename".to_owned(),
        Value::from(part.get("title").and_then(Value::as_str).unwrap_or("document.pdf")),
    );
    file.insert("file_data".to_owned(), Value::from(format!("data:application/pdf;base64,{data}")));
    let mut parts = vec![ContentPart::Other(serde_json::json!({ "type": "file", "file": file }))];
    // What the client tells the model of the document (Anthropic's `context`), after it.
    if let Some(context) = part.get("context").and_then(Value::as_str).filter(|text| !text.is_empty()) {
        parts.push(ContentPart::Text { text: format!("{DOCUMENT_CONTEXT}{context}") });
    }
    Some(parts)
}

/// What begins the text that follows a document with what the client said of it: it goes
/// where its document goes.
const DOCUMENT_CONTEXT: &str = "About the document above: ";

/// Whether `parts[at]` goes with the media of a tool result lifted out of it: a medium, or the
/// text of what the client said of the document just before it.
fn lifted_with_media(parts: &[ContentPart], at: usize) -> bool {
    match &parts[at] {
        ContentPart::Text { text } => {
            text.starts_with(DOCUMENT_CONTEXT)
                && at.checked_sub(1).is_some_and(|before| !matches!(parts[before], ContentPart::Text { .. }))
        }
        _ => true,
    }
}

/// OpenAI's own API takes only text in a tool message. A tool result's other parts (the image
/// Claude Code's Read tool returned) are lifted out of it into one user message after the run
/// of tool messages it is in (a user message between them would break the run the assistant's
/// calls open), each after a line naming the call it answers; the tool message keeps its text,
/// or says where its result went. `contents` (one entry a message, see [`translated_contents`])
/// takes the tool messages' new content; returned, each user message with the index of the
/// message it follows.
fn lift_tool_media(request: &ChatRequest, contents: &mut [Option<Content>]) -> Vec<(usize, Content)> {
    let messages = &request.messages;
    let mut lifted = Vec::new();
    let mut pending: Vec<ContentPart> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if message.role != Role::Tool {
            continue;
        }
        if let Some(Content::Parts(parts)) = contents[i].as_ref().or(message.content.as_ref())
            && parts.iter().any(|part| !matches!(part, ContentPart::Text { .. }))
        {
            let (mut text, mut media) = (Vec::new(), Vec::new());
            for (at, part) in parts.iter().enumerate() {
                match lifted_with_media(parts, at) {
                    true => media.push(part.clone()),
                    false => text.push(part.clone()),
                }
            }
            let call = message.tool_call_id.as_deref().unwrap_or("the tool call");
            pending.push(ContentPart::Text { text: format!("The result of {call}:") });
            pending.extend(media);
            contents[i] = Some(match text.is_empty() {
                true => Content::Text("The result is in the next message.".to_owned()),
                false => Content::Parts(text),
            });
        }
        let run_ends = messages.get(i + 1).is_none_or(|next| next.role != Role::Tool);
        if run_ends && !pending.is_empty() {
            lifted.push((i, Content::Parts(std::mem::take(&mut pending))));
        }
    }
    lifted
}

/// An Anthropic client's failed tool result (`is_error: true`), for which Chat Completions has
/// no field, said in its content (`Error: ` before it): else the model reads the failure as the
/// call's result.
fn say_failed_tools(request: &ChatRequest, contents: &mut [Option<Content>]) {
    for (i, message) in request.messages.iter().enumerate() {
        if message.role != Role::Tool || !crate::codec::tool_failed(message) {
            continue;
        }
        contents[i] = Some(match contents[i].take().or_else(|| message.content.clone()) {
            Some(Content::Text(text)) => Content::Text(format!("Error: {text}")),
            Some(Content::Parts(mut parts)) => {
                match parts.first_mut() {
                    Some(ContentPart::Text { text }) => text.insert_str(0, "Error: "),
                    _ => parts.insert(0, ContentPart::Text { text: "Error:".to_owned() }),
                }
                Content::Parts(parts)
            }
            None => Content::Text("Error".to_owned()),
        });
    }
}

/// The messages' content with the parts of another dialect that Chat Completions can
/// express (see [`file_part`]) rewritten, for the messages that hold any; `None` for the rest.
fn translated_contents(request: &ChatRequest) -> Vec<Option<Content>> {
    request
        .messages
        .iter()
        .map(|message| {
            let Some(Content::Parts(parts)) = &message.content else { return None };
            if !parts.iter().any(|part| matches!(part, ContentPart::Other(_))) {
                return None;
            }
            let parts = parts
                .iter()
                .flat_map(|part| match part {
                    ContentPart::Other(value) => file_part(value).unwrap_or_else(|| vec![part.clone()]),
                    other => vec![other.clone()],
                })
                .collect();
            Some(Content::Parts(parts))
        })
        .collect()
}

/// The Chat Completions body for `request`, sent to `model`.
///
/// `streaming` adds `stream: true` and `stream_options.include_usage` (merged into the client's
/// own `stream_options`, which a non-streaming call never sends since OpenAI rejects it there).
/// OpenAI's own API (`kind`) takes `max_tokens` as `max_completion_tokens` (it deprecated the
/// former, and its reasoning models refuse it, while many compatible servers know only the
/// former), and a translated tool result's parts other than text, which it does not take in a
/// tool message, lifted into a user message ([`lift_tool_media`]). Another dialect's `top_k` goes to a compatible server
/// (vLLM, llama.cpp, Ollama take it); OpenAI's and Azure's APIs have none, and refuse it.
pub(super) fn chat_body(
    request: &ChatRequest,
    model: &str,
    streaming: bool,
    (kind, padded): (ProviderKind, bool),
) -> Result<Vec<u8>, ProviderError> {
    let forward = request.origin == Dialect::OpenAi;
    let completion_tokens_name = kind == ProviderKind::OpenAi;
    let top_k = match forward {
        true => None,
        false => foreign_top_k(request, kind)?,
    };
    if !forward {
        log_dropped(request);
        refuse_foreign_parts(request)?;
    }
    let extra = forward.then_some(&request.extra);
    // The client's explicit `max_completion_tokens` (an extra) wins over the modelled field.
    let explicit_completion_limit = extra.is_some_and(|extra| extra.contains_key("max_completion_tokens"));
    let (max_tokens, max_completion_tokens) = match request.max_tokens {
        Some(_) if completion_tokens_name && explicit_completion_limit => (None, None),
        Some(limit) if completion_tokens_name => (None, Some(limit)),
        limit => (limit, None),
    };
    let stream_options = streaming.then(|| {
        let mut options = match extra.and_then(|extra| extra.get("stream_options")) {
            Some(Value::Object(options)) => options.clone(),
            _ => Map::new(),
        };
        options.insert("include_usage".to_owned(), Value::Bool(true));
        options
    });
    // Another dialect's parts that Chat Completions can express, rewritten (none in its own).
    let mut translated = if forward { Vec::new() } else { translated_contents(request) };
    if !forward {
        say_failed_tools(request, &mut translated);
    }
    let lifted = match !forward && completion_tokens_name {
        true => lift_tool_media(request, &mut translated),
        false => Vec::new(),
    };
    let body = ChatBody {
        model,
        messages: messages_body(request, (&translated, &lifted), forward, (model, padded)),
        tools: request.tools.iter().map(|tool| ToolBody::new(tool, forward)).collect(),
        tool_choice: request.tool_choice.as_ref(),
        temperature: request.temperature,
        top_p: request.top_p,
        top_k,
        max_tokens,
        max_completion_tokens,
        stop: request.stop.as_ref(),
        seed: request.seed,
        response_format: request
            .response_format
            .as_ref()
            .map(|format| ResponseFormatBody::new(format, forward)),
        stream: streaming,
        stream_options,
        parallel_tool_calls: (!forward && !request.tools.is_empty())
            .then(|| request.extra.get("parallel_tool_calls").and_then(Value::as_bool))
            .flatten(),
        reasoning_effort: (!forward && completion_tokens_name)
            .then(|| reasoning_effort(request))
            .flatten()
            .filter(|_| reasons(model)),
        extra: Passthrough {
            fields: extra,
            skip: REQUEST_FIELDS,
            also_skip: if max_completion_tokens.is_some() { &["max_completion_tokens"] } else { &[] },
        },
    };
    encode(&body)
}

/// Whether OpenAI's `model` reasons and takes `reasoning_effort` (the o-series from o3, o1 but
/// its mini and preview, GPT-5 but its chat models): another refuses the field
/// (`unsupported_parameter`), which would end the route.
fn reasons(model: &str) -> bool {
    let starts =
        |prefix: &str| model.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix));
    let family = ["o1", "o3", "o4", "gpt-5"].iter().any(|family| starts(family));
    let refuses = ["o1-mini", "o1-preview"].iter().any(|old| starts(old))
        || model.to_ascii_lowercase().contains("chat");
    family && !refuses
}

/// The `reasoning_effort` a request of another dialect asks for: a Responses client's
/// `reasoning.effort` (read as `reasoning_effort`), or an Anthropic client's thinking (Claude
/// Code's adaptive thinking with `output_config.effort`, or a budget of thinking tokens), in
/// the three efforts every reasoning model takes. `None` when it asks for no thinking.
fn reasoning_effort(request: &ChatRequest) -> Option<&'static str> {
    let level = |effort: &str| match effort {
        "minimal" | "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "xhigh" | "max" => Some("high"),
        _ => None,
    };
    if let Some(effort) = request.extra.get("reasoning_effort").and_then(Value::as_str) {
        return level(effort);
    }
    let thinking = request.extra.get("thinking")?;
    match thinking["type"].as_str()? {
        "adaptive" => {
            let effort = request.extra.get("output_config").and_then(|config| config["effort"].as_str());
            Some(effort.map_or(Some("medium"), level)?)
        }
        "enabled" => Some(match thinking["budget_tokens"].as_u64().unwrap_or(0) {
            0..=4096 => "low",
            4097..=16384 => "medium",
            _ => "high",
        }),
        _ => None,
    }
}

/// The messages of `request` as written: each with its `translated` content where it has one,
/// and after a message that `lifted` names, the user message it holds.
fn messages_body<'a>(
    request: &'a ChatRequest,
    (translated, lifted): (&'a [Option<Content>], &'a [(usize, Content)]),
    forward: bool,
    (model, padded): (&str, bool),
) -> Vec<MessageBody<'a>> {
    let mut lifted = lifted.iter().peekable();
    let mut messages = Vec::with_capacity(request.messages.len() + lifted.len());
    for (i, message) in request.messages.iter().enumerate() {
        messages.push(MessageBody {
            role: message.role,
            content: translated.get(i).and_then(Option::as_ref).or(message.content.as_ref()),
            name: message.name.as_deref(),
            tool_calls: &message.tool_calls,
            tool_call_id: message.tool_call_id.as_deref(),
            reasoning_content: reasoning_back(message, forward, (model, padded)),
            extra: Passthrough {
                also_skip: if claude_turn(message) { CLAUDE_THINKING } else { &[] },
                ..Passthrough::new(forward.then_some(&message.extra), MESSAGE_FIELDS)
            },
        });
        if let Some((_, content)) = lifted.next_if(|(after, _)| *after == i) {
            messages.push(MessageBody {
                role: Role::User,
                content: Some(content),
                name: None,
                tool_calls: &[],
                tool_call_id: None,
                reasoning_content: None,
                extra: Passthrough::new(None, MESSAGE_FIELDS),
            });
        }
    }
    messages
}

/// The `reasoning_content` an assistant `message` is sent with: the reasoning of `model` the
/// client sent back sealed (see [`crate::codec::REASONING_SEAL`]), or `""` when `padded` (the
/// model refuses a turn without one, and there is none of its own); none when the client sent
/// the message's own (an OpenAI client's, passed on as written).
fn reasoning_back<'a>(message: &'a Message, forward: bool, (model, padded): (&str, bool)) -> Option<&'a str> {
    let own = forward && message.extra.contains_key("reasoning_content") && !claude_turn(message);
    if message.role != Role::Assistant || own {
        return None;
    }
    crate::codec::sealed_reasoning_of(message, model).or(padded.then_some(""))
}

/// Whether `message` is a turn of Claude's as the gateway gave it to an OpenAI-dialect client,
/// its signed thinking with it (`thinking_blocks`).
fn claude_turn(message: &Message) -> bool {
    message.extra.contains_key(THINKING_BLOCKS)
}

/// The fields of a Claude turn that carry its thinking as a client sends it back: its text
/// (`reasoning_content`, as the gateway streamed it) and LiteLLM's copy of the signed blocks
/// (`provider_specific_fields`). Not sent on: only an Anthropic target reads Claude's thinking,
/// and servers that check a message's fields refuse them (Cerebras, Groq).
const CLAUDE_THINKING: &[&str] = &["reasoning_content", "provider_specific_fields"];

/// The embeddings body for `request`, sent to `model`. Embeddings requests arrive only in the
/// OpenAI dialect, so their extras (`user`, ...) always travel, except `encoding_format`: the
/// canonical answer holds floats, so base64 is never asked for.
pub(super) fn embeddings_body(request: &EmbeddingsRequest, model: &str) -> Result<Vec<u8>, ProviderError> {
    let body = EmbeddingsBody {
        model,
        input: &request.input,
        dimensions: request.dimensions,
        encoding_format: request.extra.contains_key("encoding_format").then_some("float"),
        extra: Passthrough::new(Some(&request.extra), EMBEDDINGS_FIELDS),
    };
    encode(&body)
}

/// Serialises a request body to JSON bytes; a failure (a non-finite float, say) is the
/// caller's `invalid_request`.
fn encode(body: &impl Serialize) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(body).map_err(|error| {
        ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("the request could not be encoded as JSON: {error}"),
        )
    })
}

/// Another dialect's `top_k` (an Anthropic client's): for a compatible server, which is sent
/// it; refused toward OpenAI's and Azure's APIs, which have no such sampler (the route goes
/// on, or with `drop_params` sends the request without it).
fn foreign_top_k(request: &ChatRequest, kind: ProviderKind) -> Result<Option<u64>, ProviderError> {
    let Some(value) = request.extra.get("top_k").filter(|value| !value.is_null()) else { return Ok(None) };
    let Some(top_k) = value.as_u64() else {
        let error = ProviderError::new(ErrorKind::InvalidRequest, "`top_k` must be a non-negative integer");
        return Err(error.with_param("top_k"));
    };
    match kind {
        ProviderKind::OpenAiCompatible => Ok(Some(top_k)),
        _ => Err(ProviderError::unsupported(
            "`top_k` has no equivalent in OpenAI's Chat Completions API; remove it or route this request to a provider that supports it",
        )
        .with_param("top_k")),
    }
}

/// Logs at debug level the names of the request- and message-level `extra` fields that are
/// not forwarded because the request arrived in another dialect.
fn log_dropped(request: &ChatRequest) {
    let mut names: Vec<&str> = request.extra.keys().map(String::as_str).collect();
    names.extend(request.messages.iter().flat_map(|message| message.extra.keys().map(String::as_str)));
    if !names.is_empty() {
        tracing::debug!(
            origin = ?request.origin,
            fields = ?names,
            "fields of another dialect are not forwarded to an OpenAI-dialect provider"
        );
    }
}

/// A Chat Completions request body (`POST {base}/chat/completions`), borrowing from the
/// canonical request. Absent options are left out rather than sent as `null`.
#[derive(Serialize)]
struct ChatBody<'a> {
    /// The upstream model (Azure: the deployment), not the route name the client asked for.
    model: &'a str,
    /// The conversation, one entry per canonical message, in order.
    messages: Vec<MessageBody<'a>>,
    /// `tools[]`; left out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolBody<'a>>,
    /// `tool_choice`: `"none"`, `"auto"`, `"required"` or a named function.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a ToolChoice>,
    /// Sampling temperature, as the client gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// Nucleus sampling mass, as the client gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    /// Another dialect's `top_k`, for a compatible server that takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    /// The output token limit under its legacy name, for compatible servers and Azure; `None`
    /// when it travels as `max_completion_tokens` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// The output token limit under OpenAI's current name; kind `openai` only, and `None` when
    /// the client's own `max_completion_tokens` extra travels instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    /// `stop`: one string or a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Stop>,
    /// `seed` for best-effort deterministic sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    /// `response_format`: text, JSON mode or a JSON schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormatBody<'a>>,
    /// `stream: true` on streaming calls; left out (not `false`) otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    /// `stream_options` on streaming calls only: the client's own options (OpenAI dialect)
    /// with `include_usage: true` forced, so that the final chunk carries usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Map<String, Value>>,
    /// `parallel_tool_calls: false` of a request of another dialect (an Anthropic client's
    /// `disable_parallel_tool_use`); an OpenAI client's own travels with its other fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    /// `reasoning_effort` of a request of another dialect that asks its model to think (see
    /// [`reasoning_effort`]); an OpenAI client's own travels with its other fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    /// The request's unmodelled fields, when it arrived in the OpenAI dialect.
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

/// One entry of `messages[]`, borrowing from a canonical message.
#[derive(Serialize)]
struct MessageBody<'a> {
    /// `role`: `system`, `developer`, `user`, `assistant` or `tool`.
    role: Role,
    /// `content`: a string or an array of parts; left out when `None` (an assistant turn that
    /// only calls tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a Content>,
    /// `name`, the optional participant name.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    /// An assistant message's `tool_calls[]`; left out when empty.
    #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
    tool_calls: &'a [ToolCall],
    /// A `tool` message's `tool_call_id`, the id of the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// An assistant message's reasoning, sent back to the model that wrote it (a client of
    /// another dialect's: see [`crate::codec::REASONING_SEAL`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    /// The message's unmodelled fields (such as `refusal`), OpenAI dialect only.
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

/// One entry of `tools[]`.
#[derive(Serialize)]
struct ToolBody<'a> {
    /// `type`, the canonical tool's kind as given (`function`, `custom`).
    #[serde(rename = "type")]
    kind: &'a str,
    /// `function`: the definition the model may call; `None` for a tool of another kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    function: Option<FunctionBody<'a>>,
    /// The tool's unmodelled members (a `custom` tool's definition), OpenAI dialect only.
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

/// A tool's `function` object.
#[derive(Serialize)]
struct FunctionBody<'a> {
    /// `name`, what the model calls the function by.
    name: &'a str,
    /// `description`, shown to the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    /// `parameters`, the JSON Schema of the arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a Value>,
    /// Another dialect's strict tool (Anthropic's `strict: true`) whose schema OpenAI's strict
    /// mode takes (`codec::strict_ready`); an OpenAI client's own travels in `extra`.
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
    /// The function's unmodelled fields (`strict`, ...), OpenAI dialect only.
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

/// Whether another dialect's tool `function` asks for strict adherence to a schema OpenAI's
/// strict mode takes.
fn carries_strict(function: &switchyard::chat::FunctionDefinition) -> bool {
    function.extra.get("strict") == Some(&Value::Bool(true))
        && function.parameters.as_ref().is_some_and(crate::codec::strict_ready)
}

/// Whether the translation of `request` (another dialect's) carries strict tools.
pub(super) fn carries_strict_tools(request: &ChatRequest) -> bool {
    request.origin != Dialect::OpenAi && request.tools.iter().any(|tool| carries_strict(&tool.function))
}

/// `body` with no tool's `function.strict`.
pub(super) fn without_strict_tools(body: Vec<u8>) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<Value>(&body) else { return body };
    let tools = value.get_mut("tools").and_then(Value::as_array_mut);
    for tool in tools.into_iter().flatten() {
        if let Some(function) = tool.get_mut("function").and_then(Value::as_object_mut) {
            function.remove("strict");
        }
    }
    serde_json::to_vec(&value).unwrap_or(body)
}

impl<'a> ToolBody<'a> {
    /// The entry for `tool`; its function's `extra` travels only when `forward` (the request
    /// arrived in the OpenAI dialect).
    fn new(tool: &'a Tool, forward: bool) -> Self {
        let function = &tool.function;
        let function = (tool.is_function() || !forward).then(|| FunctionBody {
            name: &function.name,
            description: function.description.as_deref(),
            parameters: function.parameters.as_ref(),
            strict: (!forward && carries_strict(function)).then_some(true),
            extra: Passthrough::new(forward.then_some(&function.extra), FUNCTION_FIELDS),
        });
        ToolBody {
            kind: &tool.kind,
            function,
            extra: Passthrough::new(forward.then_some(&tool.extra), TOOL_FIELDS),
        }
    }
}

/// `response_format`, tagged by `type`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseFormatBody<'a> {
    /// `{"type": "text"}`: free text, the default.
    Text,
    /// `{"type": "json_object"}`: JSON mode, any JSON object.
    JsonObject,
    /// `{"type": "json_schema", "json_schema": {...}}`: structured output.
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchemaBody<'a>,
    },
}

/// `response_format.json_schema`.
#[derive(Serialize)]
struct JsonSchemaBody<'a> {
    /// `name` of the schema (OpenAI requires `[a-zA-Z0-9_-]{1,64}`).
    name: &'a str,
    /// `schema`, the JSON Schema the answer must follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a Value>,
    /// `strict`: whether the schema is enforced exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
    /// Unmodelled fields (`description`, ...), OpenAI dialect only.
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

impl<'a> ResponseFormatBody<'a> {
    /// The body for `format`; the schema's `extra` travels only when `forward`.
    fn new(format: &'a ResponseFormat, forward: bool) -> Self {
        match format {
            ResponseFormat::Text => ResponseFormatBody::Text,
            ResponseFormat::JsonObject => ResponseFormatBody::JsonObject,
            ResponseFormat::JsonSchema { json_schema } => ResponseFormatBody::JsonSchema {
                json_schema: JsonSchemaBody {
                    name: &json_schema.name,
                    schema: json_schema.schema.as_ref(),
                    strict: json_schema.strict,
                    extra: Passthrough::new(forward.then_some(&json_schema.extra), SCHEMA_FIELDS),
                },
            },
        }
    }
}

/// An embeddings request body (`POST {base}/embeddings`).
#[derive(Serialize)]
struct EmbeddingsBody<'a> {
    /// The upstream model (Azure: the deployment).
    model: &'a str,
    /// `input`: one string or a list of strings.
    input: &'a EmbeddingInput,
    /// `dimensions`, the vector length asked for (`text-embedding-3*` and later).
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u32>,
    /// `"float"` when the client named any `encoding_format`, else left out (float is the
    /// default): the canonical answer holds floats, never base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding_format: Option<&'static str>,
    /// The request's other unmodelled fields (`user`, ...).
    #[serde(flatten)]
    extra: Passthrough<'a>,
}

/// Unmodelled fields to copy into a body, minus those the body writes itself (a duplicate key
/// would leave the winner to the provider's JSON parser).
struct Passthrough<'a> {
    /// The fields to copy; `None` when none travel (a request of another dialect).
    fields: Option<&'a Extra>,
    /// The names the body writes itself, never copied.
    skip: &'static [&'static str],
    /// More fields not copied in this instance only (`max_completion_tokens`, which the body
    /// writes; Claude's thinking as a client sent it back).
    also_skip: &'static [&'static str],
}

impl<'a> Passthrough<'a> {
    /// Copies `fields` (if any) except those named in `skip`.
    fn new(fields: Option<&'a Extra>, skip: &'static [&'static str]) -> Self {
        Self { fields, skip, also_skip: &[] }
    }
}

impl Serialize for Passthrough<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in self.fields.into_iter().flatten() {
            let name = name.as_str();
            if !self.skip.contains(&name) && !self.also_skip.contains(&name) {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

/// Reads a non-streaming Chat Completions answer. A body holding an error object (some servers
/// send failures with a 200) is classified like an error response.
pub(super) fn parse_response(bytes: &[u8], key: Option<&Secret>) -> Result<ChatResponse, ProviderError> {
    // The common case first, straight from the bytes: a well-formed answer with choices. Only
    // when that fails is the body read as a JSON tree, to find an error object or say what is
    // wrong.
    if let Ok(answer) = switchyard::serde_extra::from_slice::<ResponseIn>(bytes)
        && !answer.choices.is_empty()
        && let Ok(answer) = answer.into_canonical()
    {
        let finishes = answer.choices.iter().map(|choice| choice.finish_reason.as_ref());
        let said = answer.choices.iter().find_map(|choice| choice.extra.get("error"));
        return match errors::finished_in_error(finishes, said, key) {
            Some(error) => Err(error.with_status(200)),
            None => Ok(answer),
        };
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|error| errors::malformed("JSON", &error, bytes, key))?;
    if let Some(error) = errors::from_value(Some(200), &value, key) {
        return Err(error);
    }
    let answer = ResponseIn::deserialize(value)
        .map_err(|error| errors::malformed("a chat completion", &error, bytes, key))?;
    if answer.choices.is_empty() {
        return Err(ProviderError::new(ErrorKind::MalformedResponse, "the chat completion has no choices")
            .with_status(200));
    }
    let answer = answer.into_canonical().map_err(|what| {
        ProviderError::new(ErrorKind::MalformedResponse, format!("the chat completion holds {what}"))
            .with_status(200)
    })?;
    let finishes = answer.choices.iter().map(|choice| choice.finish_reason.as_ref());
    let said = answer.choices.iter().find_map(|choice| choice.extra.get("error"));
    match errors::finished_in_error(finishes, said, key) {
        Some(error) => Err(error.with_status(200)),
        None => Ok(answer),
    }
}

/// Reads an embeddings answer, checking that it has one vector per input.
pub(super) fn parse_embeddings(
    bytes: &[u8],
    inputs: usize,
    key: Option<&Secret>,
) -> Result<EmbeddingsResponse, ProviderError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|error| errors::malformed("JSON", &error, bytes, key))?;
    if let Some(error) = errors::from_value(Some(200), &value, key) {
        return Err(error);
    }
    let answer = EmbeddingsIn::deserialize(value)
        .map_err(|error| errors::malformed("an embeddings list", &error, bytes, key))?;
    if answer.data.len() != inputs {
        return Err(ProviderError::new(
            ErrorKind::MalformedResponse,
            format!("asked for {inputs} embeddings, got {}", answer.data.len()),
        )
        .with_status(200));
    }
    let mut data: Vec<Embedding> = answer
        .data
        .into_iter()
        .map(|item| Embedding { index: item.index, embedding: item.embedding })
        .collect();
    data.sort_by_key(|item| item.index);
    Ok(EmbeddingsResponse {
        data,
        model: answer.model,
        usage: answer.usage.map(UsageIn::into_canonical),
        extra: answer.extra,
    })
}

/// `null` where a value is expected reads as the default (compatible servers send
/// `"tool_calls": null`, `"choices": null`, `"id": null`).
pub(super) fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A non-streaming Chat Completions answer (`object: chat.completion`), read tolerantly.
struct ResponseIn {
    /// The provider's response id (`chatcmpl-...`), passed through; empty when missing or null.
    id: String,
    /// The model that answered (often a dated version of the one asked for); empty when
    /// missing or null.
    model: String,
    /// `created`, Unix seconds; 0 when missing or null.
    created: u64,
    /// `choices[]`; empty when missing or null, which [`parse_response`] refuses.
    choices: Vec<ChoiceIn>,
    /// `usage`; `None` when the server sent none.
    usage: Option<UsageIn>,
    /// Unmodelled top-level fields (`system_fingerprint`, `service_tier`, Azure's
    /// `prompt_filter_results`, ...), kept for a client of the same dialect.
    extra: Extra,
}

deserialize_with_extra!(ResponseIn {
    "id" => id: NullAsDefault,
    "model" => model: NullAsDefault,
    "created" => created: NullAsDefault,
    "choices" => choices: NullAsDefault,
    "usage" => usage: OrDefault,
});

/// One entry of `choices[]`.
struct ChoiceIn {
    /// `index` among the choices (only differs from 0 with `n > 1`); 0 when missing or null.
    index: u32,
    /// The assistant's `message`; required.
    message: MessageIn,
    /// OpenAI `finish_reason` (`stop`, `length`, `tool_calls`, `content_filter`, or another
    /// string kept verbatim); `None` when missing or null.
    finish_reason: Option<FinishReason>,
    /// Unmodelled choice fields (`logprobs`, Azure's `content_filter_results`, ...).
    extra: Extra,
}

deserialize_with_extra!(ChoiceIn {
    "index" => index: NullAsDefault,
    "message" => message: Required,
    "finish_reason" => finish_reason: OrDefault,
});

/// `choices[].message` of an answer.
struct MessageIn {
    /// `role`; `None` when missing or null, read as `assistant`.
    role: Option<Role>,
    /// `content`; `None` when the model only called tools (or refused).
    content: Option<Content>,
    /// `name`, rarely sent.
    name: Option<String>,
    /// `tool_calls[]`; empty when missing or null.
    tool_calls: Vec<ToolCallIn>,
    /// `refusal` stays here, so that a client of the same dialect still sees it.
    extra: Extra,
}

/// A message's unmodelled fields, with a reasoning server's thinking under the name the
/// gateway writes (`reasoning_content`, as DeepSeek and vLLM send it) when it came as
/// `reasoning` (OpenRouter, Ollama). The field as sent stays too: a client of this dialect gets
/// what the server wrote.
fn reasoning_named_once(mut extra: Extra) -> Extra {
    if !extra.contains_key("reasoning_content")
        && let Some(Value::String(reasoning)) = extra.get("reasoning")
    {
        let reasoning = Value::String(reasoning.clone());
        extra.insert("reasoning_content".to_owned(), reasoning);
    }
    extra
}

deserialize_with_extra!(MessageIn {
    "role" => role: OrDefault,
    "content" => content: OrDefault,
    "name" => name: OrDefault,
    "tool_calls" => tool_calls: NullAsDefault,
});

/// One entry of an answer's `message.tool_calls[]`.
struct ToolCallIn {
    /// The call's `id` (`call_...`), which the tool result must quote; empty when missing or
    /// null.
    id: String,
    /// `type`; `None` when missing, read as `function`.
    kind: Option<String>,
    /// The called `function`: required of a function call, absent from a call of another kind
    /// (a `custom` call's `custom: {name, input}` stays in `extra`).
    function: Option<FunctionIn>,
    /// Members not modelled here, kept as written.
    extra: Extra,
}

deserialize_with_extra!(ToolCallIn {
    "id" => id: NullAsDefault,
    "type" => kind: NullAsDefault,
    "function" => function: NullAsDefault,
});

/// `tool_calls[].function` of an answer.
#[derive(Deserialize)]
struct FunctionIn {
    /// The function's `name`; empty when missing or null.
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    /// `arguments`: a JSON string in the dialect, an object from a few servers (see
    /// [`arguments_text`]); `None` when missing.
    #[serde(default)]
    arguments: Option<Value>,
}

/// Arguments are a JSON string in the dialect; a few servers send the object itself.
pub(super) fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// `usage` of an answer, a stream's usage chunk or an embeddings answer. Missing or null
/// counts read as 0; the `*_details` sub-objects are not read.
#[derive(Deserialize, Default)]
pub(super) struct UsageIn {
    /// `prompt_tokens`, the input tokens.
    #[serde(default, deserialize_with = "nullable")]
    prompt_tokens: u32,
    /// `completion_tokens`, the output tokens.
    #[serde(default, deserialize_with = "nullable")]
    completion_tokens: u32,
    /// `total_tokens`; 0 (missing) is replaced by the sum of the other two.
    #[serde(default, deserialize_with = "nullable")]
    total_tokens: u32,
    /// `prompt_tokens_details` (`cached_tokens`, ...).
    #[serde(default)]
    prompt_tokens_details: Option<DetailsIn>,
    /// `completion_tokens_details` (`reasoning_tokens`, ...).
    #[serde(default)]
    completion_tokens_details: Option<DetailsIn>,
}

/// The counts of a `*_tokens_details` object that the canonical usage keeps.
#[derive(Debug, Deserialize)]
pub(super) struct DetailsIn {
    #[serde(default)]
    cached_tokens: Option<u32>,
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

impl UsageIn {
    /// The canonical usage; a missing total is computed as prompt + completion.
    pub(super) fn into_canonical(self) -> Usage {
        let total = if self.total_tokens == 0 {
            self.prompt_tokens.saturating_add(self.completion_tokens)
        } else {
            self.total_tokens
        };
        let cached_tokens = self.prompt_tokens_details.and_then(|d| d.cached_tokens);
        let reasoning_tokens = self.completion_tokens_details.and_then(|d| d.reasoning_tokens);
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: total,
            prompt_tokens_details: cached_tokens
                .map(|cached| PromptTokensDetails { cached_tokens: Some(cached), cache_write_tokens: None }),
            completion_tokens_details: reasoning_tokens
                .map(|reasoning| CompletionTokensDetails { reasoning_tokens: Some(reasoning) }),
        }
    }
}

impl ToolCallIn {
    /// The canonical call: a function call needs its `function`; a call of another kind is
    /// kept as written.
    fn into_canonical(self) -> Result<ToolCall, &'static str> {
        let kind = self.kind.unwrap_or_else(|| "function".to_owned());
        let function = match self.function {
            Some(function) => {
                FunctionCall { name: function.name, arguments: arguments_text(function.arguments) }
            }
            None if kind == "function" => return Err("a function tool call without its `function`"),
            None => FunctionCall::default(),
        };
        Ok(ToolCall { id: self.id, kind, function, extra: self.extra })
    }
}

impl ResponseIn {
    /// The canonical answer. Tool call `type` defaults to `function`, `role` to `assistant`;
    /// a `refusal` is the model's answer and stays one (only `finish_reason: content_filter`
    /// is the provider's filter). Refused when a function call has no `function`.
    fn into_canonical(self) -> Result<ChatResponse, &'static str> {
        let choices = self
            .choices
            .into_iter()
            .map(|choice| {
                let message = choice.message;
                let finish_reason = choice.finish_reason;
                let tool_calls = message
                    .tool_calls
                    .into_iter()
                    .map(ToolCallIn::into_canonical)
                    .collect::<Result<_, _>>()?;
                Ok(Choice {
                    index: choice.index,
                    message: Message {
                        role: message.role.unwrap_or(Role::Assistant),
                        content: message.content,
                        name: message.name,
                        tool_calls,
                        tool_call_id: None,
                        extra: reasoning_named_once(message.extra),
                    },
                    finish_reason,
                    extra: choice.extra,
                })
            })
            .collect::<Result<_, &'static str>>()?;
        Ok(ChatResponse {
            id: self.id,
            model: self.model,
            created: self.created,
            choices,
            usage: self.usage.map(UsageIn::into_canonical),
            extra: self.extra,
            verbatim: None,
            frames: Vec::new(),
            notices: Vec::new(),
        })
    }
}

/// An embeddings answer (`object: list`).
struct EmbeddingsIn {
    /// `data[]`, one vector per input; required.
    data: Vec<EmbeddingIn>,
    /// The model that answered; empty when missing or null.
    model: String,
    /// `usage` (`prompt_tokens`, `total_tokens`); `None` when the server sent none.
    usage: Option<UsageIn>,
    /// Unmodelled top-level fields (`object`, ...).
    extra: Extra,
}

deserialize_with_extra!(EmbeddingsIn {
    "data" => data: Required,
    "model" => model: NullAsDefault,
    "usage" => usage: OrDefault,
});

/// One entry of an embeddings answer's `data[]`.
#[derive(Deserialize)]
struct EmbeddingIn {
    /// `index` of the input this vector embeds; the answer is sorted by it. 0 when missing.
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    /// `embedding`, the vector as floats (a base64 string would fail to read).
    embedding: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard::chat::Message;

    use super::*;

    fn kind(openai_itself: bool) -> ProviderKind {
        if openai_itself { ProviderKind::OpenAi } else { ProviderKind::OpenAiCompatible }
    }

    fn body(request: &ChatRequest, streaming: bool, openai_itself: bool) -> Value {
        let bytes = chat_body(request, "gpt-4o-mini", streaming, (kind(openai_itself), false)).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_tool_results_image_goes_to_a_server_of_the_dialect_and_to_openai_itself_in_a_user_message() {
        let image = ContentPart::ImageUrl {
            image_url: switchyard::chat::ImageUrl { url: "data:image/png;base64,iVBOR".into(), detail: None },
        };
        let mut call = Message::assistant("");
        call.tool_calls = vec![
            switchyard::chat::ToolCall::function("call_1", "screenshot", "{}"),
            switchyard::chat::ToolCall::function("call_2", "read", "{}"),
        ];
        let tool = |id: &str, parts: Vec<ContentPart>| Message {
            content: Some(Content::Parts(parts)),
            tool_call_id: Some(id.into()),
            ..Message::text(Role::Tool, "")
        };
        let text = |t: &str| ContentPart::Text { text: t.into() };
        let messages = vec![
            Message::user("Look"),
            call,
            tool("call_1", vec![image.clone()]),
            tool("call_2", vec![text("page 1"), image]),
            Message::user("And?"),
        ];
        let mut request = ChatRequest::new("route", messages);
        request.origin = Dialect::Anthropic;
        // A server of the dialect is sent the tool results as they are.
        assert_eq!(body(&request, false, false)["messages"][2]["content"][0]["type"], "image_url");
        // OpenAI takes only text in a tool message: the images follow the run of tool results.
        let sent = body(&request, false, true);
        let messages = sent["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 6, "{sent}");
        assert_eq!(messages[2]["content"], "The result is in the next message.");
        assert_eq!(messages[3]["content"], json!([{"type": "text", "text": "page 1"}]));
        assert_eq!(
            (messages[2]["role"].as_str(), messages[3]["role"].as_str()),
            (Some("tool"), Some("tool"))
        );
        let lifted = &messages[4];
        assert_eq!(lifted["role"], "user");
        let kinds: Vec<&str> =
            lifted["content"].as_array().unwrap().iter().map(|p| p["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["text", "image_url", "text", "image_url"]);
        assert_eq!(lifted["content"][0]["text"], "The result of call_1:");
        assert_eq!(lifted["content"][2]["text"], "The result of call_2:");
        assert_eq!(messages[5]["content"], "And?");
    }

    #[test]
    fn a_failed_tool_result_of_parts_says_so_in_its_text_and_a_document_keeps_its_context() {
        let mut call = Message::assistant("");
        call.tool_calls = vec![switchyard::chat::ToolCall::function("toolu_1", "fetch", "{}")];
        let document = json!({"type": "document", "title": "q3.pdf", "context": "In EUR",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0"}});
        let mut failed = Message {
            content: Some(Content::Parts(vec![
                ContentPart::Text { text: "partial read".into() },
                ContentPart::Other(document),
            ])),
            tool_call_id: Some("toolu_1".into()),
            ..Message::text(Role::Tool, "")
        };
        let blocks = json!([{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true}]);
        failed.extra.insert(crate::anthropic::VERBATIM_BLOCKS.into(), blocks);
        let mut request = ChatRequest::new("route", vec![Message::user("Read it"), call, failed]);
        request.origin = Dialect::Anthropic;
        let sent = body(&request, false, true);
        let messages = sent["messages"].as_array().unwrap();
        // The failure is said in the result's own text, not as a part of its own.
        assert_eq!(
            messages[2]["content"],
            json!([{"type": "text", "text": "Error: partial read"}]),
            "{sent}"
        );
        // The document's context goes with the document, after it.
        let lifted: Vec<&str> = messages[3]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|part| part["text"].as_str().unwrap_or(part["type"].as_str().unwrap()))
            .collect();
        assert_eq!(lifted, ["The result of toolu_1:", "file", "About the document above: In EUR"]);
    }

    #[test]
    fn another_dialects_thinking_asks_an_openai_reasoning_model_for_its_effort() {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.origin = Dialect::Anthropic;
        request.extra.insert("thinking".into(), json!({"type": "adaptive"}));
        request.extra.insert("output_config".into(), json!({"effort": "high"}));
        let sent = |request: &ChatRequest, model: &str, openai_itself: bool| -> Value {
            serde_json::from_slice(&chat_body(request, model, false, (kind(openai_itself), false)).unwrap())
                .unwrap()
        };
        assert_eq!(sent(&request, "gpt-5", true)["reasoning_effort"], "high", "Claude Code's effort");
        for model in ["gpt-4o", "gpt-5-chat-latest", "gpt-5.1-chat", "o1-mini", "o1-preview-2024-09-12"] {
            assert!(sent(&request, model, true).get("reasoning_effort").is_none(), "{model} refuses it");
        }
        assert!(
            sent(&request, "gpt-5", false).get("reasoning_effort").is_none(),
            "a server that may refuse it"
        );
        request.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 2048}));
        request.extra.remove("output_config");
        assert_eq!(sent(&request, "o3", true)["reasoning_effort"], "low");
        request.extra.insert("thinking".into(), json!({"type": "disabled"}));
        assert!(sent(&request, "o3", true).get("reasoning_effort").is_none());
        let mut codex = ChatRequest::new("route", vec![Message::user("hi")]);
        codex.origin = Dialect::Responses;
        codex.extra.insert("reasoning_effort".into(), json!("medium"));
        assert_eq!(sent(&codex, "gpt-5-mini", true)["reasoning_effort"], "medium", "a Responses client's");
    }

    #[test]
    fn another_dialects_top_k_reaches_a_compatible_server_and_is_refused_by_openai_and_azure() {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.origin = Dialect::Anthropic;
        request.extra.insert("top_k".into(), json!(40));
        let sent = chat_body(&request, "qwen3", false, (ProviderKind::OpenAiCompatible, false)).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&sent).unwrap()["top_k"], 40);
        for kind in [ProviderKind::OpenAi, ProviderKind::Azure] {
            let error = chat_body(&request, "gpt-4o", false, (kind, false)).unwrap_err();
            assert!(error.is_unsupported() && error.detail().contains("`top_k`"), "{kind:?}: {error:?}");
            assert_eq!(error.param(), Some("top_k"), "drop_params can leave it out");
        }
        request.extra.insert("top_k".into(), json!("forty"));
        let error = chat_body(&request, "qwen3", false, (ProviderKind::OpenAiCompatible, false)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{error:?}");
        // An OpenAI client's own `top_k` goes to its server as written, whatever the kind.
        request.origin = Dialect::OpenAi;
        let sent = chat_body(&request, "gpt-4o", false, (ProviderKind::OpenAi, false)).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&sent).unwrap()["top_k"], "forty");
    }

    #[test]
    fn a_model_that_wants_its_reasoning_back_gets_each_assistant_turn_with_one() {
        let mut sealed = Message::assistant("Checked.");
        sealed.extra.insert(crate::codec::SEALED_REASONING.into(), json!({"model": "r1", "text": "Hmm."}));
        let mut other = Message::assistant("By Claude.");
        other.extra.insert(crate::codec::SEALED_REASONING.into(), json!({"model": "r2", "text": "Other."}));
        let mut request = ChatRequest::new(
            "route",
            vec![Message::user("a"), sealed, Message::user("b"), other, Message::user("c")],
        );
        request.origin = Dialect::Anthropic;
        let reasoning = |request: &ChatRequest, padded: bool| -> Vec<Value> {
            let body = chat_body(request, "r1", false, (ProviderKind::OpenAiCompatible, padded)).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            body["messages"].as_array().unwrap().iter().map(|m| m["reasoning_content"].clone()).collect()
        };
        let none = Value::Null;
        assert_eq!(
            reasoning(&request, false),
            [none.clone(), json!("Hmm."), none.clone(), none.clone(), none.clone()]
        );
        assert_eq!(
            reasoning(&request, true),
            [none.clone(), json!("Hmm."), none.clone(), json!(""), none.clone()]
        );
        // An OpenAI client's own reasoning goes as it wrote it, padded or not.
        request.origin = Dialect::OpenAi;
        request.messages[3].extra.insert("reasoning_content".into(), json!("Mine."));
        assert_eq!(reasoning(&request, true)[3], "Mine.");
    }

    #[test]
    fn claudes_thinking_a_client_sent_back_goes_to_no_openai_dialect_server() {
        // The cookbook's `messages.append(choice.message)` after Claude answered with thinking:
        // its text in `reasoning_content`, its signed blocks, and LiteLLM's copy of them.
        let mut claude = Message::assistant("Sunny.");
        claude.extra.insert(
            THINKING_BLOCKS.into(),
            json!([{"type": "thinking", "thinking": "Hmm.", "signature": "sig"}]),
        );
        claude.extra.insert("reasoning_content".into(), json!("Hmm."));
        claude
            .extra
            .insert("provider_specific_fields".into(), json!({"thinking_blocks": [{"signature": "sig"}]}));
        let mut request = ChatRequest::new("route", vec![Message::user("a"), claude, Message::user("b")]);
        request.origin = Dialect::OpenAi;
        for (kind, padded) in [(ProviderKind::OpenAi, false), (ProviderKind::OpenAiCompatible, true)] {
            let body = chat_body(&request, "m", false, (kind, padded)).unwrap();
            let turn = serde_json::from_slice::<Value>(&body).unwrap()["messages"][1].clone();
            assert!(
                turn.get(THINKING_BLOCKS).is_none() && turn.get("provider_specific_fields").is_none(),
                "{turn}"
            );
            let expected = if padded { json!("") } else { Value::Null };
            assert_eq!(turn["reasoning_content"], expected, "not Claude's: {kind:?} {turn}");
        }
    }

    #[test]
    fn extras_never_duplicate_a_field_the_body_writes() {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.extra.insert("model".into(), json!("sneaky"));
        request.extra.insert("stream_options".into(), json!({"include_obfuscation": false}));
        let bytes =
            chat_body(&request, "gpt-4o-mini", true, (ProviderKind::OpenAiCompatible, false)).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.matches("\"model\"").count(), 1);
        assert_eq!(text.matches("\"stream_options\"").count(), 1);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["stream_options"], json!({"include_obfuscation": false, "include_usage": true}));
    }

    #[test]
    fn a_non_streaming_call_never_sends_stream_options() {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.stream = true;
        request.extra.insert("stream_options".into(), json!({"include_usage": true}));
        let value = body(&request, false, false);
        assert!(value.get("stream").is_none());
        assert!(value.get("stream_options").is_none());
    }

    #[test]
    fn max_tokens_travels_as_max_completion_tokens_unless_the_client_set_that() {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.max_tokens = Some(64);
        let value = body(&request, false, true);
        assert_eq!((value.get("max_tokens"), &value["max_completion_tokens"]), (None, &json!(64)));
        assert_eq!(body(&request, false, false)["max_tokens"], json!(64));
        request.extra.insert("max_completion_tokens".into(), json!(32));
        let value = body(&request, false, true);
        assert_eq!((value.get("max_tokens"), &value["max_completion_tokens"]), (None, &json!(32)));
    }

    #[test]
    fn a_refusal_is_an_answer_not_a_content_filter_stop() {
        let answer = json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
        let response = parse_response(answer.to_string().as_bytes(), None).unwrap();
        assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Stop));
        assert_eq!(response.choices[0].message.extra["refusal"], json!("I can't help with that."));
    }

    #[test]
    fn a_reasoning_servers_thinking_is_read_under_either_name() {
        let answer = |message: Value| {
            let body =
                json!({"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
            parse_response(body.to_string().as_bytes(), None).unwrap().choices[0].message.extra.clone()
        };
        let ollama = answer(json!({"role": "assistant", "content": "42", "reasoning": "Six times seven."}));
        assert_eq!(
            (&ollama["reasoning_content"], &ollama["reasoning"]),
            (&json!("Six times seven."), &json!("Six times seven."))
        );
        let deepseek = answer(
            json!({"role": "assistant", "content": "42", "reasoning_content": "Six sevens.", "reasoning": {"x": 1}}),
        );
        assert_eq!(deepseek["reasoning_content"], "Six sevens.");
        assert!(!answer(json!({"role": "assistant", "content": "42"})).contains_key("reasoning_content"));
    }

    #[test]
    fn an_answer_with_a_custom_tool_call_is_an_answer_kept_as_written() {
        let call =
            json!({"id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}});
        let answer = json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [call]}, "finish_reason": "tool_calls"}]});
        let response = parse_response(answer.to_string().as_bytes(), None).unwrap();
        assert_eq!(serde_json::to_value(&response.choices[0].message.tool_calls[0]).unwrap(), call);
        let broken = json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant",
            "tool_calls": [{"id": "call_1", "type": "function"}]}, "finish_reason": "tool_calls"}]});
        let error = parse_response(broken.to_string().as_bytes(), None).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
        assert!(error.detail().contains("a function tool call without its `function`"), "{}", error.detail());
    }

    #[test]
    fn tolerant_shapes_read_nulls_and_object_arguments() {
        let answer = json!({"id": null, "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": null}});
        let response = parse_response(answer.to_string().as_bytes(), None).unwrap();
        assert_eq!(response.choices[0].message.tool_calls[0].function.arguments, r#"{"a":1}"#);
        assert_eq!(response.usage, Some(Usage::new(3, 4)));
        let nulls = json!({"choices": [{"message": {"role": "assistant", "content": "hi", "tool_calls": null}, "finish_reason": "stop"}]});
        assert!(parse_response(nulls.to_string().as_bytes(), None).is_ok());
    }
}
