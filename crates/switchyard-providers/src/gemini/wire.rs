//! The Gemini API's answers on the wire, as much of them as Switchyard reads:
//! `GenerateContentResponse` (whole answers and stream events alike), the `google.rpc.Status`
//! error, and the embedding answers.

use serde::Deserialize;
use serde_json::Value;
use switchyard::chat::{CompletionTokensDetails, Usage};

/// `GenerateContentResponse`, as much of it as Switchyard reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GenerateContentResponse {
    /// `candidates[]`, one per answer (Gemini returns one); empty when the prompt was blocked.
    #[serde(default)]
    pub(super) candidates: Vec<Candidate>,
    /// `promptFeedback`: why the prompt was blocked, when it was.
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    /// `usageMetadata`, repeated on every stream event; the last one counts.
    #[serde(default)]
    pub(super) usage_metadata: Option<UsageMetadata>,
    /// `modelVersion`, the model that answered; the canonical `model` when present.
    #[serde(default)]
    pub(super) model_version: Option<String>,
    /// `responseId`, passed through as the answer's id; `None` leaves the id empty.
    #[serde(default)]
    pub(super) response_id: Option<String>,
    /// Streams may carry an error in place of an answer.
    #[serde(default)]
    pub(super) error: Option<GoogleError>,
}

/// One entry of `candidates[]`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate {
    /// `content`; `None` when a filter withheld it.
    #[serde(default)]
    pub(super) content: Option<CandidateContent>,
    /// Gemini `finishReason` (`STOP`, `MAX_TOKENS`, `SAFETY`, ...); `None` until the last
    /// stream event of the candidate.
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
    /// `index` of the candidate; `None` reads as its position (0 in streams).
    #[serde(default)]
    pub(super) index: Option<u32>,
}

/// `candidates[].content`; its `role` (always `model`) is not read.
#[derive(Debug, Default, Deserialize)]
pub(super) struct CandidateContent {
    /// `parts[]`: text, thoughts, function calls; empty when missing.
    #[serde(default)]
    pub(super) parts: Vec<Part>,
}

/// One part of an answer. Parts of other kinds (`inlineData`, `executableCode`, a lone
/// `thoughtSignature`) read as a part with neither text nor call.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Part {
    /// `text`; `None` for parts that are not text.
    #[serde(default)]
    pub(super) text: Option<String>,
    /// A thought summary, not part of the answer.
    #[serde(default)]
    pub(super) thought: bool,
    /// `functionCall`, a whole tool call (Gemini never splits one across events).
    #[serde(default)]
    pub(super) function_call: Option<GeminiFunctionCall>,
}

/// `parts[].functionCall`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct GeminiFunctionCall {
    /// The call's `id`, sent by newer models only; without it the adapter makes a fresh `call_` id.
    #[serde(default)]
    pub(super) id: Option<String>,
    /// The called function's `name`; required.
    pub(super) name: String,
    /// `args`, the arguments as a JSON object; `None` reads as `{}`.
    #[serde(default)]
    pub(super) args: Option<Value>,
}

/// `promptFeedback` of an answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    /// `blockReason` (`SAFETY`, `OTHER`, `BLOCKLIST`, `PROHIBITED_CONTENT`, ...) when the prompt
    /// itself was refused; `None` otherwise.
    #[serde(default)]
    block_reason: Option<String>,
}

/// `usageMetadata` of an answer; missing counts read as 0.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageMetadata {
    /// `promptTokenCount`, the prompt's tokens.
    #[serde(default)]
    prompt_token_count: u32,
    /// `toolUsePromptTokenCount`, tokens of tool-use prompts; counted as prompt.
    #[serde(default)]
    tool_use_prompt_token_count: u32,
    /// `candidatesTokenCount`, the answer's tokens; missing on early stream events.
    #[serde(default)]
    candidates_token_count: u32,
    /// `thoughtsTokenCount`, thinking tokens; counted as completion.
    #[serde(default)]
    thoughts_token_count: u32,
    /// `totalTokenCount` (thoughts included); `None` reads as prompt + completion.
    #[serde(default)]
    total_token_count: Option<u32>,
}

impl UsageMetadata {
    /// Whether this counts the answer's tokens, which early stream events, counting the prompt
    /// (and a thinking model's thoughts so far) only, do not.
    pub(super) fn counts_the_answer(&self) -> bool {
        self.candidates_token_count > 0
    }

    /// Thinking counts as completion, as OpenAI counts reasoning tokens.
    pub(super) fn to_usage(&self) -> Usage {
        let prompt = self.prompt_token_count.saturating_add(self.tool_use_prompt_token_count);
        let completion = self.candidates_token_count.saturating_add(self.thoughts_token_count);
        let reasoning = (self.thoughts_token_count > 0).then_some(self.thoughts_token_count);
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: self.total_token_count.unwrap_or(prompt.saturating_add(completion)),
            prompt_tokens_details: None,
            completion_tokens_details: reasoning
                .map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens: Some(reasoning_tokens) }),
        }
    }
}

impl GenerateContentResponse {
    /// The block reason when the prompt itself was refused (no candidates at all).
    pub(super) fn prompt_block(&self) -> Option<&str> {
        if !self.candidates.is_empty() {
            return None;
        }
        self.prompt_feedback.as_ref()?.block_reason.as_deref()
    }
}

/// The `error` of a `google.rpc.Status` body.
#[derive(Debug, Default, Deserialize)]
pub(super) struct GoogleError {
    /// `code`, the HTTP status (a number, or a numeric string from some proxies).
    #[serde(default)]
    code: Option<Value>,
    /// `message`, human-readable; empty when missing.
    #[serde(default)]
    pub(super) message: String,
    /// `status`, the `google.rpc.Code` name (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`, ...);
    /// what classification reads first.
    #[serde(default)]
    pub(super) status: Option<String>,
    /// `details[]`, typed payloads (`RetryInfo`, `ErrorInfo`, `QuotaFailure`, ...) by `@type`.
    #[serde(default)]
    pub(super) details: Vec<Value>,
}

impl GoogleError {
    /// The HTTP status the error names (a number, or a numeric string in some proxies).
    pub(super) fn http_status(&self) -> Option<u16> {
        match self.code.as_ref()? {
            Value::Number(number) => number.as_u64().and_then(|n| u16::try_from(n).ok()),
            Value::String(text) => text.parse().ok(),
            _ => None,
        }
    }
}

/// The answer of `embedContent`.
#[derive(Debug, Deserialize)]
pub(super) struct EmbedContentResponse {
    /// `embedding`, the one vector; required.
    pub(super) embedding: ContentEmbedding,
    /// `usageMetadata`, what the texts counted, when the API says.
    #[serde(default, rename = "usageMetadata")]
    pub(super) usage: Option<EmbeddingUsage>,
}

/// The answer of `batchEmbedContents`.
#[derive(Debug, Deserialize)]
pub(super) struct BatchEmbedContentsResponse {
    /// `embeddings[]`, one per request in the same order; their count is checked against the
    /// inputs.
    #[serde(default)]
    pub(super) embeddings: Vec<ContentEmbedding>,
    /// `usageMetadata`, what the texts counted, when the API says.
    #[serde(default, rename = "usageMetadata")]
    pub(super) usage: Option<EmbeddingUsage>,
}

/// `EmbeddingUsageMetadata`: the tokens of the texts embedded.
#[derive(Debug, Deserialize)]
pub(super) struct EmbeddingUsage {
    /// `promptTokenCount`.
    #[serde(default, rename = "promptTokenCount")]
    pub(super) prompt_tokens: Option<u32>,
}

/// `ContentEmbedding`, one vector.
#[derive(Debug, Deserialize)]
pub(super) struct ContentEmbedding {
    /// `values`, the vector; missing reads as empty.
    #[serde(default)]
    pub(super) values: Vec<f32>,
}
