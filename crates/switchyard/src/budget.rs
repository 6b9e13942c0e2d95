//! The global retry budget: retries may add at most a fraction of recent requests, so an
//! outage cannot multiply the load on every provider.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How many retries the router may spend.
///
/// Over a sliding `window`, retries are allowed while they number fewer than
/// `max(min_retries, ratio × requests)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetSettings {
    /// Extra attempts allowed per request, on average. Default 0.2 (20%).
    pub ratio: f64,
    /// Retries always allowed per window, so a quiet router can still retry. Default 10.
    pub min_retries: u32,
    /// The sliding window. Default 10 s.
    pub window: Duration,
}

impl Default for RetryBudgetSettings {
    fn default() -> Self {
        Self { ratio: 0.2, min_retries: 10, window: Duration::from_secs(10) }
    }
}

const SLOTS: usize = 10;

#[derive(Debug)]
pub(crate) struct RetryBudget {
    settings: RetryBudgetSettings,
    state: Mutex<Slots>,
}

#[derive(Debug)]
struct Slots {
    /// (requests, retries) per slot of `window / SLOTS`.
    counts: [(u64, u64); SLOTS],
    /// Start of the slot at `current`.
    slot_start: Instant,
    current: usize,
    /// The rest of the fleet's (requests, spent) over its window, as last read: a budget
    /// counted fleet-wide adds them to this replica's.
    others: (u64, u64),
}

impl RetryBudget {
    pub(crate) fn new(settings: RetryBudgetSettings) -> Self {
        let state = Slots { counts: [(0, 0); SLOTS], slot_start: Instant::now(), current: 0, others: (0, 0) };
        Self { settings, state: Mutex::new(state) }
    }

    /// The settings it was made with.
    pub(crate) fn settings(&self) -> &RetryBudgetSettings {
        &self.settings
    }

    fn with_slots<R>(&self, f: impl FnOnce(&mut Slots) -> R) -> R {
        let mut slots = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (self.settings.window / SLOTS as u32).max(Duration::from_millis(1));
        let now = Instant::now();
        let mut advanced = 0;
        while now.saturating_duration_since(slots.slot_start) >= slot && advanced <= SLOTS {
            slots.current = (slots.current + 1) % SLOTS;
            let current = slots.current;
            slots.counts[current] = (0, 0);
            slots.slot_start += slot;
            advanced += 1;
        }
        if advanced > SLOTS {
            slots.slot_start = now;
        }
        f(&mut slots)
    }

    pub(crate) fn record_request(&self) {
        self.with_slots(|slots| slots.counts[slots.current].0 += 1);
    }

    /// Takes one retry from the budget if there is one left.
    pub(crate) fn try_spend(&self) -> bool {
        self.with_slots(|slots| {
            let left = self.left_in(slots);
            if left > 0 {
                slots.counts[slots.current].1 += 1;
            }
            left > 0
        })
    }

    /// How many may still be spent now.
    pub(crate) fn left(&self) -> u64 {
        self.with_slots(|slots| self.left_in(slots))
    }

    fn left_in(&self, slots: &Slots) -> u64 {
        let (requests, spent) =
            slots.counts.iter().fold(slots.others, |(r, t), (req, ret)| (r + req, t + ret));
        let allowed =
            (self.settings.ratio * requests as f64).floor().max(f64::from(self.settings.min_retries));
        (allowed as u64).saturating_sub(spent)
    }

    /// This replica's (requests, spent) over the window.
    pub(crate) fn window(&self) -> (u64, u64) {
        self.with_slots(|slots| slots.counts.iter().fold((0, 0), |(r, t), (req, ret)| (r + req, t + ret)))
    }

    /// The rest of the fleet's (requests, spent) over its window, counted from now on.
    pub(crate) fn set_others(&self, others: (u64, u64)) {
        self.with_slots(|slots| slots.others = others);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> RetryBudget {
        RetryBudget::new(RetryBudgetSettings { ratio: 0.1, min_retries: 0, window: Duration::from_secs(10) })
    }

    #[tokio::test(start_paused = true)]
    async fn the_fleets_requests_and_spending_count_with_this_replicas() {
        let budget = budget();
        for _ in 0..5 {
            budget.record_request();
        }
        assert_eq!(budget.left(), 0, "a tenth of 5 requests is none");
        budget.set_others((95, 0));
        assert_eq!(budget.left(), 10, "a tenth of the fleet's 100");
        assert!(budget.try_spend());
        budget.set_others((95, 9));
        assert_eq!(budget.left(), 0, "the other replicas spent the rest");
        assert!(!budget.try_spend());
        assert_eq!(budget.window(), (5, 1), "its own counts, without the fleet's");
        budget.set_others((0, 0));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(budget.window(), (0, 0), "the window slides");
    }
}
