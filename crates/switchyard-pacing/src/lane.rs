//! One allowance: a provider's (or one key's) concurrency slots, request and token buckets,
//! minimum interval, and what its headers said.
//!
//! Waiters are served first come, first served: the concurrency semaphore is fair, and every
//! rate reservation is made under one lock in arrival order, each later arrival getting a later
//! dispatch time. A reservation is committed only when it will be kept, and refunded when its
//! caller goes away before dispatch.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use switchyard::credential::CredentialId;
use switchyard::pacing::{
    Dispatch, FleetSnapshot, HeadersSnapshot, LaneSnapshot, PaceRequest, Permit, PermitGuard, StatedSnapshot,
    WaitReason,
};
use switchyard::ratelimit::RateLimits;
use switchyard::{ErrorKind, ProviderError};
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::bucket::Bucket;
use crate::fleet::{self, FleetGate, FleetPacing, FleetReport, LeaseBook, StatedReport, Taken, Uncounted};
use crate::headers::{HeaderBudget, Stated, Verdict};
use crate::limits::Limits;
use crate::slots::{Slot, Slots};

#[derive(Debug)]
struct State {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    /// The earliest next dispatch: the last reservation's dispatch time plus `min_interval`.
    /// It keeps waiters in arrival order even when their waits have different reasons.
    next_slot: Instant,
    /// Why the last reservation waited, reported by those queued behind it.
    next_reason: WaitReason,
    /// A 429's Retry-After holds every caller of the lane until then.
    held_until: Option<Instant>,
    /// The allowance the provider's headers state, as a budget until its reset.
    headers: HeaderBudget,
    /// Calls in flight the fleet's header windows did not count, told to it with their answers.
    uncounted: Uncounted,
    learned: Option<RateLimits>,
    /// The tokens dispatched calls have given back so far, net: what their answers used less
    /// than their estimates, less what some used beyond. A call booked before they came back
    /// waits that much less.
    given_back: f64,
}

/// How long a caller will wait: until its deadline, or until it spills over to the next
/// target (then the refusal says so).
struct Patience {
    start: Instant,
    deadline: Option<Instant>,
    spill_at: Option<Instant>,
    /// The earlier of the two.
    give_up_at: Option<Instant>,
}

impl Patience {
    fn of(request: &PaceRequest<'_>) -> Self {
        let start = Instant::now();
        let spill_at = request.spill_after.map(|d| start + d);
        let give_up_at = match (request.deadline, spill_at) {
            (Some(d), Some(s)) => Some(d.min(s)),
            (d, s) => d.or(s),
        };
        Self { start, deadline: request.deadline, spill_at, give_up_at }
    }

    /// Whether giving up at `at` is a spill-over (not the deadline).
    fn spilled(&self, at: Instant) -> bool {
        self.spill_at.is_some_and(|s| at >= s) && self.deadline.is_none_or(|d| d > at)
    }
}

/// A dispatch time booked against the lane's buckets and interval.
struct Booked {
    /// When it was booked.
    at: Instant,
    wait: Duration,
    reason: WaitReason,
    /// The queue position this call took, and what it replaced, to give it back on cancel.
    previous_slot: (Instant, WaitReason),
    slot_taken: Instant,
    /// The part of `wait` no refund shortens: the requests bucket's, a 429's hold, and with a
    /// `min_interval` the whole of it.
    floor: Duration,
    /// [`State::given_back`] when it was booked.
    given_back: f64,
}

/// What the gate says to a call that has its concurrency slot and bucket reservation.
enum Gate {
    Go(Dispatch),
    /// The budget lets it go, but earlier callers wait at the gate: behind them.
    Queue,
    /// Wait for new headers, or until then.
    Wait(Option<Instant>),
}

pub(super) struct Lane {
    provider: Arc<str>,
    credential: Option<CredentialId>,
    limits: Limits,
    /// Its concurrency slots, kept by the lane that follows it when the limits change.
    slots: Arc<Slots>,
    state: Mutex<State>,
    /// Callers waiting on the provider's headers pass one at a time, in arrival order.
    turnstile: Semaphore,
    /// Woken when what the gate decides on changes: headers arrived, a call ended.
    changed: Notify,
    /// Woken when a dispatched call gives back tokens it did not use.
    given_back: Notify,
    /// The fleet's share of the allowance, when the lane is paced with other replicas.
    fleet: Option<Arc<FleetGate>>,
}

/// One dimension of a header budget as operators see it at `now`.
fn stated_snapshot(stated: Stated, now: Instant) -> StatedSnapshot {
    StatedSnapshot {
        limit: stated.limit,
        // Below zero is in-flight calls the provider may not have counted yet: none left.
        remaining: stated.remaining.floor().max(0.0) as u64,
        reset_in_ms: stated.resets_at.map(|at| at.saturating_duration_since(now).as_millis() as u64),
    }
}

impl Lane {
    /// A lane of `limits`, on `slots` carried from the lane it follows (bounded anew when its
    /// pacer takes over, [`Lane::bind_slots`]), else on slots of its own.
    pub(super) fn new(
        provider: &str,
        credential: Option<CredentialId>,
        limits: Limits,
        fleet: Option<Arc<dyn FleetPacing>>,
        slots: Option<Arc<Slots>>,
    ) -> Self {
        let now = Instant::now();
        let keep = 1.0 - limits.reserve_fraction.clamp(0.0, 1.0);
        let state = State {
            requests: limits.requests_per_minute.map(|rpm| Bucket::new(f64::from(rpm) * keep, now)),
            tokens: limits.tokens_per_minute.map(|tpm| Bucket::new(f64::from(tpm) * keep, now)),
            next_slot: now,
            next_reason: WaitReason::Interval,
            held_until: None,
            headers: HeaderBudget::new(limits.reserve_fraction, limits.max_header_wait),
            uncounted: Uncounted::default(),
            learned: None,
            given_back: 0.0,
        };
        let slots = slots.unwrap_or_else(|| Slots::new(limits.max_concurrent));
        let fleet = fleet.map(|fleet| {
            let key: Arc<str> = match &credential {
                Some(credential) => format!("{provider}/{credential}").into(),
                None => provider.into(),
            };
            let book = LeaseBook::new(
                limits.requests_per_minute.map(|rpm| f64::from(rpm) * keep),
                limits.tokens_per_minute.map(|tpm| f64::from(tpm) * keep),
            );
            Arc::new(FleetGate::new(fleet, key, book))
        });
        Self {
            provider: provider.into(),
            credential,
            limits,
            slots,
            state: Mutex::new(state),
            turnstile: Semaphore::new(1),
            changed: Notify::new(),
            given_back: Notify::new(),
            fleet,
        }
    }

    /// Its concurrency slots, for the lane that follows it.
    pub(super) fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    /// Bounds its slots by its own `max_concurrent` (slots carried from the lane it follows
    /// are bounded by that lane's until then; its own already are).
    pub(super) fn bind_slots(&self) {
        self.slots.rebound(self.limits.max_concurrent);
    }

    /// The lane's name in the fleet, when it is paced with other replicas.
    pub(super) fn fleet_key(&self) -> Option<&str> {
        self.fleet.as_deref().map(FleetGate::key)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn describe(&self, reason: WaitReason) -> String {
        let limits = &self.limits;
        match reason {
            WaitReason::Concurrency => {
                format!("max_concurrent {}", limits.max_concurrent.unwrap_or_default())
            }
            WaitReason::Rpm => {
                format!("requests_per_minute {}", limits.requests_per_minute.unwrap_or_default())
            }
            WaitReason::Tpm => format!("tokens_per_minute {}", limits.tokens_per_minute.unwrap_or_default()),
            WaitReason::Interval => format!("min_interval {:?}", limits.min_interval),
            WaitReason::ProviderHeaders => "the provider's rate-limit headers".to_owned(),
        }
    }

    fn refuse(&self, reason: WaitReason, wait: Duration, spill: bool) -> ProviderError {
        let why = if spill {
            "longer than the route's max_wait; spilling over to the next target"
        } else {
            "past the request's deadline"
        };
        ProviderError::new(
            ErrorKind::RateLimited,
            format!(
                "pacing of provider `{}` ({}) would hold the request {:.3}s, {why}",
                self.provider,
                self.describe(reason),
                wait.as_secs_f64()
            ),
        )
        .with_code("paced")
        .with_retry_after(wait)
    }

    pub(super) async fn acquire(self: Arc<Self>, request: PaceRequest<'_>) -> Result<Permit, ProviderError> {
        let patience = Patience::of(&request);
        // Concurrency first, so that a call waiting for its rate slot already counts as in
        // flight: the two limits then hold together, never one at the other's expense.
        let (slot, waited_for_slot) = self.take_slot(&patience).await?;

        let tokens = f64::from(request.estimated_tokens);
        let booked = self.book(tokens, &patience)?;
        let mut reservation = Reservation {
            lane: self.clone(),
            tokens: if self.limits.tokens_per_minute.is_some() { tokens } else { 0.0 },
            slot_taken: booked.slot_taken,
            previous_slot: booked.previous_slot,
            dispatch: None,
            fleet: None,
            settled: false,
            _slot: slot,
        };
        // Why it waited, once it did (a call that goes at once waited for nothing).
        let mut reason = (!booked.wait.is_zero()).then_some(booked.reason);
        if !booked.wait.is_zero() {
            // Dropped here (the caller went away), the reservation refunds itself.
            self.sleep_booked(&booked).await;
        }
        if let Some(gate) = &self.fleet {
            let before = if booked.wait.is_zero() { booked.at } else { Instant::now() };
            let taken = gate.take(tokens, patience.give_up_at, before).await.map_err(|at| {
                let reason = self.fleet_reason();
                self.refuse(reason, at.saturating_duration_since(patience.start), patience.spilled(at))
            })?;
            reservation.fleet = Some(taken);
            if taken.waited {
                reason = Some(self.fleet_reason());
            }
        }
        // The provider may have spoken while this call waited for its slot: what its headers
        // say now decides.
        let dispatch = self.pass_gate(tokens, &patience, &mut reason, reservation.fleet).await?;
        reservation.dispatch = Some(dispatch);

        let reason = reason.or(waited_for_slot.then_some(WaitReason::Concurrency));
        let waited = if reason.is_some() { patience.start.elapsed() } else { Duration::ZERO };
        Ok(Permit::new(waited, reason, Some(Box::new(reservation))).with_dispatch(dispatch))
    }

    /// Sleeps out a booked wait. A wait for tokens is cut short by what calls dispatched before
    /// it give back meanwhile (their answers used less than their estimates, `max_tokens` say):
    /// their tokens were what it waited for. Then the queue position it leaves early is freed.
    async fn sleep_booked(&self, booked: &Booked) {
        let planned = booked.at + booked.wait;
        loop {
            let given = self.given_back.notified();
            tokio::pin!(given);
            given.as_mut().enable();
            let due = self.due(booked);
            if Instant::now() < due {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = &mut given => continue,
                }
            }
            if due < planned {
                let mut state = self.lock();
                if state.next_slot == booked.slot_taken {
                    state.next_slot = Instant::now();
                }
            }
            return;
        }
    }

    /// When a booked call may go: its wait less the tokens given back since it was booked, at
    /// the rate they refill, and never before its floor.
    fn due(&self, booked: &Booked) -> Instant {
        let state = self.lock();
        let per_sec = state.tokens.as_ref().map_or(0.0, Bucket::per_sec);
        let given = state.given_back - booked.given_back;
        if per_sec <= 0.0 || given <= 0.0 {
            return booked.at + booked.wait;
        }
        let sooner = Duration::from_secs_f64((given / per_sec).min(1e6));
        booked.at + booked.wait.saturating_sub(sooner).max(booked.floor)
    }

    /// What a wait for the fleet's share is reported as.
    fn fleet_reason(&self) -> WaitReason {
        if self.limits.requests_per_minute.is_some() {
            WaitReason::Rpm
        } else if self.limits.tokens_per_minute.is_some() {
            WaitReason::Tpm
        } else {
            WaitReason::ProviderHeaders
        }
    }

    /// A concurrency slot: at once, or in arrival order; and whether it was waited for.
    async fn take_slot(&self, patience: &Patience) -> Result<(Option<Slot>, bool), ProviderError> {
        if let Some(slot) = self.slots.try_take() {
            return Ok((Some(slot), false));
        }
        let waiting = self.slots.take();
        let slot = match patience.give_up_at {
            Some(at) => tokio::time::timeout_at(at, waiting).await.map_err(|_| {
                self.refuse(WaitReason::Concurrency, at - patience.start, patience.spilled(at))
            })?,
            None => waiting.await,
        };
        // The semaphore is never closed while the lane lives.
        Ok((slot.ok(), true))
    }

    /// Books the call's dispatch time against the buckets, the interval and a 429's hold, in
    /// arrival order; refuses at once when that time is past the caller's patience.
    fn book(&self, tokens: f64, patience: &Patience) -> Result<Booked, ProviderError> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut waits = Vec::with_capacity(4);
        if let Some(bucket) = state.requests.as_mut() {
            bucket.refill(now);
            waits.push((bucket.wait_for(1.0), WaitReason::Rpm));
        }
        if let Some(bucket) = state.tokens.as_mut() {
            bucket.refill(now);
            waits.push((bucket.wait_for(tokens), WaitReason::Tpm));
        }
        let queue_reason =
            if self.limits.min_interval.is_zero() { state.next_reason } else { WaitReason::Interval };
        waits.push((state.next_slot.saturating_duration_since(now), queue_reason));
        if let Some(until) = state.held_until {
            waits.push((until.saturating_duration_since(now), WaitReason::ProviderHeaders));
        }
        let unshortened = |reason: &WaitReason| {
            !self.limits.min_interval.is_zero()
                || matches!(reason, WaitReason::Rpm | WaitReason::ProviderHeaders)
        };
        let floor = waits.iter().filter(|(_, why)| unshortened(why)).map(|(wait, _)| *wait).max();
        let floor = floor.unwrap_or_default();
        let (wait, reason) =
            waits.into_iter().max_by_key(|(wait, _)| *wait).unwrap_or((Duration::ZERO, WaitReason::Rpm));
        // A call that may go at once goes: its patience bounds a wait, and there is none (a
        // hedge's patience is zero, already past by the time it is booked).
        if let Some(at) = patience.give_up_at
            && !wait.is_zero()
            && now + wait > at
        {
            return Err(self.refuse(reason, wait, patience.spilled(now + wait)));
        }
        if let Some(bucket) = state.requests.as_mut() {
            bucket.take(1.0);
        }
        if let Some(bucket) = state.tokens.as_mut() {
            bucket.take(tokens);
        }
        let previous_slot = (state.next_slot, state.next_reason);
        state.next_slot = now + wait + self.limits.min_interval;
        state.next_reason = reason;
        let given_back = state.given_back;
        Ok(Booked { at: now, wait, reason, previous_slot, slot_taken: state.next_slot, floor, given_back })
    }

    /// Waits until a 429's hold is over and the header budget lets a call of `tokens` go,
    /// behind every caller already waiting there; then dispatches it.
    async fn pass_gate(
        &self,
        tokens: f64,
        patience: &Patience,
        reason: &mut Option<WaitReason>,
        fleet: Option<Taken>,
    ) -> Result<Dispatch, ProviderError> {
        let (start, give_up_at) = (patience.start, patience.give_up_at);
        let spilled = |at: Instant| patience.spilled(at);
        let mut turn: Option<SemaphorePermit<'_>> = None;
        loop {
            if let Gate::Go(dispatch) = self.gate(tokens, turn.is_some(), fleet) {
                return Ok(dispatch);
            }
            // Listen for changes first, then look again: a change in between is not lost.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let until = match self.gate(tokens, turn.is_some(), fleet) {
                Gate::Go(dispatch) => return Ok(dispatch),
                Gate::Wait(until) if turn.is_some() => until,
                // A hold or a reset past the caller's patience only moves later: refuse now
                // rather than after queueing behind the callers at the turnstile.
                Gate::Wait(Some(until)) if give_up_at.is_some_and(|at| until > at) => {
                    return Err(self.refuse(WaitReason::ProviderHeaders, until - start, spilled(until)));
                }
                Gate::Queue | Gate::Wait(_) => {
                    let queued = self.turnstile.acquire();
                    let taken = match give_up_at {
                        Some(at) => tokio::time::timeout_at(at, queued)
                            .await
                            .map_err(|_| self.refuse(WaitReason::ProviderHeaders, at - start, spilled(at)))?,
                        None => queued.await,
                    };
                    // The turnstile is never closed while the lane lives.
                    turn = taken.ok();
                    *reason = Some(WaitReason::ProviderHeaders);
                    continue;
                }
            };
            *reason = Some(WaitReason::ProviderHeaders);
            if let (Some(until), Some(at)) = (until, give_up_at)
                && until > at
            {
                return Err(self.refuse(WaitReason::ProviderHeaders, until - start, spilled(until)));
            }
            let deadline = match (until, give_up_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut changed => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => changed.await,
            }
            if let Some(at) = give_up_at
                && Instant::now() >= at
            {
                return Err(self.refuse(WaitReason::ProviderHeaders, at - start, spilled(at)));
            }
        }
    }

    /// The gate's verdict for a call of `tokens` now, which took `fleet` from the fleet's
    /// slices; dispatches it when it may go.
    fn gate(&self, tokens: f64, has_turn: bool, fleet: Option<Taken>) -> Gate {
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(until) = state.held_until.filter(|until| *until > now) {
            return Gate::Wait(Some(until));
        }
        if let Some(gate) = &self.fleet {
            // Out of the fleet's reach, this replica spends its share of what headers state.
            let share = gate.degraded_share().map_or(1.0, |replicas| 1.0 / replicas as f64);
            state.headers.set_share(share);
        }
        // A call holding units of the fleet's header windows goes on the fleet's word, in the
        // window its units came from, not after waiting here for this replica's own view of
        // the window to reset.
        let fleet_headers = fleet.is_some_and(|taken| taken.headers);
        let verdict = if fleet_headers { Verdict::Go } else { state.headers.verdict(now, tokens) };
        match verdict {
            Verdict::Go if has_turn || self.turnstile.available_permits() > 0 => {
                self.slots.dispatched();
                let dispatch = state.headers.dispatch(tokens);
                if let Some(taken) = fleet.filter(|_| self.limits.respect_headers) {
                    state.uncounted.dispatched(dispatch, &taken, tokens);
                }
                Gate::Go(dispatch)
            }
            Verdict::Go => Gate::Queue,
            Verdict::Wait { until } => Gate::Wait(until),
        }
    }

    /// Wakes the callers waiting at the gate, if any (nobody holds the turnstile otherwise).
    fn wake_gate(&self) {
        if self.turnstile.available_permits() == 0 {
            self.changed.notify_waiters();
        }
    }

    /// What one answer's headers said; `from` is the dispatch it answered, when known.
    pub(super) fn observe(&self, from: Option<Dispatch>, limits: &RateLimits) {
        if !self.limits.respect_headers {
            return;
        }
        if limits.is_empty() {
            // Answered without a word on the allowance: no longer in flight, though.
            if let Some(from) = from {
                let mut state = self.lock();
                state.headers.answered(from);
                state.uncounted.answered(from);
                drop(state);
                self.wake_gate();
            }
            return;
        }
        let now = Instant::now();
        {
            let mut state = self.lock();
            state.learned = Some(*limits);
            state.headers.observe(from, limits, now);
            let uncounted = from.map_or([0.0; 4], |from| state.uncounted.answered(from));
            let hold =
                limits.retry_after.filter(|h| !h.is_zero()).map(|h| h.min(self.limits.max_header_wait));
            if let Some(hold) = hold {
                let until = now + hold;
                state.held_until = Some(state.held_until.map_or(until, |held| held.max(until)));
            }
            if let Some(gate) = &self.fleet {
                self.tell_fleet(gate, &state, limits, hold, uncounted, now);
            }
        }
        self.wake_gate();
    }

    /// Tells the fleet what an answer's headers said, when it is news to it: a hold, a
    /// window it does not know, less left than it counts, or a call it did not count (what
    /// the call cost each header window it went without, `uncounted`).
    fn tell_fleet(
        &self,
        gate: &FleetGate,
        state: &State,
        limits: &RateLimits,
        hold: Option<Duration>,
        uncounted: [f64; 4],
        now: Instant,
    ) {
        let said = [limits.requests, limits.tokens, limits.input_tokens, limits.output_tokens];
        let known = gate.book().header_levels(now);
        let mut report = FleetReport { hold, ..FleetReport::default() };
        let mut news = hold.is_some();
        for (header, stated) in state.headers.stated().into_iter().enumerate() {
            let Some(stated) = stated.filter(|_| said[header].is_some_and(|a| a.remaining.is_some())) else {
                continue;
            };
            let uncounted = uncounted[header];
            news |= uncounted > 0.0 || known[header].is_none_or(|fleet| stated.remaining < fleet.remaining);
            let reset = stated.resets_at.map(|at| at.saturating_duration_since(now));
            report.stated[header] = Some(StatedReport {
                limit: stated.limit,
                remaining: stated.remaining,
                reset_in: reset,
                uncounted,
            });
        }
        if !news {
            return;
        }
        {
            let mut book = gate.book();
            for (header, stated) in report.stated.iter().enumerate() {
                if stated.is_some() && known[header].is_none() {
                    book.open(header);
                }
            }
            if let Some(hold) = hold {
                book.hold(now + hold);
            }
        }
        gate.fleet().report(gate.key(), report);
    }

    /// Another replica met a 429: the account is held here too.
    pub(super) fn held_by_fleet(&self, hold: Duration) {
        let now = Instant::now();
        let until = now + hold.min(self.limits.max_header_wait);
        {
            let mut state = self.lock();
            state.held_until = Some(state.held_until.map_or(until, |held| held.max(until)));
        }
        if let Some(gate) = &self.fleet {
            gate.book().hold(until);
        }
        self.wake_gate();
    }

    /// Another replica learned a window of header dimension `header`.
    pub(super) fn window_opened(&self, header: usize) {
        if let Some(gate) = &self.fleet {
            gate.book().open(header);
            gate.wake();
        }
    }

    /// At shutdown: gives the unspent units of the lane's slices back to the fleet.
    pub(super) fn surrender(&self) {
        if let Some(gate) = &self.fleet {
            let (units, buckets) = {
                let mut book = gate.book();
                (book.surrender(Instant::now()), book.buckets())
            };
            if units.iter().any(|u| *u > 0.0) {
                gate.fleet().give_back(gate.key(), units, buckets);
            }
        }
    }

    pub(super) fn snapshot(&self) -> LaneSnapshot {
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(bucket) = state.requests.as_mut() {
            bucket.refill(now);
        }
        if let Some(bucket) = state.tokens.as_mut() {
            bucket.refill(now);
        }
        let in_flight = self.slots.in_flight();
        let [requests, tokens, input_tokens, output_tokens] =
            state.headers.stated().map(|stated| stated.map(|s| stated_snapshot(s, now)));
        LaneSnapshot {
            provider: self.provider.to_string(),
            credential_id: self.credential.clone(),
            in_flight,
            max_concurrent: self.slots.bound(),
            requests_available: state.requests.as_ref().map(Bucket::level),
            tokens_available: state.tokens.as_ref().map(Bucket::level),
            held_for_ms: state
                .held_until
                .and_then(|until| until.checked_duration_since(now))
                .map(|d| d.as_secs_f64() * 1000.0),
            headers: HeadersSnapshot { requests, tokens, input_tokens, output_tokens },
            learned: state.learned,
            fleet: self.fleet.as_ref().map(|gate| {
                let (shared, replicas) = (gate.fleet().shared(), gate.fleet().replicas());
                let mut book = gate.book();
                // As the fleet is now, not as the last call found it.
                book.follow(shared, replicas, now);
                let [requests, tokens, input_tokens, output_tokens] =
                    book.header_windows().map(|stated| stated.map(|s| stated_snapshot(s, now)));
                FleetSnapshot {
                    headers: HeadersSnapshot { requests, tokens, input_tokens, output_tokens },
                    ..book.snapshot(now)
                }
            }),
        }
    }
}

/// What one call holds of a lane: its concurrency slot, its token reservation, and its place
/// among the calls in flight that the header budget counts.
struct Reservation {
    lane: Arc<Lane>,
    tokens: f64,
    /// The dispatch slot this call took, and what it replaced, to give it back on cancel.
    slot_taken: Instant,
    previous_slot: (Instant, WaitReason),
    /// Set once the call went.
    dispatch: Option<Dispatch>,
    /// What the call took from the fleet's slices.
    fleet: Option<Taken>,
    settled: bool,
    _slot: Option<Slot>,
}

impl PermitGuard for Reservation {
    fn settle(&mut self, used_tokens: Option<u32>) {
        if self.settled {
            return;
        }
        self.settled = true;
        {
            let mut state = self.lane.lock();
            if let Some(bucket) = state.tokens.as_mut() {
                // Corrected: what was reserved and not used comes back (or more is taken); a
                // failure generated nothing.
                let back = self.tokens - used_tokens.map_or(0.0, f64::from);
                bucket.give(back);
                // Only an answer that told its usage gives waiters its unused tokens (what it
                // used beyond its estimate is taken from them); a call cut or abandoned without
                // it may have spent them all.
                if used_tokens.is_some() && self.dispatch.is_some() {
                    state.given_back += back;
                    if back > 0.0 {
                        self.lane.given_back.notify_waiters();
                    }
                }
            }
            // Answered (or failed): no longer a call whose headers may still come.
            if let Some(dispatch) = self.dispatch {
                state.headers.answered(dispatch);
                state.uncounted.answered(dispatch);
            }
        }
        if let (Some(gate), Some(taken)) = (&self.lane.fleet, &self.fleet) {
            // What the answer did not use of its estimate comes back (or more is spent).
            let unused = taken.units[fleet::TPM] - used_tokens.map_or(0.0, f64::from);
            if taken.units[fleet::TPM] > 0.0 && unused != 0.0 && gate.degraded_share().is_none() {
                gate.book().refund_one(fleet::TPM, unused);
            }
        }
        self.lane.wake_gate();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.lane.lock();
        if let Some(dispatch) = self.dispatch {
            self.lane.slots.ended();
            state.headers.answered(dispatch);
            state.uncounted.answered(dispatch);
            drop(state);
            self.lane.wake_gate();
            return;
        }
        // Cancelled before dispatch: nothing was sent, so everything comes back, the queue
        // position too unless someone has queued behind it since.
        if state.next_slot == self.slot_taken {
            (state.next_slot, state.next_reason) = self.previous_slot;
        }
        if let Some(bucket) = state.requests.as_mut() {
            bucket.give(1.0);
        }
        if let Some(bucket) = state.tokens.as_mut() {
            bucket.give(self.tokens);
        }
        drop(state);
        if let (Some(gate), Some(taken)) = (&self.lane.fleet, &self.fleet) {
            // The buckets' units come back; a header window's do not (they may belong to a
            // window that has ended since, and would be spent in the next one).
            let mut units = taken.units;
            units[fleet::HEADERS..].fill(0.0);
            gate.book().refund(units);
            gate.wake();
        }
    }
}
