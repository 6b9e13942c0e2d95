//! One attempt at one target: past its health gate, with a pacing permit, within its
//! timeouts, recorded in the trail; then the policy's answer carried out.

use std::time::Duration;

use tokio::time::Instant;

use super::entry::ProviderSlot;
use super::exchange::Exchange;
use super::hedge::{Lost, Raced, Won};
use super::inner::Inner;
use super::policy::{self, Chain, FailurePoint, Means, Next};
use super::run::{Refusal, Run, Step, TargetTry};
use crate::credential::CredentialId;
use crate::events::EventKind;
use crate::health::{Gate, GateQuery};
use crate::pacing::{Dispatch, PaceRequest, Pacer, Permit};
use crate::provider::{Call, RateLimitSink};
use crate::ratelimit::RateLimits;
use crate::trace::TraceContext;
use crate::trail::{Attempt, Outcome, Via};
use crate::{ErrorKind, ProviderError, Target};

impl<X: Exchange> Run<'_, X> {
    /// One attempt at `tries.target`, and what the walk does next.
    pub(super) async fn attempt(&mut self, slot: &ProviderSlot, tries: &mut TargetTry) -> Step {
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            self.out_of_time = true;
            self.last_error = Some(tries.pending.take().unwrap_or_else(|| {
                ProviderError::new(ErrorKind::Timeout, "request deadline passed before the next attempt")
                    .with_target(tries.target.clone())
            }));
            return Step::Finish;
        }
        let order = slot.key_order();
        let query = GateQuery {
            target: &tries.target,
            credentials: &slot.credential_ids,
            // Within one request, a retry is not stopped by the failure it retries.
            health_ttl: if tries.pending.is_some() { None } else { self.health_ttl },
            explicit: self.explicit,
            force: tries.force,
            exclude: tries.exclude,
            order: &order,
        };
        let (gate, events) = self.inner.health.admit(&query);
        self.inner.publish_all(events);
        let (credential, probe) = match gate {
            Gate::Pass { credential, probe } => (credential, probe),
            Gate::Skip { exhausted, until, reason } => {
                return self.skipped(tries, exhausted, until, reason, now);
            }
        };
        self.plan.called();
        self.announce_switch(tries);

        let attempt_started = Instant::now();
        let permit = match self.permit(slot, credential, &tries.target, probe).await {
            Ok(permit) => permit,
            Err(step) => return step,
        };
        let queued = permit.as_ref().map_or(Duration::ZERO, |p| p.waited);
        self.queued_total += queued;
        let mark = self.trail.len();
        let span = self.trace.map(|trace| trace.child());
        let (result, sent, cut_by_deadline, hedge_record) =
            match self.send(slot, (credential, probe), tries, permit.as_ref(), span).await {
                Raced::Alone((result, sent, cut), record) => (result, sent, cut, record),
                Raced::HedgeWon(won) => return self.hedge_won(permit, *won),
                Raced::HedgeFailed(lost) => return self.hedge_failed(permit, *lost),
            };
        let finished = Instant::now();
        let cred = &slot.credentials[credential];
        let attempt = Attempt::called(
            &tries.target,
            cred.id(),
            attempt_started - self.started,
            finished - attempt_started,
            queued,
        )
        .with_note(tries.note.take())
        .with_span(span);
        let answering =
            result.as_ref().ok().and_then(|output| self.x.answering_since(output)).unwrap_or(finished);
        self.measure(&tries.target, &result, answering - sent, cut_by_deadline);
        let step =
            self.conclude(slot, tries, credential, probe, cut_by_deadline, result, attempt, permit, sent);
        if let Some(record) = hedge_record {
            // After the first attempt's own record: the hedge started later. An answer took
            // the trail with it.
            match self.answer.as_mut() {
                Some(served) if matches!(step, Step::Answered) => served.trail.insert(mark + 1, record),
                _ => self.trail.insert(mark + 1, record),
            }
        }
        step
    }

    /// Sends the attempt, hedged when the route says so: its result, when it was sent, whether
    /// the deadline cut it, and the hedge's record; or the hedge that answered instead.
    async fn send(
        &mut self,
        slot: &ProviderSlot,
        (credential, probe): (usize, bool),
        tries: &TargetTry,
        permit: Option<&Permit>,
        span: Option<TraceContext>,
    ) -> Raced<X::Output> {
        match self.hedge_delay(tries) {
            None => Raced::Alone(self.call(slot, credential, &tries.target, permit, span).await, None),
            Some(delay) => {
                let raced = self.race(slot, credential, probe, tries, permit, (delay, span)).await;
                if let Raced::Alone((_, _, cut), _) = &raced {
                    self.out_of_time |= *cut;
                }
                raced
            }
        }
    }

    /// The hedge took over from a failed first attempt and failed too: the first is done, and
    /// the hedge's failure goes to the policy as the request's attempt.
    fn hedge_failed(&mut self, first_permit: Option<Permit>, lost: Lost) -> Step {
        if let Some(mut permit) = first_permit {
            permit.settle(None);
        }
        let Lost { mut tries, credential, probe, cut, error, attempt, first, first_failed } = lost;
        self.trail.push(first);
        self.inner.events.publish(first_failed);
        self.plan.remove(&tries.target);
        let Some(slot) = self.inner.providers.get(tries.target.provider()) else { return Step::Next };
        let failure = Failure { credential, probe, cut_by_deadline: cut, error, attempt };
        match self.failed(slot, &mut tries, failure) {
            Step::Again => Step::TakeOver(Box::new(tries)),
            step => step,
        }
    }

    /// The first attempt's result, carried out: served or redirected, or failed.
    #[allow(clippy::too_many_arguments)]
    fn conclude(
        &mut self,
        slot: &ProviderSlot,
        tries: &mut TargetTry,
        credential: usize,
        probe: bool,
        cut_by_deadline: bool,
        result: Result<X::Output, ProviderError>,
        attempt: Attempt,
        mut permit: Option<Permit>,
        sent: Instant,
    ) -> Step {
        match result {
            Ok(output) => {
                if let Some(permit) = permit.as_mut()
                    && let Some(used) = self.x.used_tokens(&output)
                {
                    permit.settle(Some(used));
                }
                self.succeeded(slot, tries, credential, output, attempt, permit, sent)
            }
            Err(error) => {
                if let Some(mut permit) = permit {
                    permit.settle(None);
                }
                if error.is_unsupported() {
                    return self.unsupported(tries, error, attempt);
                }
                let error = slot.attribute(error, &tries.target, credential);
                let failure = Failure { credential, probe, cut_by_deadline, error, attempt };
                self.failed(slot, tries, failure)
            }
        }
    }

    /// The hedge answered first: the first attempt is recorded as cancelled (or failed), and
    /// the hedge's answer is served.
    fn hedge_won(&mut self, first_permit: Option<Permit>, won: Won<X::Output>) -> Step {
        if let Some(mut permit) = first_permit {
            permit.settle(None);
        }
        let Won { tries, credential, output, attempt, mut permit, sent, cancelled } = won;
        self.trail.push(cancelled);
        let Some(slot) = self.inner.providers.get(tries.target.provider()) else { return Step::Finish };
        let took = Instant::now() - sent;
        self.inner.latency.record(&tries.target, took);
        if let Some(permit) = permit.as_mut()
            && let Some(used) = self.x.used_tokens(&output)
        {
            permit.settle(Some(used));
        }
        self.succeeded(slot, &tries, credential, output, attempt, permit, sent)
    }

    /// Counts the attempt's time toward the target's latency, when it says something of the
    /// provider's speed: an answer, or a failure of a slow or broken provider (never one cut by
    /// the caller's deadline, which says nothing about the provider).
    pub(super) fn measure(
        &self,
        target: &Target,
        result: &Result<X::Output, ProviderError>,
        took: Duration,
        cut_by_deadline: bool,
    ) {
        let says_speed = match result {
            Ok(_) => true,
            Err(error) => {
                !cut_by_deadline
                    && matches!(
                        error.kind(),
                        ErrorKind::Timeout
                            | ErrorKind::Transport
                            | ErrorKind::Unavailable
                            | ErrorKind::MalformedResponse
                    )
            }
        };
        if says_speed && self.x.measured() {
            self.inner.latency.record(target, took);
        }
    }

    /// The request cannot be written in the target's API: nothing was sent, so the target's
    /// health is untouched and the walk goes on. Not even a route without fallback stops here:
    /// the target did not fail, it was never asked.
    fn unsupported(&mut self, tries: &mut TargetTry, error: ProviderError, mut attempt: Attempt) -> Step {
        let error = error.with_target(tries.target.clone());
        attempt.outcome = Outcome::SkippedUnsupported;
        attempt.credential_id = None;
        attempt.error = Some(error.clone());
        self.trail.push(attempt);
        self.unsupported.push(format!("{}: {}", tries.target, error.detail()));
        self.last_error = Some(error);
        Step::Next
    }

    /// The gate skipped the target: recorded as a skip, or, when the previous attempt on it
    /// failed (the breaker opened or the keys ran out during this request), that failure
    /// decides as if it had been the last try.
    fn skipped(
        &mut self,
        tries: &mut TargetTry,
        exhausted: bool,
        until: Option<Instant>,
        reason: String,
        now: Instant,
    ) -> Step {
        let Some(error) = tries.pending.take() else {
            let error = exhausted.then(|| {
                let error = ProviderError::new(ErrorKind::QuotaExceeded, reason.clone())
                    .with_target(tries.target.clone());
                match until.and_then(|u| u.checked_duration_since(now)) {
                    Some(wait) => error.with_retry_after(wait),
                    None => error,
                }
            });
            self.trail.push(Attempt::skipped(&tries.target, exhausted, error, now - self.started, reason));
            if !exhausted && let Some(until) = until {
                self.plan.gated(&tries.target, until);
            }
            return Step::Next;
        };
        if let Some(last) = self.trail.last_mut() {
            last.outcome = Outcome::Failed;
            last.note = Some(reason);
        }
        if self.no_fallback || !self.route.falls_back_on(&error) {
            return Step::Stop(self.upstream(error));
        }
        self.last_error = Some(error);
        Step::Next
    }

    /// Announces a move to another target (not a retry of the same one).
    fn announce_switch(&mut self, tries: &TargetTry) {
        if tries.pending.is_none()
            && let Some(from) = self.previous.replace(tries.target.clone())
            && from != tries.target
        {
            self.inner.events.publish(EventKind::ProviderSwitch {
                from,
                to: tries.target.clone(),
                reason: self.last_error.as_ref().map(ProviderError::kind),
            });
        }
    }

    /// Waits for the pacer's permit, counted against the deadline. A refusal is recorded and
    /// falls back like any failure.
    async fn permit(
        &mut self,
        slot: &ProviderSlot,
        credential: usize,
        target: &Target,
        probe: bool,
    ) -> Result<Option<Permit>, Step> {
        let Some(pacer) = self.inner.pacer.as_ref().filter(|_| self.x.paced()) else { return Ok(None) };
        let cred = &slot.credentials[credential];
        let asked = Instant::now();
        let request = PaceRequest {
            provider: &slot.id,
            credential_id: cred.id(),
            estimated_tokens: self.x.estimated_tokens(),
            deadline: self.deadline,
            // Pacing waits; it reroutes only when the route asks it to.
            spill_after: (self.route.spill_over() && self.plan.has_more())
                .then_some(self.route.retry().max_wait),
        };
        match pacer.acquire(request).await {
            Ok(permit) => {
                if let Some(reason) = permit.reason {
                    self.inner.events.publish(EventKind::RateLimitWaited {
                        provider: slot.id.clone(),
                        credential_id: cred.id().clone(),
                        waited: permit.waited,
                        reason,
                    });
                }
                Ok(Some(permit))
            }
            Err(error) => {
                if probe {
                    self.inner.health.release_probe(target, &slot.credential_ids);
                }
                let error = error.with_target(target.clone()).with_credential(cred.id().clone());
                let waited = asked.elapsed();
                let attempt = Attempt::called(target, cred.id(), asked - self.started, waited, waited)
                    .failed(error.clone())
                    .with_note(Some("the pacer refused the call".to_owned()));
                self.trail.push(attempt);
                if !self.no_fallback && self.route.falls_back_on(&error) {
                    self.last_error = Some(error);
                    return Err(Step::Next);
                }
                Err(Step::Stop(self.upstream(error)))
            }
        }
    }

    /// Calls the provider within the attempt's limit and the request's deadline. Returns the
    /// result, when it was sent, and whether the deadline (not the provider) cut it short.
    async fn call(
        &mut self,
        slot: &ProviderSlot,
        credential: usize,
        target: &Target,
        permit: Option<&Permit>,
        span: Option<TraceContext>,
    ) -> (Result<X::Output, ProviderError>, Instant, bool) {
        let ctx = self.ctx();
        let out = ctx.call(slot, credential, target, permit, span).await;
        if out.2 {
            self.out_of_time = true;
        }
        out
    }

    /// What a call needs of the run, borrowed apart from it: two calls may run at once (a
    /// hedged pair), and a run (which may hold a stream) is not `Sync`.
    pub(super) fn ctx(&self) -> CallCtx<'_, X> {
        CallCtx {
            x: self.x,
            inner: self.inner,
            route: &self.route,
            deadline: self.deadline,
            forward: &self.forward,
        }
    }

    /// The provider answered: served, or, a content-filter refusal on a route with a
    /// content-policy chain, kept aside and redirected.
    #[allow(clippy::too_many_arguments)]
    fn succeeded(
        &mut self,
        slot: &ProviderSlot,
        tries: &TargetTry,
        credential: usize,
        output: X::Output,
        mut attempt: Attempt,
        permit: Option<Permit>,
        sent: Instant,
    ) -> Step {
        let target = &tries.target;
        let events = self.inner.health.record_success(target, &slot.credential_ids, credential);
        self.inner.publish_all(events);
        if self.x.is_content_filtered(&output)
            && policy::redirects_refusal(&self.route, self.plan.chain, self.no_fallback)
        {
            let withheld =
                "the answer was withheld by the content filter; redirecting to the content-policy targets";
            attempt.outcome = Outcome::Redirected;
            attempt.error = Some(
                ProviderError::new(ErrorKind::ContentFiltered, withheld)
                    .with_target(target.clone())
                    .with_credential(slot.credential_ids[credential].clone()),
            );
            self.trail.push(attempt);
            self.refusal = Some(Box::new(Refusal { output, target: target.clone(), credential, sent }));
            let route = self.route.clone();
            self.plan.switch(Chain::ContentPolicy, route.content_policy());
            return Step::Next;
        }
        self.trail.push(attempt);
        let mut served = self.served(output, Via::Target(target.clone()), sent);
        served.answered = Some((target.clone(), credential));
        served.permit = permit;
        self.answer = Some(served);
        Step::Answered
    }

    /// The call failed: health learns of it, the policy decides, the walk carries it out.
    fn failed(&mut self, slot: &ProviderSlot, tries: &mut TargetTry, failure: Failure) -> Step {
        let Failure { credential, probe, cut_by_deadline, error, mut attempt } = failure;
        let target = tries.target.clone();
        let events = if cut_by_deadline {
            Vec::new()
        } else {
            self.inner.health.record_failure(&target, &slot.credential_ids, credential, &error)
        };
        // A probe whose outcome says nothing about the provider's health leaves the circuit
        // half-open for the next probe, instead of holding the slot.
        if probe && (cut_by_deadline || !error.kind().counts_for_breaker()) {
            self.inner.health.release_probe(&target, &slot.credential_ids);
        }
        let at = FailurePoint {
            retries: tries.retries,
            can_rotate: self.can_rotate(slot, tries, credential),
            chain: self.plan.chain,
            no_fallback: self.no_fallback,
            single_call: self.single_call,
            deadline: self.deadline,
            now: Instant::now(),
            cut_by_deadline,
            content_sent: false,
            special_chains: self.x.takes_special_chains(),
        };
        let decision = policy::decide(&self.route, &error, &at, &mut Budgeted(self.inner));
        attempt.outcome = match decision.next {
            Next::Rotate | Next::Retry(_) => Outcome::Retried,
            Next::Switch(Chain::ContentPolicy) => Outcome::Redirected,
            _ => Outcome::Failed,
        };
        attempt.error = Some(error.clone());
        if decision.note.is_some() {
            attempt.note = decision.note;
        }
        self.trail.push(attempt);
        self.inner.publish_all(events);
        self.inner.events.publish(EventKind::AttemptFailed {
            target,
            credential_id: Some(slot.credential_ids[credential].clone()),
            error: error.clone(),
            will_retry: matches!(decision.next, Next::Rotate | Next::Retry(_)),
        });
        self.carry_out(decision.next, tries, credential, error, cut_by_deadline)
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
                let route = self.route.clone();
                let targets = match chain {
                    Chain::ContextWindow => route.context_window(),
                    _ => route.content_policy(),
                };
                self.plan.switch(chain, targets);
                self.last_error = Some(error);
                Step::Next
            }
            Next::MoveOn => {
                self.last_error = Some(error);
                if cut_by_deadline { Step::Finish } else { Step::Next }
            }
            Next::Stop => Step::Stop(self.upstream(error)),
        }
    }

    /// Whether the provider has another credential the gate would let through now.
    fn can_rotate(&self, slot: &ProviderSlot, tries: &TargetTry, credential: usize) -> bool {
        if credential >= 63 {
            return false;
        }
        let rotated = GateQuery {
            target: &tries.target,
            credentials: &slot.credential_ids,
            health_ttl: None,
            explicit: self.explicit,
            force: tries.force,
            exclude: tries.exclude | (1 << credential),
            // Whether any other key passes, in whatever order.
            order: &[],
        };
        matches!(self.inner.health.peek(&rotated), Gate::Pass { .. })
    }
}

/// A failed call, as [`Run::failed`] takes it.
struct Failure {
    credential: usize,
    probe: bool,
    cut_by_deadline: bool,
    error: ProviderError,
    attempt: Attempt,
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

/// Forwards what a provider's headers say to the pacer, for one attempt's provider and key.
struct PacerSink<'a> {
    pacer: &'a dyn Pacer,
    provider: &'a str,
    credential_id: &'a CredentialId,
    /// The attempt's place in its lane's dispatch order.
    dispatch: Option<Dispatch>,
}

impl RateLimitSink for PacerSink<'_> {
    fn observe(&self, limits: &RateLimits) {
        self.pacer.observe_answer(self.provider, self.credential_id, self.dispatch, limits);
    }
}

/// What a call needs of its run (see [`Run::ctx`]).
pub(super) struct CallCtx<'a, X> {
    pub(super) x: &'a X,
    pub(super) inner: &'a Inner,
    pub(super) route: &'a crate::route::Route,
    pub(super) deadline: Option<Instant>,
    pub(super) forward: &'a [(String, String)],
}

impl<X> Clone for CallCtx<'_, X> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<X> Copy for CallCtx<'_, X> {}

impl<X: Exchange> CallCtx<'_, X> {
    /// Calls the provider within the attempt's limit and the request's deadline. Returns the
    /// result, when it was sent, and whether the deadline (not the provider) cut it short.
    pub(super) async fn call(
        self,
        slot: &ProviderSlot,
        credential: usize,
        target: &Target,
        permit: Option<&Permit>,
        span: Option<TraceContext>,
    ) -> (Result<X::Output, ProviderError>, Instant, bool) {
        let (limit, limit_name) = self.x.attempt_limit(self.route);
        let sent = Instant::now();
        let remaining = self.deadline.map_or(limit, |d| d.saturating_duration_since(sent).min(limit));
        let cred = &slot.credentials[credential];
        let sink = self.inner.pacer.as_ref().filter(|_| self.x.paced()).map(|pacer| PacerSink {
            pacer: &**pacer,
            provider: &slot.id,
            credential_id: cred.id(),
            dispatch: permit.and_then(|p| p.dispatch),
        });
        let call = Call {
            model: target.model(),
            credential: cred,
            timeouts: self.route.timeouts(),
            rate_limits: sink.as_ref().map(|s| s as &dyn RateLimitSink),
            forward: self.forward,
            trace: span,
        };
        match tokio::time::timeout(remaining, self.x.call(&*slot.provider, call)).await {
            Ok(result) => (result, sent, false),
            // A timeout forced by the caller's deadline says nothing about the provider.
            Err(_) if remaining < limit => {
                let message = format!("request deadline passed after {remaining:?} of waiting");
                (Err(ProviderError::new(ErrorKind::Timeout, message)), sent, true)
            }
            Err(_) => {
                let message = format!("no answer within the {limit_name} timeout of {limit:?}");
                (Err(ProviderError::new(ErrorKind::Timeout, message)), sent, false)
            }
        }
    }

    /// A hedge's pacing permit, only if it can go now: a hedge that would wait is no hedge.
    pub(super) async fn hedge_permit(
        self,
        slot: &ProviderSlot,
        credential: usize,
    ) -> Result<Option<Permit>, ProviderError> {
        let Some(pacer) = self.inner.pacer.as_ref().filter(|_| self.x.paced()) else { return Ok(None) };
        let request = PaceRequest {
            provider: &slot.id,
            credential_id: slot.credentials[credential].id(),
            estimated_tokens: self.x.estimated_tokens(),
            deadline: self.deadline,
            spill_after: Some(Duration::ZERO),
        };
        pacer.acquire(request).await.map(Some)
    }
}
