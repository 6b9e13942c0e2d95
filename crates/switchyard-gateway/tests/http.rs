//! The HTTP surface, in process on loopback: bad input, auth, error shapes and statuses,
//! headers, streaming, admin and metrics. Upstreams are simulated providers.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use switchyard::route::Route;
use switchyard::simulated::{SimulatedProvider, Step};
use switchyard::{ProviderEntry, Router};
use switchyard_gateway::config;
use switchyard_gateway::logging::{AccessLog, LogFormat};
use switchyard_gateway::server::{AppState, app};

const GATEWAY_KEY: &str = "gw-secret-key-123456";
const ADMIN_KEY: &str = "admin-secret-key-654321";
const PROXY_TOKEN: &str = "proxy-token-from-env-0123456789";

struct Gateway {
    addr: SocketAddr,
    client: reqwest::Client,
}

impl Gateway {
    async fn start(yaml: &str) -> Self {
        let env = |name: &str| match name {
            "GW_KEY" => Some(GATEWAY_KEY.to_owned()),
            "ADMIN_KEY" => Some(ADMIN_KEY.to_owned()),
            "PROXY_TOKEN" => Some(PROXY_TOKEN.to_owned()),
            _ => None,
        };
        let file = config::parse(yaml, false, "test.yaml").unwrap();
        let loaded = config::build(file, config::Source::File("test.yaml".into()), &env).unwrap();
        Self::serve(AppState::new(loaded.router, loaded.gateway)).await
    }

    async fn serve(state: Arc<AppState>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
        Self { addr, client: reqwest::Client::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client.post(self.url(path)).bearer_auth(GATEWAY_KEY).json(&body).send().await.unwrap()
    }

    /// `body` as written (not necessarily JSON), as a JSON request.
    async fn post_text(&self, path: &str, body: &str) -> reqwest::Response {
        let request = self.client.post(self.url(path)).bearer_auth(GATEWAY_KEY);
        let request = request.header("content-type", "application/json").body(body.to_owned());
        request.send().await.unwrap()
    }

    async fn get(&self, path: &str, key: &str) -> reqwest::Response {
        self.client.get(self.url(path)).bearer_auth(key).send().await.unwrap()
    }
}

async fn json_of(response: reqwest::Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

fn chat(model: &str) -> Value {
    json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] })
}

const BASIC: &str = r#"
providers:
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
  up: { kind: simulated, reply: "hello from up" }
routes:
  default:
    targets: [down:m, up:m]
    retry: { max_attempts: 1 }
    health_gate: false
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
  max_body: 2kb
"#;

#[tokio::test]
async fn a_failover_answer_names_the_target_attempts_and_request_id() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway.post("/v1/chat/completions", chat("default")).await;

    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-switchyard-target"], "up:m");
    assert_eq!(headers["x-switchyard-attempts"], "2");
    let id = headers["x-request-id"].to_str().unwrap().to_owned();
    let body = json_of(response).await;
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "hello from up");

    let record = json_of(gateway.get(&format!("/admin/requests/{id}"), ADMIN_KEY).await).await;
    assert_eq!(record["served_by"], "up:m");
    assert_eq!(record["attempts"][0]["outcome"], "failed");
    assert_eq!(record["attempts"][0]["error"]["kind"], "unavailable");
    assert_eq!(record["attempts"][1]["outcome"], "ok");
}

#[tokio::test]
async fn a_providers_header_is_read_from_the_environment_and_never_shown_when_echoed() {
    // A proxy in front of the provider that wants its own token, and quotes what it refused.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = {
        let seen = seen.clone();
        axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let header =
                |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let (token, other) = (header("x-proxy-token"), header("x-tenant-secret"));
            let bearer = header("authorization").trim_start_matches("Bearer ").to_owned();
            seen.lock().unwrap().push(token.clone());
            async move {
                let message =
                    format!("refused x-proxy-token: {token}, x-tenant-secret: {other}, token {bearer}");
                (axum::http::StatusCode::BAD_REQUEST, axum::Json(json!({ "error": { "message": message } })))
            }
        })
    };
    let upstream = support::serve_router(upstream).await;
    let yaml = format!(
        "providers:
  proxied: {{ kind: openai_compatible, base_url: 'http://{upstream}/v1', headers: {{ x-proxy-token: env://PROXY_TOKEN, x-tenant-secret: tenant-LITERAL-0123456789, authorization: 'Bearer gw-BEARER-0123456789' }} }}
routes:
  default: {{ targets: [proxied:m], retry: {{ max_attempts: 1 }} }}
gateway:
  keys: [env://GW_KEY]
  admin_key: env://ADMIN_KEY
"
    );
    let gateway = Gateway::start(&yaml).await;
    let response = gateway.post("/v1/chat/completions", chat("default")).await;
    assert_eq!(response.status(), 400);
    assert_eq!(seen.lock().unwrap().as_slice(), [PROXY_TOKEN], "sent as the environment holds it");
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let answer = response.text().await.unwrap();
    let trail = gateway.get(&format!("/admin/requests/{id}"), ADMIN_KEY).await.text().await.unwrap();
    for text in [answer, trail] {
        assert!(text.contains("refused x-proxy-token: [redacted]"), "{text}");
        assert!(
            !text.contains("from-env") && !text.contains("LITERAL") && !text.contains("BEARER"),
            "a header's secret leaked: {text}"
        );
    }
}

#[tokio::test]
async fn a_request_id_sent_by_the_client_is_kept() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("x-request-id", "client-chosen-42")
        .json(&chat("default"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "client-chosen-42");

    // An id of the gateway's own form is not taken: it may be another request's.
    let first = gateway.post("/v1/chat/completions", chat("default")).await;
    let taken = first.headers()["x-request-id"].to_str().unwrap().to_owned();
    let request = gateway.client.post(gateway.url("/v1/chat/completions")).bearer_auth(GATEWAY_KEY);
    let second = request.header("x-request-id", &taken).json(&chat("default")).send().await.unwrap();
    let given = second.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(given.starts_with("req_") && given != taken, "{given}");
}

#[tokio::test]
async fn fallback_off_returns_the_first_targets_error_with_its_status() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("x-switchyard-fallback", "off")
        .json(&chat("default"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503, "the upstream's status is kept");
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(body["switchyard"]["attempts"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn malformed_json_is_a_400_that_says_where() {
    let gateway = Gateway::start(BASIC).await;
    let response =
        gateway.post_text("/v1/chat/completions", "{\"model\": \"default\", \"messages\": [").await;
    assert_eq!(response.status(), 400);
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], "invalid_json");
    assert!(body["error"]["message"].as_str().unwrap().contains("line 1 column"), "{body}");
}

#[tokio::test]
async fn json_that_is_not_a_request_is_an_invalid_request_in_json_words() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway.post_text("/v1/chat/completions", "[1, 2]").await;
    assert_eq!(response.status(), 400);
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], "invalid_request", "JSON, but not a request: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("expected an object") && !message.contains("struct"), "{message}");
}

#[tokio::test]
async fn a_member_given_twice_is_a_400_that_names_it_on_every_endpoint() {
    // Two readers of one body (the gateway, and a provider it is passed on to) could take
    // different values from it: which model, which limit.
    let gateway = Gateway::start(BASIC).await;
    let cases = [
        (
            "/v1/chat/completions",
            r#"{"model":"default","model":"up:m","messages":[{"role":"user","content":"hi"}]}"#,
        ),
        ("/v1/embeddings", r#"{"model":"default","input":"a","model":"up:m"}"#),
        (
            "/v1/messages",
            r#"{"model":"default","max_tokens":8,"max_tokens":9000,"messages":[{"role":"user","content":"hi"}]}"#,
        ),
        ("/v1/messages/count_tokens", r#"{"model":"default","model":"up:m","messages":[]}"#),
        ("/v1/responses", r#"{"model":"default","input":"hi","model":"up:m"}"#),
    ];
    for (path, body) in cases {
        let response = gateway.post_text(path, body).await;
        assert_eq!(response.status(), 400, "{path}");
        let answer = json_of(response).await;
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("duplicate field `m"), "{path}: {message}");
    }
    // Anything else that is no object is said to be so.
    let response = gateway.post_text("/v1/messages", "[1]").await;
    assert_eq!(response.status(), 400);
    let message = json_of(response).await["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("must be a JSON object"), "{message}");
}

#[tokio::test]
async fn a_member_of_the_wrong_type_is_a_400_that_names_it() {
    let gateway = Gateway::start(BASIC).await;
    let cases = [
        (
            "/v1/chat/completions",
            r#"{"model":"default","messages":[{"role":1,"content":"hi"}]}"#,
            "`messages[0].role`",
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"tool_choice":3}"#,
            "`tool_choice`",
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}"#,
            "`max_tokens`",
        ),
        ("/v1/embeddings", r#"{"model":"default","input":"a","dimensions":"many"}"#, "`dimensions`"),
    ];
    for (path, body, named) in cases {
        let response = gateway.post_text(path, body).await;
        assert_eq!(response.status(), 400, "{body}");
        let answer = json_of(response).await;
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{body}: {message}");
    }
}

#[tokio::test]
async fn a_missing_model_lists_the_valid_names() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway
        .post("/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "hi" }] }))
        .await;
    assert_eq!(response.status(), 400);
    let message = json_of(response).await["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("`model`") && message.contains("default, down:m, up:m"), "{message}");
}

#[tokio::test]
async fn an_unknown_model_is_a_404_listing_the_valid_names() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway.post("/v1/chat/completions", chat("gpt-5")).await;
    assert_eq!(response.status(), 404);
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], "model_not_found");
    assert!(body["error"]["message"].as_str().unwrap().contains("default, down:m, up:m"), "{body}");
    // Counted under no route, not the default route it never reached.
    let metrics = gateway.get("/metrics", ADMIN_KEY).await.text().await.unwrap();
    assert!(
        metrics.contains(
            r#"switchyard_requests_total{endpoint="chat_completions",route="(none)",status="404"} 1"#
        ),
        "{metrics}"
    );
    // And the reload counter's series are there from the start, at 0.
    assert!(metrics.contains(r#"switchyard_config_reloads_total{result="rejected"} 0"#), "{metrics}");

    // A name said back is cut, not echoed whole.
    let long = "m".repeat(1_000);
    let response = gateway.post("/v1/chat/completions", chat(&long)).await;
    assert_eq!(response.status(), 404);
    let message = json_of(response).await["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains(&format!("`{}…`", "m".repeat(200))), "{message}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413() {
    let gateway = Gateway::start(BASIC).await;
    let big = "x".repeat(4096);
    let response = gateway
        .post(
            "/v1/chat/completions",
            json!({ "model": "default", "messages": [{ "role": "user", "content": big }] }),
        )
        .await;
    assert_eq!(response.status(), 413);
    let body = json_of(response).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("2048 bytes"), "{body}");
}

#[tokio::test]
async fn a_content_length_over_the_limit_is_refused_before_the_body_is_sent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gateway = Gateway::start(BASIC).await;
    // A client that waits to be told to send its 50 MB (`Expect: 100-continue`) is told no at
    // once, not `100 Continue`, and the connection closes: the body never comes.
    let mut socket = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {GATEWAY_KEY}\r\ncontent-type: application/json\r\ncontent-length: 52428800\r\nexpect: 100-continue\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(answer.contains("gateway.max_body"), "{answer}");
}

#[tokio::test]
async fn by_default_a_photo_sent_as_base64_fits_and_a_body_over_32_mib_does_not() {
    let gateway =
        Gateway::start("providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\n")
            .await;
    let image = |bytes: usize| {
        let url = format!("data:image/jpeg;base64,{}", "A".repeat(bytes));
        json!({ "model": "default", "messages": [{ "role": "user", "content": [
            { "type": "text", "text": "what is this?" },
            { "type": "image_url", "image_url": { "url": url } }
        ] }] })
    };
    // An ordinary 6 MB photo is 8 MB as base64.
    let response = gateway.post("/v1/chat/completions", image(8 << 20)).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let response = gateway.post("/v1/chat/completions", image(33 << 20)).await;
    assert_eq!(response.status(), 413);
    let body = json_of(response).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("gateway.max_body"), "{body}");
}

#[tokio::test]
async fn a_body_of_more_json_values_than_a_request_needs_is_refused_before_it_is_read() {
    // 2 MB of `{}` in a field no provider reads would take hundreds of megabytes to read.
    let gateway =
        Gateway::start("providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\n")
            .await;
    let empties = vec![json!({}); 600_000];
    let body = json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }], "x": empties });
    let response = gateway.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 413);
    let body = json_of(response).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("more than 500000 JSON values"), "{body}");
}

#[tokio::test]
async fn embeddings_come_back_as_the_client_asked_floats_unwidened_or_base64() {
    let gateway =
        Gateway::start("providers:\n  up: { kind: simulated }\nroutes:\n  default: { targets: [up:m] }\n")
            .await;
    let ask = |format: Option<&str>| {
        let mut body = json!({ "model": "default", "input": ["one", "two"] });
        if let Some(format) = format {
            body["encoding_format"] = json!(format);
        }
        body
    };
    let floats = gateway.post("/v1/embeddings", ask(None)).await;
    assert_eq!(floats.status(), 200);
    let text = floats.text().await.unwrap();
    let floats: Value = serde_json::from_str(&text).unwrap();
    let vector: Vec<f32> = floats["data"][1]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert!(!vector.is_empty());
    // Each number is written as the f32 it is, in its shortest form (at most 9 digits), not
    // widened to f64 (`0.1` as `0.10000000149011612`).
    for number in text
        .split(['[', ',', ']'])
        .filter(|t| t.starts_with('-') || t.starts_with(|c: char| c.is_ascii_digit()))
    {
        let digits = number.chars().filter(char::is_ascii_digit).count();
        if number.contains('.') {
            assert!(digits <= 10, "{number} is wider than an f32");
        }
    }

    // The same vectors as base64, little-endian f32, as OpenAI's Node SDK asks by default.
    let encoded = json_of(gateway.post("/v1/embeddings", ask(Some("base64"))).await).await;
    let bytes = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(encoded["data"][1]["embedding"].as_str().unwrap())
            .unwrap()
    };
    let decoded: Vec<f32> = bytes.chunks(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(decoded, vector);
    assert_eq!(encoded["data"][1]["index"], 1);
    assert_eq!(encoded["object"], "list");

    let refused = gateway.post("/v1/embeddings", ask(Some("int8"))).await;
    assert_eq!(refused.status(), 400);
    let body = json_of(refused).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("encoding_format"), "{body}");

    // Nothing to embed is refused as OpenAI refuses it, whichever provider the route names.
    let empty = gateway.post("/v1/embeddings", serde_json::json!({ "model": "default", "input": [] })).await;
    assert_eq!(empty.status(), 400);
    let body = json_of(empty).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("input is empty"), "{body}");
}

#[tokio::test]
async fn a_wrong_content_type_is_a_415() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("content-type", "text/plain")
        .body(chat("default").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    assert!(json_of(response).await["error"]["message"].as_str().unwrap().contains("text/plain"));

    // A compressed body is named as such, not refused as JSON broken at its first byte.
    let response = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(vec![0x1f, 0x8b, 0x08, 0x00])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let message = json_of(response).await["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("content encoding `gzip`") && message.contains("uncompressed"), "{message}");
}

#[tokio::test]
async fn an_unknown_path_is_a_404_listing_the_endpoints() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway.post("/v1/embed", chat("default")).await;
    assert_eq!(response.status(), 404);
    let body = json_of(response).await;
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("/v1/embed") && message.contains("POST /v1/chat/completions"), "{message}");
    assert!(body["switchyard"].get("request_id").is_none(), "no empty id: {body}");
    // The legacy Completions API is named as what it is.
    let legacy =
        json_of(gateway.post("/v1/completions", json!({"model": "default", "prompt": "hi"})).await).await;
    let message = legacy["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("legacy Completions API") && message.contains("/v1/chat/completions"),
        "{message}"
    );
}

#[tokio::test]
async fn the_api_answers_at_the_bare_address_too_as_clients_given_it_as_their_base_url_ask() {
    let gateway = Gateway::start(BASIC).await;
    let answer = gateway.post("/chat/completions", chat("default")).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-switchyard-target"], "up:m");
    let models = json_of(gateway.get("/models", GATEWAY_KEY).await).await;
    assert_eq!(models["object"], "list", "{models}");
    let one = gateway.get("/models/default", GATEWAY_KEY).await;
    assert_eq!(one.status(), 200);
    let messages =
        json!({"model": "default", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let answer = json_of(gateway.post("/messages", messages).await).await;
    assert_eq!(answer["type"], "message", "{answer}");
    // An unknown model there is refused in Anthropic's shape, as at /v1/messages.
    let unknown = json!({"model": "nope", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let refused = json_of(gateway.post("/messages", unknown).await).await;
    assert_eq!(refused["type"], "error", "{refused}");
    // The key is asked for there as at /v1.
    let keyless =
        gateway.client.post(gateway.url("/chat/completions")).json(&chat("default")).send().await.unwrap();
    assert_eq!(keyless.status(), 401);
    // Azure OpenAI's v1 API: the OpenAI client given `https://<resource>/openai/v1/`.
    let azure_v1 =
        gateway.client.post(gateway.url("/openai/v1/chat/completions")).header("api-key", GATEWAY_KEY);
    let answer = azure_v1.json(&chat("default")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    // LiteLLM's probe paths answer as /healthz and /readyz do.
    for probe in ["/health/liveliness", "/health/readiness"] {
        assert_eq!(gateway.get(probe, "").await.status(), 200, "{probe}");
    }
}

#[tokio::test]
async fn an_azure_openai_client_is_served_its_deployment_as_the_model_with_its_api_key_header() {
    let gateway = Gateway::start(BASIC).await;
    let azure = |path: &str| {
        gateway
            .client
            .post(gateway.url(&format!("/openai/deployments/default/{path}?api-version=2024-10-21")))
            .header("api-key", GATEWAY_KEY)
    };
    // Azure's clients send no `model`: the deployment is it.
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 0.5});
    let answer = azure("chat/completions").json(&body).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-switchyard-target"], "up:m");
    // A body's own model gives way to the deployment's, as on Azure.
    let named = json!({"model": "gpt-unknown", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(azure("chat/completions").json(&named).send().await.unwrap().status(), 200);
    let vectors = azure("embeddings").json(&json!({"input": "hi"})).send().await.unwrap();
    assert_ne!(vectors.status(), 404, "the embeddings path is served");
    // The key is asked for there too, and a wrong one refused.
    let wrong = gateway
        .client
        .post(gateway.url("/openai/deployments/default/chat/completions"))
        .header("api-key", "not-the-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let said = json_of(wrong).await;
    assert!(said["error"]["message"].as_str().unwrap().contains("not valid"), "a key was sent: {said}");
    // A body that is no object is refused as at /v1, not served.
    let list = azure("chat/completions").json(&json!([1, 2])).send().await.unwrap();
    assert_eq!(list.status(), 400);
    // A member's name written with an escape is a name all the same: the deployment still
    // names the model.
    let escaped = r#"{"model":"down:m","us\u0065r":"bob","messages":[{"role":"user","content":"hi"}]}"#;
    let answer = azure("chat/completions").header("content-type", "application/json").body(escaped).send();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-switchyard-target"], "up:m", "the route `default` served it, not down:m");
    // A member given twice is refused, as at /v1.
    let twice = r#"{"messages":[{"role":"user","content":"hi"}],"messages":[]}"#;
    let answer = azure("chat/completions").header("content-type", "application/json").body(twice).send();
    assert_eq!(answer.await.unwrap().status(), 400);
}

#[tokio::test]
async fn a_missing_or_wrong_gateway_key_is_a_401_that_never_echoes_the_key() {
    let gateway = Gateway::start(BASIC).await;
    let missing =
        gateway.client.post(gateway.url("/v1/chat/completions")).json(&chat("default")).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    assert!(json_of(missing).await["error"]["message"].as_str().unwrap().contains("Authorization: Bearer"));

    let wrong_key = "sk-wrong-WRONGKEY-777";
    let wrong = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(wrong_key)
        .json(&chat("default"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let text = wrong.text().await.unwrap();
    assert!(!text.contains("WRONGKEY"), "{text}");

    let via_x_api_key = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .header("x-api-key", GATEWAY_KEY)
        .json(&chat("default"))
        .send()
        .await
        .unwrap();
    assert_eq!(via_x_api_key.status(), 200);
}

#[tokio::test]
async fn admin_endpoints_need_the_admin_key() {
    let gateway = Gateway::start(BASIC).await;
    let refused = gateway.get("/admin/health", GATEWAY_KEY).await;
    assert_eq!(refused.status(), 401);
    let body = json_of(refused).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("the admin key is not valid"), "it names the key it wants: {message}");
    assert_eq!(gateway.get("/admin/health", ADMIN_KEY).await.status(), 200);
}

#[tokio::test]
async fn admin_health_shows_targets_and_masked_credentials_and_reset_clears_them() {
    let gateway = Gateway::start(BASIC).await;
    gateway.post("/v1/chat/completions", chat("default")).await;

    let health = json_of(gateway.get("/admin/health", ADMIN_KEY).await).await;
    let down =
        health["targets"].as_array().unwrap().iter().find(|t| t["target"] == "down:m").unwrap().clone();
    assert_eq!(down["status"], "temporarily_unavailable");
    assert_eq!(down["consecutive_failures"], 1);
    // Without `state:`, health lives in this process alone.
    assert_eq!(health["shared_state"], json!({ "backend": "memory", "status": "ok" }));

    let reset = gateway
        .client
        .post(gateway.url("/admin/health/reset"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "target": "down:m" }))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 200);
    let health = json_of(gateway.get("/admin/health", ADMIN_KEY).await).await;
    let down =
        health["targets"].as_array().unwrap().iter().find(|t| t["target"] == "down:m").unwrap().clone();
    assert_eq!((down["status"].as_str(), down["consecutive_failures"].as_u64()), (Some("unknown"), Some(0)));

    let all =
        gateway.client.post(gateway.url("/admin/health/reset")).bearer_auth(ADMIN_KEY).send().await.unwrap();
    assert_eq!(json_of(all).await["reset"], "all");
    let bad = gateway
        .client
        .post(gateway.url("/admin/health/reset"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "target": "no-colon" }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn models_lists_routes_then_targets() {
    let gateway = Gateway::start(BASIC).await;
    let body = json_of(gateway.get("/v1/models", GATEWAY_KEY).await).await;
    let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["default", "down:m", "up:m"]);
    assert_eq!(body["object"], "list");
}

#[tokio::test]
async fn every_target_rate_limited_is_a_429_with_retry_after() {
    let gateway = Gateway::start(
        r#"
providers:
  a: { kind: simulated, error_rates: { rate_limited: 1.0 } }
  b: { kind: simulated, error_rates: { quota_exceeded: 1.0 } }
routes:
  default: { targets: [a:m, b:m], retry: { max_attempts: 1 } }
"#,
    )
    .await;
    let response = gateway.post("/v1/chat/completions", chat("default")).await;
    assert_eq!(response.status(), 429);
    // When the rate-limited key is used again: its rest (`cooldown_on_rate_limit`, 5 s), not
    // the provider's shorter wait, into which a client's retry would only meet the rest.
    assert_eq!(response.headers()["retry-after"], "5");
    let body = json_of(response).await;
    assert_eq!(body["error"]["code"], "all_targets_failed");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["switchyard"]["attempts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn every_target_timing_out_is_a_504_and_mixed_failures_a_502() {
    let gateway = Gateway::start(
        r#"
providers:
  slow: { kind: simulated, latency: 10s }
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
routes:
  default: { targets: [slow:m], retry: { max_attempts: 1 }, timeouts: { total: 50ms } }
  mixed: { targets: [slow:m, down:m], retry: { max_attempts: 1 }, timeouts: { total: 50ms }, health_gate: false }
"#,
    )
    .await;
    let timed_out = gateway.post("/v1/chat/completions", chat("default")).await;
    assert_eq!(timed_out.status(), 504);
    let mixed = gateway.post("/v1/chat/completions", chat("mixed")).await;
    assert_eq!(mixed.status(), 502);
}

#[tokio::test]
async fn a_stream_ends_with_done_and_carries_the_headers() {
    let gateway = Gateway::start(BASIC).await;
    let mut body = chat("default");
    body["stream"] = json!(true);
    let response = gateway.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-switchyard-target"], "up:m");
    let text = response.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let content: String = events
        .iter()
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(content, "hello from up");
}

#[tokio::test]
async fn a_mid_stream_failure_arrives_as_an_error_event_without_done() {
    let cut = SimulatedProvider::new().reply("abcdefgh").script([Step::CutAfter(2)]);
    let router = Router::builder()
        .provider(ProviderEntry::new("cut", cut))
        .route(Route::builder("default").target("cut:m").build().unwrap())
        .build()
        .unwrap();
    let settings = config::load_demo().unwrap().gateway;
    let log = Arc::new(Mutex::new(Vec::new()));
    let access = AccessLog::to_buffer(LogFormat::Json, log.clone());
    let gateway = Gateway::serve(AppState::with_access_log(router, settings, access)).await;

    let mut body = chat("default");
    body["stream"] = json!(true);
    let response = gateway.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200, "headers were sent before the failure");
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = response.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "transport", "{last}");
    assert_eq!(last["switchyard"]["attempts"][0]["mid_stream"], true);
    assert!(!text.contains("[DONE]"), "a failed stream does not pretend to end well");
    let content: String =
        events.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "abcd");

    let record = json_of(gateway.get(&format!("/admin/requests/{id}"), "").await).await;
    assert_eq!(record["attempts"][0]["outcome"], "failed");

    // The log line keeps the 200 the client received and names what ended the stream.
    let lines = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    let line: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(line["request_id"], id.as_str(), "{line}");
    assert_eq!((line["status"].as_u64(), line["error"].as_str()), (Some(200), Some("transport")), "{line}");
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let gateway = Gateway::start(BASIC).await;
    gateway.post("/v1/chat/completions", chat("default")).await;
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    assert!(
        text.contains(
            "switchyard_requests_total{endpoint=\"chat_completions\",route=\"default\",status=\"200\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "switchyard_attempts_total{target=\"down:m\",outcome=\"failed\",error_kind=\"unavailable\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("switchyard_fallbacks_total{route=\"default\"} 1"), "{text}");
    assert!(text.contains("switchyard_shared_state_up{backend=\"memory\"} 1"), "{text}");
    assert!(
        text.contains("switchyard_target_health{target=\"down:m\",status=\"temporarily_unavailable\"} 1"),
        "{text}"
    );
    assert!(text.contains("# TYPE switchyard_overhead_seconds histogram"), "{text}");
    // What any server's dashboards read: the build, the requests in flight (this scrape
    // itself is not one), the process's start, memory and descriptors.
    let version = env!("CARGO_PKG_VERSION");
    assert!(text.contains(&format!("switchyard_build_info{{version=\"{version}\"}} 1\n")), "{text}");
    assert!(text.contains("switchyard_requests_in_flight 0\n"), "{text}");
    let sample = |name: &str| {
        let line = text
            .lines()
            .find(|line| line.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - 600.0..=now).contains(&sample("process_start_time_seconds")));
    assert!(sample("process_resident_memory_bytes") > 1e6 && sample("process_open_fds") >= 3.0);
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "every sample ends in a number: {line}");
    }
}

#[tokio::test]
async fn embeddings_answer_in_the_openai_shape() {
    let gateway = Gateway::start(BASIC).await;
    let response = gateway.post("/v1/embeddings", json!({ "model": "up:embed", "input": ["a", "b"] })).await;
    assert_eq!(response.status(), 200);
    let body = json_of(response).await;
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["data"][1]["index"], 1);
    assert_eq!(body["data"][0]["object"], "embedding");
}

#[tokio::test]
async fn admin_health_shows_each_paced_providers_allowance() {
    let gateway = Gateway::start(
        r#"
providers:
  paced: { kind: simulated, limits: { max_concurrent: 3, requests_per_minute: 120 } }
routes:
  default: { targets: [paced:m] }
"#,
    )
    .await;
    gateway.post("/v1/chat/completions", chat("default")).await;
    let health = json_of(gateway.get("/admin/health", "").await).await;
    let lane = &health["pacing"][0];
    assert_eq!(lane["provider"], "paced");
    assert_eq!(lane["max_concurrent"], 3);
    assert_eq!(lane["in_flight"], 0);
    let available = lane["requests_available"].as_f64().unwrap();
    assert!((1.0..2.0).contains(&available), "one of a burst of two was spent: {available}");
}

#[tokio::test]
async fn the_counters_an_operator_alerts_on_are_born_at_zero_for_every_route() {
    // A series that appears at 1 hides its first increase from `increase()`.
    let gateway = Gateway::start(
        "providers:\n  a: { kind: simulated }\n  b: { kind: simulated }\nroutes:\n  default: { targets: [a:m, b:m], hedge: { after: 1s } }\n  other: { targets: [a:m] }\n",
    )
    .await;
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    for series in [
        "switchyard_fallbacks_total{route=\"default\"} 0",
        "switchyard_fallbacks_total{route=\"other\"} 0",
        "switchyard_retries_total{route=\"other\"} 0",
        "switchyard_stale_answers_total{route=\"default\"} 0",
        "switchyard_hedges_total{route=\"default\",result=\"won\"} 0",
    ] {
        assert!(text.contains(series), "{series} is missing: {text}");
    }
    assert!(!text.contains("switchyard_hedges_total{route=\"other\""), "no hedge, no hedge series: {text}");
}

#[tokio::test]
async fn targets_named_by_clients_share_one_metric_label() {
    let gateway = Gateway::start(BASIC).await;
    for n in 0..3 {
        gateway.post("/v1/chat/completions", chat(&format!("up:invented-{n}"))).await;
    }
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    assert!(!text.contains("invented"), "{text}");
    assert!(
        text.contains("switchyard_attempts_total{target=\"(unlisted)\",outcome=\"ok\",error_kind=\"\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn the_clients_beta_version_and_idempotency_headers_reach_the_provider_and_its_keys_never_do() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<axum::http::HeaderMap>::new()));
    let keep = seen.clone();
    let upstream = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let keep = keep.clone();
        async move {
            keep.lock().unwrap().push(headers);
            axum::Json(json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await.unwrap() });
    let gateway = Gateway::start(&format!(
        "providers:\n  claude: {{ kind: anthropic, base_url: 'http://{addr}', api_key: sk-ant-upstream-0123456789 }}\nroutes:\n  default: {{ targets: [claude:m] }}\ngateway:\n  keys: [env://GW_KEY]\n"
    ))
    .await;
    let response = gateway
        .client
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GATEWAY_KEY)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "files-api-2025-04-14")
        .header("idempotency-key", "retry-42")
        .header("openai-organization", "org-client")
        .header("openai-project", "proj-client")
        .json(&json!({"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = seen.lock().unwrap()[0].clone();
    assert_eq!(headers["anthropic-beta"], "files-api-2025-04-14");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(headers["idempotency-key"], "retry-42");
    assert_eq!(headers["x-api-key"], "sk-ant-upstream-0123456789", "the provider's key, not the client's");
    assert!(headers.get("openai-organization").is_none() && headers.get("openai-project").is_none());
    assert!(headers.get("authorization").is_none());
    let all = format!("{headers:?}");
    assert!(!all.contains(GATEWAY_KEY), "the gateway key never reaches the upstream: {all}");
}

#[tokio::test]
async fn json_schemas_reach_the_provider_in_the_clients_key_order() {
    // Structured outputs are written in schema order: "reason first, then answer" must not
    // become "answer, then reason" on the way through.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keep = seen.clone();
    let upstream = axum::Router::new().fallback(move |body: String| {
        let keep = keep.clone();
        async move {
            keep.lock().unwrap().push(body);
            axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}]}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await.unwrap() });
    let gateway = Gateway::start(&format!(
        "providers:\n  up: {{ kind: openai, base_url: 'http://{addr}/v1', api_key: sk-upstream-0123456789 }}\nroutes:\n  default: {{ targets: [up:m] }}\ngateway:\n  keys: [env://GW_KEY]\n"
    ))
    .await;
    let schema = r#"{"type":"object","properties":{"reason":{"type":"string"},"answer":{"type":"string"}},"required":["reason","answer"]}"#;
    let body = format!(
        r#"{{"model":"default","messages":[{{"role":"user","content":"why?"}}],
            "response_format":{{"type":"json_schema","json_schema":{{"name":"why","schema":{schema}}}}},
            "tools":[{{"type":"function","function":{{"name":"f","parameters":{schema}}}}}]}}"#
    );
    let response = gateway.post_text("/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    let sent = seen.lock().unwrap()[0].clone();
    let compact: String = sent.split_whitespace().collect();
    assert_eq!(compact.matches(r#""properties":{"reason":{"type":"string"},"answer":"#).count(), 2, "{sent}");
}

#[tokio::test]
async fn admin_health_and_metrics_show_each_targets_recent_latency() {
    let gateway = Gateway::start(
        "providers:\n  slow: { kind: simulated, latency: 40ms }\nroutes:\n  default: { targets: [slow:m] }\ngateway: { keys: [env://GW_KEY], admin_key: env://ADMIN_KEY }\n",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(gateway.post("/v1/chat/completions", chat("default")).await.status(), 200);
    }
    let health = json_of(gateway.get("/admin/health", ADMIN_KEY).await).await;
    let latency = &health["targets"][0]["latency"];
    // Real time on a shared machine: at least the provider's 40 ms, and of its order (not
    // seconds, not a unit off), however late the scheduler ran the gateway.
    let p50 = latency["p50_ms"].as_f64().unwrap();
    assert!((38.0..200.0).contains(&p50), "{latency}");
    assert_eq!(latency["samples"], 3.0);
    let metrics = gateway.get("/metrics", ADMIN_KEY).await.text().await.unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("switchyard_target_latency_seconds{target=\"slow:m\",quantile=\"0.5\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    let seconds: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.038..0.2).contains(&seconds), "{line}");
    assert!((seconds * 1000.0 - p50).abs() < 1.0, "the same figure as /admin/health: {line}, {p50} ms");
}

#[tokio::test]
async fn a_providers_ranked_keys_share_its_traffic_in_turn() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let keep = seen.clone();
    let upstream = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let keep = keep.clone();
        async move {
            keep.lock().unwrap().push(headers["authorization"].to_str().unwrap().to_owned());
            axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await.unwrap() });
    let gateway = Gateway::start(&format!(
        "providers:\n  up:\n    kind: openai_compatible\n    base_url: 'http://{addr}/v1'\n    rotation: round_robin\n    api_keys: [sk-key-a-0001, {{ key: sk-key-b-0002, priority: 0 }}, {{ key: sk-key-c-0003, priority: 1 }}]\nroutes:\n  default: {{ targets: [up:m] }}\ngateway:\n  keys: [env://GW_KEY]\n"
    ))
    .await;
    for _ in 0..4 {
        assert_eq!(gateway.post("/v1/chat/completions", chat("default")).await.status(), 200);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        ["Bearer sk-key-a-0001", "Bearer sk-key-b-0002", "Bearer sk-key-a-0001", "Bearer sk-key-b-0002"]
    );
}

#[tokio::test]
async fn a_hedged_answer_says_so_and_is_counted() {
    let gateway = Gateway::start(
        "providers:\n  slow: { kind: simulated, latency: 5s, reply: slow }\n  fast: { kind: simulated, latency: 20ms, reply: fast }\nroutes:\n  default:\n    targets: [slow:m, fast:m]\n    hedge: { after: 100ms, max_share: 1.0 }\ngateway: { keys: [env://GW_KEY], admin_key: env://ADMIN_KEY }\n",
    )
    .await;
    let response = gateway.post("/v1/chat/completions", chat("default")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-switchyard-hedged"], "1");
    assert_eq!(response.headers()["x-switchyard-target"], "fast:m");
    let metrics = gateway.get("/metrics", ADMIN_KEY).await.text().await.unwrap();
    assert!(metrics.contains("switchyard_hedges_total{route=\"default\",result=\"started\"} 1"), "{metrics}");
    assert!(metrics.contains("switchyard_hedges_total{route=\"default\",result=\"won\"} 1"), "{metrics}");
    assert!(
        metrics
            .contains("switchyard_attempts_total{target=\"slow:m\",outcome=\"cancelled\",error_kind=\"\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn when_every_target_is_down_the_last_good_answer_is_served_stale_in_either_dialect() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let down = Arc::new(AtomicBool::new(false));
    let flag = down.clone();
    let upstream = axum::Router::new().fallback(move || {
        let down = flag.load(Ordering::SeqCst);
        async move {
            if down {
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"error": {"message": "down", "type": "server_error"}})));
            }
            (axum::http::StatusCode::OK, axum::Json(json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "the good answer"}, "finish_reason": "stop"}]})))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await.unwrap() });
    let gateway = Gateway::start(&format!(
        "providers:\n  up: {{ kind: openai_compatible, base_url: 'http://{addr}/v1' }}\nroutes:\n  default:\n    targets: [up:m]\n    retry: {{ max_attempts: 1 }}\n    health_gate: false\n    candidates: [{{ name: last-good, cache: {{ max_age: 1h }} }}]\ngateway:\n  keys: [env://GW_KEY, other-gateway-key-0001]\n  admin_key: env://ADMIN_KEY\n"
    ))
    .await;
    let question =
        json!({"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(gateway.post("/v1/chat/completions", question.clone()).await.status(), 200);
    let health = json_of(gateway.get("/admin/health", ADMIN_KEY).await).await;
    let kept = &health["answer_caches"][0];
    assert_eq!(
        (kept["route"].as_str(), kept["candidate"].as_str(), kept["entries"].as_u64()),
        (Some("default"), Some("last-good"), Some(1))
    );
    assert!(kept["bytes"].as_u64().unwrap() > 0);
    // A request that opts out is not remembered either.
    let unkept = json!({"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "off the record"}]});
    let answered = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("x-switchyard-cache", "off")
        .json(&unkept)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    down.store(true, Ordering::SeqCst);
    assert_eq!(gateway.post("/v1/chat/completions", unkept).await.status(), 502);

    let stale = gateway.post("/v1/chat/completions", question.clone()).await;
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.headers()["x-switchyard-cache"], "stale");
    assert!(stale.headers().contains_key("age"));
    assert_eq!(stale.headers()["x-switchyard-target"], "candidate last-good");
    assert_eq!(json_of(stale).await["choices"][0]["message"]["content"], "the good answer");

    let mut streamed = question.clone();
    streamed["stream"] = json!(true);
    let stream = gateway.post("/v1/chat/completions", streamed).await;
    assert_eq!(stream.headers()["x-switchyard-cache"], "stale");
    assert!(stream.text().await.unwrap().contains("the good answer"));

    // The same question in Anthropic's dialect.
    let anthropic = gateway
        .client
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GATEWAY_KEY)
        .json(&json!({"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.headers()["x-switchyard-cache"], "stale");
    assert_eq!(json_of(anthropic).await["content"][0]["text"], "the good answer");
    let anthropic_stream = gateway
        .client
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GATEWAY_KEY)
        .json(&json!({"model": "default", "max_tokens": 16, "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic_stream.headers()["x-switchyard-cache"], "stale");
    let events = anthropic_stream.text().await.unwrap();
    assert!(
        events.contains("text_delta")
            && events.contains("the good answer")
            && events.contains("message_stop"),
        "{events}"
    );

    // Not for another key, and not for a request that opts out.
    let other = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth("other-gateway-key-0001")
        .json(&question)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 502);
    let opted_out = gateway
        .client
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(GATEWAY_KEY)
        .header("cache-control", "no-store")
        .json(&question)
        .send()
        .await
        .unwrap();
    assert_eq!(opted_out.status(), 502);
    let metrics = gateway.get("/metrics", ADMIN_KEY).await.text().await.unwrap();
    assert!(metrics.contains("switchyard_stale_answers_total{route=\"default\"} 4"), "{metrics}");
}

#[tokio::test]
async fn every_metric_family_the_gateway_shows_is_documented_in_the_readme() {
    let gateway = Gateway::start(
        "providers:\n  down: { kind: simulated, error_rates: { unavailable: 1.0 } }\n  up: { kind: simulated, prices: { m: { input: 1.0, output: 2.0 } } }\nroutes:\n  default: { targets: [down:m, up:m], retry: { max_attempts: 2, backoff_base: 1ms, backoff_max: 1ms } }\ngateway: { keys: [env://GW_KEY], admin_key: env://ADMIN_KEY }\n",
    )
    .await;
    assert_eq!(gateway.post("/v1/chat/completions", chat("default")).await.status(), 200);
    let metrics = gateway.get("/metrics", ADMIN_KEY).await.text().await.unwrap();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = readme.split("\n## Metrics\n").nth(1).unwrap().split("\n## ").next().unwrap();
    let families: Vec<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(families.len() >= 12, "{families:?}");
    for family in families {
        assert!(
            section.contains(&format!("| `{family}` |")),
            "{family} is not in the README's metrics table"
        );
    }
}

#[tokio::test]
async fn a_dated_model_id_is_served_by_its_pattern_route_and_models_lists_the_pattern() {
    let gateway = Gateway::start(
        "providers:\n  a: { kind: simulated }\n  b: { kind: simulated }\nroutes:\n  default: { targets: [a:m] }\n  claude-*: { targets: [\"a:{model}\", \"b:{model}\"] }\ngateway: { keys: [env://GW_KEY] }\n",
    )
    .await;
    let answer = gateway.post("/v1/chat/completions", chat("claude-sonnet-4-5-20250929")).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-switchyard-target"], "a:claude-sonnet-4-5-20250929");

    let listed = json_of(gateway.get("/v1/models", GATEWAY_KEY).await).await;
    let ids: Vec<(&str, &str)> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["switchyard_kind"].as_str().unwrap()))
        .collect();
    assert!(ids.contains(&("claude-*", "pattern")), "{ids:?}");
    assert!(ids.iter().all(|(id, _)| !id.contains("{model}")), "no filled-in target is a name: {ids:?}");
    let one = gateway.get("/v1/models/claude-opus-4-1-20250805", GATEWAY_KEY).await;
    assert_eq!(one.status(), 200, "a model the pattern governs is a model here");
    assert_eq!(gateway.get("/v1/models/gpt-unknown", GATEWAY_KEY).await.status(), 404);

    // What the pattern served is counted under its target, whatever models clients name.
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    assert!(
        text.contains("switchyard_attempts_total{target=\"a:{model}\",outcome=\"ok\",error_kind=\"\"} 1"),
        "{text}"
    );
    assert!(!text.contains("claude-sonnet") && !text.contains("(unlisted)"), "{text}");
    // A target a client names directly is no pattern's, whatever the pattern would make of it.
    assert_eq!(gateway.post("/v1/chat/completions", chat("a:direct-model")).await.status(), 200);
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    assert!(
        text.contains("switchyard_attempts_total{target=\"(unlisted)\",outcome=\"ok\",error_kind=\"\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("switchyard_attempts_total{target=\"a:{model}\",outcome=\"ok\",error_kind=\"\"} 1"),
        "{text}"
    );
    // The health board lists the target the request filled in, not the pattern's stand-in.
    let health = json_of(gateway.get("/admin/health", GATEWAY_KEY).await).await;
    let rows: Vec<&str> =
        health["targets"].as_array().unwrap().iter().map(|t| t["target"].as_str().unwrap()).collect();
    assert!(rows.contains(&"a:claude-sonnet-4-5-20250929"), "{rows:?}");
    assert!(rows.iter().all(|t| !t.contains("{model}")), "{rows:?}");
}

#[tokio::test]
async fn a_pattern_sends_what_its_star_stood_for_so_provider_slash_model_names_reach_the_provider_bare() {
    let gateway = Gateway::start(
        "providers:\n  a: { kind: simulated }\nroutes:\n  default: { targets: [a:m] }\n  \"openai/*\": { targets: [\"a:{*}\"] }\ngateway: { keys: [env://GW_KEY] }\n",
    )
    .await;
    let answer = gateway.post("/v1/chat/completions", chat("openai/gpt-4.1-mini")).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-switchyard-target"], "a:gpt-4.1-mini");
    // Nothing after the prefix is no model.
    let nothing = gateway.post("/v1/chat/completions", chat("openai/")).await;
    let status = nothing.status();
    let body = json_of(nothing).await;
    assert!(status == 400 || status == 404, "{status} {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("openai/"), "{body}");
    // Outside a pattern route the stand-in is refused at load, naming it.
    let file = config::parse(
        "providers: { a: { kind: simulated } }\nroutes: { default: { targets: [\"a:{*}\"] } }\n",
        false,
        "star.yaml",
    )
    .unwrap();
    let refused = config::build(file, config::Source::File("star.yaml".into()), &|_| None).unwrap_err();
    assert!(refused.to_string().contains("`{*}`"), "{refused}");
}

#[tokio::test]
async fn with_direct_targets_off_clients_name_routes_only() {
    let gateway = Gateway::start(
        "providers:\n  a: { kind: simulated }\nroutes:\n  default: { targets: [a:m] }\n  claude-*: { targets: [\"a:{model}\"] }\ngateway: { keys: [env://GW_KEY], direct_targets: false }\n",
    )
    .await;
    assert_eq!(gateway.post("/v1/chat/completions", chat("default")).await.status(), 200);
    assert_eq!(
        gateway.post("/v1/chat/completions", chat("claude-x-1")).await.status(),
        200,
        "patterns are routes"
    );
    let refused = gateway.post("/v1/chat/completions", chat("a:expensive-model")).await;
    assert_eq!(refused.status(), 404);
    let body = json_of(refused).await;
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("direct_targets: false") && message.contains("default"), "{message}");
    let listed = json_of(gateway.get("/v1/models", GATEWAY_KEY).await).await;
    let ids: Vec<&str> =
        listed["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["claude-*", "default"], "routes only: {ids:?}");
    assert_eq!(gateway.get("/v1/models/a:m", GATEWAY_KEY).await.status(), 404);
    // An unknown model is told the routes alone: not the targets the setting keeps back.
    let unknown = json_of(gateway.post("/v1/chat/completions", chat("nope")).await).await;
    let message = unknown["error"]["message"].as_str().unwrap();
    assert!(message.contains("name a route (claude-*, default)") && !message.contains("a:m"), "{message}");
    let one = json_of(gateway.get("/v1/models/a:m", GATEWAY_KEY).await).await;
    assert!(!one["error"]["message"].as_str().unwrap().contains("a target"), "{one}");
    // Refused at the door, a direct target is logged under no route, as an unknown model is.
    let text = gateway.get("/metrics", "").await.text().await.unwrap();
    assert!(
        text.contains(
            "switchyard_requests_total{endpoint=\"chat_completions\",route=\"(none)\",status=\"404\"} 2"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_session_named_by_header_or_by_the_requests_own_identifier_stays_on_one_target() {
    let gateway = Gateway::start(
        "providers:\n  a: { kind: simulated }\n  b: { kind: simulated }\nroutes:\n  default: { targets: [a:m, b:m], rotation: round_robin }\ngateway: { keys: [env://GW_KEY] }\n",
    )
    .await;
    let target =
        |response: reqwest::Response| response.headers()["x-switchyard-target"].to_str().unwrap().to_owned();
    let mut alone = Vec::new();
    for _ in 0..2 {
        alone.push(target(gateway.post("/v1/chat/completions", chat("default")).await));
    }
    assert_ne!(alone[0], alone[1], "without a session the tier rotates");

    let by_header = || {
        gateway
            .client
            .post(gateway.url("/v1/chat/completions"))
            .bearer_auth(GATEWAY_KEY)
            .header("x-switchyard-session", "conv-1")
    };
    let mut user = chat("default");
    user["user"] = json!("end-user-7");
    let anthropic = json!({"model": "default", "max_tokens": 10, "metadata": {"user_id": "end-user-9"},
        "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        let first = target(by_header().json(&chat("default")).send().await.unwrap());
        assert_eq!(target(by_header().json(&chat("default")).send().await.unwrap()), first);
        let first = target(gateway.post("/v1/chat/completions", user.clone()).await);
        assert_eq!(target(gateway.post("/v1/chat/completions", user.clone()).await), first);
        let first = target(gateway.post("/v1/messages", anthropic.clone()).await);
        assert_eq!(target(gateway.post("/v1/messages", anthropic.clone()).await), first);
    }
}

#[tokio::test]
async fn admin_health_lists_every_configured_target_and_only_the_latest_hundred_clients_named() {
    // A client naming made-up models of a provider leaves a health record for each (the store
    // keeps up to 10,000): listed whole, `/admin/health` grew to megabytes.
    let gateway = Gateway::start(BASIC).await;
    for i in 0..130 {
        let response = gateway.post("/v1/chat/completions", chat(&format!("down:made-up-{i}"))).await;
        assert_eq!(response.status(), 502);
    }
    let health = json_of(gateway.get("/admin/health", ADMIN_KEY).await).await;
    let targets: Vec<&str> =
        health["targets"].as_array().unwrap().iter().map(|t| t["target"].as_str().unwrap()).collect();
    assert!(targets.contains(&"down:m") && targets.contains(&"up:m"), "{targets:?}");
    assert_eq!(targets.len(), 2 + 100, "{targets:?}");
    assert_eq!(health["targets_omitted"], 30);
    assert!(targets.contains(&"down:made-up-129"), "the latest named are kept: {targets:?}");
    assert!(!targets.contains(&"down:made-up-0"), "{targets:?}");
}
