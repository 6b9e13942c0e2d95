//! The mock upstream's behaviour as a client sees it, over loopback HTTP: every step in both
//! dialects, streams and their timing, sequences, `/_reset` and `/_stats`. The fault-injecting
//! steps are in `faults.rs`.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn ok_answers_in_the_openai_dialect_echoing_the_model() {
    let mock = Mock::start().await;
    let reply = mock.post("ok", CHAT, &chat("gpt-4o-mini")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    let body = reply.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], "mock answer from gpt-4o-mini");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 10);
    assert_eq!(body["usage"]["total_tokens"], 14);
}

#[tokio::test]
async fn ok_answers_in_the_anthropic_dialect_echoing_the_model() {
    let mock = Mock::start().await;
    let reply = mock.post("ok", MESSAGES, &messages("claude-sonnet-4-5")).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["content"], json!([{"type": "text", "text": "mock answer from claude-sonnet-4-5"}]));
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["usage"]["input_tokens"], 10);
    assert!(reply.header("request-id").starts_with("req_"));
}

#[tokio::test]
async fn bare_v1_paths_mean_ok() {
    let mock = Mock::start().await;
    let reply = mock.post_url(&format!("{}/v1/chat/completions", mock.base), &chat("m")).await;
    assert_eq!(reply.json()["choices"][0]["message"]["content"], "mock answer from m");
    let reply = mock.post_url(&format!("{}/v1/messages", mock.base), &messages("c")).await;
    assert_eq!(reply.json()["content"][0]["text"], "mock answer from c");
    assert_eq!(mock.stats().await["scenarios"]["ok"]["requests"], 2);
}

#[tokio::test]
async fn model_names_with_json_escapes_are_echoed_intact() {
    let mock = Mock::start().await;
    let model = "org/\"quoted\"\\model\u{e9}";
    let reply = mock.post("ok", CHAT, &chat(model)).await;
    assert_eq!(reply.json()["model"], model);
    let stream = mock.stream("ok", MESSAGES, &messages_stream(model)).await;
    assert_eq!(anthropic_deltas(&stream, "text"), format!("mock answer from {model}"));
}

#[tokio::test]
async fn openai_stream_sends_content_chunks_then_usage_then_done() {
    let mock = Mock::start().await;
    let stream = mock.stream("ok~chunks=3", CHAT, &chat_stream("gpt-x", true)).await;
    assert_eq!(stream.status, StatusCode::OK);
    assert!(stream.clean_end && stream.trailing.is_empty());
    assert!(stream.events.iter().all(|e| e.name.is_none()));
    assert_eq!(stream.events.last().unwrap().data, "[DONE]");

    let chunks = openai_chunks(&stream);
    // role chunk, 3 content chunks, finish chunk, usage chunk
    assert_eq!(chunks.len(), 6);
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-x"));
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(openai_text(&stream), "mock answer from gpt-x");
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[4]["usage"], Value::Null);
    assert_eq!(chunks[5]["choices"], json!([]));
    assert_eq!(chunks[5]["usage"]["completion_tokens"], 3);

    let stream = mock.stream("ok", CHAT, &chat_stream("gpt-x", false)).await;
    let chunks = openai_chunks(&stream);
    assert_eq!(chunks.len(), 6, "role, 4 content chunks by default, finish; no usage chunk");
    assert!(chunks.iter().all(|c| c.get("usage").is_none() && c["choices"].as_array().unwrap().len() == 1));
}

#[tokio::test]
async fn anthropic_stream_sends_the_full_event_sequence() {
    let mock = Mock::start().await;
    let stream = mock.stream("ok~chunks=2", MESSAGES, &messages_stream("claude-x")).await;
    assert_eq!(stream.status, StatusCode::OK);
    assert!(stream.clean_end && stream.trailing.is_empty());
    assert_eq!(
        anthropic_names(&stream),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for event in &stream.events {
        assert_eq!(event.json()["type"], event.name.as_deref().unwrap(), "data type matches the event name");
    }
    let start = stream.events[0].json();
    assert_eq!(start["message"]["model"], "claude-x");
    assert_eq!(start["message"]["stop_reason"], Value::Null);
    assert_eq!(anthropic_deltas(&stream, "text"), "mock answer from claude-x");
    let delta = stream.events[6].json();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn stream_gaps_are_visible_at_the_client() {
    let mock = Mock::start().await;
    let gap = Duration::from_millis(100);
    for endpoint in [CHAT, MESSAGES] {
        let body = if endpoint == CHAT { chat_stream("m", false) } else { messages_stream("m") };
        let started = Instant::now();
        let stream = mock.stream("ok~chunks=3~gap=100ms", endpoint, &body).await;
        let content = content_events(&stream);
        assert_eq!(content.len(), 3, "{endpoint}: {:?}", stream.events);
        for pair in content.windows(2) {
            let apart = pair[1].at - pair[0].at;
            assert!(apart >= gap - Duration::from_millis(5), "{endpoint}: chunks only {apart:?} apart");
        }
        // The first chunk was not held back until the end of the stream.
        assert!(content[2].at - content[0].at >= 2 * gap - Duration::from_millis(10));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn tools_call_get_weather_in_the_openai_dialect() {
    let mock = Mock::start().await;
    let body = mock.post("tools", CHAT, &chat("m")).await.json();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(message["tool_calls"][0]["type"], "function");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
    let arguments = message["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(arguments).unwrap(), json!({"city": "Paris"}));
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");

    let stream = mock.stream("tools", CHAT, &chat_stream("m", false)).await;
    assert!(stream.clean_end);
    let chunks = openai_chunks(&stream);
    let first = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(first["function"]["name"], "get_weather");
    assert!(first["id"].as_str().unwrap().starts_with("call_"));
    let fragments: Vec<String> = chunks
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_owned)
        })
        .collect();
    assert!(fragments.len() > 2, "arguments arrive in fragments: {fragments:?}");
    assert_eq!(serde_json::from_str::<Value>(&fragments.concat()).unwrap(), json!({"city": "Paris"}));
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn tools_call_get_weather_in_the_anthropic_dialect() {
    let mock = Mock::start().await;
    let body = mock.post("tools", MESSAGES, &messages("c")).await.json();
    assert_eq!(body["content"][0]["type"], "tool_use");
    assert_eq!(body["content"][0]["name"], "get_weather");
    assert_eq!(body["content"][0]["input"], json!({"city": "Paris"}));
    assert_eq!(body["stop_reason"], "tool_use");

    let stream = mock.stream("tools", MESSAGES, &messages_stream("c")).await;
    assert!(stream.clean_end);
    let block = stream.events[1].json();
    assert_eq!(block["content_block"]["type"], "tool_use");
    assert_eq!(block["content_block"]["input"], json!({}));
    let json_text = anthropic_deltas(&stream, "partial_json");
    assert_eq!(serde_json::from_str::<Value>(&json_text).unwrap(), json!({"city": "Paris"}));
    let delta = stream.events.iter().find(|e| e.name.as_deref() == Some("message_delta")).unwrap();
    assert_eq!(delta.json()["delta"]["stop_reason"], "tool_use");
    assert_eq!(anthropic_names(&stream).last(), Some(&"message_stop"));
}

#[tokio::test]
async fn think_reasons_before_it_answers_in_both_dialects() {
    let mock = Mock::start().await;
    let body = mock.post("think", CHAT, &chat("m")).await.json();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], "The user wants the mock answer.");
    assert_eq!(message["content"], "mock answer from m");
    let stream = mock.stream("think", CHAT, &chat_stream("m", false)).await;
    let chunks = openai_chunks(&stream);
    let reasoning: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str()).collect();
    assert_eq!(reasoning, "The user wants the mock answer.");
    assert_eq!(openai_text(&stream), "mock answer from m");

    let body = mock.post("think", MESSAGES, &messages("c")).await.json();
    assert_eq!(body["content"][0]["type"], "thinking");
    assert_eq!(body["content"][0]["signature"], "EqQBCkYIBxgCKkBmocksignature");
    assert_eq!(body["content"][1]["text"], "mock answer from c");
    let stream = mock.stream("think", MESSAGES, &messages_stream("c")).await;
    assert!(stream.clean_end);
    assert_eq!(anthropic_deltas(&stream, "thinking"), "The user wants the mock answer.");
    assert_eq!(anthropic_deltas(&stream, "signature"), "EqQBCkYIBxgCKkBmocksignature");
    assert_eq!(anthropic_deltas(&stream, "text"), "mock answer from c");
    let starts: Vec<Value> = stream
        .events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_start"))
        .map(|e| e.json())
        .collect();
    assert_eq!(starts[0]["content_block"]["type"], "thinking");
    assert_eq!(
        (starts[1]["index"].clone(), starts[1]["content_block"]["type"].clone()),
        (json!(1), json!("text"))
    );
}

#[tokio::test]
async fn filter_answers_are_content_filtered_streamed_and_not() {
    let mock = Mock::start().await;
    let body = mock.post("filter", CHAT, &chat("m")).await.json();
    assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(body["choices"][0]["message"]["content"], "");
    let stream = mock.stream("filter", CHAT, &chat_stream("m", false)).await;
    assert_eq!(openai_text(&stream), "");
    assert_eq!(openai_chunks(&stream).last().unwrap()["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(stream.events.last().unwrap().data, "[DONE]");

    let body = mock.post("filter", MESSAGES, &messages("c")).await.json();
    assert_eq!(body["stop_reason"], "refusal");
    assert_eq!(body["content"], json!([]));
    let stream = mock.stream("filter", MESSAGES, &messages_stream("c")).await;
    assert_eq!(anthropic_names(&stream), ["message_start", "ping", "message_delta", "message_stop"]);
    assert_eq!(stream.events[2].json()["delta"]["stop_reason"], "refusal");
}

#[tokio::test]
async fn status_steps_use_each_dialects_error_shape() {
    let mock = Mock::start().await;
    for (status, openai_type, anthropic_type) in [
        (400, "invalid_request_error", "invalid_request_error"),
        (404, "invalid_request_error", "not_found_error"),
        (500, "server_error", "api_error"),
        (502, "server_error", "api_error"),
        (503, "server_error", "api_error"),
        (529, "server_error", "overloaded_error"),
    ] {
        let scenario = format!("status={status}");
        let code = (status == 404).then_some("model_not_found");
        assert_openai_error(&mock.post(&scenario, CHAT, &chat("m")).await, status, openai_type, code);
        assert_anthropic_error(&mock.post(&scenario, MESSAGES, &messages("c")).await, status, anthropic_type);
    }
    let reply = mock.post("fail529", MESSAGES, &messages("c")).await;
    assert_eq!(reply.json()["error"]["message"], "Overloaded");
}

#[tokio::test]
async fn ratelimit_sets_retry_after_and_rate_limit_headers() {
    let mock = Mock::start().await;
    let reply = mock.post("ratelimit=7", CHAT, &chat("m")).await;
    assert_openai_error(&reply, 429, "requests", Some("rate_limit_exceeded"));
    assert_eq!(reply.header("retry-after"), "7");
    assert_eq!(reply.header("x-ratelimit-remaining-requests"), "0");
    assert_eq!(reply.header("x-ratelimit-reset-requests"), "7s");

    let reply = mock.post("ratelimit=7", MESSAGES, &messages("c")).await;
    assert_anthropic_error(&reply, 429, "rate_limit_error");
    assert_eq!(reply.header("retry-after"), "7");
    assert_eq!(reply.header("anthropic-ratelimit-requests-remaining"), "0");
    let reset = reply.header("anthropic-ratelimit-requests-reset");
    assert!(reset.len() == 20 && reset.ends_with('Z') && reset.as_bytes()[10] == b'T', "{reset}");
}

#[tokio::test]
async fn quota_is_insufficient_quota_or_a_too_low_credit_balance() {
    let mock = Mock::start().await;
    assert_openai_error(
        &mock.post("quota", CHAT, &chat("m")).await,
        429,
        "insufficient_quota",
        Some("insufficient_quota"),
    );
    let reply = mock.post("quota", MESSAGES, &messages("c")).await;
    assert_anthropic_error(&reply, 400, "invalid_request_error");
    assert_eq!(
        reply.json()["error"]["message"],
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade \
         or purchase credits."
    );
}

#[tokio::test]
async fn auth_is_401_in_both_dialects() {
    let mock = Mock::start().await;
    assert_openai_error(
        &mock.post("auth", CHAT, &chat("m")).await,
        401,
        "invalid_request_error",
        Some("invalid_api_key"),
    );
    assert_anthropic_error(&mock.post("auth", MESSAGES, &messages("c")).await, 401, "authentication_error");
}

#[tokio::test]
async fn authkey_rejects_only_the_named_key() {
    let mock = Mock::start().await;
    let send = |key: &'static str, endpoint: &'static str, anthropic: bool| {
        let mut request = mock.client.post(mock.url("authkey=sk-bad", endpoint)).body(chat("m").to_string());
        request = if anthropic {
            request.header("x-api-key", key)
        } else {
            request.header("authorization", format!("Bearer {key}"))
        };
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(send("sk-bad", CHAT, false).await, 401);
    assert_eq!(send("sk-good", CHAT, false).await, 200);
    assert_eq!(send("sk-bad", MESSAGES, true).await, 401);
    assert_eq!(send("sk-good", MESSAGES, true).await, 200);
}

#[tokio::test]
async fn context_errors_report_the_overflow() {
    let mock = Mock::start().await;
    let reply = mock.post("context", CHAT, &chat("m")).await;
    assert_openai_error(&reply, 400, "invalid_request_error", Some("context_length_exceeded"));
    let reply = mock.post("context", MESSAGES, &messages("c")).await;
    assert_anthropic_error(&reply, 400, "invalid_request_error");
    assert_eq!(reply.json()["error"]["message"], "prompt is too long: 210000 tokens > 200000 maximum");
}

#[tokio::test]
async fn hang_never_answers_and_is_released_when_the_client_leaves() {
    let mock = Mock::start().await;
    let request = mock.client.post(mock.url("hang", CHAT)).body(chat("m").to_string()).send();
    let pending = tokio::spawn(request);

    let deadline = Instant::now() + Duration::from_secs(5);
    while mock.hanging().await != 1 {
        assert!(Instant::now() < deadline, "the request never reached the mock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!pending.is_finished(), "a hanging request got an answer");

    pending.abort();
    while mock.hanging().await != 0 {
        assert!(Instant::now() < deadline, "the hang outlived its client");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn reset_closes_the_connection_without_a_response() {
    let mock = Mock::start().await;
    for endpoint in [CHAT, MESSAGES] {
        let mut socket = tokio::net::TcpStream::connect(mock.addr).await.unwrap();
        let body = r#"{"model":"m"}"#;
        let request = format!(
            "POST /reset/{endpoint} HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut received = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut received)).await;
        assert!(read.is_ok(), "the connection stayed open");
        assert!(received.is_empty(), "got {:?}", String::from_utf8_lossy(&received));
    }
}

#[tokio::test]
async fn cut_streams_end_without_a_terminator() {
    let mock = Mock::start().await;
    let stream = mock.stream("cut=2", CHAT, &chat_stream("m", true)).await;
    assert_eq!(stream.status, StatusCode::OK);
    assert!(!stream.clean_end, "the body ended cleanly");
    assert!(stream.events.iter().all(|e| e.data != "[DONE]"));
    let chunks = openai_chunks(&stream);
    assert_eq!(chunks.len(), 3, "role chunk and two content chunks");
    assert!(chunks.iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
    assert!(!openai_text(&stream).is_empty());

    let stream = mock.stream("cut=3~chunks=8", MESSAGES, &messages_stream("c")).await;
    assert!(!stream.clean_end, "the body ended cleanly");
    let names = anthropic_names(&stream);
    assert_eq!(names.iter().filter(|n| **n == "content_block_delta").count(), 3);
    assert!(!names.contains(&"message_stop") && !names.contains(&"content_block_stop"));
}

#[tokio::test]
async fn cut_without_stream_sends_a_truncated_body() {
    let mock = Mock::start().await;
    for (endpoint, body) in [(CHAT, chat("m")), (MESSAGES, messages("c"))] {
        let response =
            mock.client.post(mock.url("cut=1", endpoint)).body(body.to_string()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let announced = response.content_length().unwrap();
        assert!(announced > 0);
        assert!(response.bytes().await.is_err(), "{endpoint}: the truncated body read as complete");
    }
}

#[tokio::test]
async fn latency_delays_the_answer() {
    let mock = Mock::start().await;
    for (endpoint, body) in [(CHAT, chat("m")), (MESSAGES, messages("c"))] {
        let started = Instant::now();
        let reply = mock.post("ok~latency=150ms", endpoint, &body).await;
        let took = started.elapsed();
        assert_eq!(reply.status, StatusCode::OK);
        assert!(took >= Duration::from_millis(150), "{endpoint}: answered after {took:?}");
        assert!(took < Duration::from_secs(5));
    }
    let started = Instant::now();
    let reply = mock.post("status=503~latency=100ms", CHAT, &chat("m")).await;
    assert_eq!(reply.status.as_u16(), 503);
    assert!(started.elapsed() >= Duration::from_millis(100));
}

#[tokio::test]
async fn steps_are_consumed_in_order_and_the_last_repeats() {
    let mock = Mock::start().await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(mock.post("status=500,ratelimit=1,ok", CHAT, &chat("m")).await.status.as_u16());
    }
    assert_eq!(statuses, [500, 429, 200, 200, 200]);
    // The counter belongs to the scenario string, shared across endpoints.
    let mut statuses = Vec::new();
    statuses.push(mock.post("fail503,ok", CHAT, &chat("m")).await.status.as_u16());
    statuses.push(mock.post("fail503,ok", MESSAGES, &messages("c")).await.status.as_u16());
    statuses.push(mock.post("status=503,ok", MESSAGES, &messages("c")).await.status.as_u16());
    assert_eq!(statuses, [503, 200, 503]);
}

#[tokio::test]
async fn loop_cycles_the_steps() {
    let mock = Mock::start().await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(mock.post("fail500,ok,ok,loop", CHAT, &chat("m")).await.status.as_u16());
    }
    assert_eq!(statuses, [500, 200, 200, 500, 200, 200]);
}

#[tokio::test]
async fn reset_endpoint_restarts_every_scenario() {
    let mock = Mock::start().await;
    assert_eq!(mock.post("fail500,ok", CHAT, &chat("m")).await.status.as_u16(), 500);
    assert_eq!(mock.post("fail500,ok", CHAT, &chat("m")).await.status.as_u16(), 200);
    let reset = mock.client.post(format!("{}/_reset", mock.base)).send().await.unwrap();
    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(mock.stats().await["scenarios"], json!({}));
    assert_eq!(mock.post("fail500,ok", CHAT, &chat("m")).await.status.as_u16(), 500);
}

#[tokio::test]
async fn stats_report_counts_and_the_last_request_as_received() {
    let mock = Mock::start().await;
    mock.post("ok", CHAT, &chat("first")).await;
    let response = mock
        .client
        .post(mock.url("ok", MESSAGES))
        .header("x-api-key", "sk-ant-second")
        .header("anthropic-version", "2023-06-01")
        .body(messages("second").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    mock.post("fail500", CHAT, &chat("third")).await;

    let stats = mock.stats().await;
    assert_eq!(stats["requests"], 3);
    let ok = &stats["scenarios"]["ok"];
    assert_eq!(ok["requests"], 2);
    let last = &ok["last_request"];
    assert_eq!(last["method"], "POST");
    assert_eq!(last["path"], "/v1/messages");
    assert_eq!(last["headers"]["x-api-key"], "sk-ant-second");
    assert_eq!(last["headers"]["anthropic-version"], "2023-06-01");
    assert_eq!(last["json"]["model"], "second");
    assert_eq!(serde_json::from_str::<Value>(last["body"].as_str().unwrap()).unwrap(), messages("second"));
    let failed = &stats["scenarios"]["fail500"];
    assert_eq!(failed["requests"], 1);
    assert_eq!(failed["last_request"]["headers"]["authorization"], "Bearer sk-test");
}

#[tokio::test]
async fn embeddings_return_one_vector_per_input() {
    let mock = Mock::start().await;
    let url = mock.url("ok", "v1/embeddings");
    let body =
        mock.post_url(&url, &json!({"model": "emb", "input": ["a", "b", "c"], "dimensions": 5})).await.json();
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], "emb");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[2]["index"], 2);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 5);

    // The OpenAI SDK asks for base64 by default: little-endian f32s.
    let body =
        mock.post_url(&url, &json!({"model": "emb", "input": "a", "encoding_format": "base64"})).await.json();
    let encoded = body["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(encoded.len() % 4, 0);
    assert_eq!(encoded.len(), (8 * 4usize).div_ceil(3) * 4, "8 floats by default");

    let reply =
        mock.post_url(&mock.url("status=503", "v1/embeddings"), &json!({"model": "emb", "input": "a"})).await;
    assert_openai_error(&reply, 503, "server_error", None);
}

#[tokio::test]
async fn bad_scenarios_and_bodies_are_rejected_in_the_dialect() {
    let mock = Mock::start().await;
    let reply = mock.post("ok~speed=9", CHAT, &chat("m")).await;
    assert_openai_error(&reply, 400, "invalid_request_error", None);
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("unknown modifier `speed=9`"));
    assert_anthropic_error(&mock.post("bogus", MESSAGES, &messages("c")).await, 400, "invalid_request_error");

    let response = mock.client.post(mock.url("ok", CHAT)).body("not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let response = mock.client.post(format!("{}/nowhere", mock.base)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn multi_megabyte_request_bodies_are_read_whole() {
    let mock = Mock::start().await;
    let big = "x".repeat(4 * 1024 * 1024);
    let body = json!({"messages": [{"role": "user", "content": big}], "model": "big", "stream": false});
    let reply = mock.post("ok", CHAT, &body).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["model"], "big");
    let stats = mock.stats().await;
    assert_eq!(
        stats["scenarios"]["ok"]["last_request"]["body"].as_str().unwrap().len(),
        body.to_string().len()
    );
}

#[test]
fn help_names_every_option_and_points_to_the_readme_for_the_scenarios() {
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard-mock")).arg("--help").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for option in ["--listen", "--threads", "--tls-cert", "--tls-key", "crates/switchyard-mock/README.md"] {
        assert!(text.contains(option), "{option} missing from: {text}");
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for step in [
        "`ok`",
        "`tools`",
        "`custom`",
        "`filter`",
        "`think`",
        "`hang`",
        "`reset`",
        "`cut=N`",
        "`noterm`",
        "`badevent=N`",
        "`stall=N`",
        "`keepalive=N`",
        "`errevent=N`",
        "`down=D`",
        "`model429=M`",
        "`noprefill`",
        "`words=N`",
    ] {
        assert!(readme.contains(step), "the README documents {step}");
    }
}
