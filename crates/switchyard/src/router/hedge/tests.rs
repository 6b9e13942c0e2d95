//! The race as a table: who ends when, and how the race says it ended. Paused time: a half
//! that "takes 500 ms" ends exactly then.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{Raced, race};

const DELAY: Duration = Duration::from_millis(300);

/// A half that answers `answer` after `ms`.
async fn answers(ms: u64, answer: &'static str) -> Result<&'static str, &'static str> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(answer)
}

/// A half that fails with `error` after `ms`.
async fn fails(ms: u64, error: &'static str) -> Result<&'static str, &'static str> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Err(error)
}

type Race = Raced<&'static str, &'static str, &'static str, &'static str, &'static str>;

/// Races `first` against a hedge `hedge` (which starts at the delay, so its times count from
/// there), and says how it ended and when.
async fn run(
    first: impl Future<Output = Result<&'static str, &'static str>>,
    hedge: impl Future<Output = Result<&'static str, &'static str>>,
) -> (Race, Duration) {
    let start = Instant::now();
    let raced = race(first, || Some(("hedge", hedge)), DELAY).await;
    (raced, start.elapsed())
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_answers_before_the_delay_starts_no_hedge() {
    let mut started = false;
    let raced: Race = race(
        answers(299, "first"),
        || {
            started = true;
            Some(("hedge", answers(0, "hedge")))
        },
        DELAY,
    )
    .await;
    assert_eq!(raced, Raced::Alone(Ok("first")));
    assert!(!started, "the hedge was never asked for");
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_fails_before_the_delay_ends_the_race_alone() {
    let (raced, took) = run(fails(100, "down"), answers(0, "hedge")).await;
    assert_eq!((raced, took), (Raced::Alone(Err("down")), ms(100)));
}

#[tokio::test(start_paused = true)]
async fn with_no_hedge_to_start_the_first_attempt_runs_on_alone() {
    let start = Instant::now();
    let raced: Race =
        race(answers(1000, "first"), || None::<(&str, std::future::Ready<Result<&str, &str>>)>, DELAY).await;
    assert_eq!((raced, start.elapsed()), (Raced::Alone(Ok("first")), ms(1000)));
}

#[tokio::test(start_paused = true)]
async fn the_hedge_wins_when_it_answers_before_a_slow_first_attempt() {
    let (raced, took) = run(answers(2000, "first"), answers(50, "hedge")).await;
    let won = Raced::HedgeAnswered { first_failed: None, hedge: "hedge", answer: "hedge" };
    assert_eq!((raced, took), (won, ms(350)));
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_wins_when_it_answers_while_the_hedge_runs() {
    let (raced, took) = run(answers(400, "first"), answers(500, "hedge")).await;
    let won = Raced::FirstEnded { first: Ok("first"), hedge: "hedge", hedge_failed: None };
    assert_eq!((raced, took), (won, ms(400)));
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_fails_leaves_the_hedge_to_answer() {
    let (raced, took) = run(fails(500, "down"), answers(400, "hedge")).await;
    let won = Raced::HedgeAnswered { first_failed: Some("down"), hedge: "hedge", answer: "hedge" };
    assert_eq!((raced, took), (won, ms(700)));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_fails_leaves_the_first_attempt_to_answer() {
    let (raced, took) = run(answers(1000, "first"), fails(50, "hedge down")).await;
    let won = Raced::FirstEnded { first: Ok("first"), hedge: "hedge", hedge_failed: Some("hedge down") };
    assert_eq!((raced, took), (won, ms(1000)));
}

#[tokio::test(start_paused = true)]
async fn both_failing_first_attempt_first_ends_with_the_hedges_failure() {
    let (raced, took) = run(fails(400, "down"), fails(500, "hedge down")).await;
    let both = Raced::HedgeFailedAfterFirst { first: "down", hedge: "hedge", hedge_failed: "hedge down" };
    assert_eq!((raced, took), (both, ms(800)));
}

#[tokio::test(start_paused = true)]
async fn both_failing_hedge_first_ends_with_the_first_attempts_failure() {
    let (raced, took) = run(fails(400, "down"), fails(50, "hedge down")).await;
    let both = Raced::FirstEnded { first: Err("down"), hedge: "hedge", hedge_failed: Some("hedge down") };
    assert_eq!((raced, took), (both, ms(400)));
}
