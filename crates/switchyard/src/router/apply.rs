//! What an attempt came to, written down in one place: health learns of it, the record keeps
//! it, the plan and the verdict change, and after a failure the policy says what follows.
//! [`Run::apply`] is the one entry; the attempt itself (`attempt.rs`, `hedge.rs`) writes none
//! of this.

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{
    Answered, AttemptEnd, Called, Callee, Cut, Failure, Hedged, Loss, Lost, Skip, Unsupported,
};
use super::exchange::Exchange;
use super::inner::Inner;
use super::policy::{self, Chain, FailurePoint, Means, Next};
use super::run::{Run, Step, TargetTry};
use super::verdict::TargetAnswer;
use crate::health::{Gate, GateQuery, HealthEvent};
use crate::trail::{Attempt, Outcome};
use crate::{ErrorKind, ProviderError};

impl<'r, X: Exchange> Run<'r, X> {
    /// Writes what an attempt at `tries.target` came to, and says what the walk does next.
    pub(super) fn apply(&mut self, tries: &mut TargetTry, end: AttemptEnd<'r, X::Output>) -> Step {
        match end {
            AttemptEnd::OutOfTime => self.out_of_time(tries),
            AttemptEnd::Skipped(skip) => self.skipped(tries, skip),
            AttemptEnd::PacerRefused(refused) => {
                self.plan.called();
                self.refused_by_pacer(refused)
            }
            AttemptEnd::Called(called) => {
                // A target that cannot take this request did not serve the chain: when every
                // other target is gated, the one whose gate opens first is still tried.
                if !matches!(called, Called::Unsupported(_)) {
                    self.plan.called();
                }
                self.called(tries, called)
            }
            AttemptEnd::Hedged(pair) => {
                self.plan.called();
                self.pair_ended(tries, *pair)
            }
        }
    }

    /// The deadline passed before the attempt: the walk ends with the error pending, or a
    /// timeout.
    fn out_of_time(&mut self, tries: &mut TargetTry) -> Step {
        self.verdict.ran_out_of_time();
        let error = tries.pending.take().unwrap_or_else(|| {
            ProviderError::new(ErrorKind::Timeout, "request deadline passed before the next attempt")
                .with_target(tries.target.clone())
        });
        self.verdict.failed(error);
        Step::Finish
    }

    /// The gate skipped the target: recorded as a skip, or, when the previous attempt on it
    /// failed (the breaker opened or the keys ran out during this request), that failure
    /// decides as if it had been the last try.
    fn skipped(&mut self, tries: &mut TargetTry, skip: Skip) -> Step {
        let Skip { exhausted, until, reason, at } = skip;
        let Some(error) = tries.pending.take() else {
            let error = exhausted.then(|| {
                let error = ProviderError::new(ErrorKind::QuotaExceeded, reason.clone())
                    .with_target(tries.target.clone());
                match until.and_then(|u| u.checked_duration_since(at)) {
                    Some(wait) => error.with_retry_after(wait),
                    None => error,
                }
            });
            let offset = self.record.offset(at);
            self.record.skipped(Attempt::skipped(&tries.target, exhausted, error, offset, reason));
            if !exhausted && let Some(until) = until {
                self.plan.gated(&tries.target, until);
            }
            return Step::Next;
        };
        self.record.retry_gated(reason);
        if self.ctx.no_fallback() || !self.ctx.route.falls_back_on(&error) {
            return Step::Stop(self.upstream(error));
        }
        self.verdict.failed(error);
        Step::Next
    }

    /// The pacer refused the call: it falls back like any failure, and is never retried.
    fn refused_by_pacer(&mut self, refused: Failure<'r>) -> Step {
        let Failure { who, error, attempt, .. } = refused;
        if who.probe {
            self.ctx.inner.health.release_probe(&who.target, &who.slot.credential_ids);
        }
        self.record.refused(attempt);
        if !self.ctx.no_fallback() && self.ctx.route.falls_back_on(&error) {
            self.verdict.failed(error);
            return Step::Next;
        }
        Step::Stop(self.upstream(error))
    }

    /// A call of `tries.target` ended, its record to carry the try's note.
    fn called(&mut self, tries: &mut TargetTry, called: Called<'r, X::Output>) -> Step {
        let note = tries.note.take();
        match called {
            Called::Answered(mut answered) => {
                answered.attempt = answered.attempt.with_note(note);
                self.answered(answered)
            }
            Called::Unsupported(mut unsupported) => {
                unsupported.attempt = unsupported.attempt.with_note(note);
                self.unsupported(unsupported)
            }
            Called::Failed(mut failure) => {
                failure.attempt = failure.attempt.with_note(note);
                if failure.cut == Cut::Deadline {
                    self.verdict.ran_out_of_time();
                }
                self.failed(tries, failure)
            }
        }
    }

    /// The provider answered: served, or, a content-filter refusal on a route with a
    /// content-policy chain, kept aside and redirected.
    fn answered(&mut self, answered: Answered<'r, X::Output>) -> Step {
        let Answered { who, mut output, permit, sent, mut attempt } = answered;
        for notice in self.ctx.x.take_notices(&mut output) {
            attempt.notice(notice);
        }
        let inner = self.ctx.inner;
        let events = inner.health.record_success(&who.target, &who.slot.credential_ids, who.credential);
        inner.publish_all(events);
        let refused = self.ctx.x.is_content_filtered(&output);
        let answer = TargetAnswer { output, target: who.target, credential: who.credential, permit, sent };
        if refused && policy::redirects_refusal(&self.ctx.route, self.plan.chain(), self.ctx.no_fallback()) {
            let withheld =
                "the answer was withheld by the content filter; redirecting to the content-policy targets";
            attempt.outcome = Outcome::Redirected;
            attempt.error = Some(
                ProviderError::new(ErrorKind::ContentFiltered, withheld)
                    .with_target(answer.target.clone())
                    .with_credential(who.slot.credential_ids[who.credential].clone()),
            );
            self.record.redirected(attempt);
            // Its permit is let go: only an answer served holds one on.
            self.verdict.keep_refusal(TargetAnswer { permit: None, ..answer });
            self.plan.switch(Chain::ContentPolicy, self.ctx.route.content_policy());
            return Step::Next;
        }
        if refused {
            attempt.filtered();
        }
        self.record.succeeded(attempt);
        self.verdict.answered(answer);
        Step::Answered
    }

    /// The request cannot be written in the target's API: nothing was sent, so the target's
    /// health is untouched and the walk goes on. Not even a route without fallback stops here:
    /// the target did not fail, it was never asked.
    fn unsupported(&mut self, unsupported: Unsupported) -> Step {
        self.record.unsupported(unsupported.attempt);
        self.verdict.skipped(unsupported.error);
        Step::Next
    }

    /// The call failed: health learns of it, the policy decides, the walk carries it out.
    fn failed(&mut self, tries: &mut TargetTry, failure: Failure<'r>) -> Step {
        let Failure { who, cut, error, mut attempt } = failure;
        let inner = self.ctx.inner;
        let apart = error.kind() == ErrorKind::RateLimited && !self.ctx.x.rests_on_rate_limit();
        let events = if cut.says_nothing() || apart {
            Vec::new()
        } else {
            inner.health.record_failure(&who.target, &who.slot.credential_ids, who.credential, &error)
        };
        // A probe whose outcome says nothing about the provider's health leaves the circuit
        // half-open for the next probe, instead of holding the slot.
        if who.probe && (cut.says_nothing() || !error.kind().counts_for_breaker()) {
            inner.health.release_probe(&who.target, &who.slot.credential_ids);
        }
        let at = FailurePoint {
            retries: tries.retries,
            can_rotate: self.can_rotate(&who, tries, error.kind() == ErrorKind::RateLimited),
            chain: self.plan.chain(),
            no_fallback: self.ctx.no_fallback(),
            single_call: self.ctx.options.single_call,
            deadline: self.ctx.deadline,
            now: Instant::now(),
            cut_by_deadline: cut == Cut::Deadline,
            deadline_note: self.ctx.deadline_note,
            content_sent: false,
            special_chains: self.ctx.x.takes_special_chains(),
            // (A target tried though gated, every one being gated, is let through its open
            // circuit: its retries are too.)
            circuit_opened: !tries.force
                && events.iter().any(
                    |event| matches!(event, HealthEvent::CircuitOpened { target, .. } if *target == who.target),
                ),
        };
        let others_remain = self.plan.has_more();
        let decision =
            policy::decide_among(&self.ctx.route, &error, &at, others_remain, &mut Budgeted(inner));
        attempt.outcome = match decision.next {
            Next::Rotate | Next::Retry(_) => Outcome::Retried,
            Next::Switch(Chain::ContentPolicy) => Outcome::Redirected,
            _ => Outcome::Failed,
        };
        attempt.error = Some(error.clone());
        if decision.note.is_some() {
            attempt.note = decision.note;
        }
        inner.publish_all(events);
        self.record.failed(attempt);
        self.carry_out(decision.next, tries, who.credential, error, cut == Cut::Deadline)
    }

    /// Does what the policy decided (a retry's backoff is slept by the walk, between attempts).
    fn carry_out(
        &mut self,
        next: Next,
        tries: &mut TargetTry,
        credential: usize,
        error: ProviderError,
        cut_by_deadline: bool,
    ) -> Step {
        match next {
            Next::Rotate => {
                tries.exclude |= 1 << credential;
                tries.pending = Some(error);
                Step::Again
            }
            Next::Retry(delay) => {
                tries.retries += 1;
                tries.pending = Some(error);
                tries.backoff = Some(delay);
                Step::Again
            }
            Next::Switch(chain) => {
                let route = &self.ctx.route;
                let targets = match chain {
                    Chain::ContextWindow => route.context_window(),
                    _ => route.content_policy(),
                };
                self.plan.switch(chain, targets);
                self.verdict.failed(error);
                Step::Next
            }
            Next::MoveOn => {
                self.verdict.failed(error);
                if cut_by_deadline { Step::Finish } else { Step::Next }
            }
            Next::Stop => Step::Stop(self.upstream(error)),
        }
    }

    /// A hedged pair ended: the half that lost is settled and recorded, and the other is
    /// applied as the request's attempt.
    fn pair_ended(&mut self, tries: &mut TargetTry, pair: Hedged<'r, X::Output>) -> Step {
        self.plan.hedge_spent();
        match pair {
            Hedged::FirstEnded { first, hedge } => {
                self.settle_lost(&hedge);
                if matches!(hedge.loss, Loss::Failed { .. }) {
                    // A hedge that failed leaves its target done for the request.
                    self.plan.remove(&hedge.who.target);
                }
                let first_at = self.record.len();
                let step = self.called(tries, first);
                self.record.lost_beside(first_at, hedge.attempt);
                step
            }
            Hedged::HedgeWon { first, hedge } => {
                self.record.hedge_won(self.ctx.route.name(), &hedge.who.target, &first.who.target);
                // Its failure counts, as any failure does: the hedge answering hides nothing.
                self.settle_lost(&first);
                self.record.lost(first.attempt);
                self.answered(hedge)
            }
            Hedged::TookOver { first, hedge } => {
                self.settle_lost(&first);
                self.record.failed(first.attempt);
                self.plan.remove(&hedge.who.target);
                let mut tries = TargetTry::new(hedge.who.target.clone(), false, None);
                match self.failed(&mut tries, hedge) {
                    Step::Again => Step::TakeOver(Box::new(tries)),
                    step => step,
                }
            }
        }
    }

    /// What the losing half of a hedged pair leaves to health: a failure recorded (unless the
    /// deadline cut it, or the request could not be written for it), and a half-open probe
    /// slot given back when its outcome says nothing about the provider.
    fn settle_lost(&self, lost: &Lost<'r>) {
        let (health, who) = (&self.ctx.inner.health, &lost.who);
        let says_nothing = match &lost.loss {
            Loss::Dropped => true,
            Loss::Failed { error, cut } => {
                if !cut.says_nothing() && !error.is_unsupported() {
                    let events =
                        health.record_failure(&who.target, &who.slot.credential_ids, who.credential, error);
                    self.ctx.inner.publish_all(events);
                }
                cut.says_nothing() || error.is_unsupported() || !error.kind().counts_for_breaker()
            }
        };
        if who.probe && says_nothing {
            health.release_probe(&who.target, &who.slot.credential_ids);
        }
    }

    /// Whether the provider has another credential the gate would let through now; after a
    /// rate limit (`fresh`), one that is not resting itself: going on to a key the provider
    /// asked to wait would only be refused again.
    fn can_rotate(&self, who: &Callee<'r>, tries: &TargetTry, fresh: bool) -> bool {
        if who.credential >= 63 {
            return false;
        }
        let rotated = GateQuery {
            target: &who.target,
            credentials: &who.slot.credential_ids,
            explicit: self.ctx.explicit,
            force: tries.force,
            exclude: tries.exclude | (1 << who.credential),
            // A resting key passes only with the TTL gate off; a rate-limited target is not
            // held by the TTL, so a zero one lets exactly the fresh keys through.
            health_ttl: fresh.then_some(Duration::ZERO),
            // Whether any other key passes, in whatever order.
            order: &[],
            // A peek takes no probe.
            probe_lease: Duration::ZERO,
        };
        matches!(self.ctx.inner.health.peek(&rotated), Gate::Pass { .. })
    }
}

/// The router's means for the policy: its jitter and its retry budget.
struct Budgeted<'a>(&'a Inner);

impl Means for Budgeted<'_> {
    fn jitter(&mut self) -> f64 {
        self.0.jitter.unit()
    }

    fn spend_retry(&mut self) -> bool {
        self.0.budget.try_spend()
    }
}
