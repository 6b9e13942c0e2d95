//! HTTP/1 connections driven by the task that uses them.
//!
//! hyper-util's pooled client drives each connection from a task of its own: a request goes
//! to that task through a channel, the response head and each piece of the body come back
//! through others, and every hand-off wakes the other task. On the gateway's request path that
//! is a second task's code and data to bring back into the cache for every event. Here a
//! connection is driven by whoever holds it: the sending future until the response head has
//! arrived, then the response body, which puts the connection back in the pool of the thread
//! it ends on. Nothing polls an idle connection: it is checked when it is taken again (a read
//! that must find nothing, not even the end of the connection), and one idle past the timeout
//! is closed when its pool is next used, or when its thread calls [`super::tidy_idle`] (the
//! gateway's workers do once a second).
//!
//! Dropping a body before its end drops its connection, which closes the upstream call at
//! once: a client that went away stops the provider generating for nobody.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ::http::Uri;
use ::http::uri::{Authority, Scheme};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower_service::Service as _;

use super::{Connector, Home, Inner, Request, Response, TransportError, UpstreamBody};

/// A connection's socket: TLS for `https://` origins, plain TCP for `http://` ones.
type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// A connect under way (name resolution, TCP and the TLS handshake), bounded by the
/// connector's limit.
type Connecting = <Connector as tower_service::Service<Uri>>::Future;

/// Where a connection leads: the scheme and authority of the requests it can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: Scheme,
    authority: Authority,
}

impl Origin {
    /// The origin of an absolute `uri`; `None` for a URI without a scheme or host.
    fn of(uri: &Uri) -> Option<Self> {
        Some(Self { scheme: uri.scheme()?.clone(), authority: uri.authority()?.clone() })
    }

    /// Whether a request to `uri` can go on a connection to this origin.
    fn serves(&self, uri: &Uri) -> bool {
        uri.scheme() == Some(&self.scheme) && uri.authority() == Some(&self.authority)
    }
}

/// One HTTP/1 connection: the handle requests are sent on, and the state machine that reads
/// and writes its socket.
struct Conn {
    origin: Origin,
    sender: SendRequest<Full<Bytes>>,
    /// `None` once the connection has ended (closed by either side, or failed).
    driver: Option<Connection<Io, Full<Bytes>>>,
    /// What the connection is driven with, and the waker made of it.
    relay: Arc<Relay>,
    waker: Waker,
}

impl Conn {
    /// Opens a connection to `uri`'s origin with `connecting`. Boxed: a connection's state
    /// (its buffers among it) is near 2 KB, and it moves from the pool to the request to the
    /// body and back.
    async fn open(connecting: Connecting, uri: &Uri) -> Result<Box<Self>, TransportError> {
        let origin =
            Origin::of(uri).ok_or_else(|| TransportError::invalid("the URL has no scheme or host"))?;
        let io = connecting.await.map_err(|error| TransportError::classified("could not connect", error))?;
        let (sender, driver) = http1::handshake(io)
            .await
            .map_err(|error| TransportError::classified("could not connect", error.into()))?;
        let relay = Arc::new(Relay::default());
        let waker = Waker::from(Arc::clone(&relay));
        Ok(Box::new(Self { origin, sender, driver: Some(driver), relay, waker }))
    }

    /// [`Conn::open`] in a future of its own: the handshake's state is a few kilobytes that the
    /// future of every request would otherwise carry, and copy each time it moves, for the
    /// rare one that opens a connection.
    fn open_boxed(
        connecting: Connecting,
        uri: &Uri,
    ) -> Pin<Box<impl Future<Output = Result<Box<Self>, TransportError>> + '_>> {
        Box::pin(Self::open(connecting, uri))
    }

    /// Whether another request can be sent on this connection now, after letting it read and
    /// write what it can.
    fn is_reusable(&mut self, cx: &mut Context<'_>) -> bool {
        drive(&mut self.driver, cx) && self.sender.is_ready()
    }

    /// Sends `request`, driving the connection until the response head has arrived. A request
    /// that never left comes back in the error.
    async fn send(&mut self, request: Request) -> Result<::http::Response<Incoming>, TrySendError<Request>> {
        let Self { sender, driver, relay, waker, .. } = self;
        let mut response = pin!(sender.try_send_request(request));
        poll_fn(|cx| {
            relay.poll(waker, cx, |cx| {
                // The connection first: it writes the request, then reads the answer. When it
                // has ended, the response future holds the reason.
                drive(driver, cx);
                response.as_mut().poll(cx)
            })
        })
        .await
    }
}

/// Lets a connection read and write what it can; whether it is still open.
fn drive(driver: &mut Option<Connection<Io, Full<Bytes>>>, cx: &mut Context<'_>) -> bool {
    if let Some(connection) = driver
        && Pin::new(connection).poll(cx).is_ready()
    {
        *driver = None;
    }
    driver.is_some()
}

/// What a connection is driven with: a waker that passes on to the holder's task the wakes
/// that come between its polls (the socket became readable), and turns the wakes that come
/// during a poll into another poll at once.
///
/// Driving a connection wakes its driver as a matter of course: the body's channel wakes the
/// connection when a piece is taken from it, the response's when the head is put in. Those
/// come while the holder polls; passed on, each would have the task polled once more for
/// nothing, and on the gateway that is its whole response path, for every event.
#[derive(Default)]
struct Relay(Mutex<Wakes>);

#[derive(Default)]
struct Wakes {
    /// The task that holds the connection, as of its last poll.
    task: Option<Waker>,
    /// The holder is polling the connection.
    polling: bool,
    /// Something woke the connection during this poll.
    woken: bool,
}

/// How many times a poll is repeated at once because it woke its own connection, before the
/// wake goes to the task (which then polls again after the tasks ahead of it): a bound for a
/// connection that yields on purpose, out of its budget.
const REPOLLS: usize = 4;

impl Relay {
    fn wakes(&self) -> std::sync::MutexGuard<'_, Wakes> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Polls `f` with `waker` (made of this relay) for the task of `cx`, again while `f` woke
    /// it and returned `Pending`.
    fn poll<T>(
        &self,
        waker: &Waker,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut wakes = self.wakes();
            if !wakes.task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                wakes.task = Some(cx.waker().clone());
            }
            wakes.polling = true;
            // A wake noted in an earlier poll that ended ready is of no use to this one.
            wakes.woken = false;
        }
        let mut relayed = Context::from_waker(waker);
        for _ in 0..REPOLLS {
            let poll = f(&mut relayed);
            let mut wakes = self.wakes();
            // A wake that came with a ready result is not needed: the caller polls again
            // when it wants more, and each poll looks at everything afresh.
            if poll.is_ready() || !std::mem::take(&mut wakes.woken) {
                wakes.polling = false;
                return poll;
            }
        }
        self.wakes().polling = false;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let task = {
            let mut wakes = self.wakes();
            if wakes.polling {
                wakes.woken = true;
                return;
            }
            wakes.task.clone()
        };
        // Woken outside the lock: the holder may be polling on another thread meanwhile.
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// The HTTP/1 connections of one client on one thread: how new ones are opened, and the idle
/// ones, least recently used first.
pub(super) struct Pool {
    connector: Connector,
    idle: Vec<Idle>,
    /// How long a connection may stay idle and still be used.
    idle_timeout: Duration,
}

/// A connection no request holds, since when.
struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

impl Pool {
    pub(super) fn new(connector: Connector, idle_timeout: Duration) -> Self {
        Self { connector, idle: Vec::new(), idle_timeout }
    }

    /// Starts sending `request` (to an absolute URI) for the client `home`: on the most
    /// recently used idle connection to its origin that is still open, else on a new one. Idle
    /// connections the server closed, or idle for longer than the timeout, are closed on the
    /// way.
    pub(super) fn start(
        &mut self,
        request: Request,
        home: Weak<Home>,
    ) -> impl Future<Output = Result<Response, TransportError>> + Send + 'static {
        let first = match self.take(request.uri()) {
            Some(conn) => First::Idle(conn),
            None => First::Connecting(self.connect(request.uri())),
        };
        send(request, first, home)
    }

    /// A new connection to `uri`'s origin, under way.
    fn connect(&mut self, uri: &Uri) -> Connecting {
        self.connector.call(uri.clone())
    }

    /// Puts `conn` back, idle from now; with an idle timeout of zero, closes it.
    fn put(&mut self, conn: Box<Conn>) {
        if self.idle_timeout.is_zero() {
            return;
        }
        let now = Instant::now();
        self.expire(now);
        self.idle.push(Idle { conn, since: now });
    }

    /// The most recently used idle connection to `uri`'s origin that can take a request.
    fn take(&mut self, uri: &Uri) -> Option<Box<Conn>> {
        if self.idle.is_empty() {
            return None;
        }
        self.expire(Instant::now());
        // Whatever the check registers to be woken by is registered again, with the sender's
        // waker, when the sender drives the connection.
        let mut cx = Context::from_waker(Waker::noop());
        while let Some(at) = self.idle.iter().rposition(|idle| idle.conn.origin.serves(uri)) {
            let mut conn = self.idle.remove(at).conn;
            if conn.is_reusable(&mut cx) {
                return Some(conn);
            }
        }
        None
    }

    /// Closes the idle connections that `take` would pass over: those idle past the timeout
    /// and those the server has closed. For a thread gone quiet, whose sockets would otherwise
    /// wait for its next request, half closed by the server.
    pub(super) fn tidy(&mut self) {
        self.expire(Instant::now());
        let mut cx = Context::from_waker(Waker::noop());
        self.idle.retain_mut(|idle| idle.conn.is_reusable(&mut cx));
    }

    /// Closes the connections idle for longer than the timeout at `now`.
    fn expire(&mut self, now: Instant) {
        let timeout = self.idle_timeout;
        self.idle.retain(|idle| now.saturating_duration_since(idle.since) < timeout);
    }
}

/// The connection a request tries first.
enum First {
    /// An idle connection from the pool.
    Idle(Box<Conn>),
    /// A new connection.
    Connecting(Connecting),
}

/// Sends `request` on `first` and waits for the response head. A request that never left a
/// pooled connection (the server closed it as it was taken) goes again on a new connection
/// opened from the calling thread's pool of `home`, the client that sent it.
async fn send(mut request: Request, first: First, home: Weak<Home>) -> Result<Response, TransportError> {
    // HTTP/1 names the path alone on the request line; `Host` carries the authority.
    let uri = std::mem::take(request.uri_mut());
    *request.uri_mut() = origin_form(&uri);
    let (mut conn, mut reused) = match first {
        First::Idle(conn) => (conn, true),
        First::Connecting(connecting) => (Conn::open_boxed(connecting, &uri).await?, false),
    };
    loop {
        let mut error = match conn.send(request).await {
            Ok(response) => {
                let reuse = !refused(response.status());
                let pooled =
                    |body| UpstreamBody(Inner::Pooled(PooledBody { body, conn: Some(conn), home, reuse }));
                return Ok(response.map(pooled));
            }
            Err(error) => error,
        };
        match error.take_message() {
            Some(unsent) if reused => {
                let connecting = super::on_this_thread(&home, |pool| pool.connect(&uri))
                    .ok_or_else(|| TransportError::request(error.into_error()))?;
                request = unsent;
                conn = Conn::open_boxed(connecting, &uri).await?;
                reused = false;
            }
            _ if reused => return Err(TransportError::on_reused(error.into_error())),
            _ => return Err(TransportError::request(error.into_error())),
        }
    }
}

/// `uri` as an HTTP/1 request line names it: the path and query alone.
fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query().map_or_else(|| Uri::from_static("/"), |path| Uri::from(path.clone()))
}

/// The body of a response on a pooled connection: reading it drives the connection, and
/// the connection goes back to the pool of the client that sent the request once the body
/// has ended.
pub(super) struct PooledBody {
    body: Incoming,
    /// `None` once the connection has gone back to the pool, or ended.
    conn: Option<Box<Conn>>,
    /// The client whose pool the connection goes back to.
    home: Weak<Home>,
    /// Whether the connection may take another request once the body ended (not after a
    /// refusal: see [`refused`]).
    reuse: bool,
}

/// Whether `status` refuses the request (a 4xx other than a rate limit's 429). Many servers
/// close the connection after such an answer without saying so, and the request sent again at
/// once without what was refused (`stream_options`, a past turn's thinking, strict tool use,
/// a stream) would take the connection before its close arrives and be lost with it: a
/// refusal's connection is not reused. A 429 is common under load and keeps its connection.
fn refused(status: ::http::StatusCode) -> bool {
    status.is_client_error() && status != ::http::StatusCode::TOO_MANY_REQUESTS
}

impl PooledBody {
    /// The next frame of the body, driving the connection first so that it reads what the
    /// body waits for.
    pub(super) fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<hyper::Result<Frame<Bytes>>>> {
        let Self { body, conn, .. } = self;
        let frame = match conn.as_deref_mut() {
            Some(Conn { driver, relay, waker, .. }) => relay.poll(waker, cx, |cx| {
                drive(driver, cx);
                Pin::new(&mut *body).poll_frame(cx)
            }),
            None => Pin::new(body).poll_frame(cx),
        };
        let frame = std::task::ready!(frame);
        if self.conn.as_ref().is_some_and(|conn| conn.driver.is_none()) {
            self.conn = None;
        }
        match &frame {
            None => self.release(),
            Some(Err(_)) => self.conn = None,
            // A reader may stop at the last frame of a body of known length without asking
            // for the end (hyper's server does): the connection goes back now.
            Some(Ok(_)) if self.body.is_end_stream() => self.release(),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    /// The body has ended: the connection goes back to the pool of the thread it ended on if
    /// it can take another request (it does not when the server asked to close it, for one).
    /// Nothing is to be woken by it from now until it is taken again, which checks it afresh.
    fn release(&mut self) {
        if let Some(mut conn) = self.conn.take()
            && self.reuse
            && conn.is_reusable(&mut Context::from_waker(Waker::noop()))
        {
            conn.relay.wakes().task = None;
            super::on_this_thread(&self.home, |pool| pool.put(conn));
        }
    }

    pub(super) fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    pub(super) fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;
    use tokio::sync::Notify;

    use super::super::{HttpClient, HttpSettings, read_body};
    use super::*;

    /// How the server answers one request.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        /// `ok`, keeping the connection open.
        KeepAlive,
        /// `ok` with `connection: close`, then closes the connection.
        Close,
        /// `ok` as if keeping the connection, then closes it when told to (as a server's
        /// idle timeout does).
        HangUp,
        /// Closes the connection without an answer, after reading the request.
        Drop,
        /// `ok` in a chunked body, written with its end in one write.
        Chunked,
    }

    /// A plain HTTP/1.1 server on 127.0.0.1 answering its `n`th request (from 0) as
    /// `answers[n]` (the last one for those beyond).
    struct Server {
        origin: String,
        connections: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        /// Notified each time the server has closed a connection.
        closed: Arc<Notify>,
        /// Tells a connection that answered [`Answer::HangUp`] to close.
        hang_up: Arc<Notify>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Server {
        async fn start(answers: &[Answer]) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let origin = format!("http://{}", listener.local_addr().unwrap());
            let (connections, requests): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
            let (closed, hang_up) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
            let answers = Arc::new(Mutex::new(answers.to_vec()));
            let shared =
                (Arc::clone(&connections), Arc::clone(&requests), Arc::clone(&closed), Arc::clone(&hang_up));
            let task = tokio::spawn(async move {
                loop {
                    let (socket, _) = listener.accept().await.unwrap();
                    shared.0.fetch_add(1, Ordering::SeqCst);
                    let (requests, closed, hang_up) = (shared.1.clone(), shared.2.clone(), shared.3.clone());
                    let answers = answers.clone();
                    tokio::spawn(async move {
                        serve(socket, &requests, &answers, &hang_up).await;
                        closed.notify_one();
                    });
                }
            });
            Server { origin, connections, requests, closed, hang_up, task }
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }
    }

    /// Answers the requests of one connection until an answer closes it or the client does.
    async fn serve(
        mut socket: TcpStream,
        requests: &AtomicUsize,
        answers: &Mutex<Vec<Answer>>,
        hang_up: &Notify,
    ) {
        let mut buffer = Vec::new();
        loop {
            // A request: its head alone, as the tests send no body.
            while !buffer.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0; 1024];
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            buffer.clear();
            let n = requests.fetch_add(1, Ordering::SeqCst);
            let answer = {
                let answers = answers.lock().unwrap();
                answers.get(n).or(answers.last()).copied().unwrap()
            };
            let head = match answer {
                Answer::Drop => return,
                Answer::Close => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                Answer::KeepAlive | Answer::HangUp => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                Answer::Chunked => {
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
                }
            };
            socket.write_all(head.as_bytes()).await.unwrap();
            match answer {
                Answer::Close => return,
                Answer::HangUp => return hang_up.notified().await,
                Answer::KeepAlive | Answer::Drop | Answer::Chunked => {}
            }
        }
    }

    /// Waits for the server to close a connection, failing after a few seconds rather than
    /// hanging when it never does.
    async fn closing(closed: impl Future<Output = ()>) {
        tokio::time::timeout(Duration::from_secs(5), closed).await.expect("the connection was not closed");
    }

    /// A client's HTTP/1 pool.
    fn own(pool: &mut super::super::Pool) -> &mut Pool {
        match pool {
            super::super::Pool::Own(pool) => pool,
            super::super::Pool::Shared(_) => unreachable!("HTTP/1 is the default"),
        }
    }

    fn get(origin: &str) -> Request {
        ::http::Request::get(format!("{origin}/v1/models")).body(Full::new(Bytes::new())).unwrap()
    }

    /// Sends a GET to `origin` and reads the answer to its end.
    async fn fetch(client: &HttpClient, origin: &str) -> Result<Bytes, TransportError> {
        read_body(client.send(get(origin)).await?).await
    }

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_relay_polls_again_for_wakes_during_a_poll_and_passes_on_the_others() {
        let task = Arc::new(Counted::default());
        let task_waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&task_waker);
        let relay = Arc::new(Relay::default());
        let waker = Waker::from(Arc::clone(&relay));

        // Woken during its first poll, ready at its second: the task is not woken.
        let mut polls = 0;
        let poll = relay.poll(&waker, &mut cx, |cx| {
            polls += 1;
            if polls == 1 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        });
        assert_eq!((poll, polls, task.0.load(Ordering::SeqCst)), (Poll::Ready(()), 2, 0));

        // Ready and woken on the way (a piece taken from the body's channel wakes the
        // connection): the wake is not carried into the next poll, which the next case shows
        // polling once.
        assert_eq!(
            relay.poll(&waker, &mut cx, |cx| {
                cx.waker().wake_by_ref();
                Poll::Ready(())
            }),
            Poll::Ready(())
        );

        // Pending and not woken: one poll; a wake after it goes to the task.
        let mut polls = 0;
        let poll = relay.poll(&waker, &mut cx, |_| {
            polls += 1;
            Poll::<()>::Pending
        });
        assert_eq!((poll, polls, task.0.load(Ordering::SeqCst)), (Poll::Pending, 1, 0));
        waker.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);

        // Waking itself on every poll: repeated a bounded number of times, then the task is
        // woken to poll again later.
        let mut polls = 0;
        let poll = relay.poll(&waker, &mut cx, |cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        assert_eq!((poll, polls, task.0.load(Ordering::SeqCst)), (Poll::Pending, REPOLLS, 2));
    }

    #[tokio::test]
    async fn sequential_requests_share_one_connection_per_origin() {
        let (one, two) =
            (Server::start(&[Answer::KeepAlive]).await, Server::start(&[Answer::KeepAlive]).await);
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        for _ in 0..3 {
            assert_eq!(fetch(&client, &one.origin).await.unwrap(), "ok");
            assert_eq!(fetch(&client, &two.origin).await.unwrap(), "ok");
        }
        assert_eq!((one.connections(), two.connections()), (1, 1));
    }

    #[tokio::test]
    async fn the_end_of_a_body_already_read_is_found_at_the_first_look() {
        // What `sse::release` counts on to give a stream's connection back without a timer.
        let server = Server::start(&[Answer::Chunked]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let mut body = client.send(get(&server.origin)).await.unwrap().into_body();
        let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "ok");
        let end = Pin::new(&mut body).poll_frame(&mut Context::from_waker(Waker::noop()));
        assert!(matches!(end, Poll::Ready(None)), "{end:?}");
        assert_eq!(client.with_pool(|pool| own(pool).idle.len()), 1);
    }

    #[tokio::test]
    async fn a_body_read_to_its_length_gives_its_connection_back_without_the_end_asked_for() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let mut body = client.send(get(&server.origin)).await.unwrap().into_body();
        let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "ok");
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(client.with_pool(|pool| own(pool).idle.len()), 1);
        assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
        assert_eq!((server.connections(), server.requests()), (1, 2));
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_used_again() {
        let server = Server::start(&[Answer::Close]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        for _ in 0..3 {
            assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
            assert_eq!(
                client.with_pool(|pool| own(pool).idle.len()),
                0,
                "put back after `connection: close`"
            );
        }
        assert_eq!(server.connections(), 3);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_not_used_again() {
        let server = Server::start(&[Answer::HangUp]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let uri: Uri = get(&server.origin).uri().clone();
        for _ in 0..3 {
            assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
            assert_eq!(client.with_pool(|pool| own(pool).idle.len()), 1);
            server.hang_up.notify_one();
            closing(server.closed.notified()).await;
            // Checked as it is taken, and found closed.
            assert!(client.with_pool(|pool| own(pool).take(&uri).is_none()));
        }
        assert_eq!((server.connections(), server.requests()), (3, 3));
    }

    #[tokio::test]
    async fn a_request_that_never_left_a_closed_connection_goes_on_a_new_one() {
        let server = Server::start(&[Answer::HangUp, Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
        server.hang_up.notify_one();
        closing(server.closed.notified()).await;
        // The closed connection is taken without the check `take` makes, as happens when the
        // server closes it just after that check.
        let conn = client.with_pool(|pool| own(pool).idle.pop().unwrap().conn);
        let response =
            send(get(&server.origin), First::Idle(conn), Arc::downgrade(&client.home)).await.unwrap();
        assert_eq!(read_body(response).await.unwrap(), "ok");
        assert_eq!((server.connections(), server.requests()), (2, 2));
    }

    #[tokio::test]
    async fn a_body_read_on_another_thread_puts_its_connection_in_that_threads_pool() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let response = client.send(get(&server.origin)).await.unwrap();
        let (origin, elsewhere) = (server.origin.clone(), client.clone());
        // Another thread with a runtime of its own, as a multi-threaded runtime's other worker
        // would be; this one's runtime goes on running the server and driving the socket.
        let there = tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                assert_eq!(read_body(response).await.unwrap(), "ok");
                let idle = elsewhere.with_pool(|pool| own(pool).idle.len());
                // The thread's own request takes the connection its first one left there.
                assert_eq!(fetch(&elsewhere, &origin).await.unwrap(), "ok");
                idle
            })
        });
        let idle_there = there.await.unwrap();
        assert_eq!(idle_there, 1);
        assert_eq!(client.with_pool(|pool| own(pool).idle.len()), 0);
        assert_eq!(server.connections(), 1);
    }

    #[tokio::test]
    async fn a_body_that_outlives_its_client_closes_its_connection() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let response = client.send(get(&server.origin)).await.unwrap();
        let home = Arc::downgrade(&client.home);
        drop(client);
        let closed = server.closed.notified();
        assert_eq!(read_body(response).await.unwrap(), "ok");
        // Not kept in the pool of a client that is gone: closed at once.
        closing(closed).await;
        assert_eq!(home.strong_count(), 0);
    }

    #[tokio::test]
    async fn a_request_the_server_received_is_not_sent_again() {
        let server = Server::start(&[Answer::KeepAlive, Answer::Drop]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
        let error = fetch(&client, &server.origin).await.unwrap_err();
        assert_eq!(error.kind(), switchyard::ErrorKind::Transport, "{error}");
        assert!(error.to_string().starts_with("the request failed"), "{error}");
        assert_eq!((server.connections(), server.requests()), (1, 2));
        // The pool's race (a reused connection closed as the request went): health-neutral.
        assert!(switchyard::ProviderError::from(error).is_stale_connection());

        // A new connection closed without an answer is the provider's own failure.
        let fresh = Server::start(&[Answer::Drop]).await;
        let error = fetch(&client, &fresh.origin).await.unwrap_err();
        assert!(!switchyard::ProviderError::from(error).is_stale_connection());
    }

    #[tokio::test]
    async fn a_body_left_before_its_end_closes_its_connection() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        let closed = server.closed.notified();
        drop(client.send(get(&server.origin)).await.unwrap());
        closing(closed).await;
        assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
        assert_eq!(server.connections(), 2);
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_timeout_is_not_used_again() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let settings = HttpSettings { pool_idle_timeout: Duration::ZERO, ..HttpSettings::default() };
        let client = HttpClient::new(&settings).unwrap();
        for _ in 0..3 {
            assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
            assert_eq!(client.with_pool(|pool| own(pool).idle.len()), 0, "kept with no timeout");
        }
        assert_eq!(server.connections(), 3);
    }

    /// How many idle connections `client` has on this thread, after a tidy.
    fn idle_after_tidy(client: &HttpClient) -> usize {
        super::super::tidy_idle();
        client.with_pool(|pool| own(pool).idle.len())
    }

    #[tokio::test]
    async fn tidying_closes_what_the_servers_closed_and_keeps_the_rest() {
        let (hanging_up, open) =
            (Server::start(&[Answer::HangUp]).await, Server::start(&[Answer::KeepAlive]).await);
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        assert_eq!(fetch(&client, &hanging_up.origin).await.unwrap(), "ok");
        assert_eq!(fetch(&client, &open.origin).await.unwrap(), "ok");
        assert_eq!(idle_after_tidy(&client), 2, "both open");
        hanging_up.hang_up.notify_one();
        closing(hanging_up.closed.notified()).await;
        // Found closed once the runtime has read the server's end, without a request.
        tokio::time::timeout(Duration::from_secs(5), async {
            while idle_after_tidy(&client) == 2 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the closed connection was not found");
        let open_uri: Uri = get(&open.origin).uri().clone();
        assert!(client.with_pool(|pool| own(pool).idle[0].conn.origin.serves(&open_uri)));
        assert_eq!(fetch(&client, &open.origin).await.unwrap(), "ok");
        assert_eq!(open.connections(), 1, "the open one was kept and used again");
    }

    #[tokio::test]
    async fn tidying_closes_connections_idle_past_the_timeout_and_pools_of_clients_gone() {
        let server = Server::start(&[Answer::KeepAlive]).await;
        let client = HttpClient::new(&HttpSettings::default()).unwrap();
        assert_eq!(fetch(&client, &server.origin).await.unwrap(), "ok");
        // Idle since a moment ago, so that no clock has to move (a paused one would fire the
        // connect timeout while the socket connects).
        let idle_since = |client: &HttpClient, ago: u64| {
            client.with_pool(|pool| {
                own(pool).idle[0].since = Instant::now().checked_sub(Duration::from_secs(ago)).unwrap();
            });
        };
        idle_since(&client, 89);
        assert_eq!(idle_after_tidy(&client), 1);
        idle_since(&client, 90);
        assert_eq!(idle_after_tidy(&client), 0);
        let pools = || super::super::POOLS.with_borrow(Vec::len);
        let other = HttpClient::new(&HttpSettings::default()).unwrap();
        other.warm();
        assert_eq!(pools(), 2);
        drop(other);
        super::super::tidy_idle();
        assert_eq!(pools(), 1, "the pool of the client dropped is gone");
    }
}
