//! Embeddings fall back only between targets of one embedding space.

use switchyard::chat::{EmbeddingInput, EmbeddingsRequest};
use switchyard::route::{Route, RouteTarget};
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, RequestOptions, RouteError};

use crate::support::*;

fn embed(model: &str) -> EmbeddingsRequest {
    EmbeddingsRequest {
        model: model.to_owned(),
        input: EmbeddingInput::Many(vec!["a".into(), "b".into()]),
        dimensions: None,
        extra: Default::default(),
    }
}

fn space_target(text: &str, space: Option<&str>) -> RouteTarget {
    RouteTarget {
        target: text.parse().unwrap(),
        tier: 0,
        weight: 1,
        embedding_space: space.map(str::to_owned),
    }
}

#[tokio::test(start_paused = true)]
async fn embeddings_fall_back_to_the_same_model_on_another_provider() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let other = SimulatedProvider::new();
    let route = Route::builder("embed")
        .target("a:text-embedding-3-small")
        .target("other:different-model")
        .target("b:text-embedding-3-small")
        .retry(quick_retry(1));
    let router = router(&[("a", &a), ("b", &b), ("other", &other)], route);

    let answer = router.embeddings(&embed("embed"), &RequestOptions::default()).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "b:text-embedding-3-small");
    assert_eq!(answer.response.data.len(), 2);
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Failed, Outcome::Ok]);
    assert_eq!(other.calls(), 0, "vectors of another model are not interchangeable");
}

#[tokio::test(start_paused = true)]
async fn an_explicit_embedding_space_joins_different_model_names() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let b = SimulatedProvider::new();
    let route = Route::builder("embed")
        .route_target(space_target("a:nomic-embed", Some("nomic-v1")))
        .route_target(space_target("b:nomic-embed-text-v1", Some("nomic-v1")))
        .retry(quick_retry(1));
    let router = router(&[("a", &a), ("b", &b)], route);

    let answer = router.embeddings(&embed("embed"), &RequestOptions::default()).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "b:nomic-embed-text-v1");
}

#[tokio::test(start_paused = true)]
async fn embeddings_without_an_equivalent_target_fail_with_the_trail() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let other = SimulatedProvider::new();
    let route = Route::builder("embed").target("a:m1").target("other:m2").retry(quick_retry(1));
    let router = router(&[("a", &a), ("other", &other)], route);

    let error =
        router.embeddings(&embed("embed"), &RequestOptions::default()).await.expect_err("nothing equivalent");
    assert!(matches!(error, RouteError::AllTargetsFailed { .. }));
    assert_eq!(other.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_input_too_long_for_embeddings_never_takes_the_routes_context_window_chain() {
    let a = SimulatedProvider::new().script([Step::fail(ErrorKind::ContextLength)]);
    let long = SimulatedProvider::new();
    let route = Route::builder("embed").target("a:text-embedding-3-small").context_window("long:chat-model");
    let router = router(&[("a", &a), ("long", &long)], route);

    let error = router.embeddings(&embed("embed"), &RequestOptions::default()).await.expect_err("too long");
    assert_eq!(error.kind(), Some(ErrorKind::ContextLength));
    assert_eq!(long.calls(), 0, "a chat model's vectors are not the embedding space's");
    assert_eq!(error.trail().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_embedding_costs_its_input_at_the_price_of_the_target_that_answered() {
    let sim = SimulatedProvider::new();
    let price = switchyard::Price { input_per_million: 1_000_000.0, output_per_million: 0.0 };
    let router = builder(&[])
        .provider(switchyard::ProviderEntry::new("p", sim).price("m", price))
        .route(Route::builder("embed").target("p:m").build().unwrap())
        .build()
        .unwrap();
    let request = EmbeddingsRequest {
        input: EmbeddingInput::Many(vec!["abcdefgh".into(), "ijkl".into()]),
        ..embed("embed")
    };

    let answer = router.embeddings(&request, &RequestOptions::default()).await.unwrap();

    assert_eq!(answer.response.usage.map(|u| u.prompt_tokens), Some(3));
    assert_eq!(answer.cost, Some(3.0), "three input tokens at a dollar each");
}

#[tokio::test(start_paused = true)]
async fn a_route_whose_first_target_cannot_embed_embeds_with_the_next_space() {
    // A chat model first: its provider does not embed.
    let chat = SimulatedProvider::new()
        .script([Step::Fail(switchyard::ProviderError::unsupported("this provider does not embed"))]);
    let embedder = SimulatedProvider::new();
    let route = Route::builder("mixed").target("chat:claude").target("embedder:text-embedding-3-small");
    let router = router(&[("chat", &chat), ("embedder", &embedder)], route);

    let answer = router.embeddings(&embed("mixed"), &RequestOptions::default()).await.unwrap();
    assert_eq!(answer.served_by.to_string(), "embedder:text-embedding-3-small");
    assert_eq!(answer.response.data.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_route_side_name_for_two_providers_models_is_two_spaces() {
    // `embed` is OpenAI's text-embedding-3-small on one provider and Titan on the other.
    let openai = SimulatedProvider::new().script([Step::fail(ErrorKind::Unavailable)]);
    let titan = SimulatedProvider::new();
    let router = switchyard::Router::builder()
        .provider(
            switchyard::ProviderEntry::new("openai", openai.clone()).model("embed", "text-embedding-3-small"),
        )
        .provider(
            switchyard::ProviderEntry::new("bedrock", titan.clone())
                .model("embed", "amazon.titan-embed-text-v2:0"),
        )
        .route(
            Route::builder("embed")
                .target("openai:embed")
                .target("bedrock:embed")
                .retry(quick_retry(1))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();

    let error = router.embeddings(&embed("embed"), &RequestOptions::default()).await.unwrap_err();
    assert!(matches!(error, RouteError::Upstream { .. } | RouteError::AllTargetsFailed { .. }), "{error:?}");
    assert_eq!(titan.calls(), 0, "Titan's vectors are not OpenAI's");
}

#[tokio::test(start_paused = true)]
async fn round_robin_takes_turns_over_the_targets_of_one_space() {
    let a = SimulatedProvider::new();
    let b = SimulatedProvider::new();
    let route = Route::builder("embed")
        .target("a:text-embedding-3-small")
        .target("b:text-embedding-3-small")
        .rotation(switchyard::route::Rotation::RoundRobin);
    let router = router(&[("a", &a), ("b", &b)], route);

    for _ in 0..4 {
        router.embeddings(&embed("embed"), &RequestOptions::default()).await.unwrap();
    }
    assert_eq!((a.calls(), b.calls()), (2, 2), "rotation holds for embeddings as for chat");
}

#[tokio::test(start_paused = true)]
async fn rotation_never_changes_which_embedding_space_serves() {
    // Two spaces in one tier, round robin: every request embeds in the first configured
    // space; vectors of two models never mix in one index.
    let a = SimulatedProvider::new();
    let b = SimulatedProvider::new();
    let route = Route::builder("embed")
        .target("a:text-embedding-3-small")
        .target("b:titan-embed")
        .rotation(switchyard::route::Rotation::RoundRobin);
    let router = router(&[("a", &a), ("b", &b)], route);

    for _ in 0..4 {
        let answer = router.embeddings(&embed("embed"), &RequestOptions::default()).await.unwrap();
        assert_eq!(answer.served_by.to_string(), "a:text-embedding-3-small");
    }
    assert_eq!(b.calls(), 0);
}
