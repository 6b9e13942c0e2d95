//! Hedge budgets counted fleet-wide, through a real `redis-server`: a replica may hedge on the
//! fleet's requests, and not past the fleet's hedges.

use std::time::Duration;

use switchyard::chat::{ChatRequest, Message};
use switchyard::route::{Hedge, Route};
use switchyard::simulated::SimulatedProvider;
use switchyard::{ProviderEntry, Router};
use switchyard_state::hedges::SharedHedges;
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

const PREFIX: &str = "hedge-fleet";

fn router() -> Router {
    router_with(0)
}

/// Hedges a tenth of the requests, at least `min_hedges` per window.
fn router_with(min_hedges: u32) -> Router {
    let hedge = Hedge { max_share: 0.1, min_hedges, ..Hedge::after(Duration::from_millis(300)) };
    let route = Route::builder("default").target("a:m").target("b:m").hedge(hedge).build().expect("a route");
    Router::builder()
        .provider(ProviderEntry::new("a", SimulatedProvider::new()))
        .provider(ProviderEntry::new("b", SimulatedProvider::new()))
        .route(route)
        .build()
        .expect("a router")
}

fn store(server: &RedisServer, replica: &str) -> RedisStore {
    let mut settings = StateSettings::new(server.url());
    settings.prefix = PREFIX.to_owned();
    settings.replica = replica.to_owned();
    RedisStore::new(settings).expect("valid settings")
}

/// Writes another replica's window straight into Redis, `age_ms` old by Redis's clock.
fn forge(server: &RedisServer, replica: &str, requests: u64, hedges: u64, age_ms: u64) {
    let script = "local t = redis.call('TIME') \
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. (now - tonumber(ARGV[4]))) \
        return 1";
    let key = format!("{PREFIX}:hedges:default");
    let (requests, hedges, age) = (requests.to_string(), hedges.to_string(), age_ms.to_string());
    server.cli(&["EVAL", script, "1", &key, replica, &requests, &hedges, &age]);
}

#[tokio::test]
async fn a_replica_hedges_on_the_fleets_requests_and_not_past_the_fleets_hedges() {
    let server = RedisServer::start();
    let (a, b) = (router(), router());
    let (sync_a, sync_b) = (SharedHedges::new(&store(&server, "a")), SharedHedges::new(&store(&server, "b")));
    let request = ChatRequest::new("default", vec![Message::user("hi")]);
    for _ in 0..100 {
        a.chat(&request).await.expect("answered");
    }
    assert_eq!(b.hedges_left("default"), Some(0), "alone, b has no requests to hedge on");

    sync_a.sync(&a).await.expect("a's window written");
    sync_b.sync(&b).await.expect("b's window written, a's read");
    assert_eq!(b.hedges_left("default"), Some(10), "a tenth of the fleet's 100 requests");

    // A third replica that hedged 4 of its 50: the fleet has 150 requests and 4 hedges.
    forge(&server, "c", 50, 4, 0);
    sync_b.sync(&b).await.expect("exchanged");
    assert_eq!(b.hedges_left("default"), Some(11));
    sync_a.sync(&a).await.expect("exchanged");
    assert_eq!(a.hedges_left("default"), Some(11), "a counts c's too, and b's nothing");

    // A window not renewed for more than 3 s no longer counts.
    forge(&server, "c", 50, 4, 5_000);
    sync_b.sync(&b).await.expect("exchanged");
    assert_eq!(b.hedges_left("default"), Some(10));
    let keys = server.cli(&["HKEYS", &format!("{PREFIX}:hedges:default")]);
    assert!(keys.contains('a') && keys.contains('b'), "{keys}");
}

#[tokio::test]
async fn without_redis_a_replica_governs_by_its_own_counts() {
    let mut server = RedisServer::start();
    let b = router();
    let sync_b = SharedHedges::new(&store(&server, "b"));
    forge(&server, "a", 100, 0, 0);
    sync_b.sync(&b).await.expect("exchanged");
    assert_eq!(b.hedges_left("default"), Some(10));

    server.kill();
    assert!(sync_b.sync(&b).await.is_err(), "Redis is gone");
    assert_eq!(b.hedges_left("default"), Some(0), "the fleet's counts are dropped, not kept stale");
}

#[tokio::test]
async fn the_floor_of_hedges_is_the_fleets_not_each_replicas() {
    let server = RedisServer::start();
    let b = router_with(3);
    let sync_b = SharedHedges::new(&store(&server, "b"));
    assert_eq!(b.hedges_left("default"), Some(3), "a quiet route may hedge up to the floor");
    // Another replica hedged twice in its window: the fleet has one hedge of its floor left.
    forge(&server, "a", 2, 2, 0);
    sync_b.sync(&b).await.expect("exchanged");
    assert_eq!(b.hedges_left("default"), Some(1));
    forge(&server, "a", 3, 3, 0);
    sync_b.sync(&b).await.expect("exchanged");
    assert_eq!(b.hedges_left("default"), Some(0), "the fleet spent its floor");
}
