//! Client keys with their own limits and budgets (`gateway.keys`), on a gateway served in
//! process over loopback in front of an upstream that counts its calls: a key over its rate,
//! its requests in flight, its tokens or its budget is refused before any provider is called,
//! while another key is served; a model outside a key's `routes` is refused by name; the
//! key's name (never the key) is what the logs, metrics and `/admin/keys` say. Minute refills
//! run on tokio's paused clock.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

/// The upstream: counts its calls, answers 10 prompt and 10 completion tokens, and holds each
/// answer until `release` has a permit (many by default).
#[derive(Clone)]
struct Upstream {
    calls: Arc<AtomicUsize>,
    arrived: Arc<Notify>,
    release: Arc<Semaphore>,
}

async fn answer(State(up): State<Upstream>, Json(body): Json<Value>) -> Json<Value> {
    up.calls.fetch_add(1, Ordering::SeqCst);
    up.arrived.notify_one();
    up.release.acquire().await.unwrap().forget();
    Json(json!({
        "id": "chatcmpl-keys", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20 }
    }))
}

async fn upstream(permits: usize) -> (SocketAddr, Upstream) {
    let up = Upstream {
        calls: Arc::new(AtomicUsize::new(0)),
        arrived: Arc::new(Notify::new()),
        release: Arc::new(Semaphore::new(permits)),
    };
    let app = axum::Router::new().route("/v1/chat/completions", post(answer)).with_state(up.clone());
    let addr = support::serve_router(app).await;
    (addr, up)
}

const BARE: &str = "gw-bare-key-0000000001";
const TEAM: &str = "gw-team-key-secret-0002";

/// A gateway whose second key, `team`, has `rules`; the first is bare. A dollar per prompt
/// token: each answer costs $10.
fn config(up: SocketAddr, rules: &str) -> String {
    format!(
        "providers:
  up: {{ kind: openai, base_url: 'http://{up}/v1', api_key: sk-upstream-0001, prices: {{ m: {{ input: 1000000, output: 0 }} }} }}
routes:
  default: {{ targets: [up:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
  other: {{ targets: [up:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
  claude-*: {{ targets: [up:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
gateway:
  admin_key: gw-admin-key-0003
  keys:
    - {BARE}
    - {{ name: team, key: {TEAM}, {rules} }}
"
    )
}

struct Reply {
    status: u16,
    retry_after: Option<u64>,
    /// `x-should-retry`, which the OpenAI SDKs read.
    should_retry: Option<String>,
    body: Value,
}

/// Posts `body` to the gateway's chat completions with `key`.
async fn post_chat(gateway: SocketAddr, key: &str, body: &Value) -> reqwest::Response {
    let url = format!("http://{gateway}/v1/chat/completions");
    reqwest::Client::new().post(url).bearer_auth(key).json(body).send().await.unwrap()
}

async fn chat(gateway: SocketAddr, key: &str, model: &str) -> Reply {
    let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
    let response = post_chat(gateway, key, &body).await;
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().parse().unwrap());
    let should_retry = response.headers().get("x-should-retry").map(|v| v.to_str().unwrap().to_owned());
    Reply { status, retry_after, should_retry, body: response.json().await.unwrap_or_default() }
}

/// `POST /admin/config/reload` with the admin key: its status.
async fn reload(gateway: SocketAddr) -> u16 {
    let url = format!("http://{gateway}/admin/config/reload");
    let response = reqwest::Client::new().post(url).bearer_auth("gw-admin-key-0003").send().await.unwrap();
    response.status().as_u16()
}

async fn admin(gateway: SocketAddr, path: &str) -> String {
    let response = reqwest::Client::new()
        .get(format!("http://{gateway}{path}"))
        .bearer_auth("gw-admin-key-0003")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.text().await.unwrap()
}

/// GETs `path` with `key` as the bearer token: the status and the JSON answer.
async fn get_as(gateway: SocketAddr, key: &str, path: &str) -> (u16, Value) {
    let response =
        reqwest::Client::new().get(format!("http://{gateway}{path}")).bearer_auth(key).send().await.unwrap();
    (response.status().as_u16(), response.json::<Value>().await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_key_over_its_rate_is_refused_with_retry_after_and_no_upstream_call_while_another_is_served() {
    let (up, upstream) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "limits: { requests_per_minute: 2 }")).await;
    for _ in 0..2 {
        assert_eq!(chat(gateway, TEAM, "default").await.status, 200, "a minute's worth at once");
    }
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.body["error"]["code"], "key_rate_limited", "{}", refused.body);
    assert_eq!(
        refused.body["error"]["message"],
        "the key `team` is over its requests_per_minute of 2: retry after 30s",
        "the limit is named, as configured"
    );
    assert_eq!(refused.retry_after, Some(30), "one request every 30 s refills");
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 2, "no provider was called for the refusal");
    assert_eq!(chat(gateway, BARE, "default").await.status, 200, "another key is served meanwhile");
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200, "refilled after its Retry-After");
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn a_key_with_rules_needs_no_name_and_is_called_by_its_hash() {
    let (up, _) = upstream(1000).await;
    let unnamed = config(up, "").replace(
        &format!("name: team, key: {TEAM}, "),
        &format!("key: {TEAM}, limits: {{ requests_per_minute: 1 }}"),
    );
    let gateway = support::in_process(&unnamed).await;
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    assert_eq!(chat(gateway, TEAM, "default").await.status, 429, "its rules hold");
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let label = keys["keys"][1]["name"].as_str().unwrap().to_owned();
    assert!(label.starts_with("key-") && keys["keys"][1]["named"] == false, "{keys}");
}

#[tokio::test]
async fn a_key_at_its_requests_in_flight_is_refused_at_once_until_one_ends() {
    let (up, upstream) = upstream(0).await;
    let gateway = support::in_process(&config(up, "limits: { max_concurrent: 1 }")).await;
    let first = tokio::spawn(async move { chat(gateway, TEAM, "default").await.status });
    upstream.arrived.notified().await;
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!((refused.status, refused.body["error"]["code"].as_str()), (429, Some("key_rate_limited")));
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_concurrent of 1 requests in flight"), "{message}");
    assert!(refused.retry_after.is_some());
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 1);
    upstream.release.add_permits(1000);
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200, "its place is free again");
}

#[tokio::test(start_paused = true)]
async fn tokens_beyond_a_keys_minute_hold_it_until_they_are_paid_back() {
    let (up, upstream) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "limits: { tokens_per_minute: 15 }")).await;
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200, "admitted with tokens left");
    // 20 tokens used of 15: 5 in debt, and 1 more wanted, at 0.25 a second.
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!((refused.status, refused.body["error"]["code"].as_str()), (429, Some("key_rate_limited")));
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("over its tokens_per_minute of 15"), "{message}");
    assert_eq!(refused.retry_after, Some(24));
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(24)).await;
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
}

#[tokio::test]
async fn a_pattern_routes_dated_models_are_charged_at_their_models_price() {
    // `claude-*` passes the asked model on (`up:{model}`): a dated id costs what its model's
    // price says, and a `name*` price covers the rest. They used to cost nothing.
    let (up, _) = upstream(1000).await;
    let yaml = config(up, "budget: { usd: 1000, per: day }")
        .replace("claude-*: {{ targets: [up:m]", "claude-*: {{ targets: ['up:{{model}}']")
        .replace("claude-*: { targets: [up:m]", "claude-*: { targets: ['up:{model}']")
        .replace(
            "prices: { m: { input: 1000000, output: 0 } }",
            "prices: { m: { input: 1000000, output: 0 }, claude-sonnet-4-5: { input: 1000000, output: 0 }, 'claude-haiku*': { input: 100000, output: 0 } }",
        );
    let gateway = support::in_process(&yaml).await;
    assert_eq!(chat(gateway, TEAM, "claude-sonnet-4-5-20250929").await.status, 200);
    assert_eq!(chat(gateway, TEAM, "claude-haiku-4-5").await.status, 200);
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    assert_eq!(keys["keys"][1]["budget"]["spent_usd"], 11.0, "$10, then $1: {keys}");
}

#[tokio::test]
async fn token_counts_spend_none_of_a_keys_requests_but_keep_to_its_models() {
    let (up, upstream) = upstream(1000).await;
    let gateway =
        support::in_process(&config(up, "routes: [default], limits: { requests_per_minute: 2 }")).await;
    let count = |model: &'static str| async move {
        let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
        reqwest::Client::new()
            .post(format!("http://{gateway}/v1/messages/count_tokens"))
            .header("x-api-key", TEAM)
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    for _ in 0..5 {
        assert_eq!(count("default").await, 200, "a count is no request of the key's minute");
    }
    assert_eq!(count("other").await, 403, "and keeps to the key's models");
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    assert_eq!(chat(gateway, TEAM, "default").await.status, 429, "the two requests of its minute");
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 2, "the counts were the gateway's estimate");
}

#[tokio::test]
async fn a_key_that_spent_its_budget_is_refused_until_the_period_resets() {
    let (up, upstream) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "budget: { usd: 25, per: day }")).await;
    // $10 an answer: the third is admitted with $5 left, and completes.
    for _ in 0..3 {
        assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    }
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.body["error"]["code"], "budget_exceeded");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let midnight = (now / 86_400 + 1) * 86_400;
    let reset = switchyard_gateway::logging::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(midnight));
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&reset) && message.contains("$30.00 of its $25"), "{message}");
    // Said as a spent quota, which a client stops at: no Retry-After to sleep on for hours.
    assert!(refused.retry_after.is_none(), "{:?}", refused.retry_after);
    // Counted under the route it asked for, but its instant answer is no time of the route's.
    let metrics = admin(gateway, "/metrics").await;
    assert!(
        metrics.contains(
            "switchyard_requests_total{endpoint=\"chat_completions\",route=\"default\",status=\"429\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_request_duration_seconds_count{route=\"default\"} 3\n"),
        "{metrics}"
    );
    assert_eq!(refused.body["error"]["type"], "insufficient_quota");
    assert_eq!(refused.should_retry.as_deref(), Some("false"));
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 3);
    assert_eq!(chat(gateway, BARE, "default").await.status, 200, "a key without a budget goes on");
    // What each key spent, a budget or none, is in the metrics.
    let metrics = admin(gateway, "/metrics").await;
    assert!(metrics.contains("switchyard_key_cost_total{key=\"team\"} 30"), "{metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("switchyard_key_cost_total{key=\"key-") && l.ends_with(" 10")),
        "{metrics}"
    );
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let team = &keys["keys"][1];
    assert_eq!(team["name"], "team");
    assert_eq!(team["budget"]["spent_usd"], 30.0);
    assert_eq!(team["budget"]["remaining_usd"], 0.0);
    assert_eq!(team["budget"]["resets_at"], reset.as_str());
    assert_eq!(team["usage"]["requests_this_minute"], 3);
    assert_eq!(team["usage"]["tokens_this_minute"], 60);
    // The refusal is in the history, under the key, with no attempt: what its owner asks about.
    let refused: Value = serde_json::from_str(&admin(gateway, "/admin/requests?status=429").await).unwrap();
    let line = &refused["requests"][0];
    assert_eq!(
        (&line["status"], &line["key"], &line["attempts"], &line["route"]),
        (&json!(429), &json!("team"), &json!(0), &json!("default")),
        "under the route it asked for: {refused}"
    );
}

#[tokio::test]
async fn a_model_outside_a_keys_routes_is_refused_naming_what_it_may_use() {
    let (up, upstream) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "routes: [default, \"claude-*\"]")).await;
    let refused = chat(gateway, TEAM, "other").await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["error"]["code"], "model_not_allowed");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("default, claude-*"), "{message}");
    assert_eq!(chat(gateway, TEAM, "up:m").await.status, 403, "a target is not the default route");
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 0);
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    assert_eq!(chat(gateway, TEAM, "claude-sonnet-4-5-20250929").await.status, 200, "the pattern");
    assert_eq!(chat(gateway, BARE, "other").await.status, 200, "a key without routes uses any");
    // A long name is said back cut.
    let refused = chat(gateway, TEAM, &"m".repeat(1_000)).await;
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("`{}…`", "m".repeat(200))) && message.len() < 500, "{message}");
}

#[tokio::test]
async fn the_keys_name_is_in_the_logs_metrics_and_history_and_the_key_is_nowhere() {
    let (up, _) = upstream(1000).await;
    let rules = "limits: { requests_per_minute: 100 }, budget: { usd: 50, per: month }";
    let (gateway, log) = support::in_process_logged(&config(up, rules)).await;
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    assert_eq!(chat(gateway, BARE, "default").await.status, 200);
    let metrics = admin(gateway, "/metrics").await;
    assert!(metrics.contains("switchyard_key_requests_total{key=\"team\"} 1"), "{metrics}");
    assert!(metrics.contains("switchyard_key_spend_usd{key=\"team\"} 10"), "{metrics}");
    assert!(metrics.contains("switchyard_key_budget_usd{key=\"team\"} 50"), "{metrics}");
    let bare_label =
        metrics.lines().find(|l| l.starts_with("switchyard_key_requests_total{key=\"key-")).unwrap();
    let requests = admin(gateway, "/admin/requests").await;
    assert!(requests.contains("\"key\":\"team\""), "{requests}");
    let keys = admin(gateway, "/admin/keys").await;
    let log = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    assert!(log.contains("key=\"team\""), "{log}");
    for (what, text) in [("metrics", &metrics), ("history", &requests), ("/admin/keys", &keys), ("log", &log)]
    {
        for secret in [TEAM, BARE, "secret"] {
            assert!(!text.contains(secret), "{what} holds a key: {text}");
        }
    }
    assert!(keys.contains("\"name\":\"team\"") && bare_label.contains("key-"), "{keys}");
}

/// The real binary's configuration: `team` at `rpm` a minute, and `extra` routes.
fn served_config(rpm: u32, extra: &str) -> String {
    format!(
        "providers:
  up: {{ kind: simulated, reply: ok }}
routes:
  default: {{ targets: [up:m] }}
{extra}
gateway:
  admin_key: gw-admin-key-0003
  keys:
    - {{ name: team, key: {TEAM}, limits: {{ requests_per_minute: {rpm} }} }}
"
    )
}

#[tokio::test]
async fn a_reload_keeps_an_unchanged_keys_counters_and_restarts_them_under_new_limits() {
    let path = support::write_config("keys-reload.yaml", &served_config(2, ""));
    let (server, addr) = support::serve(&path, &["--no-watch"]);
    let gateway: SocketAddr = addr.parse().unwrap();
    for _ in 0..2 {
        assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    }
    assert_eq!(chat(gateway, TEAM, "default").await.status, 429);
    std::fs::write(&path, served_config(2, "  extra: { targets: [up:m] }")).unwrap();
    assert_eq!(reload(gateway).await, 200);
    assert_eq!(chat(gateway, TEAM, "extra").await.status, 429, "the key kept its spent minute");
    std::fs::write(&path, served_config(100, "  extra: { targets: [up:m] }")).unwrap();
    assert_eq!(reload(gateway).await, 200);
    assert_eq!(chat(gateway, TEAM, "extra").await.status, 200, "new limits, new buckets");
    let logs = support::stop(server);
    assert!(!logs.contains(TEAM), "{logs}");
}

#[test]
fn doctor_lists_each_named_key_with_its_rules_and_never_the_key() {
    let config = format!(
        "providers:
  up: {{ kind: simulated }}
routes:
  default: {{ targets: [up:m] }}
gateway:
  keys:
    - {BARE}
    - {{ name: search-team, key: {TEAM}, routes: [default], limits: {{ requests_per_minute: 600 }}, budget: {{ usd: 50, per: day }} }}
"
    );
    let path = support::write_config("keys-doctor.yaml", &config);
    let (code, stdout, stderr) = support::run(&["doctor", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("gateway: 2 client keys"), "{stdout}");
    assert!(
        stdout.contains("key search-team: may use default, requests_per_minute 600, budget $50 per day"),
        "{stdout}"
    );
    assert!(!stdout.contains(TEAM) && !stdout.contains(BARE), "{stdout}");
}

#[tokio::test]
async fn switchyard_keys_prints_each_keys_minute_against_its_limits() {
    let path = support::write_config("keys-cli.yaml", &served_config(5, ""));
    let (server, addr) = support::serve(&path, &["--no-watch"]);
    let gateway: SocketAddr = addr.parse().unwrap();
    assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    let url = format!("http://{addr}");
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        support::run(&["keys", "--url", &url, "--key", "gw-admin-key-0003"])
    })
    .await
    .unwrap();
    support::stop(server);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.lines().find(|l| l.starts_with("team ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains(" 1/5 "), "one request of its 5 this minute: {line}");
    assert!(!stdout.contains(TEAM), "{stdout}");
}

#[tokio::test]
async fn only_the_answer_is_billed_never_a_failed_attempt_or_a_failed_request() {
    let (up, _) = upstream(1000).await;
    let yaml = format!(
        "providers:
  up: {{ kind: openai, base_url: 'http://{up}/v1', api_key: sk-upstream-0001, prices: {{ m: {{ input: 1000000, output: 0 }} }} }}
  down: {{ kind: openai, base_url: 'http://127.0.0.1:9/v1', api_key: sk-upstream-0002, prices: {{ m: {{ input: 1000000, output: 0 }} }} }}
routes:
  default: {{ targets: [down:m, up:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
  broken: {{ targets: [down:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
gateway:
  admin_key: gw-admin-key-0003
  keys:
    - {{ name: team, key: {TEAM}, budget: {{ usd: 100, per: day }} }}
"
    );
    let gateway = support::in_process(&yaml).await;
    let served = chat(gateway, TEAM, "default").await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(chat(gateway, TEAM, "broken").await.status, 502);
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let budget = &keys["keys"][0]["budget"];
    assert_eq!(budget["spent_usd"], 10.0, "the one answer, not its failed attempt nor the 502: {budget}");
    assert_eq!(keys["keys"][0]["usage"]["requests_this_minute"], 2);
}

#[tokio::test]
async fn a_streamed_answer_is_charged_when_its_stream_ends() {
    let (up, _) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "budget: { usd: 100, per: day }")).await;
    let body =
        json!({ "model": "default", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
    let response = post_chat(gateway, TEAM, &body).await;
    assert_eq!(response.status(), 200);
    let events = response.text().await.unwrap();
    assert!(events.contains("[DONE]"), "{events}");
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let team = &keys["keys"][1];
    assert_eq!(team["budget"]["spent_usd"], 10.0, "{team}");
    assert_eq!(team["usage"]["tokens_this_minute"], 20);
    assert_eq!(team["usage"]["in_flight"], 0, "its place is given back as the stream ends");
}

/// An upstream that streams 16 characters of answer (`finish`ed there, or not), then, once
/// `left` is notified, empty chunks until the gateway lets go of it: the usage never comes.
async fn streaming_upstream(left: Arc<Notify>, finish: bool) -> SocketAddr {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let left = left.clone();
            async move {
                let (sender, chunks) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(1);
                tokio::spawn(async move {
                    let chunk = |delta: &str| {
                        format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n")
                    };
                    let delta = r#"{"role":"assistant","content":"abcdefghijklmnop"}"#;
                    let first = match finish {
                        true => chunk(&format!(r#"{delta},"finish_reason":"stop""#)),
                        false => chunk(delta),
                    };
                    let _ = sender.send(Ok(first)).await;
                    left.notified().await;
                    while sender.send(Ok(chunk("{}"))).await.is_ok() {}
                });
                let body = axum::body::Body::from_stream(tokio_stream_of(chunks));
                ([(axum::http::header::CONTENT_TYPE, "text/event-stream")], body)
            }
        }),
    );
    support::serve_router(app).await
}

/// The receiver's items as a stream.
fn tokio_stream_of<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[tokio::test]
async fn a_stream_its_client_leaves_before_the_usage_is_charged_what_it_delivered_estimated() {
    // Else a client could spend no budget at all by leaving each stream before its last chunk,
    // even once it read the answer's finish (OpenAI's usage comes in a chunk after it).
    for finish in [false, true] {
        charged_an_estimate(finish).await;
    }
}

async fn charged_an_estimate(finish: bool) {
    let left = Arc::new(Notify::new());
    let up = streaming_upstream(left.clone(), finish).await;
    let priced = "prices: { m: { input: 1000000, output: 1000000 } }";
    let yaml = config(up, "budget: { usd: 100, per: day }")
        .replace("prices: { m: { input: 1000000, output: 0 } }", priced);
    let gateway = support::in_process(&yaml).await;
    // Twelve characters of prompt: 3 tokens; sixteen of answer: 4.
    let body = json!({ "model": "default", "stream": true, "messages": [{ "role": "user", "content": "hello world!" }] });
    let mut response = post_chat(gateway, TEAM, &body).await;
    let mut said = String::new();
    while !said.contains("abcdefghijklmnop") {
        said.push_str(&String::from_utf8_lossy(&response.chunk().await.unwrap().unwrap()));
    }
    drop(response);
    left.notify_one();
    let team = support::until("the stream ends", Duration::from_secs(5), async || {
        let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
        let team = keys["keys"][1].clone();
        if team["usage"]["in_flight"] == 0 { Ok(team) } else { Err(team.to_string()) }
    })
    .await;
    assert_eq!(team["budget"]["spent_usd"], 7.0, "{team}");
    assert_eq!(team["usage"]["tokens_this_minute"], 7, "{team}");
}

#[tokio::test]
async fn a_request_its_client_leaves_before_the_answer_is_charged_its_prompt() {
    // The provider was sent the prompt and bills it whether or not anyone reads the answer:
    // else a client that gives up on each slow answer would spend no budget.
    let (up, upstream) = upstream(0).await;
    let gateway = support::in_process(&config(up, "budget: { usd: 100, per: day }")).await;
    // Twelve characters of prompt: 3 tokens, at a dollar each.
    let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hello world!" }] });
    let arrived = upstream.arrived.notified();
    let left = tokio::spawn(async move { post_chat(gateway, TEAM, &body).await });
    arrived.await;
    left.abort();
    support::until("the request is logged", Duration::from_secs(5), async || {
        let listed: Value = serde_json::from_str(&admin(gateway, "/admin/requests?limit=1").await).unwrap();
        if listed["requests"][0]["status"] == 499 { Ok(()) } else { Err(listed.to_string()) }
    })
    .await;
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let team = &keys["keys"][1];
    assert_eq!(team["budget"]["spent_usd"], 3.0, "{team}");
    assert_eq!(team["usage"]["tokens_this_minute"], 3, "{team}");
    assert_eq!(team["usage"]["in_flight"], 0, "{team}");
    // The target's token and cost metrics count it too.
    let metrics = admin(gateway, "/metrics").await;
    let counted = [
        "switchyard_tokens_total{target=\"up:m\",type=\"prompt\"} 3\n",
        "switchyard_cost_total{target=\"up:m\"} 3\n",
    ];
    for line in counted {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
}

#[tokio::test]
async fn without_an_admin_key_a_client_key_reads_its_own_trails_and_never_another_keys() {
    let (up, _) = upstream(1000).await;
    let yaml =
        config(up, "limits: { requests_per_minute: 100 }").replace("  admin_key: gw-admin-key-0003\n", "");
    let gateway = support::in_process(&yaml).await;
    let (team, bare) = (chat(gateway, TEAM, "default").await, chat(gateway, BARE, "default").await);
    assert_eq!((team.status, bare.status), (200, 200));
    let listed = |list: &Value| -> Vec<String> {
        list["requests"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap().to_owned()).collect()
    };
    let (status, mine) = get_as(gateway, TEAM, "/admin/requests").await;
    assert_eq!((status, listed(&mine)), (200, vec!["team".to_owned()]), "only its own requests");
    let (_, theirs) = get_as(gateway, BARE, "/admin/requests").await;
    assert!(!listed(&theirs).contains(&"team".to_owned()), "{theirs}");
    let team_request = mine["requests"][0]["request_id"].as_str().unwrap().to_owned();
    let trail = format!("/admin/requests/{team_request}");
    assert_eq!(get_as(gateway, TEAM, &trail).await.0, 200);
    let (status, refused) = get_as(gateway, BARE, &trail).await;
    assert_eq!(status, 404, "another key's trail is not found: {refused}");

    // Two keys naming their requests alike (their own `x-request-id`) each find their own.
    for key in [TEAM, BARE] {
        let named = reqwest::Client::new()
            .post(format!("http://{gateway}/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-request-id", "nightly-job-7")
            .json(&json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(named.status(), 200);
    }
    let (status, found) = get_as(gateway, TEAM, "/admin/requests/nightly-job-7").await;
    assert_eq!((status, found["key"].as_str()), (200, Some("team")), "{found}");
    let (status, found) = get_as(gateway, BARE, "/admin/requests/nightly-job-7").await;
    assert_eq!(status, 200, "{found}");
    let own = found["key"].as_str().unwrap_or_default();
    assert!(own.starts_with("key-"), "its own, labelled by its hash: {found}");
}

/// `/admin/events` read with `key`, once its stream is open.
async fn events_as(gateway: SocketAddr, key: &str) -> reqwest::Response {
    let url = format!("http://{gateway}/admin/events");
    let mut response = reqwest::Client::new().get(url).bearer_auth(key).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.chunk().await.unwrap().expect("the stream opens at once");
    response
}

/// What `events` says up to its `n`th `request_finished`.
async fn events_until(events: &mut reqwest::Response, n: usize) -> String {
    let mut said = String::new();
    while said.matches("event: request_finished").count() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(5), events.chunk()).await;
        let chunk = chunk.unwrap_or_else(|_| panic!("no {n} request_finished within 5 s: {said}"));
        said.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("the stream stays open")));
    }
    said
}

#[tokio::test]
async fn without_an_admin_key_a_client_keys_event_stream_tells_only_of_its_own_requests() {
    let (up, _) = upstream(1000).await;
    let yaml =
        config(up, "limits: { requests_per_minute: 100 }").replace("  admin_key: gw-admin-key-0003\n", "");
    let gateway = support::in_process(&yaml).await;
    let (mut team_events, mut bare_events) = (events_as(gateway, TEAM).await, events_as(gateway, BARE).await);
    let bare = chat(gateway, BARE, "default").await;
    let team = chat(gateway, TEAM, "default").await;
    let later = chat(gateway, BARE, "default").await;
    assert_eq!((bare.status, team.status, later.status), (200, 200, 200));

    // Each stream's first requests are its key's own, though another key's came between.
    let seen = events_until(&mut team_events, 1).await;
    assert!(seen.contains("\"key\":\"team\""), "{seen}");
    let seen = events_until(&mut bare_events, 2).await;
    assert!(!seen.contains("\"key\":\"team\""), "{seen}");
}

#[tokio::test]
async fn a_key_held_to_some_routes_is_shown_only_the_models_it_may_use() {
    let (up, _) = upstream(1000).await;
    let gateway = support::in_process(&config(up, "routes: [default, \"claude-*\"]")).await;
    let get = |key: &'static str, path: &'static str| get_as(gateway, key, path);
    let ids = |list: &Value| -> Vec<String> {
        list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect()
    };
    let (_, team) = get(TEAM, "/v1/models").await;
    assert_eq!(ids(&team), ["claude-*", "default"], "{team}");
    let (_, bare) = get(BARE, "/v1/models").await;
    assert!(ids(&bare).contains(&"other".to_owned()) && ids(&bare).contains(&"up:m".to_owned()), "{bare}");
    assert_eq!(get(TEAM, "/v1/models/claude-sonnet-4-5-20250929").await.0, 200);
    assert_eq!(get(TEAM, "/v1/models/other").await.0, 404);
    assert_eq!(get(BARE, "/v1/models/other").await.0, 200);
    // A request that names no model is told what this key may name, and nothing else.
    let empty = chat(gateway, TEAM, "").await;
    assert_eq!(empty.status, 400);
    let message = empty.body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("(claude-*, default)"), "{message}");

    // So is one that names a model no route is, where clients name routes alone.
    let routes_only = config(up, "routes: [default, \"claude-*\"]").replace(
        "  admin_key: gw-admin-key-0003\n",
        "  admin_key: gw-admin-key-0003\n  direct_targets: false\n",
    );
    let gateway = support::in_process(&routes_only).await;
    let unknown = chat(gateway, TEAM, "up:m").await;
    assert_eq!(unknown.status, 404);
    let message = unknown.body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("(claude-*, default)"), "{message}");
}

#[tokio::test]
async fn a_budget_a_reload_sets_counts_what_the_key_spent_before_it_had_one() {
    let (up, _upstream) = upstream(1000).await;
    let path = support::write_config("keys-budget-added.yaml", &config(up, "routes: [default]"));
    let (server, addr) = support::serve(&path, &["--no-watch"]);
    let gateway: SocketAddr = addr.parse().unwrap();
    // $10 an answer, no budget yet.
    for _ in 0..2 {
        assert_eq!(chat(gateway, TEAM, "default").await.status, 200);
    }
    std::fs::write(&path, config(up, "routes: [default], budget: { usd: 15, per: day }")).unwrap();
    assert_eq!(reload(gateway).await, 200);
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!(
        (refused.status, &refused.body["error"]["code"]),
        (429, &json!("budget_exceeded")),
        "{:?}",
        refused.body
    );
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    assert_eq!(keys["keys"][1]["budget"]["spent_usd"], 20.0, "{keys}");
    support::stop(server);
}

#[tokio::test]
async fn a_budget_spent_in_tenths_is_spent_at_its_tenth_answer() {
    let (up, upstream) = upstream(1000).await;
    // $0.10 an answer (10 prompt tokens at $10,000 a million): ten sum to 0.9999999999999999.
    let yaml = config(up, "budget: { usd: 1, per: day }").replace("input: 1000000", "input: 10000");
    let gateway = support::in_process(&yaml).await;
    for n in 1..=10 {
        assert_eq!(chat(gateway, TEAM, "default").await.status, 200, "answer {n}");
    }
    let refused = chat(gateway, TEAM, "default").await;
    assert_eq!((refused.status, &refused.body["error"]["code"]), (429, &json!("budget_exceeded")));
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 10);
}

#[tokio::test]
async fn a_stream_another_target_continued_is_charged_what_the_broken_call_delivered_too() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    // A dollar a token both ways, at both targets: the broken call delivered three words.
    let prices = "prices: { m: { input: 1000000, output: 1000000 } }";
    let yaml = format!(
        "providers:
  a: {{ kind: openai, base_url: 'http://{mock}/cut=3~words=8/v1', api_key: sk-a-0001, {prices} }}
  b: {{ kind: anthropic, base_url: 'http://{mock}/ok~words=8', api_key: sk-b-0001, {prices} }}
routes:
  default: {{ targets: [a:m, b:m], retry: {{ max_attempts: 1 }} }}
gateway:
  admin_key: gw-admin-key-0003
  keys:
    - {{ name: team, key: {TEAM}, budget: {{ usd: 1000, per: day }} }}
"
    );
    let gateway = support::in_process(&yaml).await;
    let body =
        json!({ "model": "default", "stream": true, "messages": [{ "role": "user", "content": "Count." }] });
    let response = post_chat(gateway, TEAM, &body).await;
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = response.text().await.unwrap();
    assert!(text.contains("w8") && text.contains("[DONE]"), "{text}");

    let record: Value =
        serde_json::from_str(&admin(gateway, &format!("/admin/requests/{id}")).await).unwrap();
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.iter().map(|a| a["outcome"].as_str().unwrap()).collect::<Vec<_>>(),
        ["failed", "continued"]
    );
    let continued = &attempts[1]["usage"];
    let its_cost =
        continued["prompt_tokens"].as_f64().unwrap() + continued["completion_tokens"].as_f64().unwrap();
    let keys: Value = serde_json::from_str(&admin(gateway, "/admin/keys").await).unwrap();
    let spent = keys["keys"][0]["budget"]["spent_usd"].as_f64().unwrap();
    // The broken call's prompt and its three words, estimated, beside the continuing call's.
    assert!(spent >= its_cost + 3.0, "spent {spent}, the continuing call alone {its_cost}: {record}");
    let metrics = admin(gateway, "/metrics").await;
    assert!(metrics.contains("switchyard_cost_total{target=\"a:m\"}"), "{metrics}");
}
