//! A router handed a new configuration (`Router::reconfigure`): what it learned is kept, by
//! key, for every target and credential left unchanged, and forgotten for the others.

use std::time::Duration;

use switchyard::credential::CredentialId;
use switchyard::health::{HealthSettings, HealthStatus};
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderEntry, Router, RouterBuilder, Target};

use crate::support::*;

fn target(text: &str) -> Target {
    text.parse().unwrap()
}

/// Opens after two failures, stays open a minute; no TTL gate, so only the breaker holds.
fn opens_quickly() -> HealthSettings {
    HealthSettings {
        failure_threshold: 2,
        open_for: Duration::from_secs(60),
        open_max: Duration::from_secs(60),
        ..HealthSettings::default()
    }
}

/// `a` then `b` on the route `default`, plus `extra` routes, over `providers`.
fn config(providers: Vec<ProviderEntry>, extra: &[&str]) -> RouterBuilder {
    let mut builder = providers.into_iter().fold(Router::builder(), RouterBuilder::provider);
    let route = Route::builder("default")
        .target("a:m")
        .target("b:m")
        .retry(quick_retry(1))
        .health_ttl(Duration::ZERO);
    builder = builder.route(route.build().unwrap()).health(opens_quickly());
    for name in extra {
        builder = builder.route(Route::builder(*name).target("b:m").build().unwrap());
    }
    builder
}

fn entries(a: &SimulatedProvider, b: &SimulatedProvider) -> Vec<ProviderEntry> {
    vec![ProviderEntry::new("a", a.clone()), ProviderEntry::new("b", b.clone())]
}

/// A router whose `a:m` circuit is open.
async fn with_open_circuit(a: &SimulatedProvider, b: &SimulatedProvider) -> Router {
    let router = config(entries(a, b), &[]).build().unwrap();
    for _ in 0..2 {
        router.chat(&request("default")).await.unwrap();
    }
    assert_eq!(router.target_health(&target("a:m")).breaker, "open");
    router
}

fn credential_status(router: &Router, id: &CredentialId) -> HealthStatus {
    let snapshot = router.health();
    snapshot.credentials.iter().find(|c| &c.credential_id == id).map_or(HealthStatus::Unknown, |c| c.status)
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_survives_a_reconfiguration_that_adds_an_unrelated_route() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;

    let (next, forgotten) = router.reconfigure(config(entries(&a, &b), &["fast"])).unwrap();
    assert!(forgotten.targets.is_empty() && forgotten.credentials.is_empty(), "{forgotten:?}");
    assert!(next.route("fast").is_some(), "the new route is served");
    assert_eq!(next.target_health(&target("a:m")).breaker, "open");
    let answer = next.chat(&request("default")).await.unwrap();
    assert_eq!(answer.trail.outcomes(), vec![Outcome::SkippedUnhealthy, Outcome::Ok]);
    assert_eq!(a.calls(), 2, "the new router does not call through the open circuit");
}

#[tokio::test(start_paused = true)]
async fn a_removed_provider_is_forgotten_and_starts_fresh_when_it_returns() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;
    let a_credentials: Vec<CredentialId> =
        router.credentials("a").unwrap().iter().map(|c| c.id().clone()).collect();

    let without = Router::builder()
        .provider(ProviderEntry::new("b", b.clone()))
        .route(Route::builder("default").target("b:m").build().unwrap());
    let (next, forgotten) = router.reconfigure(without).unwrap();
    assert_eq!(forgotten.targets, vec![target("a:m")]);
    assert_eq!(forgotten.credentials, a_credentials);
    assert!(next.health().targets.iter().all(|t| t.target != target("a:m")), "no record of a:m is left");

    let (again, _) = next.reconfigure(config(entries(&a, &b), &[])).unwrap();
    let health = again.target_health(&target("a:m"));
    assert_eq!((health.status, health.breaker), (HealthStatus::Unknown, "closed"));
}

#[tokio::test(start_paused = true)]
async fn a_provider_whose_kind_changes_starts_its_targets_fresh() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;

    let other_kind = ByModel(vec![("m", SimulatedProvider::new())]);
    let changed = vec![ProviderEntry::new("a", other_kind), ProviderEntry::new("b", b.clone())];
    let (next, forgotten) = router.reconfigure(config(changed, &[])).unwrap();
    assert_eq!(forgotten.targets, vec![target("a:m")]);
    assert_eq!(next.target_health(&target("a:m")).breaker, "closed");
    let answer = next.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:m", "the changed provider is called again");
}

#[tokio::test(start_paused = true)]
async fn a_target_dropped_from_every_route_is_forgotten() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;

    let dropped = entries(&a, &b)
        .into_iter()
        .fold(Router::builder(), RouterBuilder::provider)
        .route(Route::builder("default").target("b:m").build().unwrap());
    let (next, forgotten) = router.reconfigure(dropped).unwrap();
    assert_eq!(forgotten.targets, vec![target("a:m")]);
    assert!(forgotten.credentials.is_empty(), "provider a is still configured: {forgotten:?}");
    assert_eq!(next.target_health(&target("a:m")).status, HealthStatus::Unknown);
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_key_survives_and_a_rotated_key_is_a_fresh_credential() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let b = SimulatedProvider::new();
    let keys = |keys: &[&str]| vec![keyed("a", &a, keys), ProviderEntry::new("b", b.clone())];
    let router = config(keys(&["sk-first-0123456789", "sk-second-0123456789"]), &[]).build().unwrap();
    router.chat(&request("default")).await.unwrap();
    let ids: Vec<CredentialId> = router.credentials("a").unwrap().iter().map(|c| c.id().clone()).collect();
    assert_eq!(credential_status(&router, &ids[0]), HealthStatus::Exhausted);

    let (same, forgotten) = router
        .reconfigure(config(keys(&["sk-first-0123456789", "sk-second-0123456789"]), &["fast"]))
        .unwrap();
    assert!(forgotten.credentials.is_empty(), "{forgotten:?}");
    assert_eq!(
        credential_status(&same, &ids[0]),
        HealthStatus::Exhausted,
        "the same key is the same credential"
    );

    let (rotated, forgotten) =
        same.reconfigure(config(keys(&["sk-rotated-0123456789", "sk-second-0123456789"]), &[])).unwrap();
    let new_id = rotated.credentials("a").unwrap()[0].id().clone();
    assert_ne!(new_id, ids[0], "a rotated key is a new credential");
    assert_eq!(forgotten.credentials, vec![ids[0].clone()], "the old key is forgotten");
    assert_eq!(credential_status(&rotated, &new_id), HealthStatus::Unknown);
    assert!(rotated.health().credentials.iter().all(|c| c.credential_id != ids[0]));
    let answer = rotated.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:m", "the fresh key is used first");
}

#[tokio::test(start_paused = true)]
async fn latency_of_an_unchanged_target_is_kept_and_of_a_removed_one_dropped() {
    let a = SimulatedProvider::new();
    let b = SimulatedProvider::new();
    let router = config(entries(&a, &b), &["fast"]).build().unwrap();
    router.chat(&request("default")).await.unwrap();
    router.chat(&request("fast")).await.unwrap();
    assert!(router.latency(&target("a:m")).is_some() && router.latency(&target("b:m")).is_some());

    let only_a = Router::builder()
        .provider(ProviderEntry::new("a", a.clone()))
        .route(Route::builder("default").target("a:m").build().unwrap());
    let (next, _) = router.reconfigure(only_a).unwrap();
    assert!(next.latency(&target("a:m")).is_some(), "kept");
    assert!(next.latency(&target("b:m")).is_none(), "dropped with its provider");
}

#[tokio::test(start_paused = true)]
async fn subscribers_of_the_old_router_see_the_new_routers_events() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = config(entries(&a, &b), &[]).build().unwrap();
    let mut events = router.subscribe();

    let (next, _) = router.reconfigure(config(entries(&a, &b), &["fast"])).unwrap();
    next.chat(&request("default")).await.unwrap();
    assert!(event_names(&mut events).contains(&"attempt_failed"), "one bus across configurations");
}

#[tokio::test(start_paused = true)]
async fn a_stream_started_before_a_reconfiguration_finishes_on_the_old_configuration() {
    use futures_util::StreamExt;
    let a = SimulatedProvider::new().reply("one two three").stream(3, Duration::from_millis(100));
    let b = SimulatedProvider::new();
    let router = config(entries(&a, &b), &[]).build().unwrap();
    let mut stream = router.chat_stream(&request("default"), &Default::default()).await.unwrap();

    let without_a = Router::builder()
        .provider(ProviderEntry::new("b", b.clone()))
        .route(Route::builder("default").target("b:m").build().unwrap());
    let (next, _) = router.reconfigure(without_a).unwrap();
    drop(router);
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        text.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
    }
    assert_eq!(text.split_whitespace().collect::<Vec<_>>(), ["one", "two", "three"]);
    assert_eq!(stream.served_by().to_string(), "a:m");
    assert_eq!(next.chat(&request("default")).await.unwrap().served_by.to_string(), "b:m");
}

#[tokio::test(start_paused = true)]
async fn a_reconfiguration_that_does_not_build_changes_nothing() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;
    let broken = Router::builder()
        .provider(ProviderEntry::new("b", b.clone()))
        .route(Route::builder("default").target("nowhere:m").build().unwrap());
    assert!(router.reconfigure(broken).is_err());
    assert_eq!(router.target_health(&target("a:m")).breaker, "open", "nothing was dropped");
}

#[tokio::test(start_paused = true)]
async fn a_target_exhausted_by_its_only_key_is_called_again_with_a_rotated_key() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::QuotaExceeded)]);
    let b = SimulatedProvider::new();
    let keys = |key: &str| vec![keyed("a", &a, &[key]), ProviderEntry::new("b", b.clone())];
    let router = config(keys("sk-spent-0123456789"), &[]).build().unwrap();
    router.chat(&request("default")).await.unwrap();
    assert_eq!(router.target_health(&target("a:m")).status, HealthStatus::Exhausted);

    let (same, _) = router.reconfigure(config(keys("sk-spent-0123456789"), &["fast"])).unwrap();
    assert_eq!(
        same.target_health(&target("a:m")).status,
        HealthStatus::Exhausted,
        "the same key: still spent"
    );

    let (rotated, forgotten) = same.reconfigure(config(keys("sk-fresh-0123456789"), &[])).unwrap();
    assert_eq!(forgotten.targets, vec![target("a:m")]);
    let answer = rotated.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:m", "the new key is tried");
}

#[tokio::test(start_paused = true)]
async fn a_target_whose_provider_now_maps_it_to_another_model_starts_fresh() {
    let a = SimulatedProvider::new().error_rate(ErrorKind::Unavailable, 1.0);
    let b = SimulatedProvider::new();
    let router = with_open_circuit(&a, &b).await;

    // The same mapping again: nothing is forgotten.
    let (same, forgotten) = router.reconfigure(config(entries(&a, &b), &[])).unwrap();
    assert!(forgotten.targets.is_empty(), "{forgotten:?}");
    assert_eq!(same.target_health(&target("a:m")).breaker, "open");

    // `a` now sends `m` as another model of its own: what was learned of the old one goes.
    let mapped =
        vec![ProviderEntry::new("a", a.clone()).model("m", "m-2026"), ProviderEntry::new("b", b.clone())];
    let (next, forgotten) = same.reconfigure(config(mapped, &[])).unwrap();
    assert_eq!(forgotten.targets, vec![target("a:m")]);
    assert_eq!(next.target_health(&target("a:m")).breaker, "closed");
    assert_eq!(next.target_health(&target("b:m")).status, same.target_health(&target("b:m")).status);
}

#[tokio::test(start_paused = true)]
async fn a_cache_candidates_answers_survive_a_reconfiguration_that_keeps_its_settings() {
    use switchyard::answer_cache::AnswerCacheSettings;
    use switchyard::route::Candidate;
    let sim = SimulatedProvider::new().reply("the good answer");
    let build = |extra: Option<&str>, max_entries: usize| {
        let settings = AnswerCacheSettings { max_entries, ..AnswerCacheSettings::default() };
        let route = Route::builder("default")
            .target("p:m")
            .retry(quick_retry(1))
            .health_gate(false)
            .candidate(Candidate::cache("last-good", settings));
        let mut builder =
            Router::builder().provider(ProviderEntry::new("p", sim.clone())).route(route.build().unwrap());
        if let Some(name) = extra {
            builder = builder.route(Route::builder(name).target("p:m").build().unwrap());
        }
        builder
    };
    let router = build(None, 100).build().unwrap();
    router.chat(&request("default")).await.unwrap();

    // An unrelated route added: the candidate of the same name and settings keeps its answers.
    let (next, _) = router.reconfigure(build(Some("other"), 100)).unwrap();
    sim.push_steps([Step::fail(ErrorKind::Unavailable)]);
    let answer = next.chat(&request("default")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "candidate last-good");
    assert_eq!(answer.response.text().as_deref(), Some("the good answer"));

    // Its settings changed: a new cache, empty.
    let (changed, _) = next.reconfigure(build(Some("other"), 10)).unwrap();
    sim.push_steps([Step::fail(ErrorKind::Unavailable)]);
    assert!(changed.chat(&request("default")).await.is_err());
}
