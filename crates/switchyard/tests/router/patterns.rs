//! Model patterns: a route named `prefix*` governs every model that begins with the prefix,
//! its `{model}` targets filled in with the model the client asked for.

use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::{ErrorKind, RouteError};

use crate::support::*;

const DATED: &str = "claude-sonnet-4-5-20250929";

#[tokio::test(start_paused = true)]
async fn a_dated_model_reaches_each_target_of_its_pattern_with_the_model_filled_in() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let route = Route::builder("claude-*").target("a:{model}").target("b:{model}").retry(quick_retry(1));
    let router = router(&[("a", &a), ("b", &b)], route);

    let answer = router.chat(&request(DATED)).await.unwrap();

    assert_eq!(answer.served_by.to_string(), format!("b:{DATED}"));
    assert_eq!(
        answer.trail.attempts()[0].via.to_string(),
        format!("a:{DATED}"),
        "the fallback kept the model"
    );
    assert_eq!(&*answer.route, "claude-*", "metrics and logs name the pattern, not every dated id");
    assert_eq!(answer.response.text().as_deref(), Some(&*format!("[{DATED}] hello")));
    let health = router.target_health(&format!("a:{DATED}").parse().unwrap());
    assert_eq!(health.consecutive_failures, 1, "health is kept per model filled in");
}

#[tokio::test(start_paused = true)]
async fn an_exact_route_wins_over_a_pattern_and_the_longest_prefix_wins_among_patterns() {
    let (a, b, c) = (SimulatedProvider::new(), SimulatedProvider::new(), SimulatedProvider::new());
    let router = builder(&[("a", &a), ("b", &b), ("c", &c)])
        .route(Route::builder("claude-*").target("a:{model}").build().unwrap())
        .route(Route::builder("claude-sonnet-*").target("b:{model}").build().unwrap())
        .route(Route::builder("claude-sonnet-4-5").target("c:fixed").build().unwrap())
        .build()
        .unwrap();

    let served = |model: &'static str| {
        let router = router.clone();
        async move { router.chat(&request(model)).await.unwrap().served_by.to_string() }
    };
    assert_eq!(served("claude-sonnet-4-5").await, "c:fixed");
    assert_eq!(served(DATED).await, format!("b:{DATED}"));
    assert_eq!(served("claude-opus-4-1").await, "a:claude-opus-4-1");
    assert_eq!(served("a:named").await, "a:named", "a provider's target is still named as such");
}

#[tokio::test(start_paused = true)]
async fn a_model_no_pattern_matches_is_unknown_and_the_error_lists_the_patterns() {
    let a = SimulatedProvider::new();
    let router = router(&[("a", &a)], Route::builder("gpt-5*").target("a:{model}"));
    match router.chat(&request("claude-opus")).await {
        Err(RouteError::UnknownModel { known, .. }) => {
            assert!(known.contains(&"gpt-5*".to_owned()), "{known:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pattern_that_could_never_match_and_a_model_placeholder_outside_a_pattern_are_refused() {
    let inner = Route::builder("claude-*-latest").target("a:{model}").build().unwrap_err();
    assert!(inner.to_string().contains("can never match a model"), "{inner}");
    let exact = Route::builder("claude").target("a:{model}").build().unwrap_err();
    assert!(exact.to_string().contains("only a pattern route has"), "{exact}");
}

#[tokio::test(start_paused = true)]
async fn a_pattern_with_fixed_targets_serves_every_model_it_matches_the_same() {
    let a = SimulatedProvider::new();
    let router = router(&[("a", &a)], Route::builder("*").target("a:house-model"));
    let answer = router.chat(&request("anything-at-all")).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "a:house-model");
}
