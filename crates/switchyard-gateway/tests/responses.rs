//! The Responses API in process: what a target spoken to in another dialect cannot be sent is
//! said in the trail.

#![allow(clippy::unwrap_used)]

mod support;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use support::in_process_url;

#[tokio::test]
async fn reasoning_a_translated_target_cannot_read_is_noted_on_its_attempt() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    // `native` speaks the Responses API and fails with a 500; `sim` gets the request translated.
    let yaml = format!(
        "providers:\n  native: {{ kind: openai, base_url: 'http://{mock}/status=500/v1', api_key: sk-native-0123456789 }}\n  sim: {{ kind: simulated }}\nroutes:\n  default: {{ targets: [native:gpt-4o, sim:m], retry: {{ max_attempts: 1 }} }}\n"
    );
    let gateway = in_process_url(&yaml).await;
    let client = reqwest::Client::new();

    let input = json!([
        {"type": "message", "role": "user", "content": "Think, then answer."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB..."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]},
        {"type": "message", "role": "user", "content": "Why?"}
    ]);
    let response = client
        .post(format!("{gateway}/v1/responses"))
        .json(&json!({"model": "default", "input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-switchyard-target"], "sim:m");
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();

    let record: Value =
        client.get(format!("{gateway}/admin/requests/{id}")).send().await.unwrap().json().await.unwrap();
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{record}");
    assert_eq!(attempts[0]["target"], "native:gpt-4o");
    assert!(attempts[0].get("note").is_none(), "the native target was sent the reasoning: {}", attempts[0]);
    assert_eq!(attempts[1]["target"], "sim:m");
    assert_eq!(
        attempts[1]["note"],
        "1 reasoning item(s) of the conversation were not sent: only a provider spoken to in the Responses API reads them"
    );

    // Without reasoning in the conversation there is nothing to say.
    let response = client
        .post(format!("{gateway}/v1/responses"))
        .json(&json!({"model": "default", "input": "Hello"}))
        .send()
        .await
        .unwrap();
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let record: Value =
        client.get(format!("{gateway}/admin/requests/{id}")).send().await.unwrap().json().await.unwrap();
    assert!(record["attempts"][1].get("note").is_none(), "{record}");
}

#[tokio::test]
async fn claudes_thinking_a_provider_of_another_kind_cannot_read_is_noted_on_its_attempt() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    // `claude` reads the thinking and fails with a 500; `sim` is not sent it.
    let yaml = format!(
        "providers:\n  claude: {{ kind: anthropic, base_url: 'http://{mock}/status=500', api_key: sk-ant-0123456789 }}\n  sim: {{ kind: simulated }}\nroutes:\n  default: {{ targets: ['claude:claude-sonnet-4-5', sim:m], retry: {{ max_attempts: 1 }} }}\n"
    );
    let gateway = in_process_url(&yaml).await;
    let client = reqwest::Client::new();
    let note = "Claude's thinking of 1 earlier turn(s) was not sent: only an Anthropic provider reads it";
    let attempts_of = |response: reqwest::Response| {
        let client = client.clone();
        let gateway = gateway.clone();
        async move {
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["x-switchyard-target"], "sim:m");
            let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
            let record: Value = client
                .get(format!("{gateway}/admin/requests/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            record["attempts"].as_array().unwrap().clone()
        }
    };

    // A Chat Completions client sends the block back as LiteLLM's `thinking_blocks`.
    let block = json!({"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"});
    let chat = json!({"model": "default", "messages": [
        {"role": "user", "content": "Think, then answer."},
        {"role": "assistant", "content": "42", "thinking_blocks": [block]},
        {"role": "user", "content": "Why?"}
    ]});
    let response = client.post(format!("{gateway}/v1/chat/completions")).json(&chat).send().await.unwrap();
    let attempts = attempts_of(response).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(attempts[0].get("note").is_none(), "Anthropic was sent the thinking: {}", attempts[0]);
    assert_eq!(attempts[1]["note"], note);

    // A Responses client sends it as the reasoning item the gateway encoded it in.
    let sealed = format!(
        "switchyard.claude-thinking.v1:{}",
        URL_SAFE_NO_PAD.encode(serde_json::to_string(&json!([block])).unwrap())
    );
    let input = json!([
        {"type": "message", "role": "user", "content": "Think, then answer."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]},
        {"type": "message", "role": "user", "content": "Why?"}
    ]);
    let body = json!({"model": "default", "input": input});
    let response = client.post(format!("{gateway}/v1/responses")).json(&body).send().await.unwrap();
    let attempts = attempts_of(response).await;
    // Anthropic's failure left it resting: skipped, it was sent nothing to note.
    assert_eq!(attempts[0]["outcome"], "skipped_unhealthy", "{attempts:?}");
    assert!(!attempts[0]["note"].as_str().unwrap_or_default().contains("thinking"), "{}", attempts[0]);
    assert_eq!(attempts[1]["note"], note, "and no note of reasoning items: {}", attempts[1]);

    // An Anthropic client sends its own blocks back.
    let response = messages(&client, &gateway, &thought_in("default", &block)).await;
    assert_eq!(attempts_of(response).await[1]["note"], note);

    // Without thinking in the conversation there is nothing to say, nor with an empty list or
    // only an unsigned block, which no provider is sent.
    let plain = json!({"model": "default", "messages": [{"role": "user", "content": "Hello"}]});
    let response = client.post(format!("{gateway}/v1/chat/completions")).json(&plain).send().await.unwrap();
    assert!(attempts_of(response).await[1].get("note").is_none());
    let empty = json!({"model": "default", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "42", "thinking_blocks": []},
        {"role": "user", "content": "Why?"}
    ]});
    let response = client.post(format!("{gateway}/v1/chat/completions")).json(&empty).send().await.unwrap();
    assert!(attempts_of(response).await[1].get("note").is_none());
    let unsigned = json!({"model": "default", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "42", "thinking_blocks": [{"type": "thinking", "thinking": "Hmm."}]},
        {"role": "user", "content": "Why?"}
    ]});
    let response =
        client.post(format!("{gateway}/v1/chat/completions")).json(&unsigned).send().await.unwrap();
    assert!(attempts_of(response).await[1].get("note").is_none());
}

#[tokio::test]
async fn a_native_stream_that_ends_without_its_completion_is_broken_off_and_continued() {
    // Every item it began is done, then the body ends without `response.completed`. No item
    // says the answer is over (an agent's turn is a preamble, then its calls): this is a break,
    // which the next target continues from what the client has, as Codex itself would retry it.
    ended_without_completion("noterm").await;
}

#[tokio::test]
async fn a_native_stream_held_open_without_its_completion_is_a_stall_its_idle_limit_ends() {
    // The same, the connection then held open: quiet for a moment is not over (the call after
    // a preamble may take seconds to begin); quiet past `idle` is a stall.
    ended_without_completion("noend").await;
}

/// A Responses client's stream over a native target whose items end done without
/// `response.completed` (the mock's `scenario`), then a Claude target that says the same words:
/// continued, one whole message, told complete once.
async fn ended_without_completion(scenario: &str) {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    let yaml = format!(
        "providers:\n  native: {{ kind: openai, base_url: 'http://{mock}/{scenario}~words=8/v1', api_key: sk-native-0123456789 }}\n  claude: {{ kind: anthropic, base_url: 'http://{mock}/ok~words=8', api_key: sk-claude-0123456789 }}\nroutes:\n  default: {{ targets: [native:gpt-4o, claude:claude-test], retry: {{ max_attempts: 1 }}, timeouts: {{ idle: 1s }} }}\n"
    );
    let gateway = in_process_url(&yaml).await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{gateway}/v1/responses"))
        .json(&json!({"model": "default", "input": "Hello", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let events = response.text().await.unwrap();
    let completed: Vec<Value> = events
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|event| event["type"] == "response.completed")
        .collect();
    assert_eq!(completed.len(), 1, "the client is told it completed: {events}");
    let output = completed[0]["response"]["output"].as_array().unwrap();
    let texts: Vec<&str> = output
        .iter()
        .filter(|item| item["type"] == "message")
        .filter_map(|item| item["content"][0]["text"].as_str())
        .collect();
    assert_eq!(texts.concat(), "w1 w2 w3 w4 w5 w6 w7 w8", "the words once: {output:?}");
    let record: Value =
        client.get(format!("{gateway}/admin/requests/{id}")).send().await.unwrap().json().await.unwrap();
    let attempts = record["attempts"].as_array().unwrap();
    let outcomes: Vec<&str> = attempts.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["failed", "continued"], "{record}");
    assert_eq!(attempts[0]["mid_stream"], true, "{record}");
}

/// A Bedrock on loopback that answers whole: Converse for the models it serves so, InvokeModel
/// (the Messages API) for Claude. It keeps each request's path and body.
async fn bedrock() -> (String, std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let router = axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
        let keep = keep.clone();
        async move {
            let path = uri.path().to_owned();
            keep.lock().unwrap().push((path.clone(), serde_json::from_slice(&body).unwrap()));
            let answer = match path.ends_with("/converse") {
                true => json!({"output": {"message": {"role": "assistant", "content": [{"text": "Because."}]}},
                    "stopReason": "end_turn", "usage": {"inputTokens": 9, "outputTokens": 2, "totalTokens": 11}}),
                false => json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                    "content": [{"type": "text", "text": "Because."}], "stop_reason": "end_turn",
                    "stop_sequence": null, "usage": {"input_tokens": 9, "output_tokens": 2}}),
            };
            axum::Json(answer)
        }
    });
    let addr = support::serve_router(router).await;
    (format!("http://{addr}"), seen)
}

/// A Messages conversation for `model` whose past answer opens on the thinking `block`.
fn thought_in(model: &str, block: &Value) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [
        {"role": "user", "content": "Think, then answer."},
        {"role": "assistant", "content": [block, {"type": "text", "text": "42"}]},
        {"role": "user", "content": "Why?"}
    ]})
}

/// Posts `body` to the gateway's `/v1/messages`.
async fn messages(client: &reqwest::Client, gateway: &str, body: &Value) -> reqwest::Response {
    let url = format!("{gateway}/v1/messages");
    client.post(url).header("anthropic-version", "2023-06-01").json(body).send().await.unwrap()
}

#[tokio::test]
async fn whether_an_attempt_was_sent_claudes_thinking_is_decided_by_the_model_it_was_called_as() {
    // One Bedrock serves Claude (named `sonnet` by the route: what decides is the model it is
    // called as) and Nova, which Converse speaks to and which is sent no thinking.
    let (base, seen) = bedrock().await;
    let yaml = format!(
        "providers:\n  bedrock: {{ kind: bedrock, region: us-east-1, base_url: '{base}', api_key: bedrock-key-0123456789, models: {{ sonnet: anthropic.claude-sonnet-4-5-20250929-v1:0, nova: amazon.nova-pro-v1:0 }} }}\nroutes:\n  claude: {{ targets: [bedrock:sonnet], stream_upstream: false }}\n  nova: {{ targets: [bedrock:nova], stream_upstream: false }}\n"
    );
    let gateway = in_process_url(&yaml).await;
    let client = reqwest::Client::new();
    let block = json!({"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"});
    let note = "Claude's thinking of 1 earlier turn(s) was not sent: only an Anthropic provider reads it";
    for (route, noted) in [("claude", false), ("nova", true)] {
        let response = messages(&client, &gateway, &thought_in(route, &block)).await;
        assert_eq!(response.status(), 200, "{route}");
        let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
        let record: Value =
            client.get(format!("{gateway}/admin/requests/{id}")).send().await.unwrap().json().await.unwrap();
        assert_eq!(record["attempts"][0]["note"].as_str() == Some(note), noted, "{route}: {record}");
        let (path, sent) = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(sent.to_string().contains("EqQB"), !noted, "{route}: {path} {sent}");
    }
}
