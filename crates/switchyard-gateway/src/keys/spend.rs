//! What a key spent in its budget's period, as this replica knows it: the fleet's total as
//! Redis last said (or, alone, the key's own), and what this replica charged since that
//! Redis has not confirmed yet.
//!
//! While Redis does not answer, the unconfirmed spend counts as many times as there are
//! replicas: each replica holds to its share of what is left.

use std::time::{Instant, SystemTime};

use super::period::{Period, Window};

/// How often the fleet's total is read again while requests come: what other replicas spent
/// is seen this late at most (plus a call's time).
const READ_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A key's spend in its current period.
#[derive(Debug, Default)]
pub(crate) struct Spend {
    window: Option<Window>,
    /// The fleet's total as Redis last said (alone: everything charged).
    confirmed: f64,
    /// Charged here, not yet sent to Redis.
    pending: f64,
    /// Sent to Redis, its answer awaited.
    sending: f64,
    /// The last call to Redis failed.
    degraded: bool,
    read_at: Option<Instant>,
    reading: bool,
}

/// A flush or read to make, of one period.
#[derive(Debug, Clone)]
pub(crate) struct Due {
    pub period: String,
    pub resets: SystemTime,
    pub usd: f64,
}

impl Spend {
    /// The period `now` falls in, starting a new one (from nothing) when the last ended. When
    /// the budget's `per` changed (a reload), the spend so far stands in the new period's window:
    /// kept in the old one, a month's window for a day's budget locked the key out until the
    /// month's end.
    pub(crate) fn roll(&mut self, per: Period, now: SystemTime) -> &Window {
        match &mut self.window {
            Some(window) if now < window.resets && per.names(&window.id) => {}
            Some(window) if now < window.resets => {
                *window = per.at(now);
                // A flush on its way counts in the old period, whose answer is not awaited:
                // what it carried is sent again, in the new one.
                self.pending += std::mem::take(&mut self.sending);
            }
            _ => *self = Spend { window: Some(per.at(now)), ..Spend::default() },
        }
        self.window.get_or_insert_with(|| per.at(now))
    }

    /// What the key spent as far as this replica can tell, with the unconfirmed spend counted
    /// `replicas` times while Redis is out of reach.
    pub(crate) fn total(&self, replicas: usize) -> f64 {
        let unconfirmed = self.pending + self.sending;
        let weight = if self.degraded { replicas.max(1) as f64 } else { 1.0 };
        self.confirmed + unconfirmed * weight
    }

    /// Charges `usd`: at once alone, else pending until Redis confirms it.
    pub(crate) fn charge(&mut self, usd: f64, shared: bool) {
        if shared {
            self.pending += usd;
        } else {
            self.confirmed += usd;
        }
    }

    /// What to send to Redis now, when something is pending and nothing is on its way.
    pub(crate) fn flush(&mut self) -> Option<Due> {
        let window = self.window.as_ref()?;
        if self.pending <= 0.0 || self.sending > 0.0 {
            return None;
        }
        let due = Due { period: window.id.clone(), resets: window.resets, usd: self.pending };
        self.sending = self.pending;
        self.pending = 0.0;
        Some(due)
    }

    /// Redis's answer to a flush: the fleet's total after it, or an error.
    pub(crate) fn flushed(&mut self, due: &Due, answer: Result<f64, String>) {
        if self.window.as_ref().is_none_or(|w| w.id != due.period) {
            return;
        }
        self.sending = 0.0;
        match answer {
            Ok(total) => {
                self.confirmed = self.confirmed.max(total);
                self.degraded = false;
            }
            Err(_) => {
                self.pending += due.usd;
                self.degraded = true;
            }
        }
    }

    /// Whether the last call to Redis failed.
    pub(crate) fn degraded(&self) -> bool {
        self.degraded
    }

    /// The period to read the fleet's total of, when it is time to.
    pub(crate) fn read_due(&mut self, now: Instant) -> Option<String> {
        let window = self.window.as_ref()?;
        if self.reading || self.read_at.is_some_and(|at| now.duration_since(at) < READ_EVERY) {
            return None;
        }
        self.reading = true;
        self.read_at = Some(now);
        Some(window.id.clone())
    }

    /// Redis's answer to a read.
    pub(crate) fn read(&mut self, period: &str, answer: Result<f64, String>) {
        self.reading = false;
        if self.window.as_ref().is_none_or(|w| w.id != period) {
            return;
        }
        match answer {
            Ok(total) => {
                self.confirmed = self.confirmed.max(total);
                self.degraded = false;
            }
            Err(_) => self.degraded = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn while_redis_is_away_the_unconfirmed_spend_counts_for_every_replica() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        spend.charge(1.0, true);
        let due = spend.flush().unwrap();
        spend.flushed(&due, Err("down".into()));
        assert_eq!(spend.total(3), 3.0);
        let due = spend.flush().unwrap();
        spend.flushed(&due, Ok(5.0));
        assert_eq!(spend.total(3), 5.0, "the fleet's total, this replica's dollar in it");
    }

    #[test]
    fn a_new_period_starts_from_nothing() {
        let mut spend = Spend::default();
        let now = SystemTime::now();
        spend.roll(Period::Day, now);
        spend.charge(2.0, false);
        assert_eq!(spend.total(1), 2.0);
        spend.roll(Period::Day, now + std::time::Duration::from_secs(86_400));
        assert_eq!(spend.total(1), 0.0);
    }

    #[test]
    fn a_budget_whose_period_changed_counts_in_the_new_periods_window() {
        let now = switchyard::time::parse_rfc3339("2026-12-05T07:00:00Z").unwrap();
        let mut spend = Spend::default();
        spend.roll(Period::Month, now);
        spend.charge(16.0, false);
        let window = spend.roll(Period::Day, now).clone();
        assert_eq!((window.id.as_str(), window.resets), ("d20261205", Period::Day.at(now).resets));
        assert_eq!(spend.total(1), 16.0, "the spend so far stands");
        assert_eq!(spend.roll(Period::Month, now).id, "m202612");
        spend.roll(Period::Month, Period::Month.at(now).resets);
        assert_eq!(spend.total(1), 0.0, "the next month starts from nothing");
    }

    #[test]
    fn a_flush_on_its_way_when_the_period_changes_does_not_stop_the_next() {
        let now = switchyard::time::parse_rfc3339("2026-12-05T07:00:00Z").unwrap();
        let mut spend = Spend::default();
        spend.roll(Period::Month, now);
        spend.charge(16.0, true);
        let old = spend.flush().unwrap();
        spend.roll(Period::Day, now);
        spend.flushed(&old, Ok(16.0));
        let again = spend.flush().expect("the day's flush goes");
        assert_eq!((again.period.as_str(), again.usd), ("d20261205", 16.0));
        spend.flushed(&again, Ok(16.0));
        spend.charge(1.0, true);
        assert!(spend.flush().is_some(), "and the ones after it");
    }
}
