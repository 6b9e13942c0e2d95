//! `generateContent` answers into canonical answers: finish reasons, text and tool calls, and
//! the reading of a 2xx body (which may still hold an error).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard::chat::{ChatResponse, Choice, Content, Extra, FinishReason, Message, ToolCall};
use switchyard::{ErrorKind, ProviderError};

use super::classify::{Redactor, classify_google_error, parse_google_error};
use super::wire::{GenerateContentResponse, Part, UsageMetadata};
use crate::http;

/// The canonical reason for Gemini's `finishReason`.
pub(super) fn finish_reason(reason: &str, has_tool_calls: bool) -> FinishReason {
    match reason {
        "STOP" if has_tool_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "PROHIBITED_CONTENT"
        | "BLOCKLIST"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The error a candidate's finish reason says when the model failed to produce an answer
/// (its function call malformed, a tool call it was not offered, too many, its answer
/// malformed, stopped for a reason it does not name): a model's failure, asked again or of the
/// next target, not an answer to pass on with a finish reason no client knows. A language the
/// model does not answer in is no failure of the provider's: unsupported, the next target asked.
pub(super) fn failed_generation(reason: &str) -> Option<ProviderError> {
    let why = match reason {
        "MALFORMED_FUNCTION_CALL" => "its function call was malformed",
        "UNEXPECTED_TOOL_CALL" => "it called a tool it was not offered",
        "TOO_MANY_TOOL_CALLS" => "it made too many tool calls",
        "MALFORMED_RESPONSE" => "its answer was malformed",
        "OTHER" | "FINISH_REASON_UNSPECIFIED" => "it stopped for a reason it does not name",
        "LANGUAGE" => {
            let detail =
                "Gemini did not finish the answer (LANGUAGE): the model does not answer in this language";
            // Answered (a 200): a call that failed, not a skip.
            return Some(ProviderError::unsupported(detail).with_code(reason).with_status(200));
        }
        _ => return None,
    };
    Some(
        ProviderError::new(
            ErrorKind::MalformedResponse,
            format!("Gemini did not finish the answer ({reason}): {why}"),
        )
        .with_code(reason),
    )
}

/// The error of a candidate that finished (`STOP`) without a word or a call, thoughts aside: an
/// empty answer, a known fault of Gemini 2.5 models, which the same request asked again (or of
/// the next target) answers. `said`: whether the candidate gave any text or call.
pub(super) fn empty_stop(reason: &str, said: bool) -> Option<ProviderError> {
    (reason == "STOP" && !said).then(|| {
        ProviderError::new(
            ErrorKind::MalformedResponse,
            "Gemini finished (STOP) without any text or call: an empty answer",
        )
        .with_code("EMPTY_STOP")
    })
}

/// What one candidate's parts say.
#[derive(Debug, Default)]
pub(super) struct Read {
    /// The answer's text.
    pub(super) text: String,
    /// Its thought summaries (`thought: true` parts, sent when `includeThoughts` is set).
    pub(super) thoughts: String,
    /// Its function calls.
    pub(super) calls: Vec<ToolCall>,
}

/// The text, thoughts and tool calls of a candidate. Tool-call ids are Gemini's when it sends
/// them, else fresh ones (`call_` and a unique suffix): ids counted from zero in each answer
/// repeat across a conversation's turns, which Anthropic refuses (`tool_use` ids must be
/// unique) and agents that pair results with calls by id misread.
pub(super) fn read_parts(parts: &[Part]) -> Read {
    let (mut text, mut thoughts) = (String::new(), String::new());
    let mut calls = Vec::new();
    for part in parts {
        if let Some(piece) = part.text.as_deref() {
            if part.thought { thoughts.push_str(piece) } else { text.push_str(piece) }
        }
        if let Some(call) = &part.function_call {
            let id = call
                .id
                .clone()
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| crate::codec::fresh_id("call_"));
            let arguments = call.args.as_ref().map_or_else(|| "{}".to_owned(), Value::to_string);
            calls.push(ToolCall::function(id, call.name.clone(), arguments));
        }
    }
    Read { text, thoughts, calls }
}

/// Seconds since the Unix epoch, for `created`: Gemini does not say when it answered.
pub(super) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The canonical answer of a `generateContent` answer. A blocked prompt is one empty choice
/// with finish reason `content_filter`; an answer with neither candidates nor a block reason
/// is malformed. `model` is used when the answer names no `modelVersion`.
pub(super) fn chat_response(
    answer: GenerateContentResponse,
    model: &str,
) -> Result<ChatResponse, ProviderError> {
    let usage = answer.usage_metadata.as_ref().map(UsageMetadata::to_usage);
    let mut choices = Vec::new();
    if answer.prompt_block().is_some() {
        choices.push(Choice {
            index: 0,
            message: Message::assistant(""),
            finish_reason: Some(FinishReason::ContentFilter),
            extra: Extra::new(),
        });
    } else if answer.candidates.is_empty() {
        return Err(ProviderError::new(
            ErrorKind::MalformedResponse,
            "the answer has neither candidates nor a prompt block reason",
        ));
    }
    for (position, candidate) in answer.candidates.iter().enumerate() {
        if let Some(error) = candidate.finish_reason.as_deref().and_then(failed_generation) {
            return Err(error);
        }
        let parts = candidate.content.as_ref().map_or(&[][..], |content| &content.parts[..]);
        let Read { text, thoughts, calls: tool_calls } = read_parts(parts);
        // An answer that did not say how it ended did not end, as a stream that did not is cut.
        let Some(reason) = candidate.finish_reason.as_deref() else {
            return Err(ProviderError::new(ErrorKind::MalformedResponse, "the answer has no finishReason"));
        };
        if let Some(error) = empty_stop(reason, !text.is_empty() || !tool_calls.is_empty()) {
            return Err(error);
        }
        let finish = Some(finish_reason(reason, !tool_calls.is_empty()));
        let content =
            if text.is_empty() && !tool_calls.is_empty() { None } else { Some(Content::Text(text)) };
        let mut message = Message { content, tool_calls, ..Message::assistant("") };
        // As reasoning servers write it, for OpenAI-dialect and Responses clients.
        if !thoughts.is_empty() {
            message.extra.insert("reasoning_content".to_owned(), Value::String(thoughts));
        }
        choices.push(Choice {
            index: candidate.index.unwrap_or(u32::try_from(position).unwrap_or(u32::MAX)),
            message,
            finish_reason: finish,
            extra: Extra::new(),
        });
    }
    Ok(ChatResponse {
        id: answer.response_id.unwrap_or_default(),
        model: answer.model_version.unwrap_or_else(|| model.to_owned()),
        created: unix_now(),
        choices,
        usage,
        extra: Extra::new(),
        verbatim: None,
        frames: Vec::new(),
        notices: Vec::new(),
    })
}

/// Parses a 2xx body; a body that is not the expected JSON is a malformed response, and an
/// error object inside a 2xx is classified like any other error.
pub(super) fn parse_success<T: serde::de::DeserializeOwned>(
    status: u16,
    body: &[u8],
    redactor: &Redactor,
) -> Result<T, ProviderError> {
    serde_json::from_slice(body).map_err(|error| {
        let text = String::from_utf8_lossy(body);
        match parse_google_error(&text) {
            Some(google) => {
                classify_google_error(google.http_status().unwrap_or(status), &google, None, redactor)
            }
            None => {
                let detail =
                    format!("the answer is not the JSON expected ({error}): {}", http::excerpt(&text));
                ProviderError::new(ErrorKind::MalformedResponse, redactor.clean(&detail)).with_status(status)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_map_to_the_catalog() {
        assert_eq!(finish_reason("STOP", false), FinishReason::Stop);
        assert_eq!(finish_reason("STOP", true), FinishReason::ToolCalls);
        assert_eq!(finish_reason("MAX_TOKENS", false), FinishReason::Length);
        for filtered in ["SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"] {
            assert_eq!(finish_reason(filtered, false), FinishReason::ContentFilter);
        }
        assert_eq!(
            finish_reason("MALFORMED_FUNCTION_CALL", false),
            FinishReason::Other("MALFORMED_FUNCTION_CALL".into())
        );
    }
}
