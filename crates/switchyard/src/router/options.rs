//! Per-request switches: what a caller may ask of one request beyond its route's policy.

use std::time::Duration;

/// Per-request switches.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Try only the first target (with its retries); no fallback, no candidates.
    pub no_fallback: bool,
    /// One call of the first target and nothing more: no retry, no other key, no fallback,
    /// no hedge, no special chain, no candidate. Its outcome is the request's, as it is (a
    /// failure comes back as [`RouteError::Upstream`](crate::RouteError::Upstream)). What
    /// `switchyard doctor --ping` sends: one call per target tells whether that target answers.
    pub single_call: bool,
    /// Overrides the route's request deadline.
    pub deadline: Option<Duration>,
    /// How long the caller waits before it gives up (a client SDK's timeout): for an answer
    /// given whole, for all of it; for a stream, for its first chunk (the response's head),
    /// after which it bounds each gap, not the stream. The request is answered by then or not
    /// at all, its deadline until then the sooner of this and the route's (or `deadline`), so
    /// that a silent first target leaves the targets after it their share.
    pub caller_timeout: Option<Duration>,
    /// Headers of the client's request to pass on to the provider (see
    /// [`Call::forward`](crate::provider::Call::forward)).
    pub forward_headers: Vec<(String, String)>,
    /// Whose answers a `cache` candidate keeps and serves: a caller never gets an answer
    /// remembered for another scope. The gateway gives the gateway key's hash.
    pub cache_scope: String,
    /// Neither remember this request's answer nor answer it from a `cache` candidate.
    pub no_cache: bool,
    /// The request's trace context, when the caller traces: each attempt sent is a child
    /// span of it, and its call carries that span as `traceparent`.
    pub trace: Option<crate::trace::TraceContext>,
    /// Which reasoning the caller is shown: a stream commits (no fallback after it) with the
    /// first chunk the caller is shown. Default: any.
    pub reasoning: crate::chat::ReasoningShown,
    /// The conversation the request belongs to, when the caller names one: on a route with
    /// [`affinity`](crate::affinity), its requests go back to the target and key that served
    /// it (kept per `cache_scope`, so one caller's sessions never steer another's).
    pub session: Option<String>,
    /// Where the trail goes should the caller drop the request before it is answered (see
    /// [`Unfinished`](crate::trail::Unfinished)); `None`: nowhere.
    pub unfinished: Option<crate::trail::Unfinished>,
}

impl RequestOptions {
    /// Whether the request walks its first target only: fallback off, or one call.
    pub(super) fn first_target_only(&self) -> bool {
        self.no_fallback || self.single_call
    }
}
