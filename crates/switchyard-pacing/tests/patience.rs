//! How long a call waits for its lane: its patience bounds a wait, never a call that may go.

#![allow(clippy::unwrap_used)]

use switchyard::credential::{CredentialId, Secret};
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard_pacing::{LimitPacer, Limits};

fn credential(key: &str) -> CredentialId {
    CredentialId::derive("openai", "https://api.example", Some(&Secret::new(key)))
}

/// A call on lane `a` with `key`, that may write `tokens`, of no deadline.
fn ask(key: &CredentialId, tokens: u32) -> PaceRequest<'_> {
    PaceRequest {
        provider: "a",
        credential_id: key,
        estimated_tokens: tokens,
        deadline: None,
        spill_after: None,
    }
}

/// A lane of 6,000 tokens a minute (100 a second), shared by the calls of a test.
fn tokens_lane() -> std::sync::Arc<LimitPacer> {
    let limits = Limits { tokens_per_minute: Some(6000), ..Limits::default() };
    std::sync::Arc::new(LimitPacer::new([("a".to_owned(), limits)]))
}

#[tokio::test]
async fn a_call_of_no_patience_goes_when_its_lane_lets_it_go_at_once() {
    // A hedge: it goes now or not at all. Booked a moment after it asked (real time moves),
    // it still goes while nothing stands in its way, on every kind of limit.
    let key = credential("sk-one-0123456789");
    let limits = Limits {
        requests_per_minute: Some(600),
        tokens_per_minute: Some(100_000),
        max_concurrent: Some(4),
        ..Limits::default()
    };
    let pacer = LimitPacer::new([("a".to_owned(), limits)]);
    for _ in 0..3 {
        let hedge = PaceRequest { spill_after: Some(std::time::Duration::ZERO), ..ask(&key, 10) };
        let mut permit = pacer.acquire(hedge).await.expect("room at once: sent");
        // It waited for nothing: no wait is reported (no `rate_limit_waited`, no queued time).
        assert_eq!((permit.waited, permit.reason), (std::time::Duration::ZERO, None));
        permit.settle(Some(10));
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_tokens_goes_when_the_calls_before_it_give_back_what_they_did_not_use() {
    // 6,000 tokens a minute (100 a second); three calls that may write 1,000 tokens each (their
    // max_tokens), and use 12.
    let key = credential("sk-one-0123456789");
    let pacer = tokens_lane();
    let start = tokio::time::Instant::now();
    let call = |pacer: std::sync::Arc<LimitPacer>, key: CredentialId, after: u64| async move {
        tokio::time::sleep(std::time::Duration::from_millis(after)).await;
        let mut permit = pacer.acquire(ask(&key, 1000)).await.unwrap();
        let went = start.elapsed();
        // The answer takes 100 ms and uses 12 tokens of its 1,000.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        permit.settle(Some(12));
        went
    };
    let calls = [0, 20, 40].map(|after| tokio::spawn(call(pacer.clone(), key.clone(), after)));
    let mut went = Vec::new();
    for call in calls {
        went.push(call.await.unwrap().as_millis());
    }
    // Each goes once the one before gave its unused tokens back and the bucket refilled what
    // they used (12 tokens: 120 ms), not after the 10 s its estimate would have held it.
    assert_eq!(went[0], 0);
    assert!(went[1] <= 250 && went[2] <= 500, "{went:?}");
    assert!(went[1] >= 100 && went[2] >= went[1] + 100, "each after the one before answered: {went:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_that_ends_without_its_usage_gives_waiters_nothing_it_may_have_spent() {
    // The first call's stream is cut before its usage came: it may have written its 1,000
    // tokens, so the one waiting behind it waits the 10 s they take to refill.
    let key = credential("sk-one-0123456789");
    let pacer = tokens_lane();
    let start = tokio::time::Instant::now();
    let call = |pacer: std::sync::Arc<LimitPacer>, key: CredentialId| async move {
        pacer.acquire(ask(&key, 1000)).await.unwrap()
    };
    let mut first = call(pacer.clone(), key.clone()).await;
    let second = tokio::spawn(call(pacer.clone(), key.clone()));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    first.settle(None);
    let mut second = second.await.unwrap();
    assert!(start.elapsed() >= std::time::Duration::from_secs(9), "{:?}", start.elapsed());
    second.settle(Some(10));
}
