//! Three `switchyard serve` replicas on one real `redis-server`, in front of one fake upstream
//! that counts its hits per model. What one replica learns, the others honour: an exhausted
//! target, a gated one and an open circuit cost one replica's calls, not three; a reset
//! through one reaches all; a replica whose clock is 30 s off (under `faketime`) reads the
//! same deadlines; and Redis stalled, killed and restarted fails no client request.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_state::testing::RedisServer;

const API_KEY: &str = "sk-fleet-upstream-secret-0123456789";
const SPARE_KEY: &str = "sk-fleet-spare-secret-0123456789";
const CLIENT_KEY: &str = "sk-fleet-client-secret-0123456789";
const ADMIN_KEY: &str = "fleet-admin-secret-0123456789";

/// How long a change may take to reach the other replicas (the contract's 100 ms at p99 on
/// loopback, with room for a loaded machine running three gateways).
const PROPAGATION: Duration = Duration::from_millis(250);

type Hits = Arc<Mutex<HashMap<String, u32>>>;

/// The upstream: `quota` is out of quota (reset in 120 s), `flaky` answers 503, `down` 500, and
/// every other model answers.
async fn upstream(State(hits): State<Hits>, Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    *hits.lock().unwrap().entry(model.clone()).or_default() += 1;
    let error = |status: StatusCode, kind: &str| {
        let body =
            json!({ "error": { "message": format!("{kind} from upstream"), "type": kind, "code": kind } });
        (status, Json(body)).into_response()
    };
    match model.as_str() {
        "quota" => {
            let mut response = error(StatusCode::TOO_MANY_REQUESTS, "insufficient_quota");
            response.headers_mut().insert("retry-after", HeaderValue::from_static("120"));
            response
        }
        "flaky" | "flaky-later" => error(StatusCode::SERVICE_UNAVAILABLE, "server_error"),
        "down" => error(StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        _ => Json(json!({
            "id": "chatcmpl-fleet", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" }, "finish_reason": "stop" }],
            "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
        }))
        .into_response(),
    }
}

async fn start_upstream() -> (SocketAddr, Hits) {
    let hits = Hits::default();
    let app = axum::Router::new().route("/v1/chat/completions", post(upstream)).with_state(hits.clone());
    let addr = support::serve_router(app).await;
    (addr, hits)
}

fn config(upstream: SocketAddr, redis: &str) -> String {
    format!(
        "providers:
  up: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {API_KEY}-q }}
  gate: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {API_KEY}-g }}
  dead: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {API_KEY}-d }}
  spare: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', api_key: {SPARE_KEY} }}
routes:
  default: {{ targets: [spare:ok] }}
  quota: {{ targets: [up:quota, spare:ok], retry: {{ max_attempts: 1 }} }}
  flaky: {{ targets: [gate:flaky, spare:ok], retry: {{ max_attempts: 1 }}, health_ttl: 60s }}
  flaky-later: {{ targets: [gate:flaky-later, spare:ok], retry: {{ max_attempts: 1 }}, health_ttl: 60s }}
  down: {{ targets: [dead:down, spare:ok], retry: {{ max_attempts: 3, backoff_base: 1ms, backoff_max: 2ms }}, health_gate: false }}
gateway: {{ keys: [{CLIENT_KEY}], admin_key: {ADMIN_KEY} }}
state: {{ redis: '{redis}', prefix: fleet-test }}
"
    )
}

struct Fleet {
    replicas: Vec<(Child, String)>,
    client: reqwest::Client,
}

impl Fleet {
    async fn chat(&self, replica: usize, model: &str) -> u16 {
        let url = format!("http://{}/v1/chat/completions", self.replicas[replica].1);
        let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
        let response = self.client.post(url).bearer_auth(CLIENT_KEY).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        if status != 200 {
            eprintln!("replica {replica}, {model}: {status} {}", response.text().await.unwrap_or_default());
        }
        status
    }

    async fn health(&self, replica: usize) -> Value {
        let url = format!("http://{}/admin/health", self.replicas[replica].1);
        let response = self.client.get(url).bearer_auth(ADMIN_KEY).send().await.unwrap();
        response.json().await.unwrap()
    }

    async fn reset(&self, replica: usize, target: &str) -> Value {
        let url = format!("http://{}/admin/health/reset", self.replicas[replica].1);
        let body = json!({ "target": target });
        let response = self.client.post(url).bearer_auth(ADMIN_KEY).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// Waits until `check` holds for the health of every replica in `which`.
    async fn until_all(&self, which: &[usize], what: &str, within: Duration, check: impl Fn(&Value) -> bool) {
        let start = tokio::time::Instant::now();
        for &replica in which {
            loop {
                let health = self.health(replica).await;
                if check(&health) {
                    break;
                }
                assert!(
                    start.elapsed() < within,
                    "replica {replica}: {what}: not within {within:?}: {health}"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

fn target<'a>(health: &'a Value, name: &str) -> Option<&'a Value> {
    health["targets"].as_array()?.iter().find(|t| t["target"] == name)
}

fn status_of(health: &Value, name: &str) -> String {
    target(health, name).map_or("unknown".to_owned(), |t| t["status"].as_str().unwrap_or_default().to_owned())
}

fn hits(hits: &Hits, model: &str) -> u32 {
    hits.lock().unwrap().get(model).copied().unwrap_or(0)
}

/// libfaketime, preloaded into a replica to run its clocks (wall and monotonic) 30 s ahead.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

fn skewed_clock() -> [(&'static str, &'static str); 2] {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install the Debian package `faketime` (scripts/test does)"
    );
    [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", "+30s")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_one_memory_and_survive_redis_going_away() {
    let mut redis = RedisServer::start();
    let (upstream, counted) = start_upstream().await;
    let path = support::write_config("fleet.yaml", &config(upstream, &redis.url()));
    let mut replicas = Vec::new();
    for replica in 0..3 {
        // The third replica's clock runs 30 s ahead.
        let skew = skewed_clock();
        let env: &[(&str, &str)] = if replica == 2 { &skew } else { &[] };
        replicas.push(support::serve_with_env(env, &path, "127.0.0.1:0", &[]).unwrap());
    }
    let logs = support::read_logs(&mut replicas);
    let fleet = Fleet { replicas, client: reqwest::Client::new() };
    fleet
        .until_all(&[0, 1, 2], "connects and sees three replicas", Duration::from_secs(10), |h| {
            h["shared_state"]["status"] == "ok"
                && h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 3)
        })
        .await;

    // An exhausted target seen through one replica is not called through the others.
    assert_eq!(fleet.chat(0, "quota").await, 200, "falls back");
    assert_eq!(hits(&counted, "quota"), 1);
    fleet
        .until_all(&[1, 2], "sees the bench", PROPAGATION, |h| status_of(h, "up:quota") == "exhausted")
        .await;
    for replica in [1, 2] {
        assert_eq!(fleet.chat(replica, "quota").await, 200);
    }
    assert_eq!(hits(&counted, "quota"), 1, "no other replica called the exhausted target");
    // The skewed replica reads the same reset time: 120 s from the 429, not 90 or 150.
    for replica in 0..3 {
        let health = fleet.health(replica).await;
        let left = target(&health, "up:quota").unwrap()["retry_after"].as_f64().unwrap();
        assert!((115_000.0..=120_500.0).contains(&left), "replica {replica}: {left} ms left of 120 s");
    }

    // A gated target likewise.
    assert_eq!(fleet.chat(0, "flaky").await, 200);
    fleet
        .until_all(&[1, 2], "sees the gate", PROPAGATION, |h| {
            status_of(h, "gate:flaky") == "temporarily_unavailable"
        })
        .await;
    for replica in [1, 2] {
        assert_eq!(fleet.chat(replica, "flaky").await, 200);
    }
    assert_eq!(hits(&counted, "flaky"), 1, "no other replica called the gated target");

    // A circuit opened through one replica is honoured by all (the route's TTL gate is off).
    assert_eq!(fleet.chat(1, "down").await, 200);
    assert_eq!(hits(&counted, "down"), 3, "three failures open the circuit");
    let open = |h: &Value| target(h, "dead:down").is_some_and(|t| t["breaker"] == "open");
    fleet.until_all(&[0, 2], "sees the open circuit", PROPAGATION, open).await;
    for replica in [0, 2] {
        assert_eq!(fleet.chat(replica, "down").await, 200);
    }
    assert_eq!(hits(&counted, "down"), 3, "no other replica called through the open circuit");

    // A reset through one replica reaches all.
    let answer = fleet.reset(2, "up:quota").await;
    assert_eq!(answer["applies_to"], "every replica");
    fleet
        .until_all(&[0, 1, 2], "forgets the bench", PROPAGATION, |h| status_of(h, "up:quota") == "unknown")
        .await;
    assert_eq!(fleet.chat(0, "quota").await, 200);
    assert_eq!(hits(&counted, "quota"), 2, "the reset target is called again");

    // Redis stalled, then killed, then restarted: no client request fails meanwhile.
    let mut statuses = Vec::new();
    redis.stall();
    let degraded = |h: &Value| h["shared_state"]["status"] == "degraded";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        for replica in 0..3 {
            statuses.push(fleet.chat(replica, "default").await);
        }
        let mut all = true;
        for replica in 0..3 {
            all &= degraded(&fleet.health(replica).await);
        }
        if all {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "every replica reports degraded");
    }
    let metrics = fleet.client.get(format!("http://{}/metrics", fleet.replicas[0].1)).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains("switchyard_shared_state_up{backend=\"redis\"} 0"), "{metrics}");
    // Learned while Redis is away: written back once it returns.
    assert_eq!(fleet.chat(0, "flaky-later").await, 200);
    redis.kill();
    for replica in 0..3 {
        statuses.push(fleet.chat(replica, "default").await);
    }
    redis.restart();
    fleet
        .until_all(&[0, 1, 2], "reconnects", Duration::from_secs(15), |h| h["shared_state"]["status"] == "ok")
        .await;
    for replica in 0..3 {
        statuses.push(fleet.chat(replica, "default").await);
    }
    assert!(statuses.iter().all(|s| *s == 200), "a client request failed: {statuses:?}");
    fleet
        .until_all(&[1, 2], "learns what replica 0 learned meanwhile", Duration::from_secs(5), |h| {
            status_of(h, "gate:flaky-later") == "temporarily_unavailable"
        })
        .await;
    // Sharing resumed: a new fact travels as fast as before.
    assert_eq!(fleet.reset(1, "gate:flaky").await["applies_to"], "every replica");
    fleet
        .until_all(&[0, 2], "hears the reset", PROPAGATION, |h| status_of(h, "gate:flaky") == "unknown")
        .await;

    // No secret in any Redis key or value.
    let mut dump = String::new();
    for key in redis.cli(&["--scan"]).lines() {
        dump.push_str(key);
        let value = match redis.cli(&["TYPE", key]).trim() {
            "hash" => redis.cli(&["HGETALL", key]),
            "set" => redis.cli(&["SMEMBERS", key]),
            _ => redis.cli(&["GET", key]),
        };
        dump.push_str(&value);
    }
    assert!(dump.contains("fleet-test:t:gate:flaky-later"), "{dump}");
    for secret in [API_KEY, SPARE_KEY, CLIENT_KEY, ADMIN_KEY] {
        assert!(!dump.contains(secret), "a secret reached Redis: {dump}");
    }
    // The restarted Redis knows a replica once its next heartbeat is written, and a replica
    // lists the others from its next reconciliation: both within the heartbeat's period.
    let every_replica = |h: &Value| h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 3);
    fleet.until_all(&[1], "lists the whole fleet again", Duration::from_secs(15), every_replica).await;
    let url = format!("http://{}", fleet.replicas[1].1);
    let (code, stdout, stderr) = support::run(&["health", "--url", &url, "--key", ADMIN_KEY]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("shared state: redis ok, 3 replicas: "), "{stdout}");
    let (code, stdout, _) = support::run(&["doctor", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("ok, 3 replicas alive"), "{stdout}");
    for ((mut child, _), logs) in fleet.replicas.into_iter().zip(logs) {
        child.kill().unwrap();
        child.wait().unwrap();
        let logs = logs.join().unwrap();
        assert!(logs.contains("shared state degraded"), "{logs}");
        for secret in [API_KEY, SPARE_KEY, CLIENT_KEY, ADMIN_KEY] {
            assert!(!logs.contains(secret), "a secret reached the logs");
        }
    }
}

/// An open circuit every replica may probe, three requests at once, one to each: the fleet
/// sends the failing target one probe, not one per replica (each replica takes its probe
/// before it can hear of another's; Redis lets the first hold it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_is_probed_once_by_the_fleet() {
    let redis = RedisServer::start();
    let (upstream, counted) = start_upstream().await;
    let text = config(upstream, &redis.url()) + "health: { open_for: 300ms }\n";
    let path = support::write_config("fleet-probe.yaml", &text);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(support::serve_with_env(&[], &path, "127.0.0.1:0", &[]).unwrap());
    }
    let fleet = Fleet { replicas, client: reqwest::Client::new() };
    fleet
        .until_all(&[0, 1, 2], "sees three replicas", Duration::from_secs(10), |h| {
            h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == 3)
        })
        .await;
    assert_eq!(fleet.chat(1, "down").await, 200, "falls back");
    assert_eq!(hits(&counted, "down"), 3, "three failures open the circuit");
    // Open everywhere, and every replica's wait over (the others' a head start longer).
    let may_probe = |h: &Value| {
        target(h, "dead:down").is_some_and(|t| t["breaker"] == "open" && t["probe_in"].as_f64() == Some(0.0))
    };
    fleet.until_all(&[0, 1, 2], "may probe", Duration::from_secs(5), may_probe).await;
    let (a, b, c) = tokio::join!(fleet.chat(0, "down"), fleet.chat(1, "down"), fleet.chat(2, "down"));
    assert_eq!((a, b, c), (200, 200, 200), "each falls back");
    assert_eq!(hits(&counted, "down"), 4, "one probe for the fleet");
    for (mut child, _) in fleet.replicas {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn a_bad_state_section_is_refused_naming_the_key() {
    let path = support::write_config(
        "fleet-bad.yaml",
        "providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\nstate: { redis: 'http://:pw-secret@host', prefix: 'a b' }\n",
    );
    let (code, _, stderr) = support::run(&["config", "check", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(stderr.contains("state.redis") && stderr.contains("not a Redis URL"), "{stderr}");
    assert!(!stderr.contains("pw-secret"), "{stderr}");
    let path = support::write_config(
        "fleet-env.yaml",
        "providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\nstate: { redis: env://FLEET_REDIS_UNSET }\n",
    );
    // An unset variable is a warning for `config check` (CI has no production secrets), and
    // an error with --strict, as for serve and doctor.
    let (code, _, stderr) = support::run(&["config", "check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("state.redis: environment variable `FLEET_REDIS_UNSET` is not set"),
        "{stderr}"
    );
    let (code, _, stderr) = support::run(&["config", "check", "--strict", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(stderr.contains("state.redis: environment variable `FLEET_REDIS_UNSET` is not set"), "{stderr}");
    let path = support::write_config(
        "fleet-prefix.yaml",
        "providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\nstate: { redis: 'redis://127.0.0.1:1', prefix: 'a b' }\n",
    );
    let (code, _, stderr) = support::run(&["config", "check", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(stderr.contains("state.prefix"), "{stderr}");
}

#[test]
fn doctor_reports_an_unreachable_redis_with_its_password_masked() {
    let path = support::write_config(
        "fleet-doctor.yaml",
        "providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\nstate: { redis: 'redis://:doctor-secret@127.0.0.1:1/0' }\n",
    );
    let (code, stdout, stderr) = support::run(&["doctor", "--config", path.to_str().unwrap()]);
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("shared state: redis redis://:****@127.0.0.1:1/0"), "{stdout}");
    assert!(stdout.contains("unreachable"), "{stdout}");
    assert!(!stdout.contains("doctor-secret") && !stderr.contains("doctor-secret"));
}

#[tokio::test]
async fn a_replica_shares_state_through_a_tls_redis() {
    let redis = RedisServer::start_tls();
    let (upstream, _) = start_upstream().await;
    let path = support::write_config("fleet-tls.yaml", &config(upstream, &redis.url()));
    let ca = redis.ca_file().unwrap();
    let trust = [("SSL_CERT_FILE", ca.to_str().unwrap())];
    let replica = support::serve_with_env(&trust, &path, "127.0.0.1:0", &[]).unwrap();
    let fleet = Fleet { replicas: vec![replica], client: reqwest::Client::new() };
    fleet
        .until_all(&[0], "connects over TLS", Duration::from_secs(10), |h| {
            h["shared_state"]["status"] == "ok"
        })
        .await;
    assert_eq!(fleet.chat(0, "quota").await, 200);
    // Written off the request path: within a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut written = String::new();
    while std::time::Instant::now() < deadline && written.trim() != "exhausted" {
        written = redis.cli(&["HGET", "fleet-test:t:up:quota", "st"]);
    }
    assert_eq!(written.trim(), "exhausted", "the bench reached Redis over TLS");
    let health = fleet.health(0).await;
    assert!(health["shared_state"]["url"].as_str().unwrap().starts_with("rediss://127.0.0.1:"), "{health}");
    for (child, _) in fleet.replicas {
        support::stop(child);
    }
}
