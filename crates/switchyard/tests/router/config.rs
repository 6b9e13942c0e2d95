//! Building routes and routers: a value that exists is valid, and errors say what to fix.

use switchyard::route::{Retry, Route};
use switchyard::simulated::SimulatedProvider;
use switchyard::{ConfigError, ProviderEntry, Router};

#[test]
fn a_route_reports_every_problem_at_once() {
    let error = Route::builder("bad:name")
        .target("no-colon")
        .retry(Retry { max_attempts: 0, ..Retry::default() })
        .build()
        .expect_err("invalid");
    let text = error.to_string();
    assert!(text.contains("target `no-colon` has no colon"), "{text}");
    assert!(text.contains("retry.max_attempts is 0"), "{text}");
    assert!(text.contains("contains a colon"), "{text}");
}

#[test]
fn a_route_needs_a_target() {
    let error = Route::builder("default").build().expect_err("no targets");
    assert!(error.to_string().contains("it has no targets"), "{error}");
}

#[test]
fn a_route_naming_an_unknown_provider_is_refused_with_the_known_ones() {
    let error = Router::builder()
        .provider(ProviderEntry::new("local", SimulatedProvider::new()))
        .route(Route::builder("default").target("openai:gpt-4o").build().unwrap())
        .build()
        .expect_err("unknown provider");
    assert_eq!(
        error.to_string(),
        "route `default` names target `openai:gpt-4o`, but no provider `openai` is configured (configured: local)"
    );
}

#[test]
fn special_chains_are_checked_too() {
    let error = Router::builder()
        .provider(ProviderEntry::new("local", SimulatedProvider::new()))
        .route(Route::builder("default").target("local:m").context_window("big:m").build().unwrap())
        .build()
        .expect_err("unknown provider in the context-window chain");
    assert!(matches!(error, ConfigError::UnknownProvider { ref provider, .. } if provider == "big"));
}

#[test]
fn duplicate_providers_and_routes_are_refused() {
    let duplicate_provider = Router::builder()
        .provider(ProviderEntry::new("p", SimulatedProvider::new()))
        .provider(ProviderEntry::new("p", SimulatedProvider::new()))
        .route(Route::builder("default").target("p:m").build().unwrap())
        .build();
    assert!(matches!(duplicate_provider, Err(ConfigError::DuplicateProvider(id)) if id == "p"));

    let duplicate_route = Router::builder()
        .provider(ProviderEntry::new("p", SimulatedProvider::new()))
        .route(Route::builder("r").target("p:m").build().unwrap())
        .route(Route::builder("r").target("p:m").build().unwrap())
        .build();
    assert!(matches!(duplicate_route, Err(ConfigError::DuplicateRoute(name)) if name == "r"));
}

#[test]
fn the_default_route_is_the_one_named_default_else_the_first() {
    let build = |names: &[&str]| {
        names
            .iter()
            .fold(Router::builder().provider(ProviderEntry::new("p", SimulatedProvider::new())), |b, n| {
                b.route(Route::builder(*n).target("p:m").build().unwrap())
            })
            .build()
            .unwrap()
    };
    assert_eq!(build(&["fast", "default"]).default_route().name(), "default");
    assert_eq!(build(&["fast", "cheap"]).default_route().name(), "fast");
}

/// A provider that counts the threads it was warmed on and serves nothing.
struct Warmable(std::sync::Mutex<Vec<std::thread::ThreadId>>);

impl switchyard::provider::Provider for Warmable {
    fn kind(&self) -> &str {
        "warmable"
    }

    fn warm(&self) {
        self.0.lock().unwrap().push(std::thread::current().id());
    }

    fn chat<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<'a, Result<switchyard::chat::ChatResponse, switchyard::ProviderError>>
    {
        Box::pin(async { Err(switchyard::ProviderError::new(switchyard::ErrorKind::Unavailable, "cold")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _: switchyard::provider::Call<'a>,
        _: &'a switchyard::chat::ChatRequest,
    ) -> switchyard::provider::BoxFuture<
        'a,
        Result<switchyard::provider::ChunkStream, switchyard::ProviderError>,
    > {
        Box::pin(async { Err(switchyard::ProviderError::new(switchyard::ErrorKind::Unavailable, "cold")) })
    }
}

#[test]
fn warm_prepares_every_provider_on_the_calling_thread() {
    let first = std::sync::Arc::new(Warmable(Default::default()));
    let second = std::sync::Arc::new(Warmable(Default::default()));
    let router = Router::builder()
        .provider(ProviderEntry::from_arc("a", first.clone()))
        .provider(ProviderEntry::from_arc("b", second.clone()))
        .route(Route::builder("r").target("a:m").target("b:m").build().unwrap())
        .build()
        .unwrap();
    let here = std::thread::current().id();
    router.warm();
    let elsewhere = std::thread::spawn({
        let router = router.clone();
        move || {
            router.warm();
            std::thread::current().id()
        }
    })
    .join()
    .unwrap();
    for provider in [&first, &second] {
        assert_eq!(*provider.0.lock().unwrap(), [here, elsewhere]);
    }
}

#[test]
fn a_routes_problems_name_their_keys_and_fixes() {
    let error = Route::builder("bad:name")
        .target("openai:gpt-4o")
        .target("no-colon")
        .retry(Retry { max_attempts: 0, ..Retry::default() })
        .build()
        .expect_err("invalid");
    let paths: Vec<&str> = error.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["targets[1]", "", "retry.max_attempts"], "{error}");
    assert!(error.problems.iter().all(|p| !p.fix.is_empty()), "{error:?}");
}

#[tokio::test(start_paused = true)]
async fn a_mapped_model_is_asked_of_the_provider_by_its_own_id_and_the_trail_keeps_both() {
    use switchyard::chat::{ChatRequest, Message};
    let bedrock = SimulatedProvider::new();
    let router = Router::builder()
        .provider(
            ProviderEntry::new("bedrock", bedrock)
                .model("claude-sonnet-4-5", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        )
        .route(Route::builder("default").target("bedrock:claude-sonnet-4-5").build().unwrap())
        .build()
        .unwrap();
    let answer = router.chat(&ChatRequest::new("default", vec![Message::user("hi")])).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("[us.anthropic.claude-sonnet-4-5-20250929-v1:0] hi"));
    assert_eq!(answer.served_by.to_string(), "bedrock:claude-sonnet-4-5");
    let attempt = &answer.trail.attempts()[0];
    assert_eq!(attempt.provider_model.as_deref(), Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0"));
    let json = serde_json::to_value(&answer.trail).unwrap();
    assert_eq!(json[0]["target"], "bedrock:claude-sonnet-4-5");
    assert_eq!(json[0]["provider_model"], "us.anthropic.claude-sonnet-4-5-20250929-v1:0");
}

#[tokio::test(start_paused = true)]
async fn an_unmapped_model_is_asked_by_its_name_and_the_trail_has_no_provider_model() {
    use switchyard::chat::{ChatRequest, Message};
    let router = Router::builder()
        .provider(ProviderEntry::new("local", SimulatedProvider::new()).model("other", "other-id"))
        .route(Route::builder("default").target("local:m").build().unwrap())
        .build()
        .unwrap();
    let answer = router.chat(&ChatRequest::new("default", vec![Message::user("hi")])).await.unwrap();
    assert_eq!(answer.response.text().as_deref(), Some("[m] hi"));
    assert_eq!(answer.trail.attempts()[0].provider_model, None);
    let json = serde_json::to_value(&answer.trail).unwrap();
    assert!(json[0].get("provider_model").is_none(), "{json}");
}
