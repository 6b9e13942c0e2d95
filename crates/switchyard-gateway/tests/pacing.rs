//! Pacing end to end, bounded to seconds: a fake upstream that enforces a small fixed-window
//! allowance (429 beyond it) and states it in its rate-limit headers, in OpenAI's form
//! (durations) or Anthropic's (instants, with a `Date`), taking some milliseconds per answer.
//! A fan-out through the gateway meets zero upstream 429s when paced (by a matching configured
//! limit, or by the headers alone), and provokes them when not.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};

/// How the upstream states its allowance.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    OpenAi,
    Anthropic,
}

/// The upstream's allowance: `allowance` requests per `window`.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    window: Duration,
    allowance: u32,
    form: Form,
}

#[derive(Default)]
struct Counts {
    window_start: Option<Instant>,
    used: u32,
    ok: u32,
    limited: u32,
}

impl Counts {
    /// Counts one request against the window; returns whether it is allowed, what remains
    /// and how long until the window resets.
    fn admit(&mut self, rule: Allowance) -> (bool, u32, Duration) {
        let now = Instant::now();
        let start = *self.window_start.get_or_insert(now);
        let start = if now.duration_since(start) >= rule.window {
            self.used = 0;
            self.window_start = Some(now);
            now
        } else {
            start
        };
        let reset = rule.window.saturating_sub(now.duration_since(start));
        if self.used < rule.allowance {
            self.used += 1;
            self.ok += 1;
            (true, rule.allowance - self.used, reset)
        } else {
            self.limited += 1;
            (false, 0, reset)
        }
    }
}

/// RFC 3339 with milliseconds, UTC, for a `SystemTime`.
fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap();
    let (secs, millis) = (since.as_secs() as i64, since.subsec_millis());
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = switchyard::time::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The rate-limit headers of one answer, in the upstream's form.
fn stated(rule: Allowance, remaining: u32, reset: Duration) -> HeaderMap {
    let mut headers = HeaderMap::new();
    match rule.form {
        Form::OpenAi => {
            headers.insert("x-ratelimit-limit-requests", HeaderValue::from(rule.allowance));
            headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(remaining));
            let reset = format!("{}ms", reset.as_millis().max(1));
            headers.insert("x-ratelimit-reset-requests", HeaderValue::from_str(&reset).unwrap());
        }
        Form::Anthropic => {
            let now = SystemTime::now();
            headers.insert("anthropic-ratelimit-requests-limit", HeaderValue::from(rule.allowance));
            headers.insert("anthropic-ratelimit-requests-remaining", HeaderValue::from(remaining));
            let at = rfc3339(now + reset);
            headers.insert("anthropic-ratelimit-requests-reset", HeaderValue::from_str(&at).unwrap());
        }
    }
    headers
}

fn answer(form: Form, model: &Value) -> Value {
    match form {
        Form::OpenAi => json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        }),
        Form::Anthropic => json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}
        }),
    }
}

fn too_many(form: Form) -> Value {
    match form {
        Form::OpenAi => {
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        }
        Form::Anthropic => {
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate limit"}})
        }
    }
}

/// A fixed-window allowance, like a provider's, answering after `latency`.
async fn strict_upstream(rule: Allowance, latency: Duration) -> (SocketAddr, Arc<Mutex<Counts>>) {
    let counts = Arc::new(Mutex::new(Counts::default()));
    let shared = counts.clone();
    let handler = move |Json(body): Json<Value>| {
        let counts = shared.clone();
        async move {
            let (allowed, remaining, reset) = counts.lock().unwrap().admit(rule);
            tokio::time::sleep(latency).await;
            let mut headers = stated(rule, remaining, reset);
            let response: Response = if allowed {
                (headers, Json(answer(rule.form, &body["model"]))).into_response()
            } else {
                headers.insert("retry-after", HeaderValue::from(reset.as_secs().max(1)));
                (StatusCode::TOO_MANY_REQUESTS, headers, Json(too_many(rule.form))).into_response()
            };
            response
        }
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(handler.clone()))
        .route("/v1/messages", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, counts)
}

/// A gateway in front of `upstream` with the provider's `limits`; returns its address.
async fn gateway(upstream: SocketAddr, form: Form, limits: &str) -> SocketAddr {
    let provider = match form {
        Form::OpenAi => format!(
            r#"{{ kind: openai, base_url: "http://{upstream}/v1", api_key: sk-test-pacing {limits} }}"#
        ),
        Form::Anthropic => {
            format!(
                r#"{{ kind: anthropic, base_url: "http://{upstream}", api_key: sk-ant-test-pacing {limits} }}"#
            )
        }
    };
    let yaml = format!(
        "providers:\n  up: {provider}\nroutes:\n  default: {{ targets: [up:model-test], retry: {{ max_attempts: 1 }}, health_gate: false }}\n"
    );
    let file = config::parse(&yaml, false, "pacing.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("pacing.yaml".into()), &|_| None).unwrap();
    let state = AppState::new(loaded.router, loaded.gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
    gateway
}

/// `n` requests at once through the gateway; their statuses.
async fn send(gateway: SocketAddr, n: usize) -> Vec<u16> {
    let client = reqwest::Client::new();
    let requests = (0..n).map(|_| {
        let client = client.clone();
        async move {
            let body = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
            let response = client
                .post(format!("http://{gateway}/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        }
    });
    futures_util::future::join_all(requests).await
}

/// One request to learn the allowance, then a fan-out of `n`: upstream (ok, 429) counts and the
/// client's statuses.
async fn fan_out(rule: Allowance, latency: Duration, limits: &str, n: usize) -> (u32, u32, Vec<u16>) {
    let (ok, limited, statuses, _) = fan_out_at(rule, latency, limits, n).await;
    (ok, limited, statuses)
}

/// [`fan_out`], and the gateway's address.
async fn fan_out_at(
    rule: Allowance,
    latency: Duration,
    limits: &str,
    n: usize,
) -> (u32, u32, Vec<u16>, SocketAddr) {
    let (upstream, counts) = strict_upstream(rule, latency).await;
    let gateway = gateway(upstream, rule.form, limits).await;
    assert_eq!(send(gateway, 1).await, [200], "the first request learns the allowance");
    let statuses = send(gateway, n).await;
    let counts = counts.lock().unwrap();
    (counts.ok, counts.limited, statuses, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_fan_out_meets_zero_upstream_429s_and_an_unpaced_one_provokes_them() {
    let rule = Allowance { window: Duration::from_secs(2), allowance: 20, form: Form::OpenAi };
    let paced = ", limits: { requests_per_minute: 600, respect_headers: true }";
    let (ok, limited, statuses) = fan_out(rule, Duration::ZERO, paced, 59).await;
    assert_eq!(limited, 0, "no avoidable 429 reached the upstream");
    assert_eq!(ok, 60);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    let (ok, limited, statuses) = fan_out(rule, Duration::ZERO, "", 59).await;
    assert_eq!(ok, 20, "without pacing the first window's allowance is all that gets through");
    assert!(limited > 0, "and the rest hit the wall of 429s");
    assert!(statuses.contains(&429));
}

/// 5 requests per 300 ms, answers taking 20 ms; a fan-out of ten times the allowance.
const STATED: Allowance = Allowance { window: Duration::from_millis(300), allowance: 5, form: Form::OpenAi };

async fn headers_alone_pace_a_fan_out(form: Form) {
    let rule = Allowance { form, ..STATED };
    let latency = Duration::from_millis(20);
    let n = 10 * rule.allowance as usize;
    let (ok, limited, statuses, gateway) =
        fan_out_at(rule, latency, ", limits: { respect_headers: true }", n).await;
    assert_eq!(limited, 0, "{form:?}: the stated allowance alone kept every request within it");
    assert_eq!(ok as usize, n + 1);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // What the lane learned is visible to operators.
    let health: Value =
        reqwest::get(format!("http://{gateway}/admin/health")).await.unwrap().json().await.unwrap();
    let lane = &health["pacing"][0];
    assert_eq!(lane["headers"]["requests"]["limit"], 5, "{lane}");
    assert!(lane["headers"]["requests"]["remaining"].as_u64().is_some_and(|r| r <= 5), "{lane}");
    assert_eq!(lane["in_flight"], 0, "{lane}");

    // The control: the same fan-out with the headers ignored meets the wall.
    let (_, limited, statuses) = fan_out(rule, latency, ", limits: { respect_headers: false }", n).await;
    assert!(limited > 0, "{form:?}: unpaced, the fan-out meets 429s");
    assert!(statuses.contains(&429));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_rate_limit_headers_alone_pace_a_fan_out_to_zero_upstream_429s() {
    headers_alone_pace_a_fan_out(Form::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_rate_limit_headers_alone_pace_a_fan_out_to_zero_upstream_429s() {
    headers_alone_pace_a_fan_out(Form::Anthropic).await;
}
