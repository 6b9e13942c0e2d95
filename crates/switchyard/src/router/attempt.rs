//! One attempt at one target: past its health gate, with a pacing permit, within its
//! timeouts (hedged when the route says so). What it came to is returned as an
//! [`AttemptEnd`], its records built and its errors redacted; [`Run::apply`] writes it down.

use std::time::Duration;

use tokio::time::Instant;

use super::entry::ProviderSlot;
use super::exchange::Exchange;
use super::run::{Context, Run, TargetTry};
use crate::credential::{Credential, CredentialId};
use crate::health::{Gate, GateQuery};
use crate::pacing::{Dispatch, PaceRequest, Pacer, Permit};
use crate::provider::{Call, RateLimitSink};
use crate::ratelimit::RateLimits;
use crate::timeouts::{Timeouts, deadline_share};
use crate::trace::TraceContext;
use crate::trail::{Attempt, Outcome};
use crate::{ErrorKind, ProviderError, Target};

/// What one attempt came to. Nothing of it is written yet: [`Run::apply`] writes it to health,
/// the plan, the record and the verdict, and says what the walk does next.
pub(super) enum AttemptEnd<'r, O> {
    /// The request's deadline passed before the attempt began.
    OutOfTime,
    /// The health gate skipped the target.
    Skipped(Skip),
    /// The pacer refused the call: the failure, never sent.
    PacerRefused(Failure<'r>),
    /// The call ended, alone.
    Called(Called<'r, O>),
    /// The call ended beside a hedge (boxed: rare, and large).
    Hedged(Box<Hedged<'r, O>>),
}

/// A target the gate skipped, and why.
pub(super) struct Skip {
    /// As exhausted (its keys out of quota), not as unhealthy.
    pub(super) exhausted: bool,
    /// When its gate opens, if known.
    pub(super) until: Option<Instant>,
    pub(super) reason: String,
    pub(super) at: Instant,
}

/// How a call ended, as the run takes it.
pub(super) enum Called<'r, O> {
    Answered(Answered<'r, O>),
    /// The request cannot be written in the target's API: nothing was sent.
    Unsupported(Unsupported),
    Failed(Failure<'r>),
}

/// A target that answered.
pub(super) struct Answered<'r, O> {
    pub(super) who: Callee<'r>,
    pub(super) output: O,
    /// The pacing permit, settled with the tokens the answer used (a stream holds it on).
    pub(super) permit: Option<Permit>,
    /// When the call was sent.
    pub(super) sent: Instant,
    /// Its record, `ok` until the run says otherwise.
    pub(super) attempt: Attempt,
}

/// A target that cannot take the request: its adapter cannot write it, or its provider refused
/// it as more than it takes.
pub(super) struct Unsupported {
    /// Why, naming the target.
    pub(super) error: ProviderError,
    /// Its record: `skipped_unsupported` (never sent), or `failed` (the provider refused it).
    pub(super) attempt: Attempt,
}

/// Whether the router, not the provider, ended a call early: then it says nothing about the
/// provider (no health, no latency, a probe's slot given back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// The provider's own failure, or its own limit.
    No,
    /// The request's deadline passed: the walk is out of time.
    Deadline,
    /// Its first-byte wait was shortened to leave the targets after it a share of the
    /// deadline (`timeouts::deadline_share`): the walk moves on.
    Share,
    /// A pooled connection went stale under it (the server's keep-alive ran out as the
    /// request went): the pool's race, not the provider's.
    Stale,
}

impl Cut {
    /// Whether the router ended the call, so that it says nothing about the provider.
    pub(super) fn says_nothing(self) -> bool {
        self != Cut::No
    }
}

/// A call that failed, its error redacted and stamped.
pub(super) struct Failure<'r> {
    pub(super) who: Callee<'r>,
    /// Whether the router, not the provider, cut it short.
    pub(super) cut: Cut,
    pub(super) error: ProviderError,
    /// Its record, outcome to be decided.
    pub(super) attempt: Attempt,
}

/// How a hedged first attempt's race ended.
pub(super) enum Hedged<'r, O> {
    /// The first attempt ended (answered, or failed after the hedge), and the hedge lost
    /// beside it: dropped while it ran, never sent, or failed first.
    FirstEnded { first: Called<'r, O>, hedge: Lost<'r> },
    /// The hedge answered first; the first lost (dropped, or failed while the hedge ran).
    HedgeWon { first: Lost<'r>, hedge: Answered<'r, O> },
    /// The first failed while the hedge ran, then the hedge failed too: from the first's
    /// failure on the hedge was the request's attempt, and its failure is the one decided on.
    TookOver { first: Lost<'r>, hedge: Failure<'r> },
}

/// The half of a hedged pair that lost.
pub(super) struct Lost<'r> {
    pub(super) who: Callee<'r>,
    /// Its record, cancelled or failed.
    pub(super) attempt: Attempt,
    pub(super) loss: Loss,
}

/// How a half of a hedged pair lost.
pub(super) enum Loss {
    /// Dropped while it ran, or never sent: nothing is learnt of the target.
    Dropped,
    /// It failed, with this error (redacted), cut short by the router or not.
    Failed { error: ProviderError, cut: Cut },
}

/// Who an attempt calls: a target, with one key of its provider.
#[derive(Clone)]
pub(super) struct Callee<'r> {
    pub(super) target: Target,
    pub(super) slot: &'r ProviderSlot,
    /// The key's index among the provider's credentials.
    pub(super) credential: usize,
    /// Whether the call took a half-open circuit's probe slot.
    pub(super) probe: bool,
}

impl Callee<'_> {
    pub(super) fn credential(&self) -> &Credential {
        &self.slot.credentials[self.credential]
    }

    pub(super) fn credential_id(&self) -> &CredentialId {
        &self.slot.credential_ids[self.credential]
    }

    /// The model the provider is asked for: its own id of the target's model when it maps it
    /// ([`ProviderEntry::model`](super::ProviderEntry::model)), else the target's.
    pub(super) fn model(&self) -> &str {
        self.slot.provider_model(self.target.model()).map_or(self.target.model(), |m| m)
    }

    /// The record of a call to this target with this key, `started` after the request began,
    /// taking `duration` of which `queued` waiting for the pacer (outcome `ok` until the router
    /// says otherwise), with the provider's own id of the model when it differs.
    pub(super) fn called(&self, started: Duration, duration: Duration, queued: Duration) -> Attempt {
        let mut attempt = Attempt::called(&self.target, self.credential_id(), started, duration, queued);
        attempt.provider_model = self.slot.provider_model(self.target.model()).cloned();
        attempt
    }

    /// `error` from this call, redacted of the key and stamped with the target and key.
    pub(super) fn attribute(&self, error: ProviderError) -> ProviderError {
        self.slot.attribute(error, &self.target, self.credential)
    }
}

/// A call about to be sent: to whom, when its attempt began (before the pacer), its permit,
/// and its span when the request is traced.
pub(super) struct Outgoing<'r> {
    pub(super) who: Callee<'r>,
    pub(super) started: Instant,
    pub(super) permit: Option<Permit>,
    pub(super) span: Option<TraceContext>,
}

/// A call that answered, and when it was sent.
pub(super) struct Reply<O> {
    pub(super) output: O,
    pub(super) sent: Instant,
}

/// A call that did not answer: why, when it was sent, and whether the router (not the
/// provider) cut it short. The error is as the provider gave it, not yet redacted.
pub(super) struct Unanswered {
    pub(super) error: ProviderError,
    pub(super) sent: Instant,
    pub(super) cut: Cut,
}

/// A half-open probe's slot, given back if its attempt is dropped before it ends.
pub(super) struct ProbeGuard<'a> {
    pub(super) health: &'a crate::health::HealthBoard,
    pub(super) target: crate::Target,
    pub(super) credentials: &'a [crate::credential::CredentialId],
    pub(super) armed: bool,
}

impl<'a> ProbeGuard<'a> {
    /// The guard of the probe slot `who` took.
    pub(super) fn taken(health: &'a crate::health::HealthBoard, who: &Callee<'a>) -> Self {
        Self { health, target: who.target.clone(), credentials: &who.slot.credential_ids, armed: true }
    }

    /// Gives the slot back now, once.
    pub(super) fn give_back(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.health.release_probe(&self.target, self.credentials);
        }
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// How one call ended.
pub(super) type CallEnd<O> = Result<Reply<O>, Unanswered>;

impl<'r, X: Exchange> Run<'r, X> {
    /// One attempt at `tries.target`, and what it came to.
    pub(super) async fn attempt(
        &mut self,
        slot: &'r ProviderSlot,
        tries: &TargetTry,
    ) -> AttemptEnd<'r, X::Output> {
        let now = Instant::now();
        if self.ctx.deadline.is_some_and(|d| now >= d) {
            return AttemptEnd::OutOfTime;
        }
        let who = match self.ctx.admit(slot, tries, now) {
            Ok(who) => who,
            Err(skip) => return AttemptEnd::Skipped(skip),
        };
        // Held until the attempt ends and its outcome decides the circuit; dropped before
        // (the caller went away, even while the fleet is asked for the probe), it lets the
        // slot go for the next request to probe at once. Only a probe holds a slot: the common
        // attempt makes no guard.
        let mut probe = who.probe.then(|| ProbeGuard::taken(&self.ctx.inner.health, &who));
        let who = match probe.as_mut() {
            Some(guard) => match self.ctx.claim_probe(who, tries, guard).await {
                Ok(who) => who,
                Err(skip) => return AttemptEnd::Skipped(skip),
            },
            None => who,
        };
        if tries.pending.is_none() {
            self.record.calling(&who.target, self.verdict.last_kind());
        }
        let started = Instant::now();
        let permit = match self.permit(&who).await {
            Ok(permit) => permit,
            Err(refused) => {
                // Its outcome gives the slot back.
                probe.iter_mut().for_each(|guard| guard.armed = false);
                return AttemptEnd::PacerRefused(refused);
            }
        };
        // Sent from here: a request dropped before (in the pacer's queue) sent nothing.
        self.record.sending(&who.target, who.credential_id(), started, false);
        let span = self.ctx.options.trace.map(|trace| trace.child());
        let out = Outgoing { who, started, permit, span };
        let end = match self.hedge_delay(tries) {
            None => {
                let end = self.ctx.call(&out.who, out.permit.as_ref(), span, self.plan.remaining()).await;
                AttemptEnd::Called(self.ended(out, end))
            }
            Some(delay) => self.send_hedged(out, delay).await,
        };
        probe.iter_mut().for_each(|guard| guard.armed = false);
        end
    }

    /// Waits for the pacer's permit, counted against the deadline. A refusal is a failure
    /// never sent, which falls back like any failure.
    async fn permit(&mut self, who: &Callee<'r>) -> Result<Option<Permit>, Failure<'r>> {
        let Some(pacer) = self.ctx.inner.pacer.as_ref().filter(|_| self.ctx.x.paced()) else {
            return Ok(None);
        };
        let asked = Instant::now();
        let request = PaceRequest {
            provider: &who.slot.id,
            credential_id: who.credential_id(),
            estimated_tokens: self.ctx.x.estimated_tokens(),
            deadline: self.ctx.deadline,
            // Pacing waits; it reroutes only when the route asks it to.
            spill_after: (self.ctx.route.spill_over() && self.plan.has_more())
                .then_some(self.ctx.route.retry().max_wait),
        };
        match pacer.acquire(request).await {
            Ok(permit) => {
                self.record.paced(&who.slot.id, who.credential_id(), &permit);
                Ok(Some(permit))
            }
            Err(error) => {
                let error =
                    error.with_target(who.target.clone()).with_credential(who.credential_id().clone());
                let waited = asked.elapsed();
                let attempt = who
                    .called(self.record.offset(asked), waited, waited)
                    .failed(error.clone())
                    .with_note(Some(crate::trail::PACER_REFUSED.to_owned()));
                Err(Failure { who: who.clone(), cut: Cut::No, error, attempt })
            }
        }
    }

    /// A call's end, as the run takes it: its record built, its time counted toward the
    /// target's latency, its permit settled, its error redacted.
    pub(super) fn ended(&self, out: Outgoing<'r>, end: CallEnd<X::Output>) -> Called<'r, X::Output> {
        let Outgoing { who, started, mut permit, span } = out;
        let finished = Instant::now();
        let queued = permit.as_ref().map_or(Duration::ZERO, |p| p.waited);
        let mut attempt = who.called(self.record.offset(started), finished - started, queued).with_span(span);
        match end {
            Ok(Reply { output, sent }) => {
                let answering = self.ctx.x.answering_since(&output).unwrap_or(finished);
                self.ctx.measure(&who.target, answering - sent, None);
                if let Some(permit) = permit.as_mut()
                    && let Some(used) = self.ctx.x.used_tokens(&output)
                {
                    permit.settle(Some(used));
                }
                Called::Answered(Answered { who, output, permit, sent, attempt })
            }
            Err(miss) => {
                self.ctx.measure(&who.target, finished - miss.sent, Some(&miss));
                if let Some(mut permit) = permit {
                    // A provider that answered with an error status generated nothing: its whole
                    // estimate goes back, to the calls waiting too. Else it may have written
                    // before it failed (a stream cut, a call gone quiet).
                    let generated_nothing = miss.error.status().is_some_and(|status| status >= 400);
                    permit.settle(generated_nothing.then_some(0));
                }
                if miss.error.is_unsupported() {
                    // A target that cannot take this request says nothing of its health: a
                    // half-open circuit's probe slot goes back for the next request.
                    if who.probe {
                        self.ctx.inner.health.release_probe(&who.target, &who.slot.credential_ids);
                    }
                    // Refused by the provider itself (a status: a 413, a model that takes no
                    // images, a prefill refused, an answer that could not continue): a call
                    // made with its key, which failed. Else its adapter could not write the
                    // request, and the target was skipped without a call.
                    let error = if miss.error.status().is_some() {
                        attempt.outcome = Outcome::Failed;
                        who.attribute(miss.error)
                    } else {
                        attempt.outcome = Outcome::SkippedUnsupported;
                        attempt.credential_id = None;
                        miss.error.with_target(who.target.clone())
                    };
                    attempt.error = Some(error.clone());
                    return Called::Unsupported(Unsupported { error, attempt });
                }
                let error = who.attribute(miss.error);
                Called::Failed(Failure { who, cut: miss.cut, error, attempt })
            }
        }
    }
}

impl<'r, X: Exchange> Context<'r, X> {
    /// Asks the health gate for `tries.target`: the key to call it with, or why it is skipped.
    fn admit(&self, slot: &'r ProviderSlot, tries: &TargetTry, now: Instant) -> Result<Callee<'r>, Skip> {
        let mut order = slot.key_order();
        if let Some(prefer) = tries.prefer {
            // The session's key first, then the rest in the provider's order.
            if order.is_empty() {
                order = (0..slot.credential_ids.len()).collect();
            }
            order.retain(|&index| index != prefer);
            order.insert(0, prefer);
        }
        let query = GateQuery {
            target: &tries.target,
            credentials: &slot.credential_ids,
            // Within one request, a retry is not stopped by the failure it retries.
            health_ttl: if tries.pending.is_some() { None } else { self.health_ttl },
            explicit: self.explicit,
            force: tries.force,
            exclude: tries.exclude,
            order: &order,
            probe_lease: self.probe_lease(now),
        };
        let (gate, events) = self.inner.health.admit(&query);
        self.inner.publish_all(events);
        match gate {
            Gate::Pass { credential, probe } => {
                Ok(Callee { target: tries.target.clone(), slot, credential, probe })
            }
            Gate::Skip { exhausted, until, reason } => Err(Skip { exhausted, until, reason, at: now }),
        }
    }

    /// Makes sure the probe `who` took is the fleet's one probe of its target: over a store
    /// shared by replicas, another may have taken it a moment before this one heard of it.
    /// Then the gate, which now knows, is asked again: it skips the target as probed, or lets
    /// an ordinary call through (the other probe already closed the circuit).
    async fn claim_probe(
        &self,
        who: Callee<'r>,
        tries: &TargetTry,
        guard: &mut ProbeGuard<'_>,
    ) -> Result<Callee<'r>, Skip> {
        if self.inner.health.claim_probe(&who.target).await {
            return Ok(who);
        }
        // Not this replica's: its slot goes back before the gate is asked again.
        guard.give_back();
        let now = Instant::now();
        match self.admit(who.slot, tries, now)? {
            again if !again.probe => Ok(again),
            again => {
                self.inner.health.release_probe(&again.target, &again.slot.credential_ids);
                let reason = "circuit half-open: another replica probes".to_owned();
                Err(Skip { exhausted: false, until: None, reason, at: now })
            }
        }
    }

    /// Calls the provider within the attempt's limits and the request's deadline; `later`
    /// targets of the chain are still to try after this one, and a deadline leaves them their
    /// share of it (`timeouts::deadline_share`).
    pub(super) async fn call(
        &self,
        who: &Callee<'_>,
        permit: Option<&Permit>,
        span: Option<TraceContext>,
        later: usize,
    ) -> CallEnd<X::Output> {
        let sent = Instant::now();
        let limits = self.limits(sent, later, who);
        let sink = self.inner.pacer.as_ref().filter(|_| self.x.paced()).map(|pacer| PacerSink {
            pacer: &**pacer,
            provider: &who.slot.id,
            credential_id: who.credential_id(),
            dispatch: permit.and_then(|p| p.dispatch),
        });
        // One instant for the cut and for the call to know it by: a call that ends itself at its
        // limit (a whole answer held open) is not cut at the same moment first.
        let ends = sent.checked_add(limits.remaining);
        let call = Call {
            model: who.model(),
            credential: who.credential(),
            timeouts: &limits.timeouts,
            rate_limits: sink.as_ref().map(|s| s as &dyn RateLimitSink),
            forward: &self.options.forward_headers,
            trace: span,
            ends,
        };
        let called = match ends {
            Some(ends) => tokio::time::timeout_at(ends, self.x.call(&*who.slot.provider, call)).await,
            None => Ok(self.x.call(&*who.slot.provider, call).await),
        };
        let (error, cut) = match called {
            Ok(Ok(output)) => return Ok(Reply { output, sent }),
            Ok(Err(error)) if error.is_silence() && limits.shared.is_some() => limits.share_spent(later),
            Ok(Err(error)) if error.is_stall() && limits.idle_shared.is_some() => {
                limits.stall_share_spent(later)
            }
            Ok(Err(error)) => {
                let cut = if error.is_stale_connection() { Cut::Stale } else { Cut::No };
                (error, cut)
            }
            // A timeout forced by the caller's deadline says nothing about the provider.
            Err(_) if limits.remaining < limits.limit => {
                let message = format!("request deadline passed after {:?} of waiting", limits.remaining);
                (ProviderError::new(ErrorKind::Timeout, message), Cut::Deadline)
            }
            Err(_) if limits.share_is_limit => limits.share_spent(later),
            // Nothing at all came (a stream that began to answer is held, not silent).
            Err(_) if !self.x.answering() => {
                let message = format!("no answer within the {} timeout of {:?}", limits.name, limits.limit);
                (ProviderError::silence(message), Cut::No)
            }
            Err(_) => {
                let message = format!("no answer within the {} timeout of {:?}", limits.name, limits.limit);
                (ProviderError::new(ErrorKind::Timeout, message), Cut::No)
            }
        };
        Err(Unanswered { error, sent, cut })
    }

    /// The limits of an attempt to `provider` sent at `sent` with `later` targets after it: the
    /// route's, with the first-byte wait (a call answered whole: its limit) shortened to the
    /// deadline's share when that is shorter.
    fn limits(&self, sent: Instant, later: usize, who: &Callee<'_>) -> Limits {
        let provider = &*who.slot.provider;
        let (mut limit, name) = self.x.attempt_limit(&self.route);
        let mut timeouts = *self.route.timeouts();
        let left = self.deadline.map(|d| d.saturating_duration_since(sent));
        let share = left.and_then(|left| deadline_share(left, later));
        let whole = self.x.answers_whole(provider, who.model());
        let wait = if whole { &mut limit } else { &mut timeouts.first_byte };
        let shared = share.filter(|share| *share < *wait);
        if let Some(share) = shared {
            *wait = share;
        }
        // A stall in the middle of the answer leaves the targets after it their share too.
        let idle_shared = share.filter(|share| !whole && *share < timeouts.idle);
        if let Some(share) = idle_shared {
            timeouts.idle = share;
        }
        let remaining = left.map_or(limit, |left| left.min(limit));
        let share_is_limit = whole && shared.is_some();
        Limits { timeouts, limit, name, remaining, shared, idle_shared, share_is_limit }
    }

    /// How long a call made now may last: its limit, within the request's deadline. A probe
    /// holds its circuit's half-open slot that long at most.
    pub(super) fn probe_lease(&self, now: Instant) -> Duration {
        let (limit, _) = self.x.attempt_limit(&self.route);
        self.deadline.map_or(limit, |d| d.saturating_duration_since(now).min(limit))
    }

    /// A hedge's pacing permit, only if it can go now: a hedge that would wait is no hedge.
    pub(super) async fn hedge_permit(&self, who: &Callee<'_>) -> Result<Option<Permit>, ProviderError> {
        let Some(pacer) = self.inner.pacer.as_ref().filter(|_| self.x.paced()) else { return Ok(None) };
        let request = PaceRequest {
            provider: &who.slot.id,
            credential_id: who.credential_id(),
            estimated_tokens: self.x.estimated_tokens(),
            deadline: self.deadline,
            spill_after: Some(Duration::ZERO),
        };
        pacer.acquire(request).await.map(Some)
    }

    /// Counts a call's time toward the target's latency, when it says something of the
    /// provider's speed: an answer, or a failure of a slow or broken provider (never one cut by
    /// the caller's deadline, which says nothing about the provider).
    pub(super) fn measure(&self, target: &Target, took: Duration, failed: Option<&Unanswered>) {
        let says_speed = failed.is_none_or(|miss| {
            !miss.cut.says_nothing()
                && matches!(
                    miss.error.kind(),
                    ErrorKind::Timeout
                        | ErrorKind::Transport
                        | ErrorKind::Unavailable
                        | ErrorKind::MalformedResponse
                )
        });
        if says_speed && self.x.measured() {
            self.inner.latency.record(target, took);
        }
    }
}

/// What bounds one attempt: the timeouts the provider is given, the attempt's own limit and
/// its name, what is left of it within the deadline, and the deadline's share when that
/// shortened the first-byte wait.
struct Limits {
    timeouts: Timeouts,
    limit: Duration,
    name: &'static str,
    remaining: Duration,
    /// The deadline's share, when it shortened the first-byte wait.
    shared: Option<Duration>,
    /// The deadline's share, when it shortened the idle wait.
    idle_shared: Option<Duration>,
    /// The share shortened the attempt's limit itself (a call answered whole, whose first byte
    /// is its end): the attempt cut at its limit was cut by the share.
    share_is_limit: bool,
}

impl Limits {
    /// The silence of an attempt whose first-byte wait the deadline's share shortened: the
    /// router's cut, not the provider's failure.
    fn share_spent(&self, later: usize) -> (ProviderError, Cut) {
        let share = self.shared.unwrap_or(self.limit);
        let message = format!(
            "no answer within {share:?}, its first-byte wait shortened to leave the {later} target(s) after it a share of the request deadline"
        );
        (ProviderError::silence(message), Cut::Share)
    }

    /// The stall of an attempt whose idle wait the deadline's share shortened: the router's
    /// cut too (a pause that long may be the model's own), not the provider's failure.
    fn stall_share_spent(&self, later: usize) -> (ProviderError, Cut) {
        let share = self.idle_shared.unwrap_or(self.timeouts.idle);
        let message = format!(
            "no chunk within {share:?}, its idle wait shortened to leave the {later} target(s) after it a share of the request deadline"
        );
        (ProviderError::stall(message), Cut::Share)
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
