//! The Anthropic dialect: `/v1/messages`, translated to the canonical types by the Anthropic
//! codec and back.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use switchyard::chat::ChatChunk;
use switchyard_providers::anthropic::codec::{self, StreamEncoder};

use super::openai::route_name;
use super::sse::{Encoder, respond, write_event};
use super::{
    ApiError, AppState, Dialect, Exchange, add_usage_metrics, authorized, json_body, json_response,
    missing_model, options, unauthorized,
};

pub async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let exchange = Exchange::start(&state, &headers, Dialect::Anthropic, "messages");
    if !authorized(&state.gateway.keys, &headers) {
        return exchange.fail(&state, "", unauthorized(&headers));
    }
    let bytes = match json_body(&headers, body, state.gateway.max_body).await {
        Ok(bytes) => bytes,
        Err(error) => return exchange.fail(&state, "", error),
    };
    let request = match codec::request_from_slice(&bytes) {
        Ok(request) => request,
        Err(error) => {
            return exchange.fail(
                &state,
                "",
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", error.to_string()),
            );
        }
    };
    if request.model.trim().is_empty() {
        return exchange.fail(&state, "", missing_model(&state.router));
    }
    let options = options(&headers);
    if request.stream {
        return match state.router.chat_stream(&request, &options).await {
            Ok(stream) => respond(state.clone(), exchange, stream, AnthropicEncoder(StreamEncoder::new())),
            Err(error) => {
                exchange.fail(&state, &route_name(&state, &request.model), ApiError::from_route(&error))
            }
        };
    }
    match state.router.chat_with(&request, &options).await {
        Ok(answer) => {
            let body = match codec::response_to_json(&answer.response) {
                Ok(body) => body,
                Err(error) => {
                    let error =
                        ApiError::new(StatusCode::BAD_GATEWAY, "untranslatable_answer", error.to_string());
                    return exchange.fail(&state, &answer.route, error);
                }
            };
            add_usage_metrics(&state, &answer.served_by, answer.usage, answer.cost);
            let attempts = answer.trail.len();
            exchange.finish(
                &state,
                &answer.route,
                Some(&answer.served_by),
                200,
                attempts,
                Some((&answer.trail, &answer.timing)),
            );
            json_response(&exchange, &body, &answer.served_by, attempts, answer.timing.queued)
        }
        Err(error) => {
            let route = route_name(&state, &request.model);
            let api = ApiError::from_route(&error);
            let status = api.status.as_u16();
            let trail_len = error.trail().len();
            let mut response = api.into_response(Dialect::Anthropic, &exchange.id);
            exchange.stamp(&mut response, None, trail_len);
            exchange.finish_failure(&state, &route, status, &error);
            response
        }
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
