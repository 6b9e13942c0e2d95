//! The allowance a provider states in its headers, kept as a budget until its reset.
//!
//! Each answer's `remaining` (requests, tokens, input and output tokens) becomes a budget that
//! every dispatch counts against, calls in flight included. At zero (or at the
//! `reserve_fraction` share) callers wait for the reset; after it, a known `limit` lets at most
//! that many go (less what is in flight) before new headers arrive, and an unknown one lets a
//! single probe go first. When nothing is in flight that could bring new headers, nobody waits
//! for them.
//!
//! Within a window, an answer can lower the budget and never raise it: calls sent at once reach
//! the provider in any order, so an answer that arrives later, or to a call sent later, may
//! state a `remaining` older than what the lane already knows (measured: with five calls sent
//! together, the answer of the one counted first raised the budget back and a sixth call met a
//! 429). Each answer's `remaining` is read less every call still in flight, and a window that
//! resets starts from its limit less them too, for the same reason. Only the window's reset
//! restores the budget; a provider whose allowance refills gradually (a token bucket) is then
//! spent in bursts of its limit, at the same average rate.
//!
//! What a lane learned is [`Stated`], one small value per dimension that can be merged with
//! what another replica learned; the bookkeeping of this process's own dispatches stays here.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use switchyard::pacing::Dispatch;
use switchyard::ratelimit::{Allowance, RateLimits};

/// The dimensions a provider may state, in [`RateLimits`] order.
const DIMENSIONS: usize = 4;

/// What the provider's headers said about one dimension, with this lane's dispatches since
/// counted against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stated {
    /// The window's whole allowance, when the provider says.
    pub limit: Option<u64>,
    /// What is left now: the stated `remaining` less every dispatch since (negative when a
    /// large token estimate went into debt).
    pub remaining: f64,
    /// When the window refills; `None` until an answer says (after a reset, before new
    /// headers).
    pub resets_at: Option<Instant>,
}

impl Stated {
    /// Merges what another source learned of the same dimension: the earlier of two windows
    /// is over first, so within one window the lower `remaining` holds; a later window's
    /// figures replace an expired one's.
    pub fn merge(&mut self, other: &Stated, now: Instant) {
        let expired = |s: &Stated| s.resets_at.is_some_and(|at| at <= now);
        if expired(self) && !expired(other) {
            *self = *other;
            return;
        }
        if expired(other) {
            return;
        }
        self.limit = self.limit.or(other.limit);
        self.remaining = self.remaining.min(other.remaining);
        self.resets_at = match (self.resets_at, other.resets_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

#[derive(Debug, Clone, Copy)]
struct Dimension {
    stated: Stated,
    /// After a reset with no known limit: the next call goes as the probe, whatever its cost.
    probe_open: bool,
}

/// Whether a call may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Go,
    /// Wait for new headers, or until `until` when a window resets then.
    Wait {
        until: Option<Instant>,
    },
}

/// One lane's header budget; see the module docs.
#[derive(Debug)]
pub(crate) struct HeaderBudget {
    dimensions: [Option<Dimension>; DIMENSIONS],
    /// Dispatched and not yet answered, in dispatch order, with each call's token estimate.
    in_flight: VecDeque<(Dispatch, f64)>,
    next: u64,
    reserve: f64,
    /// The part of each stated allowance this replica may spend (1 unless its fleet is out
    /// of reach: then its share).
    share: f64,
    max_wait: Duration,
}

impl HeaderBudget {
    pub(crate) fn new(reserve_fraction: f64, max_wait: Duration) -> Self {
        Self {
            dimensions: [None; DIMENSIONS],
            in_flight: VecDeque::new(),
            next: 1,
            reserve: reserve_fraction.clamp(0.0, 1.0),
            share: 1.0,
            max_wait,
        }
    }

    /// Spends only `share` of each stated allowance from now on (a degraded fleet's share).
    pub(crate) fn set_share(&mut self, share: f64) {
        self.share = share.clamp(0.0, 1.0);
    }

    /// What is known of each dimension now: requests, tokens, input tokens, output tokens.
    pub(crate) fn stated(&self) -> [Option<Stated>; DIMENSIONS] {
        self.dimensions.map(|d| d.map(|d| d.stated))
    }

    /// Whether a call estimated at `tokens` may go at `now`. Rolls windows that have reset.
    pub(crate) fn verdict(&mut self, now: Instant, tokens: f64) -> Verdict {
        let idle = self.in_flight.is_empty();
        let mut go = true;
        let mut until: Option<Instant> = None;
        let mut for_headers = false;
        for index in 0..DIMENSIONS {
            // Most calls of a lane meet no stated dimension, or one whose window runs: the
            // calls in flight are summed only for a window that has just reset.
            if self.dimensions[index].is_some_and(|d| d.stated.resets_at.is_some_and(|at| at <= now)) {
                let in_flight = self.in_flight_cost(index);
                if let Some(dimension) = self.dimensions[index].as_mut() {
                    roll(dimension, in_flight);
                }
            }
            let slot = &mut self.dimensions[index];
            let Some(dimension) = slot else { continue };
            if dimension.probe_open || open(dimension, cost(index, tokens), self.reserve, self.share) {
                continue;
            }
            match dimension.stated.resets_at {
                Some(at) => until = Some(until.map_or(at, |u| u.min(at))),
                // Spent, and only an answer can say more: with nothing in flight, none will
                // come, so this window is not waited on.
                None if idle => {
                    *slot = None;
                    continue;
                }
                None => for_headers = true,
            }
            go = false;
        }
        match (go, for_headers) {
            (true, _) => Verdict::Go,
            (false, true) => Verdict::Wait { until: None },
            (false, false) => Verdict::Wait { until },
        }
    }

    /// Counts a call that goes now against every dimension; returns its dispatch.
    pub(crate) fn dispatch(&mut self, tokens: f64) -> Dispatch {
        for (index, dimension) in self.dimensions.iter_mut().enumerate() {
            if let Some(dimension) = dimension {
                dimension.stated.remaining -= cost(index, tokens);
                dimension.probe_open = false;
            }
        }
        let dispatch = Dispatch::new(self.next);
        self.next += 1;
        self.in_flight.push_back((dispatch, tokens));
        dispatch
    }

    /// A call is over (answered, failed or dropped); returns its estimate if it was in flight.
    pub(crate) fn answered(&mut self, dispatch: Dispatch) -> Option<f64> {
        let index = self.in_flight.binary_search_by_key(&dispatch, |(d, _)| *d).ok()?;
        self.in_flight.remove(index).map(|(_, tokens)| tokens)
    }

    /// What one answer's headers said, `from` the call they answered (`None`: from no known
    /// call, taken as the newest), learned at `now`.
    pub(crate) fn observe(&mut self, from: Option<Dispatch>, limits: &RateLimits, now: Instant) {
        if let Some(from) = from {
            self.answered(from);
        }
        let stated = [limits.requests, limits.tokens, limits.input_tokens, limits.output_tokens];
        for (index, allowance) in stated.into_iter().enumerate() {
            let Some(allowance) = allowance else { continue };
            let in_flight = self.in_flight_cost(index);
            let learned = self.learn(&allowance, in_flight, now);
            let slot = &mut self.dimensions[index];
            *slot = match (*slot, learned) {
                (current, None) => current.map(|mut d| {
                    d.stated.limit = allowance.limit.or(d.stated.limit);
                    d
                }),
                // Within the window the lane knows, lower only; see the module docs.
                (Some(mut current), Some(stated)) if current.stated.resets_at.is_some_and(|at| at > now) => {
                    current.stated.remaining = current.stated.remaining.min(stated.remaining);
                    current.stated.limit = stated.limit.or(current.stated.limit);
                    current.stated.resets_at = current.stated.resets_at.max(stated.resets_at);
                    Some(current)
                }
                (current, Some(mut stated)) => {
                    stated.limit = stated.limit.or(current.and_then(|d| d.stated.limit));
                    Some(Dimension { stated, probe_open: false })
                }
            };
        }
    }

    /// What the calls in flight cost in dimension `index`.
    fn in_flight_cost(&self, index: usize) -> f64 {
        self.in_flight.iter().map(|(_, tokens)| cost(index, *tokens)).sum()
    }

    /// The estimate one allowance gives, less what is in flight.
    fn learn(&self, allowance: &Allowance, in_flight: f64, now: Instant) -> Option<Stated> {
        let remaining = allowance.remaining? as f64 - in_flight;
        let resets_at = allowance.reset_after.map(|after| now + after.min(self.max_wait));
        Some(Stated { limit: allowance.limit, remaining, resets_at })
    }
}

/// What a call costs in dimension `index`: one request, or its token estimate.
fn cost(index: usize, tokens: f64) -> f64 {
    if index == 0 { 1.0 } else { tokens }
}

/// Whether `dimension` lets a call of `cost` go: something is left above the reserve (and
/// above what the rest of a degraded fleet may spend: all but `share` of the limit), and
/// enough for the call (a call larger than the whole window goes when the window is full).
fn open(dimension: &Dimension, cost: f64, reserve: f64, share: f64) -> bool {
    let stated = &dimension.stated;
    let kept = stated.limit.map_or(0.0, |limit| {
        let limit = limit as f64;
        let reserved = (limit * reserve).floor();
        // This replica's whole units of what is not reserved (the epsilon keeps 9 × 1/3 at 3).
        let spendable = ((limit - reserved) * share + 1e-9).floor();
        limit - spendable
    });
    let available = stated.remaining - kept;
    let need = match stated.limit {
        Some(limit) => cost.min(limit as f64 - kept),
        None => cost,
    };
    available > 0.0 && available >= need
}

/// A window whose reset has passed starts again: with a known limit, the whole of it (less
/// what is in flight) before new headers arrive; with none, one probe.
fn roll(dimension: &mut Dimension, in_flight: f64) {
    dimension.stated.resets_at = None;
    match dimension.stated.limit {
        Some(limit) => dimension.stated.remaining = limit as f64 - in_flight,
        None => {
            dimension.stated.remaining = 0.0;
            dimension.probe_open = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(limit: Option<u64>, remaining: u64, reset_ms: u64) -> RateLimits {
        RateLimits {
            requests: Some(Allowance {
                limit,
                remaining: Some(remaining),
                reset_after: Some(Duration::from_millis(reset_ms)),
            }),
            ..RateLimits::default()
        }
    }

    fn budget() -> HeaderBudget {
        HeaderBudget::new(0.0, Duration::from_secs(60))
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_counts_the_calls_still_in_flight() {
        let now = Instant::now();
        let mut budget = budget();
        let first = budget.dispatch(0.0);
        let _second = budget.dispatch(0.0);
        let _third = budget.dispatch(0.0);
        // The first call's answer says 3 are left: two calls are still on their way.
        budget.observe(Some(first), &limits(Some(5), 3, 1000), now);
        assert_eq!(budget.stated()[0].map(|s| s.remaining), Some(1.0));
        assert_eq!(budget.verdict(now, 0.0), Verdict::Go);
        budget.dispatch(0.0);
        assert_eq!(budget.verdict(now, 0.0), Verdict::Wait { until: Some(now + Duration::from_secs(1)) });
    }

    #[tokio::test(start_paused = true)]
    async fn within_a_window_an_answer_lowers_the_estimate_but_never_raises_it() {
        let now = Instant::now();
        let mut budget = budget();
        let first = budget.dispatch(0.0);
        let second = budget.dispatch(0.0);
        // 5 left as the second call was counted, the first still on its way: 4.
        budget.observe(Some(second), &limits(Some(10), 5, 1000), now);
        budget.observe(Some(first), &limits(Some(10), 8, 1000), now);
        assert_eq!(budget.stated()[0].map(|s| s.remaining), Some(4.0), "not raised");
        let third = budget.dispatch(0.0);
        assert_eq!(budget.stated()[0].map(|s| s.remaining), Some(3.0));
        budget.observe(Some(third), &limits(Some(10), 1, 1000), now);
        assert_eq!(budget.stated()[0].map(|s| s.remaining), Some(1.0), "lowered");
        // A window that has reset is replaced by the next answer.
        let later = now + Duration::from_secs(2);
        let fourth = budget.dispatch(0.0);
        budget.observe(Some(fourth), &limits(Some(10), 7, 1000), later);
        assert_eq!(budget.stated()[0].map(|s| s.remaining), Some(7.0));
    }

    #[tokio::test(start_paused = true)]
    async fn out_of_the_fleets_reach_a_replica_spends_only_its_share_of_a_stated_window() {
        let now = Instant::now();
        let mut budget = budget();
        let first = budget.dispatch(0.0);
        budget.observe(Some(first), &limits(Some(9), 9, 1000), now);
        // One of three replicas: 3 of the window's 9.
        budget.set_share(1.0 / 3.0);
        for _ in 0..3 {
            assert_eq!(budget.verdict(now, 0.0), Verdict::Go);
            budget.dispatch(0.0);
        }
        assert_eq!(budget.verdict(now, 0.0), Verdict::Wait { until: Some(now + Duration::from_secs(1)) });
        // Shared again, the rest of the window is there.
        budget.set_share(1.0);
        assert_eq!(budget.verdict(now, 0.0), Verdict::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn merging_keeps_the_lower_remaining_within_a_window_and_the_later_window_after_one() {
        let now = Instant::now();
        let a = Stated { limit: Some(10), remaining: 4.0, resets_at: Some(now + Duration::from_secs(1)) };
        let b = Stated { limit: None, remaining: 2.0, resets_at: Some(now + Duration::from_secs(2)) };
        let mut merged = a;
        merged.merge(&b, now);
        assert_eq!(merged, Stated { remaining: 2.0, resets_at: b.resets_at, ..a });
        let expired = Stated { remaining: 0.0, resets_at: Some(now), ..a };
        let mut fresh = expired;
        fresh.merge(&a, now);
        assert_eq!(fresh, a, "an expired window gives way to a live one");
    }
}
