//! Canonical requests into Messages API requests.
//!
//! Anthropic differs from the canonical (OpenAI-shaped) request in ways that are translated,
//! not approximated:
//! - system and developer messages move to the top-level `system`;
//! - tool results are `tool_result` blocks in a user message, and consecutive messages of one
//!   role are merged because Anthropic wants user and assistant to alternate;
//! - `max_tokens` is required: the request's, else OpenAI's `max_completion_tokens`, else
//!   the model's default ([`default_max_tokens`]);
//! - `response_format` with a JSON schema becomes `output_config.format` (structured output);
//!   `json_object` (JSON mode without a schema, which structured output cannot express) makes
//!   Claude call [`JSON_TOOL`], a tool whose input is any JSON object, and that input is the
//!   answer's text (see [`json_mode`]).
//!
//! Fields in `extra` are Anthropic fields only when the request arrived in that dialect; then
//! they are forwarded untouched. Fields of another dialect are mapped when Anthropic has an
//! equivalent (`user`, `max_completion_tokens`, `parallel_tool_calls`, `reasoning_effort` as
//! thinking: see `thinking.rs`), ignored when they
//! cannot change the answer (see [`read_foreign_extra`]), and refused otherwise: a request is
//! never served with a meaningful parameter silently dropped.

use std::fmt::Display;

use serde_json::{Map, Value, json};
use switchyard::ProviderError;
use switchyard::chat::{
    ChatRequest, Content, ContentPart, Dialect, Extra, Message, ResponseFormat, Role, Tool, ToolChoice,
};

use super::thinking::{self, ThinkingStyle};
use super::wire::{
    Block, ImageSource, MessagesRequest, System, ToolChoiceParam, ToolParam, ToolResultContent, Turn,
};

/// The `max_tokens` sent when the request sets none and the model's name gives no Claude
/// generation (see [`default_max_tokens`]): Anthropic requires one, and 4096 is an output every
/// Claude model supports.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `max_tokens` sent to Claude from 3.7 on when the request sets none.
const LONG_ANSWER: u32 = 16_384;

/// The `max_tokens` sent to `model` when the request sets none. A client of another dialect
/// that sets none (Codex asks for no limit) means "as long as the model goes", and an agent's
/// patch is cut at 4096: Claude from 3.7 on is sent 16,384, 3.5 its 8,192, older and unknown
/// models [`DEFAULT_MAX_TOKENS`]. Not more: Anthropic counts a request's `max_tokens` against
/// the output tokens a minute allows when it starts, and Bedrock holds it back from its quota.
pub fn default_max_tokens(model: &str) -> u32 {
    match thinking::generation(model) {
        Some(version) if version >= (3, 7) => LONG_ANSWER,
        Some(version) if version >= (3, 5) => 8192,
        _ => DEFAULT_MAX_TOKENS,
    }
}

/// The message `extra` key under which the codec keeps a message's original Anthropic blocks
/// when the canonical form cannot reproduce them (`cache_control`, thinking blocks, ...). Sent
/// verbatim when the request is served in the dialect it came from; ignored otherwise.
pub const VERBATIM_BLOCKS: &str = "anthropic_blocks";

/// The tool a request in JSON mode (`response_format: json_object`) is answered through.
/// Anthropic's structured output needs a schema that names every property, so Claude is made
/// to call this tool (`tool_choice` names it), whose input is any JSON object; the decoders
/// turn its input back into the answer's text and its `tool_use` stop into a plain stop.
pub(crate) const JSON_TOOL: &str = "json_answer";

/// Whether `request` is answered through [`JSON_TOOL`]: JSON mode asked by a client of another
/// dialect (a Messages client's own request is sent as written).
pub(crate) fn json_mode(request: &ChatRequest) -> bool {
    request.origin != Dialect::Anthropic
        && matches!(request.response_format, Some(ResponseFormat::JsonObject))
}

/// The tools and tool choice of a request in JSON mode: [`JSON_TOOL`] alone, forced. Beside
/// the client's own tools it could not be forced without taking their use away: unsupported.
fn json_tool(request: &ChatRequest) -> Result<(Vec<ToolParam>, Option<ToolChoiceParam>), ProviderError> {
    if !request.tools.is_empty() {
        return Err(invalid(
            "response_format",
            "is `json_object` beside tools: Claude answers JSON mode through a forced tool call of \
             its own, which would take the request's tools away (send `json_schema`)",
        ));
    }
    let tool = ToolParam {
        kind: None,
        name: JSON_TOOL.to_owned(),
        description: Some("Give your whole answer as this tool's input: one JSON object.".to_owned()),
        input_schema: Some(json!({ "type": "object", "additionalProperties": true })),
        extra: Map::new(),
    };
    let choice = ToolChoiceParam {
        kind: "tool",
        name: Some(JSON_TOOL.to_owned()),
        disable_parallel_tool_use: Some(true),
    };
    Ok((vec![tool], Some(choice)))
}

/// Top-level keys the adapter writes itself: a same-named field in `extra` never overrides them.
const RESERVED: [&str; 11] = [
    "model",
    "max_tokens",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "stop_sequences",
    "stream",
    // Canonical spelling of `disable_parallel_tool_use`; folded into `tool_choice`.
    "parallel_tool_calls",
];

/// An `invalid_request` error naming the field at fault (as its
/// [`param`](ProviderError::param) too when it is one of the request's top-level members).
pub(crate) fn invalid(field: impl Display, reason: impl Display) -> ProviderError {
    // Nothing has been sent: another target (of the client's own dialect) may take it as is.
    let field = field.to_string();
    let error = ProviderError::unsupported(format!("`{field}` {reason}"));
    match crate::codec::is_member_name(&field) {
        true => error.with_param(field),
        false => error,
    }
}

/// The Messages API body for `request`, to be sent for the upstream `model`; a
/// `reasoning_effort` asks it to think in `style`, else in the style its name gives.
pub(crate) fn build<'a>(
    model: &'a str,
    request: &ChatRequest,
    stream: bool,
    style: Option<ThinkingStyle>,
) -> Result<MessagesRequest<'a>, ProviderError> {
    let origin = request.origin;
    let foreign =
        if origin == Dialect::Anthropic { Foreign::default() } else { read_foreign_extra(&request.extra)? };
    let parallel_tool_calls = parallel_tool_calls(&request.extra)?;
    let max_tokens =
        request.max_tokens.or(foreign.max_completion_tokens).unwrap_or_else(|| default_max_tokens(model));
    // A Messages client's own structured output travels in its `output_config`, as written.
    let format = request.response_format.as_ref().filter(|_| origin != Dialect::Anthropic);
    let output_config = output_config(format)?;
    check_sampling(request)?;
    let (temperature, top_p) = samplers(request, model)?;
    let stop_sequences = stop_sequences(request)?;
    let (system, turns) = conversation(request)?;
    if turns.is_empty() {
        return Err(invalid("messages", "hold no content Anthropic takes: every message is empty"));
    }
    let (tools, tool_choice) = match json_mode(request) {
        true => json_tool(request)?,
        false => (
            request
                .tools
                .iter()
                .enumerate()
                .map(|(i, tool)| tool_param(tool, i, origin))
                .collect::<Result<_, _>>()?,
            tool_choice(request.tool_choice.as_ref(), !request.tools.is_empty(), parallel_tool_calls)?,
        ),
    };
    let extra = if origin == Dialect::Anthropic {
        request.extra.iter().filter(|(key, _)| !RESERVED.contains(&key.as_str())).map(clone_entry).collect()
    } else {
        foreign.top_k.map(|top_k| ("top_k".to_owned(), Value::from(top_k))).into_iter().collect()
    };

    let mut wire = MessagesRequest {
        model,
        max_tokens,
        system,
        messages: turns,
        tools,
        tool_choice,
        temperature,
        top_p,
        stop_sequences,
        metadata: foreign.user.map(|user| json!({ "user_id": user })),
        output_config,
        thinking: None,
        stream,
        extra,
    };
    match &foreign.reasoning_effort {
        Some(effort) => thinking::ask(&mut wire, effort, style, request)?,
        // Thinking blocks sent back (as `thinking_blocks`) on a request that does not think
        // would be refused; an Anthropic client's own request is its own to write.
        None if origin != Dialect::Anthropic => thinking::drop_thinking(&mut wire.messages),
        None => {}
    }
    if json_mode(request) && wire.thinking.is_some() {
        return Err(invalid(
            "response_format",
            "is `json_object`, which Claude answers through a forced tool call, and Claude does not \
             allow one while it thinks (`reasoning_effort`): send `json_schema`",
        ));
    }
    Ok(wire)
}

/// The canonical `parallel_tool_calls` of `extra`: a boolean, or unset.
fn parallel_tool_calls(extra: &Extra) -> Result<Option<bool>, ProviderError> {
    match extra.get("parallel_tool_calls") {
        Some(Value::Bool(parallel)) => Ok(Some(*parallel)),
        Some(Value::Null) | None => Ok(None),
        Some(_) => Err(invalid("parallel_tool_calls", "must be a boolean")),
    }
}

/// A JSON schema as Anthropic's structured output, `output_config.format`; JSON mode without
/// a schema goes through [`JSON_TOOL`] instead.
fn output_config(format: Option<&ResponseFormat>) -> Result<Option<Value>, ProviderError> {
    match format {
        None | Some(ResponseFormat::Text | ResponseFormat::JsonObject) => Ok(None),
        Some(ResponseFormat::JsonSchema { json_schema }) => match &json_schema.schema {
            Some(schema) => Ok(Some(json!({ "format": { "type": "json_schema", "schema": schema } }))),
            None => Err(invalid("response_format.json_schema.schema", "is required toward Anthropic")),
        },
    }
}

/// Refuses a `temperature` or `top_p` outside Anthropic's range, 0 to 1.
fn check_sampling(request: &ChatRequest) -> Result<(), ProviderError> {
    for (name, value) in [("temperature", request.temperature), ("top_p", request.top_p)] {
        if let Some(value) = value
            && !(0.0..=1.0).contains(&value)
        {
            return Err(invalid(name, format_args!("is {value}, outside Anthropic's range 0 to 1")));
        }
    }
    Ok(())
}

/// The `temperature` and `top_p` sent. Claude from Opus 4.1 on takes one or the other, not both
/// ("`temperature` and `top_p` cannot both be specified for this model"), which a request of
/// another dialect often sets: the one at its default (1, sampling as if unset) is left out;
/// both set otherwise is unsupported toward those models, naming them, so that the route goes
/// on. A Messages client's own request is sent as written.
fn samplers(request: &ChatRequest, model: &str) -> Result<(Option<f64>, Option<f64>), ProviderError> {
    let (temperature, top_p) = (request.temperature, request.top_p);
    let (Some(t), Some(p)) = (temperature, top_p) else { return Ok((temperature, top_p)) };
    if request.origin == Dialect::Anthropic {
        return Ok((temperature, top_p));
    }
    match (t == 1.0, p == 1.0) {
        (_, true) => Ok((temperature, None)),
        (true, false) => Ok((None, top_p)),
        (false, false) if thinking::takes_one_sampler(model) => Err(invalid(
            "top_p",
            format_args!("is {p} beside a temperature of {t}, and `{model}` takes only one of the two"),
        )),
        (false, false) => Ok((temperature, top_p)),
    }
}

/// The stop sequences sent: a client of another dialect's, unless one is only white space,
/// which Anthropic refuses ("each stop sequence must contain non-whitespace"): then the request
/// is unsupported, naming it (left out, the answer would run past where the client stops it).
fn stop_sequences(request: &ChatRequest) -> Result<Vec<String>, ProviderError> {
    let stops = request.stop.as_ref().map(|stop| stop.to_vec()).unwrap_or_default();
    if request.origin != Dialect::Anthropic
        && let Some(blank) = stops.iter().find(|stop| stop.trim().is_empty())
    {
        return Err(invalid(
            "stop",
            format_args!("holds {blank:?}, white space only, which Anthropic refuses"),
        ));
    }
    Ok(stops)
}

/// The messages as Anthropic's top-level `system` and alternating user and assistant turns.
fn conversation(request: &ChatRequest) -> Result<(Option<System>, Vec<Turn>), ProviderError> {
    let mut system = Vec::new();
    let mut system_verbatim = false;
    let mut turns: Vec<Turn> = Vec::new();
    for (index, message) in request.messages.iter().enumerate() {
        check_message_extra(message, index)?;
        let verbatim = verbatim_blocks(message, request.origin, index)?;
        match message.role {
            Role::System | Role::Developer => {
                system_verbatim |= verbatim.is_some();
                system.extend(match verbatim {
                    Some(blocks) => blocks,
                    None => system_message_blocks(message, index)?,
                });
            }
            role => {
                let blocks = match verbatim {
                    Some(blocks) => blocks,
                    None => message_blocks(message, index)?,
                };
                push_turn(&mut turns, if role == Role::Assistant { "assistant" } else { "user" }, blocks);
            }
        }
    }
    let system = match system.as_slice() {
        [] => None,
        [Block::Text { text }] if !system_verbatim => Some(System::Text(text.clone())),
        _ => Some(System::Blocks(system)),
    };
    Ok((system, turns))
}

/// An owned copy of one `extra` entry.
fn clone_entry((key, value): (&String, &Value)) -> (String, Value) {
    (key.clone(), value.clone())
}

/// What a request of another dialect says in `extra` that Anthropic can use.
#[derive(Debug, Default)]
struct Foreign {
    /// OpenAI's `max_completion_tokens`, the `max_tokens` sent when the request sets none.
    max_completion_tokens: Option<u32>,
    /// OpenAI's end-user id, sent as `metadata.user_id`.
    user: Option<String>,
    /// OpenAI's `reasoning_effort`, sent as Claude's thinking (see [`thinking`]).
    reasoning_effort: Option<Value>,
    /// `top_k`, which compatible servers take in OpenAI's dialect: Claude has it too.
    top_k: Option<u64>,
}

/// Reads the `extra` of a request of another dialect (OpenAI's, in practice).
///
/// Ignored, because they cannot change what Anthropic answers: what
/// [`crate::codec::is_harmless_foreign`] names (`stream_options`: Anthropic streams always
/// report usage), and defaults spelled out: zero `frequency_penalty` and `presence_penalty`, an
/// empty `logit_bias`, `modalities: ["text"]`. Mapped: `max_completion_tokens`, `user`,
/// `reasoning_effort`, `top_k` (`parallel_tool_calls` is read with the tool choice). Anything
/// else is refused, naming it.
fn read_foreign_extra(extra: &Extra) -> Result<Foreign, ProviderError> {
    let mut foreign = Foreign::default();
    let mut safety = None;
    for (key, value) in extra {
        let harmless = match key.as_str() {
            "user" if !value.is_null() => {
                foreign.user =
                    Some(value.as_str().ok_or_else(|| invalid(key, "must be a string"))?.to_owned());
                true
            }
            // OpenAI's successor of `user` for the same end user: `metadata.user_id` too, when
            // the request sets no `user`.
            "safety_identifier" if value.is_string() => {
                safety = value.as_str().map(str::to_owned);
                true
            }
            _ if crate::codec::is_harmless_foreign(key, value) => true,
            "frequency_penalty" | "presence_penalty" => value.as_f64() == Some(0.0),
            "logit_bias" => value.as_object().is_some_and(Map::is_empty),
            "modalities" => value == &json!(["text"]),
            "max_completion_tokens" => {
                let tokens = value.as_u64().and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0);
                foreign.max_completion_tokens =
                    Some(tokens.ok_or_else(|| invalid(key, "must be a positive integer"))?);
                true
            }
            "reasoning_effort" => {
                foreign.reasoning_effort = Some(value.clone());
                true
            }
            // vLLM's -1 is "no top-k", as Claude's absent one is.
            "top_k" if value.as_i64() == Some(-1) => true,
            "top_k" => {
                foreign.top_k =
                    Some(value.as_u64().ok_or_else(|| invalid(key, "must be a non-negative integer"))?);
                true
            }
            _ => false,
        };
        if !harmless {
            return Err(invalid(
                key,
                // Its name only: a vendor's field may hold a key.
                "has no equivalent in Anthropic's Messages API; remove it or route this request to a provider that supports it",
            ));
        }
    }
    foreign.user = foreign.user.or(safety);
    Ok(foreign)
}

/// Refuses message fields that would be lost. Assistant turns may carry provider metadata
/// (`refusal`, `annotations`, reasoning text) that only describes a past answer: not sent.
fn check_message_extra(message: &Message, index: usize) -> Result<(), ProviderError> {
    if message.role == Role::Assistant {
        return Ok(());
    }
    match message.extra.iter().find(|(key, value)| key.as_str() != VERBATIM_BLOCKS && !value.is_null()) {
        Some((key, _)) => Err(invalid(
            format_args!("messages[{index}].{key}"),
            "has no equivalent in Anthropic's Messages API",
        )),
        None => Ok(()),
    }
}

/// The blocks the codec kept for `message`, when the request came in Anthropic's dialect.
fn verbatim_blocks(
    message: &Message,
    origin: Dialect,
    index: usize,
) -> Result<Option<Vec<Block>>, ProviderError> {
    if origin != Dialect::Anthropic {
        return Ok(None);
    }
    match message.extra.get(VERBATIM_BLOCKS) {
        None => Ok(None),
        Some(Value::Array(blocks)) => Ok(Some(blocks.iter().cloned().map(Block::Raw).collect())),
        Some(_) => {
            Err(invalid(format_args!("messages[{index}].{VERBATIM_BLOCKS}"), "must be an array of blocks"))
        }
    }
}

/// Appends `blocks` as a turn of `role`, merged into the previous turn when it has the same
/// role (Anthropic wants alternation; OpenAI allows runs, and tool results are user turns).
fn push_turn(turns: &mut Vec<Turn>, role: &'static str, blocks: Vec<Block>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(last) if last.role == role => last.content.extend(blocks),
        _ => turns.push(Turn { role, content: blocks }),
    }
}

/// The system text blocks of a system or developer message.
pub(crate) fn system_message_blocks(message: &Message, index: usize) -> Result<Vec<Block>, ProviderError> {
    match &message.content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(text_block(text).into_iter().collect()),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .filter_map(|(j, part)| match part {
                ContentPart::Text { text } => text_block(text).map(Ok),
                ContentPart::ImageUrl { .. } => Some(Err(invalid(
                    format_args!("messages[{index}].content[{j}]"),
                    "is an image; Anthropic's system prompt takes text only",
                ))),
                ContentPart::Other(_) => Some(Err(untranslatable(part, index, j))),
            })
            .collect(),
    }
}

/// The blocks of a user, assistant or tool message, translated from its canonical fields.
pub(crate) fn message_blocks(message: &Message, index: usize) -> Result<Vec<Block>, ProviderError> {
    match message.role {
        Role::System | Role::Developer => system_message_blocks(message, index),
        Role::Function => Err(crate::codec::legacy_function_message(index, "Anthropic's Messages API")),
        Role::User => content_blocks(message.content.as_ref(), index),
        Role::Assistant => {
            let mut blocks = thinking_blocks(message);
            blocks.extend(content_blocks(message.content.as_ref(), index)?);
            for (k, call) in message.tool_calls.iter().enumerate() {
                if !call.is_function() {
                    return Err(invalid(
                        format_args!("messages[{index}].tool_calls[{k}]"),
                        format_args!(
                            "is a `{}` tool call, which Anthropic's Messages API cannot express",
                            call.kind
                        ),
                    ));
                }
                let field = format!("messages[{index}].tool_calls[{k}].function.arguments");
                blocks.push(Block::ToolUse {
                    id: crate::codec::tool_id(&call.id).into_owned(),
                    name: call.function.name.clone(),
                    input: parse_arguments(&call.function.arguments, &field)?,
                });
            }
            Ok(blocks)
        }
        Role::Tool => {
            let tool_use_id = message.tool_call_id.clone().filter(|id| !id.is_empty()).ok_or_else(|| {
                invalid(format_args!("messages[{index}].tool_call_id"), "is required on tool messages")
            })?;
            let content = match &message.content {
                None => None,
                Some(Content::Text(text)) => Some(ToolResultContent::Text(text.clone())),
                Some(content) => Some(ToolResultContent::Blocks(content_blocks(Some(content), index)?)),
            };
            let tool_use_id = crate::codec::tool_id(&tool_use_id).into_owned();
            Ok(vec![Block::ToolResult { tool_use_id, content, is_error: None }])
        }
    }
}

/// The thinking that opens an assistant turn, from the `thinking_blocks` an OpenAI-dialect
/// client sent back (LiteLLM's form, as the gateway writes it: see
/// [`Delta::thinking_blocks`](switchyard::chat::Delta::thinking_blocks)). Only signed thinking
/// blocks (`signature`, or LiteLLM's older `signature_delta`) and redacted ones can be sent:
/// anything else describes a past answer and is left out, as the turn's other metadata is.
fn thinking_blocks(message: &Message) -> Vec<Block> {
    message.thinking_blocks().iter().filter_map(sendable_thinking).map(Block::Raw).collect()
}

/// A thinking block as Anthropic takes it back in a later turn: a `thinking` block with its
/// text and signature (`signature`, or LiteLLM's older `signature_delta`), or a
/// `redacted_thinking` block with its data. `None` for any other block: no provider can be
/// sent it.
///
/// ```
/// use serde_json::json;
/// use switchyard_providers::anthropic::sendable_thinking;
///
/// let signed = json!({"type": "thinking", "thinking": "Hmm.", "signature_delta": "EqQB"});
/// assert_eq!(sendable_thinking(&signed).unwrap()["signature"], "EqQB");
/// assert!(sendable_thinking(&json!({"type": "thinking", "thinking": "Hmm."})).is_none());
/// assert!(sendable_thinking(&json!({"type": "thinking", "thinking": "Hm", "signature": ""})).is_none());
/// ```
pub fn sendable_thinking(block: &Value) -> Option<Value> {
    let text = |name: &str| block.get(name).and_then(Value::as_str).map(str::to_owned);
    match block["type"].as_str()? {
        // Another dialect's reasoning, which the gateway signed: no Claude would take it.
        "thinking" if crate::codec::is_sealed_reasoning(block) => None,
        "thinking" => {
            // An empty signature is a block cut before it was signed (a stream that broke).
            let signature =
                text("signature").or_else(|| text("signature_delta")).filter(|s| !s.is_empty())?;
            Some(json!({"type": "thinking", "thinking": text("thinking")?, "signature": signature}))
        }
        "redacted_thinking" => Some(json!({"type": "redacted_thinking", "data": text("data")?})),
        _ => None,
    }
}

/// Tool-call arguments (a JSON string) as the `input` object Anthropic wants. An empty string
/// means no arguments: some OpenAI-compatible servers send that for parameterless tools.
fn parse_arguments(arguments: &str, field: &str) -> Result<Value, ProviderError> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(input @ Value::Object(_)) => Ok(input),
        Ok(_) => Err(invalid(field, "must be a JSON object")),
        Err(error) => Err(invalid(field, format_args!("is not valid JSON: {error}"))),
    }
}

/// A text block for `text`; `None` for an empty string.
fn text_block(text: &str) -> Option<Block> {
    // Anthropic refuses empty text blocks; an empty string adds nothing to the conversation.
    (!text.is_empty()).then(|| Block::Text { text: text.to_owned() })
}

/// The text and image blocks of a user or assistant message's content (or a tool result's);
/// empty texts are left out, and image URLs become [`image_block`]s.
fn content_blocks(content: Option<&Content>, index: usize) -> Result<Vec<Block>, ProviderError> {
    match content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(text_block(text).into_iter().collect()),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .filter_map(|(j, part)| match part {
                ContentPart::Text { text } => text_block(text).map(Ok),
                ContentPart::ImageUrl { image_url } => Some(image_block(
                    &image_url.url,
                    &format!("messages[{index}].content[{j}].image_url.url"),
                )),
                ContentPart::Other(value) => {
                    Some(document_block(value).ok_or_else(|| untranslatable(part, index, j)))
                }
            })
            .collect(),
    }
}

/// A document block for a part the canonical types do not model, when it is one: an
/// Anthropic `document` as it is, or an OpenAI `file` part carrying a PDF inline
/// (`file_data` as a base64 `data:application/pdf` URL), which Anthropic reads as a document.
fn document_block(part: &Value) -> Option<Block> {
    match part.get("type")?.as_str()? {
        "document" => Some(Block::Raw(part.clone())),
        "file" => {
            let file = part.get("file")?;
            let data = file.get("file_data")?.as_str()?.strip_prefix("data:application/pdf;base64,")?;
            let mut block = json!({
                "type": "document",
                "source": { "type": "base64", "media_type": "application/pdf", "data": data },
            });
            if let Some(name) = file.get("filename").and_then(Value::as_str) {
                block["title"] = Value::from(name);
            }
            Some(Block::Raw(block))
        }
        _ => None,
    }
}

/// The error for a part of another dialect that the canonical types do not model (an OpenAI
/// `file` or `input_audio` part): Anthropic would not understand it as written.
fn untranslatable(part: &ContentPart, index: usize, j: usize) -> ProviderError {
    invalid(
        format_args!("messages[{index}].content[{j}]"),
        format_args!(
            "is a `{}` part, which Switchyard cannot translate to Anthropic's Messages API",
            part.kind()
        ),
    )
}

/// An image block: a `data:` URL becomes a base64 source, an http(s) URL a URL source. The
/// OpenAI `detail` knob has no Anthropic equivalent and does not change what is shown.
fn image_block(url: &str, field: &str) -> Result<Block, ProviderError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest
            .split_once(";base64,")
            .filter(|(media_type, _)| !media_type.is_empty())
            .ok_or_else(|| invalid(field, "must be a base64 `data:<media type>;base64,...` URL"))?;
        return Ok(Block::Image {
            source: ImageSource::Base64 { media_type: media_type.to_owned(), data: data.to_owned() },
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(Block::Image { source: ImageSource::Url { url: url.to_owned() } });
    }
    Err(invalid(field, "must be an http(s) URL or a base64 data: URL"))
}

/// A tool definition. `function` tools become client tools; other kinds are Anthropic server
/// tools, which only a request in Anthropic's dialect can carry.
fn tool_param(tool: &Tool, index: usize, origin: Dialect) -> Result<ToolParam, ProviderError> {
    let function = &tool.function;
    if tool.kind != "function" {
        if origin != Dialect::Anthropic {
            return Err(invalid(
                format_args!("tools[{index}].type"),
                format_args!("is `{}`; only `function` tools translate to Anthropic", tool.kind),
            ));
        }
        return Ok(ToolParam {
            kind: Some(tool.kind.clone()),
            name: function.name.clone(),
            description: function.description.clone(),
            input_schema: function.parameters.clone(),
            extra: function.extra.clone(),
        });
    }
    let extra = if origin == Dialect::Anthropic {
        function.extra.clone()
    } else {
        // OpenAI's `strict` is Claude's `strict` (sent once more without it where a Claude
        // refuses it: `strict.rs`); anything else would be lost.
        if let Some((key, _)) =
            function.extra.iter().find(|(key, value)| key.as_str() != "strict" && !value.is_null())
        {
            return Err(invalid(
                format_args!("tools[{index}].function.{key}"),
                "has no equivalent in Anthropic's tool definitions",
            ));
        }
        let mut extra = Map::new();
        if function.extra.get("strict") == Some(&Value::Bool(true)) {
            extra.insert("strict".to_owned(), Value::Bool(true));
        }
        extra
    };
    Ok(ToolParam {
        kind: None,
        name: function.name.clone(),
        description: function.description.clone(),
        // Anthropic requires a schema; a function without parameters takes an empty object.
        input_schema: Some(
            function.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        ),
        extra,
    })
}

/// `auto`/`none`/`required`/a named function as Anthropic's `auto`/`none`/`any`/`tool`, with
/// `parallel_tool_calls: false` as `disable_parallel_tool_use: true`.
fn tool_choice(
    choice: Option<&ToolChoice>,
    has_tools: bool,
    parallel_tool_calls: Option<bool>,
) -> Result<Option<ToolChoiceParam>, ProviderError> {
    let disable = (parallel_tool_calls == Some(false)).then_some(true);
    let param = |kind, name| ToolChoiceParam { kind, name, disable_parallel_tool_use: disable };
    Ok(match choice {
        // Without tools, "auto" and "none" say nothing, and Anthropic refuses a tool_choice
        // without tools.
        None | Some(ToolChoice::Mode(_)) if !has_tools && choice_is_passive(choice) => None,
        None => disable.map(|_| param("auto", None)),
        Some(ToolChoice::Mode(mode)) => match mode.as_str() {
            "auto" => Some(param("auto", None)),
            "required" => Some(param("any", None)),
            // `disable_parallel_tool_use` is not accepted with `none`.
            "none" => Some(ToolChoiceParam { kind: "none", name: None, disable_parallel_tool_use: None }),
            other => {
                return Err(invalid(
                    "tool_choice",
                    format_args!("is `{other}`; expected auto, none or required"),
                ));
            }
        },
        Some(ToolChoice::Function { function, .. }) => Some(param("tool", Some(function.name.clone()))),
    })
}

/// Whether a tool choice asks for nothing without tools: none given, `auto` or `none`.
fn choice_is_passive(choice: Option<&ToolChoice>) -> bool {
    match choice {
        None => true,
        Some(ToolChoice::Mode(mode)) => mode == "auto" || mode == "none",
        Some(ToolChoice::Function { .. }) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_media_type_and_base64() {
        let block = image_block("data:image/png;base64,iVBORw0KGgo=", "f").unwrap();
        assert_eq!(
            block,
            Block::Image {
                source: ImageSource::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }
            }
        );
        assert!(image_block("data:image/png,rawbytes", "f").is_err());
        assert!(image_block("ftp://example.com/cat.png", "f").unwrap_err().detail().contains("`f`"));
    }

    #[test]
    fn a_custom_tool_call_of_the_history_makes_the_target_unsupported_naming_it() {
        let mut call = switchyard::chat::ToolCall::function("call_1", "", "");
        call.kind = "custom".to_owned();
        let message = Message { tool_calls: vec![call], ..Message::assistant("") };
        let error = message_blocks(&message, 1).unwrap_err();
        assert!(error.is_unsupported(), "another target may take it: nothing was sent");
        assert!(
            error.detail().contains("`messages[1].tool_calls[0]` is a `custom` tool call"),
            "{}",
            error.detail()
        );
    }

    #[test]
    fn empty_arguments_mean_an_empty_object() {
        assert_eq!(parse_arguments("", "f").unwrap(), json!({}));
        assert!(parse_arguments("[1]", "f").unwrap_err().detail().contains("JSON object"));
    }
}
