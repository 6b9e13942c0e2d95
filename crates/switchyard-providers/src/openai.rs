//! The OpenAI dialect: OpenAI itself, Azure OpenAI and every server that speaks Chat
//! Completions (Ollama, vLLM, llama.cpp, LM Studio, Groq, OpenRouter, Together, DeepSeek,
//! Mistral, Fireworks, ...).
//!
//! The canonical types already have the Chat Completions shape, so translation is mostly a
//! matter of replacing the route name with the upstream model, choosing which unmodelled fields
//! travel, and reading the answer back tolerantly. What differs between the three kinds:
//!
//! | kind | URL | key header |
//! |---|---|---|
//! | `openai` | `{base}/chat/completions`, base defaults to `https://api.openai.com/v1` | `Authorization: Bearer` |
//! | `azure` | `{base}/openai/deployments/{model}/chat/completions?api-version=...` (or the v1 API when the base ends in `/openai/v1`) | `api-key` |
//! | `openai_compatible` | `{base}/chat/completions`, base required | `Authorization: Bearer`, only when a key is configured |
//!
//! Unmodelled fields (`extra`, on the request and on each message) are forwarded only when the
//! request arrived in the OpenAI dialect: fields of another dialect mean nothing here, and
//! guessing which of them are harmless would be a silent translation. They are dropped (and
//! their names logged at debug level); everything the canonical types model is translated.
//!
//! ```no_run
//! use switchyard_providers::openai::OpenAiProvider;
//! use switchyard_providers::{ProviderKind, ProviderSettings};
//!
//! let local = ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url("http://localhost:11434/v1");
//! let provider = OpenAiProvider::new(&local).unwrap();
//! ```

pub(crate) mod assemble;
pub mod codec;
mod errors;
mod responses;
mod stream;
mod wire;

use std::fmt;

use ::http::Uri;
use ::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use switchyard::ProviderError;
use switchyard::chat::{
    ChatRequest, ChatResponse, Dialect, EmbeddingsRequest, EmbeddingsResponse, StreamNotice, THINKING_BLOCKS,
    Verbatim,
};
use switchyard::credential::Credential;
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};

use crate::http;
use crate::verbatim::{self, Edit};
use crate::{BuildError, ProviderKind, ProviderSettings};

/// Azure's `api-version` when the settings name none: the latest GA data-plane version.
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// An adapter for the OpenAI dialect. One instance serves one configured provider, with its
/// own connection pool.
pub struct OpenAiProvider {
    /// `openai`, `azure` or `openai_compatible`: picks the key header, the URL shape and
    /// whether `max_tokens` goes out as `max_completion_tokens`.
    kind: ProviderKind,
    /// The resolved base URL, without a trailing slash; reported by [`Provider::base_url`].
    base_url: String,
    /// The operations' URLs, prepared from `base_url` once.
    endpoint: Endpoint,
    /// Organization, project and the configured extra headers; marked sensitive.
    headers: HeaderMap,
    /// This provider's own connection pools.
    client: http::HttpClient,
    /// An `openai_compatible` server that has the Responses API (`responses: native`).
    responses_native: bool,
    /// An `openai_compatible` server that continues a prefill (`prefill: true`).
    prefill: bool,
    /// The models that refused a conversation whose assistant turns lacked their
    /// `reasoning_content` (DeepSeek's thinking mode): each turn is sent one since, `""` where
    /// the gateway has none of the model's own.
    reasoning_back: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The models that refused a stream for the `stream_options` the gateway adds (an older
    /// Azure API version, a server that forbids unknown fields) and streamed without them:
    /// their streams go without them for an hour from then (the deployment may be moved to an
    /// API version that takes them), their usage estimated.
    bare_streams: crate::lately::Lately,
    /// The models that refused another dialect's strict tools lately (`anthropic::strict`).
    refused_strict: crate::anthropic::strict::StrictRefusals,
}

/// The operations' URLs of [`Endpoint::Plain`].
#[derive(Debug, Clone)]
struct PlainUrls {
    /// `{base}/chat/completions`.
    chat: Uri,
    /// `{base}/embeddings`.
    embeddings: Uri,
    /// `{base}/responses`: the Responses API, spoken natively by `openai` and Azure's v1 API.
    responses: Uri,
}

/// Where an operation (`chat/completions`, `embeddings`) lives.
#[derive(Debug, Clone)]
enum Endpoint {
    /// `{base}/{operation}`, the model in the body. The two operations' URLs are parsed once:
    /// parsing a URL per request showed in the gateway's profile.
    Plain(Box<PlainUrls>),
    /// Azure's classic deployment URLs: the deployment (the upstream model) is in the path.
    /// `path` is the base URL up to its query, `query` the base's own query (if any) followed
    /// by the encoded `api-version` pair.
    AzureDeployment {
        /// The base URL before its `?`, without a trailing slash.
        path: String,
        /// The base URL's own query, if any, then `api-version=<encoded version>`.
        query: String,
    },
}

impl OpenAiProvider {
    /// Builds the adapter for a provider of kind `openai`, `azure` or `openai_compatible`.
    ///
    /// Fails when the base URL is missing (Azure and compatible servers have no default) or
    /// invalid, or when a configured header is not a valid HTTP header.
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        let base_url = settings.resolved_base_url()?;
        let endpoint = match settings.kind {
            // The v1 API takes plain OpenAI paths with the deployment as `model`.
            ProviderKind::Azure if !base_url.ends_with("/openai/v1") => {
                Uri::try_from(base_url.as_str()).map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
                let api_version = settings.api_version.as_deref().unwrap_or(AZURE_DEFAULT_API_VERSION);
                let (path, query) = match base_url.split_once('?') {
                    Some((path, query)) => (path, query),
                    None => (base_url.as_str(), ""),
                };
                let mut query = query.to_owned();
                if !query.is_empty() {
                    query.push('&');
                }
                query.push_str("api-version=");
                form_encode(api_version, &mut query);
                Endpoint::AzureDeployment { path: path.trim_end_matches('/').to_owned(), query }
            }
            _ => {
                // A query the base URL carries (a proxy's key or version) goes after each
                // operation's path, not before it; a fragment is no part of a request.
                if base_url.contains('#') {
                    return Err(BuildError::InvalidBaseUrl(base_url.clone()));
                }
                let (path, query) = match base_url.split_once('?') {
                    Some((path, query)) => (path.trim_end_matches('/'), format!("?{query}")),
                    None => (base_url.as_str(), String::new()),
                };
                let parse = |operation: &str| {
                    Uri::try_from(format!("{path}/{operation}{query}"))
                        .map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))
                };
                Endpoint::Plain(Box::new(PlainUrls {
                    chat: parse("chat/completions")?,
                    embeddings: parse("embeddings")?,
                    responses: parse("responses")?,
                }))
            }
        };
        let own = [("OpenAI-Organization", &settings.organization), ("OpenAI-Project", &settings.project)];
        let own = own.into_iter().filter_map(|(name, value)| Some((name, value.as_deref()?)));
        let extra = settings.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        Ok(Self {
            kind: settings.kind,
            base_url,
            endpoint,
            headers: http::configured_headers(HeaderMap::new(), own.chain(extra))?,
            client: http::HttpClient::new(&settings.http)?,
            responses_native: settings.responses_native,
            prefill: settings.prefill,
            reasoning_back: Default::default(),
            bare_streams: Default::default(),
            refused_strict: Default::default(),
        })
    }

    /// The URL of `operation` for `model`.
    fn url(&self, operation: &str, model: &str) -> Result<Uri, ProviderError> {
        match &self.endpoint {
            Endpoint::Plain(urls) => Ok(match operation {
                "embeddings" => urls.embeddings.clone(),
                "responses" => urls.responses.clone(),
                _ => urls.chat.clone(),
            }),
            Endpoint::AzureDeployment { path, query } => {
                let mut url = String::with_capacity(path.len() + query.len() + model.len() + 48);
                url.push_str(path);
                for segment in ["openai", "deployments", model].into_iter().chain(operation.split('/')) {
                    // Like a URL library's path-segment setter: `.` and `..` would climb.
                    if segment != "." && segment != ".." {
                        url.push('/');
                        segment_encode(segment, &mut url);
                    }
                }
                url.push('?');
                url.push_str(query);
                http::parse_uri(url)
            }
        }
    }

    /// The client's Responses body, when this provider speaks the Responses API (OpenAI, and
    /// Azure's v1 API): then it is sent natively rather than translated to Chat Completions.
    fn native_responses<'r>(&self, request: &'r ChatRequest) -> Option<&'r bytes::Bytes> {
        let speaks = match self.kind {
            ProviderKind::OpenAi => true,
            ProviderKind::Azure => matches!(self.endpoint, Endpoint::Plain(_)),
            _ => self.responses_native,
        };
        speaks.then(|| request.verbatim.as_ref()?.in_dialect(Dialect::Responses)).flatten()
    }

    /// The key header of `credential`: `api-key` on Azure, a bearer token elsewhere; none when
    /// the credential has no key (local servers).
    fn key_header(
        &self,
        credential: &Credential,
    ) -> Result<Option<(HeaderName, HeaderValue)>, ProviderError> {
        let Some(key) = credential.key() else { return Ok(None) };
        Ok(Some(match self.kind {
            ProviderKind::Azure => (HeaderName::from_static("api-key"), http::key_value(key.expose())?),
            _ => (header::AUTHORIZATION, http::key_value(&format!("Bearer {}", key.expose()))?),
        }))
    }

    /// Sends `body` to `operation` and returns the response once its status is a success.
    /// Reports the rate-limit headers of every response, and classifies failures.
    async fn post(
        &self,
        call: Call<'_>,
        operation: &str,
        body: Vec<u8>,
        streaming: bool,
    ) -> Result<http::Response, ProviderError> {
        // The client's beta opt-ins and idempotency key travel with its request.
        let mut headers = http::call_headers(&self.headers, &call, &["openai-beta", "idempotency-key"]);
        // Inserted over any configured header of the same name: the body is JSON, and the
        // credential the router chose is the one that authenticates (it rotates).
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if streaming {
            headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some((name, value)) = self.key_header(call.credential)? {
            headers.insert(name, value);
        }
        let request = http::post(self.url(operation, call.model)?, headers, body);
        let key = call.credential.key();
        let classify = |status, body: &str, wait: Option<_>| {
            let error =
                errors::from_body(Some(status), body, key).unwrap_or_else(|| errors::bare(status, body, key));
            match wait {
                Some(wait) => error.with_retry_after(wait),
                None => error,
            }
        };
        self.client.exchange(request, &call, None, classify).await
    }

    /// A non-streaming chat completion: a body without `stream` to `chat/completions`, the
    /// answer read whole and translated to the canonical response.
    async fn complete(&self, call: Call<'_>, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        if let Some(body) = self.native_responses(request) {
            let body = verbatim::rewrite(
                body,
                &[("model", Edit::Text(call.model)), ("stream", Edit::FalseIfPresent)],
            )?;
            let response = self.post(call, "responses", body, false).await?;
            let bytes = http::read_body(response).await?;
            return responses::parse_answer(bytes, call.credential.key());
        }
        let verbatim = verbatim_chat(request);
        let body = match verbatim {
            Some(body) => verbatim::rewrite(
                body,
                &[("model", Edit::Text(call.model)), ("stream", Edit::FalseIfPresent)],
            )?,
            None => return self.complete_translated(call, request).await,
        };
        let response = self.post(call, "chat/completions", body, false).await?;
        if http::media_type(&response) == "text/event-stream" {
            return answer_of_stream(response, &call, request).await;
        }
        let bytes = http::read_body(response).await?;
        let mut answer = wire::parse_response(&bytes, call.credential.key())?;
        if verbatim.is_some() {
            answer.verbatim = Some(Verbatim::new(Dialect::OpenAi, bytes));
        }
        Ok(answer)
    }

    /// A non-streaming chat completion of a request of another dialect.
    async fn complete_translated(
        &self,
        call: Call<'_>,
        request: &ChatRequest,
    ) -> Result<ChatResponse, ProviderError> {
        let (response, notice) = self.post_translated(call, request, false).await?;
        let mut answer = match http::media_type(&response) == "text/event-stream" {
            true => answer_of_stream(response, &call, request).await?,
            false => wire::parse_response(&http::read_body(response).await?, call.credential.key())?,
        };
        answer.notices.extend(notice);
        Ok(answer)
    }

    /// Posts a request of another dialect, translated. Its output limit refused as larger than
    /// the model takes (Claude Code's 32,000 toward gpt-4o's 16,384: the client wrote it for
    /// another provider's model) is sent once more at the model's limit, which the refusal
    /// names. Its strict tools (an Anthropic client's) are sent once more without them after a
    /// 400, and to that model for an hour none (`anthropic::strict`), the notice saying so.
    async fn post_translated(
        &self,
        call: Call<'_>,
        request: &ChatRequest,
        streaming: bool,
    ) -> Result<(http::Response, Option<StreamNotice>), ProviderError> {
        refuse_prefill(request, self.prefill)?;
        let mut padded = self.wants_reasoning_back(call.model);
        let (mut bare, mut learned) = (self.streams_bare(call.model), false);
        let strict = wire::carries_strict_tools(request);
        let mut strict_notice =
            (strict && self.refused_strict.refused(call.model)).then_some(crate::anthropic::strict::LEFT_OUT);
        let mut capped = None;
        loop {
            let asked = capped.as_ref().unwrap_or(request);
            let mut body = wire::chat_body(asked, call.model, streaming, (self.kind, padded))?;
            if streaming && bare {
                body = verbatim::rewrite(&body, &[("stream_options", Edit::Remove)])?;
            }
            if strict_notice.is_some() {
                body = wire::without_strict_tools(body);
            }
            let error = match self.post(call, "chat/completions", body, streaming).await {
                Err(error) => error,
                sent => {
                    if sent.is_ok() && learned {
                        self.remember_bare(call.model);
                    }
                    if sent.is_ok() && strict_notice == Some(crate::anthropic::strict::RESENT) {
                        self.refused_strict.note(call.model);
                    }
                    let notice = strict_notice.map(|text| StreamNotice::Resent(text.to_owned()));
                    return sent.map(|response| (response, notice));
                }
            };
            // Sent once more with every assistant turn's reasoning, from then on.
            if !padded && errors::wants_reasoning_back(&error) {
                self.remember_reasoning_back(call.model);
                padded = true;
                continue;
            }
            if streaming && !bare && self.goes_bare(request, &error) {
                (bare, learned) = (true, true);
                continue;
            }
            let lower = |most: &u32| request.max_tokens.is_some_and(|asked| asked > *most);
            let foreign = request.origin != Dialect::OpenAi;
            match errors::output_limit(&error).filter(lower).filter(|_| foreign && capped.is_none()) {
                Some(most) => capped = Some(ChatRequest { max_tokens: Some(most), ..request.clone() }),
                // Last: a refusal the steps above know is not the strict tools'.
                None if strict && strict_notice.is_none() && crate::anthropic::strict::may_refuse(&error) => {
                    strict_notice = Some(crate::anthropic::strict::RESENT);
                }
                None => return Err(error),
            }
        }
    }

    /// Whether `model` streams without `stream_options` (it refused them within the hour).
    fn streams_bare(&self, model: &str) -> bool {
        self.bare_streams.refused(model)
    }

    /// Whether a stream `error` refused for the `stream_options` the gateway added goes again
    /// without them: a stream the client asked for. A whole answer asked as a stream is asked
    /// whole instead (the router's `refusals`), which keeps its usage.
    fn goes_bare(&self, request: &ChatRequest, error: &ProviderError) -> bool {
        request.stream && errors::refuses_stream_options(error)
    }

    /// Notes that `model` streamed without the `stream_options` it refused: its streams go
    /// without them for an hour.
    fn remember_bare(&self, model: &str) {
        tracing::debug!(model, "the model refused stream_options: its streams go without them");
        self.bare_streams.note(model);
    }

    /// Whether `model` refused a conversation for an assistant turn without its reasoning.
    fn wants_reasoning_back(&self, model: &str) -> bool {
        self.reasoning_back.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(model)
    }

    fn remember_reasoning_back(&self, model: &str) {
        self.reasoning_back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(model.to_owned());
    }

    /// A streaming chat completion: `stream: true` to `chat/completions`, the SSE body read as
    /// canonical chunks. A 200 answered with `application/json` (a server that ignored
    /// `stream`) is read whole and replayed as a stream.
    async fn open_stream(&self, call: Call<'_>, request: &ChatRequest) -> Result<ChunkStream, ProviderError> {
        if let Some(body) = self.native_responses(request) {
            let body =
                verbatim::rewrite(body, &[("model", Edit::Text(call.model)), ("stream", Edit::Flag(true))])?;
            let response = self.post(call, "responses", body, true).await?;
            return Ok(responses::chunks(response, call.credential.key().cloned()));
        }
        let mut lead = None;
        let (response, pass_on) = match verbatim_chat(request) {
            Some(body) => {
                // Usage is asked for whatever the client said: cost and token budgets need it.
                // The chunk that carries it is passed on only when the client asked too, or
                // asked for a whole answer (put together from the stream: its usage as the
                // provider wrote it, details and all).
                let usage_chunk = !request.stream || codec::wants_usage(request);
                (self.post_verbatim_stream(call, request, body).await?, Some(stream::PassOn { usage_chunk }))
            }
            None => {
                let (response, notice) = self.post_translated(call, request, true).await?;
                lead = notice;
                (response, None)
            }
        };
        let media_type = http::media_type(&response);
        if media_type == "text/html" {
            // A proxy's page with a 200: no stream (else read as one that ended early). A
            // server of the dialect may label its stream otherwise (`text/plain`): read as one.
            let said = response.headers().get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
            let detail = format!("expected an event stream, got `{}`", said.unwrap_or_default());
            let body = http::read_error_body(response).await;
            let detail = errors::scrub(&format!("{detail}: {}", http::excerpt(&body)), call.credential.key());
            return Err(ProviderError::new(switchyard::ErrorKind::MalformedResponse, detail).with_status(200));
        }
        if media_type == "application/json" {
            // Some compatible servers ignore `stream` or answer an error with a 200 JSON body.
            let bytes = http::read_body(response).await?;
            let answer = wire::parse_response(&bytes, call.credential.key())?;
            return Ok(crate::anthropic::past_thinking::led_by(lead, stream::from_response(answer)));
        }
        let chunks = stream::chunks(response, call.credential.key().cloned(), pass_on);
        Ok(crate::anthropic::past_thinking::led_by(lead, chunks))
    }

    /// Posts the client's own body as a stream. Usage is asked for whatever the client said:
    /// cost and token budgets need it; a model that refuses the `stream_options` it is asked in
    /// is sent the stream without them ([`goes_bare`](Self::goes_bare)).
    async fn post_verbatim_stream(
        &self,
        call: Call<'_>,
        request: &ChatRequest,
        body: &bytes::Bytes,
    ) -> Result<http::Response, ProviderError> {
        let (mut bare, mut learned) = (self.streams_bare(call.model), false);
        loop {
            let options = if bare { Edit::Remove } else { Edit::Enable("include_usage") };
            let edits = [
                ("model", Edit::Text(call.model)),
                ("stream", Edit::Flag(true)),
                ("stream_options", options),
            ];
            let error =
                match self.post(call, "chat/completions", verbatim::rewrite(body, &edits)?, true).await {
                    Err(error) => error,
                    sent => {
                        if sent.is_ok() && learned {
                            self.remember_bare(call.model);
                        }
                        return sent;
                    }
                };
            if bare || !self.goes_bare(request, &error) {
                return Err(error);
            }
            (bare, learned) = (true, true);
        }
    }

    /// An embeddings call to `embeddings`; the answer must hold one vector per input text.
    async fn embed(
        &self,
        call: Call<'_>,
        request: &EmbeddingsRequest,
    ) -> Result<EmbeddingsResponse, ProviderError> {
        let body = wire::embeddings_body(request, call.model)?;
        let response = self.post(call, "embeddings", body, false).await?;
        let bytes = http::read_body(response).await?;
        wire::parse_embeddings(&bytes, request.input.len(), call.credential.key())
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Headers stay out: configured extra headers may hold tokens.
        f.debug_struct("OpenAiProvider")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Refuses an Anthropic client's prefill (its request ends on an assistant turn, which Claude
/// continues) toward a server that does not continue one (`prefill` unset): it would answer
/// anew, and the client would join that answer to its prefix.
fn refuse_prefill(request: &ChatRequest, continues: bool) -> Result<(), ProviderError> {
    let prefill = request.messages.last().is_some_and(|last| last.role == switchyard::chat::Role::Assistant);
    if request.origin == Dialect::Anthropic && prefill && !continues {
        return Err(ProviderError::unsupported(
            "the request ends on an assistant turn (a prefill, which Claude continues): this provider answers it anew (an openai_compatible server that continues one takes `prefill: true`)",
        ));
    }
    Ok(())
}

/// The client's own Chat Completions body, when it can go out as written. Not when an
/// assistant message carries `thinking_blocks`: those are Claude's signed thinking as the
/// gateway gave it to the client (LiteLLM's form), which no OpenAI-dialect server takes, so
/// the request is written from the canonical one without them (a fallback from Claude to
/// OpenAI mid-conversation).
fn verbatim_chat(request: &ChatRequest) -> Option<&bytes::Bytes> {
    let verbatim = request.verbatim.as_ref()?.in_dialect(Dialect::OpenAi)?;
    let claude_thinking = request.messages.iter().any(|m| m.extra.contains_key(THINKING_BLOCKS));
    (!claude_thinking).then_some(verbatim)
}

impl Provider for OpenAiProvider {
    fn kind(&self) -> &str {
        self.kind.as_str()
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    /// Not a model that refused `stream_options`: its streams come without usage, and its whole
    /// answers with it.
    fn streams_upstream_for(&self, model: &str) -> bool {
        !self.streams_bare(model)
    }

    fn accepts_prefill(&self, _model: &str) -> bool {
        self.prefill
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
        Box::pin(self.complete(call, request))
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(self.open_stream(call, request))
    }

    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        Box::pin(self.embed(call, request))
    }
}

/// The whole answer of a server that streamed it though asked for it whole (some compatible
/// servers always stream): its stream read to the end, put together as a stream asked for
/// one is, with the same rules for an ending without its terminator or an unreadable event.
async fn answer_of_stream(
    response: http::Response,
    call: &Call<'_>,
    request: &ChatRequest,
) -> Result<ChatResponse, ProviderError> {
    let mut chunks = stream::chunks(response, call.credential.key().cloned(), None);
    let mut answer = switchyard::assembly::Assembly::default().expecting(request.choices_asked());
    switchyard::assembly::read_to_end(&mut chunks, &mut answer, call.timeouts.idle, call.ends).await?;
    if answer.is_empty() {
        let detail = "asked for a whole answer, the server streamed one that said nothing";
        return Err(ProviderError::new(switchyard::ErrorKind::MalformedResponse, detail).with_status(200));
    }
    Ok(answer.finish())
}

/// Appends `segment` percent-encoded as one URL path segment, as the WHATWG URL standard
/// encodes a path segment of an http(s) URL: controls, space, non-ASCII and ``"#<>?`{}/%\``.
fn segment_encode(segment: &str, out: &mut String) {
    for &byte in segment.as_bytes() {
        let keep = byte.is_ascii_graphic()
            && !matches!(byte, b'"' | b'#' | b'<' | b'>' | b'?' | b'`' | b'{' | b'}' | b'/' | b'%' | b'\\');
        push_byte(byte, keep, out);
    }
}

/// Appends `value` encoded as an `application/x-www-form-urlencoded` query value.
fn form_encode(value: &str, out: &mut String) {
    for &byte in value.as_bytes() {
        if byte == b' ' {
            out.push('+');
        } else {
            push_byte(byte, byte.is_ascii_alphanumeric() || matches!(byte, b'*' | b'-' | b'.' | b'_'), out);
        }
    }
}

/// Appends `byte` as is when `keep`, else as `%XX` (uppercase hex).
fn push_byte(byte: u8, keep: bool, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if keep {
        out.push(char::from(byte));
    } else {
        out.push('%');
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn azure(base: &str) -> OpenAiProvider {
        let mut settings = ProviderSettings::new(ProviderKind::Azure).base_url(base);
        settings.api_version = Some("2024 10/21".into());
        OpenAiProvider::new(&settings).unwrap()
    }

    #[test]
    fn azure_deployment_urls_encode_the_deployment_and_the_api_version() {
        let provider = azure("https://example.openai.azure.com/");
        assert_eq!(
            provider.url("chat/completions", "gpt 4/o%..").unwrap().to_string(),
            "https://example.openai.azure.com/openai/deployments/gpt%204%2Fo%25../chat/completions?api-version=2024+10%2F21"
        );
        assert_eq!(
            provider.url("embeddings", "..").unwrap().to_string(),
            "https://example.openai.azure.com/openai/deployments/embeddings?api-version=2024+10%2F21"
        );
        let provider = azure("https://example.openai.azure.com/prefix?tenant=a");
        assert_eq!(
            provider.url("chat/completions", "m").unwrap().to_string(),
            "https://example.openai.azure.com/prefix/openai/deployments/m/chat/completions?tenant=a&api-version=2024+10%2F21"
        );
        // Whatever the deployment is called, the URL is one a request can carry.
        for c in (0u8..=127).map(char::from).chain(['é', '名']) {
            assert!(provider.url("chat/completions", &format!("a{c}b")).is_ok(), "{c:?}");
        }
    }
}
