//! The Responses API in process: what a target spoken to in another dialect cannot be sent is
//! said in the trail.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};

#[tokio::test]
async fn reasoning_a_translated_target_cannot_read_is_noted_on_its_attempt() {
    let (mock, _server) = switchyard_mock::spawn().await.unwrap();
    // `native` speaks the Responses API and fails with a 500; `sim` gets the request translated.
    let yaml = format!(
        "providers:\n  native: {{ kind: openai, base_url: 'http://{mock}/status=500/v1', api_key: sk-native-0123456789 }}\n  sim: {{ kind: simulated }}\nroutes:\n  default: {{ targets: [native:gpt-4o, sim:m], retry: {{ max_attempts: 1 }} }}\n"
    );
    let file = config::parse(&yaml, false, "responses.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("responses.yaml".into()), &|_: &str| None).unwrap();
    let state = AppState::new(loaded.router, loaded.gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
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
