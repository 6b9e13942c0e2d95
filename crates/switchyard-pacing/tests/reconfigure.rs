//! A pacer handed a new configuration's limits: lanes of unchanged limits keep their budgets,
//! changed ones start fresh, and a rotated key's own lane is dropped.

#![allow(clippy::unwrap_used)]

use switchyard::credential::{CredentialId, Secret};
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard_pacing::{LimitPacer, Limits};

fn rpm(n: u32) -> Limits {
    Limits { requests_per_minute: Some(n), ..Limits::default() }
}

fn credential(key: &str) -> CredentialId {
    CredentialId::derive("openai", "https://api.example", Some(&Secret::new(key)))
}

/// Sends one call on `provider`'s lane with `key`.
async fn send(pacer: &LimitPacer, provider: &str, key: &CredentialId) {
    let request =
        PaceRequest { provider, credential_id: key, estimated_tokens: 1, deadline: None, spill_after: None };
    let mut permit = pacer.acquire(request).await.unwrap();
    permit.settle(Some(1));
}

/// The requests left in `provider`'s lanes, rounded down.
fn left(pacer: &LimitPacer, provider: &str) -> Vec<u64> {
    pacer
        .snapshot()
        .iter()
        .filter(|lane| lane.provider == provider)
        .map(|lane| lane.requests_available.unwrap().floor() as u64)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_lane_of_unchanged_limits_keeps_its_spent_budget_and_a_changed_one_starts_full() {
    let key = credential("sk-one-0123456789");
    let pacer = LimitPacer::new([("a".to_owned(), rpm(600)), ("b".to_owned(), rpm(600))]);
    for _ in 0..5 {
        send(&pacer, "a", &key).await;
        send(&pacer, "b", &key).await;
    }
    // 600 rpm holds one second's share, 10, as its burst: 5 are spent.
    assert_eq!(left(&pacer, "a"), [5]);

    let next = pacer.reconfigured([("a".to_owned(), rpm(600)), ("b".to_owned(), rpm(1200))]);
    assert_eq!(left(&next, "a"), [5], "the same limits: the same budget");
    assert_eq!(left(&next, "b"), [20], "new limits: a fresh lane");
    send(&next, "a", &key).await;
    assert_eq!(left(&pacer, "a"), [4], "one lane, spent through either pacer");
}

#[tokio::test(start_paused = true)]
async fn a_provider_no_longer_paced_is_not_paced_by_the_next_pacer() {
    let key = credential("sk-one-0123456789");
    let pacer = LimitPacer::new([("a".to_owned(), rpm(600))]);
    send(&pacer, "a", &key).await;
    let next = pacer.reconfigured([("b".to_owned(), rpm(600))]);
    assert!(left(&next, "a").is_empty());
    assert!(!next.keeps_lanes_of(&pacer, "a"));
}

#[tokio::test(start_paused = true)]
async fn a_rotated_keys_own_lane_is_dropped_and_the_kept_keys_lane_stays() {
    let (old, kept) = (credential("sk-old-0123456789"), credential("sk-kept-0123456789"));
    let per_key = Limits { per_credential: true, ..rpm(600) };
    let pacer = LimitPacer::new([("a".to_owned(), per_key.clone())]);
    send(&pacer, "a", &old).await;
    send(&pacer, "a", &kept).await;
    send(&pacer, "a", &kept).await;

    let next = pacer.reconfigured([("a".to_owned(), per_key)]);
    next.retain_keys(|_, id| *id == kept);
    let lanes = next.snapshot();
    assert_eq!(lanes.len(), 1, "{lanes:?}");
    assert_eq!(lanes[0].credential_id.as_ref(), Some(&kept));
    assert_eq!(left(&next, "a"), [8]);
}

/// A call on `provider`'s lane with `key` that waits at most `patience` for its permit.
async fn try_acquire(
    pacer: &LimitPacer,
    provider: &str,
    key: &CredentialId,
    patience: std::time::Duration,
) -> Option<switchyard::pacing::Permit> {
    let deadline = Some(tokio::time::Instant::now() + patience);
    let request =
        PaceRequest { provider, credential_id: key, estimated_tokens: 1, deadline, spill_after: None };
    pacer.acquire(request).await.ok()
}

fn in_flight(pacer: &LimitPacer, provider: &str) -> Vec<(u32, Option<u32>)> {
    let lanes = pacer.snapshot();
    lanes
        .iter()
        .filter(|lane| lane.provider == provider)
        .map(|lane| (lane.in_flight, lane.max_concurrent))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn calls_in_flight_when_the_limits_change_count_against_the_new_concurrency_bound() {
    for per_credential in [false, true] {
        let key = credential("sk-one-0123456789");
        let two = Limits { max_concurrent: Some(2), per_credential, ..Limits::default() };
        let pacer = LimitPacer::new([("a".to_owned(), two.clone())]);
        let wait = std::time::Duration::from_secs(1);
        let held = [
            try_acquire(&pacer, "a", &key, wait).await.unwrap(),
            try_acquire(&pacer, "a", &key, wait).await.unwrap(),
        ];

        // An rpm added, the bound of two the same: the two calls still fill it.
        let next =
            pacer.reconfigured([("a".to_owned(), Limits { requests_per_minute: Some(6000), ..two.clone() })]);
        assert!(!next.keeps_lanes_of(&pacer, "a"), "new limits, new lanes");
        assert_eq!(in_flight(&next, "a"), [(2, Some(2))], "per_credential {per_credential}");
        assert!(try_acquire(&next, "a", &key, wait).await.is_none(), "a third call waits past its patience");

        // Lowered to one: neither ending call's slot comes back until only one is in flight.
        let one = next.reconfigured([("a".to_owned(), Limits { max_concurrent: Some(1), ..two.clone() })]);
        let [first, second] = held;
        drop(first);
        assert!(
            try_acquire(&one, "a", &key, wait).await.is_none(),
            "one still in flight fills a bound of one"
        );
        drop(second);
        let third = try_acquire(&one, "a", &key, wait).await.expect("room once both ended");
        assert_eq!(in_flight(&one, "a"), [(1, Some(1))]);
        drop(third);
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_queued_for_a_slot_is_let_go_by_a_raised_bound() {
    let key = credential("sk-one-0123456789");
    let one = Limits { max_concurrent: Some(1), ..Limits::default() };
    let pacer = std::sync::Arc::new(LimitPacer::new([("a".to_owned(), one)]));
    let _held = try_acquire(&pacer, "a", &key, std::time::Duration::from_secs(1)).await.unwrap();
    let queued = {
        let (pacer, key) = (pacer.clone(), key.clone());
        tokio::spawn(async move {
            try_acquire(&pacer, "a", &key, std::time::Duration::from_secs(60)).await.is_some()
        })
    };
    tokio::task::yield_now().await;
    let _next =
        pacer.reconfigured([("a".to_owned(), Limits { max_concurrent: Some(2), ..Limits::default() })]);
    let started = tokio::time::Instant::now();
    assert!(queued.await.unwrap(), "the queued caller has the new room");
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "at once, not at its deadline");
}

#[tokio::test(start_paused = true)]
async fn limits_given_up_before_they_take_over_leave_the_running_bounds_as_they_were() {
    let key = credential("sk-one-0123456789");
    let two = Limits { max_concurrent: Some(2), ..Limits::default() };
    let pacer = std::sync::Arc::new(LimitPacer::new([("a".to_owned(), two.clone())]));
    let wait = std::time::Duration::from_secs(1);
    let first = try_acquire(&pacer, "a", &key, wait).await.unwrap();

    // A reload that is then refused: its pacer, built and dropped, bounds nothing.
    let refused = pacer.following([("a".to_owned(), Limits { max_concurrent: Some(1), ..two.clone() })]);
    drop(refused);
    assert_eq!(in_flight(&pacer, "a"), [(1, Some(2))]);
    let second = try_acquire(&pacer, "a", &key, wait).await.expect("the running bound of two still holds");

    // The same limits accepted: the bound of one counts both calls in flight.
    let next = pacer.following([("a".to_owned(), Limits { max_concurrent: Some(1), ..two })]);
    next.take_over(&pacer);
    assert_eq!(in_flight(&next, "a"), [(2, Some(1))]);
    drop(first);
    assert!(try_acquire(&next, "a", &key, wait).await.is_none(), "one still in flight fills a bound of one");
    drop(second);
    assert!(try_acquire(&next, "a", &key, wait).await.is_some());
}
