//! Bedrock's Converse API, for every model but Claude: the request (`request.rs`), the whole
//! answer and the stream (`converse-stream`, an AWS event stream of `messageStart`,
//! `contentBlockStart`, `contentBlockDelta`, `contentBlockStop`, `messageStop` and `metadata`
//! events) into canonical types.

pub(crate) mod request;
mod stream;

use serde::Deserialize;
use serde_json::Value;
use switchyard::chat::{
    ChatResponse, Choice, Content, Extra, FinishReason, FunctionCall, Message, PromptTokensDetails, Role,
    ToolCall, Usage,
};
use switchyard::{ErrorKind, ProviderError};

pub(crate) use stream::chunk_stream;

/// A Converse answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    output: Output,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Debug, Deserialize)]
struct Output {
    message: AnswerMessage,
}

#[derive(Debug, Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Vec<Value>,
}

/// Converse's `usage`.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenUsage {
    #[serde(default)]
    input_tokens: u32,
    #[serde(default)]
    output_tokens: u32,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    cache_write_input_tokens: Option<u32>,
}

impl TokenUsage {
    /// The canonical usage: cache reads and writes as the prompt's details.
    pub(crate) fn canonical(self) -> Usage {
        let mut usage = Usage::new(self.input_tokens, self.output_tokens);
        if self.cache_read_input_tokens.is_some() || self.cache_write_input_tokens.is_some() {
            usage.prompt_tokens_details = Some(PromptTokensDetails {
                cached_tokens: self.cache_read_input_tokens,
                cache_write_tokens: self.cache_write_input_tokens,
            });
        }
        usage
    }
}

/// Converse's `stopReason` as a finish reason.
pub(crate) fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "content_filtered" | "guardrail_intervened" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// A whole Converse answer (`bytes`) from `model`, its id the request's (`x-amzn-requestid`).
pub(crate) fn whole_answer(bytes: &[u8], model: &str, id: String) -> Result<ChatResponse, ProviderError> {
    let answer: Answer = serde_json::from_slice(bytes).map_err(|error| {
        let text = String::from_utf8_lossy(bytes);
        ProviderError::new(
            ErrorKind::MalformedResponse,
            format!("the answer is not a Converse response ({error}): {}", crate::http::excerpt(&text)),
        )
    })?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in &answer.output.message.content {
        if let Some(part) = block.get("text").and_then(Value::as_str) {
            text.push_str(part);
        } else if let Some(tool) = block.get("toolUse") {
            let field = |name: &str| tool.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
            let arguments = tool.get("input").map_or_else(|| "{}".to_owned(), Value::to_string);
            tool_calls.push(ToolCall {
                id: field("toolUseId"),
                kind: "function".to_owned(),
                function: FunctionCall { name: field("name"), arguments },
                extra: Extra::new(),
            });
        }
        // Reasoning blocks and citations are not part of the canonical answer.
    }
    let content = if text.is_empty() && !tool_calls.is_empty() { None } else { Some(Content::Text(text)) };
    let message = Message {
        role: Role::Assistant,
        content,
        name: None,
        tool_calls,
        tool_call_id: None,
        extra: Extra::new(),
    };
    Ok(ChatResponse {
        id,
        model: model.to_owned(),
        created: super::now_unix(),
        choices: vec![Choice {
            index: 0,
            message,
            finish_reason: answer.stop_reason.as_deref().map(finish_reason),
            extra: Extra::new(),
        }],
        usage: answer.usage.map(TokenUsage::canonical),
        ..ChatResponse::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_answer_has_its_text_tool_calls_reason_and_usage() {
        let body = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Looking."},{"toolUse":{"toolUseId":"t1","name":"weather","input":{"city":"Oslo"}}}]}},"stopReason":"tool_use","usage":{"inputTokens":12,"outputTokens":7,"totalTokens":19,"cacheReadInputTokens":4},"metrics":{"latencyMs":100}}"#;
        let answer = whole_answer(body, "meta.llama3-70b-instruct-v1:0", "req-1".into()).unwrap();
        let choice = &answer.choices[0];
        assert_eq!(choice.message.text_content().as_deref(), Some("Looking."));
        assert_eq!(choice.message.tool_calls[0].function.name, "weather");
        assert_eq!(choice.message.tool_calls[0].function.arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
        let usage = answer.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens()), (12, 7, Some(4)));
        assert_eq!(answer.id, "req-1");
    }

    #[test]
    fn an_answer_that_is_not_converse_is_malformed() {
        let error = whole_answer(b"<html>", "m", String::new()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    }
}
