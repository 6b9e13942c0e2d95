//! Events: typed, never blocking routing, never naming a key.

use futures_util::StreamExt;
use switchyard::events::EventKind;
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::{ErrorKind, RequestOptions, Router};

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_slow_subscriber_loses_old_events_instead_of_slowing_routing() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let route =
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(false);
    let router = builder(&[("a", &a), ("b", &b)])
        .route(route.build().unwrap())
        .health(no_breaker())
        .event_capacity(16)
        .build()
        .unwrap();
    let mut slow = router.subscribe();

    for _ in 0..100 {
        router.chat(&request("default")).await.expect("routing never waits for a subscriber");
    }

    let kept = slow.drain();
    assert_eq!(kept.len(), 16, "the subscriber keeps the newest events");
    assert!(slow.missed() > 100, "and can see how many it lost: {}", slow.missed());
    assert!(matches!(kept.last().map(|e| &e.kind), Some(EventKind::ProviderSwitch { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_failover_publishes_attempt_failed_then_provider_switch() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let router = router(
        &[("a", &a), ("b", &b)],
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)),
    );
    let mut events = router.subscribe();

    router.chat(&request("default")).await.unwrap();

    let events = events.drain();
    let failed = events.iter().position(|e| matches!(&e.kind, EventKind::AttemptFailed { will_retry: false, error, .. } if error.kind() == ErrorKind::Unavailable));
    let switched = events.iter().position(|e| matches!(&e.kind, EventKind::ProviderSwitch { from, to, reason: Some(ErrorKind::Unavailable) } if from.as_str() == "a:m" && to.as_str() == "b:m"));
    assert!(failed.is_some() && switched.is_some() && failed < switched, "{events:#?}");
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::HealthChanged { .. })));
}

#[tokio::test(start_paused = true)]
async fn events_trails_and_errors_never_contain_a_key() {
    const KEY: &str = "sk-live-SECRET-0123456789abcdef";
    const OTHER_KEY: &str = "sk-live-SECRET-fedcba9876543210";
    // `a` repeats its key in every error, as some servers do: the router must not pass it on.
    let b = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable), Step::CutAfter(1)]);
    let router = Router::builder()
        .provider(switchyard::ProviderEntry::new("a", Echo).key(switchyard::credential::Secret::new(KEY)))
        .provider(keyed("b", &b, &[OTHER_KEY]))
        .route(Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).build().unwrap())
        .build()
        .unwrap();
    let mut events = router.subscribe();

    let error = router.chat(&request("default")).await.expect_err("both fail");
    router.reset_all();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut stream_error = None;
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            stream_error = Some(e);
        }
    }

    let texts = [
        format!("{error:?}"),
        error.to_string(),
        serde_json::to_string(&events.drain()).unwrap(),
        format!("{stream_error:?}"),
        format!("{:?}", router.health()),
        format!("{router:?}"),
        format!("{:?}", router.credentials("a")),
        serde_json::to_string(&error.trail()).unwrap(),
    ];
    for text in &texts {
        assert!(!text.contains("SECRET"), "a key leaked: {text}");
    }
    assert!(stream_error.is_some());
    assert_eq!(router.credentials("a").unwrap()[0].masked(), "****cdef");
}

#[tokio::test(start_paused = true)]
async fn events_serialize_as_flat_json_named_by_kind() {
    let a = SimulatedProvider::new().script([Step::rate_limited(std::time::Duration::from_secs(3))]);
    let b = SimulatedProvider::new();
    let router = router(
        &[("a", &a), ("b", &b)],
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)),
    );
    let mut events = router.subscribe();

    router.chat(&request("default")).await.unwrap();

    let events: Vec<serde_json::Value> =
        events.drain().iter().map(|e| serde_json::to_value(&**e).unwrap()).collect();
    let failed = events.iter().find(|e| e["event"] == "attempt_failed").expect("an attempt failed");
    assert_eq!(failed["target"], "a:m");
    assert_eq!(failed["error"]["kind"], "rate_limited");
    assert_eq!(failed["error"]["status"], 429);
    assert_eq!(failed["error"]["retry_after_ms"], 3000.0);
    assert_eq!(failed["will_retry"], false);
    assert!(failed["time_ms"].as_u64().is_some_and(|t| t > 1_700_000_000_000), "{failed}");
    let switch = events.iter().find(|e| e["event"] == "provider_switch").expect("it switched");
    assert_eq!(
        (&switch["from"], &switch["to"], &switch["reason"]),
        (&"a:m".into(), &"b:m".into(), &"rate_limited".into())
    );
    let changed = events
        .iter()
        .find(|e| e["event"] == "health_changed" && e["target"].is_string())
        .expect("a's health changed");
    assert_eq!((&changed["target"], &changed["to"]), (&"a:m".into(), &"rate_limited".into()));
}

#[tokio::test(start_paused = true)]
async fn a_drill_breaks_a_simulated_target_until_it_is_lifted() {
    use switchyard::simulated::{Drill, Latency};
    let a = SimulatedProvider::new();
    let b = SimulatedProvider::new();
    let router = router(
        &[("a", &a), ("b", &b)],
        Route::builder("default").target("a:m").target("b:m").retry(quick_retry(1)).health_gate(false),
    );

    a.drill(Drill { error_rates: Some(vec![(ErrorKind::Unavailable, 1.0)]), latency: None });
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "b:m", "the drilled target fails: {:?}", answer.trail);

    a.drill(Drill { error_rates: None, latency: Some(Latency::Fixed(std::time::Duration::from_secs(2))) });
    let started = tokio::time::Instant::now();
    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:m", "a latency drill leaves the configured error rates");
    assert_eq!(started.elapsed(), std::time::Duration::from_secs(2));

    a.drill(Drill::default());
    let started = tokio::time::Instant::now();
    router.chat(&request("default")).await.unwrap();
    assert_eq!(started.elapsed(), std::time::Duration::ZERO, "an empty drill restores the configuration");
}

/// A custom provider whose stream sends one chunk, then fails with an error that repeats the
/// key it was called with.
struct LeakyStream;

impl switchyard::provider::Provider for LeakyStream {
    fn kind(&self) -> &str {
        "leaky"
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        Box::pin(async { Err(switchyard::ProviderError::new(ErrorKind::Unavailable, "streams only")) })
    }

    fn chat_stream<'a>(
        &'a self,
        call: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        let key = call.credential.key().map(|k| k.expose().to_owned()).unwrap_or_default();
        Box::pin(async move {
            let content = switchyard::chat::ChatChunk {
                choices: vec![switchyard::chat::ChunkChoice {
                    index: 0,
                    delta: switchyard::chat::Delta {
                        content: Some("partial".to_owned()),
                        ..Default::default()
                    },
                    finish_reason: None,
                }],
                ..Default::default()
            };
            let cut =
                switchyard::ProviderError::new(ErrorKind::Transport, format!("reset while using key {key}"));
            let items = vec![Ok(content), Err(cut)];
            Ok(Box::pin(futures_util::stream::iter(items)) as switchyard::provider::ChunkStream)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_after_content_never_carries_the_key() {
    const KEY: &str = "sk-live-SECRET-mid-stream-0123";
    let router = Router::builder()
        .provider(
            switchyard::ProviderEntry::new("leaky", LeakyStream)
                .key(switchyard::credential::Secret::new(KEY)),
        )
        .route(Route::builder("default").target("leaky:m").build().unwrap())
        .build()
        .unwrap();
    let mut events = router.subscribe();
    let mut stream = router.chat_stream(&request("default"), &RequestOptions::default()).await.unwrap();
    let mut failure = None;
    while let Some(item) = stream.next().await {
        if let Err(error) = item {
            failure = Some(error);
        }
    }
    let failure = failure.expect("the stream ends with its error");
    assert!(failure.error.to_string().contains("[redacted]"), "{failure}");
    let texts = [
        format!("{failure:?}"),
        format!("{:?}", stream.trail()),
        format!("{:?}", events.drain()),
        format!("{:?}", router.health()),
    ];
    for text in &texts {
        assert!(!text.contains("SECRET"), "a key leaked mid-stream: {text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retried_failure_announces_each_health_change_once() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let settings = switchyard::health::HealthSettings {
        cooldown_on_error: std::time::Duration::from_secs(5),
        ..no_breaker()
    };
    let route = Route::builder("default").target("a:m").target("b:m").retry(quick_retry(3));
    let router = builder(&[("b", &b)])
        .provider(keyed("a", &a, &["sk-only-key-0001"]))
        .route(route.build().unwrap())
        .health(settings)
        .build()
        .unwrap();
    let mut events = router.subscribe();

    let answer = router.chat(&request("default")).await.unwrap();
    assert_eq!(a.calls(), 3, "{}", answer.trail);

    let changes: Vec<String> = events
        .drain()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::HealthChanged { subject, from, to, .. } => Some(format!("{subject} {from}->{to}")),
            _ => None,
        })
        .collect();
    let a_key = router.credentials("a").unwrap()[0].id().clone();
    let b_key = router.credentials("b").unwrap()[0].id().clone();
    assert_eq!(
        changes,
        [
            format!("credential {a_key} unknown->temporarily_unavailable"),
            "a:m unknown->temporarily_unavailable".to_owned(),
            "b:m unknown->available".to_owned(),
            format!("credential {b_key} unknown->available"),
        ],
        "three failures of one target and key: one change each, not one per failure"
    );
}
