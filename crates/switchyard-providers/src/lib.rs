#![warn(missing_docs)]

//! Switchyard's provider adapters: each translates the canonical chat types to one upstream
//! API and back, streams, and classifies every failure into the error catalog from the
//! provider's own status and codes.
//!
//! Build one from [`ProviderSettings`] with [`build`], and register it with the router:
//!
//! ```no_run
//! use switchyard::ProviderEntry;
//! use switchyard::credential::Secret;
//! use switchyard_providers::{ProviderKind, ProviderSettings, build};
//!
//! let provider = build(&ProviderSettings::new(ProviderKind::OpenAi)).unwrap();
//! let entry = ProviderEntry::from_arc("openai", provider).key(Secret::new("sk-..."));
//! ```

pub mod anthropic;
pub mod bedrock;
mod betas;
pub mod codec;
pub mod files;
pub mod gemini;
pub mod http;
mod lately;
pub mod openai;
mod pieces;
pub mod responses;
pub mod sse;
mod verbatim;
pub mod vertex;
pub(crate) mod wording;

use std::fmt;
use std::sync::Arc;

use switchyard::provider::Provider;

pub use crate::betas::BetaPolicy;
pub use crate::http::HttpSettings;
pub use crate::verbatim::with_model;

/// The kinds of HTTP provider Switchyard speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI itself: Chat Completions and embeddings (`Authorization: Bearer`), base
    /// `https://api.openai.com/v1`.
    OpenAi,
    /// Anthropic's Messages API (`x-api-key`), base `https://api.anthropic.com`.
    Anthropic,
    /// Google's Gemini API (`x-goog-api-key`), base
    /// `https://generativelanguage.googleapis.com/v1beta`.
    Gemini,
    /// Azure OpenAI (`api-key` header, `api-version` query); no default base URL, the
    /// resource's endpoint must be configured.
    Azure,
    /// Any server speaking the OpenAI dialect (Ollama, vLLM, llama.cpp, Groq, OpenRouter, ...).
    OpenAiCompatible,
    /// AWS Bedrock's runtime (SigV4, or a Bedrock API key as `Authorization: Bearer`), base
    /// `https://bedrock-runtime.{region}.amazonaws.com`: Claude through InvokeModel, other
    /// models through Converse.
    Bedrock,
    /// Google Vertex AI: Claude and Gemini of one project and region, with Google OAuth
    /// tokens; needs [`ProviderSettings::vertex`]. Base `https://{region}-aiplatform.googleapis.com/v1`.
    Vertex,
}

impl ProviderKind {
    /// Whether a provider of this kind speaks Anthropic's Messages API to `model`: every model
    /// of Anthropic's own, Claude on Vertex and Bedrock (their other models speak Gemini's and
    /// Converse's). Only those read Claude's signed thinking and an Anthropic client's fields
    /// that no other dialect has.
    ///
    /// ```
    /// use switchyard_providers::ProviderKind;
    ///
    /// assert!(ProviderKind::Vertex.speaks_messages("claude-sonnet-4-5@20250929"));
    /// assert!(!ProviderKind::Vertex.speaks_messages("gemini-2.5-pro"));
    /// assert!(ProviderKind::Bedrock.speaks_messages("us.anthropic.claude-sonnet-4-5-20250929-v1:0"));
    /// assert!(!ProviderKind::Bedrock.speaks_messages("amazon.nova-pro-v1:0"));
    /// assert!(!ProviderKind::OpenAiCompatible.speaks_messages("claude-via-proxy"));
    /// ```
    pub fn speaks_messages(self, model: &str) -> bool {
        match self {
            ProviderKind::Anthropic => true,
            ProviderKind::Vertex => model.to_ascii_lowercase().starts_with("claude"),
            ProviderKind::Bedrock => bedrock::is_claude(model),
            _ => false,
        }
    }

    /// The name used in configuration and in credential ids.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Azure => "azure",
            ProviderKind::OpenAiCompatible => "openai_compatible",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Vertex => "vertex",
        }
    }

    /// The public endpoint of the kind, when it has one.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            // Bedrock's and Vertex AI's depend on the region
            // ([`vertex::VertexSettings::default_base_url`]).
            ProviderKind::Azure
            | ProviderKind::OpenAiCompatible
            | ProviderKind::Bedrock
            | ProviderKind::Vertex => None,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to reach one provider. Keys are not here: the router owns credentials and hands one to
/// each call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// Which API the provider speaks; picks the adapter [`build`] makes.
    pub kind: ProviderKind,
    /// Overrides the kind's public endpoint; required for Azure and OpenAI-compatible servers.
    pub base_url: Option<String>,
    /// Extra headers sent with every request (never logged).
    pub headers: Vec<(String, String)>,
    /// Azure's `api-version` query, Anthropic's `anthropic-version` header.
    pub api_version: Option<String>,
    /// OpenAI's `OpenAI-Organization` header.
    pub organization: Option<String>,
    /// OpenAI's `OpenAI-Project` header.
    pub project: Option<String>,
    /// Connection settings of this provider's own connection pool.
    pub http: HttpSettings,
    /// Whether a Responses API client is answered through this provider's own Responses API
    /// (`/responses`) rather than translated to Chat Completions. Always for `openai` and
    /// Azure's v1 API; for `openai_compatible`, when the server has one (`responses: native`).
    pub responses_native: bool,
    /// How an Anthropic model is asked to think when a client of another dialect sends
    /// `reasoning_effort`; by the model's name ([`anthropic::ThinkingStyle::of_model`]) when `None`.
    pub thinking: Option<anthropic::ThinkingStyle>,
    /// Whether an `openai_compatible` server continues a final assistant message (a prefill)
    /// rather than answering it anew ([`Provider::accepts_prefill`](switchyard::provider::Provider::accepts_prefill)).
    /// Anthropic always does; OpenAI's API does not.
    pub prefill: bool,
    /// Which of a client's `anthropic-beta` flags a Claude provider (Anthropic, Bedrock) passes
    /// on: all by default.
    pub betas: BetaPolicy,
    /// Bedrock's region and AWS credentials; required for [`ProviderKind::Bedrock`].
    pub bedrock: Option<bedrock::BedrockSettings>,
    /// A Vertex AI provider's project, region and credentials; required for
    /// [`ProviderKind::Vertex`], unused by the other kinds.
    pub vertex: Option<vertex::VertexSettings>,
}

impl ProviderSettings {
    /// Settings for `kind` with nothing else set: no base URL (the kind's public endpoint, if
    /// it has one), no extra headers, no API version (the adapter's default) and
    /// [`HttpSettings::default`].
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            base_url: None,
            headers: Vec::new(),
            api_version: None,
            organization: None,
            project: None,
            http: HttpSettings::default(),
            responses_native: false,
            thinking: None,
            prefill: false,
            betas: BetaPolicy::Forward,
            bedrock: None,
            vertex: None,
        }
    }

    /// Sets [`base_url`](Self::base_url), the endpoint that overrides the kind's public one.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Checks what [`build`] would refuse of these settings, without building anything: the
    /// base URL in force (returned), every configured header and, for Vertex AI, that its
    /// settings are there and its credentials file reads.
    pub fn check(&self) -> Result<String, BuildError> {
        if self.kind == ProviderKind::Bedrock && self.bedrock.is_none() {
            return Err(BuildError::MissingRegion);
        }
        if self.kind == ProviderKind::Vertex {
            let vertex = self.vertex.as_ref().ok_or(BuildError::Vertex {
                field: "project",
                problem: "a vertex provider needs its project, region and credentials".to_owned(),
            })?;
            vertex.credentials().describe().map_err(|error| {
                let problem = match vertex.credentials() {
                    vertex::GoogleCredentials::File(_) => error.to_string(),
                    found => format!("{error} (found as {})", found.origin()),
                };
                BuildError::Vertex { field: "credentials", problem }
            })?;
        }
        let base_url = self.resolved_base_url()?;
        let headers = self.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        crate::http::configured_headers(::http::HeaderMap::new(), headers)?;
        Ok(base_url)
    }

    /// The base URL in force, without a trailing slash.
    pub fn resolved_base_url(&self) -> Result<String, BuildError> {
        let url = match (&self.base_url, self.kind.default_base_url(), &self.vertex) {
            (Some(url), _, _) => url.clone(),
            (None, Some(url), _) => url.to_owned(),
            (None, None, Some(vertex)) if self.kind == ProviderKind::Vertex => vertex.default_base_url(),
            (None, None, _) if self.kind == ProviderKind::Bedrock => match &self.bedrock {
                Some(bedrock) => bedrock::default_base_url(&bedrock.region),
                None => return Err(BuildError::MissingRegion),
            },
            (None, None, _) => return Err(BuildError::MissingBaseUrl(self.kind)),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(BuildError::InvalidBaseUrl(url));
        }
        Ok(url.trim_end_matches('/').to_owned())
    }
}

/// A provider that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The kind has no public endpoint (Azure, OpenAI-compatible) and no `base_url` was set.
    #[error("providers of kind `{0}` need a base_url")]
    MissingBaseUrl(ProviderKind),
    /// A Bedrock provider without its region.
    #[error("bedrock providers need a region (e.g. us-east-1)")]
    MissingRegion,
    /// The `base_url` (held here) does not start with `http://` or `https://`; a password in
    /// it is not shown.
    #[error("base_url `{}` is not a usable http:// or https:// URL (no fragment, no spaces)", without_password(.0.split('?').next().unwrap_or_default()))]
    InvalidBaseUrl(String),
    /// A configured header (its name is held here) is not a valid header name or value.
    #[error("header `{0}` is not a valid HTTP header name or value")]
    InvalidHeader(String),
    /// A Vertex AI setting (its name is held here) cannot serve: a project or region that
    /// could not name one, credentials that cannot be read.
    #[error("{field}: {problem}")]
    Vertex {
        /// `project`, `region` or `credentials`.
        field: &'static str,
        /// What is wrong, and the fix.
        problem: String,
    },
    /// The HTTP client could not be built: the platform's TLS verifier failed to set up.
    #[error("could not build the HTTP client: {0}")]
    Client(#[from] crate::http::ClientError),
}

/// Builds the adapter for `settings`.
pub fn build(settings: &ProviderSettings) -> Result<Arc<dyn Provider>, BuildError> {
    Ok(match settings.kind {
        ProviderKind::OpenAi | ProviderKind::Azure | ProviderKind::OpenAiCompatible => {
            Arc::new(openai::OpenAiProvider::new(settings)?)
        }
        ProviderKind::Anthropic => Arc::new(anthropic::AnthropicProvider::new(settings)?),
        ProviderKind::Gemini => Arc::new(gemini::GeminiProvider::new(settings)?),
        ProviderKind::Bedrock => Arc::new(bedrock::BedrockProvider::new(settings)?),
        ProviderKind::Vertex => Arc::new(vertex::VertexProvider::new(settings)?),
    })
}

/// `url` with the password of its user part (`user:password@`) shown as `***`, for what is
/// printed or logged.
///
/// ```
/// use switchyard_providers::without_password;
/// assert_eq!(without_password("https://me:s3cret@proxy.local/v1"), "https://me:***@proxy.local/v1");
/// assert_eq!(without_password("https://u:p/w?x@h/v1"), "https://u:***@h/v1");
/// assert_eq!(without_password("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1");
/// assert_eq!(without_password("ftp://user@host"), "ftp://user@host");
/// ```
pub fn without_password(url: &str) -> std::borrow::Cow<'_, str> {
    let start = url.find("://").map_or(0, |at| at + 3);
    // The user part ends at the last `@`; a password may hold `/`, `?` or `#`.
    let Some(at) = url[start..].rfind('@').map(|at| start + at) else {
        return std::borrow::Cow::Borrowed(url);
    };
    match url[start..at].find(':') {
        Some(colon) => std::borrow::Cow::Owned(format!("{}:***{}", &url[..start + colon], &url[at..])),
        None => std::borrow::Cow::Borrowed(url),
    }
}
