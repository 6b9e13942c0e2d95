//! Kept responses in a real Redis: written by one replica, read and deleted through another,
//! held to the fleet's bounds.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use switchyard_state::responses::{KeptBounds, SharedResponses};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

fn replica(redis: &RedisServer, name: &str, bounds: KeptBounds) -> SharedResponses {
    let mut settings = StateSettings::new(redis.url());
    settings.replica = name.to_owned();
    settings.timeout = Duration::from_secs(2);
    SharedResponses::new(&RedisStore::new(settings).unwrap(), bounds)
}

const ROOMY: KeptBounds =
    KeptBounds { max_entries: 100, max_age: Duration::from_secs(3600), max_bytes: 1 << 20 };

#[tokio::test]
async fn an_entry_one_replica_kept_is_read_and_deleted_through_another() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis, "a", ROOMY), replica(&redis, "b", ROOMY));
    a.put("resp_1", b"{\"conversation\":[]}").await.unwrap();
    assert_eq!(b.get("resp_1").await.unwrap().as_deref(), Some(&b"{\"conversation\":[]}"[..]));
    assert_eq!(b.get("resp_2").await.unwrap(), None);
    let many = b.get_many(&["resp_2".to_owned(), "resp_1".to_owned()]).await.unwrap();
    assert_eq!(many, [None, Some(b"{\"conversation\":[]}".to_vec())], "in the order asked");
    // It expires by itself after the age bound.
    let ttl: i64 = redis.cli(&["PTTL", "switchyard:response:resp_1"]).trim().parse().unwrap();
    assert!((3_500_000..=3_600_000).contains(&ttl), "{ttl}");
    assert!(b.delete("resp_1").await.unwrap());
    assert!(!b.delete("resp_1").await.unwrap());
    assert_eq!(a.get("resp_1").await.unwrap(), None);
    assert_eq!(redis.cli(&["GET", "switchyard:responses:bytes"]).trim(), "0");
}

#[tokio::test]
async fn the_oldest_entries_of_the_fleet_go_first_when_the_count_or_the_bytes_are_reached() {
    let redis = RedisServer::start();
    let bounds = KeptBounds { max_entries: 3, max_age: Duration::from_secs(3600), max_bytes: 25 };
    let (a, b) = (replica(&redis, "a", bounds), replica(&redis, "b", bounds));
    for (i, store) in [&a, &b, &a, &b].into_iter().enumerate() {
        store.put(&format!("resp_{i}"), b"0123456789").await.unwrap();
    }
    // Ten bytes each and 25 at most: the two newest stay.
    assert_eq!(a.get("resp_0").await.unwrap(), None);
    assert_eq!(a.get("resp_1").await.unwrap(), None);
    assert!(a.get("resp_2").await.unwrap().is_some() && a.get("resp_3").await.unwrap().is_some());
    assert_eq!(redis.cli(&["GET", "switchyard:responses:bytes"]).trim(), "20");
    for i in 4..8 {
        a.put(&format!("resp_{i}"), b"x").await.unwrap();
    }
    assert_eq!(redis.cli(&["ZCARD", "switchyard:responses"]).trim(), "3", "three at most");
    // Writing an id again replaces it without counting it twice.
    a.put("resp_7", b"yy").await.unwrap();
    assert_eq!(redis.cli(&["ZCARD", "switchyard:responses"]).trim(), "3");
    assert_eq!(a.get("resp_7").await.unwrap().as_deref(), Some(&b"yy"[..]));
    // One larger than the byte bound alone is refused, and drops nothing to make room.
    let refused = a.put("resp_8", &[b'z'; 26]).await.unwrap_err();
    assert!(refused.contains("byte bound"), "{refused}");
    assert_eq!(a.get("resp_8").await.unwrap(), None);
    assert_eq!(redis.cli(&["ZCARD", "switchyard:responses"]).trim(), "3");
}

#[tokio::test]
async fn a_redis_that_is_away_is_an_error_within_the_timeout_not_a_hang() {
    let mut redis = RedisServer::start();
    let a = replica(&redis, "a", ROOMY);
    a.put("resp_1", b"x").await.unwrap();
    redis.kill();
    assert!(a.get("resp_1").await.is_err());
    assert!(a.put("resp_2", b"x").await.is_err());
}

#[tokio::test]
async fn a_connection_redis_dropped_is_made_again_without_losing_the_call_it_failed() {
    // Redis restarted, or closed idle connections (its `timeout`, a proxy): the first call
    // after it finds the kept connection dead.
    let mut redis = RedisServer::start();
    let (a, b) = (replica(&redis, "a", ROOMY), replica(&redis, "b", ROOMY));
    a.put("resp_1", b"one").await.unwrap();
    assert_eq!(b.get("resp_1").await.unwrap().as_deref(), Some(&b"one"[..]));

    redis.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert_eq!(b.get("resp_1").await.unwrap().as_deref(), Some(&b"one"[..]), "read on a new connection");

    redis.restart();
    a.put("resp_2", b"two").await.expect("written on a new connection");
    let read = b.get_many(&["resp_1".to_owned(), "resp_2".to_owned()]).await.unwrap();
    assert_eq!(read, [None, Some(b"two".to_vec())], "Redis came back empty, and holds the new one");
    assert!(b.delete("resp_2").await.unwrap());
}

#[tokio::test]
async fn once_redis_let_a_call_time_out_calls_fail_at_once_for_a_moment() {
    // A stalled Redis would else hold every request that asks it for the whole timeout.
    let redis = RedisServer::start();
    let mut settings = StateSettings::new(redis.url());
    settings.timeout = Duration::from_millis(200);
    let store = SharedResponses::new(&RedisStore::new(settings).unwrap(), ROOMY);
    store.put("resp_1", b"one").await.unwrap();
    redis.stall();
    let timed_out = store.get("resp_1").await.unwrap_err();
    assert_eq!(timed_out, "Redis did not answer in time");
    let at_once = store.get("resp_1").await.unwrap_err();
    assert!(at_once.contains("lately"), "not asked again at once: {at_once}");
    redis.resume();
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(1)).await;
    tokio::time::resume();
    assert_eq!(store.get("resp_1").await.unwrap().as_deref(), Some(&b"one"[..]), "asked again after it");
}

/// Every kind of entries (kept responses, thinking, a cache's answers, pins) keeps what Redis
/// missed and writes it again: after the next write Redis takes, or in the store's round.
#[tokio::test]
async fn what_redis_missed_is_written_again_unless_deleted_or_too_old_meanwhile() {
    let mut redis = RedisServer::start();
    let mut settings = StateSettings::new(redis.url());
    settings.timeout = Duration::from_millis(250);
    let store = RedisStore::new(settings).unwrap();
    let answers = SharedResponses::named(&store, "answer:default:cache", ROOMY);
    // Past its age by the time Redis is back (the pin it kept would have expired).
    let brief = KeptBounds { max_age: Duration::from_millis(1), ..ROOMY };
    let pins = SharedResponses::named(&store, "affinity", brief);
    redis.kill();
    assert!(answers.put("a1", b"one").await.is_err(), "Redis is away");
    assert!(answers.put("a2", b"two").await.is_err());
    assert!(pins.put("p1", b"pin").await.is_err());
    assert!(answers.waiting("a1") && answers.waiting("a2") && pins.waiting("p1"));
    // Deleted meanwhile: not written again.
    assert!(answers.delete("a2").await.is_err());
    assert!(!answers.waiting("a2"));
    redis.restart();
    store.resend_missed().await;
    assert_eq!(answers.get("a1").await.unwrap().as_deref(), Some(&b"one"[..]), "written again");
    assert!(!answers.waiting("a1"));
    assert_eq!(answers.get("a2").await.unwrap(), None, "deleted meanwhile");
    assert_eq!(pins.get("p1").await.unwrap(), None, "too old to write");
    assert!(!pins.waiting("p1"));

    // Without the round: the next write Redis takes sends what waits, in the background.
    redis.kill();
    assert!(answers.put("a3", b"three").await.is_err());
    redis.restart();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while answers.put("a4", b"four").await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "Redis never took a write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while answers.get("a3").await.unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "a3 was not written again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A write sent again is still waiting while it goes (the entry is still its replica's alone),
/// and a delete asked meanwhile waits for it, then wins: the entry is not written after it.
#[tokio::test]
async fn a_delete_while_a_write_is_sent_again_is_not_undone_by_it() {
    let redis = RedisServer::start();
    let mut settings = StateSettings::new(redis.url());
    settings.timeout = Duration::from_millis(250);
    let store = RedisStore::new(settings).unwrap();
    let answers = SharedResponses::named(&store, "answer:default:cache", ROOMY);
    answers.defer("a1", b"one");
    redis.stall();
    let deleted = async {
        tokio::task::yield_now().await;
        assert!(answers.waiting("a1"), "waiting while it is sent again");
        answers.delete("a1").await
    };
    let ((), deleted) = tokio::join!(store.resend_missed(), deleted);
    redis.resume();
    assert!(deleted.is_err(), "Redis did not answer the delete either");
    assert!(!answers.waiting("a1"), "the delete dropped it");
    store.resend_missed().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match answers.get("a1").await {
            Ok(found) => break assert_eq!(found, None, "not written after its delete"),
            Err(_) => assert!(tokio::time::Instant::now() < deadline, "Redis never answered again"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Past the waiting bound the oldest writes are dropped, never made: their entries are still
/// their writer's alone, until written anew or deleted.
#[tokio::test]
async fn a_write_dropped_for_room_still_says_its_entry_is_the_writers_alone() {
    let redis = RedisServer::start();
    let store = RedisStore::new(StateSettings::new(redis.url())).unwrap();
    let answers = SharedResponses::named(&store, "response", ROOMY);
    let big = vec![b'x'; 1 << 20];
    let count = switchyard_state::responses::MISSED_BYTES / big.len() + 1;
    for i in 0..count {
        answers.defer(&format!("r{i}"), &big);
    }
    assert!(answers.waiting("r0"), "dropped for room, never made");
    assert!(answers.waiting(&format!("r{}", count - 1)));
    answers.delete("r0").await.unwrap();
    assert!(!answers.waiting("r0"), "deleted: no longer this replica's alone");
}
