//! Serving on one event loop per thread: connections are dealt out in turn, a connection
//! stays on its thread, and a stop lets requests in flight finish.

#![allow(clippy::unwrap_used)]

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use axum::routing::get;
use switchyard_gateway::config::ConnectionLimits;
use switchyard_gateway::workers::Workers;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// The test's handle on a held request: told when it is in its handler, released at will.
struct Hold {
    entered: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

/// An app whose answer is the name of the thread that served it; `/hold` answers only once
/// the test releases it.
fn app() -> (axum::Router, Hold) {
    let (entered_tx, entered) = oneshot::channel();
    let (release, released) = oneshot::channel::<()>();
    let held = Arc::new(Mutex::new(Some((entered_tx, released))));
    let thread = || async { std::thread::current().name().unwrap_or("?").to_owned() };
    let router = axum::Router::new().route("/", get(thread)).route(
        "/hold",
        get(move || {
            let held = held.lock().unwrap().take();
            async move {
                if let Some((entered, released)) = held {
                    let _ = entered.send(());
                    let _ = released.await;
                }
                "released".to_owned()
            }
        }),
    );
    (router, Hold { entered, release })
}

struct Started {
    workers: Workers,
    addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    hold: Hold,
    /// The threads that ran `prepare`.
    prepared: Arc<Mutex<Vec<String>>>,
}

async fn start(threads: usize) -> Started {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let (app, hold) = app();
    let prepared = Arc::new(Mutex::new(Vec::new()));
    let record = prepared.clone();
    let prepare = Arc::new(move || {
        record.lock().unwrap().push(std::thread::current().name().unwrap_or("?").to_owned());
    });
    let workers = Workers::start(
        listener,
        NonZeroUsize::new(threads).unwrap(),
        app,
        ConnectionLimits::defaults(),
        prepare,
        stopped,
    )
    .unwrap();
    Started { workers, addr, stop, hold, prepared }
}

/// Sends one keep-alive GET and returns the body.
async fn get_on(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "connection closed mid-response: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .expect("a content-length");
            if body.len() >= length {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                return body[..length].to_owned();
            }
        }
    }
}

#[tokio::test]
async fn connections_are_dealt_to_the_workers_in_turn_and_stay_there() {
    let Started { addr, prepared, .. } = start(2).await;
    let mut connections = Vec::new();
    let mut served = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        served.push(get_on(&mut stream, "/").await);
        connections.push(stream);
    }
    assert_eq!(
        served,
        ["switchyard-worker-0", "switchyard-worker-1", "switchyard-worker-0", "switchyard-worker-1"]
    );
    // Later requests on each connection are served by the thread that took it.
    for (stream, first) in connections.iter_mut().zip(&served) {
        for _ in 0..3 {
            assert_eq!(&get_on(stream, "/").await, first);
        }
    }
    // Each worker prepared itself, once, before serving.
    let mut prepared = prepared.lock().unwrap().clone();
    prepared.sort();
    assert_eq!(prepared, ["switchyard-worker-0", "switchyard-worker-1"]);
}

#[tokio::test]
async fn a_stop_lets_requests_in_flight_finish() {
    let Started { workers, addr, stop, hold, .. } = start(2).await;
    let mut held = TcpStream::connect(addr).await.unwrap();
    let answer = tokio::spawn(async move { get_on(&mut held, "/hold").await });
    hold.entered.await.unwrap();
    stop.send(true).unwrap();
    let finished = tokio::spawn(workers.finished());
    hold.release.send(()).unwrap();
    assert_eq!(answer.await.unwrap(), "released");
    finished.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_worker_that_dies_is_reported_not_waited_for() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (_stop, stopped) = watch::channel(false);
    let (app, _hold) = app();
    // The last worker dies before serving; the first keeps serving and never ends by itself.
    let prepare = Arc::new(|| {
        if std::thread::current().name() == Some("switchyard-worker-1") {
            panic!("worker 1 cannot prepare");
        }
    });
    let workers = Workers::start(
        listener,
        NonZeroUsize::new(2).unwrap(),
        app,
        ConnectionLimits::defaults(),
        prepare,
        stopped,
    )
    .unwrap();
    // A guard against a hang, not a timing rule: the failure arrives as soon as the thread dies.
    let finished = tokio::time::timeout(std::time::Duration::from_secs(30), workers.finished()).await;
    let error = finished.expect("finished must not wait for the live worker").unwrap_err();
    assert!(error.to_string().contains("died"), "{error}");
}

/// The test's side of [`upstream_that_hangs_up`].
struct HangingUp {
    origin: String,
    /// Tells the upstream to close its side of the connection.
    hang_up: oneshot::Sender<()>,
    /// Told when the client has closed its side.
    closed: oneshot::Receiver<()>,
}

/// An upstream that answers one keep-alive request, closes its side of the connection when
/// told (as a provider's idle timeout does), and reports when the client closes its own.
async fn upstream_that_hangs_up() -> HangingUp {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let (closed, closed_rx) = oneshot::channel();
    let (hang_up, hung_up) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let read = socket.read(&mut buffer).await.unwrap();
            head.extend_from_slice(&buffer[..read]);
        }
        socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
        let _ = hung_up.await;
        socket.shutdown().await.unwrap();
        // The client's end: a read of nothing once it has closed the connection.
        while socket.read(&mut buffer).await.is_ok_and(|read| read > 0) {}
        let _ = closed.send(());
    });
    HangingUp { origin, hang_up, closed: closed_rx }
}

#[tokio::test]
async fn a_quiet_worker_closes_the_upstream_connections_their_servers_closed() {
    let HangingUp { origin, hang_up, closed: upstream_closed } = upstream_that_hangs_up().await;
    let client = Arc::new(switchyard_providers::http::HttpClient::new(&Default::default()).unwrap());
    let app = axum::Router::new().route(
        "/",
        get(move || {
            let (client, origin) = (client.clone(), origin.clone());
            async move {
                let request =
                    axum::http::Request::get(format!("{origin}/")).body(Default::default()).unwrap();
                let answer = client.send(request).await.unwrap();
                let body = switchyard_providers::http::read_body(answer).await.unwrap();
                String::from_utf8_lossy(&body).into_owned()
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = watch::channel(false);
    let workers = Workers::start(
        listener,
        NonZeroUsize::new(1).unwrap(),
        app,
        ConnectionLimits::defaults(),
        Arc::new(|| {}),
        stopped,
    )
    .unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get_on(&mut stream, "/").await, "ok");
    // The answer was read to its end: its connection is idle in the worker's pool.
    hang_up.send(()).unwrap();
    // No request follows: the worker's heartbeat finds the connection closed by its server
    // and closes it too. A guard against a hang, not a timing rule.
    let closed = tokio::time::timeout(std::time::Duration::from_secs(20), upstream_closed).await;
    closed.expect("the idle upstream connection stayed open").unwrap();
    drop(workers);
}
