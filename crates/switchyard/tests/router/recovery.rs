//! A provider back from an outage is used again soon, with the default health settings, and
//! an open circuit is probed one call at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard::chat::{ChatRequest, ChatResponse};
use switchyard::provider::{BoxFuture, Call, ChunkStream, Provider};
use switchyard::route::Route;
use switchyard::simulated::{Latency, SimulatedProvider};
use switchyard::{ProviderEntry, ProviderError, Router};
use tokio::time::Instant;

use crate::support::*;

/// A simulated provider that counts its calls made while its circuit is not closed (probes):
/// `most` is the most of them in flight at once. `router` answers whether the circuit is
/// closed; it is set once the router is built, and cleared at the end (the router holds this
/// provider).
#[derive(Clone)]
struct Watched {
    sim: SimulatedProvider,
    router: Arc<Mutex<Option<Router>>>,
    probes: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Watched {
    fn new(sim: SimulatedProvider) -> Self {
        Self { sim, router: Arc::default(), probes: Arc::default(), most: Arc::default() }
    }

    /// Whether the circuit of `primary:m` is open or half-open now.
    fn probing(&self) -> bool {
        let router = self.router.lock().unwrap();
        router.as_ref().is_some_and(|r| r.target_health(&"primary:m".parse().unwrap()).breaker != "closed")
    }
}

/// Counts a probe out when it ends, however it ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Provider for Watched {
    fn kind(&self) -> &str {
        "watched"
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        let probe = self.probing().then(|| {
            let now = self.probes.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            InFlight(self.probes.clone())
        });
        Box::pin(async move {
            let _probe = probe;
            self.sim.chat(call, request).await
        })
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        self.sim.chat_stream(call, request)
    }
}

/// `primary:m`, failing with 503 for `outage` from now and healthy after, each call taking
/// 200 ms, then a healthy `fallback:m`, under the default route and health settings.
fn primary_down_for(outage: Duration) -> (Router, Watched) {
    let sim = SimulatedProvider::new()
        .latency(Latency::Fixed(Duration::from_millis(200)))
        .outage(Duration::ZERO, outage);
    let primary = Watched::new(sim);
    let router = Router::builder()
        .provider(ProviderEntry::new("primary", primary.clone()))
        .provider(ProviderEntry::new("fallback", SimulatedProvider::new()))
        .route(Route::builder("default").target("primary:m").target("fallback:m").build().unwrap())
        .build()
        .unwrap();
    (router, primary)
}

/// A request every 100 ms for `span`: when each started, and which target served it.
async fn steady_traffic(router: &Router, span: Duration) -> Vec<(Duration, String)> {
    let start = Instant::now();
    let mut requests = Vec::new();
    while start.elapsed() < span {
        let (router, at) = (router.clone(), start.elapsed());
        requests.push(tokio::spawn(async move {
            let answer = router.chat(&request("default")).await.expect("the fallback answers");
            (at, answer.served_by.to_string())
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut served = Vec::new();
    for request in requests {
        served.push(request.await.unwrap());
    }
    served
}

/// How long after `recovered` the primary served again, asserting it served every request
/// from then on but those sent while the call that brought it back (a probe) still ran.
fn back_after(served: &[(Duration, String)], recovered: Duration) -> Duration {
    let (back, _) = served
        .iter()
        .find(|(at, by)| *at >= recovered && by == "primary:m")
        .expect("the primary serves again");
    let after_the_probe = *back + Duration::from_millis(300);
    let later: Vec<&(Duration, String)> = served.iter().filter(|(at, _)| *at >= after_the_probe).collect();
    assert!(later.iter().all(|(_, by)| by == "primary:m"), "it keeps serving: {later:?}");
    *back - recovered
}

#[tokio::test(start_paused = true)]
async fn a_target_back_from_a_short_outage_serves_again_within_five_seconds() {
    let outage = Duration::from_secs(3);
    let (router, _) = primary_down_for(outage);

    let served = steady_traffic(&router, Duration::from_secs(20)).await;

    let back = back_after(&served, outage);
    assert!(back <= Duration::from_secs(5), "back {back:?} after its recovery");
    assert!(
        served.iter().any(|(at, by)| *at < outage && by == "fallback:m"),
        "the fallback served meanwhile"
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_back_from_a_long_outage_serves_again_within_thirty_seconds_probed_one_call_at_a_time() {
    let outage = Duration::from_secs(60);
    let (router, primary) = primary_down_for(outage);
    *primary.router.lock().unwrap() = Some(router.clone());

    let served = steady_traffic(&router, Duration::from_secs(120)).await;
    primary.router.lock().unwrap().take();

    let back = back_after(&served, outage);
    assert!(back <= Duration::from_secs(30), "back {back:?} after its recovery");
    assert_eq!(primary.most.load(Ordering::SeqCst), 1, "probes, and never two at once");
}

#[tokio::test(start_paused = true)]
async fn a_probe_slower_than_the_open_time_holds_its_slot_until_it_ends() {
    use switchyard::simulated::Step;
    let a = SimulatedProvider::new().script([
        Step::fail(switchyard::ErrorKind::Unavailable),
        Step::Delay(Duration::from_secs(20), Box::new(Step::Reply)),
    ]);
    let b = SimulatedProvider::new();
    let settings = switchyard::health::HealthSettings { failure_threshold: 1, ..Default::default() };
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1));
    let router = router_with(&[("a", &a), ("b", &b)], route, settings);

    router.chat(&request("default")).await.unwrap(); // opens the circuit for open_for, 5 s
    tokio::time::advance(Duration::from_secs(5)).await;
    let probe = tokio::spawn({
        let router = router.clone();
        async move { router.chat(&request("default")).await }
    });
    tokio::task::yield_now().await;
    // Past open_for, the probe still runs: no second probe goes.
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(1)).await;
        let other = router.chat(&request("default")).await.unwrap();
        assert_eq!(other.trail.attempts()[0].note.as_deref(), Some("circuit half-open: probe in flight"));
    }
    assert_eq!(probe.await.unwrap().unwrap().served_by.to_string(), "a:m");
    assert_eq!(a.calls(), 2);
}
