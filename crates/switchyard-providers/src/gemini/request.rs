//! Canonical requests into `generateContent` bodies (see the translation decisions in the
//! `gemini` module docs), and the request helpers the adapter shares: model paths, encoding,
//! errors.

use serde_json::{Map, Value, json};
use switchyard::ProviderError;
use switchyard::chat::{
    ChatRequest, Content, ContentPart, Dialect, Extra, Message, ResponseFormat, Role, ToolChoice,
};

/// The thought signature Google documents for function calls that Gemini did not sign in this
/// conversation (replayed from a client or another model). Gemini 3 rejects unsigned calls.
pub const SKIP_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

/// An `invalid_request` error with `detail`, which names the field at fault.
pub(super) fn invalid_request(detail: impl Into<String>) -> ProviderError {
    // Nothing has been sent: another target may take the request as it is.
    ProviderError::unsupported(detail)
}

/// Serialises a request body to JSON bytes; a failure is the caller's `invalid_request`.
pub(super) fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(body)
        .map_err(|error| invalid_request(format!("the request could not be encoded as JSON: {error}")))
}

/// The resource path of a model: `models/{model}`, or the name as given when it already is a
/// resource name (`models/...`, `tunedModels/...`). Names that could break out of the path are
/// refused.
pub(super) fn model_path(model: &str) -> Result<String, ProviderError> {
    let (prefix, name) = match model.split_once('/') {
        Some((prefix @ ("models" | "tunedModels"), name)) => (prefix, name),
        _ => ("models", model),
    };
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !valid {
        return Err(invalid_request(format!(
            "model `{model}` is not a Gemini model name (letters, digits, `-`, `.`, `_`)"
        )));
    }
    Ok(format!("{prefix}/{name}"))
}

/// The `generateContent` body for `request`, sent to `model`.
pub(super) fn request_body(request: &ChatRequest, model: &str) -> Result<Map<String, Value>, ProviderError> {
    let mut body = Map::new();
    let (system, contents) = translate_messages(&request.messages)?;
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    body.insert("contents".into(), Value::Array(contents));
    if !request.tools.is_empty() {
        body.insert("tools".into(), json!([{ "functionDeclarations": function_declarations(request)? }]));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("toolConfig".into(), json!({ "functionCallingConfig": calling_config(choice)? }));
    }
    let mut generation = generation_config(request);
    if request.origin == Dialect::Gemini {
        if !generation.is_empty() {
            body.insert("generationConfig".into(), Value::Object(generation));
        }
        merge_native_extra(&mut body, &request.extra);
    } else {
        translate_foreign_extra(request, model, &mut generation)?;
        if !generation.is_empty() {
            body.insert("generationConfig".into(), Value::Object(generation));
        }
    }
    Ok(body)
}

/// The system parts and the contents of a conversation.
fn translate_messages(messages: &[Message]) -> Result<(Vec<Value>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut contents: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for i in in_call_order(messages) {
        let message = &messages[i];
        let (role, parts) = match message.role {
            Role::System | Role::Developer => {
                system.extend(system_parts(message, i)?);
                continue;
            }
            Role::User => ("user", user_parts(message, i)?),
            Role::Assistant => ("model", model_parts(message, i)?),
            Role::Tool => ("user", vec![function_response(messages, i)?]),
            Role::Function => return Err(crate::codec::legacy_function_message(i, "Gemini")),
        };
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
            _ => contents.push((role, parts)),
        }
    }
    let contents =
        contents.into_iter().map(|(role, parts)| json!({ "role": role, "parts": parts })).collect();
    Ok((system, contents))
}

/// The messages' indexes in order, but for each run of tool results sorted by the order of the
/// calls they answer: Gemini pairs a function's responses with its calls by their order (a
/// response has no id), so results of two calls of one function sent back the other way round
/// would answer each other's call.
fn in_call_order(messages: &[Message]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..messages.len()).collect();
    let is_result = |i: usize| messages[i].role == Role::Tool;
    let mut start = 0;
    while start < messages.len() {
        if !is_result(start) {
            start += 1;
            continue;
        }
        let end = (start..messages.len()).find(|&i| !is_result(i)).unwrap_or(messages.len());
        order[start..end].sort_by_key(|&i| call_position(messages, i));
        start = end;
    }
    order
}

/// Where the call tool result `i` answers stands among the calls of the nearest assistant turn
/// before it (last when none is found).
fn call_position(messages: &[Message], i: usize) -> usize {
    let id = messages[i].tool_call_id.as_deref();
    let turn = messages[..i].iter().rev().find(|m| m.role == Role::Assistant && !m.tool_calls.is_empty());
    turn.and_then(|turn| turn.tool_calls.iter().position(|call| Some(call.id.as_str()) == id))
        .unwrap_or(usize::MAX)
}

/// The error for a part the canonical types do not model (a `file`, `input_audio` or
/// `document` part): Gemini would not understand it as written.
fn untranslatable(part: &ContentPart, i: usize, j: usize) -> ProviderError {
    invalid_request(format!(
        "messages[{i}].content[{j}]: a `{}` part cannot be translated to Gemini's API",
        part.kind()
    ))
}

/// The `systemInstruction` text parts of system or developer message `i`; an image is refused.
fn system_parts(message: &Message, i: usize) -> Result<Vec<Value>, ProviderError> {
    match &message.content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![json!({ "text": text })]),
        Some(Content::Parts(items)) => text_parts(items, i, "system instructions"),
    }
}

/// The text parts of `items`, the content of message `i`; an image is refused, since Gemini
/// takes none in `turn`.
fn text_parts(items: &[ContentPart], i: usize, turn: &str) -> Result<Vec<Value>, ProviderError> {
    let mut parts = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        match item {
            ContentPart::Text { text } => parts.push(json!({ "text": text })),
            ContentPart::ImageUrl { .. } => {
                return Err(invalid_request(format!(
                    "messages[{i}].content[{j}]: Gemini takes no images in {turn}"
                )));
            }
            ContentPart::Other(_) => return Err(untranslatable(item, i, j)),
        }
    }
    Ok(parts)
}

/// The parts of user message `i`: text parts and image parts (see [`image_part`]). A user
/// message without content is refused.
fn user_parts(message: &Message, i: usize) -> Result<Vec<Value>, ProviderError> {
    match &message.content {
        None => Err(invalid_request(format!("messages[{i}].content: a user message needs content"))),
        Some(Content::Text(text)) => Ok(vec![json!({ "text": text })]),
        Some(Content::Parts(items)) => items
            .iter()
            .enumerate()
            .map(|(j, item)| match item {
                ContentPart::Text { text } => Ok(json!({ "text": text })),
                ContentPart::ImageUrl { image_url } => {
                    image_part(&image_url.url, &format!("messages[{i}].content[{j}].image_url.url"))
                }
                ContentPart::Other(_) => Err(untranslatable(item, i, j)),
            })
            .collect(),
    }
}

/// The parts of assistant message `i` (role `model`): its text (none when empty), then one
/// `functionCall` per tool call, the first carrying [`SKIP_THOUGHT_SIGNATURE`]. An image is
/// refused.
fn model_parts(message: &Message, i: usize) -> Result<Vec<Value>, ProviderError> {
    let mut parts = match &message.content {
        Some(Content::Text(text)) if !text.is_empty() => vec![json!({ "text": text })],
        None | Some(Content::Text(_)) => Vec::new(),
        Some(Content::Parts(items)) => text_parts(items, i, "model turns")?,
    };
    for (j, call) in message.tool_calls.iter().enumerate() {
        if !call.is_function() {
            return Err(ProviderError::unsupported(format!(
                "`messages[{i}].tool_calls[{j}]` is a `{}` tool call, which Gemini's API cannot express",
                call.kind
            )));
        }
        let field = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let args = parse_arguments(&call.function.arguments, &field)?;
        let mut part = json!({ "functionCall": { "name": call.function.name, "args": args } });
        if j == 0 {
            part["thoughtSignature"] = json!(SKIP_THOUGHT_SIGNATURE);
        }
        parts.push(part);
    }
    Ok(parts)
}

/// Tool-call arguments (a JSON string) as the object Gemini wants; empty means no arguments.
fn parse_arguments(arguments: &str, field: &str) -> Result<Value, ProviderError> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(invalid_request(format!("{field}: Gemini needs the arguments as a JSON object"))),
        Err(error) => Err(invalid_request(format!("{field} is not valid JSON: {error}"))),
    }
}

/// The `functionResponse` part of tool message `i`: the function's name (see [`tool_name`])
/// and the result, sent as is when it is a JSON object, else as `{"result": text}`.
fn function_response(messages: &[Message], i: usize) -> Result<Value, ProviderError> {
    let message = &messages[i];
    crate::codec::text_only_tool_result(message, i, "a Gemini function response")?;
    let name = tool_name(messages, i)?;
    let text = message.text_content().unwrap_or_default();
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => object,
        // A failed call's report, as Gemini's function responses say one.
        _ if crate::codec::tool_failed(message) => json!({ "error": text }),
        _ => json!({ "result": text }),
    };
    Ok(json!({ "functionResponse": { "name": name, "response": response } }))
}

/// The name of the function whose result `messages[i]` carries: from the nearest earlier
/// assistant tool call with the same id (ids may repeat across turns), else the message's name.
fn tool_name(messages: &[Message], i: usize) -> Result<String, ProviderError> {
    let message = &messages[i];
    if let Some(id) = message.tool_call_id.as_deref() {
        let found = messages[..i]
            .iter()
            .rev()
            .filter(|m| m.role == Role::Assistant)
            .find_map(|m| m.tool_calls.iter().find(|call| call.id == id));
        if let Some(call) = found {
            return Ok(call.function.name.clone());
        }
    }
    if let Some(name) = &message.name {
        return Ok(name.clone());
    }
    Err(invalid_request(match &message.tool_call_id {
        Some(id) => format!(
            "messages[{i}].tool_call_id `{id}` matches no earlier assistant tool call, and Gemini needs the function's name"
        ),
        None => format!("messages[{i}].tool_call_id is missing, and Gemini needs the function's name"),
    }))
}

/// An image part: `inlineData` for `data:` URLs, `fileData` for http(s) URLs.
fn image_part(url: &str, field: &str) -> Result<Value, ProviderError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or_else(|| invalid_request(format!("{field}: a data: URL needs a `,` before its data")))?;
        let mime = meta.strip_suffix(";base64").filter(|mime| !mime.is_empty()).ok_or_else(|| {
            invalid_request(format!("{field}: Gemini takes base64 data: URLs with a MIME type"))
        })?;
        return Ok(json!({ "inlineData": { "mimeType": mime, "data": data } }));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        let mut file = json!({ "fileUri": url });
        if let Some(mime) = guess_image_mime(url) {
            file["mimeType"] = json!(mime);
        }
        return Ok(json!({ "fileData": file }));
    }
    Err(invalid_request(format!("{field}: Gemini takes images as data: URLs or http(s) URLs")))
}

/// The image MIME type for the extension of `url`'s path (png, jpg/jpeg, webp, gif, heic,
/// heif); `None` for any other.
fn guess_image_mime(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}

/// The `functionDeclarations` of the request's tools: `name`, `description` and the
/// parameters as `parametersJsonSchema`. A tool that is not a `function` is refused.
fn function_declarations(request: &ChatRequest) -> Result<Vec<Value>, ProviderError> {
    request
        .tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            if tool.kind != "function" {
                return Err(invalid_request(format!(
                    "tools[{i}].type `{}`: Gemini declares only functions",
                    tool.kind
                )));
            }
            let function = &tool.function;
            let mut declaration = json!({ "name": function.name });
            if let Some(description) = &function.description {
                declaration["description"] = json!(description);
            }
            if let Some(parameters) = &function.parameters {
                declaration["parametersJsonSchema"] = parameters.clone();
            }
            Ok(declaration)
        })
        .collect()
}

/// `toolConfig.functionCallingConfig` for a tool choice: `auto`/`none`/`required` as
/// `AUTO`/`NONE`/`ANY`, a named function as `ANY` with `allowedFunctionNames: [name]`.
fn calling_config(choice: &ToolChoice) -> Result<Value, ProviderError> {
    Ok(match choice {
        ToolChoice::Mode(mode) => match mode.as_str() {
            "auto" => json!({ "mode": "AUTO" }),
            "none" => json!({ "mode": "NONE" }),
            "required" => json!({ "mode": "ANY" }),
            other => {
                return Err(invalid_request(format!(
                    "tool_choice `{other}`: expected auto, none, required or a function"
                )));
            }
        },
        ToolChoice::Function { kind, function } => {
            if kind != "function" {
                return Err(invalid_request(format!("tool_choice.type `{kind}`: expected function")));
            }
            json!({ "mode": "ANY", "allowedFunctionNames": [function.name] })
        }
    })
}

/// `generationConfig` from the canonical fields: `temperature`, `topP`, `maxOutputTokens`,
/// `stopSequences`, `seed`, and `responseMimeType` (+ `responseJsonSchema`) for the JSON
/// response formats. Empty when none is set.
fn generation_config(request: &ChatRequest) -> Map<String, Value> {
    let mut config = Map::new();
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(max_tokens) = request.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max_tokens));
    }
    if let Some(stop) = &request.stop {
        config.insert("stopSequences".into(), json!(stop.to_vec()));
    }
    if let Some(seed) = request.seed {
        config.insert("seed".into(), json!(seed));
    }
    match &request.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            if let Some(schema) = &json_schema.schema {
                config.insert("responseJsonSchema".into(), schema.clone());
            }
        }
    }
    config
}

/// Fields of a Gemini-dialect request that the canonical types do not model: forwarded as
/// they came. Objects merge into what the translation built (the translation wins a clash, as
/// it carries the request's canonical fields); arrays (`tools`) are appended.
fn merge_native_extra(body: &mut Map<String, Value>, extra: &Extra) {
    for (key, value) in extra {
        match (body.get_mut(key), value) {
            (None, _) => {
                body.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(ours)), Value::Object(theirs)) => {
                for (inner_key, inner_value) in theirs {
                    ours.entry(inner_key.clone()).or_insert_with(|| inner_value.clone());
                }
            }
            (Some(Value::Array(ours)), Value::Array(theirs)) => ours.extend(theirs.iter().cloned()),
            (Some(_), _) => {}
        }
    }
}

/// Fields of another dialect: translated when Gemini has the same knob, ignored when harmless,
/// refused otherwise (never silently dropped).
///
/// Ignored: what [`crate::codec::is_harmless_foreign`] names. Translated:
/// Anthropic's `thinking` (a budget to Gemini's, `adaptive` to Gemini's own dynamic thinking,
/// `disabled` to none where the model can stop thinking), OpenAI's `reasoning_effort` and
/// penalties. Claude Code sends `thinking` and `context_management` on every request.
fn translate_foreign_extra(
    request: &ChatRequest,
    model: &str,
    generation: &mut Map<String, Value>,
) -> Result<(), ProviderError> {
    for (key, value) in &request.extra {
        let number = |target: &str, generation: &mut Map<String, Value>| {
            if value.is_number() {
                generation.insert(target.to_owned(), value.clone());
                Ok(())
            } else {
                Err(invalid_request(format!("{key}: expected a number, got {value}")))
            }
        };
        match key.as_str() {
            _ if crate::codec::is_harmless_foreign(key, value) => {}
            "thinking" => {
                if let Some(config) = super::thinking::from_anthropic(value, model)? {
                    generation.insert("thinkingConfig".to_owned(), config);
                }
            }
            "max_completion_tokens" if request.max_tokens.is_none() => number("maxOutputTokens", generation)?,
            "max_completion_tokens" => {}
            "frequency_penalty" => number("frequencyPenalty", generation)?,
            "presence_penalty" => number("presencePenalty", generation)?,
            "top_k" => number("topK", generation)?,
            "reasoning_effort" => {
                generation.insert("thinkingConfig".to_owned(), super::thinking::config(value, model)?);
            }
            _ => {
                return Err(invalid_request(format!(
                    "field `{key}` has no Gemini equivalent; remove it or route the request to a provider of its dialect"
                ))
                .with_param(key.as_str()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::ErrorKind;
    use switchyard::chat::{FunctionDefinition, Tool, ToolCall};

    #[test]
    fn model_path_accepts_bare_and_resource_names_and_refuses_path_tricks() {
        assert_eq!(model_path("gemini-2.5-flash").unwrap(), "models/gemini-2.5-flash");
        assert_eq!(model_path("models/gemini-2.5-flash").unwrap(), "models/gemini-2.5-flash");
        assert_eq!(model_path("tunedModels/my-model").unwrap(), "tunedModels/my-model");
        for bad in ["", "../files", "gemini?key=x", "a/b", "models/", "gemini#x"] {
            assert_eq!(model_path(bad).unwrap_err().kind(), ErrorKind::InvalidRequest, "{bad}");
        }
    }

    #[test]
    fn data_urls_become_inline_data_and_other_schemes_are_refused() {
        assert_eq!(
            image_part("data:image/png;base64,iVBOR", "f").unwrap(),
            json!({ "inlineData": { "mimeType": "image/png", "data": "iVBOR" } })
        );
        assert_eq!(
            image_part("https://example.com/cat.JPG?x=1", "f").unwrap(),
            json!({ "fileData": { "fileUri": "https://example.com/cat.JPG?x=1", "mimeType": "image/jpeg" } })
        );
        let error = image_part("data:image/png,raw", "messages[0].content[1].image_url.url").unwrap_err();
        assert!(error.detail().contains("messages[0].content[1].image_url.url"));
        assert!(image_part("ftp://example.com/a.png", "f").is_err());
    }

    #[test]
    fn tool_results_take_the_name_of_the_nearest_earlier_call_with_their_id() {
        let call = |name: &str| ToolCall::function("call_0", name, "{}");
        let assistant = |name: &str| Message { tool_calls: vec![call(name)], ..Message::assistant("") };
        let result = Message { tool_call_id: Some("call_0".into()), ..Message::text(Role::Tool, "ok") };
        let messages = vec![assistant("first"), result.clone(), assistant("second"), result];
        assert_eq!(tool_name(&messages, 1).unwrap(), "first");
        assert_eq!(tool_name(&messages, 3).unwrap(), "second");
        let orphan = vec![Message { tool_call_id: Some("nope".into()), ..Message::text(Role::Tool, "x") }];
        assert!(tool_name(&orphan, 0).unwrap_err().detail().contains("messages[0].tool_call_id `nope`"));
    }

    #[test]
    fn foreign_fields_are_translated_ignored_or_refused_by_name() {
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        request.extra.insert("user".into(), json!("u-1"));
        request.extra.insert("n".into(), json!(1));
        request.extra.insert("top_k".into(), json!(40));
        request.extra.insert("max_completion_tokens".into(), json!(99));
        let body = request_body(&request, "gemini-2.5-flash").unwrap();
        assert_eq!(body["generationConfig"], json!({ "topK": 40, "maxOutputTokens": 99 }));
        request.extra.insert("logit_bias".into(), json!({}));
        let error = request_body(&request, "gemini-2.5-flash").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidRequest);
        assert!(error.detail().contains("`logit_bias`"));
    }

    #[test]
    fn native_extra_merges_into_the_translation() {
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        request.origin = Dialect::Gemini;
        request.temperature = Some(0.5);
        request.tools = vec![Tool {
            kind: "function".into(),
            function: FunctionDefinition {
                name: "f".into(),
                description: None,
                parameters: None,
                extra: Extra::new(),
            },
            extra: Default::default(),
        }];
        request.extra.insert("generationConfig".into(), json!({ "topK": 3, "temperature": 9 }));
        request.extra.insert("tools".into(), json!([{ "googleSearch": {} }]));
        request.extra.insert("safetySettings".into(), json!([]));
        let body = request_body(&request, "gemini-2.5-flash").unwrap();
        assert_eq!(body["generationConfig"], json!({ "temperature": 0.5, "topK": 3 }));
        assert_eq!(
            body["tools"],
            json!([{ "functionDeclarations": [{ "name": "f" }] }, { "googleSearch": {} }])
        );
        assert_eq!(body["safetySettings"], json!([]));
    }
}
