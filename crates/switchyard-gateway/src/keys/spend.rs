//! What a key spent in its budget's period, as this replica knows it: everything this run of
//! the replica charged, and the rest of the fleet's total as Redis last said.
//!
//! With shared state the replica writes its own total (never an increment) to Redis: a write
//! that failed is simply sent again, with whatever was charged since, until Redis holds it.
//! While Redis does not answer, what it does not hold yet counts as many times as there are
//! replicas: each replica holds to its share of what is left.

use std::time::{Instant, SystemTime};

use switchyard_state::spend::Held;

use super::period::{Period, Window};

/// How often the fleet's total is read again while requests come: what other replicas spent
/// is seen this late at most (plus a call's time).
const READ_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A key's spend in its current period.
#[derive(Debug, Default)]
pub(crate) struct Spend {
    window: Option<Window>,
    /// Everything this run charged in the period (alone: the key's whole spend).
    mine: f64,
    /// The rest of the fleet's total, as Redis last said.
    others: f64,
    /// What Redis last said it holds of `mine`.
    written: f64,
    /// The period whose write is on its way, or waits to be tried again.
    writing: Option<String>,
    /// The last call to Redis failed.
    degraded: bool,
    /// A write failed and waits to be sent again: until it lands, what Redis does not hold
    /// counts for every replica, even once Redis answers reads again.
    unwritten: bool,
    read_at: Option<Instant>,
    reading: bool,
    /// The period of the budget's last `per`, when a reload changed it before this run had a
    /// window of its own: the fleet's total in it is read once and stands in the new one.
    carried: Option<Window>,
}

/// A write to make: this run's total in one period.
#[derive(Debug, Clone)]
pub(crate) struct Due {
    pub period: String,
    pub resets: SystemTime,
    pub usd: f64,
}

/// What the writer does after Redis answered a write.
#[derive(Debug)]
pub(crate) enum Then {
    /// Nothing is left to write (or the write's period is gone).
    Done,
    /// More was charged meanwhile: write the new total.
    Write(Due),
    /// The write failed: try again later, with the total as it will be then.
    Retry,
}

impl Spend {
    /// The period `now` falls in, starting a new one (from nothing) when the last ended. When
    /// the budget's `per` changed (a reload), the spend so far stands in the new period's window
    /// and is written to it: kept in the old one, a month's window for a day's budget locked the
    /// key out until the month's end.
    pub(crate) fn roll(&mut self, per: Period, now: SystemTime) -> &Window {
        match &mut self.window {
            Some(window) if now < window.resets && per.names(&window.id) => {}
            Some(window) if now < window.resets => {
                *window = per.at(now);
                // Redis holds nothing of the new period yet; a write on its way is the old one's.
                self.written = 0.0;
                self.writing = None;
            }
            // A fresh run keeps what a reload asked it to carry; a period that ended does not.
            Some(_) => *self = Spend { window: Some(per.at(now)), ..Spend::default() },
            None => {
                // Only while the old period runs: a reload long past carries nothing.
                let carried = self.carried.take().filter(|old| now < old.resets);
                *self = Spend { window: Some(per.at(now)), carried, ..Spend::default() };
            }
        }
        self.window.get_or_insert_with(|| per.at(now))
    }

    /// A reload changed the budget's `per` from `old`: with no window of its own yet, this run
    /// carries the fleet's total of `old`'s period into the new one (a window it has carries
    /// its own, [`roll`](Self::roll)).
    pub(crate) fn per_changed(&mut self, old: Period, now: SystemTime) {
        if self.window.is_none() {
            self.carried = Some(old.at(now));
        }
    }

    /// The period whose total is carried, until it was read.
    pub(crate) fn carried(&self) -> Option<String> {
        self.carried.as_ref().map(|old| old.id.clone())
    }

    /// Redis's answer to the read of the carried period `period`: the fleet's total there
    /// stands in this one (as the most of the two: the replicas that carried theirs wrote it
    /// here too).
    pub(crate) fn carried_read(&mut self, period: &str, answer: Result<Held, String>) {
        if self.carried.as_ref().is_none_or(|old| old.id != period) {
            return;
        }
        if let Ok(held) = answer {
            self.others = self.others.max(held.others + held.own);
            self.carried = None;
        }
    }

    /// What the key spent as far as this replica can tell, with what Redis does not hold yet
    /// counted `replicas` times while Redis is out of reach.
    pub(crate) fn total(&self, replicas: usize) -> f64 {
        let unconfirmed = (self.mine - self.written).max(0.0);
        let weight = if self.degraded || self.unwritten { replicas.max(1) as f64 } else { 1.0 };
        self.others + self.written + unconfirmed * weight
    }

    /// Whether this run charged anything in the period.
    pub(crate) fn spent_here(&self) -> bool {
        self.mine > 0.0
    }

    /// Charges `usd`.
    pub(crate) fn charge(&mut self, usd: f64) {
        self.mine += usd;
    }

    /// The write to send to Redis now: this run's total, when Redis does not hold it and no
    /// write is on its way.
    pub(crate) fn write_due(&mut self) -> Option<Due> {
        let window = self.window.as_ref()?;
        if self.writing.is_some() || self.mine <= self.written {
            return None;
        }
        self.writing = Some(window.id.clone());
        Some(Due { period: window.id.clone(), resets: window.resets, usd: self.mine })
    }

    /// Whether `due`'s period is still the one being written.
    fn writes(&self, period: &str) -> bool {
        self.writing.as_deref() == Some(period) && self.window.as_ref().is_some_and(|w| w.id == period)
    }

    /// Redis's answer to the write of `due`, and what the writer does next.
    pub(crate) fn written(&mut self, due: &Due, answer: Result<Held, String>) -> Then {
        if !self.writes(&due.period) {
            return Then::Done;
        }
        match answer {
            Ok(held) => {
                self.others = self.others.max(held.others);
                // Redis holds at least what was sent (a field only rises), and what this run
                // wrote before (a key taken out and put back by a reload starts its books anew).
                self.written = self.written.max(held.own).max(due.usd);
                self.mine = self.mine.max(self.written);
                self.degraded = false;
                self.unwritten = false;
                self.writing = None;
                self.write_due().map_or(Then::Done, Then::Write)
            }
            Err(_) => {
                self.degraded = true;
                self.unwritten = true;
                Then::Retry
            }
        }
    }

    /// The write of `period` to try again after a failure: the total as it is now.
    pub(crate) fn retry(&mut self, period: &str) -> Option<Due> {
        let window = self.window.as_ref().filter(|_| self.writes(period))?;
        Some(Due { period: window.id.clone(), resets: window.resets, usd: self.mine })
    }

    /// Whether the last call to Redis failed.
    pub(crate) fn degraded(&self) -> bool {
        self.degraded
    }

    /// Whether a failed write waits to be sent again (a read that Redis answered says it is
    /// worth sending now).
    pub(crate) fn awaits_retry(&self) -> bool {
        self.unwritten && self.writing.is_some()
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

    /// Redis's answer to a read, and the write to make when Redis lost what it held of this
    /// run's spend (it restarted empty).
    pub(crate) fn read(&mut self, period: &str, answer: Result<Held, String>) -> Option<Due> {
        self.reading = false;
        if self.window.as_ref().is_none_or(|w| w.id != period) {
            return None;
        }
        match answer {
            Ok(held) => {
                self.others = self.others.max(held.others);
                // What this run wrote before stands (a key put back by a reload starts anew);
                // less than was written, Redis lost it (restarted empty), and it is written again.
                self.mine = self.mine.max(held.own);
                self.written = held.own;
                self.degraded = false;
                self.write_due()
            }
            Err(_) => {
                self.degraded = true;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(others: f64, own: f64) -> Result<Held, String> {
        Ok(Held { others, own })
    }

    #[test]
    fn a_per_changed_before_this_run_had_a_window_carries_the_fleets_total_of_the_old_period() {
        let now = SystemTime::now();
        let mut spend = Spend::default();
        spend.per_changed(Period::Day, now);
        spend.roll(Period::Month, now);
        let day = Period::Day.at(now).id;
        assert_eq!(spend.carried().as_deref(), Some(day.as_str()));
        let period = spend.read_due(Instant::now()).unwrap();
        assert!(spend.read(&period, held(0.01, 0.0)).is_none());
        spend.carried_read(&day, held(0.042, 0.0));
        assert_eq!(spend.total(1), 0.042, "the day's total, which the month's 0.01 is part of");
        assert_eq!(spend.carried(), None, "read once");
        // A reload long past carries nothing into a period after the old one ended.
        let mut spend = Spend::default();
        spend.per_changed(Period::Day, now);
        spend.roll(Period::Month, now + std::time::Duration::from_secs(3 * 86_400));
        assert_eq!(spend.carried(), None);
        // A run with a window carries its own instead.
        let mut spend = Spend::default();
        spend.roll(Period::Day, now);
        spend.per_changed(Period::Day, now);
        assert_eq!(spend.carried(), None);
    }

    #[test]
    fn while_redis_is_away_what_it_does_not_hold_counts_for_every_replica() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        spend.charge(1.0);
        let due = spend.write_due().unwrap();
        assert!(matches!(spend.written(&due, Err("down".into())), Then::Retry));
        assert_eq!(spend.total(3), 3.0);
        let again = spend.retry(&due.period).expect("a failed write is sent again");
        assert!(matches!(spend.written(&again, held(4.0, 1.0)), Then::Done));
        assert_eq!(spend.total(3), 5.0, "the fleet's total, this replica's dollar in it");
    }

    #[test]
    fn a_write_not_yet_landed_counts_for_every_replica_though_redis_answers_reads_again() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        spend.charge(1.0);
        let due = spend.write_due().unwrap();
        spend.written(&due, Err("down".into()));
        let period = spend.read_due(Instant::now()).unwrap();
        assert!(spend.read(&period, held(2.0, 0.0)).is_none(), "the waiting writer holds the write");
        assert!(spend.awaits_retry());
        assert_eq!(spend.total(3), 5.0, "the others' 2, and this run's unwritten dollar three times");
        let again = spend.retry(&due.period).unwrap();
        spend.written(&again, held(2.0, 1.0));
        assert_eq!(spend.total(3), 3.0);
        assert!(!spend.awaits_retry());
    }

    #[test]
    fn a_failed_write_is_sent_again_with_what_was_charged_meanwhile_and_no_second_writer_starts() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        spend.charge(1.0);
        let due = spend.write_due().unwrap();
        assert!(matches!(spend.written(&due, Err("timed out".into())), Then::Retry));
        spend.charge(2.0);
        assert!(spend.write_due().is_none(), "the writer waiting to retry holds the write");
        let again = spend.retry(&due.period).unwrap();
        assert_eq!(again.usd, 3.0, "a total, not an increment: a first write that landed counts once");
        spend.charge(0.5);
        match spend.written(&again, held(0.0, 3.0)) {
            Then::Write(next) => assert_eq!(next.usd, 3.5),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_redis_that_lost_this_runs_spend_is_written_again_on_the_next_read() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        spend.charge(7.0);
        let due = spend.write_due().unwrap();
        spend.written(&due, held(3.0, 7.0));
        let period = spend.read_due(Instant::now()).unwrap();
        assert!(spend.read(&period, held(3.0, 7.0)).is_none(), "Redis holds it all");
        spend.read_at = None;
        let period = spend.read_due(Instant::now()).unwrap();
        let rewrite = spend.read(&period, held(0.0, 0.0)).expect("Redis restarted empty");
        assert_eq!(rewrite.usd, 7.0);
        assert_eq!(spend.total(3), 10.0, "what the others spent stands in memory");
    }

    #[test]
    fn a_key_put_back_by_a_reload_takes_up_what_this_run_wrote_for_it() {
        let mut spend = Spend::default();
        spend.roll(Period::Day, SystemTime::now());
        let period = spend.read_due(Instant::now()).unwrap();
        assert!(spend.read(&period, held(2.0, 5.0)).is_none(), "nothing to write: Redis holds it");
        assert_eq!(spend.total(1), 7.0);
        spend.charge(1.0);
        assert_eq!(spend.write_due().unwrap().usd, 6.0, "on from what this run wrote");
    }

    #[test]
    fn a_new_period_starts_from_nothing() {
        let mut spend = Spend::default();
        let now = SystemTime::now();
        spend.roll(Period::Day, now);
        spend.charge(2.0);
        assert_eq!(spend.total(1), 2.0);
        spend.roll(Period::Day, now + std::time::Duration::from_secs(86_400));
        assert_eq!(spend.total(1), 0.0);
    }

    #[test]
    fn a_budget_whose_period_changed_counts_in_the_new_periods_window() {
        let now = switchyard::time::parse_rfc3339("2026-12-05T07:00:00Z").unwrap();
        let mut spend = Spend::default();
        spend.roll(Period::Month, now);
        spend.charge(16.0);
        let window = spend.roll(Period::Day, now).clone();
        assert_eq!((window.id.as_str(), window.resets), ("d20261205", Period::Day.at(now).resets));
        assert_eq!(spend.total(1), 16.0, "the spend so far stands");
        assert_eq!(spend.roll(Period::Month, now).id, "m202612");
        spend.roll(Period::Month, Period::Month.at(now).resets);
        assert_eq!(spend.total(1), 0.0, "the next month starts from nothing");
    }

    #[test]
    fn a_period_change_writes_this_runs_spend_and_the_fleets_to_the_new_period() {
        let now = switchyard::time::parse_rfc3339("2026-12-05T07:00:00Z").unwrap();
        let mut spend = Spend::default();
        spend.roll(Period::Month, now);
        spend.charge(16.0);
        let old = spend.write_due().unwrap();
        spend.roll(Period::Day, now);
        assert!(matches!(spend.written(&old, held(4.0, 16.0)), Then::Done), "the old period's answer");
        let again = spend.write_due().expect("the day's write goes");
        assert_eq!((again.period.as_str(), again.usd), ("d20261205", 16.0));
        spend.written(&again, held(4.0, 16.0));
        assert_eq!(spend.total(1), 20.0);
        spend.charge(1.0);
        assert!(spend.write_due().is_some(), "and the ones after it");
    }
}
