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
