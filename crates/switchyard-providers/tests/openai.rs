//! The OpenAI-dialect adapter (kinds openai, azure, openai_compatible) against the in-process
//! fake upstream of `support`, serving the documented shapes of docs/wire-formats.md §1, §4 and
//! §5: bodies, streams, error bodies and headers. Every test also checks what the fake received.

// The helpers are test code too; `allow-unwrap-in-tests` only covers `#[test]` fns.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use futures_util::StreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{
    Fake, Harness, Recorder, awkward_pieces, broken_reply, drain, finish_of, http_date, json_reply,
    pieces_reply, refused_origin, respond, sse_reply, text_of, tool_calls_of,
};
use switchyard::chat::{
    ChatChunk, ChatRequest, CompletionTokensDetails, Content, ContentPart, Dialect, EmbeddingInput,
    EmbeddingsRequest, Extra, FinishReason, FunctionDefinition, ImageUrl, JsonSchemaFormat, Message,
    PromptTokensDetails, ResponseFormat, Role, Stop, Tool, ToolCall, ToolChoice, ToolChoiceFunction, Usage,
};
use switchyard::provider::Provider;
use switchyard::time::{MAX_DURATION, parse_duration};
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::openai::OpenAiProvider;
use switchyard_providers::{BuildError, ProviderKind, ProviderSettings};

const KEY: &str = "sk-test-3f9a8b7c6d5e4f3a2b1c";

// ---------------------------------------------------------------------------------------------
// What the fake answers
// ---------------------------------------------------------------------------------------------

/// `data: {event}\n\n` for each event, then `data: [DONE]\n\n` when `done`.
fn sse(events: &[Value], done: bool) -> String {
    let mut text: String = events.iter().map(|event| format!("data: {event}\n\n")).collect();
    if done {
        text.push_str("data: [DONE]\n\n");
    }
    text
}

/// A documented `chat.completion.chunk` with one choice.
fn chunk(delta: Value, finish_reason: Value) -> Value {
    json!({"id": "chatcmpl-X", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-mini",
           "system_fingerprint": "fp_1",
           "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
           "usage": null})
}

/// The final chunk `stream_options.include_usage` adds: no choices, only usage.
fn usage_chunk(prompt: u32, completion: u32) -> Value {
    json!({"id": "chatcmpl-X", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-mini",
           "system_fingerprint": "fp_1", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
}

/// The documented non-streaming answer (§1.3) with a text message.
fn completion(text: &str) -> Value {
    json!({
        "id": "chatcmpl-A652Fhuqsr1kskKe5B63M0eiw3842",
        "object": "chat.completion",
        "created": 1726012687,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        },
        "service_tier": "default",
        "system_fingerprint": "fp_44709d6fcb"
    })
}

/// An OpenAI error body (§1.5).
fn error_body(message: &str, kind: Value, code: Value) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

// ---------------------------------------------------------------------------------------------
// Calling the adapter
// ---------------------------------------------------------------------------------------------

impl Harness<OpenAiProvider> {
    /// The adapter `settings` build, called with `key`; plain calls go to gpt-4o-mini.
    fn configured(settings: ProviderSettings, key: Option<&str>) -> Self {
        Harness::new(OpenAiProvider::new(&settings).unwrap(), key, "gpt-4o-mini")
    }

    fn openai(base_url: String) -> Self {
        Harness::configured(ProviderSettings::new(ProviderKind::OpenAi).base_url(base_url), Some(KEY))
    }
}

/// The usage [`completion`] states: its details (zeros) kept as the provider wrote them.
fn completion_usage() -> Usage {
    Usage {
        prompt_tokens: 13,
        completion_tokens: 5,
        total_tokens: 18,
        prompt_tokens_details: Some(PromptTokensDetails { cached_tokens: Some(0), cache_write_tokens: None }),
        completion_tokens_details: Some(CompletionTokensDetails { reasoning_tokens: Some(0) }),
    }
}

fn hello() -> ChatRequest {
    ChatRequest::new("default", vec![Message::user("Hello!")])
}

fn extra(value: Value) -> Extra {
    value.as_object().unwrap().clone()
}

/// The error of a non-streaming chat against a fake that answers `status`, `headers`, `body`.
async fn chat_error(status: u16, headers: &[(&str, &str)], body: Value) -> ProviderError {
    let headers: Vec<(String, String)> =
        headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    let fake = Fake::start(move |_| {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        json_reply(status, &headers, &body)
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));
    harness.chat(&hello()).await.unwrap_err()
}

// ---------------------------------------------------------------------------------------------
// Translation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn chat_sends_the_upstream_model_the_bearer_key_and_openai_extras() {
    let fake = Fake::json(200, completion("Hi there.")).await;
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"));
    settings.organization = Some("org-123".into());
    settings.project = Some("proj_abc".into());
    settings.headers = vec![("X-Trace".into(), "on".into())];
    let harness = Harness::configured(settings, Some(KEY));
    let mut user = Message::user("Hello!");
    user.extra = extra(json!({"metadata_tag": "t-1"}));
    let mut request = ChatRequest::new("default", vec![Message::system("You are terse."), user]);
    request.temperature = Some(0.7);
    request.top_p = Some(1.0);
    request.max_tokens = Some(512);
    request.stop = Some(Stop::Many(vec!["\n\n".into()]));
    request.seed = Some(42);
    request.extra = extra(json!({"user": "opaque-end-user-id", "parallel_tool_calls": true, "n": 1}));

    let answer = harness.chat(&request).await.unwrap();

    let seen = fake.only_request();
    assert_eq!((seen.method.as_str(), seen.uri.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(seen.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(seen.header("openai-organization"), Some("org-123"));
    assert_eq!(seen.header("openai-project"), Some("proj_abc"));
    assert_eq!(seen.header("x-trace"), Some("on"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hello!", "metadata_tag": "t-1"}
            ],
            "temperature": 0.7,
            "top_p": 1.0,
            "max_completion_tokens": 512,
            "stop": ["\n\n"],
            "seed": 42,
            "user": "opaque-end-user-id",
            "parallel_tool_calls": true,
            "n": 1
        })
    );
    assert_eq!(answer.text().as_deref(), Some("Hi there."));
    assert_eq!(answer.id, "chatcmpl-A652Fhuqsr1kskKe5B63M0eiw3842");
    assert_eq!(answer.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(answer.created, 1726012687);
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(answer.usage, Some(completion_usage()));
    assert_eq!(answer.extra["system_fingerprint"], json!("fp_44709d6fcb"));
}

#[tokio::test]
async fn configured_headers_never_double_the_content_type_or_the_key() {
    let fake = Fake::json(200, completion("Hi there.")).await;
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"));
    settings.headers = vec![
        ("Content-Type".into(), "text/plain".into()),
        ("Authorization".into(), "Bearer configured-elsewhere".into()),
    ];
    let harness = Harness::configured(settings, Some(KEY));
    harness.chat(&hello()).await.unwrap();

    let seen = fake.only_request();
    let all = |name: &str| {
        seen.headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(all("content-type"), ["application/json"], "the request's own type, once");
    assert_eq!(all("authorization"), [format!("Bearer {KEY}")], "the credential's key, once");
}

#[tokio::test]
async fn extras_of_another_dialect_are_not_forwarded() {
    let fake = Fake::json(200, completion("ok")).await;
    let harness = Harness::openai(fake.url("/v1"));
    let mut user = Message::user("Hello!");
    user.extra = extra(json!({"cache_control": {"type": "ephemeral"}}));
    let mut request = ChatRequest::new("default", vec![user]);
    request.max_tokens = Some(100);
    // (The gateway names `container` in the attempt's trail; `top_k`, which OpenAI lacks,
    // would skip the target instead.)
    request.extra = extra(json!({"container": "c-1", "metadata": {"user_id": "u-1"}}));
    request.origin = Dialect::Anthropic;

    harness.chat(&request).await.unwrap();

    assert_eq!(
        fake.only_request().body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_completion_tokens": 100
        })
    );
}

#[tokio::test]
async fn tools_and_json_schema_are_sent_and_tool_calls_come_back() {
    let answer = json!({
        "id": "chatcmpl-T", "object": "chat.completion", "created": 1726012687, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null, "annotations": [],
            "tool_calls": [{"id": "call_abc123", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18}
    });
    let fake = Fake::json(200, answer).await;
    let harness = Harness::openai(fake.url("/v1"));
    let parameters =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let mut request = hello();
    request.tools = vec![Tool {
        kind: "function".into(),
        function: FunctionDefinition {
            name: "get_weather".into(),
            description: Some("Get weather for a city".into()),
            parameters: Some(parameters.clone()),
            extra: extra(json!({"strict": false})),
        },
        extra: Default::default(),
    }];
    request.tool_choice = Some(ToolChoice::Function {
        kind: "function".into(),
        function: ToolChoiceFunction { name: "get_weather".into() },
    });
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "weather".into(),
            schema: Some(json!({"type": "object"})),
            strict: Some(true),
            extra: extra(json!({"description": "optional"})),
        },
    });
    // An earlier turn: the assistant's call and its result.
    request.messages.push(Message {
        role: Role::Assistant,
        content: None,
        name: None,
        tool_calls: vec![ToolCall::function("call_0", "get_weather", "{\"city\":\"Oslo\"}")],
        tool_call_id: None,
        extra: Extra::new(),
    });
    request.messages.push(Message {
        tool_call_id: Some("call_0".into()),
        ..Message::text(Role::Tool, "{\"temp_c\":21}")
    });

    let response = harness.chat(&request).await.unwrap();

    let body = fake.only_request().body;
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "get_weather", "description": "Get weather for a city",
            "parameters": parameters, "strict": false}}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "get_weather"}}));
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"},
            "strict": true, "description": "optional"}})
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "tool_calls": [{"id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]})
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "content": "{\"temp_c\":21}", "tool_call_id": "call_0"})
    );
    let choice = &response.choices[0];
    assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(choice.message.content, None);
    assert_eq!(
        choice.message.tool_calls,
        vec![ToolCall::function("call_abc123", "get_weather", "{\"city\":\"Paris\"}")]
    );
}

#[tokio::test]
async fn images_travel_as_content_parts_and_json_mode_as_json_object() {
    let fake = Fake::json(200, completion("{\"animal\":\"cat\"}")).await;
    let harness = Harness::openai(fake.url("/v1"));
    let mut request = ChatRequest::new(
        "default",
        vec![Message {
            content: Some(Content::Parts(vec![
                ContentPart::Text { text: "What is in this image?".into() },
                ContentPart::ImageUrl {
                    image_url: ImageUrl {
                        url: "https://example.com/cat.png".into(),
                        detail: Some("auto".into()),
                    },
                },
                ContentPart::ImageUrl {
                    image_url: ImageUrl { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None },
                },
            ])),
            ..Message::user("")
        }],
    );
    request.response_format = Some(ResponseFormat::JsonObject);

    let answer = harness.chat(&request).await.unwrap();

    let body = fake.only_request().body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "auto"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ])
    );
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(answer.text().as_deref(), Some("{\"animal\":\"cat\"}"));
}

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stream_asks_for_usage_and_yields_text_then_a_usage_chunk() {
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null),
            chunk(json!({"content": "Hel"}), Value::Null),
            chunk(json!({"content": "lo!"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(9, 12),
        ],
        true,
    );
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = Harness::openai(fake.url("/v1"));
    let mut request = hello();
    request.stream = true;
    request.extra = extra(json!({"stream_options": {"include_obfuscation": false}}));

    let (chunks, error) = drain(harness.stream(&request).await.unwrap()).await;

    assert!(error.is_none(), "a stream ended by [DONE] ends cleanly, got {error:?}");
    let seen = fake.only_request();
    assert_eq!(seen.body["stream"], json!(true));
    assert_eq!(seen.body["stream_options"], json!({"include_obfuscation": false, "include_usage": true}));
    assert_eq!(seen.header("accept"), Some("text/event-stream"));
    assert_eq!(text_of(&chunks), "Hello!");
    assert_eq!(chunks[0].choices[0].delta.role, Some(Role::Assistant));
    assert_eq!(finish_of(&chunks), vec![FinishReason::Stop]);
    let last = chunks.last().unwrap();
    assert!(last.choices.is_empty());
    assert_eq!(last.usage, Some(Usage::new(9, 12)));
    assert!(chunks.iter().all(|c| c.id == "chatcmpl-X" && c.model == "gpt-4o-mini"));
}

/// The chunks of the stream an OpenAI provider reads when the fake answers `body` to
/// `hello()`, and the error that ended it, if any.
async fn streamed(body: String) -> (Vec<ChatChunk>, Option<ProviderError>) {
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = Harness::openai(fake.url("/v1"));
    drain(harness.stream(&hello()).await.unwrap()).await
}

/// What a stream of `body` reads as for a client of the OpenAI dialect, whose request goes out
/// as it wrote it and whose chunks carry their frames (read leanly).
async fn streamed_verbatim(body: String) -> (Vec<ChatChunk>, Option<ProviderError>) {
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = Harness::openai(fake.url("/v1"));
    let mut request = hello();
    let written = br#"{"model":"default","messages":[{"role":"user","content":"Hello!"}],"stream":true}"#;
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::OpenAi, &written[..]));
    drain(harness.stream(&request).await.unwrap()).await
}

#[tokio::test]
async fn chunks_passed_on_as_written_are_read_for_errors_usage_and_content_alike() {
    // The lean reading of a passed-on chunk skips the members the client reads in its frame;
    // what the gateway acts on is read the same either way.
    let mut groq = chunk(json!({}), json!("stop"));
    groq["x_groq"] = json!({"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}});
    groq["system_fingerprint"] = json!("fp_1");
    let usage = sse(&[chunk(json!({"role": "assistant", "content": "ok"}), Value::Null), groq], true);
    let openrouter = sse(
        &[
            chunk(json!({"content": "Hel"}), Value::Null),
            json!({"id": "gen-1", "choices": [], "error": {"code": 429, "message": "Rate limit exceeded"}}),
        ],
        false,
    );
    let vllm = sse(
        &[
            chunk(json!({"content": "Hel"}), Value::Null),
            json!({"object": "error", "message": "out of memory", "type": "InternalServerError", "code": 500}),
        ],
        false,
    );
    // Text that says "error", as a whole string or quoted within one, is text.
    let says_error = sse(
        &[
            chunk(json!({"role": "assistant", "content": "error"}), Value::Null),
            chunk(json!({"content": " or \"error\""}), json!("stop")),
        ],
        true,
    );
    for passed_on in [false, true] {
        let read = |body: &String| {
            let body = body.clone();
            async move { if passed_on { streamed_verbatim(body).await } else { streamed(body).await } }
        };
        let (chunks, error) = read(&usage).await;
        assert!(error.is_none(), "passed on: {passed_on}");
        assert_eq!(text_of(&chunks), "ok", "passed on: {passed_on}");
        assert_eq!(chunks.last().unwrap().usage, Some(Usage::new(7, 3)), "passed on: {passed_on}");
        assert_eq!(chunks.iter().all(|c| c.verbatim.is_some()), passed_on);

        let (chunks, error) = read(&openrouter).await;
        assert_eq!(text_of(&chunks), "Hel", "passed on: {passed_on}");
        let error = error.expect("the error chunk ends the stream");
        assert_eq!(
            (error.kind(), error.code()),
            (ErrorKind::RateLimited, Some("429")),
            "passed on: {passed_on}"
        );

        let (_, error) = read(&vllm).await;
        let error = error.expect("the flat error envelope ends the stream");
        assert_eq!(error.detail(), "out of memory", "passed on: {passed_on}");

        let (chunks, error) = read(&says_error).await;
        assert!(error.is_none(), "passed on: {passed_on}: {error:?}");
        assert_eq!(text_of(&chunks), "error or \"error\"", "passed on: {passed_on}");
        assert_eq!(finish_of(&chunks), vec![FinishReason::Stop], "passed on: {passed_on}");
    }
}

#[tokio::test]
async fn streamed_tool_calls_reassemble_from_their_deltas() {
    let body = sse(
        &[
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_abc",
                    "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\""}}]}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ":\"Paris\"}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_def", "type": "function",
                    "function": {"name": "get_time", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"tz\":\"CET\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
            usage_chunk(20, 30),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;

    assert!(error.is_none());
    assert_eq!(
        tool_calls_of(&chunks),
        vec![
            ("call_abc".to_owned(), "get_weather".to_owned(), "{\"city\":\"Paris\"}".to_owned()),
            ("call_def".to_owned(), "get_time".to_owned(), "{\"tz\":\"CET\"}".to_owned()),
        ]
    );
    assert_eq!(chunks[0].choices[0].delta.tool_calls[0].kind.as_deref(), Some("function"));
    assert_eq!(finish_of(&chunks), vec![FinishReason::ToolCalls]);
}

#[tokio::test]
async fn an_answer_over_the_most_read_whole_is_refused_not_held() {
    // A server that answers without end: read up to 256 MiB, then refused (the gateway would
    // otherwise hold all of it, and a 400 MB answer took 1.2 GB).
    let mib = bytes::Bytes::from(vec![b' '; 1 << 20]);
    let fake = Fake::start(move |_| {
        let mib = mib.clone();
        let endless =
            futures_util::stream::repeat_with(move || Ok::<_, std::convert::Infallible>(mib.clone()));
        respond(200, &[], "application/json", Body::from_stream(endless))
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));
    let error = harness.chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.detail().contains("the answer is too large: over 256 MiB"), "{error}");
}

#[tokio::test]
async fn a_tool_call_index_past_the_most_a_choice_makes_is_a_malformed_stream_not_gigabytes_of_calls() {
    // One chunk naming call 4,000,000,000 would have the answer's assembly make room for as
    // many: the stream is malformed there, and the router fails over.
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": "Checking"}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 4_000_000_000u32, "id": "call_x", "type": "function",
                    "function": {"name": "f", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;
    let error = error.expect("the stream ends malformed");
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    assert!(error.detail().contains("tool call index of 4000000000"), "{error}");
    assert_eq!(text_of(&chunks), "Checking", "what came before passes");
    assert!(tool_calls_of(&chunks).is_empty());

    // The last call a choice may make is still read.
    let most = switchyard::chat::MAX_TOOL_CALLS - 1;
    let body = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": most, "id": "call_y", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(chunks[0].choices[0].delta.tool_calls[0].index, most);
}

#[tokio::test]
async fn a_streamed_refusal_is_the_models_answer_passed_on_as_it_is() {
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": null, "refusal": ""}), Value::Null),
            chunk(json!({"refusal": "I'm sorry, I can't help with that."}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;

    assert!(error.is_none());
    let refusal: String = chunks.iter().filter_map(|c| c.choices[0].delta.refusal.clone()).collect();
    assert_eq!(refusal, "I'm sorry, I can't help with that.", "the refusal's words reach the client");
    assert!(chunks.iter().any(ChatChunk::has_content), "a refusal is an answer: the stream is committed");
    assert_eq!(finish_of(&chunks), vec![FinishReason::Stop], "not the provider's content filter");
}

#[tokio::test]
async fn a_reasoning_servers_thinking_is_read_under_either_name_and_commits_the_stream() {
    // DeepSeek and vLLM stream `reasoning_content`, OpenRouter and Ollama `reasoning`; an
    // object there (not text) is no reasoning.
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": null, "reasoning_content": "Six "}), Value::Null),
            chunk(json!({"reasoning": "times seven."}), Value::Null),
            chunk(json!({"reasoning": {"effort": "low"}, "content": "42"}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;

    assert!(error.is_none());
    let reasoning: Vec<_> = chunks.iter().map(|c| c.choices[0].delta.reasoning_content.as_deref()).collect();
    assert_eq!(reasoning, [Some("Six "), Some("times seven."), None, None]);
    assert!(chunks[0].has_content(), "thinking is the answer under way: the stream is committed");
}

#[tokio::test]
async fn groq_usage_under_x_groq_lands_on_the_chunk() {
    let mut last = chunk(json!({}), json!("stop"));
    last["x_groq"] = json!({"id": "req_1", "usage": {"queue_time": 0.01, "prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}});
    let body = sse(&[chunk(json!({"content": "ok"}), Value::Null), last], true);
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = compatible(&fake, Some("gsk_test"));

    let stream =
        harness.provider.chat_stream(harness.call("llama-3.1-8b-instant", None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;

    assert!(error.is_none());
    assert_eq!(chunks.last().unwrap().usage, Some(Usage::new(7, 3)));
}

#[tokio::test]
async fn sse_split_at_awkward_places_still_reads_whole_events() {
    let events = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Grüße, "}), Value::Null),
        chunk(json!({"content": "👋 naïve café"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(4, 6),
    ];
    let mut text = String::from(": keep-alive\r\n\r\n");
    for event in &events {
        text.push_str(&format!("data: {event}\r\n\r\n"));
        text.push_str(": OPENROUTER PROCESSING\r\n\r\n");
    }
    text.push_str("data: [DONE]\r\n\r\n");
    let pieces = awkward_pieces(&text, 5);
    assert!(pieces.iter().any(|p| p.ends_with(b"\r")), "some piece must end between \\r and \\n");
    assert!(pieces.iter().any(|p| std::str::from_utf8(p).is_err()), "some piece must end inside a character");
    let fake = Fake::start(move |_| pieces_reply(pieces.clone())).await;
    let harness = Harness::openai(fake.url("/v1"));

    let (chunks, error) = drain(harness.stream(&hello()).await.unwrap()).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&chunks), "Grüße, 👋 naïve café");
    assert_eq!(finish_of(&chunks), vec![FinishReason::Stop]);
    assert_eq!(chunks.last().unwrap().usage, Some(Usage::new(4, 6)));
}

#[tokio::test]
async fn stream_that_ends_before_done_ends_with_a_transport_error() {
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hel"}), Value::Null),
        ],
        false,
    );
    let (chunks, error) = streamed(body).await;

    assert_eq!(text_of(&chunks), "Hel");
    let error = error.expect("a cut-off stream must not end cleanly");
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.detail().contains("stream ended before [DONE]"), "{error}");
}

#[tokio::test]
async fn a_terminator_before_any_finish_is_taken_as_whole_and_said() {
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hel"}), Value::Null),
        ],
        true,
    );
    let (chunks, error) = streamed(body).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&chunks), "Hel");
    assert_eq!(
        chunks.last().and_then(|c| c.notice.clone()),
        Some(switchyard::chat::StreamNotice::TerminatedUnfinished),
        "{chunks:#?}"
    );
    // A finished stream says nothing of it.
    let body = sse(&[chunk(json!({"content": "Hi"}), json!("stop"))], true);
    let (chunks, _) = streamed(body).await;
    assert!(chunks.iter().all(|c| c.notice.is_none()), "{chunks:#?}");
}

#[tokio::test]
async fn stream_whose_connection_breaks_mid_body_ends_with_a_transport_error() {
    let release = Arc::new(tokio::sync::Notify::new());
    let server_release = release.clone();
    let fake = Fake::start(move |_| {
        let first = sse(&[chunk(json!({"content": "Hel"}), Value::Null)], false);
        broken_reply(vec![first.into_bytes()], Some(server_release.clone()))
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));

    let mut stream = harness.stream(&hello()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.choices[0].delta.content.as_deref(), Some("Hel"));
    release.notify_one();
    let (rest, error) = drain(stream).await;

    assert!(rest.is_empty());
    assert_eq!(error.map(|e| e.kind()), Some(ErrorKind::Transport));
}

#[tokio::test]
async fn error_event_inside_a_stream_ends_it_with_its_kind() {
    let mut body = sse(&[chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null)], false);
    body.push_str(
        "event: error\ndata: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
    );
    let (chunks, error) = streamed(body).await;

    assert_eq!(text_of(&chunks), "Hel");
    let error = error.unwrap();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(error.code(), Some("server_error"));
    assert_eq!(error.detail(), "The server had an error while processing your request.");
}

#[tokio::test]
async fn a_finish_reason_of_error_is_a_failure_whole_streamed_or_passed_on() {
    // A server whose upstream broke off ends the answer so, with no `error` member beside it.
    let broken = || {
        sse(
            &[
                chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null),
                chunk(json!({}), json!("error")),
            ],
            true,
        )
    };
    for (chunks, error) in [streamed(broken()).await, streamed_verbatim(broken()).await] {
        assert_eq!(text_of(&chunks), "Hel");
        let error = error.expect("the stream failed");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error:?}");
        assert!(error.detail().contains("finish_reason `error`"), "{error:?}");
    }
    let mut answer = completion("");
    answer["choices"][0]["finish_reason"] = json!("error");
    answer["choices"][0]["error"] = json!({"code": 502, "message": "Provider disconnected"});
    let fake = Fake::json(200, answer).await;
    let error = Harness::openai(fake.url("/v1")).chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error:?}");
    assert!(error.detail().contains("Provider disconnected"), "{error:?}");
}

#[tokio::test]
async fn error_chunk_with_a_numeric_code_classifies_by_that_code() {
    // OpenRouter, once streaming has started: HTTP 200, then a data event with an error.
    let mut body = String::from(": OPENROUTER PROCESSING\n\n");
    body.push_str(&sse(
        &[json!({"id": "gen-1", "choices": [], "error": {"code": 429, "message": "Rate limit exceeded"}})],
        false,
    ));
    let (chunks, error) = streamed(body).await;

    assert!(chunks.is_empty());
    let error = error.unwrap();
    assert_eq!((error.kind(), error.code()), (ErrorKind::RateLimited, Some("429")));
}

#[tokio::test]
async fn stream_refused_before_it_starts_is_classified_like_a_chat() {
    let body = error_body(
        "You exceeded your current quota, please check your plan and billing details.",
        json!("insufficient_quota"),
        json!("insufficient_quota"),
    );
    let fake = Fake::json(429, body).await;
    let harness = Harness::openai(fake.url("/v1"));

    let error = harness.stream(&hello()).await.err().unwrap();

    assert_eq!((error.kind(), error.status()), (ErrorKind::QuotaExceeded, Some(429)));
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_request_too_large_for_the_minutes_tokens_is_unsupported_there_not_a_rate_limit() {
    // As OpenAI words it: the request can never fit this organisation's limit for the model, so
    // no wait helps and no cooldown is due; another target may take it.
    let body = error_body(
        "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 52000. The input or output tokens must be reduced in order to run successfully.",
        json!("tokens"),
        json!("rate_limit_exceeded"),
    );
    let error = chat_error(429, &[], body).await;
    assert!(error.is_unsupported(), "{error:?}");
    assert_eq!((error.status(), error.code()), (Some(429), Some("rate_limit_exceeded")));
}

#[tokio::test]
async fn rate_limit_exceeded_429_is_rate_limited() {
    let message = "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 18928, Requested 11159. Please try again in 174ms. Visit https://platform.openai.com/account/rate-limits to learn more.";
    let error =
        chat_error(429, &[], error_body(message, json!("tokens"), json!("rate_limit_exceeded"))).await;

    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_eq!(error.status(), Some(429));
    assert_eq!(error.code(), Some("rate_limit_exceeded"));
    assert_eq!(error.detail(), message);
    assert!(error.is_retryable());
}

#[tokio::test]
async fn insufficient_quota_429_is_quota_exceeded_not_rate_limited() {
    let message = "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.";
    let error =
        chat_error(429, &[], error_body(message, json!("insufficient_quota"), json!("insufficient_quota")))
            .await;

    assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
    assert_eq!((error.status(), error.code()), (Some(429), Some("insufficient_quota")));
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn legacy_insufficient_quota_with_a_null_code_is_still_quota_exceeded() {
    let error = chat_error(
        429,
        &[],
        error_body("You exceeded your current quota.", json!("insufficient_quota"), Value::Null),
    )
    .await;

    assert_eq!((error.kind(), error.code()), (ErrorKind::QuotaExceeded, Some("insufficient_quota")));
}

#[tokio::test]
async fn a_429_without_a_code_is_rate_limited() {
    let error = chat_error(429, &[], json!({"error": {"message": "Too many requests"}})).await;

    assert_eq!((error.kind(), error.code()), (ErrorKind::RateLimited, None));
}

#[tokio::test]
async fn context_length_exceeded_400_is_context_length() {
    let message = "This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens. Please reduce the length of the messages.";
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}});
    let error = chat_error(400, &[], body).await;

    assert_eq!(error.kind(), ErrorKind::ContextLength);
    assert_eq!((error.status(), error.code()), (Some(400), Some("context_length_exceeded")));
}

#[tokio::test]
async fn invalid_api_key_401_is_auth() {
    let message = "Incorrect API key provided: sk-VKMIs***...wjh3. You can find your API key at https://platform.openai.com/account/api-keys.";
    let error =
        chat_error(401, &[], error_body(message, json!("invalid_request_error"), json!("invalid_api_key")))
            .await;

    assert_eq!(error.kind(), ErrorKind::Auth);
    assert_eq!((error.status(), error.code()), (Some(401), Some("invalid_api_key")));
}

#[tokio::test]
async fn forbidden_403_is_auth() {
    let body = error_body(
        "Country, region, or territory not supported",
        json!("request_forbidden"),
        json!("unsupported_country_region_territory"),
    );
    let error = chat_error(403, &[], body).await;

    assert_eq!(error.kind(), ErrorKind::Auth);
    assert_eq!(error.code(), Some("unsupported_country_region_territory"));
}

#[tokio::test]
async fn model_not_found_404_is_model_not_found() {
    let message = "The model `gpt-nope` does not exist or you do not have access to it.";
    let error =
        chat_error(404, &[], error_body(message, json!("invalid_request_error"), json!("model_not_found")))
            .await;

    assert_eq!(error.kind(), ErrorKind::ModelNotFound);
    assert_eq!((error.status(), error.code()), (Some(404), Some("model_not_found")));
}

#[tokio::test]
async fn server_errors_500_and_503_are_unavailable() {
    let server_error = error_body(
        "The server had an error while processing your request. Sorry about that!",
        json!("server_error"),
        Value::Null,
    );
    let error = chat_error(500, &[], server_error).await;
    assert_eq!(
        (error.kind(), error.status(), error.code()),
        (ErrorKind::Unavailable, Some(500), Some("server_error"))
    );

    let overloaded = error_body(
        "Our servers are currently overloaded. Please try again later.",
        json!("service_unavailable_error"),
        json!("server_is_overloaded"),
    );
    let error = chat_error(503, &[], overloaded).await;
    assert_eq!(
        (error.kind(), error.status(), error.code()),
        (ErrorKind::Unavailable, Some(503), Some("server_is_overloaded"))
    );
}

#[tokio::test]
async fn a_conflict_a_too_early_and_a_redirect_are_the_providers_moment_not_the_clients_fault() {
    // The SDKs retry 409; a 425 asks to come back; a redirect is not followed (the key would
    // go where it points). None is a bad request of the client's: another target may answer.
    let conflict = error_body("Conflict", Value::Null, Value::Null);
    assert_eq!(chat_error(409, &[], conflict).await.kind(), ErrorKind::Unavailable);
    assert_eq!(chat_error(425, &[], json!({})).await.kind(), ErrorKind::Unavailable);
    let moved =
        chat_error(307, &[("location", "http://127.0.0.1:9/elsewhere?key=sk-secret")], json!({})).await;
    assert_eq!((moved.kind(), moved.status()), (ErrorKind::Unavailable, Some(307)));
    // Where it points, for the operator to correct base_url; never its query.
    assert!(moved.detail().contains("`http://127.0.0.1:9/elsewhere`"), "{moved:?}");
    assert!(!moved.detail().contains("sk-secret"), "{moved:?}");
}

#[tokio::test]
async fn a_502_with_an_html_body_is_unavailable() {
    let fake =
        Fake::start(|_| respond(502, &[], "text/html", Body::from("<html><h1>502 Bad Gateway</h1></html>")))
            .await;
    let harness = Harness::openai(fake.url("/v1"));

    let error = harness.chat(&hello()).await.unwrap_err();

    assert_eq!((error.kind(), error.status(), error.code()), (ErrorKind::Unavailable, Some(502), None));
    assert!(error.detail().contains("502 Bad Gateway"));
}

#[tokio::test]
async fn other_400_and_422_are_invalid_request() {
    let body = json!({"error": {"message": "Invalid value for 'temperature': must be between 0 and 2.",
        "type": "invalid_request_error", "param": "temperature", "code": "invalid_value"}});
    let error = chat_error(400, &[], body).await;
    assert_eq!((error.kind(), error.code()), (ErrorKind::InvalidRequest, Some("invalid_value")));

    let error =
        chat_error(422, &[], json!({"error": {"message": "Failed to deserialize the JSON body"}})).await;
    assert_eq!((error.kind(), error.status()), (ErrorKind::InvalidRequest, Some(422)));
}

#[tokio::test]
async fn a_200_whose_body_does_not_parse_is_malformed_response() {
    let fake =
        Fake::start(|_| respond(200, &[], "application/json", Body::from("<html>maintenance</html>"))).await;
    let harness = Harness::openai(fake.url("/v1"));
    let error = harness.chat(&hello()).await.unwrap_err();
    assert_eq!((error.kind(), error.status()), (ErrorKind::MalformedResponse, Some(200)));

    let fake = Fake::json(200, json!({"id": "x", "object": "chat.completion"})).await;
    let harness = Harness::openai(fake.url("/v1"));
    let error = harness.chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
}

/// The gateway runs one runtime per thread: a pooled connection must stay with the thread
/// (and runtime) that opened it, and be reused there.
#[tokio::test]
async fn each_thread_reuses_a_pool_of_its_own() {
    let fake = Fake::json(200, completion("hi")).await;
    let harness = Arc::new(Harness::openai(fake.url("/v1")));

    for _ in 0..3 {
        harness.chat(&hello()).await.unwrap();
    }
    assert_eq!(fake.connections(), 1, "one connection, reused on this thread");

    // Another thread with a runtime of its own, as a gateway worker has.
    let other = harness.clone();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            for _ in 0..3 {
                other.chat(&hello()).await.unwrap();
            }
        });
    })
    .await
    .unwrap();
    assert_eq!(fake.connections(), 2, "the other thread opened one of its own, and reused it");
}

#[tokio::test]
async fn connection_refused_is_transport() {
    let harness = Harness::openai(format!("{}/v1", refused_origin().await));

    let error = harness.chat(&hello()).await.unwrap_err();

    assert_eq!((error.kind(), error.status()), (ErrorKind::Transport, None));
    assert!(error.detail().contains("could not connect"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Retry-After and rate-limit headers
// ---------------------------------------------------------------------------------------------

fn rate_limited() -> Value {
    error_body("Rate limit reached for gpt-4o.", json!("requests"), json!("rate_limit_exceeded"))
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    let error = chat_error(429, &[("retry-after", "7")], rate_limited()).await;
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let date = http_date(SystemTime::now() + Duration::from_secs(90));

    let error = chat_error(429, &[("retry-after", date.as_str())], rate_limited()).await;

    let wait = error.retry_after().expect("an HTTP-date Retry-After");
    assert!(wait > Duration::from_secs(80) && wait <= Duration::from_secs(90), "{wait:?} from {date}");
}

#[tokio::test]
async fn retry_after_ms_wins_over_retry_after() {
    let error = chat_error(429, &[("retry-after-ms", "1500"), ("retry-after", "2")], rate_limited()).await;
    assert_eq!(error.retry_after(), Some(Duration::from_millis(1500)));
}

#[tokio::test]
async fn ratelimit_reset_stands_in_for_retry_after_on_a_bare_429() {
    let headers = &[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "6m0s"),
        ("x-ratelimit-remaining-tokens", "149984"),
        ("x-ratelimit-reset-tokens", "20ms"),
    ];
    let error = chat_error(429, headers, rate_limited()).await;
    assert_eq!(error.retry_after(), Some(Duration::from_secs(360)));
}

#[tokio::test]
async fn rate_limit_headers_reach_the_sink_on_success_error_and_stream() {
    const HEADERS: &[(&str, &str)] = &[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-tokens", "149984"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ];
    let turn = Arc::new(Mutex::new(0));
    let fake = Fake::start(move |_| {
        let mut turn = turn.lock().unwrap();
        *turn += 1;
        match *turn {
            1 => json_reply(200, HEADERS, &completion("ok")),
            2 => json_reply(500, HEADERS, &error_body("boom", json!("server_error"), Value::Null)),
            _ => sse_reply(HEADERS, &sse(&[chunk(json!({"content": "ok"}), json!("stop"))], true)),
        }
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));
    let sink = Recorder::default();
    let call = harness.call("gpt-4o-mini", Some(&sink));

    harness.provider.chat(call, &hello()).await.unwrap();
    harness.provider.chat(call, &hello()).await.unwrap_err();
    drain(harness.provider.chat_stream(call, &hello()).await.unwrap()).await;

    let seen = sink.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for limits in seen {
        let requests = limits.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining), (Some(60), Some(59)));
        assert_eq!(requests.reset_after, Some(Duration::from_secs(1)));
        let tokens = limits.tokens.unwrap();
        assert_eq!((tokens.limit, tokens.remaining), (Some(150_000), Some(149_984)));
        assert_eq!(tokens.reset_after, Some(Duration::from_secs(360)));
    }
}

// ---------------------------------------------------------------------------------------------
// Azure
// ---------------------------------------------------------------------------------------------

fn azure(fake: &Fake, api_version: Option<&str>) -> Harness<OpenAiProvider> {
    let mut settings = ProviderSettings::new(ProviderKind::Azure).base_url(fake.origin());
    settings.api_version = api_version.map(str::to_owned);
    Harness::configured(settings, Some(KEY))
}

#[tokio::test]
async fn azure_posts_to_the_deployment_with_api_version_and_api_key() {
    let mut answer = completion("Hi from Azure.");
    answer["prompt_filter_results"] = json!([{"prompt_index": 0, "content_filter_results": {
        "hate": {"filtered": false, "severity": "safe"}, "jailbreak": {"filtered": false, "detected": false},
        "self_harm": {"filtered": false, "severity": "safe"}, "sexual": {"filtered": false, "severity": "safe"},
        "violence": {"filtered": false, "severity": "safe"}}}]);
    let fake = Fake::json(200, answer).await;
    let harness = azure(&fake, None);
    let mut request = hello();
    request.max_tokens = Some(50);

    let response = harness.provider.chat(harness.call("gpt4o-prod", None), &request).await.unwrap();

    let seen = fake.only_request();
    assert_eq!(seen.uri, "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21");
    assert_eq!(seen.header("api-key"), Some(KEY));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.body["max_tokens"], json!(50));
    assert_eq!(response.text().as_deref(), Some("Hi from Azure."));
    assert!(response.extra.contains_key("prompt_filter_results"));
    assert_eq!(harness.provider.kind(), "azure");
}

#[tokio::test]
async fn azure_api_version_comes_from_the_settings() {
    let fake = Fake::json(200, completion("ok")).await;
    let harness = azure(&fake, Some("2025-01-01-preview"));

    harness.provider.chat(harness.call("gpt4o-prod", None), &hello()).await.unwrap();

    assert_eq!(
        fake.only_request().uri,
        "/openai/deployments/gpt4o-prod/chat/completions?api-version=2025-01-01-preview"
    );
}

#[tokio::test]
async fn azure_v1_base_url_uses_plain_paths_with_the_deployment_as_model() {
    let fake = Fake::json(200, completion("ok")).await;
    let settings =
        ProviderSettings::new(ProviderKind::Azure).base_url(format!("{}/openai/v1", fake.origin()));
    let harness = Harness::configured(settings, Some(KEY));

    harness.provider.chat(harness.call("gpt4o-prod", None), &hello()).await.unwrap();

    let seen = fake.only_request();
    assert_eq!(seen.uri, "/openai/v1/chat/completions");
    assert_eq!(seen.body["model"], json!("gpt4o-prod"));
    assert_eq!(seen.header("api-key"), Some(KEY));
}

#[tokio::test]
async fn azure_finish_reason_content_filter_is_canonical_content_filter() {
    let mut answer = completion("The answer was cut");
    answer["choices"][0]["finish_reason"] = json!("content_filter");
    let fake = Fake::json(200, answer).await;
    let harness = azure(&fake, None);

    let response = harness.provider.chat(harness.call("gpt4o-prod", None), &hello()).await.unwrap();

    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::ContentFilter));
    assert!(response.is_content_filtered());
}

#[tokio::test]
async fn azure_streamed_content_filter_stop_skips_the_prompt_filter_chunk() {
    let prompt_filter = json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]});
    let body = sse(
        &[
            prompt_filter,
            chunk(json!({"content": "Once upon"}), Value::Null),
            chunk(json!({}), json!("content_filter")),
        ],
        true,
    );
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = azure(&fake, None);

    let stream = harness.provider.chat_stream(harness.call("gpt4o-prod", None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;

    assert!(error.is_none());
    assert!(chunks.iter().all(|c| !c.choices.is_empty() || c.usage.is_some()), "{chunks:#?}");
    assert_eq!(text_of(&chunks), "Once upon");
    assert!(chunks.last().unwrap().is_content_filtered());
    assert_eq!(fake.only_request().body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn azure_content_filter_400_is_content_filtered() {
    let body = json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": null, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"hate": {"filtered": false, "severity": "safe"},
                "jailbreak": {"filtered": false, "detected": false},
                "self_harm": {"filtered": false, "severity": "safe"},
                "sexual": {"filtered": true, "severity": "high"},
                "violence": {"filtered": false, "severity": "safe"}}}}});
    let fake = Fake::json(400, body).await;
    let harness = azure(&fake, None);

    let error = harness.provider.chat(harness.call("gpt4o-prod", None), &hello()).await.unwrap_err();

    assert_eq!(error.kind(), ErrorKind::ContentFiltered);
    assert_eq!((error.status(), error.code()), (Some(400), Some("content_filter")));
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn azure_429_with_a_numeric_string_code_is_rate_limited() {
    let body = json!({"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-08-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}});
    let fake = Fake::start(move |_| json_reply(429, &[("retry-after", "6")], &body)).await;
    let harness = azure(&fake, None);

    let error = harness.provider.chat(harness.call("gpt4o-prod", None), &hello()).await.unwrap_err();

    assert_eq!((error.kind(), error.code()), (ErrorKind::RateLimited, Some("429")));
    assert_eq!(error.retry_after(), Some(Duration::from_secs(6)));
}

#[tokio::test]
async fn azure_embeddings_use_the_deployment_url() {
    let answer = json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
        "model": "text-embedding-3-small", "usage": {"prompt_tokens": 2, "total_tokens": 2}});
    let fake = Fake::json(200, answer).await;
    let harness = azure(&fake, None);
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::One("hello".into()),
        dimensions: None,
        extra: Extra::new(),
    };

    let response = harness.provider.embeddings(harness.call("embed-prod", None), &request).await.unwrap();

    let seen = fake.only_request();
    assert_eq!(seen.uri, "/openai/deployments/embed-prod/embeddings?api-version=2024-10-21");
    assert_eq!(seen.header("api-key"), Some(KEY));
    assert_eq!(response.data[0].embedding, vec![0.5, -0.25]);
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible servers
// ---------------------------------------------------------------------------------------------

fn compatible(fake: &Fake, key: Option<&str>) -> Harness<OpenAiProvider> {
    let mut settings = ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url(fake.url("/v1"));
    settings.headers = vec![("HTTP-Referer".into(), "https://example.test".into())];
    Harness::configured(settings, key)
}

#[tokio::test]
async fn compatible_server_without_a_key_gets_no_authorization_header() {
    // Ollama-style answer: no usage details, `tool_calls` absent, a missing `system_fingerprint`.
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen3:8b",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]});
    let fake = Fake::json(200, answer).await;
    let harness = compatible(&fake, None);
    let mut request = hello();
    request.max_tokens = Some(20);

    let response = harness.provider.chat(harness.call("qwen3:8b", None), &request).await.unwrap();

    let seen = fake.only_request();
    assert_eq!(seen.uri, "/v1/chat/completions");
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.header("http-referer"), Some("https://example.test"));
    assert_eq!(seen.body["model"], json!("qwen3:8b"));
    assert_eq!(seen.body["max_tokens"], json!(20), "compatible servers get the classic max_tokens");
    assert_eq!(response.text().as_deref(), Some("Hi"));
    assert_eq!(response.usage, None);
    assert_eq!(harness.provider.kind(), "openai_compatible");
}

#[tokio::test]
async fn compatible_server_with_a_key_gets_a_bearer_token() {
    let fake = Fake::json(200, completion("ok")).await;
    let harness = compatible(&fake, Some("gsk_local"));

    harness.provider.chat(harness.call("llama-3.1-8b", None), &hello()).await.unwrap();

    assert_eq!(fake.only_request().header("authorization"), Some("Bearer gsk_local"));
}

#[tokio::test]
async fn a_query_on_the_base_url_follows_each_operations_path_and_a_fragment_is_refused() {
    // A proxy that wants its key or version in the query.
    let fake = Fake::json(200, completion("ok")).await;
    let settings = ProviderSettings::new(ProviderKind::OpenAiCompatible)
        .base_url(format!("{}?team=search&v=2", fake.url("/v1")));
    let harness = Harness::configured(settings, None);
    harness.provider.chat(harness.call("m", None), &hello()).await.unwrap();
    assert_eq!(fake.only_request().uri, "/v1/chat/completions?team=search&v=2");

    let fragment =
        ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url("http://127.0.0.1:9/v1#frag");
    assert!(matches!(OpenAiProvider::new(&fragment), Err(BuildError::InvalidBaseUrl(_))));
}

#[tokio::test]
async fn the_answer_is_asked_as_sent_and_one_a_proxy_compressed_anyway_is_malformed_not_garbage() {
    let fake = Fake::start(|_| {
        let mut reply = json_reply(200, &[], &completion("ok"));
        reply.headers_mut().insert("content-encoding", axum::http::HeaderValue::from_static("gzip"));
        reply
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));
    let error = harness.chat(&hello()).await.unwrap_err();
    assert_eq!(fake.only_request().header("accept-encoding"), Some("identity"));
    assert_eq!(error.kind(), ErrorKind::MalformedResponse, "{error:?}");
    assert!(error.detail().contains("`gzip`-encoded"), "{error:?}");

    // An error is its status's, whatever its body's coding.
    let refused = Fake::start(|_| {
        let mut reply = json_reply(401, &[], &json!({"error": {"message": "bad key"}}));
        reply.headers_mut().insert("content-encoding", axum::http::HeaderValue::from_static("gzip"));
        reply
    })
    .await;
    let error = Harness::openai(refused.url("/v1")).chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Auth, "{error:?}");
}

#[tokio::test]
async fn compatible_flat_error_bodies_are_classified() {
    // vLLM: no `error` wrapper, the code is the HTTP status as a number.
    let vllm = json!({"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you requested 2723 tokens (2223 in the messages, 500 in the completion).",
        "type": "BadRequestError", "param": null, "code": 400});
    let fake = Fake::json(400, vllm).await;
    let harness = compatible(&fake, None);
    let error = harness.provider.chat(harness.call("m", None), &hello()).await.unwrap_err();
    // Its code says only 400; its words say the prompt is too long, which the route's
    // `context_window` chain answers.
    assert_eq!(
        (error.kind(), error.status(), error.code()),
        (ErrorKind::ContextLength, Some(400), Some("400"))
    );
    assert!(error.detail().starts_with("This model's maximum context length"));

    // Mistral: flat, with a type and a null code.
    let mistral = json!({"object": "error", "message": "Unauthorized", "type": "invalid_request_error", "param": null, "code": null});
    let fake = Fake::json(401, mistral).await;
    let harness = compatible(&fake, Some("mistral-key"));
    let error = harness.provider.chat(harness.call("m", None), &hello()).await.unwrap_err();
    assert_eq!((error.kind(), error.code()), (ErrorKind::Auth, Some("invalid_request_error")));
}

#[tokio::test]
async fn compatible_stream_with_keepalives_and_no_usage_ends_cleanly() {
    let mut body = String::from(": keep-alive\n\n");
    body.push_str(&sse(&[chunk(json!({"role": "assistant", "content": "Hi"}), Value::Null)], false));
    body.push_str(": keep-alive\n\n");
    body.push_str(&sse(&[chunk(json!({"content": "!"}), json!("stop"))], true));
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let harness = compatible(&fake, None);

    let stream = harness.provider.chat_stream(harness.call("m", None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;

    assert!(error.is_none());
    assert_eq!(text_of(&chunks), "Hi!");
    assert!(chunks.iter().all(|c| c.usage.is_none()));
}

#[tokio::test]
async fn compatible_server_answering_a_stream_with_an_error_in_a_200_json_body_fails_classified() {
    let body = json!({"error": {"code": 400, "message": "request (36146 tokens) exceeds the available context size (32768 tokens), try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 36146, "n_ctx": 32768}});
    let fake = Fake::json(200, body).await;
    let harness = compatible(&fake, None);

    let error = harness.provider.chat_stream(harness.call("m", None), &hello()).await.err().unwrap();

    assert_eq!(error.kind(), ErrorKind::ContextLength);
}

#[tokio::test]
async fn compatible_server_answering_a_stream_with_plain_json_still_streams() {
    let fake = Fake::json(200, completion("whole answer")).await;
    let harness = compatible(&fake, None);

    let stream = harness.provider.chat_stream(harness.call("m", None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;

    assert!(error.is_none());
    assert_eq!(text_of(&chunks), "whole answer");
    assert_eq!(finish_of(&chunks), vec![FinishReason::Stop]);
    assert_eq!(chunks.last().unwrap().usage, Some(completion_usage()));
}

#[test]
fn compatible_and_azure_need_a_base_url() {
    for kind in [ProviderKind::OpenAiCompatible, ProviderKind::Azure] {
        let error = OpenAiProvider::new(&ProviderSettings::new(kind)).unwrap_err();
        assert!(matches!(error, BuildError::MissingBaseUrl(k) if k == kind), "{error}");
    }
    let openai = OpenAiProvider::new(&ProviderSettings::new(ProviderKind::OpenAi)).unwrap();
    assert_eq!(openai.base_url(), "https://api.openai.com/v1");
}

// ---------------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn embeddings_round_trip_in_input_order() {
    // The server lists the vectors out of order; the answer must follow the input.
    let answer = json!({"object": "list",
        "data": [{"object": "embedding", "index": 1, "embedding": [0.0011, 0.042]},
                 {"object": "embedding", "index": 0, "embedding": [0.0023, -0.0091]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 8, "total_tokens": 8}});
    let fake =
        Fake::start(move |_| json_reply(200, &[("x-ratelimit-remaining-requests", "99")], &answer)).await;
    let harness = Harness::openai(fake.url("/v1"));
    let request = EmbeddingsRequest {
        model: "embeddings-route".into(),
        input: EmbeddingInput::Many(vec!["text one".into(), "text two".into()]),
        dimensions: Some(512),
        // base64 cannot be represented canonically: floats are asked for instead.
        extra: extra(json!({"user": "opaque", "encoding_format": "base64"})),
    };
    let sink = Recorder::default();

    let response = harness
        .provider
        .embeddings(harness.call("text-embedding-3-small", Some(&sink)), &request)
        .await
        .unwrap();

    let seen = fake.only_request();
    assert_eq!(seen.uri, "/v1/embeddings");
    assert_eq!(seen.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(
        seen.body,
        json!({"model": "text-embedding-3-small", "input": ["text one", "text two"], "dimensions": 512,
            "encoding_format": "float", "user": "opaque"})
    );
    assert_eq!(response.data.iter().map(|e| e.index).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(response.data[0].embedding, vec![0.0023, -0.0091]);
    assert_eq!(response.data[1].embedding, vec![0.0011, 0.042]);
    assert_eq!(response.model, "text-embedding-3-small");
    assert_eq!(
        response.usage,
        Some(Usage { prompt_tokens: 8, completion_tokens: 0, total_tokens: 8, ..Usage::default() })
    );
    assert_eq!(sink.0.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn token_id_inputs_reach_an_openai_server_as_written() {
    // LangChain's OpenAIEmbeddings sends token ids: `int[]` is one input, `int[][]` several.
    let one: EmbeddingsRequest = serde_json::from_value(json!({"model": "e", "input": [1, 2, 3]})).unwrap();
    assert_eq!(one.input, EmbeddingInput::Tokens(vec![vec![1, 2, 3]]));
    let two: EmbeddingsRequest =
        serde_json::from_value(json!({"model": "e", "input": [[1, 2], [3]]})).unwrap();
    assert_eq!(two.input.len(), 2);
    let mixed = serde_json::from_value::<EmbeddingsRequest>(json!({"model": "e", "input": ["a", 1]}));
    assert!(mixed.unwrap_err().to_string().contains("mixes strings, token ids"));

    let answer = json!({"object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5]},
                 {"object": "embedding", "index": 1, "embedding": [0.25]}],
        "model": "text-embedding-3-small", "usage": {"prompt_tokens": 3, "total_tokens": 3}});
    let fake = Fake::start(move |_| json_reply(200, &[], &answer)).await;
    let harness = Harness::openai(fake.url("/v1"));
    let response =
        harness.provider.embeddings(harness.call("text-embedding-3-small", None), &two).await.unwrap();
    assert_eq!(fake.only_request().body["input"], json!([[1, 2], [3]]));
    assert_eq!(response.data.len(), 2);
}

#[tokio::test]
async fn embeddings_with_a_missing_vector_are_malformed() {
    let answer = json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1]}],
        "model": "m", "usage": {"prompt_tokens": 2, "total_tokens": 2}});
    let fake = Fake::json(200, answer).await;
    let harness = Harness::openai(fake.url("/v1"));
    let request = EmbeddingsRequest {
        model: "e".into(),
        input: EmbeddingInput::Many(vec!["a".into(), "b".into()]),
        dimensions: None,
        extra: Extra::new(),
    };

    let error = harness.provider.embeddings(harness.call("m", None), &request).await.unwrap_err();

    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

fn assert_no_key(error: &ProviderError) {
    assert!(!format!("{error}").contains(KEY), "Display leaks the key: {error}");
    assert!(!format!("{error:?}").contains(KEY), "Debug leaks the key: {error:?}");
}

#[tokio::test]
async fn no_error_text_contains_the_key() {
    // A server that echoes the key it was sent, in every way it can fail.
    let turn = Arc::new(Mutex::new(0));
    let fake = Fake::start(move |_| {
        let mut turn = turn.lock().unwrap();
        *turn += 1;
        let echo = format!("Incorrect API key provided: {KEY}.");
        match *turn {
            1 => json_reply(
                401,
                &[],
                &error_body(&echo, json!("invalid_request_error"), json!("invalid_api_key")),
            ),
            2 => respond(200, &[], "application/json", Body::from(format!("not json, key={KEY}"))),
            3 => sse_reply(
                &[],
                &sse(&[json!({"error": {"message": echo, "type": "server_error", "code": KEY}})], false),
            ),
            4 => respond(403, &[], "text/plain", Body::from(echo)),
            // Broken events, one more than a stream skips.
            _ => sse_reply(&[], &format!("data: {{\"broken\": \"{KEY}\"\n\n").repeat(4)),
        }
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));

    let errors = [
        harness.chat(&hello()).await.unwrap_err(),
        harness.chat(&hello()).await.unwrap_err(),
        drain(harness.stream(&hello()).await.unwrap()).await.1.unwrap(),
        harness.chat(&hello()).await.unwrap_err(),
        {
            let (notices, broken) = drain(harness.stream(&hello()).await.unwrap()).await;
            for chunk in notices {
                let Some(switchyard::chat::StreamNotice::Skipped(detail)) = chunk.notice else {
                    panic!("only notices of skipped events come before the failure: {chunk:?}")
                };
                assert!(!detail.contains(KEY), "a notice leaks the key: {detail}");
            }
            broken.unwrap()
        },
    ];
    let kinds: Vec<ErrorKind> = errors.iter().map(ProviderError::kind).collect();
    assert_eq!(
        kinds,
        [
            ErrorKind::Auth,
            ErrorKind::MalformedResponse,
            ErrorKind::Unavailable,
            ErrorKind::Auth,
            ErrorKind::MalformedResponse
        ]
    );
    errors.iter().for_each(assert_no_key);
    // Every request did carry the key: the scrubbing, not its absence, kept it out.
    assert!(
        fake.requests()
            .iter()
            .all(|seen| seen.header("authorization") == Some(format!("Bearer {KEY}").as_str()))
    );

    let refused = Harness::openai(format!("{}/v1", refused_origin().await)).chat(&hello()).await.unwrap_err();
    assert_no_key(&refused);
}

#[test]
fn provider_debug_shows_no_header_values() {
    let mut settings =
        ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url("http://localhost:8000/v1");
    settings.headers = vec![("X-Upstream-Token".into(), "tok-very-secret".into())];
    let provider = OpenAiProvider::new(&settings).unwrap();

    let debug = format!("{provider:?}");

    assert!(!debug.contains("tok-very-secret"), "{debug}");
    assert!(debug.contains("http://localhost:8000/v1"));
}

#[test]
fn invalid_configured_header_is_a_build_error_naming_the_header() {
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi);
    settings.headers = vec![("X-Bad".into(), "line\nbreak".into())];
    let error = OpenAiProvider::new(&settings).unwrap_err();
    assert!(matches!(&error, BuildError::InvalidHeader(name) if name == "X-Bad"), "{error}");
    assert!(!error.to_string().contains("line"));
}

// ---------------------------------------------------------------------------------------------
// parse_duration, the reader of x-ratelimit-reset-* values
// ---------------------------------------------------------------------------------------------

/// How Go's `time.Duration.String` writes a duration of whole milliseconds.
fn go_duration(hours: u64, minutes: u64, seconds: u64, millis: u64) -> String {
    let total_ms = ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis;
    if total_ms == 0 {
        return "0s".to_owned();
    }
    if total_ms < 1000 {
        return format!("{millis}ms");
    }
    let fraction =
        if millis == 0 { String::new() } else { format!(".{millis:03}").trim_end_matches('0').to_owned() };
    match (hours, minutes) {
        (0, 0) => format!("{seconds}{fraction}s"),
        (0, _) => format!("{minutes}m{seconds}{fraction}s"),
        _ => format!("{hours}h{minutes}m{seconds}{fraction}s"),
    }
}

proptest! {
    #[test]
    fn parse_duration_reads_go_style_durations(hours in 0u64..48, minutes in 0u64..60, seconds in 0u64..60, millis in 0u64..1000) {
        let text = go_duration(hours, minutes, seconds, millis);
        let expected = Duration::from_millis(((hours * 60 + minutes) * 60 + seconds) * 1000 + millis).min(MAX_DURATION);

        let parsed = parse_duration(&text);

        let parsed = parsed.ok_or_else(|| TestCaseError::fail(format!("`{text}` did not parse")))?;
        let error = parsed.abs_diff(expected);
        prop_assert!(error < Duration::from_micros(1), "`{}` parsed as {:?}, expected {:?}", text, parsed, expected);
    }

    #[test]
    fn parse_duration_never_panics_on_arbitrary_text(text in any::<String>()) {
        let _ = parse_duration(&text);
    }

    #[test]
    fn parse_duration_never_panics_on_near_miss_durations(text in "[0-9.hmsunµ -]{0,24}") {
        if let Some(duration) = parse_duration(&text) {
            prop_assert!(duration <= MAX_DURATION);
        }
    }
}

/// `http2: true` speaks HTTP/2 with prior knowledge (over plain TCP the connection starts with
/// the HTTP/2 preface); the default stays on HTTP/1.1. Answers and streams work over both.
#[tokio::test]
async fn http2_is_spoken_with_prior_knowledge_when_configured() {
    for (http2, version) in [(false, axum::http::Version::HTTP_11), (true, axum::http::Version::HTTP_2)] {
        let fake = Fake::json(200, completion("Hi there.")).await;
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"));
        settings.http.http2 = http2;
        let harness = Harness::configured(settings, Some(KEY));
        let answer = harness.chat(&ChatRequest::new("default", vec![Message::user("Hi")])).await.unwrap();
        assert_eq!(answer.text().as_deref(), Some("Hi there."), "http2: {http2}");
        assert_eq!(fake.only_request().version, version, "http2: {http2}");

        let events =
            [chunk(json!({"content": "Hel"}), Value::Null), chunk(json!({"content": "lo"}), json!("stop"))];
        let text = sse(&events, true);
        let fake = Fake::start(move |_| sse_reply(&[], &text)).await;
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi).base_url(fake.url("/v1"));
        settings.http.http2 = http2;
        let harness = Harness::configured(settings, Some(KEY));
        let mut request = ChatRequest::new("default", vec![Message::user("Hi")]);
        request.stream = true;
        let (chunks, error) = drain(harness.stream(&request).await.unwrap()).await;
        assert!(error.is_none(), "http2: {http2}: {error:?}");
        assert_eq!(text_of(&chunks), "Hello", "http2: {http2}");
        assert_eq!(fake.only_request().version, version, "http2: {http2}");
    }
}

/// A Responses request, which an OpenAI provider sends to `/responses` as it stands.
fn responses_request() -> ChatRequest {
    let body = bytes::Bytes::from_static(br#"{"model":"default","input":"hi","stream":true}"#);
    let mut request = hello();
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Responses, body));
    request
}

#[tokio::test]
async fn a_chat_stream_skips_a_stray_event_but_not_one_cut_in_its_text() {
    let word = |text: &str| chunk(json!({"content": text}), Value::Null);
    let events = |middle: &str| {
        let head =
            sse(&[chunk(json!({"role": "assistant", "content": ""}), Value::Null), word("w1 ")], false);
        let tail = sse(&[word("w3"), chunk(json!({}), json!("stop"))], true);
        format!("{head}data: {middle}\n\n{tail}")
    };
    let stray = events(r#"{"keep": "alive"#);
    let cut = events(r#"{"id":"chatcmpl-X","choices":[{"index":0,"delta":{"content":"w2 "#);
    let fake =
        Fake::start(move |seen| sse_reply(&[], if seen.path().contains("cut") { &cut } else { &stray }))
            .await;

    let (chunks, error) = drain(Harness::openai(fake.url("/stray/v1")).stream(&hello()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&chunks), "w1 w3");
    let (chunks, error) = drain(Harness::openai(fake.url("/cut/v1")).stream(&hello()).await.unwrap()).await;
    let error = error.expect("not passed off as whole without w2");
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    assert_eq!(text_of(&chunks), "w1 ");
}

#[tokio::test]
async fn a_responses_stream_skips_an_event_that_is_not_json_while_few_are() {
    let event = |kind: &str, data: &str| format!("event: {kind}\ndata: {data}\n\n");
    let delta = |text: &str| {
        let data = json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text});
        event("response.output_text.delta", &data.to_string())
    };
    // Broken before its text: nothing of the answer is lost with it.
    let broken = event("response.output_text.delta", &format!("{{\"note\": \"{KEY}"));
    let cut_text =
        event("response.output_text.delta", r#"{"type": "response.output_text.delta", "delta": "lo wor"#);
    let completed = event(
        "response.completed",
        r#"{"type":"response.completed","response":{"id":"resp_1","model":"m","status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}}"#,
    );
    let created = event(
        "response.created",
        r#"{"type":"response.created","response":{"id":"resp_1","model":"m","status":"in_progress","output":[]}}"#,
    );
    let once = [created.clone(), delta("Hel"), broken.clone(), delta("lo"), completed.clone()].concat();
    let often = [created.clone(), delta("Hel"), broken.repeat(4), delta("lo"), completed.clone()].concat();
    let lossy = [created, delta("Hel"), cut_text, delta("ld"), completed].concat();
    let fake = Fake::start(move |seen| {
        let body = match seen.path() {
            path if path.contains("often") => often.clone(),
            path if path.contains("lossy") => lossy.clone(),
            _ => once.clone(),
        };
        sse_reply(&[], &body)
    })
    .await;

    let (chunks, error) =
        drain(Harness::openai(fake.url("/once/v1")).stream(&responses_request()).await.unwrap()).await;
    assert!(error.is_none(), "one event that is not JSON ends nothing: {error:?}");
    assert_eq!(text_of(&chunks), "Hello");
    assert_eq!(finish_of(&chunks), [FinishReason::Stop]);
    let notices: Vec<_> = chunks.iter().filter_map(|chunk| chunk.notice.as_ref()).collect();
    let [switchyard::chat::StreamNotice::Skipped(detail)] = notices.as_slice() else {
        panic!("one notice of the skipped event: {notices:?}")
    };
    assert!(!detail.contains(KEY), "a notice leaks the key: {detail}");

    let (chunks, error) =
        drain(Harness::openai(fake.url("/often/v1")).stream(&responses_request()).await.unwrap()).await;
    assert_eq!(error.map(|error| error.kind()), Some(ErrorKind::MalformedResponse));
    assert_eq!(text_of(&chunks), "Hel", "the stream ends at the fourth such event");

    // An event cut in the middle of its text cannot be skipped: the answer would lack it.
    let (chunks, error) =
        drain(Harness::openai(fake.url("/lossy/v1")).stream(&responses_request()).await.unwrap()).await;
    let error = error.expect("the stream ends");
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    assert!(error.detail().contains("carried part of the answer"), "{error:?}");
    assert_eq!(text_of(&chunks), "Hel");
}

#[tokio::test]
async fn a_responses_stream_gives_a_custom_tools_call_as_a_call() {
    let event = |data: Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    let body = [
        event(json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress", "output": []}})),
        event(json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "apply_patch", "input": ""}})),
        event(json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0, "delta": "*** Begin"})),
        event(json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0, "delta": " Patch"})),
        event(json!({"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-5", "status": "completed", "output": [], "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}})),
    ]
    .concat();
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;

    let (chunks, error) =
        drain(Harness::openai(fake.url("/v1")).stream(&responses_request()).await.unwrap()).await;

    assert!(error.is_none(), "{error:?}");
    let calls: Vec<_> = chunks.iter().flat_map(|c| &c.choices).flat_map(|c| &c.delta.tool_calls).collect();
    assert_eq!(calls[0].kind.as_deref(), Some("custom"));
    assert_eq!(calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(calls[0].extra["custom"]["name"], "apply_patch");
    let input: String = calls.iter().filter_map(|c| c.extra["custom"]["input"].as_str()).collect();
    assert_eq!(input, "*** Begin Patch");
    assert_eq!(finish_of(&chunks), [FinishReason::ToolCalls]);
}

#[tokio::test]
async fn a_responses_stream_cut_after_its_preamble_before_its_call_is_broken_off_not_whole() {
    // An agent's turn: a message ("I'll handle that now."), done, then the call it announced.
    // Cut between the two, nothing says the answer was over: only `response.completed` does.
    let event = |data: Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "I'll handle that now.", "annotations": []}]});
    let body = [
        event(json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress", "output": []}})),
        event(json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}})),
        event(json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "I'll handle that now."})),
        event(json!({"type": "response.output_item.done", "output_index": 0, "item": message})),
    ]
    .concat();
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;

    let (chunks, error) =
        drain(Harness::openai(fake.url("/v1")).stream(&responses_request()).await.unwrap()).await;

    let error = error.expect("a stream that ends before its completion is broken off");
    assert_eq!(error.kind(), ErrorKind::Transport, "{error:?}");
    assert!(error.detail().contains("response.completed"), "{error:?}");
    assert_eq!(text_of(&chunks), "I'll handle that now.");
    assert!(finish_of(&chunks).is_empty(), "never said finished: {:?}", finish_of(&chunks));
}

#[tokio::test]
async fn an_output_limit_the_model_refuses_is_sent_once_more_at_its_limit_for_a_request_of_another_dialect() {
    // gpt-4o writes at most 16,384 tokens; Claude Code asks for 32,000.
    let fake = Fake::start(|seen| {
        let asked = seen.body["max_completion_tokens"].as_u64().unwrap_or_default();
        if asked > 16384 {
            let message = format!(
                "max_tokens is too large: {asked}. This model supports at most 16384 completion tokens, whereas you provided {asked}."
            );
            let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "max_tokens", "code": null}});
            return json_reply(400, &[], &body);
        }
        json_reply(200, &[], &completion("Hello"))
    })
    .await;
    let harness = Harness::openai(fake.url("/v1"));
    let mut anthropic = ChatRequest { max_tokens: Some(32000), ..hello() };
    anthropic.origin = Dialect::Anthropic;
    let answer = harness.chat(&anthropic).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("Hello"));
    let asked: Vec<Value> =
        fake.requests().iter().map(|seen| seen.body["max_completion_tokens"].clone()).collect();
    assert_eq!(asked, [json!(32000), json!(16384)]);
    let stream = harness.stream(&anthropic).await.unwrap();
    assert_eq!(support::text_of(&support::ok_chunks(support::items(stream).await)), "Hello");
    assert_eq!(fake.requests().len(), 4, "streamed, the same");

    // An OpenAI client's own limit is its own: the refusal is its answer.
    let own = ChatRequest { max_tokens: Some(32000), ..hello() };
    let error = harness.chat(&own).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    assert_eq!(fake.requests().len(), 5);
}

/// A server that refuses the `stream_options` the gateway adds (`refusal`), and streams
/// without them.
async fn refusing_stream_options(refusal: fn() -> axum::response::Response) -> Fake {
    let body = sse(&[chunk(json!({"content": "Hi"}), json!(null)), chunk(json!({}), json!("stop"))], true);
    Fake::start(move |seen| match seen.body.get("stream_options") {
        Some(_) => refusal(),
        None => sse_reply(&[], &body),
    })
    .await
}

fn azure_refusal() -> axum::response::Response {
    let message = "Unrecognized request argument supplied: stream_options";
    json_reply(400, &[], &error_body(message, json!(null), json!(null)))
}

fn pydantic_refusal() -> axum::response::Response {
    let detail = json!({"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"],
        "msg": "Extra inputs are not permitted", "input": {"include_usage": true}}]});
    json_reply(422, &[], &detail)
}

#[tokio::test]
async fn a_stream_refused_for_the_stream_options_the_gateway_adds_goes_without_them_from_then_on() {
    for refusal in [azure_refusal as fn() -> _, pydantic_refusal] {
        let fake = refusing_stream_options(refusal).await;
        let harness = Harness::configured(
            ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url(fake.url("/v1")),
            Some(KEY),
        );
        // The client's own body (sent as written) and a translated one (another dialect's).
        let mut own = hello();
        own.stream = true;
        let written = br#"{"model":"default","messages":[{"role":"user","content":"Hello!"}],"stream":true}"#;
        own.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::OpenAi, &written[..]));
        let mut translated = hello();
        translated.stream = true;
        translated.origin = Dialect::Anthropic;
        for request in [&own, &translated] {
            let (chunks, error) = drain(harness.stream(request).await.unwrap()).await;
            assert!(error.is_none(), "{error:?}");
            assert_eq!(text_of(&chunks), "Hi");
        }
        let asked: Vec<bool> =
            fake.requests().iter().map(|seen| seen.body.get("stream_options").is_some()).collect();
        assert_eq!(asked, [true, false, false], "refused once, then sent without them at once");
        // Its streams now come without usage: its whole answers are asked whole, which keeps it.
        use switchyard::provider::Provider as _;
        assert!(!harness.provider.streams_upstream_for(harness.model));
        assert!(harness.provider.streams_upstream_for("another-model"));

        // A whole answer asked as a stream is refused as before: the router asks it whole,
        // which keeps its usage.
        let fresh = refusing_stream_options(refusal).await;
        let harness = Harness::configured(
            ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url(fresh.url("/v1")),
            Some(KEY),
        );
        let error = harness.stream(&hello()).await.err().expect("refused");
        assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{error:?}");
    }
}

#[tokio::test]
async fn a_proxys_page_refusing_the_request_is_no_verdict_of_the_provider_on_it() {
    // nginx before the server refuses the request: the next target may take it, so it is not
    // the client's invalid request (which no target would take).
    let page = "<html><head><title>400 Request Header Or Cookie Too Large</title></head><body><center><h1>400 Bad Request</h1></center><hr><center>nginx</center></body></html>";
    let fake = Fake::start(move |_| respond(400, &[], "text/html", Body::from(page))).await;
    let error = Harness::openai(fake.url("/v1")).chat(&hello()).await.err().unwrap();
    assert!(error.is_unsupported(), "{error:?}");
    assert_eq!((error.kind(), error.status()), (ErrorKind::InvalidRequest, Some(400)));
    assert!(error.detail().contains("Request Header Or Cookie Too Large"), "{}", error.detail());
    // The provider's own refusal stays the request's fault.
    let error =
        chat_error(400, &[], error_body("bad temperature", json!("invalid_request_error"), json!(null)))
            .await;
    assert!(!error.is_unsupported(), "{error:?}");
    let fastapi =
        json!({"detail": [{"type": "missing", "loc": ["body", "messages"], "msg": "Field required"}]});
    let error = chat_error(422, &[], fastapi).await;
    assert!(!error.is_unsupported(), "a server's own validation, in its JSON: {error:?}");
    // A firewall's block page in front of the provider says nothing of the key.
    let blocked = "<html><title>Attention Required! | Cloudflare</title><body>Sorry, you have been blocked</body></html>";
    let fake = Fake::start(move |_| respond(403, &[], "text/html", Body::from(blocked))).await;
    let error = Harness::openai(fake.url("/v1")).chat(&hello()).await.err().unwrap();
    assert!(error.is_unsupported() && error.kind() != ErrorKind::Auth, "{error:?}");
    // Other statuses keep their kind (a 405 page is no request the next target may take).
    let fake = Fake::start(move |_| respond(405, &[], "text/html", Body::from("<html>405</html>"))).await;
    let error = Harness::openai(fake.url("/v1")).chat(&hello()).await.err().unwrap();
    assert!(!error.is_unsupported(), "{error:?}");
    // A proxy's 502 page is an outage, as before.
    let fake =
        Fake::start(move |_| respond(502, &[], "text/html", Body::from("<html>Bad Gateway</html>"))).await;
    let error = Harness::openai(fake.url("/v1")).chat(&hello()).await.err().unwrap();
    assert_eq!((error.kind(), error.is_unsupported()), (ErrorKind::Unavailable, false));
}

#[tokio::test]
async fn a_proxys_page_answering_a_stream_says_what_came_not_that_the_stream_ended_early() {
    let page = "<html><body>Service Temporarily Unavailable</body></html>";
    let fake = Fake::start(move |_| respond(200, &[], "text/html; charset=utf-8", Body::from(page))).await;
    let error = Harness::openai(fake.url("/v1")).stream(&hello()).await.err().expect("no stream");
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    assert!(
        error.detail().starts_with("expected an event stream, got `text/html; charset=utf-8`"),
        "{}",
        error.detail()
    );
    assert!(error.detail().contains("Service Temporarily Unavailable"), "{}", error.detail());
}

#[tokio::test]
async fn a_refusals_connection_is_not_reused_for_the_request_sent_again() {
    // Many servers close the connection after a 4xx without saying so: the request sent again
    // at once (without what was refused) must not take it. A 429's connection is kept.
    for (first, connections) in [(400, 2), (422, 2), (429, 1), (200, 1)] {
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        let fake = Fake::start(move |_| match count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 if first != 200 => {
                json_reply(first, &[], &error_body("no", json!("invalid_request_error"), json!(null)))
            }
            _ => json_reply(200, &[], &completion("Hi")),
        })
        .await;
        let harness = Harness::openai(fake.url("/v1"));
        let _ = harness.chat(&hello()).await;
        harness.chat(&hello()).await.expect("answered");
        assert_eq!(fake.connections(), connections, "after a {first}");
    }
}

/// An Anthropic client's strict tool: `strict: true`, with a `schema` of its own.
fn anthropic_strict_tool(schema: Value) -> switchyard::chat::Tool {
    let mut function = switchyard::chat::FunctionDefinition {
        name: "get_weather".into(),
        description: None,
        parameters: Some(schema),
        extra: Default::default(),
    };
    function.extra.insert("strict".into(), json!(true));
    switchyard::chat::Tool { kind: "function".into(), function, extra: Default::default() }
}

#[tokio::test]
async fn an_anthropic_clients_strict_tool_is_openais_strict_where_its_schema_allows_and_goes_without_where_refused()
 {
    let closed = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": false});
    let refusal =
        error_body("Invalid schema for function 'get_weather'", json!("invalid_request_error"), json!(null));
    let fake = Fake::start(move |seen| match seen.body["tools"][0]["function"].get("strict") {
        Some(_) => json_reply(400, &[], &refusal),
        None => json_reply(200, &[], &completion("Hi")),
    })
    .await;
    let harness = Harness::configured(
        ProviderSettings::new(ProviderKind::OpenAiCompatible).base_url(fake.url("/v1")),
        Some(KEY),
    );
    let mut request = hello();
    request.origin = Dialect::Anthropic;
    request.tools = vec![anthropic_strict_tool(closed.clone())];
    for _ in 0..2 {
        let answer = harness.chat(&request).await.expect("answered without strict");
        let said = answer.notices.iter().any(
            |notice| matches!(notice, switchyard::chat::StreamNotice::Resent(text) if text.contains("strict")),
        );
        assert!(said, "{:?}", answer.notices);
    }
    let asked: Vec<bool> = fake
        .requests()
        .iter()
        .map(|seen| seen.body["tools"][0]["function"].get("strict").is_some())
        .collect();
    assert_eq!(asked, [true, false, false], "refused once, then left out at once");

    // A schema OpenAI's strict mode does not take (an optional property) is not asked strictly.
    let taking = Fake::json(200, completion("Hi")).await;
    let open = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    request.tools = vec![anthropic_strict_tool(open)];
    Harness::openai(taking.url("/v1")).chat(&request).await.unwrap();
    assert_eq!(taking.only_request().body["tools"][0]["function"].get("strict"), None);
}

#[tokio::test]
async fn a_server_that_streams_an_answer_asked_whole_is_read_to_its_end_and_put_together() {
    // Some compatible servers stream whatever `stream` says: with `stream_upstream: false`
    // their answer was malformed JSON. Read as the stream it is, it is the whole answer.
    let chunk = |delta: Value, finish: Value| {
        let data = json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {data}\n\n")
    };
    let usage = json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}});
    let body = [
        chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null),
        chunk(json!({"content": "lo"}), json!("stop")),
        format!("data: {usage}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let fake = Fake::start(move |_| sse_reply(&[], &body)).await;
    let answer = Harness::openai(fake.url("/v1")).chat(&hello()).await.unwrap();
    assert_ne!(fake.only_request().body["stream"], json!(true), "asked whole");
    assert_eq!(answer.choices[0].message.text_content().as_deref(), Some("Hello"));
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(answer.usage.map(|u| u.total_tokens), Some(5));

    // One held open after its finish, without its terminator, is whole a moment after, as a
    // stream asked for one is (it waited for the attempt's end).
    let finished = [chunk(json!({"role": "assistant", "content": "Hello"}), json!("stop"))].concat();
    let held = Fake::start(move |_| {
        broken_reply(vec![finished.clone().into_bytes()], Some(Arc::new(tokio::sync::Notify::new())))
    })
    .await;
    let answer = Harness::openai(held.url("/v1")).chat(&hello()).await.unwrap();
    assert_eq!(answer.choices[0].message.text_content().as_deref(), Some("Hello"));

    // One that streams nothing of an answer is malformed, asked again or of the next target.
    let empty = Fake::start(|_| sse_reply(&[], "data: [DONE]\n\n")).await;
    let error = Harness::openai(empty.url("/v1")).chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MalformedResponse, "{error:?}");
}
