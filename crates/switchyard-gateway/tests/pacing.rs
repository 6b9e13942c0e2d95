//! Pacing end to end, bounded to seconds: a fake upstream that enforces a small allowance
//! (20 requests per 2-second window, 429 beyond it, with OpenAI's rate-limit headers). A fan-out
//! of 60 concurrent requests through the gateway meets zero upstream 429s with a matching limit
//! on the provider, and provokes them with pacing off.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};

const WINDOW: Duration = Duration::from_secs(2);
const ALLOWANCE: u32 = 20;
const FAN_OUT: usize = 60;

#[derive(Default)]
struct Counts {
    window_start: Option<Instant>,
    used: u32,
    ok: u32,
    limited: u32,
}

/// A fixed-window allowance, like a provider's.
async fn strict_upstream() -> (SocketAddr, Arc<Mutex<Counts>>) {
    let counts = Arc::new(Mutex::new(Counts::default()));
    let shared = counts.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let counts = shared.clone();
            async move {
                let (allowed, remaining, reset) = {
                    let mut c = counts.lock().unwrap();
                    let now = Instant::now();
                    let start = *c.window_start.get_or_insert(now);
                    let start = if now.duration_since(start) >= WINDOW {
                        c.used = 0;
                        c.window_start = Some(now);
                        now
                    } else {
                        start
                    };
                    let reset = WINDOW.saturating_sub(now.duration_since(start));
                    if c.used < ALLOWANCE {
                        c.used += 1;
                        c.ok += 1;
                        (true, ALLOWANCE - c.used, reset)
                    } else {
                        c.limited += 1;
                        (false, 0, reset)
                    }
                };
                let mut headers = HeaderMap::new();
                headers.insert("x-ratelimit-limit-requests", HeaderValue::from(ALLOWANCE));
                headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(remaining));
                let reset_text = format!("{}ms", reset.as_millis().max(1));
                headers.insert("x-ratelimit-reset-requests", HeaderValue::from_str(&reset_text).unwrap());
                let response: Response = if allowed {
                    let answer = json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                    });
                    (headers, Json(answer)).into_response()
                } else {
                    headers.insert("retry-after", HeaderValue::from(reset.as_secs().max(1)));
                    let error = json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
                    (StatusCode::TOO_MANY_REQUESTS, headers, Json(error)).into_response()
                };
                response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, counts)
}

async fn fan_out(limits: &str) -> (u32, u32, Vec<u16>) {
    let (upstream, counts) = strict_upstream().await;
    let yaml = format!(
        r#"
providers:
  openai: {{ kind: openai, base_url: "http://{upstream}/v1", api_key: sk-test-pacing {limits} }}
routes:
  default: {{ targets: [openai:gpt-test], retry: {{ max_attempts: 1 }}, health_gate: false }}
"#
    );
    let file = config::parse(&yaml, false, "pacing.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("pacing.yaml".into()), &|_| None).unwrap();
    let state = AppState::new(loaded.router, loaded.gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });

    let client = reqwest::Client::new();
    let requests = (0..FAN_OUT).map(|_| {
        let client = client.clone();
        async move {
            let body = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
            client
                .post(format!("http://{gateway}/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(requests).await;
    let counts = counts.lock().unwrap();
    (counts.ok, counts.limited, statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_fan_out_meets_zero_upstream_429s_and_an_unpaced_one_provokes_them() {
    let (ok, limited, statuses) =
        fan_out(", limits: { requests_per_minute: 600, respect_headers: true }").await;
    assert_eq!(limited, 0, "no avoidable 429 reached the upstream");
    assert_eq!(ok as usize, FAN_OUT);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    let (ok, limited, statuses) = fan_out("").await;
    assert_eq!(ok, ALLOWANCE, "without pacing the first window's allowance is all that gets through");
    assert!(limited > 0, "and the rest hit the wall of 429s");
    assert!(statuses.contains(&429));
}
