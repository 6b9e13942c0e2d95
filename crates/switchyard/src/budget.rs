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
}

impl RetryBudget {
    pub(crate) fn new(settings: RetryBudgetSettings) -> Self {
        let state = Slots { counts: [(0, 0); SLOTS], slot_start: Instant::now(), current: 0 };
        Self { settings, state: Mutex::new(state) }
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
        let settings = self.settings;
        self.with_slots(|slots| {
            let (requests, retries) =
                slots.counts.iter().fold((0u64, 0u64), |(r, t), (req, ret)| (r + req, t + ret));
            let allowed = (settings.ratio * requests as f64).floor().max(f64::from(settings.min_retries));
            if (retries as f64) < allowed {
                slots.counts[slots.current].1 += 1;
                true
            } else {
                false
            }
        })
    }
}
