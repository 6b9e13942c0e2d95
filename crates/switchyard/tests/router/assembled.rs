//! A non-streamed chat sent upstream as a stream and put back together (the route's
//! `stream_upstream`, on by default, for a provider across a network): the stream's limits
//! guard it, and a break before its end is retried or failed over whole.

use std::time::Duration;

use switchyard::route::{Route, Timeouts};
use switchyard::simulated::{Latency, SimulatedProvider, Step};
use switchyard::trail::Outcome;
use tokio::time::Instant;

use crate::support::*;

/// A provider across a network: it answers a whole chat through its stream.
fn remote() -> SimulatedProvider {
    SimulatedProvider::new()
        .streams_upstream(true)
        .reply("a whole answer in pieces")
        .stream(5, Duration::ZERO)
}

fn limits(first_byte: u64, idle: u64) -> Timeouts {
    Timeouts {
        first_byte: Duration::from_secs(first_byte),
        idle: Duration::from_secs(idle),
        total: Duration::from_secs(120),
        deadline: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_asked_as_a_stream_is_the_whole_answer() {
    let primary = remote();
    let router = router(&[("p", &primary)], Route::builder("default").target("p:m"));
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert!(answer.usage.is_some(), "the stream's usage");
    assert_eq!(primary.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_target_of_a_whole_request_is_left_at_the_first_byte_limit_not_the_total() {
    let silent = remote().latency(Latency::Fixed(Duration::from_secs(600)));
    let backup = remote();
    let route = Route::builder("default")
        .target("silent:m")
        .target("backup:m")
        .retry(quick_retry(1))
        .timeouts(limits(5, 30));
    let router = router(&[("silent", &silent), ("backup", &backup)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(start.elapsed(), Duration::from_secs(5), "the first-byte limit, not the 120 s total");
    assert_eq!(answer.trail.attempts()[0].error_kind(), Some(switchyard::ErrorKind::Timeout));
}

#[tokio::test(start_paused = true)]
async fn a_whole_request_whose_stream_breaks_or_stalls_is_retried_whole() {
    for step in [Step::CutAfter(2), Step::StallAfter(2)] {
        let flaky = remote().script([step.clone()]);
        let route = Route::builder("default").target("p:m").retry(quick_retry(2)).timeouts(limits(5, 3));
        let router = router(&[("p", &flaky)], route);
        let answer = router.chat(&request("default")).await.unwrap();
        assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"), "{step:?}");
        assert_eq!(answer.trail.outcomes(), [Outcome::Retried, Outcome::Ok], "{step:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_route_that_does_not_stream_upstream_asks_for_the_whole_answer() {
    let slow = remote().latency(Latency::Fixed(Duration::from_secs(10)));
    let route = Route::builder("default").target("p:m").timeouts(limits(5, 5)).stream_upstream(false);
    let router = router(&[("p", &slow)], route);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("a whole answer in pieces"));
    assert_eq!(start.elapsed(), Duration::from_secs(10), "only the total limit guards a whole call");
}
