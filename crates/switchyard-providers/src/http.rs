//! What every HTTP adapter shares: the client, transport-error classification, reading error
//! bodies, Retry-After and rate-limit headers.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use switchyard::ratelimit::RateLimits;
use switchyard::{ErrorKind, ProviderError};

/// Connection settings of one provider. Each provider gets its own pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Default 10 s.
    pub connect_timeout: Duration,
    /// HTTP/2 instead of HTTP/1.1. Off by default: on one HTTP/2 connection, long streams
    /// queue behind each other.
    pub http2: bool,
    /// How long an idle pooled connection is kept. Default 90 s.
    pub pool_idle_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            http2: false,
            pool_idle_timeout: Duration::from_secs(90),
        }
    }
}

/// One provider's HTTP client: a connection pool per thread, all made from the same settings.
///
/// A pooled connection is driven by a task on the runtime that opened it. The gateway runs one
/// single-threaded runtime per core; a pool shared between them would hand a request on one
/// thread a connection driven by another, and every read and write would then wake that
/// other thread. With a pool per thread, an upstream exchange stays on the thread of the
/// client connection that asked for it. On a multi-threaded runtime this costs at most one
/// idle connection per worker thread more than a shared pool would keep.
#[derive(Debug, Clone)]
pub struct HttpClient {
    settings: HttpSettings,
    /// The pool of the thread that made this client; the fallback if another thread's cannot
    /// be built.
    first: reqwest::Client,
    /// Identifies this client's pools in every thread's cache; dead once every clone is gone.
    alive: Arc<()>,
}

thread_local! {
    /// This thread's pools: one per live [`HttpClient`], pruned when a new one is added.
    static POOLS: RefCell<Vec<(Weak<()>, reqwest::Client)>> = const { RefCell::new(Vec::new()) };
}

impl HttpClient {
    /// Checks `settings` by building this thread's pool.
    pub fn new(settings: &HttpSettings) -> Result<Self, reqwest::Error> {
        let first = client(settings)?;
        let this = Self { settings: settings.clone(), first: first.clone(), alive: Arc::new(()) };
        POOLS.with_borrow_mut(|pools| this.insert(pools, first));
        Ok(this)
    }

    /// The calling thread's client, made on the thread's first call.
    pub fn get(&self) -> reqwest::Client {
        POOLS.with_borrow_mut(|pools| {
            let mine = Arc::downgrade(&self.alive);
            if let Some((_, client)) = pools.iter().find(|(id, _)| id.ptr_eq(&mine)) {
                return client.clone();
            }
            // The same settings built a client in `new`; should building fail now, share
            // that thread's pool: slower, still correct.
            let client = client(&self.settings).unwrap_or_else(|_| self.first.clone());
            self.insert(pools, client.clone());
            client
        })
    }

    fn insert(&self, pools: &mut Vec<(Weak<()>, reqwest::Client)>, client: reqwest::Client) {
        pools.retain(|(id, _)| id.strong_count() > 0);
        pools.push((Arc::downgrade(&self.alive), client));
    }
}

/// A client with `settings`. No total timeout: the router's first-byte, idle and total
/// timeouts govern every call.
fn client(settings: &HttpSettings) -> Result<reqwest::Client, reqwest::Error> {
    let builder = reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .pool_idle_timeout(settings.pool_idle_timeout)
        .tcp_nodelay(true)
        .no_proxy();
    let builder = if settings.http2 { builder.http2_prior_knowledge() } else { builder.http1_only() };
    builder.build()
}

/// Classifies an error of the HTTP client (never a response): timeouts and transport failures.
/// The URL is dropped from the text so that nothing in a query string can leak.
pub fn transport_error(error: reqwest::Error) -> ProviderError {
    let kind = if error.is_timeout() { ErrorKind::Timeout } else { ErrorKind::Transport };
    let what = if error.is_connect() {
        "could not connect"
    } else if error.is_timeout() {
        "timed out"
    } else if error.is_body() || error.is_decode() {
        "the response body broke off"
    } else {
        "the request failed"
    };
    let error = error.without_url();
    let mut detail = format!("{what}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(inner) = source {
        detail.push_str(": ");
        detail.push_str(&inner.to_string());
        source = inner.source();
    }
    ProviderError::new(kind, detail)
}

/// The catalog kind for an HTTP status when the body has no code that says more.
pub fn status_kind(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::RateLimited,
        402 => ErrorKind::QuotaExceeded,
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::ModelNotFound,
        408 => ErrorKind::Timeout,
        500..=599 => ErrorKind::Unavailable,
        _ => ErrorKind::InvalidRequest,
    }
}

/// The headers as name/value pairs (values that are not text are skipped).
pub fn header_pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
}

/// The rate-limit headers and Retry-After of a response.
pub fn rate_limits(headers: &HeaderMap) -> RateLimits {
    RateLimits::from_headers(header_pairs(headers), SystemTime::now())
}

/// How long the provider asked us to wait: `retry-after-ms`, `retry-after`, or, on a 429 with
/// neither, the reset of the spent `x-ratelimit-*` dimension.
pub fn retry_after(status: u16, limits: &RateLimits) -> Option<Duration> {
    limits.retry_after.or_else(|| if status == 429 { limits.spent_reset() } else { None })
}

/// The most of an error body worth reading.
pub const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Reads an error response's body, at most [`ERROR_BODY_LIMIT`] bytes.
pub async fn read_error_body(response: reqwest::Response) -> String {
    let mut response = response;
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
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
