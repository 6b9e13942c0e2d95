//! The Vertex AI adapter against fakes on 127.0.0.1: Vertex itself (the fake upstream of
//! `support`, which accepts only a token the fake Google issued and still honours), and Google's
//! token endpoints (a service account's `token_uri` that verifies the signed JWT with the
//! account's public key, a workload identity federation STS, a metadata server).

// The helpers are test code too; `allow-unwrap-in-tests` only covers `#[test]` fns.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use axum::Router;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use support::{Caller, Fake, Seen, drain, json_reply, sse_reply, text_of};
use switchyard::chat::{ChatRequest, Dialect, EmbeddingsRequest, Message, Verbatim};
use switchyard::provider::Provider;
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::vertex::{GoogleCredentials, VertexProvider, VertexSettings};
use switchyard_providers::{BetaPolicy, ProviderKind, ProviderSettings};

const CLAUDE: &str = "claude-sonnet-4-5@20250929";
const GEMINI: &str = "gemini-2.5-flash";
const PROJECT: &str = "switchyard-test";
const SA_EMAIL: &str = "router@switchyard-test.iam.gserviceaccount.com";
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

// ---------------------------------------------------------------------------------------------
// The fake Google: token endpoints
// ---------------------------------------------------------------------------------------------

/// Google's side: the service account's key pair, the tokens issued and when each expires.
#[derive(Clone)]
struct Google {
    inner: Arc<Inner>,
}

struct Inner {
    /// The public half of the service account's key (PKCS#1 DER), which verifies its JWTs.
    public_key: Vec<u8>,
    /// The service account key file's `private_key`, PEM.
    private_pem: String,
    /// Filled in once the server listens: the token endpoint, the JWTs' expected `aud`.
    token_uri: Mutex<String>,
    /// Issued tokens and the Unix second each expires.
    issued: Mutex<HashMap<String, u64>>,
    /// Token requests answered with a token.
    granted: AtomicUsize,
    /// Token requests refused.
    refused: AtomicUsize,
    /// `expires_in` of the next tokens.
    lifetime: AtomicU64,
    /// The assertions received, to look for in errors and logs.
    assertions: Mutex<Vec<String>>,
    /// The token endpoint fails (500 `internal_failure`), as Google's backends sometimes do.
    failing: std::sync::atomic::AtomicBool,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

impl Google {
    /// A fake with a fresh 2048-bit key pair, listening on 127.0.0.1.
    async fn start() -> (Google, String) {
        let pair = KeyPair::generate(KeySize::Rsa2048).unwrap();
        let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).unwrap();
        let private_pem = pem("PRIVATE KEY", pkcs8.as_ref());
        let google = Google {
            inner: Arc::new(Inner {
                public_key: pair.public_key().as_ref().to_vec(),
                private_pem,
                token_uri: Mutex::new(String::new()),
                issued: Mutex::new(HashMap::new()),
                granted: AtomicUsize::new(0),
                refused: AtomicUsize::new(0),
                lifetime: AtomicU64::new(3600),
                assertions: Mutex::new(Vec::new()),
                failing: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let app = Router::new()
            .route("/token", post(service_account_token))
            .route("/sts", post(federated_token))
            .route("/computeMetadata/v1/instance/service-accounts/default/token", get(metadata_token))
            .with_state(google.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        *google.inner.token_uri.lock().unwrap() = format!("{origin}/token");
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (google, origin)
    }

    fn token_uri(&self) -> String {
        self.inner.token_uri.lock().unwrap().clone()
    }

    fn granted(&self) -> usize {
        self.inner.granted.load(Ordering::SeqCst)
    }

    fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }

    fn set_lifetime(&self, seconds: u64) {
        self.inner.lifetime.store(seconds, Ordering::SeqCst);
    }

    /// Issues a token, as Google's endpoints answer.
    fn issue(&self, prefix: &str) -> Response {
        let n = self.inner.granted.fetch_add(1, Ordering::SeqCst) + 1;
        let token = format!("ya29.{prefix}-{n}-not-for-any-log");
        let lifetime = self.inner.lifetime.load(Ordering::SeqCst);
        self.inner.issued.lock().unwrap().insert(token.clone(), unix_now() + lifetime);
        axum::Json(json!({ "access_token": token, "expires_in": lifetime, "token_type": "Bearer" }))
            .into_response()
    }

    fn refuse(&self, description: &str) -> Response {
        self.inner.refused.fetch_add(1, Ordering::SeqCst);
        let body = json!({ "error": "invalid_grant", "error_description": description });
        (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
    }

    /// Whether `authorization` carries a token this fake issued that has not expired.
    fn honours(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|value| value.strip_prefix("Bearer ")) else { return false };
        self.inner.issued.lock().unwrap().get(token).is_some_and(|expires| unix_now() < *expires)
    }

    /// Every secret the exchanges involved: the private key's body, the assertions, the tokens.
    fn secrets(&self) -> Vec<String> {
        let key_body: String = self
            .inner
            .private_pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect::<Vec<_>>()
            .join("");
        let mut secrets = vec![key_body[..40].to_owned(), key_body[key_body.len() - 40..].to_owned()];
        secrets.extend(self.inner.assertions.lock().unwrap().iter().cloned());
        secrets.extend(self.inner.issued.lock().unwrap().keys().cloned());
        secrets
    }

    /// A service account key file for this fake, its `token_uri` the fake's.
    fn key_file(&self, dir: &Path) -> PathBuf {
        let key = json!({
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": self.inner.private_pem,
            "client_email": SA_EMAIL,
            "client_id": "100000000000000000001",
            "token_uri": self.token_uri(),
        });
        let path = dir.join("sa.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&key).unwrap()).unwrap();
        path
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// The service account's token endpoint: a JWT bearer grant whose assertion is signed by the
/// account's key, for this endpoint (`aud`), with the cloud-platform scope, current.
async fn service_account_token(
    State(google): State<Google>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if google.inner.failing.load(Ordering::SeqCst) {
        let body = json!({ "error": "internal_failure", "error_description": "backend error" });
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
    }
    if form.get("grant_type").map(String::as_str) != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return google.refuse("unsupported grant_type");
    }
    let Some(assertion) = form.get("assertion") else { return google.refuse("no assertion") };
    google.inner.assertions.lock().unwrap().push(assertion.clone());
    match verify(&google, assertion) {
        Ok(()) => google.issue("sa"),
        Err(why) => google.refuse(why),
    }
}

/// What PyJWT checks too: the RS256 signature with the public key, `aud`, `iss`, `scope`,
/// `iat` and `exp`.
fn verify(google: &Google, assertion: &str) -> Result<(), &'static str> {
    let parts: Vec<&str> = assertion.split('.').collect();
    let [head, claims, signature] = parts[..] else { return Err("not a JWT") };
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head.trim_end_matches('=')).unwrap()).unwrap();
    if header["alg"] != "RS256" {
        return Err("not RS256");
    }
    let signature =
        URL_SAFE_NO_PAD.decode(signature.trim_end_matches('=')).map_err(|_| "bad signature encoding")?;
    let signed = format!("{head}.{claims}");
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &google.inner.public_key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| "Invalid JWT Signature.")?;
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims.trim_end_matches('=')).unwrap()).unwrap();
    let now = unix_now();
    let (iat, exp) = (claims["iat"].as_u64().unwrap_or(0), claims["exp"].as_u64().unwrap_or(0));
    let checks = [
        (claims["aud"] == google.token_uri().as_str(), "wrong aud"),
        (claims["iss"] == SA_EMAIL, "wrong iss"),
        (claims["scope"] == SCOPE, "wrong scope"),
        (iat <= now + 5 && now < exp && exp - iat <= 3600, "expired or future JWT"),
    ];
    checks.into_iter().find(|(ok, _)| !ok).map_or(Ok(()), |(_, why)| Err(why))
}

/// A security token service: a token exchange of the federated subject token.
async fn federated_token(
    State(google): State<Google>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let exchange =
        form.get("grant_type").map(String::as_str) == Some("urn:ietf:params:oauth:grant-type:token-exchange");
    let subject = form.get("subject_token").map(String::as_str) == Some("oidc-subject-token-of-the-workload");
    let audience = form.get("audience").is_some_and(|a| a.contains("workloadIdentityPools"));
    if exchange && subject && audience { google.issue("sts") } else { google.refuse("bad token exchange") }
}

/// The metadata server: a token for the instance's service account, to requests that say
/// `Metadata-Flavor: Google`.
async fn metadata_token(State(google): State<Google>, headers: HeaderMap) -> Response {
    if headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
        return (StatusCode::FORBIDDEN, "Missing Metadata-Flavor:Google header.").into_response();
    }
    google.issue("gce")
}

// ---------------------------------------------------------------------------------------------
// The fake Vertex
// ---------------------------------------------------------------------------------------------

fn claude_answer(text: &str) -> Value {
    json!({
        "id": "msg_vrtx_01", "type": "message", "role": "assistant", "model": CLAUDE,
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": { "input_tokens": 9, "output_tokens": 3 }
    })
}

fn gemini_answer(text: &str) -> Value {
    json!({
        "candidates": [{ "content": { "role": "model", "parts": [{ "text": text }] }, "finishReason": "STOP" }],
        "usageMetadata": { "promptTokenCount": 4, "candidatesTokenCount": 2, "totalTokenCount": 6 },
        "modelVersion": GEMINI
    })
}

const CLAUDE_STREAM: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_vrtx_02\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"streamed \"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"from Vertex\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

const GEMINI_STREAM: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"streamed \"}]}}]}\r\n\r\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"from Gemini\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":3,\"totalTokenCount\":7}}\r\n\r\n",
);

/// A fake Vertex that refuses any call without a current token of `google`, and answers the
/// others by their method.
async fn vertex(google: &Google) -> Fake {
    let google = google.clone();
    Fake::start(move |seen: &Seen| {
        if !google.honours(seen.header("authorization")) {
            let body = json!({ "error": { "code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED" } });
            return json_reply(401, &[], &body);
        }
        answer(seen)
    })
    .await
}

fn answer(seen: &Seen) -> Response {
    let path = seen.path();
    if path.ends_with("/count-tokens:rawPredict") {
        json_reply(200, &[], &json!({ "input_tokens": 17 }))
    } else if path.ends_with(":countTokens") {
        json_reply(200, &[], &json!({ "totalTokens": 19, "totalBillableCharacters": 40 }))
    } else if path.ends_with(":rawPredict") {
        json_reply(200, &[], &claude_answer("whole from Vertex"))
    } else if path.ends_with(":streamRawPredict") {
        sse_reply(&[], CLAUDE_STREAM)
    } else if path.ends_with(":generateContent") {
        json_reply(200, &[], &gemini_answer("whole from Gemini"))
    } else if path.ends_with(":streamGenerateContent") {
        sse_reply(&[], GEMINI_STREAM)
    } else if path.ends_with(":predict") {
        let count = seen.body["instances"].as_array().map_or(0, Vec::len);
        let predictions: Vec<Value> = (0..count)
            .map(|i| json!({ "embeddings": { "values": [i as f32, 0.5], "statistics": { "token_count": 2.0, "truncated": false } } }))
            .collect();
        json_reply(200, &[], &json!({ "predictions": predictions }))
    } else {
        json_reply(
            404,
            &[],
            &json!({ "error": { "code": 404, "message": "no such method", "status": "NOT_FOUND" } }),
        )
    }
}

/// A Vertex provider in `region` at the fake `upstream`, with `credentials`.
fn provider(upstream: &Fake, region: &str, credentials: GoogleCredentials) -> VertexProvider {
    let mut settings = ProviderSettings::new(ProviderKind::Vertex).base_url(upstream.url("/v1"));
    settings.vertex = Some(VertexSettings::new(PROJECT, region, credentials).unwrap());
    VertexProvider::new(&settings).unwrap()
}

struct Setup {
    google: Google,
    upstream: Fake,
    provider: VertexProvider,
    caller: Caller,
    _dir: tempdir::Dir,
}

/// The fake Google, the fake Vertex and a provider with the service account's key file.
async fn setup() -> Setup {
    let (google, _) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    let key = google.key_file(dir.path());
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(key));
    let caller = Caller::new(&provider, None);
    Setup { google, upstream, provider, caller, _dir: dir }
}

fn hello() -> ChatRequest {
    let mut request = ChatRequest::new("route", vec![Message::user("Hello")]);
    request.max_tokens = Some(64);
    request
}

/// A temporary directory, removed when dropped (no crate for it: the tests need little).
mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let path = std::env::temp_dir().join(format!("switchyard-vertex-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Claude on Vertex
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn claude_is_asked_through_raw_predict_with_the_vertex_messages_body() {
    let s = setup().await;
    let answer = s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("whole from Vertex"));
    let seen = s.upstream.only_request();
    assert_eq!(
        seen.path(),
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models/{CLAUDE}:rawPredict")
    );
    assert_eq!(seen.body["anthropic_version"], "vertex-2023-10-16");
    assert!(seen.body.get("model").is_none(), "the URL names the model: {}", seen.body);
    assert!(seen.body.get("stream").is_none());
    assert_eq!(seen.body["max_tokens"], 64);
    assert_eq!(seen.body["messages"][0]["content"], json!([{ "type": "text", "text": "Hello" }]));
    assert!(seen.header("authorization").unwrap().starts_with("Bearer ya29.sa-1-"));
    assert!(seen.header("x-goog-api-key").is_none() && seen.header("x-api-key").is_none());
}

#[tokio::test]
async fn a_token_endpoint_that_fails_is_unavailable_not_a_refusal_of_the_credentials() {
    let s = setup().await;
    s.google.inner.failing.store(true, Ordering::SeqCst);
    let error = s.provider.chat(s.caller.call(GEMINI, None), &hello()).await.unwrap_err();
    // Auth would bench the credential, and with it every model of the provider, for a minute.
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error:?}");
    assert!(error.detail().contains("internal_failure"), "{error:?}");
    s.google.inner.failing.store(false, Ordering::SeqCst);
    s.provider.chat(s.caller.call(GEMINI, None), &hello()).await.expect("the next call gets a token");
}

#[tokio::test]
async fn claude_and_gemini_count_tokens_by_their_own_count_apis() {
    let s = setup().await;
    let count = s.provider.count_tokens(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(count.input_tokens, 17);
    let seen = s.upstream.only_request();
    // Claude's count is the `count-tokens` model's, the model named in the body.
    assert_eq!(
        seen.path(),
        format!(
            "/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
        )
    );
    assert_eq!(seen.body["model"], CLAUDE);
    assert_eq!(seen.body["messages"][0]["content"], json!([{ "type": "text", "text": "Hello" }]));
    assert!(seen.body.get("max_tokens").is_none(), "a count takes the members counting takes: {}", seen.body);
    assert!(seen.header("authorization").unwrap().starts_with("Bearer ya29.sa-1-"));

    let s = setup().await;
    let count = s.provider.count_tokens(s.caller.call(GEMINI, None), &hello()).await.unwrap();
    assert_eq!(count.input_tokens, 19);
    let seen = s.upstream.only_request();
    assert_eq!(
        seen.path(),
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/google/models/{GEMINI}:countTokens")
    );
    assert_eq!(seen.body["contents"][0]["parts"][0]["text"], "Hello");
    assert!(seen.body.get("generationConfig").is_none(), "{}", seen.body);
}

#[tokio::test]
async fn a_claude_stream_goes_through_stream_raw_predict_and_reads_as_anthropic_s() {
    let s = setup().await;
    let stream = s.provider.chat_stream(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&chunks), "streamed from Vertex");
    let seen = s.upstream.only_request();
    assert!(seen.path().ends_with(&format!("/publishers/anthropic/models/{CLAUDE}:streamRawPredict")));
    assert_eq!(seen.body["stream"], true);
    assert!(seen.body.get("model").is_none());
}

#[tokio::test]
async fn an_anthropic_client_s_own_body_goes_as_written_without_its_model() {
    let s = setup().await;
    let written = br#"{"model":"route","max_tokens":32,"messages":[{"role":"user","content":"Hi"}],"x_unknown":{"b":1,"a":0.10000}}"#;
    let mut request = ChatRequest::new("route", vec![Message::user("Hi")]);
    request.origin = Dialect::Anthropic;
    request.verbatim = Some(Verbatim::new(Dialect::Anthropic, &written[..]));
    let answer = s.provider.chat(s.caller.call(CLAUDE, None), &request).await.unwrap();
    assert!(answer.verbatim.is_some(), "Vertex answers in the client's dialect: its bytes pass on");
    let seen = s.upstream.only_request();
    assert_eq!(
        seen.body,
        json!({"max_tokens":32,"messages":[{"role":"user","content":"Hi"}],"x_unknown":{"b":1,"a":0.1},"anthropic_version":"vertex-2023-10-16"})
    );
}

/// What a Claude stream with signed thinking looks like on Vertex (as on Anthropic's API).
const THINKING_STREAM: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_vrtx_03\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Six times eight.\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"ErUBCkYIBxgCsignedOnVertex\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"48\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

#[tokio::test]
async fn thinking_blocks_and_signatures_reach_vertex_as_anthropic_wrote_them_and_come_back_whole() {
    // A conversation begun on Anthropic's API: its signed thinking block goes on to Vertex as
    // the client sent it (the signatures are the same across Claude's platforms).
    let s = setup().await;
    let written = br#"{"model":"route","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"6*7?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Six times seven.","signature":"EqQBCgIYAhIMsignedByAnthropic"},{"type":"text","text":"42"}]},{"role":"user","content":"And 6*8?"}]}"#;
    let mut request = switchyard_providers::anthropic::codec::request_from_slice(written).unwrap();
    request.verbatim = Some(Verbatim::new(Dialect::Anthropic, &written[..]));
    s.provider.chat(s.caller.call(CLAUDE, None), &request).await.unwrap();
    let seen = s.upstream.only_request();
    assert_eq!(
        seen.body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Six times seven.", "signature": "EqQBCgIYAhIMsignedByAnthropic"})
    );
    assert_eq!(seen.body["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));

    // Vertex's streamed thinking comes back to an OpenAI-dialect client whole, with its
    // signature, as `thinking_blocks` (what it sends back to either platform next turn).
    let google = s.google.clone();
    let upstream = Fake::start(move |seen: &Seen| {
        assert!(google.honours(seen.header("authorization")), "a call without the token");
        sse_reply(&[], THINKING_STREAM)
    })
    .await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(s.google.key_file(dir.path())));
    let caller = Caller::new(&provider, None);
    let (chunks, error) =
        drain(provider.chat_stream(caller.call(CLAUDE, None), &hello()).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    let blocks: Vec<Value> = chunks.iter().flat_map(|c| c.choices[0].delta.thinking_blocks.clone()).collect();
    assert_eq!(
        blocks,
        [
            json!({"type": "thinking", "thinking": "Six times eight.", "signature": "ErUBCkYIBxgCsignedOnVertex"})
        ]
    );
    assert_eq!(text_of(&chunks), "48");
}

#[tokio::test]
async fn betas_travel_as_the_anthropic_beta_header_and_the_version_only_in_the_body() {
    let s = setup().await;
    let forward = [
        ("anthropic-beta".to_owned(), "context-1m-2025-08-07".to_owned()),
        ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
    ];
    let caller = Caller::new(&s.provider, None).forward(&forward);
    s.provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    s.provider.chat(caller.call(GEMINI, None), &hello()).await.unwrap();
    let [claude, gemini] = &s.upstream.requests()[..] else { panic!("two requests") };
    assert_eq!(claude.header("anthropic-beta"), Some("context-1m-2025-08-07"));
    assert_eq!(claude.header("anthropic-version"), None);
    assert_eq!(gemini.header("anthropic-beta"), None, "Gemini is sent no Claude header");
}

#[tokio::test]
async fn the_provider_s_betas_decide_which_of_the_client_s_flags_reach_claude() {
    let (google, _) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    let forward = [("anthropic-beta".to_owned(), "context-1m-2025-08-07, claude-code-20250219".to_owned())];
    for (policy, sent) in [
        (BetaPolicy::Allow(vec!["context-1m-2025-08-07".into()]), Some("context-1m-2025-08-07")),
        (BetaPolicy::Drop, None),
    ] {
        let mut settings = ProviderSettings::new(ProviderKind::Vertex).base_url(upstream.url("/v1"));
        let credentials = GoogleCredentials::File(google.key_file(dir.path()));
        settings.vertex = Some(VertexSettings::new(PROJECT, "us-east5", credentials).unwrap());
        settings.betas = policy;
        let provider = VertexProvider::new(&settings).unwrap();
        let caller = Caller::new(&provider, None).forward(&forward);
        provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
        let seen = upstream.requests();
        assert_eq!(seen.last().unwrap().header("anthropic-beta"), sent);
    }
}

#[tokio::test]
async fn a_refused_beta_flag_skips_the_target_as_unsupported() {
    let upstream = Fake::json(
        400,
        json!({"type":"error","error":{"type":"invalid_request_error","message":"invalid beta flag"}}),
    )
    .await;
    let (google, _) = Google::start().await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(google.key_file(dir.path())));
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
    assert!(error.is_unsupported(), "{error:?}");
    assert_eq!(error.status(), Some(400));
}

// ---------------------------------------------------------------------------------------------
// Gemini on Vertex, embeddings, the global endpoint
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn gemini_is_asked_through_generate_content_with_the_gemini_body() {
    let s = setup().await;
    let answer = s.provider.chat(s.caller.call(GEMINI, None), &hello()).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("whole from Gemini"));
    let seen = s.upstream.only_request();
    assert_eq!(
        seen.path(),
        format!(
            "/v1/projects/{PROJECT}/locations/us-east5/publishers/google/models/{GEMINI}:generateContent"
        )
    );
    assert_eq!(seen.body["contents"][0], json!({ "role": "user", "parts": [{ "text": "Hello" }] }));
    assert_eq!(seen.body["generationConfig"]["maxOutputTokens"], 64);
}

#[tokio::test]
async fn a_gemini_stream_goes_through_stream_generate_content_as_sse() {
    let s = setup().await;
    let stream = s.provider.chat_stream(s.caller.call(GEMINI, None), &hello()).await.unwrap();
    let (chunks, error) = drain(stream).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&chunks), "streamed from Gemini");
    let seen = s.upstream.only_request();
    assert!(seen.uri.ends_with(&format!("/publishers/google/models/{GEMINI}:streamGenerateContent?alt=sse")));
}

#[tokio::test]
async fn the_global_region_is_the_location_of_the_path() {
    let (google, _) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "global", GoogleCredentials::File(google.key_file(dir.path())));
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert!(
        upstream
            .only_request()
            .path()
            .starts_with(&format!("/v1/projects/{PROJECT}/locations/global/publishers/"))
    );
}

#[tokio::test]
async fn embeddings_are_one_predict_of_every_text() {
    let s = setup().await;
    let mut request: EmbeddingsRequest = serde_json::from_value(json!({ "input": ["a", "b", "c"] })).unwrap();
    request.dimensions = Some(2);
    let answer = s.provider.embeddings(s.caller.call("text-embedding-005", None), &request).await.unwrap();
    assert_eq!(answer.data.len(), 3);
    assert_eq!(answer.data[2].embedding, vec![2.0, 0.5]);
    assert_eq!(answer.usage.unwrap().prompt_tokens, 6);
    let seen = s.upstream.only_request();
    assert!(seen.path().ends_with("/publishers/google/models/text-embedding-005:predict"));
    assert_eq!(seen.body["parameters"], json!({ "outputDimensionality": 2 }));
    let claude = s.provider.embeddings(s.caller.call(CLAUDE, None), &request).await.unwrap_err();
    assert!(claude.is_unsupported());
}

#[tokio::test]
async fn a_model_id_that_could_leave_the_path_is_refused_before_sending() {
    let s = setup().await;
    let error = s.provider.chat(s.caller.call("../../x", None), &hello()).await.unwrap_err();
    assert!(error.is_unsupported());
    assert!(s.upstream.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

async fn failing(status: u16, body: Value) -> (Fake, VertexProvider, Google, tempdir::Dir) {
    let upstream = Fake::json(status, body).await;
    let (google, _) = Google::start().await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(google.key_file(dir.path())));
    (upstream, provider, google, dir)
}

#[tokio::test]
async fn vertex_resource_exhausted_is_rate_limited_with_no_wait_of_its_own() {
    let body = json!({ "error": { "code": 429, "message": "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude-sonnet-4-5.", "status": "RESOURCE_EXHAUSTED" } });
    let (_upstream, provider, _google, _dir) = failing(429, body).await;
    let caller = Caller::new(&provider, None);
    for model in [CLAUDE, GEMINI] {
        let error = provider.chat(caller.call(model, None), &hello()).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::RateLimited, "{model}");
        assert_eq!(error.retry_after(), None, "Vertex says no wait: the configured cooldown applies");
        assert_eq!(error.code(), Some("RESOURCE_EXHAUSTED"));
    }
}

#[tokio::test]
async fn claude_s_own_errors_and_vertex_s_are_classified_by_their_shapes() {
    let cases = [
        (
            529,
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ErrorKind::Unavailable,
        ),
        (
            400,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 200251 tokens > 200000 maximum"}}),
            ErrorKind::ContextLength,
        ),
        (
            404,
            json!({"error":{"code":404,"message":"Publisher Model `claude-x` not found.","status":"NOT_FOUND"}}),
            ErrorKind::ModelNotFound,
        ),
        (
            403,
            json!({"error":{"code":403,"message":"Permission denied on resource project.","status":"PERMISSION_DENIED"}}),
            ErrorKind::Auth,
        ),
        (
            503,
            json!({"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}),
            ErrorKind::Unavailable,
        ),
    ];
    for (status, body, kind) in cases {
        let (_upstream, provider, _google, _dir) = failing(status, body.clone()).await;
        let caller = Caller::new(&provider, None);
        let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
        assert_eq!((error.kind(), error.status()), (kind, Some(status)), "{body}");
    }
}

#[tokio::test]
async fn a_refused_token_is_dropped_and_the_call_sent_again_with_a_fresh_one() {
    let s = setup().await;
    s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    // Vertex stops honouring the token (revoked): the call gets a new one and goes through, so
    // the credential is never reported as refused.
    s.google.inner.issued.lock().unwrap().clear();
    s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(s.google.granted(), 2);
    assert_eq!(s.upstream.requests().len(), 3, "the first call, the refused one and its second sending");
}

#[tokio::test]
async fn a_credential_refused_with_a_fresh_token_too_is_auth_after_two_sendings() {
    let (google, _) = Google::start().await;
    let upstream = Fake::start(|_: &Seen| {
        let body = json!({ "error": { "code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED" } });
        json_reply(401, &[], &body)
    })
    .await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(google.key_file(dir.path())));
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(GEMINI, None), &hello()).await.unwrap_err();
    assert_eq!((error.kind(), error.status()), (ErrorKind::Auth, Some(401)));
    assert_eq!(upstream.requests().len(), 2);
    assert_eq!(google.granted(), 2, "a fresh token for the second sending");
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_service_account_s_signed_jwt_is_exchanged_at_its_token_uri_once_for_many_calls() {
    let s = setup().await;
    let request = hello();
    let calls = (0..16).map(|i| {
        let model = if i % 2 == 0 { CLAUDE } else { GEMINI };
        s.provider.chat(s.caller.call(model, None), &request)
    });
    for answer in futures_util::future::join_all(calls).await {
        answer.unwrap();
    }
    assert_eq!((s.google.granted(), s.google.refused()), (1, 0), "one token, its JWT verified");
    assert_eq!(s.upstream.requests().len(), 16);
}

#[tokio::test(start_paused = true)]
async fn a_token_is_refreshed_before_it_expires_and_not_before_it_is_due() {
    let s = setup().await;
    s.google.set_lifetime(3600);
    s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    tokio::time::advance(Duration::from_secs(3600 - 241)).await;
    s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(s.google.granted(), 1, "not due yet");
    tokio::time::advance(Duration::from_secs(1)).await;
    s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert_eq!(s.google.granted(), 2, "four minutes before it expires, a new token");
    let last = s.upstream.last_request();
    assert!(last.header("authorization").unwrap().starts_with("Bearer ya29.sa-2-"));
}

#[tokio::test]
async fn a_token_that_lives_no_time_is_fetched_for_each_call() {
    let s = setup().await;
    s.google.set_lifetime(0);
    for _ in 0..3 {
        // The fake Vertex refuses a token whose second is over (and the call is sent once more
        // with another): what counts here is the exchange.
        let _ = s.provider.chat(s.caller.call(CLAUDE, None), &hello()).await;
    }
    assert_eq!(s.google.granted(), 6, "a token for each sending, none kept");
}

#[tokio::test]
async fn a_refused_assertion_is_an_auth_error_that_names_the_account_and_holds_no_secret() {
    let (google, _) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    // Another key than the one Google knows the account by.
    let (other, _) = Google::start().await;
    let mut key: Value =
        serde_json::from_slice(&std::fs::read(google.key_file(dir.path())).unwrap()).unwrap();
    key["private_key"] = json!(other.inner.private_pem);
    let path = dir.path().join("wrong.json");
    std::fs::write(&path, key.to_string()).unwrap();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(path));
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Auth);
    assert!(error.detail().contains(SA_EMAIL), "{}", error.detail());
    assert!(error.detail().contains("Invalid JWT Signature"), "{}", error.detail());
    assert!(upstream.requests().is_empty(), "nothing is sent without a token");
    assert_no_secret(&[&google, &other], &format!("{error:?} {error} {provider:?}"));
}

#[tokio::test]
async fn an_unreachable_token_endpoint_is_a_transport_failure() {
    let (google, _) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    let mut key: Value =
        serde_json::from_slice(&std::fs::read(google.key_file(dir.path())).unwrap()).unwrap();
    key["token_uri"] = json!(format!("{}/token", support::refused_origin().await));
    let path = dir.path().join("unreachable.json");
    std::fs::write(&path, key.to_string()).unwrap();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(path));
    let caller = Caller::new(&provider, None);
    let error = provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport, "{error}");
}

#[tokio::test]
async fn the_metadata_server_gives_the_token_to_a_request_that_says_its_flavor() {
    let (google, origin) = Google::start().await;
    let upstream = vertex(&google).await;
    let host = origin.trim_start_matches("http://").to_owned();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::MetadataServer(host));
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(GEMINI, None), &hello()).await.unwrap();
    provider.chat(caller.call(GEMINI, None), &hello()).await.unwrap();
    assert_eq!(google.granted(), 1);
    assert!(upstream.last_request().header("authorization").unwrap().starts_with("Bearer ya29.gce-1-"));
}

#[tokio::test]
async fn workload_identity_federation_exchanges_the_subject_token_at_its_sts() {
    let (google, origin) = Google::start().await;
    let upstream = vertex(&google).await;
    let dir = tempdir::Dir::new();
    let subject = dir.path().join("oidc-token");
    std::fs::write(&subject, "oidc-subject-token-of-the-workload").unwrap();
    let file = json!({
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/ci",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("{origin}/sts"),
        "credential_source": { "file": subject.display().to_string() }
    });
    let path = dir.path().join("wif.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(path));
    let caller = Caller::new(&provider, None);
    provider.chat(caller.call(CLAUDE, None), &hello()).await.unwrap();
    assert!(upstream.only_request().header("authorization").unwrap().starts_with("Bearer ya29.sts-1-"));
    assert!(provider.credentials().starts_with("workload identity federation (//iam.googleapis.com/"));
}

// ---------------------------------------------------------------------------------------------
// Finding credentials, and keeping them secret
// ---------------------------------------------------------------------------------------------

#[test]
fn application_default_credentials_are_found_in_google_s_order() {
    let dir = tempdir::Dir::new();
    let gcloud = dir.path().join("gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    let env_of = |vars: &'static [(&'static str, &'static str)], config: Option<PathBuf>| {
        move |name: &str| {
            if name == "CLOUDSDK_CONFIG" {
                return config.as_ref().map(|c| c.display().to_string());
            }
            vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        }
    };
    let adc = |env: &dyn Fn(&str) -> Option<String>| GoogleCredentials::application_default(env);
    assert_eq!(
        adc(&env_of(&[("GOOGLE_APPLICATION_CREDENTIALS", "/k.json")], Some(gcloud.clone()))),
        GoogleCredentials::EnvironmentFile("/k.json".into())
    );
    // gcloud's file counts only when it is there.
    assert_eq!(
        adc(&env_of(&[("GCE_METADATA_HOST", "127.0.0.1:1")], Some(gcloud.clone()))),
        GoogleCredentials::MetadataServer("127.0.0.1:1".into())
    );
    let file = gcloud.join("application_default_credentials.json");
    std::fs::write(&file, "{}").unwrap();
    assert_eq!(adc(&env_of(&[], Some(gcloud.clone()))), GoogleCredentials::GcloudFile(file));
    assert_eq!(adc(&env_of(&[], None)), GoogleCredentials::MetadataServer("metadata.google.internal".into()));
}

#[test]
fn an_authorized_user_file_is_read_and_described_without_its_secrets() {
    let dir = tempdir::Dir::new();
    let path = dir.path().join("adc.json");
    let file = json!({
        "type": "authorized_user",
        "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
        "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
        "refresh_token": "1//refresh-token-that-is-secret-0123456789",
    });
    std::fs::write(&path, file.to_string()).unwrap();
    let described = GoogleCredentials::GcloudFile(path).describe().unwrap();
    assert!(
        described.starts_with(
            "authorized user (OAuth client ****.com), from application default credentials: gcloud's file"
        ),
        "{described}"
    );
    for secret in ["d-FL95Q19q7MQmFpd7hHD0Ty", "refresh-token-that-is-secret", "764086051850"] {
        assert!(!described.contains(secret), "{described}");
    }
}

#[test]
fn a_credentials_file_that_cannot_serve_is_named_with_what_is_wrong_and_quotes_nothing() {
    let dir = tempdir::Dir::new();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        GoogleCredentials::File(path).describe().unwrap_err().to_string()
    };
    assert!(write("a.json", "not json").contains("is not JSON (line 1, column 2)"));
    assert!(
        write("b.json", r#"{"type":"service_account","client_email":"x"}"#)
            .contains("missing field `private_key`")
    );
    let wrong = write(
        "c.json",
        r#"{"type":"service_account","client_email":"x","token_uri":"t","private_key":["-----BEGIN PRIVATE KEY----- secret-bits"]}"#,
    );
    assert!(wrong.contains("has a field of the wrong type") && !wrong.contains("secret-bits"), "{wrong}");
    assert!(write("d.json", r#"{"type":"gdch_service_account"}"#).contains("type `gdch_service_account`"));
    let missing = GoogleCredentials::File(dir.path().join("none.json")).describe().unwrap_err().to_string();
    assert!(missing.contains("none.json cannot be read"), "{missing}");
}

#[tokio::test]
async fn no_secret_reaches_an_error_a_debug_or_a_description() {
    let (google, _) = Google::start().await;
    // Vertex echoes the Authorization header in its refusal (a proxy might).
    let upstream = Fake::start(|seen: &Seen| {
        let echo = format!("bad credentials: {}", seen.header("authorization").unwrap_or_default());
        json_reply(
            401,
            &[],
            &json!({ "error": { "code": 401, "message": echo, "status": "UNAUTHENTICATED" } }),
        )
    })
    .await;
    let dir = tempdir::Dir::new();
    let provider = provider(&upstream, "us-east5", GoogleCredentials::File(google.key_file(dir.path())));
    let caller = Caller::new(&provider, None);
    let mut seen = String::new();
    for model in [CLAUDE, GEMINI] {
        let error: ProviderError = provider.chat(caller.call(model, None), &hello()).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Auth);
        assert!(error.detail().contains("[redacted]"), "{}", error.detail());
        seen.push_str(&format!("{error:?} {error} "));
        let stream = provider.chat_stream(caller.call(model, None), &hello()).await.err().unwrap();
        seen.push_str(&format!("{stream:?} {stream} "));
    }
    seen.push_str(&format!("{provider:?} {}", provider.credentials()));
    assert!(google.granted() >= 2);
    assert!(provider.credentials().contains(SA_EMAIL) && provider.credentials().contains("****4567"));
    assert_no_secret(&[&google], &seen);
}

fn assert_no_secret(googles: &[&Google], text: &str) {
    for google in googles {
        for secret in google.secrets() {
            assert!(
                !text.contains(&secret),
                "a secret leaked: …{}… in {text}",
                &secret[..12.min(secret.len())]
            );
        }
    }
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}
