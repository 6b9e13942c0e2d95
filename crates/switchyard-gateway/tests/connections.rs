//! Connection hygiene on the real binary, on loopback: heads that never finish, bodies that
//! stop arriving, idle keep-alive connections and the bound on open connections. Each test
//! runs for seconds. The exact deadlines are pinned in paused time by the unit tests of
//! `connection` and `server::body`.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::{serve, stop, write_config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

const CHAT: &str = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;

/// Bounds every wait of these tests: nothing here may hang.
const BOUND: Duration = Duration::from_secs(20);

fn config(name: &str, gateway: &str) -> std::path::PathBuf {
    write_config(
        name,
        &format!(
            "providers: {{ up: {{ kind: simulated }} }}\nroutes: {{ default: {{ targets: [up:m] }} }}\ngateway: {gateway}\n"
        ),
    )
}

async fn send_chat(stream: &mut TcpStream) {
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
}

/// Reads one response whose body is JSON and returns it; the connection stays open.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = timeout(BOUND, stream.read(&mut buf)).await.expect("an answer in time").unwrap();
        assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&text));
        text.extend_from_slice(&buf[..n]);
        let seen = String::from_utf8_lossy(&text);
        if let Some((head, body)) = seen.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap();
            if body.len() >= length {
                return seen.into_owned();
            }
        }
    }
}

async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut text = Vec::new();
    let read = timeout(BOUND, stream.read_to_end(&mut text)).await.expect("closed in time");
    // A reset after the 408 is a close too.
    if let Err(error) = read {
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    }
    String::from_utf8_lossy(&text).into_owned()
}

#[tokio::test]
async fn a_thousand_half_sent_heads_are_closed_by_the_header_timeout_while_requests_are_answered() {
    let config = config("heads.yaml", "{ header_timeout: 1s }");
    let (server, addr) = serve(&config, &[]);

    let started = Instant::now();
    let mut held = Vec::new();
    for _ in 0..1000 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-ty").await.unwrap();
        held.push(stream);
    }
    // Meanwhile a client that sends whole requests is served.
    let mut normal = TcpStream::connect(&addr).await.unwrap();
    send_chat(&mut normal).await;
    let answer = read_response(&mut normal).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    for mut stream in held {
        let answer = read_to_close(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout"), "{answer:?}");
    }
    let took = started.elapsed();
    stop(server);
    assert!(took >= Duration::from_secs(1), "closed before the header timeout: {took:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let config = config("idle.yaml", "{ header_timeout: 500ms, idle_timeout: 1500ms }");
    let (server, addr) = serve(&config, &[]);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    send_chat(&mut stream).await;
    let answer = read_response(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answered = Instant::now();
    let rest = read_to_close(&mut stream).await;
    let idle = answered.elapsed();
    stop(server);
    assert_eq!(rest, "", "an idle connection is closed without a response");
    assert!(idle >= Duration::from_millis(1400), "closed at the header timeout, not the idle one: {idle:?}");
}

#[tokio::test]
async fn at_max_connections_only_the_probes_are_answered_until_a_connection_closes_and_it_says_so() {
    let config = config("bound.yaml", "{ max_connections: 2 }");
    let (server, addr) = serve(&config, &[]);
    let mut first = TcpStream::connect(&addr).await.unwrap();
    send_chat(&mut first).await;
    read_response(&mut first).await;
    let mut second = TcpStream::connect(&addr).await.unwrap();
    send_chat(&mut second).await;
    read_response(&mut second).await;

    // Two open: a third is taken on a probe's place and answered at once, then closed.
    let mut third = TcpStream::connect(&addr).await.unwrap();
    send_chat(&mut third).await;
    let refused = read_to_close(&mut third).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("\r\nretry-after: 1\r\n") && refused.contains("at_max_connections"),
        "{refused}"
    );
    // The liveness probe sees a live process; the readiness probe, one with no room.
    let probe = async |path: &str| {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.unwrap();
        read_to_close(&mut stream).await
    };
    assert!(probe("/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(probe("/readyz").await.starts_with("HTTP/1.1 503"));

    // A closed connection's place is taken by the next one (the client asks again, as the
    // 503 said, until the server has seen the close).
    drop(first);
    let mut answer = String::new();
    for _ in 0..200 {
        let mut fourth = TcpStream::connect(&addr).await.unwrap();
        send_chat(&mut fourth).await;
        answer = read_response(&mut fourth).await;
        if !answer.starts_with("HTTP/1.1 503") {
            break;
        }
    }
    drop(second);
    let logs = support::stop_flushed(server);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        logs.matches("at gateway.max_connections").count(),
        1,
        "once a minute, not once a connection: {logs}"
    );
}

const KEY: &str = "test-client-key";

/// A POST of `body` to `path` with the client key (or not), announcing `length` bytes.
fn post_head(path: &str, key: Option<&str>, length: usize) -> String {
    let auth = key.map(|key| format!("authorization: Bearer {key}\r\n")).unwrap_or_default();
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\nanthropic-version: 2023-06-01\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// `GET /metrics`, on a connection of its own.
async fn metrics(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    read_to_close(&mut stream).await
}

#[tokio::test]
async fn a_stalled_body_on_each_model_endpoint_gets_a_408_and_its_connection_closes() {
    let config = config("stalled.yaml", &format!("{{ keys: [{KEY}], body_timeout: 300ms }}"));
    let (server, addr) = serve(&config, &[]);
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        // 1000 bytes announced, one sent.
        stream.write_all(format!("{}{{", post_head(path, Some(KEY), 1000)).as_bytes()).await.unwrap();
        let sent = Instant::now();
        let answer = read_to_close(&mut stream).await;
        let took = sent.elapsed();
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{path}: {answer}");
        assert!(answer.contains("\r\nconnection: close\r\n"), "{path}: {answer}");
        assert!(
            answer.contains("the request body stopped arriving: no byte for 300ms (gateway.body_timeout)"),
            "{path}: {answer}"
        );
        assert!(took >= Duration::from_millis(300), "{path}: answered before the body timeout: {took:?}");
    }
    let metrics = metrics(&addr).await;
    stop(server);
    assert!(!metrics.contains("\nswitchyard_attempts_total{"), "no upstream call was made: {metrics}");
    for endpoint in ["chat_completions", "messages", "responses"] {
        let line =
            format!(r#"switchyard_requests_total{{endpoint="{endpoint}",route="(none)",status="408"}} 1"#);
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

#[tokio::test]
async fn a_client_without_the_key_is_refused_at_its_head_while_its_body_is_pending() {
    // The default body timeout, 30 s: the answer must not wait for it.
    let config = config("stalled-unauthorized.yaml", &format!("{{ keys: [{KEY}] }}"));
    let (server, addr) = serve(&config, &[]);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(format!("{}{{", post_head("/v1/chat/completions", None, 1000)).as_bytes())
        .await
        .unwrap();
    let mut text = Vec::new();
    let read = timeout(Duration::from_secs(5), stream.read_to_end(&mut text)).await;
    stop(server);
    assert!(read.is_ok(), "the unauthenticated client was held: {}", String::from_utf8_lossy(&text));
    let answer = String::from_utf8_lossy(&text);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

#[tokio::test]
async fn a_body_trickled_in_under_the_body_timeout_is_served() {
    let config = config("trickled.yaml", &format!("{{ keys: [{KEY}], body_timeout: 1s }}"));
    let (server, addr) = serve(&config, &[]);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream.write_all(post_head("/v1/chat/completions", Some(KEY), CHAT.len()).as_bytes()).await.unwrap();
    let started = Instant::now();
    // Seven pieces a quarter of the timeout apart: the whole body takes longer than the timeout.
    for piece in CHAT.as_bytes().chunks(CHAT.len().div_ceil(7)) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        stream.write_all(piece).await.unwrap();
    }
    let took = started.elapsed();
    let answer = read_response(&mut stream).await;
    stop(server);
    assert!(took > Duration::from_secs(1), "the body arrived within one timeout: {took:?}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
