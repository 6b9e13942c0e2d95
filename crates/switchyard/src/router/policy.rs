//! What happens after a failed attempt: retry the target, rotate to the provider's next key,
//! switch to a special chain, move on, or stop. One pure function holds the error catalog's
//! rules and the route's overrides; the engine only carries its answer out.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::retry_delay;
use crate::route::Route;
use crate::{ErrorKind, ProviderError};

/// Which chain the router is walking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chain {
    /// The route's targets.
    General,
    /// The targets for prompts too long for the general chain.
    ContextWindow,
    /// The targets for content-filter refusals (once per request).
    ContentPolicy,
}

/// Where a failed attempt stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct FailurePoint {
    /// Retries of this target so far (0 on the first try).
    pub(super) retries: u32,
    /// Whether the provider has another credential the gate would let through.
    pub(super) can_rotate: bool,
    pub(super) chain: Chain,
    /// The request asked for its first target only (`x-switchyard-fallback: off`).
    pub(super) no_fallback: bool,
    /// The request is one call and nothing more ([`RequestOptions::single_call`]): no retry,
    /// no other key.
    ///
    /// [`RequestOptions::single_call`]: crate::RequestOptions::single_call
    pub(super) single_call: bool,
    pub(super) deadline: Option<Instant>,
    pub(super) now: Instant,
    /// The request's deadline cut the attempt short: it says nothing about the provider.
    pub(super) cut_by_deadline: bool,
    /// What the trail says when the deadline passed: the route's, or the caller's own timeout.
    pub(super) deadline_note: &'static str,
    /// Streamed content already reached the caller: nothing may restart.
    pub(super) content_sent: bool,
    /// The exchange may switch to the route's special chains (not embeddings).
    pub(super) special_chains: bool,
    /// This failure opened the target's circuit: its gate would refuse a retry.
    pub(super) circuit_opened: bool,
}

/// What the engine does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// The same target at once, with the provider's next credential.
    Rotate,
    /// The same target again, after this wait.
    Retry(Duration),
    /// A special chain instead of what is left of the current one.
    Switch(Chain),
    /// The next target, or the candidates.
    MoveOn,
    /// Give up: the error is returned unchanged.
    Stop,
}

/// The policy's answer, with the trail's note of why when the outcome alone does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decision {
    pub(super) next: Next,
    pub(super) note: Option<String>,
}

impl Decision {
    fn new(next: Next, note: Option<String>) -> Self {
        Self { next, note }
    }
}

/// What deciding draws on besides the facts: a jitter draw for the backoff, and the retry
/// budget. The jitter is drawn only when the catalog and the attempts left allow a retry (its
/// delay is then weighed against `max_wait` and the deadline), and the budget is spent only
/// for a retry that will happen.
pub(super) trait Means {
    /// A uniform draw from `[0, 1)`.
    fn jitter(&mut self) -> f64;
    /// Takes one retry from the budget; `false` when it is spent.
    fn spend_retry(&mut self) -> bool;
}

/// Means for a decision that cannot retry (after streamed content was sent): no jitter, no
/// budget.
pub(super) struct NoMeans;

impl Means for NoMeans {
    fn jitter(&mut self) -> f64 {
        0.0
    }

    fn spend_retry(&mut self) -> bool {
        false
    }
}

/// Decides what follows `error` at `at` on `route`, with no other target of the chain left to
/// try (see [`decide_among`]).
pub(super) fn decide(
    route: &Route,
    error: &ProviderError,
    at: &FailurePoint,
    means: &mut dyn Means,
) -> Decision {
    decide_among(route, error, at, false, means)
}

/// Decides what follows `error` at `at` on `route`; `others_remain` when another target of the
/// chain is still to try after this one.
pub(super) fn decide_among(
    route: &Route,
    error: &ProviderError,
    at: &FailurePoint,
    others_remain: bool,
    means: &mut dyn Means,
) -> Decision {
    let kind = error.kind();
    if at.content_sent {
        let note = "failed after streamed content reached the caller; not restarted";
        return Decision::new(Next::Stop, Some(note.to_owned()));
    }
    if kind == ErrorKind::Cancelled {
        return Decision::new(Next::Stop, None);
    }
    if at.cut_by_deadline {
        return Decision::new(Next::MoveOn, Some(at.deadline_note.to_owned()));
    }
    if at.single_call {
        return Decision::new(Next::Stop, Some("a single call: not retried".to_owned()));
    }
    // Another key of the same provider can fix what this key broke, at once: a rate limit rests
    // this (key, model), not the others, and waiting out its Retry-After (often past max_wait)
    // would leave a fresh key unused.
    if at.can_rotate && matches!(kind, ErrorKind::Auth | ErrorKind::QuotaExceeded | ErrorKind::RateLimited) {
        return Decision::new(Next::Rotate, Some("trying the provider's next credential".to_owned()));
    }
    // A target that said nothing, or stopped in the middle of its answer, is not asked again
    // while another may answer at once.
    if (error.is_silence() || error.is_stall())
        && others_remain
        && !at.no_fallback
        && route.falls_back_on(error)
    {
        let note = match error.is_stall() {
            true => "stalled in its answer past the idle wait: not asked again while another target remains",
            false => {
                "no answer within its first-byte wait (a whole answer's: its whole wait): not asked again while another target remains"
            }
        };
        return Decision::new(Next::MoveOn, Some(note.to_owned()));
    }
    // A retry the target's circuit would refuse is not waited for (its Retry-After or backoff).
    let retried = match at.circuit_opened {
        true => Err(Some("its circuit opened on this failure: not retried".to_owned())),
        false => retry(route, error, at, means),
    };
    let note = match retried {
        Ok(delay) => return Decision::new(Next::Retry(delay), None),
        Err(note) => note,
    };
    if !at.no_fallback && at.special_chains {
        if kind == ErrorKind::ContextLength
            && at.chain == Chain::General
            && !route.context_window().is_empty()
        {
            return Decision::new(Next::Switch(Chain::ContextWindow), note);
        }
        if kind == ErrorKind::ContentFiltered && redirects_refusal(route, at.chain, at.no_fallback) {
            return Decision::new(
                Next::Switch(Chain::ContentPolicy),
                Some("redirected to the content-policy targets".to_owned()),
            );
        }
    }
    if at.no_fallback || !route.falls_back_on(error) {
        return Decision::new(Next::Stop, note);
    }
    Decision::new(Next::MoveOn, note)
}

/// Whether a content-filter refusal on `chain` goes to the route's content-policy targets:
/// once per request (never from that chain itself), and only when fallback is on. The one
/// place this rule lives, for refusals that arrive as errors and as answers alike.
pub(super) fn redirects_refusal(route: &Route, chain: Chain, no_fallback: bool) -> bool {
    !no_fallback && chain != Chain::ContentPolicy && !route.content_policy().is_empty()
}

/// The wait before retrying the same target, or why it is not retried (`None`: the catalog or
/// the attempts say no, with nothing worth a note).
fn retry(
    route: &Route,
    error: &ProviderError,
    at: &FailurePoint,
    means: &mut dyn Means,
) -> Result<Duration, Option<String>> {
    let retry = route.retry();
    if !route.retries_on(error) || at.retries + 1 >= retry.max_attempts {
        return Err(None);
    }
    let retry_after = error.retry_after();
    let delay = retry_delay(retry, at.retries + 1, means.jitter(), retry_after);
    if let Some(wait) = retry_after.filter(|wait| *wait > retry.max_wait) {
        // Never sleep longer than max_wait: move on, or let the caller see the provider's
        // Retry-After, rather than hold the request for minutes.
        return Err(Some(format!(
            "Retry-After {wait:?} exceeds max_wait {:?}; not waiting for it",
            retry.max_wait
        )));
    }
    if at.deadline.is_some_and(|d| at.now + delay >= d) {
        return Err(Some(format!("a retry in {delay:?} would pass the request deadline")));
    }
    if !means.spend_retry() {
        return Err(Some("retry budget spent: not retrying".to_owned()));
    }
    Ok(delay)
}

#[cfg(test)]
mod tests;
