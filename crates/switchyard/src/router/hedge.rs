//! Hedged requests: when a request's first attempt has not answered (or, streamed, sent its
//! first content, reasoning included) after the route's hedge delay, the chain's next target is
//! called beside it, and the first to answer is served. The other is cancelled at once (its
//! future dropped, which drops its connection; its pacing permit released) and recorded as
//! `cancelled`.
//!
//! At most one hedge per request, and only of the request's first attempt; never with
//! `x-switchyard-fallback: off`, never on the special chains. A hedge that fails leaves the
//! first attempt running; a first attempt that fails leaves the hedge running, and its answer
//! is served. From the first attempt's failure on, the hedge is the request's attempt: when it
//! then fails too, its failure decides what follows (a retry of its target, or the chain on
//! after it), as any attempt's would. When the hedge fails first, its target is done for this
//! request and the first attempt's failure decides. Hedges draw from a budget of their own: at most
//! `max_share` of the route's requests over the last 10 s, and never fewer than `min_hedges`
//! (so a quiet route hedges its first slow request).
//!
//! The race itself is [`race`], over any two futures, tested alone; the run turns how it ended
//! into a [`Hedged`] for [`Run::apply`](super::run::Run::apply).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{
    Answered, AttemptEnd, CallEnd, Callee, Failure, Hedged, Loss, Lost, Outgoing, Reply, Unanswered,
};
use super::exchange::Exchange;
use super::plan::Plan;
use super::policy::Chain;
use super::record::Record;
use super::run::{Context, Run, TargetTry};
use crate::Target;
use crate::health::{Gate, GateQuery};
use crate::pacing::Permit;
use crate::route::HedgeAfter;
use crate::trace::TraceContext;
use crate::trail::{Attempt, Outcome};

/// How a race between a first attempt and its hedge ended. The first answers `A` or fails
/// `E`; the hedge, once started as `T`, answers `B` or fails `F`. Whatever did not end was
/// dropped when the race ended.
#[derive(Debug, PartialEq)]
pub(super) enum Raced<A, E, T, B, F> {
    /// No hedge started (the first ended before the delay, or none could start): the first's end.
    Alone(Result<A, E>),
    /// The first ended, answered, or failed after the hedge had failed; the hedge's failure when
    /// it had failed, `None` when it was still running.
    FirstEnded { first: Result<A, E>, hedge: T, hedge_failed: Option<F> },
    /// The hedge answered; the first's failure when it had failed, `None` when it was still
    /// running.
    HedgeAnswered { first_failed: Option<E>, hedge: T, answer: B },
    /// The first failed while the hedge ran, then the hedge failed too.
    HedgeFailedAfterFirst { first: E, hedge: T, hedge_failed: F },
}

/// Runs `first`; if it has not ended after `delay`, starts the hedge `start` gives (when it
/// gives one) beside it, and runs both until one answers or both have failed.
pub(super) async fn race<A, E, T, B, F, H>(
    first: impl Future<Output = Result<A, E>>,
    start: impl FnOnce() -> Option<(T, H)>,
    delay: Duration,
) -> Raced<A, E, T, B, F>
where
    H: Future<Output = Result<B, F>>,
{
    tokio::pin!(first);
    tokio::select! {
        biased;
        end = &mut first => return Raced::Alone(end),
        () = tokio::time::sleep(delay) => {}
    }
    let Some((hedge, second)) = start() else { return Raced::Alone(first.await) };
    tokio::pin!(second);
    let (mut first_failed, mut hedge_failed) = (None, None);
    loop {
        tokio::select! {
            end = &mut first, if first_failed.is_none() => match end {
                Err(error) if hedge_failed.is_none() => first_failed = Some(error),
                first => return Raced::FirstEnded { first, hedge, hedge_failed },
            },
            end = &mut second, if hedge_failed.is_none() => match (end, first_failed.take()) {
                (Ok(answer), first_failed) => return Raced::HedgeAnswered { first_failed, hedge, answer },
                (Err(failed), Some(first)) => {
                    return Raced::HedgeFailedAfterFirst { first, hedge, hedge_failed: failed };
                }
                (Err(failed), None) => hedge_failed = Some(failed),
            },
        }
    }
}

/// A hedge started beside a slow first attempt.
pub(super) struct HedgeRun<'r> {
    who: Callee<'r>,
    sent: Instant,
    /// Its span, when the request is traced.
    span: Option<TraceContext>,
}

impl HedgeRun<'_> {
    /// Its record, ended now.
    fn entry(&self, record: &Record<'_>, outcome: Outcome, note: String) -> Attempt {
        let ended = Instant::now();
        let mut attempt = self.who.called(record.offset(self.sent), ended - self.sent, Duration::ZERO);
        attempt.outcome = outcome;
        attempt.hedge = true;
        attempt.span_id = self.span.map(|span| span.span_id);
        attempt.note = Some(note);
        attempt
    }
}

/// Why a hedge did not answer.
pub(super) enum HedgeMiss {
    /// The pacer had no room for it at once.
    NotSent,
    /// It would have probed a half-open circuit another replica probes.
    ProbedElsewhere,
    /// It failed, and settles this permit.
    Failed(Unanswered, Option<Permit>),
}

impl<'r, X: Exchange> Run<'r, X> {
    /// The delay after which this attempt is hedged; `None` when it is not to be.
    pub(super) fn hedge_delay(&self, tries: &TargetTry) -> Option<Duration> {
        let hedge = self.ctx.route.hedge()?;
        let eligible = !self.plan.is_hedged()
            && !self.ctx.no_fallback()
            && tries.retries == 0
            && tries.pending.is_none()
            && self.record.is_empty()
            && self.plan.chain() == Chain::General
            && self.ctx.x.measured()
            && self.ctx.x.takes_special_chains();
        if !eligible {
            return None;
        }
        self.plan.peek_other(&tries.target)?;
        Some(match hedge.after {
            HedgeAfter::Fixed(delay) => delay,
            HedgeAfter::P95 => match self.ctx.inner.latency.quantile(&tries.target, 0.95) {
                Some((p95, samples)) if samples >= 20.0 => p95.max(hedge.min_after),
                _ => hedge.min_after,
            },
        })
    }

    /// Sends the first attempt, hedged after `delay`, and says how the pair ended.
    pub(super) async fn send_hedged(
        &mut self,
        first: Outgoing<'r>,
        delay: Duration,
    ) -> AttemptEnd<'r, X::Output> {
        let hedge_span = self.ctx.options.trace.map(|trace| trace.child());
        let (ctx, plan, record) = (&self.ctx, &self.plan, &self.record);
        let later = plan.remaining();
        // A hedge that probes a half-open circuit gives its slot back if the pair is dropped
        // (the caller went away) before its outcome decides the circuit.
        let hedge_probe: std::sync::Mutex<Option<super::attempt::ProbeGuard<'_>>> = Default::default();
        let start = || {
            let who = ctx.admit_hedge(plan, &first.who.target)?;
            if who.probe {
                *hedge_probe.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(super::attempt::ProbeGuard::taken(&ctx.inner.health, &who));
            }
            record.hedge_started(ctx.route.name(), &first.who.target, &who.target, delay);
            let hedge = HedgeRun { who: who.clone(), sent: Instant::now(), span: hedge_span };
            let sent = hedge.sent;
            // The hedge's target is one of those after the first.
            Some((hedge, async move {
                ctx.call_hedge(&who, hedge_span, later.saturating_sub(1), (record, sent)).await
            }))
        };
        let first_call = async {
            let end = ctx.call(&first.who, first.permit.as_ref(), first.span, later).await;
            if let Err(miss) = &end {
                // Known at once: the pair may yet be dropped while the hedge runs on. Attributed
                // (and so redacted) as every recorded failure is.
                record.failed_meanwhile(
                    &first.who.target,
                    first.started,
                    first.who.attribute(miss.error.clone()),
                );
            }
            end
        };
        let raced = race(first_call, start, delay).await;
        if let Some(probe) = hedge_probe.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            probe.armed = false;
        }
        match raced {
            Raced::Alone(end) => AttemptEnd::Called(self.ended(first, end)),
            Raced::FirstEnded { first: end, hedge, hedge_failed } => {
                self.first_ended(first, end, hedge, hedge_failed)
            }
            Raced::HedgeFailedAfterFirst {
                first: miss,
                hedge,
                hedge_failed: unsent @ (HedgeMiss::NotSent | HedgeMiss::ProbedElsewhere),
            } => self.first_ended(first, Err(miss), hedge, Some(unsent)),
            Raced::HedgeFailedAfterFirst {
                first: miss,
                hedge,
                hedge_failed: HedgeMiss::Failed(failed, permit),
            } => self.took_over(first, miss, hedge, (failed, permit)),
            Raced::HedgeAnswered { first_failed, hedge, answer } => {
                self.hedge_answered(first, first_failed, hedge, answer, delay)
            }
        }
    }

    /// The first attempt ended, answered or failed: the hedge beside it lost, dropped while it
    /// ran, never sent, or failed first.
    fn first_ended(
        &self,
        first: Outgoing<'r>,
        end: CallEnd<X::Output>,
        hedge: HedgeRun<'r>,
        hedge_failed: Option<HedgeMiss>,
    ) -> AttemptEnd<'r, X::Output> {
        let (attempt, loss) = match hedge_failed {
            None => {
                let note = "hedge: the first attempt answered first".to_owned();
                (hedge.entry(&self.record, Outcome::Cancelled, note), Loss::Dropped)
            }
            // Never sent: the target is as it was, and stays in the chain.
            Some(HedgeMiss::NotSent) => {
                let note = "hedge: the pacer had no room for it at once; not sent".to_owned();
                (hedge.entry(&self.record, Outcome::Cancelled, note), Loss::Dropped)
            }
            Some(HedgeMiss::ProbedElsewhere) => {
                let note = "hedge: another replica probes its half-open circuit; not sent".to_owned();
                (hedge.entry(&self.record, Outcome::Cancelled, note), Loss::Dropped)
            }
            Some(HedgeMiss::Failed(miss, permit)) => {
                if let Some(mut permit) = permit {
                    permit.settle(None);
                }
                let error = hedge.who.attribute(miss.error);
                let note = "hedge: failed; the first attempt carried on".to_owned();
                let mut attempt = hedge.entry(&self.record, Outcome::Failed, note);
                attempt.error = Some(error.clone());
                (attempt, Loss::Failed { error, cut: miss.cut })
            }
        };
        let hedge = Lost { who: hedge.who, attempt, loss };
        let first = self.ended(first, end);
        AttemptEnd::Hedged(Box::new(Hedged::FirstEnded { first, hedge }))
    }

    /// The hedge answered first: the first attempt lost, dropped while it ran or failed
    /// before.
    fn hedge_answered(
        &self,
        first: Outgoing<'r>,
        first_failed: Option<Unanswered>,
        hedge: HedgeRun<'r>,
        (Reply { output, sent }, mut permit): (Reply<X::Output>, Option<Permit>),
        delay: Duration,
    ) -> AttemptEnd<'r, X::Output> {
        let first_target = first.who.target.clone();
        let first = self.first_lost(first, first_failed, &hedge.who.target, "which answered");
        self.ctx.inner.latency.record(&hedge.who.target, Instant::now() - sent);
        if let Some(permit) = permit.as_mut()
            && let Some(used) = self.ctx.x.used_tokens(&output)
        {
            permit.settle(Some(used));
        }
        let note = format!("hedge: {first_target} had not answered after {delay:?}");
        let attempt = hedge.entry(&self.record, Outcome::Ok, note);
        let hedge = Answered { who: hedge.who, output, permit, sent, attempt };
        AttemptEnd::Hedged(Box::new(Hedged::HedgeWon { first, hedge }))
    }

    /// The first attempt failed while the hedge ran, and the hedge failed after it: the first
    /// lost, and the hedge's failure is the request's attempt.
    fn took_over(
        &self,
        first: Outgoing<'r>,
        first_failed: Unanswered,
        hedge: HedgeRun<'r>,
        (failed, permit): (Unanswered, Option<Permit>),
    ) -> AttemptEnd<'r, X::Output> {
        let first = self.first_lost(first, Some(first_failed), &hedge.who.target, "which carried on");
        if let Some(mut permit) = permit {
            permit.settle(None);
        }
        let error = hedge.who.attribute(failed.error);
        let note = "hedge: the request's attempt since the first one failed".to_owned();
        let attempt = hedge.entry(&self.record, Outcome::Failed, note);
        let hedge = Failure { who: hedge.who, cut: failed.cut, error, attempt };
        AttemptEnd::Hedged(Box::new(Hedged::TookOver { first, hedge }))
    }

    /// The first attempt of a pair the hedge decided: dropped while it ran (`failed` is
    /// `None`), or failed while the hedge on `hedge` ran, which `then` did.
    fn first_lost(
        &self,
        first: Outgoing<'r>,
        failed: Option<Unanswered>,
        hedge: &Target,
        then: &str,
    ) -> Lost<'r> {
        let Outgoing { who, started, permit, span } = first;
        if let Some(mut permit) = permit {
            permit.settle(None);
        }
        let now = Instant::now();
        let mut attempt =
            who.called(self.record.offset(started), now - started, Duration::ZERO).with_span(span);
        let loss = match failed {
            None => {
                attempt.outcome = Outcome::Cancelled;
                attempt.note = Some(format!("the hedge on {hedge} answered first"));
                Loss::Dropped
            }
            Some(miss) => {
                self.ctx.measure(&who.target, now - miss.sent, Some(&miss));
                let error = who.attribute(miss.error);
                attempt.outcome = Outcome::Failed;
                attempt.error = Some(error.clone());
                attempt.note = Some(format!("failed while the hedge on {hedge} ran, {then}"));
                Loss::Failed { error, cut: miss.cut }
            }
        };
        Lost { who, attempt, loss }
    }
}

impl<'r, X: Exchange> Context<'r, X> {
    /// The hedge's target and key, when the first attempt has not begun to answer, the chain
    /// has another target whose gate lets it through now and the hedge budget has room.
    fn admit_hedge(&self, plan: &Plan, first: &Target) -> Option<Callee<'r>> {
        if self.x.answering() {
            // The first attempt is answering, though its caller is not shown it yet: not slow.
            return None;
        }
        let inner = self.inner;
        let target = plan.peek_other(first)?;
        let slot = inner.providers.get(target.provider())?;
        let budget = inner.hedge_budget(self.route.name())?;
        let order = slot.key_order();
        let query = GateQuery {
            target: &target,
            credentials: &slot.credential_ids,
            health_ttl: self.health_ttl,
            explicit: false,
            force: false,
            exclude: 0,
            order: &order,
            probe_lease: self.probe_lease(Instant::now()),
        };
        if !matches!(inner.health.peek(&query), Gate::Pass { .. }) || !budget.try_spend() {
            return None;
        }
        let (gate, events) = inner.health.admit(&query);
        inner.publish_all(events);
        match gate {
            Gate::Pass { credential, probe } => Some(Callee { target, slot, credential, probe }),
            Gate::Skip { .. } => None,
        }
    }

    /// Sends the hedge `who`, begun at `sent`, if the fleet's probe and the pacer let it go at
    /// once: its answer with its permit, or why there is none. `record` learns of the call
    /// once it is sent (not before: a hedge the fleet or the pacer holds back costs nothing
    /// should the caller go away), and of its failure at once (the pair may yet be dropped
    /// while the first runs on).
    async fn call_hedge(
        &self,
        who: &Callee<'_>,
        span: Option<TraceContext>,
        later: usize,
        (record, sent): (&Record<'_>, Instant),
    ) -> Result<(Reply<X::Output>, Option<Permit>), HedgeMiss> {
        // A hedge that would probe goes only if the probe is the fleet's one (its slot is
        // given back as a hedge's that was not sent is).
        if who.probe && !self.inner.health.claim_probe(&who.target).await {
            return Err(HedgeMiss::ProbedElsewhere);
        }
        let Ok(permit) = self.hedge_permit(who).await else { return Err(HedgeMiss::NotSent) };
        record.sending(&who.target, who.credential_id(), sent, true);
        match self.call(who, permit.as_ref(), span, later).await {
            Ok(reply) => Ok((reply, permit)),
            Err(failed) => {
                record.failed_meanwhile(&who.target, sent, who.attribute(failed.error.clone()));
                Err(HedgeMiss::Failed(failed, permit))
            }
        }
    }
}

#[cfg(test)]
mod tests;
