//! OpenTelemetry traces: every request a span, every attempt of its trail a child span, named
//! and attributed after the GenAI semantic conventions, exported as OTLP over HTTP.
//!
//! The spans are written when the request ends, from what the gateway already keeps: its
//! clock, its trail and its usage. Each attempt's span id was chosen by the router before the
//! provider was called (the call carried it upstream as `traceparent`), so the span exported
//! here is the very parent the upstream saw. Nothing is written on the request path but one
//! hand-off to the SDK's batch processor, which exports from its own thread; with telemetry
//! off there is no processor and no context at all.
//!
//! Prompts and answers are never recorded; keys never (credential ids only).

mod protobuf;

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SamplingDecision, ShouldSample, SpanData, SpanEvents,
    SpanLinks, SpanProcessor,
};
use switchyard::chat::Usage;
use switchyard::credential::Secret;
use switchyard::trace::TraceContext;
use switchyard::trail::{Attempt, Outcome, Trail, Via};

/// How traces are exported (`telemetry:` and the standard `OTEL_*` environment).
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// Where spans are posted: the OTLP/HTTP traces URL (`.../v1/traces`).
    pub traces_url: String,
    /// `http/protobuf` or `http/json`.
    pub protocol: OtlpProtocol,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Which requests are traced.
    pub sampler: SamplerSetting,
    /// Headers for the collector (an API key, often): never printed.
    pub headers: Vec<(String, Secret)>,
    /// How long one export may take.
    pub timeout: Duration,
}

impl TelemetrySettings {
    /// What the banner and `doctor` say of it: where spans go, how, and which are sampled
    /// (`traces to http://collector:4318/v1/traces (http/protobuf), sampler
    /// parentbased_always_on, service switchyard`). The headers, which may hold a key, never;
    /// nor a user and password written into the URL.
    pub fn describe(&self) -> String {
        let url = match reqwest::Url::parse(&self.traces_url) {
            Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.to_string()
            }
            _ => self.traces_url.clone(),
        };
        let protocol = match self.protocol {
            OtlpProtocol::Protobuf => "http/protobuf",
            OtlpProtocol::Json => "http/json",
        };
        format!(
            "traces to {url} ({protocol}), sampler {}, service {}",
            self.sampler.describe(),
            self.service_name
        )
    }
}

/// The OTLP encodings over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Protobuf,
    Json,
}

/// `OTEL_TRACES_SAMPLER` and its argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerSetting {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedTraceIdRatio(f64),
}

impl SamplerSetting {
    /// The sampler `name` (as `OTEL_TRACES_SAMPLER` spells it) with `arg`, the ratio of the
    /// ratio samplers (default 1.0).
    pub fn parse(name: &str, arg: Option<f64>) -> Result<Self, String> {
        let ratio = arg.unwrap_or(1.0);
        let is_ratio = matches!(name.trim(), "traceidratio" | "parentbased_traceidratio");
        // The argument means something only to the ratio samplers; others ignore it.
        if is_ratio && !(0.0..=1.0).contains(&ratio) {
            return Err(format!("the sampler's ratio {ratio} is not between 0 and 1"));
        }
        Ok(match name.trim() {
            "always_on" => Self::AlwaysOn,
            "always_off" => Self::AlwaysOff,
            "traceidratio" => Self::TraceIdRatio(ratio),
            "parentbased_always_on" => Self::ParentBasedAlwaysOn,
            "parentbased_always_off" => Self::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => Self::ParentBasedTraceIdRatio(ratio),
            other => {
                return Err(format!(
                    "`{other}` is not a sampler Switchyard has: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        })
    }

    /// The sampler as `OTEL_TRACES_SAMPLER` spells it, its ratio after a colon.
    fn describe(self) -> String {
        match self {
            Self::AlwaysOn => "always_on".to_owned(),
            Self::AlwaysOff => "always_off".to_owned(),
            Self::TraceIdRatio(ratio) => format!("traceidratio:{ratio}"),
            Self::ParentBasedAlwaysOn => "parentbased_always_on".to_owned(),
            Self::ParentBasedAlwaysOff => "parentbased_always_off".to_owned(),
            Self::ParentBasedTraceIdRatio(ratio) => format!("parentbased_traceidratio:{ratio}"),
        }
    }

    fn sampler(self) -> Sampler {
        match self {
            Self::AlwaysOn => Sampler::AlwaysOn,
            Self::AlwaysOff => Sampler::AlwaysOff,
            Self::TraceIdRatio(ratio) => Sampler::TraceIdRatioBased(ratio),
            Self::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            Self::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            Self::ParentBasedTraceIdRatio(ratio) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
            }
        }
    }
}

/// A running exporter.
pub struct Telemetry {
    processor: BatchSpanProcessor,
    sampler: Sampler,
    scope: InstrumentationScope,
    /// Each provider's `gen_ai.provider.name`, by provider id.
    providers: HashMap<String, &'static str>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

/// What a trace needs to know of a request beyond its trail.
pub struct RequestSpan<'a> {
    /// The request's own span; its parent, when the client sent a `traceparent`.
    pub context: TraceContext,
    pub parent: Option<u64>,
    pub wall: SystemTime,
    /// How long after its arrival the router took it (the body read, parsed): the trail's
    /// offsets count from there.
    pub routed: Duration,
    pub duration: Duration,
    /// The endpoint (`chat_completions`, `messages`, `responses`, `embeddings`, ...).
    pub endpoint: &'static str,
    pub request_id: &'a str,
    /// The `model` the client named.
    pub model: &'a str,
    pub route: &'a str,
    pub served_by: Option<&'a Via>,
    pub status: u16,
    /// The error kind that ended a stream after its status was sent.
    pub late_error: Option<&'static str>,
    pub queued: Duration,
    pub usage: Option<Usage>,
    pub trail: Option<&'a Trail>,
    /// The label of the client key it came with (its name, never the key).
    pub key: Option<&'a str>,
}

impl Telemetry {
    /// Starts the exporter. Its HTTP calls run on `runtime`; the batch processor exports from
    /// a thread of its own. `providers` gives each provider id its kind.
    pub fn start(
        settings: &TelemetrySettings,
        runtime: tokio::runtime::Handle,
        providers: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| format!("cannot make the OTLP client: {e}"))?;
        let client = OtlpClient { client, runtime };
        // A busy gateway makes tens of thousands of spans a second: a queue that holds a few
        // seconds of them, exported in large batches (the OTEL_BSP_* variables still apply
        // where they are set).
        let mut batch = BatchConfigBuilder::default();
        if std::env::var_os("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
            batch = batch.with_max_queue_size(65_536);
        }
        if std::env::var_os("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").is_none() {
            batch = batch.with_max_export_batch_size(4_096);
        }
        let batch = batch.build();
        let mut processor = match settings.protocol {
            // Written straight from the spans: see `protobuf`.
            OtlpProtocol::Protobuf => {
                let url = settings
                    .traces_url
                    .parse()
                    .map_err(|e| format!("`{}` is not a URL: {e}", settings.traces_url))?;
                let mut headers = axum::http::HeaderMap::new();
                for (name, value) in &settings.headers {
                    let name = axum::http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("`{name}` cannot be an HTTP header name"))?;
                    let mut value = axum::http::HeaderValue::from_str(value.expose()).map_err(|_| {
                        format!("the value of header `{name}` holds characters a header cannot carry")
                    })?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                let scope = ("switchyard", env!("CARGO_PKG_VERSION"));
                let exporter = protobuf::ProtobufExporter::new(Box::new(client), url, headers, scope);
                BatchSpanProcessor::builder(exporter).with_batch_config(batch).build()
            }
            OtlpProtocol::Json => {
                let headers: HashMap<String, String> = settings
                    .headers
                    .iter()
                    .map(|(name, value)| (name.clone(), value.expose().to_owned()))
                    .collect();
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(client)
                    .with_endpoint(settings.traces_url.clone())
                    .with_protocol(Protocol::HttpJson)
                    .with_timeout(settings.timeout)
                    .with_headers(headers)
                    .build()
                    .map_err(|e| format!("cannot start the OTLP exporter: {e}"))?;
                BatchSpanProcessor::builder(exporter).with_batch_config(batch).build()
            }
        };
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        processor.set_resource(&resource);
        let providers = providers.into_iter().map(|(id, kind)| (id, provider_name(&kind))).collect();
        Ok(Self {
            processor,
            sampler: settings.sampler.sampler(),
            scope: InstrumentationScope::builder("switchyard")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            providers,
        })
    }

    /// The context of a request arriving with `headers`: a child of the client's
    /// `traceparent` when it sent one, else a new trace; sampled as the sampler decides.
    pub fn begin(&self, headers: &HeaderMap) -> (TraceContext, Option<u64>) {
        let incoming = headers.get("traceparent").and_then(|v| v.to_str().ok()).and_then(TraceContext::parse);
        let (trace_id, parent) = match incoming {
            Some(parent) => (parent.trace_id, Some(parent)),
            None => (TraceContext::root(false).trace_id, None),
        };
        let parent_cx = match parent {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from(parent.trace_id),
                SpanId::from(parent.span_id),
                if parent.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() },
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let decision = self.sampler.should_sample(
            Some(&parent_cx),
            TraceId::from(trace_id),
            "request",
            &SpanKind::Server,
            &[],
            &[],
        );
        let sampled = matches!(decision.decision, SamplingDecision::RecordAndSample);
        let context = TraceContext { trace_id, span_id: switchyard::trace::random_id(), sampled };
        (context, parent.map(|p| p.span_id))
    }

    /// Hands the request's span and its attempts' to the exporter (only when sampled).
    pub fn record(&self, request: &RequestSpan<'_>) {
        if !request.context.sampled {
            return;
        }
        let operation = operation(request.endpoint);
        let end = request.wall + request.duration;
        // Each attribute is an allocation or two here and in the exporter's encoding: a span
        // carries what the conventions and an operator's questions need, not what its children
        // already say. Tokens are on the attempt that spent them only, so that summing
        // `gen_ai.usage.*` over spans counts them once.
        let mut attributes = Vec::with_capacity(10);
        attributes.extend([
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.request.model", request.model.to_owned()),
            KeyValue::new("http.response.status_code", i64::from(request.status)),
            KeyValue::new("switchyard.request_id", request.request_id.to_owned()),
            KeyValue::new("switchyard.queued_ms", millis(request.queued)),
        ]);
        if !request.route.is_empty() {
            attributes.push(KeyValue::new("switchyard.route", request.route.to_owned()));
        }
        if let Some(key) = request.key {
            attributes.push(KeyValue::new("switchyard.key", key.to_owned()));
        }
        match request.served_by {
            Some(Via::Target(target)) => {
                attributes.push(KeyValue::new("gen_ai.provider.name", self.provider_name(target.provider())));
                attributes.push(KeyValue::new("gen_ai.response.model", target.model().to_owned()));
            }
            Some(via @ Via::Candidate(_)) => {
                attributes.push(KeyValue::new("switchyard.served_by", via.to_string()))
            }
            None => {}
        }
        let error = request_error(request);
        if let Some(error) = &error {
            attributes.push(KeyValue::new("error.type", error.clone()));
        }
        let model = if request.model.is_empty() { "(none)" } else { request.model };
        let span = self.span(
            format!("{operation} {model}"),
            SpanKind::Server,
            (request.context, request.parent.unwrap_or(0), request.parent.is_some()),
            (request.wall, end),
            attributes,
            // A client's mistake (4xx) is not the server's error: `error.type` says it, the
            // status stays unset, as the conventions ask of server spans.
            match error {
                Some(error) if request.status >= 500 || request.late_error.is_some() => Status::error(error),
                _ => Status::Unset,
            },
        );
        self.processor.on_end(span);
        for attempt in request.trail.map(Trail::attempts).unwrap_or_default() {
            self.processor.on_end(self.attempt_span(request, operation, attempt));
        }
    }

    fn attempt_span(
        &self,
        request: &RequestSpan<'_>,
        operation: &'static str,
        attempt: &Attempt,
    ) -> SpanData {
        let start = request.wall + request.routed + attempt.started;
        let mut attributes = Vec::with_capacity(10);
        attributes.extend([
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("switchyard.attempt.outcome", attempt.outcome.as_str()),
        ]);
        if !attempt.queued.is_zero() {
            attributes.push(KeyValue::new("switchyard.queued_ms", millis(attempt.queued)));
        }
        let name = match &attempt.via {
            Via::Target(target) => {
                attributes.push(KeyValue::new("gen_ai.provider.name", self.provider_name(target.provider())));
                attributes.push(KeyValue::new("gen_ai.request.model", target.model().to_owned()));
                attributes.push(KeyValue::new("switchyard.target", target.to_string()));
                format!("{operation} {}", target.model())
            }
            Via::Candidate(name) => {
                attributes.push(KeyValue::new("switchyard.candidate", name.to_string()));
                format!("candidate {name}")
            }
        };
        if let Some(id) = &attempt.credential_id {
            attributes.push(KeyValue::new("switchyard.credential_id", id.as_str().to_owned()));
        }
        if attempt.hedge {
            attributes.push(KeyValue::new("switchyard.hedge", true));
        }
        if let Some(note) = &attempt.note {
            attributes.push(KeyValue::new("switchyard.attempt.note", note.clone()));
        }
        let served =
            attempt.outcome == Outcome::Ok && request.served_by.is_some_and(|via| *via == attempt.via);
        if served {
            if let Some(Via::Target(target)) = request.served_by {
                attributes.push(KeyValue::new("gen_ai.response.model", target.model().to_owned()));
            }
            if let Some(usage) = request.usage {
                attributes.push(KeyValue::new("gen_ai.usage.input_tokens", i64::from(usage.prompt_tokens)));
                attributes
                    .push(KeyValue::new("gen_ai.usage.output_tokens", i64::from(usage.completion_tokens)));
            }
        }
        let status = match &attempt.error {
            Some(error) if !attempt.outcome.is_skip() => {
                attributes.push(KeyValue::new("error.type", error.kind().as_str()));
                if let Some(status) = error.status() {
                    attributes.push(KeyValue::new("http.response.status_code", i64::from(status)));
                }
                Status::error(error.kind().as_str())
            }
            _ => Status::Unset,
        };
        // A span the upstream saw keeps the id it saw; a skip or a candidate gets a new one.
        let context = TraceContext {
            span_id: attempt.span_id.unwrap_or_else(switchyard::trace::random_id),
            ..request.context
        };
        self.span(
            name,
            SpanKind::Client,
            (context, request.context.span_id, false),
            (start, start + attempt.duration),
            attributes,
            status,
        )
    }

    fn span(
        &self,
        name: String,
        kind: SpanKind,
        (context, parent, parent_is_remote): (TraceContext, u64, bool),
        (start_time, end_time): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        status: Status,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(context.trace_id),
                SpanId::from(context.span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(parent),
            parent_span_is_remote: parent_is_remote,
            span_kind: kind,
            name: Cow::Owned(name),
            start_time,
            end_time,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    fn provider_name(&self, provider: &str) -> &'static str {
        self.providers.get(provider).copied().unwrap_or("_OTHER")
    }

    /// Exports what is waiting now. Blocks: call it off the async threads.
    pub fn flush(&self) {
        if let Err(error) = self.processor.force_flush() {
            tracing::warn!(%error, "could not export traces");
        }
    }

    /// Exports what is waiting and stops. Blocks: call it off the async threads.
    pub fn shutdown(&self) {
        if let Err(error) = self.processor.shutdown() {
            tracing::warn!(%error, "could not export the last traces");
        }
    }
}

/// `gen_ai.operation.name` of an endpoint.
fn operation(endpoint: &str) -> &'static str {
    match endpoint {
        "embeddings" => "embeddings",
        "count_tokens" => "count_tokens",
        _ => "chat",
    }
}

/// `gen_ai.provider.name` of a provider kind, as the conventions name providers.
fn provider_name(kind: &str) -> &'static str {
    match kind {
        "openai" => "openai",
        "anthropic" => "anthropic",
        "gemini" => "gcp.gemini",
        "vertex" => "gcp.vertex_ai",
        "azure" => "azure.ai.openai",
        "simulated" => "simulated",
        _ => "_OTHER",
    }
}

/// `error.type` of a request that failed: the kind of its last failed attempt, else its
/// status code; a stream cut after its status names the error that cut it.
fn request_error(request: &RequestSpan<'_>) -> Option<String> {
    if let Some(kind) = request.late_error {
        return Some(kind.to_owned());
    }
    if request.status < 400 {
        return None;
    }
    let last = request
        .trail
        .and_then(|trail| trail.attempts().iter().rev().find_map(|a| a.error.as_ref()))
        .map(|error| error.kind().as_str().to_owned());
    Some(last.unwrap_or_else(|| request.status.to_string()))
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The exporter's HTTP client: the gateway's reqwest, on the gateway's runtime (the batch
/// processor's thread has none).
#[derive(Debug)]
struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let exchange = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = exchange.await??;
        let mut response = opentelemetry_http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
