//! The Gemini adapter against the fake upstream of `support` on 127.0.0.1, serving the
//! documented success, streaming and error shapes of the Gemini API.

// The helpers are test code too; `allow-unwrap-in-tests` only covers `#[test]` fns.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use axum::body::Body;
use serde_json::{Value, json};
use support::{
    Fake, Harness, Recorder, awkward_pieces, broken_reply, items, json_reply, ok_chunks, pieces_reply,
    refused_origin, respond, text_of, tool_call, tool_result,
};
use switchyard::chat::{
    ChatChunk, ChatRequest, ChatResponse, Content, ContentPart, EmbeddingInput, EmbeddingsRequest,
    EmbeddingsResponse, Extra, FinishReason, FunctionDefinition, ImageUrl, JsonSchemaFormat, Message,
    ResponseFormat, Role, Stop, Tool, ToolChoice, ToolChoiceFunction, Usage,
};
use switchyard::provider::{Provider, RateLimitSink};
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::gemini::{GeminiProvider, SKIP_THOUGHT_SIGNATURE};
use switchyard_providers::{ProviderKind, ProviderSettings};

const KEY: &str = "AIza-test-0123456789-secret-key";
const MODEL: &str = "gemini-2.5-flash";

// ---------------------------------------------------------------------------------------------
// What the fake answers
// ---------------------------------------------------------------------------------------------

/// A fake streaming `body` (CRLF-framed, as Gemini sends it) cut at awkward places.
async fn streaming(body: &str) -> Fake {
    let pieces = awkward_pieces(body, 7);
    Fake::start(move |_| pieces_reply(pieces.clone())).await
}

/// A fake streaming `body` cut at awkward places, then breaking the connection.
async fn breaking(body: &str) -> Fake {
    let pieces = awkward_pieces(body, 7);
    Fake::start(move |_| broken_reply(pieces.clone(), None)).await
}

/// SSE events as Gemini frames them: `data: ...` lines ending in CRLF, a blank CRLF line after each.
fn sse(events: &[Value]) -> String {
    events.iter().map(|event| format!("data: {event}\r\n\r\n")).collect()
}

// ---------------------------------------------------------------------------------------------
// Calling the adapter
// ---------------------------------------------------------------------------------------------

/// The adapter at `base_url`, with a configured header; plain calls go to gemini-2.5-flash.
fn gemini(base_url: &str) -> Harness<GeminiProvider> {
    let mut settings = ProviderSettings::new(ProviderKind::Gemini).base_url(base_url);
    settings.headers.push(("x-goog-user-project".into(), "project-7".into()));
    Harness::new(GeminiProvider::new(&settings).unwrap(), Some(KEY), MODEL)
}

async fn chat_with(
    fake: &Fake,
    request: &ChatRequest,
    sink: Option<&dyn RateLimitSink>,
) -> Result<ChatResponse, ProviderError> {
    let harness = gemini(&fake.url("/v1beta"));
    harness.provider.chat(harness.call(MODEL, sink), request).await
}

async fn chat(fake: &Fake, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
    chat_with(fake, request, None).await
}

/// Streams `request`; the items, or the error that refused the stream.
async fn stream(
    fake: &Fake,
    request: &ChatRequest,
) -> Result<Vec<Result<ChatChunk, ProviderError>>, ProviderError> {
    Ok(items(gemini(&fake.url("/v1beta")).stream(request).await?).await)
}

async fn embed(fake: &Fake, request: &EmbeddingsRequest) -> Result<EmbeddingsResponse, ProviderError> {
    let harness = gemini(&fake.url("/v1beta"));
    harness.provider.embeddings(harness.call("gemini-embedding-001", None), request).await
}

fn hello() -> ChatRequest {
    ChatRequest::new("default", vec![Message::user("Hello")])
}

/// Neither the text nor the debug form of an error may hold the key.
fn assert_no_key(error: &ProviderError) {
    assert!(!format!("{error}").contains(KEY), "key in Display: {error}");
    assert!(!format!("{error:?}").contains(KEY), "key in Debug: {error:?}");
}

/// Serves `status` + `body` (JSON, or any text) to a chat call and returns the classified error.
async fn chat_error(status: u16, body: impl ToString) -> ProviderError {
    let body = body.to_string();
    let json = "application/json; charset=UTF-8";
    let fake = Fake::start(move |_| respond(status, &[], json, Body::from(body.clone()))).await;
    let error = chat(&fake, &hello()).await.unwrap_err();
    assert_no_key(&error);
    error
}

fn google_error(code: u16, status: &str, message: &str, details: Value) -> Value {
    json!({ "error": { "code": code, "message": message, "status": status, "details": details } })
}

fn text_answer(text: &str) -> Value {
    json!({
        "candidates": [{
            "content": { "role": "model", "parts": [{ "text": text }] },
            "finishReason": "STOP",
            "index": 0,
            "safetyRatings": [{ "category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE" }]
        }],
        "usageMetadata": { "promptTokenCount": 15, "candidatesTokenCount": 6, "totalTokenCount": 21 },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "Il0taoSYJ5Cez7"
    })
}

fn function_tool(name: &str, parameters: Option<Value>) -> Tool {
    Tool {
        kind: "function".into(),
        function: FunctionDefinition {
            name: name.into(),
            description: Some(format!("{name} tool")),
            parameters,
            extra: Extra::new(),
        },
        extra: Default::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Request translation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn chat_request_is_translated_and_the_key_travels_only_in_its_header() {
    let fake = Fake::json(200, text_answer("Il fait 21 degrés.")).await;
    let weather_schema = json!({
        "type": "object",
        "properties": { "city": { "type": "string" } },
        "required": ["city"],
        "additionalProperties": false
    });
    let answer_schema = json!({ "type": "object", "properties": { "summary": { "type": "string" } } });
    let mut request = ChatRequest::new(
        "default",
        vec![
            Message::system("You are terse."),
            Message::text(Role::Developer, "Answer in French."),
            Message {
                content: Some(Content::Parts(vec![
                    ContentPart::Text { text: "What is in this image?".into() },
                    ContentPart::ImageUrl {
                        image_url: ImageUrl {
                            url: "data:image/png;base64,iVBORw0KGgo=".into(),
                            detail: None,
                        },
                    },
                ])),
                ..Message::user("")
            },
            Message {
                content: None,
                tool_calls: vec![
                    tool_call("call_a", "get_weather", r#"{"city":"Paris"}"#),
                    tool_call("call_b", "get_time", ""),
                ],
                ..Message::assistant("")
            },
            tool_result("call_a", r#"{"temp_c":21}"#),
            tool_result("call_b", "14:05"),
        ],
    );
    request.tools =
        vec![function_tool("get_weather", Some(weather_schema.clone())), function_tool("get_time", None)];
    request.tool_choice = Some(ToolChoice::Function {
        kind: "function".into(),
        function: ToolChoiceFunction { name: "get_weather".into() },
    });
    request.temperature = Some(0.25);
    request.top_p = Some(0.5);
    request.max_tokens = Some(256);
    request.stop = Some(Stop::Many(vec!["END".into()]));
    request.seed = Some(7);
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "answer".into(),
            schema: Some(answer_schema.clone()),
            strict: Some(true),
            extra: Extra::new(),
        },
    });
    request.extra.insert("user".into(), json!("user-42"));
    request.extra.insert("n".into(), json!(1));
    request.extra.insert("parallel_tool_calls".into(), json!(true));

    chat(&fake, &request).await.unwrap();

    let received = fake.only_request();
    assert_eq!(received.uri, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert!(!received.uri.contains(KEY) && !received.uri.contains("key="));
    assert_eq!(received.headers["x-goog-api-key"], KEY);
    assert_eq!(received.headers["content-type"], "application/json");
    assert_eq!(received.headers["x-goog-user-project"], "project-7");
    assert!(received.headers.get("authorization").is_none());
    assert_eq!(
        received.body,
        json!({
            "systemInstruction": { "parts": [{ "text": "You are terse." }, { "text": "Answer in French." }] },
            "contents": [
                { "role": "user", "parts": [
                    { "text": "What is in this image?" },
                    { "inlineData": { "mimeType": "image/png", "data": "iVBORw0KGgo=" } }
                ]},
                { "role": "model", "parts": [
                    { "functionCall": { "name": "get_weather", "args": { "city": "Paris" } },
                      "thoughtSignature": SKIP_THOUGHT_SIGNATURE },
                    { "functionCall": { "name": "get_time", "args": {} } }
                ]},
                { "role": "user", "parts": [
                    { "functionResponse": { "name": "get_weather", "response": { "temp_c": 21 } } },
                    { "functionResponse": { "name": "get_time", "response": { "result": "14:05" } } }
                ]}
            ],
            "tools": [{ "functionDeclarations": [
                { "name": "get_weather", "description": "get_weather tool", "parametersJsonSchema": weather_schema },
                { "name": "get_time", "description": "get_time tool" }
            ]}],
            "toolConfig": { "functionCallingConfig": { "mode": "ANY", "allowedFunctionNames": ["get_weather"] } },
            "generationConfig": {
                "temperature": 0.25,
                "topP": 0.5,
                "maxOutputTokens": 256,
                "stopSequences": ["END"],
                "seed": 7,
                "responseMimeType": "application/json",
                "responseJsonSchema": answer_schema
            }
        })
    );
}

#[tokio::test]
async fn tool_choice_modes_and_json_mode_are_translated() {
    for (choice, mode) in [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")] {
        let fake = Fake::json(200, text_answer("ok")).await;
        let mut request = hello();
        request.tools = vec![function_tool("f", None)];
        request.tool_choice = Some(ToolChoice::Mode(choice.into()));
        request.response_format = Some(ResponseFormat::JsonObject);
        chat(&fake, &request).await.unwrap();
        let body = fake.only_request().body;
        assert_eq!(body["toolConfig"], json!({ "functionCallingConfig": { "mode": mode } }));
        assert_eq!(body["generationConfig"], json!({ "responseMimeType": "application/json" }));
    }
}

#[tokio::test]
async fn http_image_urls_become_file_data() {
    let fake = Fake::json(200, text_answer("a cat")).await;
    let request = ChatRequest::new(
        "default",
        vec![Message {
            content: Some(Content::Parts(vec![ContentPart::ImageUrl {
                image_url: ImageUrl { url: "https://example.com/cat.png".into(), detail: Some("low".into()) },
            }])),
            ..Message::user("")
        }],
    );
    chat(&fake, &request).await.unwrap();
    assert_eq!(
        fake.only_request().body["contents"][0]["parts"][0],
        json!({ "fileData": { "fileUri": "https://example.com/cat.png", "mimeType": "image/png" } })
    );
}

#[tokio::test]
async fn fields_of_another_dialect_without_gemini_equivalent_are_refused_by_name_before_sending() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    request.extra.insert("logit_bias".into(), json!({ "50256": -100 }));
    let error = chat(&fake, &request).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    assert!(error.detail().contains("`logit_bias`"), "{error}");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn reasoning_effort_asks_gemini_to_think_and_show_its_thoughts() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    request.extra.insert("reasoning_effort".into(), json!("medium"));
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 8192, "includeThoughts": true})
    );
    assert!(body.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn what_claude_code_and_openai_clients_send_beside_the_conversation_reaches_gemini_translated_or_left_out()
 {
    // Claude Code's request: adaptive thinking, context management, an effort.
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    request.origin = switchyard::chat::Dialect::Anthropic;
    for (key, value) in [
        ("thinking", json!({"type": "adaptive"})),
        ("context_management", json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})),
        ("output_config", json!({"effort": "high"})),
        ("metadata", json!({"user_id": "u-1"})),
    ] {
        request.extra.insert(key.into(), value);
    }
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert!(
        body["generationConfig"].get("thinkingConfig").is_none(),
        "Gemini's own dynamic thinking: {body}"
    );
    for key in ["thinking", "context_management", "output_config", "metadata"] {
        assert!(body.get(key).is_none(), "{key} sent: {body}");
    }

    // A budget is the effort it stands for.
    let fake = Fake::json(200, text_answer("ok")).await;
    request.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 4000}));
    chat(&fake, &request).await.unwrap();
    assert_eq!(
        fake.only_request().body["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 8192, "includeThoughts": true})
    );

    // An OpenAI client's session key, tier and safety id change nothing Gemini answers.
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    for (key, value) in [
        ("prompt_cache_key", json!("session-1")),
        ("service_tier", json!("auto")),
        ("safety_identifier", json!("u-1")),
        ("logprobs", json!(false)),
    ] {
        request.extra.insert(key.into(), value);
    }
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert!(
        ["prompt_cache_key", "service_tier", "safety_identifier", "logprobs"]
            .iter()
            .all(|k| body.get(*k).is_none())
    );

    // A structured output Gemini is not told of is still refused, by name.
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    request.origin = switchyard::chat::Dialect::Anthropic;
    request.extra.insert("output_config".into(), json!({"format": {"type": "json_schema", "schema": {}}}));
    let error = chat(&fake, &request).await.unwrap_err();
    assert!(error.detail().contains("`output_config`"), "{error}");
}

#[tokio::test]
async fn gemini_dialect_fields_pass_through_untouched() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut request = hello();
    request.origin = switchyard::chat::Dialect::Gemini;
    request.max_tokens = Some(64);
    let safety = json!([{ "category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH" }]);
    request.extra.insert("safetySettings".into(), safety.clone());
    request
        .extra
        .insert("generationConfig".into(), json!({ "topK": 40, "thinkingConfig": { "thinkingBudget": 0 } }));
    chat(&fake, &request).await.unwrap();
    let body = fake.only_request().body;
    assert_eq!(body["safetySettings"], safety);
    assert_eq!(
        body["generationConfig"],
        json!({ "maxOutputTokens": 64, "topK": 40, "thinkingConfig": { "thinkingBudget": 0 } })
    );
}

#[tokio::test]
async fn a_tool_result_an_anthropic_client_marked_failed_is_an_error_response() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let body = br#"{"model":"r","max_tokens":16,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"the service is down","is_error":true}]}]}"#;
    let request = switchyard_providers::anthropic::codec::request_from_slice(body).unwrap();
    chat(&fake, &request).await.unwrap();
    let response = &fake.only_request().body["contents"][2]["parts"][0]["functionResponse"]["response"];
    assert_eq!(response, &json!({"error": "the service is down"}));
}

#[tokio::test]
async fn results_of_two_calls_of_one_function_go_in_the_order_of_the_calls() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut call = Message::assistant("");
    call.tool_calls = vec![
        switchyard::chat::ToolCall::function("call_a", "get_weather", r#"{"city":"Paris"}"#),
        switchyard::chat::ToolCall::function("call_b", "get_weather", r#"{"city":"London"}"#),
    ];
    let result =
        |id: &str, text: &str| Message { tool_call_id: Some(id.into()), ..Message::text(Role::Tool, text) };
    // Sent back the other way round, as a client may.
    let request = ChatRequest::new(
        "default",
        vec![
            Message::user("Weather?"),
            call,
            result("call_b", "rain in London"),
            result("call_a", "sun in Paris"),
        ],
    );
    chat(&fake, &request).await.unwrap();
    let parts = &fake.only_request().body["contents"][2]["parts"];
    let results: Vec<&str> = parts
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["functionResponse"]["response"]["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["sun in Paris", "rain in London"]);
}

#[tokio::test]
async fn a_tool_result_holding_an_image_is_refused_by_name_not_sent_without_it() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let mut call = Message::assistant("");
    call.tool_calls = vec![switchyard::chat::ToolCall::function("call_1", "screenshot", "{}")];
    let image = ContentPart::ImageUrl {
        image_url: ImageUrl { url: "data:image/png;base64,iVBOR".into(), detail: None },
    };
    let result = Message {
        content: Some(Content::Parts(vec![image])),
        tool_call_id: Some("call_1".into()),
        ..Message::text(Role::Tool, "")
    };
    let request = ChatRequest::new("default", vec![Message::user("Look"), call, result]);
    let error = chat(&fake, &request).await.unwrap_err();
    assert!(error.is_unsupported(), "{error:?}");
    assert!(error.detail().contains("messages[2].content[0] is a `image_url` part"), "{error}");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_tool_result_without_a_matching_call_is_an_invalid_request_naming_the_field() {
    let fake = Fake::json(200, text_answer("ok")).await;
    let request = ChatRequest::new("default", vec![Message::user("hi"), tool_result("call_9", "42")]);
    let error = chat(&fake, &request).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    assert!(error.detail().contains("messages[1].tool_call_id `call_9`"), "{error}");
    assert!(fake.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn text_answer_and_usage_are_translated() {
    let mut answer = text_answer("1+1 equals 2.");
    answer["candidates"][0]["content"]["parts"] = json!([{ "text": "thinking about sums", "thought": true }, { "text": "1+1 " }, { "text": "equals 2." }]);
    answer["usageMetadata"] = json!({ "promptTokenCount": 15, "candidatesTokenCount": 6, "thoughtsTokenCount": 4, "totalTokenCount": 25 });
    let fake = Fake::json(200, answer).await;
    let response = chat(&fake, &hello()).await.unwrap();
    assert_eq!(response.text().as_deref(), Some("1+1 equals 2."));
    // The thought summary is the answer's reasoning, apart from its text.
    assert_eq!(response.choices[0].message.extra["reasoning_content"], "thinking about sums");
    assert_eq!(response.id, "Il0taoSYJ5Cez7");
    assert_eq!(response.model, "gemini-2.5-flash");
    assert_eq!(response.choices.len(), 1);
    assert_eq!(response.choices[0].message.role, Role::Assistant);
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::Stop));
    // Thinking counts as completion, and is told apart as reasoning (as OpenAI reports it).
    let reasoning = Some(switchyard::chat::CompletionTokensDetails { reasoning_tokens: Some(4) });
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 15,
            completion_tokens: 10,
            total_tokens: 25,
            completion_tokens_details: reasoning,
            ..Usage::default()
        })
    );
}

#[tokio::test]
async fn function_calls_become_tool_calls_with_generated_ids() {
    let answer = json!({
        "candidates": [{
            "content": { "role": "model", "parts": [
                { "functionCall": { "name": "get_weather", "args": { "city": "Paris" } }, "thoughtSignature": "c2lnbmF0dXJl" },
                { "functionCall": { "name": "get_time" } }
            ]},
            "finishReason": "STOP"
        }],
        "usageMetadata": { "promptTokenCount": 30, "candidatesTokenCount": 12, "totalTokenCount": 42 },
        "modelVersion": "gemini-2.5-flash"
    });
    let fake = Fake::json(200, answer).await;
    let response = chat(&fake, &hello()).await.unwrap();
    let choice = &response.choices[0];
    assert_eq!(choice.index, 0);
    assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(choice.message.content, None);
    let calls = &choice.message.tool_calls;
    let named: Vec<(&str, &str)> =
        calls.iter().map(|c| (c.function.name.as_str(), c.function.arguments.as_str())).collect();
    assert_eq!(named, [("get_weather", r#"{"city":"Paris"}"#), ("get_time", "{}")]);
    // Ids of their own, unique across answers: a conversation's turns never repeat one.
    let again = chat(&fake, &hello()).await.unwrap();
    let mut ids: Vec<&str> =
        calls.iter().chain(&again.choices[0].message.tool_calls).map(|c| c.id.as_str()).collect();
    assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "{ids:?}");
}

#[tokio::test]
async fn a_safety_blocked_answer_is_content_filtered() {
    let answer = json!({
        "candidates": [{
            "finishReason": "SAFETY",
            "index": 0,
            "safetyRatings": [{ "category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true }]
        }],
        "usageMetadata": { "promptTokenCount": 8, "totalTokenCount": 8 },
        "modelVersion": "gemini-2.5-flash"
    });
    let fake = Fake::json(200, answer).await;
    let response = chat(&fake, &hello()).await.unwrap();
    assert!(response.is_content_filtered());
    assert_eq!(response.choices[0].finish_reason, Some(FinishReason::ContentFilter));
}

#[tokio::test]
async fn a_blocked_prompt_is_an_answer_finished_by_the_content_filter() {
    let answer = json!({
        "promptFeedback": {
            "blockReason": "SAFETY",
            "safetyRatings": [{ "category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH" }]
        },
        "usageMetadata": { "promptTokenCount": 8, "totalTokenCount": 8 },
        "modelVersion": "gemini-2.5-flash"
    });
    let fake = Fake::json(200, answer).await;
    let response = chat(&fake, &hello()).await.unwrap();
    assert!(response.is_content_filtered());
    assert_eq!(response.choices.len(), 1);
    assert_eq!(
        response.usage,
        Some(Usage { prompt_tokens: 8, completion_tokens: 0, total_tokens: 8, ..Usage::default() })
    );
}

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

fn stream_event(parts: Value, finish: Option<&str>, usage: Value) -> Value {
    let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "JPozaonvK7yzvdIPrJ7FyAk"
    })
}

fn early_usage() -> Value {
    json!({ "promptTokenCount": 9, "totalTokenCount": 9 })
}

fn final_usage() -> Value {
    json!({ "promptTokenCount": 9, "candidatesTokenCount": 5, "totalTokenCount": 14 })
}

#[tokio::test]
async fn streamed_text_split_at_awkward_places_arrives_whole_with_one_finish() {
    let body = sse(&[
        stream_event(json!([{ "text": "Bonjour " }]), None, early_usage()),
        stream_event(json!([{ "text": "à toi 🙂" }]), None, early_usage()),
        stream_event(json!([{ "text": "" }]), Some("STOP"), final_usage()),
    ]);
    let pieces = awkward_pieces(&body, 7);
    let text = String::from_utf8(pieces.iter().flat_map(|p| p.to_vec()).collect()).unwrap();
    assert_eq!(text, body);
    assert!(pieces.iter().any(|p| p.ends_with(b"\r")), "no cut between \\r and \\n");
    assert!(pieces.iter().any(|p| std::str::from_utf8(p).is_err()), "no cut inside a character");
    let fake = Fake::start(move |_| pieces_reply(pieces.clone())).await;

    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    let received = fake.only_request();
    assert_eq!(received.uri, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    assert_eq!(received.headers["x-goog-api-key"], KEY);
    assert_eq!(chunks[0].choices[0].delta.role, Some(Role::Assistant));
    assert_eq!(text_of(&chunks), "Bonjour à toi 🙂");
    let finishes: Vec<&ChatChunk> =
        chunks.iter().filter(|c| c.choices.iter().any(|c| c.finish_reason.is_some())).collect();
    assert_eq!(finishes.len(), 1);
    assert_eq!(finishes[0].choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        finishes[0].usage,
        Some(Usage { prompt_tokens: 9, completion_tokens: 5, total_tokens: 14, ..Usage::default() })
    );
    assert!(chunks.iter().all(|c| c.id == "JPozaonvK7yzvdIPrJ7FyAk" && c.model == "gemini-2.5-flash"));
}

#[tokio::test]
async fn the_stream_reads_on_past_a_finish_until_every_candidate_finished_and_the_answer_was_counted() {
    // The stream ends at the finish without waiting on the body only when nothing is left to
    // say: here the finish comes without usage and the usage in an event of its own, and of two
    // candidates the second finishes after the first.
    let mut two = stream_event(json!([{ "text": "A." }]), Some("STOP"), final_usage());
    two["candidates"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "content": { "role": "model", "parts": [{ "text": "B" }] }, "index": 1 }));
    let last = json!({ "content": { "role": "model", "parts": [{ "text": "b." }] }, "finishReason": "STOP", "index": 1 });
    let body = sse(&[
        stream_event(json!([{ "text": "Hi" }]), Some("STOP"), Value::Null),
        json!({ "usageMetadata": final_usage(), "responseId": "JPozaonvK7yzvdIPrJ7FyAk" }),
    ]);
    let chunks = ok_chunks(stream(&streaming(&body).await, &hello()).await.unwrap());
    assert_eq!(
        chunks.last().unwrap().usage,
        Some(Usage { prompt_tokens: 9, completion_tokens: 5, total_tokens: 14, ..Usage::default() }),
        "the usage after the finish is read"
    );

    // A finish whose event counts only the prompt: the answer's count after it is read.
    let body = sse(&[
        stream_event(json!([{ "text": "Hi" }]), Some("STOP"), early_usage()),
        json!({ "usageMetadata": final_usage() }),
    ]);
    let chunks = ok_chunks(stream(&streaming(&body).await, &hello()).await.unwrap());
    assert_eq!(chunks.last().unwrap().usage.map(|u| u.completion_tokens), Some(5), "the final count is read");

    let body = sse(&[two, json!({ "candidates": [last], "usageMetadata": final_usage() })]);
    let chunks = ok_chunks(stream(&streaming(&body).await, &hello()).await.unwrap());
    let second: String = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .filter(|c| c.index == 1)
        .filter_map(|c| c.delta.content.as_deref())
        .collect();
    assert_eq!(second, "Bb.", "the second candidate is read to its finish");
}

#[tokio::test]
async fn streamed_thought_summaries_are_reasoning_that_commits_the_stream() {
    let body = sse(&[
        stream_event(json!([{ "text": "Adding up.", "thought": true }]), None, early_usage()),
        stream_event(json!([{ "text": "2" }]), Some("STOP"), final_usage()),
    ]);
    let fake = streaming(&body).await;

    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    let thinking =
        chunks.iter().find(|c| c.choices.iter().any(|c| c.delta.reasoning_content.is_some())).unwrap();
    assert_eq!(thinking.choices[0].delta.reasoning_content.as_deref(), Some("Adding up."));
    assert_eq!(thinking.choices[0].delta.content, None, "a thought is not the answer's text");
    assert!(thinking.has_content(), "a thinking model is answering: its first-byte wait is over");
    assert_eq!(text_of(&chunks), "2");
}

#[tokio::test]
async fn streamed_function_calls_arrive_as_complete_tool_call_deltas() {
    let body = sse(&[
        stream_event(
            json!([{ "functionCall": { "name": "get_weather", "args": { "city": "Zürich" } } }]),
            None,
            early_usage(),
        ),
        stream_event(
            json!([{ "functionCall": { "name": "get_time", "args": {} } }]),
            Some("STOP"),
            final_usage(),
        ),
    ]);
    let fake = streaming(&body).await;

    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    let deltas: Vec<_> =
        chunks.iter().flat_map(|c| &c.choices).flat_map(|c| c.delta.tool_calls.clone()).collect();
    assert_eq!(deltas.len(), 2);
    assert_eq!(deltas[0].index, 0);
    assert!(deltas[0].id.as_deref().is_some_and(|id| id.starts_with("call_")));
    assert_eq!(deltas[0].kind.as_deref(), Some("function"));
    let first = deltas[0].function.as_ref().unwrap();
    assert_eq!(first.name.as_deref(), Some("get_weather"));
    assert_eq!(first.arguments.as_deref(), Some(r#"{"city":"Zürich"}"#));
    assert_eq!(deltas[1].index, 1);
    assert!(
        deltas[1].id.as_deref().is_some_and(|id| id.starts_with("call_")) && deltas[1].id != deltas[0].id
    );
    assert_eq!(deltas[1].function.as_ref().unwrap().name.as_deref(), Some("get_time"));
    let finish = chunks.iter().flat_map(|c| &c.choices).find_map(|c| c.finish_reason.clone());
    assert_eq!(finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn a_stream_cut_mid_way_ends_with_a_transport_error() {
    let body = sse(&[stream_event(json!([{ "text": "Once upon" }]), None, early_usage())]);
    let fake = breaking(&format!("{body}data: {{\"candidates\": [{{\"content\"")).await;

    let items = stream(&fake, &hello()).await.unwrap();

    let (last, before) = items.split_last().unwrap();
    let error = last.as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.detail().contains("the stream broke"), "{error}");
    assert_no_key(error);
    let chunks: Vec<ChatChunk> = before.iter().map(|item| item.clone().unwrap()).collect();
    assert_eq!(text_of(&chunks), "Once upon");
}

#[tokio::test]
async fn a_connection_broken_after_the_finish_reason_loses_nothing() {
    let body = sse(&[stream_event(json!([{ "text": "The end." }]), Some("STOP"), final_usage())]);
    let fake = breaking(&body).await;

    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    assert_eq!(text_of(&chunks), "The end.");
    assert!(chunks.iter().any(|c| c.choices.iter().any(|c| c.finish_reason == Some(FinishReason::Stop))));
}

#[tokio::test]
async fn a_generation_gemini_could_not_finish_is_a_malformed_response_whole_or_streamed() {
    let reasons = [
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MALFORMED_RESPONSE",
        "OTHER",
        "FINISH_REASON_UNSPECIFIED",
    ];
    for reason in reasons {
        let event = stream_event(json!([]), Some(reason), final_usage());
        let fake = streaming(&sse(std::slice::from_ref(&event))).await;
        let items = stream(&fake, &hello()).await.unwrap();
        let error = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!((error.kind(), error.code()), (ErrorKind::MalformedResponse, Some(reason)));
        let finishes = items.iter().filter_map(|item| item.as_ref().ok()).flat_map(|chunk| &chunk.choices);
        assert!(finishes.into_iter().all(|choice| choice.finish_reason.is_none()), "no finish is passed on");

        let fake = Fake::json(200, event).await;
        let error = chat(&fake, &hello()).await.unwrap_err();
        assert_eq!((error.kind(), error.code()), (ErrorKind::MalformedResponse, Some(reason)), "{error}");
    }
}

#[tokio::test]
async fn a_language_gemini_does_not_answer_in_is_unsupported_there() {
    let event = stream_event(json!([]), Some("LANGUAGE"), final_usage());
    let fake = Fake::json(200, event).await;
    let error = chat(&fake, &hello()).await.unwrap_err();
    assert!(error.is_unsupported() && error.code() == Some("LANGUAGE"), "{error:?}");
}

#[tokio::test]
async fn a_stream_that_ends_without_a_finish_reason_is_a_transport_error() {
    let body = sse(&[stream_event(json!([{ "text": "Once upon" }]), None, early_usage())]);
    let fake = streaming(&body).await;

    let items = stream(&fake, &hello()).await.unwrap();

    let error = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert_eq!(error.detail(), "stream ended before a finish reason");
}

#[tokio::test]
async fn an_error_event_inside_a_200_stream_ends_it_with_its_kind() {
    let body = sse(&[
        stream_event(json!([{ "text": "Once" }]), None, early_usage()),
        google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", json!([])),
    ]);
    let fake = streaming(&body).await;

    let items = stream(&fake, &hello()).await.unwrap();

    assert_eq!(items.iter().filter(|item| item.is_err()).count(), 1);
    let error = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(error.status(), Some(503));
    assert_eq!(error.code(), Some("UNAVAILABLE"));
    assert!(error.detail().contains("overloaded"));
}

#[tokio::test]
async fn raw_error_json_inside_a_200_stream_ends_it_with_its_kind() {
    let events = sse(&[stream_event(json!([{ "text": "Once" }]), None, early_usage())]);
    let raw = "{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"Resource has been exhausted (e.g. check quota).\",\n    \"status\": \"RESOURCE_EXHAUSTED\"\n  }\n}\n";
    let fake = streaming(&format!("{events}{raw}")).await;

    let items = stream(&fake, &hello()).await.unwrap();

    let error = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_eq!(error.code(), Some("RESOURCE_EXHAUSTED"));
    assert_eq!(
        text_of(&items[..items.len() - 1].iter().map(|i| i.clone().unwrap()).collect::<Vec<_>>()),
        "Once"
    );
}

#[tokio::test]
async fn a_blocked_prompt_in_a_stream_finishes_with_content_filter() {
    let body = sse(&[json!({
        "promptFeedback": { "blockReason": "PROHIBITED_CONTENT" },
        "usageMetadata": { "promptTokenCount": 8, "totalTokenCount": 8 },
        "modelVersion": "gemini-2.5-flash"
    })]);
    let fake = streaming(&body).await;

    let chunks = ok_chunks(stream(&fake, &hello()).await.unwrap());

    assert!(chunks.iter().any(ChatChunk::is_content_filtered));
    assert!(!chunks.iter().any(ChatChunk::has_content));
}

#[tokio::test]
async fn a_stream_refused_before_it_starts_is_classified() {
    let body =
        google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", json!([]));
    let fake = Fake::json(503, body).await;
    let error = stream(&fake, &hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_no_key(&error);
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

fn quota_details(quota_id: &str, retry_delay: &str) -> Value {
    json!([
        { "@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": { "location": "global", "model": "gemini-2.5-flash" },
            "quotaValue": "10"
        }]},
        { "@type": "type.googleapis.com/google.rpc.Help", "links": [{
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
        }]},
        { "@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay }
    ])
}

const QUOTA_MESSAGE: &str = "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.";

#[tokio::test]
async fn resource_exhausted_is_rate_limited_with_the_retry_info_delay() {
    let details = quota_details("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "26.5s");
    let error = chat_error(429, google_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, details)).await;
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_eq!(error.status(), Some(429));
    assert_eq!(error.code(), Some("RESOURCE_EXHAUSTED"));
    assert_eq!(error.retry_after(), Some(Duration::from_millis(26_500)));
}

#[tokio::test]
async fn a_model_s_spent_daily_quota_rests_the_key_for_that_model_until_the_day_resets() {
    let details = quota_details("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "30s");
    let error = chat_error(429, google_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, details)).await;
    // The model's quota: the key's other models still answer, so it is not the key's bench.
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert!(!error.is_account_wide());
    assert!(error.detail().contains("PerDay"));
    let wait = error.retry_after().unwrap();
    assert!(wait >= Duration::from_secs(30) && wait <= Duration::from_secs(86_400), "{wait:?}");
    // A project's daily quota (no model among its dimensions) benches the key.
    let details = json!([{ "@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
        "quotaId": "GenerateRequestsPerDayPerProject", "quotaDimensions": { "location": "global" }
    }]}]);
    let error = chat_error(429, google_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, details)).await;
    assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
}

#[tokio::test]
async fn a_retry_after_header_wins_over_retry_info_and_is_reported_to_the_sink() {
    let details = quota_details("GenerateRequestsPerMinutePerProjectPerModel", "26s");
    let body = google_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, details);
    let fake = Fake::start(move |_| json_reply(429, &[("retry-after", "7")], &body)).await;
    let sink = Recorder::default();
    let error = chat_with(&fake, &hello(), Some(&sink)).await.unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    let observed = sink.0.lock().unwrap().clone();
    assert_eq!(observed.len(), 1);
    assert_eq!(observed[0].retry_after, Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn unavailable_and_internal_are_unavailable() {
    for (status, code) in [(503, "UNAVAILABLE"), (500, "INTERNAL")] {
        let body = google_error(status, code, "The model is overloaded. Please try again later.", json!([]));
        let error = chat_error(status, body).await;
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{code}");
        assert_eq!(error.status(), Some(status));
        assert_eq!(error.code(), Some(code));
    }
}

#[tokio::test]
async fn deadline_exceeded_is_a_timeout() {
    let body = google_error(
        504,
        "DEADLINE_EXCEEDED",
        "Deadline expired before operation could complete.",
        json!([]),
    );
    assert_eq!(chat_error(504, body).await.kind(), ErrorKind::Timeout);
}

#[tokio::test]
async fn an_invalid_api_key_is_auth_although_it_is_a_400() {
    let details = json!([
        { "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
          "domain": "googleapis.com", "metadata": { "service": "generativelanguage.googleapis.com" } },
        { "@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US",
          "message": "API key not valid. Please pass a valid API key." }
    ]);
    let body =
        google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", details);
    let error = chat_error(400, body).await;
    assert_eq!(error.kind(), ErrorKind::Auth);
    assert_eq!(error.status(), Some(400));
    assert_eq!(error.code(), Some("INVALID_ARGUMENT"));
    assert!(error.detail().contains("API_KEY_INVALID"));
}

#[tokio::test]
async fn permission_denied_and_unauthenticated_are_auth() {
    for (status, code) in [(403, "PERMISSION_DENIED"), (401, "UNAUTHENTICATED")] {
        let body = google_error(status, code, "The caller does not have permission", json!([]));
        assert_eq!(chat_error(status, body).await.kind(), ErrorKind::Auth, "{code}");
    }
}

#[tokio::test]
async fn a_token_limit_invalid_argument_is_context_length() {
    let message = "The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).";
    let error = chat_error(400, google_error(400, "INVALID_ARGUMENT", message, json!([]))).await;
    assert_eq!(error.kind(), ErrorKind::ContextLength);
    assert!(error.detail().contains("3475108"));
}

#[tokio::test]
async fn other_invalid_arguments_are_invalid_requests() {
    let message = "* GenerateContentRequest.contents: contents is not specified\n";
    let error = chat_error(400, google_error(400, "INVALID_ARGUMENT", message, json!([]))).await;
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
}

#[tokio::test]
async fn not_found_is_model_not_found() {
    let message = "models/gemini-1.5-flash is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.";
    let error = chat_error(404, google_error(404, "NOT_FOUND", message, json!([]))).await;
    assert_eq!(error.kind(), ErrorKind::ModelNotFound);
    assert_eq!(error.code(), Some("NOT_FOUND"));
}

#[tokio::test]
async fn failed_precondition_is_quota_exceeded() {
    let message = "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.";
    let error = chat_error(400, google_error(400, "FAILED_PRECONDITION", message, json!([]))).await;
    assert_eq!(error.kind(), ErrorKind::QuotaExceeded);
}

#[tokio::test]
async fn a_200_that_does_not_parse_is_a_malformed_response() {
    let error = chat_error(200, "<html>upstream proxy says hi</html>").await;
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
    let error = chat_error(200, json!({ "unexpected": true })).await;
    assert_eq!(error.kind(), ErrorKind::MalformedResponse);
}

#[tokio::test]
async fn an_error_body_that_is_not_google_json_is_classified_by_status() {
    let error = chat_error(502, "<html>Bad Gateway</html>").await;
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(error.status(), Some(502));
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let error = gemini(&format!("{}/v1beta", refused_origin().await)).chat(&hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert_no_key(&error);
}

#[tokio::test]
async fn a_key_echoed_by_the_upstream_never_reaches_the_error() {
    let message = format!("API key not valid: {KEY}");
    let body = google_error(400, "INVALID_ARGUMENT", &message, json!([]));
    let error = chat_error(400, body).await;
    assert!(error.detail().contains("[redacted]"));
    let error = chat_error(500, &format!("proxy failure for key={KEY}")).await;
    assert!(error.detail().contains("[redacted]"));
}

// ---------------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn one_input_is_embedded_with_embed_content() {
    let answer =
        json!({ "embedding": { "values": [0.25, -0.5, 1.0] }, "usageMetadata": { "promptTokenCount": 2 } });
    let fake = Fake::json(200, answer).await;
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::One("Hello world".into()),
        dimensions: Some(3),
        extra: Extra::new(),
    };
    let response = embed(&fake, &request).await.unwrap();
    let received = fake.only_request();
    assert_eq!(received.uri, "/v1beta/models/gemini-embedding-001:embedContent");
    assert_eq!(received.headers["x-goog-api-key"], KEY);
    assert_eq!(
        received.body,
        json!({ "content": { "parts": [{ "text": "Hello world" }] }, "outputDimensionality": 3 })
    );
    assert_eq!(response.data.len(), 1);
    assert_eq!(response.data[0].index, 0);
    assert_eq!(response.data[0].embedding, vec![0.25, -0.5, 1.0]);
    assert_eq!(response.usage.map(|u| u.prompt_tokens), Some(2));
    assert_eq!(response.model, "gemini-embedding-001");
}

#[tokio::test]
async fn several_inputs_are_embedded_in_one_batch_in_input_order() {
    let answer = json!({ "embeddings": [{ "values": [1.0, 0.0] }, { "values": [0.0, 1.0] }] });
    let fake = Fake::json(200, answer).await;
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::Many(vec!["First text".into(), "Second text".into()]),
        dimensions: None,
        extra: Extra::new(),
    };
    let response = embed(&fake, &request).await.unwrap();
    let received = fake.only_request();
    assert_eq!(received.uri, "/v1beta/models/gemini-embedding-001:batchEmbedContents");
    assert_eq!(
        received.body,
        json!({ "requests": [
            { "model": "models/gemini-embedding-001", "content": { "parts": [{ "text": "First text" }] } },
            { "model": "models/gemini-embedding-001", "content": { "parts": [{ "text": "Second text" }] } }
        ]})
    );
    assert_eq!(response.usage, None, "not counted where the API does not say");
    let vectors: Vec<(u32, Vec<f32>)> = response.data.into_iter().map(|e| (e.index, e.embedding)).collect();
    assert_eq!(vectors, vec![(0, vec![1.0, 0.0]), (1, vec![0.0, 1.0])]);
}

#[tokio::test]
async fn inputs_are_embedded_in_batches_of_100_and_base64_asked_of_the_gateway_is_no_concern_of_gemini() {
    let fake = Fake::start(|seen| {
        let texts = seen.body["requests"].as_array().map_or(0, Vec::len);
        let embeddings: Vec<Value> = (0..texts).map(|i| json!({ "values": [i as f64] })).collect();
        let usage = json!({ "promptTokenCount": 2 * texts });
        json_reply(200, &[], &json!({ "embeddings": embeddings, "usageMetadata": usage }))
    })
    .await;
    let mut extra = Extra::new();
    extra.insert("encoding_format".into(), json!("base64"));
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::Many((0..150).map(|i| format!("text {i}")).collect()),
        dimensions: None,
        extra,
    };
    let response = embed(&fake, &request).await.unwrap();
    let batches: Vec<usize> =
        fake.requests().iter().map(|seen| seen.body["requests"].as_array().unwrap().len()).collect();
    assert_eq!(batches, [100, 50]);
    assert_eq!((response.data[149].index, response.data[149].embedding.clone()), (149, vec![49.0]));
    assert_eq!(response.usage.map(|u| u.prompt_tokens), Some(300), "both batches' counts");
}

#[tokio::test]
async fn token_ids_are_unsupported_by_gemini_before_anything_is_sent() {
    let fake = Fake::json(200, json!({})).await;
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::Tokens(vec![vec![1, 2, 3]]),
        dimensions: None,
        extra: Extra::new(),
    };
    let error = embed(&fake, &request).await.unwrap_err();
    assert!(error.is_unsupported() && error.detail().contains("token ids"), "{error:?}");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn embedding_errors_are_classified_like_chat_errors() {
    let body =
        google_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", json!([]));
    let fake = Fake::json(429, body).await;
    let request = EmbeddingsRequest {
        model: "embed".into(),
        input: EmbeddingInput::One("x".into()),
        dimensions: None,
        extra: Extra::new(),
    };
    let error = embed(&fake, &request).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited);
    assert_no_key(&error);
}

#[tokio::test]
async fn tokens_are_counted_by_count_tokens_over_the_whole_generate_request() {
    let fake = Fake::json(
        200,
        json!({ "totalTokens": 31, "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": 31 }] }),
    )
    .await;
    let harness = gemini(&fake.url("/v1beta"));
    let request = ChatRequest::new("route", vec![Message::system("Be brief."), Message::user("Hello")]);
    let count = harness.provider.count_tokens(harness.call(MODEL, None), &request).await.unwrap();
    assert_eq!(count.input_tokens, 31);
    let seen = fake.only_request();
    assert_eq!(seen.path(), "/v1beta/models/gemini-2.5-flash:countTokens");
    let generate = &seen.body["generateContentRequest"];
    assert_eq!(
        generate["model"], "models/gemini-2.5-flash",
        "the form that counts the system instruction wants it"
    );
    assert_eq!(generate["contents"][0]["parts"][0]["text"], "Hello");
    assert_eq!(generate["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));

    // A refusal is classified like any other Gemini error.
    let fake = Fake::json(
        429,
        json!({ "error": { "code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED" } }),
    )
    .await;
    let harness = gemini(&fake.url("/v1beta"));
    let error = harness.provider.count_tokens(harness.call(MODEL, None), &request).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RateLimited, "{error:?}");
}

#[tokio::test]
async fn an_answer_that_stops_with_nothing_said_or_no_finish_reason_is_malformed_whole_and_streamed() {
    // Gemini 2.5's known empty answer: `STOP` with no parts, or thoughts alone.
    let empty = json!({"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": final_usage()});
    let thoughts = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hmm.", "thought": true}]},
        "finishReason": "STOP", "index": 0}], "usageMetadata": final_usage()});
    let unfinished =
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Bonj"}]}, "index": 0}]});
    for (answer, said) in [(empty, "EMPTY_STOP"), (thoughts, "EMPTY_STOP"), (unfinished, "no finishReason")] {
        let fake = Fake::json(200, answer).await;
        let error = chat(&fake, &hello()).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse, "{error:?}");
        assert!(error.code() == Some(said) || error.detail().contains(said), "{error:?}");
    }
    let body = sse(&[
        stream_event(json!([{ "text": "Hmm.", "thought": true }]), None, early_usage()),
        stream_event(json!([]), Some("STOP"), final_usage()),
    ]);
    let items = stream(&streaming(&body).await, &hello()).await.unwrap();
    let error = items.into_iter().find_map(Result::err).expect("the stream fails");
    assert_eq!((error.kind(), error.code()), (ErrorKind::MalformedResponse, Some("EMPTY_STOP")));
    // Text in an earlier event, then an empty STOP: an answer.
    let body = sse(&[
        stream_event(json!([{ "text": "Bonjour" }]), None, early_usage()),
        stream_event(json!([]), Some("STOP"), final_usage()),
    ]);
    let items = stream(&streaming(&body).await, &hello()).await.unwrap();
    assert!(items.iter().all(Result::is_ok), "{items:?}");
}
