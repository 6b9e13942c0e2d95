//! AWS Bedrock's runtime API (`https://bedrock-runtime.{region}.amazonaws.com`): Claude through
//! InvokeModel with the Messages body, every other model through Converse, embeddings (Titan
//! and Cohere), each request signed with SigV4 (or sent with a Bedrock API key as a bearer
//! token).
//!
//! ```no_run
//! use switchyard_providers::bedrock::{AwsAuth, BedrockSettings};
//! use switchyard_providers::{ProviderKind, ProviderSettings, build};
//!
//! let mut settings = ProviderSettings::new(ProviderKind::Bedrock);
//! settings.bedrock = Some(BedrockSettings { region: "us-east-1".into(), aws: AwsAuth::default() });
//! let provider = build(&settings).unwrap();
//! ```
//!
//! - **Claude** (a model id, inference-profile id or ARN naming `anthropic.` or `claude`):
//!   `/model/{id}/invoke` and `/invoke-with-response-stream`, the Messages body the Anthropic
//!   adapter writes (shared, not copied) less `model` and `stream`, with `anthropic_version:
//!   bedrock-2023-05-31` and the beta flags as `anthropic_beta`; the answer and the stream's
//!   events (each chunk frame's `bytes`) are Anthropic's and read by the Anthropic adapter's
//!   decoder, so an Anthropic client loses nothing (thinking and signatures, tools, cache
//!   control, documents, cache counts). An application-inference-profile ARN names no model:
//!   it goes through Converse.
//! - **Every other model**: `/model/{id}/converse` and `/converse-stream` (`converse/`).
//! - **Streams** are AWS event streams (`eventstream.rs`); exception frames end the stream
//!   with their classified error, before the first content a failover, after it the
//!   mid-stream error the router reports.
//! - **Credentials** (`auth.rs`): the configured `api_key` as a bearer token; else SigV4
//!   (`sign.rs`) with the AWS SDK's chain, kept and refreshed off the request path.
//! - **Secrets** (the secret key, the session token, the signature, the API key) are cut out
//!   of every error the adapter reports ([`Redactor`]).

mod auth;
mod classify;
mod converse;
mod embeddings;
pub mod eventstream;
mod invoke;
mod sign;

use std::sync::Arc;
use std::time::SystemTime;

use ::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderMap, HeaderValue};
use bytes::Bytes;
use switchyard::chat::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, TokenCount};
use switchyard::credential::Secret;
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::{ErrorKind, ProviderError};

pub use auth::{AwsAuth, CredentialCache, CredentialsInfo, MIN_LEFT, REFRESH_BEFORE, mask};
pub use sign::{SIGNING_NAME, escape_segment, model_path, sign_request};

use crate::anthropic::ThinkingStyle;
use crate::betas::BetaPolicy;
use crate::{BuildError, ProviderSettings, http};

/// The `anthropic_version` Bedrock's InvokeModel takes for Claude.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// What a Bedrock provider needs beyond the common settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BedrockSettings {
    /// The AWS region (`us-east-1`): the endpoint's and SigV4's.
    pub region: String,
    /// How SigV4 credentials are found (ignored for calls made with an API key).
    pub aws: AwsAuth,
}

/// The public endpoint of Bedrock's runtime in `region`.
pub fn default_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// Whether `model` (an id, profile id or ARN) is Claude, called through InvokeModel.
pub fn is_claude(model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    model.contains("anthropic.") || model.contains("claude")
}

/// The secrets one call used, cut out of whatever it reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<Secret>,
}

impl Redactor {
    fn add(&mut self, secret: Secret) {
        self.secrets.push(secret);
    }

    /// `error` with every secret of the call cut out of its detail and code.
    pub(crate) fn error(&self, error: ProviderError) -> ProviderError {
        self.secrets.iter().fold(error, |error, secret| error.redacted(secret))
    }

    /// `chunk` with every secret of the call cut out of what its notice quotes.
    pub(crate) fn chunk(&self, mut chunk: switchyard::chat::ChatChunk) -> switchyard::chat::ChatChunk {
        use switchyard::chat::StreamNotice;
        if let Some(StreamNotice::Skipped(detail) | StreamNotice::BrokenAfterFinish(detail)) =
            &mut chunk.notice
        {
            *detail = self.clean(detail);
        }
        chunk
    }

    /// `text` with every secret of the call replaced by `[redacted]`.
    pub(crate) fn clean(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            if let std::borrow::Cow::Owned(clean) = secret.redact(&text) {
                text = clean;
            }
        }
        text
    }
}

/// Unix seconds now.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The Bedrock adapter.
#[derive(Debug)]
pub struct BedrockProvider {
    client: http::HttpClient,
    base_url: String,
    host: HeaderValue,
    region: String,
    /// The configured headers (sent and signed), less `anthropic-beta`, which goes in the body.
    headers: HeaderMap,
    /// `anthropic-beta` flags the configuration sets, sent to every Claude model.
    configured_betas: Vec<String>,
    betas: BetaPolicy,
    thinking: Option<ThinkingStyle>,
    credentials: Arc<CredentialCache>,
    /// The past thinking each Claude refused as not its own, left out of later requests.
    refused_thinking: crate::anthropic::past_thinking::Refused,
    /// The Claude models that refused strict tool use lately.
    refused_strict: crate::anthropic::strict::StrictRefusals,
}

impl BedrockProvider {
    /// An adapter for `settings`, whose `bedrock` names the region (and credentials).
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        let bedrock = settings.bedrock.as_ref().ok_or(BuildError::MissingRegion)?;
        let base_url = settings.resolved_base_url()?;
        let uri =
            http::parse_uri(base_url.clone()).map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let host = http::host_value(&uri).ok_or_else(|| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let mut configured_betas = Vec::new();
        let mut extra = Vec::new();
        for (name, value) in &settings.headers {
            if name.eq_ignore_ascii_case("anthropic-beta") {
                configured_betas
                    .extend(value.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_owned));
            } else {
                extra.push((name.as_str(), value.as_str()));
            }
        }
        Ok(Self {
            client: http::HttpClient::new(&settings.http)?,
            host,
            region: bedrock.region.clone(),
            headers: http::configured_headers(HeaderMap::new(), extra)?,
            configured_betas,
            betas: settings.betas.clone(),
            thinking: settings.thinking,
            credentials: Arc::new(CredentialCache::new(&bedrock.region, bedrock.aws.clone())),
            base_url,
            refused_thinking: Default::default(),
            refused_strict: Default::default(),
        })
    }

    /// The adapter with credentials from `cache` (an embedding program's own chain, a test's).
    pub fn with_credentials(mut self, cache: Arc<CredentialCache>) -> Self {
        self.credentials = cache;
        self
    }

    /// The credential cache, for `doctor` and tests.
    pub fn credentials(&self) -> &Arc<CredentialCache> {
        &self.credentials
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The beta flags a Claude call sends: the configured ones, then the client's the policy
    /// passes.
    fn betas(&self, call: &Call<'_>) -> Vec<String> {
        let mut betas = self.configured_betas.clone();
        for flag in self.betas.client_betas(call.forward) {
            if !betas.contains(&flag) {
                betas.push(flag);
            }
        }
        betas
    }

    /// POSTs `body` to `path`, authenticated (the call's API key as a bearer token, else
    /// SigV4), accepting `accept`; the response when it is a success, else the classified
    /// error. The secrets used go with the response, for what reads it later. Credentials AWS
    /// says expired are forgotten and the call sent once more with ones loaded again (fresh from
    /// a role, SSO or a process); expired again, they are the credential's failure (`auth`).
    async fn send(
        &self,
        call: &Call<'_>,
        path: &str,
        body: impl Into<Bytes>,
        accept: &'static str,
    ) -> Result<(http::Response, Redactor), ProviderError> {
        let body: Bytes = body.into();
        match self.send_once(call, path, body.clone(), accept).await {
            Err(error) if expired(&error) && call.credential.key().is_none() => {
                self.credentials.forget();
                self.send_once(call, path, body, accept).await.map_err(|error| match expired(&error) {
                    true => credentials_refused(&error),
                    false => error,
                })
            }
            sent => sent,
        }
    }

    /// Sends a Claude body with `send`: once more without its past thinking when Claude refuses
    /// it as not its own, and without the strict tool use the translation of `request` carried
    /// when Claude refuses that (`anthropic::past_thinking`, `anthropic::strict`).
    async fn send_claude<T, F, Fut>(
        &self,
        call: &Call<'_>,
        request: &ChatRequest,
        body: Vec<u8>,
        send: F,
    ) -> Result<(T, Option<switchyard::chat::StreamNotice>), ProviderError>
    where
        F: Fn(Bytes) -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let refused = (&self.refused_thinking, call.model, call.credential.id());
        let strict = (&self.refused_strict, call.model, crate::anthropic::strict::carried(request));
        crate::anthropic::strict::sent(Bytes::from(body), strict, |body| {
            crate::anthropic::past_thinking::sent(body, refused, &send)
        })
        .await
    }

    /// [`send`](Self::send)'s one sending.
    async fn send_once(
        &self,
        call: &Call<'_>,
        path: &str,
        body: Bytes,
        accept: &'static str,
    ) -> Result<(http::Response, Redactor), ProviderError> {
        let uri = http::parse_uri(format!("{}{path}", self.base_url))?;
        let mut headers = http::call_headers(&self.headers, call, &[]);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(HOST, self.host.clone());
        let mut request = http::post_bytes(uri, headers, body.clone());
        let mut redactor = Redactor::default();
        match call.credential.key() {
            Some(key) => {
                let value = http::key_value(&format!("Bearer {}", key.expose()))?;
                request.headers_mut().insert(AUTHORIZATION, value);
                redactor.add(key.clone());
            }
            None => {
                let credentials = self.credentials.get().await?;
                redactor.add(Secret::new(credentials.secret_access_key()));
                if let Some(token) = credentials.session_token() {
                    redactor.add(Secret::new(token));
                }
                let signature =
                    sign::sign_request(&mut request, &body, &credentials, &self.region, SystemTime::now())?;
                redactor.add(signature);
            }
        }
        let response = self.client.send(request).await.map_err(ProviderError::from)?;
        let limits = http::observe_limits(&response, call.rate_limits);
        if response.status().is_success() {
            return Ok((response, redactor));
        }
        let status = response.status().as_u16();
        let kind =
            response.headers().get("x-amzn-errortype").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let wait = http::retry_after(status, &limits);
        let text = http::read_error_body(response).await;
        let error = classify::http_error(status, kind.as_deref(), &text, wait, &redactor);
        Err(crate::wording::refine(error))
    }
}

/// Whether AWS refused the call's credentials as expired.
fn expired(error: &ProviderError) -> bool {
    matches!(error.code(), Some("ExpiredTokenException" | "ExpiredToken"))
}

/// `error` (credentials expired even when loaded again) as the credential's failure.
fn credentials_refused(error: &ProviderError) -> ProviderError {
    let mut refused = ProviderError::new(ErrorKind::Auth, error.detail().to_owned());
    if let Some(status) = error.status() {
        refused = refused.with_status(status);
    }
    if let Some(code) = error.code() {
        refused = refused.with_code(code.to_owned());
    }
    refused
}

/// The request id Bedrock answered with, the id of a Converse answer.
fn request_id(response: &http::Response) -> String {
    response.headers().get("x-amzn-requestid").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

impl Provider for BedrockProvider {
    fn kind(&self) -> &str {
        "bedrock"
    }

    fn base_url(&self) -> &str {
        &self.base_url
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    /// Claude continues a prefill through InvokeModel as on Anthropic's API; a Converse model
    /// is asked for the whole answer again.
    fn accepts_prefill(&self, model: &str) -> bool {
        is_claude(model)
    }

    fn warm(&self) {
        self.client.warm();
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            if is_claude(call.model) {
                let body = invoke::body(&call, request, &self.betas(&call), self.thinking)?;
                let path = model_path(call.model, "invoke");
                let send = |body| self.send(&call, &path, body, "application/json");
                let ((response, redactor), notice) = self.send_claude(&call, request, body, send).await?;
                let bytes = http::read_body(response).await?;
                let mut answer = crate::anthropic::whole_answer(request, bytes, call.credential.key())
                    .map_err(|e| redact(e, &redactor))?;
                answer.notices.extend(notice);
                return Ok(answer);
            }
            let body = converse::request::body(request)?;
            let (response, redactor) =
                self.send(&call, &model_path(call.model, "converse"), body, "application/json").await?;
            let id = request_id(&response);
            let bytes = http::read_body(response).await?;
            converse::whole_answer(&bytes, call.model, id).map_err(|e| redact(e, &redactor))
        })
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async move {
            let claude = is_claude(call.model);
            let (body, action) = if claude {
                (
                    invoke::body(&call, request, &self.betas(&call), self.thinking)?,
                    "invoke-with-response-stream",
                )
            } else {
                (converse::request::body(request)?, "converse-stream")
            };
            let accept = "application/vnd.amazon.eventstream";
            let path = model_path(call.model, action);
            let send = |body| self.send(&call, &path, body, accept);
            let ((response, redactor), notice) = match claude {
                true => self.send_claude(&call, request, body, send).await?,
                false => (send(Bytes::from(body)).await?, None),
            };
            check_event_stream(&response, &redactor)?;
            let id = request_id(&response);
            let frames = eventstream::Frames::new(http::body_stream(response));
            if claude {
                let stream = invoke::chunk_stream(frames, &call, request, redactor);
                return Ok(crate::anthropic::past_thinking::led_by(notice, stream));
            }
            Ok(converse::chunk_stream(frames, call.model.to_owned(), id, redactor))
        })
    }

    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        Box::pin(embeddings::embed(self, call, request))
    }

    fn count_tokens<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        Box::pin(self.count(call, request))
    }
}

impl BedrockProvider {
    /// Claude's count of `request`'s input tokens, by CountTokens over the InvokeModel body
    /// it would be sent (`{"inputTokens": n}`). Converse models are not counted here.
    async fn count(&self, call: Call<'_>, request: &ChatRequest) -> Result<TokenCount, ProviderError> {
        if !is_claude(call.model) {
            let detail = format!("model `{}` is not counted on Bedrock here (Claude is)", call.model);
            return Err(ProviderError::unsupported(detail));
        }
        let body = invoke::count_body(&call, request, &self.betas(&call), self.thinking)?;
        let path = model_path(invoke::counted_model(call.model), "count-tokens");
        let (response, redactor) = self.send(&call, &path, body, "application/json").await?;
        let bytes = http::read_body(response).await?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Counted {
            input_tokens: u32,
        }
        match serde_json::from_slice::<Counted>(&bytes) {
            Ok(counted) => Ok(TokenCount { input_tokens: counted.input_tokens, verbatim: None }),
            Err(error) => {
                let text = String::from_utf8_lossy(&bytes);
                let detail = format!("the answer is not a token count ({error}): {}", http::excerpt(&text));
                Err(redact(ProviderError::new(ErrorKind::MalformedResponse, detail), &redactor))
            }
        }
    }
}

/// A 200 that is not an event stream (a proxy's page) would otherwise read as a broken stream.
fn check_event_stream(response: &http::Response, redactor: &Redactor) -> Result<(), ProviderError> {
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type.is_empty() || content_type.starts_with("application/vnd.amazon.eventstream") {
        return Ok(());
    }
    Err(ProviderError::new(
        ErrorKind::MalformedResponse,
        redactor.clean(&format!("expected an AWS event stream, got `{content_type}`")),
    ))
}

/// `error` with the call's secrets cut out of its detail.
fn redact(error: ProviderError, redactor: &Redactor) -> ProviderError {
    let mut error = error;
    for secret in &redactor.secrets {
        error = error.redacted(secret);
    }
    error
}
