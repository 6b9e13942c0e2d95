//! One request's walk along its route, as the contract says it: for each target in the plan,
//! attempt, then ask the policy; when the chains are done, the refusal kept aside, then the
//! candidates, then the error that carries every attempt.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::exchange::{Exchange, Served};
use super::inner::Inner;
use super::options::RequestOptions;
use super::policy::Chain;
use super::resolve::Resolved;
use crate::events::EventKind;
use crate::route::Route;
use crate::trail::{Outcome, Timing, Trail, Via};
use crate::{ErrorKind, ProviderError, RouteError, Target};

/// The targets still to try, and which chain they belong to.
pub(super) struct Plan {
    queue: VecDeque<(Target, bool)>,
    pub(super) chain: Chain,
    /// Whether any target of this chain got past the health gate.
    called: bool,
    /// The gated target of this chain whose gate opens first.
    soonest: Option<(Target, Instant)>,
}

impl Plan {
    fn new(chain: Vec<Target>, no_fallback: bool) -> Self {
        let mut queue: VecDeque<(Target, bool)> = chain.into_iter().map(|t| (t, false)).collect();
        if no_fallback {
            queue.truncate(1);
        }
        Self { queue, chain: Chain::General, called: false, soonest: None }
    }

    /// The next target, and whether it is forced past its gate: when every target of the chain
    /// was gated, a stale verdict must not become an outage, so the one that recovers first is
    /// tried anyway.
    fn next(&mut self) -> Option<(Target, bool)> {
        match self.queue.pop_front() {
            Some(next) => Some(next),
            None if !self.called => self.soonest.take().map(|(target, _)| (target, true)),
            None => None,
        }
    }

    /// Walks `targets` as `chain` instead of what is left.
    pub(super) fn switch(&mut self, chain: Chain, targets: &[Target]) {
        self.queue = targets.iter().map(|t| (t.clone(), false)).collect();
        self.chain = chain;
        (self.called, self.soonest) = (false, None);
    }

    /// A target got past the gate.
    pub(super) fn called(&mut self) {
        self.called = true;
    }

    /// A target was gated until `until`.
    pub(super) fn gated(&mut self, target: &Target, until: Instant) {
        if self.soonest.as_ref().is_none_or(|(_, best)| until < *best) {
            self.soonest = Some((target.clone(), until));
        }
    }

    /// Whether another target follows this one (pacing may spill over to it).
    pub(super) fn has_more(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The next target that is not `not`, without taking it (a hedge's).
    pub(super) fn peek_other(&self, not: &Target) -> Option<Target> {
        self.queue.iter().map(|(target, _)| target).find(|target| *target != not).cloned()
    }

    /// Takes `target` out of what is left (a hedge on it failed: it is done for this request).
    pub(super) fn remove(&mut self, target: &Target) {
        self.queue.retain(|(queued, _)| queued != target);
    }
}

/// A refusal redirected to the content-policy chain: served after all if that chain produces
/// nothing, since it is the provider's real answer.
pub(super) struct Refusal<O> {
    pub(super) output: O,
    pub(super) target: Target,
    pub(super) credential: usize,
    pub(super) sent: Instant,
}

/// What an attempt leaves the walk to do. Small on purpose: the answer itself waits in
/// [`Run::answer`] rather than being moved through every layer that returns a step.
pub(super) enum Step {
    /// Try the same target again (a retry, after [`TargetTry::backoff`], or another key).
    Again,
    /// On to the next target of the plan.
    Next,
    /// Stop walking the chains: out of time.
    Finish,
    /// Answered: the answer is in [`Run::answer`].
    Answered,
    /// The request failed with this error, returned unchanged.
    Stop(RouteError),
    /// Carry on with another target as the request's attempt (a hedge that took over from a
    /// failed first attempt, to be retried).
    TakeOver(Box<TargetTry>),
}

/// One request in progress.
pub(super) struct Run<'r, X: Exchange> {
    pub(super) inner: &'r Inner,
    pub(super) x: &'r X,
    pub(super) route: Arc<Route>,
    pub(super) explicit: bool,
    pub(super) no_fallback: bool,
    /// One call and nothing more (see [`RequestOptions::single_call`]).
    pub(super) single_call: bool,
    /// The client's headers to pass on (empty for most requests: no allocation).
    pub(super) forward: Vec<(String, String)>,
    /// The request's span, when it is traced: each attempt sent is a child of it.
    pub(super) trace: Option<crate::trace::TraceContext>,
    pub(super) started: Instant,
    pub(super) deadline: Option<Instant>,
    pub(super) health_ttl: Option<Duration>,
    pub(super) plan: Plan,
    pub(super) trail: Trail,
    pub(super) queued_total: Duration,
    pub(super) last_error: Option<ProviderError>,
    /// The target called last, for the provider-switch event.
    pub(super) previous: Option<Target>,
    pub(super) out_of_time: bool,
    /// Boxed: rarely set, and the answer it holds would grow every request's state.
    pub(super) refusal: Option<Box<Refusal<X::Output>>>,
    /// The answer, once an attempt produced one.
    pub(super) answer: Option<Served<X::Output>>,
    /// Why each target skipped as unsupported could not serve the request, in order.
    pub(super) unsupported: Vec<String>,
    /// Whether this request was hedged (at most once).
    pub(super) hedged: bool,
    /// Whose remembered answers a `cache` candidate may serve.
    pub(super) cache_scope: String,
    /// The request opted out of remembered answers.
    pub(super) no_cache: bool,
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
}

impl TargetTry {
    /// The first try of `target`: no key tried yet, no retry, no error pending.
    pub(super) fn new(target: Target, force: bool, note: Option<String>) -> Self {
        Self { target, force, exclude: 0, retries: 0, pending: None, note, backoff: None }
    }
}

impl<'r, X: Exchange> Run<'r, X> {
    pub(super) fn new(inner: &'r Inner, x: &'r X, resolved: Resolved, options: &RequestOptions) -> Self {
        let Resolved { route, chain, explicit } = resolved;
        let started = Instant::now();
        inner.budget.record_request();
        if let Some(hedges) = inner.hedge_budget(route.name()) {
            hedges.record_request();
        }
        Self {
            inner,
            x,
            deadline: options.deadline.or(route.timeouts().deadline).map(|d| started + d),
            health_ttl: route.health_gate().then(|| route.health_ttl()),
            plan: Plan::new(chain, options.first_target_only()),
            route,
            explicit,
            no_fallback: options.first_target_only(),
            single_call: options.single_call,
            forward: options.forward_headers.clone(),
            trace: options.trace,
            started,
            trail: Trail::default(),
            queued_total: Duration::ZERO,
            last_error: None,
            previous: None,
            out_of_time: false,
            refusal: None,
            answer: None,
            unsupported: Vec::new(),
            hedged: false,
            cache_scope: options.cache_scope.clone(),
            no_cache: options.no_cache,
        }
    }

    /// Walks the plan to an answer or a final error.
    pub(super) async fn go(&mut self) -> Result<Served<X::Output>, RouteError> {
        'plan: while let Some((target, force)) = self.plan.next() {
            let Some(mut slot) = self.inner.providers.get(target.provider()) else { continue };
            let note = force.then(|| "every target was gated; trying the one that recovers first".to_owned());
            let mut tries = TargetTry::new(target, force, note);
            loop {
                match self.attempt(slot, &mut tries).await {
                    Step::Again => {
                        if let Some(delay) = tries.backoff.take() {
                            tokio::time::sleep(delay).await;
                        }
                    }
                    Step::Next => continue 'plan,
                    Step::Finish => break 'plan,
                    Step::Answered => break 'plan,
                    Step::Stop(error) => return Err(error),
                    Step::TakeOver(next) => {
                        let Some(next_slot) = self.inner.providers.get(next.target.provider()) else {
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
        if let Some(served) = self.answer.take() {
            return Ok(served);
        }
        if let Some(served) = self.serve_refusal() {
            return Ok(served);
        }
        // Boxed: a cold path that would otherwise grow every request's future.
        if let Some(served) = Box::pin(self.candidates()).await {
            return Ok(served);
        }
        Err(self.all_failed())
    }

    /// The content-policy chain produced nothing: the refusal it replaced is the answer.
    fn serve_refusal(&mut self) -> Option<Served<X::Output>> {
        let Refusal { output, target, credential, sent } = *self.refusal.take()?;
        if let Some(redirected) =
            self.trail.attempts_mut().iter_mut().find(|a| a.outcome == Outcome::Redirected)
        {
            redirected.note = Some("the content-policy chain failed: this refusal is the answer".to_owned());
        }
        let mut served = self.served(output, Via::Target(target.clone()), sent);
        served.answered = Some((target, credential));
        Some(served)
    }

    /// What is served: `output` by `via`, its attempt sent at `sent`, the trail so far.
    pub(super) fn served(&mut self, output: X::Output, via: Via, sent: Instant) -> Served<X::Output> {
        Served {
            output,
            via,
            route: self.route.clone(),
            trail: std::mem::take(&mut self.trail),
            timing: Timing { total: self.started.elapsed(), queued: self.queued_total, first_token: None },
            answered: None,
            permit: None,
            attempt_started: sent,
            deadline: self.deadline,
            timeouts: *self.route.timeouts(),
        }
    }

    /// The error when nothing answered, with the whole trail.
    fn all_failed(&mut self) -> RouteError {
        if !self.unsupported.is_empty()
            && self.trail.attempts().iter().all(|a| a.outcome == Outcome::SkippedUnsupported)
        {
            // No target could have served it: the request is the problem, said as such.
            let detail = format!(
                "no target of route `{}` can serve this request: {}",
                self.route.name(),
                self.unsupported.join("; ")
            );
            return self.upstream(ProviderError::new(ErrorKind::InvalidRequest, detail));
        }
        if self.out_of_time
            && let Some(last) = self.trail.last_mut()
            && last.note.is_none()
        {
            last.note = Some("request deadline passed".to_owned());
        }
        self.inner.events.publish(EventKind::AllTargetsFailed {
            route: self.route.name().to_owned(),
            attempts: self.trail.len(),
            last: self.last_error.as_ref().map(ProviderError::kind),
        });
        let route = self.route.name_arc().clone();
        let trail = std::mem::take(&mut self.trail);
        match self.last_error.take() {
            Some(error) if self.no_fallback => RouteError::Upstream { error, trail, route },
            last => RouteError::AllTargetsFailed { trail, last, route },
        }
    }

    /// The error returned unchanged, with the trail so far.
    pub(super) fn upstream(&mut self, error: ProviderError) -> RouteError {
        RouteError::Upstream {
            error,
            trail: std::mem::take(&mut self.trail),
            route: self.route.name_arc().clone(),
        }
    }
}
