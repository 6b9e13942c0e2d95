//! Google Vertex AI (`kind: vertex`): Claude, Gemini and text embeddings of one project and
//! region, with Google OAuth access tokens ([`auth`]).
//!
//! ```no_run
//! use switchyard_providers::vertex::{GoogleCredentials, VertexSettings};
//! use switchyard_providers::{ProviderKind, ProviderSettings, build};
//!
//! let credentials = GoogleCredentials::File("/secrets/sa.json".into());
//! let mut settings = ProviderSettings::new(ProviderKind::Vertex);
//! settings.vertex = Some(VertexSettings::new("my-project", "us-east5", credentials).unwrap());
//! let vertex = build(&settings).unwrap();
//! ```
//!
//! # What is called
//!
//! `{base}/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}:{method}`,
//! the base `https://{region}-aiplatform.googleapis.com/v1`, or for the region `global`
//! `https://aiplatform.googleapis.com/v1` (Vertex AI's "Deployments and endpoints"). The
//! model's name picks the publisher:
//!
//! | model | publisher | whole | streamed |
//! |---|---|---|---|
//! | `claude-*` (`claude-sonnet-4-5@20250929`) | `anthropic` | `:rawPredict` | `:streamRawPredict` |
//! | any other (`gemini-2.5-flash`) | `google` | `:generateContent` | `:streamGenerateContent?alt=sse` |
//! | embeddings (`text-embedding-005`) | `google` | `:predict` | |
//!
//! Every call carries `Authorization: Bearer {token}` from the provider's [`TokenCache`](token):
//! one token for every call until it is due, refreshed before it expires, one refresh at a time.
//!
//! # Claude
//!
//! The Messages body the Anthropic adapter writes (the client's own bytes for an Anthropic
//! client), without `model` (the URL names it) and with `anthropic_version: vertex-2023-10-16`
//! in the body, as Anthropic's "Claude on Vertex AI" page and its SDK's Vertex client write it;
//! `stream: true` stays in the body of a `streamRawPredict`. Answers and streams are Anthropic's
//! and are read by the Anthropic adapter. Beta flags travel as the `anthropic-beta` header, as
//! Anthropic's SDK (whose Vertex client leaves its beta header in place) and LiteLLM's Vertex
//! handler send them; a 400 that refuses a beta flag is unsupported: the target fails for the
//! request alone (health untouched), so the chain goes on.
//!
//! # Gemini
//!
//! The body the Gemini adapter writes, its answers and streams read by it.
//!
//! # Errors
//!
//! An Anthropic error body (the model answered) is classified as the Anthropic adapter does; any
//! other (Vertex answered, a `google.rpc.Status`) as the Gemini adapter does. Vertex's 429
//! `RESOURCE_EXHAUSTED` carries no Retry-After: it is `rate_limited`, and the health board's
//! `cooldown_on_rate_limit` rests the target. A 401 drops the cached token and the call is sent
//! once more with a fresh one; a second 401 fails it, and the next call
//! fetches another. A token that cannot be had fails the call before anything is sent: `auth`
//! when the credentials are refused, `transport` or `timeout` when the token endpoint is out of
//! reach.

pub mod auth;
mod embeddings;
mod token;

use std::fmt;

use ::http::Uri;
use ::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use switchyard::chat::{
    ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, StreamNotice, TokenCount,
};
use switchyard::credential::Secret;
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::{ErrorKind, ProviderError};
use tokio::time::Instant;

pub use auth::{AuthError, GoogleCredentials};

use crate::anthropic::{self, Envelope, ThinkingStyle};
use crate::gemini::{self, Redactor};
use crate::{BuildError, ProviderSettings, http};
use auth::GoogleTokens;
use token::TokenCache;

/// The `anthropic_version` of a Claude body on Vertex AI.
pub const CLAUDE_VERSION: &str = "vertex-2023-10-16";

/// Where a Vertex provider is: its project and region, and its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexSettings {
    project: String,
    region: String,
    credentials: GoogleCredentials,
}

impl VertexSettings {
    /// Settings for `project` in `region` (`us-east5`, or `global`), authenticated with
    /// `credentials`. Refused when the project or the region could not name one (they go into
    /// every URL).
    pub fn new(
        project: impl Into<String>,
        region: impl Into<String>,
        credentials: GoogleCredentials,
    ) -> Result<Self, BuildError> {
        let (project, region) = (project.into(), region.into());
        let project_ok = !project.is_empty()
            && project
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b':'));
        if !project_ok {
            return Err(BuildError::Vertex {
                field: "project",
                problem: format!(
                    "`{project}` is not a Google Cloud project id (lowercase letters, digits, `-`)"
                ),
            });
        }
        let region_ok = !region.is_empty()
            && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            return Err(BuildError::Vertex {
                field: "region",
                problem: format!(
                    "`{region}` is not a Vertex AI region: give one such as us-east5, or global"
                ),
            });
        }
        Ok(Self { project, region, credentials })
    }

    /// The Google Cloud project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The region (`us-east5`), or `global`.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Where the credentials come from.
    pub fn credentials(&self) -> &GoogleCredentials {
        &self.credentials
    }

    /// The region's endpoint: `https://{region}-aiplatform.googleapis.com/v1`, or
    /// `https://aiplatform.googleapis.com/v1` for `global`.
    ///
    /// ```
    /// use switchyard_providers::vertex::{GoogleCredentials, VertexSettings};
    ///
    /// let at = |region| VertexSettings::new("p", region, GoogleCredentials::MetadataServer("m".into())).unwrap();
    /// assert_eq!(at("us-east5").default_base_url(), "https://us-east5-aiplatform.googleapis.com/v1");
    /// assert_eq!(at("global").default_base_url(), "https://aiplatform.googleapis.com/v1");
    /// ```
    pub fn default_base_url(&self) -> String {
        match self.region.as_str() {
            "global" => "https://aiplatform.googleapis.com/v1".to_owned(),
            region => format!("https://{region}-aiplatform.googleapis.com/v1"),
        }
    }
}

/// Who publishes a model on Vertex AI, which decides its API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publisher {
    /// Claude: the Messages API through `rawPredict`.
    Anthropic,
    /// Gemini and Google's embeddings.
    Google,
}

impl Publisher {
    /// By the model's name: `claude*` is Anthropic's, anything else Google's.
    fn of(model: &str) -> Self {
        if model.to_ascii_lowercase().starts_with("claude") {
            Publisher::Anthropic
        } else {
            Publisher::Google
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Publisher::Anthropic => "anthropic",
            Publisher::Google => "google",
        }
    }

    /// The client headers a call to this publisher's models passes on: Claude's beta flags
    /// (its version goes in the body).
    fn forwarded(self) -> &'static [&'static str] {
        match self {
            Publisher::Anthropic => &["anthropic-beta"],
            Publisher::Google => &[],
        }
    }
}

/// The Vertex AI adapter.
pub struct VertexProvider {
    /// This provider's own connection pools.
    client: http::HttpClient,
    /// The resolved base URL (`.../v1`), without a trailing slash.
    base_url: String,
    /// `{base}/projects/{project}/locations/{region}/publishers/`.
    publishers: String,
    /// The configured extra headers, marked sensitive.
    headers: HeaderMap,
    /// The access token every call carries.
    tokens: TokenCache<GoogleTokens>,
    /// How a `reasoning_effort` asks Claude to think; by the model's name when `None`.
    thinking: Option<ThinkingStyle>,
    /// Which of a client's `anthropic-beta` flags reach Claude (`betas:`).
    betas: crate::BetaPolicy,
    /// The past thinking each Claude refused as not its own, left out of later requests.
    refused_thinking: anthropic::past_thinking::Refused,
    /// The Claude models that refused strict tool use lately.
    refused_strict: anthropic::strict::StrictRefusals,
}

impl fmt::Debug for VertexProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VertexProvider")
            .field("base_url", &self.base_url)
            .field("publishers", &self.publishers)
            .field("credentials", &self.tokens.source().describe())
            .finish_non_exhaustive()
    }
}

impl VertexProvider {
    /// An adapter for `settings`, whose [`vertex`](ProviderSettings::vertex) must be set; the
    /// credentials file is read now (nothing is sent until the first call).
    pub fn new(settings: &ProviderSettings) -> Result<Self, BuildError> {
        let vertex = settings.vertex.as_ref().ok_or(BuildError::Vertex {
            field: "project",
            problem: "a vertex provider needs its project, region and credentials".to_owned(),
        })?;
        let base_url = settings.resolved_base_url()?;
        let publishers =
            format!("{base_url}/projects/{}/locations/{}/publishers/", vertex.project, vertex.region);
        Uri::try_from(publishers.as_str()).map_err(|_| BuildError::InvalidBaseUrl(base_url.clone()))?;
        let extra = settings.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        let headers = http::configured_headers(HeaderMap::new(), extra)?;
        let connector = http::token_connector(&settings.http)?;
        let tokens = GoogleTokens::new(&vertex.credentials, connector)
            .map_err(|error| BuildError::Vertex { field: "credentials", problem: error.to_string() })?;
        Ok(Self {
            client: http::HttpClient::new(&settings.http)?,
            base_url,
            publishers,
            headers,
            tokens: TokenCache::new(tokens),
            thinking: settings.thinking,
            betas: settings.betas.clone(),
            refused_thinking: Default::default(),
            refused_strict: Default::default(),
        })
    }

    /// What the credentials are, masked, and where they are.
    pub fn credentials(&self) -> &str {
        self.tokens.source().describe()
    }

    /// The URL of `method` on `model`.
    fn url(&self, publisher: Publisher, model: &str, method: &str) -> Result<String, ProviderError> {
        let valid = !model.is_empty()
            && model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'@'));
        if !valid {
            return Err(ProviderError::unsupported(format!(
                "model `{model}` is not a Vertex AI model id (letters, digits, `-`, `.`, `_`, `@`)"
            )));
        }
        Ok(format!("{}{}/models/{model}:{method}", self.publishers, publisher.as_str()))
    }

    /// Sends `body` to `url` with the access token and returns the success with the token
    /// sent (cut out of any error text); otherwise the classified error. A token refused (401)
    /// is forgotten and the call sent once more with a fresh one, as Google's own clients do: a
    /// token revoked or expired early is no reason to fail the call, nor to bench the
    /// credential, which a 401 does.
    async fn send(
        &self,
        call: &Call<'_>,
        url: String,
        body: impl Into<bytes::Bytes>,
        publisher: Publisher,
        deadline: Option<Instant>,
    ) -> Result<(http::Response, Secret), ProviderError> {
        let filtered = self.betas.filter_forward(call.forward);
        let call = &Call { forward: filtered.as_deref().unwrap_or(call.forward), ..*call };
        let uri = http::parse_uri(url)?;
        let body: bytes::Bytes = body.into();
        let mut refused = false;
        loop {
            let token = self.tokens.token().await.map_err(AuthError::into_provider_error)?;
            let mut headers = http::call_headers(&self.headers, call, publisher.forwarded());
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(AUTHORIZATION, bearer(&token)?);
            let request = http::post_bytes(uri.clone(), headers, body.clone());
            let classify = |status, body: &str, wait| classify(publisher, status, body, wait, &token);
            match self.client.exchange(request, call, deadline, classify).await {
                Ok(response) => return Ok((response, token)),
                Err(error) if error.status() == Some(401) && !std::mem::replace(&mut refused, true) => {
                    self.tokens.forget();
                }
                Err(error) => {
                    if error.status() == Some(401) {
                        self.tokens.forget();
                    }
                    return Err(error);
                }
            }
        }
    }

    /// Sends a Claude body, once more without its past thinking when Claude refuses that
    /// thinking as not its own (see [`anthropic::past_thinking`]), and without the strict tool
    /// use the translation of `request` carried when Claude refuses that
    /// ([`anthropic::strict`]: Vertex gates it behind an organization policy).
    async fn send_claude(
        &self,
        call: &Call<'_>,
        (url, request): (String, &ChatRequest),
        body: Vec<u8>,
    ) -> Result<((http::Response, Secret), Option<StreamNotice>), ProviderError> {
        let send = |body| self.send(call, url.clone(), body, Publisher::Anthropic, None);
        let refused = (&self.refused_thinking, call.model, call.credential.id());
        let strict = (&self.refused_strict, call.model, anthropic::strict::carried(request));
        anthropic::strict::sent(bytes::Bytes::from(body), strict, |body| {
            anthropic::past_thinking::sent(body, refused, &send)
        })
        .await
    }

    async fn claude(&self, call: Call<'_>, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let url = self.url(Publisher::Anthropic, call.model, "rawPredict")?;
        let body = self.claude_body(call.model, request, false)?;
        let ((response, token), notice) = self.send_claude(&call, (url, request), body).await?;
        let bytes = http::read_body(response).await?;
        let mut answer = anthropic::whole_answer(request, bytes, Some(&token))?;
        answer.notices.extend(notice);
        Ok(answer)
    }

    async fn claude_stream(
        &self,
        call: Call<'_>,
        request: &ChatRequest,
    ) -> Result<ChunkStream, ProviderError> {
        let url = self.url(Publisher::Anthropic, call.model, "streamRawPredict")?;
        let body = self.claude_body(call.model, request, true)?;
        let ((response, token), notice) = self.send_claude(&call, (url, request), body).await?;
        let stream = anthropic::answer_stream(response, request, Some(token)).await?;
        Ok(anthropic::past_thinking::led_by(notice, stream))
    }

    fn claude_body(
        &self,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, ProviderError> {
        anthropic::messages_body(
            model,
            request,
            stream,
            self.thinking,
            Envelope::Cloud { version: CLAUDE_VERSION, stream_in_body: true, betas: None },
        )
    }

    async fn gemini(&self, call: Call<'_>, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let url = self.url(Publisher::Google, call.model, "generateContent")?;
        let body = gemini::generate_body(request, call.model)?;
        // The total timeout covers the whole exchange, body included.
        let deadline = Instant::now().checked_add(call.timeouts.total);
        let (response, token) = self.send(&call, url, body, Publisher::Google, deadline).await?;
        let status = response.status().as_u16();
        let bytes = http::until(deadline, http::read_body(response)).await?;
        gemini::whole_answer(status, &bytes, call.model, &Redactor::new(Some(token)))
    }

    async fn gemini_stream(
        &self,
        call: Call<'_>,
        request: &ChatRequest,
    ) -> Result<ChunkStream, ProviderError> {
        let url = format!("{}?alt=sse", self.url(Publisher::Google, call.model, "streamGenerateContent")?);
        let body = gemini::generate_body(request, call.model)?;
        // No total timeout on a stream: the router's first-byte, idle and total govern it.
        let (response, token) = self.send(&call, url, body, Publisher::Google, None).await?;
        Ok(gemini::answer_stream(response, call.model, Redactor::new(Some(token))))
    }

    async fn embed(
        &self,
        call: Call<'_>,
        request: &EmbeddingsRequest,
    ) -> Result<EmbeddingsResponse, ProviderError> {
        if Publisher::of(call.model) == Publisher::Anthropic {
            return Err(ProviderError::unsupported(format!("`{}` does not embed on Vertex AI", call.model)));
        }
        let deadline = Instant::now().checked_add(call.timeouts.total);
        let mut whole: Option<EmbeddingsResponse> = None;
        let url = self.url(Publisher::Google, call.model, "predict")?;
        for (body, texts) in embeddings::predict_bodies(request, call.model)? {
            let (response, token) = self.send(&call, url.clone(), body, Publisher::Google, deadline).await?;
            let bytes = http::until(deadline, http::read_body(response)).await?;
            let part =
                embeddings::answer(&bytes, texts, call.model).map_err(|error| error.redacted(&token))?;
            whole = Some(match whole {
                None => part,
                Some(so_far) => embeddings::joined(so_far, part),
            });
        }
        whole.ok_or_else(|| ProviderError::unsupported("input: give at least one text to embed"))
    }
}

/// `Bearer {token}`, a sensitive header value.
fn bearer(token: &Secret) -> Result<HeaderValue, ProviderError> {
    http::key_value(&format!("Bearer {}", token.expose()))
}

/// The error of a non-2xx answer from a `publisher`'s model: Anthropic's error body as the
/// Anthropic adapter reads it, any other as a `google.rpc.Status`; `token` is cut out of the
/// text. A 400 that refuses a beta flag is unsupported: the next target is asked.
fn classify(
    publisher: Publisher,
    status: u16,
    body: &str,
    wait: Option<std::time::Duration>,
    token: &Secret,
) -> ProviderError {
    let anthropic = match publisher {
        Publisher::Anthropic => anthropic::messages_error(status, body, wait, Some(token)),
        Publisher::Google => None,
    };
    let error = anthropic.unwrap_or_else(|| {
        gemini::classify_http_error(status, body, wait, &Redactor::new(Some(token.clone())))
    });
    if status == 400 && refuses_beta(error.detail()) {
        let detail = format!("Vertex AI refused a beta flag of this request: {}", error.detail());
        return ProviderError::unsupported(detail).with_status(status);
    }
    if is_the_models(&error) {
        let detail = format!("Vertex AI refused this model: {}", error.detail());
        let code = error.code().unwrap_or_default().to_owned();
        return ProviderError::new(ErrorKind::ModelNotFound, detail).with_status(status).with_code(code);
    }
    error
}

/// Whether a refusal is about the target's model, not the project's credential: a permission
/// denied on a model's resource ("Permission 'aiplatform.endpoints.predict' denied on resource
/// '//aiplatform.googleapis.com/projects/p/locations/l/publishers/google/models/m' (or it may
/// not exist)", which is also how Vertex answers a model a region does not have), or a
/// precondition of one (`FAILED_PRECONDITION`: a publisher model the project may not use, a
/// model not served there). As the Gemini API's errors the first benches the credential, the
/// second spends it until an operator resets it: every model of the provider, for one model's
/// refusal. The target is gated instead, its siblings untouched.
fn is_the_models(error: &ProviderError) -> bool {
    match error.code() {
        Some("PERMISSION_DENIED") => error.detail().contains("/models/"),
        Some("FAILED_PRECONDITION") => true,
        _ => false,
    }
}

/// Whether a 400's message is the refusal of a beta flag ("invalid beta flag", "Unsupported
/// beta header: ...").
fn refuses_beta(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    detail.contains("beta flag") || detail.contains("beta header")
}

impl Provider for VertexProvider {
    fn kind(&self) -> &str {
        "vertex"
    }

    fn streams_upstream(&self) -> bool {
        true
    }

    /// Claude continues a prefill on Vertex as on Anthropic's API; Gemini is asked for the
    /// whole answer again.
    fn accepts_prefill(&self, model: &str) -> bool {
        Publisher::of(model) == Publisher::Anthropic
    }

    fn warm(&self) {
        self.client.warm();
    }

    /// The project's and region's URL (`.../v1/projects/P/locations/R/publishers`): what tells
    /// one Vertex account from another, for credential ids and for what a reload keeps.
    fn base_url(&self) -> &str {
        self.publishers.trim_end_matches('/')
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        match Publisher::of(call.model) {
            Publisher::Anthropic => Box::pin(self.claude(call, request)),
            Publisher::Google => Box::pin(self.gemini(call, request)),
        }
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        match Publisher::of(call.model) {
            Publisher::Anthropic => Box::pin(self.claude_stream(call, request)),
            Publisher::Google => Box::pin(self.gemini_stream(call, request)),
        }
    }

    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        Box::pin(self.embed(call, request))
    }

    fn count_tokens<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        Box::pin(self.count(call, request))
    }
}

impl VertexProvider {
    /// Counts `request`'s input tokens: Claude's by its `count-tokens` model (`rawPredict`,
    /// the model named in the body, as Anthropic's `count_tokens` takes it), Gemini's by
    /// `countTokens`.
    async fn count(&self, call: Call<'_>, request: &ChatRequest) -> Result<TokenCount, ProviderError> {
        let deadline = Instant::now().checked_add(call.timeouts.total);
        let (url, body, publisher) = match Publisher::of(call.model) {
            Publisher::Anthropic => (
                self.url(Publisher::Anthropic, "count-tokens", "rawPredict")?,
                anthropic::count_body(call.model, request, self.thinking)?,
                Publisher::Anthropic,
            ),
            Publisher::Google => (
                self.url(Publisher::Google, call.model, "countTokens")?,
                gemini::count_body(request, call.model, true)?,
                Publisher::Google,
            ),
        };
        let (response, token) = self.send(&call, url, body, publisher, deadline).await?;
        let status = response.status().as_u16();
        let bytes = http::until(deadline, http::read_body(response)).await?;
        match publisher {
            Publisher::Anthropic => anthropic::read_count(request, bytes, Some(&token)),
            Publisher::Google => gemini::read_count(status, &bytes, &Redactor::new(Some(token))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_models_are_anthropic_s_and_the_rest_google_s() {
        assert_eq!(Publisher::of("claude-sonnet-4-5@20250929"), Publisher::Anthropic);
        assert_eq!(Publisher::of("claude-opus-4-6"), Publisher::Anthropic);
        assert_eq!(Publisher::of("gemini-2.5-flash"), Publisher::Google);
        assert_eq!(Publisher::of("text-embedding-005"), Publisher::Google);
    }

    #[test]
    fn a_refused_beta_flag_is_unsupported_and_other_400s_are_not() {
        let token = Secret::new("ya29.token-0123456789");
        let refused =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"invalid beta flag"}}"#;
        let error = classify(Publisher::Anthropic, 400, refused, None, &token);
        assert!(error.is_unsupported(), "{error:?}");
        assert_eq!(error.status(), Some(400));
        let other =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
        assert!(!classify(Publisher::Anthropic, 400, other, None, &token).is_unsupported());
    }

    #[test]
    fn a_refusal_of_one_model_is_that_targets_not_the_projects_credential() {
        let token = Secret::new("ya29.token-0123456789");
        let google = |status: u16, code: &str, message: &str| {
            let body = serde_json::json!({ "error": { "code": status, "message": message, "status": code } });
            classify(Publisher::Google, status, &body.to_string(), None, &token)
        };
        let denied = "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash' (or it may not exist).";
        let model = google(403, "PERMISSION_DENIED", denied);
        assert_eq!((model.kind(), model.status()), (ErrorKind::ModelNotFound, Some(403)));
        assert!(model.detail().contains("gemini-2.5-flash"), "{model:?}");
        let precondition = google(400, "FAILED_PRECONDITION", "Project is not allowed to use this model.");
        assert_eq!(precondition.kind(), ErrorKind::ModelNotFound, "{precondition:?}");
        // A permission refused without naming a model is the credential's.
        let project = google(
            403,
            "PERMISSION_DENIED",
            "Vertex AI API has not been used in project p before or it is disabled.",
        );
        assert_eq!(project.kind(), ErrorKind::Auth);
    }
}
