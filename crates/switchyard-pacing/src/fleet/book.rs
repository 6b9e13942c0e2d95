//! One lane's leases: the slices in hand, what the fleet last said, and the mode (shared or
//! degraded), as pure arithmetic over the instants given.

use std::collections::VecDeque;
use std::time::Duration;

use switchyard::pacing::{Dispatch, FleetLevels, FleetSnapshot, HeadersSnapshot};
use tokio::time::Instant;

use super::{
    BucketSpec, DIMENSIONS, HEADERS, LeaseAsk, LeaseGrant, MIN_RETRY, RPM, SLICE_TTL, TPM, UNREACHED,
    slice_size,
};
use crate::bucket::Bucket;
use crate::headers::Stated;

/// The units one call took from its lane's slices.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Taken {
    pub units: [f64; DIMENSIONS],

    /// Whether the call had to wait for them.
    pub waited: bool,
    /// Whether they include units of the fleet's header windows (then the fleet, not this
    /// replica's own header budget, decides when the call goes).
    pub headers: bool,
}

/// The calls of a lane in flight that took none of the fleet's units of some header window
/// (sent before the lane knew the window, or out of the fleet's reach), with what each cost
/// the windows it did not count in. The provider counts them all the same: their answers tell
/// the fleet (see [`StatedReport::uncounted`]), or a replica that learned of a window late
/// would leave the fleet counting more left than the provider has.
#[derive(Debug, Default)]
pub(crate) struct Uncounted(Vec<(Dispatch, [f64; 4])>);

impl Uncounted {
    /// Notes a call of `tokens` dispatched as `dispatch`, which took `taken` from the fleet.
    pub(crate) fn dispatched(&mut self, dispatch: Dispatch, taken: &Taken, tokens: f64) {
        let mut cost = [0.0; 4];
        for (header, slot) in cost.iter_mut().enumerate() {
            if taken.units[HEADERS + header] <= 0.0 {
                *slot = if header == 0 { 1.0 } else { tokens };
            }
        }
        if cost.iter().any(|c| *c > 0.0) {
            self.0.push((dispatch, cost));
        }
    }

    /// The call is over: what it cost the windows the fleet did not count it in (nothing
    /// for a call the fleet counted, or one answered before).
    pub(crate) fn answered(&mut self, dispatch: Dispatch) -> [f64; 4] {
        match self.0.iter().position(|(d, _)| *d == dispatch) {
            Some(at) => self.0.swap_remove(at).1,
            None => [0.0; 4],
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Slice {
    units: f64,
    expires: Instant,
}

/// How a lane is paced against the fleet.
#[derive(Debug)]
enum Mode {
    /// From leased slices.
    Shared,
    /// At its share of the allowance, the fleet being out of reach.
    Degraded { replicas: usize, buckets: [Option<Bucket>; 2] },
}

/// What taking from the book came to.
#[derive(Debug)]
pub(crate) enum Take {
    /// Taken.
    Got(Taken),
    /// Not enough: ask the fleet (when `ask` is set: no lease is on its way yet) and wait
    /// for its grant, or until `retry_at`.
    Short { ask: Option<Box<LeaseAsk>>, retry_at: Option<Instant> },
    /// Degraded: the share holds this long.
    Wait(Duration),
}

/// One lane's leases: the slices in hand, what the fleet last said, and the mode. Pure
/// arithmetic over the instants given, for paced tests.
#[derive(Debug)]
pub(crate) struct LeaseBook {
    buckets: [Option<BucketSpec>; 2],
    /// Per minute, for slice sizes.
    per_minute: [Option<f64>; 2],
    slices: [VecDeque<Slice>; DIMENSIONS],
    /// What the slices of each dimension hold together.
    held: [f64; DIMENSIONS],
    /// The header windows the fleet knows of (leased against while they run): limit, end,
    /// and whether it is a probe window.
    windows: [Option<(Option<u64>, Instant, bool)>; 4],
    /// Header dimensions another replica (or this one) opened and no grant has shown yet.
    opened: [bool; 4],
    level: [Option<f64>; DIMENSIONS],
    pending: bool,
    retry_at: Option<Instant>,
    mode: Mode,
    replicas: usize,
    /// Units that expired unspent, per dimension, for operators.
    stranded: [f64; DIMENSIONS],
    /// The last take left less than half a slice of some dimension.
    low: bool,
    /// Each dimension's slice, worked out again when the fleet's size or a window changes.
    slice: [f64; DIMENSIONS],
    /// Whether some header dimension is paced by the fleet.
    headers_known: bool,
    /// After a grant short of what was asked (the fleet's bucket is low), no prefetch before
    /// the bucket could refill half a slice: a dry bucket is not asked again and again.
    prefetch_after: Option<Instant>,
    /// What the lease on its way asked for.
    asked: [f64; DIMENSIONS],
    /// Units answers used beyond what their calls took and what was in hand: paid from the
    /// next grants.
    owed: [f64; DIMENSIONS],
    /// A 429's hold on the account: nothing is spent before it ends.
    held_until: Option<Instant>,
    /// A lease went unanswered: until then the lane paces at its share, as if the fleet were
    /// degraded (the store says so only after a few unanswered calls; a request does not wait
    /// for it to).
    unreached_until: Option<Instant>,
}

impl LeaseBook {
    pub(crate) fn new(requests_per_minute: Option<f64>, tokens_per_minute: Option<f64>) -> Self {
        let spec = |per_minute: f64| {
            let per_sec = per_minute / 60.0;
            BucketSpec { capacity: per_sec.max(1.0), per_sec }
        };
        Self {
            buckets: [requests_per_minute.map(spec), tokens_per_minute.map(spec)],
            per_minute: [requests_per_minute, tokens_per_minute],
            slices: Default::default(),
            held: [0.0; DIMENSIONS],
            windows: [None; 4],
            opened: [false; 4],
            level: [None; DIMENSIONS],
            pending: false,
            retry_at: None,
            // Shared until the first take follows the fleet: degraded then, until it answers,
            // at the share of the fleet size last known (before Redis was ever reached, this
            // replica alone: the whole allowance; see the module docs).
            mode: Mode::Shared,
            replicas: 1,
            stranded: [0.0; DIMENSIONS],
            low: false,
            slice: [1.0; DIMENSIONS],
            headers_known: false,
            prefetch_after: None,
            asked: [0.0; DIMENSIONS],
            owed: [0.0; DIMENSIONS],
            held_until: None,
            unreached_until: None,
        }
        .with_slices()
    }

    /// Works each dimension's slice out again.
    fn with_slices(mut self) -> Self {
        self.size_slices();
        self
    }

    fn size_slices(&mut self) {
        for dimension in 0..DIMENSIONS {
            let per_window = match dimension {
                RPM | TPM => self.per_minute[dimension],
                header => self.windows[header - HEADERS].and_then(|(limit, _, _)| limit).map(|l| l as f64),
            };
            self.slice[dimension] = per_window.map_or(1.0, |l| slice_size(l, self.replicas));
        }
    }

    /// Follows the fleet: degraded while it cannot be reached (at the share of `replicas`),
    /// shared again once it answers.
    pub(crate) fn follow(&mut self, shared: bool, replicas: usize, now: Instant) {
        let replicas = replicas.max(1);
        let shared = shared && self.unreached_until.is_none_or(|until| now >= until);
        match (&self.mode, shared) {
            (Mode::Shared, false) => {
                for (dimension, slices) in self.slices.iter_mut().enumerate() {
                    self.stranded[dimension] += slices.drain(..).map(|s| s.units).sum::<f64>();
                    self.held[dimension] = 0.0;
                }
                let share =
                    |per_minute: Option<f64>| per_minute.map(|l| Bucket::new(l / replicas as f64, now));
                let buckets = self.per_minute.map(share);
                self.mode = Mode::Degraded { replicas, buckets };
                self.retry_at = None;
            }
            (Mode::Degraded { .. }, true) => {
                self.mode = Mode::Shared;
                self.retry_at = None;
            }
            _ => {}
        }
        if self.replicas != replicas {
            self.replicas = replicas;
            self.size_slices();
        }
    }

    /// The fleet share this lane paces at while degraded (`None`: shared).
    pub(crate) fn degraded_share(&self) -> Option<usize> {
        match self.mode {
            Mode::Degraded { replicas, .. } => Some(replicas),
            Mode::Shared => None,
        }
    }

    /// Whether the fleet paces header dimension `header`: once it has a window of it, every
    /// call leases against it, also after the window ends (the fleet then lets one probe go
    /// until an answer states the next), until a grant shows the fleet has none.
    fn window_known(&self, header: usize) -> bool {
        self.opened[header] || self.windows[header].is_some()
    }

    /// What a call of `tokens` needs per dimension.
    fn need(&self, tokens: f64) -> [f64; DIMENSIONS] {
        let mut need = [0.0; DIMENSIONS];
        if self.buckets[RPM].is_some() {
            need[RPM] = 1.0;
        }
        if self.buckets[TPM].is_some() {
            need[TPM] = tokens;
        }
        if self.headers_known {
            for header in 0..4 {
                if self.window_known(header) {
                    need[HEADERS + header] = if header == 0 { 1.0 } else { tokens };
                }
            }
        }
        need
    }

    /// Notes whether any header dimension is paced by the fleet (most lanes have none).
    fn note_headers(&mut self) {
        self.headers_known = (0..4).any(|header| self.window_known(header));
    }

    /// Units in hand in `dimension` at `now` (expired slices dropped).
    pub(crate) fn balance(&mut self, dimension: usize, now: Instant) -> f64 {
        let slices = &mut self.slices[dimension];
        while slices.front().is_some_and(|s| s.expires <= now) {
            if let Some(gone) = slices.pop_front() {
                self.stranded[dimension] += gone.units.max(0.0);
                self.held[dimension] -= gone.units;
            }
        }
        // A slice of a shorter window may end before one granted ahead of it.
        if slices.len() > 1 && slices.iter().any(|s| s.expires <= now) {
            let (stranded, held) = (&mut self.stranded[dimension], &mut self.held[dimension]);
            slices.retain(|s| {
                let live = s.expires > now;
                if !live {
                    *stranded += s.units.max(0.0);
                    *held -= s.units;
                }
                live
            });
        }
        if slices.is_empty() {
            self.held[dimension] = 0.0;
        }
        self.held[dimension]
    }

    /// Takes what a call of `tokens` needs, or says what to do.
    pub(crate) fn take(&mut self, tokens: f64, now: Instant) -> Take {
        let need = self.need(tokens);
        if let Mode::Degraded { buckets, .. } = &mut self.mode {
            let mut wait = Duration::ZERO;
            for (bucket, units) in buckets.iter_mut().zip(need) {
                if let Some(bucket) = bucket {
                    bucket.refill(now);
                    wait = wait.max(bucket.wait_for(units));
                }
            }
            if !wait.is_zero() {
                return Take::Wait(wait);
            }
            for (bucket, units) in buckets.iter_mut().zip(need) {
                if let Some(bucket) = bucket {
                    bucket.take(units);
                }
            }
            return Take::Got(Taken::default());
        }
        if let Some(until) = self.held_until {
            if until > now {
                return Take::Short { ask: None, retry_at: Some(until) };
            }
            self.held_until = None;
        }
        let mut enough = true;
        for (dimension, need) in need.into_iter().enumerate() {
            if need > 0.0 && self.balance(dimension, now) < need {
                enough = false;
                break;
            }
        }
        if !enough {
            // A bucket that was short at the last grant is asked again once it could have
            // refilled half a slice: a dry bucket is not asked a unit at a time.
            let retry_at = self.retry_at.max(self.prefetch_after).filter(|at| *at > now);
            let ask = (!self.pending && retry_at.is_none()).then(|| Box::new(self.ask(need)));
            if ask.is_some() {
                self.pending = true;
            }
            return Take::Short { ask, retry_at };
        }
        let mut taken = Taken::default();
        let mut low = false;
        for (dimension, units) in need.into_iter().enumerate() {
            if units > 0.0 {
                // What is in hand was counted (and its expired slices dropped) above.
                low |= self.held[dimension] - units < (self.slice[dimension] / 2.0).max(units);
                self.spend(dimension, units);
                taken.units[dimension] = units;
                taken.headers |= dimension >= HEADERS;
            }
        }
        self.low = low;
        Take::Got(taken)
    }

    /// After a take: the next slice to prefetch, when less than half of one is left of some
    /// dimension a call needs and no lease is on its way.
    pub(crate) fn prefetch(&mut self, now: Instant) -> Option<LeaseAsk> {
        let low = std::mem::take(&mut self.low);
        let waiting = |at: Option<Instant>| at.is_some_and(|at| at > now);
        if !low || self.pending || self.degraded_share().is_some() {
            return None;
        }
        if waiting(self.retry_at) || waiting(self.prefetch_after) {
            return None;
        }
        self.pending = true;
        Some(self.ask([0.0; DIMENSIONS]))
    }

    /// Spends `units` of `dimension`, oldest slice first.
    fn spend(&mut self, dimension: usize, mut units: f64) -> f64 {
        let slices = &mut self.slices[dimension];
        while units > 0.0 {
            let Some(slice) = slices.front_mut() else { break };
            let spent = units.min(slice.units);
            slice.units -= spent;
            units -= spent;
            self.held[dimension] -= spent;
            if slice.units <= 0.0 {
                slices.pop_front();
            }
        }
        units
    }

    fn ask(&mut self, need: [f64; DIMENSIONS]) -> LeaseAsk {
        let mut want = [0.0; DIMENSIONS];
        for (dimension, slot) in want.iter_mut().enumerate() {
            let active = match dimension {
                RPM | TPM => self.buckets[dimension].is_some(),
                header => self.window_known(header - HEADERS),
            };
            if active {
                *slot = self.slice[dimension].max(need[dimension]);
            }
        }
        self.asked = want;
        // A provider's bucket holds a second: a fleet that lost it starts it full, at most a
        // second's allowance more.
        LeaseAsk { need, want, buckets: self.buckets, seen: [None; 2] }
    }

    /// The fleet's answer to the lease on its way (`None`: it could not be reached).
    pub(crate) fn granted(&mut self, grant: Option<LeaseGrant>, sent: Instant, now: Instant) {
        self.pending = false;
        let Some(grant) = grant else {
            // Not reached: at the share for a while, then ask again.
            self.retry_at = Some(now + MIN_RETRY);
            self.unreached_until = Some(now + UNREACHED);
            return;
        };
        self.unreached_until = None;
        let limits = self.windows.map(|w| w.and_then(|(limit, _, _)| limit));
        for header in 0..4 {
            self.windows[header] = grant.windows[header].map(|w| (w.limit, now + w.ends_in, w.probe));
            self.opened[header] = false;
        }
        if self.windows.map(|w| w.and_then(|(limit, _, _)| limit)) != limits {
            self.size_slices();
        }
        self.note_headers();
        for (dimension, mut units) in grant.granted.into_iter().enumerate() {
            if units > 0.0 && self.owed[dimension] > 0.0 {
                let paid = units.min(self.owed[dimension]);
                self.owed[dimension] -= paid;
                units -= paid;
            }
            if units > 0.0 {
                let mut expires = now + SLICE_TTL;
                if let Some(header) = dimension.checked_sub(HEADERS)
                    && let Some(window) = grant.windows[header]
                {
                    // A window's units are spent within it: by its end counted from when the
                    // lease was asked, since the fleet read its clock before the answer came
                    // back. Counted from the answer, a unit spent just after the fleet's window
                    // ended lands in the provider's next one, which the fleet does not count.
                    expires = expires.min(sent + window.ends_in);
                }
                self.slices[dimension].push_back(Slice { units, expires });
                self.held[dimension] += units;
            }
        }
        self.prefetch_after = None;
        for (dimension, spec) in self.buckets.iter().enumerate() {
            if let Some(spec) = spec
                && self.asked[dimension] > 0.0
                && grant.granted[dimension] < self.asked[dimension]
                && spec.per_sec > 0.0
            {
                let refill = Duration::from_secs_f64((self.slice[dimension] / 2.0 / spec.per_sec).min(60.0));
                self.prefetch_after = self.prefetch_after.max(Some(now + refill));
            }
        }
        self.level = grant.level;
        self.retry_at = grant.retry_in.map(|wait| now + wait.max(MIN_RETRY));
        if let Some(hold) = grant.hold {
            self.hold(now + hold.max(MIN_RETRY));
        }
    }

    /// Another replica opened a header window: lease against it.
    pub(crate) fn open(&mut self, header: usize) {
        if let Some(slot) = self.opened.get_mut(header) {
            *slot = true;
        }
        self.note_headers();
        self.retry_at = None;
    }

    /// A hold over the account: slices in hand are not spent before it ends.
    pub(crate) fn hold(&mut self, until: Instant) {
        self.retry_at = Some(self.retry_at.map_or(until, |at| at.max(until)));
        self.held_until = Some(self.held_until.map_or(until, |at| at.max(until)));
    }

    /// Units a call took and did not use come back, into the oldest slice in hand (to expire
    /// with it); with none in hand they are not kept. Units it used beyond what it took
    /// (negative) are spent from what is in hand.
    pub(crate) fn refund(&mut self, units: [f64; DIMENSIONS]) {
        if self.degraded_share().is_some() {
            return;
        }
        for (dimension, units) in units.into_iter().enumerate() {
            self.refund_one(dimension, units);
        }
    }

    /// [`refund`](Self::refund) of one dimension.
    pub(crate) fn refund_one(&mut self, dimension: usize, units: f64) {
        if units > 0.0 {
            if let Some(front) = self.slices[dimension].front_mut() {
                front.units += units;
                self.held[dimension] += units;
            }
        } else if units < 0.0 {
            // What is not in hand is owed, and paid from the next grant.
            self.owed[dimension] += self.spend(dimension, -units);
        }
    }

    /// Everything unspent in the buckets, taken out of the book (at shutdown).
    pub(crate) fn surrender(&mut self, now: Instant) -> [f64; 2] {
        let mut units = [0.0; 2];
        for (dimension, slot) in units.iter_mut().enumerate() {
            *slot = self.balance(dimension, now).max(0.0);
            self.slices[dimension].clear();
            self.held[dimension] = 0.0;
        }
        units
    }

    pub(crate) fn buckets(&self) -> [Option<BucketSpec>; 2] {
        self.buckets
    }

    pub(crate) fn snapshot(&mut self, now: Instant) -> FleetSnapshot {
        let lease = |book: &mut Self, d: usize| book.buckets[d].map(|_| book.balance(d, now));
        let requests = lease(self, RPM);
        let tokens = lease(self, TPM);
        let share = |d: usize| match &self.mode {
            Mode::Degraded { buckets, .. } => buckets[d].as_ref().map(Bucket::level),
            Mode::Shared => None,
        };
        FleetSnapshot {
            mode: if self.degraded_share().is_some() { "degraded" } else { "shared" },
            replicas: self.replicas,
            bucket: FleetLevels { requests: self.level[RPM], tokens: self.level[TPM] },
            lease: FleetLevels { requests, tokens },
            share: self.degraded_share().map(|_| FleetLevels { requests: share(RPM), tokens: share(TPM) }),
            stranded: FleetLevels {
                requests: self.buckets[RPM].map(|_| self.stranded[RPM]),
                tokens: self.buckets[TPM].map(|_| self.stranded[TPM]),
            },
            headers: HeadersSnapshot::default(),
        }
    }

    /// The fleet's header windows as this lane last heard of them, ended or not, for
    /// operators.
    pub(crate) fn header_windows(&self) -> [Option<Stated>; 4] {
        let mut out = [None; 4];
        for (header, slot) in out.iter_mut().enumerate() {
            if let (Some((limit, ends, _)), Some(level)) =
                (self.windows[header], self.level[HEADERS + header])
            {
                *slot = Some(Stated { limit, remaining: level, resets_at: Some(ends) });
            }
        }
        out
    }

    /// The fleet's running header windows as this lane last heard of them, with their
    /// levels (not probe windows: what an answer says then is always news).
    pub(crate) fn header_levels(&self, now: Instant) -> [Option<Stated>; 4] {
        let mut out = self.header_windows();
        for (header, slot) in out.iter_mut().enumerate() {
            let running = self.windows[header].is_some_and(|(_, ends, probe)| !probe && ends > now);
            if !running {
                *slot = None;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{LeaseGrant, Window};

    const RPM_300: Option<f64> = Some(300.0);

    /// A grant of `units` of the header dimension, the fleet's level `level`, for a stated
    /// window of 10 that ends in `ends_ms` (a probe window when `probe`).
    fn header_grant(units: f64, level: f64, ends_ms: u64, probe: bool) -> LeaseGrant {
        let mut grant = LeaseGrant::default();
        grant.granted[HEADERS] = units;
        grant.level[HEADERS] = Some(level);
        grant.windows[0] = Some(Window { limit: Some(10), ends_in: Duration::from_millis(ends_ms), probe });
        grant
    }

    fn got(take: Take) -> Taken {
        match take {
            Take::Got(taken) => taken,
            other => panic!("expected units, got {other:?}"),
        }
    }

    fn grant_of(units: f64) -> LeaseGrant {
        let mut grant = LeaseGrant::default();
        grant.granted[RPM] = units;
        grant.level[RPM] = Some(0.0);
        grant
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_lane_asks_for_one_slice_and_spends_it_locally() {
        let now = Instant::now();
        let mut book = LeaseBook::new(RPM_300, None);
        book.follow(true, 3, now);
        let Take::Short { ask: Some(ask), .. } = book.take(0.0, now) else { panic!("a lease is asked for") };
        assert_eq!(ask.need[RPM], 1.0);
        assert_eq!(ask.want[RPM], 3.0, "1% of 300");
        assert_eq!(ask.buckets[RPM], Some(BucketSpec { capacity: 5.0, per_sec: 5.0 }));
        assert!(
            matches!(book.take(0.0, now), Take::Short { ask: None, .. }),
            "one lease on its way at a time"
        );
        book.granted(Some(grant_of(3.0)), now, now);
        got(book.take(0.0, now));
        assert_eq!(book.balance(RPM, now), 2.0);
        // 2 left of a slice of 3: not yet below half.
        assert_eq!(book.prefetch(now), None);
        got(book.take(0.0, now));
        let prefetch = book.prefetch(now).expect("below half a slice: the next one is asked for");
        assert_eq!(prefetch.need, [0.0; DIMENSIONS], "a prefetch needs nothing");
        assert_eq!(prefetch.want[RPM], 3.0);
        assert_eq!(book.prefetch(now), None, "not twice");
        got(book.take(0.0, now));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dry_fleet_bucket_is_not_asked_again_before_half_a_slice_could_refill() {
        let now = Instant::now();
        let mut book = LeaseBook::new(RPM_300, None);
        book.follow(true, 1, now);
        let Take::Short { ask: Some(_), .. } = book.take(0.0, now) else { panic!() };
        // Asked for 3, the fleet had 1.
        book.granted(Some(grant_of(1.0)), now, now);
        got(book.take(0.0, now));
        assert_eq!(book.prefetch(now), None, "not at once");
        // Nor is a call short of units: it waits until half a slice (1.5) could refill at 5
        // a second, 300 ms.
        let later = now + Duration::from_millis(300);
        match book.take(0.0, now) {
            Take::Short { ask: None, retry_at } => assert_eq!(retry_at, Some(later)),
            other => panic!("{other:?}"),
        }
        book.granted(Some(grant_of(3.0)), later, later);
        got(book.take(0.0, later));
        got(book.take(0.0, later));
        assert!(book.prefetch(later).is_some(), "a full grant lifts the hold");
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_used_beyond_the_estimate_and_not_in_hand_are_paid_from_the_next_grant() {
        let now = Instant::now();
        let mut book = LeaseBook::new(None, Some(60_000.0));
        book.follow(true, 1, now);
        let mut grant = LeaseGrant::default();
        grant.granted[TPM] = 1_000.0;
        book.granted(Some(grant.clone()), now, now);
        got(book.take(1_000.0, now));
        // The answer used 1,600 of an estimate of 1,000: 600 more, and nothing in hand.
        book.refund_one(TPM, -600.0);
        book.granted(Some(grant), now, now);
        assert_eq!(book.balance(TPM, now), 400.0, "the next grant pays the 600 first");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_a_grant_brings_stops_the_slices_in_hand_too() {
        let now = Instant::now();
        let mut book = LeaseBook::new(RPM_300, None);
        book.follow(true, 1, now);
        book.granted(Some(grant_of(3.0)), now, now);
        let mut held = grant_of(0.0);
        held.hold = Some(Duration::from_secs(1));
        book.granted(Some(held), now, now);
        match book.take(0.0, now) {
            Take::Short { ask: None, retry_at } => assert_eq!(retry_at, Some(now + Duration::from_secs(1))),
            other => panic!("nothing is spent during a hold: {other:?}"),
        }
        got(book.take(0.0, now + Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slice_of_a_shorter_window_expires_even_behind_a_longer_one() {
        let now = Instant::now();
        let mut book = LeaseBook::new(None, None);
        book.follow(true, 3, now);
        let window = |units: f64, ends_ms: u64, probe: bool| header_grant(units, 0.0, ends_ms, probe);
        // A probe window's slice (1 s), then the next window's (300 ms), in that order.
        book.granted(Some(window(1.0, 1_000, true)), now, now);
        book.granted(Some(window(2.0, 300, false)), now, now);
        assert_eq!(book.balance(HEADERS, now), 3.0);
        assert_eq!(book.balance(HEADERS, now + Duration::from_millis(300)), 1.0, "the 300 ms slice is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_s_units_are_spent_by_its_end_counted_from_when_the_lease_was_asked() {
        // The fleet said "300 ms left" when it was asked; its answer took 40 ms to come back.
        // Spent in those last 40 ms, a unit would reach the provider in its next window,
        // which the fleet does not count it in.
        let sent = Instant::now();
        let answered = sent + Duration::from_millis(40);
        let mut book = LeaseBook::new(None, None);
        book.follow(true, 3, sent);
        book.granted(Some(header_grant(2.0, 0.0, 300, false)), sent, answered);
        assert_eq!(book.balance(HEADERS, sent + Duration::from_millis(299)), 2.0);
        assert_eq!(book.balance(HEADERS, sent + Duration::from_millis(300)), 0.0, "not until 340 ms");
    }

    #[tokio::test(start_paused = true)]
    async fn slices_expire_unspent_and_what_is_left_goes_back_at_shutdown() {
        let now = Instant::now();
        let mut book = LeaseBook::new(RPM_300, Some(60_000.0));
        book.follow(true, 1, now);
        let mut grant = grant_of(3.0);
        grant.granted[TPM] = 600.0;
        book.granted(Some(grant), now, now);
        assert_eq!(book.balance(RPM, now + SLICE_TTL - Duration::from_millis(1)), 3.0);
        assert_eq!(book.balance(RPM, now + SLICE_TTL), 0.0, "expired");
        assert_eq!(book.snapshot(now + SLICE_TTL).stranded.requests, Some(3.0));

        let later = now + SLICE_TTL;
        let mut grant = grant_of(3.0);
        grant.granted[TPM] = 600.0;
        book.granted(Some(grant), later, later);
        let taken = got(book.take(100.0, later));
        assert_eq!(book.surrender(later), [2.0, 500.0]);
        assert_eq!(book.balance(RPM, later), 0.0, "surrendered units are gone from the book");
        // With no slice in hand, a refund is not kept (it would outlive its slice).
        book.refund(taken.units);
        assert_eq!(book.balance(RPM, later), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_cancelled_before_dispatch_gives_its_units_back_and_tokens_are_corrected() {
        let now = Instant::now();
        let mut book = LeaseBook::new(None, Some(60_000.0));
        book.follow(true, 1, now);
        let mut grant = LeaseGrant::default();
        grant.granted[TPM] = 1_000.0;
        book.granted(Some(grant), now, now);
        got(book.take(400.0, now));
        assert_eq!(book.balance(TPM, now), 600.0);
        let mut unused = [0.0; DIMENSIONS];
        unused[TPM] = 400.0 - 150.0;
        book.refund(unused);
        assert_eq!(book.balance(TPM, now), 850.0, "what the answer did not use comes back");
        let mut over = [0.0; DIMENSIONS];
        over[TPM] = -100.0;
        book.refund(over);
        assert_eq!(book.balance(TPM, now), 750.0, "what it used beyond its estimate is spent");
    }

    #[tokio::test(start_paused = true)]
    async fn a_degraded_lane_paces_at_its_share_and_returns_to_leasing() {
        let start = Instant::now();
        let mut book = LeaseBook::new(Some(600.0), None);
        book.follow(true, 3, start);
        book.granted(Some(grant_of(6.0)), start, start);
        book.follow(false, 3, start);
        assert_eq!(book.degraded_share(), Some(3));
        assert_eq!(book.balance(RPM, start), 0.0, "slices are not spent out of the fleet's reach");
        // 600 rpm is 10 a second with a burst of 10; a third of it: 3.33 a second, burst 3.33.
        let mut sent = 0;
        let mut now = start;
        while now < start + Duration::from_secs(6) {
            match book.take(0.0, now) {
                Take::Got(_) => sent += 1,
                Take::Wait(wait) => now += wait,
                other => panic!("degraded lanes do not lease: {other:?}"),
            }
        }
        let share = 10.0 / 3.0;
        assert!(f64::from(sent) <= share + share * 6.0 + 1.0, "{sent} sent");
        assert!(f64::from(sent) >= share * 6.0, "{sent} sent: the share is used");
        book.follow(true, 3, now);
        assert!(matches!(book.take(0.0, now), Take::Short { ask: Some(_), .. }), "back to leasing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_unanswered_paces_the_lane_at_its_share_at_once_then_asks_again() {
        let start = Instant::now();
        let mut book = LeaseBook::new(Some(600.0), None);
        book.follow(true, 3, start);
        let Take::Short { ask: Some(_), .. } = book.take(0.0, start) else { panic!("a lease is asked for") };
        book.granted(None, start, start);
        // The store still says shared; the waiting call goes on the lane's share.
        book.follow(true, 3, start);
        assert_eq!(book.degraded_share(), Some(3));
        got(book.take(0.0, start));
        let later = start + UNREACHED;
        book.follow(true, 3, later);
        assert_eq!(book.degraded_share(), None);
        assert!(matches!(book.take(0.0, later), Take::Short { ask: Some(_), .. }), "back to leasing");
        book.granted(Some(grant_of(6.0)), later, later);
        book.follow(true, 3, later);
        got(book.take(0.0, later));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_stops_leasing_until_it_ends() {
        let now = Instant::now();
        let mut book = LeaseBook::new(RPM_300, None);
        book.follow(true, 1, now);
        book.hold(now + Duration::from_secs(3));
        match book.take(0.0, now) {
            Take::Short { ask: None, retry_at } => assert_eq!(retry_at, Some(now + Duration::from_secs(3))),
            other => panic!("{other:?}"),
        }
        let later = now + Duration::from_secs(3);
        assert!(matches!(book.take(0.0, later), Take::Short { ask: Some(_), .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn header_windows_are_leased_while_they_run_and_their_units_end_with_them() {
        let now = Instant::now();
        let mut book = LeaseBook::new(None, None);
        book.follow(true, 3, now);
        assert!(matches!(book.take(0.0, now), Take::Got(_)), "no window: nothing to lease");
        book.open(0);
        let Take::Short { ask: Some(ask), .. } = book.take(0.0, now) else { panic!("a lease is asked for") };
        assert_eq!(ask.need[HEADERS], 1.0);
        book.granted(Some(header_grant(2.0, 8.0, 300, false)), now, now);
        got(book.take(0.0, now));
        assert_eq!(book.balance(HEADERS, now + Duration::from_millis(299)), 1.0);
        assert_eq!(book.balance(HEADERS, now + Duration::from_millis(300)), 0.0, "gone with its window");
        let after = now + Duration::from_millis(300);
        let Take::Short { ask: Some(ask), .. } = book.take(0.0, after) else {
            panic!("after its window, the next call still leases: the fleet lets one probe go")
        };
        assert_eq!(ask.need[HEADERS], 1.0);
        book.granted(Some(LeaseGrant::default()), after, after);
        assert!(matches!(book.take(0.0, after), Take::Got(_)), "the fleet has no window: not paced by it");
    }

    #[tokio::test(start_paused = true)]
    async fn at_a_window_s_edge_the_fleet_overshoots_by_at_most_the_slices_held() {
        // The fleet's bucket: 300 a minute, 5 a second, a burst of 5, drained at `start`.
        let start = Instant::now();
        let spec = BucketSpec { capacity: 5.0, per_sec: 5.0 };
        let mut fleet = (spec.capacity, start);
        let lease = |fleet: &mut (f64, Instant), ask: &LeaseAsk, now: Instant| {
            fleet.0 = (fleet.0 + now.duration_since(fleet.1).as_secs_f64() * spec.per_sec).min(spec.capacity);
            fleet.1 = now;
            let take = ask.want[RPM].min(fleet.0).max(0.0);
            fleet.0 -= take;
            grant_of(take)
        };
        let mut books: Vec<LeaseBook> = (0..3).map(|_| LeaseBook::new(RPM_300, None)).collect();
        let slice = slice_size(300.0, 3);
        for book in &mut books {
            book.follow(true, 3, start);
        }
        // Quiet traffic: each replica sends one call and prefetches, so they hold slices
        // leased from this second's burst without spending them.
        let mut sent_early = 0;
        for book in &mut books {
            let Take::Short { ask: Some(ask), .. } = book.take(0.0, start) else { panic!() };
            book.granted(Some(lease(&mut fleet, &ask, start)), start, start);
            if matches!(book.take(0.0, start), Take::Got(_)) {
                sent_early += 1;
            }
        }
        // A second later the bucket is full again, and a burst arrives at every replica.
        let edge = start + Duration::from_secs(1);
        let mut burst = 0;
        for book in &mut books {
            loop {
                match book.take(0.0, edge) {
                    Take::Got(_) => burst += 1,
                    Take::Short { ask: Some(ask), .. } => {
                        let grant = lease(&mut fleet, &ask, edge);
                        let empty = grant.granted[RPM] < 1.0;
                        book.granted(Some(grant), edge, edge);
                        if empty {
                            break;
                        }
                    }
                    Take::Short { ask: None, .. } | Take::Wait(_) => break,
                }
            }
        }
        assert_eq!(sent_early, 2, "the first second's burst of 5: slices of 3 and 2, one call each");
        let bound = spec.capacity + 3.0 * slice;
        assert!(f64::from(burst) > spec.capacity, "{burst}: the slices held do shift into the next second");
        assert!(f64::from(burst) <= bound, "{burst} at the edge, bound {bound}");
        // Slices held past their lifetime are never spent: nothing shifts further.
        let mut book = LeaseBook::new(RPM_300, None);
        book.follow(true, 3, start);
        book.granted(Some(grant_of(3.0)), start, start);
        assert!(matches!(book.take(0.0, start + SLICE_TTL), Take::Short { .. }));
    }
}
