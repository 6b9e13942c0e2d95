//! Client keys' spend in a real Redis: each run of each replica writes its own total, and the
//! fleet's is their sum.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use switchyard_state::spend::{Held, SharedSpend};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

fn replica(redis: &RedisServer, name: &str) -> SharedSpend {
    let mut settings = StateSettings::new(redis.url());
    settings.replica = name.to_owned();
    settings.timeout = Duration::from_secs(2);
    SharedSpend::new(&RedisStore::new(settings).unwrap())
}

const ENDS: u64 = 4_102_444_800; // 2100-01-01

#[tokio::test]
async fn a_total_sent_twice_counts_once_and_a_late_smaller_one_lowers_nothing() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    assert_eq!(a.put("k1", "d20261205", 1.5, ENDS).await.unwrap(), Held { others: 0.0, own: 1.5 });
    assert_eq!(a.put("k1", "d20261205", 1.5, ENDS).await.unwrap(), Held { others: 0.0, own: 1.5 });
    assert_eq!(b.put("k1", "d20261205", 0.25, ENDS).await.unwrap(), Held { others: 1.5, own: 0.25 });
    assert_eq!(a.put("k1", "d20261205", 1.0, ENDS).await.unwrap(), Held { others: 0.25, own: 1.5 });
    assert_eq!(b.get("k1", "d20261205").await.unwrap(), Held { others: 1.5, own: 0.25 });
    assert_eq!(a.get("k1", "d20261206").await.unwrap(), Held { others: 0.0, own: 0.0 });
    let ttl: u64 = redis.cli(&["EXPIRETIME", "switchyard:spend:k1:d20261205:by"]).trim().parse().unwrap();
    assert_eq!(ttl, ENDS + 86_400, "kept a day past the period's end");
}

#[tokio::test]
async fn a_restarted_replica_writes_beside_its_last_run_and_an_earlier_versions_spend_counts() {
    let redis = RedisServer::start();
    replica(&redis, "a").put("k1", "m202612", 4.0, ENDS).await.unwrap();
    // A replica of an earlier version raised one number.
    redis.cli(&["SET", "switchyard:spend:k1:m202612", "2.5"]);
    let again = replica(&redis, "a");
    assert_eq!(again.get("k1", "m202612").await.unwrap(), Held { others: 6.5, own: 0.0 });
    assert_eq!(again.put("k1", "m202612", 1.0, ENDS).await.unwrap(), Held { others: 6.5, own: 1.0 });
}

#[tokio::test]
async fn a_total_comes_back_exactly_as_written_whatever_its_digits() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    let total = 0.1 + 0.2; // 0.30000000000000004: Lua's tostring would answer 0.3
    assert_eq!(a.put("k1", "d20261205", total, ENDS).await.unwrap().own, total);
    assert_eq!(a.get("k1", "d20261205").await.unwrap().own, total);
    b.put("k1", "d20261205", 1e-7, ENDS).await.unwrap();
    assert_eq!(a.get("k1", "d20261205").await.unwrap().others, 1e-7);
}
