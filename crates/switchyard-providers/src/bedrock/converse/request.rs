//! Canonical requests into Converse bodies (`POST /model/{id}/converse`).
//!
//! What maps: system and developer messages as `system` text blocks; user text and images
//! (`data:` URLs, as `image.source.bytes`); assistant text and tool calls (`toolUse`); tool
//! results (`toolResult`, in the user turn after them); `max_tokens` (or
//! `max_completion_tokens`), `temperature`, `top_p` and `stop` as `inferenceConfig`; tools as
//! `toolConfig.tools[].toolSpec`, `tool_choice` `auto`, `required` (`any`) or a named function
//! (`tool`). Consecutive messages of one role are merged, as Converse wants user and assistant
//! to alternate. What Converse cannot express (an image by http URL, a file or audio part,
//! JSON mode or a schema, a seed, `tool_choice: none`, a parameter it has no field for) is
//! refused as unsupported: nothing is sent and the router tries the next target.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use switchyard::ProviderError;
use switchyard::chat::{ChatRequest, Content, ContentPart, Message, ResponseFormat, Role, ToolChoice};

/// An unsupported request, naming what Converse cannot take.
fn unsupported(detail: impl std::fmt::Display) -> ProviderError {
    ProviderError::unsupported(format!("{detail} (Bedrock's Converse API cannot express it)"))
}

/// The Converse body for `request`.
pub(crate) fn body(request: &ChatRequest) -> Result<Vec<u8>, ProviderError> {
    let mut body = Map::new();
    let (system, messages) = conversation(&request.messages)?;
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    let inference = inference_config(request)?;
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if let Some(tools) = tool_config(request)? {
        body.insert("toolConfig".into(), tools);
    }
    serde_json::to_vec(&body)
        .map_err(|error| unsupported(format!("the request could not be encoded: {error}")))
}

/// The system blocks and the alternating turns of a conversation.
fn conversation(messages: &[Message]) -> Result<(Vec<Value>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let (role, blocks) = match message.role {
            Role::System | Role::Developer => {
                system.extend(text_blocks(message, i, "system")?);
                continue;
            }
            Role::User => ("user", user_blocks(message, i)?),
            Role::Assistant => ("assistant", assistant_blocks(message, i)?),
            Role::Tool => ("user", vec![tool_result(message, i)?]),
            Role::Function => return Err(crate::codec::legacy_function_message(i, "Bedrock's Converse API")),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns =
        turns.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect();
    Ok((system, turns))
}

/// The text blocks of message `i` (a system message, or an assistant's text); images refused.
fn text_blocks(message: &Message, i: usize, turn: &str) -> Result<Vec<Value>, ProviderError> {
    match &message.content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) if text.is_empty() => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![json!({ "text": text })]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| match part {
                ContentPart::Text { text } => Ok(json!({ "text": text })),
                other => Err(unsupported(format_args!(
                    "messages[{i}].content[{j}]: a `{}` part in a {turn} turn",
                    other.kind()
                ))),
            })
            .collect(),
    }
}

/// The blocks of user message `i`: text and images.
fn user_blocks(message: &Message, i: usize) -> Result<Vec<Value>, ProviderError> {
    match &message.content {
        None => Err(unsupported(format_args!("messages[{i}]: a user message without content"))),
        Some(Content::Text(text)) => Ok(vec![json!({ "text": text })]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| match part {
                ContentPart::Text { text } => Ok(json!({ "text": text })),
                ContentPart::ImageUrl { image_url } => image(&image_url.url, i, j),
                other => {
                    Err(unsupported(format_args!("messages[{i}].content[{j}]: a `{}` part", other.kind())))
                }
            })
            .collect(),
    }
}

/// An image block from a `data:` URL: Converse takes an image's bytes (or an S3 location), not a
/// URL to fetch.
fn image(url: &str, i: usize, j: usize) -> Result<Value, ProviderError> {
    let field = format!("messages[{i}].content[{j}].image_url.url");
    let Some((meta, data)) = url.strip_prefix("data:").and_then(|rest| rest.split_once(',')) else {
        return Err(unsupported(format_args!("{field}: an image by URL (send it as a base64 data: URL)")));
    };
    let format = match meta.strip_suffix(";base64") {
        Some("image/png") => "png",
        Some("image/jpeg" | "image/jpg") => "jpeg",
        Some("image/gif") => "gif",
        Some("image/webp") => "webp",
        _ => {
            return Err(unsupported(format_args!(
                "{field}: an image that is not base64 png, jpeg, gif or webp"
            )));
        }
    };
    // Checked here: Bedrock would refuse a body that is not base64 with a less telling error.
    if base64::engine::general_purpose::STANDARD.decode(data).is_err() {
        return Err(unsupported(format_args!("{field}: the data is not valid base64")));
    }
    Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
}

/// The blocks of assistant message `i`: its text, then a `toolUse` per tool call.
fn assistant_blocks(message: &Message, i: usize) -> Result<Vec<Value>, ProviderError> {
    let mut blocks = text_blocks(message, i, "assistant")?;
    for (j, call) in message.tool_calls.iter().enumerate() {
        if !call.is_function() {
            return Err(unsupported(format_args!(
                "messages[{i}].tool_calls[{j}]: a `{}` tool call",
                call.kind
            )));
        }
        let arguments = call.function.arguments.trim();
        let input = if arguments.is_empty() {
            json!({})
        } else {
            match serde_json::from_str::<Value>(arguments) {
                Ok(object @ Value::Object(_)) => object,
                _ => {
                    return Err(unsupported(format_args!(
                        "messages[{i}].tool_calls[{j}].function.arguments: not a JSON object"
                    )));
                }
            }
        };
        blocks
            .push(json!({ "toolUse": { "toolUseId": crate::codec::tool_id(&call.id), "name": call.function.name, "input": input } }));
    }
    Ok(blocks)
}

/// The `toolResult` block of tool message `i`: a JSON object's result as `json`, text as `text`;
/// a result with images (a screenshot Claude Code's tool took) as its text and image blocks,
/// which Converse's tool results take as its user turns do.
fn tool_result(message: &Message, i: usize) -> Result<Value, ProviderError> {
    let Some(id) = &message.tool_call_id else {
        return Err(unsupported(format_args!("messages[{i}]: a tool result without `tool_call_id`")));
    };
    let content = match &message.content {
        Some(Content::Parts(parts)) if parts.iter().any(|part| !matches!(part, ContentPart::Text { .. })) => {
            Value::Array(
                parts
                    .iter()
                    .enumerate()
                    .map(|(j, part)| result_block(part, i, j))
                    .collect::<Result<_, _>>()?,
            )
        }
        _ => {
            let text = message.text_content().unwrap_or_default();
            match serde_json::from_str::<Value>(&text) {
                Ok(object @ Value::Object(_)) => json!([{ "json": object }]),
                _ => json!([{ "text": text }]),
            }
        }
    };
    let mut result = json!({ "toolUseId": crate::codec::tool_id(id), "content": content });
    if crate::codec::tool_failed(message) {
        result["status"] = json!("error");
    }
    Ok(json!({ "toolResult": result }))
}

/// Part `j` of tool result `i` as a block of Converse's `toolResult`: text or an image; anything
/// else refused by name, so the route goes on rather than the model answering without it.
fn result_block(part: &ContentPart, i: usize, j: usize) -> Result<Value, ProviderError> {
    match part {
        ContentPart::Text { text } => Ok(json!({ "text": text })),
        ContentPart::ImageUrl { image_url } => image(&image_url.url, i, j),
        other => Err(unsupported(format_args!(
            "messages[{i}].content[{j}] is a `{}` part in a tool result, which Switchyard's Converse translation cannot carry",
            other.kind()
        ))),
    }
}

/// `inferenceConfig`, and the refusal of what has no Converse field. Left out: what
/// [`crate::codec::is_harmless_foreign`] names, and Anthropic's `thinking`, which the models
/// Converse serves here (not Claude) do not take (Claude Code sends it on every request).
fn inference_config(request: &ChatRequest) -> Result<Map<String, Value>, ProviderError> {
    let mut config = Map::new();
    let mut max_tokens = request.max_tokens.map(Value::from);
    for (key, value) in &request.extra {
        match key.as_str() {
            _ if crate::codec::is_harmless_foreign(key, value) => {}
            "stream" | "thinking" => {}
            "max_completion_tokens" if value.is_u64() => {
                max_tokens = max_tokens.or_else(|| Some(value.clone()));
            }
            _ => return Err(unsupported(format_args!("field `{key}`")).with_param(key.as_str())),
        }
    }
    if request.seed.is_some() {
        return Err(unsupported("`seed`").with_param("seed"));
    }
    match &request.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(_) => return Err(unsupported("`response_format` other than text")),
    }
    if let Some(max) = max_tokens {
        config.insert("maxTokens".into(), max);
    }
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(stop) = &request.stop {
        config.insert("stopSequences".into(), json!(stop.to_vec()));
    }
    Ok(config)
}

/// `toolConfig`: the function tools and the choice among them.
fn tool_config(request: &ChatRequest) -> Result<Option<Value>, ProviderError> {
    if request.tools.is_empty() {
        return match &request.tool_choice {
            Some(ToolChoice::Function { .. }) => {
                Err(unsupported("`tool_choice` naming a function without `tools`"))
            }
            _ => Ok(None),
        };
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for (i, tool) in request.tools.iter().enumerate() {
        if tool.kind != "function" {
            return Err(unsupported(format_args!("tools[{i}]: a `{}` tool", tool.kind)));
        }
        let function = &tool.function;
        let schema =
            function.parameters.clone().unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
        let mut spec = json!({ "name": function.name, "inputSchema": { "json": schema } });
        if let Some(description) = &function.description {
            spec["description"] = json!(description);
        }
        tools.push(json!({ "toolSpec": spec }));
    }
    let mut config = json!({ "tools": tools });
    match &request.tool_choice {
        None => {}
        Some(ToolChoice::Mode(mode)) => match mode.as_str() {
            "auto" => config["toolChoice"] = json!({ "auto": {} }),
            "required" => config["toolChoice"] = json!({ "any": {} }),
            other => return Err(unsupported(format_args!("`tool_choice: {other}`"))),
        },
        Some(ToolChoice::Function { function, .. }) => {
            config["toolChoice"] = json!({ "tool": { "name": function.name } })
        }
    }
    Ok(Some(config))
}
