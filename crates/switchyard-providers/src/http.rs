//! What every HTTP adapter shares: the client, the configured, forwarded and key headers, one
//! exchange with an upstream, transport-error classification, reading bodies, Retry-After and
//! rate-limit headers.
//!
//! The client is hyper's with a rustls connector and nothing on top: HTTP/1 connections in a
//! pool of its own ([`pool`]), HTTP/2 on hyper-util's client. Redirects are not followed (a
//! 3xx is an answer like any other), and the only retry is the resend of a request that never
//! left a reused connection. The adapters build each [`Request`] themselves, from a [`Uri`]
//! parsed once where the URL does not name the model.

use std::cell::RefCell;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use ::http::header::{ACCEPT, ACCEPT_ENCODING, HOST, HeaderMap, HeaderName, HeaderValue};
use ::http::uri::Authority;
use ::http::{Method, Uri};
use bytes::Bytes;
use futures_core::Stream;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
pub use rustls::pki_types::CertificateDer;
use switchyard::provider::{Call, RateLimitSink};
use switchyard::ratelimit::RateLimits;
use switchyard::{ErrorKind, ProviderError};
use tokio::time::Instant;

use crate::BuildError;

/// Connection settings of one provider. Each provider gets its own pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// How long opening a connection may take: name resolution, TCP and the TLS handshake.
    /// Default 10 s.
    pub connect_timeout: Duration,
    /// HTTP/2 instead of HTTP/1.1. Off by default: on one HTTP/2 connection, long streams
    /// queue behind each other.
    pub http2: bool,
    /// How long an idle pooled connection may still be used. Default 90 s. Over HTTP/1 an
    /// expired connection is closed when its thread's pool is next used (nothing wakes a
    /// thread just to close one); with zero, no connection carries a second request.
    pub pool_idle_timeout: Duration,
    /// Certificate authorities trusted beside the platform's: a provider behind a private CA
    /// (an on-premises server, a corporate proxy, a self-signed test upstream). Read from a PEM
    /// file by [`read_ca_file`].
    pub extra_roots: Vec<CertificateDer<'static>>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            http2: false,
            pool_idle_timeout: Duration::from_secs(90),
            extra_roots: Vec::new(),
        }
    }
}

mod pool;

/// How connections are opened: TCP, then TLS for `https://`, all within the connect timeout.
type Connector = ConnectWithin<HttpsConnector<HttpConnector>>;

/// One client's connections on one thread.
enum Pool {
    /// HTTP/1: each connection is driven by the request that holds it ([`pool`]).
    Own(pool::Pool),
    /// HTTP/2: hyper-util's client, whose connections are shared by concurrent requests and
    /// driven by tasks of their own.
    Shared(Box<Client<Connector, Full<Bytes>>>),
}

/// A request to an upstream: the whole body is in memory.
pub type Request = ::http::Request<Full<Bytes>>;

/// An upstream's response; its body is read with [`read_body`], [`read_error_body`] or
/// [`body_stream`].
pub type Response = ::http::Response<UpstreamBody>;

/// The body of an upstream's response. Over HTTP/1, reading it drives its connection, which
/// goes back to the pool when the body has been read to its end; a body dropped before then
/// closes its connection.
pub struct UpstreamBody(Inner);

enum Inner {
    Pooled(pool::PooledBody),
    Shared(Incoming),
}

impl fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UpstreamBody")
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().0 {
            Inner::Pooled(body) => body.poll_frame(cx),
            Inner::Shared(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Pooled(body) => body.is_end_stream(),
            Inner::Shared(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Pooled(body) => body.size_hint(),
            Inner::Shared(body) => body.size_hint(),
        }
    }
}

/// One provider's HTTP client: a connection pool per thread, all made from the same settings.
///
/// A connection is registered with the runtime that opened it. The gateway runs one
/// single-threaded runtime per core; a pool shared between them would hand a request on one
/// thread a connection of another, and every read and write would then wake that other
/// thread. With a pool per thread, an upstream exchange stays on the thread of the client
/// connection that asked for it. An HTTP/1 connection goes back to the pool of the thread its
/// response ends on: on a multi-threaded runtime, a body read on another thread than the one
/// that sent the request moves its connection there.
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// What every thread's pool of this client is made from. Its address identifies the
    /// client's pools in every thread's cache; they are dead once every clone is gone.
    home: Arc<Home>,
    /// The `Host` header of the first authority this client wrote one for: a provider speaks
    /// to one host, and hyper's client would otherwise format the header for every request.
    /// Requests to another authority get theirs made each time.
    host: OnceLock<(Authority, HeaderValue)>,
}

/// What every thread's pools of one [`HttpClient`] are made from.
#[derive(Debug)]
struct Home {
    settings: HttpSettings,
    /// The TLS configuration every thread's pool shares: the platform's roots are loaded once.
    tls: rustls::ClientConfig,
}

thread_local! {
    /// This thread's pools: one per live [`HttpClient`], pruned when a new one is added.
    static POOLS: RefCell<Vec<(Weak<Home>, Pool)>> = const { RefCell::new(Vec::new()) };
}

impl HttpClient {
    /// Sets up TLS with the platform's certificate verifier (the step that can fail); each
    /// thread's pool is made on its first use, or by [`HttpClient::warm`].
    pub fn new(settings: &HttpSettings) -> Result<Self, ClientError> {
        let tls = tls_config(&settings.extra_roots)?;
        Ok(Self { home: Arc::new(Home { settings: settings.clone(), tls }), host: OnceLock::new() })
    }

    /// Makes the calling thread's pool now, if it has none yet.
    pub fn warm(&self) {
        self.with_pool(|_| ());
    }

    /// Sends `request` on the calling thread's pool (made on the thread's first call).
    pub fn send(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Response, TransportError>> + Send + 'static {
        let mut request = request;
        // HTTP/2 names the host in `:authority`, which hyper writes from the URI.
        if !self.home.settings.http2
            && !request.headers().contains_key(HOST)
            && let Some(host) = self.host(request.uri())
        {
            request.headers_mut().insert(HOST, host);
        }
        // The pool is borrowed only to start the request: no clone of it per request.
        self.with_pool(|pool| -> Sending {
            match pool {
                Pool::Own(pool) => Box::pin(pool.start(request, Arc::downgrade(&self.home))),
                Pool::Shared(client) => {
                    let response = client.request(request);
                    Box::pin(async move {
                        let response = response.await.map_err(TransportError::send)?;
                        Ok(response.map(|body| UpstreamBody(Inner::Shared(body))))
                    })
                }
            }
        })
    }

    /// Sends `request` for `call` and returns the response when its status is a success. The
    /// rate-limit headers of every response go to the call's sink ([`observe_limits`]); any
    /// other status is the error `classify` makes of the status, the error body (see
    /// [`read_error_body`]) and the wait the provider asked for ([`retry_after`]).
    ///
    /// With a `deadline`, a response head that has not arrived by then is a timeout, and the
    /// error body is what arrived of it by then.
    pub(crate) async fn exchange(
        &self,
        request: Request,
        call: &Call<'_>,
        deadline: Option<Instant>,
        classify: impl FnOnce(u16, &str, Option<Duration>) -> ProviderError,
    ) -> Result<Response, ProviderError> {
        let response = until(deadline, self.send(request)).await?;
        if let Some(coding) = encoded(&response).filter(|_| response.status().is_success()) {
            // Read as it is, it would be bytes of nothing: a proxy compressed it unasked. (An
            // error is classified by its status, whatever its body says.)
            return Err(ProviderError::new(
                ErrorKind::MalformedResponse,
                format!("the answer came `{coding}`-encoded though `identity` was asked: it cannot be read"),
            ));
        }
        if response.status().is_success() {
            // A success's headers matter only to a pacer: without one, they are not read.
            if let Some(sink) = call.rate_limits {
                observe_limits(&response, Some(sink));
            }
            return Ok(response);
        }
        let limits = observe_limits(&response, call.rate_limits);
        let status = response.status().as_u16();
        if let Some(redirect) = redirect(&response) {
            return Err(ProviderError::new(ErrorKind::Unavailable, redirect).with_status(status));
        }
        let wait = retry_after(status, &limits);
        let body = read_error_body_until(response, deadline).await;
        Err(crate::wording::refine(classify(status, &body, wait)))
    }

    /// The `Host` header for `uri`, as hyper's client writes it (the port only when it is not
    /// the scheme's default), made on the first request and kept for the requests to the same
    /// authority. `None` for a URI without a host, which the client refuses itself.
    fn host(&self, uri: &Uri) -> Option<HeaderValue> {
        let authority = uri.authority()?;
        if let Some((known, value)) = self.host.get() {
            return (known == authority).then(|| value.clone()).or_else(|| host_value(uri));
        }
        let value = host_value(uri)?;
        let _ = self.host.set((authority.clone(), value.clone()));
        Some(value)
    }

    /// Runs `f` on the calling thread's pool of this client, making the pool first if the
    /// thread has none yet.
    fn with_pool<T>(&self, f: impl FnOnce(&mut Pool) -> T) -> T {
        POOLS.with_borrow_mut(|pools| f(pool_of(pools, &self.home)))
    }
}

/// A request on its way, until its response head. Boxed, as hyper-util's future is: the
/// future of a call is moved several times as the layers above wrap it, and an HTTP/1
/// request's state (the request, the connection's send) is more than a kilobyte.
type Sending = Pin<Box<dyn Future<Output = Result<Response, TransportError>> + Send>>;

/// Closes the calling thread's idle HTTP/1 connections that are past `pool_idle_timeout` or
/// that their server has closed, and drops the pools of clients that are gone. Idle
/// connections are otherwise closed only when their pool is next used: a thread that goes
/// quiet would keep its sockets, half closed by the servers, until its next request. Cheap
/// (no system call for a connection with nothing to read); the gateway's workers call it once
/// a second.
pub fn tidy_idle() {
    let _ = POOLS.try_with(|pools| {
        let Ok(mut pools) = pools.try_borrow_mut() else { return };
        pools.retain(|(home, _)| home.strong_count() > 0);
        for (_, pool) in pools.iter_mut() {
            if let Pool::Own(pool) = pool {
                pool.tidy();
            }
        }
    });
}

/// The pool of the client `home` in a thread's `pools`, made first if there is none (when the
/// pools of clients that are gone are dropped).
fn pool_of<'a>(pools: &'a mut Vec<(Weak<Home>, Pool)>, home: &Arc<Home>) -> &'a mut Pool {
    // Compared by address: no reference count is touched on the request path. A pool's `Weak`
    // keeps its allocation, so the address cannot be reused while it is listed.
    let mine = Arc::as_ptr(home);
    let at = match pools.iter().position(|(id, _)| std::ptr::eq(id.as_ptr(), mine)) {
        Some(at) => at,
        None => {
            pools.retain(|(id, _)| id.strong_count() > 0);
            pools.push((Arc::downgrade(home), client(&home.settings, &home.tls)));
            pools.len() - 1
        }
    };
    &mut pools[at].1
}

/// Runs `f` on the calling thread's HTTP/1 pool of the client `home`, made first if the
/// thread has none; `None`, without calling `f`, once the client is gone (or the thread is
/// shutting down).
fn on_this_thread<T>(home: &Weak<Home>, f: impl FnOnce(&mut pool::Pool) -> T) -> Option<T> {
    let home = home.upgrade()?;
    POOLS
        .try_with(|pools| match pool_of(&mut *pools.try_borrow_mut().ok()?, &home) {
            Pool::Own(pool) => Some(f(pool)),
            Pool::Shared(_) => None,
        })
        .ok()
        .flatten()
}

/// The `Host` header of a request to `uri`: its host, and its port as written unless it is the
/// scheme's default (hyper's client's rule).
pub(crate) fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = if matches!(uri.scheme_str(), Some("https" | "wss")) { 443 } else { 80 };
    let value = match uri.port() {
        Some(port) if port.as_u16() != default_port => {
            HeaderValue::try_from(format!("{host}:{}", port.as_str()))
        }
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

/// An HTTP client that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("the TLS certificate verifier could not be set up: {0}")]
pub struct ClientError(String);

/// TLS with the platform's certificate verifier, trusting `extra_roots` as well, and aws-lc-rs,
/// named rather than picked from crate features (which could otherwise panic if another
/// provider were ever enabled).
fn tls_config(extra_roots: &[CertificateDer<'static>]) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| ClientError(error.to_string()))?;
    let builder = if extra_roots.is_empty() {
        builder.try_with_platform_verifier()
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots.iter().cloned(), provider)
            .map(|verifier| builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier)))
    };
    builder.map(|builder| builder.with_no_client_auth()).map_err(|error| ClientError(error.to_string()))
}

/// The most a CA file may hold: far more than any bundle of roots.
const CA_FILE_MOST: u64 = 16 << 20;

/// The certificates of the PEM file at `path`, for [`HttpSettings::extra_roots`]. The error
/// says what is wrong with the file (unreadable, not PEM, no certificate in it), without the
/// path, which the caller names as it knows it.
pub fn read_ca_file(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    let pem =
        crate::files::read_bounded(path, CA_FILE_MOST).map_err(|error| format!("cannot be read: {error}"))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("is not a PEM certificate file: {error}"))?;
    if certificates.is_empty() {
        return Err("holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)".to_owned());
    }
    Ok(certificates)
}

/// The connector of a client beside a provider's own pools (the one Google's token endpoints
/// are reached through): this crate's TLS, the platform's roots and `extra_roots`, HTTP/1, and
/// the whole connect within `connect_timeout`.
pub(crate) type TokenConnector = Connector;

/// A [`TokenConnector`] made from `settings`.
pub(crate) fn token_connector(settings: &HttpSettings) -> Result<TokenConnector, ClientError> {
    let tls = tls_config(&settings.extra_roots)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https =
        HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(http);
    Ok(ConnectWithin { inner: https, limit: settings.connect_timeout })
}

/// A client with `settings`. No total timeout: the router's first-byte, idle and total
/// timeouts govern every call.
fn client(settings: &HttpSettings, tls: &rustls::ClientConfig) -> Pool {
    let mut http = HttpConnector::new();
    // `https://` URLs go through TLS, plain `http://` ones (local servers) straight through.
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = HttpsConnectorBuilder::new().with_tls_config(tls.clone()).https_or_http();
    // HTTP/2 is spoken with prior knowledge: TLS offers only `h2`, plain TCP starts with the
    // HTTP/2 preface.
    let https = if settings.http2 {
        tls.enable_http2().wrap_connector(http)
    } else {
        tls.enable_http1().wrap_connector(http)
    };
    let connector = ConnectWithin { inner: https, limit: settings.connect_timeout };
    if !settings.http2 {
        return Pool::Own(pool::Pool::new(connector, settings.pool_idle_timeout));
    }
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_idle_timeout(settings.pool_idle_timeout).pool_timer(TokioTimer::new()).http2_only(true);
    Pool::Shared(Box::new(builder.build(connector)))
}

/// A connector whose whole connect (name resolution, TCP and the TLS handshake) must finish
/// within `limit`. hyper's own connect timeout bounds only the TCP connect: an upstream that
/// accepted the connection and then stalled the handshake would hold a request until the
/// route's timeout, and a connect the pool had stopped waiting for would never end.
#[derive(Debug, Clone)]
pub struct ConnectWithin<C> {
    /// The connector doing the work (hyper-rustls over hyper's `HttpConnector`).
    inner: C,
    /// The bound on the whole connect: [`HttpSettings::connect_timeout`].
    limit: Duration,
}

impl<C> tower_service::Service<Uri> for ConnectWithin<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    type Response = C::Response;
    type Error = Box<dyn StdError + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                // `TimedOut`, so that the failure is classified as a timeout.
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting took over {limit:?}"),
                )
                .into()),
            }
        })
    }
}

/// Adds the client's headers of `forward` whose names `allowed` lists to `headers`. Beta
/// opt-ins (`*-beta`) add to any configured ones; any other name replaces the configured
/// header. Values an HTTP header cannot carry are left out.
pub(crate) fn forward(headers: &mut HeaderMap, forward: &[(String, String)], allowed: &[&str]) {
    let mut replaced: Vec<&str> = Vec::new();
    for (name, value) in forward {
        if !allowed.contains(&name.as_str()) {
            continue;
        }
        let (Ok(header), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
        else {
            continue;
        };
        if !name.ends_with("-beta") && !replaced.contains(&name.as_str()) {
            headers.remove(&header);
            replaced.push(name);
        }
        headers.append(header, value);
    }
}

/// The attempt's span as `traceparent`, when the request is traced: the upstream (or the
/// tracing proxy in front of it) continues the trace from the attempt.
/// The client's `tracestate` (passed in `call.forward` by a tracing gateway) goes with it, as
/// W3C Trace Context asks of a participant that changes `traceparent`.
pub(crate) fn trace(headers: &mut HeaderMap, call: &Call<'_>) {
    let Some(span) = call.trace else { return };
    if let Ok(value) = HeaderValue::from_str(&span.traceparent()) {
        headers.insert("traceparent", value);
    }
    let states = call.forward.iter().filter(|(name, _)| name == "tracestate");
    for (_, state) in states {
        if let Ok(value) = HeaderValue::from_str(state) {
            headers.append("tracestate", value);
        }
    }
}

/// The headers a provider sends with every request: its own `headers`, then each
/// `configured` one (from its settings) over any earlier header of the same name. Configured
/// values are marked sensitive, as they may hold tokens; the error names the header, never
/// its value.
pub(crate) fn configured_headers<'a>(
    mut headers: HeaderMap,
    configured: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<HeaderMap, BuildError> {
    for (name, value) in configured {
        let invalid = || BuildError::InvalidHeader(name.to_owned());
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// The headers of one call: a copy of the provider's `configured` ones, then the client's
/// headers whose names `forwarded` lists (see [`forward`]) and the attempt's trace context
/// (see [`trace`]). The adapter adds its content type and key over them.
pub(crate) fn call_headers(configured: &HeaderMap, call: &Call<'_>, forwarded: &[&str]) -> HeaderMap {
    let mut headers = configured.clone();
    forward(&mut headers, call.forward, forwarded);
    trace(&mut headers, call);
    headers
}

/// `text`, a key or a header value made of one (`Bearer {key}`), as a header value marked
/// sensitive. A key with characters a header cannot carry is an [`ErrorKind::Auth`] error,
/// whose text holds nothing of the key.
pub(crate) fn key_value(text: &str) -> Result<HeaderValue, ProviderError> {
    let mut value = HeaderValue::from_str(text).map_err(|_| {
        ProviderError::new(
            ErrorKind::Auth,
            "the API key contains characters that cannot be sent in an HTTP header; check the configured key",
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// A POST of `body` to `uri` with `headers`, plus `accept: */*` unless they name one, and
/// `accept-encoding: identity` (the answer is read as sent; without it any coding is allowed,
/// and a compressing proxy may take that).
pub fn post(uri: Uri, headers: HeaderMap, body: Vec<u8>) -> Request {
    post_bytes(uri, headers, Bytes::from(body))
}

/// [`post`] of a body already in [`Bytes`] (a signer reads it too).
pub fn post_bytes(uri: Uri, headers: HeaderMap, body: Bytes) -> Request {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request.headers_mut().entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
    request.headers_mut().entry(ACCEPT_ENCODING).or_insert(HeaderValue::from_static("identity"));
    request
}

/// What a redirect says, for the operator to correct `base_url`: where it points (its query
/// and any password left out), since it is not followed (the key would go there).
fn redirect(response: &Response) -> Option<String> {
    let status = response.status();
    if !status.is_redirection() {
        return None;
    }
    let location = response.headers().get(::http::header::LOCATION).and_then(|v| v.to_str().ok());
    let location = location.map(|l| l.split(['?', '#']).next().unwrap_or_default());
    let location = location.map(|l| crate::without_password(l).into_owned());
    Some(match location {
        Some(to) => format!(
            "HTTP {}: the provider redirects to `{}`, which is not followed: set base_url to it",
            status.as_u16(),
            excerpt(&to)
        ),
        None => format!("HTTP {}: the provider redirects, which is not followed", status.as_u16()),
    })
}

/// The content coding of `response` when it is not the identity.
fn encoded(response: &Response) -> Option<String> {
    let coding = response.headers().get(::http::header::CONTENT_ENCODING)?.to_str().unwrap_or("?").trim();
    (!coding.is_empty() && !coding.eq_ignore_ascii_case("identity")).then(|| excerpt(coding))
}

/// Parses a URL built for one request. The error names no URL: a query string may hold a key.
pub fn parse_uri(url: String) -> Result<Uri, ProviderError> {
    Uri::try_from(url)
        .map_err(|_| ProviderError::new(ErrorKind::Transport, "the request failed: the URL is invalid"))
}

/// A failure of the HTTP client (never an error response): it could not connect, it timed
/// out, the request failed or the response body broke off. The text names no URL, so that
/// nothing in a query string can leak, and holds the whole chain of causes.
#[derive(Debug)]
pub struct TransportError {
    /// [`ErrorKind::Timeout`] or [`ErrorKind::Transport`].
    kind: ErrorKind,
    /// The stage that failed, the head of the text (`could not connect`, `timed out`, ...).
    what: &'static str,
    /// The underlying error, whose chain of causes follows `what` in the text.
    source: Option<Box<dyn StdError + Send + Sync>>,
    /// A pooled connection the server closed as the request went, with no answer
    /// ([`ProviderError::stale_connection`]).
    stale: bool,
}

impl TransportError {
    /// An error of sending a request and waiting for the response head.
    fn send(error: hyper_util::client::legacy::Error) -> Self {
        let what = if error.is_connect() {
            "could not connect"
        } else if is_timeout(&error) {
            "timed out"
        } else {
            "the request failed"
        };
        Self::classified(what, error.into())
    }

    /// An error of sending a request on a connection and waiting for the response head.
    pub(crate) fn request(error: hyper::Error) -> Self {
        let what = if is_timeout(&error) { "timed out" } else { "the request failed" };
        Self::classified(what, error.into())
    }

    /// A request that cannot be sent as it is: `why`.
    fn invalid(why: &'static str) -> Self {
        Self {
            kind: ErrorKind::Transport,
            what: "the request failed",
            source: Some(why.into()),
            stale: false,
        }
    }

    /// An error of reading a response body.
    fn body(error: hyper::Error) -> Self {
        let what = if is_timeout(&error) { "timed out" } else { "the response body broke off" };
        Self::classified(what, error.into())
    }

    /// The caller's deadline passed.
    pub fn timed_out() -> Self {
        Self {
            kind: ErrorKind::Timeout,
            what: "timed out",
            source: Some("operation timed out".into()),
            stale: false,
        }
    }

    /// An error named `what` for `source`, of kind [`ErrorKind::Timeout`] when a timeout is
    /// anywhere in its chain, else [`ErrorKind::Transport`].
    fn classified(what: &'static str, source: Box<dyn StdError + Send + Sync>) -> Self {
        let kind = if is_timeout(&*source) { ErrorKind::Timeout } else { ErrorKind::Transport };
        Self { kind, what, source: Some(source), stale: false }
    }

    /// An error of a request on a pooled (reused) connection: stale when the server closed or
    /// reset it before any byte of an answer (its keep-alive ran out as the request went).
    pub(crate) fn on_reused(error: hyper::Error) -> Self {
        let closed = error.is_incomplete_message()
            || std::error::Error::source(&error)
                .and_then(|source| source.downcast_ref::<std::io::Error>())
                .is_some_and(|io| {
                    matches!(io.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe)
                });
        Self { stale: closed, ..Self::request(error) }
    }

    /// [`ErrorKind::Timeout`] or [`ErrorKind::Transport`].
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// Whether a timeout is anywhere in the chain of `error`: a connect timeout is an I/O error
/// of kind `TimedOut` under the client's connect error.
fn is_timeout(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout) {
            return true;
        }
        next = error.source();
    }
    false
}

impl fmt::Display for TransportError {
    /// `what: cause: its cause: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)?;
        let mut next = self.source.as_deref().map(|error| error as &(dyn StdError + 'static));
        while let Some(error) = next {
            write!(f, ": {error}")?;
            next = error.source();
        }
        Ok(())
    }
}

/// The text already holds every cause, so none is offered again.
impl StdError for TransportError {}

impl From<TransportError> for ProviderError {
    fn from(error: TransportError) -> Self {
        let failed = ProviderError::new(error.kind, error.to_string());
        if error.stale { failed.stale_connection() } else { failed }
    }
}

/// Classifies an error of the HTTP client (never a response): timeouts and transport failures.
pub fn transport_error(error: TransportError) -> ProviderError {
    error.into()
}

/// Waits for `future` until `deadline`, if there is one.
pub async fn until<T>(
    deadline: Option<Instant>,
    future: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future)
            .await
            .unwrap_or_else(|_| Err(TransportError::timed_out())),
        None => future.await,
    }
}

/// Reads a whole response body.
pub async fn read_body(response: Response) -> Result<Bytes, TransportError> {
    let limited = http_body_util::Limited::new(response.into_body(), MAX_ANSWER);
    let collected = limited.collect().await.map_err(|error| match error.downcast::<hyper::Error>() {
        Ok(error) => TransportError::body(*error),
        // Past the limit: nothing more is read, and the connection is not kept.
        Err(_) => TransportError {
            kind: ErrorKind::Transport,
            what: "the answer is too large",
            source: Some(format!("over {} MiB", MAX_ANSWER >> 20).into()),
            stale: false,
        },
    })?;
    Ok(collected.to_bytes())
}

/// The most of a response read whole: 256 MiB, more than any answer or embeddings list a
/// provider gives (a server that sends more would have the gateway hold it all).
pub const MAX_ANSWER: usize = 256 << 20;

/// The data of a response body as it arrives; trailers are skipped.
pub fn body_stream(response: Response) -> BodyStream {
    BodyStream { body: response.into_body() }
}

/// See [`body_stream`].
#[derive(Debug)]
pub struct BodyStream {
    /// The response body, read frame by frame.
    body: UpstreamBody,
}

impl Stream for BodyStream {
    type Item = Result<Bytes, TransportError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => Poll::Ready(Some(Ok(data))),
                    Err(_trailers) => continue,
                },
                Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(TransportError::body(error)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

/// The error of a non-2xx answer whose `body` holds no error object of the provider's API, with
/// `detail` its excerpt: its status alone decides, but a 400, 403 or 422 whose body is a page
/// (HTML from a proxy, a load balancer or a CDN: nginx's "Request Header Or Cookie Too Large",
/// a firewall's block page) is what stands before the provider refusing the request, not the
/// provider (nor its verdict on the key): unsupported there, so that the next target is asked,
/// its health and its keys untouched. A body in JSON of another shape (FastAPI's `{"detail":
/// ...}`) or in plain text is the server's own refusal.
pub fn bare_error(status: u16, body: &str, detail: String) -> ProviderError {
    let page = body.trim_start().starts_with('<');
    if matches!(status, 400 | 403 | 422) && page {
        let detail = format!(
            "{detail} (not an error of the provider's API: what stands before it refused the request)"
        );
        return ProviderError::unsupported(detail).with_status(status);
    }
    ProviderError::new(status_kind(status), detail).with_status(status)
}

/// The catalog kind for an HTTP status when the body has no code that says more.
pub fn status_kind(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::RateLimited,
        402 => ErrorKind::QuotaExceeded,
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::ModelNotFound,
        408 => ErrorKind::Timeout,
        // A conflict or a too-early refusal is the server's moment, not the request's fault
        // (the SDKs retry both); a redirect is not followed (the key would go where it points),
        // and is the provider's failure, not the client's.
        409 | 425 | 300..=399 => ErrorKind::Unavailable,
        500..=599 => ErrorKind::Unavailable,
        _ => ErrorKind::InvalidRequest,
    }
}

/// The media type of `response`'s body, lower case and without its parameters
/// (`text/event-stream` of `text/event-stream; charset=utf-8`); empty when it names none.
pub fn media_type(response: &Response) -> String {
    let value = response.headers().get(::http::header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    value.and_then(|value| value.split(';').next()).unwrap_or_default().trim().to_ascii_lowercase()
}

/// The headers as name/value pairs (values that are not text are skipped).
pub fn header_pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
}

/// The rate-limit headers and Retry-After of `response`, reported to the call's `sink` (every
/// adapter does this with every answer, success or not). An answer without such headers is
/// reported too: the pacer then knows the call was answered and no longer counts it as in
/// flight against the provider's stated budget.
pub fn observe_limits(response: &Response, sink: Option<&dyn RateLimitSink>) -> RateLimits {
    let limits = RateLimits::from_headers(header_pairs(response.headers()), SystemTime::now());
    if let Some(sink) = sink {
        sink.observe(&limits);
    }
    limits
}

/// How long the provider asked us to wait: `retry-after-ms`, `retry-after`, or, on a 429 with
/// neither, the reset of the spent `x-ratelimit-*` dimension.
pub fn retry_after(status: u16, limits: &RateLimits) -> Option<Duration> {
    limits.retry_after.or_else(|| if status == 429 { limits.spent_reset() } else { None })
}

/// The most of an error body worth reading.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Reads an error response's body, at most [`ERROR_BODY_LIMIT`] bytes.
pub async fn read_error_body(response: Response) -> String {
    read_error_body_until(response, None).await
}

/// Reads an error response's body, at most [`ERROR_BODY_LIMIT`] bytes, and no longer than until
/// `deadline`: what arrived by then is the body.
pub async fn read_error_body_until(response: Response, deadline: Option<Instant>) -> String {
    let mut response = response.into_body();
    let mut body = Vec::new();
    while let Ok(Some(Ok(frame))) = until(deadline, async { Ok(response.frame().await) }).await {
        let Ok(chunk) = frame.into_data() else { continue };
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_BODY_LIMIT {
            body.truncate(ERROR_BODY_LIMIT);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Shortens provider text for an error detail.
pub fn excerpt(text: &str) -> String {
    const MAX: usize = 500;
    let text = text.trim();
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_service::Service;

    /// A connector that accepted the connection and never finishes the handshake.
    #[derive(Clone)]
    struct Stalled;

    impl Service<Uri> for Stalled {
        type Response = ();
        type Error = std::io::Error;
        type Future = std::future::Pending<Result<(), std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Uri) -> Self::Future {
            std::future::pending()
        }
    }

    #[test]
    fn a_configured_header_replaces_an_earlier_one_of_its_name_and_is_sensitive() {
        let mut own = HeaderMap::new();
        own.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let configured =
            [("Anthropic-Version", "2099-01-01"), ("x-team", "a"), ("X-Team", "b"), ("x-other", "c")];
        let headers = configured_headers(own, configured).unwrap();
        assert_eq!(headers.get_all("anthropic-version").iter().collect::<Vec<_>>(), ["2099-01-01"]);
        assert_eq!(headers.get_all("x-team").iter().collect::<Vec<_>>(), ["b"]);
        assert!(headers.values().all(HeaderValue::is_sensitive));
    }

    #[test]
    fn an_invalid_configured_header_is_named_without_its_value() {
        let error = configured_headers(HeaderMap::new(), [("x-secret", "tok\nen-123")]).unwrap_err();
        assert!(matches!(&error, BuildError::InvalidHeader(name) if name == "x-secret"), "{error}");
        assert!(!error.to_string().contains("en-123"), "{error}");
        let error = configured_headers(HeaderMap::new(), [("bad name", "v")]).unwrap_err();
        assert!(matches!(&error, BuildError::InvalidHeader(name) if name == "bad name"), "{error}");
    }

    #[test]
    fn a_key_a_header_cannot_carry_is_an_auth_error_without_the_key() {
        assert!(key_value("sk-0123456789").unwrap().is_sensitive());
        let error = key_value("Bearer sk-01234\n56789").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Auth);
        assert!(!format!("{error} {error:?}").contains("sk-01234"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_connect_ends_at_the_limit_as_a_timeout() {
        let mut connector = ConnectWithin { inner: Stalled, limit: Duration::from_secs(10) };
        let started = Instant::now();
        let error = connector.call(Uri::from_static("https://api.example/v1")).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert!(is_timeout(&*error), "{error}");
        let error = TransportError::classified("could not connect", error);
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.to_string().starts_with("could not connect: connecting took over 10s"), "{error}");
    }

    #[test]
    fn the_host_header_is_the_clients_and_is_made_once_per_authority() {
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let host = |uri: &str| client.host(&uri.parse().unwrap()).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(host("http://127.0.0.1:8080/v1/chat").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(host("http://127.0.0.1:8080/v1/embeddings").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(client.host.get().map(|(a, _)| a.as_str()), Some("127.0.0.1:8080"));
        // Another authority is not given the kept one's header.
        assert_eq!(host("https://api.example.com:443/v1").as_deref(), Some("api.example.com"));
        assert_eq!(host("http://[::1]:80/v1").as_deref(), Some("[::1]"));
        assert_eq!(host("https://h.example:8443/v1").as_deref(), Some("h.example:8443"));
        assert_eq!(host("/relative"), None);
    }
}
