//! One request through the routing engine across two real adapters: an OpenAI-dialect upstream
//! failing with 503, then an Anthropic-dialect upstream answering.

#![allow(clippy::unwrap_used)]

mod support;

use serde_json::json;
use support::{Fake, json_reply, only_posts_to};
use switchyard::chat::{ChatRequest, Message};
use switchyard::credential::Secret;
use switchyard::route::{Retry, Route};
use switchyard::trail::Outcome;
use switchyard::{ErrorKind, ProviderEntry, Router};
use switchyard_providers::{ProviderKind, ProviderSettings, build};

#[tokio::test]
async fn a_503_from_openai_falls_over_to_anthropic_with_the_trail() {
    let overloaded = json!({"error": {"message": "The server is overloaded", "type": "server_error", "param": null, "code": null}});
    let openai =
        Fake::start(only_posts_to(&["/v1/chat/completions"], move |_| json_reply(503, &[], &overloaded)))
            .await;
    let answer = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Bonjour!"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 3}
    });
    let anthropic =
        Fake::start(only_posts_to(&["/v1/messages"], move |_| json_reply(200, &[], &answer))).await;

    let openai_provider =
        build(&ProviderSettings::new(ProviderKind::OpenAi).base_url(openai.url("/v1"))).unwrap();
    let anthropic_provider =
        build(&ProviderSettings::new(ProviderKind::Anthropic).base_url(anthropic.origin())).unwrap();
    let router = Router::builder()
        .provider(ProviderEntry::from_arc("openai", openai_provider).key(Secret::new("sk-openai-test-1")))
        .provider(ProviderEntry::from_arc("claude", anthropic_provider).key(Secret::new("sk-ant-test-2")))
        .route(
            Route::builder("default")
                .target("openai:gpt-4o-mini")
                .target("claude:claude-sonnet-4-5")
                .retry(Retry {
                    max_attempts: 2,
                    backoff_base: std::time::Duration::from_millis(1),
                    ..Retry::default()
                })
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();

    let request =
        ChatRequest::new("default", vec![Message::system("Answer in French."), Message::user("Hello")]);
    let answer = router.chat(&request).await.unwrap();

    assert_eq!(answer.response.text().as_deref(), Some("Bonjour!"));
    assert_eq!(answer.served_by.to_string(), "claude:claude-sonnet-4-5");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Retried, Outcome::Failed, Outcome::Ok]);
    let first = answer.trail.attempts()[0].error.as_ref().unwrap();
    assert_eq!((first.kind(), first.status()), (ErrorKind::Unavailable, Some(503)));
    assert_eq!(openai.requests().len(), 2, "503 is retried once on the same target");
    assert_eq!(answer.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((12, 3)));

    let seen = anthropic.requests();
    let (headers, body) = (&seen[0].headers, &seen[0].body);
    assert_eq!(headers["x-api-key"], "sk-ant-test-2");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["system"], "Answer in French.");
    assert_eq!(body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]));
}

/// A route of an OpenAI-dialect target refusing every request with `refusal` (a 400), then a
/// second target; with a content-policy chain to a third when `chain`. Returns the router, the
/// refusing upstream and the content-policy one.
async fn refused_by(refusal: serde_json::Value, chain: bool) -> (Router, Fake, Fake, Fake) {
    let strict =
        Fake::start(only_posts_to(&["/v1/chat/completions"], move |_| json_reply(400, &[], &refusal))).await;
    let answer = |text: &str| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        })
    };
    let (general_answer, lenient_answer) = (answer("general"), answer("lenient"));
    let general =
        Fake::start(only_posts_to(&["/v1/chat/completions"], move |_| json_reply(200, &[], &general_answer)))
            .await;
    let lenient =
        Fake::start(only_posts_to(&["/v1/chat/completions"], move |_| json_reply(200, &[], &lenient_answer)))
            .await;
    let entry = |id: &str, fake: &Fake| {
        let provider = build(&ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"))).unwrap();
        ProviderEntry::from_arc(id, provider).key(Secret::new(format!("sk-{id}-test-key")))
    };
    let mut route = Route::builder("default").target("strict:m").target("general:m");
    if chain {
        route = route.content_policy("lenient:m");
    }
    let router = Router::builder()
        .provider(entry("strict", &strict))
        .provider(entry("general", &general))
        .provider(entry("lenient", &lenient))
        .route(route.build().unwrap())
        .build()
        .unwrap();
    (router, strict, general, lenient)
}

fn hello() -> ChatRequest {
    ChatRequest::new("default", vec![Message::user("Hello")])
}

#[tokio::test]
async fn an_openai_content_policy_violation_goes_once_to_the_content_policy_chain() {
    let refusal = json!({"error": {"code": "content_policy_violation", "message": "Your request was rejected as a result of our safety system.", "param": null, "type": "invalid_request_error"}});
    let (router, strict, general, lenient) = refused_by(refusal, true).await;

    let answer = router.chat(&hello()).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "lenient:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
    let first = answer.trail.attempts()[0].error.as_ref().unwrap();
    assert_eq!((first.kind(), first.status()), (ErrorKind::ContentFiltered, Some(400)));
    assert_eq!((strict.requests().len(), general.requests().len(), lenient.requests().len()), (1, 0, 1));
}

#[tokio::test]
async fn an_azure_content_filter_rejection_goes_once_to_the_content_policy_chain() {
    let refusal = json!({"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.", "type": null, "param": "prompt", "code": "content_filter", "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {"jailbreak": {"filtered": true, "detected": true}}}}});
    let (router, _strict, general, lenient) = refused_by(refusal, true).await;

    let answer = router.chat(&hello()).await.unwrap();

    assert_eq!(answer.served_by.to_string(), "lenient:m");
    assert_eq!(answer.trail.outcomes(), vec![Outcome::Redirected, Outcome::Ok]);
    assert_eq!((general.requests().len(), lenient.requests().len()), (0, 1));
}

#[tokio::test]
async fn a_content_policy_violation_without_a_chain_is_returned_as_the_provider_s() {
    let refusal = json!({"error": {"code": "content_policy_violation", "message": "Your request was rejected as a result of our safety system.", "param": null, "type": "invalid_request_error"}});
    let (router, _strict, general, _lenient) = refused_by(refusal, false).await;

    let error = router.chat(&hello()).await.expect_err("no chain: the refusal is the answer");

    assert!(matches!(error, switchyard::RouteError::Upstream { .. }), "{error:?}");
    let refused = error.provider_error().unwrap();
    assert_eq!((refused.kind(), refused.status()), (ErrorKind::ContentFiltered, Some(400)));
    assert_eq!(general.requests().len(), 0, "a refusal is not fallen back on");
}
