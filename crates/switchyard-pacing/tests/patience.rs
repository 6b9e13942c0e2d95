//! How long a call waits for its lane: its patience bounds a wait, never a call that may go.

#![allow(clippy::unwrap_used)]

use switchyard::credential::{CredentialId, Secret};
use switchyard::pacing::{PaceRequest, Pacer};
use switchyard_pacing::{LimitPacer, Limits};

fn credential(key: &str) -> CredentialId {
    CredentialId::derive("openai", "https://api.example", Some(&Secret::new(key)))
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
        let hedge = PaceRequest {
            provider: "a",
            credential_id: &key,
            estimated_tokens: 10,
            deadline: None,
            spill_after: Some(std::time::Duration::ZERO),
        };
        let mut permit = pacer.acquire(hedge).await.expect("room at once: sent");
        permit.settle(Some(10));
    }
}
