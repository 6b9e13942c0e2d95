//! The Anthropic dialect: `/v1/messages`, translated to the canonical types by the Anthropic
//! codec and back.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use switchyard::chat::{ChatChunk, ChatRequest};
use switchyard_providers::anthropic::codec::{self, StreamEncoder};

use super::sse::{Encoder, respond, write_event};
use super::{
    ApiError, AppState, Delivered, Dialect, accept, add_usage_metrics, answered, options, route_failed,
};

pub async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parse = |bytes: &[u8]| {
        codec::request_from_slice(bytes)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))
    };
    let endpoint = (Dialect::Anthropic, "messages");
    let (exchange, request) =
        match accept(&state, &headers, body, endpoint, parse, |r: &ChatRequest| &r.model).await {
            Ok(accepted) => accepted,
            Err(response) => return response,
        };
    let options = options(&headers);
    if request.stream {
        return match state.router.chat_stream(&request, &options).await {
            Ok(stream) => respond(state.clone(), exchange, stream, AnthropicEncoder(StreamEncoder::new())),
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match state.router.chat_with(&request, &options).await {
        Ok(mut answer) => match codec::response_to_json(&answer.response) {
            Ok(body) => {
                add_usage_metrics(&state, &answer.served_by, answer.usage, answer.cost);
                answered(&state, &exchange, body.to_string().into_bytes(), Delivered::from(&mut answer))
            }
            Err(error) => exchange.fail(
                &state,
                ApiError::new(StatusCode::BAD_GATEWAY, "untranslatable_answer", error.to_string()),
            ),
        },
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// Anthropic's stream events from canonical chunks.
struct AnthropicEncoder(StreamEncoder);

impl Encoder for AnthropicEncoder {
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        for (name, data) in self.0.push(&chunk) {
            write_event(out, name, &data);
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        for (name, data) in self.0.finish() {
            write_event(out, name, &data);
        }
    }
}
