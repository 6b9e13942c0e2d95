//! The body rule in paused time: first the reader alone, then through the gateway over an
//! in-memory connection (a 408 in the client's dialect, the connection closed, no upstream
//! call).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;

use super::{BodyError, read};
use crate::server::{AppState, app};

const PATIENCE: Duration = Duration::from_secs(2);
const LIMIT: usize = 1024;

/// A body whose pieces arrive each after its delay; then it ends, or stalls for good.
fn arriving(pieces: &[(Duration, &'static str)], then: Then) -> Body {
    let pieces = pieces.to_vec();
    let stream = futures_util::stream::unfold(0, move |n| {
        let piece = pieces.get(n).copied();
        async move {
            match piece {
                Some((delay, text)) => {
                    tokio::time::sleep(delay).await;
                    Some((Ok::<_, std::io::Error>(text), n + 1))
                }
                None if then == Then::Stall => std::future::pending().await,
                None => None,
            }
        }
    });
    Body::from_stream(stream)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    End,
    Stall,
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_arriving_is_given_up_one_body_timeout_after_its_last_byte() {
    let body = arriving(&[(Duration::ZERO, "{"), (Duration::from_secs(1), "\"model\"")], Then::Stall);
    let started = Instant::now();
    let error = read(body, LIMIT, PATIENCE).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(1) + PATIENCE);
    assert!(matches!(error, BodyError::Stalled { waited: PATIENCE }), "{error:?}");
    assert_eq!(error.to_string(), "the request body stopped arriving: no byte for 2s");
}

#[tokio::test(start_paused = true)]
async fn the_clock_starts_when_the_body_is_read_not_when_the_request_arrived() {
    let body = arriving(&[], Then::Stall);
    // The handler had other work first (checking the key, say): that time is not the body's.
    tokio::time::sleep(PATIENCE * 3).await;
    let started = Instant::now();
    let error = read(body, LIMIT, PATIENCE).await.unwrap_err();
    assert_eq!(started.elapsed(), PATIENCE);
    assert!(matches!(error, BodyError::Stalled { .. }), "{error:?}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_keeps_trickling_in_is_read_whole_however_long_it_takes() {
    let gap = PATIENCE - Duration::from_millis(1);
    let pieces = [(gap, "{\"model\""), (gap, ":"), (gap, "\"default\""), (gap, "}")];
    let started = Instant::now();
    let bytes = read(arriving(&pieces, Then::End), LIMIT, PATIENCE).await.unwrap();
    assert_eq!(&bytes[..], b"{\"model\":\"default\"}");
    assert_eq!(started.elapsed(), gap * 4, "four gaps, each under the body timeout");
}

#[tokio::test(start_paused = true)]
async fn a_trickling_body_is_still_held_to_the_size_limit() {
    let piece = "x".repeat(400);
    let piece: &'static str = piece.leak();
    let pieces = [(Duration::from_secs(1), piece); 4];
    let started = Instant::now();
    let error = read(arriving(&pieces, Then::End), LIMIT, PATIENCE).await.unwrap_err();
    assert!(matches!(error, BodyError::TooLarge { limit: LIMIT }), "{error:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(3), "refused at the piece that crosses it");
}

#[tokio::test(start_paused = true)]
async fn a_body_already_in_hand_is_read_without_a_wait() {
    let started = Instant::now();
    let bytes = read(Body::from("{\"model\":\"m\"}"), LIMIT, PATIENCE).await.unwrap();
    assert_eq!(&bytes[..], b"{\"model\":\"m\"}");
    assert_eq!(started.elapsed(), Duration::ZERO);
}

// Through the gateway.

const KEY: &str = "test-client-key";

/// A gateway with one client key and a body timeout of [`PATIENCE`], in front of a simulated
/// provider.
fn gateway() -> Arc<AppState> {
    let yaml = format!(
        "providers: {{ sim: {{ kind: simulated }} }}\nroutes: {{ default: {{ targets: [sim:m] }} }}\ngateway: {{ keys: [{KEY}], body_timeout: 2s }}\n"
    );
    let file = crate::config::parse(&yaml, false, "body.yaml").unwrap();
    let loaded =
        crate::config::build(file, crate::config::Source::File("body.yaml".into()), &|_: &str| None).unwrap();
    AppState::new(loaded.router, loaded.gateway)
}

/// A new connection to `state`'s gateway: the client's end.
fn connect(state: &Arc<AppState>) -> DuplexStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let limits = state.live().gateway.connections;
    tokio::spawn(crate::connection::serve(server, app(state.clone()), limits, state.stop_signal()));
    client
}

/// The head of a POST to `path` announcing a body of `length` bytes, with `headers` (each
/// line ending in CRLF).
fn head(path: &str, headers: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\n{headers}content-type: application/json\r\nanthropic-version: 2023-06-01\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// The client key, as a header line.
fn with_key() -> String {
    format!("authorization: Bearer {KEY}\r\n")
}

/// What the gateway sent until it closed the connection: the head (lowercase) and the body.
/// A gateway that holds the connection fails the test (in a minute of paused time).
async fn read_to_close(client: &mut DuplexStream) -> (String, Value) {
    let mut text = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), client.read_to_end(&mut text));
    read.await.expect("the gateway closed the connection").unwrap();
    let text = String::from_utf8(text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), serde_json::from_str(body).unwrap())
}

/// The samples of `name` in the gateway's metrics.
fn samples(state: &AppState, name: &str) -> Vec<String> {
    let text = state.metrics.render(&[]);
    text.lines().filter(|line| line.starts_with(&format!("{name}{{"))).map(str::to_owned).collect()
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_gets_a_408_at_the_body_timeout_and_the_connection_closes() {
    let state = gateway();
    let mut client = connect(&state);
    client
        .write_all(format!("{}{{", head("/v1/chat/completions", &with_key(), 1000)).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let (head, body) = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), PATIENCE);
    assert!(head.starts_with("http/1.1 408 request timeout\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    assert_eq!(
        body["error"]["message"],
        "the request body stopped arriving: no byte for 2s (gateway.body_timeout)"
    );
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(samples(&state, "switchyard_attempts_total").is_empty(), "no upstream call was made");
    assert_eq!(
        samples(&state, "switchyard_requests_total"),
        [r#"switchyard_requests_total{endpoint="chat_completions",route="(none)",status="408"} 1"#]
    );
}

#[tokio::test(start_paused = true)]
async fn the_anthropic_and_responses_endpoints_answer_a_stalled_body_in_their_dialects() {
    let state = gateway();
    for path in ["/v1/messages", "/v1/responses"] {
        let mut client = connect(&state);
        client.write_all(format!("{}{{", head(path, &with_key(), 1000)).as_bytes()).await.unwrap();
        let started = Instant::now();
        let (head, body) = read_to_close(&mut client).await;
        assert_eq!(started.elapsed(), PATIENCE, "{path}");
        assert!(head.starts_with("http/1.1 408"), "{path}: {head}");
        assert!(head.contains("\r\nconnection: close"), "{path}: {head}");
        let message = "the request body stopped arriving: no byte for 2s (gateway.body_timeout)";
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
            assert_eq!(body["error"]["message"], message, "{body}");
        } else {
            assert_eq!(body["error"]["code"], "request_timeout", "{body}");
            assert_eq!(body["error"]["message"], message, "{body}");
        }
    }
    assert!(samples(&state, "switchyard_attempts_total").is_empty(), "no upstream call was made");
}

#[tokio::test(start_paused = true)]
async fn a_client_without_the_key_is_refused_at_its_head_without_waiting_for_its_body() {
    let state = gateway();
    let mut client = connect(&state);
    client.write_all(format!("{}{{", head("/v1/chat/completions", "", 1000)).as_bytes()).await.unwrap();
    let started = Instant::now();
    let (head, body) = read_to_close(&mut client).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
}

#[tokio::test(start_paused = true)]
async fn a_body_trickled_in_under_the_body_timeout_is_served() {
    let state = gateway();
    let mut client = connect(&state);
    let chat = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    let headers = format!("{}connection: close\r\n", with_key());
    client.write_all(head("/v1/chat/completions", &headers, chat.len()).as_bytes()).await.unwrap();
    let started = Instant::now();
    for piece in chat.as_bytes().chunks(16) {
        tokio::time::sleep(PATIENCE - Duration::from_millis(1)).await;
        client.write_all(piece).await.unwrap();
    }
    let (head, body) = read_to_close(&mut client).await;
    assert!(started.elapsed() > PATIENCE * 2, "the body took longer than the timeout in all");
    assert!(head.starts_with("http/1.1 200"), "{head}\n{body}");
    assert_eq!(body["object"], "chat.completion", "{body}");
    assert_eq!(samples(&state, "switchyard_attempts_total").len(), 1, "the router was called");
}

#[test]
fn values_are_counted_outside_strings_and_escapes_do_not_end_a_string() {
    use super::values_past;
    assert!(!values_past(br#"{"a":[1,2,3]}"#, 5), "an object, an array and two more members");
    assert!(values_past(br#"{"a":[1,2,3]}"#, 3));
    // Braces, brackets and commas inside strings are text; an escaped quote does not end one.
    let text = br#"{"a":"{[,,,]} \" ,,, [[[ \\","b":1}"#;
    assert!(!values_past(text, 2) && values_past(text, 1), "an object and its second member only");
    // A body cut after a backslash is counted to its end, without a panic.
    assert!(!values_past(br#"["\"#, 5));
    assert!(!values_past(b"", 0));
}
