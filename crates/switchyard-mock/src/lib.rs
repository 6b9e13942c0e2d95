//! A fast mock LLM upstream for Switchyard's end-to-end tests and benchmarks. It speaks the
//! OpenAI Chat Completions, OpenAI embeddings and Anthropic Messages dialects, and what it does
//! is chosen by the URL path, so one mock serves every provider of a gateway config:
//!
//! ```text
//! POST /{scenario}/v1/chat/completions   OpenAI dialect
//! POST /{scenario}/v1/messages           Anthropic dialect
//! POST /{scenario}/v1/embeddings         OpenAI embeddings
//! POST /v1/...                           the same with scenario `ok`
//! POST /_reset                           restart every scenario at its first step
//! GET  /_stats                           request counts and the last request per scenario
//! GET  /_health                          200 {"ok":true}
//! ```
//!
//! A gateway provider with `base_url: http://127.0.0.1:PORT/fail500,ok/v1` (OpenAI kind) or
//! `http://127.0.0.1:PORT/ok` (Anthropic kind) gets that behaviour.
//!
//! # Scenarios
//!
//! A scenario is comma-separated steps. Each request to a scenario string takes the next step;
//! after the last one the last step repeats, unless the scenario ends with `loop`, which starts
//! it over (`status=500,ok,ok,ok,loop` fails one request in four). The counter belongs to the
//! exact scenario string and is shared by all connections and endpoints.
//!
//! | step | OpenAI | Anthropic |
//! |---|---|---|
//! | `ok` | "mock answer from {model}", streamed when `"stream": true` | same |
//! | `tools` | a `get_weather` call with `{"city":"Paris"}` | `tool_use` block |
//! | `filter` | `finish_reason: content_filter`, empty content | `stop_reason: refusal` |
//! | `refuse` | `message.refusal` (streamed as `delta.refusal`), `finish_reason: stop` | the refusal as text, `end_turn` |
//! | `status=NNN` / `failNNN` | NNN with `{"error":{message,type,param,code}}` | NNN with `{"type":"error","error":{type,message}}` (529 `overloaded_error`) |
//! | `ratelimit=S` | 429 `rate_limit_exceeded`, `retry-after: S`, `x-ratelimit-*` | 429 `rate_limit_error`, `retry-after: S`, `anthropic-ratelimit-*` |
//! | `quota` | 429 `insufficient_quota` | 400 credit balance too low |
//! | `auth` | 401 `invalid_api_key` | 401 `authentication_error` |
//! | `authkey=K` | 401 when the presented key is K, else `ok` | same (`x-api-key` or Bearer) |
//! | `context` | 400 `context_length_exceeded` | 400 "prompt is too long: 210000 tokens > 200000 maximum" |
//! | `hang` | never answers, until the client disconnects | same |
//! | `reset` | closes the connection without a response | same |
//! | `cut=N` | streams N content chunks, then drops the connection | same |
//! | `noterm` | a whole stream (content, finish, usage) without `data: [DONE]` (the Responses API: every item done, no `response.completed`, which the gateway reads as a break) | `message_delta` with stop reason and usage, no `message_stop` |
//! | `noend` | as `noterm`, then the connection held open | as `noterm`, then the connection held open |
//! | `badevent=N` | a whole stream with one more event, not JSON, as its Nth | a `content_block_delta` that is not JSON |
//! | `stall=N` | streams N content chunks, then sends nothing until the client goes | same |
//! | `keepalive=N` | as `stall`, but an empty delta every 200 ms while it holds on | same |
//! | `errevent=N` | N content chunks, then `data: {"error":{…,"type":"server_error"}}`, then the end | `event: error`, `overloaded_error` |
//! | `down=D` | 503 until D after the scenario's first request, then `ok` | same |
//! | `model429=M` | 429 `rate_limit_exceeded` without `retry-after` for model M, else `ok` | 429 `rate_limit_error` |
//! | `noprefill` | 400 `invalid_request_error` (no assistant message prefill) when the last message is the assistant's, else `ok` | same |
//!
//! Modifiers follow a step after `~`: `latency=D` waits before answering (so before a stream's
//! response head and first chunk), `jitter=D` adds a uniform random wait in `[0, D)`,
//! `chunks=N` sets the number of content chunks of a stream (default 4; also the completion
//! token count), `gap=D` pauses between chunks, `words=N` makes the text the words
//! `w1 w2 … wN` whatever the model, one per chunk (so `cut=40~words=60` breaks after 40 words,
//! and two targets say the same), `tools` plays a stream's fault over a `tools` answer (so
//! `cut=2~tools` streams the call's start and two pieces of its arguments, then drops the
//! connection). Durations are written `500us`, `20ms`, `1.5s` or `2m`.
//! Example: `ok~latency=20ms~chunks=8~gap=50ms`.
//!
//! A request whose last message is the assistant's (a prefill) gets, from any text step, what
//! follows that prefix in its text (the prefix compared without its trailing whitespace), or the
//! whole text when it does not begin so.
//!
//! Sent whole, `cut=N` announces the full `content-length`, sends half the body and drops the
//! connection; `stall=N` sends the half and holds it; `errevent=N` is the error as a status (500,
//! Anthropic's 529); `noterm`, `noend` and `badevent=N` are `ok`. Embeddings answer `ok`, `tools` and
//! `filter` alike with vectors.
//!
//! # In tests
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! let (addr, _server) = switchyard_mock::spawn().await?;
//! let base_url = format!("http://{addr}/status=503,ok/v1");
//! # let _ = base_url;
//! # Ok(())
//! # }
//! ```

mod anthropic;
mod body;
mod embeddings;
mod openai;
mod probe;
mod registry;
mod reply;
mod responses;
mod scenario;
mod server;
mod text;
mod wire;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Serves the mock on `listener` until the task is dropped or aborted.
///
/// Accept errors (such as running out of file descriptors under load) are reported on stderr
/// and retried after a short pause rather than ending the server, so in practice this never
/// returns.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8090").await?;
/// switchyard_mock::serve(listener).await
/// # }
/// ```
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    server::serve(listener, None).await
}

/// [`serve`] behind TLS, with the certificate and key of `identity`: an upstream as real
/// providers are, for tests and benchmarks of handshakes and connection reuse.
pub async fn serve_tls(listener: TcpListener, identity: &TlsIdentity) -> std::io::Result<()> {
    server::serve(listener, Some(identity.acceptor.clone())).await
}

/// A server certificate chain and its private key, for [`serve_tls`].
#[derive(Clone)]
pub struct TlsIdentity {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity")
    }
}

impl TlsIdentity {
    /// From PEM text: `certificates` (the server's first, then any intermediates) and `key`
    /// (PKCS#8, PKCS#1 or SEC1). The error says which part is wrong.
    pub fn from_pem(certificates: &[u8], key: &[u8]) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(certificates)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("the certificate file is not PEM: {error}"))?;
        if chain.is_empty() {
            return Err("the certificate file holds no certificate".to_owned());
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| format!("the key file: {error}"))?;
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|error| format!("the certificate and key do not make a TLS server: {error}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)) })
    }
}

/// Binds `127.0.0.1` on a free port and serves the mock on a background task; returns the
/// address and the accept task (abort it to stop taking new connections; the runtime's end stops
/// everything). Each call has its own scenario counters.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// let (addr, server) = switchyard_mock::spawn().await?;
/// // ... point a client at http://{addr}/ok/v1 ...
/// server.abort();
/// # Ok(())
/// # }
/// ```
pub async fn spawn() -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    spawn_with(None).await
}

/// [`spawn`] behind TLS with `identity`: the mock answers on `https://{addr}`.
pub async fn spawn_tls(identity: &TlsIdentity) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    spawn_with(Some(identity.clone())).await
}

async fn spawn_with(identity: Option<TlsIdentity>) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let served = match identity {
            Some(identity) => serve_tls(listener, &identity).await,
            None => serve(listener).await,
        };
        if let Err(error) = served {
            eprintln!("switchyard-mock: stopped: {error}");
        }
    });
    Ok((addr, task))
}
