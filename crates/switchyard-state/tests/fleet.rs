//! The rules only a fleet has: merges of writes that crossed, lost subscriptions, Redis going
//! away and coming back, membership, and no secret in Redis. Each runs against a real
//! `redis-server` on a free loopback port.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{PROPAGATION, Replica, error, eventually, is_skip, keys, redis_replica, skip_until, target};
use switchyard::ErrorKind;
use switchyard::events::{EventBus, EventKind};
use switchyard::health::{Gate, HealthBoard};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

/// How long a replica may take to notice Redis left or returned: a few reconciliation periods.
const OUTAGE: Duration = Duration::from_secs(6);

/// A replica whose link has not started: it learns alone until [`Replica::store`]`.start()`.
fn lagging(server: &RedisServer, id: &str) -> Replica {
    let mut state = StateSettings::new(server.url());
    state.replica = id.to_owned();
    let store = Arc::new(RedisStore::new(state).expect("valid settings"));
    Replica { board: HealthBoard::with_store(support::settings(), store.clone()), store: Some(store) }
}

fn near(a: Option<tokio::time::Instant>, b: Option<tokio::time::Instant>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.max(b) - a.min(b) <= Duration::from_millis(50))
}

#[tokio::test]
async fn a_shorter_rest_learned_apart_never_shortens_the_fleet_s_longer_one() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(60))));
    let long = skip_until(&a.gate(&t, &k));
    // c learns of a shorter rest before it has heard of a's, then writes it.
    let c = lagging(&server, "c");
    c.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(2))));
    c.store().start();
    eventually("c takes the fleet's longer rest", PROPAGATION * 8, || {
        near(skip_until(&c.gate(&t, &k)), long)
    })
    .await;
    assert!(near(skip_until(&a.gate(&t, &k)), long), "a keeps its longer rest");
}

#[tokio::test]
async fn a_stale_success_does_not_clear_a_newer_bench() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(600))));
    // c's success recovered from nothing it knew of: it must not clear a's bench.
    let c = lagging(&server, "c");
    c.succeed(&t, &k, 0);
    assert!(!is_skip(&c.gate(&t, &k)));
    c.store().start();
    eventually("c learns of the bench instead", PROPAGATION * 8, || {
        matches!(c.gate(&t, &k), Gate::Skip { exhausted: true, .. })
    })
    .await;
    assert!(matches!(a.gate(&t, &k), Gate::Skip { exhausted: true, .. }), "a's bench stands");
    let b = redis_replica(&server, "b", |_| {}).await;
    assert!(is_skip(&b.gate(&t, &k)), "a replica starting now sees the bench");
}

#[tokio::test]
async fn a_killed_subscription_is_noticed_and_resynced() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    // b reconciles once an hour: only noticing the lost subscription can bring it the change.
    let b = redis_replica(&server, "b", |s| s.reconcile_every = Duration::from_secs(3_600)).await;
    let killed = server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed.trim().parse::<u32>().is_ok_and(|n| n >= 2), "killed the subscriptions: {killed}");
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, None));
    eventually("b resubscribes and resyncs", PROPAGATION * 4, || is_skip(&b.gate(&t, &k))).await;
    a.succeed(&t, &k, 0);
    eventually("b hears changes again", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
}

#[tokio::test]
async fn what_a_replica_learned_while_redis_was_down_reaches_the_others_after_it_returns() {
    let mut server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let bus = EventBus::new(16);
    let mut events = bus.subscribe();
    a.store().publish_events_to(bus);
    server.kill();
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(600))));
    assert!(is_skip(&a.gate(&t, &k)), "a carries on from its own memory at once");
    let store = a.store();
    eventually("a reports degraded", OUTAGE, || store.status().status == "degraded").await;
    assert!(store.status().pending_writes >= 1, "a keeps what it learned: {:?}", store.status());
    assert!(!is_skip(&b.gate(&t, &k)), "b could not have heard");
    server.restart();
    eventually("b learns what a learned while Redis was down", OUTAGE, || is_skip(&b.gate(&t, &k))).await;
    eventually("a reports ok", OUTAGE, || store.status().status == "ok").await;
    let names: Vec<&str> = events.drain().iter().map(|e| e.kind.name()).collect();
    assert_eq!(names, ["shared_state_degraded", "shared_state_restored"], "once per change");
}

#[tokio::test]
async fn a_reset_while_redis_is_stalled_is_applied_when_it_answers_again() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
    eventually("b skips the refused key", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    server.stall();
    a.board.reset(&t, &k);
    assert!(!is_skip(&a.gate(&t, &k)), "the local reset applies at once");
    let store = a.store();
    eventually("a reports degraded", OUTAGE, || store.status().status == "degraded").await;
    assert!(store.status().reason.is_some());
    server.resume();
    eventually("b is reset once Redis answers", OUTAGE, || !is_skip(&b.gate(&t, &k))).await;
}

#[tokio::test]
async fn replicas_announce_themselves_and_leave_when_dropped() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |s| s.reconcile_every = Duration::from_millis(100)).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let store = a.store();
    let ids = || store.status().replicas.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    eventually("a sees both", OUTAGE, || {
        let mut ids = ids();
        ids.sort();
        ids == ["a", "b"]
    })
    .await;
    drop(b);
    eventually("b leaves the membership", OUTAGE, || ids() == ["a"]).await;
    let fleet = switchyard_state::check(&StateSettings::new(server.url())).await.expect("redis answers");
    assert_eq!(fleet.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["a"]);
}

#[tokio::test]
async fn a_run_whose_name_another_run_took_does_not_take_it_back() {
    // `a` was paused past its heartbeat and another run of `a` claimed the name meanwhile
    // (written here as that run would): `a`'s heartbeat must not overwrite it.
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |s| s.reconcile_every = Duration::from_millis(50)).await;
    let other = r#"{"id":"a","version":"0","config_hash":"","host":"elsewhere","pid":4242,"started_ms":1,"in_flight":0,"instance":"another-run"}"#;
    server.cli(&["SET", "switchyard:replica:a", other, "PX", "60000"]);
    // A round trip of `a`'s after the other run's claim reads that run in the membership.
    eventually("a's heartbeat round trip ran since", OUTAGE, || {
        a.store().status().replicas.iter().any(|replica| replica.host == "elsewhere")
    })
    .await;
    assert!(
        server.cli(&["GET", "switchyard:replica:a"]).contains("another-run"),
        "the other run's heartbeat stands"
    );
}

#[tokio::test]
async fn no_secret_reaches_redis_and_the_url_s_password_is_masked() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let (t, k) = (target(), keys(2));
    a.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
    a.fail(&t, &k, 1, &error(ErrorKind::RateLimited, Some(Duration::from_secs(9))));
    let b = redis_replica(&server, "b", |_| {}).await;
    eventually("b sees both keys", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    let mut dump = String::new();
    for key in server.cli(&["--scan"]).lines() {
        dump.push_str(key);
        dump.push('\n');
        let kind = server.cli(&["TYPE", key]);
        let value = match kind.trim() {
            "hash" => server.cli(&["HGETALL", key]),
            "set" => server.cli(&["SMEMBERS", key]),
            _ => server.cli(&["GET", key]),
        };
        dump.push_str(&value);
    }
    assert!(dump.contains(&format!("c:{}", k[0])), "the credential's record is there: {dump}");
    assert!(!dump.contains("sk-test-secret"), "a key reached Redis: {dump}");

    let settings = StateSettings::new("redis://:hunter2-password@127.0.0.1:1/0");
    let store = RedisStore::new(settings.clone()).expect("valid settings");
    for shown in [format!("{settings:?}"), format!("{store:?}"), format!("{:?}", store.status())] {
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    let bad = RedisStore::new(StateSettings::new("redis://:hunter2@[::1")).expect_err("a bad URL");
    assert!(!bad.to_string().contains("hunter2"), "{bad}");
    let unreachable = switchyard_state::check(&settings).await.expect_err("nothing listens on port 1");
    assert!(!unreachable.contains("hunter2") && unreachable.contains("****"), "{unreachable}");
}

#[tokio::test]
async fn degraded_events_are_published_once_per_change_not_once_per_failure() {
    let server = RedisServer::start();
    let mut settings = StateSettings::new(server.url());
    settings.replica = "a".to_owned();
    settings.reconcile_every = Duration::from_millis(50);
    let store = Arc::new(RedisStore::new(settings).expect("valid settings"));
    let bus = EventBus::new(64);
    let mut events = bus.subscribe();
    store.publish_events_to(bus);
    store.start();
    eventually("connected", OUTAGE, || store.status().status == "ok").await;
    server.stall();
    eventually("degraded", OUTAGE, || store.status().status == "degraded").await;
    server.resume();
    eventually("restored", OUTAGE, || store.status().status == "ok").await;
    let kinds: Vec<EventKind> = events.drain().iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(kinds.as_slice(), [EventKind::SharedStateDegraded { .. }, EventKind::SharedStateRestored]),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_redis_that_restarts_empty_is_refilled_from_the_replicas_memory() {
    let mut server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(600))));
    eventually("b sees the bench", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    let until = skip_until(&a.gate(&t, &k));
    server.kill();
    server.restart();
    // A replica that starts on the empty Redis learns the bench from the others' memory.
    let c = redis_replica(&server, "c", |_| {}).await;
    eventually("c learns the bench", OUTAGE, || near(skip_until(&c.gate(&t, &k)), until)).await;
    for (name, replica) in [("a", &a), ("b", &b)] {
        assert!(near(skip_until(&replica.gate(&t, &k)), until), "{name} kept the bench");
    }
}

#[tokio::test]
async fn a_change_learned_from_another_replica_is_announced_here() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let bus = EventBus::new(64);
    let mut events = bus.subscribe();
    b.store().publish_events_to(bus);
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, None));
    eventually("b skips the target", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    a.board.reset(&t, &k);
    eventually("b forgets the target", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
    let changes: Vec<(String, String, String)> = events
        .drain()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::HealthChanged { subject, to, reason, .. } => {
                Some((subject.to_string(), to.as_str().to_owned(), reason.clone()))
            }
            _ => None,
        })
        .collect();
    let target_changes: Vec<_> = changes.iter().filter(|(s, ..)| s.contains("openai:gpt-4o")).collect();
    assert_eq!(target_changes.len(), 2, "{changes:?}");
    assert_eq!(target_changes[0].1, "exhausted");
    assert_eq!((target_changes[1].1.as_str(), target_changes[1].2.as_str()), ("unknown", "reset"));
}

#[tokio::test]
async fn a_bench_with_no_known_reset_replaces_one_whose_reset_has_passed() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_millis(100))));
    eventually("b sees the short bench", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    // The reset passes; the key runs out again, this time with no reset time given.
    let passed = skip_until(&a.gate(&t, &k)).expect("a reset time");
    tokio::time::sleep_until(passed + Duration::from_millis(5)).await;
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, None));
    // No reset said: benched until it is tried again, five minutes on.
    let rechecked = |gate: Gate| match gate {
        Gate::Skip { exhausted: true, until: Some(until), .. } => {
            until > tokio::time::Instant::now() + Duration::from_secs(290)
        }
        _ => false,
    };
    eventually("b holds the new bench", PROPAGATION, || rechecked(b.gate(&t, &k))).await;
    assert!(rechecked(a.gate(&t, &k)), "a too, after its own write");
}

#[tokio::test]
async fn a_reset_through_a_replica_that_never_heard_of_the_record_still_reaches_the_fleet() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
    let c = lagging(&server, "c");
    c.board.reset(&t, &k);
    c.store().start();
    eventually("a forgets the refused key", OUTAGE, || !is_skip(&a.gate(&t, &k))).await;
}

#[tokio::test]
async fn a_replica_restarted_under_the_same_id_still_resets_the_fleet() {
    let server = RedisServer::start();
    let b = redis_replica(&server, "b", |_| {}).await;
    let (t, k) = (target(), keys(1));
    for round in 0..2 {
        // The same id each time, as a container restarted with its host name and pid 1.
        let a = redis_replica(&server, "a", |_| {}).await;
        b.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
        eventually("a sees the refused key", PROPAGATION, || is_skip(&a.gate(&t, &k))).await;
        a.board.reset(&t, &k);
        eventually(&format!("round {round}: b is reset"), PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
    }
}

#[tokio::test]
async fn a_redis_that_refuses_writes_degrades_the_link_which_writes_back_once_it_serves_again() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |s| s.reconcile_every = Duration::from_millis(50)).await;
    eventually("connected", OUTAGE, || a.store().status().status == "ok").await;
    // Out of memory, it answers a ping and refuses every write.
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let (t, k) = (target(), keys(1));
    for _ in 0..3 {
        a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(600))));
    }
    eventually("degraded", OUTAGE, || a.store().status().status == "degraded").await;
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    eventually("restored", OUTAGE, || a.store().status().status == "ok").await;
    let b = redis_replica(&server, "b", |_| {}).await;
    eventually("b learns what a learned meanwhile", PROPAGATION * 8, || is_skip(&b.gate(&t, &k))).await;
}

#[tokio::test]
async fn a_replica_refused_its_password_connects_again_once_redis_takes_it() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |s| s.reconcile_every = Duration::from_millis(50)).await;
    eventually("connected", OUTAGE, || a.store().status().status == "ok").await;
    // The password changes under the replica, and its connections are dropped.
    server.cli(&["CONFIG", "SET", "requirepass", "n3w-pass"]);
    server.cli(&["-a", "n3w-pass", "--no-auth-warning", "CLIENT", "KILL", "TYPE", "normal"]);
    server.cli(&["-a", "n3w-pass", "--no-auth-warning", "CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually("degraded", OUTAGE, || a.store().status().status == "degraded").await;
    server.cli(&["-a", "n3w-pass", "--no-auth-warning", "CONFIG", "SET", "requirepass", ""]);
    eventually("connected again, with no restart", OUTAGE, || a.store().status().status == "ok").await;
}

#[tokio::test]
async fn a_reset_while_redis_is_down_holds_when_it_comes_back_empty_and_the_replicas_write_back() {
    for failure in [ErrorKind::Unavailable, ErrorKind::RateLimited] {
        reset_while_away_holds(failure).await;
    }
}

/// A target benched by `failure` (a provider's outage with a long wait; a key's rest on the
/// model), reset through one replica while Redis is away, Redis back empty.
async fn reset_while_away_holds(failure: ErrorKind) {
    let mut server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(failure, Some(Duration::from_secs(240))));
    eventually("b benches the target too", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    server.kill();
    let (sa, sb) = (a.store(), b.store());
    eventually("both report degraded", OUTAGE, || {
        sa.status().status == "degraded" && sb.status().status == "degraded"
    })
    .await;
    // The operator resets it through a while Redis is away; Redis comes back empty, and b
    // writes back the rest it knows, whichever reaches Redis first.
    a.board.reset(&t, &k);
    server.restart();
    eventually("both back", OUTAGE, || sa.status().status == "ok" && sb.status().status == "ok").await;
    eventually("b forgets the bench", OUTAGE, || !is_skip(&b.gate(&t, &k))).await;
    // Settled: what b wrote back was refused, and the fleet holds no record of the target or of
    // a key's rest on it (only when the reset ran).
    eventually("the fleet agrees the bench is gone", OUTAGE, || {
        !is_skip(&a.gate(&t, &k))
            && !is_skip(&b.gate(&t, &k))
            && server
                .cli(&["KEYS", "*"])
                .lines()
                .all(|name| !name.contains(":t:") && !name.contains(":k:") || name.contains(":reset:"))
    })
    .await;
}
