//! Client keys' limits and budgets held by a fleet: three `switchyard serve` replicas sharing
//! one real `redis-server`, in front of an upstream that counts each key's calls. A fan-out of
//! one key over the three is admitted within the key's minute (plus the slices in hand), a
//! budget spent at one replica is refused at the others, and Redis holds the keys only as
//! hashes.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use switchyard_state::testing::RedisServer;

const REPLICAS: usize = 3;
const ADMIN: &str = "gw-admin-key-fleet-0001";
const RATED: &str = "gw-rated-key-secret-0002";
const SPENDER: &str = "gw-spender-key-secret-0003";
/// The rated key's minute: its bucket holds 60 and refills one a second.
const RPM: usize = 60;

async fn start_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                Json(json!({
                    "id": "chatcmpl-fleet", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{ "index": 0, "message": { "role": "assistant", "content": "ok" }, "finish_reason": "stop" }],
                    "usage": { "prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10 }
                }))
            }
        }),
    );
    let addr = support::serve_router(app).await;
    (addr, calls)
}

fn config(upstream: SocketAddr, redis: &str) -> String {
    format!(
        "providers:
  up: {{ kind: openai, base_url: 'http://{upstream}/v1', api_key: sk-upstream-fleet, prices: {{ m: {{ input: 1000000, output: 0 }} }} }}
routes:
  default: {{ targets: [up:m], retry: {{ max_attempts: 1 }}, health_gate: false }}
state: {{ redis: '{redis}', prefix: keys-test }}
gateway:
  admin_key: {ADMIN}
  keys:
    - {{ name: rated, key: {RATED}, limits: {{ requests_per_minute: {RPM} }} }}
    - {{ name: spender, key: {SPENDER}, budget: {{ usd: 25, per: day }} }}
"
    )
}

struct Fleet {
    replicas: Vec<(Child, String)>,
    client: reqwest::Client,
}

impl Fleet {
    /// Three replicas of `config` named `name` (tests run side by side in one process).
    async fn start(name: &str, upstream: SocketAddr, redis: &str) -> Self {
        let path = support::write_config(&format!("keys-fleet-{name}.yaml"), &config(upstream, redis));
        let replicas = (0..REPLICAS).map(|_| support::serve(&path, &[])).collect();
        let fleet = Self { replicas, client: reqwest::Client::new() };
        for replica in 0..REPLICAS {
            support::until("the replica sees the fleet", Duration::from_secs(10), async || {
                let health = fleet.admin(replica, "/admin/health").await;
                let seen = health["shared_state"]["replicas"].as_array().map_or(0, Vec::len);
                if health["shared_state"]["status"] == "ok" && seen == REPLICAS {
                    Ok(())
                } else {
                    Err(health.to_string())
                }
            })
            .await;
        }
        fleet
    }

    async fn admin(&self, replica: usize, path: &str) -> Value {
        let url = format!("http://{}{path}", self.replicas[replica].1);
        self.client.get(url).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap()
    }

    /// A chat through `replica` with `key`: the status and the error code.
    async fn chat(&self, replica: usize, key: &str) -> (u16, String) {
        let url = format!("http://{}/v1/chat/completions", self.replicas[replica].1);
        let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] });
        let response = self.client.post(url).bearer_auth(key).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        (status, body["error"]["code"].as_str().unwrap_or_default().to_owned())
    }

    fn stop(self) -> Vec<String> {
        self.replicas.into_iter().map(|(child, _)| support::stop(child)).collect()
    }
}

impl Fleet {
    /// `2 × RPM` requests of the rated key spread over the replicas, eight at a time: each
    /// status and error code, and the seconds it took.
    async fn fan_out(&self) -> (Vec<(u16, String)>, f64) {
        let started = std::time::Instant::now();
        let lanes = (0..8).map(|lane| async move {
            let mut statuses = Vec::new();
            for i in 0..(2 * RPM / 8) {
                statuses.push(self.chat((lane + i) % REPLICAS, RATED).await);
            }
            statuses
        });
        let statuses = futures_util::future::join_all(lanes).await.into_iter().flatten().collect();
        (statuses, started.elapsed().as_secs_f64())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stalled_each_replica_admits_its_share_of_a_keys_minute() {
    let redis = RedisServer::start();
    let (upstream, calls) = start_upstream().await;
    let fleet = Fleet::start("stalled", upstream, &redis.url()).await;
    redis.stall();
    for replica in 0..REPLICAS {
        support::until("the replica sees Redis is away", Duration::from_secs(10), async || {
            let health = fleet.admin(replica, "/admin/health").await;
            if health["shared_state"]["status"] == "degraded" { Ok(()) } else { Err(health.to_string()) }
        })
        .await;
    }
    let (statuses, elapsed) = fleet.fan_out().await;
    redis.resume();
    fleet.stop();
    let admitted = statuses.iter().filter(|(status, _)| *status == 200).count();
    // Each replica's share: a third of the minute, and a third of the refill meanwhile.
    let bound = RPM as f64 + elapsed;
    assert!(admitted as f64 <= bound, "{admitted} admitted in {elapsed:.1}s, bound {bound}");
    assert!(admitted >= RPM - 5, "each replica spends its share: {admitted}");
    assert!(
        statuses.iter().all(|(s, code)| *s == 200 || (*s == 429 && code == "key_rate_limited")),
        "{statuses:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_limits_and_budget_hold_for_the_fleet_and_redis_holds_no_key() {
    let redis = RedisServer::start();
    let (upstream, calls) = start_upstream().await;
    let fleet = Fleet::start("shared", upstream, &redis.url()).await;

    // Twice the key's minute, spread over the three replicas, eight at a time.
    let started = std::time::Instant::now();
    let fleet_ref = &fleet;
    let lanes = (0..8).map(|lane| async move {
        let mut statuses = Vec::new();
        for i in 0..(2 * RPM / 8) {
            statuses.push(fleet_ref.chat((lane + i) % REPLICAS, RATED).await);
        }
        statuses
    });
    let statuses: Vec<(u16, String)> =
        futures_util::future::join_all(lanes).await.into_iter().flatten().collect();
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = statuses.iter().filter(|(status, _)| *status == 200).count();
    // The bucket's minute, what it refilled meanwhile, and a slice in hand per replica.
    let bound = RPM as f64 + elapsed + REPLICAS as f64;
    assert!(admitted as f64 <= bound, "{admitted} admitted in {elapsed:.1}s, bound {bound}");
    assert!(admitted >= RPM - 5, "the fleet spends the key's minute: {admitted}");
    assert!(
        statuses.iter().all(|(s, code)| *s == 200 || (*s == 429 && code == "key_rate_limited")),
        "{statuses:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), admitted, "no provider call for a refusal");

    // $10 an answer, $25 a day: spent at replica 0, refused at the others.
    let before = calls.load(Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(fleet.chat(0, SPENDER).await.0, 200);
    }
    assert_eq!(fleet.chat(0, SPENDER).await, (429, "budget_exceeded".to_owned()));
    // A replica that has not read the key's spend lately (here: ever) reads it before it admits.
    assert_eq!(fleet.chat(1, SPENDER).await, (429, "budget_exceeded".to_owned()), "at once, no wait");
    // One that never served the key shows the fleet's spend at its first look.
    let keys = fleet.admin(2, "/admin/keys").await;
    assert_eq!(keys["keys"][1]["budget"]["spent_usd"], 30.0, "{keys}");
    for replica in 1..REPLICAS {
        support::until("the replica sees the fleet's spend", Duration::from_secs(10), async || {
            let keys = fleet.admin(replica, "/admin/keys").await;
            let spent = keys["keys"][1]["budget"]["spent_usd"].as_f64().unwrap_or_default();
            if spent >= 30.0 { Ok(()) } else { Err(keys.to_string()) }
        })
        .await;
        assert_eq!(fleet.chat(replica, SPENDER).await, (429, "budget_exceeded".to_owned()));
    }
    assert_eq!(calls.load(Ordering::SeqCst) - before, 3);
    let keys = fleet.admin(0, "/admin/keys").await;
    assert_eq!(keys["keys"][0]["usage"]["scope"], "replica", "a replica's counts say whose: {keys}");

    let logs = fleet.stop();
    let mut dump = String::new();
    for key in redis.cli(&["--scan", "--pattern", "*"]).lines() {
        dump.push_str(key);
        dump.push('\n');
        let kind = redis.cli(&["TYPE", key]);
        let value = match kind.trim() {
            "string" => redis.cli(&["GET", key]),
            "hash" => redis.cli(&["HGETALL", key]),
            "zset" => redis.cli(&["ZRANGE", key, "0", "-1"]),
            "set" => redis.cli(&["SMEMBERS", key]),
            "list" => redis.cli(&["LRANGE", key, "0", "-1"]),
            _ => String::new(),
        };
        dump.push_str(&value);
    }
    assert!(dump.contains("keys-test:spend:"), "{dump}");
    assert!(dump.contains("keys-test:pace:key:"), "{dump}");
    for text in logs.iter().chain([&dump]) {
        for secret in [RATED, SPENDER, "secret"] {
            assert!(!text.contains(secret), "a key left the gateway: {text}");
        }
    }
}

/// The fleet's spend of every key as Redis holds it: the sum of every replica's total.
fn fleet_spend(redis: &RedisServer) -> f64 {
    let mut total = 0.0;
    for key in redis.cli(&["--scan", "--pattern", "keys-test:spend:*:by"]).lines() {
        let fields = redis.cli(&["HVALS", key]);
        total += fields.lines().map(|v| v.trim().parse::<f64>().unwrap()).sum::<f64>();
    }
    total
}

impl Fleet {
    /// Asks each replica for its keys (which reads the fleet's spend again) until Redis holds
    /// `usd` for the fleet.
    async fn until_redis_holds(&self, redis: &RedisServer, usd: f64) {
        support::until("Redis holds the fleet's spend", Duration::from_secs(15), async || {
            for replica in 0..REPLICAS {
                self.admin(replica, "/admin/keys").await;
            }
            let held = fleet_spend(redis);
            if (held - usd).abs() < 1e-9 { Ok(()) } else { Err(format!("Redis holds {held}")) }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_first_used_while_redis_stalls_waits_one_redis_call_at_most() {
    let redis = RedisServer::start();
    let (upstream, _) = start_upstream().await;
    let fleet = Fleet::start("first-use-stalled", upstream, &redis.url()).await;
    // Stalled before either key was used: no connection made for its spend, no slice leased,
    // and the link not yet degraded. The store's timeout is 250 ms.
    redis.stall();
    for key in [SPENDER, RATED] {
        for call in 0..3 {
            let started = std::time::Instant::now();
            assert_eq!(fleet.chat(0, key).await.0, 200);
            let took = started.elapsed();
            assert!(
                took < Duration::from_millis(500),
                "call {call} of {key} waited {took:?} on a stalled Redis"
            );
        }
    }
    redis.resume();
    fleet.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_charged_while_redis_stalled_reaches_the_fleet_once_when_redis_answers() {
    let redis = RedisServer::start();
    let (upstream, _) = start_upstream().await;
    let fleet = Fleet::start("spend-stalled", upstream, &redis.url()).await;
    redis.stall();
    support::until("the replica sees Redis is away", Duration::from_secs(10), async || {
        let health = fleet.admin(0, "/admin/health").await;
        if health["shared_state"]["status"] == "degraded" { Ok(()) } else { Err(health.to_string()) }
    })
    .await;
    assert_eq!(fleet.chat(0, SPENDER).await.0, 200);
    redis.resume();
    // No further charge: the replica writes what it spent by itself, and a write that was
    // waiting in the stalled server's socket and its retry count once.
    fleet.until_redis_holds(&redis, 10.0).await;
    support::until("another replica sees the spend", Duration::from_secs(10), async || {
        let keys = fleet.admin(1, "/admin/keys").await;
        let spent = keys["keys"][1]["budget"]["spent_usd"].as_f64().unwrap_or_default();
        if (spent - 10.0).abs() < 1e-9 { Ok(()) } else { Err(keys.to_string()) }
    })
    .await;
    fleet.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_is_given_the_fleets_spend_again_by_the_replicas() {
    let mut redis = RedisServer::start();
    let (upstream, _) = start_upstream().await;
    let fleet = Fleet::start("spend-restarted", upstream, &redis.url()).await;
    for _ in 0..2 {
        assert_eq!(fleet.chat(0, SPENDER).await.0, 200);
    }
    fleet.until_redis_holds(&redis, 20.0).await;
    assert_eq!(fleet.chat(1, SPENDER).await.0, 200);
    fleet.until_redis_holds(&redis, 30.0).await;
    redis.restart();
    // Nothing asks the replicas (no request, no /admin/keys): they write it back by themselves,
    // else a replica started now would find the budget unspent.
    support::until("Redis holds the spend again", Duration::from_secs(15), async || {
        let held = fleet_spend(&redis);
        if (held - 30.0).abs() < 1e-9 { Ok(()) } else { Err(format!("Redis holds {held}")) }
    })
    .await;
    // A replica that reads the fleet's spend now (a read is in the background, 200 ms apart)
    // finds all of it.
    support::until("the third replica sees the fleet's spend", Duration::from_secs(10), async || {
        let keys = fleet.admin(2, "/admin/keys").await;
        let spent = keys["keys"][1]["budget"]["spent_usd"].as_f64().unwrap_or_default();
        if (spent - 30.0).abs() < 1e-9 { Ok(()) } else { Err(keys.to_string()) }
    })
    .await;
    fleet.stop();
}

#[test]
fn doctor_says_what_the_fleet_shares_of_a_keys_limits() {
    let redis = RedisServer::start();
    let upstream: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let path = support::write_config("keys-fleet-doctor.yaml", &config(upstream, &redis.url()));
    let (code, stdout, stderr) = support::run(&["doctor", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("key rated: requests_per_minute 60"), "{stdout}");
    assert!(
        stdout.contains("keys: requests/tokens per minute and budgets are the fleet's; max_concurrent is split among the replicas"),
        "{stdout}"
    );
    assert!(!stdout.contains(RATED) && !stdout.contains(SPENDER), "{stdout}");
}
