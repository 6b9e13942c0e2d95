//! Anthropic's Messages API (`POST {base}/v1/messages`): the provider adapter, and the
//! Anthropic-dialect [`codec`] the gateway uses to serve Anthropic clients.
//!
//! ```no_run
//! use switchyard_providers::anthropic::AnthropicProvider;
//! use switchyard_providers::{ProviderKind, ProviderSettings};
//!
//! let mut settings = ProviderSettings::new(ProviderKind::Anthropic);
//! settings.headers.push(("anthropic-beta".into(), "context-1m-2025-08-07".into()));
//! let provider = AnthropicProvider::new(&settings).unwrap();
//! ```
//!
//! Translation rules live in `request.rs` (canonical → Anthropic), `response.rs` and
//! `stream.rs` (Anthropic → canonical), classification in `classify.rs`, wire shapes in
//! `wire.rs`.

pub(crate) mod assemble;
mod classify;
pub mod codec;
pub(crate) mod past_thinking;
mod request;
mod response;
mod restyle;
pub(crate) mod stream;
pub(crate) mod strict;
mod thinking;
mod wire;

use ::http::Uri;
use ::http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use switchyard::chat::{ChatRequest, ChatResponse, Dialect, TokenCount, Verbatim};
use switchyard::credential::Secret;
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::{ErrorKind, ProviderError};

pub(crate) use request::json_mode;
pub use request::{DEFAULT_MAX_TOKENS, VERBATIM_BLOCKS, default_max_tokens, sendable_thinking};
pub use response::VERBATIM_USAGE;
pub use thinking::{ThinkingStyle, tool_turn_without_its_thinking};

pub(crate) use classify::messages_error;

use crate::sse::SseStream;
use crate::verbatim::{self, Edit};
use crate::{BuildError, ProviderSettings, http};
use restyle::Restyled;

/// The members of a Messages request that token counting takes (it refuses `max_tokens`,
/// `stream` and the sampling parameters).
const COUNTED: [&str; 6] = ["model", "messages", "system", "tools", "tool_choice", "thinking"];

/// The `anthropic-version` sent when the settings name none.
pub const DEFAULT_API_VERSION: &str = "2023-06-01";

/// The Anthropic adapter: one connection pool, the endpoint and the fixed headers.
#[derive(Debug)]
pub struct AnthropicProvider {
    /// This provider's own connection pools.
    client: http::HttpClient,
    /// The resolved base URL, without a trailing slash; reported by [`Provider::base_url`].
    base_url: String,
    /// `{base}/v1/messages`, parsed once.
    endpoint: Uri,
    /// `{base}/v1/messages/count_tokens`, parsed once.
    count_endpoint: Uri,
    /// `content-type`, `anthropic-version` and the configured extra headers (marked
    /// sensitive); the key is added per call as `x-api-key`.
    headers: HeaderMap,
    /// The client's headers this provider passes on: `anthropic-beta` and
    /// `idempotency-key`, and `anthropic-version` unless the configuration sets one.
    forwarded: &'static [&'static str],
    /// How a `reasoning_effort` asks the model to think; by the model's name when `None`.
    thinking: Option<ThinkingStyle>,
    /// Which of the client's `anthropic-beta` flags go on.
    betas: crate::BetaPolicy,
    /// The past thinking each model refused as not its own, left out of later requests.
    refused_thinking: past_thinking::Refused,
    /// The models that refused strict tool use lately ([`strict`]).
    refused_strict: strict::StrictRefusals,
}

impl AnthropicProvider {
    /// An adapter for `settings`: `base_url` (default `https://api.anthropic.com`; a trailing
    /// `/v1` is tolerated), `api_version` as `anthropic-version` (default
    /// [`DEFAULT_API_VERSION`]), and `headers` sent with every request, after the defaults, so
    /// that they can add `anthropic-beta` or override the version.
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        let base_url = settings.resolved_base_url()?;
        let endpoint = match base_url.strip_suffix("/v1") {
            Some(root) => format!("{root}/v1/messages"),
            None => format!("{base_url}/v1/messages"),
        };
        let count_endpoint = Uri::try_from(format!("{endpoint}/count_tokens"))
            .map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let endpoint = Uri::try_from(endpoint).map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let version = settings.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);
        let mut own = HeaderMap::new();
        own.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        own.insert(
            "anthropic-version",
            HeaderValue::from_str(version)
                .map_err(|_| BuildError::InvalidHeader("anthropic-version".into()))?,
        );
        let extra = settings.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        let headers = http::configured_headers(own, extra)?;
        // A version the configuration names wins over the client's; the default does not.
        let configured = settings.api_version.is_some()
            || settings.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("anthropic-version"));
        let forwarded: &'static [&'static str] = if configured {
            &["anthropic-beta", "idempotency-key"]
        } else {
            &["anthropic-beta", "anthropic-version", "idempotency-key"]
        };
        Ok(Self {
            client: http::HttpClient::new(&settings.http)?,
            base_url,
            endpoint,
            count_endpoint,
            headers,
            forwarded,
            thinking: settings.thinking,
            betas: settings.betas.clone(),
            refused_thinking: past_thinking::Refused::default(),
            refused_strict: strict::StrictRefusals::default(),
        })
    }

    /// Sends `body` and returns the response when it is a success; otherwise the classified
    /// error. The rate-limit headers of every response go to the call's sink.
    /// A body whose past thinking the target refuses as not its own is sent once more without
    /// it (see [`past_thinking`]), and one refused with the strict tool use the translation of
    /// `request` carried, without that (see [`strict`]).
    async fn send(
        &self,
        call: &Call<'_>,
        request: &ChatRequest,
        body: Vec<u8>,
    ) -> Result<(http::Response, Option<switchyard::chat::StreamNotice>), ProviderError> {
        let refused = (&self.refused_thinking, call.model, call.credential.id());
        let strict = (&self.refused_strict, call.model, strict::carried(request));
        strict::sent(bytes::Bytes::from(body), strict, |body| {
            past_thinking::sent(body, refused, |body| self.send_to(&self.endpoint, call, body))
        })
        .await
    }

    /// [`send`](Self::send) to `endpoint`.
    async fn send_to(
        &self,
        endpoint: &Uri,
        call: &Call<'_>,
        body: bytes::Bytes,
    ) -> Result<http::Response, ProviderError> {
        let key = call.credential.key();
        let filtered = self.betas.filter_forward(call.forward);
        let call = &Call { forward: filtered.as_deref().unwrap_or(call.forward), ..*call };
        let mut headers = http::call_headers(&self.headers, call, self.forwarded);
        if let Some(key) = key {
            headers.insert("x-api-key", http::key_value(key.expose())?);
        }
        let request = http::post_bytes(endpoint.clone(), headers, body);
        let classify = |status, body: &str, wait| classify::http_error(status, body, wait, key);
        self.client.exchange(request, call, None, classify).await
    }

    /// The serialized request body for Anthropic's own API.
    fn body(&self, call: &Call<'_>, request: &ChatRequest, stream: bool) -> Result<Vec<u8>, ProviderError> {
        messages_body(call.model, request, stream, self.thinking, Envelope::Anthropic)
    }
}

/// Where a Messages body goes, which decides how it names the model and the API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Envelope<'a> {
    /// Anthropic's own API: `model` in the body, the version in the `anthropic-version` header.
    Anthropic,
    /// A cloud that names the model in its URL and reads the version from the body's
    /// `anthropic_version` (Vertex AI: `vertex-2023-10-16`; Bedrock: `bedrock-2023-05-31`); the
    /// body has no `model`.
    Cloud {
        /// The body's `anthropic_version`.
        version: &'static str,
        /// Whether the body says `stream` (Vertex), or the endpoint does (Bedrock).
        stream_in_body: bool,
        /// The beta flags as the body's `anthropic_beta` (a JSON list), where the cloud takes
        /// them there (Bedrock); `None`: no `anthropic_beta` in the body.
        betas: Option<&'a str>,
    },
}

/// The serialized Messages body for `model` (serialized once, here): the client's own, with
/// the model and `stream` set, when it wrote in this dialect; else translated. A `reasoning_effort`
/// asks the model to think in `thinking` style (by its name when `None`). For a cloud
/// ([`Envelope::Cloud`]) the body is rewritten once: `model` left out, its `anthropic_version`,
/// `stream` and `anthropic_beta` written as the cloud takes them.
pub(crate) fn messages_body(
    model: &str,
    request: &ChatRequest,
    stream: bool,
    thinking: Option<ThinkingStyle>,
    envelope: Envelope<'_>,
) -> Result<Vec<u8>, ProviderError> {
    let body = messages_body_as_asked(model, request, stream, thinking, envelope)?;
    Ok(past_thinking::without_sealed_reasoning(body, request))
}

/// [`messages_body`], with whatever thinking blocks the client sent back.
fn messages_body_as_asked(
    model: &str,
    request: &ChatRequest,
    stream: bool,
    thinking: Option<ThinkingStyle>,
    envelope: Envelope<'_>,
) -> Result<Vec<u8>, ProviderError> {
    let stream_edit = if stream { Edit::Flag(true) } else { Edit::FalseIfPresent };
    let (translated, restyled);
    // A translated body's thinking was chosen as it was built: only a client's own is edited.
    let mut edits = (Edit::Keep, Edit::Keep, Edit::Keep);
    let body = match verbatim_body(request) {
        Some(body) => {
            restyled = restyle::restyled(request, model, thinking);
            edits = thinking_edits(request, &restyled);
            body.as_ref()
        }
        None => {
            translated =
                serde_json::to_vec(&request::build(model, request, stream, thinking)?).map_err(|error| {
                    ProviderError::new(
                        ErrorKind::InvalidRequest,
                        format!("the request could not be serialized: {error}"),
                    )
                })?;
            // The translated body names the model (its thinking is chosen by it) and says
            // `stream` already.
            if envelope == Envelope::Anthropic {
                return Ok(translated);
            }
            &translated[..]
        }
    };
    let (thinking, management, output_config) = edits;
    match envelope {
        Envelope::Anthropic => verbatim::rewrite(
            body,
            &[
                ("model", Edit::Text(model)),
                ("stream", stream_edit),
                ("thinking", thinking),
                ("context_management", management),
                ("output_config", output_config),
            ],
        ),
        Envelope::Cloud { version, stream_in_body, betas } => verbatim::rewrite(
            body,
            &[
                ("model", Edit::Remove),
                ("anthropic_version", Edit::Text(version)),
                ("stream", if stream_in_body { stream_edit } else { Edit::Remove }),
                ("anthropic_beta", betas.map_or(Edit::Remove, Edit::Raw)),
                ("thinking", thinking),
                ("context_management", management),
                ("output_config", output_config),
            ],
        ),
    }
}

/// The edits of a client's `thinking`, `context_management` and `output_config`: as written,
/// unless the thinking is restyled for the target model (`restyled`, see `restyle.rs`) or must
/// go ([`thinking_cannot_go_on`]); gone, a `context_management` that clears thinking (Claude
/// Code's `clear_thinking_20251015`, which Anthropic refuses without thinking) goes with it.
fn thinking_edits<'a>(request: &ChatRequest, restyled: &'a Restyled) -> (Edit<'a>, Edit<'a>, Edit<'a>) {
    let member = |text: &'a Option<String>| text.as_deref().map_or(Edit::Remove, Edit::Raw);
    let (thinking, output_config) = match restyled {
        Restyled::Members { thinking, output_config } => (member(thinking), member(output_config)),
        Restyled::Kept => (Edit::Keep, Edit::Keep),
    };
    let thinking = if thinking_cannot_go_on(request) { Edit::Remove } else { thinking };
    if !matches!(thinking, Edit::Remove) {
        return (thinking, Edit::Keep, output_config);
    }
    let edits = request.extra.get("context_management").and_then(|value| value["edits"].as_array());
    let clears_thinking = edits.is_some_and(|edits| {
        edits.iter().any(|edit| edit["type"].as_str().is_some_and(|kind| kind.starts_with("clear_thinking")))
    });
    (Edit::Remove, if clears_thinking { Edit::Remove } else { Edit::Keep }, output_config)
}

/// Whether a client's own `thinking` must go from its body: it thinks, and its last assistant
/// turn is a tool turn without its thinking ([`thinking::tool_turn_without_its_thinking`]), as
/// a request of another dialect goes on without it.
fn thinking_cannot_go_on(request: &ChatRequest) -> bool {
    let on = request.extra.get("thinking").is_some_and(|thinking| thinking["type"] != "disabled");
    on && thinking::tool_turn_without_its_thinking(request)
}

/// The client's body, when it is in the Messages dialect.
pub(crate) fn verbatim_body(request: &ChatRequest) -> Option<&bytes::Bytes> {
    request.verbatim.as_ref().and_then(|v| v.in_dialect(Dialect::Anthropic))
}

impl AnthropicProvider {
    /// Counts `request`'s input tokens (see [`count_body`]).
    async fn count(&self, call: Call<'_>, request: &ChatRequest) -> Result<TokenCount, ProviderError> {
        let body = count_body(call.model, request, self.thinking)?;
        let response = self.send_to(&self.count_endpoint, &call, body.into()).await?;
        let bytes = http::read_body(response).await?;
        read_count(request, bytes, call.credential.key())
    }
}

/// The body that counts `request`'s input tokens for `model` (Anthropic's `count_tokens`, and
/// Claude's `count-tokens` on Vertex AI): the client's body with the model set, when it wrote
/// in this dialect; else the translated request, with only the members counting takes.
pub(crate) fn count_body(
    model: &str,
    request: &ChatRequest,
    thinking: Option<ThinkingStyle>,
) -> Result<Vec<u8>, ProviderError> {
    if let Some(body) = verbatim_body(request) {
        let restyled = restyle::restyled(request, model, thinking);
        let (thinking, management, output_config) = thinking_edits(request, &restyled);
        let edits = [
            ("model", Edit::Text(model)),
            ("thinking", thinking),
            ("context_management", management),
            ("output_config", output_config),
        ];
        let body = verbatim::rewrite(body, &edits)?;
        return Ok(past_thinking::without_sealed_reasoning(body, request));
    }
    let mut body =
        serde_json::to_value(request::build(model, request, false, thinking)?).map_err(|error| {
            ProviderError::unsupported(format!("the request could not be serialized: {error}"))
        })?;
    if let Some(body) = body.as_object_mut() {
        body.retain(|key, _| COUNTED.contains(&key.as_str()));
    }
    Ok(serde_json::to_vec(&body).unwrap_or_default())
}

/// A count's answer (`{"input_tokens": n}`), with its bytes for a client that wrote in this
/// dialect. `key` is cut out of any error text.
pub(crate) fn read_count(
    request: &ChatRequest,
    bytes: bytes::Bytes,
    key: Option<&Secret>,
) -> Result<TokenCount, ProviderError> {
    #[derive(serde::Deserialize)]
    struct Counted {
        input_tokens: u32,
    }
    let counted = serde_json::from_slice::<Counted>(&bytes).map_err(|error| {
        let text = String::from_utf8_lossy(&bytes);
        let detail = format!("the answer is not a token count ({error}): {}", http::excerpt(&text));
        ProviderError::new(ErrorKind::MalformedResponse, classify::redact(detail, key))
    })?;
    let verbatim = verbatim_body(request).map(|_| Verbatim::new(Dialect::Anthropic, bytes));
    Ok(TokenCount { input_tokens: counted.input_tokens, verbatim })
}

/// A whole Messages API answer: the canonical answer, with the provider's bytes when the
/// request went out verbatim. `key` is cut out of any error text.
pub(crate) fn whole_answer(
    request: &ChatRequest,
    bytes: bytes::Bytes,
    key: Option<&Secret>,
) -> Result<ChatResponse, ProviderError> {
    let message = switchyard::serde_extra::from_slice::<wire::MessageResponse>(&bytes).map_err(|error| {
        let text = String::from_utf8_lossy(&bytes);
        // An error body with a 200 (a proxy, a server that reports failures so) is that error.
        if let Some(error) = classify::stream_error_body(&text, key) {
            return error;
        }
        let detail = format!("the answer is not a Messages API response ({error}): {}", http::excerpt(&text));
        ProviderError::new(ErrorKind::MalformedResponse, classify::redact(detail, key))
    })?;
    let mut message = message;
    if request::json_mode(request) {
        response::json_answer(&mut message);
    }
    let mut answer = response::to_chat_response(message, request.origin);
    if verbatim_body(request).is_some() {
        answer.verbatim = Some(Verbatim::new(Dialect::Anthropic, bytes));
    }
    Ok(answer)
}

/// The chunks of a streamed Messages answer (`response`, a success). A server that ignored
/// `stream` and answered whole gives that answer as a stream; a 200 that is neither is
/// `malformed_response`. `key` is cut out of any error text.
pub(crate) async fn answer_stream(
    response: http::Response,
    request: &ChatRequest,
    key: Option<Secret>,
) -> Result<ChunkStream, ProviderError> {
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type.is_some_and(|ct| ct.trim_start().starts_with("application/json")) {
        let bytes = http::read_body(response).await?;
        let answer = whole_answer(request, bytes, key.as_ref())?;
        return Ok(
            Box::pin(futures_util::stream::iter(answer.into_chunks().into_iter().map(Ok))) as ChunkStream
        );
    }
    if let Some(content_type) = content_type.filter(|ct| !ct.starts_with("text/event-stream")) {
        // A 200 that is not a stream (a proxy's page, a JSON body) would otherwise read
        // as a stream that ended early.
        let detail = format!("expected an event stream, got `{content_type}`");
        let body = http::read_error_body(response).await;
        let detail = format!("{detail}: {}", http::excerpt(&body));
        return Err(ProviderError::new(ErrorKind::MalformedResponse, classify::redact(detail, key.as_ref())));
    }
    let events = SseStream::new(http::body_stream(response));
    let mut decoder = stream::Decoder::new(request.origin, key);
    decoder.pass_on = verbatim_body(request).is_some();
    decoder.json_answer = request::json_mode(request);
    Ok(stream::chunk_stream(events, decoder))
}

impl Provider for AnthropicProvider {
    fn kind(&self) -> &str {
        "anthropic"
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    fn accepts_prefill(&self, _model: &str) -> bool {
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
            let body = self.body(&call, request, false)?;
            let (response, notice) = self.send(&call, request, body).await?;
            let bytes = http::read_body(response).await?;
            let mut answer = whole_answer(request, bytes, call.credential.key())?;
            answer.notices.extend(notice);
            Ok(answer)
        })
    }

    fn count_tokens<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        Box::pin(self.count(call, request))
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async move {
            let body = self.body(&call, request, true)?;
            let (response, notice) = self.send(&call, request, body).await?;
            let stream = answer_stream(response, request, call.credential.key().cloned()).await?;
            Ok(past_thinking::led_by(notice, stream))
        })
    }
}
