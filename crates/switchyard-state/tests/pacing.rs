//! The fleet's pacing buckets in a real Redis: what the lease, report and return scripts
//! grant, lower, open and hold, and what other replicas hear of it.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use support::{PROPAGATION, eventually, redis_replica};
use switchyard_pacing::fleet::{
    BucketSpec, DIMENSIONS, FleetPacing, FleetReport, FleetSink, HEADERS, LeaseAsk, RPM, StatedReport, TPM,
};
use switchyard_state::testing::RedisServer;

/// What a replica's lanes were told by the fleet.
#[derive(Default)]
struct Heard {
    holds: Mutex<Vec<(String, Duration)>>,
    opened: Mutex<Vec<(String, usize)>>,
    surrendered: Mutex<u32>,
}

impl FleetSink for Heard {
    fn held(&self, lane: &str, hold: Duration) {
        self.holds.lock().unwrap().push((lane.to_owned(), hold));
    }
    fn window_opened(&self, lane: &str, header: usize) {
        self.opened.lock().unwrap().push((lane.to_owned(), header));
    }
    fn surrender(&self) {
        *self.surrendered.lock().unwrap() += 1;
    }
}

/// 300 a minute: 5 a second, a burst of 5.
const RPM_300: BucketSpec = BucketSpec { capacity: 5.0, per_sec: 5.0 };

fn ask(need: f64, want: f64) -> LeaseAsk {
    bucket_ask(RPM_300, need, want, None)
}

fn headers_ask(need: f64, want: f64) -> LeaseAsk {
    let mut ask =
        LeaseAsk { need: [0.0; DIMENSIONS], want: [0.0; DIMENSIONS], buckets: [None, None], seen: [None; 2] };
    ask.need[HEADERS] = need;
    ask.want[HEADERS] = want;
    ask
}

fn requests_stated(limit: Option<u64>, left: f64, reset: Option<Duration>) -> FleetReport {
    let mut report = FleetReport::default();
    report.stated[0] = Some(StatedReport { limit, remaining: left, reset_in: reset, uncounted: 0.0 });
    report
}

/// The answer to a call that took no unit of the fleet's requests window (its replica did
/// not know the window yet): `left` of 10, the window resetting in 30 s.
fn uncounted_call_stated(left: f64) -> FleetReport {
    let mut report = requests_stated(Some(10), left, Some(Duration::from_secs(30)));
    if let Some(stated) = report.stated[0].as_mut() {
        stated.uncounted = 1.0;
    }
    report
}

#[tokio::test]
async fn replicas_lease_slices_of_one_bucket_and_wait_when_it_is_dry() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await;
    let b = redis_replica(&server, "b", |_| {}).await;
    let (a, b) = (a.store.unwrap(), b.store.unwrap());

    let first = a.lease("up", ask(1.0, 3.0)).await.expect("the fleet answers");
    assert_eq!(first.granted[RPM], 3.0, "a slice of 3 from a full bucket of 5");
    let second = b.lease("up", ask(1.0, 3.0)).await.unwrap();
    assert!(second.granted[RPM] >= 2.0 && second.granted[RPM] < 2.5, "what is left: {second:?}");
    let dry = a.lease("up", ask(1.0, 3.0)).await.unwrap();
    assert_eq!(dry.granted, [0.0; DIMENSIONS], "nothing when the need cannot be met");
    let retry = dry.retry_in.expect("and when it could be");
    assert!(retry <= Duration::from_millis(200) && retry >= Duration::from_millis(50), "{retry:?}");
    // A prefetch (no need) takes what there is, nothing here.
    let prefetch = b.lease("up", ask(0.0, 3.0)).await.unwrap();
    assert!(prefetch.granted[RPM] < 1.0, "{prefetch:?}");
    assert!(prefetch.retry_in.is_none());

    // Units given back are there for the next lease (the replica's calls go in order);
    // another lane's bucket is its own.
    a.give_back("up", [2.0, 0.0], [Some(RPM_300), None]);
    let again = a.lease("up", ask(1.0, 3.0)).await.unwrap();
    assert!(again.granted[RPM] >= 2.0, "{again:?}");
    let other = b.lease("other", ask(1.0, 3.0)).await.unwrap();
    assert_eq!(other.granted[RPM], 3.0);
}

#[tokio::test]
async fn a_need_larger_than_the_bucket_is_met_once_it_is_full() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let tokens = BucketSpec { capacity: 1_000.0, per_sec: 1_000.0 };
    let mut big = LeaseAsk {
        need: [0.0; DIMENSIONS],
        want: [0.0; DIMENSIONS],
        buckets: [None, Some(tokens)],
        seen: [None; 2],
    };
    big.need[TPM] = 2_500.0;
    big.want[TPM] = 2_500.0;
    let grant = a.lease("up", big.clone()).await.unwrap();
    assert_eq!(grant.granted[TPM], 2_500.0, "into debt, as the local bucket does");
    assert!(grant.level[TPM].unwrap() < -1_000.0, "{grant:?}");
    let after = a.lease("up", big).await.unwrap();
    assert_eq!(after.granted[TPM], 0.0);
    assert!(after.retry_in.unwrap() > Duration::from_millis(1_000), "the debt is paid back first: {after:?}");
}

#[tokio::test]
async fn a_reported_header_window_is_announced_leased_and_only_lowered_while_it_runs() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let b = redis_replica(&server, "b", |_| {}).await.store.unwrap();
    let heard = Arc::new(Heard::default());
    b.watch(Arc::downgrade(&heard) as Weak<dyn FleetSink>);

    // No window yet: a header lease is not paced by the fleet.
    let none = b.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
    assert_eq!(none.level[HEADERS], None);
    assert!(none.windows[0].is_none());

    a.report("up", requests_stated(Some(10), 4.0, Some(Duration::from_secs(30))));
    eventually("b hears of the window", PROPAGATION, || !heard.opened.lock().unwrap().is_empty()).await;
    assert_eq!(heard.opened.lock().unwrap()[0], ("up".to_owned(), 0));

    let grant = b.lease("up", headers_ask(1.0, 3.0)).await.unwrap();
    assert_eq!(grant.granted[HEADERS], 3.0);
    assert_eq!(grant.level[HEADERS], Some(1.0));
    let window = grant.windows[0].unwrap();
    assert_eq!(window.limit, Some(10));
    assert!(window.ends_in > Duration::from_secs(29), "{window:?}");

    // A report of more left does not raise the count; one of less lowers it.
    a.report("up", requests_stated(Some(10), 8.0, Some(Duration::from_secs(30))));
    a.report("up", requests_stated(Some(10), 0.0, Some(Duration::from_secs(30))));
    let spent = a.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
    assert_eq!(spent.granted[HEADERS], 0.0, "{spent:?}");
    assert_eq!(spent.level[HEADERS], Some(0.0));
    assert!(spent.retry_in.unwrap() > Duration::from_secs(29), "until the window resets: {spent:?}");
    assert_eq!(heard.opened.lock().unwrap().len(), 1, "lowering a running window is not news");
}

#[tokio::test]
async fn a_window_that_reset_lets_one_probe_go_until_an_answer_states_the_next() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let b = redis_replica(&server, "b", |_| {}).await.store.unwrap();
    // A spent window that ends at once (the fleet adds its 10 ms margin): a lease finds it
    // reset soon after.
    a.report("up", requests_stated(Some(10), 0.0, Some(Duration::ZERO)));
    let started = std::time::Instant::now();
    let probe = loop {
        let grant = a.lease("up", headers_ask(1.0, 3.0)).await.unwrap();
        if grant.granted[HEADERS] > 0.0 {
            break grant;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "the window resets: {grant:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert!(started.elapsed() >= Duration::from_millis(9), "not before the margin");
    assert_eq!(probe.granted[HEADERS], 1.0, "one probe, not the whole limit");
    assert!(probe.windows[0].unwrap().probe, "{probe:?}");
    let other = b.lease("up", headers_ask(1.0, 3.0)).await.unwrap();
    assert_eq!(other.granted[HEADERS], 0.0, "the others wait for its answer: {other:?}");
    // The probe's answer opens the next window with what it says.
    let heard = Arc::new(Heard::default());
    b.watch(Arc::downgrade(&heard) as Weak<dyn FleetSink>);
    a.report("up", requests_stated(Some(10), 9.0, Some(Duration::from_secs(30))));
    eventually("b hears the next window opened", PROPAGATION, || !heard.opened.lock().unwrap().is_empty())
        .await;
    let next = b.lease("up", headers_ask(1.0, 3.0)).await.unwrap();
    assert_eq!(next.granted[HEADERS], 3.0);
    assert_eq!(next.level[HEADERS], Some(6.0));
    assert!(!next.windows[0].unwrap().probe);
}

#[tokio::test]
async fn a_429_hold_reaches_every_replica_and_stops_leasing() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let b = redis_replica(&server, "b", |_| {}).await.store.unwrap();
    let heard = Arc::new(Heard::default());
    b.watch(Arc::downgrade(&heard) as Weak<dyn FleetSink>);
    let mine = Arc::new(Heard::default());
    a.watch(Arc::downgrade(&mine) as Weak<dyn FleetSink>);

    a.report("up", FleetReport { hold: Some(Duration::from_secs(20)), ..FleetReport::default() });
    eventually("b is told of the hold", PROPAGATION, || !heard.holds.lock().unwrap().is_empty()).await;
    let (lane, hold) = heard.holds.lock().unwrap()[0].clone();
    assert_eq!(lane, "up");
    assert!(hold > Duration::from_secs(19) && hold <= Duration::from_secs(20), "{hold:?}");
    let held = b.lease("up", ask(1.0, 3.0)).await.unwrap();
    assert_eq!(held.granted, [0.0; DIMENSIONS]);
    assert!(held.hold.unwrap() > Duration::from_secs(19));
    assert!(mine.holds.lock().unwrap().is_empty(), "a replica is not told its own news");
}

#[tokio::test]
async fn out_of_reach_a_lease_is_refused_at_once_and_the_store_says_so() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    assert!(a.shared());
    server.stall();
    // Each lease waits at most the timeout, and after three the store is degraded (once the
    // third call, which began a moment after its caller's wait, has timed out too).
    for _ in 0..3 {
        assert_eq!(a.lease("up", ask(1.0, 3.0)).await, None);
    }
    eventually("degraded: lanes pace at their share", Duration::from_secs(1), || !a.shared()).await;
    assert_eq!(a.replicas(), 1, "the last known fleet size");
    let started = std::time::Instant::now();
    assert_eq!(a.lease("up", ask(1.0, 3.0)).await, None);
    assert!(started.elapsed() < Duration::from_millis(50), "no call to a Redis known away");
    server.resume();
    eventually("the store is back", Duration::from_secs(5), || a.shared()).await;
    assert!(a.lease("up", ask(1.0, 3.0)).await.is_some());
}

#[tokio::test]
async fn behind_a_stalled_redis_each_lease_waits_one_timeout_and_a_lease_given_up_keeps_nothing() {
    // A bucket that hardly refills: what a lease took stays taken.
    const SLOW: BucketSpec = BucketSpec { capacity: 5.0, per_sec: 0.001 };
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let a = redis_replica(&server, "a", |s| {
        s.timeout = timeout;
        s.failures_to_degrade = 10;
    })
    .await
    .store
    .unwrap();
    server.stall();
    let started = std::time::Instant::now();
    let leases: Vec<_> =
        (0..4).map(|_| tokio::spawn(a.lease("slow", bucket_ask(SLOW, 1.0, 1.0, None)))).collect();
    for lease in leases {
        assert_eq!(lease.await.unwrap(), None);
    }
    let waited = started.elapsed();
    assert!(waited < timeout * 2, "each waited one timeout, not the calls ahead of it: {waited:?}");
    assert!(a.shared(), "still shared: one failed call is not an outage");

    // Redis answers again: of the four leases given up, only the one the link had sent when
    // Redis stalled may have taken its unit (it runs when Redis wakes); the others were never
    // asked.
    server.resume();
    let mut left = None;
    for _ in 0..10 {
        left = a.lease("slow", bucket_ask(SLOW, 4.0, 5.0, None)).await;
        if left.is_some() {
            break;
        }
    }
    assert!(left.expect("Redis answers").granted[RPM] >= 4.0);
}

#[tokio::test]
async fn a_changed_limit_is_a_bucket_of_its_own_and_replicas_on_both_gain_nothing_by_turns() {
    // A key's minute: 2, then raised to 10 by a reload, then back (refilling a unit in 30 s or 6 s).
    const TWO: BucketSpec = BucketSpec { capacity: 2.0, per_sec: 2.0 / 60.0 };
    const TEN: BucketSpec = BucketSpec { capacity: 10.0, per_sec: 10.0 / 60.0 };
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let granted = |grant: Option<switchyard_pacing::fleet::LeaseGrant>| grant.unwrap().granted[RPM].floor();
    assert_eq!(granted(a.lease("key:k", bucket_ask(TWO, 2.0, 2.0, None)).await), 2.0);
    assert_eq!(granted(a.lease("key:k", bucket_ask(TWO, 0.0, 1.0, None)).await), 0.0, "the minute is spent");
    assert_eq!(
        granted(a.lease("key:k", bucket_ask(TEN, 0.0, 10.0, None)).await),
        10.0,
        "the raise: a new bucket"
    );

    // Replicas still on the old limit and on the new, taking turns: each drains its own.
    for _ in 0..3 {
        assert_eq!(granted(a.lease("key:k", bucket_ask(TWO, 0.0, 2.0, None)).await), 0.0);
        assert_eq!(granted(a.lease("key:k", bucket_ask(TEN, 0.0, 10.0, None)).await), 0.0);
    }
    // Lowered to 5 on a busy lane: a bucket of 5, not a debt of the 10 it had.
    let five = BucketSpec { capacity: 5.0, per_sec: 5.0 / 60.0 };
    assert_eq!(granted(a.lease("key:k", bucket_ask(five, 1.0, 5.0, None)).await), 5.0);
}

#[tokio::test]
async fn closing_surrenders_the_lanes_slices_then_leaves() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let heard = Arc::new(Heard::default());
    a.watch(Arc::downgrade(&heard) as Weak<dyn FleetSink>);
    a.close().await;
    assert_eq!(*heard.surrendered.lock().unwrap(), 1);
    let members = server.cli(&["SMEMBERS", "switchyard:replicas"]);
    assert!(!members.contains('a'), "{members}");
}

fn tokens_ask(need: f64, want: f64) -> LeaseAsk {
    let mut ask =
        LeaseAsk { need: [0.0; DIMENSIONS], want: [0.0; DIMENSIONS], buckets: [None, None], seen: [None; 2] };
    ask.need[HEADERS + 1] = need;
    ask.want[HEADERS + 1] = want;
    ask
}

#[tokio::test]
async fn a_token_window_that_reset_lets_a_call_of_any_size_go_and_a_call_larger_than_it_goes_when_full() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let mut report = FleetReport::default();
    report.stated[1] = Some(StatedReport {
        limit: Some(1_000),
        remaining: 0.0,
        reset_in: Some(Duration::ZERO),
        uncounted: 0.0,
    });
    a.report("up", report);
    let started = std::time::Instant::now();
    let probe = loop {
        let grant = a.lease("up", tokens_ask(2_500.0, 2_500.0)).await.unwrap();
        if grant.granted[HEADERS + 1] > 0.0 {
            break grant;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "the window resets: {grant:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    // 2,500 estimated against a window of 1,000: it goes when the window is full.
    assert_eq!(probe.granted[HEADERS + 1], 2_500.0, "{probe:?}");
    assert!(probe.windows[1].unwrap().probe);
}

#[tokio::test]
async fn a_hold_outlives_the_lanes_hash_expiry() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    a.report("up", FleetReport { hold: Some(Duration::from_secs(600)), ..FleetReport::default() });
    assert!(a.lease("up", ask(1.0, 3.0)).await.unwrap().hold.is_some());
    let ttl: u64 = server.cli(&["PTTL", "switchyard:pace:up"]).trim().parse().unwrap();
    assert!(ttl > 600_000, "the hash lives past its hold: {ttl} ms");
}

#[tokio::test]
async fn after_closing_the_store_asks_redis_nothing_more() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    a.close().await;
    assert!(!a.shared(), "pacing falls back to its share");
    assert_eq!(a.lease("up", ask(1.0, 3.0)).await, None);
}

#[tokio::test]
async fn a_late_answer_of_a_closed_window_opens_nothing_and_requests_on_their_way_are_counted() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let b = redis_replica(&server, "b", |_| {}).await.store.unwrap();
    // A window that ends at once; a lease then closes it and takes the probe.
    a.report("up", requests_stated(Some(10), 5.0, Some(Duration::ZERO)));
    let started = std::time::Instant::now();
    loop {
        let grant = a.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
        if grant.windows[0].is_some_and(|w| w.probe) {
            assert_eq!(grant.granted[HEADERS], 1.0, "the probe");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "the window closes: {grant:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // An answer of the closed window arrives late (its reset already past that window's end):
    // it opens nothing, and b still waits for the probe's answer.
    b.report("up", requests_stated(Some(10), 4.0, Some(Duration::ZERO)));
    let waiting = b.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
    assert_eq!(waiting.granted[HEADERS], 0.0, "{waiting:?}");
    assert!(waiting.windows[0].unwrap().probe);
}

#[tokio::test]
async fn a_call_the_fleet_did_not_count_is_taken_from_the_running_window_its_answer_reaches() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let c = redis_replica(&server, "c", |_| {}).await.store.unwrap();
    // a's first call went before any window was known: its answer opens one, 9 of 10 left.
    a.report("up", uncounted_call_stated(9.0));
    let first = a.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
    assert_eq!(first.level[HEADERS], Some(8.0), "a unit leased: {first:?}");
    // c's first call also went before c heard of the window. The provider counted it after
    // a's and before the leased one, so its answer says 8 left; it reaches the fleet after the
    // lease. The provider now has 7 left (a's, c's and the leased call of 10), not 8.
    c.report("up", uncounted_call_stated(8.0));
    let rest = c.lease("up", headers_ask(1.0, 10.0)).await.unwrap();
    assert_eq!(rest.granted[HEADERS], 7.0, "{rest:?}");
    assert_eq!(rest.level[HEADERS], Some(0.0));
}

#[tokio::test]
async fn a_window_opened_by_a_call_the_fleet_did_not_count_counts_every_request_granted_since_the_last_closed()
 {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let c = redis_replica(&server, "c", |_| {}).await.store.unwrap();
    // A window that ends at once; a lease then closes it and takes the probe.
    a.report("up", requests_stated(Some(10), 5.0, Some(Duration::ZERO)));
    let started = std::time::Instant::now();
    loop {
        let grant = a.lease("up", headers_ask(1.0, 1.0)).await.unwrap();
        if grant.windows[0].is_some_and(|w| w.probe) {
            assert_eq!(grant.granted[HEADERS], 1.0, "the probe");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "the window closes: {grant:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // c's call went without the fleet's units and reached the provider first in its next
    // window: its answer opens it, and the probe, not this answer, is still on its way.
    c.report("up", uncounted_call_stated(9.0));
    let next = c.lease("up", headers_ask(1.0, 10.0)).await.unwrap();
    assert!(!next.windows[0].unwrap().probe, "{next:?}");
    assert_eq!(next.granted[HEADERS], 8.0, "9 left less the probe on its way: {next:?}");
}

#[tokio::test]
async fn a_replica_waiting_for_a_unit_gets_the_next_one_before_another_replicas_prefetch() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    let b = redis_replica(&server, "b", |_| {}).await.store.unwrap();
    // 120 a minute: 2 a second, a burst of 2.
    let slow = BucketSpec { capacity: 2.0, per_sec: 2.0 };
    let ask = |need: f64, want: f64| bucket_ask(slow, need, want, None);
    assert_eq!(a.lease("up", ask(1.0, 2.0)).await.unwrap().granted[RPM], 2.0, "a drains the bucket");
    let waiting = b.lease("up", ask(1.0, 2.0)).await.unwrap();
    let retry = waiting.retry_in.expect("b waits for a unit");

    // Meanwhile a, busy, keeps asking for its next slice as units trickle in: the unit b waits
    // for is not a's, only what refills beyond it.
    let until = std::time::Instant::now() + retry + Duration::from_millis(100);
    let mut to_a = 0.0;
    while std::time::Instant::now() < until {
        to_a += a.lease("up", ask(0.0, 2.0)).await.unwrap().granted[RPM];
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(to_a < 0.5, "a took the refill b waited for: {to_a}");
    let served = b.lease("up", ask(1.0, 2.0)).await.unwrap();
    assert!(served.granted[RPM] >= 1.0, "b is served when it comes back: {served:?}");
    // Served, b holds nothing back: a's next prefetch takes what refills.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.lease("up", ask(0.0, 2.0)).await.unwrap().granted[RPM] > 0.0);
}

#[tokio::test]
async fn a_bucket_redis_lost_starts_where_the_replica_last_saw_it_not_full() {
    let server = RedisServer::start();
    let a = redis_replica(&server, "a", |_| {}).await.store.unwrap();
    // A minute's bucket of 20 a replica last saw holding 1 (Redis restarted empty since).
    let minute = BucketSpec { capacity: 20.0, per_sec: 20.0 / 60.0 };
    let grant = a.lease("key:lost", bucket_ask(minute, 1.0, 5.0, Some(1.0))).await.unwrap();
    assert!(grant.granted[RPM] >= 1.0 && grant.granted[RPM] < 1.1, "{grant:?}");
    // Once the bucket is in Redis again, what it holds counts, whatever a replica saw.
    assert_eq!(
        a.lease("key:lost", bucket_ask(minute, 1.0, 5.0, Some(20.0))).await.unwrap().granted[RPM],
        0.0
    );
    // What a replica gives back to a bucket Redis lost makes it no bucket: the lease after it
    // still starts it where the replica saw it.
    a.give_back("key:lost-again", [-3.0, 0.0], [Some(minute), None]);
    let grant = a.lease("key:lost-again", bucket_ask(minute, 1.0, 5.0, Some(1.0))).await.unwrap();
    assert!(grant.granted[RPM] >= 1.0 && grant.granted[RPM] < 1.1, "{grant:?}");
    // A bucket never seen starts full.
    assert_eq!(a.lease("key:new", bucket_ask(minute, 1.0, 5.0, None)).await.unwrap().granted[RPM], 5.0);
}

/// A lease of `need` and `want` requests from `bucket`, which the replica last saw at `seen`.
fn bucket_ask(bucket: BucketSpec, need: f64, want: f64, seen: Option<f64>) -> LeaseAsk {
    let mut ask = LeaseAsk {
        need: [0.0; DIMENSIONS],
        want: [0.0; DIMENSIONS],
        buckets: [Some(bucket), None],
        seen: [seen, None],
    };
    (ask.need[RPM], ask.want[RPM]) = (need, want);
    ask
}
