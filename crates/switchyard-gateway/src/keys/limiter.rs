//! A key's requests and tokens per minute: buckets that hold a minute's worth and refill at
//! the rate (a key with 5 a minute may send 5 at once), here or leased from the fleet's.
//!
//! Alone, a key spends its own buckets. With shared state, it leases slices of the fleet's
//! buckets (`P:pace:key:<hash>`, through the leases pacing uses: [`FleetPacing`]) and spends
//! them here; the request that finds its slice spent leases the next (one round trip), and
//! what is unspent of a slice after [`SLICE_TTL`] goes back to the fleet's bucket (a bucket of a
//! minute refills a 1% slice in 0.6 s: slices stranded at each expiry would starve a key whose
//! requests trickle in over a few replicas). While the fleet cannot be reached, the key
//! spends its share: buckets of the allowance divided by the last known fleet size.
//!
//! Tokens are known only when an answer ends: a request is admitted while the key's tokens
//! are not in debt, and its usage is charged when it ends (into debt, paid back at the rate).

use std::time::Duration;

use switchyard_pacing::fleet::{BucketSpec, DIMENSIONS, LeaseAsk, LeaseGrant, SLICE_TTL, slice_size};
use tokio::time::Instant;

use super::{KeyLimits, Limit};

/// A bucket holding a minute's worth (or its share of it), refilled at the rate.
#[derive(Debug, Clone)]
struct MinuteBucket {
    capacity: f64,
    per_sec: f64,
    level: f64,
    at: Instant,
}

impl MinuteBucket {
    /// `per_minute` among `share` replicas: a bucket of `per_minute / share`, full, or holding
    /// its share of `level`.
    fn new(per_minute: u64, share: usize, level: Option<f64>, now: Instant) -> Self {
        let capacity = per_minute as f64 / share.max(1) as f64;
        let level = level.map_or(capacity, |level| (level / share.max(1) as f64).min(capacity));
        Self { capacity, per_sec: capacity / 60.0, level, at: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_sec).min(self.capacity);
        self.at = now;
    }

    /// Whether one unit is there; else how long until it is.
    fn ready(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        let needed = 1f64.min(self.capacity);
        if self.level >= needed || self.per_sec <= 0.0 {
            return Ok(());
        }
        Err(Duration::from_secs_f64(((needed - self.level) / self.per_sec).min(1e6)))
    }
}

/// The requests and tokens buckets of one way of counting.
#[derive(Debug, Clone, Default)]
struct Buckets {
    requests: Option<MinuteBucket>,
    tokens: Option<MinuteBucket>,
}

impl Buckets {
    /// A share among `share` replicas of buckets holding `levels` (full where `None`).
    fn new(limits: &KeyLimits, share: usize, levels: [Option<f64>; 2], now: Instant) -> Self {
        let bucket =
            |per_minute: Option<u64>, level| per_minute.map(|pm| MinuteBucket::new(pm, share, level, now));
        Self {
            requests: bucket(limits.requests_per_minute, levels[0]),
            tokens: bucket(limits.tokens_per_minute, levels[1]),
        }
    }

    /// Takes a request when both buckets allow one; else the longer wait, and whose it is.
    fn admit(&mut self, now: Instant) -> Result<(), (Duration, Limit)> {
        let tokens = self.tokens.as_mut().map_or(Ok(()), |b| b.ready(now));
        let requests = self.requests.as_mut().map_or(Ok(()), |b| b.ready(now));
        match (requests, tokens) {
            (Ok(()), Ok(())) => {
                if let Some(bucket) = self.requests.as_mut() {
                    bucket.level -= 1.0;
                }
                Ok(())
            }
            (Err(a), Err(b)) if b > a => Err((b, Limit::TokensPerMinute)),
            (Err(wait), _) => Err((wait, Limit::RequestsPerMinute)),
            (_, Err(wait)) => Err((wait, Limit::TokensPerMinute)),
        }
    }

    fn charge(&mut self, tokens: f64, now: Instant) {
        if let Some(bucket) = self.tokens.as_mut() {
            bucket.refill(now);
            bucket.level -= tokens;
        }
    }
}

/// Slices of the fleet's buckets in hand.
#[derive(Debug, Clone, Default)]
struct Hand {
    /// Requests, tokens.
    held: [f64; 2],
    /// When what is held expires: it goes back to the fleet.
    until: Option<Instant>,
    /// What expired unspent, to give back.
    expired: [f64; 2],
    /// Tokens answers used beyond what was in hand, paid from the next grants.
    owed: f64,
}

/// How a key counts right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No shared state: the key's own buckets.
    Alone,
    /// Shared state out of reach: the key's share among this many replicas.
    Share(usize),
    /// Slices leased from the fleet's buckets.
    Fleet,
}

/// The rate limits of one key.
#[derive(Debug)]
pub(crate) struct Limiter {
    limits: KeyLimits,
    alone: Buckets,
    /// The share's buckets while the fleet is out of reach; made when it goes, dropped when
    /// it answers again.
    share: Option<(usize, Buckets)>,
    hand: Hand,
    /// The fleet's levels of the buckets (requests, tokens) as its last answer said, and when.
    seen: [Option<(f64, Instant)>; 2],
    /// What the share spent (requests, tokens) since the fleet last answered: taken from the
    /// fleet's buckets once it answers again, else a blip of Redis is a new minute's worth.
    away: [f64; 2],
}

impl Limiter {
    pub(crate) fn new(limits: KeyLimits) -> Self {
        let alone = Buckets::new(&limits, 1, [None; 2], Instant::now());
        Self { limits, alone, share: None, hand: Hand::default(), seen: [None; 2], away: [0.0; 2] }
    }

    /// The limits it counts.
    pub(crate) fn limits(&self) -> KeyLimits {
        self.limits
    }

    /// Whether the key has any rate limit.
    pub(crate) fn limits_rate(&self) -> bool {
        self.limits.requests_per_minute.is_some() || self.limits.tokens_per_minute.is_some()
    }

    /// Admits a request counted as `mode` says: `Ok`, a wait to refuse it with, or (in the
    /// fleet) what to lease before it can be told.
    pub(crate) fn admit(&mut self, mode: Mode, now: Instant) -> Result<(), Step> {
        match mode {
            Mode::Alone => self.alone.admit(now).map_err(|(wait, limit)| Step::Refuse(wait, limit)),
            Mode::Share(replicas) => {
                self.share_of(replicas, now).admit(now).map_err(|(wait, limit)| Step::Refuse(wait, limit))?;
                self.away[0] += 1.0;
                Ok(())
            }
            Mode::Fleet => self.spend_hand(now).map_err(Step::Lease),
        }
    }

    /// The buckets of a share among `replicas`, made anew when the fleet's size changed: the
    /// share of the fleet's levels as last seen (refilled since), not full, so that a fleet out
    /// of reach for a moment is not a new minute's worth for every replica.
    fn share_of(&mut self, replicas: usize, now: Instant) -> &mut Buckets {
        if self.share.as_ref().is_none_or(|(n, _)| *n != replicas) {
            let levels = self.seen_levels(now);
            self.share = Some((replicas, Buckets::new(&self.limits, replicas, levels, now)));
        }
        &mut self.share.get_or_insert_with(|| (replicas, Buckets::default())).1
    }

    /// The fleet's levels as last seen, refilled to `now`.
    fn seen_levels(&self, now: Instant) -> [Option<f64>; 2] {
        let allowances = [self.limits.requests_per_minute, self.limits.tokens_per_minute];
        let mut levels = [None; 2];
        for (level, (seen, allowance)) in levels.iter_mut().zip(self.seen.iter().zip(allowances)) {
            if let (Some((at_level, at)), Some(per_minute)) = (seen, allowance) {
                let per_minute = per_minute as f64;
                let refilled = now.saturating_duration_since(*at).as_secs_f64() * per_minute / 60.0;
                *level = Some((at_level + refilled).min(per_minute));
            }
        }
        levels
    }

    /// What the share spent while the fleet was out of reach, as units to give the fleet's
    /// buckets back (negative: taken from them), once; `None` when nothing was.
    pub(crate) fn spent_away(&mut self) -> Option<([f64; 2], [Option<BucketSpec>; 2])> {
        let away = std::mem::take(&mut self.away);
        if away.iter().all(|units| *units <= 0.0) {
            return None;
        }
        Some((away.map(|units| -units), self.specs()))
    }

    /// The fleet's bucket of each limit.
    fn specs(&self) -> [Option<BucketSpec>; 2] {
        let spec = |per_minute: Option<u64>| {
            per_minute.map(|pm| BucketSpec { capacity: pm as f64, per_sec: pm as f64 / 60.0 })
        };
        [spec(self.limits.requests_per_minute), spec(self.limits.tokens_per_minute)]
    }

    /// Admits from the slices in hand, or says what to lease.
    fn spend_hand(&mut self, now: Instant) -> Result<(), Box<LeaseAsk>> {
        if self.hand.until.is_some_and(|until| now >= until) {
            for (expired, held) in self.hand.expired.iter_mut().zip(self.hand.held) {
                *expired += held.max(0.0);
            }
            self.hand.held = [0.0; 2];
            self.hand.until = None;
        }
        let rpm = self.limits.requests_per_minute.map(|pm| pm as f64);
        let tpm = self.limits.tokens_per_minute.map(|pm| pm as f64);
        let need_requests = if rpm.is_some() && self.hand.held[0] < 1.0 { 1.0 } else { 0.0 };
        let short = self.hand.owed - self.hand.held[1] + 1.0;
        let need_tokens = if tpm.is_some() && short > 0.0 { short } else { 0.0 };
        if need_requests == 0.0 && need_tokens == 0.0 {
            if rpm.is_some() {
                self.hand.held[0] -= 1.0;
            }
            return Ok(());
        }
        // Less what the share spent since: a fleet that lost the bucket starts it there.
        let mut seen = self.seen_levels(now);
        for (level, away) in seen.iter_mut().zip(self.away) {
            *level = level.map(|level| level - away);
        }
        let mut ask =
            LeaseAsk { need: [0.0; DIMENSIONS], want: [0.0; DIMENSIONS], buckets: [None, None], seen };
        for (d, (allowance, need)) in [(rpm, need_requests), (tpm, need_tokens)].into_iter().enumerate() {
            let Some(allowance) = allowance else { continue };
            ask.need[d] = need;
            ask.want[d] = need.max(slice_size(allowance, 1));
            ask.buckets[d] = Some(BucketSpec { capacity: allowance, per_sec: allowance / 60.0 });
        }
        Err(Box::new(ask))
    }

    /// What expired unspent since the last call, with the buckets it goes back to.
    pub(crate) fn expired(&mut self) -> Option<([f64; 2], [Option<BucketSpec>; 2])> {
        let units = std::mem::take(&mut self.hand.expired);
        if units.iter().all(|u| *u <= 0.0) {
            return None;
        }
        Some((units, self.specs()))
    }

    /// Takes in what the fleet granted, then admits the request from it; or the wait the
    /// fleet said, and the limit it is for.
    pub(crate) fn granted(&mut self, grant: &LeaseGrant, now: Instant) -> Result<(), (Duration, Limit)> {
        // The fleet answers: the share goes, made anew from what it says next time it is away.
        self.share = None;
        for (seen, level) in self.seen.iter_mut().zip(grant.level) {
            if let Some(level) = level {
                *seen = Some((level, now));
            }
        }
        if let Some(wait) = grant.retry_in {
            return Err((wait, self.short_of(grant)));
        }
        self.hand.held[0] += grant.granted[0];
        self.hand.held[1] += grant.granted[1];
        self.hand.until = Some(now + SLICE_TTL);
        let pay = self.hand.owed.min(self.hand.held[1].max(0.0));
        self.hand.held[1] -= pay;
        self.hand.owed -= pay;
        // A grant meets the need it was asked for; only an expiry in between leaves it short.
        self.spend_hand(now).map_err(|ask| {
            let limit = if ask.need[0] > 0.0 { Limit::RequestsPerMinute } else { Limit::TokensPerMinute };
            (Duration::from_secs(1), limit)
        })
    }

    /// The limit the fleet could not grant a lease for: requests when the hand needed one
    /// and the fleet's bucket holds less, else tokens.
    fn short_of(&self, grant: &LeaseGrant) -> Limit {
        let requests_short = self.limits.requests_per_minute.is_some()
            && self.hand.held[0] < 1.0
            && grant.level[0].is_none_or(|level| level < 1.0);
        if requests_short { Limit::RequestsPerMinute } else { Limit::TokensPerMinute }
    }

    /// Charges the tokens an answer used, counted as `mode` says.
    pub(crate) fn charge(&mut self, tokens: f64, mode: Mode, now: Instant) {
        match mode {
            Mode::Alone => self.alone.charge(tokens, now),
            Mode::Share(replicas) => {
                self.share_of(replicas, now).charge(tokens, now);
                self.away[1] += tokens;
            }
            Mode::Fleet if self.limits.tokens_per_minute.is_some() => {
                let spent = tokens.min(self.hand.held[1].max(0.0));
                self.hand.held[1] -= spent;
                self.hand.owed += tokens - spent;
            }
            Mode::Fleet => {}
        }
    }
}

/// Why [`Limiter::admit`] did not admit at once.
#[derive(Debug)]
pub(crate) enum Step {
    /// Refused by this limit: the key may send again after the wait.
    Refuse(Duration, Limit),
    /// Lease this from the fleet first.
    Lease(Box<LeaseAsk>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: Option<u64>, tpm: Option<u64>) -> KeyLimits {
        KeyLimits { requests_per_minute: rpm, tokens_per_minute: tpm, max_concurrent: None }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_of_five_a_minute_sends_five_at_once_then_one_every_twelve_seconds() {
        let mut limiter = Limiter::new(limits(Some(5), None));
        for _ in 0..5 {
            assert!(limiter.admit(Mode::Alone, Instant::now()).is_ok());
        }
        let Err(Step::Refuse(wait, limit)) = limiter.admit(Mode::Alone, Instant::now()) else {
            panic!("refused")
        };
        assert_eq!((wait.as_secs_f64().round(), limit), (12.0, Limit::RequestsPerMinute));
        tokio::time::advance(Duration::from_secs(12)).await;
        assert!(limiter.admit(Mode::Alone, Instant::now()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_used_beyond_the_minute_hold_the_key_until_the_debt_is_paid() {
        let mut limiter = Limiter::new(limits(None, Some(600)));
        assert!(limiter.admit(Mode::Alone, Instant::now()).is_ok());
        limiter.charge(900.0, Mode::Alone, Instant::now());
        let Err(Step::Refuse(wait, limit)) = limiter.admit(Mode::Alone, Instant::now()) else {
            panic!("refused")
        };
        // 301 tokens short at 10 a second.
        assert_eq!((wait.as_secs_f64().ceil(), limit), (31.0, Limit::TokensPerMinute));
    }

    #[tokio::test(start_paused = true)]
    async fn out_of_the_fleets_reach_a_key_spends_its_share() {
        let mut limiter = Limiter::new(limits(Some(30), None));
        let admitted = (0..30).filter(|_| limiter.admit(Mode::Share(3), Instant::now()).is_ok()).count();
        assert_eq!(admitted, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn in_the_fleet_a_request_leases_when_its_hand_is_empty_and_spends_the_slice_after() {
        let mut limiter = Limiter::new(limits(Some(600), None));
        let Err(Step::Lease(ask)) = limiter.admit(Mode::Fleet, Instant::now()) else { panic!("a lease") };
        assert_eq!((ask.need[0], ask.want[0]), (1.0, 6.0));
        assert_eq!(ask.buckets[0], Some(BucketSpec { capacity: 600.0, per_sec: 10.0 }));
        let grant = LeaseGrant { granted: [6.0, 0.0, 0.0, 0.0, 0.0, 0.0], ..LeaseGrant::default() };
        assert!(limiter.granted(&grant, Instant::now()).is_ok());
        for _ in 0..5 {
            assert!(limiter.admit(Mode::Fleet, Instant::now()).is_ok(), "from the slice");
        }
        assert!(matches!(limiter.admit(Mode::Fleet, Instant::now()), Err(Step::Lease(_))));
        tokio::time::advance(SLICE_TTL).await;
        let grant = LeaseGrant { granted: [6.0, 0.0, 0.0, 0.0, 0.0, 0.0], ..LeaseGrant::default() };
        assert!(limiter.granted(&grant, Instant::now()).is_ok());
        tokio::time::advance(SLICE_TTL).await;
        assert!(matches!(limiter.admit(Mode::Fleet, Instant::now()), Err(Step::Lease(_))));
        let (units, buckets) = limiter.expired().expect("the unspent slice goes back");
        assert_eq!(units, [5.0, 0.0]);
        assert_eq!(buckets[1], None, "no tokens bucket to give to");
        assert!(limiter.expired().is_none(), "once");
        let refused = LeaseGrant { retry_in: Some(Duration::from_millis(100)), ..LeaseGrant::default() };
        let short = (Duration::from_millis(100), Limit::RequestsPerMinute);
        assert_eq!(limiter.granted(&refused, Instant::now()), Err(short));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_the_fleet_refused_names_the_limit_its_bucket_was_short_of() {
        let refused = |requests: f64, tokens: f64| LeaseGrant {
            retry_in: Some(Duration::from_secs(2)),
            level: [Some(requests), Some(tokens), None, None, None, None],
            ..LeaseGrant::default()
        };
        let short = |limiter: &mut Limiter, grant: &LeaseGrant| {
            assert!(matches!(limiter.admit(Mode::Fleet, Instant::now()), Err(Step::Lease(_))));
            limiter.granted(grant, Instant::now()).map_err(|(_, limit)| limit)
        };
        let mut both = Limiter::new(limits(Some(600), Some(6000)));
        assert_eq!(short(&mut both, &refused(0.2, 900.0)), Err(Limit::RequestsPerMinute));
        assert_eq!(short(&mut both, &refused(40.0, 0.5)), Err(Limit::TokensPerMinute));
        let mut tokens = Limiter::new(limits(None, Some(6000)));
        assert_eq!(short(&mut tokens, &refused(0.0, 0.5)), Err(Limit::TokensPerMinute), "no requests limit");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fleet_out_of_reach_is_no_new_minute_and_what_the_share_spent_is_the_fleets() {
        let mut limiter = Limiter::new(limits(Some(20), None));
        // The fleet's bucket is dry as its last answer says.
        assert!(matches!(limiter.admit(Mode::Fleet, Instant::now()), Err(Step::Lease(_))));
        let dry = LeaseGrant {
            retry_in: Some(Duration::from_secs(3)),
            level: [Some(0.0), None, None, None, None, None],
            ..LeaseGrant::default()
        };
        assert!(limiter.granted(&dry, Instant::now()).is_err());
        // Redis goes: the share of two replicas starts from that, not from 10 of a full minute.
        assert!(limiter.admit(Mode::Share(2), Instant::now()).is_err(), "nothing there yet");
        tokio::time::advance(Duration::from_secs(6)).await;
        // Two refilled in 6 s (20 a minute), one of them this replica's share.
        let admitted = (0..5).filter(|_| limiter.admit(Mode::Share(2), Instant::now()).is_ok()).count();
        assert_eq!(admitted, 1);
        // Redis is back: what the share spent is taken from the fleet's bucket, once.
        let Err(Step::Lease(ask)) = limiter.admit(Mode::Fleet, Instant::now()) else { panic!("a lease") };
        assert_eq!(
            ask.seen[0],
            Some(1.0),
            "where a fleet that lost the bucket starts it: two refilled, one spent"
        );
        let (units, buckets) = limiter.spent_away().expect("what the share spent");
        assert_eq!(units, [-1.0, 0.0]);
        assert_eq!(buckets[0].map(|b| b.capacity), Some(20.0));
        assert!(limiter.spent_away().is_none(), "once");
    }

    #[tokio::test(start_paused = true)]
    async fn leases_that_fail_while_the_fleet_is_deemed_up_spend_one_share() {
        // Each request asks the fleet (it is not yet known to be away), gets no answer, and is
        // counted in the share: the same share, not a new one each time.
        let mut limiter = Limiter::new(limits(Some(20), None));
        let mut admitted = 0;
        for _ in 0..20 {
            assert!(matches!(limiter.admit(Mode::Fleet, Instant::now()), Err(Step::Lease(_))));
            admitted += usize::from(limiter.admit(Mode::Share(2), Instant::now()).is_ok());
        }
        assert_eq!(admitted, 10, "a share of two replicas");
    }
}
