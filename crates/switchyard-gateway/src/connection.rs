//! One client connection: HTTP/1.1 over hyper, held to the header and idle timeouts.
//!
//! A connection is always in one of three phases:
//!
//! - **awaiting a head**: from accept (the first request) or from the first byte of a later
//!   request, until hyper has read the whole request head. Past `header_timeout` the
//!   connection is closed, with a `408 Request Timeout` when the client had started a head.
//! - **busy**: a request is being answered (its handler runs, or its response body, a stream
//!   perhaps, is being written), then its last bytes are flushed to the client. No connection
//!   timeout applies: the router's own timeouts bound the upstream, a stream may rightly run
//!   for minutes, and a large answer to a slow reader must not be cut. Only a client that
//!   takes no byte at all for `send_timeout` (it stopped reading) is cut: its writes fail
//!   ([`Watched::watch_write`]) and hyper closes the connection. (A request whose body
//!   trickles in is busy too: its handler holds it to `body_timeout` as it reads, see
//!   `server/body.rs`, and answers a stalled one with a 408 and `connection: close`.)
//! - **idle**: a keep-alive connection between requests. Past `idle_timeout` it is closed
//!   without a word (a client may be sending its next request at that very moment: a 408 it
//!   did not ask for would read as the answer to it).
//!
//! The watch sits in the connection's I/O, where the bytes are: hyper reads through
//! [`Watched`], which sees a head's first byte arrive and, while hyper waits for more, the
//! phase's deadline pass. (hyper's own `header_read_timeout` cannot do this job: its clock
//! also runs while a keep-alive connection is idle, so it would close idle connections at
//! `header_timeout`, and it ends a connection without a 408.) The service side tells the
//! watch when a request begins and when its response body is finished or dropped; the I/O's
//! flush says when that response is out. While a request is answered, the timer stays armed
//! an idle period ahead rather than being re-armed at its end: hyper reads during a request
//! (to see a client close), and the read after the timer fires enforces the idle deadline.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::config::ConnectionLimits;

/// Written to a client that opens with HTTP/2's preface (h2c with prior knowledge): this
/// gateway speaks HTTP/1.1, and says so in HTTP/2 rather than closing without a word: an empty
/// SETTINGS frame (the server's preface), then GOAWAY with `HTTP_1_1_REQUIRED` (0xd), which
/// curl and the HTTP/2 clients report, and why as its debug data.
const HTTP2_REFUSED: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\
\x00\x00\x29\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0dthis gateway speaks HTTP/1.1 only";

/// HTTP/2's connection preface, as far as a first read needs to see it.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// Written to a client whose request head did not arrive in time.
const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// Serves one connection until the client closes it, a timeout closes it, or `stop` turns
/// `true` (then the request in progress, a stream included, finishes first).
pub async fn serve<I>(io: I, app: axum::Router, limits: ConnectionLimits, stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_with(io, app, limits, stop, true).await;
}

/// Serves one connection taken beyond `max_connections`, on a place kept for the health
/// probes: one request, then it closes. `/healthz` is answered as ever; `/readyz` says the
/// gateway is at its bound (a 503, so that a load balancer sends new clients elsewhere until
/// connections close, while the liveness probe still sees a live process); anything else is
/// a 503 `at_max_connections` with `Retry-After: 1`.
pub async fn serve_at_bound<I>(
    io: I,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let at_bound = |what: &'static str| {
        let body = serde_json::json!({ "error": {
            "message": format!("the gateway is at gateway.max_connections: {what}"),
            "type": "server_error",
            "code": "at_max_connections",
        } });
        let headers = [(axum::http::header::RETRY_AFTER, "1"), (axum::http::header::CONNECTION, "close")];
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, headers, axum::Json(body))
    };
    let only_probes = axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| async move {
            match request.uri().path() {
                "/healthz" => next.run(request).await,
                "/readyz" => at_bound("not ready for new connections").into_response(),
                _ => at_bound("try again in a moment").into_response(),
            }
        },
    );
    serve_with(io, app.layer(only_probes), limits, stop, false).await;
}

async fn serve_with<I>(
    io: I,
    app: axum::Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    keep_alive: bool,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let watch = Arc::new(Watch::new(limits));
    let service = Tracked { app, watch: watch.clone() };
    let io = TokioIo::new(Watched::new(io, watch));
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(keep_alive)
        // The watch does this job; see the module docs.
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let stopping = async {
        // A dropped sender means nobody can ask for a stop any more: serve on.
        if stop.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(stopping);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = &mut stopping => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        // Clients that go away mid-request or time out are the normal life of a server.
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// Where a connection is in its life; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head since `since`; `started` once its first byte arrived.
    AwaitingHead { since: Instant, started: bool },
    /// Requests in progress.
    Busy(u32),
    /// The last response is handed to hyper but not yet flushed to the client: not idle yet
    /// (a large answer to a slow reader must not be cut by the idle timeout).
    Draining,
    /// Between requests since `since`.
    Idle { since: Instant },
}

/// The phase of one connection, shared by its I/O and its service.
struct Watch {
    limits: ConnectionLimits,
    state: Mutex<WatchState>,
}

struct WatchState {
    phase: Phase,
}

/// A deadline the I/O must enforce, and what passing it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Deadline {
    at: Instant,
    /// A request head had started: the client is owed a 408.
    owes_408: bool,
}

impl Watch {
    fn new(limits: ConnectionLimits) -> Self {
        let phase = Phase::AwaitingHead { since: Instant::now(), started: false };
        Self { limits, state: Mutex::new(WatchState { phase }) }
    }

    fn state(&self) -> MutexGuard<'_, WatchState> {
        // The state is a few plain fields, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived from the client.
    fn received(&self) {
        let mut state = self.state();
        match state.phase {
            Phase::Idle { .. } => {
                state.phase = Phase::AwaitingHead { since: Instant::now(), started: true };
            }
            Phase::AwaitingHead { since, started: false } => {
                state.phase = Phase::AwaitingHead { since, started: true };
            }
            Phase::AwaitingHead { started: true, .. } | Phase::Busy(_) | Phase::Draining => {}
        }
    }

    /// hyper read a whole request head and called the service.
    fn begin(&self) {
        let mut state = self.state();
        state.phase = match state.phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        };
    }

    /// A response is finished (its body written or dropped). Nothing needs waking: while a
    /// request is answered the I/O keeps its timer armed an idle period ahead, so the idle
    /// deadline is enforced even if hyper does not read again before it waits.
    fn end(&self) {
        let mut state = self.state();
        state.phase = match state.phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Draining,
        };
    }

    /// The connection's writes reached the client: a drained connection is idle from now.
    fn flushed(&self) {
        let mut state = self.state();
        if state.phase == Phase::Draining {
            state.phase = Phase::Idle { since: Instant::now() };
        }
    }

    /// The deadline in force, if any (none while a request is answered).
    fn deadline(&self) -> Option<Deadline> {
        let limits = &self.limits;
        match self.state().phase {
            Phase::AwaitingHead { since, started } => {
                Some(Deadline { at: since + limits.header_timeout, owes_408: started })
            }
            Phase::Idle { since } => Some(Deadline { at: since + limits.idle_timeout, owes_408: false }),
            Phase::Busy(_) | Phase::Draining => None,
        }
    }
}

/// The connection's I/O, watched: see the module docs.
struct Watched<I> {
    io: I,
    watch: Arc<Watch>,
    timer: Pin<Box<Sleep>>,
    /// When `timer` is set to fire. It is moved only when a deadline comes earlier than that,
    /// or when it fires before the deadline in force (a later one): about once per request,
    /// instead of at every change of phase.
    armed: Option<Instant>,
    /// A deadline passed: reads end the connection from now on.
    expired: bool,
    /// The timer that ends the connection when the client has taken none of the bytes waiting
    /// for it (a write pending) for `send_timeout`: made at the first such write, and reset,
    /// not made again, at each later one.
    send_timer: Option<Pin<Box<Sleep>>>,
    /// A write is pending, and `send_timer` runs for it.
    unsent: bool,
    /// Nothing was read yet: the first read is checked for HTTP/2's preface.
    first_read: bool,
}

impl<I> Watched<I> {
    fn new(io: I, watch: Arc<Watch>) -> Self {
        Self {
            io,
            watch,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
            expired: false,
            send_timer: None,
            unsent: false,
            first_read: true,
        }
    }

    /// A write's outcome, watched: one the client has taken no byte of for `send_timeout`
    /// fails, and hyper closes the connection (the client stopped reading: a response to it,
    /// a stream perhaps, cannot hold the connection, its upstream call and its buffers).
    fn watch_write<T>(&mut self, written: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if written.is_ready() {
            self.unsent = false;
            return written;
        }
        let limit = self.watch.limits.send_timeout;
        let timer = match (&mut self.send_timer, std::mem::replace(&mut self.unsent, true)) {
            (Some(timer), true) => timer,
            (Some(timer), false) => {
                timer.as_mut().reset(Instant::now() + limit);
                timer
            }
            (none, _) => none.insert(Box::pin(tokio::time::sleep(limit))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let message =
                    format!("the client took no byte of its answer for {limit:?} (gateway.send_timeout)");
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)))
            }
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for Watched<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Pending => {}
            ready => {
                if buf.filled().len() > before {
                    this.watch.received();
                    if std::mem::take(&mut this.first_read) && opens_http2(&buf.filled()[before..]) {
                        // Best effort, as the 408: then the end of input, and hyper closes.
                        let _ = Pin::new(&mut this.io).poll_write(cx, HTTP2_REFUSED);
                        let _ = Pin::new(&mut this.io).poll_flush(cx);
                        buf.set_filled(before);
                        this.expired = true;
                        return Poll::Ready(Ok(()));
                    }
                }
                return ready;
            }
        }
        // Nothing to read: hyper waits for the client. Is the client out of time?
        let (at, expires, owes_408) = match this.watch.deadline() {
            Some(deadline) => (deadline.at, true, deadline.owes_408),
            // Answering: no deadline, but the timer stays armed an idle period ahead. The
            // request may end inside a poll after which hyper waits without reading again;
            // the timer then fires by the idle deadline and the read that follows enforces
            // it, with no wake-up at the end of every request to re-arm it.
            // (At least a second ahead: a zero idle timeout must not make this spin.)
            None => {
                let ahead = this.watch.limits.idle_timeout.max(Duration::from_secs(1));
                (Instant::now() + ahead, false, false)
            }
        };
        loop {
            if this.armed.is_none_or(|armed| armed > at) {
                this.timer.as_mut().reset(at);
                this.armed = Some(at);
            }
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // It fired: for this deadline, or for an earlier one since replaced.
            this.armed = None;
            if expires && Instant::now() >= at {
                break;
            }
        }
        this.expired = true;
        if owes_408 {
            // Best effort: a socket whose send buffer is full gets no 408, only the close.
            let _ = Pin::new(&mut this.io).poll_write(cx, REQUEST_TIMEOUT);
            let _ = Pin::new(&mut this.io).poll_flush(cx);
        }
        // End of input: hyper closes the connection (mid-head, as an incomplete message).
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch_write(written, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch_write(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        let flushed = this.watch_write(flushed, cx);
        // hyper flushes the I/O after its own buffer is written: the response is out.
        if matches!(flushed, Poll::Ready(Ok(()))) {
            this.watch.flushed();
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Whether a connection's first bytes are HTTP/2's preface (or as much of it as came).
fn opens_http2(first: &[u8]) -> bool {
    let seen = first.len().min(HTTP2_PREFACE.len());
    seen >= 3 && first[..seen] == HTTP2_PREFACE[..seen]
}

/// The application as hyper calls it, telling the watch when each request begins and ends.
#[derive(Clone)]
struct Tracked {
    app: axum::Router,
    watch: Arc<Watch>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.watch.begin();
        // Ends the request when dropped: with the response body, or with the handler if the
        // client went away before the answer.
        let busy = Busy(self.watch.clone());
        let mut app = self.app.clone();
        let answer = tower_service::Service::call(&mut app, request.map(Body::new));
        Box::pin(async move {
            let response = match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok(response.map(|body| TrackedBody { body, _busy: busy }))
        })
    }
}

/// Marks the end of a request when dropped.
struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A response body that ends its request when hyper is done with it.
struct TrackedBody {
    body: Body,
    _busy: Busy,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
