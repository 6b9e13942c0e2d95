//! What a key has used: its rate buckets, its requests in flight, its spend in the period,
//! and its usage this minute; and the admission of a request by it ([`ClientKey::admit`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use switchyard::Router;
use switchyard_pacing::fleet::FleetPacing;
use switchyard_state::RedisStore;
use switchyard_state::spend::SharedSpend;
use tokio::time::Instant;

use super::limiter::{Limiter, Mode, Step};
use super::spend::{Due, Spend, Then};
use super::{ClientKey, KeyRules, Limit, Period};

/// The fleet's Redis, when there is one: its leases (rates) and the spend it keeps.
#[derive(Clone, Copy, Default)]
pub(crate) struct Shared<'a> {
    pub store: Option<&'a Arc<RedisStore>>,
    pub spend: Option<&'a Arc<SharedSpend>>,
}

impl Shared<'_> {
    fn replicas(&self) -> usize {
        self.store.map_or(1, |s| FleetPacing::replicas(&**s))
    }

    /// This replica's share of a key's `max_concurrent` (at least 1).
    fn concurrent_share(&self, max: u32) -> u32 {
        (max / self.replicas() as u32).max(1)
    }

    /// How the rate limits count now.
    fn mode(&self) -> Mode {
        match self.store {
            None => Mode::Alone,
            Some(store) if store.shared() => Mode::Fleet,
            Some(_) => Mode::Share(self.replicas()),
        }
    }
}

/// Why a key's request was refused before any provider was called.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// The model is not among the key's `routes`.
    NotAllowed { routes: Vec<String> },
    /// Over its requests or tokens per minute, or its requests in flight.
    RateLimited { retry_after: Duration, limit: Limit },
    /// Its budget for the period is spent.
    Budget { spent: f64, usd: f64, per: Period, resets: SystemTime },
}

/// The requests and tokens of the last 60 seconds, a slot a second: what `/admin/keys` shows
/// beside limits that are buckets refilled as time passes (a fixed minute begun at a key's
/// first request showed 1 of 3 while the key was refused).
#[derive(Debug)]
struct Minute {
    origin: Instant,
    /// Each second's count, at its second's index modulo 60: (second, requests, tokens).
    slots: [(u64, u64, u64); 60],
}

impl Minute {
    fn new(origin: Instant) -> Self {
        Self { origin, slots: [(u64::MAX, 0, 0); 60] }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    /// Counts `requests` and `tokens` at `now`.
    fn add(&mut self, now: Instant, requests: u64, tokens: u64) {
        let second = self.second(now);
        let slot = &mut self.slots[(second % 60) as usize];
        if slot.0 != second {
            *slot = (second, 0, 0);
        }
        slot.1 += requests;
        slot.2 += tokens;
    }

    /// The requests and tokens of the 60 seconds up to `now`.
    fn totals(&self, now: Instant) -> (u64, u64) {
        let second = self.second(now);
        let recent =
            self.slots.iter().filter(|(at, _, _)| *at != u64::MAX && second.saturating_sub(*at) < 60);
        recent.fold((0, 0), |(requests, tokens), (_, r, t)| (requests + r, tokens + t))
    }
}

#[derive(Debug)]
struct Books {
    limiter: Limiter,
    spend: Spend,
    minute: Minute,
}

/// What one key has used; shared by the requests it sent, and handed on by a reload.
#[derive(Debug)]
pub(crate) struct Ledger {
    books: Mutex<Books>,
    in_flight: AtomicU32,
    /// How long a request of a key with `max_concurrent` holds its place, in ms, averaged
    /// (an exponential mean, an eighth a request; 0 before the first ended): a refusal's
    /// Retry-After, so that a client does not spend its retries while long streams run.
    held_ms: std::sync::atomic::AtomicU64,
    /// Wakes a spend write waiting to be sent again, once Redis answers a read.
    retry_now: tokio::sync::Notify,
}

impl Ledger {
    pub(crate) fn new(rules: &KeyRules) -> Self {
        let minute = Minute::new(Instant::now());
        let books = Books { limiter: Limiter::new(rules.limits), spend: Spend::default(), minute };
        Self {
            books: Mutex::new(books),
            in_flight: AtomicU32::new(0),
            held_ms: std::sync::atomic::AtomicU64::new(0),
            retry_now: tokio::sync::Notify::new(),
        }
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // Every change under this lock is a few numbers: a panic leaves nothing half-written.
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes on `rules` in place of `old`: the rate buckets start again when the limits
    /// changed; what is in flight and what was spent stay, the spend carried into a new `per`.
    pub(crate) fn reconfigure(&self, old: &KeyRules, rules: &KeyRules) {
        let mut books = self.books();
        if books.limiter.limits() != rules.limits {
            books.limiter = Limiter::new(rules.limits);
        }
        let (was, is) = (spend_period(old), spend_period(rules));
        if was != is {
            books.spend.per_changed(was, SystemTime::now());
        }
    }
}

/// `usd` in whole micro-dollars.
fn micro_dollars(usd: f64) -> i64 {
    (usd * 1e6).round() as i64
}

/// The period a key's spend is counted in: its budget's, else the UTC day (what a budget a
/// reload sets then finds spent).
fn spend_period(rules: &KeyRules) -> Period {
    rules.budget.map_or(Period::Day, |budget| budget.per)
}

/// An admitted request: holds its place among the key's requests in flight until dropped,
/// and charges what its answer used.
#[derive(Debug)]
pub(crate) struct Pass {
    key: Arc<ClientKey>,
    /// When it took its place, for a key with `max_concurrent`.
    since: Option<Instant>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        let ledger = &self.key.ledger;
        ledger.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(since) = self.since {
            let held = since.elapsed().as_millis().min(u128::from(u32::MAX)) as u64;
            let _ = ledger
                .held_ms
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |mean| Some(mean_with(mean, held)));
        }
    }
}

/// The mean time a place is held, `mean` (0: none yet) with a request that held it `held` ms:
/// an eighth of the way to it.
fn mean_with(mean: u64, held: u64) -> u64 {
    if mean == 0 { held.max(1) } else { (mean * 7 + held) / 8 }
}

/// The Retry-After of a refusal for `max_concurrent`: how long a place is held, on average,
/// between 1 s and a minute.
fn place_free_in(held_ms: u64) -> Duration {
    Duration::from_millis(held_ms).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

impl ClientKey {
    /// Admits a request for `model`, or says why not: a model outside `routes`, the budget
    /// spent, the requests in flight or the rate at their limit. No provider is called
    /// before this.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        model: &str,
        router: &Router,
        shared: Shared<'_>,
    ) -> Result<Pass, Refusal> {
        self.may_use(model, router)?;
        self.within_budget(shared).await?;
        let pass = self.enter(shared)?;
        self.within_rate(shared).await?;
        self.ledger.books().minute.add(Instant::now(), 1, 0);
        Ok(pass)
    }

    /// Admits a token count for `model`: the key's models and its requests in flight hold;
    /// its minute and budget do not, a count costing nothing.
    pub(crate) fn admit_count(
        self: &Arc<Self>,
        model: &str,
        router: &Router,
        shared: Shared<'_>,
    ) -> Result<Pass, Refusal> {
        self.may_use(model, router)?;
        self.enter(shared)
    }

    /// Refuses a model outside the key's `routes`, naming what it may use.
    fn may_use(&self, model: &str, router: &Router) -> Result<(), Refusal> {
        match self.rules.allows(model, router) {
            true => Ok(()),
            false => Err(Refusal::NotAllowed { routes: self.rules.routes.clone().unwrap_or_default() }),
        }
    }

    /// Takes a place among the key's requests in flight: its `max_concurrent`, or with
    /// shared state its share of it.
    fn enter(self: &Arc<Self>, shared: Shared<'_>) -> Result<Pass, Refusal> {
        let in_flight = self.ledger.in_flight.fetch_add(1, Ordering::AcqRel);
        let max = self.rules.limits.max_concurrent;
        let mut pass = Pass { key: self.clone(), since: max.map(|_| Instant::now()) };
        let Some(max) = max else { return Ok(pass) };
        let bound = shared.concurrent_share(max);
        if in_flight >= bound {
            // A refused request held no place: its time is not counted.
            pass.since = None;
            let retry_after = place_free_in(self.ledger.held_ms.load(Ordering::Acquire));
            return Err(Refusal::RateLimited { retry_after, limit: Limit::MaxConcurrent });
        }
        Ok(pass)
    }

    /// Refuses a request over the key's requests or tokens per minute.
    async fn within_rate(&self, shared: Shared<'_>) -> Result<(), Refusal> {
        let refuse = |(retry_after, limit)| Refusal::RateLimited { retry_after, limit };
        let mode = shared.mode();
        let (step, expired, away) = {
            let mut books = self.ledger.books();
            if !books.limiter.limits_rate() {
                return Ok(());
            }
            let step = books.limiter.admit(mode, Instant::now());
            // The fleet answers again: what the share spent meanwhile is taken from its buckets.
            let away = if mode == Mode::Fleet { books.limiter.spent_away() } else { None };
            (step, books.limiter.expired(), away)
        };
        let lane = || format!("key:{}", self.hash);
        if let Some(store) = shared.store {
            for (units, buckets) in [expired, away].into_iter().flatten() {
                store.give_back(&lane(), units, buckets);
            }
        }
        let ask = match step {
            Ok(()) => return Ok(()),
            Err(Step::Refuse(wait, limit)) => return Err(refuse((wait, limit))),
            Err(Step::Lease(ask)) => ask,
        };
        let Some(store) = shared.store else { return Ok(()) };
        let grant = FleetPacing::lease(&**store, &lane(), *ask).await;
        let mut books = self.ledger.books();
        let admitted = match grant {
            Some(grant) => books.limiter.granted(&grant, Instant::now()),
            // Out of the fleet's reach: the key's share.
            None => match books.limiter.admit(Mode::Share(shared.replicas()), Instant::now()) {
                Ok(()) => Ok(()),
                Err(Step::Refuse(wait, limit)) => Err((wait, limit)),
                Err(Step::Lease(_)) => Ok(()),
            },
        };
        admitted.map_err(refuse)
    }

    /// Refuses a request of a key whose budget for the period is spent, by the fleet's spend
    /// read again first when it is time to.
    async fn within_budget(&self, shared: Shared<'_>) -> Result<(), Refusal> {
        let Some(budget) = self.rules.budget else { return Ok(()) };
        let (spent, resets) = self.spend_now(budget.per, shared).await;
        // To the micro-dollar, as /admin/keys says it: ten answers of $0.10 add up to
        // 0.9999999999999999, which is the whole of a $1 budget.
        if micro_dollars(spent) >= micro_dollars(budget.usd) {
            return Err(Refusal::Budget { spent, usd: budget.usd, per: budget.per, resets });
        }
        Ok(())
    }
}

impl ClientKey {
    /// What the key spent in the period running and when it resets, for admitting a request:
    /// when the last read of the fleet's total is 200 ms old, it is read again first (a replica
    /// idle for a while would otherwise admit on what the fleet spent long ago), or in the
    /// background while Redis is failing, so that its timeouts do not hold every request.
    async fn spend_now(&self, per: Period, shared: Shared<'_>) -> (f64, SystemTime) {
        let (resets, read) = self.due_read(per, shared);
        if let Some(((reading, degraded), spend)) = read.zip(shared.spend) {
            // Its own task, awaited: a caller dropped meanwhile (its client gone, a scrape timed
            // out) leaves it to finish, else the read would stay marked under way for good. A
            // request waits one call's time at most (a connection still to make, two periods to
            // read, a Redis stalled): then it goes on what this replica knows, as while degraded.
            let reading = tokio::spawn(reading);
            if !degraded {
                let _ = tokio::time::timeout(spend.timeout(), reading).await;
            }
        }
        (self.ledger.books().spend.total(shared.replicas()), resets)
    }

    /// Reads the fleet's spend of a key with a budget again when a read is due, as admitting a
    /// request does: what `/admin/keys` and `/metrics` show next is the fleet's (a replica that
    /// just started, or never served the key, would else show nothing spent).
    pub(crate) async fn read_spend(&self, shared: Shared<'_>) {
        // A key without a budget only when this run spent: its spend is shown nowhere, and
        // read here only to be written again after Redis lost it.
        if self.rules.budget.is_some() || self.ledger.books().spend.spent_here() {
            self.spend_now(spend_period(&self.rules), shared).await;
        }
    }

    /// What the key spent as far as this replica knows, for what is shown: a read due goes on in
    /// the background.
    fn spend_known(&self, per: Period, shared: Shared<'_>) -> (f64, SystemTime) {
        let (resets, read) = self.due_read(per, shared);
        if let Some((reading, _)) = read {
            tokio::spawn(reading);
        }
        (self.ledger.books().spend.total(shared.replicas()), resets)
    }

    /// When the period resets, and the read of the fleet's total due now (with whether Redis's
    /// last answer failed).
    fn due_read(
        &self,
        per: Period,
        shared: Shared<'_>,
    ) -> (SystemTime, Option<(impl Future<Output = ()> + Send + 'static, bool)>) {
        let mut books = self.ledger.books();
        let resets = books.spend.roll(per, SystemTime::now()).resets;
        let period = shared.spend.and_then(|_| books.spend.read_due(std::time::Instant::now()));
        let (degraded, carried) = (books.spend.degraded(), books.spend.carried());
        drop(books);
        let read = period.zip(shared.spend).map(|(period, spend)| {
            let (ledger, hash, spend) = (self.ledger.clone(), self.hash.clone(), spend.clone());
            let reading = async move {
                if let Some(carried) = carried {
                    let answer = spend.get(&hash, &carried).await;
                    ledger.books().spend.carried_read(&carried, answer);
                }
                let answer = spend.get(&hash, &period).await;
                let (rewrite, waiting) = {
                    let mut books = ledger.books();
                    let rewrite = books.spend.read(&period, answer);
                    (rewrite, books.spend.awaits_retry() && !books.spend.degraded())
                };
                // Redis answers again: the write waiting on its backoff goes now.
                if waiting {
                    ledger.retry_now.notify_one();
                }
                if let Some(due) = rewrite {
                    write(ledger, hash, spend, due);
                }
            };
            (reading, degraded)
        });
        (resets, read)
    }
}

impl Pass {
    /// Charges what the request's answer used: its tokens to the rate, its cost to the
    /// budget (sent to the fleet's Redis in the background).
    pub(crate) fn charge(&self, tokens: u64, usd: Option<f64>, shared: Shared<'_>) {
        let key = &self.key;
        let mode = shared.mode();
        let mut books = key.ledger.books();
        books.minute.add(Instant::now(), 0, tokens);
        if tokens > 0 {
            books.limiter.charge(tokens as f64, mode, Instant::now());
        }
        // Counted with a budget or without: one set by a reload counts what was spent before.
        let Some(usd) = usd.filter(|usd| *usd > 0.0) else { return };
        books.spend.roll(spend_period(&key.rules), SystemTime::now());
        books.spend.charge(usd);
        let due = shared.spend.and_then(|_| books.spend.write_due());
        drop(books);
        if let (Some(due), Some(spend)) = (due, shared.spend) {
            write(key.ledger.clone(), key.hash.clone(), spend.clone(), due);
        }
    }
}

/// The first wait before a failed write of the spend is sent again; it doubles up to
/// [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// Writes this run's spend to Redis until Redis holds it all: `due`, then what was charged
/// meanwhile, and after a failure the total as it is then, again and again while the period
/// lasts. Only one writer a key runs (the books hold the write); a total sent twice counts once.
fn write(ledger: Arc<Ledger>, hash: Arc<str>, spend: Arc<SharedSpend>, due: Due) {
    tokio::spawn(async move {
        let mut due = due;
        let mut wait = RETRY_FIRST;
        loop {
            let ends = due.resets.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
            let answer = spend.put(&hash, &due.period, due.usd, ends).await;
            let then = ledger.books().spend.written(&due, answer);
            due = match then {
                Then::Done => return,
                Then::Write(next) => {
                    wait = RETRY_FIRST;
                    next
                }
                Then::Retry => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = ledger.retry_now.notified() => {}
                    }
                    wait = (wait * 2).min(RETRY_AT_MOST);
                    match ledger.books().spend.retry(&due.period) {
                        Some(again) => again,
                        None => return,
                    }
                }
            };
        }
    });
}

impl ClientKey {
    /// The key as `/admin/keys` shows it: its label, rules, usage this minute, requests in
    /// flight, and its spend, budget and reset. Never the key.
    pub(crate) fn view(&self, shared: Shared<'_>) -> Value {
        let limits = self.rules.limits;
        let usage = {
            let (requests, tokens) = self.ledger.books().minute.totals(Instant::now());
            let mut usage = json!({
                "requests_this_minute": requests,
                "tokens_this_minute": tokens,
                "in_flight": self.ledger.in_flight.load(Ordering::Acquire),
            });
            // In a fleet, what this replica counted, and its share of the requests in flight
            // (the minute's limits are the fleet's, enforced through Redis).
            if shared.store.is_some() {
                usage["scope"] = json!("replica");
                if let Some(max) = limits.max_concurrent {
                    usage["max_concurrent_here"] = json!(shared.concurrent_share(max));
                }
            }
            usage
        };
        // Dollars to the micro-dollar: sums of prices carry float noise (0.08600000000000001).
        let micros = |usd: f64| micro_dollars(usd) as f64 / 1e6;
        let budget = self.rules.budget.map(|budget| {
            let (spent, resets) = self.spend_known(budget.per, shared);
            json!({
                "usd": budget.usd,
                "per": budget.per.as_str(),
                "spent_usd": micros(spent),
                "remaining_usd": micros((budget.usd - spent).max(0.0)),
                "resets_at": crate::logging::rfc3339(resets),
            })
        });
        json!({
            "name": &*self.label,
            "named": self.named,
            "routes": self.rules.routes,
            "limits": {
                "requests_per_minute": limits.requests_per_minute,
                "tokens_per_minute": limits.tokens_per_minute,
                "max_concurrent": limits.max_concurrent,
            },
            "usage": usage,
            "budget": budget,
        })
    }

    /// What the key spent in its period as this replica knows it, when it has a budget.
    pub(crate) fn spent(&self, shared: Shared<'_>) -> Option<f64> {
        Some(self.spend_known(self.rules.budget?.per, shared).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_requests_in_flight_asks_to_come_back_when_a_place_is_usually_free() {
        // Streams of about 30 s: a client told "1 s" would spend its retries while they run.
        let mut mean = 0;
        for held in [30_000, 28_000, 32_000, 30_000] {
            mean = mean_with(mean, held);
        }
        assert!((29_000..=31_000).contains(&mean), "{mean}");
        assert_eq!(place_free_in(mean).as_secs(), mean / 1000);
        // One long request moves it an eighth of the way, not all.
        assert_eq!(mean_with(10_000, 90_000), 20_000);
        // Short requests, or none ended yet: a second; never more than a minute.
        assert_eq!(place_free_in(0), Duration::from_secs(1));
        assert_eq!(place_free_in(120), Duration::from_secs(1));
        assert_eq!(place_free_in(600_000), Duration::from_secs(60));
    }

    #[test]
    fn the_minute_shown_is_the_last_sixty_seconds_wherever_the_first_request_fell() {
        let origin = Instant::now();
        let at = |seconds: u64| origin + Duration::from_secs(seconds);
        let mut minute = Minute::new(origin);
        minute.add(at(0), 1, 10);
        minute.add(at(30), 2, 0);
        minute.add(at(30), 0, 5);
        assert_eq!(minute.totals(at(59)), (3, 15));
        assert_eq!(minute.totals(at(61)), (2, 5), "the first second has gone by");
        // The slot of second 90 is second 30's: reused, not added to.
        minute.add(at(90), 1, 0);
        assert_eq!(minute.totals(at(90)), (1, 0));
        assert_eq!(minute.totals(at(200)), (0, 0));
    }
}
