//! Hedged requests: a second attempt beside a slow first one, the first answer served.

use std::time::Duration;

use futures_util::StreamExt;
use switchyard::route::{Hedge, Route};
use switchyard::simulated::{Latency, SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, RequestOptions};
use tokio::time::Instant;

use crate::support::*;

fn slow(ms: u64) -> SimulatedProvider {
    SimulatedProvider::new().latency(Latency::Fixed(Duration::from_millis(ms)))
}

/// A route over `primary:m` then `backup:m`, hedged after 300 ms with room for every request.
fn hedged(primary: &SimulatedProvider, backup: &SimulatedProvider, max_share: f64) -> switchyard::Router {
    let hedge = Hedge { max_share, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(1)).hedge(hedge);
    router(&[("primary", primary), ("backup", backup)], route)
}

fn outcomes(trail: &switchyard::trail::Trail) -> Vec<(String, Outcome, bool)> {
    trail.attempts().iter().map(|a| (a.via.to_string(), a.outcome, a.hedge)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_attempt_is_hedged_at_the_delay_and_the_first_answer_wins() {
    let (primary, backup) = (slow(2000), slow(50));
    let router = hedged(&primary, &backup, 1.0);
    let mut events = router.subscribe();
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    // The hedge started at 300 ms and answered 50 ms later; the first attempt was dropped.
    assert_eq!(start.elapsed(), Duration::from_millis(350));
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(
        outcomes(&answer.trail),
        [("primary:m".into(), Outcome::Cancelled, false), ("backup:m".into(), Outcome::Ok, true)]
    );
    assert_eq!(answer.trail.attempts()[1].started, Duration::from_millis(300));
    let names = event_names(&mut events);
    assert!(names.contains(&"hedge_started") && names.contains(&"hedge_won"), "{names:?}");
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_answers_before_the_delay_is_not_hedged() {
    let (primary, backup) = (slow(299), slow(50));
    let router = hedged(&primary, &backup, 1.0);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "primary:m");
    assert_eq!(backup.calls(), 0);
    assert_eq!(answer.trail.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_wins_when_it_answers_first_and_the_hedge_is_cancelled() {
    let (primary, backup) = (slow(400), slow(500));
    let router = hedged(&primary, &backup, 1.0);
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(400));
    assert_eq!(answer.served_by.to_string(), "primary:m");
    assert_eq!(
        outcomes(&answer.trail),
        [("primary:m".into(), Outcome::Ok, false), ("backup:m".into(), Outcome::Cancelled, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_hedge_leaves_the_first_attempt_running() {
    let primary = slow(1000);
    let backup = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let router = hedged(&primary, &backup, 1.0);
    let mut events = router.subscribe();
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
    assert_eq!(answer.served_by.to_string(), "primary:m");
    assert_eq!(
        outcomes(&answer.trail),
        [("primary:m".into(), Outcome::Ok, false), ("backup:m".into(), Outcome::Failed, true)]
    );
    // The hedge's failure is announced as any failure is, though the first attempt answered.
    let names = event_names(&mut events);
    assert!(names.contains(&"attempt_failed"), "{names:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failing_first_attempt_leaves_the_hedge_to_answer() {
    let primary = slow(500).script([Step::fail(ErrorKind::Unavailable)]);
    let backup = slow(400);
    let router = hedged(&primary, &backup, 1.0);
    let mut events = router.subscribe();
    let start = Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    // The first failed at 500 ms; the hedge, started at 300, answered at 700.
    assert_eq!(start.elapsed(), Duration::from_millis(700));
    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(
        outcomes(&answer.trail),
        [("primary:m".into(), Outcome::Failed, false), ("backup:m".into(), Outcome::Ok, true)]
    );
    assert_eq!(backup.calls(), 1, "the hedge is the backup's attempt: no second call");
    // The first's failure counts toward its health though the hedge answered, and is announced.
    let health = router.target_health(&"primary:m".parse().unwrap());
    assert_eq!(health.consecutive_failures, 1, "{health:?}");
    let names = event_names(&mut events);
    assert!(names.contains(&"attempt_failed") && names.contains(&"hedge_won"), "{names:?}");
}

#[tokio::test(start_paused = true)]
async fn hedges_draw_from_a_budget_of_their_own() {
    let (primary, backup) = (slow(1000), slow(50));
    let hedge = Hedge { max_share: 0.1, min_hedges: 0, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(1)).hedge(hedge);
    let router = router(&[("primary", &primary), ("backup", &backup)], route);
    for _ in 0..20 {
        router.chat(&request("default")).await.unwrap();
    }
    // A tenth of the last 10 s's requests: the 10th request brings the first hedge, the 20th
    // the second (the window slides, but 20 requests of 350 ms to 1 s fit in it).
    assert!(backup.calls() <= 2, "backup called {} times", backup.calls());
    assert!(backup.calls() >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_route_hedges_its_first_slow_requests_up_to_the_floor() {
    let (primary, backup) = (slow(1000), slow(50));
    // The default budget: a tenth of the requests, never fewer than 3 per 10 s.
    let route = Route::builder("default")
        .target("primary:m")
        .target("backup:m")
        .retry(quick_retry(1))
        .hedge(Hedge::after(Duration::from_millis(200)));
    let router = router(&[("primary", &primary), ("backup", &backup)], route);
    let start = Instant::now();
    let first = router.chat(&request("default")).await.unwrap();
    assert_eq!(first.served_by.to_string(), "backup:m", "the very first slow request is hedged");
    assert_eq!(start.elapsed(), Duration::from_millis(250));
    for _ in 0..2 {
        assert_eq!(router.chat(&request("default")).await.unwrap().served_by.to_string(), "backup:m");
    }
    assert_eq!(router.hedges_left("default"), Some(0), "3 hedges in the window: the floor is spent");
    let fourth = router.chat(&request("default")).await.unwrap();
    assert_eq!(
        fourth.served_by.to_string(),
        "primary:m",
        "past the floor, a 4th of 4 requests is not hedged"
    );
    assert_eq!(backup.calls(), 3);
    // The window slides: 10 s later the floor is there again.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(router.hedges_left("default"), Some(3));
}

#[tokio::test(start_paused = true)]
async fn nothing_is_hedged_with_fallback_off_or_after_a_streams_first_content() {
    let (primary, backup) = (slow(2000), slow(50));
    let router = hedged(&primary, &backup, 1.0);
    let off = RequestOptions { no_fallback: true, ..RequestOptions::default() };
    assert_eq!(router.chat_with(&request("default"), &off).await.unwrap().served_by.to_string(), "primary:m");
    assert_eq!(backup.calls(), 0);

    // First content at once, then a long stream: the hedge's moment never comes.
    let streaming = SimulatedProvider::new().stream(10, Duration::from_millis(100));
    let router = hedged(&streaming, &backup, 1.0);
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
    }
    assert_eq!(stream.served_by().to_string(), "primary:m");
    assert_eq!(backup.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stream_slow_to_its_first_content_is_hedged_and_the_hedge_streams_to_the_end() {
    let primary = slow(2000).stream(3, Duration::from_millis(10));
    let backup = slow(100).stream(3, Duration::from_millis(10));
    let router = hedged(&primary, &backup, 1.0);
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        text.push_str(
            &chunk.unwrap().choices.first().and_then(|c| c.delta.content.clone()).unwrap_or_default(),
        );
    }
    assert_eq!(stream.served_by().to_string(), "backup:m");
    assert!(!text.is_empty());
    assert_eq!(
        outcomes(stream.trail()),
        [("primary:m".into(), Outcome::Cancelled, false), ("backup:m".into(), Outcome::Ok, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_the_first_attempt_won_its_race_blames_that_attempt_not_the_hedge() {
    // The first answers at 400 ms, beside a hedge started at 300 ms; then its stream breaks.
    let primary = slow(400).stream(3, Duration::from_millis(10)).script([Step::CutAfter(1)]);
    let backup = slow(500).stream(3, Duration::from_millis(10));
    // Continuation off: the break, not its rescue, is what this reads.
    let hedge = Hedge { max_share: 1.0, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").hedge(hedge).continuation(false);
    let router = router(&[("primary", &primary), ("backup", &backup)], route.retry(quick_retry(1)));
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut failure = None;
    while let Some(item) = stream.next().await {
        if let Err(error) = item {
            failure = Some(error);
        }
    }
    let failure = failure.expect("the stream broke");
    assert_eq!(
        outcomes(&failure.trail),
        [("primary:m".into(), Outcome::Failed, false), ("backup:m".into(), Outcome::Cancelled, true)]
    );
    let first = &failure.trail.attempts()[0];
    assert!(first.mid_stream && first.error_kind() == Some(ErrorKind::Transport), "{first:?}");
    assert!(failure.trail.attempts()[1].error.is_none(), "the cancelled hedge did not fail");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_took_over_from_a_failed_first_attempt_is_the_attempt_its_failure_retries() {
    // The first fails at 400 ms, while the hedge (started at 300 ms) runs; the hedge fails at
    // 800 ms. From 400 ms on the hedge is the request's attempt: its target is retried, the
    // first's is not.
    let primary = SimulatedProvider::new()
        .script([Step::Delay(Duration::from_millis(400), Box::new(Step::fail(ErrorKind::Unavailable)))]);
    let backup = SimulatedProvider::new().script([
        Step::Delay(Duration::from_millis(500), Box::new(Step::fail(ErrorKind::Unavailable))),
        Step::Reply,
    ]);
    let hedge = Hedge { max_share: 1.0, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(2)).hedge(hedge);
    let router = router(&[("primary", &primary), ("backup", &backup)], route);

    let answer = router.chat(&request("default")).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "backup:m");
    assert_eq!(
        outcomes(&answer.trail),
        [
            ("primary:m".into(), Outcome::Failed, false),
            ("backup:m".into(), Outcome::Retried, true),
            ("backup:m".into(), Outcome::Ok, false),
        ]
    );
    assert_eq!((primary.calls(), backup.calls()), (1, 2), "the first's target was not tried again");
    assert!(answer.trail.attempts()[0].note.as_deref().unwrap_or_default().contains("carried on"));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_fails_first_leaves_the_first_attempts_failure_to_decide() {
    // The hedge fails at 350 ms, the first at 400 ms: the first's failure decides, and its
    // target is retried; the hedge's target is done.
    let primary = SimulatedProvider::new().script([
        Step::Delay(Duration::from_millis(400), Box::new(Step::fail(ErrorKind::Unavailable))),
        Step::Reply,
    ]);
    let backup = SimulatedProvider::new()
        .script([Step::Delay(Duration::from_millis(50), Box::new(Step::fail(ErrorKind::Unavailable)))]);
    let hedge = Hedge { max_share: 1.0, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(2)).hedge(hedge);
    let router = router(&[("primary", &primary), ("backup", &backup)], route);

    let answer = router.chat(&request("default")).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "primary:m");
    assert_eq!(
        outcomes(&answer.trail),
        [
            ("primary:m".into(), Outcome::Retried, false),
            ("backup:m".into(), Outcome::Failed, true),
            ("primary:m".into(), Outcome::Ok, false),
        ]
    );
    assert_eq!((primary.calls(), backup.calls()), (2, 1));
}

/// `builder` with `default` over `primary:m` then `backup:m`, hedged after 300 ms, and
/// `only-backup`; one failure opens a circuit for 10 s.
fn half_open_backup(builder: switchyard::RouterBuilder) -> switchyard::Router {
    let settings = switchyard::health::HealthSettings {
        failure_threshold: 1,
        open_for: Duration::from_secs(10),
        ..switchyard::health::HealthSettings::default()
    };
    let hedge = Hedge { max_share: 1.0, ..Hedge::after(Duration::from_millis(300)) };
    let route =
        Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(1)).hedge(hedge);
    let only_backup = Route::builder("only-backup").target("backup:m").retry(quick_retry(1)).build().unwrap();
    builder.route(route.build().unwrap()).route(only_backup).health(settings).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hedge_probing_a_half_open_circuit_gives_its_slot_back_when_the_caller_goes_away() {
    // The backup's circuit is half-open; the hedge on it is its probe, and hangs. The caller
    // leaves mid-pair: the next request probes the backup at once, not after the hedge's lease.
    let primary = slow(10_000);
    let backup =
        SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::Hang, Step::Reply]);
    let router = half_open_backup(builder(&[("primary", &primary), ("backup", &backup)]));
    router.chat(&request("only-backup")).await.unwrap_err(); // opens the backup's circuit
    tokio::time::advance(Duration::from_secs(10)).await;

    let gone = tokio::time::timeout(Duration::from_secs(1), router.chat(&request("default"))).await;
    assert!(gone.is_err(), "the caller went away mid-pair");
    assert_eq!(backup.calls(), 2, "the hedge probed the backup");
    let next = router.chat(&request("only-backup")).await.expect("probed again at once");
    assert_eq!(next.trail.outcomes(), vec![Outcome::Ok], "no probe in flight holds it");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_whose_probe_another_replica_holds_is_not_sent_and_gives_its_slot_back() {
    let primary = slow(2000);
    let backup = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::Reply]);
    let store = std::sync::Arc::new(ProbedElsewhere::default());
    let router =
        half_open_backup(builder(&[("primary", &primary), ("backup", &backup)]).health_store(store.clone()));
    router.chat(&request("only-backup")).await.unwrap_err(); // opens the backup's circuit
    tokio::time::advance(Duration::from_secs(10)).await;

    store.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "primary:m");
    let hedge = answer.trail.attempts().iter().find(|a| a.hedge).expect("the hedge's entry");
    assert_eq!(
        hedge.note.as_deref(),
        Some("hedge: another replica probes its half-open circuit; not sent"),
        "not blamed on the pacer"
    );
    assert_eq!(backup.calls(), 1, "the probe was not sent");
    // Its slot was given back: the probe is this replica's when the fleet says so.
    store.refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    let next = router.chat(&request("only-backup")).await.expect("probed");
    assert_eq!(next.trail.outcomes(), vec![Outcome::Ok]);
}

/// `primary:m` then `backup:m` on prices of 1 and 3 dollars a prompt token, hedged at 300 ms,
/// and the `Unfinished` of a request to it the caller drops at 500 ms.
async fn dropped_at_500ms(
    primary: &SimulatedProvider,
    backup: &SimulatedProvider,
) -> switchyard::trail::Unfinished {
    let price = |input_per_million| switchyard::Price { input_per_million, output_per_million: 100.0 };
    let route = Route::builder("default").target("primary:m").target("backup:m").retry(quick_retry(1));
    let router = switchyard::Router::builder()
        .provider(switchyard::ProviderEntry::new("primary", primary.clone()).price("m", price(1e6)))
        .provider(switchyard::ProviderEntry::new("backup", backup.clone()).price("m", price(3e6)))
        .route(route.hedge(Hedge::after(Duration::from_millis(300))).build().unwrap())
        .build()
        .unwrap();
    let unfinished = switchyard::trail::Unfinished::default();
    let options = RequestOptions { unfinished: Some(unfinished.clone()), ..RequestOptions::default() };
    let asking = request("default");
    let asked = router.chat_with(&asking, &options);
    assert!(tokio::time::timeout(Duration::from_millis(500), asked).await.is_err());
    unfinished
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_with_a_hedge_that_failed_costs_only_the_call_it_cut() {
    // The hedge failed at once (a provider bills no failed call): the first call alone was cut.
    let (primary, backup) =
        (slow(2000), SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]));
    let unfinished = dropped_at_500ms(&primary, &backup).await;
    assert_eq!((primary.calls(), backup.calls()), (1, 1));
    let (_, trail) = unfinished.peek().expect("a trail");
    assert_eq!(
        outcomes(&trail),
        [("primary:m".into(), Outcome::Cancelled, false), ("backup:m".into(), Outcome::Failed, true)]
    );
    let cut = unfinished.cut_short().expect("one call was cut");
    assert_eq!(cut.calls.iter().map(|c| c.target.to_string()).collect::<Vec<_>>(), ["primary:m"]);
    assert_eq!(cut.cost(), Some(2.0));
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_with_both_calls_running_cost_each_its_prompt_at_its_price() {
    let (primary, backup) = (slow(2000), slow(2000));
    // "hello": two tokens, sent to both; the caller leaves while both run.
    let unfinished = dropped_at_500ms(&primary, &backup).await;
    assert_eq!((primary.calls(), backup.calls()), (1, 1));
    let cut = unfinished.cut_short().expect("two calls were cut");
    let calls: Vec<_> =
        cut.calls.iter().map(|c| (c.target.to_string(), c.usage.prompt_tokens, c.cost)).collect();
    let each = [("primary:m".to_owned(), 2, Some(2.0)), ("backup:m".to_owned(), 2, Some(6.0))];
    assert_eq!(calls, each, "each call's prompt at its own provider's price");
    let usage = cut.usage();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (4, 0, 4));
    assert_eq!(cut.cost(), Some(8.0));
    assert_eq!(unfinished.cut_short(), None, "told once");

    // A request that ended cut nothing.
    let ended = switchyard::trail::Unfinished::default();
    let options = RequestOptions { unfinished: Some(ended.clone()), ..RequestOptions::default() };
    let quick = slow(10);
    let router = router_of(&quick);
    router.chat_with(&request("default"), &options).await.unwrap();
    assert_eq!(ended.cut_short(), None);
}

fn router_of(provider: &SimulatedProvider) -> switchyard::Router {
    router(&[("p", provider)], Route::builder("default").target("p:m"))
}
