//! One request's walk along its route, as the contract says it: for each target in the plan,
//! attempt, then apply what the attempt came to (the policy decides after a failure); when the
//! chains are done, the answer, else the refusal kept aside, else the candidates, else the
//! error that carries every attempt.
//!
//! A run's state has owners: the [`Context`] the request fixed at its start, the [`Plan`] of
//! what is left to try, the [`Record`] of what happened, and the [`Verdict`] so far. An
//! attempt ([`Run::attempt`], in `attempt.rs`) returns what it came to; one function
//! ([`Run::apply`], in `apply.rs`) writes it to them and says what the walk does next.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::exchange::{Exchange, Served};
use super::inner::Inner;
use super::options::RequestOptions;
use super::plan::Plan;
use super::record::Record;
use super::resolve::Resolved;
use super::sessions::SessionPin;
use super::verdict::{TargetAnswer, Verdict};
use crate::route::Route;
use crate::trail::{CALLER_TIMEOUT_PASSED, DEADLINE_PASSED, Via};
use crate::{ErrorKind, ProviderError, RouteError, Target};

/// What a request fixed at its start, read by every attempt and written by none. The two calls
/// of a hedged pair share it, so it holds nothing that is not `Sync`.
pub(super) struct Context<'r, X> {
    pub(super) inner: &'r Inner,
    pub(super) x: &'r X,
    /// The route that governs the request.
    pub(super) route: Arc<Route>,
    pub(super) options: &'r RequestOptions,
    /// The request named a target, not a route.
    pub(super) explicit: bool,
    /// Until when the request may wait for its answer (a stream: its first chunk).
    pub(super) deadline: Option<Instant>,
    /// What the trail says should the deadline pass: the route's passed, or the caller's own
    /// timeout.
    pub(super) deadline_note: &'static str,
    /// Until when a stream may run once it answered (the route's deadline alone).
    pub(super) served_deadline: Option<Instant>,
    /// How long a failed target is gated; `None` when the route turned the gate off.
    pub(super) health_ttl: Option<Duration>,
    /// Where the request's session was served before (first in the plan).
    pub(super) pin: Option<SessionPin>,
}

impl<X> Context<'_, X> {
    /// The request walks its first target only: fallback off, or one call.
    pub(super) fn no_fallback(&self) -> bool {
        self.options.first_target_only()
    }
}

/// What the walk does after an attempt. Small on purpose: the answer itself waits in the
/// [`Verdict`] rather than being moved through every layer that returns a step.
pub(super) enum Step {
    /// Try the same target again (a retry, after [`TargetTry::backoff`], or another key).
    Again,
    /// On to the next target of the plan.
    Next,
    /// Stop walking the chains: out of time.
    Finish,
    /// Answered: the answer is in the verdict.
    Answered,
    /// The request failed with this error, returned unchanged.
    Stop(RouteError),
    /// Carry on with another target as the request's attempt (a hedge that took over from a
    /// failed first attempt, to be retried).
    TakeOver(Box<TargetTry>),
}

/// One request in progress.
pub(super) struct Run<'r, X: Exchange> {
    pub(super) ctx: Context<'r, X>,
    pub(super) plan: Plan,
    pub(super) record: Record<'r>,
    pub(super) verdict: Verdict<X::Output>,
}

/// One target's tries within a request.
pub(super) struct TargetTry {
    pub(super) target: Target,
    /// Past the gate whatever it says (every target of the chain was gated).
    pub(super) force: bool,
    /// Credentials already tried and failed, by index.
    pub(super) exclude: u64,
    pub(super) retries: u32,
    /// The previous attempt's error on this target, while retrying or rotating keys.
    pub(super) pending: Option<ProviderError>,
    /// A note for the next attempt's record.
    pub(super) note: Option<String>,
    /// The wait before the retry the policy decided on.
    pub(super) backoff: Option<Duration>,
    /// The credential to ask for first: the one that served the request's session.
    pub(super) prefer: Option<usize>,
}

impl TargetTry {
    /// The first try of `target`: no key tried yet, no retry, no error pending.
    pub(super) fn new(target: Target, force: bool, note: Option<String>) -> Self {
        Self { target, force, exclude: 0, retries: 0, pending: None, note, backoff: None, prefer: None }
    }
}

/// How long the request may take before it is answered: the route's deadline (or the
/// caller's `deadline`), sooner when the caller gives up before it (its SDK's timeout: for an
/// answer given whole, the whole answer's; for a stream, its first chunk's, whose head the
/// caller waits for); the note the trail ends with should it pass; and how long a stream may
/// run once it answers (the deadline alone: the caller's timeout then bounds each gap, not the
/// stream).
fn deadline(
    x: &impl Exchange,
    route: &Route,
    options: &RequestOptions,
) -> (Option<Duration>, &'static str, Option<Duration>) {
    let deadline = options.deadline.or(route.timeouts().deadline);
    let (answered, note) = match (deadline, options.caller_timeout) {
        (Some(deadline), Some(patience)) if deadline <= patience => (Some(deadline), DEADLINE_PASSED),
        (_, Some(patience)) => (Some(patience), CALLER_TIMEOUT_PASSED),
        (deadline, None) => (deadline, DEADLINE_PASSED),
    };
    let served = if x.answers_caller_whole() { answered } else { deadline };
    (answered, note, served)
}

impl<'r, X: Exchange> Run<'r, X> {
    pub(super) fn new(inner: &'r Inner, x: &'r X, resolved: Resolved, options: &'r RequestOptions) -> Self {
        let Resolved { route, chain, explicit } = resolved;
        let started = Instant::now();
        let (deadline, deadline_note, served_deadline) = deadline(x, &route, options);
        inner.budget.record_request();
        if let Some(hedges) = inner.hedge_budget(route.name()) {
            hedges.record_request();
        }
        Self {
            plan: Plan::new(chain, options.first_target_only()),
            record: Record::new(inner, started).leaving_trail(
                options.unfinished.clone(),
                route.name_arc(),
                x,
            ),
            verdict: Verdict::new(),
            ctx: Context {
                inner,
                x,
                deadline: deadline.map(|d| started + d),
                deadline_note,
                served_deadline: served_deadline.map(|d| started + d),
                health_ttl: route.health_gate().then(|| route.health_ttl()),
                route,
                options,
                explicit,
                pin: None,
            },
        }
    }

    /// The run of a request whose session was served by `pin` before.
    pub(super) fn pinned(mut self, pin: Option<SessionPin>) -> Self {
        self.ctx.pin = pin;
        self
    }

    /// Walks the plan to an answer or a final error.
    pub(super) async fn go(&mut self) -> Result<Served<X::Output>, RouteError> {
        let inner = self.ctx.inner;
        'plan: while let Some((target, force)) = self.plan.next() {
            let Some(mut slot) = inner.providers.get(target.provider()) else { continue };
            let mut tries = self.first_try(target, force);
            loop {
                let end = self.attempt(slot, &tries).await;
                match self.apply(&mut tries, end) {
                    Step::Again => {
                        if let Some(delay) = tries.backoff.take() {
                            tokio::time::sleep(delay).await;
                        }
                    }
                    Step::Next => continue 'plan,
                    Step::Finish | Step::Answered => break 'plan,
                    Step::Stop(error) => return Err(error),
                    Step::TakeOver(next) => {
                        let Some(next_slot) = inner.providers.get(next.target.provider()) else {
                            continue 'plan;
                        };
                        (slot, tries) = (next_slot, *next);
                        if let Some(delay) = tries.backoff.take() {
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            }
        }
        self.end().await
    }

    /// The first try of `target`, asking first for its session's credential when the session
    /// was served there, and saying so.
    fn first_try(&self, target: Target, force: bool) -> TargetTry {
        let mut note = force.then(|| "every target was gated; trying the one that recovers first".to_owned());
        let pinned = self.ctx.pin.as_ref().filter(|pin| pin.target == target);
        if pinned.is_some() {
            let affinity = "affinity: the session's earlier requests were served here";
            note = Some(note.map_or_else(|| affinity.to_owned(), |gated| format!("{affinity}; {gated}")));
        }
        let mut tries = TargetTry::new(target, force, note);
        tries.prefer = pinned.and_then(|pin| pin.credential);
        tries
    }

    /// After the walk: the answer; else the refusal the content-policy chain replaced; else
    /// the candidates; else the error with every attempt.
    async fn end(&mut self) -> Result<Served<X::Output>, RouteError> {
        if let Some(answer) = self.verdict.take_answer() {
            return Ok(self.serve(answer));
        }
        if let Some(refusal) = self.verdict.take_refusal() {
            self.record.refusal_served();
            return Ok(self.serve(refusal));
        }
        // Boxed: a cold path that would otherwise grow every request's future.
        if let Some(served) = Box::pin(self.candidates()).await {
            return Ok(served);
        }
        Err(self.all_failed())
    }

    /// A target's answer, served.
    fn serve(&mut self, answer: TargetAnswer<X::Output>) -> Served<X::Output> {
        let TargetAnswer { output, target, credential, permit, sent } = answer;
        let mut served = self.served(output, Via::Target(target.clone()), sent);
        served.answered = Some((target, credential));
        served.permit = permit;
        served
    }

    /// What is served: `output` by `via`, its attempt sent at `sent`, the trail so far.
    pub(super) fn served(&mut self, output: X::Output, via: Via, sent: Instant) -> Served<X::Output> {
        Served {
            output,
            via,
            route: self.ctx.route.clone(),
            timing: self.record.timing(),
            trail: self.record.take_trail(),
            answered: None,
            permit: None,
            attempt_started: sent,
            deadline: self.ctx.served_deadline,
            timeouts: *self.ctx.route.timeouts(),
        }
    }

    /// The error when nothing answered, with the whole trail.
    fn all_failed(&mut self) -> RouteError {
        if let Some(reasons) = self.record.all_unsupported() {
            // No target could have served it: the request is the problem, said as such.
            // A target the request named runs on the default route's settings: the route is
            // not what the client asked for.
            let detail = if self.ctx.explicit {
                format!("the target asked for cannot serve this request: {reasons}")
            } else {
                format!("no target of route `{}` can serve this request: {reasons}", self.ctx.route.name())
            };
            return self.upstream(ProviderError::new(ErrorKind::InvalidRequest, detail));
        }
        if self.verdict.out_of_time() {
            self.record.deadline_passed(self.ctx.deadline_note);
        }
        self.record.gave_up(self.ctx.route.name(), self.verdict.last_kind());
        let route = self.ctx.route.name_arc().clone();
        let trail = self.record.take_trail();
        match self.verdict.take_last_error() {
            Some(error) if self.ctx.no_fallback() => RouteError::Upstream { error, trail, route },
            last => RouteError::AllTargetsFailed { trail, last, route },
        }
    }

    /// The error returned unchanged, with the trail so far.
    pub(super) fn upstream(&mut self, error: ProviderError) -> RouteError {
        RouteError::Upstream {
            error,
            trail: self.record.take_trail(),
            route: self.ctx.route.name_arc().clone(),
        }
    }
}
