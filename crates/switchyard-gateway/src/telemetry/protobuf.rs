//! An OTLP/HTTP protobuf span exporter for the SDK's batch processor that writes the wire
//! format straight from each [`SpanData`].
//!
//! The OTLP crate's exporter first copies every span into the generated proto structs (each
//! attribute key and string value allocated again), then encodes those. At sampler 1.0 that
//! was most of what tracing cost a request (docs/BENCHMARKS.md). This one encodes in one pass
//! into a reused buffer, with prost's varint and key helpers. The message and field numbers
//! are OTLP's (`opentelemetry/proto/collector/trace/v1`), and the tests decode what it writes
//! with the generated types of `opentelemetry-proto`.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Uri};
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, Value};
use opentelemetry_http::{Bytes, HttpClient, Request};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

/// Posts each batch as an `ExportTraceServiceRequest` to an OTLP/HTTP traces URL.
pub struct ProtobufExporter {
    client: Box<dyn HttpClient>,
    url: Uri,
    headers: HeaderMap,
    /// The `Resource` message (its attributes), encoded once.
    resource: Vec<u8>,
    /// The `InstrumentationScope` message, encoded once.
    scope: Vec<u8>,
    /// The buffers of the last batch, kept for the next (the processor exports one at a time).
    buffers: Mutex<Buffers>,
    /// When a failed export was last logged, in Unix seconds: at most once a minute.
    warned_at: AtomicU64,
}

#[derive(Default)]
struct Buffers {
    spans: Vec<u8>,
    span: Vec<u8>,
}

impl fmt::Debug for ProtobufExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtobufExporter").field("url", &self.url).finish_non_exhaustive()
    }
}

impl ProtobufExporter {
    /// An exporter posting to `url` with `headers` (marked sensitive), named as scope
    /// `scope_name` at `scope_version`.
    pub fn new(
        client: Box<dyn HttpClient>,
        url: Uri,
        headers: HeaderMap,
        (scope_name, scope_version): (&str, &str),
    ) -> Self {
        let mut scope = Vec::new();
        string_field(&mut scope, 1, scope_name);
        string_field(&mut scope, 2, scope_version);
        Self {
            client,
            url,
            headers,
            resource: Vec::new(),
            scope,
            buffers: Mutex::default(),
            warned_at: AtomicU64::new(0),
        }
    }

    /// The request body for `batch`.
    fn body(&self, batch: &[SpanData]) -> Vec<u8> {
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let Buffers { spans, span } = &mut *buffers;
        spans.clear();
        for data in batch {
            span.clear();
            encode_span(span, data);
            message_field(spans, 2, span);
        }
        // ScopeSpans { scope = 1, spans = 2 }
        let scope_spans_len = field_len(1, self.scope.len()) + spans.len();
        // ResourceSpans { resource = 1, scope_spans = 2 }
        let resource_spans_len = field_len(1, self.resource.len()) + field_len(2, scope_spans_len);
        let mut body = Vec::with_capacity(field_len(1, resource_spans_len));
        // ExportTraceServiceRequest { resource_spans = 1 }
        encode_key(1, WireType::LengthDelimited, &mut body);
        encode_varint(resource_spans_len as u64, &mut body);
        message_field(&mut body, 1, &self.resource);
        encode_key(2, WireType::LengthDelimited, &mut body);
        encode_varint(scope_spans_len as u64, &mut body);
        message_field(&mut body, 1, &self.scope);
        body.extend_from_slice(spans);
        body
    }

    fn warn(&self, error: &str) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let last = self.warned_at.load(Ordering::Relaxed);
        if now >= last + 60
            && self.warned_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::warn!(error, "could not export traces (said at most once a minute)");
        }
    }
}

impl SpanExporter for ProtobufExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let body = self.body(&batch);
        drop(batch);
        let mut request = Request::post(self.url.clone())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .body(Bytes::from(body))
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        request.headers_mut().extend(self.headers.clone());
        match self.client.send_bytes(request).await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => {
                let error = format!("the collector answered {}", response.status());
                self.warn(&error);
                Err(OTelSdkError::InternalFailure(error))
            }
            Err(error) => {
                let error = format!("the collector cannot be reached: {error}");
                self.warn(&error);
                Err(OTelSdkError::InternalFailure(error))
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource.clear();
        for (key, value) in resource.iter() {
            attribute_field(&mut self.resource, 1, key.as_str(), value);
        }
    }
}

/// One `Span` message.
fn encode_span(out: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes_field(out, 1, &context.trace_id().to_bytes());
    bytes_field(out, 2, &context.span_id().to_bytes());
    let state = context.trace_state().header();
    if !state.is_empty() {
        string_field(out, 3, &state);
    }
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        bytes_field(out, 4, &span.parent_span_id.to_bytes());
    }
    string_field(out, 5, &span.name);
    let kind = match span.span_kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    };
    encode_key(6, WireType::Varint, out);
    encode_varint(kind, out);
    fixed64_field(out, 7, unix_nanos(span.start_time));
    fixed64_field(out, 8, unix_nanos(span.end_time));
    for kv in &span.attributes {
        attribute_field(out, 9, kv.key.as_str(), &kv.value);
    }
    if span.dropped_attributes_count > 0 {
        encode_key(10, WireType::Varint, out);
        encode_varint(u64::from(span.dropped_attributes_count), out);
    }
    // Status { message = 2, code = 3 }
    match &span.status {
        Status::Unset => {}
        Status::Ok => message_field(out, 15, &[3 << 3, 1]),
        Status::Error { description } => {
            let mut status = Vec::with_capacity(description.len() + 4);
            string_field(&mut status, 2, description);
            status.extend_from_slice(&[3 << 3, 2]);
            message_field(out, 15, &status);
        }
    }
    // Flags: the W3C trace flags, and whether the parent is remote (bits 8 and 9).
    let mut flags = u32::from(context.trace_flags().to_u8()) | 0x100;
    if span.parent_span_is_remote {
        flags |= 0x200;
    }
    encode_key(16, WireType::ThirtyTwoBit, out);
    out.extend_from_slice(&flags.to_le_bytes());
}

/// A `KeyValue` message as field `field`: `key = 1`, `value = 2` (an `AnyValue`).
fn attribute_field(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    let value_len = any_value_len(value);
    let len = field_len(1, key.len()) + field_len(2, value_len);
    encode_key(field, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
    string_field(out, 1, key);
    encode_key(2, WireType::LengthDelimited, out);
    encode_varint(value_len as u64, out);
    encode_any_value(out, value);
}

/// `AnyValue`'s encoded length: `string_value = 1`, `bool_value = 2`, `int_value = 3`,
/// `double_value = 4`, `array_value = 5`.
fn any_value_len(value: &Value) -> usize {
    match value {
        Value::String(text) => field_len(1, text.as_str().len()),
        Value::Bool(_) => 2,
        Value::I64(n) => 1 + encoded_len_varint(*n as u64),
        Value::F64(_) => 9,
        Value::Array(array) => field_len(5, array_len(array)),
        // A kind a later version of the API adds: as its text.
        other => field_len(1, other.as_str().len()),
    }
}

fn encode_any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(text) => string_field(out, 1, text.as_str()),
        Value::Bool(flag) => {
            encode_key(2, WireType::Varint, out);
            encode_varint(u64::from(*flag), out);
        }
        Value::I64(n) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(*n as u64, out);
        }
        Value::F64(x) => fixed64_field(out, 4, x.to_bits()),
        Value::Array(array) => {
            encode_key(5, WireType::LengthDelimited, out);
            encode_varint(array_len(array) as u64, out);
            for_each_in(array, |item| {
                encode_key(1, WireType::LengthDelimited, out);
                encode_varint(any_value_len(&item) as u64, out);
                encode_any_value(out, &item);
            });
        }
        other => string_field(out, 1, &other.as_str()),
    }
}

/// `ArrayValue { values = 1 }`'s encoded length.
fn array_len(array: &Array) -> usize {
    let mut len = 0;
    for_each_in(array, |item| len += field_len(1, any_value_len(&item)));
    len
}

fn for_each_in(array: &Array, mut each: impl FnMut(Value)) {
    match array {
        Array::Bool(items) => items.iter().for_each(|v| each(Value::Bool(*v))),
        Array::I64(items) => items.iter().for_each(|v| each(Value::I64(*v))),
        Array::F64(items) => items.iter().for_each(|v| each(Value::F64(*v))),
        Array::String(items) => items.iter().for_each(|v| each(Value::String(v.clone()))),
        _ => {}
    }
}

/// The length of a length-delimited field `field` of `len` bytes, key and length included.
fn field_len(field: u32, len: usize) -> usize {
    prost::encoding::key_len(field) + encoded_len_varint(len as u64) + len
}

fn message_field(out: &mut Vec<u8>, field: u32, message: &[u8]) {
    encode_key(field, WireType::LengthDelimited, out);
    encode_varint(message.len() as u64, out);
    out.extend_from_slice(message);
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    message_field(out, field, bytes);
}

fn string_field(out: &mut Vec<u8>, field: u32, text: &str) {
    message_field(out, field, text.as_bytes());
}

fn fixed64_field(out: &mut Vec<u8>, field: u32, value: u64) {
    encode_key(field, WireType::SixtyFourBit, out);
    out.extend_from_slice(&value.to_le_bytes());
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_match_what_is_written() {
        for value in [
            Value::from("gpt-4o-mini"),
            Value::from(true),
            Value::from(-3i64),
            Value::from(1_000_000i64),
            Value::from(2.5f64),
            Value::Array(Array::String(vec!["a".into(), "bc".into()])),
            Value::Array(Array::I64(vec![1, 300])),
        ] {
            let mut out = Vec::new();
            encode_any_value(&mut out, &value);
            assert_eq!(out.len(), any_value_len(&value), "{value:?}");
        }
    }
}
