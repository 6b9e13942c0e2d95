//! Claude through InvokeModel: the Anthropic adapter's Messages body and stream decoder,
//! shared (not copied).
//!
//! The body is what the Anthropic adapter sends (the client's own, verbatim, for an Anthropic
//! client) less `model` (it is in the path) and `stream` (the endpoint says it), with
//! `anthropic_version: bedrock-2023-05-31` and the beta flags as `anthropic_beta` (Bedrock
//! takes none as a header). A stream's `chunk` frames carry `{"bytes": base64}` of one
//! Anthropic stream event, which becomes the SSE event the Anthropic decoder reads (and, for an
//! Anthropic client, the frame it is passed as).

use base64::Engine as _;
use futures_core::Stream;
use futures_util::StreamExt;
use switchyard::ProviderError;
use switchyard::chat::ChatRequest;
use switchyard::provider::{Call, ChunkStream};

use super::eventstream::Frame;
use super::{ANTHROPIC_VERSION, Redactor, classify};
use crate::anthropic::{self, ThinkingStyle};
use crate::sse::SseEvent;

/// The InvokeModel body of `request` with `betas`.
pub(crate) fn body(
    call: &Call<'_>,
    request: &ChatRequest,
    betas: &[String],
    thinking: Option<ThinkingStyle>,
) -> Result<Vec<u8>, ProviderError> {
    let listed = serde_json::to_string(betas).unwrap_or_else(|_| "[]".to_owned());
    let envelope = anthropic::Envelope::Cloud {
        version: ANTHROPIC_VERSION,
        stream_in_body: false,
        betas: (!betas.is_empty()).then_some(listed.as_str()),
    };
    anthropic::messages_body(call.model, request, false, thinking, envelope)
}

/// The CountTokens body of `request`: its InvokeModel body (with a `max_tokens`, which a count
/// request lacks), base64 as the API takes it (`{"input": {"invokeModel": {"body": …}}}`).
pub(crate) fn count_body(
    call: &Call<'_>,
    request: &ChatRequest,
    betas: &[String],
    thinking: Option<ThinkingStyle>,
) -> Result<Vec<u8>, ProviderError> {
    let mut invoke: serde_json::Value = serde_json::from_slice(&body(call, request, betas, thinking)?)
        .map_err(|error| ProviderError::unsupported(format!("the request could not be counted: {error}")))?;
    // A count request has no `max_tokens`, which an InvokeModel body for Claude must have, and
    // which must exceed a thinking budget.
    if let Some(object) = invoke.as_object_mut() {
        let budget = object.get("thinking").and_then(|t| t["budget_tokens"].as_u64()).unwrap_or(0);
        let asked = object.get("max_tokens").and_then(serde_json::Value::as_u64).unwrap_or(0);
        object.insert("max_tokens".to_owned(), serde_json::Value::from(asked.max(budget.saturating_add(1))));
    }
    let invoke = invoke.to_string();
    let encoded = base64::engine::general_purpose::STANDARD.encode(invoke);
    Ok(serde_json::json!({ "input": { "invokeModel": { "body": encoded } } }).to_string().into_bytes())
}

/// The foundation model CountTokens counts for `model`: a cross-region inference profile's id
/// (`us.anthropic.claude-…`, or its ARN) is refused there, so its model's own id is asked
/// (the same tokenizer); any other id as it is.
pub(crate) fn counted_model(model: &str) -> &str {
    let id = model.rsplit('/').next().unwrap_or(model);
    match id.find("anthropic.") {
        Some(at) if at > 0 && id[..at].ends_with('.') && !id[..at - 1].contains(['.', ':']) => &id[at..],
        Some(0) => id,
        _ => model,
    }
}

/// The chunks of an InvokeModel stream: its frames as Anthropic events, read by the Anthropic
/// adapter's decoder.
pub(crate) fn chunk_stream<S>(
    frames: S,
    call: &Call<'_>,
    request: &ChatRequest,
    redactor: Redactor,
) -> ChunkStream
where
    S: Stream<Item = Result<Frame, ProviderError>> + Send + Unpin + 'static,
{
    let scrub = redactor.clone();
    let events = frames.map(move |frame| frame.and_then(|frame| event_of(frame, &redactor)));
    let mut decoder = anthropic::stream::Decoder::new(request.origin, call.credential.key().cloned());
    decoder.pass_on = anthropic::verbatim_body(request).is_some();
    decoder.json_answer = anthropic::json_mode(request);
    // What the events say (an `error` event's message, an unreadable event's excerpt) is cut
    // free of the call's secrets, which the decoder does not know under SigV4.
    let chunks = anthropic::stream::chunk_stream(events, decoder);
    Box::pin(chunks.map(move |item| item.map(|chunk| scrub.chunk(chunk)).map_err(|error| scrub.error(error))))
}

/// The SSE event of one frame; an exception or error frame is its classified error.
fn event_of(frame: Frame, redactor: &Redactor) -> Result<SseEvent, ProviderError> {
    match frame {
        Frame::Event { kind, payload } if kind == "chunk" => Ok(chunk_event(&payload)),
        // No other event is documented; one would say nothing to the decoder.
        Frame::Event { .. } => Ok(SseEvent { event: Some("ping".into()), data: r#"{"type":"ping"}"#.into() }),
        Frame::Exception { kind, payload } => Err(classify::stream_exception(&kind, &payload, redactor)),
        Frame::Error { code, message } => Err(classify::stream_error(&code, &message, redactor)),
    }
}

/// The Anthropic event a `chunk` frame carries, named by its `type`. A payload that does not
/// decode becomes an event the decoder cannot read, so that its rule for unreadable events
/// (skip a few, then fail) applies as it does to Anthropic's own streams.
fn chunk_event(payload: &[u8]) -> SseEvent {
    #[derive(serde::Deserialize)]
    struct Chunk {
        bytes: String,
    }
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: String,
    }
    let decoded = serde_json::from_slice::<Chunk>(payload)
        .ok()
        .and_then(|chunk| base64::engine::general_purpose::STANDARD.decode(chunk.bytes).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok());
    match decoded {
        Some(data) => {
            let event = serde_json::from_str::<Kind>(&data).ok().map(|k| k.kind);
            SseEvent { event, data }
        }
        None => SseEvent {
            event: None,
            data: format!("an undecodable chunk: {}", String::from_utf8_lossy(payload)),
        },
    }
}
