//! The one trait every upstream implements, and what the router hands it per call.

use std::future::Future;
use std::pin::Pin;

use futures_core::Stream;

use crate::ProviderError;
use crate::chat::{ChatChunk, ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, TokenCount};
use crate::credential::Credential;
use crate::ratelimit::RateLimits;
use crate::timeouts::Timeouts;

/// A boxed, sendable future: what the object-safe [`Provider`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A streamed answer from one provider: chunks, or a classified error that ends it.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<ChatChunk, ProviderError>> + Send>>;

/// What the router tells a provider about one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The upstream model (the part of the target after the first colon).
    pub model: &'a str,
    /// The key to use.
    pub credential: &'a Credential,
    /// The route's timeouts. The router enforces first-byte, idle and total itself; an HTTP
    /// adapter applies its connect timeout and may use these to size its own.
    pub timeouts: &'a Timeouts,
    /// Where to report the rate-limit headers of every response (success or failure), when
    /// someone (the pacer) listens.
    pub rate_limits: Option<&'a dyn RateLimitSink>,
    /// Headers of the client's request to pass on (names lower-case), already chosen by the
    /// caller's allowlist; an adapter sends those its API knows (`anthropic-beta` to
    /// Anthropic, `openai-beta` to OpenAI, ...) and ignores the rest.
    pub forward: &'a [(String, String)],
    /// The attempt's own span, when the request is traced: an HTTP adapter sends it as the
    /// `traceparent` header.
    pub trace: Option<crate::trace::TraceContext>,
    /// When the attempt's limit runs out (its `total`, or its share of the request's
    /// deadline), when the router set one: the call is cut then.
    pub ends: Option<tokio::time::Instant>,
}

/// Receives what providers say about their allowance.
pub trait RateLimitSink: Send + Sync {
    /// Takes what one response's headers said about the allowance, success or failure (adapters
    /// skip responses that said nothing). Called on the request path as the headers arrive.
    fn observe(&self, limits: &RateLimits);
}

impl std::fmt::Debug for dyn RateLimitSink + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RateLimitSink")
    }
}

/// An upstream: translates canonical requests to one API and back, and classifies failures
/// into the error catalog. Retry, fallback, health and pacing are the router's business.
///
/// Implementations return boxed futures so that providers of different kinds can sit behind
/// one `Arc<dyn Provider>`.
pub trait Provider: Send + Sync + 'static {
    /// The provider kind (`openai`, `anthropic`, `simulated`, ...), used in credential ids.
    fn kind(&self) -> &str;

    /// The base URL, used in credential ids; empty for providers without one.
    fn base_url(&self) -> &str {
        ""
    }

    /// One complete chat answer.
    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>>;

    /// A streamed chat answer. The future resolves once the upstream accepted the request;
    /// chunks (and any later failure) arrive on the stream.
    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>>;

    /// Whether a non-streamed chat is better asked of this provider as a stream and put back
    /// together ([`Route::stream_upstream`](crate::route::Route::stream_upstream)): so for a
    /// provider across a network, whose silence the `first_byte` and `idle` limits should
    /// catch; the default (no) for one in the process.
    fn streams_upstream(&self) -> bool {
        false
    }

    /// Whether a non-streamed chat of `model` is asked of this provider as a stream:
    /// [`streams_upstream`](Self::streams_upstream), unless that model's streams lack what its
    /// whole answers have (an OpenAI-compatible model that refused `stream_options` streams
    /// without its usage: its whole answers are asked whole).
    fn streams_upstream_for(&self, model: &str) -> bool {
        let _ = model;
        self.streams_upstream()
    }

    /// Whether the provider continues an answer from a final assistant message (a prefill)
    /// rather than answering it anew: how a stream broken after its first content is finished
    /// by another target ([`Route::continuation`](crate::route::Route::continuation)). Claude
    /// does on every cloud; an OpenAI-compatible server does when its operator says so. The
    /// default (no) has the router ask such a target for the whole answer again instead, kept
    /// only if it begins with exactly what the caller already has.
    fn accepts_prefill(&self, model: &str) -> bool {
        let _ = model;
        false
    }

    /// Prepares what the provider keeps per thread (connection pools, TLS roots), so that the
    /// first request a thread sends does not pay for it. A server calls it on each of its
    /// threads before serving; the default does nothing.
    fn warm(&self) {}

    /// How many input tokens `request` would take. The default refuses (as unsupported, so
    /// the router tries the route's next target): only some providers count.
    fn count_tokens<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        let _ = (call, request);
        let kind = self.kind().to_owned();
        Box::pin(async move {
            Err(ProviderError::unsupported(format!("providers of kind `{kind}` do not count tokens")))
        })
    }

    /// Embedding vectors. The default refuses: not every provider embeds.
    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        let _ = (call, request);
        let kind = self.kind().to_owned();
        Box::pin(async move {
            Err(ProviderError::unsupported(format!("providers of kind `{kind}` do not serve embeddings")))
        })
    }
}
