//! The client's headers an adapter passes on: beta opt-ins, the API version (unless the
//! configuration names one) and the idempotency key, each to the API that knows it.

#![allow(clippy::unwrap_used)]

mod support;

use axum::http::HeaderMap;
use serde_json::json;
use support::{Caller, Fake, json_reply};
use switchyard::chat::{ChatRequest, Message};
use switchyard::provider::Provider;
use switchyard::trace::TraceContext;
use switchyard_providers::anthropic::AnthropicProvider;
use switchyard_providers::openai::OpenAiProvider;
use switchyard_providers::{ProviderKind, ProviderSettings};

/// A server answering every chat in both dialects.
async fn upstream() -> Fake {
    Fake::start(|seen| {
        let body = if seen.path().ends_with("/messages") {
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                   "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                   "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}})
        } else {
            json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]})
        };
        json_reply(200, &[], &body)
    })
    .await
}

fn client_headers() -> Vec<(String, String)> {
    [
        ("anthropic-beta", "files-api-2025-04-14"),
        ("anthropic-version", "2099-01-01"),
        ("openai-beta", "assistants=v2"),
        ("idempotency-key", "retry-42"),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v.to_owned()))
    .collect()
}

async fn chat(provider: &dyn Provider, forward: &[(String, String)]) {
    chat_traced(provider, forward, None).await;
}

async fn chat_traced(provider: &dyn Provider, forward: &[(String, String)], trace: Option<TraceContext>) {
    let caller = Caller::new(provider, Some("sk-upstream-0123456789")).forward(forward).trace(trace);
    let request = ChatRequest::new("default", vec![Message::user("hi")]);
    provider.chat(caller.call("m", None), &request).await.unwrap();
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers.get_all(name).iter().map(|v| v.to_str().unwrap()).collect()
}

#[tokio::test]
async fn anthropic_gets_its_betas_the_clients_version_and_the_idempotency_key() {
    let fake = upstream().await;
    let settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin());
    chat(&AnthropicProvider::new(&settings).unwrap(), &client_headers()).await;
    let headers = fake.last_request().headers;
    assert_eq!(header(&headers, "anthropic-beta"), ["files-api-2025-04-14"]);
    assert_eq!(header(&headers, "anthropic-version"), ["2099-01-01"], "the client's over the default");
    assert_eq!(header(&headers, "idempotency-key"), ["retry-42"]);
    assert!(headers.get("openai-beta").is_none(), "not OpenAI's");
    assert_eq!(header(&headers, "x-api-key"), ["sk-upstream-0123456789"]);

    // A version the configuration names wins; configured betas and the client's add up.
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin());
    settings.api_version = Some("2023-06-01".to_owned());
    settings.headers.push(("anthropic-beta".to_owned(), "prompt-caching-2024-07-31".to_owned()));
    chat(&AnthropicProvider::new(&settings).unwrap(), &client_headers()).await;
    let headers = fake.last_request().headers;
    assert_eq!(header(&headers, "anthropic-version"), ["2023-06-01"]);
    assert_eq!(header(&headers, "anthropic-beta"), ["prompt-caching-2024-07-31", "files-api-2025-04-14"]);
}

#[tokio::test]
async fn openai_gets_its_beta_and_the_idempotency_key_and_nothing_of_anthropics() {
    let fake = upstream().await;
    let settings = ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"));
    chat(&OpenAiProvider::new(&settings).unwrap(), &client_headers()).await;
    let headers = fake.last_request().headers;
    assert_eq!(header(&headers, "openai-beta"), ["assistants=v2"]);
    assert_eq!(header(&headers, "idempotency-key"), ["retry-42"]);
    assert!(headers.get("anthropic-beta").is_none() && headers.get("anthropic-version").is_none());
    assert_eq!(header(&headers, "authorization"), ["Bearer sk-upstream-0123456789"]);
}

#[tokio::test]
async fn a_traced_call_carries_its_attempt_span_and_an_untraced_one_nothing() {
    let fake = upstream().await;
    let span = TraceContext {
        trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
        span_id: 0x00f067aa0ba902b7,
        sampled: true,
    };
    let providers: [Box<dyn Provider>; 2] = [
        Box::new(
            OpenAiProvider::new(&ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1")))
                .unwrap(),
        ),
        Box::new(
            AnthropicProvider::new(&ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin()))
                .unwrap(),
        ),
    ];
    for provider in &providers {
        // A client's own traceparent is not forwarded: the attempt's span is the upstream's parent.
        let forward = vec![
            ("traceparent".to_owned(), "00-11111111111111111111111111111111-2222222222222222-01".to_owned()),
            ("tracestate".to_owned(), "vendor=abc".to_owned()),
        ];
        chat_traced(provider.as_ref(), &forward, Some(span)).await;
        let headers = fake.last_request().headers;
        assert_eq!(
            header(&headers, "traceparent"),
            ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
            "{}",
            provider.kind()
        );
        assert_eq!(
            header(&headers, "tracestate"),
            ["vendor=abc"],
            "the client's vendor state travels with it"
        );
        chat_traced(provider.as_ref(), &forward, None).await;
        let headers = fake.last_request().headers;
        assert!(
            headers.get("traceparent").is_none() && headers.get("tracestate").is_none(),
            "{}",
            provider.kind()
        );
    }
}
