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
//!   `frequency_penalty`, `presence_penalty` and `top_k` are translated; `user`, `metadata`,
//!   `stream_options`, `parallel_tool_calls`, `store`, `n: 1` and explicit nulls are ignored as
//!   harmless; any other field is `invalid_request` naming it.
//! - Answers: text parts are joined (thought summaries are left out); `functionCall` parts become
//!   tool calls with Gemini's own `id` when it sends one, otherwise `call_<n>`; `STOP` with tool
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
//! | `RESOURCE_EXHAUSTED` | `rate_limited`; `quota_exceeded` only when a `QuotaFailure` violation names a per-day quota (`quotaId` containing `PerDay`), which will not clear for hours |
//! | `UNAVAILABLE`, `INTERNAL`, `UNKNOWN`, `DATA_LOSS`, `ABORTED`, `CANCELLED` | `unavailable` |
//! | `DEADLINE_EXCEEDED` | `timeout` |
//! | `UNAUTHENTICATED`, `PERMISSION_DENIED`, any status with `ErrorInfo.reason` `API_KEY_INVALID` | `auth` |
//! | `NOT_FOUND` | `model_not_found` |
//! | `FAILED_PRECONDITION` (billing not enabled, free tier unavailable in the region) | `quota_exceeded`: this account cannot serve until an operator acts, but another target can |
//! | `INVALID_ARGUMENT` saying "The input token count (N) exceeds the maximum number of tokens allowed (M)" | `context_length` (Gemini gives no code for it, so the message is matched narrowly) |
//! | other `INVALID_ARGUMENT`, `OUT_OF_RANGE` | `invalid_request` |
//!
//! The wait comes from `retry-after` headers when present, otherwise from the
//! `google.rpc.RetryInfo` detail's `retryDelay` (`"30s"`, `"1.5s"`).

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use futures_core::Stream;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchyard::chat::{
    ChatChunk, ChatRequest, ChatResponse, Choice, ChunkChoice, CompletionTokensDetails, Content, ContentPart,
    Delta, Dialect, Embedding, EmbeddingInput, EmbeddingsRequest, EmbeddingsResponse, Extra, FinishReason,
    FunctionCall, FunctionCallDelta, Message, ResponseFormat, Role, ToolCall, ToolCallDelta, ToolChoice,
    Usage,
};
use switchyard::credential::Secret;
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::ratelimit::parse_duration;
use switchyard::{ErrorKind, ProviderError};
use tokio::time::Instant;

use crate::http;
use crate::sse::{SseEvent, SseStream};
use crate::{BuildError, ProviderSettings};

/// The thought signature Google documents for function calls that Gemini did not sign in this
/// conversation (replayed from a client or another model). Gemini 3 rejects unsigned calls.
pub const SKIP_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

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
        let mut headers = HeaderMap::new();
        for (name, value) in &settings.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| BuildError::InvalidHeader(name.clone()))?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| BuildError::InvalidHeader(name.clone()))?;
            value.set_sensitive(true);
            headers.append(header, value);
        }
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
        let mut headers = self.headers.clone();
        // Over any configured header of the same name: the body is JSON, the key the router chose.
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        http::trace(&mut headers, &call);
        if let Some(key) = call.credential.key() {
            let mut value = HeaderValue::from_str(key.expose()).map_err(|_| {
                ProviderError::new(
                    ErrorKind::Auth,
                    "the API key holds characters that cannot go in an HTTP header",
                )
            })?;
            value.set_sensitive(true);
            headers.insert("x-goog-api-key", value);
        }
        let request = http::post(http::parse_uri(url)?, headers, body);
        let response = http::until(deadline, self.client.send(request)).await?;
        let limits = http::observe_limits(&response, call.rate_limits);
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(response);
        }
        let retry_after = http::retry_after(status, &limits);
        let body = http::read_error_body_until(response, deadline).await;
        Err(classify_http_error(status, &body, retry_after, &Redactor::of(call)))
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

impl Provider for GeminiProvider {
    fn kind(&self) -> &str {
        "gemini"
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
            let body = encode(&request_body(request)?)?;
            let answer: GenerateContentResponse = self.send_for_json(call, url, body).await?;
            if let Some(error) = &answer.error {
                let status = error.http_status().unwrap_or(200);
                return Err(classify_google_error(status, error, None, &Redactor::of(call)));
            }
            chat_response(answer, call.model)
        })
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async move {
            let url = format!("{}?alt=sse", self.url(call.model, "streamGenerateContent")?);
            let body = encode(&request_body(request)?)?;
            // No total timeout on a stream: the router's first-byte, idle and total govern it.
            let response = self.send(call, url, body, None).await?;
            let events = SseStream::new(http::body_stream(response));
            let chunks = GeminiChunks::new(events, call.model, Redactor::of(call));
            Ok(Box::pin(chunks) as ChunkStream)
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
            let vectors = match &request.input {
                EmbeddingInput::One(text) => {
                    let url = self.url(call.model, "embedContent")?;
                    let body = encode(&embed_request(text, None, &options))?;
                    let answer: EmbedContentResponse = self.send_for_json(call, url, body).await?;
                    vec![answer.embedding.values]
                }
                EmbeddingInput::Many(texts) => {
                    if texts.is_empty() {
                        return Err(invalid_request("input: give at least one text to embed"));
                    }
                    let requests: Vec<Value> =
                        texts.iter().map(|text| embed_request(text, Some(&path), &options)).collect();
                    let url = self.url(call.model, "batchEmbedContents")?;
                    let body = encode(&json!({ "requests": requests }))?;
                    let answer: BatchEmbedContentsResponse = self.send_for_json(call, url, body).await?;
                    if answer.embeddings.len() != texts.len() {
                        return Err(ProviderError::new(
                            ErrorKind::MalformedResponse,
                            format!(
                                "batchEmbedContents returned {} vectors for {} inputs",
                                answer.embeddings.len(),
                                texts.len()
                            ),
                        ));
                    }
                    answer.embeddings.into_iter().map(|e| e.values).collect()
                }
            };
            Ok(EmbeddingsResponse {
                data: vectors
                    .into_iter()
                    .zip(0u32..)
                    .map(|(embedding, index)| Embedding { index, embedding })
                    .collect(),
                model: call.model.to_owned(),
                usage: None,
                extra: Extra::new(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Request translation
// ---------------------------------------------------------------------------------------------

/// An `invalid_request` error with `detail`, which names the field at fault.
fn invalid_request(detail: impl Into<String>) -> ProviderError {
    // Nothing has been sent: another target may take the request as it is.
    ProviderError::unsupported(detail)
}

/// Serialises a request body to JSON bytes; a failure is the caller's `invalid_request`.
fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(body)
        .map_err(|error| invalid_request(format!("the request could not be encoded as JSON: {error}")))
}

/// The resource path of a model: `models/{model}`, or the name as given when it already is a
/// resource name (`models/...`, `tunedModels/...`). Names that could break out of the path are
/// refused.
fn model_path(model: &str) -> Result<String, ProviderError> {
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

/// The `generateContent` body for `request`.
fn request_body(request: &ChatRequest) -> Result<Map<String, Value>, ProviderError> {
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
        translate_foreign_extra(request, &mut generation)?;
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
    for (i, message) in messages.iter().enumerate() {
        let (role, parts) = match message.role {
            Role::System | Role::Developer => {
                system.extend(system_parts(message, i)?);
                continue;
            }
            Role::User => ("user", user_parts(message, i)?),
            Role::Assistant => ("model", model_parts(message, i)?),
            Role::Tool => ("user", vec![function_response(messages, i)?]),
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
    let mut parts = Vec::new();
    match &message.content {
        None => {}
        Some(Content::Text(text)) => parts.push(json!({ "text": text })),
        Some(Content::Parts(items)) => {
            for (j, item) in items.iter().enumerate() {
                match item {
                    ContentPart::Text { text } => parts.push(json!({ "text": text })),
                    ContentPart::ImageUrl { .. } => {
                        return Err(invalid_request(format!(
                            "messages[{i}].content[{j}]: Gemini takes no images in system instructions"
                        )));
                    }
                    ContentPart::Other(_) => return Err(untranslatable(item, i, j)),
                }
            }
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
    let mut parts = Vec::new();
    match &message.content {
        Some(Content::Text(text)) if !text.is_empty() => parts.push(json!({ "text": text })),
        None | Some(Content::Text(_)) => {}
        Some(Content::Parts(items)) => {
            for (j, item) in items.iter().enumerate() {
                match item {
                    ContentPart::Text { text } => parts.push(json!({ "text": text })),
                    ContentPart::ImageUrl { .. } => {
                        return Err(invalid_request(format!(
                            "messages[{i}].content[{j}]: Gemini takes no images in model turns"
                        )));
                    }
                    ContentPart::Other(_) => return Err(untranslatable(item, i, j)),
                }
            }
        }
    }
    for (j, call) in message.tool_calls.iter().enumerate() {
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
    let name = tool_name(messages, i)?;
    let text = message.text_content().unwrap_or_default();
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => object,
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
fn translate_foreign_extra(
    request: &ChatRequest,
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
            _ if value.is_null() => {}
            "user" | "metadata" | "stream_options" | "parallel_tool_calls" | "store" => {}
            "n" if value.as_u64() == Some(1) => {}
            "max_completion_tokens" if request.max_tokens.is_none() => number("maxOutputTokens", generation)?,
            "max_completion_tokens" => {}
            "frequency_penalty" => number("frequencyPenalty", generation)?,
            "presence_penalty" => number("presencePenalty", generation)?,
            "top_k" => number("topK", generation)?,
            _ => {
                return Err(invalid_request(format!(
                    "field `{key}` has no Gemini equivalent; remove it or route the request to a provider of its dialect"
                )));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

/// `GenerateContentResponse`, as much of it as Switchyard reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerateContentResponse {
    /// `candidates[]`, one per answer (Gemini returns one); empty when the prompt was blocked.
    #[serde(default)]
    candidates: Vec<Candidate>,
    /// `promptFeedback`: why the prompt was blocked, when it was.
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    /// `usageMetadata`, repeated on every stream event; the last one counts.
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    /// `modelVersion`, the model that answered; the canonical `model` when present.
    #[serde(default)]
    model_version: Option<String>,
    /// `responseId`, passed through as the answer's id; `None` leaves the id empty.
    #[serde(default)]
    response_id: Option<String>,
    /// Streams may carry an error in place of an answer.
    #[serde(default)]
    error: Option<GoogleError>,
}

/// One entry of `candidates[]`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    /// `content`; `None` when a filter withheld it.
    #[serde(default)]
    content: Option<CandidateContent>,
    /// Gemini `finishReason` (`STOP`, `MAX_TOKENS`, `SAFETY`, ...); `None` until the last
    /// stream event of the candidate.
    #[serde(default)]
    finish_reason: Option<String>,
    /// `index` of the candidate; `None` reads as its position (0 in streams).
    #[serde(default)]
    index: Option<u32>,
}

/// `candidates[].content`; its `role` (always `model`) is not read.
#[derive(Debug, Default, Deserialize)]
struct CandidateContent {
    /// `parts[]`: text, thoughts, function calls; empty when missing.
    #[serde(default)]
    parts: Vec<Part>,
}

/// One part of an answer. Parts of other kinds (`inlineData`, `executableCode`, a lone
/// `thoughtSignature`) read as a part with neither text nor call.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    /// `text`; `None` for parts that are not text.
    #[serde(default)]
    text: Option<String>,
    /// A thought summary, not part of the answer.
    #[serde(default)]
    thought: bool,
    /// `functionCall`, a whole tool call (Gemini never splits one across events).
    #[serde(default)]
    function_call: Option<GeminiFunctionCall>,
}

/// `parts[].functionCall`.
#[derive(Debug, Default, Deserialize)]
struct GeminiFunctionCall {
    /// The call's `id`, sent by newer models only; without it the adapter makes `call_<n>`.
    #[serde(default)]
    id: Option<String>,
    /// The called function's `name`; required.
    name: String,
    /// `args`, the arguments as a JSON object; `None` reads as `{}`.
    #[serde(default)]
    args: Option<Value>,
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
struct UsageMetadata {
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
    /// Thinking counts as completion, as OpenAI counts reasoning tokens.
    fn to_usage(&self) -> Usage {
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
    fn prompt_block(&self) -> Option<&str> {
        if !self.candidates.is_empty() {
            return None;
        }
        self.prompt_feedback.as_ref()?.block_reason.as_deref()
    }
}

/// The canonical reason for Gemini's `finishReason`.
fn finish_reason(reason: &str, has_tool_calls: bool) -> FinishReason {
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

/// The text and the tool calls of a candidate. Tool-call ids are Gemini's when it sends them,
/// else `call_<n>` with `n` counted by `next_id` across the whole answer.
fn read_parts(parts: &[Part], next_id: &mut u32) -> (String, Vec<ToolCall>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for part in parts {
        if let Some(piece) = part.text.as_deref().filter(|_| !part.thought) {
            text.push_str(piece);
        }
        if let Some(call) = &part.function_call {
            let id = call.id.clone().filter(|id| !id.is_empty()).unwrap_or_else(|| format!("call_{next_id}"));
            *next_id += 1;
            let arguments = call.args.as_ref().map_or_else(|| "{}".to_owned(), Value::to_string);
            calls.push(ToolCall {
                id,
                kind: "function".to_owned(),
                function: FunctionCall { name: call.name.clone(), arguments },
            });
        }
    }
    (text, calls)
}

/// Seconds since the Unix epoch, for `created`: Gemini does not say when it answered.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The canonical answer of a `generateContent` answer. A blocked prompt is one empty choice
/// with finish reason `content_filter`; an answer with neither candidates nor a block reason
/// is malformed. `model` is used when the answer names no `modelVersion`.
fn chat_response(answer: GenerateContentResponse, model: &str) -> Result<ChatResponse, ProviderError> {
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
    let mut next_id = 0;
    for (position, candidate) in answer.candidates.iter().enumerate() {
        let parts = candidate.content.as_ref().map_or(&[][..], |content| &content.parts[..]);
        let (text, tool_calls) = read_parts(parts, &mut next_id);
        let finish = candidate.finish_reason.as_deref().map(|r| finish_reason(r, !tool_calls.is_empty()));
        let content =
            if text.is_empty() && !tool_calls.is_empty() { None } else { Some(Content::Text(text)) };
        choices.push(Choice {
            index: candidate.index.unwrap_or(u32::try_from(position).unwrap_or(u32::MAX)),
            message: Message { content, tool_calls, ..Message::assistant("") },
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
    })
}

/// Parses a 2xx body; a body that is not the expected JSON is a malformed response, and an
/// error object inside a 2xx is classified like any other error.
fn parse_success<T: serde::de::DeserializeOwned>(
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

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

/// Turns Gemini's SSE events (each a whole `GenerateContentResponse`) into canonical chunks:
/// a role chunk first, then text and complete tool calls, then a finish chunk with usage.
/// Gemini sends no `[DONE]`: a body that ends before any finish reason is a broken stream.
struct GeminiChunks<S> {
    /// The SSE events of the body.
    events: SseStream<S>,
    /// The model on every chunk: the upstream model asked for, replaced by the answer's
    /// `modelVersion` once one arrives.
    model: String,
    /// Cuts the key out of error texts.
    redactor: Redactor,
    /// Chunks (or the final error) made and not yet yielded: one event can make several.
    ready: VecDeque<Result<ChatChunk, ProviderError>>,
    /// Non-SSE lines so far: some Gemini failures arrive as raw (pretty-printed) error JSON.
    stray: String,
    /// The first `responseId` seen, on every later chunk; empty before it.
    id: String,
    /// The role chunk was made.
    started: bool,
    /// A finish reason (or a prompt block) was seen: the answer is complete, and the body may
    /// end.
    finished: bool,
    /// Nothing more is read: the body ended or the stream failed.
    done: bool,
    /// Tool calls seen per candidate index, for `ToolCallDelta::index`.
    tool_calls_per_choice: Vec<(u32, u32)>,
    /// Tool calls seen in the whole stream, for `call_<n>` ids.
    next_id: u32,
}

impl<S> GeminiChunks<S> {
    /// The chunks of `events`, an answer of the upstream `model`.
    fn new(events: SseStream<S>, model: &str, redactor: Redactor) -> Self {
        Self {
            events,
            model: model.to_owned(),
            redactor,
            ready: VecDeque::new(),
            stray: String::new(),
            id: String::new(),
            started: false,
            finished: false,
            done: false,
            tool_calls_per_choice: Vec::new(),
            next_id: 0,
        }
    }

    /// Ends the stream with `error`, after the chunks already made.
    fn fail(&mut self, error: ProviderError) {
        self.ready.push_back(Err(error));
        self.done = true;
    }

    /// A chunk of this answer with `choices` and `usage`, stamped with the current time.
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            model: self.model.clone(),
            created: unix_now(),
            choices,
            usage,
            extra: Extra::new(),
            verbatim: None,
        }
    }

    /// Makes the chunks of one event: the role chunk (first event only), then one with each
    /// candidate's new text and tool calls, then one with the finish reasons and usage. An
    /// event that is an error, or not JSON, fails the stream.
    fn on_event(&mut self, event: &SseEvent) {
        let answer: GenerateContentResponse = match serde_json::from_str(&event.data) {
            Ok(answer) => answer,
            Err(error) => {
                let failure = match parse_google_error(&event.data) {
                    Some(google) => classify_google_error(
                        google.http_status().unwrap_or(500),
                        &google,
                        None,
                        &self.redactor,
                    ),
                    None => {
                        let detail = format!(
                            "a stream event is not the JSON expected ({error}): {}",
                            http::excerpt(&event.data)
                        );
                        ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail))
                    }
                };
                return self.fail(failure);
            }
        };
        if let Some(error) = &answer.error {
            let status = error.http_status().unwrap_or(500);
            return self.fail(classify_google_error(status, error, None, &self.redactor));
        }
        if self.id.is_empty() {
            self.id = answer.response_id.clone().unwrap_or_default();
        }
        if let Some(version) = answer.model_version.as_ref().filter(|v| !v.is_empty()) {
            self.model.clone_from(version);
        }
        if !self.started {
            self.started = true;
            let mut indexes: Vec<u32> = answer.candidates.iter().map(|c| c.index.unwrap_or(0)).collect();
            if indexes.is_empty() {
                indexes.push(0);
            }
            let choices = indexes
                .into_iter()
                .map(|index| ChunkChoice {
                    index,
                    delta: Delta { role: Some(Role::Assistant), ..Delta::default() },
                    finish_reason: None,
                })
                .collect();
            let role = self.chunk(choices, None);
            self.ready.push_back(Ok(role));
        }
        let usage = answer.usage_metadata.as_ref().map(UsageMetadata::to_usage);
        if answer.prompt_block().is_some() {
            self.finished = true;
            let finish =
                ChunkChoice { finish_reason: Some(FinishReason::ContentFilter), ..ChunkChoice::default() };
            let chunk = self.chunk(vec![finish], usage);
            self.ready.push_back(Ok(chunk));
            return;
        }
        let mut content = Vec::new();
        let mut finishes = Vec::new();
        for candidate in &answer.candidates {
            let index = candidate.index.unwrap_or(0);
            let parts = candidate.content.as_ref().map_or(&[][..], |content| &content.parts[..]);
            let (text, calls) = read_parts(parts, &mut self.next_id);
            let seen = self.tool_calls_seen(index);
            let deltas: Vec<ToolCallDelta> = calls
                .into_iter()
                .zip(*seen..)
                .map(|(call, position)| ToolCallDelta {
                    index: position,
                    id: Some(call.id),
                    kind: Some(call.kind),
                    function: Some(FunctionCallDelta {
                        name: Some(call.function.name),
                        arguments: Some(call.function.arguments),
                    }),
                })
                .collect();
            *seen += u32::try_from(deltas.len()).unwrap_or(u32::MAX);
            let had_tool_calls = *seen > 0;
            if !text.is_empty() || !deltas.is_empty() {
                let text = (!text.is_empty()).then_some(text);
                content.push(ChunkChoice {
                    index,
                    delta: Delta { role: None, content: text, tool_calls: deltas, refusal: None },
                    finish_reason: None,
                });
            }
            if let Some(reason) = &candidate.finish_reason {
                finishes.push(ChunkChoice {
                    index,
                    delta: Delta::default(),
                    finish_reason: Some(finish_reason(reason, had_tool_calls)),
                });
            }
        }
        if !content.is_empty() {
            let chunk = self.chunk(content, None);
            self.ready.push_back(Ok(chunk));
        }
        if !finishes.is_empty() {
            self.finished = true;
            let chunk = self.chunk(finishes, usage);
            self.ready.push_back(Ok(chunk));
        } else if answer.candidates.is_empty() && self.finished && usage.is_some() {
            // A usage-only event after the finish: pass the final count on.
            let chunk = self.chunk(Vec::new(), usage);
            self.ready.push_back(Ok(chunk));
        }
    }

    /// The count of tool calls candidate `index` has streamed so far (the next call's
    /// `ToolCallDelta::index`), starting at 0.
    fn tool_calls_seen(&mut self, index: u32) -> &mut u32 {
        let position = match self.tool_calls_per_choice.iter().position(|(i, _)| *i == index) {
            Some(position) => position,
            None => {
                self.tool_calls_per_choice.push((index, 0));
                self.tool_calls_per_choice.len() - 1
            }
        };
        &mut self.tool_calls_per_choice[position].1
    }

    /// Collects non-SSE lines; once they form a Google error object, the stream fails with it.
    fn take_stray(&mut self) {
        for line in self.events.take_stray() {
            self.stray.push_str(&line);
            self.stray.push('\n');
        }
        if self.stray.is_empty() || self.done {
            return;
        }
        if let Some(error) = parse_google_error(&self.stray) {
            let status = error.http_status().unwrap_or(500);
            let error = classify_google_error(status, &error, None, &self.redactor);
            self.fail(error);
        } else if self.stray.len() > http::ERROR_BODY_LIMIT {
            let detail = format!("the stream holds text that is not SSE: {}", http::excerpt(&self.stray));
            let error = ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail));
            self.fail(error);
        }
    }

    /// The body ended: a clean end after a finish reason; otherwise leftover non-SSE text is a
    /// malformed response, and a missing finish reason a transport error (a cut stream).
    fn on_end(&mut self) {
        if self.done {
            return;
        }
        if !self.stray.is_empty() {
            let detail = format!("the stream holds text that is not SSE: {}", http::excerpt(&self.stray));
            let error = ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail));
            return self.fail(error);
        }
        if !self.finished {
            return self
                .fail(ProviderError::new(ErrorKind::Transport, "stream ended before a finish reason"));
        }
        self.done = true;
    }
}

impl<S, E> Stream for GeminiChunks<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: fmt::Display,
{
    type Item = Result<ChatChunk, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(item) = this.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.done {
                return Poll::Ready(None);
            }
            let polled = Pin::new(&mut this.events).poll_next(cx);
            match polled {
                Poll::Ready(Some(Ok(event))) => {
                    this.on_event(&event);
                    this.take_stray();
                }
                Poll::Ready(Some(Err(error))) if this.finished => {
                    // The answer is complete; a connection that breaks while closing costs nothing.
                    tracing::debug!(%error, "gemini stream broke after its finish reason");
                    this.done = true;
                }
                Poll::Ready(Some(Err(error))) => {
                    let detail = this.redactor.clean(error.detail());
                    this.fail(ProviderError::new(error.kind(), detail));
                }
                Poll::Ready(None) => {
                    this.take_stray();
                    this.on_end();
                }
                Poll::Pending => {
                    this.take_stray();
                    if this.ready.is_empty() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// The `error` of a `google.rpc.Status` body.
#[derive(Debug, Default, Deserialize)]
struct GoogleError {
    /// `code`, the HTTP status (a number, or a numeric string from some proxies).
    #[serde(default)]
    code: Option<Value>,
    /// `message`, human-readable; empty when missing.
    #[serde(default)]
    message: String,
    /// `status`, the `google.rpc.Code` name (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`, ...);
    /// what classification reads first.
    #[serde(default)]
    status: Option<String>,
    /// `details[]`, typed payloads (`RetryInfo`, `ErrorInfo`, `QuotaFailure`, ...) by `@type`.
    #[serde(default)]
    details: Vec<Value>,
}

impl GoogleError {
    /// The HTTP status the error names (a number, or a numeric string in some proxies).
    fn http_status(&self) -> Option<u16> {
        match self.code.as_ref()? {
            Value::Number(number) => number.as_u64().and_then(|n| u16::try_from(n).ok()),
            Value::String(text) => text.parse().ok(),
            _ => None,
        }
    }
}

/// What the `details` of an error say, by payload type.
#[derive(Debug, Default)]
struct ErrorDetails {
    /// `google.rpc.RetryInfo.retryDelay`.
    retry_delay: Option<Duration>,
    /// `google.rpc.ErrorInfo.reason`s.
    reasons: Vec<String>,
    /// `google.rpc.QuotaFailure` violations' `quotaId`s.
    quota_ids: Vec<String>,
}

impl ErrorDetails {
    /// Reads the `RetryInfo`, `ErrorInfo` and `QuotaFailure` payloads of `details`; others are
    /// skipped.
    fn read(details: &[Value]) -> Self {
        let mut read = ErrorDetails::default();
        for detail in details {
            let kind = detail.get("@type").and_then(Value::as_str).unwrap_or_default();
            match kind.rsplit('/').next().unwrap_or_default() {
                "google.rpc.RetryInfo" => {
                    read.retry_delay =
                        detail.get("retryDelay").and_then(Value::as_str).and_then(parse_duration);
                }
                "google.rpc.ErrorInfo" => {
                    if let Some(reason) = detail.get("reason").and_then(Value::as_str) {
                        read.reasons.push(reason.to_owned());
                    }
                }
                "google.rpc.QuotaFailure" => {
                    let violations = detail.get("violations").and_then(Value::as_array);
                    for violation in violations.into_iter().flatten() {
                        if let Some(id) = violation.get("quotaId").and_then(Value::as_str) {
                            read.quota_ids.push(id.to_owned());
                        }
                    }
                }
                _ => {}
            }
        }
        read
    }

    /// A daily quota is spent: it refills at the day's reset, not in seconds, so waiting on the
    /// same target is pointless. Per-minute quotas (and 429s without details) are rate limits.
    fn daily_quota_spent(&self) -> bool {
        self.quota_ids.iter().any(|id| id.contains("PerDay"))
    }
}

/// `{"error": {...}}`, or the one-element array form some Google front ends send.
fn parse_google_error(body: &str) -> Option<GoogleError> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let value = match value {
        Value::Array(mut items) if items.len() == 1 => items.pop()?,
        other => other,
    };
    let error = value.as_object()?.get("error")?;
    serde_json::from_value(error.clone()).ok()
}

/// Whether an `INVALID_ARGUMENT` is the prompt-too-long one. Gemini gives it no code, so this
/// matches the documented message ("The input token count (N) exceeds the maximum number of
/// tokens allowed (M)") narrowly.
fn is_token_limit(message: &str) -> bool {
    message.contains("input token count") && message.contains("exceeds the maximum number of tokens")
}

/// Classifies an error answer with HTTP `status` and `body`.
fn classify_http_error(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    redactor: &Redactor,
) -> ProviderError {
    if let Some(error) = parse_google_error(body) {
        return classify_google_error(status, &error, retry_after, redactor);
    }
    let detail = if body.trim().is_empty() {
        format!("HTTP {status} with an empty body")
    } else {
        redactor.clean(&http::excerpt(body))
    };
    let error = ProviderError::new(http::status_kind(status), detail).with_status(status);
    match retry_after {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    }
}

/// Classifies a `google.rpc.Status` error (see the module docs' table): `API_KEY_INVALID` is
/// `auth` whatever the status string, an unknown status string falls back to the HTTP
/// `status`. The wait is `retry_after` (from headers), else the `RetryInfo` delay.
fn classify_google_error(
    status: u16,
    error: &GoogleError,
    retry_after: Option<Duration>,
    redactor: &Redactor,
) -> ProviderError {
    let details = ErrorDetails::read(&error.details);
    let code = error.status.as_deref().unwrap_or_default();
    let kind = if details.reasons.iter().any(|reason| reason == "API_KEY_INVALID") {
        ErrorKind::Auth
    } else {
        match code {
            "RESOURCE_EXHAUSTED" if details.daily_quota_spent() => ErrorKind::QuotaExceeded,
            "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
            "UNAVAILABLE" | "INTERNAL" | "UNKNOWN" | "DATA_LOSS" | "ABORTED" | "CANCELLED" => {
                ErrorKind::Unavailable
            }
            "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
            "UNAUTHENTICATED" | "PERMISSION_DENIED" => ErrorKind::Auth,
            "NOT_FOUND" => ErrorKind::ModelNotFound,
            "FAILED_PRECONDITION" => ErrorKind::QuotaExceeded,
            "INVALID_ARGUMENT" | "OUT_OF_RANGE" if is_token_limit(&error.message) => ErrorKind::ContextLength,
            "INVALID_ARGUMENT" | "OUT_OF_RANGE" => ErrorKind::InvalidRequest,
            _ => http::status_kind(status),
        }
    };
    let mut detail = http::excerpt(&error.message);
    if !details.reasons.is_empty() {
        detail.push_str(&format!(" (reason {})", details.reasons.join(", ")));
    }
    if !details.quota_ids.is_empty() {
        detail.push_str(&format!(" (quota {})", details.quota_ids.join(", ")));
    }
    let mut classified = ProviderError::new(kind, redactor.clean(&detail)).with_status(status);
    if !code.is_empty() {
        classified = classified.with_code(code);
    }
    match retry_after.or(details.retry_delay) {
        Some(wait) => classified.with_retry_after(wait),
        None => classified,
    }
}

/// Removes the call's key from provider text before it enters an error, in case an upstream
/// or proxy ever echoes it.
struct Redactor(Option<Secret>);

impl Redactor {
    /// A redactor for the key of `call`'s credential (none when it has no key).
    fn of(call: Call<'_>) -> Self {
        Redactor(call.credential.key().cloned())
    }

    /// `text` with every occurrence of the key replaced.
    fn clean(&self, text: &str) -> String {
        self.0.as_ref().map_or_else(|| text.to_owned(), |key| key.redact(text).into_owned())
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------------

/// The answer of `embedContent`.
#[derive(Debug, Deserialize)]
struct EmbedContentResponse {
    /// `embedding`, the one vector; required.
    embedding: ContentEmbedding,
}

/// The answer of `batchEmbedContents`.
#[derive(Debug, Deserialize)]
struct BatchEmbedContentsResponse {
    /// `embeddings[]`, one per request in the same order; their count is checked against the
    /// inputs.
    #[serde(default)]
    embeddings: Vec<ContentEmbedding>,
}

/// `ContentEmbedding`, one vector.
#[derive(Debug, Deserialize)]
struct ContentEmbedding {
    /// `values`, the vector; missing reads as empty.
    #[serde(default)]
    values: Vec<f32>,
}

/// Per-request embedding options: `outputDimensionality` from `dimensions`, and Gemini's own
/// `taskType` / `title` when given in `extra`. OpenAI's `user` and `encoding_format: float` are
/// harmless; anything else is refused.
fn embedding_options(request: &EmbeddingsRequest) -> Result<Map<String, Value>, ProviderError> {
    let mut options = Map::new();
    if let Some(dimensions) = request.dimensions {
        options.insert("outputDimensionality".into(), json!(dimensions));
    }
    for (key, value) in &request.extra {
        match key.as_str() {
            _ if value.is_null() => {}
            "user" => {}
            "encoding_format" if value == "float" => {}
            "taskType" | "title" => {
                options.insert(key.clone(), value.clone());
            }
            _ => {
                return Err(invalid_request(format!(
                    "field `{key}` has no Gemini embeddings equivalent; remove it"
                )));
            }
        }
    }
    Ok(options)
}

/// One `EmbedContentRequest`; `model` (the resource name) only inside a batch.
fn embed_request(text: &str, model: Option<&str>, options: &Map<String, Value>) -> Value {
    let mut request = Map::new();
    if let Some(model) = model {
        request.insert("model".into(), json!(model));
    }
    request.insert("content".into(), json!({ "parts": [{ "text": text }] }));
    request.extend(options.iter().map(|(k, v)| (k.clone(), v.clone())));
    Value::Object(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::chat::{FunctionDefinition, Tool};

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
        let call = |name: &str| ToolCall {
            id: "call_0".into(),
            kind: "function".into(),
            function: FunctionCall { name: name.into(), arguments: "{}".into() },
        };
        let assistant = |name: &str| Message { tool_calls: vec![call(name)], ..Message::assistant("") };
        let result = Message { tool_call_id: Some("call_0".into()), ..Message::text(Role::Tool, "ok") };
        let messages = vec![assistant("first"), result.clone(), assistant("second"), result];
        assert_eq!(tool_name(&messages, 1).unwrap(), "first");
        assert_eq!(tool_name(&messages, 3).unwrap(), "second");
        let orphan = vec![Message { tool_call_id: Some("nope".into()), ..Message::text(Role::Tool, "x") }];
        assert!(tool_name(&orphan, 0).unwrap_err().detail().contains("messages[0].tool_call_id `nope`"));
    }

    #[test]
    fn only_per_day_quota_failures_are_quota_exceeded() {
        let body = |quota_id: &str| {
            json!({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": quota_id}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
            ]}})
            .to_string()
        };
        let none = Redactor(None);
        let daily =
            classify_http_error(429, &body("GenerateRequestsPerDayPerProjectPerModel-FreeTier"), None, &none);
        assert_eq!(daily.kind(), ErrorKind::QuotaExceeded);
        let minute =
            classify_http_error(429, &body("GenerateRequestsPerMinutePerProjectPerModel"), None, &none);
        assert_eq!(minute.kind(), ErrorKind::RateLimited);
        assert_eq!(minute.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(minute.code(), Some("RESOURCE_EXHAUSTED"));
    }

    #[test]
    fn google_errors_are_read_from_objects_and_one_element_arrays() {
        let error = json!({ "error": { "code": 503, "message": "busy", "status": "UNAVAILABLE" } });
        for body in [error.to_string(), json!([error]).to_string()] {
            let parsed = parse_google_error(&body).unwrap();
            assert_eq!(parsed.http_status(), Some(503));
            assert_eq!(parsed.status.as_deref(), Some("UNAVAILABLE"));
        }
        assert!(parse_google_error("{\"candidates\": []}").is_none());
        assert!(parse_google_error("not json").is_none());
    }

    #[test]
    fn foreign_fields_are_translated_ignored_or_refused_by_name() {
        let mut request = ChatRequest::new("m", vec![Message::user("hi")]);
        request.extra.insert("user".into(), json!("u-1"));
        request.extra.insert("n".into(), json!(1));
        request.extra.insert("top_k".into(), json!(40));
        request.extra.insert("max_completion_tokens".into(), json!(99));
        let body = request_body(&request).unwrap();
        assert_eq!(body["generationConfig"], json!({ "topK": 40, "maxOutputTokens": 99 }));
        request.extra.insert("logit_bias".into(), json!({}));
        let error = request_body(&request).unwrap_err();
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
        let body = request_body(&request).unwrap();
        assert_eq!(body["generationConfig"], json!({ "temperature": 0.5, "topK": 3 }));
        assert_eq!(
            body["tools"],
            json!([{ "functionDeclarations": [{ "name": "f" }] }, { "googleSearch": {} }])
        );
        assert_eq!(body["safetySettings"], json!([]));
    }
}
