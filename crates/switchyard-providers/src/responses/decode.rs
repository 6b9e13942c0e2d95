//! A Responses request into a canonical chat request, and what the response object echoes.
//!
//! | Responses | canonical |
//! |---|---|
//! | `instructions` | a system message first |
//! | `input` (a string) | one user message |
//! | `message` items (`input_text`, `input_image`, `input_file`, `output_text`, `refusal` parts) | messages (a file is an OpenAI `file` part) |
//! | `function_call` items | an assistant message's tool calls (consecutive calls join one message); a call with a `namespace` is named [`namespaced_name`] |
//! | `custom_tool_call` items, `custom_tool_call_output` items | a Chat Completions `custom` call, tool messages |
//! | `function_call_output` items | tool messages |
//! | `reasoning` items | dropped: only the provider that wrote one can read it; Claude's thinking as the gateway sealed it opens the next assistant turn as `thinking_blocks` |
//! | `item_reference` items | read once the gateway has put the items they name in their place ([`ResponsesRequest::references`]) |
//! | `tools`: function tools, a `namespace`'s functions (named [`namespaced_name`]), `custom` tools; `tool_choice` | tools, tool choice |
//! | hosted tools (`web_search`, ...), their items, parameters not listed here | sent only to a provider of the Responses API, named in [`ResponsesRequest::unsent`] and [`unread_items`] |
//! | `text.format` | `response_format` |
//! | `max_output_tokens`, `temperature`, `top_p` | the same parameters |
//! | `reasoning.effort`, `parallel_tool_calls`, `user` | OpenAI extras (`reasoning_effort`, ...) |
//!
//! `store`, `previous_response_id`, `metadata` and `stream` are the gateway's; `include`,
//! `truncation` and `service_tier` are accepted and not sent.

use serde_json::{Map, Value};
use switchyard::chat::{
    ChatRequest, Content, ContentPart, Dialect, Extra, FunctionDefinition, ImageUrl, JsonSchemaFormat,
    Message, ResponseFormat, Role, THINKING_BLOCKS, Tool, ToolCall, ToolChoice, ToolChoiceFunction,
};

use crate::codec::SEALED_REASONING;

use super::CodecError;

/// One Responses request, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    /// The canonical request: this request's own instructions and input, not the conversation
    /// before `previous_response_id` (the gateway puts that in front).
    pub chat: ChatRequest,
    /// `previous_response_id`: the response this one continues.
    pub previous_response_id: Option<String>,
    /// `store` (default `true`): whether the gateway keeps the response for later turns and
    /// `GET /v1/responses/{id}`.
    pub store: bool,
    /// What the response object repeats of the request.
    pub echo: Echo,
    /// This request's own input as Responses items (a string input is one user message
    /// item): what the gateway adds to the conversation it keeps.
    pub items: Vec<Value>,
    /// Whether `items` holds `item_reference`s: items of earlier responses named by id, for
    /// the gateway to put in their place (see [`is_reference`]). `chat` then holds none of
    /// the input: it is read once they are in place, with [`messages_from_items`].
    pub references: bool,
    /// The body as the client wrote it, for a provider that speaks the Responses API.
    pub body: Map<String, Value>,
    /// What the request carries that only a provider spoken to in the Responses API receives
    /// (hosted tools, parameters Switchyard does not model), said so in the note of every
    /// attempt sent to another.
    pub unsent: Vec<String>,
}

/// The name a function of a `namespace` tool goes by toward a provider of another API: the
/// namespace and the function's name joined by `__`, as MCP tools are named (`ns__name`).
/// [`namespaced`] maps it back.
pub fn namespaced_name(namespace: &str, name: &str) -> String {
    format!("{namespace}{NAMESPACE_JOIN}{name}")
}

const NAMESPACE_JOIN: &str = "__";

/// The namespace and function name behind `name`, when the request's `tools` (as echoed)
/// hold a `namespace` tool with a function of that joined name; `None` for any other name.
pub fn namespaced<'a>(tools: &'a Value, name: &str) -> Option<(&'a str, &'a str)> {
    tools.as_array()?.iter().filter(|tool| tool["type"] == "namespace").find_map(|tool| {
        let namespace = tool["name"].as_str()?;
        let function = name.strip_prefix(namespace)?.strip_prefix(NAMESPACE_JOIN)?;
        let inner = tool["tools"]
            .as_array()?
            .iter()
            .find_map(|inner| inner["name"].as_str().filter(|n| *n == function))?;
        Some((namespace, inner))
    })
}

/// The request's settings as the response object repeats them (`tools`, `tool_choice`,
/// `text`, ...), as the client wrote them or their documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    /// `instructions`, or null.
    pub instructions: Value,
    /// `max_output_tokens`, or null.
    pub max_output_tokens: Value,
    /// `metadata`, or `{}`.
    pub metadata: Value,
    /// `parallel_tool_calls`, default `true`.
    pub parallel_tool_calls: bool,
    /// `reasoning`, or `{"effort": null, "summary": null}`.
    pub reasoning: Value,
    /// `temperature`, or null.
    pub temperature: Value,
    /// `text`, or `{"format": {"type": "text"}}`.
    pub text: Value,
    /// `tool_choice`, default `"auto"`.
    pub tool_choice: Value,
    /// `tools`, default `[]`.
    pub tools: Value,
    /// `top_p`, or null.
    pub top_p: Value,
    /// `truncation`, default `"disabled"`.
    pub truncation: Value,
    /// `user`, or null.
    pub user: Value,
}

/// Reads a Responses request body; a member given twice is refused (see
/// [`switchyard::serde_extra::unique_members`]).
pub fn request_from_slice(body: &[u8]) -> Result<ResponsesRequest, CodecError> {
    request_from_json(Value::Object(crate::codec::body_object(body)?))
}

/// Reads a Responses request already parsed as JSON.
pub fn request_from_json(body: Value) -> Result<ResponsesRequest, CodecError> {
    let Value::Object(mut body) = body else { return Err(CodecError::new("body", "must be a JSON object")) };
    let original = body.clone();
    let model = match body.remove("model") {
        Some(Value::String(model)) => model,
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err(CodecError::new("model", "must be a string")),
    };
    let conversation = read_conversation(&mut body)?;
    let mut unsent = Vec::new();
    let tools = read_tool_members(&mut body, &mut unsent)?;
    let sampling = read_sampling(&mut body)?;
    let switches = read_switches(&mut body)?;
    let extras = read_extras(&mut body)?;
    name_unmodelled(body, &mut unsent);
    if conversation.messages.is_empty() && !conversation.references && switches.previous_response_id.is_none()
    {
        return Err(empty_input(&original));
    }
    let chat = ChatRequest {
        model,
        messages: conversation.messages,
        tools: tools.tools,
        tool_choice: tools.tool_choice,
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        max_tokens: sampling.max_tokens,
        response_format: sampling.response_format,
        stream: switches.stream,
        extra: extras.extra,
        origin: Dialect::OpenAi,
        ..ChatRequest::default()
    };
    let echo = Echo {
        instructions: conversation.instructions,
        max_output_tokens: sampling.echo_max_output_tokens,
        metadata: switches.metadata,
        parallel_tool_calls: extras.parallel_tool_calls,
        reasoning: extras.reasoning,
        temperature: sampling.echo_temperature,
        text: sampling.echo_text,
        tool_choice: tools.echo_tool_choice,
        tools: tools.echo_tools,
        top_p: sampling.echo_top_p,
        truncation: extras.truncation,
        user: extras.user,
    };
    Ok(ResponsesRequest {
        chat,
        previous_response_id: switches.previous_response_id,
        store: switches.store,
        echo,
        items: conversation.items,
        references: conversation.references,
        body: original,
        unsent,
    })
}

/// `instructions` and `input`: the conversation this request adds.
struct Conversation {
    /// `instructions` as written, or null: what the echo repeats.
    instructions: Value,
    /// The instructions and, unless it holds references, the input as canonical messages.
    messages: Vec<Message>,
    /// The input as Responses items.
    items: Vec<Value>,
    /// Whether `items` holds `item_reference`s.
    references: bool,
}

/// Takes `instructions` and `input` out of `body`: the instructions as a system message first,
/// then the input's items, read unless some are references.
fn read_conversation(body: &mut Map<String, Value>) -> Result<Conversation, CodecError> {
    let mut messages = Vec::new();
    let instructions = body.remove("instructions").unwrap_or(Value::Null);
    match &instructions {
        Value::Null => {}
        Value::String(text) => messages.push(Message::system(text.clone())),
        _ => return Err(CodecError::new("instructions", "must be a string")),
    }
    let items = match body.remove("input") {
        Some(Value::String(text)) => vec![serde_json::json!({ "role": "user", "content": text })],
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return Err(CodecError::new("input", "must be a string or a list of items")),
    };
    let references = items.iter().any(is_reference);
    if !references {
        messages.extend(messages_from_items(&items, "input")?);
    }
    Ok(Conversation { instructions, messages, items, references })
}

/// `tools` and `tool_choice`, read, and as the echo repeats them.
struct ToolMembers {
    tools: Vec<Tool>,
    tool_choice: Option<ToolChoice>,
    /// `tools` as written, default `[]`.
    echo_tools: Value,
    /// `tool_choice` as written, default `"auto"`.
    echo_tool_choice: Value,
}

/// Takes `tools` and `tool_choice` out of `body`; hosted tools are named in `unsent`.
fn read_tool_members(
    body: &mut Map<String, Value>,
    unsent: &mut Vec<String>,
) -> Result<ToolMembers, CodecError> {
    let tools_value = body.remove("tools").unwrap_or(Value::Null);
    let tools = match &tools_value {
        Value::Null => Vec::new(),
        Value::Array(tools) => read_tools(tools, unsent)?,
        _ => return Err(CodecError::new("tools", "must be an array")),
    };
    let tool_choice_value = body.remove("tool_choice").unwrap_or(Value::Null);
    let tool_choice = read_tool_choice(&tool_choice_value)?;
    Ok(ToolMembers {
        tools,
        tool_choice,
        echo_tools: if tools_value.is_null() { Value::Array(Vec::new()) } else { tools_value },
        echo_tool_choice: if tool_choice_value.is_null() { Value::from("auto") } else { tool_choice_value },
    })
}

/// `text`, `max_output_tokens`, `temperature` and `top_p`, read, and as the echo repeats them.
struct Sampling {
    response_format: Option<ResponseFormat>,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// `text` as written, default `{"format": {"type": "text"}}`.
    echo_text: Value,
    /// `max_output_tokens` as written, or null.
    echo_max_output_tokens: Value,
    /// `temperature` as written, or null.
    echo_temperature: Value,
    /// `top_p` as written, or null.
    echo_top_p: Value,
}

/// Takes the output format and the sampling parameters out of `body`.
fn read_sampling(body: &mut Map<String, Value>) -> Result<Sampling, CodecError> {
    let text = body.remove("text").unwrap_or(Value::Null);
    let response_format = read_text_format(&text)?;
    let max_output_tokens = body.remove("max_output_tokens").unwrap_or(Value::Null);
    let max_tokens = match &max_output_tokens {
        Value::Null => None,
        value => Some(
            value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| CodecError::new("max_output_tokens", "must be a positive integer"))?,
        ),
    };
    let temperature = body.remove("temperature").unwrap_or(Value::Null);
    let top_p = body.remove("top_p").unwrap_or(Value::Null);
    let number = |value: &Value, field: &str| match value {
        Value::Null => Ok(None),
        value => value.as_f64().map(Some).ok_or_else(|| CodecError::new(field, "must be a number")),
    };
    let (temperature_f, top_p_f) = (number(&temperature, "temperature")?, number(&top_p, "top_p")?);
    Ok(Sampling {
        response_format,
        max_tokens,
        temperature: temperature_f,
        top_p: top_p_f,
        echo_text: if text.is_null() { serde_json::json!({ "format": { "type": "text" } }) } else { text },
        echo_max_output_tokens: max_output_tokens,
        echo_temperature: temperature,
        echo_top_p: top_p,
    })
}

/// `stream`, `store`, `previous_response_id` and `metadata`: the gateway's own members.
struct Switches {
    /// Default `false`.
    stream: bool,
    /// Default `true`.
    store: bool,
    previous_response_id: Option<String>,
    /// As written, default `{}`.
    metadata: Value,
}

/// Takes the gateway's own members out of `body`.
fn read_switches(body: &mut Map<String, Value>) -> Result<Switches, CodecError> {
    let stream = match body.remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => stream,
        Some(_) => return Err(CodecError::new("stream", "must be a boolean")),
    };
    let store = match body.remove("store") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(store)) => store,
        Some(_) => return Err(CodecError::new("store", "must be a boolean")),
    };
    let previous_response_id = match body.remove("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id),
        Some(_) => return Err(CodecError::new("previous_response_id", "must be a response id")),
    };
    let metadata = match body.remove("metadata") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(metadata @ Value::Object(_)) => metadata,
        Some(_) => return Err(CodecError::new("metadata", "must be an object")),
    };
    Ok(Switches { stream, store, previous_response_id, metadata })
}

/// `reasoning`, `parallel_tool_calls`, `user` and `truncation`: OpenAI extras, and as the echo
/// repeats them.
struct Extras {
    /// `reasoning_effort`, `parallel_tool_calls: false` and `user`, as Chat Completions names them.
    extra: Extra,
    /// As written, default `{"effort": null, "summary": null}`.
    reasoning: Value,
    /// Default `true`.
    parallel_tool_calls: bool,
    /// As written, or null.
    user: Value,
    /// As written, default `"disabled"`.
    truncation: Value,
}

/// Takes the members read as OpenAI extras out of `body`.
fn read_extras(body: &mut Map<String, Value>) -> Result<Extras, CodecError> {
    let mut extra = Extra::new();
    let reasoning = body.remove("reasoning").unwrap_or(Value::Null);
    match &reasoning {
        Value::Null => {}
        Value::Object(object) => {
            if let Some(effort) = object.get("effort").filter(|e| !e.is_null()) {
                extra.insert("reasoning_effort".to_owned(), effort.clone());
            }
        }
        _ => return Err(CodecError::new("reasoning", "must be an object")),
    }
    let parallel_tool_calls = match body.remove("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(parallel)) => {
            if !parallel {
                extra.insert("parallel_tool_calls".to_owned(), Value::Bool(false));
            }
            parallel
        }
        Some(_) => return Err(CodecError::new("parallel_tool_calls", "must be a boolean")),
    };
    let user = body.remove("user").unwrap_or(Value::Null);
    if let Value::String(_) = user {
        extra.insert("user".to_owned(), user.clone());
    }
    let truncation = body.remove("truncation").unwrap_or_else(|| Value::from("disabled"));
    let reasoning =
        if reasoning.is_null() { serde_json::json!({ "effort": null, "summary": null }) } else { reasoning };
    Ok(Extras { extra, reasoning, parallel_tool_calls, user, truncation })
}

/// Names in `unsent` the members left in `body` once every member read is taken out, but
/// those accepted and never sent.
fn name_unmodelled(mut body: Map<String, Value>, unsent: &mut Vec<String>) {
    // Accepted and not sent: what to include in the answer, the service tier, prompt caching.
    for ignored in ["include", "service_tier", "prompt_cache_key", "safety_identifier", "background"] {
        body.remove(ignored);
    }
    // Parameters Switchyard does not model (`client_metadata`, ...) reach a provider of the
    // Responses API as written; another is not sent them, and its attempt's note says so.
    if !body.is_empty() {
        let names: Vec<&str> = body.keys().map(String::as_str).collect();
        unsent.push(format!(
            "the parameter(s) {} were not sent: only a provider spoken to in the Responses API reads them",
            names.join(", ")
        ));
    }
}

/// Whether `item` is an `item_reference` (`{"type": "item_reference", "id"}`): an item of an
/// earlier response, named by its id, as clients that keep their conversation by reference
/// send it (the Vercel AI SDK's OpenAI provider does, by default).
pub fn is_reference(item: &Value) -> bool {
    // `type` is optional on a reference: an object with an `id` and neither `type` nor `role`.
    item["type"] == "item_reference"
        || item
            .as_object()
            .is_some_and(|o| o.contains_key("id") && !o.contains_key("type") && !o.contains_key("role"))
}

/// The canonical messages of Responses items (an input, or a kept conversation); `path` names
/// the list in errors (`input`).
pub fn messages_from_items(items: &[Value], path: &str) -> Result<Vec<Message>, CodecError> {
    let mut messages = Vec::new();
    for (i, item) in items.iter().enumerate() {
        read_item(item.clone(), &format!("{path}[{i}]"), &mut messages)?;
    }
    // Thinking the answer after it did not come with (an answer cut short) opens nothing.
    messages.retain(|message| !thinking_only(message));
    Ok(messages)
}

/// An assistant turn holding only Claude's thinking, waiting for the answer it led to.
fn thinking_only(message: &Message) -> bool {
    message.role == Role::Assistant
        && message.content.is_none()
        && message.tool_calls.is_empty()
        && (message.extra.contains_key(THINKING_BLOCKS) || message.extra.contains_key(SEALED_REASONING))
}

/// A message of `role` with nothing in it yet.
fn bare(role: Role) -> Message {
    Message { content: None, ..Message::text(role, "") }
}

/// A string member of `object`, required.
fn string<'a>(object: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, CodecError> {
    match object.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(CodecError::new(format!("{path}.{key}"), "must be a string")),
        None => Err(CodecError::new(format!("{path}.{key}"), "is required")),
    }
}

/// The refusal of a request whose input says nothing to send: none, or only items of kinds
/// no model is sent (named, as sent: `bogus`).
fn empty_input(body: &Map<String, Value>) -> CodecError {
    let items = body.get("input").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    // Named as sent, each once, and within bounds: a client's text said back.
    let mut kinds: Vec<String> = items
        .iter()
        .filter_map(|item| item["type"].as_str())
        .map(|kind| kind.chars().take(64).collect())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds.truncate(8);
    match kinds.is_empty() {
        true => CodecError::new("input", "is required"),
        false => CodecError::new(
            "input",
            format!("holds no message nor call to send, only items of kind {}", kinds.join(", ")),
        ),
    }
}

/// Appends what one input item says to `messages`.
fn read_item(item: Value, path: &str, messages: &mut Vec<Message>) -> Result<(), CodecError> {
    let Value::Object(object) = item else { return Err(CodecError::new(path, "must be an object")) };
    match item_kind(&object, path)? {
        "message" => push_message(messages, read_message(&object, path)?),
        kind @ ("function_call" | "custom_tool_call") => push_call(messages, read_call(&object, kind, path)?),
        "function_call_output" | "custom_tool_call_output" => messages.push(read_output(&object, path)?),
        // A model's reasoning is readable only by the provider that wrote it; the answer it led
        // to is in the items that follow. Claude's, as the gateway sealed it, opens that answer's
        // turn, for an Anthropic target to read back.
        "reasoning" => {
            let item = Value::Object(object);
            if let Some(blocks) = super::unseal_thinking(&item) {
                push_thinking(messages, blocks);
            } else if let Some(reasoning) = super::unseal_reasoning(&item) {
                push_reasoning(messages, reasoning);
            }
        }
        "item_reference" => {
            let id = object.get("id").and_then(Value::as_str).unwrap_or_default();
            return Err(CodecError::new(
                path,
                format!(
                    "`item_reference` `{id}` names no item kept here for this key (it expired, was deleted, or its response was sent with store: false); send the item itself"
                ),
            ));
        }
        // Items of hosted tools (`web_search_call`, ...) and others Switchyard does not model
        // reach a provider of the Responses API as written; another is not sent them
        // ([`unread_items`] names them for the trail).
        _ => {}
    }
    Ok(())
}

/// An item's `type`; an item without one is an easy input message or a reference.
fn item_kind<'a>(object: &'a Map<String, Value>, path: &str) -> Result<&'a str, CodecError> {
    match object.get("type") {
        Some(Value::String(kind)) => Ok(kind.as_str()),
        // An easy input message: `{"role", "content"}`.
        None if object.contains_key("role") => Ok("message"),
        // A reference may leave out its type.
        None if object.contains_key("id") => Ok("item_reference"),
        Some(_) => Err(CodecError::new(format!("{path}.type"), "must be a string")),
        None => Err(CodecError::new(format!("{path}.type"), "is required")),
    }
}

/// Appends a message; an assistant one takes the place of the thinking that led to it.
fn push_message(messages: &mut Vec<Message>, mut message: Message) {
    // The answer Claude's thinking before it led to: one assistant turn, as it was.
    match messages.last_mut() {
        Some(last) if message.role == Role::Assistant && thinking_only(last) => {
            for key in [THINKING_BLOCKS, SEALED_REASONING] {
                if let Some(thinking) = last.extra.remove(key) {
                    message.extra.insert(key.to_owned(), thinking);
                }
            }
            *last = message;
        }
        _ => messages.push(message),
    }
}

/// Appends a tool call to the assistant turn it belongs to, opening one when needed.
fn push_call(messages: &mut Vec<Message>, call: ToolCall) {
    // A message and the calls after it, and parallel calls, are one assistant turn.
    match messages.last_mut() {
        Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
        _ => messages.push(Message { tool_calls: vec![call], ..bare(Role::Assistant) }),
    }
}

/// A `function_call_output` or `custom_tool_call_output` item, as a tool message.
fn read_output(object: &Map<String, Value>, path: &str) -> Result<Message, CodecError> {
    let call_id = string(object, "call_id", path)?.to_owned();
    let output = match object.get("output") {
        Some(Value::String(text)) => Content::Text(text.clone()),
        Some(Value::Array(parts)) => Content::Parts(read_parts(parts, &format!("{path}.output"))?),
        Some(_) => {
            return Err(CodecError::new(format!("{path}.output"), "must be a string or a list of parts"));
        }
        None => return Err(CodecError::new(format!("{path}.output"), "is required")),
    };
    Ok(Message { tool_call_id: Some(call_id), content: Some(output), ..bare(Role::Tool) })
}

/// Appends another dialect's unsealed reasoning (`{"model", "text"}`): to the reasoning
/// before it, else as a turn of its own that the answer after it joins.
fn push_reasoning(messages: &mut Vec<Message>, reasoning: Value) {
    match messages.last_mut() {
        Some(last) if thinking_only(last) => match last.extra.get_mut(SEALED_REASONING) {
            Some(earlier) => {
                let text = format!(
                    "{}{}",
                    earlier["text"].as_str().unwrap_or_default(),
                    reasoning["text"].as_str().unwrap_or_default()
                );
                earlier["text"] = Value::String(text);
            }
            None => {
                last.extra.insert(SEALED_REASONING.to_owned(), reasoning);
            }
        },
        _ => {
            let mut message = bare(Role::Assistant);
            message.extra.insert(SEALED_REASONING.to_owned(), reasoning);
            messages.push(message);
        }
    }
}

/// Appends Claude's unsealed thinking: to the thinking before it, else as a turn of its own
/// that the answer it led to takes over.
fn push_thinking(messages: &mut Vec<Message>, mut blocks: Vec<Value>) {
    match messages.last_mut() {
        // Thinking after thinking, before the answer: one turn's, in order.
        Some(last) if thinking_only(last) => {
            if let Some(Value::Array(earlier)) = last.extra.get_mut(THINKING_BLOCKS) {
                earlier.append(&mut blocks);
            }
        }
        _ => {
            let mut message = bare(Role::Assistant);
            message.extra.insert(THINKING_BLOCKS.to_owned(), Value::Array(blocks));
            messages.push(message);
        }
    }
}

/// The item types Switchyard reads into a conversation.
const READ_ITEMS: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "item_reference",
];

/// The types of `items` that a provider of another API is not sent (hosted tools' calls and
/// the like), each once, in order; empty when every item translates.
pub fn unread_items(items: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for item in items {
        if let Some(kind) = item["type"].as_str()
            && !READ_ITEMS.contains(&kind)
            && !kinds.iter().any(|seen| seen == kind)
        {
            kinds.push(kind.to_owned());
        }
    }
    kinds
}

/// A `function_call` item (its function named within its `namespace`, when it has one) or a
/// `custom_tool_call` item (kept as Chat Completions writes a custom call).
fn read_call(object: &Map<String, Value>, kind: &str, path: &str) -> Result<ToolCall, CodecError> {
    let call_id = string(object, "call_id", path)?.to_owned();
    let name = string(object, "name", path)?;
    if kind == "custom_tool_call" {
        let input = string(object, "input", path)?;
        let mut call = ToolCall::function(call_id, "", "");
        call.kind = "custom".to_owned();
        call.extra.insert("custom".to_owned(), serde_json::json!({ "name": name, "input": input }));
        return Ok(call);
    }
    let name = match object.get("namespace").and_then(Value::as_str) {
        Some(namespace) => namespaced_name(namespace, name),
        None => name.to_owned(),
    };
    Ok(ToolCall::function(call_id, name, string(object, "arguments", path)?.to_owned()))
}

/// A `message` item.
fn read_message(object: &Map<String, Value>, path: &str) -> Result<Message, CodecError> {
    let role = match string(object, "role", path)? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        "developer" => Role::Developer,
        other => {
            return Err(CodecError::new(
                format!("{path}.role"),
                format!("is `{other}`; it must be user, assistant, system or developer"),
            ));
        }
    };
    let content = match object.get("content") {
        Some(Value::String(text)) => Content::Text(text.clone()),
        Some(Value::Array(parts)) => {
            let parts = read_parts(parts, &format!("{path}.content"))?;
            match parts.as_slice() {
                [ContentPart::Text { text }] => Content::Text(text.clone()),
                _ => Content::Parts(parts),
            }
        }
        Some(_) => {
            return Err(CodecError::new(format!("{path}.content"), "must be a string or a list of parts"));
        }
        None => return Err(CodecError::new(format!("{path}.content"), "is required")),
    };
    Ok(Message { content: Some(content), ..bare(role) })
}

/// Content parts: text, images and files in; text and refusals of earlier answers.
fn read_parts(parts: &[Value], path: &str) -> Result<Vec<ContentPart>, CodecError> {
    parts
        .iter()
        .enumerate()
        .map(|(j, part)| {
            let path = format!("{path}[{j}]");
            let Value::Object(object) = part else { return Err(CodecError::new(path, "must be an object")) };
            let kind = string(object, "type", &path)?;
            Ok(match kind {
                "input_text" | "output_text" | "text" => {
                    ContentPart::Text { text: string(object, "text", &path)?.to_owned() }
                }
                "refusal" => ContentPart::Text { text: string(object, "refusal", &path)?.to_owned() },
                "input_image" => match object.get("image_url") {
                    Some(Value::String(url)) => ContentPart::ImageUrl {
                        image_url: ImageUrl {
                            url: url.clone(),
                            detail: object.get("detail").and_then(Value::as_str).map(str::to_owned),
                        },
                    },
                    _ => {
                        return Err(CodecError::new(
                            format!("{path}.image_url"),
                            "is required: Switchyard sends images by URL or data URL, not by file id",
                        ));
                    }
                },
                "input_file" => {
                    // Chat Completions' `file` part carries the same fields.
                    let mut file = Map::new();
                    for key in ["file_id", "file_data", "filename"] {
                        if let Some(value) = object.get(key).filter(|v| !v.is_null()) {
                            file.insert(key.to_owned(), value.clone());
                        }
                    }
                    if !file.contains_key("file_id") && !file.contains_key("file_data") {
                        return Err(CodecError::new(path, "needs `file_data` or `file_id`"));
                    }
                    ContentPart::Other(serde_json::json!({ "type": "file", "file": file }))
                }
                other => {
                    return Err(CodecError::new(
                        format!("{path}.type"),
                        format!(
                            "is `{other}`; Switchyard reads input_text, input_image and input_file parts"
                        ),
                    ));
                }
            })
        })
        .collect()
}

/// The request's tools as canonical tools: function tools as they are, a `namespace`'s
/// functions each as a function tool named [`namespaced_name`], a `custom` tool as a Chat
/// Completions custom tool. Hosted tools (web search, file search, ...) run only on a provider
/// of the Responses API: left out here, and named in `unsent`.
fn read_tools(tools: &[Value], unsent: &mut Vec<String>) -> Result<Vec<Tool>, CodecError> {
    let mut canonical = Vec::new();
    let mut hosted = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("tools[{i}]");
        let Value::Object(object) = tool else { return Err(CodecError::new(path, "must be an object")) };
        match string(object, "type", &path)? {
            "function" => canonical.push(read_function(object, &path, None)?),
            "namespace" => {
                let namespace = string(object, "name", &path)?;
                let Some(Value::Array(inner)) = object.get("tools") else {
                    return Err(CodecError::new(
                        format!("{path}.tools"),
                        "must be an array of function tools",
                    ));
                };
                for (j, function) in inner.iter().enumerate() {
                    let path = format!("{path}.tools[{j}]");
                    let Value::Object(function) = function else {
                        return Err(CodecError::new(path, "must be an object"));
                    };
                    if string(function, "type", &path)? != "function" {
                        return Err(CodecError::new(
                            format!("{path}.type"),
                            "must be `function` in a namespace",
                        ));
                    }
                    canonical.push(read_function(function, &path, Some(namespace))?);
                }
            }
            "custom" => canonical.push(read_custom(object, &path)?),
            other => hosted.push(other.to_owned()),
        }
    }
    if !hosted.is_empty() {
        unsent.push(format!(
            "the hosted tool(s) {} were not sent: only a provider spoken to in the Responses API runs them",
            hosted.join(", ")
        ));
    }
    Ok(canonical)
}

/// A function tool, named within `namespace` when it is one of a namespace's.
fn read_function(
    object: &Map<String, Value>,
    path: &str,
    namespace: Option<&str>,
) -> Result<Tool, CodecError> {
    let mut extra = Extra::new();
    if let Some(strict) = object.get("strict").filter(|s| !s.is_null()) {
        extra.insert("strict".to_owned(), strict.clone());
    }
    let name = string(object, "name", path)?;
    Ok(Tool::function(FunctionDefinition {
        name: namespace.map_or_else(|| name.to_owned(), |namespace| namespaced_name(namespace, name)),
        description: object.get("description").and_then(Value::as_str).map(str::to_owned),
        parameters: object.get("parameters").filter(|p| !p.is_null()).cloned(),
        extra,
    }))
}

/// A `custom` tool (free-form input, perhaps held to a grammar) as Chat Completions writes it:
/// `{"type": "custom", "custom": {"name", "description", "format"}}`.
fn read_custom(object: &Map<String, Value>, path: &str) -> Result<Tool, CodecError> {
    let name = string(object, "name", path)?.to_owned();
    let mut definition = object.clone();
    definition.remove("type");
    let mut extra = Extra::new();
    extra.insert("custom".to_owned(), Value::Object(definition));
    Ok(Tool {
        kind: "custom".to_owned(),
        function: FunctionDefinition { name, description: None, parameters: None, extra: Extra::new() },
        extra,
    })
}

/// `tool_choice`: a mode, or `{"type": "function", "name"}`.
fn read_tool_choice(choice: &Value) -> Result<Option<ToolChoice>, CodecError> {
    Ok(match choice {
        Value::Null => None,
        Value::String(mode) if matches!(mode.as_str(), "auto" | "none" | "required") => {
            Some(ToolChoice::Mode(mode.clone()))
        }
        Value::Object(object) if object.get("type").and_then(Value::as_str) == Some("function") => {
            Some(ToolChoice::Function {
                kind: "function".to_owned(),
                function: ToolChoiceFunction { name: string(object, "name", "tool_choice")?.to_owned() },
            })
        }
        _ => {
            return Err(CodecError::new(
                "tool_choice",
                "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
            ));
        }
    })
}

/// `text.format` as the canonical response format.
fn read_text_format(text: &Value) -> Result<Option<ResponseFormat>, CodecError> {
    let format = match text {
        Value::Null => return Ok(None),
        Value::Object(object) => match object.get("format") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(format)) => format,
            Some(_) => return Err(CodecError::new("text.format", "must be an object")),
        },
        _ => return Err(CodecError::new("text", "must be an object")),
    };
    Ok(Some(match string(format, "type", "text.format")? {
        "text" => ResponseFormat::Text,
        "json_object" => ResponseFormat::JsonObject,
        "json_schema" => {
            let mut extra = Extra::new();
            if let Some(description) = format.get("description").filter(|d| !d.is_null()) {
                extra.insert("description".to_owned(), description.clone());
            }
            ResponseFormat::JsonSchema {
                json_schema: JsonSchemaFormat {
                    name: string(format, "name", "text.format")?.to_owned(),
                    schema: Some(format.get("schema").filter(|s| s.is_object()).cloned().ok_or_else(
                        || CodecError::new("text.format.schema", "is required and must be an object"),
                    )?),
                    strict: format.get("strict").and_then(Value::as_bool),
                    extra,
                },
            }
        }
        other => {
            return Err(CodecError::new(
                "text.format.type",
                format!("is `{other}`; it must be text, json_object or json_schema"),
            ));
        }
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(body: Value) -> ResponsesRequest {
        request_from_json(body).unwrap()
    }

    #[test]
    fn claudes_sealed_thinking_opens_the_assistant_turn_it_led_to() {
        let block = json!({"type": "thinking", "thinking": "Look it up.", "signature": "EqQB"});
        let sealed = super::super::seal_thinking(std::slice::from_ref(&block));
        let reasoning =
            json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed});
        let items = [
            json!({"role": "user", "content": "Weather?"}),
            reasoning.clone(),
            json!({"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "call_1", "output": "18C"}),
            reasoning.clone(),
            reasoning.clone(),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "18C."}]}),
            // Thinking whose answer never came opens nothing.
            reasoning,
            json!({"role": "user", "content": "Thanks"}),
        ];
        let messages = messages_from_items(&items, "input").unwrap();
        let roles: Vec<_> = messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant, Role::User]);
        assert_eq!(messages[1].tool_calls[0].id, "call_1");
        assert_eq!(messages[1].extra["thinking_blocks"], json!([block]));
        assert_eq!(messages[3].text_content().as_deref(), Some("18C."));
        assert_eq!(messages[3].extra["thinking_blocks"], json!([block, block]), "both, in order");
        assert!(super::super::is_claude_thinking(&items[1]));
        assert!(!super::super::is_claude_thinking(
            &json!({"type": "reasoning", "encrypted_content": "gAAAAB"})
        ));
    }

    fn refused(body: Value) -> String {
        request_from_json(body).unwrap_err().field
    }

    #[test]
    fn an_input_of_items_no_model_is_sent_names_their_kinds() {
        let error = request_from_json(json!({"model": "m", "input": [{"type": "bogus"}]})).unwrap_err();
        assert_eq!(error.to_string(), "`input` holds no message nor call to send, only items of kind bogus");
        let error = request_from_json(json!({"model": "m", "input": []})).unwrap_err();
        assert_eq!(error.to_string(), "`input` is required");
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_instructions() {
        let request =
            read(json!({"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 50,
            "temperature": 0.2, "stream": true, "store": false, "metadata": {"k": "v"}}));
        assert_eq!(request.chat.messages, vec![Message::system("Be brief."), Message::user("Hi")]);
        assert_eq!(
            (request.chat.max_tokens, request.chat.temperature, request.chat.stream),
            (Some(50), Some(0.2), true)
        );
        assert!(!request.store);
        assert_eq!(request.echo.metadata, json!({"k": "v"}));
        assert_eq!(request.echo.tool_choice, "auto");
        assert_eq!(request.echo.text, json!({"format": {"type": "text"}}));
    }

    #[test]
    fn items_become_messages_tool_calls_and_tool_results_in_order() {
        let request = read(json!({"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "low"},
                {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JV="}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
            {"type": "function_call_output", "call_id": "call_2", "output": "25C"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Warm.", "annotations": []}]}
        ], "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": true}],
           "tool_choice": {"type": "function", "name": "weather"}}));
        let messages = &request.chat.messages;
        assert_eq!(messages.len(), 5, "{messages:#?}");
        let Some(Content::Parts(parts)) = &messages[0].content else { panic!() };
        assert_eq!(
            parts[1],
            ContentPart::ImageUrl {
                image_url: ImageUrl { url: "data:image/png;base64,AA==".into(), detail: Some("low".into()) }
            }
        );
        assert_eq!(
            parts[2],
            ContentPart::Other(
                json!({"type": "file", "file": {"file_data": "data:application/pdf;base64,JV=", "filename": "a.pdf"}})
            )
        );
        assert_eq!(messages[1].role, Role::Assistant);
        assert_eq!(messages[1].content, None);
        assert_eq!(
            messages[1].tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["call_1", "call_2"]
        );
        assert_eq!(
            (messages[2].tool_call_id.as_deref(), messages[2].text_content().as_deref()),
            (Some("call_1"), Some("21C"))
        );
        assert_eq!(messages[4], Message::assistant("Warm."));
        assert_eq!(request.chat.tools[0].function.extra["strict"], true);
        assert!(
            matches!(&request.chat.tool_choice, Some(ToolChoice::Function { function, .. }) if function.name == "weather")
        );
    }

    #[test]
    fn a_json_schema_text_format_is_the_canonical_response_format() {
        let request = read(
            json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "out",
            "schema": {"type": "object", "properties": {"b": {}, "a": {}}}, "strict": true}}}),
        );
        let Some(ResponseFormat::JsonSchema { json_schema }) = &request.chat.response_format else {
            panic!()
        };
        assert_eq!(json_schema.name, "out");
        assert_eq!(json_schema.strict, Some(true));
        let keys: Vec<_> =
            json_schema.schema.as_ref().unwrap()["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["b", "a"]);
    }

    #[test]
    fn item_references_are_left_for_the_gateway_to_put_in_place() {
        assert!(is_reference(&json!({"id": "msg_2"})), "`type` is optional on a reference");
        assert!(!is_reference(&json!({"id": "msg_2", "role": "assistant", "content": "x"})));
        let input = json!([{"role": "user", "content": "Hello"}, {"type": "item_reference", "id": "msg_1"}]);
        let request =
            request_from_json(json!({"model": "m", "input": input, "instructions": "Be brief."})).unwrap();
        assert!(request.references);
        assert_eq!(request.items, input.as_array().unwrap().clone());
        assert_eq!(request.chat.messages.len(), 1, "the instructions only, until the references are read");
        let error = messages_from_items(&request.items, "input").unwrap_err().to_string();
        assert!(error.starts_with("`input[1]` `item_reference` `msg_1` names no item kept here"), "{error}");
        assert!(!read(json!({"model": "m", "input": "x"})).references);
    }

    #[test]
    fn every_malformed_item_is_refused_by_its_path() {
        let cases = [
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
                "input[0].content[0].type",
            ),
            (
                json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0].call_id",
            ),
            (json!({"input": ["hi"]}), "input[0]"),
            (json!({"input": [{"role": "robot", "content": "x"}]}), "input[0].role"),
            (json!({"input": "x", "tools": [{"type": "namespace", "name": "ns"}]}), "tools[0].tools"),
            (
                json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "o"}}}),
                "text.format.schema",
            ),
            (json!({"input": "x", "max_output_tokens": -1}), "max_output_tokens"),
            (json!({"model": "m"}), "input"),
        ];
        for (body, path) in cases {
            assert_eq!(refused(body.clone()), path, "{body}");
        }
    }

    #[test]
    fn hosted_tools_and_parameters_not_modelled_are_kept_for_the_responses_api_and_named_for_others() {
        let body = json!({"model": "m", "input": "hi", "client_metadata": {"a": 1},
            "tools": [{"type": "web_search", "external_web_access": false}, {"type": "file_search"},
                {"type": "function", "name": "f", "parameters": {"type": "object"}}]});
        let request = read(body.clone());
        let names: Vec<&str> = request.chat.tools.iter().map(|t| t.function.name.as_str()).collect();
        assert_eq!(names, ["f"], "only what another API can run is translated");
        assert_eq!(
            request.unsent,
            [
                "the hosted tool(s) web_search, file_search were not sent: only a provider spoken to in the Responses API runs them",
                "the parameter(s) client_metadata were not sent: only a provider spoken to in the Responses API reads them",
            ]
        );
        assert_eq!(Value::Object(request.body), body, "a provider of the Responses API gets it as written");
    }

    #[test]
    fn a_namespaces_functions_are_function_tools_named_within_it_and_its_calls_read_back_so() {
        let tools = json!([{"type": "namespace", "name": "agents", "description": "Sub-agents.",
            "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}]}]);
        let request = read(json!({"model": "m", "tools": tools, "input": [
            {"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "function_call", "call_id": "call_1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "done"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"}]}));
        assert_eq!(request.chat.tools[0].function.name, "agents__spawn");
        assert_eq!(request.chat.messages[1].tool_calls[0].function.name, "agents__spawn");
        assert_eq!(namespaced(&tools, "agents__spawn"), Some(("agents", "spawn")));
        assert_eq!(namespaced(&tools, "agents__other"), None);
        assert_eq!(namespaced(&tools, "spawn"), None);
        assert_eq!(unread_items(&request.items), ["web_search_call"]);
    }

    #[test]
    fn a_custom_tool_and_its_calls_read_as_chat_completions_writes_them() {
        let request = read(json!({"model": "m",
            "tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}],
            "input": [{"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": "*** patch"},
                {"type": "custom_tool_call_output", "call_id": "call_1", "output": "ok"}]}));
        let tool = &request.chat.tools[0];
        assert_eq!(
            (tool.kind.as_str(), &tool.extra["custom"]["format"]["syntax"]),
            ("custom", &json!("lark"))
        );
        let call = &request.chat.messages[0].tool_calls[0];
        assert_eq!(
            serde_json::to_value(call).unwrap(),
            json!({"id": "call_1", "type": "custom",
            "custom": {"name": "apply_patch", "input": "*** patch"}})
        );
        assert_eq!(request.chat.messages[1].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn a_continuation_needs_no_input_of_its_own_but_names_what_it_continues() {
        let request = read(json!({"model": "m", "previous_response_id": "resp_1", "input": [
            {"type": "function_call_output", "call_id": "call_1", "output": "21C"}]}));
        assert_eq!(request.previous_response_id.as_deref(), Some("resp_1"));
        assert_eq!(request.chat.messages[0].role, Role::Tool);
    }
}
