//! One fleet, one view: three `switchyard serve` replicas named `a`, `b` and `c` on one real
//! `redis-server`. A request served by one is found through the others with its replica
//! named; the fleet's list holds every replica's requests, newest first, and filters; the
//! fleet's event stream carries a circuit opening on `a` as `c` serves it; with Redis stalled
//! lookups answer from the replica's memory, marked partial, while requests flow; and a
//! replica started under a live replica's name is refused, naming the holder.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_state::testing::RedisServer;

const API_KEY: &str = "sk-view-upstream-secret-0123456789";
const CLIENT_KEY: &str = "sk-view-client-secret-0123456789";
const ADMIN_KEY: &str = "view-admin-secret-0123456789";

/// `down` answers 500; every other model answers.
async fn upstream(Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if model == "down" {
        let body = json!({ "error": { "message": "down", "type": "server_error", "code": "server_error" } });
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response();
    }
    Json(json!({
        "id": "chatcmpl-view", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    }))
    .into_response()
}

async fn start_upstream() -> SocketAddr {
    let app = axum::Router::new().route("/v1/chat/completions", post(upstream));
    support::serve_router(app).await
}

fn config(upstream: SocketAddr, redis: &str) -> String {
    format!(
        "providers:
  up: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {API_KEY} }}
  dead: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {API_KEY}-d }}
routes:
  default: {{ targets: [up:ok] }}
  other: {{ targets: [up:other] }}
  down: {{ targets: [dead:down, up:ok], retry: {{ max_attempts: 3, backoff_base: 1ms, backoff_max: 2ms }}, health_gate: false }}
health: {{ failure_threshold: 3 }}
gateway: {{ keys: [{CLIENT_KEY}], admin_key: {ADMIN_KEY} }}
state: {{ redis: '{redis}', prefix: view-test }}
"
    )
}

struct Fleet {
    replicas: Vec<(Child, String)>,
    client: reqwest::Client,
}

impl Fleet {
    /// A chat through `replica`: its status and request id.
    async fn chat(&self, replica: usize, model: &str) -> (u16, String) {
        let url = format!("http://{}/v1/chat/completions", self.replicas[replica].1);
        let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
        let response = self.client.post(url).bearer_auth(CLIENT_KEY).json(&body).send().await.unwrap();
        let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
        (response.status().as_u16(), id)
    }

    async fn admin(&self, replica: usize, path: &str) -> (u16, Value) {
        let url = format!("http://{}{path}", self.replicas[replica].1);
        let response = self.client.get(url).bearer_auth(ADMIN_KEY).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or_default())
    }

    /// Asks `replica` for `path` until `check` holds of its answer (the trails are written off
    /// the request path), for at most two seconds.
    async fn until(&self, replica: usize, path: &str, check: impl Fn(u16, &Value) -> bool) -> Value {
        self.until_within(replica, path, Duration::from_secs(2), check).await
    }

    /// [`until`](Self::until), for at most `within`.
    async fn until_within(
        &self,
        replica: usize,
        path: &str,
        within: Duration,
        check: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let start = tokio::time::Instant::now();
        loop {
            let (status, body) = self.admin(replica, path).await;
            if check(status, &body) {
                return body;
            }
            assert!(start.elapsed() < within, "replica {replica}, {path}: {status} {body}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn ids(list: &Value) -> Vec<String> {
    list["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Reads the SSE `response` until an event `name` of `replica` arrives, for at most 5 s.
async fn until_event(response: &mut reqwest::Response, name: &str, replica: &str) -> Value {
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let chunk = tokio::time::timeout_at(deadline, response.chunk()).await;
        let chunk = chunk.unwrap_or_else(|_| panic!("no {name} of {replica} within 5 s: {buffer}")).unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("the stream stays open")));
        for block in buffer.split("\n\n") {
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            let event: Value = serde_json::from_str(data).unwrap();
            if block.starts_with(&format!("event: {name}\n")) && event["replica"] == replica {
                return event;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_answers_for_the_whole_fleet() {
    let redis = RedisServer::start();
    let upstream = start_upstream().await;
    let path = support::write_config("fleet-view.yaml", &config(upstream, &redis.url()));
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        replicas.push(
            support::serve_with_env(&[("SWITCHYARD_REPLICA", name)], &path, "127.0.0.1:0", &[]).unwrap(),
        );
    }
    let logs = support::read_logs(&mut replicas);
    let mut fleet = Fleet { replicas, client: reqwest::Client::new() };
    fleet
        .until(2, "/admin/health", |_, h| {
            h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 3)
        })
        .await;

    // A request served by `a` is found through `b` and `c`, with its replica named.
    let (status, served_by_a) = fleet.chat(0, "default").await;
    assert_eq!(status, 200);
    for replica in [1, 2] {
        let found =
            fleet.until(replica, &format!("/admin/requests/{served_by_a}"), |status, _| status == 200).await;
        assert_eq!(found["replica"], "a");
        assert_eq!(found["request_id"], served_by_a.as_str());
        assert_eq!(found["attempts"][0]["target"], "up:ok", "the whole trail: {found}");
    }

    // The fleet's list: every replica's requests, newest first, and its filters.
    let (_, by_b) = fleet.chat(1, "other").await;
    let (_, by_c) = fleet.chat(2, "default").await;
    let list = fleet.until(0, "/admin/requests", |_, list| ids(list).len() >= 3).await;
    assert_eq!(ids(&list)[..3], [by_c.clone(), by_b.clone(), served_by_a.clone()], "{list}");
    assert_eq!(list["scope"], "fleet");
    assert_eq!(list["partial"], false);
    let only_b = fleet.admin(2, "/admin/requests?replica=b").await.1;
    assert_eq!(ids(&only_b), std::slice::from_ref(&by_b));
    let other_route = fleet.admin(0, "/admin/requests?route=other").await.1;
    assert_eq!(ids(&other_route), std::slice::from_ref(&by_b));
    let mine = fleet.admin(0, "/admin/requests?scope=replica").await.1;
    assert_eq!(ids(&mine), std::slice::from_ref(&served_by_a), "this replica's alone");

    // The fleet's events, followed through `c`, carry a circuit opening on `a`.
    let url = format!("http://{}/admin/events?scope=fleet", fleet.replicas[2].1);
    let mut events = fleet.client.get(url).bearer_auth(ADMIN_KEY).send().await.unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(fleet.chat(0, "down").await.0, 200, "falls back to up:ok");
    let opened = until_event(&mut events, "circuit_opened", "a").await;
    assert_eq!(opened["target"], "dead:down", "{opened}");
    until_event(&mut events, "request_finished", "a").await;
    drop(events);
    // Each replica's heartbeat tells what it sees unwell, and what it is doing.
    let health = fleet
        .until(2, "/admin/health", |_, h| {
            let replicas = h["shared_state"]["replicas"].as_array().unwrap();
            let a = replicas.iter().find(|r| r["id"] == "a").unwrap();
            let unwell = a["unwell"].as_array();
            unwell.is_some_and(|unwell| {
                unwell.iter().any(|u| u["target"] == "dead:down" && u["breaker"] == "open")
            })
        })
        .await;
    let a = health["shared_state"]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "a")
        .unwrap()
        .clone();
    assert!(a["started_ms"].as_u64().unwrap() > 0 && a["pid"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(a["in_flight"], 0, "{a}");

    // `switchyard events --fleet` through `b` prints a request `c` served, naming `c`.
    let mut tail = std::process::Command::new(support::BIN)
        .args([
            "events",
            "--fleet",
            "--json",
            "--url",
            &format!("http://{}", fleet.replicas[1].1),
            "--key",
            ADMIN_KEY,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(tail.stdout.take().unwrap()));
    let (seen, found) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let event: Value = serde_json::from_str(&line).unwrap_or_default();
            if event["event"] == "request_finished" && event["replica"] == "c" {
                let _ = seen.send(event["request_id"].as_str().unwrap_or_default().to_owned());
                return;
            }
        }
    });
    let mut printed = None;
    for _ in 0..50 {
        let (_, id) = fleet.chat(2, "default").await;
        if let Ok(got) = found.recv_timeout(Duration::from_millis(100)) {
            printed = Some((got, id));
            break;
        }
    }
    tail.kill().unwrap();
    tail.wait().unwrap();
    let (got, _) = printed.expect("switchyard events --fleet printed a request of replica c");
    assert!(got.starts_with("req_"), "{got}");

    // Redis stalled: lookups answer from the replica's memory, marked partial; requests flow.
    redis.stall();
    let (status, during) = fleet.chat(1, "default").await;
    assert_eq!(status, 200, "requests flow while Redis is stalled");
    let (status, list) = fleet.admin(1, "/admin/requests").await;
    assert_eq!(status, 200);
    assert_eq!(list["partial"], true, "{list}");
    assert!(ids(&list).contains(&during), "this replica's own requests are listed");
    let (status, missing) = fleet.admin(1, &format!("/admin/requests/{by_c}")).await;
    assert_eq!(status, 404);
    let message = missing["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be searched") && message.contains("(b)"), "{message}");
    // The trail a stalled Redis did not take waits in the replica's backlog, not lost: once
    // Redis answers again, another replica finds it.
    redis.resume();
    let found = fleet
        .until_within(0, &format!("/admin/requests/{during}"), Duration::from_secs(15), |status, _| {
            status == 200
        })
        .await;
    assert_eq!(found["replica"], "b", "{found}");
    let url = format!("http://{}/metrics", fleet.replicas[1].1);
    let metrics = fleet.client.get(&url).bearer_auth(ADMIN_KEY).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("\nswitchyard_fleet_trails_lost 0\n"), "{metrics}");

    // A second replica under a live replica's name is refused, naming the holder.
    let refused = support::serve_with_env(&[("SWITCHYARD_REPLICA", "b")], &path, "127.0.0.1:0", &[]);
    let (code, stderr) = refused.expect_err("a live replica holds the name `b`");
    assert_ne!(code, 0);
    assert!(stderr.contains("`b` is taken") && stderr.contains("pid"), "{stderr}");

    // A replica killed without leaving: its name lapses with its heartbeat, and a replica
    // started under it again waits that out and serves; this one with `state.trails: false`,
    // so it keeps its history to itself.
    let c = fleet.replicas.pop().unwrap();
    support::stop_piped(c.0);
    let quiet =
        config(upstream, &redis.url()).replace("prefix: view-test", "prefix: view-test, trails: false");
    let quiet = support::write_config("fleet-view-quiet.yaml", &quiet);
    let restarted = support::serve_with_env(&[("SWITCHYARD_REPLICA", "c")], &quiet, "127.0.0.1:0", &[]);
    fleet.replicas.push(restarted.expect("the killed replica's name lapsed"));
    let (status, _) = fleet.chat(2, "default").await;
    assert_eq!(status, 200);
    let (_, list) = fleet.admin(2, "/admin/requests").await;
    assert_eq!(list["scope"], "replica", "trails off: this replica's history alone: {list}");
    support::stop_piped(fleet.replicas.pop().unwrap().0);

    // No secret reached the fleet's trails or events.
    let dump = redis.cli(&["--scan", "--pattern", "view-test:*"]);
    for key in dump.lines().filter(|k| k.contains("trail") || k.ends_with(":events")) {
        let kind = redis.cli(&["type", key]);
        let text = match kind.trim() {
            "string" => redis.cli(&["get", key]),
            "hash" => redis.cli(&["hgetall", key]),
            "stream" => redis.cli(&["xrange", key, "-", "+"]),
            _ => redis.cli(&["zrange", key, "0", "-1"]),
        };
        for secret in [API_KEY, CLIENT_KEY, ADMIN_KEY] {
            assert!(!text.contains(secret), "{key} holds a key");
        }
    }
    for (child, _) in fleet.replicas {
        support::stop_piped(child);
    }
    for log in logs {
        let log = log.join().unwrap();
        assert!(!log.contains(API_KEY) && !log.contains(CLIENT_KEY), "a key reached the logs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_replica_served_while_redis_was_away_reaches_the_fleets_history_once_it_returns() {
    let mut redis = RedisServer::start();
    let upstream = start_upstream().await;
    let path = support::write_config("fleet-view-outage.yaml", &config(upstream, &redis.url()));
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        replicas.push(
            support::serve_with_env(&[("SWITCHYARD_REPLICA", name)], &path, "127.0.0.1:0", &[]).unwrap(),
        );
    }
    let _logs = support::read_logs(&mut replicas);
    let mut fleet = Fleet { replicas, client: reqwest::Client::new() };
    fleet
        .until(1, "/admin/health", |_, h| {
            h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 2)
        })
        .await;

    redis.kill();
    let (status, during) = fleet.chat(0, "default").await;
    assert_eq!(status, 200, "served while Redis is away");
    // Away long enough for `a` to have failed to write it, and to know Redis is away.
    fleet
        .until_within(0, "/admin/health", Duration::from_secs(15), |_, h| {
            h["shared_state"]["status"] == "degraded"
        })
        .await;
    redis.restart();

    // Once Redis answers again, `b` finds it: written from `a`'s backlog, not lost.
    let path = format!("/admin/requests/{during}");
    let found = fleet.until_within(1, &path, Duration::from_secs(45), |status, _| status == 200).await;
    assert_eq!(found["replica"], "a", "{found}");
    for (child, _) in &mut fleet.replicas {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// Two keys name a request alike (`x-request-id`): each finds its own trail through any
/// replica, and the later does not write over the earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_two_keys_chose_alike_names_each_keys_own_trail() {
    let redis = RedisServer::start();
    let upstream = start_upstream().await;
    const OTHER_KEY: &str = "sk-view-other-secret-0123456789";
    // No admin key: each client key reads its own requests only.
    let text = config(upstream, &redis.url()).replace(
        &format!("keys: [{CLIENT_KEY}], admin_key: {ADMIN_KEY}"),
        &format!("keys: [{{ name: first, key: {CLIENT_KEY} }}, {{ name: second, key: {OTHER_KEY} }}]"),
    );
    let path = support::write_config("fleet-view-ids.yaml", &text);
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        replicas.push(
            support::serve_with_env(&[("SWITCHYARD_REPLICA", name)], &path, "127.0.0.1:0", &[]).unwrap(),
        );
    }
    let fleet = Fleet { replicas, client: reqwest::Client::new() };
    let health = format!("http://{}/admin/health", fleet.replicas[1].1);
    support::until("both replicas are in the fleet", Duration::from_secs(10), async || {
        let response =
            fleet.client.get(&health).bearer_auth(CLIENT_KEY).send().await.map_err(|e| e.to_string())?;
        let health: Value = response.json().await.map_err(|e| e.to_string())?;
        match health["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 2) {
            true => Ok(()),
            false => Err(health.to_string()),
        }
    })
    .await;
    let url = format!("http://{}/v1/chat/completions", fleet.replicas[0].1);
    for (key, model) in [(CLIENT_KEY, "default"), (OTHER_KEY, "other")] {
        let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
        let sent = fleet.client.post(&url).bearer_auth(key).header("x-request-id", "job-42").json(&body);
        assert_eq!(sent.send().await.unwrap().status(), 200);
    }
    // Through the other replica, which served neither: each key reads its own.
    let read = |key: &'static str| {
        let url = format!("http://{}/admin/requests/job-42", fleet.replicas[1].1);
        let client = fleet.client.clone();
        async move {
            let response = client.get(url).bearer_auth(key).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or_default())
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for (key, label, route) in [(CLIENT_KEY, "first", "default"), (OTHER_KEY, "second", "other")] {
        loop {
            let (status, found) = read(key).await;
            if status == 200 {
                assert_eq!(
                    (found["key"].as_str(), found["route"].as_str()),
                    (Some(label), Some(route)),
                    "{found}"
                );
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{label}: {status} {found}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    for (mut child, _) in fleet.replicas {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
