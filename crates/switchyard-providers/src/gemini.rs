//! The Google Gemini API (AI Studio, `generativelanguage.googleapis.com`): `generateContent`,
//! `streamGenerateContent?alt=sse`, `embedContent` and `batchEmbedContents`.
//!
//! The key goes in the `x-goog-api-key` header, never in the `?key=` query, so that no URL (and
//! so no error or log line that quotes one) ever holds it.
//!
//! ```no_run
//! use switchyard_providers::gemini::GeminiProvider;
//! use switchyard_providers::{ProviderKind, ProviderSettings};
//!
//! let gemini = GeminiProvider::new(&ProviderSettings::new(ProviderKind::Gemini)).unwrap();
//! ```
//!
//! # Translation decisions
//!
//! - System and developer messages become `systemInstruction`; user messages role `user`,
//!   assistant messages role `model`; adjacent contents of the same role are merged, so the
//!   results of parallel tool calls travel in one `user` turn as Gemini expects.
//! - Images: `data:` URLs become `inlineData`; `http(s)` URLs become `fileData {fileUri,
//!   mimeType?}` (the Gemini API fetches public and signed URLs and takes Files API URIs there;
//!   the MIME type is guessed from the extension when it is a common image type). Anything else
//!   is `invalid_request` naming the field.
//! - Tool definitions go out as `parametersJsonSchema` (standard JSON Schema) rather than
//!   `parameters` (an OpenAPI subset that rejects keywords such as `additionalProperties`, which
//!   OpenAI's strict tools always carry). For the same reason `response_format: json_schema`
//!   becomes `responseMimeType: application/json` + `responseJsonSchema`.
//! - Assistant tool calls become `functionCall` parts. Gemini 3 models reject a function call
//!   turn without a thought signature, and the canonical types cannot carry Gemini's opaque
//!   signatures through a client, so the first call of each turn carries Google's documented
//!   placeholder [`SKIP_THOUGHT_SIGNATURE`].
//! - Tool results become `functionResponse {name, response}` parts; the name comes from the
//!   earlier assistant tool call with the same `tool_call_id` (or the message's `name`). A
//!   result that is a JSON object is sent as the response; anything else as `{"result": text}`.
//! - `extra` fields pass through untouched (objects merged into ours, arrays appended) only when
//!   the request arrived in the Gemini dialect. Otherwise `max_completion_tokens`,
//!   `frequency_penalty`, `presence_penalty` and `top_k` are translated, and `reasoning_effort`
//!   becomes `thinkingConfig` (see `thinking.rs`); `user`, `metadata`,
//!   `stream_options`, `parallel_tool_calls`, `store`, `n: 1` and explicit nulls are ignored as
//!   harmless; any other field is `invalid_request` naming it.
//! - Answers: text parts are joined; thought summaries (`thought: true` parts, sent with
//!   `includeThoughts`) are the answer's reasoning (`reasoning_content`, streamed as
//!   `Delta::reasoning_content`); `functionCall` parts become
//!   tool calls with Gemini's own `id` when it sends one, otherwise a fresh `call_` id; `STOP` with tool
//!   calls reads as `tool_calls` (Gemini has no such reason), `MAX_TOKENS` as `length`, the
//!   safety reasons as `content_filter`, anything else is kept verbatim. A prompt blocked by
//!   `promptFeedback.blockReason` is an answer whose finish reason is `content_filter`, so the
//!   router can redirect it.
//!
//! Not carried across (each is an opaque or Gemini-only detail with no canonical slot):
//! Gemini's own thought signatures (the placeholder above stands in for them), `safetyRatings`,
//! `citationMetadata`, `groundingMetadata`, logprobs, and non-text answer parts (inline images,
//! `executableCode`); message-level and function-level `extra` fields of other dialects (such as
//! OpenAI's `refusal`, `annotations` or `strict`), which clients echo back and which change
//! nothing Gemini could honour; and the `name`/`strict` of a JSON schema response format.
//!
//! # Classification
//!
//! From the `google.rpc.Status` body (`{"error": {code, message, status, details}}`), by its
//! `status` string and detail payloads, falling back to the HTTP status:
//!
//! | status | kind |
//! |---|---|
//! | `RESOURCE_EXHAUSTED` | `rate_limited`, the key resting for that model alone unless every quota spent is the project's; `quota_exceeded` (the key benched) for a project's per-day quota. A per-day quota (`quotaId` containing `PerDay`) waits until midnight in Los Angeles, when Google resets them, whatever the `RetryInfo` says |
//! | `UNAVAILABLE`, `INTERNAL`, `UNKNOWN`, `DATA_LOSS`, `ABORTED`, `CANCELLED` | `unavailable` |
//! | `DEADLINE_EXCEEDED` | `timeout` |
//! | `UNAUTHENTICATED`, `PERMISSION_DENIED`, any status with `ErrorInfo.reason` `API_KEY_INVALID` | `auth` |
//! | `NOT_FOUND` | `model_not_found` |
//! | `FAILED_PRECONDITION` (billing not enabled, free tier unavailable in the region) | `quota_exceeded`: this account cannot serve until an operator acts, but another target can (on Vertex AI, `model_not_found`: see `vertex::is_the_models`) |
//! | `INVALID_ARGUMENT` saying "The input token count (N) exceeds the maximum number of tokens allowed (M)" | `context_length` (Gemini gives no code for it, so the message is matched narrowly) |
//! | other `INVALID_ARGUMENT`, `OUT_OF_RANGE` | `invalid_request` |
//!
//! The wait comes from `retry-after` headers when present, otherwise from the
//! `google.rpc.RetryInfo` detail's `retryDelay` (`"30s"`, `"1.5s"`).
//!
//! Translation lives in `request.rs` (canonical → Gemini) and `embeddings.rs`, decoding in
//! `response.rs` and `stream.rs` (Gemini → canonical), classification in `classify.rs`, wire
//! shapes in `wire.rs`.

mod classify;
mod embeddings;
mod request;
mod response;
mod stream;
mod thinking;
mod wire;

use std::fmt;

use ::http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use switchyard::chat::{
    ChatRequest, ChatResponse, Embedding, EmbeddingInput, EmbeddingsRequest, EmbeddingsResponse, Extra,
    TokenCount, Usage,
};
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::{ErrorKind, ProviderError};
use tokio::time::Instant;

pub use request::SKIP_THOUGHT_SIGNATURE;

pub(crate) use classify::{Redactor, classify_http_error};
pub(crate) use embeddings::embedding_options;

use classify::classify_google_error;
use embeddings::embed_request;
use request::{encode, invalid_request, model_path, request_body};
use response::{chat_response, parse_success};
use stream::GeminiChunks;
use wire::{BatchEmbedContentsResponse, EmbedContentResponse, GenerateContentResponse};

use crate::http;
use crate::sse::SseStream;
use crate::{BuildError, ProviderSettings};

/// The most texts one `batchEmbedContents` call embeds.
const EMBED_BATCH: usize = 100;

/// The Gemini API adapter.
pub struct GeminiProvider {
    /// The resolved base URL (`.../v1beta`), without a trailing slash; each request appends
    /// `/models/{model}:{method}`.
    base_url: String,
    /// This provider's own connection pools.
    client: http::HttpClient,
    /// Extra headers from the settings, marked sensitive so that they never print.
    headers: HeaderMap,
}

impl fmt::Debug for GeminiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeminiProvider")
            .field("base_url", &self.base_url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl GeminiProvider {
    /// An adapter for `settings` (base URL default `https://generativelanguage.googleapis.com/v1beta`).
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        let base_url = settings.resolved_base_url()?;
        // Each request's URL names the model; the base is checked once, here.
        ::http::Uri::try_from(base_url.as_str()).map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let extra = settings.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        let headers = http::configured_headers(HeaderMap::new(), extra)?;
        Ok(Self { base_url, client: http::HttpClient::new(&settings.http)?, headers })
    }

    /// `{base}/models/{model}:{method}`.
    fn url(&self, model: &str, method: &str) -> Result<String, ProviderError> {
        Ok(format!("{}/{}:{method}", self.base_url, model_path(model)?))
    }

    /// Sends one request; reports the rate-limit headers; classifies a non-2xx answer.
    ///
    /// With a `deadline`, an answer whose head has not arrived by then is a timeout; an error
    /// body is what arrived of it by then.
    async fn send(
        &self,
        call: Call<'_>,
        url: String,
        body: Vec<u8>,
        deadline: Option<Instant>,
    ) -> Result<http::Response, ProviderError> {
        // No client header is passed on; only the trace context.
        let mut headers = http::call_headers(&self.headers, &call, &[]);
        // Over any configured header of the same name: the body is JSON, the key the router chose.
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = call.credential.key() {
            headers.insert("x-goog-api-key", http::key_value(key.expose())?);
        }
        let request = http::post(http::parse_uri(url)?, headers, body);
        let classify =
            |status, body: &str, wait| classify_http_error(status, body, wait, &Redactor::of(call));
        self.client.exchange(request, &call, deadline, classify).await
    }

    /// Sends and reads a whole JSON answer (never used for streams).
    async fn send_for_json<T: serde::de::DeserializeOwned>(
        &self,
        call: Call<'_>,
        url: String,
        body: Vec<u8>,
    ) -> Result<T, ProviderError> {
        // The total timeout covers the whole exchange, body included (a total too far off to
        // be an instant is none).
        let deadline = Instant::now().checked_add(call.timeouts.total);
        let response = self.send(call, url, body, deadline).await?;
        let status = response.status().as_u16();
        let bytes = http::until(deadline, http::read_body(response)).await?;
        parse_success(status, &bytes, &Redactor::of(call))
    }
}

/// The serialized `generateContent` body for `request`, sent to `model` (Gemini on Vertex AI
/// sends the same).
pub(crate) fn generate_body(request: &ChatRequest, model: &str) -> Result<Vec<u8>, ProviderError> {
    encode(&request_body(request, model)?)
}

/// The `countTokens` body of `request` for `model`: for the Gemini API its whole
/// `generateContent` body as `generateContentRequest` (naming the model, as that form wants),
/// so that the system instruction and the tools count too; for Vertex AI (`vertex`), whose
/// `countTokens` takes them at the top level, its contents, system instruction and tools.
pub(crate) fn count_body(request: &ChatRequest, model: &str, vertex: bool) -> Result<Vec<u8>, ProviderError> {
    let mut generate = request_body(request, model)?;
    if vertex {
        generate.retain(|key, _| matches!(key.as_str(), "contents" | "systemInstruction" | "tools"));
        return encode(&generate);
    }
    generate.insert("model".to_owned(), Value::from(model_path(model)?));
    encode(&json!({ "generateContentRequest": generate }))
}

/// A `countTokens` answer: `{"totalTokens": n}`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Counted {
    total_tokens: u32,
}

/// A `countTokens` answer (`{"totalTokens": n}`) of HTTP `status`.
pub(crate) fn read_count(
    status: u16,
    bytes: &[u8],
    redactor: &Redactor,
) -> Result<TokenCount, ProviderError> {
    let counted: Counted = parse_success(status, bytes, redactor)?;
    Ok(TokenCount { input_tokens: counted.total_tokens, verbatim: None })
}

/// A whole `generateContent` answer of `model` as the canonical answer; an error object inside
/// it is classified like any other error.
fn answer_of(
    answer: GenerateContentResponse,
    model: &str,
    redactor: &Redactor,
) -> Result<ChatResponse, ProviderError> {
    if let Some(error) = &answer.error {
        let status = error.http_status().unwrap_or(200);
        return Err(classify_google_error(status, error, None, redactor));
    }
    chat_response(answer, model)
}

/// [`answer_of`] the 2xx body `bytes` (of HTTP `status`).
pub(crate) fn whole_answer(
    status: u16,
    bytes: &[u8],
    model: &str,
    redactor: &Redactor,
) -> Result<ChatResponse, ProviderError> {
    answer_of(parse_success(status, bytes, redactor)?, model, redactor)
}

/// The chunks of a `streamGenerateContent?alt=sse` answer (`response`, a success) of `model`.
pub(crate) fn answer_stream(response: http::Response, model: &str, redactor: Redactor) -> ChunkStream {
    let events = SseStream::new(http::body_stream(response));
    crate::sse::read_chunks(GeminiChunks::new(events, model, redactor))
}

impl GeminiProvider {
    /// The vectors of `texts` by `batchEmbedContents`, at most [`EMBED_BATCH`] a call, and
    /// the tokens they counted when every call said.
    async fn embed_batches(
        &self,
        call: &Call<'_>,
        path: &str,
        texts: &[String],
        options: &serde_json::Map<String, Value>,
    ) -> Result<(Vec<Vec<f32>>, Option<u32>), ProviderError> {
        if texts.is_empty() {
            return Err(invalid_request("input: give at least one text to embed"));
        }
        let mut vectors = Vec::with_capacity(texts.len());
        let mut tokens = Some(0u32);
        for batch in texts.chunks(EMBED_BATCH) {
            let requests: Vec<Value> =
                batch.iter().map(|text| embed_request(text, Some(path), options)).collect();
            let url = self.url(call.model, "batchEmbedContents")?;
            let body = encode(&json!({ "requests": requests }))?;
            let answer: BatchEmbedContentsResponse = self.send_for_json(*call, url, body).await?;
            if answer.embeddings.len() != batch.len() {
                let detail = format!(
                    "batchEmbedContents returned {} vectors for {} inputs",
                    answer.embeddings.len(),
                    batch.len()
                );
                return Err(ProviderError::new(ErrorKind::MalformedResponse, detail));
            }
            let counted = answer.usage.and_then(|usage| usage.prompt_tokens);
            tokens = tokens.zip(counted).map(|(sum, n)| sum.saturating_add(n));
            vectors.extend(answer.embeddings.into_iter().map(|e| e.values));
        }
        Ok((vectors, tokens))
    }
}

impl Provider for GeminiProvider {
    fn kind(&self) -> &str {
        "gemini"
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    fn warm(&self) {
        self.client.warm();
    }

    fn base_url(&self) -> &str {
        &self.base_url
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let url = self.url(call.model, "generateContent")?;
            let body = generate_body(request, call.model)?;
            let answer: GenerateContentResponse = self.send_for_json(call, url, body).await?;
            answer_of(answer, call.model, &Redactor::of(call))
        })
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async move {
            let url = format!("{}?alt=sse", self.url(call.model, "streamGenerateContent")?);
            let body = generate_body(request, call.model)?;
            // No total timeout on a stream: the router's first-byte, idle and total govern it.
            let response = self.send(call, url, body, None).await?;
            Ok(answer_stream(response, call.model, Redactor::of(call)))
        })
    }

    fn count_tokens<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        Box::pin(async move {
            let url = self.url(call.model, "countTokens")?;
            let body = count_body(request, call.model, false)?;
            let counted: Counted = self.send_for_json(call, url, body).await?;
            Ok(TokenCount { input_tokens: counted.total_tokens, verbatim: None })
        })
    }

    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        Box::pin(async move {
            let path = model_path(call.model)?;
            let options = embedding_options(request)?;
            let (vectors, tokens) = match &request.input {
                EmbeddingInput::One(text) => {
                    let url = self.url(call.model, "embedContent")?;
                    let body = encode(&embed_request(text, None, &options))?;
                    let answer: EmbedContentResponse = self.send_for_json(call, url, body).await?;
                    (vec![answer.embedding.values], answer.usage.and_then(|u| u.prompt_tokens))
                }
                // Refused by `embedding_options` above.
                EmbeddingInput::Tokens(_) => (Vec::new(), None),
                EmbeddingInput::Many(texts) => self.embed_batches(&call, &path, texts, &options).await?,
            };
            Ok(EmbeddingsResponse {
                data: vectors
                    .into_iter()
                    .zip(0u32..)
                    .map(|(embedding, index)| Embedding { index, embedding })
                    .collect(),
                model: call.model.to_owned(),
                usage: tokens.map(|tokens| Usage::new(tokens, 0)),
                extra: Extra::new(),
            })
        })
    }
}
