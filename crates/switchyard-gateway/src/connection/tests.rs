//! The connection rules, in paused time over an in-memory connection: each deadline is hit
//! exactly, and nothing closes a connection that is answering.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::serve;
use crate::config::ConnectionLimits;

const HEAD: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(5);
const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";

fn app() -> axum::Router {
    axum::Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/big", get(|| async { "x".repeat(64 * 1024) }))
        .route(
            "/stream",
            get(|| async {
                // A stream that sends a chunk every 10 s for a minute: longer than both timeouts.
                let chunks = futures_util::stream::unfold(0, |n| async move {
                    if n == 6 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Some((Ok::<_, std::io::Error>(format!("chunk {n}\n")), n + 1))
                });
                Body::from_stream(chunks)
            }),
        )
}

/// A served connection: the client's end, and the stop switch.
fn connect() -> (DuplexStream, watch::Sender<bool>) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let (stop, stopped) = watch::channel(false);
    let limits = ConnectionLimits {
        header_timeout: HEAD,
        idle_timeout: IDLE,
        max_connections: 10,
        ..ConnectionLimits::defaults()
    };
    tokio::spawn(serve(server, app(), limits, stopped));
    (client, stop)
}

/// Reads until the server closes the connection; returns what it sent.
async fn read_to_close(client: &mut DuplexStream) -> String {
    let mut text = Vec::new();
    client.read_to_end(&mut text).await.unwrap();
    String::from_utf8(text).unwrap()
}

/// Reads one whole response to `GET /` (its body is `ok`).
async fn read_answer(client: &mut DuplexStream) -> String {
    let mut text = Vec::new();
    let mut buf = [0u8; 1024];
    while !text.ends_with(b"\r\n\r\nok") {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&text));
        text.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(text).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_half_sent_head_gets_a_408_and_is_closed_at_the_header_timeout() {
    let started = Instant::now();
    let (mut client, _stop) = connect();
    client.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-slow").await.unwrap();
    let answer = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), HEAD);
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout_without_a_word() {
    let started = Instant::now();
    let (mut client, _stop) = connect();
    let answer = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), HEAD);
    assert_eq!(answer, "");
}

#[tokio::test(start_paused = true)]
async fn the_first_heads_clock_starts_at_accept_not_at_its_first_byte() {
    let started = Instant::now();
    let (mut client, _stop) = connect();
    tokio::time::sleep(HEAD / 2).await;
    client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let answer = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), HEAD, "a trickled head does not buy more time");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_not_the_header_timeout() {
    let (mut client, _stop) = connect();
    client.write_all(GET).await.unwrap();
    let answer = read_answer(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answered = Instant::now();
    let rest = read_to_close(&mut client).await;
    assert_eq!(answered.elapsed(), IDLE);
    assert_eq!(rest, "", "an idle connection is closed without a response");
}

#[tokio::test(start_paused = true)]
async fn a_later_heads_clock_starts_at_its_first_byte() {
    let (mut client, _stop) = connect();
    client.write_all(GET).await.unwrap();
    read_answer(&mut client).await;
    // Idle for most of the idle timeout, well past the header timeout: still open.
    tokio::time::sleep(IDLE - Duration::from_secs(1)).await;
    let started = Instant::now();
    client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let answer = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), HEAD);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn keep_alive_requests_are_answered_one_after_another() {
    let (mut client, _stop) = connect();
    for n in 0..3 {
        if n > 0 {
            tokio::time::sleep(IDLE - Duration::from_secs(1)).await;
        }
        client.write_all(GET).await.unwrap();
        let answer = read_answer(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_longer_than_both_timeouts_runs_to_its_end() {
    let (mut client, _stop) = connect();
    client.write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("chunk 5\n"), "{answer}");
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_stop_closes_an_idle_connection_and_lets_a_stream_finish() {
    let (mut idle, stop) = connect();
    idle.write_all(GET).await.unwrap();
    read_answer(&mut idle).await;
    let (mut streaming, stop_stream) = connect();
    streaming.write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut first = [0u8; 16];
    streaming.read_exact(&mut first).await.unwrap();

    let asked = Instant::now();
    stop.send(true).unwrap();
    stop_stream.send(true).unwrap();
    assert_eq!(read_to_close(&mut idle).await, "");
    assert_eq!(asked.elapsed(), Duration::ZERO, "the idle connection closes at once");
    let rest = read_to_close(&mut streaming).await;
    assert!(rest.contains("chunk 5\n"), "{rest}");
}

#[tokio::test(start_paused = true)]
async fn a_large_answer_to_a_slow_reader_is_not_cut_by_the_idle_timeout() {
    // A connection whose buffer holds 1 KiB, and a client that reads 1 KiB every idle period
    // and more: the answer takes about a minute to reach it.
    let (mut client, server) = tokio::io::duplex(1024);
    let (_stop, stopped) = watch::channel(false);
    let limits = ConnectionLimits {
        header_timeout: HEAD,
        idle_timeout: IDLE,
        max_connections: 10,
        ..ConnectionLimits::defaults()
    };
    tokio::spawn(serve(server, app(), limits, stopped));
    client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        tokio::time::sleep(IDLE + Duration::from_secs(1)).await;
        let n = client.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        received.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(received).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(200)]);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    assert_eq!(body.len(), 64 * 1024, "the whole answer arrived");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_takes_no_byte_of_its_answer_for_the_send_timeout_is_closed() {
    // A connection whose buffer holds 1 KiB, and a client that never reads: the answer's
    // writes stall, and at `send_timeout` the connection ends (the slow reader above, which
    // takes a little at a time, is never cut).
    let (mut client, server) = tokio::io::duplex(1024);
    let (_stop, stopped) = watch::channel(false);
    let limits = ConnectionLimits { send_timeout: Duration::from_secs(60), ..ConnectionLimits::defaults() };
    let served = tokio::spawn(serve(server, app(), limits, stopped));
    client.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let started = Instant::now();
    served.await.unwrap();
    assert_eq!(started.elapsed().as_secs(), 60, "closed at the send timeout");
    let mut received = Vec::new();
    client.read_to_end(&mut received).await.unwrap();
    assert!(received.len() <= 1024, "only what the buffer held: {}", received.len());
}

#[tokio::test(start_paused = true)]
async fn a_client_that_speaks_http2_is_told_this_gateway_speaks_http_1_1() {
    // curl --http2-prior-knowledge: the preface, answered in HTTP/2 with an empty SETTINGS
    // frame and a GOAWAY of HTTP_1_1_REQUIRED that says why, not a silent close.
    let (mut client, _stop) = connect();
    client.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    let (settings, goaway) = answer.split_at(9);
    assert_eq!(settings, [0, 0, 0, 4, 0, 0, 0, 0, 0], "an empty SETTINGS frame");
    let length = usize::from(goaway[2]) | usize::from(goaway[1]) << 8 | usize::from(goaway[0]) << 16;
    assert_eq!((goaway[3], length, goaway.len()), (7, goaway.len() - 9, 9 + length), "one GOAWAY frame");
    assert_eq!(&goaway[9..17], [0, 0, 0, 0, 0, 0, 0, 0x0d], "stream 0, HTTP_1_1_REQUIRED");
    assert_eq!(&goaway[17..], b"this gateway speaks HTTP/1.1 only");
}
