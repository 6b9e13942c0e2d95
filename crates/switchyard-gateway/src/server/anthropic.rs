//! The Anthropic dialect: `/v1/messages`, translated to the canonical types by the Anthropic
//! codec and back.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use switchyard::Answer;
use switchyard::chat::{ChatChunk, ChatRequest, Dialect as ChatDialect, Verbatim};
use switchyard_providers::anthropic::codec::{self, StreamEncoder};

use super::sse::{Encoder, respond, write_event};
use super::{
    ApiError, AppState, Delivered, Dialect, RequestContext, accept, add_usage_metrics, answered,
    note_claude_thinking, route_failed,
};

pub async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parse = |bytes: &Bytes| {
        let mut request = codec::request_from_slice(bytes)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))?;
        // An Anthropic provider receives the body as written, not a translation of it.
        request.verbatim = Some(Verbatim::new(ChatDialect::Anthropic, bytes.clone()));
        Ok(request)
    };
    let endpoint = (Dialect::Anthropic, "messages");
    let (mut exchange, request) =
        match accept(&state, &headers, body, endpoint, parse, |r: &ChatRequest| &r.model).await {
            Ok(accepted) => accepted,
            Err(response) => return response,
        };
    note_claude_thinking(&mut exchange, &request);
    let options = exchange.options(&headers);
    if request.stream {
        return match state.router.chat_stream(&request, &options).await {
            Ok(stream) => {
                respond(state.clone(), exchange, stream, AnthropicEncoder(StreamEncoder::new(), false))
            }
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match state.router.chat_with(&request, &options).await {
        Ok(mut answer) => match answer.response.verbatim.take() {
            Some(verbatim) if verbatim.dialect() == ChatDialect::Anthropic => {
                // The provider's answer, as it wrote it.
                add_usage_metrics(&state, &answer.served_by, answer.usage, answer.cost);
                answered(&state, &exchange, verbatim.bytes().clone(), Delivered::from(&mut answer))
            }
            _ => translated(&state, &exchange, answer),
        },
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// `POST /v1/messages/count_tokens`, routed like a message: the route's first target that
/// counts (an Anthropic one) answers, as it wrote; a route with none answers 400 naming it.
pub async fn count_tokens(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parse = |bytes: &Bytes| {
        let invalid = |detail: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", detail);
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("the body is not valid JSON: {e}")))?;
        // A count takes no `max_tokens`; the canonical request, which routing reads, wants one.
        if let Some(object) = value.as_object_mut() {
            object.entry("max_tokens").or_insert(serde_json::Value::from(1));
        }
        let mut request = codec::request_from_json(value).map_err(|e| invalid(e.to_string()))?;
        request.verbatim = Some(Verbatim::new(ChatDialect::Anthropic, bytes.clone()));
        Ok(request)
    };
    let endpoint = (Dialect::Anthropic, "count_tokens");
    let (exchange, request) =
        match accept(&state, &headers, body, endpoint, parse, |r: &ChatRequest| &r.model).await {
            Ok(accepted) => accepted,
            Err(response) => return response,
        };
    match state.router.count_tokens(&request, &exchange.options(&headers)).await {
        Ok(answer) => {
            let body = match answer.count.verbatim.as_ref().and_then(|v| v.in_dialect(ChatDialect::Anthropic))
            {
                Some(bytes) => bytes.clone(),
                None => {
                    Bytes::from(serde_json::json!({ "input_tokens": answer.count.input_tokens }).to_string())
                }
            };
            let served = Delivered {
                route: answer.route,
                served_by: answer.served_by,
                trail: answer.trail,
                timing: answer.timing,
                usage: None,
            };
            answered(&state, &exchange, body, served)
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// The answer of a provider of another dialect, in this one.
fn translated(state: &AppState, exchange: &RequestContext, mut answer: Answer) -> Response {
    match codec::response_to_json(&answer.response) {
        Ok(body) => {
            add_usage_metrics(state, &answer.served_by, answer.usage, answer.cost);
            answered(state, exchange, body.to_string().into_bytes(), Delivered::from(&mut answer))
        }
        Err(error) => exchange
            .fail(state, ApiError::new(StatusCode::BAD_GATEWAY, "untranslatable_answer", error.to_string())),
    }
}

/// Anthropic's stream events from canonical chunks, or the provider's own events (then `.1`
/// is set, and the provider's `message_stop` was the end).
struct AnthropicEncoder(StreamEncoder, bool);

impl Encoder for AnthropicEncoder {
    fn frame(&mut self, chunk: &ChatChunk) -> Option<Bytes> {
        // The provider's own event; its `message_stop` ends the stream, so nothing is added.
        let frame = chunk.verbatim.as_ref().and_then(|v| v.in_dialect(ChatDialect::Anthropic))?;
        self.1 = true;
        Some(frame.clone())
    }

    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        for (name, data) in self.0.push(&chunk) {
            write_event(out, name, &data);
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if self.1 {
            return;
        }
        for (name, data) in self.0.finish() {
            write_event(out, name, &data);
        }
    }
}
