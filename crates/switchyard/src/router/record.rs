//! A request's record: its trail, its time queued by pacing, and why targets could not serve
//! it. The one writer of the trail's entries and of the events that tell of attempts: every
//! entry and every such event goes through a method named after what happened.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::exchange::BilledPrompt;
use super::inner::Inner;
use crate::chat::Usage;
use crate::credential::CredentialId;
use crate::events::EventKind;
use crate::pacing::Permit;
use crate::trail::{Attempt, CutCall, CutShort, Outcome, Timing, Trail, Unfinished};
use crate::{ErrorKind, ProviderError, Target};

/// The record of one request.
pub(super) struct Record<'r> {
    /// The router: its events, and its prices for what a dropped request cost.
    inner: &'r Inner,
    /// When the request began: entries are placed from it.
    started: Instant,
    trail: Trail,
    /// Time spent waiting for the pacer, over all attempts.
    queued: Duration,
    /// The target called last, for the provider-switch event.
    previous: Option<Target>,
    /// Where the trail goes if the request is dropped before it ends.
    unfinished: Option<Leaving<'r>>,
    /// The calls sent (the last, and a hedge beside it), and when: each not recorded is
    /// `cancelled` if the request is dropped before it ends. (A hedge is told of through a
    /// shared borrow, as the pair runs.)
    under_way: std::sync::Mutex<Vec<UnderWay>>,
}

/// A call sent and not yet recorded: where it went, with which key, when; and its failure,
/// when it failed while a hedge beside it ran on.
struct UnderWay {
    target: Target,
    credential_id: CredentialId,
    started: Instant,
    /// Its failure, attributed, and when it came.
    failed: Option<(ProviderError, Instant)>,
    /// A hedge beside the request's attempt.
    hedge: bool,
}

/// Where a request dropped before it ended leaves its trail: the route's name, and the
/// prompt's tokens (estimated) that each call it cuts short cost at the least.
struct Leaving<'r> {
    unfinished: Unfinished,
    route: Arc<str>,
    /// The exchange, asked for its prompt's estimate only if a call was cut.
    prompt: &'r (dyn BilledPrompt + Sync),
}

impl<'r> Record<'r> {
    pub(super) fn new(inner: &'r Inner, started: Instant) -> Self {
        Self {
            inner,
            started,
            trail: Trail::default(),
            queued: Duration::ZERO,
            previous: None,
            unfinished: None,
            under_way: Default::default(),
        }
    }

    /// Leaves the trail in `unfinished`, under `route`, should the request be dropped before
    /// it ends, with what the calls it cuts short cost: `prompt` says (asked only then) the
    /// prompt's tokens each was sent with, when its provider bills them.
    pub(super) fn leaving_trail(
        mut self,
        unfinished: Option<Unfinished>,
        route: &Arc<str>,
        prompt: &'r (dyn BilledPrompt + Sync),
    ) -> Self {
        self.unfinished = unfinished.map(|unfinished| Leaving { unfinished, route: route.clone(), prompt });
        self
    }

    /// A call to `target` with `credential_id` is sent, its attempt begun at `started` (a
    /// hedge's too): those before it have ended.
    pub(super) fn sending(
        &self,
        target: &Target,
        credential_id: &CredentialId,
        started: Instant,
        hedge: bool,
    ) {
        if self.unfinished.is_some() {
            let mut under_way = self.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !hedge {
                under_way.clear();
            }
            under_way.push(UnderWay {
                target: target.clone(),
                credential_id: credential_id.clone(),
                started,
                failed: None,
                hedge,
            });
        }
    }

    /// The call to `target` begun at `started` failed with `error` while a hedge beside it ran
    /// on: recorded `failed`, not `cancelled`, if the request is dropped before the pair ends.
    pub(super) fn failed_meanwhile(&self, target: &Target, started: Instant, error: ProviderError) {
        if self.unfinished.is_some() {
            let mut under_way = self.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(call) = under_way.iter_mut().find(|c| c.target == *target && c.started == started) {
                call.failed = Some((error, Instant::now()));
            }
        }
    }

    /// How long after the request began `at` is: where an entry starts.
    pub(super) fn offset(&self, at: Instant) -> Duration {
        at - self.started
    }

    /// Where the request's time went, up to now.
    pub(super) fn timing(&self) -> Timing {
        Timing { total: self.started.elapsed(), queued: self.queued, first_token: None }
    }

    /// Whether nothing was recorded yet: the request's first attempt is under way.
    pub(super) fn is_empty(&self) -> bool {
        self.trail.is_empty()
    }

    /// How many entries the trail holds.
    pub(super) fn len(&self) -> usize {
        self.trail.len()
    }

    /// The trail, for the answer or the error that ends the request.
    pub(super) fn take_trail(&mut self) -> Trail {
        // Ended: nothing is left to leave behind should the request be dropped now.
        self.unfinished = None;
        std::mem::take(&mut self.trail)
    }

    /// A call to `target` begins (not a retry of the same one): a move from the target called
    /// last is announced, with the kind of failure that caused it.
    pub(super) fn calling(&mut self, target: &Target, reason: Option<ErrorKind>) {
        if let Some(from) = self.previous.replace(target.clone())
            && from != *target
        {
            self.inner.events.publish(EventKind::ProviderSwitch { from, to: target.clone(), reason });
        }
    }

    /// The pacer let a call of `provider` with `credential_id` go after `permit.waited`.
    pub(super) fn paced(&mut self, provider: &Arc<str>, credential_id: &CredentialId, permit: &Permit) {
        if let Some(reason) = permit.reason {
            self.inner.events.publish(EventKind::RateLimitWaited {
                provider: provider.clone(),
                credential_id: credential_id.clone(),
                waited: permit.waited,
                reason,
            });
        }
        self.queued += permit.waited;
    }

    /// A hedge on `hedge` started beside `first`, `after` it was sent.
    pub(super) fn hedge_started(&self, route: &str, first: &Target, hedge: &Target, after: Duration) {
        self.inner.events.publish(EventKind::HedgeStarted {
            route: route.to_owned(),
            first: first.clone(),
            hedge: hedge.clone(),
            after,
        });
    }

    /// The hedge on `hedge` answered before `first`.
    pub(super) fn hedge_won(&self, route: &str, hedge: &Target, first: &Target) {
        self.inner.events.publish(EventKind::HedgeWon {
            route: route.to_owned(),
            hedge: hedge.clone(),
            first: first.clone(),
        });
    }

    /// The health gate skipped a target.
    pub(super) fn skipped(&mut self, attempt: Attempt) {
        self.trail.push(attempt);
    }

    /// The gate stopped a retry: the attempt it retried failed after all, for `reason`.
    pub(super) fn retry_gated(&mut self, reason: String) {
        if let Some(last) = self.trail.last_mut() {
            last.outcome = Outcome::Failed;
            last.note = Some(reason);
        }
    }

    /// The pacer refused a call.
    pub(super) fn refused(&mut self, attempt: Attempt) {
        self.trail.push(attempt);
    }

    /// A target was skipped: the request cannot be written in its API. Its reason stays on its
    /// entry, for the error when no target could serve the request.
    pub(super) fn unsupported(&mut self, attempt: Attempt) {
        // A target the provider itself refused was called: its failure is announced.
        if attempt.outcome == Outcome::Failed {
            self.announce_failure(&attempt, false);
        }
        self.trail.push(attempt);
    }

    /// A target answered.
    pub(super) fn succeeded(&mut self, attempt: Attempt) {
        self.trail.push(attempt);
    }

    /// A target's answer was a refusal, redirected to the content-policy chain.
    pub(super) fn redirected(&mut self, attempt: Attempt) {
        self.trail.push(attempt);
    }

    /// A call failed, its outcome decided: announced, with whether it will be retried.
    pub(super) fn failed(&mut self, attempt: Attempt) {
        self.announce_failure(&attempt, attempt.outcome == Outcome::Retried);
        self.trail.push(attempt);
    }

    /// `attempt`'s failure on the event bus.
    fn announce_failure(&self, attempt: &Attempt, will_retry: bool) {
        if let (Some(target), Some(error)) = (attempt.target(), &attempt.error) {
            self.inner.events.publish(EventKind::AttemptFailed {
                target: target.clone(),
                credential_id: attempt.credential_id.clone(),
                error: error.clone(),
                will_retry,
            });
        }
    }

    /// The half of a hedged pair that lost (cancelled while it ran, or failed beside the
    /// other): recorded, and announced when it failed (its provider failed, whichever half
    /// answered); never retried.
    pub(super) fn lost(&mut self, attempt: Attempt) {
        if attempt.outcome == Outcome::Failed {
            self.announce_failure(&attempt, false);
        }
        self.trail.push(attempt);
    }

    /// A hedge that lost to the first attempt recorded at `first`: placed after it, since it
    /// started later; announced as [`lost`](Self::lost) is.
    pub(super) fn lost_beside(&mut self, first: usize, attempt: Attempt) {
        if attempt.outcome == Outcome::Failed {
            self.announce_failure(&attempt, false);
        }
        self.trail.insert(first + 1, attempt);
    }

    /// A candidate is asked.
    pub(super) fn candidate_started(&self, name: &Arc<str>) {
        self.inner.events.publish(EventKind::CandidateStarted { name: name.clone() });
    }

    /// A candidate answered.
    pub(super) fn candidate_answered(&mut self, attempt: Attempt, name: &Arc<str>) {
        self.trail.push(attempt);
        self.inner.events.publish(EventKind::CandidateSucceeded { name: name.clone() });
    }

    /// A candidate failed with `detail`.
    pub(super) fn candidate_failed(&mut self, attempt: Attempt, name: Arc<str>, detail: String) {
        self.trail.push(attempt);
        self.inner.events.publish(EventKind::CandidateFailed { name, detail });
    }

    /// The content-policy chain produced nothing: the refusal it replaced is served.
    pub(super) fn refusal_served(&mut self) {
        if let Some(redirected) =
            self.trail.attempts_mut().iter_mut().find(|a| a.outcome == Outcome::Redirected)
        {
            redirected.note = Some("the content-policy chain failed: this refusal is the answer".to_owned());
        }
    }

    /// The reasons of every target skipped as unsupported, when that is all the trail holds:
    /// no target could have served the request.
    pub(super) fn all_unsupported(&self) -> Option<String> {
        let attempts = self.trail.attempts();
        if !crate::trail::every_target_could_not(attempts, Attempt::unsupported) {
            return None;
        }
        let reasons: Vec<String> = attempts
            .iter()
            .filter_map(|a| Some(format!("{}: {}", a.target()?, a.error.as_ref()?.detail())))
            .collect();
        Some(reasons.join("; "))
    }

    /// The request's deadline ended the walk: said on the last entry, unless it says why already.
    pub(super) fn deadline_passed(&mut self, note: &'static str) {
        if let Some(last) = self.trail.last_mut()
            && last.note.is_none()
        {
            last.note = Some(note.to_owned());
        }
    }

    /// Nothing answered along `route`; `last` is the kind of the latest failure.
    pub(super) fn gave_up(&self, route: &str, last: Option<ErrorKind>) {
        self.inner.events.publish(EventKind::AllTargetsFailed {
            route: route.to_owned(),
            attempts: self.trail.len(),
            last,
        });
    }
}

impl Drop for Record<'_> {
    /// A request dropped before it ended (its caller went away) leaves its trail where it was
    /// asked to, the call under way as `cancelled`, and what the calls it cut cost.
    fn drop(&mut self) {
        let Some(Leaving { unfinished, route, prompt }) = self.unfinished.take() else { return };
        let under_way =
            std::mem::take(self.under_way.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner));
        let mut cut = Vec::new();
        for UnderWay { target, credential_id, started, failed, hedge } in under_way {
            let offset = self.offset(started);
            let recorded =
                self.trail.attempts().iter().any(|a| a.started == offset && a.target() == Some(&target));
            if recorded {
                continue;
            }
            let ended = failed.as_ref().map_or_else(Instant::now, |(_, at)| *at);
            let mut attempt =
                Attempt::called(&target, &credential_id, offset, ended - started, Duration::ZERO);
            attempt.hedge = hedge;
            let note = match failed {
                Some((error, _)) => {
                    attempt.outcome = Outcome::Failed;
                    attempt.error = Some(error);
                    "failed while the call beside it ran; then the caller went away"
                }
                None => {
                    attempt.outcome = Outcome::Cancelled;
                    cut.push(target);
                    unfinished.cut_note()
                }
            };
            self.trail.push(attempt.with_note(Some(note.to_owned())));
        }
        let cost = match cut.is_empty() {
            true => None,
            false => prompt.billed_prompt().map(|prompt| self.cost_of_cut(cut, prompt)),
        };
        unfinished.put(route, std::mem::take(&mut self.trail), cost);
    }
}

impl Record<'_> {
    /// What the calls to `cut`, each sent with `prompt` tokens and cut short, cost at the
    /// least: the prompt, at each call's provider's price.
    fn cost_of_cut(&self, cut: Vec<crate::Target>, prompt: u32) -> CutShort {
        let usage = Usage { prompt_tokens: prompt, total_tokens: prompt, ..Usage::default() };
        let calls = cut.into_iter().map(|target| {
            let price = self.inner.price(&target);
            CutCall { cost: price.map(|price| price.cost(&usage)), usage, target }
        });
        CutShort { calls: calls.collect() }
    }
}
