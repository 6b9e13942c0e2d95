//! Three `switchyard serve` replicas pacing one account through one real `redis-server`, in
//! front of an upstream that enforces the account's allowance and answers 429 beyond it.
//! Shared, a fan-out spread over the three meets no 429; paced alone (the control), the
//! same fan-out sends three times the allowance and meets the wall. Likewise with only the
//! allowance the provider's headers state. And with Redis stalled mid fan-out, no request
//! fails and each replica sends at most its share.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_state::testing::RedisServer;

const REPLICAS: usize = 3;

/// The account's allowance as configured: 1200 a minute, 20 a second.
const RPM: f64 = 1200.0;

/// How the upstream enforces the account's allowance.
#[derive(Debug, Clone, Copy)]
enum Enforce {
    /// A token bucket refilling `per_sec` and holding `burst`; no rate-limit headers.
    Bucket { per_sec: f64, burst: f64 },
    /// `allowance` per fixed `window`, stated in OpenAI's `x-ratelimit-*-requests` headers.
    Window { allowance: u32, window: Duration },
}

#[derive(Debug)]
struct Account {
    enforce: Enforce,
    level: f64,
    at: Option<Instant>,
    used: u32,
    /// Each admitted request: which replica's key sent it, and when.
    admitted: Vec<(usize, Instant)>,
    limited: u32,
}

impl Account {
    fn new(enforce: Enforce) -> Self {
        let level = match enforce {
            Enforce::Bucket { burst, .. } => burst,
            Enforce::Window { .. } => 0.0,
        };
        Self { enforce, level, at: None, used: 0, admitted: Vec::new(), limited: 0 }
    }

    /// Counts one request; whether it is allowed, and the headers to answer with.
    fn admit(&mut self, replica: usize) -> (bool, HeaderMap) {
        let now = Instant::now();
        let mut headers = HeaderMap::new();
        let allowed = match self.enforce {
            Enforce::Bucket { per_sec, burst } => {
                let at = *self.at.get_or_insert(now);
                self.level = (self.level + now.duration_since(at).as_secs_f64() * per_sec).min(burst);
                self.at = Some(now);
                if self.level >= 1.0 {
                    self.level -= 1.0;
                    true
                } else {
                    let wait = ((1.0 - self.level) / per_sec).ceil().max(1.0);
                    headers.insert("retry-after", HeaderValue::from(wait as u64));
                    false
                }
            }
            Enforce::Window { allowance, window } => {
                let start = *self.at.get_or_insert(now);
                if now.duration_since(start) >= window {
                    self.at = Some(now);
                    self.used = 0;
                }
                let start = self.at.unwrap();
                let reset = window.saturating_sub(now.duration_since(start));
                let allowed = self.used < allowance;
                if allowed {
                    self.used += 1;
                }
                headers.insert("x-ratelimit-limit-requests", HeaderValue::from(allowance));
                headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(allowance - self.used));
                let reset = format!("{}ms", reset.as_millis().max(1));
                headers.insert("x-ratelimit-reset-requests", HeaderValue::from_str(&reset).unwrap());
                if !allowed {
                    headers.insert("retry-after", HeaderValue::from(1));
                }
                allowed
            }
        };
        if allowed {
            self.admitted.push((replica, now));
        } else {
            self.limited += 1;
        }
        (allowed, headers)
    }
}

type Shared = Arc<Mutex<Account>>;

/// The replica a request came from, told by the key its config gives it.
fn replica_of(headers: &HeaderMap) -> usize {
    let key = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    key.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX)
}

async fn upstream(State(account): State<Shared>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let (allowed, headers) = account.lock().unwrap().admit(replica_of(&headers));
    if !allowed {
        let body = json!({ "error": { "message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded" } });
        return (StatusCode::TOO_MANY_REQUESTS, headers, Json(body)).into_response();
    }
    let answer = json!({
        "id": "chatcmpl-pace", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    });
    (headers, Json(answer)).into_response()
}

async fn start_upstream(enforce: Enforce) -> (SocketAddr, Shared) {
    let account = Arc::new(Mutex::new(Account::new(enforce)));
    let app = axum::Router::new().route("/v1/chat/completions", post(upstream)).with_state(account.clone());
    let addr = support::serve_router(app).await;
    (addr, account)
}

struct Fleet {
    replicas: Vec<(Child, String)>,
    logs: Vec<std::thread::JoinHandle<String>>,
    client: reqwest::Client,
}

impl Fleet {
    /// Three replicas in front of `upstream` with the provider's `limits`, sharing `redis`
    /// (or, with `None`, each pacing alone).
    /// `name` names its config files (tests run side by side in one process).
    async fn start(name: &str, upstream: SocketAddr, limits: &str, redis: Option<&str>) -> Self {
        let mut replicas = Vec::new();
        for replica in 0..REPLICAS {
            let state = redis
                .map_or(String::new(), |url| format!("state: {{ redis: '{url}', prefix: pace-test }}\n"));
            let config = format!(
                "providers:
  up: {{ kind: openai, base_url: 'http://{upstream}/v1', api_key: sk-pace-account-{replica}, limits: {limits} }}
routes:
  default: {{ targets: [up:model-test], retry: {{ max_attempts: 1 }}, health_gate: false }}
{state}"
            );
            let path = support::write_config(&format!("pace-{name}-{replica}.yaml"), &config);
            replicas.push(support::serve(&path, &[]));
        }
        let logs = support::read_logs(&mut replicas);
        let fleet = Self { replicas, logs, client: reqwest::Client::new() };
        if redis.is_some() {
            for replica in 0..REPLICAS {
                fleet
                    .until(replica, "connects and sees the fleet", |h| {
                        h["shared_state"]["status"] == "ok"
                            && h["shared_state"]["replicas"].as_array().is_some_and(|r| r.len() == REPLICAS)
                    })
                    .await;
            }
        }
        fleet
    }

    async fn health(&self, replica: usize) -> Value {
        let url = format!("http://{}/admin/health", self.replicas[replica].1);
        self.client.get(url).send().await.unwrap().json().await.unwrap()
    }

    async fn until(&self, replica: usize, what: &str, check: impl Fn(&Value) -> bool) {
        let start = Instant::now();
        loop {
            let health = self.health(replica).await;
            if check(&health) {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "replica {replica}: {what}: {health}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn chat(&self, replica: usize) -> u16 {
        let url = format!("http://{}/v1/chat/completions", self.replicas[replica].1);
        let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] });
        self.client.post(url).json(&body).send().await.unwrap().status().as_u16()
    }

    /// `per_replica` requests through each replica, `concurrency` at a time each; every
    /// client status.
    async fn fan_out(&self, per_replica: usize, concurrency: usize) -> Vec<u16> {
        let statuses = Arc::new(Mutex::new(Vec::new()));
        let mut lanes = Vec::new();
        for replica in 0..REPLICAS {
            for lane in 0..concurrency {
                let count = per_replica / concurrency + usize::from(lane < per_replica % concurrency);
                let statuses = statuses.clone();
                lanes.push(async move {
                    for _ in 0..count {
                        let status = self.chat(replica).await;
                        statuses.lock().unwrap().push(status);
                    }
                });
            }
        }
        futures_util::future::join_all(lanes).await;
        std::mem::take(&mut *statuses.lock().unwrap())
    }

    fn stop(self) -> Vec<String> {
        for (child, _) in self.replicas {
            support::stop_piped(child);
        }
        self.logs.into_iter().map(|log| log.join().unwrap()).collect()
    }
}

/// The fleet's documented bound over the bucket: its slices, one per replica.
fn slices() -> f64 {
    REPLICAS as f64 * switchyard_pacing::fleet::slice_size(RPM, REPLICAS)
}

/// The account as the upstream enforces it: 20 a second, and a burst of the fleet's bucket
/// (one second's share, 20) plus the slices the replicas may hold (3 × 12).
fn allowance() -> Enforce {
    let per_sec = RPM / 60.0;
    Enforce::Bucket { per_sec, burst: per_sec + slices() }
}

const LIMITS: &str = "{ requests_per_minute: 1200 }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_over_three_replicas_sharing_the_bucket_meets_no_429_and_alone_they_meet_many() {
    let redis = RedisServer::start();
    let (upstream, account_state) = start_upstream(allowance()).await;
    let fleet = Fleet::start("rpm-shared", upstream, LIMITS, Some(&redis.url())).await;
    let statuses = fleet.fan_out(40, 4).await;
    let health = fleet.health(0).await;
    let url = format!("http://{}", fleet.replicas[2].1);
    let (code, shown, stderr) = support::run(&["health", "--url", &url]);
    assert_eq!(code, 0, "{stderr}");
    assert!(shown.contains("shared, 3 replicas: bucket "), "{shown}");
    let logs = fleet.stop();
    // What the fleet keeps of the account: its bucket under the provider's id, no key.
    let mut dump = String::new();
    for key in redis.cli(&["--scan", "--pattern", "pace-test:pace:*"]).lines() {
        dump.push_str(key);
        dump.push_str(&redis.cli(&["HGETALL", key]));
    }
    assert!(dump.contains("pace-test:pace:up"), "{dump}");
    for text in logs.iter().chain([&dump]) {
        assert!(!text.contains("sk-pace-account"), "a key left the gateway: {text}");
    }
    let (limited, admitted) = {
        let account = account_state.lock().unwrap();
        (account.limited, account.admitted.len())
    };
    assert_eq!(limited, 0, "no 429 reached the upstream");
    assert_eq!(admitted, 120);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let lane = &health["pacing"][0]["fleet"];
    assert_eq!(lane["mode"], "shared", "{lane}");
    assert_eq!(lane["replicas"], 3, "{lane}");
    assert!(lane["bucket"]["requests"].as_f64().is_some(), "the fleet's bucket level: {lane}");
    assert!(lane["lease"]["requests"].as_f64().is_some(), "this replica's lease: {lane}");

    // The control: the same fan-out, each replica pacing alone at the account's allowance.
    let (upstream, account_state) = start_upstream(allowance()).await;
    let fleet = Fleet::start("rpm-alone", upstream, LIMITS, None).await;
    let statuses = fleet.fan_out(40, 4).await;
    fleet.stop();
    let account = account_state.lock().unwrap();
    assert!(account.limited > 0, "alone, the replicas send three times the allowance: {account:?}");
    assert!(statuses.contains(&429));
}

#[test]
fn doctor_says_what_the_fleet_shares_and_what_each_replica_keeps() {
    let redis = RedisServer::start();
    let config = format!(
        "providers:
  up: {{ kind: simulated, limits: {{ requests_per_minute: 600, max_concurrent: 8, min_interval: 10ms }} }}
routes:
  default: {{ targets: [up:m] }}
state: {{ redis: '{}' }}
",
        redis.url()
    );
    let path = support::write_config("pace-doctor.yaml", &config);
    let (code, stdout, stderr) = support::run(&["doctor", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("requests/tokens per minute, header budgets and 429 holds are shared by the fleet"),
        "{stdout}"
    );
    assert!(
        stdout.contains("max_concurrent and min_interval are per replica: divide them by the fleet size"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_stated_allowance_is_one_budget_for_the_fleet() {
    let stated = Enforce::Window { allowance: 10, window: Duration::from_millis(500) };
    let limits = "{ respect_headers: true }";
    let redis = RedisServer::start();
    let (upstream, account_state) = start_upstream(stated).await;
    let fleet = Fleet::start("headers-shared", upstream, limits, Some(&redis.url())).await;
    // One request through each replica learns the allowance.
    for replica in 0..REPLICAS {
        assert_eq!(fleet.chat(replica).await, 200);
    }
    let statuses = fleet.fan_out(20, 3).await;
    let health = fleet.health(1).await;
    fleet.stop();
    let limited = account_state.lock().unwrap().limited;
    assert_eq!(limited, 0, "no 429 reached the upstream: {:?}", account_state.lock().unwrap());
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let headers = &health["pacing"][0]["fleet"]["headers"];
    assert_eq!(headers["requests"]["limit"], 10, "the shared header budget: {health}");

    // The control: each replica spends the stated allowance as if it were alone.
    let (upstream, account_state) = start_upstream(stated).await;
    let fleet = Fleet::start("headers-alone", upstream, limits, None).await;
    for replica in 0..REPLICAS {
        assert_eq!(fleet.chat(replica).await, 200);
    }
    fleet.fan_out(20, 3).await;
    fleet.stop();
    assert!(account_state.lock().unwrap().limited > 0, "alone, they meet 429s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stalled_mid_fan_out_no_request_fails_and_each_replica_sends_its_share() {
    let redis = RedisServer::start();
    let (upstream, account_state) = start_upstream(allowance()).await;
    let fleet = Fleet::start("stall", upstream, LIMITS, Some(&redis.url())).await;
    let fan_out = fleet.fan_out(60, 3);
    let stall = async {
        // A second into the fan-out, Redis stops answering (SIGSTOP: connections hang).
        loop {
            if account_state.lock().unwrap().admitted.len() >= 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        redis.stall();
        Instant::now()
    };
    let (statuses, stalled_at) = tokio::join!(fan_out, stall);
    let ended = Instant::now();
    for replica in 0..REPLICAS {
        let health = fleet.health(replica).await;
        assert_eq!(health["pacing"][0]["fleet"]["mode"], "degraded", "replica {replica}: {health}");
        assert_eq!(health["shared_state"]["status"], "degraded");
    }
    redis.resume();
    for replica in 0..REPLICAS {
        fleet
            .until(replica, "returns to the shared bucket", |h| h["pacing"][0]["fleet"]["mode"] == "shared")
            .await;
    }
    fleet.stop();
    assert!(statuses.iter().all(|s| *s == 200), "no request failed: {statuses:?}");
    let account = account_state.lock().unwrap();
    assert_eq!(account.limited, 0, "{account:?}");
    // After the stall, each replica at most its share: a third of the burst and of the rate,
    // plus the slice it held when Redis stopped.
    let stretch = ended.duration_since(stalled_at).as_secs_f64();
    let per_sec = RPM / 60.0;
    let slice = switchyard_pacing::fleet::slice_size(RPM, REPLICAS);
    let share = per_sec / REPLICAS as f64 * (1.0 + stretch) + slice + 1.0;
    for replica in 0..REPLICAS {
        let sent = account.admitted.iter().filter(|(r, at)| *r == replica && *at > stalled_at).count();
        assert!(
            sent as f64 <= share,
            "replica {replica}: {sent} in {stretch:.2}s after the stall, share {share:.1}"
        );
        assert!(sent > 0, "replica {replica} carried on");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_gracefully_gives_back_the_slice_it_did_not_spend() {
    let redis = RedisServer::start();
    let (upstream, _) = start_upstream(Enforce::Bucket { per_sec: 1e6, burst: 1e6 }).await;
    // 60,000 a minute: 1,000 a second, a burst of 1,000, slices of 600 (1%).
    let config = format!(
        "providers:
  up: {{ kind: openai, base_url: 'http://{upstream}/v1', api_key: sk-pace-account-0, limits: {{ requests_per_minute: 60000 }} }}
routes:
  default: {{ targets: [up:model-test], retry: {{ max_attempts: 1 }} }}
state: {{ redis: '{}', prefix: pace-return }}
",
        redis.url()
    );
    let path = support::write_config("pace-return.yaml", &config);
    let (mut child, addr) = support::serve(&path, &[]);
    let client = reqwest::Client::new();
    let health = || async {
        let url = format!("http://{addr}/admin/health");
        client.get(url).send().await.unwrap().json::<Value>().await.unwrap()
    };
    let start = Instant::now();
    while health().await["pacing"][0]["fleet"]["mode"] != "shared" {
        assert!(start.elapsed() < Duration::from_secs(10), "the replica connects");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] });
    let url = format!("http://{addr}/v1/chat/completions");
    assert_eq!(client.post(&url).json(&body).send().await.unwrap().status(), 200);
    let lease = health().await["pacing"][0]["fleet"]["lease"]["requests"].as_f64().unwrap();
    assert_eq!(lease, 599.0, "a slice of 600, one spent");
    // The requests bucket's level (`l0@<capacity>`: a bucket for each capacity).
    let level = || {
        let hash = redis.cli(&["HGETALL", "pace-return:pace:up"]);
        let lines: Vec<&str> = hash.lines().map(str::trim).collect();
        let at = lines.iter().position(|line| line.starts_with("l0@")).expect("the requests bucket");
        lines[at + 1].parse::<f64>().unwrap()
    };
    let leased_level = level();
    assert!(leased_level <= 1000.0 - 600.0 + 5.0, "the fleet's bucket lent the slice: {leased_level}");

    let status =
        std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let returned = level();
    assert!(returned >= leased_level + 599.0 - 1e-6 || returned >= 999.0, "{leased_level} → {returned}");
    let members = redis.cli(&["SMEMBERS", "pace-return:replicas"]);
    assert!(members.trim().is_empty(), "and left the membership: {members}");
}
