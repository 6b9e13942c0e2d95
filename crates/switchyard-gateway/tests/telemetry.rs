//! Traces: a request that fails over is one trace, exported as OTLP over HTTP to a test
//! receiver that decodes it with the OpenTelemetry proto types; each upstream call carries its
//! own attempt span as `traceparent`.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};
use switchyard_gateway::config;
use switchyard_gateway::server::{AppState, app};

const UPSTREAM_KEY: &str = "sk-upstream-SECRET-0123456789";
const INCOMING_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const INCOMING_SPAN: &str = "00f067aa0ba902b7";

async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// What the collector received: each request's content type, body and `authorization`.
type Received = Arc<Mutex<Vec<(String, Bytes, Option<String>)>>>;

async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let keep = received.clone();
    let router = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let keep = keep.clone();
            async move {
                let kind = headers["content-type"].to_str().unwrap().to_owned();
                let authorization = headers.get("authorization").map(|v| v.to_str().unwrap().to_owned());
                keep.lock().unwrap().push((kind.clone(), body, authorization));
                // An empty ExportTraceServiceResponse, in the encoding asked.
                let body = if kind == "application/json" { b"{}".to_vec() } else { Vec::new() };
                (StatusCode::OK, [("content-type", kind)], body).into_response()
            }
        }),
    );
    (serve(router).await, received)
}

/// What the upstream received: each call's `traceparent`, and its `tracestate`.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// An OpenAI-dialect upstream: `/down` answers 503, `/up` answers; every `traceparent` kept
/// (with ` ; ` and the `tracestate` after it when one came).
async fn upstream() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let router = axum::Router::new().fallback(move |headers: HeaderMap, uri: axum::http::Uri| {
        let keep = keep.clone();
        async move {
            let mut traceparent = headers.get("traceparent").map(|v| v.to_str().unwrap().to_owned());
            if let (Some(parent), Some(state)) = (traceparent.as_mut(), headers.get("tracestate")) {
                parent.push_str(" ; ");
                parent.push_str(state.to_str().unwrap());
            }
            keep.lock().unwrap().push(traceparent);
            if uri.path().starts_with("/down") {
                let error = json!({ "error": { "message": "overloaded", "type": "server_error", "code": null } });
                return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(error)).into_response();
            }
            axum::Json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{ "index": 0, "message": { "role": "assistant", "content": "hello" }, "finish_reason": "stop" }],
                "usage": { "prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14 }
            }))
            .into_response()
        }
    });
    (serve(router).await, seen)
}

async fn gateway(
    upstream: &str,
    telemetry: &str,
    env: HashMap<&'static str, String>,
) -> (String, Arc<AppState>) {
    let yaml = format!(
        r#"
providers:
  down: {{ kind: openai, base_url: "{upstream}/down/v1", api_key: {UPSTREAM_KEY} }}
  up: {{ kind: openai, base_url: "{upstream}/up/v1", api_key: {UPSTREAM_KEY} }}
routes:
  default:
    targets: [down:m, up:m]
    retry: {{ max_attempts: 1 }}
{telemetry}
"#
    );
    let file = config::parse(&yaml, false, "test.yaml").unwrap();
    let lookup = move |name: &str| env.get(name).cloned();
    let loaded = config::build(file, config::Source::File("test.yaml".into()), &lookup).unwrap();
    let state = AppState::new(loaded.router, loaded.gateway);
    (serve(app(state.clone())).await, state)
}

async fn chat(gateway: &str, traceparent: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{gateway}/v1/chat/completions"))
        .json(&json!({ "model": "default", "messages": [{ "role": "user", "content": "a secret prompt" }] }));
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent).header("tracestate", "vendor=7");
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// Exports what the gateway holds, as shutdown would.
async fn flush(state: &Arc<AppState>) {
    let telemetry = state.telemetry.clone().expect("traces are exported");
    tokio::task::spawn_blocking(move || telemetry.flush()).await.unwrap();
}

fn spans(received: &Received) -> (Vec<Span>, Vec<(String, String)>) {
    let mut spans = Vec::new();
    let mut resource = Vec::new();
    for (kind, body, authorization) in received.lock().unwrap().iter() {
        assert_eq!(kind, "application/x-protobuf");
        assert_eq!(
            authorization.as_deref(),
            Some("Bearer collector-token"),
            "the configured header goes along"
        );
        let export = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        for resource_spans in export.resource_spans {
            resource.extend(attributes_of(&resource_spans.resource.unwrap().attributes));
            for scope in resource_spans.scope_spans {
                assert_eq!(scope.scope.unwrap().name, "switchyard");
                spans.extend(scope.spans);
            }
        }
    }
    (spans, resource)
}

fn attributes_of(attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(text)) => text.clone(),
                Some(AnyValue::IntValue(n)) => n.to_string(),
                Some(AnyValue::DoubleValue(x)) => x.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    attributes_of(&span.attributes).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_one_trace_continuing_the_clients_with_a_span_per_attempt() {
    let (collector, received) = receiver().await;
    let (upstream, traceparents) = upstream().await;
    let telemetry = format!(
        "telemetry: {{ endpoint: \"{collector}\", service_name: switchyard-test, headers: {{ authorization: \"Bearer collector-token\" }} }}"
    );
    let (gateway, state) = gateway(&upstream, &telemetry, HashMap::new()).await;

    chat(&gateway, Some(&format!("00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"))).await;
    flush(&state).await;

    let (spans, resource) = spans(&received);
    assert!(resource.contains(&("service.name".to_owned(), "switchyard-test".to_owned())), "{resource:?}");
    assert_eq!(spans.len(), 3, "the request and its two attempts: {spans:#?}");
    for span in &spans {
        assert_eq!(hex(&span.trace_id), INCOMING_TRACE, "one trace, the client's");
    }
    let request = spans.iter().find(|s| s.kind == SpanKind::Server as i32).unwrap();
    assert_eq!(hex(&request.parent_span_id), INCOMING_SPAN);
    assert_eq!(request.flags & 0x3ff, 0x301, "sampled, its parent known to be remote");
    assert_eq!(request.name, "chat default");
    for (key, value) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.request.model", "default"),
        ("gen_ai.response.model", "m"),
        ("gen_ai.provider.name", "openai"),
        ("switchyard.route", "default"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(attribute(request, key).as_deref(), Some(value), "request span {key}");
    }
    assert!(attribute(request, "switchyard.queued_ms").is_some());
    assert!(attribute(request, "switchyard.request_id").is_some_and(|id| id.starts_with("req_")));
    assert!(
        attribute(request, "gen_ai.usage.input_tokens").is_none(),
        "tokens count once: on the attempt that spent them"
    );

    let mut attempts: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Client as i32).collect();
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    for attempt in &attempts {
        assert_eq!(attempt.parent_span_id, request.span_id, "each attempt is a child of the request");
        assert_eq!(attempt.flags & 0x3ff, 0x101, "sampled, its parent local");
        assert_eq!(attempt.name, "chat m");
        assert_eq!(attribute(attempt, "gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(attribute(attempt, "gen_ai.request.model").as_deref(), Some("m"));
        assert!(attribute(attempt, "switchyard.credential_id").is_some_and(|id| !id.is_empty()));
        assert!(attempt.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(attempt.end_time_unix_nano <= request.end_time_unix_nano);
    }
    let (failed, served) = (attempts[0], attempts[1]);
    assert_eq!(attribute(failed, "switchyard.target").as_deref(), Some("down:m"));
    assert_eq!(attribute(failed, "switchyard.attempt.outcome").as_deref(), Some("failed"));
    assert_eq!(attribute(failed, "error.type").as_deref(), Some("unavailable"));
    assert_eq!(attribute(failed, "http.response.status_code").as_deref(), Some("503"));
    assert_eq!(failed.status.as_ref().unwrap().code, 2, "an error status");
    assert_eq!(attribute(served, "switchyard.attempt.outcome").as_deref(), Some("ok"));
    assert_eq!(attribute(served, "gen_ai.usage.input_tokens").as_deref(), Some("11"));
    assert_eq!(attribute(served, "gen_ai.usage.output_tokens").as_deref(), Some("3"));
    assert_eq!(attribute(served, "gen_ai.response.model").as_deref(), Some("m"));
    assert!(attribute(served, "error.type").is_none());

    // Each upstream call carried its own attempt's span, and that span was exported.
    let sent: Vec<String> = traceparents.lock().unwrap().iter().map(|t| t.clone().unwrap()).collect();
    let expected: Vec<String> =
        attempts.iter().map(|a| format!("00-{INCOMING_TRACE}-{}-01 ; vendor=7", hex(&a.span_id))).collect();
    assert_eq!(sent, expected);

    // A client's mistake is named on its span but is not the server's error.
    received.lock().unwrap().clear();
    let unknown = reqwest::Client::new()
        .post(format!("{gateway}/v1/chat/completions"))
        .json(&json!({ "model": "nowhere", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    flush(&state).await;
    let (refused, _) = self::spans(&received);
    let refused = refused.iter().find(|s| s.kind == SpanKind::Server as i32).expect("the 404 is traced");
    assert_eq!(attribute(refused, "error.type").as_deref(), Some("404"));
    assert_eq!(refused.status.as_ref().map_or(0, |s| s.code), 0, "a 4xx leaves a server span's status unset");

    // Prompts, answers and keys are never recorded.
    let everything = format!("{spans:?}{resource:?}");
    for secret in ["a secret prompt", "hello", "SECRET", "collector-token"] {
        assert!(!everything.contains(secret), "{secret} was recorded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_environment_configures_export_and_json_is_spoken_on_request() {
    let (collector, received) = receiver().await;
    let (upstream, traceparents) = upstream().await;
    let env = HashMap::from([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.clone()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".to_owned()),
        ("OTEL_SERVICE_NAME", "from-env".to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-token".to_owned()),
    ]);
    let (gateway, state) = gateway(&upstream, "", env).await;

    chat(&gateway, None).await;
    flush(&state).await;

    let received = received.lock().unwrap().clone();
    assert!(!received.is_empty());
    let mut names = Vec::new();
    let mut services = Vec::new();
    for (kind, body, authorization) in &received {
        assert_eq!(kind, "application/json");
        assert_eq!(
            authorization.as_deref(),
            Some("Bearer collector-token"),
            "percent-decoded from the environment"
        );
        let export: Value = serde_json::from_slice(body).unwrap();
        for resource_spans in export["resourceSpans"].as_array().unwrap() {
            services.extend(
                resource_spans["resource"]["attributes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a["key"] == "service.name")
                    .map(|a| a["value"]["stringValue"].clone()),
            );
            for scope in resource_spans["scopeSpans"].as_array().unwrap() {
                names.extend(
                    scope["spans"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_owned()),
                );
            }
        }
    }
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(services.iter().all(|s| s == "from-env") && !services.is_empty());
    // A new trace, begun by the gateway, still reaches the upstream.
    assert!(traceparents.lock().unwrap().iter().all(|t| t.as_ref().is_some_and(|t| t.ends_with("-01"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_nothing_is_traced_and_an_unsampled_trace_is_only_passed_on() {
    let (upstream, traceparents) = upstream().await;
    let (untraced, state) = gateway(&upstream, "", HashMap::new()).await;
    assert!(state.telemetry.is_none(), "no configuration, no exporter");
    chat(&untraced, Some(&format!("00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"))).await;
    assert!(traceparents.lock().unwrap().iter().all(Option::is_none));

    let (collector, received) = receiver().await;
    let (upstream, traceparents) = self::upstream().await;
    let telemetry = format!("telemetry: {{ endpoint: \"{collector}\", sampler: parentbased_always_off }}");
    let (unsampled, state) = gateway(&upstream, &telemetry, HashMap::new()).await;
    chat(&unsampled, None).await;
    flush(&state).await;
    assert!(received.lock().unwrap().is_empty(), "an unsampled request exports nothing");
    let sent = traceparents.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|t| t.as_ref().is_some_and(|t| t.ends_with("-00"))), "{sent:?}");
}

#[test]
fn bad_telemetry_settings_are_named() {
    let cases = [
        ("telemetry: { endpoint: \"collector:4318\" }", HashMap::new(), "telemetry.endpoint"),
        ("telemetry: { protocol: grpc }", HashMap::new(), "use http/protobuf"),
        ("telemetry: { sampler: sometimes }", HashMap::new(), "`sometimes` is not a sampler"),
        ("telemetry: { sampler: traceidratio, sampler_arg: 2 }", HashMap::new(), "not between 0 and 1"),
        (
            "",
            HashMap::from([
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318".to_owned()),
                ("OTEL_TRACES_SAMPLER_ARG", "half".to_owned()),
            ]),
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        ("", HashMap::from([("OTEL_TRACES_EXPORTER", "zipkin".to_owned())]), "`zipkin` is not an exporter"),
        (
            "",
            HashMap::from([
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318".to_owned()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
            ]),
            "OTEL_EXPORTER_OTLP_PROTOCOL: `grpc` is not supported",
        ),
    ];
    for (telemetry, env, expected) in cases {
        let yaml = format!(
            "providers: {{ a: {{ kind: simulated }} }}\nroutes: {{ default: {{ targets: [a:m] }} }}\n{telemetry}\n"
        );
        let file = config::parse(&yaml, false, "test.yaml").unwrap();
        let lookup = move |name: &str| env.get(name).cloned();
        let error =
            config::build(file, config::Source::File("test.yaml".into()), &lookup).unwrap_err().to_string();
        assert!(error.contains(expected), "{telemetry}: {error}");
    }
    // Disabled by the standard switch, whatever else is set.
    let yaml =
        "providers: { a: { kind: simulated } }\nroutes: { default: { targets: [a:m] } }\ntelemetry: {}\n";
    let env = HashMap::from([("OTEL_SDK_DISABLED", "true".to_owned())]);
    let lookup = move |name: &str| env.get(name).cloned();
    let loaded =
        config::build(config::parse(yaml, false, "t").unwrap(), config::Source::File("t".into()), &lookup)
            .unwrap();
    assert!(loaded.gateway.telemetry.is_none());
    // The argument means nothing to a sampler without a ratio.
    let env = HashMap::from([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318".to_owned()),
        ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
        ("OTEL_TRACES_SAMPLER_ARG", "5".to_owned()),
    ]);
    let lookup = move |name: &str| env.get(name).cloned();
    let yaml = "providers: { a: { kind: simulated } }\nroutes: { default: { targets: [a:m] } }\n";
    let loaded =
        config::build(config::parse(yaml, false, "t").unwrap(), config::Source::File("t".into()), &lookup)
            .unwrap();
    assert!(loaded.gateway.telemetry.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_span_names_its_client_key_by_name_never_the_key() {
    let (collector, received) = receiver().await;
    let (upstream, _) = upstream().await;
    let sections = format!(
        "telemetry: {{ endpoint: \"{collector}\", headers: {{ authorization: \"Bearer collector-token\" }} }}\ngateway: {{ keys: [{{ name: traced-team, key: gw-traced-key-0001 }}] }}"
    );
    let (gateway, state) = gateway(&upstream, &sections, HashMap::new()).await;
    let response = reqwest::Client::new()
        .post(format!("{gateway}/v1/chat/completions"))
        .bearer_auth("gw-traced-key-0001")
        .json(&json!({ "model": "default", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    flush(&state).await;
    let (spans, _) = spans(&received);
    let request = spans.iter().find(|s| s.kind == SpanKind::Server as i32).unwrap();
    assert_eq!(attribute(request, "switchyard.key").as_deref(), Some("traced-team"));
    assert!(!format!("{spans:?}").contains("gw-traced-key"), "the key was recorded");
}
