//! Hedged requests: when a request's first attempt has not answered (or, streamed, sent its
//! first content, reasoning included) after the route's hedge delay, the chain's next target is called beside it,
//! and the first to answer is served. The other is cancelled at once (its future dropped,
//! which drops its connection; its pacing permit released) and recorded as `cancelled`.
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

use std::time::Duration;

use tokio::time::Instant;

use super::entry::ProviderSlot;
use super::exchange::Exchange;
use super::policy::Chain;
use super::run::{Run, TargetTry};
use crate::events::EventKind;
use crate::health::{Gate, GateQuery};
use crate::pacing::Permit;
use crate::route::HedgeAfter;
use crate::trace::TraceContext;
use crate::trail::{Attempt, Outcome};
use crate::{ErrorKind, ProviderError, Target};

/// One call's end: its result, when it was sent, whether the request's deadline cut it.
pub(super) type CallEnd<O> = (Result<O, ProviderError>, Instant, bool);

/// What a hedged first attempt came to.
pub(super) enum Raced<O> {
    /// The first attempt's own end (it answered first, or no hedge started, or both failed),
    /// and the hedge's record for the trail when one ran.
    Alone(CallEnd<O>, Option<Attempt>),
    /// The hedge answered first (boxed: rare, and large).
    HedgeWon(Box<Won<O>>),
    /// The first attempt failed while the hedge ran, then the hedge failed too.
    HedgeFailed(Box<Lost>),
}

/// A hedge that took over from a failed first attempt and failed in turn.
pub(super) struct Lost {
    /// The hedge's target, to be carried on with as the request's attempt.
    pub(super) tries: TargetTry,
    pub(super) credential: usize,
    pub(super) probe: bool,
    pub(super) cut: bool,
    /// Its failure, redacted.
    pub(super) error: ProviderError,
    /// Its record, outcome to be decided.
    pub(super) attempt: Attempt,
    /// The first attempt's record, failed, and the event that says so.
    pub(super) first: Attempt,
    pub(super) first_failed: EventKind,
}

/// A hedge that answered first.
pub(super) struct Won<O> {
    pub(super) tries: TargetTry,
    pub(super) credential: usize,
    pub(super) output: O,
    pub(super) attempt: Attempt,
    pub(super) permit: Option<Permit>,
    pub(super) sent: Instant,
    /// The first attempt's record, cancelled.
    pub(super) cancelled: Attempt,
}

impl<X: Exchange> Run<'_, X> {
    /// The delay after which this attempt is hedged; `None` when it is not to be.
    pub(super) fn hedge_delay(&self, tries: &TargetTry) -> Option<Duration> {
        let hedge = self.route.hedge()?;
        let eligible = !self.hedged
            && !self.no_fallback
            && tries.retries == 0
            && tries.pending.is_none()
            && self.trail.is_empty()
            && self.plan.chain == Chain::General
            && self.x.measured()
            && self.x.takes_special_chains();
        if !eligible {
            return None;
        }
        self.plan.peek_other(&tries.target)?;
        Some(match hedge.after {
            HedgeAfter::Fixed(delay) => delay,
            HedgeAfter::P95 => match self.inner.latency.quantile(&tries.target, 0.95) {
                Some((p95, samples)) if samples >= 20.0 => p95.max(hedge.min_after),
                _ => hedge.min_after,
            },
        })
    }

    /// Runs the first attempt, hedged after `delay`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn race(
        &mut self,
        slot: &ProviderSlot,
        credential: usize,
        first_probe: bool,
        tries: &TargetTry,
        permit: Option<&Permit>,
        (delay, span): (Duration, Option<TraceContext>),
    ) -> Raced<X::Output> {
        let attempt_started = Instant::now();
        let ctx = self.ctx();
        let hedge_span = self.trace.map(|trace| trace.child());
        // The pair runs in this block: its futures borrow the run, which is written after.
        let (first_end, hedge_end, hedge) = {
            let first = ctx.call(slot, credential, &tries.target, permit, span);
            tokio::pin!(first);
            tokio::select! {
                biased;
                end = &mut first => return Raced::Alone(end, None),
                () = tokio::time::sleep(delay) => {}
            }
            let Some((hedge_target, hedge_slot, hedge_credential, probe)) =
                self.hedge_admitted(&tries.target)
            else {
                return Raced::Alone(first.await, None);
            };
            self.inner.events.publish(EventKind::HedgeStarted {
                route: self.route.name().to_owned(),
                first: tries.target.clone(),
                hedge: hedge_target.clone(),
                after: delay,
            });
            let hedge_sent = Instant::now();
            // Its end, its permit, and whether it was sent at all (the pacer may have had no
            // room for it at once).
            let hedging = async {
                match ctx.hedge_permit(hedge_slot, hedge_credential).await {
                    Ok(permit) => {
                        let end = ctx
                            .call(hedge_slot, hedge_credential, &hedge_target, permit.as_ref(), hedge_span)
                            .await;
                        (end, permit, true)
                    }
                    Err(error) => ((Err(error), Instant::now(), false), None, false),
                }
            };
            tokio::pin!(hedging);
            let (first_end, hedge_end, first_ended_first) =
                until_one_answers(first, hedging, |end| end.0.is_ok(), |end| end.0.0.is_ok()).await;
            let hedge = HedgeRun {
                target: hedge_target.clone(),
                credential: hedge_credential,
                probe,
                sent: hedge_sent,
                span: hedge_span,
            };
            (first_end, hedge_end, (hedge, first_ended_first))
        };
        let (hedge, first_ended_first) = hedge;
        self.hedged = true;
        let first_run = |end| FirstRun {
            slot,
            credential,
            probe: first_probe,
            tries,
            started: attempt_started,
            span,
            end,
        };
        match (first_end, hedge_end) {
            (first, Some(((Ok(output), sent, _), permit, _))) => {
                self.hedge_answered(first_run(first), hedge, output, permit, sent, delay)
            }
            (Some(first), Some((hedge_end, permit, true))) if first_ended_first && first.0.is_err() => {
                self.hedge_took_over_and_failed(first_run(Some(first)), hedge, hedge_end, permit)
            }
            (Some(first), hedge_end) => self.first_answered_or_both_failed(first, hedge, hedge_end),
            (None, _) => Raced::Alone(cancelled_end(), None),
        }
    }

    /// The hedge answered first: the first attempt is recorded cancelled (or failed, when it
    /// failed while the hedge ran).
    fn hedge_answered(
        &mut self,
        first: FirstRun<'_, X::Output>,
        hedge: HedgeRun,
        output: X::Output,
        permit: Option<Permit>,
        sent: Instant,
        delay: Duration,
    ) -> Raced<X::Output> {
        let FirstRun { slot, credential, probe, tries, started, span, end } = first;
        self.inner.events.publish(EventKind::HedgeWon {
            route: self.route.name().to_owned(),
            hedge: hedge.target.clone(),
            first: tries.target.clone(),
        });
        let now = Instant::now();
        let cred = &slot.credentials[credential];
        let mut cancelled =
            Attempt::called(&tries.target, cred.id(), started - self.started, now - started, Duration::ZERO)
                .with_span(span);
        match end {
            None => {
                if probe {
                    self.inner.health.release_probe(&tries.target, &slot.credential_ids);
                }
                cancelled.outcome = Outcome::Cancelled;
                cancelled.note = Some(format!("the hedge on {} answered first", hedge.target));
            }
            Some((result, sent, cut)) => {
                let error = result.err().map_or_else(
                    || ProviderError::new(ErrorKind::Cancelled, "the first attempt ended without an answer"),
                    |error| slot.attribute(error, &tries.target, credential),
                );
                // Its failure counts, as any failure does: the hedge answering hides nothing.
                self.settle_failure(&tries.target, slot, credential, probe, &error, cut);
                self.measure(&tries.target, &Err(error.clone()), now - sent, cut);
                cancelled.outcome = Outcome::Failed;
                cancelled.error = Some(error);
                cancelled.note =
                    Some(format!("failed while the hedge on {} ran, which answered", hedge.target));
            }
        }
        let note = format!("hedge: {} had not answered after {delay:?}", tries.target);
        let attempt = self.hedge_record(&hedge, Outcome::Ok, note, now);
        let tries = TargetTry::new(hedge.target, false, None);
        Raced::HedgeWon(Box::new(Won {
            tries,
            credential: hedge.credential,
            output,
            attempt,
            permit,
            sent,
            cancelled,
        }))
    }

    /// The first attempt failed while the hedge ran, and the hedge failed after it: the first
    /// is recorded failed (its health too), and the hedge's failure is left to the policy.
    fn hedge_took_over_and_failed(
        &mut self,
        first: FirstRun<'_, X::Output>,
        hedge: HedgeRun,
        (result, _, cut): CallEnd<X::Output>,
        permit: Option<Permit>,
    ) -> Raced<X::Output> {
        let FirstRun { slot, credential, probe, tries, started, span, end } = first;
        let now = Instant::now();
        let cred = &slot.credentials[credential];
        let (first_error, sent, first_cut) = match end {
            Some((Err(error), sent, cut)) => (error, sent, cut),
            _ => (
                ProviderError::new(ErrorKind::Cancelled, "the first attempt ended without an answer"),
                started,
                false,
            ),
        };
        let first_error = slot.attribute(first_error, &tries.target, credential);
        self.settle_failure(&tries.target, slot, credential, probe, &first_error, first_cut);
        self.measure(&tries.target, &Err(first_error.clone()), now - sent, first_cut);
        let mut first_record =
            Attempt::called(&tries.target, cred.id(), started - self.started, now - started, Duration::ZERO)
                .with_span(span)
                .failed(first_error.clone());
        first_record.note = Some(format!("failed while the hedge on {} ran, which carried on", hedge.target));
        let first_failed = EventKind::AttemptFailed {
            target: tries.target.clone(),
            credential_id: Some(cred.id().clone()),
            error: first_error,
            will_retry: false,
        };
        if let Some(mut permit) = permit {
            permit.settle(None);
        }
        let hedge_slot = self.inner.providers.get(hedge.target.provider());
        let error = result
            .err()
            .unwrap_or_else(|| ProviderError::new(ErrorKind::Cancelled, "the hedge ended without an answer"));
        let error = match hedge_slot {
            Some(slot) => slot.attribute(error, &hedge.target, hedge.credential),
            None => error,
        };
        let note = "hedge: the request's attempt since the first one failed".to_owned();
        let attempt = self.hedge_record(&hedge, Outcome::Failed, note, now);
        let tries = TargetTry::new(hedge.target, false, None);
        Raced::HedgeFailed(Box::new(Lost {
            tries,
            credential: hedge.credential,
            probe: hedge.probe,
            cut,
            error,
            attempt,
            first: first_record,
            first_failed,
        }))
    }

    /// The first attempt answered, or both failed: the hedge is recorded cancelled (still
    /// running) or failed, and its target is done for this request.
    fn first_answered_or_both_failed(
        &mut self,
        first: CallEnd<X::Output>,
        hedge: HedgeRun,
        hedge_end: Option<(CallEnd<X::Output>, Option<Permit>, bool)>,
    ) -> Raced<X::Output> {
        let Some(slot) = self.inner.providers.get(hedge.target.provider()) else {
            return Raced::Alone(first, None);
        };
        let record = match hedge_end {
            None => {
                if hedge.probe {
                    self.inner.health.release_probe(&hedge.target, &slot.credential_ids);
                }
                let note = "hedge: the first attempt answered first".to_owned();
                self.hedge_record(&hedge, Outcome::Cancelled, note, Instant::now())
            }
            // Never sent: the target is as it was, and stays in the chain.
            Some((_, _, false)) => {
                if hedge.probe {
                    self.inner.health.release_probe(&hedge.target, &slot.credential_ids);
                }
                let note = "hedge: the pacer had no room for it at once; not sent".to_owned();
                self.hedge_record(&hedge, Outcome::Cancelled, note, Instant::now())
            }
            Some(((result, _, cut), permit, true)) => {
                if let Some(mut permit) = permit {
                    permit.settle(None);
                }
                let error = result.err().unwrap_or_else(|| {
                    ProviderError::new(ErrorKind::Cancelled, "the hedge ended without an answer")
                });
                let error = slot.attribute(error, &hedge.target, hedge.credential);
                self.settle_failure(&hedge.target, slot, hedge.credential, hedge.probe, &error, cut);
                let note = "hedge: failed; the first attempt carried on".to_owned();
                let mut attempt = self.hedge_record(&hedge, Outcome::Failed, note, Instant::now());
                attempt.error = Some(error);
                self.plan.remove(&hedge.target);
                attempt
            }
        };
        Raced::Alone(first, Some(record))
    }

    /// What a failed half of a hedged pair does to health, as any failed attempt: recorded
    /// (unless the deadline cut it, or the request could not be written for it), and a
    /// half-open probe slot given back when the failure says nothing about the provider.
    fn settle_failure(
        &self,
        target: &Target,
        slot: &ProviderSlot,
        credential: usize,
        probe: bool,
        error: &ProviderError,
        cut: bool,
    ) {
        if !cut && !error.is_unsupported() {
            let events = self.inner.health.record_failure(target, &slot.credential_ids, credential, error);
            self.inner.publish_all(events);
        }
        if probe && (cut || error.is_unsupported() || !error.kind().counts_for_breaker()) {
            self.inner.health.release_probe(target, &slot.credential_ids);
        }
    }

    /// The trail's record of `hedge`, ended at `ended`.
    fn hedge_record(&self, hedge: &HedgeRun, outcome: Outcome, note: String, ended: Instant) -> Attempt {
        let credential_id = self
            .inner
            .providers
            .get(hedge.target.provider())
            .map(|slot| slot.credentials[hedge.credential].id().clone());
        let mut attempt = Attempt::called(
            &hedge.target,
            credential_id.as_ref().unwrap_or(&crate::credential::CredentialId::derive("", "", None)),
            hedge.sent - self.started,
            ended - hedge.sent,
            Duration::ZERO,
        );
        attempt.outcome = outcome;
        attempt.hedge = true;
        attempt.span_id = hedge.span.map(|span| span.span_id);
        attempt.note = Some(note);
        attempt
    }

    /// The hedge's target and key, when the first attempt has not begun to answer, the chain
    /// has another target whose gate lets it through now and the hedge budget has room.
    fn hedge_admitted(&self, first: &Target) -> Option<(Target, &ProviderSlot, usize, bool)> {
        if self.x.answering() {
            // The first attempt is answering, though its caller is not shown it yet: not slow.
            return None;
        }
        let target = self.plan.peek_other(first)?;
        let slot = self.inner.providers.get(target.provider())?;
        let budget = self.inner.hedge_budget(self.route.name())?;
        let order = slot.key_order();
        let query = GateQuery {
            target: &target,
            credentials: &slot.credential_ids,
            health_ttl: self.health_ttl,
            explicit: false,
            force: false,
            exclude: 0,
            order: &order,
        };
        if !matches!(self.inner.health.peek(&query), Gate::Pass { .. }) || !budget.try_spend() {
            return None;
        }
        let (gate, events) = self.inner.health.admit(&query);
        self.inner.publish_all(events);
        match gate {
            Gate::Pass { credential, probe } => Some((target, slot, credential, probe)),
            Gate::Skip { .. } => None,
        }
    }
}

/// The hedge of a race.
struct HedgeRun {
    target: Target,
    credential: usize,
    /// Whether its call took a half-open circuit's probe slot.
    probe: bool,
    sent: Instant,
    /// Its span, when the request is traced.
    span: Option<TraceContext>,
}

/// The first attempt of a race the hedge won.
struct FirstRun<'a, O> {
    slot: &'a ProviderSlot,
    credential: usize,
    /// Whether its call took a half-open circuit's probe slot.
    probe: bool,
    tries: &'a TargetTry,
    started: Instant,
    /// Its span, when the request is traced.
    span: Option<TraceContext>,
    /// Its end, when it failed before the hedge answered; `None` when it was still running.
    end: Option<CallEnd<O>>,
}

/// Runs both until one answers (as `answered` says of its end) or both have ended.
/// Also says whether the first ended before the second.
async fn until_one_answers<A: std::future::Future, B: std::future::Future>(
    mut first: std::pin::Pin<&mut A>,
    mut second: std::pin::Pin<&mut B>,
    first_answered: impl Fn(&A::Output) -> bool,
    second_answered: impl Fn(&B::Output) -> bool,
) -> (Option<A::Output>, Option<B::Output>, bool) {
    let (mut first_end, mut second_end) = (None, None);
    let mut ended_first = false;
    loop {
        tokio::select! {
            end = &mut first, if first_end.is_none() => {
                let answered = first_answered(&end);
                ended_first = second_end.is_none();
                first_end = Some(end);
                if answered || second_end.is_some() { break; }
            }
            end = &mut second, if second_end.is_none() => {
                let answered = second_answered(&end);
                second_end = Some(end);
                if answered || first_end.is_some() { break; }
            }
        }
    }
    let first_ended_first = first_end.is_some() && second_end.is_some() && ended_first;
    (first_end, second_end, first_ended_first)
}

/// The end of a first attempt the race lost track of (never: the race ends only with it).
fn cancelled_end<O>() -> CallEnd<O> {
    (
        Err(ProviderError::new(ErrorKind::Cancelled, "the hedged attempt ended without an answer")),
        Instant::now(),
        false,
    )
}
