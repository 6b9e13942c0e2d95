//! The Responses dialect: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.
//!
//! A request is translated to a canonical chat request and routed like any chat, so every
//! target of the route can answer it; the answer (or stream) is written back as a response
//! object (or its events). The conversation is the gateway's: with `previous_response_id`,
//! the turns it kept are sent upstream in full, so no provider's memory is needed and a
//! conversation goes on after a failover to a provider of another kind.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::chat::{ChatChunk, Message};
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::responses::decode::{self, ResponsesRequest};
use switchyard_providers::responses::encode::{self, Meta, StreamEncoder};

use super::sse::{Encoder, respond, write_event};
use super::{
    ApiError, AppState, Delivered, Dialect, accept, add_usage_metrics, answered, authorized, options,
    presented_key, route_failed, unauthorized, unix_now,
};
use crate::responses::{Stored, owner_of};

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parse = |bytes: &Bytes| {
        decode::request_from_slice(bytes)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))
    };
    let endpoint = (Dialect::OpenAi, "responses");
    let (exchange, parsed) =
        match accept(&state, &headers, body, endpoint, parse, |r: &ResponsesRequest| &r.chat.model).await {
            Ok(accepted) => accepted,
            Err(response) => return response,
        };
    let owner = owner_of(presented_key(&headers).filter(|_| !state.gateway.keys.is_empty()));
    let ResponsesRequest { mut chat, previous_response_id, store, echo } = parsed;
    let instructions = usize::from(!echo.instructions.is_null());
    if let Some(previous) = &previous_response_id {
        let Some(stored) = state.responses.find(previous, &owner).await else {
            let error = ApiError::new(
                StatusCode::BAD_REQUEST,
                "previous_response_not_found",
                format!(
                    "previous_response_id: no response `{previous}` is kept here (it expired, was deleted, was sent with store: false, or belongs to another key)"
                ),
            );
            return exchange.fail(&state, error);
        };
        // The instructions of this turn, then the conversation so far, then this turn's input.
        let input = chat.messages.split_off(instructions);
        chat.messages.extend(stored.conversation.iter().cloned());
        chat.messages.extend(input);
    }
    let meta =
        Meta { id: state.responses.new_id(), created_at: unix_now(), echo, previous_response_id, store };
    let keep = store.then(|| Keep { owner, conversation: chat.messages[instructions..].to_vec() });
    let options = options(&headers);
    if chat.stream {
        return match state.router.chat_stream(&chat, &options).await {
            Ok(stream) => {
                let encoder =
                    ResponsesEncoder { state: state.clone(), encoder: StreamEncoder::new(meta), keep };
                respond(state.clone(), exchange, stream, encoder)
            }
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match state.router.chat_with(&chat, &options).await {
        Ok(mut answer) => {
            add_usage_metrics(&state, &answer.served_by, answer.usage, answer.cost);
            let (object, turn) = encode::response_object(&meta, &answer.response);
            if let Some(keep) = keep {
                state.responses.keep(meta.id.clone(), keep.entry(&object, turn)).await;
            }
            let body = serde_json::to_vec(&object).unwrap_or_default();
            answered(&state, &exchange, body, Delivered::from(&mut answer))
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// What is kept of a response once it is whole: whose it is, and the conversation before its
/// answer.
struct Keep {
    owner: String,
    conversation: Vec<Message>,
}

impl Keep {
    /// The entry for `response`, whose answer was `turn`.
    fn entry(mut self, response: &Value, turn: Message) -> Stored {
        if turn.content.is_some() || !turn.tool_calls.is_empty() {
            self.conversation.push(turn);
        }
        Stored { owner: self.owner, response: response.clone(), conversation: self.conversation }
    }
}

/// Canonical chunks as Responses events; the response is kept when the stream completes.
struct ResponsesEncoder {
    state: Arc<AppState>,
    encoder: StreamEncoder,
    keep: Option<Keep>,
}

impl ResponsesEncoder {
    fn write(events: Vec<encode::Event>, out: &mut Vec<u8>) {
        for (name, data) in events {
            write_event(out, name, &data);
        }
    }
}

impl Encoder for ResponsesEncoder {
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        Self::write(self.encoder.push(&chunk), out);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        Self::write(self.encoder.finish(), out);
        if let Some(keep) = self.keep.take() {
            let response = self.encoder.response();
            let id = response["id"].as_str().unwrap_or_default().to_owned();
            // Kept in this replica's memory now; with a fleet, in Redis a round trip after the
            // last event.
            let entry = keep.entry(&response, self.encoder.turn());
            if let Some(bytes) = self.state.responses.remember(id.clone(), entry) {
                let state = self.state.clone();
                tokio::spawn(async move { state.responses.share(&id, &bytes).await });
            }
        }
    }

    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        let code = match error.kind() {
            ErrorKind::RateLimited | ErrorKind::QuotaExceeded => "rate_limit_exceeded",
            _ => "server_error",
        };
        let message = format!("the stream failed after content was sent: {error}");
        Self::write(self.encoder.fail(code, &message), out);
        true
    }
}

/// `GET /v1/responses/{id}`: a response the gateway kept for this key.
pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !authorized(&state.gateway.keys, &headers) {
        return unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let owner = owner_of(presented_key(&headers).filter(|_| !state.gateway.keys.is_empty()));
    match state.responses.find(&id, &owner).await {
        Some(stored) => axum::Json(stored.response.clone()).into_response(),
        None => not_found(&id),
    }
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !authorized(&state.gateway.keys, &headers) {
        return unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let owner = owner_of(presented_key(&headers).filter(|_| !state.gateway.keys.is_empty()));
    if state.responses.forget(&id, &owner).await {
        axum::Json(json!({ "id": id, "object": "response", "deleted": true })).into_response()
    } else {
        not_found(&id)
    }
}

/// The 404 for an id not kept for this key: the same whether it never existed, expired, or is
/// another key's.
fn not_found(id: &str) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no response `{id}` is kept here for this key"))
        .into_response(Dialect::OpenAi, "")
}
