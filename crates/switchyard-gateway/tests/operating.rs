//! Operating a running gateway: the event stream, fault drills, the request history and the
//! operator page, in process on loopback.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};

const GATEWAY_KEY: &str = "gw-secret-key-123456";
const ADMIN_KEY: &str = "admin-secret-key-654321";

const CONFIG: &str = r#"
providers:
  primary: { kind: simulated, reply: "from primary" }
  backup: { kind: simulated, reply: "from backup" }
  real: { kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: sk-upstream-never-called }
routes:
  default:
    targets: [primary:m, backup:m]
    retry: { max_attempts: 1 }
    health_gate: false
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#;

struct Gateway {
    addr: SocketAddr,
    state: Arc<AppState>,
    client: reqwest::Client,
}

impl Gateway {
    async fn start() -> Self {
        let env = |name: &str| match name {
            "GW_KEY" => Some(GATEWAY_KEY.to_owned()),
            "ADMIN_KEY" => Some(ADMIN_KEY.to_owned()),
            _ => None,
        };
        let file = config::parse(CONFIG, false, "test.yaml").unwrap();
        let loaded = config::build(file, config::Source::File("test.yaml".into()), &env).unwrap();
        let state = AppState::new(loaded.router, loaded.gateway);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = state.clone();
        tokio::spawn(async move { axum::serve(listener, app(served)).await.unwrap() });
        Self { addr, state, client: reqwest::Client::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn chat(&self) -> reqwest::Response {
        self.send_chat(json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] })).await
    }

    /// The same chat, streamed.
    async fn chat_stream(&self) -> reqwest::Response {
        let body =
            json!({ "model": "default", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
        self.send_chat(body).await
    }

    async fn send_chat(&self, body: Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(GATEWAY_KEY)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn drill(&self, provider: &str, body: &str, key: &str) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(&format!("/admin/simulated/{provider}")))
            .bearer_auth(key)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), json_of(response).await)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).bearer_auth(ADMIN_KEY).send().await.unwrap();
        (response.status().as_u16(), json_of(response).await)
    }
}

async fn json_of(response: reqwest::Response) -> Value {
    let bytes = response.bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
}

/// Reads SSE frames from `response` until `done` says enough, as (event, data) pairs.
async fn frames_until(
    response: &mut reqwest::Response,
    done: impl Fn(&[(String, Value)]) -> bool,
) -> Vec<(String, Value)> {
    let mut buffer = String::new();
    let mut frames = Vec::new();
    while !done(&frames) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the stream goes quiet before the expected events")
            .unwrap()
            .expect("the stream ended before the expected events");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let name = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(name), Some(data)) = (name, data) {
                frames.push((name.to_owned(), serde_json::from_str(data).unwrap()));
            }
        }
    }
    frames
}

#[tokio::test]
async fn a_drill_breaks_a_simulated_provider_and_an_empty_one_restores_it() {
    let gateway = Gateway::start().await;
    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "primary:m");

    let (status, body) =
        gateway.drill("primary", r#"{"error_rates": {"unavailable": 1.0}}"#, ADMIN_KEY).await;
    assert_eq!(
        (status, &body),
        (200, &json!({ "provider": "primary", "drill": { "error_rates": { "unavailable": 1.0 } } }))
    );
    let answer = gateway.chat().await;
    assert_eq!(answer.headers()["x-switchyard-target"], "backup:m", "the drilled provider fails");
    let (_, health) = gateway.get("/admin/health").await;
    let primary = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == "primary").unwrap();
    assert_eq!(primary["kind"], "simulated");
    assert_eq!(primary["drill"]["error_rates"]["unavailable"], 1.0);
    let real = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == "real").unwrap();
    assert!(real.get("drill").is_none(), "only simulated providers have drills: {real}");

    let (status, body) = gateway.drill("primary", "{}", ADMIN_KEY).await;
    assert_eq!((status, &body["drill"]), (200, &Value::Null));
    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "primary:m");
}

#[tokio::test]
async fn drills_are_refused_without_the_admin_key_and_on_real_providers() {
    let gateway = Gateway::start().await;
    let breaking = r#"{"error_rates": {"unavailable": 1.0}}"#;

    for key in ["", GATEWAY_KEY] {
        let (status, body) = gateway.drill("primary", breaking, key).await;
        assert_eq!(status, 401, "key {key:?}: {body}");
    }
    let (status, body) = gateway.drill("real", breaking, ADMIN_KEY).await;
    assert_eq!(status, 409);
    assert_eq!(
        body["error"]["message"],
        "provider `real` is openai: fault drills change only `simulated` providers"
    );
    let (status, body) = gateway.drill("nowhere", breaking, ADMIN_KEY).await;
    assert_eq!(
        (status, body["error"]["message"].as_str().unwrap()),
        (404, "no provider `nowhere` is configured")
    );
    let (status, body) = gateway.drill("primary", r#"{"error_rates": {"unavailable": 2}}"#, ADMIN_KEY).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["message"], "error_rates.unavailable: 2 is not a rate between 0 and 1");
    let (status, body) = gateway.drill("primary", r#"{"latency": "fast"}"#, ADMIN_KEY).await;
    assert_eq!(status, 400, "{body}");

    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "primary:m", "nothing was drilled");
}

#[tokio::test]
async fn the_event_stream_carries_router_events_and_finished_requests() {
    let gateway = Gateway::start().await;
    let refused =
        gateway.client.get(gateway.url("/admin/events")).bearer_auth(GATEWAY_KEY).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let mut stream =
        gateway.client.get(gateway.url("/admin/events")).bearer_auth(ADMIN_KEY).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // The opening comment arrives before anything happens: the stream is live.
    let opening =
        tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.unwrap().unwrap().unwrap();
    assert!(std::str::from_utf8(&opening).unwrap().starts_with("retry: 2000\n"));

    gateway.drill("primary", r#"{"error_rates": {"unavailable": 1.0}}"#, ADMIN_KEY).await;
    let answer = gateway.chat().await;
    let id = answer.headers()["x-request-id"].to_str().unwrap().to_owned();

    let frames =
        frames_until(&mut stream, |frames| frames.iter().any(|(name, _)| name == "request_finished")).await;
    let names: Vec<&str> = frames.iter().map(|(name, _)| name.as_str()).collect();
    let failed = names.iter().position(|n| *n == "attempt_failed").expect("attempt_failed");
    let switched = names.iter().position(|n| *n == "provider_switch").expect("provider_switch");
    assert!(failed < switched, "{names:?}");
    for (name, data) in &frames {
        assert_eq!(data["event"], name.as_str(), "each frame's JSON names its event");
    }
    let (_, failure) = &frames[failed];
    assert_eq!((&failure["target"], &failure["error"]["kind"]), (&json!("primary:m"), &json!("unavailable")));
    let (_, finished) = frames.iter().find(|(name, _)| name == "request_finished").unwrap();
    assert_eq!(finished["request_id"], id.as_str());
    assert_eq!(finished["served_by"], "backup:m");
    assert_eq!(finished["fallback"], true);
    assert_eq!(finished["failed"], json!(["primary:m"]));
    let text = serde_json::to_string(&frames.iter().map(|(_, d)| d).collect::<Vec<_>>()).unwrap();
    assert!(!text.contains("sk-upstream") && !text.contains(ADMIN_KEY) && !text.contains(GATEWAY_KEY));

    // Shutting down ends the stream, so it does not hold the drain.
    gateway.state.stop();
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            let _ = chunk;
        }
    })
    .await;
    assert!(rest.is_ok(), "the event stream ends when the gateway stops");
}

#[tokio::test]
async fn the_history_lists_the_newest_requests_first() {
    let gateway = Gateway::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(gateway.chat().await.headers()["x-request-id"].to_str().unwrap().to_owned());
    }

    let (status, body) = gateway.get("/admin/requests?limit=2").await;
    assert_eq!(status, 200);
    let listed: Vec<&str> =
        body["requests"].as_array().unwrap().iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);
    let newest = &body["requests"][0];
    assert_eq!(
        (&newest["route"], &newest["served_by"], &newest["status"], &newest["attempts"]),
        (&json!("default"), &json!("primary:m"), &json!(200), &json!(1))
    );
    assert!(newest["time"].as_str().unwrap().ends_with('Z') && newest["duration_ms"].is_number());
    assert!(
        newest.get("trail").is_none() && newest.get("attempts_detail").is_none(),
        "the list has no trails"
    );
    assert_eq!(gateway.get("/admin/requests").await.1["requests"].as_array().unwrap().len(), 3);

    for (query, message) in [
        ("limit=0", "limit `0` is not a positive whole number"),
        ("limit=ten", "limit `ten` is not a positive whole number"),
        (
            "since=1",
            "unknown parameter `since`: `limit`, `route`, `status`, `target`, `replica` and `scope` are taken",
        ),
        (
            "scope=fleet",
            "scope=fleet needs shared state (`state.redis`, with `state.trails` on) and kept trails (`gateway.recent_requests` above 0): without them, /admin/requests is this replica's",
        ),
    ] {
        let (status, body) = gateway.get(&format!("/admin/requests?{query}")).await;
        assert_eq!((status, body["error"]["message"].as_str().unwrap()), (400, message));
    }
    let refused = gateway.client.get(gateway.url("/admin/requests")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
}

#[tokio::test]
async fn the_operator_page_is_one_self_contained_document() {
    let gateway = Gateway::start().await;
    let page = gateway.client.get(gateway.url("/admin/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.starts_with("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    let html = page.text().await.unwrap();
    // The SVG namespace is a name, not a fetch.
    let addresses = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!addresses.contains("http://") && !addresses.contains("https://"), "no external assets");
    assert!(!html.contains("src=") && !html.contains("<link"), "everything inline");
    for path in ["/admin/health", "/admin/requests?limit=", "/admin/events", "/admin/health/reset"] {
        assert!(html.contains(path), "the page uses {path}");
    }

    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(gateway.url("/admin"))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(redirect.headers()["location"], "/admin/");
}

/// A route whose primary (`dialect` of the mock) breaks its stream after two pieces of text,
/// and whose fallback continues a prefilled answer with the mock's text.
fn breaking_route(mock: std::net::SocketAddr, kind: &str, path: &str) -> String {
    format!(
        r#"
providers:
  primary: {{ kind: {kind}, base_url: "http://{mock}/cut=2~chunks=6{path}", api_key: sk-primary-000001 }}
  fallback: {{ kind: simulated, prefill: true, reply: "mock answer from m", stream: {{ chunks: 3 }} }}
routes:
  default: {{ targets: [primary:m, fallback:m] }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#
    )
}

/// The events of a server-sent-event body: (event name, data) pairs, `[DONE]` as a string.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in event.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = value.to_owned();
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
                }
            }
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn an_anthropic_clients_stream_cut_after_its_first_text_is_finished_by_the_next_target() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let gateway = Gateway::of(&breaking_route(mock, "anthropic", "")).await;
    let body = json!({ "model": "default", "max_tokens": 100, "stream": true,
        "messages": [{ "role": "user", "content": "hi" }] });
    let answer = gateway
        .client
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GATEWAY_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let id = answer.headers()["x-request-id"].to_str().unwrap().to_owned();
    let events = sse_events(&answer.text().await.unwrap());

    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "message_start").count(), 1, "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "content_block_start").count(), 1, "one text block: {names:?}");
    assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
    assert!(!names.contains(&"error"), "{events:?}");
    let text: String = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| data["delta"]["text"].as_str().unwrap_or_else(|| panic!("{events:?}")).to_owned())
        .collect();
    assert_eq!(text, "mock answer from m", "one whole answer, nothing said twice");

    let (_, request) = gateway.get(&format!("/admin/requests/{id}")).await;
    let attempts = request["attempts"].as_array().unwrap_or_else(|| panic!("{request}"));
    let outcomes: Vec<&str> = attempts.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "continued"], "{request}");
    assert_eq!(attempts[0]["mid_stream"], true);
    assert!(attempts[1]["usage"]["completion_tokens"].is_number(), "{request}");
}

#[tokio::test]
async fn an_openai_clients_stream_cut_after_its_first_text_is_finished_under_its_own_id() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let gateway = Gateway::of(&breaking_route(mock, "openai_compatible", "/v1")).await;
    let answer = gateway.chat_stream().await;
    let events = sse_events(&answer.text().await.unwrap());

    assert_eq!(events.last().map(|(_, data)| data.clone()), Some(Value::String("[DONE]".into())));
    let chunks: Vec<&Value> = events.iter().map(|(_, data)| data).filter(|d| d.is_object()).collect();
    assert!(chunks.iter().all(|c| c.get("error").is_none()), "{chunks:?}");
    let ids: std::collections::BTreeSet<&str> = chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "the continuation goes on under the stream's id: {ids:?}");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "mock answer from m");
    let finishes = chunks.iter().filter(|c| c["choices"][0]["finish_reason"].is_string()).count();
    assert_eq!(finishes, 1);
}

#[tokio::test]
async fn a_continuation_by_claude_goes_without_what_claude_cannot_express_under_drop_params() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let route = |drop: bool| {
        format!(
            r#"
providers:
  primary: {{ kind: openai_compatible, base_url: "http://{mock}/cut=2~chunks=6/v1", api_key: sk-primary-000001 }}
  claude: {{ kind: anthropic, base_url: "http://{mock}/ok", api_key: sk-claude-0000001 }}
routes:
  default: {{ targets: [primary:m, claude:m], drop_params: {drop} }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#
        )
    };
    let body = json!({ "model": "default", "stream": true, "frequency_penalty": 0.2,
        "messages": [{ "role": "user", "content": "hi" }] });
    let text_of = |events: &[(String, Value)]| -> String {
        events.iter().filter_map(|(_, data)| data["choices"][0]["delta"]["content"].as_str()).collect()
    };

    // Without it, Claude cannot take the request: the break is what the client is told.
    let gateway = Gateway::of(&route(false)).await;
    let events = sse_events(&gateway.send_chat(body.clone()).await.text().await.unwrap());
    assert!(events.iter().any(|(_, data)| data.get("error").is_some()), "{events:?}");

    let gateway = Gateway::of(&route(true)).await;
    let answer = gateway.send_chat(body).await;
    let id = answer.headers()["x-request-id"].to_str().unwrap().to_owned();
    let events = sse_events(&answer.text().await.unwrap());
    assert!(events.iter().all(|(_, data)| data.get("error").is_none()), "{events:?}");
    assert_eq!(text_of(&events), "mock answer from m", "one whole answer");
    let (_, request) = gateway.get(&format!("/admin/requests/{id}")).await;
    let attempts = request["attempts"].as_array().unwrap_or_else(|| panic!("{request}"));
    assert_eq!(attempts[1]["outcome"], "continued", "{request}");
    let note = attempts[1]["note"].as_str().unwrap_or_default();
    assert!(note.contains("drop_params: sent without frequency_penalty"), "{request}");
}

impl Gateway {
    /// A gateway of `yaml` (which may name `env://GW_KEY` and `env://ADMIN_KEY`), in process.
    async fn of(yaml: &str) -> Self {
        let env = |name: &str| match name {
            "GW_KEY" => Some(GATEWAY_KEY.to_owned()),
            "ADMIN_KEY" => Some(ADMIN_KEY.to_owned()),
            _ => None,
        };
        let file = config::parse(yaml, false, "test.yaml").unwrap();
        let loaded = config::build(file, config::Source::File("test.yaml".into()), &env).unwrap();
        let state = AppState::new(loaded.router, loaded.gateway);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = state.clone();
        tokio::spawn(async move { axum::serve(listener, app(served)).await.unwrap() });
        Self { addr, state, client: reqwest::Client::new() }
    }

    async fn events(&self, query: &str) -> reqwest::Response {
        let url = self.url(&format!("/admin/events{query}"));
        self.client.get(url).bearer_auth(ADMIN_KEY).send().await.unwrap()
    }
}

/// Two routes over three targets; the provider `keyed` has two keys (nothing listens at its
/// address: no test calls it).
const TWO_ROUTES: &str = r#"
providers:
  keyed: { kind: openai_compatible, base_url: "http://127.0.0.1:9/v1", api_keys: [sk-first-key-000001, sk-second-key-000002] }
  sim: { kind: simulated }
routes:
  default: { targets: [sim:m, keyed:m] }
  cheap: { targets: [keyed:small, sim:m] }
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#;

/// Names, each with its status.
type Statuses = Vec<(String, String)>;

/// Targets and credentials of `/admin/health`, each with its status.
fn statuses(health: &Value) -> (Statuses, Statuses) {
    let of = |list: &Value, key: &str| -> Statuses {
        let entries = list.as_array().unwrap().iter();
        entries
            .map(|e| (e[key].as_str().unwrap().to_owned(), e["status"].as_str().unwrap().to_owned()))
            .collect()
    };
    (of(&health["targets"], "target"), of(&health["credentials"], "credential_id"))
}

#[tokio::test]
async fn the_health_view_lists_every_target_and_key_as_unknown_before_any_request_and_after_a_reset() {
    let gateway = Gateway::of(TWO_ROUTES).await;
    let (_, health) = gateway.get("/admin/health").await;
    let keyed = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == "keyed").unwrap();
    let keys: Vec<&str> = keyed["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["credential_id"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2);
    let unknown = |name: &str| (name.to_owned(), "unknown".to_owned());
    let (targets, credentials) = statuses(&health);
    assert_eq!(targets, [unknown("keyed:m"), unknown("keyed:small"), unknown("sim:m")], "before any request");
    for key in &keys {
        assert!(credentials.contains(&unknown(key)), "{key} in {credentials:?}");
    }
    assert!(credentials.iter().all(|(_, status)| status == "unknown"), "{credentials:?}");

    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "sim:m");
    let (targets, _) = statuses(&gateway.get("/admin/health").await.1);
    assert!(targets.contains(&("sim:m".to_owned(), "available".to_owned())), "{targets:?}");

    let reset =
        gateway.client.post(gateway.url("/admin/health/reset")).bearer_auth(ADMIN_KEY).send().await.unwrap();
    assert_eq!(reset.status(), 200);
    let (targets, credentials) = statuses(&gateway.get("/admin/health").await.1);
    assert_eq!(targets, [unknown("keyed:m"), unknown("keyed:small"), unknown("sim:m")], "after a reset");
    for key in &keys {
        assert!(credentials.contains(&unknown(key)), "{key} in {credentials:?}");
    }
}

#[tokio::test]
async fn a_gated_skip_then_an_answer_from_the_second_target_is_a_fallback() {
    let gateway = Gateway::of(
        r#"
providers:
  primary: { kind: simulated, error_rates: { unavailable: 1.0 } }
  backup: { kind: simulated }
routes:
  default: { targets: [primary:m, backup:m], retry: { max_attempts: 1 }, health_gate: true, health_ttl: 1h }
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#,
    )
    .await;
    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "backup:m", "after a failure");
    let gated = gateway.chat().await;
    assert_eq!(gated.headers()["x-switchyard-target"], "backup:m");
    let id = gated.headers()["x-request-id"].to_str().unwrap().to_owned();

    let (_, record) = gateway.get(&format!("/admin/requests/{id}")).await;
    assert_eq!(record["attempts"][0]["outcome"], "skipped_unhealthy", "{record}");
    assert_eq!(record["fallback"], true, "the trail says so: {record}");
    let (_, listed) = gateway.get("/admin/requests?limit=1").await;
    let newest = &listed["requests"][0];
    assert_eq!((&newest["request_id"], &newest["fallback"]), (&json!(id), &json!(true)));
    assert_eq!(newest["stream_error"], Value::Null, "not a broken stream");
    let metrics = gateway.client.get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("switchyard_fallbacks_total{route=\"default\"} 2\n"),
        "both requests fell back: {metrics}"
    );
}

// Two threads: the stream's task runs beside the requests', as in the gateway, so that it can
// read between a request's events and its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_each_finished_request_after_the_events_it_caused() {
    let gateway = Gateway::start().await;
    let mut stream = gateway.events("").await;
    gateway.drill("primary", r#"{"error_rates": {"unavailable": 1.0}}"#, ADMIN_KEY).await;
    const REQUESTS: usize = 100;
    for _ in 0..REQUESTS {
        assert_eq!(gateway.chat().await.status(), 200);
    }

    let frames = frames_until(&mut stream, |frames| {
        frames.iter().filter(|(name, _)| name == "request_finished").count() == REQUESTS
    })
    .await;
    // Each request failed on primary:m once: its attempt_failed comes before its end.
    let mut failed = 0;
    let mut finished = 0;
    for (name, data) in &frames {
        match name.as_str() {
            "attempt_failed" => failed += 1,
            "request_finished" => {
                finished += data["failed"].as_array().unwrap().len();
                assert!(failed >= finished, "a request ended before its failure was told: {frames:?}");
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn the_event_stream_opens_with_the_recent_events_when_asked() {
    let gateway = Gateway::start().await;
    gateway.drill("primary", r#"{"error_rates": {"unavailable": 1.0}}"#, ADMIN_KEY).await;
    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "backup:m");
    gateway.drill("primary", "{}", ADMIN_KEY).await;

    // Nothing happens after it connects: what it reads was kept from before.
    let mut recent = gateway.events("?recent=50").await;
    assert_eq!(recent.status(), 200);
    let frames =
        frames_until(&mut recent, |frames| frames.iter().any(|(name, _)| name == "provider_switch")).await;
    let names: Vec<&str> = frames.iter().map(|(name, _)| name.as_str()).collect();
    let failed = names.iter().position(|n| *n == "attempt_failed").expect("the failure before it connected");
    assert!(failed < names.iter().position(|n| *n == "provider_switch").unwrap(), "in order: {names:?}");
    assert_eq!(frames[failed].1["target"], "primary:m");

    // Without `recent`, the stream starts now: the failure is not told again.
    let mut live = gateway.events("").await;
    assert_eq!(gateway.chat().await.headers()["x-switchyard-target"], "primary:m");
    let frames =
        frames_until(&mut live, |frames| frames.iter().any(|(name, _)| name == "request_finished")).await;
    assert!(
        frames.iter().all(|(name, _)| name != "attempt_failed" && name != "provider_switch"),
        "{frames:?}"
    );

    for (query, message) in [
        ("?recent=201", "recent `201` is not a whole number from 0 to 200"),
        ("?since=1", "unknown parameter `since`: `recent` and `scope` are taken"),
    ] {
        let refused = gateway.events(query).await;
        assert_eq!(refused.status(), 400);
        assert_eq!(json_of(refused).await["error"]["message"], message);
    }
}

#[tokio::test]
async fn a_stream_that_broke_after_its_first_content_is_listed_as_broken() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let gateway = Gateway::of(&format!(
        r#"
providers:
  cut: {{ kind: openai_compatible, base_url: "http://{mock}/cut=2/v1" }}
routes:
  default: {{ targets: [cut:m] }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#
    ))
    .await;
    let answer = gateway.chat_stream().await;
    assert_eq!(answer.status(), 200, "the 200 went out with the first content");
    let text = answer.text().await.unwrap_or_default();
    assert!(text.contains("\"error\""), "the stream ends with an error event: {text}");

    let (_, listed) = gateway.get("/admin/requests?limit=1").await;
    let request = &listed["requests"][0];
    assert_eq!(request["status"], 200);
    assert_eq!(request["stream_error"], "transport", "the mock dropped the connection: {request}");
    // Its trail says so too.
    let id = request["request_id"].as_str().unwrap();
    let (_, record) = gateway.get(&format!("/admin/requests/{id}")).await;
    assert_eq!((&record["status"], &record["stream_error"]), (&json!(200), &json!("transport")), "{record}");
}

#[tokio::test]
async fn a_stream_another_target_continued_to_its_end_is_not_listed_as_broken() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let gateway = Gateway::of(&format!(
        r#"
providers:
  cut: {{ kind: openai_compatible, base_url: "http://{mock}/cut=2~words=6/v1" }}
  whole: {{ kind: openai_compatible, base_url: "http://{mock}/ok~words=6/v1", prefill: true }}
routes:
  default: {{ targets: [cut:m, whole:m], retry: {{ max_attempts: 1 }} }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#
    ))
    .await;
    let text = gateway.chat_stream().await.text().await.unwrap_or_default();
    assert!(!text.contains("\"error\""), "the answer was continued: {text}");

    let (_, listed) = gateway.get("/admin/requests?limit=1").await;
    let request = &listed["requests"][0];
    assert_eq!((&request["status"], &request["stream_error"]), (&json!(200), &Value::Null), "{request}");
}

#[tokio::test]
async fn a_client_that_leaves_once_its_answer_is_whole_was_answered_not_a_499() {
    // The provider sends the whole answer, then holds its connection open without its
    // terminator; the client leaves at the finish, as Codex leaves at `response.completed`.
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let gateway = Gateway::of(&format!(
        r#"
providers:
  held: {{ kind: openai_compatible, base_url: "http://{mock}/noend/v1" }}
routes:
  default: {{ targets: [held:m] }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"#
    ))
    .await;
    let mut answer = gateway.chat_stream().await;
    let mut read = String::new();
    while !read.contains("\"finish_reason\":\"stop\"") {
        let chunk = answer.chunk().await.unwrap().expect("the finish comes");
        read.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(answer);
    let listed = support::until("the request is listed", std::time::Duration::from_secs(10), async || {
        let (_, listed) = gateway.get("/admin/requests?limit=1").await;
        if listed["requests"][0].is_object() { Ok(listed) } else { Err(listed.to_string()) }
    })
    .await;
    assert_eq!(listed["requests"][0]["status"], 200, "{listed}");
}

/// A gateway whose route `default` is `route` over `providers` (which answer in 30 s), a chat
/// its client gives up on after `patience` ms, and the request's line and record once listed.
async fn left_unanswered(providers: &str, route: &str, patience: u64) -> (Value, Value) {
    let gateway = Gateway::of(&format!(
        "providers:\n{providers}routes:\n  default: {route}\ngateway:\n  keys: [env://GW_KEY]\n  admin_key: env://ADMIN_KEY\n"
    ))
    .await;
    let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] });
    let left = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .timeout(std::time::Duration::from_millis(patience))
        .json(&body)
        .send()
        .await;
    assert!(left.is_err(), "the client gave up");
    let listed = support::until("the request is listed", std::time::Duration::from_secs(10), async || {
        let (_, listed) = gateway.get("/admin/requests?limit=5").await;
        let found = listed["requests"].as_array().is_some_and(|list| list.iter().any(|r| r["status"] == 499));
        if found { Ok(listed) } else { Err(listed.to_string()) }
    })
    .await;
    let line = listed["requests"][0].clone();
    let id = line["request_id"].as_str().unwrap_or_else(|| panic!("{line}"));
    let (_, record) = gateway.get(&format!("/admin/requests/{id}")).await;
    (line, record)
}

/// Each attempt of a request's record: its target and outcome.
fn calls_of(record: &Value) -> Vec<(&str, &str)> {
    let attempts = record["attempts"].as_array().unwrap_or_else(|| panic!("{record}"));
    attempts.iter().map(|a| (a["target"].as_str().unwrap(), a["outcome"].as_str().unwrap())).collect()
}

#[tokio::test]
async fn a_hedged_request_its_client_left_names_both_calls_it_was_waiting_on() {
    let providers =
        "  slow: { kind: simulated, latency: 30s }\n  slower: { kind: simulated, latency: 30s }\n";
    let route = "{ targets: [slow:m, slower:m], hedge: { after: 50ms, min_after: 50ms } }";
    let (_, record) = left_unanswered(providers, route, 400).await;
    let calls = calls_of(&record);
    assert_eq!(calls, [("slow:m", "cancelled"), ("slower:m", "cancelled")], "{record}");
}

#[tokio::test]
async fn a_hedged_request_its_client_left_after_the_first_call_failed_records_that_failure() {
    let providers = "  flaky: { kind: simulated, latency: 150ms, error_rates: { unavailable: 1.0 } }\n  slower: { kind: simulated, latency: 30s }\n";
    let route =
        "{ targets: [flaky:m, slower:m], hedge: { after: 50ms, min_after: 50ms }, stream_upstream: false }";
    let (_, record) = left_unanswered(providers, route, 600).await;
    let calls = calls_of(&record);
    assert_eq!(calls, [("flaky:m", "failed"), ("slower:m", "cancelled")], "{record}");
    assert_eq!(record["attempts"][0]["error"]["kind"], "unavailable", "{record}");
    // Its time is the call's own (150 ms), not the wait until the client left (600 ms).
    let took = record["attempts"][0]["duration_ms"].as_f64().unwrap();
    assert!(took < 500.0, "{took} ms: {record}");
}

#[tokio::test]
async fn a_request_its_client_left_before_the_answer_is_logged_as_499() {
    let providers = "  slow: { kind: simulated, latency: 30s }\n";
    let (left, record) = left_unanswered(providers, "{ targets: [slow:m] }", 300).await;
    assert_eq!(left["endpoint"], "chat_completions", "{left}");
    // What the router did before the client left: the route, and the call it was waiting on.
    assert_eq!(left["route"], "default", "{left}");
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{record}");
    assert_eq!(
        (&attempts[0]["target"], &attempts[0]["outcome"], &attempts[0]["note"]),
        (&json!("slow:m"), &json!("cancelled"), &json!("the caller went away")),
        "{record}"
    );
}
