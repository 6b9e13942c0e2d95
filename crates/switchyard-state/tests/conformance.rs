//! Every health rule, as two replicas see it: one learns, the other must honour it. The same
//! rules run over one in-process memory (the fleet of one process) and over two Redis stores
//! on a real `redis-server`, where each change must arrive within [`PROPAGATION`].

mod support;

use std::time::Duration;

use support::{PROPAGATION, Replica, error, eventually, is_skip, keys, skip_until, target};
use switchyard::credential::CredentialId;
use switchyard::health::{Gate, HealthStatus};
use switchyard::{ErrorKind, Target};
use tokio::time::Instant;

macro_rules! conformance {
    ($($rule:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $rule() {
                    let (a, b) = super::support::memory_fleet();
                    super::$rule(&a, &b).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $rule() {
                    let server = switchyard_state::testing::RedisServer::start();
                    let (a, b) = super::support::redis_fleet(&server).await;
                    super::$rule(&a, &b).await;
                }
            )*
        }
    };
}

conformance!(
    an_exhausted_target_is_skipped_until_its_reset,
    an_exhausted_key_gives_way_to_its_sibling,
    a_rate_limited_key_rests,
    a_key_rate_limited_on_one_model_rests_for_that_model_only,
    a_success_ends_the_key_s_rest_for_the_model,
    a_reset_ends_the_key_s_rest_for_the_model,
    a_rate_limit_of_the_account_rests_the_key_for_every_model,
    an_unauthorized_key_is_never_picked,
    an_unhealthy_target_rests_for_the_ttl,
    an_open_circuit_is_honoured,
    a_half_open_circuit_lets_one_probe_through,
    a_failed_probe_reopens_the_circuit_before_its_lease_would_end,
    of_replicas_that_probe_at_once_one_probes,
    a_success_clears_an_exhausted_target,
    a_reset_forgets_a_target_and_its_keys,
    a_reset_of_everything_forgets_every_target,
    a_shorter_hold_never_shortens_a_longer_one,
);

fn close(a: Option<Instant>, b: Option<Instant>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.max(b) - a.min(b) <= Duration::from_millis(50),
        _ => false,
    }
}

fn reason(gate: &Gate) -> &str {
    match gate {
        Gate::Skip { reason, .. } => reason,
        Gate::Pass { .. } => "",
    }
}

async fn an_exhausted_target_is_skipped_until_its_reset(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(60))));
    let seen = a.gate(&t, &k);
    assert!(matches!(seen, Gate::Skip { exhausted: true, .. }), "{seen:?}");
    eventually("b skips the exhausted target", PROPAGATION, || {
        matches!(b.gate(&t, &k), Gate::Skip { exhausted: true, .. })
    })
    .await;
    assert!(close(skip_until(&b.gate(&t, &k)), skip_until(&seen)), "b's reset time is a's");
}

async fn an_exhausted_key_gives_way_to_its_sibling(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(2));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(60))));
    eventually("b calls with the second key", PROPAGATION, || {
        b.gate(&t, &k) == Gate::Pass { credential: 1, probe: false }
    })
    .await;
}

async fn a_rate_limited_key_rests(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(2));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(20))));
    eventually("b rests the rate-limited key", PROPAGATION, || {
        b.gate(&t, &k) == Gate::Pass { credential: 1, probe: false }
    })
    .await;
    let single = keys(1);
    a.fail(&t, &single, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(20))));
    eventually("b waits for the only key", PROPAGATION, || {
        reason(&b.gate(&t, &single)) == "every credential is cooling down"
    })
    .await;
    assert!(close(skip_until(&b.gate(&t, &single)), skip_until(&a.gate(&t, &single))));
}

fn other_model() -> switchyard::Target {
    "openai:gpt-4o-mini".parse().expect("a target")
}

async fn a_key_rate_limited_on_one_model_rests_for_that_model_only(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(20))));
    eventually("b rests the key for the model", PROPAGATION, || {
        reason(&b.gate(&t, &k)) == "every credential is cooling down"
    })
    .await;
    assert!(close(skip_until(&b.gate(&t, &k)), skip_until(&a.gate(&t, &k))), "b's rest ends with a's");
    let pass = Gate::Pass { credential: 0, probe: false };
    assert_eq!(b.gate(&other_model(), &k), pass, "b calls the provider's other model with the key");
    assert_eq!(a.gate(&other_model(), &k), pass);
}

async fn a_success_ends_the_key_s_rest_for_the_model(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(20))));
    eventually("b rests the key for the model", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    a.succeed(&t, &k, 0);
    eventually("b calls with the key again", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
}

async fn a_reset_ends_the_key_s_rest_for_the_model(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(20))));
    eventually("b rests the key for the model", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    a.board.reset(&t, &k);
    eventually("b forgets the rest", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
    assert!(b.board.target(&t).key_cooldowns.is_empty());
}

async fn a_rate_limit_of_the_account_rests_the_key_for_every_model(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    let account = error(ErrorKind::RateLimited, Some(Duration::from_secs(20))).account_wide();
    a.fail(&t, &k, 0, &account);
    eventually("b rests the key for every model", PROPAGATION, || {
        reason(&b.gate(&other_model(), &k)) == "every credential is cooling down"
    })
    .await;
}

async fn an_unauthorized_key_is_never_picked(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(2));
    a.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
    eventually("b skips the refused key", PROPAGATION, || {
        b.gate(&t, &k) == Gate::Pass { credential: 1, probe: false }
    })
    .await;
    a.fail(&t, &k, 1, &error(ErrorKind::Auth, None));
    eventually("b has no usable key", PROPAGATION, || {
        reason(&b.gate(&t, &k)).starts_with("no usable credential")
    })
    .await;
}

async fn an_unhealthy_target_rests_for_the_ttl(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::Unavailable, None));
    eventually("b skips the unhealthy target", PROPAGATION, || {
        reason(&b.gate(&t, &k)).starts_with("unhealthy")
    })
    .await;
    assert!(close(skip_until(&b.gate(&t, &k)), skip_until(&a.gate(&t, &k))), "the TTL runs from a's failure");
}

async fn an_open_circuit_is_honoured(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    for _ in 0..3 {
        a.fail(&t, &k, 0, &error(ErrorKind::Unavailable, None));
    }
    assert!(reason(&a.gate(&t, &k)).starts_with("circuit open"));
    eventually("b refuses the open circuit", PROPAGATION, || {
        reason(&b.gate(&t, &k)).starts_with("circuit open")
    })
    .await;
    let (a_until, b_until) = (skip_until(&a.gate(&t, &k)), skip_until(&b.gate(&t, &k)));
    assert!(b_until >= a_until, "b probes no earlier than a");
}

/// `a` opens the circuit of `t` with three failures; once its open time (300 ms) runs out, `a`
/// probes, and `b` waits for the probe.
async fn probing(a: &Replica, b: &Replica, t: &Target, k: &[CredentialId]) {
    for _ in 0..3 {
        a.fail(t, k, 0, &error(ErrorKind::Unavailable, None));
    }
    eventually("b refuses the open circuit", PROPAGATION, || is_skip(&b.gate(t, k))).await;
    let open_until = skip_until(&a.gate(t, k)).expect("open until");
    tokio::time::sleep_until(open_until + Duration::from_millis(5)).await;
    let (gate, _) = a.board.admit(&support::query(t, k));
    assert_eq!(gate, Gate::Pass { credential: 0, probe: true });
    eventually("b waits for a's probe", PROPAGATION, || {
        reason(&b.gate(t, k)) == "circuit half-open: probe in flight"
    })
    .await;
}

async fn a_half_open_circuit_lets_one_probe_through(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    probing(a, b, &t, &k).await;
    a.succeed(&t, &k, 0);
    eventually("b calls again once the probe succeeded", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
}

async fn a_failed_probe_reopens_the_circuit_before_its_lease_would_end(a: &Replica, b: &Replica) {
    // The probe holds a 30 s lease; it fails at once, and the circuit opens again for the
    // doubled open time (600 ms), fleet-wide: not until the lease would have ended.
    let (t, k) = (target(), keys(1));
    probing(a, b, &t, &k).await;
    a.fail(&t, &k, 0, &error(ErrorKind::Unavailable, None));
    let soon = Instant::now() + Duration::from_secs(5);
    eventually("b holds the reopened circuit, not the probe's lease", PROPAGATION, || {
        skip_until(&b.gate(&t, &k)).is_some_and(|until| until < soon)
            && reason(&b.gate(&t, &k)) != "circuit half-open: probe in flight"
    })
    .await;
}

/// Both replicas may probe, and each takes the probe before it can hear of the other's: the
/// fleet still sends one probe. The other replica is told no, and its gate then says why.
async fn of_replicas_that_probe_at_once_one_probes(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    for _ in 0..3 {
        a.fail(&t, &k, 0, &error(ErrorKind::Unavailable, None));
    }
    eventually("b refuses the open circuit", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    // The later of the two open times: b's, which waits out a's head start.
    let open_until = skip_until(&b.gate(&t, &k)).max(skip_until(&a.gate(&t, &k))).expect("open until");
    tokio::time::sleep_until(open_until + Duration::from_millis(5)).await;
    // Neither hears of the other between these two steps (nothing else runs).
    let gates =
        [(a, a.board.admit(&support::query(&t, &k)).0), (b, b.board.admit(&support::query(&t, &k)).0)];
    let mut probes = 0;
    let mut refused = Vec::new();
    for (replica, gate) in gates {
        let took = gate == Gate::Pass { credential: 0, probe: true };
        if took && replica.board.claim_probe(&t).await {
            probes += 1;
        } else {
            refused.push(replica);
        }
    }
    assert_eq!(probes, 1, "one replica probes");
    assert_eq!(reason(&refused[0].gate(&t, &k)), "circuit half-open: probe in flight");
}

async fn a_success_clears_an_exhausted_target(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::QuotaExceeded, None));
    eventually("b skips the exhausted target", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    a.succeed(&t, &k, 0);
    eventually("b calls the recovered target", PROPAGATION, || !is_skip(&b.gate(&t, &k))).await;
}

async fn a_reset_forgets_a_target_and_its_keys(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::Auth, None));
    eventually("b has no usable key", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    a.board.reset(&t, &k);
    eventually("b forgets the target", PROPAGATION, || {
        !is_skip(&b.gate(&t, &k)) && b.board.target(&t).status == HealthStatus::Unknown
    })
    .await;
}

async fn a_reset_of_everything_forgets_every_target(a: &Replica, b: &Replica) {
    let k = keys(1);
    let targets: Vec<switchyard::Target> =
        ["openai:gpt-4o", "anthropic:claude"].iter().map(|t| t.parse().expect("a target")).collect();
    for t in &targets {
        a.fail(t, &k, 0, &error(ErrorKind::QuotaExceeded, None));
    }
    eventually("b skips both", PROPAGATION, || targets.iter().all(|t| is_skip(&b.gate(t, &k)))).await;
    a.board.reset_all();
    eventually("b forgets both", PROPAGATION, || targets.iter().all(|t| !is_skip(&b.gate(t, &k)))).await;
    assert!(b.board.snapshot().targets.is_empty(), "b keeps no record");
}

async fn a_shorter_hold_never_shortens_a_longer_one(a: &Replica, b: &Replica) {
    let (t, k) = (target(), keys(1));
    a.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(60))));
    eventually("b rests the key", PROPAGATION, || is_skip(&b.gate(&t, &k))).await;
    let long = skip_until(&a.gate(&t, &k));
    b.fail(&t, &k, 0, &error(ErrorKind::RateLimited, Some(Duration::from_secs(2))));
    // Whatever b's own clock says, the fleet keeps the longer rest, on both replicas.
    eventually("a keeps the longer rest", PROPAGATION, || close(skip_until(&a.gate(&t, &k)), long)).await;
    eventually("b keeps the longer rest", PROPAGATION, || close(skip_until(&b.gate(&t, &k)), long)).await;
}

/// The operator's view over a shared store: every configured target and key from the start,
/// `unknown` until used, and again after a reset (the store holds records, the router lists
/// its configuration).
#[tokio::test]
async fn a_router_over_the_shared_store_lists_every_target_and_key_before_use_and_after_a_reset() {
    use switchyard::chat::{ChatRequest, Message};
    use switchyard::credential::Secret;
    use switchyard::route::Route;
    use switchyard::simulated::SimulatedProvider;
    use switchyard::{ProviderEntry, Router};

    let server = switchyard_state::testing::RedisServer::start();
    let replica = support::redis_replica(&server, "a", |_| {}).await;
    let store = replica.store.clone().expect("a shared replica");
    let keyed = ProviderEntry::new("keyed", SimulatedProvider::new())
        .key(Secret::new("sk-first-key-000001"))
        .key(Secret::new("sk-second-key-000002"));
    let router = Router::builder()
        .provider(keyed)
        .provider(ProviderEntry::new("sim", SimulatedProvider::new()))
        .route(Route::builder("default").target("sim:m").target("keyed:m").build().expect("a route"))
        .route(Route::builder("cheap").target("keyed:small").build().expect("a route"))
        .health_store(store)
        .build()
        .expect("a router");
    let view = || {
        let health = router.health();
        let targets: Vec<(String, HealthStatus)> =
            health.targets.iter().map(|t| (t.target.to_string(), t.status)).collect();
        let keys: Vec<HealthStatus> = health.credentials.iter().map(|c| c.status).collect();
        (targets, keys)
    };
    let unknown = || {
        let targets = ["keyed:m", "keyed:small", "sim:m"].map(|t| (t.to_owned(), HealthStatus::Unknown));
        (targets.to_vec(), vec![HealthStatus::Unknown; 3])
    };

    assert_eq!(view(), unknown(), "before any request: two keys of keyed, sim's keyless one");
    router.chat(&ChatRequest::new("default", vec![Message::user("hi")])).await.expect("sim answers");
    assert!(view().0.contains(&("sim:m".to_owned(), HealthStatus::Available)));
    router.reset_all();
    assert_eq!(view(), unknown(), "after a reset");
}

/// The fleet's records are bounded: clients name targets (`provider:model`), and each made-up
/// one that failed would be kept an hour. Past the most, a new target's record stays with the
/// replica that wrote it; a key's own record is always kept; the names of records that expired
/// make room again.
#[tokio::test]
async fn past_the_most_records_the_fleet_keeps_a_new_targets_stays_with_its_replica() {
    let server = switchyard_state::testing::RedisServer::start();
    let client = ::redis::Client::open(server.url()).expect("a client");
    let mut redis = client.get_multiplexed_async_connection().await.expect("a connection");
    let seeded: Vec<String> = (0..switchyard_state::MOST_RECORDS).map(|i| format!("t:seeded:m{i}")).collect();
    let mut seed = ::redis::pipe();
    for name in &seeded {
        let key = format!("switchyard:{name}");
        seed.cmd("HSET").arg(&key).arg("gen").arg(1).arg("st").arg("available").ignore();
        seed.cmd("EXPIRE").arg(&key).arg(600).ignore();
        seed.cmd("SADD").arg("switchyard:index").arg(name).ignore();
    }
    seed.query_async::<()>(&mut redis).await.expect("seeded");
    let (a, b) = support::redis_fleet(&server).await;
    let made_up: Target = "openai:made-up".parse().expect("a target");
    let k = keys(2);
    a.fail(&made_up, &k, 0, &error(ErrorKind::Unavailable, None));
    // Written after it: the first key's record, which reaches b once a's earlier write was
    // answered.
    a.fail(&target(), &k, 0, &error(ErrorKind::QuotaExceeded, Some(Duration::from_secs(60))));
    eventually("b learns the first key is spent", PROPAGATION, || {
        b.gate(&target(), &k) == Gate::Pass { credential: 1, probe: false }
    })
    .await;
    assert!(is_skip(&a.gate(&made_up, &k)), "its replica still knows");
    assert!(!is_skip(&b.gate(&made_up, &k)), "the fleet was not told");
    assert_eq!(server.cli(&["EXISTS", "switchyard:t:openai:made-up"]).trim(), "0");
    // A target the configuration names is always shared, however many others clients named.
    let configured: Target = "openai:configured".parse().expect("a target");
    switchyard::health::HealthStore::configured(a.store(), std::slice::from_ref(&configured));
    a.fail(&configured, &k, 1, &error(ErrorKind::Unavailable, None));
    eventually("b learns of the configured target", PROPAGATION, || is_skip(&b.gate(&configured, &k))).await;

    // The seeded records expire: their names make room for the next new one.
    let mut gone = ::redis::pipe();
    for name in &seeded {
        gone.cmd("DEL").arg(format!("switchyard:{name}")).ignore();
    }
    gone.query_async::<()>(&mut redis).await.expect("deleted");
    let later: Target = "openai:later".parse().expect("a target");
    a.fail(&later, &k, 0, &error(ErrorKind::Unavailable, None));
    eventually("b learns of the later target", PROPAGATION, || is_skip(&b.gate(&later, &k))).await;
}

/// A key of another kind under the prefix, named in the index (an operator's, a script's), is
/// no record: the resync that reads every record skips it and drops its name, and the fleet
/// still sees itself (the resync failed whole on it, and `/admin/health` listed no replica).
#[tokio::test]
async fn a_key_of_another_kind_named_in_the_index_does_not_blind_the_fleet() {
    let server = switchyard_state::testing::RedisServer::start();
    server.cli(&["SET", "switchyard:t:stray:m", "1"]);
    server.cli(&["SADD", "switchyard:index", "t:stray:m"]);
    let (a, _b) = support::redis_fleet(&server).await;
    eventually("a sees both replicas", Duration::from_secs(5), || a.store().status().replicas.len() == 2)
        .await;
    assert_eq!(server.cli(&["SISMEMBER", "switchyard:index", "t:stray:m"]).trim(), "0");
}
