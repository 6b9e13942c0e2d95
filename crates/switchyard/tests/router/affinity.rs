//! Session affinity: a session's requests go back to the target and key that served it, while
//! that target is usable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard::credential::Secret;
use switchyard::route::{Rotation, Route};
use switchyard::shared::SharedEntries;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::{ErrorKind, KeyRotation, ProviderEntry, RequestOptions, Router};

use crate::support::*;

fn session(id: &str) -> RequestOptions {
    RequestOptions {
        session: Some(id.to_owned()),
        cache_scope: "team".to_owned(),
        ..RequestOptions::default()
    }
}

fn round_robin(a: &SimulatedProvider, b: &SimulatedProvider) -> Router {
    let route = Route::builder("default").target("a:m").target("b:m").rotation(Rotation::RoundRobin);
    router(&[("a", a), ("b", b)], route.retry(quick_retry(1)))
}

async fn served(router: &Router, options: &RequestOptions) -> String {
    router.chat_with(&request("default"), options).await.unwrap().served_by.to_string()
}

#[tokio::test(start_paused = true)]
async fn a_session_stays_on_one_target_of_a_rotating_tier_and_requests_without_one_alternate() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let router = round_robin(&a, &b);

    let mut alone = Vec::new();
    for _ in 0..4 {
        alone.push(served(&router, &RequestOptions::default()).await);
    }
    assert_eq!(alone, ["a:m", "b:m", "a:m", "b:m"]);

    for id in ["one", "two"] {
        let first = served(&router, &session(id)).await;
        for _ in 0..5 {
            assert_eq!(served(&router, &session(id)).await, first, "session {id} moved");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_stays_on_one_key_of_a_provider_that_rotates_its_keys() {
    let sim = SimulatedProvider::new();
    let entry = ProviderEntry::new("a", sim.clone())
        .key(Secret::new("sk-first-000001"))
        .key(Secret::new("sk-second-000002"))
        .key_rotation(KeyRotation::RoundRobin);
    let router = Router::builder()
        .provider(entry)
        .route(Route::builder("default").target("a:m").build().unwrap())
        .build()
        .unwrap();
    let key_of = |answer: &switchyard::Answer| answer.trail.attempts()[0].credential_id.clone().unwrap();

    let first = router.chat_with(&request("default"), &session("s")).await.unwrap();
    for _ in 0..4 {
        let again = router.chat_with(&request("default"), &session("s")).await.unwrap();
        assert_eq!(key_of(&again), key_of(&first));
        assert!(again.trail.attempts()[0].note.as_deref().unwrap_or_default().contains("affinity"));
    }
    let other = router.chat_with(&request("default"), &RequestOptions::default()).await.unwrap();
    let another = router.chat_with(&request("default"), &RequestOptions::default()).await.unwrap();
    assert_ne!(key_of(&other), key_of(&another), "without a session the keys alternate");
}

#[tokio::test(start_paused = true)]
async fn a_pinned_target_that_fails_moves_the_session_once_and_it_sticks_where_it_was_served() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let router = round_robin(&a, &b);
    assert_eq!(served(&router, &session("s")).await, "a:m");

    a.push_steps([Step::fail(ErrorKind::Unavailable)]);
    assert_eq!(served(&router, &session("s")).await, "b:m", "the pin never overrides a failure");
    // The gate rests a; and after it recovers the session stays where it was served last.
    tokio::time::advance(Duration::from_secs(60)).await;
    for _ in 0..3 {
        assert_eq!(served(&router, &session("s")).await, "b:m");
    }
}

#[tokio::test(start_paused = true)]
async fn a_pin_is_forgotten_after_its_ttl_of_silence_and_a_route_may_turn_affinity_off() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .rotation(Rotation::RoundRobin)
        .affinity_ttl(Duration::from_secs(60));
    let pinning = router(&[("a", &a), ("b", &b)], route);
    assert_eq!(served(&pinning, &RequestOptions::default()).await, "a:m");
    assert_eq!(served(&pinning, &session("s")).await, "b:m", "pinned to b");
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(served(&pinning, &session("s")).await, "b:m", "within its ttl, whatever the turn");
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(served(&pinning, &RequestOptions::default()).await, "b:m");
    assert_eq!(served(&pinning, &session("s")).await, "a:m", "forgotten: its turn, not its pin");

    let off =
        Route::builder("default").target("a:m").target("b:m").rotation(Rotation::RoundRobin).affinity(false);
    let router = router(&[("a", &a), ("b", &b)], off);
    let turns: Vec<String> =
        [served(&router, &session("s")).await, served(&router, &session("s")).await].into();
    assert_eq!(turns, ["a:m", "b:m"]);
}

#[tokio::test(start_paused = true)]
async fn one_callers_session_never_steers_another_callers() {
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let router = round_robin(&a, &b);
    assert_eq!(served(&router, &session("s")).await, "a:m");
    let stranger = RequestOptions { cache_scope: "other".to_owned(), ..session("s") };
    assert_eq!(
        served(&router, &stranger).await,
        "b:m",
        "the same session id under another key is another session"
    );
}

/// A fleet's store in memory: what one replica puts, another reads.
#[derive(Debug, Default)]
struct Fleet(Mutex<HashMap<String, Vec<u8>>>);

impl SharedEntries for Fleet {
    fn put(&self, key: String, value: Vec<u8>) -> switchyard::provider::BoxFuture<'_, Result<(), String>> {
        self.0.lock().unwrap().insert(key, value);
        Box::pin(async { Ok(()) })
    }

    fn get(&self, key: String) -> switchyard::provider::BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        let value = self.0.lock().unwrap().get(&key).cloned();
        Box::pin(async move { Ok(value) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_pin_made_on_one_replica_is_honoured_by_another() {
    let fleet = Arc::new(Fleet::default());
    let (a, b) = (SimulatedProvider::new(), SimulatedProvider::new());
    let (one, two) = (round_robin(&a, &b), round_robin(&a, &b));
    one.pins().share(fleet.clone());
    two.pins().share(fleet.clone());

    assert_eq!(served(&two, &RequestOptions::default()).await, "a:m", "two's turn moves on to b");
    assert_eq!(served(&one, &session("s")).await, "a:m");
    tokio::task::yield_now().await; // the pin is shared off the request path
    assert!(!fleet.0.lock().unwrap().is_empty());
    let kept = fleet.0.lock().unwrap().values().next().cloned().unwrap();
    assert!(!String::from_utf8_lossy(&kept).contains("\"s\""), "no session id is kept: {kept:?}");
    assert_eq!(served(&two, &session("s")).await, "a:m", "b was two's turn; the fleet's pin says a");
}
