//! The circuit breaker of one target, and every way it moves.
//!
//! ```text
//!   Closed ── failure_threshold breaker-counted failures in a row ──▶ Open { until }
//!     ▲                                                                │   ▲
//!     │ a success                                      open time over: │   │ the probe failed:
//!     │ (or a reset)                                 a probe is let in ▼   │ open again, longer
//!     └─────────────────────────────────────────────────────────── HalfOpen { probes, lease_until }
//! ```
//!
//! A success closes the circuit from any state (a forced call may get through an open one),
//! and each failed probe in a row doubles the open time, up to `open_max`.
//!
//! [`Breaker::admission`] answers the gate's question without changing anything;
//! [`Breaker::step`] is every transition, a pure function of the state, the reopen count and
//! what happened. The board only stores the result and announces the signal.

use std::time::Duration;

use tokio::time::Instant;

use super::{HealthEvent, HealthSettings, TargetRecord};
use crate::Target;

/// The circuit breaker of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Breaker {
    /// Calls go through; breaker-counted failures in a row are counted towards opening.
    #[default]
    Closed,
    /// Calls are refused until `until` (a forced call still goes through, as no probe).
    Open {
        /// When the next probe may go.
        until: Instant,
    },
    /// Probes are let through; `probes` started, the last lease ends at `lease_until` (a probe
    /// whose caller went away must not keep the circuit half-open forever).
    HalfOpen {
        /// Probes started since the circuit half-opened.
        probes: u32,
        /// When the last probe's lease ends.
        lease_until: Instant,
    },
}

/// The breaker's answer to "may this target be called now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Yes, as an ordinary call.
    Call,
    /// Yes, as a probe: if the call is really made, it takes a slot ([`BreakerInput::TakeProbe`]).
    Probe,
    /// No: the circuit is open until `until`.
    Open {
        /// When the next probe may go.
        until: Instant,
    },
    /// No: every probe slot is taken until `until`, when the last lease ends.
    ProbeInFlight { until: Instant },
}

/// What happened to a target, as far as its breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BreakerInput {
    /// The gate admitted a probe ([`Admission::Probe`]) and the call will be made; it may
    /// last `lease` (its slot is held that long at most).
    TakeProbe { now: Instant, lease: Duration },
    /// A probe's call ended saying nothing about the provider: its slot is free again.
    ReleaseProbe,
    /// A call succeeded.
    Success,
    /// A breaker-counted failure; `failures` counts it and those before it in a row.
    Failure { now: Instant, failures: u32 },
    /// An operator forgot the target.
    Reset,
}

/// What a transition announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BreakerSignal {
    /// The circuit opened (or opened again) for this long.
    Opened { open_for: Duration },
    /// An open circuit let its first probe through.
    HalfOpen,
    /// A circuit that was not closed closed.
    Closed,
}

/// A breaker after a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BreakerStep {
    /// The state after the transition.
    pub breaker: Breaker,
    /// Failed probes in a row, which grow the open time.
    pub reopens: u32,
    /// What the transition announces, if it is news.
    pub signal: Option<BreakerSignal>,
}

impl Breaker {
    /// `closed`, `open` or `half_open`, as the operator view shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Breaker::Closed => "closed",
            Breaker::Open { .. } => "open",
            Breaker::HalfOpen { .. } => "half_open",
        }
    }

    /// Whether a call may go through at `now`; `force` lets it through a circuit that would
    /// refuse it, as an ordinary call that takes no probe slot.
    pub(super) fn admission(self, settings: &HealthSettings, now: Instant, force: bool) -> Admission {
        match self {
            Breaker::Closed => Admission::Call,
            Breaker::Open { until } if now < until => {
                if force {
                    Admission::Call
                } else {
                    Admission::Open { until }
                }
            }
            Breaker::Open { .. } => Admission::Probe,
            Breaker::HalfOpen { probes, lease_until } => {
                if probes < settings.half_open_probes.max(1) || now >= lease_until {
                    Admission::Probe
                } else if force {
                    Admission::Call
                } else {
                    Admission::ProbeInFlight { until: lease_until }
                }
            }
        }
    }

    /// Every transition of the breaker: where `input` takes a breaker in this state that has
    /// seen `reopens` failed probes in a row, and what the move announces.
    pub(super) fn step(self, reopens: u32, input: BreakerInput, settings: &HealthSettings) -> BreakerStep {
        let to = |breaker, reopens, signal| BreakerStep { breaker, reopens, signal };
        let stay = to(self, reopens, None);
        match (self, input) {
            // A closed circuit needs no probe; the gate never asks for one.
            (Breaker::Closed, BreakerInput::TakeProbe { .. }) => stay,
            (Breaker::Open { .. }, BreakerInput::TakeProbe { now, lease }) => to(
                Breaker::HalfOpen { probes: 1, lease_until: now + lease },
                reopens,
                Some(BreakerSignal::HalfOpen),
            ),
            (Breaker::HalfOpen { probes, lease_until }, BreakerInput::TakeProbe { now, lease }) => {
                // An expired lease is a probe whose caller went away: it no longer counts.
                let probes = if now < lease_until { probes.saturating_add(1) } else { 1 };
                let lease_until = lease_until.max(now + lease);
                to(Breaker::HalfOpen { probes, lease_until }, reopens, None)
            }
            (Breaker::HalfOpen { probes, lease_until }, BreakerInput::ReleaseProbe) => {
                to(Breaker::HalfOpen { probes: probes.saturating_sub(1), lease_until }, reopens, None)
            }
            (_, BreakerInput::ReleaseProbe) => stay,
            (Breaker::Closed, BreakerInput::Success | BreakerInput::Reset) => to(Breaker::Closed, 0, None),
            (_, BreakerInput::Success | BreakerInput::Reset) => {
                to(Breaker::Closed, 0, Some(BreakerSignal::Closed))
            }
            (Breaker::Closed, BreakerInput::Failure { now, failures })
                if failures >= settings.failure_threshold.max(1) =>
            {
                opened(now, settings.open_for, reopens)
            }
            // A failed probe opens the circuit again at once, for longer each time in a row.
            (Breaker::HalfOpen { .. }, BreakerInput::Failure { now, .. }) => {
                let reopens = reopens.saturating_add(1);
                opened(now, grown(settings, reopens), reopens)
            }
            // Below the threshold, or a forced call through an open circuit.
            (Breaker::Closed | Breaker::Open { .. }, BreakerInput::Failure { .. }) => stay,
        }
    }
}

fn opened(now: Instant, open_for: Duration, reopens: u32) -> BreakerStep {
    BreakerStep {
        breaker: Breaker::Open { until: now + open_for },
        reopens,
        signal: Some(BreakerSignal::Opened { open_for }),
    }
}

/// The open time after `reopens` failed probes in a row: doubled each time, never more than
/// `open_max` (nor less than `open_for`).
fn grown(settings: &HealthSettings, reopens: u32) -> Duration {
    let factor = 1u32.checked_shl(reopens.min(16)).unwrap_or(u32::MAX);
    settings.open_for.saturating_mul(factor).min(settings.open_max.max(settings.open_for))
}

impl BreakerSignal {
    fn event(self, target: &Target, consecutive_failures: u32) -> HealthEvent {
        let target = target.clone();
        match self {
            BreakerSignal::Opened { open_for } => {
                HealthEvent::CircuitOpened { target, open_for, consecutive_failures }
            }
            BreakerSignal::HalfOpen => HealthEvent::CircuitHalfOpen { target },
            BreakerSignal::Closed => HealthEvent::CircuitClosed { target },
        }
    }
}

/// Runs `input` through the breaker of `target`'s record and appends what the move announces.
pub(super) fn drive(
    record: &mut TargetRecord,
    target: &Target,
    input: BreakerInput,
    settings: &HealthSettings,
    events: &mut Vec<HealthEvent>,
) {
    let step = record.breaker.step(record.reopens, input, settings);
    record.breaker = step.breaker;
    record.reopens = step.reopens;
    if let Some(signal) = step.signal {
        events.push(signal.event(target, record.consecutive_failures));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> HealthSettings {
        HealthSettings {
            failure_threshold: 3,
            open_for: Duration::from_secs(30),
            open_max: Duration::from_secs(300),
            half_open_probes: 2,
            ..HealthSettings::default()
        }
    }

    #[test]
    fn every_transition() {
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let open = |s| Breaker::Open { until: at(s) };
        let half = |n, s| Breaker::HalfOpen { probes: n, lease_until: at(s) };
        let fail = |s, failures| BreakerInput::Failure { now: at(s), failures };
        // A probe's call may last 45 s: its slot is held that long at most, whatever open_for.
        let take = |s| BreakerInput::TakeProbe { now: at(s), lease: Duration::from_secs(45) };
        let (success, reset) = (BreakerInput::Success, BreakerInput::Reset);
        let release = BreakerInput::ReleaseProbe;
        let opened = |secs| Some(BreakerSignal::Opened { open_for: Duration::from_secs(secs) });
        let closed = Breaker::Closed;
        let (half_opened, closing) = (Some(BreakerSignal::HalfOpen), Some(BreakerSignal::Closed));
        // Settings: threshold 3, open for 30 s, at most 300 s, 2 probes; leases of 45 s. Times
        // in seconds.
        #[rustfmt::skip]
        let rows = [
            // what                          state       reopens input     -> state      reopens signal
            ("closed, below threshold",      closed,       0,  fail(0, 2),    closed,       0,   None),
            ("closed, threshold reached",    closed,       0,  fail(0, 3),    open(30),     0,   opened(30)),
            ("closed, past threshold",       closed,       0,  fail(0, 9),    open(30),     0,   opened(30)),
            ("closed, success",              closed,       0,  success,       closed,       0,   None),
            ("closed, reset",                closed,       0,  reset,         closed,       0,   None),
            ("closed, no probe to take",     closed,       0,  take(0),       closed,       0,   None),
            ("closed, none to release",      closed,       0,  release,       closed,       0,   None),
            ("open, forced call failed",     open(30),     0,  fail(5, 4),    open(30),     0,   None),
            ("open, first probe",            open(30),     1,  take(30),      half(1, 75),  1,   half_opened),
            ("open, forced call succeeded",  open(30),     1,  success,       closed,       0,   closing),
            ("open, reset",                  open(30),     1,  reset,         closed,       0,   closing),
            ("open, none to release",        open(30),     0,  release,       open(30),     0,   None),
            ("half-open, another probe",     half(1, 60),  0,  take(31),      half(2, 76),  0,   None),
            ("half-open, within the lease",  half(1, 90),  0,  take(31),      half(2, 90),  0,   None),
            ("half-open, lease ran out",     half(2, 60),  0,  take(60),      half(1, 105), 0,   None),
            ("half-open, probe released",    half(2, 60),  0,  release,       half(1, 60),  0,   None),
            ("half-open, none to release",   half(0, 60),  0,  release,       half(0, 60),  0,   None),
            ("half-open, probe succeeded",   half(1, 60),  3,  success,       closed,       0,   closing),
            ("half-open, reset",             half(1, 60),  3,  reset,         closed,       0,   closing),
            ("half-open, probe failed",      half(1, 60),  0,  fail(40, 4),   open(100),    1,   opened(60)),
            ("half-open, one is enough",     half(1, 60),  0,  fail(40, 1),   open(100),    1,   opened(60)),
            ("half-open, failed again",      half(1, 60),  2,  fail(40, 6),   open(280),    3,   opened(240)),
            ("half-open, up to open_max",    half(1, 60),  3,  fail(40, 7),   open(340),    4,   opened(300)),
            ("half-open, however often",     half(1, 60),  99, fail(40, 9),   open(340),    100, opened(300)),
        ];
        for (what, state, reopens, input, breaker, want_reopens, signal) in rows {
            let step = state.step(reopens, input, &settings());
            assert_eq!(step, BreakerStep { breaker, reopens: want_reopens, signal }, "{what}");
        }
    }

    #[test]
    fn every_admission() {
        use Admission::{Call, Probe, ProbeInFlight};
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let open = |s| Breaker::Open { until: at(s) };
        let half = |n, s| Breaker::HalfOpen { probes: n, lease_until: at(s) };
        // Settings: 2 probes at once. Times in seconds.
        let (refused, in_flight) = (Admission::Open { until: at(30) }, ProbeInFlight { until: at(60) });
        #[rustfmt::skip]
        let rows = [
            // what                            state            now     forced -> admission
            ("closed",                         Breaker::Closed, at(0),  false, Call),
            ("open",                           open(30),        at(10), false, refused),
            ("open, forced: no probe",         open(30),        at(10), true,  Call),
            ("open time over",                 open(30),        at(30), false, Probe),
            ("half-open, a slot free",         half(1, 60),     at(40), false, Probe),
            ("half-open, slots taken",         half(2, 60),     at(40), false, in_flight),
            ("half-open, taken, forced",       half(2, 60),     at(40), true,  Call),
            ("half-open, taken, lease over",   half(2, 60),     at(60), false, Probe),
        ];
        for (what, state, now, force, admission) in rows {
            assert_eq!(state.admission(&settings(), now, force), admission, "{what}");
        }
    }

    #[test]
    fn zero_settings_count_as_one() {
        let t0 = Instant::now();
        let zero = HealthSettings { failure_threshold: 0, half_open_probes: 0, ..settings() };
        let step = Breaker::Closed.step(0, BreakerInput::Failure { now: t0, failures: 1 }, &zero);
        assert_eq!(step.breaker, Breaker::Open { until: t0 + zero.open_for });
        let lease_until = t0 + zero.open_for;
        assert_eq!(
            Breaker::HalfOpen { probes: 0, lease_until }.admission(&zero, t0, false),
            Admission::Probe
        );
        assert_eq!(
            Breaker::HalfOpen { probes: 1, lease_until }.admission(&zero, t0, false),
            Admission::ProbeInFlight { until: lease_until }
        );
    }

    #[test]
    fn an_open_max_below_open_for_never_shortens_the_first_opening() {
        let t0 = Instant::now();
        let short_max = HealthSettings { open_max: Duration::from_secs(1), ..settings() };
        let half = Breaker::HalfOpen { probes: 1, lease_until: t0 };
        let step = half.step(0, BreakerInput::Failure { now: t0, failures: 1 }, &short_max);
        assert_eq!(step.signal, Some(BreakerSignal::Opened { open_for: short_max.open_for }));
    }

    #[test]
    fn driving_a_record_announces_the_move_with_its_failure_count() {
        let target: Target = "p:m".parse().unwrap();
        let mut record = TargetRecord { consecutive_failures: 3, ..TargetRecord::default() };
        let mut events = Vec::new();
        let now = Instant::now();
        drive(&mut record, &target, BreakerInput::Failure { now, failures: 3 }, &settings(), &mut events);
        assert_eq!(record.breaker, Breaker::Open { until: now + Duration::from_secs(30) });
        assert_eq!(
            events,
            [HealthEvent::CircuitOpened {
                target,
                open_for: Duration::from_secs(30),
                consecutive_failures: 3
            }]
        );
    }
}
