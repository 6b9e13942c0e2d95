//! A Responses API request with a function-tool round trip, translated to Anthropic Messages and
//! to Gemini's `generateContent` by the real adapters (against a fake upstream that keeps what
//! it was sent), and each provider's documented answer translated back into a Responses object.

#![allow(clippy::unwrap_used)]

mod support;

use serde_json::{Value, json};
use support::{Caller, Fake};
use switchyard::provider::Provider;
use switchyard_providers::anthropic::AnthropicProvider;
use switchyard_providers::gemini::GeminiProvider;
use switchyard_providers::responses::{decode, encode};
use switchyard_providers::{ProviderKind, ProviderSettings};

/// The request of OpenAI's function-calling guide, one turn after the tool ran.
fn request() -> decode::ResponsesRequest {
    let body = json!({
        "model": "default",
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "21C and sunny"}
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "The weather in a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
        "max_output_tokens": 64
    });
    decode::request_from_json(body).unwrap()
}

async fn answer(provider: &dyn Provider, request: &decode::ResponsesRequest) -> Value {
    let caller = Caller::new(provider, Some("sk-upstream-0123456789"));
    let response = provider.chat(caller.call("m", None), &request.chat).await.unwrap();
    let meta = encode::Meta {
        id: "resp_1".to_owned(),
        created_at: 1,
        echo: request.echo.clone(),
        previous_response_id: None,
        store: true,
        reasoned_by: None,
    };
    encode::response_object(&meta, &response).0
}

#[tokio::test]
async fn a_tool_round_trip_reaches_anthropic_as_tool_use_and_tool_result_blocks_and_comes_back() {
    // Anthropic's documented answer: text, then a tool call.
    let fake = Fake::json(200, json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "It is 21C. Checking Lyon too."},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Lyon"}}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 20, "output_tokens": 10}
    }))
    .await;
    let provider =
        AnthropicProvider::new(&ProviderSettings::new(ProviderKind::Anthropic).base_url(fake.origin()))
            .unwrap();
    let request = request();

    let object = answer(&provider, &request).await;

    let sent = fake.last_request().body;
    assert_eq!(sent["system"], json!("Be brief."), "{sent}");
    assert_eq!(sent["max_tokens"], 64);
    assert_eq!(sent["tools"][0]["name"], "get_weather");
    assert_eq!(sent["tools"][0]["input_schema"]["required"], json!(["city"]));
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"][0]["text"], "Weather in Paris?");
    let tool_use = &messages[1]["content"][0];
    assert_eq!((&messages[1]["role"], &tool_use["type"]), (&json!("assistant"), &json!("tool_use")));
    assert_eq!(
        (&tool_use["id"], &tool_use["name"], &tool_use["input"]),
        (&json!("call_1"), &json!("get_weather"), &json!({"city": "Paris"}))
    );
    let result = &messages[2]["content"][0];
    assert_eq!(
        (&messages[2]["role"], &result["type"], &result["tool_use_id"]),
        (&json!("user"), &json!("tool_result"), &json!("call_1"))
    );
    assert!(result["content"].to_string().contains("21C and sunny"), "{result}");

    assert_eq!(object["object"], "response");
    assert_eq!(object["status"], "completed");
    let output = object["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["content"][0]["type"], "output_text");
    assert_eq!(output[0]["content"][0]["text"], "It is 21C. Checking Lyon too.");
    assert_eq!(
        (&output[1]["type"], &output[1]["call_id"], &output[1]["name"]),
        (&json!("function_call"), &json!("toolu_2"), &json!("get_weather"))
    );
    assert_eq!(
        serde_json::from_str::<Value>(output[1]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Lyon"})
    );
    assert_eq!(
        (&object["usage"]["input_tokens"], &object["usage"]["output_tokens"]),
        (&json!(20), &json!(10))
    );
}

#[tokio::test]
async fn a_tool_round_trip_reaches_gemini_as_function_call_and_response_parts_and_comes_back() {
    // Gemini's documented answer: a text part, finished.
    let fake = Fake::json(200, json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "It is 21C and sunny."}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 7, "totalTokenCount": 27},
        "modelVersion": "gemini-2.5-flash"
    }))
    .await;
    let settings = ProviderSettings::new(ProviderKind::Gemini).base_url(fake.url("/v1beta"));
    let provider = GeminiProvider::new(&settings).unwrap();
    let request = request();

    let object = answer(&provider, &request).await;

    let sent = fake.last_request().body;
    assert_eq!(sent["systemInstruction"]["parts"][0]["text"], "Be brief.", "{sent}");
    assert_eq!(sent["generationConfig"]["maxOutputTokens"], 64);
    assert_eq!(sent["tools"][0]["functionDeclarations"][0]["name"], "get_weather");
    let contents = sent["contents"].as_array().unwrap();
    assert_eq!(
        (&contents[0]["role"], &contents[0]["parts"][0]["text"]),
        (&json!("user"), &json!("Weather in Paris?"))
    );
    let call = &contents[1]["parts"][0]["functionCall"];
    assert_eq!(
        (&contents[1]["role"], &call["name"], &call["args"]),
        (&json!("model"), &json!("get_weather"), &json!({"city": "Paris"}))
    );
    let response = &contents[2]["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "get_weather", "{sent}");
    assert!(response["response"].to_string().contains("21C and sunny"), "{response}");

    assert_eq!(object["status"], "completed");
    assert_eq!(object["output"][0]["content"][0]["text"], "It is 21C and sunny.");
    assert_eq!(
        (&object["usage"]["input_tokens"], &object["usage"]["output_tokens"]),
        (&json!(20), &json!(7))
    );
}
