//! The load itself: keep-alive HTTP/1.1 connections, one task each, sending either back to
//! back (closed loop) or on a fixed schedule (open loop), and checking every answer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use crate::histogram::Histogram;
use crate::options::{Options, Target};
use crate::sse::{self, Kind, Splitter};

/// What the workers share: the request template and the counters that bound the run.
pub struct Plan {
    options: Options,
    headers: HeaderMap,
    /// For an `https://` target: the TLS client and the name its certificate is checked for.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// Requests handed out so far (the hard cap, and the schedule index in open loop).
    issued: AtomicU64,
    /// When the clock started.
    start: Instant,
}

impl Plan {
    /// Validates the headers into a template; the clock starts at `start`.
    ///
    /// # Errors
    /// A header that is not valid HTTP.
    pub fn new(options: Options, start: Instant) -> Result<Self, String> {
        let mut headers = HeaderMap::new();
        let host = HeaderValue::from_str(&options.target.authority)
            .map_err(|e| format!("--url authority is not a valid Host header: {e}"))?;
        headers.insert(HOST, host);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &options.headers {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("--header `{name}`: {e}"))?;
            let value = HeaderValue::from_str(value).map_err(|e| format!("--header `{name}`: {e}"))?;
            headers.insert(name, value);
        }
        let tls = options.ca_file.as_deref().map(|file| tls(file, &options.target)).transpose()?;
        Ok(Self { options, headers, tls, issued: AtomicU64::new(0), start })
    }

    /// The options this plan runs.
    pub fn options(&self) -> &Options {
        &self.options
    }

    fn deadline(&self) -> Instant {
        self.start + self.options.duration
    }

    fn measured_from(&self) -> Instant {
        self.start + self.options.warmup
    }

    fn request(&self) -> Result<Request<Full<Bytes>>, Failure> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.options.target.path.as_str())
            .body(Full::new(self.options.body.clone()))
            .map_err(|_| Failure::new("bad_request_uri", false))?;
        *request.headers_mut() = self.headers.clone();
        Ok(request)
    }
}

/// Figures one worker gathered; merged into the run's totals at the end.
#[derive(Debug, Default)]
pub struct Tally {
    /// Whole-exchange latency of successful requests, µs.
    pub latency: Histogram,
    /// Time to the first content chunk of successful streams, µs.
    pub ttft: Histogram,
    /// Gaps between consecutive content chunks as they arrived, µs.
    pub gaps: Histogram,
    /// Successful requests.
    pub ok: u64,
    /// Failed requests by kind (`status_500`, `timeout`, `stream_truncated`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Requests (of any outcome) that started during the warm-up.
    pub warmup_requests: u64,
    /// Failures during the warm-up, by kind: not in the figures, but a failover drill must
    /// still show them.
    pub warmup_errors: BTreeMap<String, u64>,
    /// Content chunks received in successful streams.
    pub chunks: u64,
    /// Response body bytes received.
    pub bytes: u64,
    /// One example message per error kind, for the summary.
    pub samples: BTreeMap<String, String>,
    /// Connections found closed by the server between requests and opened again.
    pub reconnects: u64,
    /// When the last measured request was sent (open loop: a late send marks a backlog).
    pub last_sent: Option<Instant>,
}

impl Tally {
    /// Adds `other` into this tally.
    pub fn merge(&mut self, other: Tally) {
        self.latency.merge(&other.latency);
        self.ttft.merge(&other.ttft);
        self.gaps.merge(&other.gaps);
        self.ok += other.ok;
        for (kind, n) in other.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.warmup_requests += other.warmup_requests;
        for (kind, n) in other.warmup_errors {
            *self.warmup_errors.entry(kind).or_default() += n;
        }
        self.chunks += other.chunks;
        self.bytes += other.bytes;
        self.reconnects += other.reconnects;
        self.last_sent = self.last_sent.max(other.last_sent);
        for (kind, text) in other.samples {
            self.samples.entry(kind).or_insert(text);
        }
    }

    /// Failed requests in the measured part.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn fail(&mut self, measured: bool, failure: Failure) {
        let map = if measured { &mut self.errors } else { &mut self.warmup_errors };
        *map.entry(failure.kind.clone()).or_default() += 1;
        if let Some(detail) = failure.detail {
            self.samples.entry(failure.kind).or_insert(detail);
        }
    }
}

/// The failure kind of a connection found closed before the request went out.
const CLOSED_BEFORE_SENDING: &str = "connection_closed";

/// Why one request failed.
#[derive(Debug)]
struct Failure {
    kind: String,
    /// The connection can no longer be trusted (a reset, a cut body, a timeout).
    closes: bool,
    detail: Option<String>,
}

impl Failure {
    fn new(kind: &str, closes: bool) -> Self {
        Self { kind: kind.to_owned(), closes, detail: None }
    }

    fn with(mut self, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        detail.truncate(300);
        self.detail = Some(detail);
        self
    }
}

/// One keep-alive connection and the task that drives it; aborting the task closes the
/// socket, which is how an abandoned request is cancelled upstream (the mock's `hang` and
/// every gateway notice the disconnect).
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Opens one connection to the plan's target.
///
/// # Errors
/// The connect or handshake error, as text.
pub async fn connect(plan: &Plan) -> Result<Connection, String> {
    let stream = TcpStream::connect(plan.options.target.addr).await.map_err(|e| e.to_string())?;
    // Small requests must not wait for Nagle's timer; it would dwarf the gateway's cost.
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let Some((tls, name)) = &plan.tls else { return http1(stream).await };
    let stream = tls.connect(name.clone(), stream).await.map_err(|e| format!("TLS handshake: {e}"))?;
    http1(stream).await
}

/// The HTTP/1.1 handshake on `stream`, with a task driving the connection.
async fn http1<S>(stream: S) -> Result<Connection, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        // Its error is the same one the pending request sees, and is counted there.
        let _ = connection.await;
    });
    Ok(Connection { sender, driver })
}

/// A TLS client trusting the authorities of the PEM `file`, and the server name of `target`.
fn tls(file: &str, target: &Target) -> Result<(TlsConnector, ServerName<'static>), String> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(file).map_err(|e| format!("--ca-file {file}: {e}"))? {
        let certificate = certificate.map_err(|e| format!("--ca-file {file}: {e}"))?;
        roots.add(certificate).map_err(|e| format!("--ca-file {file}: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::from(target.addr.ip());
    Ok((TlsConnector::from(Arc::new(config)), name))
}

/// What a successful exchange measured.
struct Exchange {
    ttft: Option<Instant>,
    chunks: u64,
    bytes: u64,
}

/// Sends one request on `connection` and checks the answer.
async fn exchange(
    plan: &Plan,
    connection: &mut Connection,
    gaps: &mut Vec<u64>,
) -> Result<Exchange, Failure> {
    connection
        .sender
        .ready()
        .await
        .map_err(|e| Failure::new(CLOSED_BEFORE_SENDING, true).with(e.to_string()))?;
    let request = plan.request()?;
    let response = connection
        .sender
        .send_request(request)
        .await
        .map_err(|e| Failure::new("io", true).with(e.to_string()))?;
    let status = response.status();
    let mut body = response.into_body();
    if status != StatusCode::OK {
        // Read the error body so the connection can carry the next request.
        let collected = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        return Err(Failure::new(&format!("status_{}", status.as_u16()), false)
            .with(String::from_utf8_lossy(&collected).into_owned()));
    }
    if !plan.options.stream {
        let bytes =
            body.collect().await.map_err(|e| Failure::new("body_cut", true).with(e.to_string()))?.to_bytes();
        check_json(&bytes, &plan.options.expect)?;
        return Ok(Exchange { ttft: None, chunks: 0, bytes: bytes.len() as u64 });
    }
    let mut splitter = Splitter::new();
    let mut events = Vec::new();
    let mut text = String::new();
    let mut ttft = None;
    let mut last_chunk: Option<Instant> = None;
    let mut chunks = 0;
    let mut bytes = 0;
    let mut done = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::new("stream_cut", true).with(e.to_string()))?;
        let Ok(data) = frame.into_data() else { continue }; // trailers
        let now = Instant::now();
        bytes += data.len() as u64;
        splitter.feed(&data, &mut events);
        for event in events.drain(..) {
            match sse::classify(&event) {
                Kind::Content(piece) => {
                    if done {
                        return Err(Failure::new("stream_after_done", true));
                    }
                    ttft.get_or_insert(now);
                    if let Some(previous) = last_chunk {
                        gaps.push(micros(now - previous));
                    }
                    last_chunk = Some(now);
                    chunks += 1;
                    text.push_str(&piece);
                }
                Kind::Done => done = true,
                Kind::Error(detail) => return Err(Failure::new("stream_error", true).with(detail)),
                Kind::Malformed => return Err(Failure::new("stream_malformed", true).with(event.data)),
                Kind::Other => {}
            }
        }
    }
    if !done {
        let why = if splitter.has_partial() { "ended inside an event" } else { "ended without [DONE]" };
        return Err(Failure::new("stream_truncated", true).with(why));
    }
    if ttft.is_none() {
        return Err(Failure::new("stream_empty", false));
    }
    if !text.contains(plan.options.expect.as_str()) {
        return Err(Failure::new("body_unexpected", false).with(text));
    }
    Ok(Exchange { ttft, chunks, bytes })
}

/// The body must be JSON and contain the expected text.
fn check_json(bytes: &[u8], expect: &str) -> Result<(), Failure> {
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(Failure::new("body_not_json", false)
            .with(format!("{error}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)]))));
    }
    if !expect.is_empty() && !bytes.windows(expect.len()).any(|w| w == expect.as_bytes()) {
        return Err(Failure::new("body_unexpected", false)
            .with(String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned()));
    }
    Ok(())
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One worker: a connection (reopened after a failure that spoils it) and its tally.
struct Worker {
    plan: Arc<Plan>,
    connection: Option<Connection>,
    tally: Tally,
    /// Chunk gaps of the stream in progress.
    gaps: Vec<u64>,
}

impl Worker {
    /// Sends one request started (or scheduled) at `origin`, giving up at `give_up`.
    async fn one(&mut self, origin: Instant, give_up: Instant) {
        let measured = origin >= self.plan.measured_from();
        if measured {
            self.tally.last_sent = self.tally.last_sent.max(Some(Instant::now()));
        }
        let plan = Arc::clone(&self.plan);
        // Gaps wait here until the stream proves good; the buffer is reused across requests
        // (a fresh histogram per request would cost more than the request).
        let mut gaps = std::mem::take(&mut self.gaps);
        gaps.clear();
        let mut reconnects = 0;
        let result = tokio::time::timeout_at(give_up.into(), async {
            // A server may close a keep-alive connection after any answer (nginx does after an
            // `error_page` fallback); that is not a failed request, so open a new one and send
            // there, once.
            for attempt in 0..2 {
                if self.connection.is_none() {
                    match connect(&plan).await {
                        Ok(c) => self.connection = Some(c),
                        Err(e) => return Err(Failure::new("connect", true).with(e)),
                    }
                }
                let Some(connection) = self.connection.as_mut() else { break };
                match exchange(&plan, connection, &mut gaps).await {
                    Err(failure) if failure.kind == CLOSED_BEFORE_SENDING && attempt == 0 => {
                        self.connection = None;
                        reconnects += 1;
                    }
                    outcome => return outcome,
                }
            }
            Err(Failure::new(CLOSED_BEFORE_SENDING, true))
        })
        .await;
        self.tally.reconnects += reconnects;
        let outcome = match result {
            Err(_elapsed) => Err(Failure::new("timeout", true)),
            Ok(outcome) => outcome,
        };
        let done = Instant::now();
        if !measured {
            self.tally.warmup_requests += 1;
        }
        match outcome {
            Ok(exchange) if measured => {
                self.tally.ok += 1;
                self.tally.latency.record(micros(done - origin));
                if let Some(first) = exchange.ttft {
                    self.tally.ttft.record(micros(first - origin));
                }
                for gap in &gaps {
                    self.tally.gaps.record(*gap);
                }
                self.tally.chunks += exchange.chunks;
                self.tally.bytes += exchange.bytes;
            }
            Ok(_) => {}
            Err(failure) => {
                if failure.closes {
                    self.connection = None;
                }
                let connect_failed = failure.kind == "connect";
                self.tally.fail(measured, failure);
                if connect_failed {
                    // A target that refuses connections would otherwise spin this loop hot.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        self.gaps = gaps;
    }

    /// Back to back until the deadline. A request in flight at the deadline is answered (or
    /// times out) and counted like any other: dropping it, as wrk does, would drop the slowest
    /// requests of every row and undercount a slow gateway's throughput by up to its latency
    /// over the duration (20% for 1 s answers in a 5 s row), and an answer that never comes
    /// would be no error at all.
    async fn closed_loop(mut self) -> Tally {
        let deadline = self.plan.deadline();
        let timeout = self.plan.options.timeout;
        loop {
            let now = Instant::now();
            if now >= deadline
                || self.plan.issued.fetch_add(1, Ordering::Relaxed) >= self.plan.options.max_requests
            {
                break;
            }
            self.one(now, now + timeout).await;
        }
        self.tally
    }

    /// Takes the next slot of the schedule, waits for its time and sends. A worker that is
    /// late (every worker was busy) sends at once but measures from the scheduled time, so a
    /// stalled target shows its stall in the latency instead of slowing the offered rate
    /// (coordinated omission). Requests in flight at the deadline are completed and counted.
    async fn open_loop(mut self, rate: f64) -> Tally {
        let deadline = self.plan.deadline();
        let timeout = self.plan.options.timeout;
        loop {
            let i = self.plan.issued.fetch_add(1, Ordering::Relaxed);
            if i >= self.plan.options.max_requests {
                break;
            }
            let scheduled = self.plan.start + Duration::from_secs_f64(i as f64 / rate);
            if scheduled >= deadline {
                break;
            }
            let origin = if scheduled > Instant::now() {
                tokio::time::sleep_until(scheduled.into()).await;
                // This worker was idle until the slot: the timer's own lateness (tokio's
                // resolution is a millisecond) is the driver's, not the target's, so the
                // latency starts at the actual send.
                Instant::now()
            } else {
                // Behind schedule because every worker was busy: start at the scheduled time,
                // so a stall of the target is counted in full (coordinated omission).
                scheduled
            };
            self.one(origin, Instant::now() + timeout).await;
        }
        self.tally
    }
}

/// Runs the plan on `connections` already opened (missing ones are opened on first use) and
/// returns the merged tally.
pub async fn run(plan: Arc<Plan>, connections: Vec<Option<Connection>>) -> Tally {
    let rate = plan.options.rate;
    let mut tasks = Vec::with_capacity(connections.len());
    for connection in connections {
        let worker =
            Worker { plan: Arc::clone(&plan), connection, tally: Tally::default(), gaps: Vec::new() };
        tasks.push(tokio::spawn(async move {
            match rate {
                Some(rate) => worker.open_loop(rate).await,
                None => worker.closed_loop().await,
            }
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        match task.await {
            Ok(tally) => total.merge(tally),
            Err(error) => {
                *total.errors.entry("driver_panic".into()).or_default() += 1;
                total.samples.entry("driver_panic".into()).or_insert(error.to_string());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_checked_for_shape_and_text() {
        assert!(check_json(br#"{"a":"mock answer from m"}"#, "mock answer").is_ok());
        assert!(check_json(br#"{"a":1}"#, "").is_ok());
        assert_eq!(check_json(br#"{"a":1}"#, "mock answer").unwrap_err().kind, "body_unexpected");
        assert_eq!(check_json(b"<html>", "").unwrap_err().kind, "body_not_json");
    }
}
