//! The Bedrock adapter against the fake upstream of `support`: InvokeModel for Claude (the
//! Messages body, event-stream chunks), Converse for other models, embeddings, SigV4 or a
//! bearer key, error classification, beta flags, credentials kept and refreshed, and no secret
//! in anything it reports.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use axum::body::Body;
use base64::Engine as _;
use serde_json::{Value, json};
use support::{Caller, Fake, items, json_reply, ok_chunks, respond, text_of};
use switchyard::ErrorKind;
use switchyard::chat::{ChatRequest, Dialect, EmbeddingInput, EmbeddingsRequest, FinishReason, Message};
use switchyard::provider::Provider;
use switchyard_providers::bedrock::eventstream::encode_frame;
use switchyard_providers::bedrock::{AwsAuth, BedrockProvider, BedrockSettings, CredentialCache};
use switchyard_providers::{BetaPolicy, ProviderKind, ProviderSettings};
use tokio::sync::Notify;

const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const LLAMA: &str = "meta.llama3-70b-instruct-v1:0";
const ACCESS_KEY: &str = "AKIDEXAMPLE00000001";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const TOKEN: &str = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN0123456789";

fn settings(base_url: &str) -> ProviderSettings {
    let mut settings = ProviderSettings::new(ProviderKind::Bedrock).base_url(base_url);
    settings.bedrock = Some(BedrockSettings { region: "us-east-1".into(), aws: AwsAuth::default() });
    settings
}

fn static_credentials() -> Arc<CredentialCache> {
    let credentials = Credentials::new(ACCESS_KEY, SECRET, Some(TOKEN.to_owned()), None, "test");
    Arc::new(CredentialCache::with_provider("us-east-1", SharedCredentialsProvider::new(credentials)))
}

fn provider(base_url: &str) -> BedrockProvider {
    BedrockProvider::new(&settings(base_url)).unwrap().with_credentials(static_credentials())
}

fn hello() -> ChatRequest {
    ChatRequest::new("route", vec![Message::user("Hello")])
}

/// A request as the gateway makes it of an Anthropic client's body: decoded, the body kept.
fn anthropic_request(written: &'static [u8]) -> ChatRequest {
    let mut request = switchyard_providers::anthropic::codec::request_from_slice(written).unwrap();
    assert_eq!(request.origin, Dialect::Anthropic);
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Anthropic, written));
    request
}

fn claude_answer() -> Value {
    json!({
        "id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Hi from Bedrock"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 9, "output_tokens": 4, "cache_read_input_tokens": 2}
    })
}

/// An event-stream body of Anthropic `events`, each in a `chunk` frame.
fn claude_stream(events: &[Value]) -> Vec<u8> {
    let mut body = Vec::new();
    for event in events {
        let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
        let payload = json!({ "bytes": bytes, "p": "abcdefghij" }).to_string();
        body.extend(encode_frame(
            &[(":message-type", "event"), (":event-type", "chunk"), (":content-type", "application/json")],
            payload.as_bytes(),
        ));
    }
    body
}

fn claude_events() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [], "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "there"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 5, "outputTokenCount": 3}}),
    ]
}

fn event_stream_reply(body: Vec<u8>) -> axum::response::Response {
    respond(200, &[], "application/vnd.amazon.eventstream", Body::from(body))
}

fn exception(kind: &str, message: &str) -> Vec<u8> {
    encode_frame(
        &[(":message-type", "exception"), (":exception-type", kind), (":content-type", "application/json")],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

// ---------------------------------------------------------------------------------------------
// Claude through InvokeModel

#[tokio::test]
async fn claude_is_invoked_with_the_messages_body_less_model_and_stream_and_signed_with_sigv4() {
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let forward = vec![("anthropic-beta".to_owned(), "context-1m-2025-08-07".to_owned())];
    let caller = Caller::new(&provider, None).forward(&forward);
    let answer = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("Hi from Bedrock"));
    assert_eq!(answer.usage.unwrap().cached_tokens(), Some(2));

    let seen = fake.only_request();
    assert_eq!(seen.path(), "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke");
    assert!(seen.body.get("model").is_none() && seen.body.get("stream").is_none(), "{}", seen.body);
    assert_eq!(seen.body["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(seen.body["anthropic_beta"], json!(["context-1m-2025-08-07"]));
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}])
    );
    assert!(seen.header("anthropic-beta").is_none(), "betas go in the body");
    let authorization = seen.header("authorization").unwrap();
    let date = &seen.header("x-amz-date").unwrap()[..8];
    assert!(
        authorization.starts_with(&format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{date}/us-east-1/bedrock/aws4_request, SignedHeaders="
        )),
        "{authorization}"
    );
    assert!(
        authorization.contains("x-amz-security-token") && authorization.contains("host"),
        "{authorization}"
    );
    assert_eq!(seen.header("x-amz-security-token"), Some(TOKEN));
}

#[tokio::test]
async fn an_anthropic_clients_own_body_goes_as_written_less_model_and_stream() {
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let written = br#"{"model":"route","max_tokens":64,"stream":false,"messages":[{"role":"user","content":[{"type":"text","text":"Hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"enabled","budget_tokens":1024}}"#;
    let request = anthropic_request(written);
    let caller = Caller::new(&provider, None);
    let answer = provider.chat(caller.call(CLAUDE, None), &request).await.unwrap();
    assert!(answer.verbatim.is_some(), "an Anthropic client gets the provider's bytes");
    assert_eq!(
        fake.only_request().body,
        json!({"max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"Hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"enabled","budget_tokens":1024},"anthropic_version":"bedrock-2023-05-31"})
    );
}

#[tokio::test]
async fn an_arn_and_a_profile_id_are_one_escaped_path_segment() {
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/global.anthropic.claude-sonnet-4-5-20250929-v1:0";
    provider.chat(caller.call(arn, None), &hello()).await.unwrap();
    assert_eq!(
        fake.only_request().path(),
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fglobal.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    );
}

#[tokio::test]
async fn claude_counts_tokens_by_count_tokens_over_its_invoke_body_for_the_profiles_foundation_model() {
    let fake = Fake::json(200, json!({ "inputTokens": 42 })).await;
    let provider = provider(&fake.origin());
    let written = br#"{"model":"route","messages":[{"role":"user","content":"Hi"}],"system":"Be brief"}"#;
    // As the gateway reads a count request: `max_tokens` added for the canonical request only.
    let mut value: Value = serde_json::from_slice(written).unwrap();
    value["max_tokens"] = json!(1);
    let mut request = switchyard_providers::anthropic::codec::request_from_json(value).unwrap();
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Anthropic, &written[..]));
    let caller = Caller::new(&provider, None);
    let count = provider.count_tokens(caller.call(CLAUDE, None), &request).await.unwrap();
    assert_eq!(count.input_tokens, 42);
    let seen = fake.only_request();
    // A cross-region profile's id is refused by CountTokens: its foundation model is counted.
    assert_eq!(seen.path(), "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens");
    let encoded = seen.body["input"]["invokeModel"]["body"].as_str().unwrap();
    let invoke: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap();
    assert_eq!(invoke["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(invoke["system"], "Be brief");
    assert_eq!(invoke["messages"], json!([{"role": "user", "content": "Hi"}]));
    assert!(invoke.get("model").is_none(), "{invoke}");
    assert_eq!(invoke["max_tokens"], 1, "an InvokeModel body for Claude has one");
    // Beside a thinking budget, one above it (Claude refuses `max_tokens` at or below it).
    let thinking = br#"{"model":"route","thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"Hi"}]}"#;
    let mut value: Value = serde_json::from_slice(thinking).unwrap();
    value["max_tokens"] = json!(1);
    let mut request = switchyard_providers::anthropic::codec::request_from_json(value).unwrap();
    request.verbatim = Some(switchyard::chat::Verbatim::new(Dialect::Anthropic, &thinking[..]));
    let fake_thinking = Fake::json(200, json!({ "inputTokens": 9 })).await;
    let thinking_provider = self::provider(&fake_thinking.origin());
    let caller = Caller::new(&thinking_provider, None);
    thinking_provider.count_tokens(caller.call(CLAUDE, None), &request).await.unwrap();
    let encoded =
        fake_thinking.only_request().body["input"]["invokeModel"]["body"].as_str().unwrap().to_owned();
    let invoke: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap();
    assert_eq!(invoke["max_tokens"], 2049, "{invoke}");
    assert!(seen.header("authorization").unwrap().starts_with("AWS4-HMAC-SHA256 "));

    // An ARN of a profile too; a Converse model is not counted (the route's next target is).
    let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-haiku-4-5-20251001-v1:0";
    let fake = Fake::json(200, json!({ "inputTokens": 7 })).await;
    let provider = self::provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    provider.count_tokens(caller.call(arn, None), &hello()).await.unwrap();
    assert_eq!(fake.only_request().path(), "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/count-tokens");
    let refused = provider.count_tokens(caller.call(LLAMA, None), &hello()).await.unwrap_err();
    assert!(refused.is_unsupported(), "{refused:?}");
}

#[tokio::test]
async fn an_api_key_is_sent_as_a_bearer_token_and_nothing_is_signed() {
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, Some("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"));
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let seen = fake.only_request();
    assert_eq!(seen.header("authorization"), Some("Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"));
    assert!(seen.header("x-amz-date").is_none() && seen.header("x-amz-security-token").is_none());
}

#[tokio::test]
async fn a_claude_stream_of_chunk_frames_becomes_canonical_chunks() {
    let fake = Fake::start(|_| event_stream_reply(claude_stream(&claude_events()))).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let chunks = ok_chunks(items(stream).await);
    assert_eq!(text_of(&chunks), "Hi there");
    let last = chunks.last().unwrap();
    assert_eq!(last.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.usage.unwrap().completion_tokens, 3);
    let seen = fake.only_request();
    assert_eq!(
        seen.path(),
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    );
    assert_eq!(seen.header("accept"), Some("application/vnd.amazon.eventstream"));
}

#[tokio::test]
async fn an_anthropic_client_gets_each_event_as_its_sse_frame() {
    let fake = Fake::start(|_| event_stream_reply(claude_stream(&claude_events()))).await;
    let provider = provider(&fake.origin());
    let request = anthropic_request(
        br#"{"model":"r","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#,
    );
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &request).await.unwrap();
    let chunks = ok_chunks(items(stream).await);
    let frames: Vec<String> = chunks
        .iter()
        .filter_map(|c| c.verbatim.as_ref())
        .map(|v| String::from_utf8_lossy(v.bytes()).into_owned())
        .collect();
    assert!(frames[0].starts_with("event: message_start\ndata: {"), "{frames:?}");
    assert!(frames.iter().any(|f| f.starts_with("event: content_block_delta\n")), "{frames:?}");
}

#[tokio::test]
async fn an_exception_frame_before_content_fails_the_stream_with_its_kind() {
    let mut body = claude_stream(&claude_events()[..1]);
    body.extend(exception("throttlingException", "Too many tokens, please wait before trying again."));
    let fake = Fake::start(move |_| event_stream_reply(body.clone())).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let items = items(stream).await;
    let error = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_eq!(error.code(), Some("ThrottlingException"));
    assert!(
        items
            .iter()
            .all(|i| i.as_ref().map_or(true, |c| c.choices.iter().all(|ch| ch.delta.content.is_none())))
    );
}

#[tokio::test]
async fn an_exception_frame_after_content_ends_the_stream_with_the_error() {
    let mut body = claude_stream(&claude_events()[..3]);
    body.extend(exception("modelStreamErrorException", "The model stopped"));
    let fake = Fake::start(move |_| event_stream_reply(body.clone())).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let items = items(stream).await;
    let text: String = items
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .filter_map(|c| c.choices.first()?.delta.content.clone())
        .collect();
    assert_eq!(text, "Hi ");
    assert_eq!(items.last().unwrap().as_ref().unwrap_err().kind(), ErrorKind::Unavailable);
}

// ---------------------------------------------------------------------------------------------
// Errors and betas

#[tokio::test]
async fn bedrock_errors_are_classified_by_their_type_header() {
    let cases = [
        (429, "ThrottlingException", "Too many requests", ErrorKind::RateLimited),
        (503, "ServiceUnavailableException", "busy", ErrorKind::Unavailable),
        (429, "ModelNotReadyException", "warming", ErrorKind::Unavailable),
        (408, "ModelTimeoutException", "slow", ErrorKind::Timeout),
        (400, "ValidationException", "Input is too long for requested model.", ErrorKind::ContextLength),
        (400, "ValidationException", "temperature out of range", ErrorKind::InvalidRequest),
        (403, "AccessDeniedException", "no access", ErrorKind::Auth),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
            ErrorKind::ModelNotFound,
        ),
        (403, "UnrecognizedClientException", "bad token", ErrorKind::Auth),
        // Expired even when loaded again (this fake's answer every time): the credential's.
        (
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired",
            ErrorKind::Auth,
        ),
        (404, "ResourceNotFoundException", "no such model", ErrorKind::ModelNotFound),
        (400, "ServiceQuotaExceededException", "quota", ErrorKind::RateLimited),
    ];
    for (status, kind, message, expected) in cases {
        let header = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
        let fake = Fake::start(move |_| {
            json_reply(status, &[("x-amzn-errortype", &header)], &json!({ "message": message }))
        })
        .await;
        let provider = provider(&fake.origin());
        let caller = Caller::new(&provider, None);
        let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
        assert_eq!(
            (error.kind(), error.code(), error.status()),
            (expected, Some(kind), Some(status)),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn a_refused_beta_flag_is_unsupported_so_the_target_is_skipped() {
    let fake = Fake::start(|_| {
        json_reply(
            400,
            &[("x-amzn-errortype", "ValidationException")],
            &json!({"message": "invalid beta flag"}),
        )
    })
    .await;
    let provider = provider(&fake.origin());
    let forward = vec![("anthropic-beta".to_owned(), "claude-code-20250219".to_owned())];
    let caller = Caller::new(&provider, None).forward(&forward);
    let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
    assert!(error.is_unsupported(), "{error:?}");
}

#[tokio::test]
async fn betas_drop_and_allow_lists_choose_the_clients_flags() {
    let fake = Fake::json(200, claude_answer()).await;
    let forward =
        vec![("anthropic-beta".to_owned(), "context-1m-2025-08-07,claude-code-20250219".to_owned())];
    for (policy, expected) in [
        (BetaPolicy::Drop, None),
        (BetaPolicy::Allow(vec!["context-1m-2025-08-07".into()]), Some(json!(["context-1m-2025-08-07"]))),
    ] {
        let mut settings = settings(&fake.origin());
        settings.betas = policy;
        let provider = BedrockProvider::new(&settings).unwrap().with_credentials(static_credentials());
        let caller = Caller::new(&provider, None).forward(&forward);
        provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
        assert_eq!(fake.last_request().body.get("anthropic_beta").cloned(), expected);
    }
}

// ---------------------------------------------------------------------------------------------
// Converse

#[tokio::test]
async fn other_models_go_through_converse_with_system_tools_and_stop_sequences() {
    let answer = json!({"output":{"message":{"role":"assistant","content":[{"text":"Bonjour"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12}});
    let fake = Fake::json(200, answer).await;
    let provider = provider(&fake.origin());
    let mut request = ChatRequest::new("r", vec![Message::system("Be brief."), Message::user("Hello")]);
    request.max_tokens = Some(50);
    request.temperature = Some(0.2);
    request.stop = Some(switchyard::chat::Stop::One("END".into()));
    let caller = Caller::new(&provider, None);
    let answer = provider.chat(caller.call(LLAMA, None), &request).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("Bonjour"));
    assert_eq!(answer.usage.unwrap().total_tokens, 12);
    let seen = fake.only_request();
    assert_eq!(seen.path(), "/model/meta.llama3-70b-instruct-v1%3A0/converse");
    assert_eq!(
        seen.body,
        json!({
            "system": [{"text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"text": "Hello"}]}],
            "inferenceConfig": {"maxTokens": 50, "temperature": 0.2, "stopSequences": ["END"]}
        })
    );
}

#[tokio::test]
async fn what_claude_code_sends_beside_the_conversation_does_not_refuse_a_converse_model() {
    let answer = json!({"output":{"message":{"role":"assistant","content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4}});
    let fake = Fake::json(200, answer).await;
    let provider = provider(&fake.origin());
    let mut request = hello();
    request.origin = switchyard::chat::Dialect::Anthropic;
    for (key, value) in [
        ("thinking", json!({"type": "adaptive"})),
        ("context_management", json!({"edits": []})),
        ("output_config", json!({"effort": "high"})),
        ("metadata", json!({"user_id": "u-1"})),
    ] {
        request.extra.insert(key.into(), value);
    }
    let caller = Caller::new(&provider, None);
    let answer = provider.chat(caller.call(LLAMA, None), &request).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("Hi"));
    let body = fake.only_request().body;
    assert!(
        ["thinking", "context_management", "output_config"].iter().all(|k| body.get(*k).is_none()),
        "{body}"
    );
}

#[tokio::test]
async fn credentials_aws_says_expired_are_loaded_again_once_and_expired_again_are_auth() {
    let expired = || {
        json_reply(
            403,
            &[("x-amzn-errortype", "ExpiredTokenException")],
            &json!({ "message": "The security token included in the request is expired" }),
        )
    };
    let answer = json!({"output":{"message":{"role":"assistant","content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4}});
    let seen = Arc::new(AtomicU32::new(0));
    let count = seen.clone();
    let once = Fake::start(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) == 0 { expired() } else { json_reply(200, &[], &answer) }
    })
    .await;
    let renewed = provider(&once.origin());
    let caller = Caller::new(&renewed, None);
    let answered = renewed.chat(caller.call(LLAMA, None), &hello()).await.unwrap();
    assert_eq!(answered.text().as_deref(), Some("Hi"));
    assert_eq!(once.requests().len(), 2, "sent once more, with the credentials loaded again");

    let always = Fake::start(move |_| expired()).await;
    let stale = provider(&always.origin());
    let caller = Caller::new(&stale, None);
    let error = stale.chat(caller.call(LLAMA, None), &hello()).await.unwrap_err();
    assert_eq!((error.kind(), error.code()), (ErrorKind::Auth, Some("ExpiredTokenException")));
    assert_eq!(always.requests().len(), 2);
}

#[tokio::test]
async fn a_tool_result_an_anthropic_client_marked_failed_is_a_converse_error_result() {
    let answer = json!({"output":{"message":{"role":"assistant","content":[{"text":"Sorry"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4}});
    let fake = Fake::json(200, answer).await;
    let provider = provider(&fake.origin());
    let request = anthropic_request(
        br#"{"model":"r","max_tokens":16,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"the service is down","is_error":true}]}]}"#,
    );
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(LLAMA, None), &request).await.unwrap();
    let result = &fake.only_request().body["messages"][2]["content"][0]["toolResult"];
    assert_eq!(
        (&result["status"], &result["content"][0]["text"]),
        (&json!("error"), &json!("the service is down"))
    );
}

#[tokio::test]
async fn a_tool_results_image_reaches_converse_as_an_image_block_and_a_document_is_refused_by_name() {
    // Claude Code's screenshot tool: the image comes back inside the tool's result.
    let answer = json!({"output":{"message":{"role":"assistant","content":[{"text":"A cat"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5}});
    let fake = Fake::json(200, answer).await;
    let provider = provider(&fake.origin());
    let request = anthropic_request(
        br#"{"model":"r","max_tokens":16,"messages":[{"role":"user","content":"Look"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"screenshot","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"the screen"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}]}"#,
    );
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(LLAMA, None), &request).await.unwrap();
    let result = &fake.only_request().body["messages"][2]["content"][0]["toolResult"];
    assert_eq!(
        result["content"],
        json!([{"text": "the screen"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}])
    );

    let pdf = anthropic_request(
        br#"{"model":"r","max_tokens":16,"messages":[{"role":"user","content":"Read"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]}]}"#,
    );
    let error = provider.chat(caller.call(LLAMA, None), &pdf).await.unwrap_err();
    assert!(error.is_unsupported(), "{error:?}");
    assert!(
        error.detail().contains("messages[2].content[0] is a `document` part in a tool result"),
        "{error:?}"
    );
    assert_eq!(fake.requests().len(), 1, "nothing sent for the refused one");
}

#[tokio::test]
async fn what_converse_cannot_express_is_unsupported_before_anything_is_sent() {
    let fake = Fake::json(200, json!({})).await;
    let provider = provider(&fake.origin());
    let mut request = hello();
    request.response_format = Some(switchyard::chat::ResponseFormat::JsonObject);
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(LLAMA, None), &request).await.unwrap_err();
    assert!(error.is_unsupported(), "{error:?}");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_converse_stream_becomes_canonical_chunks() {
    let frame = |kind: &str, payload: Value| {
        encode_frame(
            &[(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")],
            payload.to_string().as_bytes(),
        )
    };
    let mut body = frame("messageStart", json!({"role": "assistant", "p": "abc"}));
    body.extend(frame("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Salut"}})));
    body.extend(frame("contentBlockStop", json!({"contentBlockIndex": 0})));
    body.extend(frame("messageStop", json!({"stopReason": "max_tokens"})));
    body.extend(frame("metadata", json!({"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "metrics": {"latencyMs": 5}})));
    let fake = Fake::start(move |_| event_stream_reply(body.clone())).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(LLAMA, None), &hello()).await.unwrap();
    let chunks = ok_chunks(items(stream).await);
    assert_eq!(text_of(&chunks), "Salut");
    // The finish at `messageStop`, the usage of `metadata` after it.
    let finish = chunks.iter().rev().find(|c| !c.choices.is_empty()).unwrap();
    assert_eq!(finish.choices[0].finish_reason, Some(FinishReason::Length));
    assert_eq!(chunks.last().unwrap().usage.map(|u| u.total_tokens), Some(4));
    assert_eq!(fake.only_request().path(), "/model/meta.llama3-70b-instruct-v1%3A0/converse-stream");
}

// ---------------------------------------------------------------------------------------------
// Embeddings

#[tokio::test]
async fn titan_embeds_one_text_per_call_and_cohere_a_batch() {
    let fake = Fake::start(|seen| {
        if seen.path().contains("titan") {
            // Each text's vector says which text it is: the answers come back in input order.
            let which = if seen.body["inputText"] == "a" { 1.0 } else { 2.0 };
            json_reply(200, &[], &json!({"embedding": [which, -0.25], "inputTextTokenCount": 3}))
        } else {
            // Cohere's own body counts nothing here: Bedrock's header does.
            json_reply(
                200,
                &[("x-amzn-bedrock-input-token-count", "5")],
                &json!({"embeddings": [[0.1], [0.2]], "id": "x", "response_type": "embeddings_floats"}),
            )
        }
    })
    .await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let request = EmbeddingsRequest {
        model: "r".into(),
        input: EmbeddingInput::Many(vec!["a".into(), "b".into()]),
        dimensions: Some(256),
        extra: Default::default(),
    };
    let titan =
        provider.embeddings(caller.call("amazon.titan-embed-text-v2:0", None), &request).await.unwrap();
    let firsts: Vec<f32> = titan.data.iter().map(|e| e.embedding[0]).collect();
    assert_eq!(firsts, [1.0, 2.0], "in input order, whichever answered first");
    assert_eq!(titan.usage.unwrap().prompt_tokens, 6);
    let sent: Vec<Value> = fake.requests().iter().map(|seen| seen.body.clone()).collect();
    assert!(sent.contains(&json!({"inputText": "a", "dimensions": 256})), "{sent:?}");
    let request = EmbeddingsRequest { dimensions: None, ..request };
    let cohere = provider.embeddings(caller.call("cohere.embed-english-v3", None), &request).await.unwrap();
    assert_eq!(cohere.data.iter().map(|e| e.embedding[0]).collect::<Vec<_>>(), vec![0.1, 0.2]);
    assert_eq!(cohere.usage.map(|u| u.prompt_tokens), Some(5), "as Bedrock counted them");
    assert_eq!(fake.last_request().body, json!({"texts": ["a", "b"], "input_type": "search_document"}));
}

#[tokio::test]
async fn cohere_embeds_in_batches_of_96_and_embed_v4_answers_by_type_at_the_size_asked() {
    // Embed v4, asked for float vectors, answers `embeddings: {"float": [...]}`.
    let fake = Fake::start(|seen| {
        let texts = seen.body["texts"].as_array().map_or(0, Vec::len);
        let vectors: Vec<Value> = (0..texts).map(|i| json!([i as f64])).collect();
        let embeddings = match seen.body.get("embedding_types") {
            Some(_) => json!({ "float": vectors }),
            None => json!(vectors),
        };
        // No header: Cohere's own count of what it billed.
        let meta = json!({ "billed_units": { "input_tokens": 2 * texts } });
        json_reply(
            200,
            &[],
            &json!({"embeddings": embeddings, "id": "x", "response_type": "embeddings_by_type", "meta": meta}),
        )
    })
    .await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let texts: Vec<String> = (0..100).map(|i| format!("text {i}")).collect();
    let mut extra = switchyard::chat::Extra::new();
    // The OpenAI SDK asks for base64 by default: the gateway writes it from the floats.
    extra.insert("encoding_format".into(), json!("base64"));
    let request = EmbeddingsRequest {
        model: "r".into(),
        input: EmbeddingInput::Many(texts),
        dimensions: Some(512),
        extra,
    };
    let v4 = provider.embeddings(caller.call("cohere.embed-v4:0", None), &request).await.unwrap();
    assert_eq!(v4.data.len(), 100);
    assert_eq!(v4.usage.map(|u| u.prompt_tokens), Some(200), "both calls' billed tokens");
    assert_eq!(
        (v4.data[99].index, v4.data[99].embedding.clone()),
        (99, vec![3.0]),
        "the second call's fourth"
    );
    let sent: Vec<(usize, Value)> = fake
        .requests()
        .iter()
        .map(|seen| (seen.body["texts"].as_array().unwrap().len(), seen.body["output_dimension"].clone()))
        .collect();
    assert_eq!(sent, [(96, json!(512)), (4, json!(512))]);

    // Embed v3 and Titan v1 embed at one size: `dimensions` is refused, not ignored.
    for model in ["cohere.embed-english-v3", "amazon.titan-embed-text-v1"] {
        let error = provider.embeddings(caller.call(model, None), &request).await.unwrap_err();
        assert!(error.is_unsupported() && error.detail().contains("`dimensions`"), "{model}: {error:?}");
    }
    assert_eq!(fake.requests().len(), 2, "nothing sent for the refused ones");
}

// ---------------------------------------------------------------------------------------------
// Secrets

#[tokio::test]
async fn no_secret_key_session_token_or_signature_reaches_an_error_or_debug_output() {
    // AWS's SignatureDoesNotMatch echoes the canonical request, session token included; a
    // broken proxy could echo anything.
    let fake = Fake::start(|seen| {
        let authorization = seen.header("authorization").unwrap_or_default().to_owned();
        let signature = authorization.rsplit("Signature=").next().unwrap_or_default().to_owned();
        let message = format!("The request signature we calculated does not match the signature you provided. x-amz-security-token:{TOKEN} secret {SECRET} signature {signature}");
        json_reply(403, &[("x-amzn-errortype", "InvalidSignatureException")], &json!({ "message": message }))
    })
    .await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
    let signature =
        fake.only_request().header("authorization").unwrap().rsplit("Signature=").next().unwrap().to_owned();
    assert_eq!(error.kind(), ErrorKind::Auth);
    let shown = format!("{error} {error:?} {} {provider:?}", serde_json::to_string(&error.detail()).unwrap());
    for secret in [SECRET, TOKEN, signature.as_str()] {
        assert!(!shown.contains(secret), "{secret} leaked: {shown}");
    }
    assert!(shown.contains("[redacted]"), "{shown}");
}

#[tokio::test]
async fn no_secret_reaches_an_error_or_notice_from_the_anthropic_events_of_a_claude_stream() {
    // Claude's own `error` event, and an unreadable one, inside `chunk` frames: the texts the
    // Anthropic decoder quotes, which it cannot scrub of SigV4 secrets it does not know.
    let echo = format!("echo secret {SECRET} token {TOKEN}");
    let mut events = claude_events()[..3].to_vec();
    events.push(
        json!({"type": "content_block_delta", "index": echo, "delta": {"type": "text_delta", "text": "x"}}),
    );
    events.push(json!({"type": "error", "error": {"type": "overloaded_error", "message": echo}}));
    let fake = Fake::start(move |_| event_stream_reply(claude_stream(&events))).await;
    let provider = provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let items = items(stream).await;
    let error = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    let notices: Vec<_> = items.iter().filter_map(|item| item.as_ref().ok()?.notice.as_ref()).collect();
    assert!(!notices.is_empty(), "the unreadable event was skipped with a notice");
    let shown = format!("{error} {error:?} {notices:?}");
    for secret in [SECRET, TOKEN] {
        assert!(!shown.contains(secret), "{secret} leaked: {shown}");
    }
    assert!(shown.contains("[redacted]"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// Credentials kept and refreshed

/// A chain whose credentials last `lifetime`, counting loads; a load past the first waits for
/// `release` when it is given.
#[derive(Debug)]
struct Rotating {
    loads: AtomicU32,
    lifetime: Duration,
    release: Option<Arc<Notify>>,
}

impl ProvideCredentials for Rotating {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let n = self.loads.fetch_add(1, Ordering::SeqCst) + 1;
            if n > 1
                && let Some(release) = &self.release
            {
                release.notified().await;
            }
            let expiry = SystemTime::now() + self.lifetime;
            Ok(Credentials::new(
                format!("AKIDROTATING{n:08}"),
                SECRET,
                Some(TOKEN.to_owned()),
                Some(expiry),
                "rotating",
            ))
        })
    }
}

fn access_key_of(seen: &support::Seen) -> String {
    let authorization = seen.header("authorization").unwrap();
    authorization.split("Credential=").nth(1).unwrap().split('/').next().unwrap().to_owned()
}

#[tokio::test]
async fn credentials_near_expiry_are_refreshed_in_the_background_while_calls_use_the_kept_ones() {
    let fake = Fake::json(200, claude_answer()).await;
    let release = Arc::new(Notify::new());
    let chain = Arc::new(Rotating {
        loads: AtomicU32::new(0),
        lifetime: Duration::from_secs(120),
        release: Some(release.clone()),
    });
    let cache = Arc::new(CredentialCache::with_provider(
        "us-east-1",
        SharedCredentialsProvider::new(ChainRef(chain.clone())),
    ));
    let provider = BedrockProvider::new(&settings(&fake.origin())).unwrap().with_credentials(cache.clone());
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    // Two minutes left is under REFRESH_BEFORE: this call starts a refresh, which is held, and
    // is answered without waiting for it.
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(access_key_of(&fake.requests()[1]), "AKIDROTATING00000001");
    while chain.loads.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    release.notify_one();
    while cache.loads() < 2 || access_key_of_next(&provider, &caller, &fake).await != "AKIDROTATING00000002" {
        tokio::task::yield_now().await;
    }
}

async fn access_key_of_next(provider: &BedrockProvider, caller: &Caller, fake: &Fake) -> String {
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    access_key_of(&fake.last_request())
}

#[tokio::test]
async fn credentials_all_but_expired_are_loaded_before_the_call_and_long_lived_ones_once() {
    let fake = Fake::json(200, claude_answer()).await;
    let chain =
        Arc::new(Rotating { loads: AtomicU32::new(0), lifetime: Duration::from_secs(5), release: None });
    let cache = Arc::new(CredentialCache::with_provider(
        "us-east-1",
        SharedCredentialsProvider::new(ChainRef(chain.clone())),
    ));
    let provider = BedrockProvider::new(&settings(&fake.origin())).unwrap().with_credentials(cache);
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let keys: Vec<String> = fake.requests().iter().map(access_key_of).collect();
    assert_eq!(
        keys,
        ["AKIDROTATING00000001", "AKIDROTATING00000002"],
        "five seconds left is too little to sign with"
    );

    let fake = Fake::json(200, claude_answer()).await;
    let chain =
        Arc::new(Rotating { loads: AtomicU32::new(0), lifetime: Duration::from_secs(3600), release: None });
    let cache = Arc::new(CredentialCache::with_provider(
        "us-east-1",
        SharedCredentialsProvider::new(ChainRef(chain.clone())),
    ));
    let provider = BedrockProvider::new(&settings(&fake.origin())).unwrap().with_credentials(cache);
    let caller = Caller::new(&provider, None);
    for _ in 0..5 {
        provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    }
    assert_eq!(chain.loads.load(Ordering::SeqCst), 1);
}

/// A shared [`Rotating`], so that the test keeps reading its counter.
#[derive(Debug)]
struct ChainRef(Arc<Rotating>);

impl ProvideCredentials for ChainRef {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.0.provide_credentials()
    }
}

// ---------------------------------------------------------------------------------------------
// Thinking crosses between Anthropic and Bedrock

#[tokio::test]
async fn a_tool_turn_another_model_answered_reaches_claude_on_bedrock_without_the_clients_thinking() {
    // Claude Code, thinking on, after a fallback of another kind answered its last tool turn:
    // Bedrock refuses thinking then, as Anthropic does, and clearing thinking without it.
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let written = br#"{"model":"r","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]}"#;
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &anthropic_request(written)).await.unwrap();
    let body = fake.only_request().body;
    assert_eq!((body.get("thinking"), body.get("context_management")), (None, None), "{body}");
    assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(body["messages"][1]["content"][1]["id"], "call_1", "the rest as written: {body}");
}

#[tokio::test]
async fn thinking_blocks_and_signatures_reach_bedrock_as_anthropic_wrote_them_and_come_back_whole() {
    // A conversation begun on Anthropic's API: its signed thinking block goes on to Bedrock as
    // the client sent it (the signatures are the same across Claude's platforms).
    let fake = Fake::json(200, claude_answer()).await;
    let provider = provider(&fake.origin());
    let written = br#"{"model":"r","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"6*7?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Six times seven.","signature":"EqQBCgIYAhIMsignedByAnthropic"},{"type":"text","text":"42"}]},{"role":"user","content":"And 6*8?"}]}"#;
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &anthropic_request(written)).await.unwrap();
    assert_eq!(
        fake.only_request().body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Six times seven.", "signature": "EqQBCgIYAhIMsignedByAnthropic"})
    );

    // Bedrock's streamed thinking comes back to an OpenAI-dialect client whole, with its
    // signature, as `thinking_blocks` (what it sends back to either platform next turn).
    let events = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude", "content": [], "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Six times eight."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "ErUBCkYIBxgCsignedOnBedrock"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "48"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ];
    let fake = Fake::start(move |_| event_stream_reply(claude_stream(&events))).await;
    let provider = self::provider(&fake.origin());
    let caller = Caller::new(&provider, None);
    let stream = provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap();
    let chunks = ok_chunks(items(stream).await);
    let blocks: Vec<Value> = chunks.iter().flat_map(|c| c.choices[0].delta.thinking_blocks.clone()).collect();
    assert_eq!(
        blocks,
        [
            json!({"type": "thinking", "thinking": "Six times eight.", "signature": "ErUBCkYIBxgCsignedOnBedrock"})
        ]
    );
    assert_eq!(text_of(&chunks), "48");
}
