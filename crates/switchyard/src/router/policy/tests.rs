//! The policy as a table: every kind of the error catalog, in every situation a failure can
//! meet, and what follows.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::route::Retry;
use crate::{ErrorKind, ProviderError, Target};

/// Fixed means: a jitter draw of one half, and a budget that may be spent.
struct Fixed {
    budget: bool,
    jitter_draws: u32,
    spent: u32,
}

impl Means for Fixed {
    fn jitter(&mut self) -> f64 {
        self.jitter_draws += 1;
        0.5
    }

    fn spend_retry(&mut self) -> bool {
        self.spent += 1;
        self.budget
    }
}

/// A first try on the general chain, with nothing else in play.
fn first_try() -> FailurePoint {
    FailurePoint {
        retries: 0,
        can_rotate: false,
        chain: Chain::General,
        no_fallback: false,
        single_call: false,
        deadline: None,
        now: Instant::now(),
        cut_by_deadline: false,
        deadline_note: crate::trail::DEADLINE_PASSED,
        content_sent: false,
        special_chains: true,
        circuit_opened: false,
    }
}

fn means() -> Fixed {
    Fixed { budget: true, jitter_draws: 0, spent: 0 }
}

/// A route with both special chains and three attempts per target.
fn route() -> Route {
    Route::builder("default")
        .target("a:m")
        .target("b:m")
        .context_window("long:m")
        .content_policy("lenient:m")
        .retry(Retry { max_attempts: 3, ..Retry::default() })
        .build()
        .unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Situation {
    FirstTry,
    RetriesLeft,
    RetriesSpent,
    AnotherKey,
    ContentPolicyUsed,
    ExplicitTarget,
    FallbackOff,
    ContentSent,
    Embeddings,
    SingleCall,
    LastTarget,
}

const SITUATIONS: [Situation; 11] = [
    Situation::FirstTry,
    Situation::RetriesLeft,
    Situation::RetriesSpent,
    Situation::AnotherKey,
    Situation::ContentPolicyUsed,
    Situation::ExplicitTarget,
    Situation::FallbackOff,
    Situation::ContentSent,
    Situation::Embeddings,
    Situation::SingleCall,
    Situation::LastTarget,
];

/// What follows, in short: Retry, Rotate, Switch to the context-window or content-policy
/// chain, Move on, Stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Short {
    R,
    K,
    W,
    P,
    M,
    S,
}

fn short(next: Next) -> Short {
    match next {
        Next::Retry(_) => Short::R,
        Next::Rotate => Short::K,
        Next::Switch(Chain::ContextWindow) => Short::W,
        Next::Switch(_) => Short::P,
        Next::MoveOn => Short::M,
        Next::Stop => Short::S,
    }
}

/// Decides after `error` in `situation`: on the general chain of two targets, the first, so
/// another target remains, unless the situation has none (the content-policy chain's one
/// target, a named target, fallback off, a stream that sent content, the last target).
fn decide_in(error: &ProviderError, situation: Situation) -> Decision {
    let general = route();
    let explicit = general.for_named_target("a:m".parse::<Target>().unwrap());
    let mut at = first_try();
    let mut on = &general;
    let mut others_remain = false;
    match situation {
        Situation::FirstTry => others_remain = true,
        Situation::RetriesLeft => (at.retries, others_remain) = (1, true),
        Situation::RetriesSpent => (at.retries, others_remain) = (2, true),
        Situation::AnotherKey => (at.can_rotate, others_remain) = (true, true),
        Situation::ContentPolicyUsed => at.chain = Chain::ContentPolicy,
        Situation::ExplicitTarget => on = &explicit,
        Situation::FallbackOff => at.no_fallback = true,
        Situation::ContentSent => at.content_sent = true,
        Situation::Embeddings => (at.special_chains, others_remain) = (false, true),
        Situation::SingleCall => (at.single_call, at.no_fallback, at.can_rotate) = (true, true, true),
        Situation::LastTarget => {}
    }
    decide_among(on, error, &at, others_remain, &mut means())
}

/// A timeout of a target that said nothing within its first-byte wait.
fn silence() -> ProviderError {
    ProviderError::silence("test")
}

#[tokio::test(start_paused = true)]
async fn every_kind_of_the_catalog_in_every_situation() {
    use Short::*;
    // Columns: first try, retries left, retries spent, another key, content policy used,
    // explicit target, fallback off, streamed content sent, an embeddings request, a single
    // call (which has fallback off, and another key it does not take), the chain's last target.
    let of = |kind| ProviderError::new(kind, "test");
    let table: [(ProviderError, [Short; 11]); 15] = [
        (of(ErrorKind::RateLimited), [R, R, M, K, R, R, R, S, R, S, R]),
        (of(ErrorKind::QuotaExceeded), [M, M, M, K, M, M, S, S, M, S, M]),
        (of(ErrorKind::Timeout), [R, R, M, R, R, R, R, S, R, S, R]),
        // Said nothing within the first-byte wait: the next target at once while one remains.
        (silence(), [M, M, M, M, R, R, R, S, M, S, R]),
        // Stopped in the middle of its answer past the idle wait: the same.
        (ProviderError::stall("test"), [M, M, M, M, R, R, R, S, M, S, R]),
        (of(ErrorKind::Transport), [R, R, M, R, R, R, R, S, R, S, R]),
        (of(ErrorKind::Unavailable), [R, R, M, R, R, R, R, S, R, S, R]),
        (of(ErrorKind::MalformedResponse), [R, R, M, R, R, R, R, S, R, S, R]),
        (of(ErrorKind::Auth), [M, M, M, K, M, M, S, S, M, S, M]),
        (of(ErrorKind::ModelNotFound), [M, M, M, M, M, M, S, S, M, S, M]),
        (of(ErrorKind::ContextLength), [W, W, W, W, S, S, S, S, S, S, W]),
        (of(ErrorKind::ContentFiltered), [P, P, P, P, S, S, S, S, S, S, P]),
        (of(ErrorKind::InvalidRequest), [S, S, S, S, S, S, S, S, S, S, S]),
        (of(ErrorKind::SchemaViolation), [S, S, S, S, S, S, S, S, S, S, S]),
        (of(ErrorKind::Cancelled), [S, S, S, S, S, S, S, S, S, S, S]),
    ];
    for (error, row) in table {
        for (situation, expected) in SITUATIONS.into_iter().zip(row) {
            let decision = decide_in(&error, situation);
            assert_eq!(short(decision.next), expected, "{error:?} at {situation:?}: {decision:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn silence_is_asked_again_when_the_route_does_not_fall_back_on_timeouts() {
    let narrow = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(Retry { max_attempts: 3, ..Retry::default() })
        .fallback_on(crate::route::ErrorFilter::Kinds(vec![ErrorKind::Unavailable]))
        .build()
        .unwrap();
    let decision = decide_among(&narrow, &silence(), &first_try(), true, &mut means());
    assert!(matches!(decision.next, Next::Retry(_)), "{decision:?}");
    let decision = decide_among(&route(), &silence(), &first_try(), true, &mut means());
    assert_eq!(decision.next, Next::MoveOn);
    assert!(decision.note.unwrap().contains("not asked again"));
}

#[tokio::test(start_paused = true)]
async fn a_retry_waits_the_jittered_backoff_raised_to_retry_after() {
    let route = route();
    let at = first_try();
    let base = route.retry().backoff_base;
    let error = ProviderError::new(ErrorKind::Unavailable, "test");
    assert_eq!(decide(&route, &error, &at, &mut means()).next, Next::Retry(base / 2));
    let limited = ProviderError::new(ErrorKind::RateLimited, "test").with_retry_after(Duration::from_secs(2));
    assert_eq!(decide(&route, &limited, &at, &mut means()).next, Next::Retry(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn retries_that_cannot_be_afforded_move_on_and_say_why() {
    let route = route();
    let now = Instant::now();
    let at = FailurePoint { now, ..first_try() };
    let long = ProviderError::new(ErrorKind::RateLimited, "test").with_retry_after(Duration::from_secs(60));
    let decision = decide(&route, &long, &at, &mut means());
    assert_eq!(decision.next, Next::MoveOn);
    assert!(decision.note.unwrap().contains("exceeds max_wait"));

    let near = FailurePoint { deadline: Some(now + Duration::from_millis(1)), ..at };
    let error = ProviderError::new(ErrorKind::Unavailable, "test");
    let decision = decide(&route, &error, &near, &mut means());
    assert_eq!(decision.next, Next::MoveOn);
    assert!(decision.note.unwrap().contains("would pass the request deadline"));

    let mut broke = Fixed { budget: false, jitter_draws: 0, spent: 0 };
    let decision = decide(&route, &error, &at, &mut broke);
    assert_eq!(decision.next, Next::MoveOn);
    assert_eq!(decision.note.as_deref(), Some("retry budget spent: not retrying"));

    let cut = FailurePoint { cut_by_deadline: true, ..at };
    let decision = decide(&route, &error, &cut, &mut means());
    assert_eq!((decision.next, decision.note.as_deref()), (Next::MoveOn, Some("request deadline passed")));
}

#[tokio::test(start_paused = true)]
async fn a_decision_that_does_not_retry_draws_no_jitter_and_spends_no_budget() {
    let route = route();
    let at = first_try();
    let mut counted = means();
    decide(&route, &ProviderError::new(ErrorKind::ModelNotFound, "test"), &at, &mut counted);
    assert_eq!((counted.jitter_draws, counted.spent), (0, 0));
    decide(&route, &ProviderError::new(ErrorKind::Timeout, "test"), &at, &mut counted);
    assert_eq!((counted.jitter_draws, counted.spent), (1, 1));
}
