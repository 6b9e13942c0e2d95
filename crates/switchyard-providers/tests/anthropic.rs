//! The Anthropic adapter against the fake upstream of `support`, serving the documented
//! success, streaming and error shapes of the Messages API, and the Anthropic-dialect codec.

// Helpers outside `#[test]` functions unwrap too: a broken fake should fail the test loudly.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::Method;
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::{
    Fake, Harness, Recorder, broken_reply, http_date, items, json_reply, ok_chunks, pieces_reply,
    refused_origin, respond, rfc3339, sse_reply, text_of, tool_call, tool_result,
};
use switchyard::chat::{
    ChatChunk, ChatRequest, ChatResponse, ChunkChoice, Content, ContentPart, Delta, Dialect, FinishReason,
    FunctionCallDelta, FunctionDefinition, ImageUrl, Message, PromptTokensDetails, ResponseFormat, Role,
    Stop, Tool, ToolCallDelta, ToolChoice, ToolChoiceFunction, Usage,
};
use switchyard::provider::{Provider, RateLimitSink};
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::anthropic::{AnthropicProvider, ThinkingStyle, codec};
use switchyard_providers::{ProviderKind, ProviderSettings};

/// `usage` with the prompt cache's part told apart, as Anthropic states it.
fn with_cache(mut usage: Usage, read: Option<u32>, write: Option<u32>) -> Usage {
    usage.prompt_tokens_details =
        Some(PromptTokensDetails { cached_tokens: read, cache_write_tokens: write });
    usage
}

const KEY: &str = "sk-ant-test-0123456789abcdef";
const MODEL: &str = "claude-test-1";

// ---------------------------------------------------------------------------------------------
// Calling the adapter

fn provider(base_url: &str) -> AnthropicProvider {
    AnthropicProvider::new(&ProviderSettings::new(ProviderKind::Anthropic).base_url(base_url)).unwrap()
}

async fn chat_with(
    provider: AnthropicProvider,
    request: &ChatRequest,
    sink: Option<&dyn RateLimitSink>,
) -> Result<ChatResponse, ProviderError> {
    let harness = Harness::new(provider, Some(KEY), MODEL);
    harness.provider.chat(harness.call(MODEL, sink), request).await
}

async fn chat(fake: &Fake, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    chat_with(provider(&fake.origin()), request, None).await
}

/// Every item of a streamed answer (the stream ends after an error).
async fn stream(
    fake: &Fake,
    request: &ChatRequest,
) -> Result<Vec<Result<ChatChunk, ProviderError>>, ProviderError> {
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), MODEL);
    Ok(items(harness.stream(request).await?).await)
}

fn hello() -> ChatRequest {
    ChatRequest::new("default", vec![Message::user("Hello")])
}

fn text_answer() -> Value {
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1-20250929",
        "content": [{"type": "text", "text": "Bonjour"}, {"type": "text", "text": " !"}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    })
}

fn message(role: Role, content: Option<Content>) -> Message {
    Message {
        role,
        content,
        name: None,
        tool_calls: Vec::new(),
        tool_call_id: None,
        extra: Default::default(),
    }
}

fn weather_tool() -> Tool {
    Tool {
        kind: "function".into(),
        function: FunctionDefinition {
            name: "get_weather".into(),
            description: Some("Get weather".into()),
            parameters: Some(json!({"type": "object", "properties": {"city": {"type": "string"}}})),
            extra: Default::default(),
        },
        extra: Default::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Request translation

#[tokio::test]
async fn a_betas_allow_list_passes_only_the_clients_flags_it_names_and_configured_ones_always() {
    let fake = Fake::json(200, text_answer()).await;
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin());
    settings.headers.push(("anthropic-beta".into(), "tools-2024-05-16".into()));
    settings.betas = switchyard_providers::BetaPolicy::Allow(vec!["context-1m-2025-08-07".into()]);
    let harness = Harness::new(AnthropicProvider::new(&settings).unwrap(), Some(KEY), MODEL);
    let forward =
        vec![("anthropic-beta".to_owned(), "context-1m-2025-08-07,claude-code-20250219".to_owned())];
    let caller = support::Caller::new(&harness.provider, Some(KEY)).forward(&forward);
    harness.provider.chat(caller.call(MODEL, None), &hello()).await.unwrap();
    let sent: Vec<_> = fake
        .only_request()
        .headers
        .get_all("anthropic-beta")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent, ["tools-2024-05-16", "context-1m-2025-08-07"]);
}

#[tokio::test]
async fn request_carries_key_version_content_type_and_extra_headers_to_v1_messages() {
    let fake = Fake::json(200, text_answer()).await;
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin());
    settings.headers.push(("anthropic-beta".into(), "tools-2024-05-16".into()));
    chat_with(AnthropicProvider::new(&settings).unwrap(), &hello(), None).await.unwrap();

    let request = fake.only_request();
    assert_eq!(request.method, Method::POST);
    assert_eq!(request.path(), "/v1/messages");
    assert_eq!(request.headers["x-api-key"], KEY);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(request.headers["content-type"], "application/json");
    assert_eq!(request.headers["anthropic-beta"], "tools-2024-05-16");
    assert!(request.headers.get("authorization").is_none());
}

#[tokio::test]
async fn api_version_setting_replaces_the_default_version() {
    let fake = Fake::json(200, text_answer()).await;
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.url("/v1"));
    settings.api_version = Some("2099-01-01".into());
    chat_with(AnthropicProvider::new(&settings).unwrap(), &hello(), None).await.unwrap();

    let received = fake.requests();
    assert_eq!(received[0].path(), "/v1/messages", "a base URL ending in /v1 is not doubled");
    assert_eq!(received[0].headers["anthropic-version"], "2099-01-01");
}

#[tokio::test]
async fn model_comes_from_the_call_and_max_tokens_defaults_to_4096() {
    let fake = Fake::json(200, text_answer()).await;
    chat(&fake, &hello()).await.unwrap();
    assert_eq!(
        fake.only_request().body,
        json!({
            "model": MODEL,
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
        })
    );
}

#[tokio::test]
async fn a_request_without_a_limit_gets_the_room_its_claude_generation_has() {
    // Codex sets no output limit: a long patch must not be cut at 4096 on a current Claude.
    let cases = [
        ("claude-sonnet-4-5-20250929", 16_384),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", 16_384),
        ("claude-3-7-sonnet-latest", 16_384),
        ("claude-3-5-haiku-20241022", 8192),
        ("claude-3-haiku-20240307", 4096),
        ("MiniMax-M2", 4096),
    ];
    for (model, expected) in cases {
        let fake = Fake::json(200, text_answer()).await;
        let harness = Harness::new(provider(&fake.origin()), Some(KEY), model);
        harness.provider.chat(harness.call(model, None), &hello()).await.unwrap();
        assert_eq!(fake.only_request().body["max_tokens"], expected, "{model}");
    }
    // What the client set stands.
    let fake = Fake::json(200, text_answer()).await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), "claude-sonnet-4-5");
    let mut limited = hello();
    limited.max_tokens = Some(100);
    harness.provider.chat(harness.call("claude-sonnet-4-5", None), &limited).await.unwrap();
    assert_eq!(fake.only_request().body["max_tokens"], 100);
}

#[tokio::test]
async fn claude_codes_adaptive_thinking_reaches_claude_4_5_as_a_budget_and_the_rest_as_written() {
    // Claude Code asks a route's name (a model it does not know) for adaptive thinking with an
    // effort, which Claude before 4.6 refuses.
    let written = br#"{"model":"route","max_tokens":32000,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"messages":[{"role":"user","content":"Hi"}],"metadata":{"user_id":"u"}}"#;
    let mut request = switchyard_providers::anthropic::codec::request_from_slice(written).unwrap();
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Anthropic, &written[..]));
    let fake = Fake::json(200, text_answer()).await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), "claude-sonnet-4-5-20250929");
    harness.provider.chat(harness.call("claude-sonnet-4-5-20250929", None), &request).await.unwrap();
    let seen = fake.only_request().body;
    assert_eq!(seen["thinking"], json!({"type": "enabled", "budget_tokens": 16384}), "{seen}");
    assert!(
        seen.get("output_config").is_none(),
        "the effort it does not take, and nothing else was there: {seen}"
    );
    assert_eq!(seen["metadata"], json!({"user_id": "u"}), "the rest as written");

    // A model that takes it is sent it as written.
    let fake = Fake::json(200, text_answer()).await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), "claude-opus-4-7");
    harness.provider.chat(harness.call("claude-opus-4-7", None), &request).await.unwrap();
    let seen = fake.only_request().body;
    assert_eq!(
        (&seen["thinking"], &seen["output_config"]),
        (&json!({"type": "adaptive"}), &json!({"effort": "high"}))
    );
}

/// A Claude that refuses, as signed for another, the thinking of any body that carries `marks`.
async fn refusing_thinking_that_carries(marks: &'static str) -> Fake {
    let refusal =
        error_body("invalid_request_error", "messages.1.content.0: Invalid `signature` in `thinking` block");
    Fake::start(move |seen| match seen.body.to_string().contains(marks) {
        true => json_reply(400, &[], &refusal),
        false => json_reply(200, &[], &text_answer()),
    })
    .await
}

/// An Anthropic client's request as the gateway reads it: decoded, its body kept.
fn written_request(written: &'static [u8]) -> ChatRequest {
    let mut request = switchyard_providers::anthropic::codec::request_from_slice(written).unwrap();
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Anthropic, written));
    request
}

#[tokio::test]
async fn past_thinking_the_target_refuses_as_not_its_own_is_left_out_and_the_request_sent_again() {
    // After a failover, a past turn's thinking signed for another Claude or account is refused:
    // the conversation goes on without it rather than ending the route.
    let fake = refusing_thinking_that_carries(r#""type":"thinking""#).await;
    let request = written_request(br#"{"model":"route","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Read it"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"from-another-claude"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]}"#);
    let answer = chat(&fake, &request).await.expect("answered without the past thinking");
    assert!(
        matches!(&answer.notices[..], [switchyard::chat::StreamNotice::Resent(note)] if note.contains("thinking")),
        "the attempt's trail says so: {:?}",
        answer.notices
    );
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].body["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}])
    );
    assert!(
        seen[1].body.get("thinking").is_none(),
        "after a tool turn without its thinking, none: {}",
        seen[1].body
    );

    // Only the thinking up to the turn the refusal names goes first: a later turn's, which the
    // target wrote itself, stays, and thinking goes on.
    let fake = refusing_thinking_that_carries("from-another-claude").await;
    let later = written_request(br#"{"model":"route","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Read it"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"from-another-claude"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"u","signature":"its-own"},{"type":"tool_use","id":"toolu_2","name":"Read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"y"}]}]}"#);
    chat(&fake, &later).await.expect("answered without the other Claude's thinking");
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body["messages"][3]["content"][0]["signature"], "its-own", "{}", seen[1].body);
    assert_eq!(seen[1].body["thinking"]["type"], "enabled", "thinking goes on");

    // Any other 400 is not sent again.
    let fake = Fake::json(400, error_body("invalid_request_error", "max_tokens: Field required")).await;
    chat(&fake, &request).await.unwrap_err();
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn thinking_a_model_refused_is_left_out_of_the_sessions_later_requests_at_once() {
    // A session that failed over between Claudes carries the other's thinking in every later
    // request: refused once, it is left out at once after, not refused again each time.
    let fake = refusing_thinking_that_carries("from-another-claude").await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), "claude-sonnet-4-5");
    let first = written_request(br#"{"model":"route","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Read it"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"from-another-claude"},{"type":"text","text":"read"}]},{"role":"user","content":"and?"}]}"#);
    harness.provider.chat(harness.call("claude-sonnet-4-5", None), &first).await.unwrap();
    assert_eq!(fake.requests().len(), 2, "refused once, then sent without it");

    let next = written_request(br#"{"model":"route","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Read it"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"from-another-claude"},{"type":"text","text":"read"}]},{"role":"user","content":"and?"},{"role":"assistant","content":[{"type":"thinking","thinking":"u","signature":"its-own"},{"type":"text","text":"so"}]},{"role":"user","content":"then?"}]}"#);
    let answer = harness.provider.chat(harness.call("claude-sonnet-4-5", None), &next).await.unwrap();
    let seen = fake.requests();
    assert_eq!(seen.len(), 3, "sent once, without the thinking refused before");
    let sent = seen[2].body.to_string();
    assert!(!sent.contains("from-another-claude") && sent.contains("its-own"), "{sent}");
    assert!(
        matches!(&answer.notices[..], [switchyard::chat::StreamNotice::Resent(note)] if note.contains("refused before")),
        "the attempt's trail says so: {:?}",
        answer.notices
    );

    // Another model has not refused it: it is sent as written, and refused there in turn.
    harness.provider.chat(harness.call("claude-opus-4-5", None), &next).await.unwrap();
    let seen = fake.requests();
    assert_eq!(seen.len(), 5);
    assert!(seen[3].body.to_string().contains("from-another-claude"));

    // Nor has another key of the provider (another account, perhaps, whose thinking it is).
    let other = support::Caller::new(&harness.provider, Some("sk-ant-another-account-0123456789"));
    harness.provider.chat(other.call("claude-sonnet-4-5", None), &next).await.unwrap();
    let seen = fake.requests();
    assert_eq!(seen.len(), 7, "sent as written under that key, refused, sent again");
    assert!(seen[5].body.to_string().contains("from-another-claude"));
}

#[tokio::test]
async fn conversation_becomes_system_prompt_and_alternating_turns_with_tools_and_images() {
    let fake = Fake::json(200, text_answer()).await;
    let assistant_calls = Message {
        tool_calls: vec![
            tool_call("call_1", "get_weather", r#"{"city":"Paris"}"#),
            tool_call("call_2", "get_time", ""),
        ],
        ..Message::assistant("Checking.")
    };
    let images = message(
        Role::User,
        Some(Content::Parts(vec![
            ContentPart::Text { text: "Look:".into() },
            ContentPart::ImageUrl {
                image_url: ImageUrl { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None },
            },
            ContentPart::ImageUrl {
                image_url: ImageUrl {
                    url: "https://example.com/cat.png".into(),
                    detail: Some("high".into()),
                },
            },
        ])),
    );
    let request = ChatRequest::new(
        "default",
        vec![
            Message::system("You are terse."),
            Message::text(Role::Developer, "Answer in French."),
            Message::user("Hi"),
            images,
            assistant_calls,
            tool_result("call_1", "21C"),
            tool_result("call_2", "12:00"),
            Message::user("Thanks"),
            Message::assistant("De rien."),
            Message::assistant("Autre chose ?"),
        ],
    );
    chat(&fake, &request).await.unwrap();

    assert_eq!(
        fake.only_request().body,
        json!({
            "model": MODEL,
            "max_tokens": 4096,
            "system": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in French."}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Hi"},
                    {"type": "text", "text": "Look:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "21C"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "12:00"},
                    {"type": "text", "text": "Thanks"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "De rien."},
                    {"type": "text", "text": "Autre chose ?"}
                ]}
            ]
        })
    );
}

#[tokio::test]
async fn a_single_system_message_is_sent_as_a_string() {
    let fake = Fake::json(200, text_answer()).await;
    let request = ChatRequest::new("default", vec![Message::system("Be terse."), Message::user("Hi")]);
    chat(&fake, &request).await.unwrap();
    assert_eq!(fake.only_request().body["system"], "Be terse.");
}

#[tokio::test]
async fn tools_and_each_tool_choice_take_anthropic_shapes() {
    let choices = [
        (ToolChoice::Mode("auto".into()), json!({"type": "auto"})),
        (ToolChoice::Mode("none".into()), json!({"type": "none"})),
        (ToolChoice::Mode("required".into()), json!({"type": "any"})),
        (
            ToolChoice::Function {
                kind: "function".into(),
                function: ToolChoiceFunction { name: "get_weather".into() },
            },
            json!({"type": "tool", "name": "get_weather"}),
        ),
    ];
    for (choice, expected) in choices {
        let fake = Fake::json(200, text_answer()).await;
        let request = ChatRequest { tools: vec![weather_tool()], tool_choice: Some(choice), ..hello() };
        chat(&fake, &request).await.unwrap();
        let body = fake.only_request().body;
        assert_eq!(body["tool_choice"], expected);
        assert_eq!(
            body["tools"],
            json!([{
                "name": "get_weather",
                "description": "Get weather",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}
            }])
        );
    }
}

#[tokio::test]
async fn sampling_parameters_and_stop_map_to_anthropic_fields() {
    let fake = Fake::json(200, text_answer()).await;
    let request = ChatRequest {
        temperature: Some(0.3),
        top_p: Some(0.9),
        max_tokens: Some(200),
        stop: Some(Stop::Many(vec!["###".into(), "END".into()])),
        ..hello()
    };
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert_eq!(body["temperature"], 0.3);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["max_tokens"], 200);
    assert_eq!(body["stop_sequences"], json!(["###", "END"]));
}

#[tokio::test]
async fn what_claude_refuses_of_an_openai_clients_sampling_and_stops_is_mended_or_unsupported() {
    let fake = Fake::json(200, text_answer()).await;
    let provider = provider(&fake.origin());
    let caller = support::Caller::new(&provider, Some(KEY));
    let sonnet = "claude-sonnet-4-5-20250929";
    let both = |t: f64, p: f64| ChatRequest { temperature: Some(t), top_p: Some(p), ..hello() };
    // Claude from Opus 4.1 on takes one sampler: the one at its default goes.
    provider.chat(caller.call(sonnet, None), &both(0.3, 1.0)).await.unwrap();
    let body = fake.last_request().body;
    assert_eq!((&body["temperature"], body.get("top_p")), (&json!(0.3), None));
    provider.chat(caller.call(sonnet, None), &both(1.0, 0.8)).await.unwrap();
    let body = fake.last_request().body;
    assert_eq!((body.get("temperature"), &body["top_p"]), (None, &json!(0.8)));
    // Claude Sonnet 4 takes both.
    provider.chat(caller.call("claude-sonnet-4-20250514", None), &both(0.3, 0.8)).await.unwrap();
    assert_eq!(fake.last_request().body["top_p"], 0.8);
    assert_eq!(fake.requests().len(), 3);

    // Both set toward a model that takes one; a stop sequence of white space only, which
    // Anthropic refuses; nothing to say: unsupported, naming it, before anything is sent.
    let error = provider.chat(caller.call(sonnet, None), &both(0.3, 0.8)).await.unwrap_err();
    assert!(
        error.is_unsupported() && error.detail().contains("`top_p` is 0.8 beside a temperature of 0.3"),
        "{error:?}"
    );
    let newline = ChatRequest { stop: Some(Stop::Many(vec!["END".into(), "\n".into()])), ..hello() };
    let error = provider.chat(caller.call(sonnet, None), &newline).await.unwrap_err();
    assert!(error.is_unsupported() && error.detail().contains(r#"`stop` holds "\n""#), "{error:?}");
    let empty = ChatRequest::new("default", vec![Message::user("")]);
    let error = provider.chat(caller.call(sonnet, None), &empty).await.unwrap_err();
    assert!(error.is_unsupported() && error.detail().contains("`messages`"), "{error:?}");
    assert_eq!(fake.requests().len(), 3, "nothing sent for the refused ones");
}

#[tokio::test]
async fn harmless_openai_fields_are_ignored_and_mappable_ones_are_mapped() {
    let fake = Fake::json(200, text_answer()).await;
    let mut request = ChatRequest { tools: vec![weather_tool()], seed: Some(7), ..hello() };
    for (key, value) in [
        ("user", json!("end-user-42")),
        ("n", json!(1)),
        ("stream_options", json!({"include_usage": true})),
        ("parallel_tool_calls", json!(false)),
        ("store", json!(false)),
        ("logprobs", json!(false)),
        ("frequency_penalty", json!(0)),
        ("top_logprobs", Value::Null),
        ("max_completion_tokens", json!(300)),
        ("top_k", json!(40)),
    ] {
        request.extra.insert(key.into(), value);
    }
    chat(&fake, &request).await.unwrap();

    let body = fake.only_request().body;
    assert_eq!(body["metadata"], json!({"user_id": "end-user-42"}));
    assert_eq!(body["max_tokens"], 300);
    assert_eq!(body["top_k"], 40, "compatible servers' `top_k` is Claude's too");
    assert_eq!(body["tool_choice"], json!({"type": "auto", "disable_parallel_tool_use": true}));
    let mut keys: Vec<_> = body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["max_tokens", "messages", "metadata", "model", "tool_choice", "tools", "top_k"]);

    // `safety_identifier`, OpenAI's successor of `user`, names the end user when `user` does not.
    let fake = Fake::json(200, text_answer()).await;
    let mut request = hello();
    request.extra.insert("safety_identifier".into(), json!("u-9"));
    chat(&fake, &request).await.unwrap();
    assert_eq!(fake.only_request().body["metadata"], json!({"user_id": "u-9"}));

    // vLLM's `top_k: -1` says "no top-k": Claude is sent none.
    let fake = Fake::json(200, text_answer()).await;
    let mut request = hello();
    request.extra.insert("top_k".into(), json!(-1));
    chat(&fake, &request).await.unwrap();
    assert_eq!(fake.only_request().body.get("top_k"), None);
}

#[tokio::test]
async fn meaningful_fields_without_an_anthropic_equivalent_are_refused_naming_the_field() {
    let fake = Fake::json(200, text_answer()).await;
    let schemaless = ResponseFormat::JsonSchema {
        json_schema: serde_json::from_value(json!({"name": "weather"})).unwrap(),
    };
    let mut cases = vec![
        (
            ChatRequest { response_format: Some(schemaless), ..hello() },
            "`response_format.json_schema.schema`",
        ),
        (
            ChatRequest {
                response_format: Some(ResponseFormat::JsonObject),
                tools: vec![weather_tool()],
                ..hello()
            },
            "`response_format` is `json_object` beside tools",
        ),
        (ChatRequest { temperature: Some(1.5), ..hello() }, "`temperature`"),
    ];
    for (key, value) in [
        ("logprobs", json!(true)),
        ("reasoning_effort", json!("extreme")),
        ("n", json!(2)),
        ("top_k", json!(-2)),
    ] {
        let mut request = hello();
        request.extra.insert(key.into(), value);
        cases.push((request, if key == "n" { "`n`" } else { key }));
    }
    let mut bad_arguments = hello();
    bad_arguments.messages.push(Message {
        tool_calls: vec![tool_call("call_1", "get_weather", "{\"city\": ")],
        ..Message::assistant("")
    });
    cases.push((bad_arguments, "`messages[1].tool_calls[0].function.arguments`"));
    let mut missing_id = hello();
    missing_id.messages.push(Message::text(Role::Tool, "21C"));
    cases.push((missing_id, "`messages[1].tool_call_id`"));

    for (request, field) in cases {
        let error = chat(&fake, &request).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{field}");
        assert!(error.is_unsupported(), "{field}: another target may take it");
        assert!(error.detail().contains(field), "{field} not named in: {}", error.detail());
    }
    assert!(fake.requests().is_empty(), "nothing is sent for a request that cannot be translated");
}

/// The body `request` goes out as to `model`, with the provider's `thinking` setting.
async fn sent_to(model: &'static str, thinking: Option<ThinkingStyle>, request: &ChatRequest) -> Value {
    let fake = Fake::json(200, text_answer()).await;
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin());
    settings.thinking = thinking;
    Harness::new(AnthropicProvider::new(&settings).unwrap(), Some(KEY), model).chat(request).await.unwrap();
    fake.only_request().body
}

fn with_effort(effort: &str, mut request: ChatRequest) -> ChatRequest {
    request.extra.insert("reasoning_effort".into(), json!(effort));
    request
}

#[tokio::test]
async fn reasoning_effort_asks_claude_4_6_and_later_to_think_adaptively() {
    let body = sent_to("claude-opus-4-7", None, &with_effort("high", hello())).await;
    assert_eq!(body["thinking"], json!({"type": "adaptive", "display": "summarized"}));
    assert_eq!(body["output_config"], json!({"effort": "high"}));
    assert_eq!(body["max_tokens"], 32_000, "room to think and then answer, where the client set none");
    assert!(body.get("reasoning_effort").is_none());

    // Beside a structured output, the effort joins its `output_config`.
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    let format = ResponseFormat::JsonSchema {
        json_schema: serde_json::from_value(json!({"name": "out", "schema": schema})).unwrap(),
    };
    let request = with_effort("low", ChatRequest { response_format: Some(format), ..hello() });
    let body = sent_to("claude-sonnet-4-6", None, &request).await;
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": schema}, "effort": "low"})
    );
}

#[tokio::test]
async fn reasoning_effort_gives_earlier_claudes_a_budget_within_max_tokens() {
    let request = with_effort("medium", ChatRequest { max_tokens: Some(1000), ..hello() });
    let body = sent_to("claude-sonnet-4-5-20250929", None, &request).await;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 8192}));
    assert_eq!(body["max_tokens"], 9192, "the budget is added: the answer keeps its 1000 tokens");
    assert!(body.get("output_config").is_none());

    let roomy = with_effort("minimal", ChatRequest { max_tokens: Some(20_000), ..hello() });
    let body = sent_to("claude-3-7-sonnet-latest", None, &roomy).await;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
    assert_eq!(body["max_tokens"], 20_000);

    // Grown no further than the smallest output limit of the models that take a budget.
    let close = with_effort("high", ChatRequest { max_tokens: Some(16_000), ..hello() });
    let body = sent_to("claude-opus-4-1-20250805", None, &close).await;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
    assert_eq!(body["max_tokens"], 32_000);
    let hardest = sent_to("claude-opus-4-1-20250805", None, &with_effort("xhigh", hello())).await;
    assert_eq!(hardest["thinking"]["budget_tokens"], 24576);
    assert_eq!(hardest["max_tokens"], 32_000, "the budget stays below max_tokens");
}

#[tokio::test]
async fn a_claude_that_cannot_think_is_refused_for_reasoning_effort_so_the_route_goes_on() {
    let fake = Fake::json(200, text_answer()).await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), "claude-3-5-sonnet-20241022");
    let error = harness.chat(&with_effort("low", hello())).await.unwrap_err();
    assert!(error.is_unsupported(), "another target may take it");
    assert!(
        error.detail().contains("`reasoning_effort`") && error.detail().contains("claude-3-5-sonnet"),
        "{}",
        error.detail()
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn thinking_goes_only_where_anthropic_takes_it() {
    let signed = json!([{"type": "thinking", "thinking": "Hmm.", "signature": "EqQBCgIYAhIM"}]);
    let answered = || {
        let mut message = Message::assistant("Paris.");
        message.extra.insert("thinking_blocks".into(), signed.clone());
        message
    };

    // A prefill: the answer goes on from the assistant's words, which thinking cannot precede.
    let prefill = ChatRequest {
        messages: vec![Message::user("Capital of France?"), Message::assistant("The capital is")],
        ..hello()
    };
    let body = sent_to("claude-opus-4-7", None, &with_effort("high", prefill)).await;
    assert!(body.get("thinking").is_none() && body.get("output_config").is_none(), "{body}");

    // Blocks sent back on a request that does not think are left out, as Anthropic wants.
    let later = ChatRequest {
        messages: vec![Message::user("Capital of France?"), answered(), Message::user("And Italy?")],
        ..hello()
    };
    let body = sent_to("claude-opus-4-7", None, &later).await;
    assert_eq!(body["messages"][1]["content"], json!([{"type": "text", "text": "Paris."}]), "{body}");
    let body = sent_to("claude-opus-4-7", None, &with_effort("none", later.clone())).await;
    assert_eq!(body["messages"][1]["content"], json!([{"type": "text", "text": "Paris."}]), "{body}");
    // And kept, opening the turn, on one that does.
    let body = sent_to("claude-opus-4-7", None, &with_effort("low", later)).await;
    assert_eq!(body["messages"][1]["content"][0], signed[0], "{body}");
}

#[tokio::test]
async fn the_providers_thinking_setting_wins_over_the_model_name() {
    let body = sent_to("claude-opus-4-7", Some(ThinkingStyle::Budget), &with_effort("low", hello())).await;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    let body = sent_to("house-model", Some(ThinkingStyle::Adaptive), &with_effort("low", hello())).await;
    assert_eq!(body["thinking"], json!({"type": "adaptive", "display": "summarized"}));

    let body = sent_to("claude-opus-4-7", None, &with_effort("none", hello())).await;
    assert!(body.get("thinking").is_none() && body.get("output_config").is_none(), "{body}");
}

#[tokio::test]
async fn what_claude_refuses_beside_thinking_is_refused_naming_the_field() {
    let forced = ToolChoice::Mode("required".into());
    let cases = [
        (ChatRequest { temperature: Some(0.2), ..hello() }, "`temperature`"),
        (ChatRequest { top_p: Some(0.5), ..hello() }, "`top_p`"),
        (ChatRequest { tools: vec![weather_tool()], tool_choice: Some(forced), ..hello() }, "`tool_choice`"),
    ];
    let fake = Fake::json(200, text_answer()).await;
    for (request, field) in cases {
        let error = chat(&fake, &with_effort("high", request)).await.unwrap_err();
        assert!(error.is_unsupported(), "{field}: another target may take it");
        assert!(
            error.detail().contains(field) && error.detail().contains("reasoning_effort"),
            "{}",
            error.detail()
        );
    }
    assert!(fake.requests().is_empty());
    // Temperature 1 is thinking's own.
    let body = sent_to(
        "claude-opus-4-7",
        None,
        &with_effort("high", ChatRequest { temperature: Some(1.0), ..hello() }),
    )
    .await;
    assert_eq!(body["temperature"], 1.0);
}

#[tokio::test]
async fn a_json_schema_response_format_becomes_anthropics_structured_output() {
    let fake = Fake::json(200, text_answer()).await;
    let schema = json!({"type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["reasoning", "answer"], "additionalProperties": false});
    let format = json!({"name": "out", "strict": true, "schema": schema});
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            json_schema: serde_json::from_value(format).unwrap(),
        }),
        ..hello()
    };
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert_eq!(body["output_config"], json!({"format": {"type": "json_schema", "schema": schema}}));
    let properties: Vec<_> =
        body["output_config"]["format"]["schema"]["properties"].as_object().unwrap().keys().collect();
    assert_eq!(properties, ["reasoning", "answer"], "the schema's order is its meaning");
    assert!(body.get("response_format").is_none());
}

/// A request in JSON mode (`response_format: json_object`).
fn json_mode() -> ChatRequest {
    ChatRequest { response_format: Some(ResponseFormat::JsonObject), ..hello() }
}

#[tokio::test]
async fn json_mode_is_a_forced_call_of_a_tool_taking_any_object_and_its_input_is_the_answer() {
    let mut answer = text_answer();
    answer["content"] = json!([{"type": "tool_use", "id": "toolu_01", "name": "json_answer",
        "input": {"city": "Paris", "temperature": 21}}]);
    answer["stop_reason"] = json!("tool_use");
    let fake = Fake::json(200, answer).await;
    let response = chat(&fake, &json_mode()).await.unwrap();

    let body = fake.only_request().body;
    assert_eq!(
        body["tools"],
        json!([{"name": "json_answer", "description": "Give your whole answer as this tool's input: one JSON object.",
            "input_schema": {"type": "object", "additionalProperties": true}}])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "json_answer", "disable_parallel_tool_use": true})
    );
    assert!(body.get("output_config").is_none() && body.get("response_format").is_none(), "{body}");

    let choice = &response.choices[0];
    let text = response.text().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"city": "Paris", "temperature": 21}));
    assert!(choice.message.tool_calls.is_empty(), "the tool is the gateway's, not the client's");
    assert_eq!(choice.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn json_mode_streams_its_answer_as_text_and_ends_in_a_plain_stop() {
    let events = vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "json_answer", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Par"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "is\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events))).await;
    let chunks = ok_chunks(stream(&fake, &json_mode()).await.unwrap());
    assert_eq!(text_of(&chunks), "{\"city\": \"Paris\"}");
    assert!(chunks.iter().flat_map(|c| &c.choices).all(|c| c.delta.tool_calls.is_empty()), "{chunks:#?}");
    assert_eq!(chunks.last().unwrap().choices[0].finish_reason, Some(FinishReason::Stop));

    // A call of the tool with no input is the empty object.
    let empty = vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "json_answer", "input": {}}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 2}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&empty))).await;
    let chunks = ok_chunks(stream(&fake, &json_mode()).await.unwrap());
    assert_eq!(text_of(&chunks), "{}");

    // A tool of that name is the client's own outside JSON mode: its call passes on as one.
    let events: Vec<(&str, Value)> = tool_stream_events()
        .into_iter()
        .map(|(name, data)| {
            (name, serde_json::from_str(&data.to_string().replace("get_weather", "json_answer")).unwrap())
        })
        .collect();
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events))).await;
    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());
    let named: Vec<&str> = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .flat_map(|c| &c.delta.tool_calls)
        .filter_map(|call| call.function.as_ref()?.name.as_deref())
        .collect();
    assert!(named.contains(&"json_answer"), "{chunks:#?}");
    assert_eq!(text_of(&chunks), "Let me check.", "its input is no text: {chunks:#?}");
    assert_eq!(chunks.last().unwrap().choices[0].finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn json_mode_is_unsupported_where_claude_thinks() {
    let fake = Fake::json(200, text_answer()).await;
    let error = chat(&fake, &with_effort("high", json_mode())).await.unwrap_err();
    assert!(error.is_unsupported(), "another target may take it: {error:?}");
    assert!(error.detail().contains("`response_format` is `json_object`"), "{}", error.detail());
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn anthropic_dialect_extra_fields_are_forwarded_untouched() {
    let fake = Fake::json(200, text_answer()).await;
    let mut request = ChatRequest { origin: Dialect::Anthropic, max_tokens: Some(1024), ..hello() };
    request.extra.insert("top_k".into(), json!(40));
    request.extra.insert("metadata".into(), json!({"user_id": "u-1"}));
    request.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 512}));
    chat(&fake, &request).await.unwrap();

    let body = fake.only_request().body;
    assert_eq!(body["top_k"], 40);
    assert_eq!(body["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 512}));
}

#[tokio::test]
async fn a_compatible_servers_sampler_claude_lacks_is_refused_naming_it() {
    // llama.cpp's `mirostat` (unlike `top_k`, which Claude has too: see above).
    let fake = Fake::json(200, text_answer()).await;
    let mut request = hello();
    request.extra.insert("mirostat".into(), json!(2));
    let error = chat(&fake, &request).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    assert!(error.is_unsupported() && error.detail().contains("`mirostat`"), "{error:?}");
    assert!(fake.requests().is_empty(), "nothing sent");
}

// ---------------------------------------------------------------------------------------------
// Response translation

#[tokio::test]
async fn text_answer_becomes_canonical_with_joined_text_and_usage() {
    let fake = Fake::json(200, text_answer()).await;
    let answer = chat(&fake, &hello()).await.unwrap();
    assert_eq!(answer.id, "msg_01XFDUDYJgAACzvnptvVoYEL");
    assert_eq!(answer.model, "claude-test-1-20250929");
    assert_eq!(answer.text().as_deref(), Some("Bonjour !"));
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(answer.usage, Some(with_cache(Usage::new(12, 4), Some(0), Some(0))));
    assert!(
        answer.extra.is_empty() && answer.choices[0].message.extra.is_empty(),
        "no Anthropic details leak into an OpenAI-dialect answer"
    );
}

#[tokio::test]
async fn tool_use_answer_becomes_tool_calls_with_serialized_arguments() {
    let fake = Fake::json(
        200,
        json!({
            "id": "msg_02", "type": "message", "role": "assistant", "model": MODEL,
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 25, "output_tokens": 31, "cache_read_input_tokens": 5}
        }),
    )
    .await;
    let answer = chat(&fake, &hello()).await.unwrap();
    let message = &answer.choices[0].message;
    assert_eq!(message.text_content().as_deref(), Some("Let me check."));
    assert_eq!(
        message.tool_calls,
        vec![
            tool_call("toolu_01A", "get_weather", r#"{"city":"Paris"}"#),
            tool_call("toolu_01B", "get_time", "{}")
        ]
    );
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        answer.usage,
        Some(with_cache(Usage::new(30, 31), Some(5), None)),
        "cached input counts toward prompt tokens, and is told apart"
    );
}

#[tokio::test]
async fn refusal_becomes_content_filter() {
    let mut body = text_answer();
    body["content"] = json!([]);
    body["stop_reason"] = json!("refusal");
    let fake = Fake::json(200, body).await;
    let answer = chat(&fake, &hello()).await.unwrap();
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::ContentFilter));
    assert!(answer.is_content_filtered());
}

#[tokio::test]
async fn stop_reasons_become_canonical_finish_reasons() {
    for (stop_reason, expected) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("tool_use", FinishReason::ToolCalls),
        ("refusal", FinishReason::ContentFilter),
        ("pause_turn", FinishReason::Other("pause_turn".into())),
    ] {
        let mut body = text_answer();
        body["stop_reason"] = json!(stop_reason);
        let fake = Fake::json(200, body).await;
        let answer = chat(&fake, &hello()).await.unwrap();
        assert_eq!(answer.choices[0].finish_reason, Some(expected), "{stop_reason}");
    }
}

#[tokio::test]
async fn a_stream_answered_whole_in_json_is_that_answer_and_anything_else_is_malformed() {
    // A server that ignored `stream` and answered whole: the answer, as a stream of it.
    let fake = Fake::json(200, text_answer()).await;
    let chunks = stream(&fake, &hello()).await.unwrap();
    let mut text = String::new();
    for chunk in chunks {
        for choice in chunk.unwrap().choices {
            text.push_str(choice.delta.content.as_deref().unwrap_or_default());
        }
    }
    assert_eq!(text, "Bonjour !", "both text blocks");
    let page = Fake::start(|_| respond(200, &[], "text/html", Body::from("<html>a proxy</html>"))).await;
    let error = stream(&page, &hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    assert!(error.detail().contains("text/html"), "{error}");
}

#[tokio::test]
async fn unparseable_200_is_a_malformed_response() {
    for (content_type, body) in [
        ("text/html", "<html>gateway says hi</html>".to_owned()),
        ("application/json", json!({"type": "message"}).to_string()),
    ] {
        let fake = Fake::start(move |_| respond(200, &[], content_type, Body::from(body.clone()))).await;
        let error = chat(&fake, &hello()).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse, "{error}");
    }
}

// ---------------------------------------------------------------------------------------------
// Streaming

/// An SSE body from `(event, data)` pairs, the way Anthropic writes it.
fn sse(events: &[(&str, Value)]) -> String {
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

fn message_start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [],
            "model": "claude-test-1-20250929", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 25, "output_tokens": 1}
        }}),
    )
}

fn text_stream_events() -> Vec<(&'static str, Value)> {
    vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " wörld 🚀"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 12}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

fn tool_stream_events() -> Vec<(&'static str, Value)> {
    vec![
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check."}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Par"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "is\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

#[tokio::test]
async fn streamed_text_arrives_as_role_text_and_finish_chunks() {
    let fake = Fake::start(|_| sse_reply(&[], &sse(&text_stream_events()))).await;
    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    assert_eq!(fake.only_request().body["stream"], true);
    assert_eq!(chunks.len(), 4, "{chunks:#?}");
    assert_eq!(chunks[0].choices[0].delta.role, Some(Role::Assistant));
    assert_eq!(chunks[0].id, "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY");
    assert_eq!(chunks[0].model, "claude-test-1-20250929");
    assert_eq!(text_of(&chunks), "Hello wörld 🚀");
    let last = chunks.last().unwrap();
    assert_eq!(last.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.usage, Some(Usage::new(25, 12)));
}

#[tokio::test]
async fn streamed_thinking_comes_as_reasoning_and_each_block_whole_once_signed() {
    let block = |index: u32, block: Value| {
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    };
    let delta = |index: u32, delta: Value| {
        ("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta}))
    };
    let stop = |index: u32| ("content_block_stop", json!({"type": "content_block_stop", "index": index}));
    let events = [
        vec![
            message_start(),
            block(0, json!({"type": "thinking", "thinking": "", "signature": ""})),
            delta(0, json!({"type": "thinking_delta", "thinking": "Six times "})),
            delta(0, json!({"type": "thinking_delta", "thinking": "seven."})),
            delta(0, json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"})),
            stop(0),
            block(1, json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"})),
            stop(1),
        ],
        text_stream_events()[1..]
            .iter()
            .map(|(name, data)| {
                let mut data = data.clone();
                if data.get("index").is_some() {
                    data["index"] = json!(2);
                }
                (*name, data)
            })
            .collect(),
    ]
    .concat();
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events))).await;
    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    let reasoning: String =
        chunks.iter().filter_map(|c| c.choices[0].delta.reasoning_content.clone()).collect();
    assert_eq!(reasoning, "Six times seven.");
    let blocks: Vec<_> = chunks.iter().flat_map(|c| c.choices[0].delta.thinking_blocks.clone()).collect();
    assert_eq!(
        blocks,
        [
            json!({"type": "thinking", "thinking": "Six times seven.", "signature": "EqQBCgIYAhIM"}),
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"}),
        ]
    );
    assert_eq!(text_of(&chunks), "Hello wörld 🚀");

    // An Anthropic client gets the provider's own events instead: no blocks beside them.
    let request = ChatRequest { origin: Dialect::Anthropic, ..hello() };
    let chunks = ok_chunks(stream(&fake, &request).await.unwrap());
    assert!(chunks.iter().all(|c| c.choices.iter().all(|c| c.delta.thinking_blocks.is_empty())));
}

#[tokio::test]
async fn streamed_tool_calls_reassemble_from_input_json_fragments() {
    let fake = Fake::start(|_| sse_reply(&[], &sse(&tool_stream_events()))).await;
    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    // Reassemble the way a client does: fragments with the same index concatenate.
    let mut calls: Vec<(Option<String>, Option<String>, String)> = Vec::new();
    for delta in chunks.iter().flat_map(|c| &c.choices).flat_map(|c| &c.delta.tool_calls) {
        let index = delta.index as usize;
        if calls.len() <= index {
            calls.resize(index + 1, (None, None, String::new()));
        }
        let call = &mut calls[index];
        if delta.id.is_some() {
            call.0 = delta.id.clone();
        }
        let function = delta.function.as_ref().unwrap();
        if function.name.is_some() {
            call.1 = function.name.clone();
        }
        call.2.push_str(function.arguments.as_deref().unwrap_or_default());
    }
    assert_eq!(
        calls,
        vec![
            (
                Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6".into()),
                Some("get_weather".into()),
                "{\"city\": \"Paris\"}".into()
            ),
            (Some("toolu_02".into()), Some("get_time".into()), "{}".into()),
        ],
        "tool-call indexes count tool calls, not content blocks; a call without arguments gets {{}}"
    );
    assert_eq!(text_of(&chunks), "Let me check.");
    assert_eq!(chunks.last().unwrap().choices[0].finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(chunks.last().unwrap().usage, Some(Usage::new(25, 89)));
}

#[tokio::test]
async fn sse_split_across_tcp_chunks_at_awkward_places_parses_the_same() {
    let body = sse(&text_stream_events()).replace('\n', "\r\n");
    let bytes = body.as_bytes();
    let crlf = body.find("\r\n").unwrap() + 1; // between \r and \n
    let rocket = body.find('🚀').unwrap() + 2; // inside the four bytes of 🚀
    let umlaut = body.find('ö').unwrap() + 1; // inside the two bytes of ö
    let mut cuts: Vec<usize> = (1..bytes.len()).step_by(3).chain([crlf, rocket, umlaut]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(bytes[start..cut].to_vec());
        start = cut;
    }
    pieces.push(bytes[start..].to_vec());
    assert!(pieces.iter().any(|p| p.ends_with(b"\r")), "a piece ends between \\r and \\n");
    assert!(pieces.iter().any(|p| std::str::from_utf8(p).is_err()), "a piece splits a character");

    let split = Fake::start(move |_| pieces_reply(pieces.clone())).await;
    let whole = Fake::start(move |_| sse_reply(&[], &body)).await;
    let split_chunks = ok_chunks(stream(&split, &hello()).await.unwrap());
    let whole_chunks = ok_chunks(stream(&whole, &hello()).await.unwrap());
    assert_eq!(text_of(&split_chunks), "Hello wörld 🚀");
    assert_eq!(
        split_chunks.iter().map(|c| (&c.choices, c.usage)).collect::<Vec<_>>(),
        whole_chunks.iter().map(|c| (&c.choices, c.usage)).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn stream_ending_before_message_stop_is_a_transport_error() {
    let events = text_stream_events();
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events[..4]))).await;
    let items = stream(&fake, &hello()).await.unwrap();

    let (last, rest) = items.split_last().unwrap();
    assert_eq!(text_of(&ok_chunks(rest.to_vec())), "Hello");
    let error = last.as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.detail().contains("stream ended before message_stop"), "{error}");
}

#[tokio::test]
async fn stream_cut_by_the_connection_is_a_transport_error() {
    let cut = Arc::new(tokio::sync::Notify::new());
    let body = sse(&text_stream_events()[..4]).into_bytes();
    let server_cut = cut.clone();
    let fake = Fake::start(move |_| broken_reply(vec![body.clone()], Some(server_cut.clone()))).await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), MODEL);
    let mut chunks = harness.stream(&hello()).await.unwrap();

    // Cut the connection only once the answer has visibly started.
    let first = chunks.next().await.unwrap().unwrap();
    assert_eq!(first.choices[0].delta.role, Some(Role::Assistant));
    cut.notify_one();
    let rest: Vec<_> = chunks.collect().await;

    let (last, before) = rest.split_last().unwrap();
    assert_eq!(text_of(&ok_chunks(before.to_vec())), "Hello");
    let error = last.as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport, "{error}");
}

#[tokio::test]
async fn error_event_inside_a_200_stream_ends_it_with_its_kind() {
    let mut events = text_stream_events()[..4].to_vec();
    events.push((
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    events.extend(text_stream_events()[4..].to_vec());
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events))).await;
    let items = stream(&fake, &hello()).await.unwrap();

    assert_eq!(items.len(), 3, "role, Hello, then the error and nothing after it");
    let error = items[2].as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(error.code(), Some("overloaded_error"));
    assert!(error.detail().contains("Overloaded"));
}

#[tokio::test]
async fn an_error_body_with_a_200_is_that_error() {
    let fake = Fake::json(200, error_body("overloaded_error", "Overloaded")).await;
    let error = chat(&fake, &hello()).await.unwrap_err();
    assert_eq!(
        (error.kind(), error.code(), error.status()),
        (ErrorKind::Unavailable, Some("overloaded_error"), Some(200))
    );
}

#[tokio::test]
async fn streamed_refusal_finishes_with_content_filter() {
    let events = vec![
        message_start(),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": null}, "usage": {"output_tokens": 0}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let fake = Fake::start(move |_| sse_reply(&[], &sse(&events))).await;
    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());
    assert!(chunks.last().unwrap().is_content_filtered());
}

#[tokio::test]
async fn stream_refused_before_it_starts_is_classified() {
    let fake = Fake::json(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .await;
    let error = stream(&fake, &hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(error.status(), Some(529));
}

// ---------------------------------------------------------------------------------------------
// Classification

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
}

#[tokio::test]
async fn each_documented_error_is_classified_from_its_type_and_status() {
    let rows = [
        (
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization.",
            ErrorKind::RateLimited,
        ),
        (529, "overloaded_error", "Overloaded", ErrorKind::Unavailable),
        (500, "api_error", "Internal server error", ErrorKind::Unavailable),
        (504, "timeout_error", "Request timed out", ErrorKind::Unavailable),
        (401, "authentication_error", "invalid x-api-key", ErrorKind::Auth),
        (
            403,
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
            ErrorKind::Auth,
        ),
        (404, "not_found_error", "model: claude-nope", ErrorKind::ModelNotFound),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 200251 tokens > 200000 maximum",
            ErrorKind::ContextLength,
        ),
        (
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ErrorKind::QuotaExceeded,
        ),
        (402, "billing_error", "Billing error", ErrorKind::QuotaExceeded),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
            ErrorKind::InvalidRequest,
        ),
        (
            400,
            "invalid_request_error",
            "messages: roles must alternate between \"user\" and \"assistant\"",
            ErrorKind::InvalidRequest,
        ),
    ];
    for (status, kind, message, expected) in rows {
        let fake = Fake::json(status, error_body(kind, message)).await;
        let error = chat(&fake, &hello()).await.unwrap_err();
        assert_eq!(error.kind(), expected, "{status} {kind}");
        assert_eq!(error.status(), Some(status));
        assert_eq!(error.code(), Some(kind), "the error type is kept as the code");
        assert_eq!(error.detail(), message, "the message is kept as the detail");
        // Too large for this provider: another may take it (the route's next target is asked).
        assert_eq!(error.is_unsupported(), status == 413, "{status} {kind}");
    }
}

#[tokio::test]
async fn monthly_spend_limit_429_is_quota_exceeded() {
    let fake = Fake::json(
        429,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your monthly spend limit.",
               "details": {"error_code": "enforced_spend_limit_reached"}}}),
    )
    .await;
    assert_eq!(chat(&fake, &hello()).await.unwrap_err().kind(), ErrorKind::QuotaExceeded);
}

#[tokio::test]
async fn error_without_an_anthropic_body_is_classified_by_status() {
    for (status, expected) in
        [(502, ErrorKind::Unavailable), (429, ErrorKind::RateLimited), (401, ErrorKind::Auth)]
    {
        let fake = Fake::start(move |_| {
            respond(status, &[], "text/html", Body::from("<html>upstream proxy error</html>"))
        })
        .await;
        let error = chat(&fake, &hello()).await.unwrap_err();
        assert_eq!(error.kind(), expected, "{status}");
        assert_eq!(error.code(), None);
        assert!(error.detail().contains("upstream proxy error"));
    }
}

#[tokio::test]
async fn refused_connection_is_a_transport_error() {
    let error = chat_with(provider(&refused_origin().await), &hello(), None).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport, "{error}");
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    let body = error_body("rate_limit_error", "slow down");
    let fake = Fake::start(move |_| json_reply(429, &[("retry-after", "7")], &body)).await;
    let error = chat(&fake, &hello()).await.unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let at = SystemTime::now() + Duration::from_secs(120);
    let (body, date) = (error_body("overloaded_error", "Overloaded"), http_date(at));
    let fake = Fake::start(move |_| json_reply(529, &[("retry-after", date.as_str())], &body)).await;
    let error = chat(&fake, &hello()).await.unwrap_err();
    let wait = error.retry_after().expect("a Retry-After from the HTTP date");
    assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120), "{wait:?}");
}

#[tokio::test]
async fn anthropic_ratelimit_headers_are_reported_to_the_sink() {
    let reset = rfc3339(SystemTime::now() + Duration::from_secs(30));
    let fake = Fake::start(move |_| {
        let headers = [
            ("anthropic-ratelimit-requests-limit", "1000"),
            ("anthropic-ratelimit-requests-remaining", "999"),
            ("anthropic-ratelimit-requests-reset", reset.as_str()),
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "79000"),
            ("anthropic-ratelimit-input-tokens-reset", reset.as_str()),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "16000"),
            ("anthropic-ratelimit-output-tokens-reset", reset.as_str()),
        ];
        json_reply(200, &headers, &text_answer())
    })
    .await;
    let sink = Recorder::default();
    chat_with(provider(&fake.origin()), &hello(), Some(&sink)).await.unwrap();

    let seen = sink.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let requests = seen[0].requests.unwrap();
    assert_eq!((requests.limit, requests.remaining), (Some(1000), Some(999)));
    let reset_after = requests.reset_after.unwrap();
    assert!(
        reset_after > Duration::from_secs(20) && reset_after <= Duration::from_secs(30),
        "{reset_after:?}"
    );
    assert_eq!(seen[0].input_tokens.unwrap().remaining, Some(79000));
    assert_eq!(seen[0].output_tokens.unwrap().limit, Some(16000));
}

#[tokio::test]
async fn ratelimit_headers_of_an_error_are_reported_too() {
    let body = error_body("rate_limit_error", "slow down");
    let headers = [("anthropic-ratelimit-requests-remaining", "0"), ("retry-after", "3")];
    let fake = Fake::start(move |_| json_reply(429, &headers, &body)).await;
    let sink = Recorder::default();
    let error = chat_with(provider(&fake.origin()), &hello(), Some(&sink)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    let seen = sink.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].requests.unwrap().remaining, Some(0));
    assert_eq!(seen[0].retry_after, Some(Duration::from_secs(3)));
}

#[tokio::test]
async fn a_content_block_index_past_the_most_a_message_opens_is_a_malformed_stream() {
    // Block 4,000,000,000 would have the answer assembled for an Anthropic client make room
    // for as many blocks: the stream is malformed there, for clients of either dialect.
    let huge = (
        "content_block_start",
        json!({"type": "content_block_start", "index": 4_000_000_000u32,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
    );
    let body = sse(&[message_start(), huge]);
    let fake = Fake::start(move |_| respond(200, &[], "text/event-stream", Body::from(body.clone()))).await;
    for request in [
        hello(),
        written_request(br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#),
    ] {
        let items = stream(&fake, &request).await.unwrap();
        let error = items.into_iter().find_map(Result::err).expect("the stream ends malformed");
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
        assert!(error.detail().contains("content block index of 4000000000"), "{error}");
    }
}

#[tokio::test]
async fn no_error_text_contains_the_key() {
    let echo = format!("invalid x-api-key: {KEY}");
    let mut errors = Vec::new();
    let sse_error = ("error", json!({"type": "error", "error": {"type": "api_error", "message": echo}}));
    for (status, content_type, body) in [
        (401, "application/json", error_body("authentication_error", &echo).to_string()),
        (500, "text/html", echo.clone()),
        (200, "text/html", echo.clone()),
        (200, "text/event-stream; charset=utf-8", sse(&[message_start(), sse_error])),
    ] {
        let fake = Fake::start(move |_| respond(status, &[], content_type, Body::from(body.clone()))).await;
        match stream(&fake, &hello()).await {
            Err(error) => errors.push(error),
            Ok(items) => errors.extend(items.into_iter().filter_map(Result::err)),
        }
        errors.push(chat(&fake, &hello()).await.unwrap_err());
    }
    errors.push(chat_with(provider("http://127.0.0.1:1"), &hello(), None).await.unwrap_err());

    assert!(errors.len() >= 9, "{errors:#?}");
    for error in &errors {
        assert!(!error.to_string().contains(KEY), "Display leaks the key: {error}");
        assert!(!format!("{error:?}").contains(KEY), "Debug leaks the key: {error:?}");
    }
    assert!(!format!("{:?}", provider("http://127.0.0.1:1")).contains(KEY));
}

// ---------------------------------------------------------------------------------------------
// Codec

#[test]
fn codec_reads_an_anthropic_request_into_canonical_form() {
    let request = codec::request_from_json(json!({
        "model": "default",
        "max_tokens": 512,
        "system": "Be terse.",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21C"},
                {"type": "text", "text": "And tomorrow?"}
            ]}
        ],
        "tools": [{"name": "get_weather", "description": "Get weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["###"],
        "temperature": 0.2,
        "stream": true,
        "top_k": 40
    }))
    .unwrap();

    assert_eq!(request.origin, Dialect::Anthropic);
    assert_eq!(request.model, "default");
    assert_eq!(request.max_tokens, Some(512));
    assert!(request.stream);
    assert_eq!(request.temperature, Some(0.2));
    assert_eq!(request.stop, Some(Stop::Many(vec!["###".into()])));
    assert_eq!(request.tool_choice, Some(ToolChoice::Mode("required".into())));
    assert_eq!(request.extra["parallel_tool_calls"], false);
    assert_eq!(request.extra["top_k"], 40);
    assert_eq!(
        request.tools,
        vec![Tool {
            kind: "function".into(),
            function: FunctionDefinition {
                name: "get_weather".into(),
                description: Some("Get weather".into()),
                parameters: Some(json!({"type": "object"})),
                extra: Default::default(),
            },
            extra: Default::default(),
        }]
    );
    let roles: Vec<_> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool, Role::User]);
    assert_eq!(
        request.messages[1].content,
        Some(Content::Parts(vec![
            ContentPart::Text { text: "What is this?".into() },
            ContentPart::ImageUrl {
                image_url: ImageUrl { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None }
            },
        ]))
    );
    assert_eq!(
        request.messages[2].tool_calls,
        vec![tool_call("toolu_1", "get_weather", r#"{"city":"Paris"}"#)]
    );
    assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(request.messages[3].text_content().as_deref(), Some("21C"));
    assert!(request.messages.iter().all(|m| m.extra.is_empty()), "nothing here needs a verbatim copy");
}

#[test]
fn codec_refuses_what_it_cannot_translate_naming_the_field() {
    let base = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let cases = [
        ("/max_tokens", Value::Null, "max_tokens"),
        ("/messages", json!([{"role": "tool", "content": "hi"}]), "messages[0].role"),
        (
            "/system",
            json!([{"type": "image", "source": {"type": "url", "url": "https://x"}}]),
            "system[0].type",
        ),
        ("/tool_choice", json!({"type": "sometimes"}), "tool_choice.type"),
    ];
    for (pointer, value, field) in cases {
        let mut body = base.clone();
        let key = &pointer[1..];
        if value.is_null() {
            body.as_object_mut().unwrap().remove(key);
        } else {
            body[key] = value;
        }
        let error = codec::request_from_json(body).unwrap_err();
        assert_eq!(error.field, field);
        let body = codec::error_body(ErrorKind::InvalidRequest, &error.to_string());
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["message"].as_str().unwrap().contains(field), "{body}");
    }
    // A limit too large to hold says so, not that it is negative.
    let mut body = base.clone();
    body["max_tokens"] = json!(1u64 << 63);
    let error = codec::request_from_json(body).unwrap_err();
    assert_eq!(error.to_string(), "`max_tokens` is 9223372036854775808: it must be at most 4294967295");
}

#[test]
fn codec_keeps_a_block_it_does_not_model_as_written() {
    let blocks = json!([
        {"type": "text", "text": "Summarize"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    ]);
    let body = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": blocks}]});
    let request = codec::request_from_json(body).unwrap();
    let message = &request.messages[0];
    let Some(Content::Parts(parts)) = &message.content else { panic!("{message:?}") };
    // Kept as written: an Anthropic upstream receives the block as the client wrote it (the
    // canonical form rebuilds it exactly, so no verbatim copy is needed beside it).
    assert_eq!(parts[1], ContentPart::Other(blocks[1].clone()));
    assert!(
        message
            .extra
            .get(switchyard_providers::anthropic::VERBATIM_BLOCKS)
            .is_none_or(|kept| *kept == blocks)
    );
}

/// An Anthropic client's request, as rich as the dialect gets: cache_control, thinking,
/// is_error tool results, server tools.
fn rich_anthropic_request() -> Value {
    json!({
        "model": "default",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/paris.png"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Need the tool.", "signature": "EqQBCgIYAhIM"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "service down", "is_error": true},
                {"type": "text", "text": "Try again.", "cache_control": {"type": "ephemeral"}}
            ]}
        ],
        "tools": [
            {"name": "get_weather", "description": "Get weather", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "stop_sequences": ["###"],
        "temperature": 0.5,
        "top_k": 40,
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024}
    })
}

#[tokio::test]
async fn codec_request_round_trips_through_canonical_to_anthropic_and_back() {
    let answer = json!({
        "id": "msg_03", "type": "message", "role": "assistant", "model": "claude-test-1-20250929",
        "content": [
            {"type": "thinking", "thinking": "Retry.", "signature": "EqQBCgIYAhIN"},
            {"type": "text", "text": "Trying again."},
            {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "Paris"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 40, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 300,
                  "service_tier": "standard"}
    });
    let fake = Fake::json(200, answer.clone()).await;
    let sent = rich_anthropic_request();
    let request = codec::request_from_json(sent.clone()).unwrap();
    let response = chat(&fake, &request).await.unwrap();

    let mut expected = sent;
    expected["model"] = json!(MODEL);
    assert_eq!(
        fake.only_request().body,
        expected,
        "an Anthropic request reaches Anthropic unchanged but for the model"
    );
    assert_eq!(response.usage, Some(with_cache(Usage::new(420, 40), Some(300), Some(20))));
    assert_eq!(
        response.choices[0].message.tool_calls,
        vec![tool_call("toolu_01B", "get_weather", r#"{"city":"Paris"}"#)]
    );
    assert_eq!(codec::response_to_json(&response).unwrap(), answer, "and its answer comes back unchanged");
}

#[test]
fn codec_writes_an_answer_from_another_provider_in_anthropic_shape() {
    let response = ChatResponse {
        id: "chatcmpl-1".into(),
        model: "gpt-4o-mini".into(),
        choices: vec![switchyard::chat::Choice {
            index: 0,
            message: Message {
                tool_calls: vec![tool_call("call_1", "get_weather", r#"{"city":"Paris"}"#)],
                ..Message::assistant("Checking.")
            },
            finish_reason: Some(FinishReason::ToolCalls),
            extra: Default::default(),
        }],
        usage: Some(Usage::new(13, 5)),
        ..ChatResponse::default()
    };
    assert_eq!(
        codec::response_to_json(&response).unwrap(),
        json!({
            "id": "chatcmpl-1", "type": "message", "role": "assistant", "model": "gpt-4o-mini",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 13, "output_tokens": 5}
        })
    );

    let mut broken = response;
    broken.choices[0].message.tool_calls[0].function.arguments = "{\"city\":".into();
    assert_eq!(
        codec::response_to_json(&broken).unwrap_err().field,
        "choices[0].message.tool_calls[0].function.arguments"
    );
    // Cut by its length limit: the call is as incomplete as Anthropic's own would be, and
    // `max_tokens` says so.
    broken.choices[0].finish_reason = Some(FinishReason::Length);
    let written = codec::response_to_json(&broken).unwrap();
    assert_eq!(
        (&written["content"][1]["input"], &written["stop_reason"]),
        (&json!({}), &json!("max_tokens"))
    );
}

#[tokio::test]
async fn a_tool_call_id_anthropic_would_refuse_is_made_one_it_takes_the_same_way_each_time() {
    // Kimi on vLLM names its calls `functions.get_weather:0`; Anthropic takes `^[a-zA-Z0-9_-]+$`.
    let odd = "functions.get_weather:0";
    let mut answer = ChatResponse::from_text("kimi", "");
    answer.choices[0].message.tool_calls = vec![tool_call(odd, "get_weather", "{}")];
    let written = codec::response_to_json(&answer).unwrap();
    assert_eq!(written["content"][0]["id"], "functions_get_weather_0", "{written}");
    let streamed =
        encode(&[chunk(call_delta(0, Some(odd), Some("get_weather"), "{}"), Some(FinishReason::ToolCalls))]);
    let start = streamed.iter().find(|(name, _)| *name == "content_block_start").unwrap();
    assert_eq!(start.1["content_block"]["id"], "functions_get_weather_0");

    // The conversation carried on from an OpenAI client reaches Claude with both ends alike.
    let fake = Fake::json(200, text_answer()).await;
    let mut call = Message::assistant("");
    call.content = None;
    call.tool_calls = vec![tool_call(odd, "get_weather", "{}")];
    let result = Message { tool_call_id: Some(odd.into()), ..Message::text(Role::Tool, "sunny") };
    let request = ChatRequest::new("default", vec![Message::user("Weather?"), call, result]);
    chat(&fake, &request).await.unwrap();
    let sent = fake.only_request().body;
    assert_eq!(sent["messages"][1]["content"][0]["id"], "functions_get_weather_0");
    assert_eq!(sent["messages"][2]["content"][0]["tool_use_id"], "functions_get_weather_0");
}

fn chunk(delta: Delta, finish_reason: Option<FinishReason>) -> ChatChunk {
    ChatChunk {
        id: "chatcmpl-9".into(),
        model: "gpt-4o-mini".into(),
        choices: vec![ChunkChoice { index: 0, delta, finish_reason }],
        ..ChatChunk::default()
    }
}

fn encode(chunks: &[ChatChunk]) -> Vec<(&'static str, Value)> {
    let mut encoder = codec::StreamEncoder::new();
    let mut events: Vec<_> = chunks.iter().flat_map(|chunk| encoder.push(chunk)).collect();
    events.extend(encoder.finish());
    events
}

fn encoded_message_start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "chatcmpl-9", "type": "message", "role": "assistant", "model": "gpt-4o-mini", "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}
        }}),
    )
}

#[test]
fn stream_encoder_writes_the_exact_event_sequence_for_text() {
    let mut usage =
        ChatChunk { choices: Vec::new(), usage: Some(Usage::new(9, 2)), ..chunk(Delta::default(), None) };
    usage.id = "chatcmpl-9".into();
    let events = encode(&[
        chunk(Delta { role: Some(Role::Assistant), ..Delta::default() }, None),
        chunk(Delta { content: Some("Hel".into()), ..Delta::default() }, None),
        chunk(Delta { content: Some("lo".into()), ..Delta::default() }, None),
        chunk(Delta::default(), Some(FinishReason::Stop)),
        usage,
    ]);
    assert_eq!(
        events,
        vec![
            encoded_message_start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}})
            ),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"input_tokens": 9, "output_tokens": 2}})
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]
    );
}

fn call_delta(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> Delta {
    Delta {
        tool_calls: vec![ToolCallDelta {
            index,
            id: id.map(Into::into),
            kind: id.map(|_| "function".into()),
            function: Some(FunctionCallDelta {
                name: name.map(Into::into),
                arguments: Some(arguments.into()),
            }),
            extra: Default::default(),
        }],
        ..Delta::default()
    }
}

#[test]
fn stream_encoder_writes_the_exact_event_sequence_for_tool_calls() {
    let events = encode(&[
        chunk(
            Delta { role: Some(Role::Assistant), content: Some("Checking.".into()), ..Delta::default() },
            None,
        ),
        chunk(call_delta(0, Some("call_1"), Some("get_weather"), ""), None),
        chunk(call_delta(0, None, None, "{\"city\":"), None),
        chunk(call_delta(0, None, None, "\"Paris\"}"), None),
        chunk(call_delta(1, Some("call_2"), Some("get_time"), "{}"), None),
        chunk(Delta::default(), Some(FinishReason::ToolCalls)),
    ]);
    assert_eq!(
        events,
        vec![
            encoded_message_start(),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking."}})
            ),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}})
            ),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}})
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}})
            ),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 0}})
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]
    );
}

#[test]
fn stream_encoder_holds_a_call_that_begins_while_the_open_one_goes_on_and_loses_no_fragment() {
    // A server that interleaves two parallel calls' fragments: 0 opens, 1 opens, 0, 1, 0.
    let events = encode(&[
        chunk(call_delta(0, Some("call_1"), Some("get_weather"), "{\"city\":"), None),
        chunk(call_delta(1, Some("call_2"), Some("get_time"), "{\"zone\":"), None),
        chunk(call_delta(0, None, None, " \"Par"), None),
        chunk(call_delta(1, None, None, " \"CET\"}"), None),
        chunk(call_delta(0, None, None, "is\"}"), None),
        chunk(Delta::default(), Some(FinishReason::ToolCalls)),
    ]);
    // One block open at a time, each whole: its start, its deltas, its stop.
    let mut open: Option<u64> = None;
    let mut inputs: Vec<(String, String)> = Vec::new();
    for (name, data) in &events {
        match *name {
            "content_block_start" => {
                assert_eq!(open, None, "a block began while another was open: {events:#?}");
                open = data["index"].as_u64();
                inputs.push((data["content_block"]["name"].as_str().unwrap().to_owned(), String::new()));
            }
            "content_block_delta" => {
                assert_eq!(data["index"].as_u64(), open, "a delta outside the open block");
                inputs.last_mut().unwrap().1.push_str(data["delta"]["partial_json"].as_str().unwrap());
            }
            "content_block_stop" => open = None,
            _ => {}
        }
    }
    let inputs: Vec<(String, Value)> =
        inputs.into_iter().map(|(name, json)| (name, serde_json::from_str(&json).unwrap())).collect();
    assert_eq!(
        inputs,
        [
            ("get_weather".to_owned(), json!({"city": "Paris"})),
            ("get_time".to_owned(), json!({"zone": "CET"}))
        ]
    );
}

#[tokio::test]
async fn anthropic_stream_decoded_and_reencoded_keeps_its_events() {
    let original = tool_stream_events();
    let served = sse(&original);
    let fake = Fake::start(move |_| sse_reply(&[], &served)).await;
    let request = ChatRequest { origin: Dialect::Anthropic, ..hello() };
    let chunks = ok_chunks(stream(&fake, &request).await.unwrap());
    let events = encode(&chunks);

    // What changes: pings and empty argument fragments carry nothing and go; a call without
    // arguments gets an explicit `{}`; usage is known only at the end of a canonical stream, so
    // it moves from message_start to message_delta.
    let mut expected: Vec<_> = original
        .into_iter()
        .filter(|(name, data)| *name != "ping" && data["delta"]["partial_json"] != "")
        .collect();
    expected[0].1["message"]["usage"] = json!({"input_tokens": 0, "output_tokens": 0});
    let no_arguments_stop = expected.len() - 3;
    expected.insert(
        no_arguments_stop,
        ("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}})),
    );
    let last_delta = expected.len() - 2;
    expected[last_delta].1["usage"] = json!({"input_tokens": 25, "output_tokens": 89});
    assert_eq!(events, expected);
}

#[test]
fn error_kinds_map_to_anthropic_error_types_and_statuses() {
    let table = [
        (ErrorKind::RateLimited, "rate_limit_error", 429),
        (ErrorKind::QuotaExceeded, "billing_error", 402),
        (ErrorKind::Timeout, "timeout_error", 504),
        (ErrorKind::Transport, "api_error", 502),
        (ErrorKind::Unavailable, "overloaded_error", 529),
        (ErrorKind::MalformedResponse, "api_error", 502),
        (ErrorKind::Auth, "authentication_error", 401),
        (ErrorKind::ModelNotFound, "not_found_error", 404),
        (ErrorKind::ContextLength, "invalid_request_error", 400),
        (ErrorKind::ContentFiltered, "invalid_request_error", 400),
        (ErrorKind::InvalidRequest, "invalid_request_error", 400),
        (ErrorKind::SchemaViolation, "api_error", 500),
        (ErrorKind::Cancelled, "api_error", 499),
    ];
    assert_eq!(table.len(), ErrorKind::ALL.len());
    for (kind, error_type, status) in table {
        assert_eq!(codec::error_mapping(kind), (error_type, status), "{kind}");
        assert_eq!(codec::error_type(kind), error_type);
        assert_eq!(codec::error_status(kind), status);
    }
}

#[test]
fn errors_are_written_in_anthropic_shape() {
    assert_eq!(
        codec::error_body(ErrorKind::RateLimited, "slow down"),
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );
    assert_eq!(
        codec::error_event(ErrorKind::Unavailable, "Overloaded"),
        ("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    );
}

#[test]
fn usage_details_cross_both_ways_between_the_dialects() {
    // OpenAI's counts (cached tokens inside the prompt count) to an Anthropic client:
    // `input_tokens` is what the cache did not serve.
    let mut answer = ChatResponse {
        id: "chatcmpl-1".into(),
        model: "gpt-test".into(),
        choices: vec![switchyard::chat::Choice {
            index: 0,
            message: Message::assistant("ok"),
            finish_reason: Some(FinishReason::Stop),
            extra: Default::default(),
        }],
        usage: Some(with_cache(Usage::new(1_000, 50), Some(800), None)),
        ..ChatResponse::default()
    };
    answer.usage.as_mut().unwrap().completion_tokens_details =
        Some(switchyard::chat::CompletionTokensDetails { reasoning_tokens: Some(20) });
    let anthropic = codec::response_to_json(&answer).unwrap();
    assert_eq!(anthropic["usage"]["input_tokens"], 200, "{anthropic}");
    assert_eq!(anthropic["usage"]["cache_read_input_tokens"], 800);
    assert_eq!(anthropic["usage"]["output_tokens"], 50);
    // And to an OpenAI client, the canonical counts are OpenAI's own shape.
    let openai = serde_json::to_value(answer.usage.unwrap()).unwrap();
    assert_eq!(openai["prompt_tokens_details"]["cached_tokens"], 800, "{openai}");
    assert_eq!(openai["completion_tokens_details"]["reasoning_tokens"], 20);
    assert!(openai["prompt_tokens_details"].get("cache_write_tokens").is_none(), "no such OpenAI field");
}

#[test]
fn codec_reads_a_system_message_in_its_place_in_the_conversation() {
    // As Claude Code sends it (beta `mid-conversation-system-2026-04-07`): after the first user turn.
    let reminder = json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]);
    let body = json!({"model": "m", "max_tokens": 10, "system": "You are Claude Code.", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": reminder},
        {"role": "system", "content": "Plain text too."}]});
    let request = codec::request_from_json(body).unwrap();
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::System, Role::System]);
    assert_eq!(request.messages[2].text_content().as_deref(), Some("Be brief."));
    assert_eq!(
        request.messages[2].extra.get(switchyard_providers::anthropic::VERBATIM_BLOCKS),
        Some(&reminder),
        "its cache_control is kept for an Anthropic upstream"
    );
    let image = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "system", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.invalid/x.png"}}]}]});
    assert_eq!(codec::request_from_json(image).unwrap_err().field, "messages[0].content[0].type");
}

/// A chunk carrying one of Anthropic's own events, as an Anthropic upstream passes it on.
fn native(event: &str, data: Value) -> ChatChunk {
    let frame = format!("event: {event}\ndata: {data}\n\n");
    let verbatim =
        switchyard::chat::Verbatim::new(switchyard::chat::Dialect::Anthropic, bytes::Bytes::from(frame));
    ChatChunk { verbatim: Some(verbatim), ..ChatChunk::default() }
}

/// What a writer sends for `chunks` then its end, as (event name, data) pairs.
fn written(chunks: Vec<ChatChunk>) -> Vec<(String, Value)> {
    use switchyard_providers::codec::StreamWriter as _;
    let mut writer = codec::MessagesStreamWriter::new();
    let mut out = Vec::new();
    for chunk in chunks {
        match writer.frame(&chunk) {
            Some(frame) => out.extend_from_slice(&frame),
            None => writer.chunk(chunk, &mut out),
        }
    }
    writer.end(&mut out);
    String::from_utf8(out)
        .unwrap()
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let (name, data) = event.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            (name.strip_prefix("event: ").unwrap().to_owned(), data)
        })
        .collect()
}

#[test]
fn a_stream_continued_after_the_providers_own_events_goes_on_in_the_open_text_block() {
    let events = written(vec![
        native("message_start", json!({"type": "message_start", "message": {"id": "msg_1"}})),
        native(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        native("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        native(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        native(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}}),
        ),
        // The stream broke here; another target's canonical chunks follow.
        chunk(Delta { content: Some("lo".into()), ..Delta::default() }, None),
        chunk(Delta::default(), Some(FinishReason::Stop)),
    ]);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        events[5].1,
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lo"}})
    );
    assert_eq!(events[6].1["index"], 1);
    assert_eq!(events[7].1["delta"]["stop_reason"], "end_turn");
}

#[test]
fn a_continuation_after_a_closed_block_opens_the_next_one() {
    let events = written(vec![
        native("message_start", json!({"type": "message_start", "message": {"id": "msg_1"}})),
        native(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        native(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        native("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        chunk(Delta { content: Some(" there".into()), ..Delta::default() }, Some(FinishReason::Stop)),
    ]);
    assert_eq!(events[4].1["index"], 1);
    assert_eq!(events[4].1["content_block"]["type"], "text");
    assert_eq!(events.iter().filter(|(name, _)| name == "message_start").count(), 1);
    assert_eq!(events.last().unwrap().0, "message_stop");
}

#[test]
fn a_providers_stream_that_said_why_it_stopped_but_not_message_stop_gets_one_message_stop() {
    let mut unterminated = chunk(Delta::default(), Some(FinishReason::Stop));
    unterminated.usage = Some(Usage::new(3, 2));
    let events = written(vec![
        native("message_start", json!({"type": "message_start", "message": {"id": "msg_1"}})),
        native(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        native("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        native("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})),
        // The adapter's finish for a stream that ended without `message_stop`: no frame of its own.
        unterminated,
    ]);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]
    );
}

/// An OpenAI client's tool with `function.strict`, as the OpenAI SDK's `parse()` writes it.
fn strict_tool() -> Tool {
    let mut tool = weather_tool();
    tool.function.extra.insert("strict".into(), json!(true));
    tool
}

#[tokio::test]
async fn an_openai_clients_strict_tool_is_claudes_strict_and_goes_without_it_where_refused() {
    // This Claude refuses strict tool use, as an older model or a gated cloud does.
    let refusal = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "tools.0.custom.strict: Extra inputs are not permitted"}});
    let fake = Fake::start(move |seen| match seen.body["tools"][0].get("strict") {
        Some(_) => json_reply(400, &[], &refusal),
        None => json_reply(200, &[], &text_answer()),
    })
    .await;
    let harness = Harness::new(provider(&fake.origin()), Some(KEY), MODEL);
    let mut request = hello();
    request.tools = vec![strict_tool()];
    let answer = harness.chat(&request).await.expect("answered without strict");
    let said = |answer: &ChatResponse| {
        answer.notices.iter().any(|notice| matches!(notice, switchyard::chat::StreamNotice::Resent(text) if text.contains("strict")))
    };
    assert!(said(&answer), "the trail says so: {:?}", answer.notices);
    // Remembered: the next request goes without it at once, and says so.
    let again = harness.chat(&request).await.unwrap();
    assert!(said(&again), "{:?}", again.notices);
    let asked: Vec<bool> =
        fake.requests().iter().map(|seen| seen.body["tools"][0].get("strict").is_some()).collect();
    assert_eq!(asked, [true, false, false]);
    assert_eq!(fake.requests()[0].body["tools"][0]["strict"], true, "carried as Claude's own");

    // A Claude that takes it gets it; one refused for another reason is refused again, and that
    // refusal stands.
    let taking = Fake::json(200, text_answer()).await;
    chat(&taking, &request).await.unwrap();
    assert_eq!(taking.only_request().body["tools"][0]["strict"], true);
    let bad = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}});
    let refusing = Fake::json(400, bad).await;
    let error = chat(&refusing, &request).await.unwrap_err();
    assert!(error.detail().contains("roles must alternate"), "{error:?}");
    assert_eq!(refusing.requests().len(), 2, "once more without strict, then the refusal stands");
    // An Anthropic client's own strict is its own ask: not dropped.
    let mut own = hello();
    own.origin = Dialect::Anthropic;
    own.tools = vec![strict_tool()];
    let refusing = Fake::json(400, refusal_body()).await;
    chat(&refusing, &own).await.unwrap_err();
    assert_eq!(refusing.requests().len(), 1);
}

fn refusal_body() -> Value {
    json!({"type": "error", "error": {"type": "invalid_request_error", "message": "tools.0.custom.strict: Extra inputs are not permitted"}})
}
