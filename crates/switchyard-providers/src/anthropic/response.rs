//! Messages API answers into canonical answers, and the canonical answer's blocks back (the
//! codec writes those, and the adapter uses them to tell whether the canonical form is exact).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard::chat::{
    ChatResponse, Choice, Content, Dialect, Extra, FinishReason, Message, Role, THINKING_BLOCKS, ToolCall,
};

use super::request::VERBATIM_BLOCKS;
use super::wire::{Block, MessageResponse};

/// The `ChatResponse.extra` key holding Anthropic's own usage object (with its cache counts),
/// kept when the request came in Anthropic's dialect so that the codec can return it as is.
pub const VERBATIM_USAGE: &str = "anthropic_usage";

/// The canonical finish reason of an Anthropic `stop_reason`.
pub(crate) fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        // Both mean the output was cut for lack of room.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        // `pause_turn` (a server tool paused a long turn) and anything newer, verbatim.
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The Anthropic `stop_reason` of a canonical finish reason. Reasons Anthropic does not know
/// become `end_turn`, since its clients only know its own.
pub(crate) fn stop_reason(reason: &FinishReason, stop_sequence: Option<&str>) -> &'static str {
    match reason {
        FinishReason::Stop if stop_sequence.is_some() => "stop_sequence",
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
        FinishReason::Other(other) => match other.as_str() {
            "pause_turn" => "pause_turn",
            "model_context_window_exceeded" => "model_context_window_exceeded",
            "stop_sequence" => "stop_sequence",
            "tool_use" | "function_call" => "tool_use",
            _ => "end_turn",
        },
    }
}

/// An answer to a request in JSON mode, as its client asked for it: the input of the
/// [`JSON_TOOL`](super::request::JSON_TOOL) call is the answer's text, and the call's
/// `tool_use` stop a plain `end_turn`.
pub(crate) fn json_answer(message: &mut MessageResponse) {
    let mut answered = false;
    for block in &mut message.content {
        if block["type"] == "tool_use" && block["name"] == super::request::JSON_TOOL {
            let text = block["input"].to_string();
            *block = serde_json::json!({ "type": "text", "text": text });
            answered = true;
        }
    }
    if answered && message.stop_reason.as_deref() == Some("tool_use") {
        message.stop_reason = Some("end_turn".to_owned());
    }
}

/// Seconds since the epoch, for `created` (Anthropic does not say when it answered).
pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The canonical answer of an Anthropic message. Text blocks are joined; `tool_use` blocks
/// become tool calls; other blocks (thinking, server tools) are not part of the canonical
/// answer, but when the request came in Anthropic's dialect the original blocks, usage, stop
/// reason and stop sequence are kept in `extra` so that the codec can return them unchanged.
pub(crate) fn to_chat_response(message: MessageResponse, origin: Dialect) -> ChatResponse {
    let mut text = String::new();
    let mut has_text = false;
    let mut reasoning = String::new();
    let mut thinking_blocks = Vec::new();
    let mut tool_calls = Vec::new();
    for raw in &message.content {
        match serde_json::from_value::<Block>(raw.clone()) {
            Ok(Block::Text { text: part }) => {
                has_text = true;
                text.push_str(&part);
            }
            Ok(Block::Raw(block)) if block["type"] == "thinking" => {
                reasoning.push_str(block["thinking"].as_str().unwrap_or_default());
                thinking_blocks.push(block);
            }
            Ok(Block::Raw(block)) if block["type"] == "redacted_thinking" => thinking_blocks.push(block),
            Ok(Block::ToolUse { id, name, input }) => {
                tool_calls.push(ToolCall::function(id, name, input.to_string()));
            }
            _ => {}
        }
    }
    let content = match (has_text, tool_calls.is_empty()) {
        (false, false) => None,
        _ => Some(Content::Text(text)),
    };
    let mut answer = Message {
        role: Role::Assistant,
        content,
        name: None,
        tool_calls,
        tool_call_id: None,
        extra: Extra::new(),
    };
    // An OpenAI-dialect client reads the thinking as reasoning servers write it (and a
    // Responses client as a reasoning item). The blocks themselves, signed, go to an
    // OpenAI-dialect client as LiteLLM's `thinking_blocks`, to send back on a later turn (a
    // Responses client gets them encoded in that item).
    if matches!(origin, Dialect::OpenAi | Dialect::Responses) && !reasoning.is_empty() {
        answer.extra.insert("reasoning_content".to_owned(), Value::String(reasoning));
    }
    // (A Responses client's request comes with origin `OpenAi`: its encoder seals them.)
    if origin == Dialect::OpenAi && !thinking_blocks.is_empty() {
        answer.extra.insert(THINKING_BLOCKS.to_owned(), Value::Array(thinking_blocks));
    }
    let mut choice_extra = Extra::new();
    let mut extra = Extra::new();
    if origin == Dialect::Anthropic {
        let rebuilt = answer_blocks(&answer, false).ok().map(|blocks| serde_json::to_value(blocks).ok());
        if rebuilt != Some(Some(Value::Array(message.content.clone()))) {
            answer.extra.insert(VERBATIM_BLOCKS.to_owned(), Value::Array(message.content));
        }
        if let Some(reason) = &message.stop_reason {
            choice_extra.insert("stop_reason".to_owned(), Value::String(reason.clone()));
        }
        if let Some(sequence) = &message.stop_sequence {
            choice_extra.insert("stop_sequence".to_owned(), Value::String(sequence.clone()));
        }
        if let Ok(usage) = serde_json::to_value(&message.usage) {
            extra.insert(VERBATIM_USAGE.to_owned(), usage);
        }
    }
    ChatResponse {
        id: message.id,
        model: message.model,
        created: now_unix(),
        choices: vec![Choice {
            index: 0,
            message: answer,
            finish_reason: message.stop_reason.as_deref().map(finish_reason),
            extra: choice_extra,
        }],
        usage: Some(message.usage.canonical()),
        extra,
        verbatim: None,
        frames: Vec::new(),
        notices: Vec::new(),
    }
}

/// The content blocks of a canonical answer: its text as one block, then its tool calls. Fails
/// with the path (under the message) and the reason of a tool call whose arguments are not a
/// JSON object, or that is of a kind the Messages API cannot express (a `custom` call); in an
/// answer its length limit `cut`, such a call's input is `{}` (Anthropic's own answer cut in a
/// `tool_use` block is as incomplete, and `max_tokens` says so).
pub(crate) fn answer_blocks(message: &Message, cut: bool) -> Result<Vec<Block>, (String, String)> {
    let mut blocks = Vec::new();
    let text = message.text_content().unwrap_or_default();
    if !text.is_empty() {
        blocks.push(Block::Text { text });
    }
    for (k, call) in message.tool_calls.iter().enumerate() {
        if !call.is_function() {
            let reason =
                format!("is a `{}` tool call, which Anthropic's Messages API cannot express", call.kind);
            return Err((format!("tool_calls[{k}]"), reason));
        }
        let input = if call.function.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(&call.function.arguments) {
                Ok(input @ Value::Object(_)) => input,
                _ if cut => Value::Object(Default::default()),
                Ok(_) => return Err((arguments(k), "is not a JSON object".to_owned())),
                Err(error) => return Err((arguments(k), format!("is not valid JSON: {error}"))),
            }
        };
        blocks.push(Block::ToolUse { id: call.id.clone(), name: call.function.name.clone(), input });
    }
    Ok(blocks)
}

/// The path of tool call `k`'s arguments under its message.
fn arguments(k: usize) -> String {
    format!("tool_calls[{k}].function.arguments")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_map_to_canonical_finish_reasons() {
        let cases = [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("model_context_window_exceeded", FinishReason::Length),
            ("tool_use", FinishReason::ToolCalls),
            ("refusal", FinishReason::ContentFilter),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ];
        for (anthropic, canonical) in cases {
            assert_eq!(finish_reason(anthropic), canonical, "{anthropic}");
        }
    }

    #[test]
    fn finish_reasons_map_back_to_stop_reasons() {
        assert_eq!(stop_reason(&FinishReason::Stop, None), "end_turn");
        assert_eq!(stop_reason(&FinishReason::Stop, Some("###")), "stop_sequence");
        assert_eq!(stop_reason(&FinishReason::Length, None), "max_tokens");
        assert_eq!(stop_reason(&FinishReason::ToolCalls, None), "tool_use");
        assert_eq!(stop_reason(&FinishReason::ContentFilter, None), "refusal");
        assert_eq!(stop_reason(&FinishReason::Other("pause_turn".into()), None), "pause_turn");
        assert_eq!(stop_reason(&FinishReason::Other("eos".into()), None), "end_turn");
    }
}
