//! Same-dialect fidelity, in process on loopback: a client of a provider's own dialect is
//! heard by the provider as it wrote (only the model, and what streaming needs, change) and
//! hears the provider as it wrote, byte for byte, streamed or not. Each case sends a request
//! through the gateway to an upstream that records what it received and answers fixed bytes.
//! The whole-answer cases set `stream_upstream: false`, so that the provider writes the whole
//! answer; the last cases stream it upstream (the default) and check the answer the client
//! hears keeps everything the provider's events said.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use support::{CLAUDE_TOOL_TURN, CLAUDE_TOOL_TURN_SSE, in_process};

/// An upstream that records each request body and answers `json` to a request that did not
/// ask to stream, `sse` to one that did.
struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(String, Bytes)>>>,
}

impl Upstream {
    async fn start(json: &str, sse: &str) -> Self {
        let (json, sse) = (Bytes::from(json.to_owned()), Bytes::from(sse.to_owned()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        let router = axum::Router::new().fallback(move |uri: axum::http::Uri, body: Bytes| {
            let (keep, json, sse) = (keep.clone(), json.clone(), sse.clone());
            async move {
                let streaming = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["stream"] == true;
                keep.lock().unwrap().push((uri.path().to_owned(), body));
                let (content_type, answer) =
                    if streaming { ("text/event-stream", sse) } else { ("application/json", json) };
                ([(axum::http::header::CONTENT_TYPE, content_type)], answer)
            }
        });
        let addr = support::serve_router(router).await;
        Self { addr, seen }
    }

    /// The one request received: its path and body as text.
    fn received(&self) -> (String, String) {
        let seen = self.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "requests upstream: {seen:?}");
        (seen[0].0.clone(), String::from_utf8(seen[0].1.to_vec()).unwrap())
    }
}

/// A gateway whose default route is `target` on a provider `up` of `kind` at `upstream`.
async fn gateway(kind: &str, base_path: &str, upstream: &Upstream, target: &str) -> SocketAddr {
    in_process(&format!(
        "providers:\n  up: {{ kind: {kind}, base_url: 'http://{}{base_path}', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['up:{target}'] }}\n",
        upstream.addr
    ))
    .await
}

/// Posts `body` as written to `path`: the response, headers and all.
async fn send(gateway: SocketAddr, path: &str, body: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{gateway}{path}"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// Posts `body` as written to `path` and returns the status and the answer's bytes as text.
async fn post(gateway: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let response = send(gateway, path, body).await;
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// A Chat Completions request with what the canonical types do not model or would reorder:
/// `file` and `input_audio` parts, a `custom` tool, schemas whose key order means something,
/// numbers written in a way a JSON tree would rewrite, and a vendor field.
const OPENAI_REQUEST: &str = r#"{"messages":[{"role":"developer","content":"Answer in JSON."},{"role":"user","content":[{"type":"text","text":"Summarise"},{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}},{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]}],"model":"default","response_format":{"type":"json_schema","json_schema":{"name":"out","strict":true,"schema":{"type":"object","properties":{"reasoning":{"type":"string"},"answer":{"type":"string"}},"required":["reasoning","answer"],"additionalProperties":false}}},"tools":[{"type":"custom","custom":{"name":"code_exec","description":"Runs code","format":{"type":"text"}}},{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"z":{"type":"number"},"a":{"type":"number"}}},"strict":true}}],"temperature":1.0,"max_completion_tokens":100,"x_vendor_hint":{"keep":1.50}}"#;

/// An answer with a refusal, usage details and fields the canonical types do not model.
const OPENAI_ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1733000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that.","annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":9,"total_tokens":1209,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#;

/// A stream: role, text, a refusal fragment, the finish, then the usage chunk (with details
/// Switchyard does not model).
const OPENAI_EVENTS: [&str; 5] = [
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\" No.\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"rejected_prediction_tokens\":3}}}\n\n",
];

/// The whole stream as the provider writes it.
fn openai_sse() -> String {
    OPENAI_EVENTS.concat() + "data: [DONE]\n\n"
}

#[tokio::test]
async fn an_openai_client_and_an_openai_provider_hear_each_other_byte_for_byte() {
    let upstream = Upstream::start(OPENAI_ANSWER, &openai_sse()).await;
    let gateway = gateway("openai", "/v1", &upstream, "gpt-4o").await;
    let (status, answer) = post(gateway, "/v1/chat/completions", OPENAI_REQUEST).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, OPENAI_ANSWER);
    let (path, received) = upstream.received();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(received, OPENAI_REQUEST.replacen(r#""model":"default""#, r#""model":"gpt-4o""#, 1));
}

#[tokio::test]
async fn an_openai_stream_reaches_the_client_as_written_with_the_usage_chunk_only_when_asked() {
    let asked = r#"{"model":"default","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"logprobs":false}"#;
    let not_asked =
        r#"{"model":"default","stream":true,"messages":[{"role":"user","content":"hi"}],"logprobs":false}"#;
    for (body, usage_chunk) in [(asked, true), (not_asked, false)] {
        let upstream = Upstream::start(OPENAI_ANSWER, &openai_sse()).await;
        let gateway = gateway("openai", "/v1", &upstream, "gpt-4o").await;
        let (status, events) = post(gateway, "/v1/chat/completions", body).await;
        assert_eq!(status, 200, "{events}");
        let mut expected: String = OPENAI_EVENTS[..4].concat();
        if usage_chunk {
            expected.push_str(OPENAI_EVENTS[4]);
        }
        expected.push_str("data: [DONE]\n\n");
        assert_eq!(events, expected, "include_usage asked: {usage_chunk}");
        // The gateway asks for usage either way (cost and token budgets need it), and changes
        // nothing else.
        let (_, received) = upstream.received();
        let expected = match usage_chunk {
            true => asked.replacen("default", "gpt-4o", 1),
            false => not_asked.replacen("default", "gpt-4o", 1).replacen(
                r#""logprobs":false}"#,
                r#""logprobs":false,"stream_options":{"include_usage":true}}"#,
                1,
            ),
        };
        assert_eq!(received, expected);
    }
}

/// A Messages request with a document, an earlier turn's thinking (with its signature, which
/// the provider checks), cache control, extended thinking and a schema with meaningful order.
const ANTHROPIC_REQUEST: &str = r#"{"model":"default","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"lookup","description":"Looks up","input_schema":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}},"required":["query"]}}],"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="},"title":"a.pdf","citations":{"enabled":true}},{"type":"text","text":"What does it say?"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"The user wants a summary.","signature":"EqQBCkYIBxgCKkB"},{"type":"redacted_thinking","data":"EmwKAhgBEgy3"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"query":"a.pdf"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"nothing found"}]}],"metadata":{"user_id":"u-1"}}"#;

/// An answer with thinking, a text block with citations and cache usage.
const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"Nothing was found.","signature":"EqQBCkYIBxgCKkC"},{"type":"text","text":"It says nothing.","citations":null}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":1500,"output_tokens":12,"service_tier":"standard"},"container":null}"#;

/// A stream with a thinking block (its deltas and signature), a ping and a text block.
const ANTHROPIC_SSE: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":1500,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Nothing was found.\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCkYIBxgCKkC\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: ping\ndata: {\"type\": \"ping\"}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"It says nothing.\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":1500,\"output_tokens\":12}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

/// An Anthropic answer (or stream) as the client hears it: as the provider wrote it, but for
/// its `model`, which names the model the client asked for (the route, `default`): Claude Code
/// sends a past turn's thinking back only when that turn names the model it asks for now.
fn named_as_asked(written: &str) -> String {
    written.replacen(r#""model":"claude-sonnet-4-5""#, r#""model":"default""#, 1)
}

#[tokio::test]
async fn an_anthropic_client_and_an_anthropic_provider_hear_each_other_byte_for_byte() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(gateway, "/v1/messages", ANTHROPIC_REQUEST).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, named_as_asked(ANTHROPIC_ANSWER));
    let (path, received) = upstream.received();
    assert_eq!(path, "/v1/messages");
    assert_eq!(received, ANTHROPIC_REQUEST.replacen("default", "claude-sonnet-4-5", 1));
}

#[tokio::test]
async fn an_anthropic_stream_with_thinking_reaches_the_client_as_written() {
    const STREAMED: &str = r#"{"stream":true,"model":"default","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"The sky is green."}},{"type":"text","text":"What colour?"}]}]}"#;
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, events) = post(gateway, "/v1/messages", STREAMED).await;
    assert_eq!(status, 200, "{events}");
    assert_eq!(events, named_as_asked(ANTHROPIC_SSE));
    let (_, received) = upstream.received();
    assert_eq!(received, STREAMED.replacen("default", "claude-sonnet-4-5", 1));
}

#[tokio::test]
async fn what_the_gateway_observes_of_a_verbatim_answer_still_steers_the_route() {
    // The provider's own content filter stops the first answer: the content-policy chain
    // serves the request, and the client hears the second provider's answer as it wrote it.
    const FILTERED: &str = r#"{"id":"c0","object":"chat.completion","created":1,"model":"a","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}"#;
    let filtering = Upstream::start(FILTERED, "").await;
    let serving = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = in_process(&format!(
        "providers:\n  a: {{ kind: openai, base_url: 'http://{}/v1', api_key: sk-a-0123456789 }}\n  b: {{ kind: openai, base_url: 'http://{}/v1', api_key: sk-b-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: [a:m], content_policy: [b:n] }}\n",
        filtering.addr, serving.addr
    ))
    .await;
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", body).await;
    assert_eq!((status, answer.as_str()), (200, OPENAI_ANSWER));
    assert_eq!(filtering.received().1, body.replacen("default", "m", 1));
    assert_eq!(serving.received().1, body.replacen("default", "n", 1));
}

#[tokio::test]
async fn a_document_in_a_tool_result_reaches_an_anthropic_provider_as_written_and_openai_in_a_user_message() {
    // Claude Code's Read of a PDF: the document comes back inside the tool's result.
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"Read a.pdf"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"a.pdf"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}},{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}]}"#;
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let claude = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(claude, "/v1/messages", body).await;
    assert_eq!((status, answer), (200, named_as_asked(ANTHROPIC_ANSWER)));
    assert_eq!(upstream.received().1, body.replacen("default", "claude-sonnet-4-5", 1));

    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let openai = gateway("openai", "/v1", &gpt, "gpt-4o").await;
    let (status, answer) = post(openai, "/v1/messages", body).await;
    // An image by an Anthropic file id has no Chat Completions form: refused, by name.
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("messages[2].content[1] is a `image` part"), "by name: {answer}");
    assert!(gpt.seen.lock().unwrap().is_empty());
    // The PDF alone goes to OpenAI as a file, in a user message after the tool's (whose
    // message takes only text there).
    let pdf_only = body.replace(r#",{"type":"image","source":{"type":"file","file_id":"file_1"}}"#, "");
    let (status, answer) = post(openai, "/v1/messages", &pdf_only).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&gpt.received().1).unwrap();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(
        (messages[2]["role"].as_str(), messages[2]["content"].as_str()),
        (Some("tool"), Some("The result is in the next message."))
    );
    assert_eq!(messages[3]["role"], "user");
    assert_eq!(messages[3]["content"][1]["type"], "file", "{sent}");
    assert_eq!(messages[3]["content"][1]["file"]["file_data"], "data:application/pdf;base64,JVBERi0=");
}

/// `body` as Claude receives it after a tool turn another model answered: the model named, the
/// client's thinking gone, and the clearing of thinking with it.
fn without_thinking(body: &str) -> String {
    body.replacen("default", "claude-sonnet-4-5", 1)
        .replacen(r#""thinking":{"type":"enabled","budget_tokens":1024},"#, "", 1)
        .replacen(
            r#""context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"#,
            "",
            1,
        )
}

#[tokio::test]
async fn a_tool_turn_another_model_answered_goes_on_to_claude_without_the_clients_thinking() {
    // Claude Code, thinking on, after a fallback of another kind answered its last tool turn:
    // that turn opens on no thinking block, which Anthropic refuses while thinking is on.
    let body = r#"{"model":"default","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]}"#;
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let claude = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(claude, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    // Clearing thinking needs thinking on: it goes with it.
    let expected = without_thinking(body);
    assert_eq!(upstream.received().1, expected, "the rest as the client wrote it");
}

#[tokio::test]
async fn a_call_without_words_reaches_an_openai_client_with_content_and_refusal_null_as_openai_writes_it() {
    const CALL: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":12}}"#;
    let claude = Upstream::start(CALL, "").await;
    let gateway = gateway("anthropic", "", &claude, "claude-sonnet-4-5").await;
    let body = r#"{"model":"default","messages":[{"role":"user","content":"Weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let message = answer["choices"][0]["message"].as_object().unwrap();
    assert_eq!(
        (message.get("content"), message.get("refusal")),
        (Some(&serde_json::Value::Null), Some(&serde_json::Value::Null)),
        "{answer}"
    );
    assert_eq!(message["tool_calls"][0]["function"]["arguments"], r#"{"city":"Paris"}"#);
}

#[tokio::test]
async fn an_anthropic_clients_structured_output_and_one_call_at_a_time_reach_an_openai_provider() {
    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = gateway("openai", "/v1", &gpt, "gpt-4o").await;
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"Weather?"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}}}"#;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&gpt.received().1).unwrap();
    assert_eq!(sent["parallel_tool_calls"], false, "{sent}");
    let format = &sent["response_format"];
    assert_eq!(
        (&format["type"], &format["json_schema"]["strict"]),
        (&serde_json::json!("json_schema"), &serde_json::json!(true)),
        "{sent}"
    );
    assert_eq!(format["json_schema"]["schema"]["required"], serde_json::json!(["city"]), "{sent}");
    assert!(sent.get("output_config").is_none(), "{sent}");

    // A schema with an optional property, which OpenAI's strict mode refuses: asked not strict.
    let optional = body.replacen(r#""required":["city"],"#, "", 1);
    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = self::gateway("openai", "/v1", &gpt, "gpt-4o").await;
    let (status, answer) = post(gateway, "/v1/messages", &optional).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&gpt.received().1).unwrap();
    assert_eq!(sent["response_format"]["type"], "json_schema", "{sent}");
    assert_eq!(sent["response_format"]["json_schema"].get("strict"), None, "{sent}");
}

#[tokio::test]
async fn an_anthropic_clients_top_k_reaches_a_compatible_server_and_fields_it_cannot_read_are_named() {
    let server = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = gateway("openai_compatible", "/v1", &server, "qwen3").await;
    let body = r#"{"model":"default","max_tokens":64,"top_k":5,"container":"c-1","vendor_knob":{"x":1},"metadata":{"user_id":"u-1"},"messages":[{"role":"user","content":"Hi"}]}"#;
    let response = send(gateway, "/v1/messages", body).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let sent: serde_json::Value = serde_json::from_str(&server.received().1).unwrap();
    assert_eq!(sent["top_k"], 5, "{sent}");
    for unread in ["container", "vendor_knob", "metadata"] {
        assert!(sent.get(unread).is_none(), "{unread}: {sent}");
    }
    let record: serde_json::Value =
        reqwest::get(format!("http://{gateway}/admin/requests/{id}")).await.unwrap().json().await.unwrap();
    assert_eq!(
        record["attempts"][0]["note"],
        "the parameter(s) container, vendor_knob were not sent: only a provider spoken to in Anthropic's Messages API reads them",
        "named, but not `metadata`, which no answer depends on: {record}"
    );

    // OpenAI itself has no `top_k`: the route's only target cannot take the request.
    let openai = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = self::gateway("openai", "/v1", &openai, "gpt-4o").await;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("`top_k` has no equivalent in OpenAI's Chat Completions API"), "{answer}");
    assert!(openai.seen.lock().unwrap().is_empty(), "nothing sent");
}

#[tokio::test]
async fn a_failed_tool_result_reaches_openai_said_as_an_error() {
    // Chat Completions has no `is_error`: without a word, the model reads a failure as the result.
    let openai = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = gateway("openai", "/v1", &openai, "gpt-4o").await;
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"6 times 7?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"multiply","input":{"a":6,"b":7}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","is_error":true,"content":"overflow"},{"type":"tool_result","tool_use_id":"toolu_b","content":"42"}]}]}"#;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&openai.received().1).unwrap();
    let tools: Vec<&serde_json::Value> =
        sent["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools[0]["content"], "Error: overflow", "{sent}");
    assert_eq!(tools[1]["content"], "42", "a result that did not fail is as it was: {sent}");
}

#[tokio::test]
async fn a_documents_context_reaches_openai_after_the_file() {
    let openai = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = gateway("openai", "/v1", &openai, "gpt-4o").await;
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="},"title":"Q3 report","context":"All figures are in EUR thousands"},{"type":"text","text":"Revenue?"}]}]}"#;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&openai.received().1).unwrap();
    let content = &sent["messages"][0]["content"];
    assert_eq!(content[0]["file"]["filename"], "Q3 report", "{sent}");
    assert_eq!(
        content[1],
        serde_json::json!({"type": "text", "text": "About the document above: All figures are in EUR thousands"})
    );
    assert_eq!(content[2]["text"], "Revenue?", "{sent}");
}

#[tokio::test]
async fn an_anthropic_clients_prefill_reaches_only_a_server_that_continues_one() {
    // Answered anew, the answer would be joined to the client's prefix: `{"answer":Hello`.
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"JSON, please."},{"role":"assistant","content":"{\"answer\":"}]}"#;
    for kind in ["openai", "openai_compatible"] {
        let server = Upstream::start(OPENAI_ANSWER, "").await;
        let gateway = gateway(kind, "/v1", &server, "gpt-4o").await;
        let (status, answer) = post(gateway, "/v1/messages", body).await;
        assert_eq!(status, 400, "{kind}: {answer}");
        assert!(answer.contains("ends on an assistant turn (a prefill"), "{answer}");
        assert!(server.seen.lock().unwrap().is_empty(), "{kind}: nothing sent");
    }
    let server = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = in_process(&format!(
        "providers:\n  up: {{ kind: openai_compatible, base_url: 'http://{}/v1', prefill: true }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['up:qwen3'] }}\n",
        server.addr
    ))
    .await;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "a server that continues a prefill takes it: {answer}");
    let sent: serde_json::Value = serde_json::from_str(&server.received().1).unwrap();
    assert_eq!(sent["messages"][1]["role"], "assistant", "{sent}");
}

#[tokio::test]
async fn an_answer_an_anthropic_client_cannot_be_written_is_a_502_that_keeps_its_attempt() {
    // GPT-5's free-form tool call has no form in the Messages API.
    let custom = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#;
    let gpt = Upstream::start(custom, "").await;
    let gateway = gateway("openai", "/v1", &gpt, "gpt-5").await;
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"Patch it"}]}"#;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 502, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["type"], "api_error", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("tool_calls[0]"), "{answer}");
    let attempts = &answer["switchyard"]["attempts"];
    assert_eq!(
        (attempts[0]["target"].as_str(), attempts[0]["outcome"].as_str()),
        (Some("up:gpt-5"), Some("ok")),
        "{answer}"
    );
}

#[tokio::test]
async fn a_part_only_the_clients_dialect_knows_is_refused_by_a_provider_of_another_naming_it() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let file = r#"{"model":"default","messages":[{"role":"user","content":[{"type":"text","text":"Summarise"},{"type":"file","file":{"file_id":"file-1"}}]}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", file).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("`messages[0].content[1]` is a `file` part"), "{answer}");
    let tool = r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"custom","custom":{"name":"x"}}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", tool).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("`tools[0].type` is `custom`"), "{answer}");
    assert!(upstream.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_target_that_cannot_express_the_request_is_skipped_and_when_none_can_the_answer_is_a_400_naming_it()
{
    let claude = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let providers = format!(
        "providers:\n  claude: {{ kind: anthropic, base_url: 'http://{}', api_key: sk-ant-0123456789 }}\n  gpt: {{ kind: openai, base_url: 'http://{}/v1', api_key: sk-gpt-0123456789 }}\n",
        claude.addr, gpt.addr
    );
    let gateway = in_process(&format!(
        "{providers}routes:\n  default: {{ stream_upstream: false, targets: [claude:c, gpt:g] }}\n  only-claude: {{ stream_upstream: false, targets: [claude:c] }}\n"
    ))
    .await;
    // Two choices: Anthropic answers one, so its target is skipped, unasked, and unharmed.
    let two = r#"{"model":"default","n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let response = send(gateway, "/v1/chat/completions", two).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-switchyard-target"], "gpt:g");
    assert_eq!(response.headers()["x-switchyard-attempts"], "2");
    assert_eq!(response.text().await.unwrap(), OPENAI_ANSWER);
    assert!(claude.seen.lock().unwrap().is_empty());
    assert_eq!(gpt.received().1, two.replacen("default", "g", 1));

    let (status, answer) =
        post(gateway, "/v1/chat/completions", &two.replacen("default", "only-claude", 1)).await;
    assert_eq!(status, 400, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no target of route `only-claude` can serve this request: claude:c: `n`"),
        "{message}"
    );
    assert_eq!(answer["switchyard"]["attempts"][0]["outcome"], "skipped_unsupported");
    assert!(claude.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn count_tokens_is_answered_by_the_routes_first_target_that_counts_as_it_wrote() {
    const COUNT: &str = r#"{"input_tokens":2095}"#;
    let claude = Upstream::start(COUNT, "").await;
    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let gateway = in_process(&format!(
        "providers:\n  gpt: {{ kind: openai, base_url: 'http://{}/v1', api_key: sk-gpt-0123456789 }}\n  claude: {{ kind: anthropic, base_url: 'http://{}', api_key: sk-ant-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: [gpt:g, claude:c] }}\n  only-gpt: {{ stream_upstream: false, targets: [gpt:g] }}\n",
        gpt.addr, claude.addr
    ))
    .await;
    // As the SDKs send it: no max_tokens, which counting refuses.
    let body = r#"{"model":"default","system":"Be brief.","messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}],"tools":[{"name":"t","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024}}"#;
    let (status, answer) = post(gateway, "/v1/messages/count_tokens", body).await;
    assert_eq!((status, answer.as_str()), (200, COUNT));
    let (path, received) = claude.received();
    assert_eq!(path, "/v1/messages/count_tokens");
    assert_eq!(received, body.replacen("default", "c", 1));
    assert!(gpt.seen.lock().unwrap().is_empty());

    // A route where nothing counts answers the gateway's estimate, said to be one: the
    // characters of the names and texts at four a token, an image as 1,600.
    let count = |body: String| async move {
        let response = send(gateway, "/v1/messages/count_tokens", &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-switchyard-target"], "candidate estimate");
        let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
        let answer: serde_json::Value = response.json().await.unwrap();
        (answer["input_tokens"].as_u64().unwrap(), id)
    };
    let hello = r#"{"model":"only-gpt","messages":[{"role":"user","content":"hello world"}]}"#;
    // role 4 + user 4 + content 7 + hello world 11 = 26 characters.
    let (tokens, id) = count(hello.to_owned()).await;
    assert_eq!(tokens, 7);
    let image = format!(
        r#"{{"model":"only-gpt","messages":[{{"role":"user","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}]}}]}}"#,
        "A".repeat(40_000)
    );
    let (tokens, _) = count(image).await;
    assert!((1600..1700).contains(&tokens), "an image is its size, not its base64: {tokens}");
    assert!(gpt.seen.lock().unwrap().is_empty());
    // The trail says why no target counted.
    let record: serde_json::Value =
        reqwest::get(format!("http://{gateway}/admin/requests/{id}")).await.unwrap().json().await.unwrap();
    assert_eq!(record["attempts"][0]["outcome"], "skipped_unsupported", "{record}");
    assert_eq!(record["fallback"], false, "nothing of the route could count: no fallback: {record}");
    let metrics = reqwest::get(format!("http://{gateway}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("switchyard_fallbacks_total{route=\"only-gpt\"} 0\n"), "{metrics}");
    assert!(
        record["attempts"][0]["error"]["detail"].as_str().unwrap().contains("do not count tokens"),
        "{record}"
    );
}

#[tokio::test]
async fn count_tokens_of_a_tool_turn_another_model_answered_goes_without_the_clients_thinking() {
    // Claude Code counts the conversation it is about to send: the same rule as the call's, or
    // Anthropic refuses the count ("Expected `thinking` ... found `tool_use`").
    const COUNT: &str = r#"{"input_tokens":42}"#;
    let claude = Upstream::start(COUNT, "").await;
    let gateway = gateway("anthropic", "", &claude, "claude-sonnet-4-5").await;
    let body = r#"{"model":"default","thinking":{"type":"enabled","budget_tokens":1024},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]}"#;
    let (status, answer) = post(gateway, "/v1/messages/count_tokens", body).await;
    assert_eq!((status, answer.as_str()), (200, COUNT));
    let expected = without_thinking(body);
    assert_eq!(claude.received(), ("/v1/messages/count_tokens".to_owned(), expected));
}

#[tokio::test]
async fn a_pdf_crosses_dialects_as_a_document_one_way_and_a_file_the_other() {
    // An OpenAI client's inline PDF reaches Anthropic as a document block.
    let claude = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let to_claude = gateway("anthropic", "", &claude, "claude-sonnet-4-5").await;
    let pdf = r#"{"model":"default","messages":[{"role":"user","content":[{"type":"text","text":"Summarise"},{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}}]}]}"#;
    let (status, answer) = post(to_claude, "/v1/chat/completions", pdf).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&claude.received().1).unwrap();
    assert_eq!(
        sent["messages"][0]["content"][1],
        serde_json::json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "a.pdf"})
    );

    // An Anthropic client's PDF document reaches OpenAI as a file part.
    let gpt = Upstream::start(OPENAI_ANSWER, "").await;
    let to_gpt = gateway("openai", "/v1", &gpt, "gpt-4o").await;
    let document = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="},"title":"b.pdf"},{"type":"text","text":"Summarise"}]}]}"#;
    let (status, answer) = post(to_gpt, "/v1/messages", document).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&gpt.received().1).unwrap();
    assert_eq!(
        sent["messages"][0]["content"][0],
        serde_json::json!({"type": "file", "file": {"filename": "b.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}})
    );
    // A plain-text document has no Chat Completions form: the target is skipped, naming it.
    let text = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}"#;
    let (status, answer) = post(to_gpt, "/v1/messages", text).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("is a `document` part"), "{answer}");
    assert!(answer.contains("skipped_unsupported"), "{answer}");
}

#[tokio::test]
async fn an_anthropic_providers_thinking_reaches_an_openai_client_as_reasoning_content() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let chat =
        r#"{"model":"default","max_tokens":2048,"messages":[{"role":"user","content":"What does it say?"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let message = &answer["choices"][0]["message"];
    assert_eq!(message["content"], "It says nothing.");
    assert_eq!(message["reasoning_content"], "Nothing was found.", "{answer}");
    // The block itself, signed, in LiteLLM's form: what the client sends back next turn.
    let signed = serde_json::json!([{"type": "thinking", "thinking": "Nothing was found.", "signature": "EqQBCkYIBxgCKkC"}]);
    assert_eq!(message["thinking_blocks"], signed, "{answer}");

    let streamed = chat.replacen('{', r#"{"stream":true,"#, 1);
    let (status, events) = post(gateway, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200, "{events}");
    let deltas: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str::<serde_json::Value>(data).unwrap())
        .filter_map(|chunk| chunk["choices"].get(0).map(|choice| choice["delta"].clone()))
        .collect();
    let reasoning: Vec<_> = deltas.iter().filter_map(|d| d["reasoning_content"].as_str()).collect();
    assert_eq!(reasoning, ["Nothing was found."], "{events}");
    let blocks: Vec<_> = deltas.iter().filter(|d| d["thinking_blocks"].is_array()).collect();
    assert_eq!(blocks.len(), 1, "once, when signed: {events}");
    assert_eq!(blocks[0]["thinking_blocks"], signed, "{events}");
    // Reasoning first, then the answer, as the model wrote them.
    let first_reasoning = deltas.iter().position(|d| d["reasoning_content"].is_string()).unwrap();
    let first_text = deltas.iter().position(|d| d["content"] == "It says nothing.").unwrap();
    assert!(first_reasoning < first_text, "{events}");
}

#[tokio::test]
async fn an_openai_client_that_thinks_through_claude_continues_its_tool_turn_with_the_signed_block() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-opus-4-7").await;
    // The second turn of a tool loop, as a client sends it after keeping the first answer's
    // `thinking_blocks` on its assistant message.
    let turn = r#"{"model":"default","reasoning_effort":"high","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"reasoning_content":"Need the tool.","thinking_blocks":[{"type":"thinking","thinking":"Need the tool.","signature":"EqQBCgIYAhIM"}],"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"toolu_1","content":"18C"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", turn).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    assert_eq!(sent["thinking"], serde_json::json!({"type": "adaptive", "display": "summarized"}), "{sent}");
    assert_eq!(sent["output_config"], serde_json::json!({"effort": "high"}), "{sent}");
    let assistant = &sent["messages"][1];
    assert_eq!(
        assistant["content"][0],
        serde_json::json!({"type": "thinking", "thinking": "Need the tool.", "signature": "EqQBCgIYAhIM"}),
        "the turn opens on the block it was thought in: {sent}"
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use", "{sent}");
}

#[tokio::test]
async fn claude_thinks_on_through_a_tool_turn_a_client_sent_back_without_its_thinking() {
    // Most clients of OpenAI's API keep no `thinking_blocks`: the gateway kept them.
    for stream in [false, true] {
        let upstream = Upstream::start(CLAUDE_TOOL_TURN, CLAUDE_TOOL_TURN_SSE).await;
        let gateway = gateway("anthropic", "", &upstream, "claude-opus-4-7").await;
        let tools =
            r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]"#;
        let first = format!(
            r#"{{"model":"default","stream":{stream},"reasoning_effort":"high","messages":[{{"role":"user","content":"Weather?"}}],"tools":{tools}}}"#
        );
        let (status, answer) = post(gateway, "/v1/chat/completions", &first).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("toolu_1"), "{answer}");
        // The client sends the turn back as the OpenAI SDK keeps it: content and calls alone.
        let second = format!(
            r#"{{"model":"default","reasoning_effort":"high","messages":[{{"role":"user","content":"Weather?"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"toolu_1","type":"function","function":{{"name":"get_weather","arguments":"{{\"city\":\"Paris\"}}"}}}}]}},{{"role":"tool","tool_call_id":"toolu_1","content":"18C"}}],"tools":{tools}}}"#
        );
        let (status, answer) = post(gateway, "/v1/chat/completions", &second).await;
        assert_eq!(status, 200, "{answer}");
        let seen = upstream.seen.lock().unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&seen[1].1).unwrap();
        let assistant = &sent["messages"][1];
        assert_eq!(
            assistant["content"][0],
            serde_json::json!({"type": "thinking", "thinking": "Need the tool.", "signature": "EqQBCgIYAhIM"}),
            "stream {stream}: {sent}"
        );
        assert!(sent.get("thinking").is_some(), "thinking goes on: {sent}");
    }
}

#[tokio::test]
async fn claudes_thinking_blocks_sent_back_do_not_reach_an_openai_provider() {
    // A conversation that began on Claude falls over to OpenAI: the signed blocks the gateway
    // handed out mean nothing there (OpenAI refuses unknown message fields).
    let upstream = Upstream::start(OPENAI_ANSWER, &openai_sse()).await;
    let gateway = gateway("openai", "/v1", &upstream, "gpt-4o").await;
    let turn = r#"{"model":"default","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"Sunny.","thinking_blocks":[{"type":"thinking","thinking":"Look.","signature":"EqQB"}],"x_note":1},{"role":"user","content":"Sure?"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", turn).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    let assistant = &sent["messages"][1];
    assert!(assistant.get("thinking_blocks").is_none(), "{sent}");
    assert_eq!(
        (&assistant["content"], &assistant["x_note"]),
        (&serde_json::json!("Sunny."), &serde_json::json!(1))
    );
    assert_eq!(sent["model"], "gpt-4o");
}

#[tokio::test]
async fn a_responses_client_carries_claudes_signed_thinking_into_the_next_turn() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-opus-4-7").await;
    let signed = serde_json::json!({"type": "thinking", "thinking": "Nothing was found.", "signature": "EqQBCkYIBxgCKkC"});
    for stream in [false, true] {
        let first = format!(
            r#"{{"model":"default","stream":{stream},"input":"What does it say?","reasoning":{{"effort":"high"}}}}"#
        );
        let (status, answer) = post(gateway, "/v1/responses", &first).await;
        assert_eq!(status, 200, "{answer}");
        let response: serde_json::Value = if stream {
            let completed = answer
                .lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .find(|data| data.contains(r#""type":"response.completed""#));
            serde_json::from_str::<serde_json::Value>(completed.expect("completed")).unwrap()["response"]
                .clone()
        } else {
            serde_json::from_str(&answer).unwrap()
        };
        let reasoning = &response["output"][0];
        assert_eq!(reasoning["type"], "reasoning", "{response}");
        assert_eq!(reasoning["summary"][0]["text"], "Nothing was found.", "{response}");
        let sealed = reasoning["encrypted_content"].as_str().expect("the signed block, sealed");
        assert!(sealed.starts_with("switchyard.claude-thinking.v1:"), "{sealed}");

        // The next turn, continued from the kept response, opens Claude's turn on its block.
        let id = response["id"].as_str().unwrap();
        let next = format!(
            r#"{{"model":"default","previous_response_id":"{id}","input":"And then?","reasoning":{{"effort":"high"}}}}"#
        );
        let (status, answer) = post(gateway, "/v1/responses", &next).await;
        assert_eq!(status, 200, "{answer}");
        let sent = upstream.seen.lock().unwrap().last().unwrap().1.clone();
        let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(sent["messages"][1]["role"], "assistant", "{sent}");
        assert_eq!(sent["messages"][1]["content"][0], signed, "{sent}");
        assert_eq!(sent["messages"][1]["content"][1]["text"], "It says nothing.", "{sent}");
    }
}

#[tokio::test]
async fn what_the_gateway_sealed_is_not_sent_to_openai_which_could_not_read_it() {
    let answer = r#"{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-4o","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}"#;
    let upstream = Upstream::start(answer, "").await;
    let gateway = gateway("openai", "/v1", &upstream, "gpt-4o").await;
    let input = r#"[{"role":"user","content":"Hi"},{"type":"reasoning","id":"rs_a","summary":[],"encrypted_content":"switchyard.claude-thinking.v1:W10"},{"type":"reasoning","id":"rs_b","summary":[],"encrypted_content":"gAAAAB-openai"},{"type":"reasoning","id":"rs_c","summary":[],"encrypted_content":"switchyard.reasoning.v1:eyJtb2RlbCI6InIxIiwidGV4dCI6IkhtbS4ifQ"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Again"}]"#;
    let (status, answer) =
        post(gateway, "/v1/responses", &format!(r#"{{"model":"default","input":{input}}}"#)).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    let ids: Vec<_> =
        sent["input"].as_array().unwrap().iter().filter_map(|item| item["id"].as_str()).collect();
    assert_eq!(ids, ["rs_b"], "OpenAI's own reasoning goes back to it; Claude's and r1's do not: {sent}");
}

#[tokio::test]
async fn a_providers_thinking_setting_names_the_form_for_a_model_whose_name_does_not() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = in_process(&format!(
        "providers:\n  up: {{ kind: anthropic, base_url: 'http://{}', api_key: sk-upstream-0123456789, thinking: budget }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['up:house-claude'] }}\n",
        upstream.addr
    ))
    .await;
    let chat = r#"{"model":"default","reasoning_effort":"low","messages":[{"role":"user","content":"Hi"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    // By its name alone, `house-claude` would be asked to think adaptively.
    assert_eq!(sent["thinking"], serde_json::json!({"type": "enabled", "budget_tokens": 2048}), "{sent}");
}

#[tokio::test]
async fn a_tool_turn_sent_back_without_its_thinking_goes_on_without_thinking() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-opus-4-7").await;
    let turn = r#"{"model":"default","reasoning_effort":"high","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"toolu_1","content":"18C"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;
    let response = send(gateway, "/v1/chat/completions", turn).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    // Anthropic refuses thinking on a tool turn that does not open on its thinking block.
    assert!(sent.get("thinking").is_none(), "{sent}");
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use", "{sent}");
    // The trail says why Claude did not think, though the client asked.
    let record: serde_json::Value =
        reqwest::get(format!("http://{gateway}/admin/requests/{id}")).await.unwrap().json().await.unwrap();
    let note = record["attempts"][0]["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("asked without thinking: the tool turn sent back carries no signed thinking"),
        "{record}"
    );
}

/// A reasoning server's stream: its reasoning, then "42".
fn reasoning_sse() -> String {
    let chunk = |delta: &str| {
        format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"r1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
        )
    };
    [
        chunk(r#"{"role":"assistant","content":null,"reasoning_content":"Six times"}"#),
        chunk(r#"{"reasoning_content":" seven."}"#),
        chunk(r#"{"content":"42"}"#),
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"r1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_owned(),
    ]
    .concat()
}

#[tokio::test]
async fn a_reasoning_servers_thinking_reaches_an_anthropic_client_as_a_block_signed_for_that_model() {
    const WHOLE: &str = r#"{"id":"c1","object":"chat.completion","created":1,"model":"r1","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"Six times seven."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}"#;
    // The server names itself `r1`; the gateway calls it `deepseek-v4-pro`, which signs.
    let upstream = Upstream::start(WHOLE, &reasoning_sse()).await;
    let gateway = gateway("openai_compatible", "/v1", &upstream, "deepseek-v4-pro").await;
    let body =
        r#"{"model":"default","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"6x7?"}]}"#;
    let (status, events) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{events}");
    let thinking = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Six times"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" seven."}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"switchyard.reasoning.v1:deepseek-v4-pro"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
    ];
    let mut from = 0;
    for line in thinking {
        let at = events[from..].find(line).unwrap_or_else(|| panic!("{line} after {from} in {events}"));
        from += at + line.len();
    }

    // Whole, the same block leads the answer.
    let whole = body.replace(r#""stream":true,"#, "");
    let (status, answer) = post(gateway, "/v1/messages", &whole).await;
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        answer["content"][0],
        serde_json::json!({"type": "thinking", "thinking": "Six times seven.", "signature": "switchyard.reasoning.v1:deepseek-v4-pro"}),
        "{answer}"
    );
    assert_eq!(answer["content"][1]["text"], "42", "{answer}");
}

/// An Anthropic client's next turn after a tool call the reasoning server `r1` made while it
/// reasoned: the thinking block it was given, sent back.
const SEALED_TOOL_TURN: &str = r#"{"model":"default","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Need the tool.","signature":"switchyard.reasoning.v1:r1"},{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}"#;

#[tokio::test]
async fn reasoning_sent_back_reaches_the_model_that_wrote_it_and_no_other() {
    // DeepSeek refuses a tool turn sent back without its `reasoning_content`.
    let upstream = Upstream::start(OPENAI_ANSWER, "").await;
    let r1 = gateway("openai_compatible", "/v1", &upstream, "r1").await;
    let (status, answer) = post(r1, "/v1/messages", SEALED_TOOL_TURN).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&upstream.received().1).unwrap();
    let turn = &sent["messages"][1];
    assert_eq!(
        (&turn["role"], &turn["reasoning_content"]),
        (&"assistant".into(), &"Need the tool.".into()),
        "{sent}"
    );

    // Another model of a compatible server did not write it: not sent.
    let upstream = Upstream::start(OPENAI_ANSWER, "").await;
    let other = gateway("openai_compatible", "/v1", &upstream, "qwen3").await;
    let (status, answer) = post(other, "/v1/messages", SEALED_TOOL_TURN).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!upstream.received().1.contains("Need the tool."), "{}", upstream.received().1);

    // Claude would refuse the gateway's signature: the block is left out, and the tool turn,
    // now without thinking, goes on without it, as Anthropic wants.
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let claude = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(claude, "/v1/messages", SEALED_TOOL_TURN).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&upstream.received().1).unwrap();
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use", "{sent}");
    assert!(sent.get("thinking").is_none(), "{sent}");

    // Nor a block cut before it was signed (a stream that broke while Claude thought).
    let cut = SEALED_TOOL_TURN.replace("switchyard.reasoning.v1:r1", "");
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let claude = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(claude, "/v1/messages", &cut).await;
    assert_eq!(status, 200, "{answer}");
    let sent: serde_json::Value = serde_json::from_str(&upstream.received().1).unwrap();
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use", "{sent}");
}

#[tokio::test]
async fn a_responses_client_carries_a_reasoning_servers_thinking_back_to_it_through_a_tool_turn() {
    // Codex in front of DeepSeek: the tool turn it sends back must carry its reasoning_content.
    const CALL: &str = r#"{"id":"c1","object":"chat.completion","created":1,"model":"r1","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"Need the tool.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}"#;
    // The server names itself `r1`; the gateway calls it `deepseek-v4-pro`.
    let upstream = Upstream::start(CALL, "").await;
    let gateway = gateway("openai_compatible", "/v1", &upstream, "deepseek-v4-pro").await;
    let tools = r#"[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]"#;
    let first = format!(r#"{{"model":"default","store":false,"input":"Weather?","tools":{tools}}}"#);
    let (status, answer) = post(gateway, "/v1/responses", &first).await;
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let output = answer["output"].as_array().unwrap();
    assert_eq!(
        (&output[0]["type"], &output[1]["type"]),
        (&"reasoning".into(), &"function_call".into()),
        "{answer}"
    );

    // The client sends its output back, with the tool's result.
    let mut input = vec![serde_json::json!({"role": "user", "content": "Weather?"})];
    input.extend(output.iter().cloned());
    input.push(serde_json::json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"}));
    let second = serde_json::json!({"model": "default", "store": false, "input": input, "tools": serde_json::from_str::<serde_json::Value>(tools).unwrap()});
    let (status, answer) = post(gateway, "/v1/responses", &second.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let seen = upstream.seen.lock().unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&seen[1].1).unwrap();
    let turn = &sent["messages"][1];
    assert_eq!(turn["reasoning_content"], "Need the tool.", "{sent}");
    assert_eq!(turn["tool_calls"][0]["id"], "call_1", "{sent}");
}

/// A DeepSeek in thinking mode: a conversation with an assistant turn sent back without its
/// `reasoning_content` is refused as DeepSeek refuses it; each request's body is kept.
async fn deepseek() -> (SocketAddr, Arc<Mutex<Vec<serde_json::Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let router = axum::Router::new().fallback(move |body: Bytes| {
        let keep = keep.clone();
        async move {
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let lacking = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "assistant" && m.get("reasoning_content").is_none());
            keep.lock().unwrap().push(body);
            let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
            match lacking {
                true => (
                    axum::http::StatusCode::BAD_REQUEST,
                    json,
                    r#"{"error":{"message":"The `reasoning_content` in the thinking mode must be passed back to the API.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
                ),
                false => (axum::http::StatusCode::OK, json, OPENAI_ANSWER),
            }
        }
    });
    let addr = support::serve_router(router).await;
    (addr, seen)
}

#[tokio::test]
async fn a_turn_another_model_wrote_reaches_a_model_that_wants_its_reasoning_back_with_an_empty_one() {
    // Claude Code, its last tool turn answered by Claude after a failover, back on DeepSeek.
    let (addr, seen) = deepseek().await;
    let gateway = in_process(&format!(
        "providers:\n  ds: {{ kind: openai_compatible, base_url: 'http://{addr}/v1', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['ds:deepseek-v4-pro'] }}\n"
    ))
    .await;
    let body = r#"{"model":"default","max_tokens":64,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}"#;
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "refused once, then sent with the turn's reasoning");
        assert_eq!(seen[1]["messages"][1]["reasoning_content"], "", "{}", seen[1]);
    }
    // The model is known to want it since: the next request has it at once.
    let (status, answer) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_gemini_stream_tells_an_anthropic_client_its_input_tokens_at_message_start() {
    // Gemini counts the prompt from its first event on; an OpenAI-dialect server would count
    // only at the end.
    const EVENTS: &str = concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":1,\"totalTokenCount\":13},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lo\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":2,\"totalTokenCount\":14},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}\r\n\r\n",
    );
    let router = axum::Router::new()
        .fallback(|| async { ([(axum::http::header::CONTENT_TYPE, "text/event-stream")], EVENTS) });
    let upstream = support::serve_router(router).await;
    let gateway = in_process(&format!(
        "providers:\n  g: {{ kind: gemini, base_url: 'http://{upstream}/v1beta', api_key: gm-0123456789 }}\nroutes:\n  default: {{ stream_upstream: false, targets: ['g:gemini-2.5-flash'] }}\n"
    ))
    .await;
    let body =
        r#"{"model":"default","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let (status, events) = post(gateway, "/v1/messages", body).await;
    assert_eq!(status, 200, "{events}");
    let data = |name: &str| -> serde_json::Value {
        let frame = events.split("\n\n").find(|f| f.starts_with(&format!("event: {name}\n"))).unwrap();
        serde_json::from_str(frame.split_once("data: ").unwrap().1).unwrap()
    };
    assert_eq!(data("message_start")["message"]["usage"]["input_tokens"], 12, "{events}");
    assert_eq!(data("message_delta")["usage"]["output_tokens"], 2, "{events}");
}

/// The whole answer OPENAI_EVENTS stream, as a client of the dialect hears it.
fn openai_assembled() -> serde_json::Value {
    serde_json::json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "refusal": " No."},
            "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "rejected_prediction_tokens": 3}},
        "system_fingerprint": "fp"})
}

#[tokio::test]
async fn a_whole_answer_streamed_upstream_keeps_what_the_providers_events_said_in_either_dialect() {
    let upstream = Upstream::start(OPENAI_ANSWER, &openai_sse()).await;
    let gateway = in_process(&format!(
        "providers:\n  up: {{ kind: openai, base_url: 'http://{}/v1', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ targets: ['up:gpt-4o'] }}\n",
        upstream.addr
    ))
    .await;
    let (status, answer) = post(gateway, "/v1/chat/completions", OPENAI_REQUEST).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&answer).unwrap(), openai_assembled());
    let sent: serde_json::Value = serde_json::from_str(&upstream.received().1).unwrap();
    assert_eq!(
        (&sent["stream"], &sent["stream_options"]["include_usage"]),
        (&serde_json::json!(true), &serde_json::json!(true))
    );
    assert_eq!(sent["x_vendor_hint"], serde_json::json!({"keep": 1.50}), "the rest as the client wrote it");

    let claude = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = in_process(&format!(
        "providers:\n  up: {{ kind: anthropic, base_url: 'http://{}', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ targets: ['up:claude-sonnet-4-5'] }}\n",
        claude.addr
    ))
    .await;
    let (status, answer) = post(gateway, "/v1/messages", ANTHROPIC_REQUEST).await;
    assert_eq!(status, 200, "{answer}");
    let whole: serde_json::Value = serde_json::from_str(ANTHROPIC_ANSWER).unwrap();
    let assembled: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!((&assembled["type"], &assembled["role"]), (&whole["type"], &whole["role"]));
    assert!(assembled["content"].as_array().is_some_and(|blocks| !blocks.is_empty()), "{assembled}");
    assert!(
        assembled["stop_reason"].is_string() && assembled["usage"]["output_tokens"].is_u64(),
        "{assembled}"
    );
}

/// Claude calling the JSON-mode tool, as it does when `tool_choice` names it.
const JSON_TOOL_ANSWER: &str = r#"{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_9","name":"json_answer","input":{"city":"Paris","rain":false}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":14}}"#;

/// The same call, streamed.
const JSON_TOOL_SSE: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"json_answer\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Par\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"is\\\", \\\"rain\\\": false}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":14}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

#[tokio::test]
async fn an_openai_clients_json_mode_is_answered_by_claude_as_a_json_object_in_its_content() {
    let upstream = Upstream::start(JSON_TOOL_ANSWER, JSON_TOOL_SSE).await;
    let gateway = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let chat = r#"{"model":"default","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"Weather in Paris, as JSON"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    assert_eq!(sent["tool_choice"]["name"], "json_answer", "{sent}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let choice = &answer["choices"][0];
    let content: serde_json::Value =
        serde_json::from_str(choice["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, serde_json::json!({"city": "Paris", "rain": false}), "{answer}");
    assert!(choice["message"]["tool_calls"].is_null(), "{answer}");
    assert_eq!(choice["finish_reason"], "stop", "{answer}");

    let streamed = chat.replacen('{', r#"{"stream":true,"#, 1);
    let (status, events) = post(gateway, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200, "{events}");
    let chunks: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        serde_json::json!({"city": "Paris", "rain": false})
    );
    let finish: Vec<_> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finish, ["stop"], "{events}");
    assert!(!events.contains("tool_calls"), "{events}");
}

/// A gateway whose route `default` is a failing OpenAI-compatible target, then Claude at
/// `upstream`, with `drop_params` as `drop`.
async fn down_then_claude(upstream: &Upstream, drop: bool) -> SocketAddr {
    in_process(&format!(
        "providers:\n  down: {{ kind: simulated, error_rates: {{ unavailable: 1.0 }} }}\n  claude: {{ kind: anthropic, base_url: 'http://{}', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ targets: [down:gpt-4o, claude:claude-sonnet-4-5], retry: {{ max_attempts: 1 }}, drop_params: {drop} }}\n",
        upstream.addr
    ))
    .await
}

/// The attempts of the request the answer `x-request-id` names.
async fn attempts_of(gateway: SocketAddr, id: &str) -> Vec<serde_json::Value> {
    let record: serde_json::Value =
        reqwest::get(format!("http://{gateway}/admin/requests/{id}")).await.unwrap().json().await.unwrap();
    record["attempts"].as_array().unwrap().clone()
}

#[tokio::test]
async fn drop_params_lets_claude_answer_an_openai_request_without_what_it_cannot_express() {
    let chat = r#"{"model":"default","frequency_penalty":0.1,"logit_bias":{"50256":-100},"temperature":0.2,"top_p":0.5,"messages":[{"role":"user","content":"hi"}]}"#;
    // Without it, Claude cannot take the request, and the route has nothing else.
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = down_then_claude(&upstream, false).await;
    let (status, answer) = post(gateway, "/v1/chat/completions", chat).await;
    assert_eq!(status, 502, "{answer}");
    let message: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let message = message["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("skipped claude:claude-sonnet-4-5, which could not take it: `frequency_penalty`"),
        "the 502 says why the fallback was not called: {message}"
    );
    assert!(upstream.seen.lock().unwrap().is_empty());

    let gateway = down_then_claude(&upstream, true).await;
    let response = send(gateway, "/v1/chat/completions", chat).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "It says nothing.");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    // Claude 4.5 takes one of temperature and top_p: the second goes too.
    assert_eq!(sent["temperature"], 0.2, "{sent}");
    for gone in ["frequency_penalty", "logit_bias", "top_p"] {
        assert!(sent.get(gone).is_none(), "{gone} was sent: {sent}");
    }
    let attempts = attempts_of(gateway, &id).await;
    assert_eq!(attempts[1]["outcome"], "ok", "{attempts:?}");
    let note = attempts[1]["note"].as_str().unwrap();
    assert!(
        note.starts_with("drop_params: sent without ")
            && ["frequency_penalty", "logit_bias", "top_p"].iter().all(|p| note.contains(p)),
        "{note}"
    );
    assert!(!note.contains("-100"), "only the names are said: {note}");

    // Streamed, the same, and the same note.
    let streamed = chat.replacen('{', r#"{"stream":true,"#, 1);
    let response = send(gateway, "/v1/chat/completions", &streamed).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let events = response.text().await.unwrap();
    assert!(events.contains("It says nothing."), "{events}");
    let attempts = attempts_of(gateway, &id).await;
    assert!(attempts[1]["note"].as_str().unwrap().contains("frequency_penalty"), "{attempts:?}");
}

#[tokio::test]
async fn drop_params_never_drops_what_shapes_the_answer() {
    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let gateway = down_then_claude(&upstream, true).await;
    let two = r#"{"model":"default","n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", two).await;
    assert_eq!(status, 502, "two choices are not served as one: {answer}");
    // A client's functions are its tools: an answer without them would not call them.
    let functions = r#"{"model":"default","functions":[{"name":"get_weather","parameters":{"type":"object"}}],"function_call":"auto","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, answer) = post(gateway, "/v1/chat/completions", functions).await;
    assert_eq!(status, 502, "{answer}");
    assert!(upstream.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn legacy_function_calling_reaches_an_openai_provider_as_written_and_another_dialect_says_why_not() {
    let chat = r#"{"model":"default","functions":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"function_call":"auto","messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"role":"function","name":"get_weather","content":"21C"}]}"#;
    let upstream = Upstream::start(OPENAI_ANSWER, &openai_sse()).await;
    let openai = gateway("openai_compatible", "/v1", &upstream, "gpt-4o").await;
    let (status, answer) = post(openai, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{answer}");
    let (_, sent) = upstream.received();
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    let written: serde_json::Value = serde_json::from_str(chat).unwrap();
    assert_eq!(sent["messages"], written["messages"], "{sent}");
    assert_eq!(sent["functions"], written["functions"], "{sent}");

    let upstream = Upstream::start(ANTHROPIC_ANSWER, ANTHROPIC_SSE).await;
    let claude = gateway("anthropic", "", &upstream, "claude-sonnet-4-5").await;
    let (status, answer) = post(claude, "/v1/chat/completions", chat).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("`functions` has no equivalent in Anthropic's Messages API"), "{answer}");
    let mut history: serde_json::Value = serde_json::from_str(chat).unwrap();
    history.as_object_mut().unwrap().retain(|key, _| key == "model" || key == "messages");
    let (status, answer) = post(claude, "/v1/chat/completions", &history.to_string()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("messages[2] is a `function` message (OpenAI's legacy function calling)"),
        "{answer}"
    );
    assert!(upstream.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_token_count_refused_for_its_rate_leaves_the_model_to_everyones_chats() {
    // Counts are limited apart from generation: the count's 429 says nothing of the chats.
    let router = axum::Router::new()
        .route(
            "/v1/messages/count_tokens",
            axum::routing::post(|| async {
                let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"count limit"}}"#;
                (axum::http::StatusCode::TOO_MANY_REQUESTS, [("content-type", "application/json")], body)
            }),
        )
        .route(
            "/v1/messages",
            axum::routing::post(|| async { ([("content-type", "application/json")], ANTHROPIC_ANSWER) }),
        );
    let addr = support::serve_router(router).await;
    let gateway = in_process(&format!(
        "providers:\n  claude: {{ kind: anthropic, base_url: 'http://{addr}', api_key: sk-ant-0123456789 }}\n  spare: {{ kind: simulated }}\nroutes:\n  default: {{ stream_upstream: false, targets: [claude:c, spare:m], retry: {{ max_attempts: 1 }} }}\n"
    ))
    .await;
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, _) = post(gateway, "/v1/messages/count_tokens", body).await;
    assert_eq!(status, 200, "the spare counted it");
    let chat = r#"{"model":"default","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let response = send(gateway, "/v1/messages", chat).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-switchyard-target"],
        "claude:c",
        "Claude was not rested for the count's limit: the chat went to it"
    );
}
