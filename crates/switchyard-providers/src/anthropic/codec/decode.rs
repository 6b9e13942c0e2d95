//! Messages API requests into canonical requests.

use serde_json::{Map, Value};
use switchyard::chat::{
    ChatRequest, Content, ContentPart, Dialect, Extra, FunctionDefinition, ImageUrl, JsonSchemaFormat,
    Message, ResponseFormat, Role, Stop, Tool, ToolCall, ToolChoice, ToolChoiceFunction,
};

use super::CodecError;
use crate::anthropic::request::{self, VERBATIM_BLOCKS};

/// Reads a Messages API request body; a member given twice is refused (see
/// [`switchyard::serde_extra::unique_members`]).
pub fn request_from_slice(body: &[u8]) -> Result<ChatRequest, CodecError> {
    request_from_json(Value::Object(crate::codec::body_object(body)?))
}

/// Reads a Messages API request into a canonical request with `origin` [`Dialect::Anthropic`].
///
/// `system` (a string or text blocks) becomes leading system messages, one per block; a user
/// message's `tool_result` blocks become tool messages; `tool_use` blocks become tool calls;
/// images become image parts (base64 sources as `data:` URLs); `tool_choice` any/tool become
/// required/a named function, and `disable_parallel_tool_use: true` becomes
/// `parallel_tool_calls: false` in `extra`; `stop_sequences` become `stop`; structured output
/// (`output_config.format`) is also the response format. Every other top-level field (`top_k`,
/// `metadata`, `thinking`, `output_config`, ...) is kept in `extra`.
pub fn request_from_json(body: Value) -> Result<ChatRequest, CodecError> {
    let Value::Object(mut body) = body else {
        return Err(CodecError::new("body", "must be a JSON object"));
    };
    let model = match take(&mut body, "model") {
        Some(Value::String(model)) => model,
        Some(_) => return Err(CodecError::new("model", "must be a string")),
        None => return Err(CodecError::new("model", "is required")),
    };
    let max_tokens = match take(&mut body, "max_tokens") {
        Some(value) => u32_field(&value, "max_tokens")?,
        None => return Err(CodecError::new("max_tokens", "is required")),
    };

    let mut messages = Vec::new();
    if let Some(system) = take(&mut body, "system") {
        read_system(system, &mut messages)?;
    }
    match take(&mut body, "messages") {
        Some(Value::Array(list)) => {
            for (i, message) in list.into_iter().enumerate() {
                read_message(message, i, &mut messages)?;
            }
        }
        Some(_) => return Err(CodecError::new("messages", "must be an array")),
        None => return Err(CodecError::new("messages", "is required")),
    }

    let tools = match take(&mut body, "tools") {
        Some(Value::Array(list)) => list.into_iter().enumerate().map(read_tool).collect::<Result<_, _>>()?,
        Some(_) => return Err(CodecError::new("tools", "must be an array")),
        None => Vec::new(),
    };
    let mut extra = Extra::new();
    let tool_choice = match take(&mut body, "tool_choice") {
        Some(value) => Some(read_tool_choice(value, &mut extra)?),
        None => None,
    };
    let stop = match take(&mut body, "stop_sequences") {
        Some(Value::Array(list)) => Some(Stop::Many(
            list.into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(text) => Ok(text),
                    _ => Err(CodecError::new(format!("stop_sequences[{i}]"), "must be a string")),
                })
                .collect::<Result<_, _>>()?,
        )),
        Some(_) => return Err(CodecError::new("stop_sequences", "must be an array of strings")),
        None => None,
    };
    let temperature = take(&mut body, "temperature").map(|v| f64_field(&v, "temperature")).transpose()?;
    let top_p = take(&mut body, "top_p").map(|v| f64_field(&v, "top_p")).transpose()?;
    let stream = match take(&mut body, "stream") {
        Some(Value::Bool(stream)) => stream,
        Some(_) => return Err(CodecError::new("stream", "must be a boolean")),
        None => false,
    };
    let response_format = structured_output(&body)?;
    extra.extend(body);

    Ok(ChatRequest {
        model,
        messages,
        tools,
        tool_choice,
        temperature,
        top_p,
        max_tokens: Some(max_tokens),
        stop,
        seed: None,
        response_format,
        stream,
        extra,
        verbatim: None,
        origin: Dialect::Anthropic,
    })
}

/// Structured output (`output_config.format` of type `json_schema`) as the canonical response
/// format, which a provider of another dialect honours (OpenAI's strict `json_schema`, Gemini's
/// response schema) or refuses by name; `output_config` itself stays in `extra`, for an
/// Anthropic provider to receive as written.
fn structured_output(body: &Map<String, Value>) -> Result<Option<ResponseFormat>, CodecError> {
    let Some(format) = body.get("output_config").and_then(|config| config.get("format")) else {
        return Ok(None);
    };
    if format.is_null() {
        return Ok(None);
    }
    if format["type"] != "json_schema" {
        return Err(CodecError::new("output_config.format.type", "must be `json_schema`"));
    }
    let Some(schema) = format.get("schema").filter(|schema| schema.is_object()) else {
        return Err(CodecError::new("output_config.format.schema", "must be a JSON schema object"));
    };
    let json_schema = JsonSchemaFormat {
        name: "output".to_owned(),
        schema: Some(schema.clone()),
        // Anthropic's structured output is constrained decoding: the schema is followed exactly,
        // as OpenAI's strict mode follows it; but strict mode takes only closed objects whose
        // every property is required, and refuses any other schema.
        strict: crate::codec::strict_ready(schema).then_some(true),
        extra: Extra::new(),
    };
    Ok(Some(ResponseFormat::JsonSchema { json_schema }))
}

/// Removes `key`; a `null` counts as absent.
fn take(object: &mut Map<String, Value>, key: &str) -> Option<Value> {
    object.remove(key).filter(|value| !value.is_null())
}

/// `value` as a `u32`, or an error naming `field`.
fn u32_field(value: &Value, field: &str) -> Result<u32, CodecError> {
    match value.as_u64() {
        Some(v) => u32::try_from(v)
            .map_err(|_| CodecError::new(field, format!("is {v}: it must be at most {}", u32::MAX))),
        None => Err(CodecError::new(field, "must be a non-negative integer")),
    }
}

/// `value` as a number, or an error naming `field`.
fn f64_field(value: &Value, field: &str) -> Result<f64, CodecError> {
    value.as_f64().ok_or_else(|| CodecError::new(field, "must be a number"))
}

/// The string member `key` of `object`; missing or not a string is an error naming
/// `{path}.{key}`.
fn string_field(object: &Map<String, Value>, key: &str, path: &str) -> Result<String, CodecError> {
    match object.get(key) {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(CodecError::new(format!("{path}.{key}"), "must be a string")),
        None => Err(CodecError::new(format!("{path}.{key}"), "is required")),
    }
}

/// A content block as its object and its `type`; an error naming `path` when it is not an
/// object or has no string `type`.
fn block_object<'a>(block: &'a Value, path: &str) -> Result<(&'a Map<String, Value>, &'a str), CodecError> {
    let object = block.as_object().ok_or_else(|| CodecError::new(path, "must be an object"))?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError::new(format!("{path}.type"), "is required"))?;
    Ok((object, kind))
}

/// Keeps `raw` in the message's `extra` when translating the message back would not give
/// exactly `raw` (extra block fields, block kinds the canonical types lack, order).
fn keep_if_lossy(message: &mut Message, raw: Vec<Value>, index: usize) {
    let rebuilt =
        request::message_blocks(message, index).ok().and_then(|blocks| serde_json::to_value(blocks).ok());
    if rebuilt.as_ref() != Some(&Value::Array(raw.clone())) {
        message.extra.insert(VERBATIM_BLOCKS.to_owned(), Value::Array(raw));
    }
}

/// Appends `system` (a string, or text blocks) as system messages, one per block; a block
/// with more than its text (`cache_control`, ...) is also kept verbatim.
fn read_system(system: Value, messages: &mut Vec<Message>) -> Result<(), CodecError> {
    match system {
        Value::String(text) => messages.push(Message::system(text)),
        Value::Array(blocks) => {
            for (j, block) in blocks.into_iter().enumerate() {
                let path = format!("system[{j}]");
                let (object, kind) = block_object(&block, &path)?;
                if kind != "text" {
                    return Err(CodecError::new(
                        format!("{path}.type"),
                        format!("is `{kind}`; system blocks must be text"),
                    ));
                }
                let mut message = Message::system(string_field(object, "text", &path)?);
                let index = messages.len();
                keep_if_lossy(&mut message, vec![block], index);
                messages.push(message);
            }
        }
        _ => return Err(CodecError::new("system", "must be a string or an array of text blocks")),
    }
    Ok(())
}

/// A plain message with `role` and `content`.
fn message(role: Role, content: Option<Content>) -> Message {
    Message { role, content, name: None, tool_calls: Vec::new(), tool_call_id: None, extra: Extra::new() }
}

/// Parts as content: a lone text part is plain text; anything else stays parts.
fn parts_content(parts: Vec<ContentPart>) -> Option<Content> {
    match <[ContentPart; 1]>::try_from(parts) {
        Ok([ContentPart::Text { text }]) => Some(Content::Text(text)),
        Ok([part]) => Some(Content::Parts(vec![part])),
        Err(parts) if parts.is_empty() => None,
        Err(parts) => Some(Content::Parts(parts)),
    }
}

/// Appends `messages[i]` as canonical messages: an assistant turn is one message; a user
/// turn becomes user messages and one tool message per `tool_result`, in order.
fn read_message(value: Value, i: usize, messages: &mut Vec<Message>) -> Result<(), CodecError> {
    let path = format!("messages[{i}]");
    let Value::Object(mut object) = value else {
        return Err(CodecError::new(path, "must be an object"));
    };
    let role = match object.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        // A system message in its place in the conversation (beta
        // `mid-conversation-system-2026-04-07`, which Claude Code sends).
        Some("system") => Role::System,
        Some(other) => {
            return Err(CodecError::new(
                format!("{path}.role"),
                format!("is `{other}`; expected user, assistant or system"),
            ));
        }
        None => return Err(CodecError::new(format!("{path}.role"), "is required")),
    };
    let blocks = match object.remove("content") {
        Some(Value::String(text)) => {
            messages.push(message(role, Some(Content::Text(text))));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(CodecError::new(format!("{path}.content"), "must be a string or an array of blocks"));
        }
    };
    if role == Role::System {
        let mut system = read_system_blocks(&blocks, &path)?;
        let index = messages.len();
        keep_if_lossy(&mut system, blocks, index);
        messages.push(system);
        return Ok(());
    }
    if role == Role::Assistant {
        let mut answer = read_assistant_blocks(&blocks, &path)?;
        let index = messages.len();
        keep_if_lossy(&mut answer, blocks, index);
        messages.push(answer);
        return Ok(());
    }

    // A user turn may mix tool results with text and images; each run of text and images is
    // one user message and each tool result one tool message, in their original order.
    let mut run: Vec<(ContentPart, Value)> = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        let block_path = format!("{path}.content[{j}]");
        let (object, kind) = block_object(&block, &block_path)?;
        match kind {
            "text" | "image" => {
                let part = read_part(object, kind, &block_path)?;
                run.push((part, block));
            }
            "tool_result" => {
                flush_user_run(&mut run, messages);
                let mut result = read_tool_result(object, &block_path)?;
                let index = messages.len();
                keep_if_lossy(&mut result, vec![block], index);
                messages.push(result);
            }
            // Documents, search results, ...: kept as written, for an Anthropic upstream.
            _ => run.push((ContentPart::Other(block.clone()), block)),
        }
    }
    flush_user_run(&mut run, messages);
    Ok(())
}

/// Appends the pending run of text and image parts as one user message (kept verbatim when
/// lossy) and empties the run; nothing when it is empty.
fn flush_user_run(run: &mut Vec<(ContentPart, Value)>, messages: &mut Vec<Message>) {
    if run.is_empty() {
        return;
    }
    let (parts, raw): (Vec<_>, Vec<_>) = std::mem::take(run).into_iter().unzip();
    let mut user = message(Role::User, parts_content(parts));
    let index = messages.len();
    keep_if_lossy(&mut user, raw, index);
    messages.push(user);
}

/// A text or image block as a content part.
fn read_part(object: &Map<String, Value>, kind: &str, path: &str) -> Result<ContentPart, CodecError> {
    if kind == "text" {
        return Ok(ContentPart::Text { text: string_field(object, "text", path)? });
    }
    let source = object
        .get("source")
        .and_then(Value::as_object)
        .ok_or_else(|| CodecError::new(format!("{path}.source"), "is required"))?;
    let source_path = format!("{path}.source");
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => format!(
            "data:{};base64,{}",
            string_field(source, "media_type", &source_path)?,
            string_field(source, "data", &source_path)?
        ),
        Some("url") => string_field(source, "url", &source_path)?,
        // A file the Files API holds: kept as written, for an Anthropic upstream.
        Some(_) => return Ok(ContentPart::Other(Value::Object(object.clone()))),
        None => return Err(CodecError::new(format!("{source_path}.type"), "is required")),
    };
    Ok(ContentPart::ImageUrl { image_url: ImageUrl { url, detail: None } })
}

/// A `tool_result` block as a tool message: `tool_use_id` becomes `tool_call_id`; text and
/// image content become content parts, any other block a part kept as written. `is_error` is not read here (the block is kept
/// verbatim instead).
fn read_tool_result(object: &Map<String, Value>, path: &str) -> Result<Message, CodecError> {
    let tool_use_id = string_field(object, "tool_use_id", path)?;
    let content = match object.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(Content::Text(text.clone())),
        Some(Value::Array(blocks)) => {
            let parts = blocks
                .iter()
                .enumerate()
                .map(|(k, block)| {
                    let block_path = format!("{path}.content[{k}]");
                    let (inner, kind) = block_object(block, &block_path)?;
                    match kind {
                        "text" | "image" => read_part(inner, kind, &block_path),
                        // A document (Claude Code's Read of a PDF), a search result, ...: kept
                        // as written, for an Anthropic upstream; another refuses it by name.
                        _ => Ok(ContentPart::Other(block.clone())),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            // Kept as parts even when there is one: that is how it translates back.
            Some(Content::Parts(parts))
        }
        Some(_) => {
            return Err(CodecError::new(format!("{path}.content"), "must be a string or an array of blocks"));
        }
    };
    let mut result = message(Role::Tool, content);
    result.tool_call_id = Some(tool_use_id);
    Ok(result)
}

/// A system message of the conversation: its text blocks as one message (the blocks' other
/// fields, such as `cache_control`, survive only verbatim).
fn read_system_blocks(blocks: &[Value], path: &str) -> Result<Message, CodecError> {
    let mut parts = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content[{j}]");
        let (object, kind) = block_object(block, &block_path)?;
        if kind != "text" {
            return Err(CodecError::new(
                format!("{block_path}.type"),
                format!("is `{kind}`; system messages hold text blocks"),
            ));
        }
        parts.push(ContentPart::Text { text: string_field(object, "text", &block_path)? });
    }
    Ok(message(Role::System, parts_content(parts)))
}

/// An assistant turn: its text and tool calls, and the reasoning of another dialect's model
/// the gateway wrote as a thinking block (see [`crate::codec::REASONING_SEAL`]), kept for that
/// model. Other blocks (Claude's thinking, server tools) have no canonical form and survive
/// only verbatim.
fn read_assistant_blocks(blocks: &[Value], path: &str) -> Result<Message, CodecError> {
    let mut parts = Vec::new();
    let mut tool_calls = Vec::new();
    let mut reasoning: Option<(String, String)> = None;
    for (j, block) in blocks.iter().enumerate() {
        let block_path = format!("{path}.content[{j}]");
        let (object, kind) = block_object(block, &block_path)?;
        match kind {
            "thinking" if crate::codec::is_unsendable_thinking(block) => {
                let signature = object.get("signature").and_then(Value::as_str).unwrap_or_default();
                let model =
                    signature.strip_prefix(crate::codec::REASONING_SEAL).unwrap_or_default().to_owned();
                let text = string_field(object, "thinking", &block_path)?;
                reasoning.get_or_insert_with(|| (model, String::new())).1.push_str(&text);
            }
            "text" => parts.push(ContentPart::Text { text: string_field(object, "text", &block_path)? }),
            "tool_use" => {
                let input = match object.get("input") {
                    Some(input @ Value::Object(_)) => input.to_string(),
                    _ => return Err(CodecError::new(format!("{block_path}.input"), "must be an object")),
                };
                tool_calls.push(ToolCall::function(
                    string_field(object, "id", &block_path)?,
                    string_field(object, "name", &block_path)?,
                    input,
                ));
            }
            "image" => {
                return Err(CodecError::new(
                    format!("{block_path}.type"),
                    "is `image`; assistant messages cannot hold images",
                ));
            }
            _ => {}
        }
    }
    let mut answer = message(Role::Assistant, parts_content(parts));
    answer.tool_calls = tool_calls;
    if let Some((model, text)) = reasoning {
        let sealed = serde_json::json!({ "model": model, "text": text });
        answer.extra.insert(crate::codec::SEALED_REASONING.to_owned(), sealed);
    }
    Ok(answer)
}

/// `tools[i]` as a canonical tool: `input_schema` becomes `parameters`, and other fields
/// (`cache_control`, ...) the function's `extra`. A client tool (no `type`, or `custom`) is a
/// `function` tool; a server tool keeps its versioned `type`.
fn read_tool((i, value): (usize, Value)) -> Result<Tool, CodecError> {
    let path = format!("tools[{i}]");
    let Value::Object(mut object) = value else {
        return Err(CodecError::new(path, "must be an object"));
    };
    let name = string_field(&object, "name", &path)?;
    object.remove("name");
    let kind = match object.remove("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(kind)) if kind == "custom" => None,
        Some(Value::String(kind)) => Some(kind),
        Some(_) => return Err(CodecError::new(format!("{path}.type"), "must be a string")),
    };
    let description = match object.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(CodecError::new(format!("{path}.description"), "must be a string")),
    };
    let parameters = object.remove("input_schema").filter(|schema| !schema.is_null());
    Ok(Tool {
        // Server tools keep their versioned type; only an Anthropic upstream can serve them.
        kind: kind.unwrap_or_else(|| "function".to_owned()),
        function: FunctionDefinition { name, description, parameters, extra: object },
        extra: Extra::new(),
    })
}

/// `tool_choice` as the canonical choice: `auto`/`any`/`none`/`tool` become
/// `auto`/`required`/`none`/the named function; `disable_parallel_tool_use: true` adds
/// `parallel_tool_calls: false` to `extra`.
fn read_tool_choice(value: Value, extra: &mut Extra) -> Result<ToolChoice, CodecError> {
    let object = value.as_object().ok_or_else(|| CodecError::new("tool_choice", "must be an object"))?;
    match object.get("disable_parallel_tool_use") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            extra.insert("parallel_tool_calls".to_owned(), Value::Bool(false));
        }
        Some(_) => return Err(CodecError::new("tool_choice.disable_parallel_tool_use", "must be a boolean")),
    }
    Ok(match object.get("type").and_then(Value::as_str) {
        Some("auto") => ToolChoice::Mode("auto".to_owned()),
        Some("any") => ToolChoice::Mode("required".to_owned()),
        Some("none") => ToolChoice::Mode("none".to_owned()),
        Some("tool") => ToolChoice::Function {
            kind: "function".to_owned(),
            function: ToolChoiceFunction { name: string_field(object, "name", "tool_choice")? },
        },
        Some(other) => {
            return Err(CodecError::new(
                "tool_choice.type",
                format!("is `{other}`; expected auto, any, tool or none"),
            ));
        }
        None => return Err(CodecError::new("tool_choice.type", "is required")),
    })
}
