//! The error catalog: every failure is one [`ErrorKind`], and each kind carries its defaults for
//! retrying, falling back and what it does to health.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Target;
use std::borrow::Cow;

use crate::credential::{CredentialId, Secret};
use crate::trail::Trail;

/// Why an attempt failed. Adapters classify from provider codes and HTTP status; the router
/// decides from the kind alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 429 that is not about quota: try again after the provider's Retry-After.
    RateLimited,
    /// Out of credit or quota (429 `insufficient_quota`, 402): nothing helps until it resets.
    QuotaExceeded,
    /// Connect, first-byte, idle or total timeout.
    Timeout,
    /// Refused, reset, DNS or TLS failure.
    Transport,
    /// 5xx or 529 overloaded.
    Unavailable,
    /// A 200 whose body could not be understood.
    MalformedResponse,
    /// 401 or 403: the key is wrong or lacks permission.
    Auth,
    /// 404 for the model.
    ModelNotFound,
    /// The prompt is too long for the model.
    ContextLength,
    /// The provider's content filter refused or cut the answer.
    ContentFiltered,
    /// Any other 400 or 422: the request itself is wrong.
    InvalidRequest,
    /// The answer does not match the requested schema.
    SchemaViolation,
    /// The caller went away.
    Cancelled,
}

/// What a failure of one kind does to the health of its target or credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthEffect {
    /// The credential cools down; the target is rate limited until Retry-After.
    RateLimited,
    /// The credential (and, when it has no fresh sibling, the target) is exhausted.
    Exhausted,
    /// Counts toward the circuit breaker and gates the target for the health TTL.
    TemporarilyUnavailable,
    /// The credential is benched as unauthorized for a minute, then tried again.
    Unauthorized,
    /// The target is marked unavailable (its model does not exist there).
    ModelUnavailable,
    /// Health is untouched: the failure says nothing about the provider.
    None,
}

impl ErrorKind {
    /// Every kind, in catalog order.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::RateLimited,
        ErrorKind::QuotaExceeded,
        ErrorKind::Timeout,
        ErrorKind::Transport,
        ErrorKind::Unavailable,
        ErrorKind::MalformedResponse,
        ErrorKind::Auth,
        ErrorKind::ModelNotFound,
        ErrorKind::ContextLength,
        ErrorKind::ContentFiltered,
        ErrorKind::InvalidRequest,
        ErrorKind::SchemaViolation,
        ErrorKind::Cancelled,
    ];

    /// The snake_case name used in configuration, events and the trail.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Transport => "transport",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::MalformedResponse => "malformed_response",
            ErrorKind::Auth => "auth",
            ErrorKind::ModelNotFound => "model_not_found",
            ErrorKind::ContextLength => "context_length",
            ErrorKind::ContentFiltered => "content_filtered",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::SchemaViolation => "schema_violation",
            ErrorKind::Cancelled => "cancelled",
        }
    }

    /// Whether the catalog retries the same target after this kind.
    pub fn retries_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::Timeout
                | ErrorKind::Transport
                | ErrorKind::Unavailable
                | ErrorKind::MalformedResponse
        )
    }

    /// Whether the catalog moves on to the next target after this kind. Context-length and
    /// content-filter failures move only along their special chains, so they are not here.
    pub fn falls_back_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::QuotaExceeded
                | ErrorKind::Timeout
                | ErrorKind::Transport
                | ErrorKind::Unavailable
                | ErrorKind::MalformedResponse
                | ErrorKind::Auth
                | ErrorKind::ModelNotFound
        )
    }

    /// Whether a failure of this kind counts toward the circuit breaker and the health gate.
    pub fn counts_for_breaker(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout | ErrorKind::Transport | ErrorKind::Unavailable | ErrorKind::MalformedResponse
        )
    }

    /// What a failure of this kind does to health.
    pub fn health_effect(self) -> HealthEffect {
        match self {
            ErrorKind::RateLimited => HealthEffect::RateLimited,
            ErrorKind::QuotaExceeded => HealthEffect::Exhausted,
            ErrorKind::Timeout
            | ErrorKind::Transport
            | ErrorKind::Unavailable
            | ErrorKind::MalformedResponse => HealthEffect::TemporarilyUnavailable,
            ErrorKind::Auth => HealthEffect::Unauthorized,
            ErrorKind::ModelNotFound => HealthEffect::ModelUnavailable,
            ErrorKind::ContextLength
            | ErrorKind::ContentFiltered
            | ErrorKind::InvalidRequest
            | ErrorKind::SchemaViolation
            | ErrorKind::Cancelled => HealthEffect::None,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ErrorKind {
    type Err = UnknownErrorKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ErrorKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| UnknownErrorKind(text.to_owned()))
    }
}

/// A name that is not in the error catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown error kind `{0}`: expected one of rate_limited, quota_exceeded, timeout, transport, unavailable, malformed_response, auth, model_not_found, context_length, content_filtered, invalid_request, schema_violation, cancelled"
)]
pub struct UnknownErrorKind(pub String);

/// One failed attempt, classified.
///
/// Adapters build it from what the provider said; the router fills in the target and the
/// credential id. It never holds a secret.
///
/// ```
/// use std::time::Duration;
/// use switchyard::{ErrorKind, ProviderError};
///
/// let error = ProviderError::new(ErrorKind::RateLimited, "slow down")
///     .with_status(429)
///     .with_retry_after(Duration::from_secs(2));
/// assert!(error.is_retryable());
/// assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
/// ```
#[derive(Clone, PartialEq, thiserror::Error)]
pub struct ProviderError(Box<Details>);

/// The fields of a [`ProviderError`], boxed so that results carrying one stay small.
#[derive(Debug, Clone, PartialEq)]
struct Details {
    kind: ErrorKind,
    status: Option<u16>,
    code: Option<String>,
    detail: String,
    retry_after: Option<Duration>,
    target: Option<Target>,
    credential_id: Option<CredentialId>,
    /// Raised before anything was sent: the request cannot be written in the provider's API.
    unsupported: bool,
    /// The provider said the limit is the account's, not the model's.
    account_wide: bool,
    /// The target said nothing within the attempt's first-byte wait.
    silent: bool,
    /// The target began to answer, then said nothing within the idle wait.
    stalled: bool,
    /// A reused connection the server closed as the request arrived, with no answer.
    stale: bool,
    /// The request's parameter an unsupported request could not express, when it is one.
    param: Option<String>,
}

impl ProviderError {
    /// An error of `kind` with `detail`, the provider's message in its own words (may be empty);
    /// no status, code, Retry-After, target or credential yet.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self(Box::new(Details {
            kind,
            status: None,
            code: None,
            detail: detail.into(),
            retry_after: None,
            target: None,
            credential_id: None,
            unsupported: false,
            account_wide: false,
            silent: false,
            stalled: false,
            stale: false,
            param: None,
        }))
    }

    /// A timeout of a target that said nothing: no first content of a stream within its
    /// first-byte wait, no answer at all to a call answered whole within its limit. Its kind is
    /// [`ErrorKind::Timeout`]; the router does not ask such a target again within the request
    /// while another target remains ([`is_silence`](Self::is_silence)).
    ///
    /// ```
    /// use switchyard::{ErrorKind, ProviderError};
    ///
    /// let error = ProviderError::silence("no answer within the first_byte timeout of 30s");
    /// assert!(error.is_silence() && error.kind() == ErrorKind::Timeout);
    /// ```
    pub fn silence(detail: impl Into<String>) -> Self {
        let mut error = Self::new(ErrorKind::Timeout, detail);
        error.0.silent = true;
        error
    }

    /// Whether this is a [`silence`](Self::silence): the target said nothing within the
    /// attempt's first-byte wait.
    pub fn is_silence(&self) -> bool {
        self.0.silent
    }

    /// A timeout of a target that began to answer and then said nothing within the idle wait.
    /// Its kind is [`ErrorKind::Timeout`]; as after a [`silence`](Self::silence), the router
    /// does not ask such a target again within the request while another target remains
    /// ([`is_stall`](Self::is_stall)): a target that stalled once is likely to again, and an
    /// answer asked whole would otherwise wait out the idle limit once for each retry.
    ///
    /// ```
    /// use switchyard::{ErrorKind, ProviderError};
    ///
    /// let error = ProviderError::stall("no chunk within the idle timeout of 30s");
    /// assert!(error.is_stall() && !error.is_silence() && error.kind() == ErrorKind::Timeout);
    /// ```
    pub fn stall(detail: impl Into<String>) -> Self {
        let mut error = Self::new(ErrorKind::Timeout, detail);
        error.0.stalled = true;
        error
    }

    /// Whether this is a [`stall`](Self::stall).
    pub fn is_stall(&self) -> bool {
        self.0.stalled
    }

    /// The same failure, of a pooled connection the server closed (its keep-alive ran out) as
    /// the request went on it, with no byte of an answer: the pool's race, which says nothing
    /// of the provider's health ([`is_stale_connection`](Self::is_stale_connection)). The
    /// request may have arrived, so it is not sent again unasked; the route's retry decides.
    pub fn stale_connection(mut self) -> Self {
        self.0.stale = true;
        self
    }

    /// Whether this is a [`stale_connection`](Self::stale_connection) failure.
    pub fn is_stale_connection(&self) -> bool {
        self.0.stale
    }

    /// The provider said the limit it hit is the account's (an organization's or project's
    /// limit across models), not the model's. Adapters set it from what the provider states;
    /// without it a rate limit is the model's: it rests the credential for that model only, and
    /// the provider's other models are still called with it. With it, the credential rests for
    /// every model. Quota errors bench the credential whatever this says.
    ///
    /// ```
    /// use switchyard::{ErrorKind, ProviderError};
    ///
    /// let project = ProviderError::new(ErrorKind::RateLimited, "project limit").account_wide();
    /// assert!(project.is_account_wide());
    /// assert!(!ProviderError::new(ErrorKind::RateLimited, "model limit").is_account_wide());
    /// ```
    pub fn account_wide(mut self) -> Self {
        self.0.account_wide = true;
        self
    }

    /// Whether the provider said the limit is the account's (see
    /// [`account_wide`](Self::account_wide)).
    pub fn is_account_wide(&self) -> bool {
        self.0.account_wide
    }

    /// The request cannot be written in this provider's API (`n > 1` toward a provider that
    /// answers one choice, a part only another dialect has, an operation the provider lacks).
    /// Adapters raise it before sending anything (the router records the target
    /// `skipped_unsupported`), or of a provider's refusal that says the same, with its status
    /// (recorded `failed`); either way the router leaves the target's health alone and goes on,
    /// and answers `invalid_request` naming the reasons when no target of the route could serve
    /// the request. Its kind is [`ErrorKind::InvalidRequest`].
    pub fn unsupported(detail: impl Into<String>) -> Self {
        let mut error = Self::new(ErrorKind::InvalidRequest, detail);
        error.0.unsupported = true;
        error
    }

    /// Whether this is an [`unsupported`](Self::unsupported) request: the target cannot take it.
    pub fn is_unsupported(&self) -> bool {
        self.0.unsupported
    }

    /// The same error, naming the request's top-level parameter the target cannot express
    /// (`frequency_penalty`): a route with [`drop_params`](crate::route::Route::drop_params)
    /// sends the request again without it, when it is a parameter that may go.
    ///
    /// ```
    /// use switchyard::ProviderError;
    ///
    /// let error = ProviderError::unsupported("`logit_bias` has no equivalent").with_param("logit_bias");
    /// assert_eq!(error.param(), Some("logit_bias"));
    /// ```
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.0.param = Some(param.into());
        self
    }

    /// The request's parameter the target cannot express, when the adapter named one.
    pub fn param(&self) -> Option<&str> {
        self.0.param.as_deref()
    }

    /// The HTTP status the provider answered with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.0.status = Some(status);
        self
    }

    /// The provider's own error code (`insufficient_quota`, `overloaded_error`, ...).
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.0.code = Some(code.into());
        self
    }

    /// How long the provider asked to wait (Retry-After or its rate-limit headers). A retry of the
    /// same target waits at least this long; beyond the route's `max_wait` the router moves on
    /// instead.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.0.retry_after = Some(retry_after);
        self
    }

    /// The target the attempt went to. The router stamps every error it records, so adapters need
    /// not.
    pub fn with_target(mut self, target: Target) -> Self {
        self.0.target = Some(target);
        self
    }

    /// The credential the attempt used. The router stamps every error it records, so adapters need
    /// not.
    pub fn with_credential(mut self, credential_id: CredentialId) -> Self {
        self.0.credential_id = Some(credential_id);
        self
    }

    /// The catalog kind: retry, fallback and health decide from it alone.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The same error with `secret` redacted from its detail and code (see [`Secret::redact`]).
    pub fn redacted(mut self, secret: &Secret) -> Self {
        if let Cow::Owned(detail) = secret.redact(&self.0.detail) {
            self.0.detail = detail;
        }
        if let Some(code) = self.0.code.as_mut()
            && let Cow::Owned(clean) = secret.redact(code)
        {
            *code = clean;
        }
        self
    }

    /// The HTTP status the provider answered with; `None` when no response arrived (timeouts,
    /// transport failures) or the adapter did not say.
    pub fn status(&self) -> Option<u16> {
        self.0.status
    }

    /// The provider's own error code (`insufficient_quota`, `overloaded_error`, ...), when it sent
    /// one.
    pub fn code(&self) -> Option<&str> {
        self.0.code.as_deref()
    }

    /// What went wrong, in the provider's words or the router's; may be empty.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// How long the provider asked us to wait, when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after
    }

    /// The target that failed; `None` before the router stamped the error, and for a failed
    /// candidate's.
    pub fn target(&self) -> Option<&Target> {
        self.0.target.as_ref()
    }

    /// The credential the failed attempt used; `None` before the router stamped the error, and
    /// when no credential was chosen (a target skipped as exhausted, a deadline that passed
    /// before the attempt, a candidate).
    pub fn credential_id(&self) -> Option<&CredentialId> {
        self.0.credential_id.as_ref()
    }

    /// Whether the kind is [`ErrorKind::Timeout`] (connect, first-byte, idle, total or request
    /// deadline).
    pub fn is_timeout(&self) -> bool {
        self.0.kind == ErrorKind::Timeout
    }

    /// Whether the kind is [`ErrorKind::RateLimited`]; [`ProviderError::retry_after`] says for how
    /// long, when the provider said.
    pub fn is_rate_limited(&self) -> bool {
        self.0.kind == ErrorKind::RateLimited
    }

    /// Whether the catalog would retry the same target after this error.
    pub fn is_retryable(&self) -> bool {
        self.0.kind.retries_by_default()
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.kind)?;
        if let Some(target) = &self.0.target {
            write!(f, " from {target}")?;
        }
        match (self.0.status, &self.0.code) {
            (Some(status), Some(code)) => write!(f, " (HTTP {status}, {code})")?,
            (Some(status), None) => write!(f, " (HTTP {status})")?,
            (None, Some(code)) => write!(f, " ({code})")?,
            (None, None) => {}
        }
        if !self.0.detail.is_empty() {
            write!(f, ": {}", self.0.detail)?;
        }
        Ok(())
    }
}

impl fmt::Debug for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        f.debug_struct("ProviderError")
            .field("kind", &d.kind)
            .field("status", &d.status)
            .field("code", &d.code)
            .field("detail", &d.detail)
            .field("retry_after", &d.retry_after)
            .field("target", &d.target)
            .field("credential_id", &d.credential_id)
            .field("account_wide", &d.account_wide)
            .field("silent", &d.silent)
            .field("stalled", &d.stalled)
            .field("stale", &d.stale)
            .finish()
    }
}

/// Why a routed request did not produce an answer. Every variant that reached a provider
/// carries the trail of attempts.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RouteError {
    /// `model` names neither a route nor a target of a configured provider.
    #[error("unknown model `{model}`: name a route or a `provider:model` target of a configured provider ({})", known.join(", "))]
    UnknownModel {
        /// The request's `model`, as sent.
        model: String,
        /// What a request can name instead: the routes, then the targets they name.
        known: Vec<String>,
    },
    /// Every target and candidate failed with kinds the route falls back on.
    #[error("all targets failed after {}; last: {}{}", tally(trail), last.as_ref().map_or_else(|| "every target was skipped".to_owned(), ToString::to_string), could_not_take(trail))]
    AllTargetsFailed {
        /// Every attempt, in order.
        trail: Trail,
        /// The last failure, `None` when every target was skipped.
        last: Option<ProviderError>,
        /// The route that governed the request.
        route: Arc<str>,
    },
    /// A failure the route does not fall back on, returned unchanged.
    #[error("{error}")]
    Upstream {
        /// The failure, as the provider's adapter classified it.
        error: ProviderError,
        /// Every attempt up to it.
        trail: Trail,
        /// The route that governed the request.
        route: Arc<str>,
    },
}

impl RouteError {
    /// The attempts made before giving up (empty when nothing was attempted).
    pub fn trail(&self) -> &[crate::trail::Attempt] {
        match self {
            RouteError::AllTargetsFailed { trail, .. } | RouteError::Upstream { trail, .. } => {
                trail.attempts()
            }
            RouteError::UnknownModel { .. } => &[],
        }
    }

    /// The route that governed the request (`None` when `model` named nothing).
    pub fn route(&self) -> Option<&str> {
        match self {
            RouteError::AllTargetsFailed { route, .. } | RouteError::Upstream { route, .. } => Some(route),
            RouteError::UnknownModel { .. } => None,
        }
    }

    /// The trail, handed over without a copy.
    pub fn into_trail(self) -> Trail {
        match self {
            RouteError::AllTargetsFailed { trail, .. } | RouteError::Upstream { trail, .. } => trail,
            RouteError::UnknownModel { .. } => Trail::default(),
        }
    }

    /// The provider error behind this failure, if any.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            RouteError::AllTargetsFailed { last, .. } => last.as_ref(),
            RouteError::Upstream { error, .. } => Some(error),
            RouteError::UnknownModel { .. } => None,
        }
    }

    /// The kind of the deciding failure, if one reached a provider.
    pub fn kind(&self) -> Option<ErrorKind> {
        self.provider_error().map(ProviderError::kind)
    }
}

/// What a trail holds, for an error's words: its calls, then the rest (`1 call`, `3 calls and
/// 1 skip`): a target skipped as unhealthy, or a call the pacer refused, was not called.
fn tally(trail: &Trail) -> String {
    let calls = trail.attempts().iter().filter(|a| a.sent()).count();
    let skips = trail.len() - calls;
    let plural = |n: usize, what: &str| if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") };
    match skips {
        0 => plural(calls, "call"),
        _ => format!("{} and {}", plural(calls, "call"), plural(skips, "skip")),
    }
}

/// What the targets skipped as unable to take the request said, after the error's own
/// reason: `; skipped claude:claude-sonnet-4-5, which could not take it: `logit_bias` has no
/// equivalent ...`. Empty when none was.
fn could_not_take(trail: &Trail) -> String {
    let mut said = String::new();
    for attempt in trail.attempts().iter().filter(|a| a.outcome == crate::trail::Outcome::SkippedUnsupported)
    {
        let (Some(target), Some(error)) = (attempt.target(), attempt.error.as_ref()) else { continue };
        said.push_str(&format!("; skipped {target}, which could not take it: {}", error.detail()));
    }
    said
}

/// `name` as an error says a client's name back (a model it asked for): cut to 200 characters
/// with `…`, so that a 10 MB name is not echoed whole.
pub fn said_back(name: &str) -> Cow<'_, str> {
    match name.char_indices().nth(200) {
        Some((cut, _)) => Cow::Owned(format!("{}…", &name[..cut])),
        None => Cow::Borrowed(name),
    }
}
