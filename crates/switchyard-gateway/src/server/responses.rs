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
use serde_json::{Map, Value, json};
use switchyard::chat::{ChatChunk, Dialect as ChatDialect, Message, Verbatim};
use switchyard::{ErrorKind, ProviderError};
use switchyard_providers::responses::decode::{self, ResponsesRequest};
use switchyard_providers::responses::encode::{self, Meta, StreamEncoder};
use switchyard_providers::responses::is_claude_thinking;

use super::sse::{Encoder, respond, write_event};
use super::{
    ApiError, AppState, Delivered, Dialect, Readers, accept, add_usage_metrics, answered, authorized,
    note_claude_thinking, presented_key, route_failed, unauthorized, unix_now,
};
use crate::responses::{MAX_REFERENCES, Stored, Unreadable, owner_of};

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parse = |bytes: &Bytes| {
        decode::request_from_slice(bytes)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))
    };
    let endpoint = (Dialect::OpenAi, "responses");
    let (mut exchange, parsed) =
        match accept(&state, &headers, body, endpoint, parse, |r: &ResponsesRequest| &r.chat.model).await {
            Ok(accepted) => accepted,
            Err(response) => return response,
        };
    let owner = owner_of(presented_key(&headers).filter(|_| !state.gateway.keys.is_empty()));
    let ResponsesRequest {
        mut chat,
        previous_response_id,
        store,
        echo,
        items: mut input,
        references,
        body,
        unsent,
    } = parsed;
    for note in unsent {
        exchange.unsent.push((Readers::ResponsesNative, note));
    }
    let instructions = usize::from(!echo.instructions.is_null());
    if references {
        match read_references(&state, &owner, &mut input).await {
            Ok(messages) => chat.messages.extend(messages),
            Err(error) => return exchange.fail(&state, error),
        }
    }
    // The conversation so far (kept by the gateway), then this turn's input.
    let mut items = Vec::new();
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
        items.extend(stored.items.iter().cloned());
        let history = match decode::messages_from_items(&items, "previous_response_id") {
            Ok(history) => history,
            Err(error) => {
                return exchange.fail(
                    &state,
                    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", error.to_string()),
                );
            }
        };
        // The instructions of this turn, then the conversation so far, then this turn's input.
        let this_turn = chat.messages.split_off(instructions);
        chat.messages.extend(history);
        chat.messages.extend(this_turn);
    }
    items.extend(input);
    let unread = decode::unread_items(&items);
    if !unread.is_empty() {
        exchange.unsent.push((
            Readers::ResponsesNative,
            format!(
                "the conversation's {} item(s) were not sent: only a provider spoken to in the Responses API reads them",
                unread.join(", ")
            ),
        ));
    }
    // Reasoning travels only to a provider that reads the Responses API (as encrypted content);
    // a translation has no place for it, and the trail says so.
    // (Claude's thinking as the gateway sealed it is read back by an Anthropic target.)
    let reasoning =
        items.iter().filter(|item| item["type"] == "reasoning" && !is_claude_thinking(item)).count();
    if reasoning > 0 {
        exchange.unsent.push((
            Readers::ResponsesNative,
            format!(
                "{reasoning} reasoning item(s) of the conversation were not sent: only a provider spoken to in the Responses API reads them"
            ),
        ));
    }
    note_claude_thinking(&mut exchange, &chat);
    chat.verbatim = Some(native_body(body, &items));
    let meta =
        Meta { id: state.responses.new_id(), created_at: unix_now(), echo, previous_response_id, store };
    let keep = store.then(|| Keep { owner, items });
    let options = exchange.options(&headers);
    if chat.stream {
        return match state.router.chat_stream(&chat, &options).await {
            Ok(stream) => {
                let encoder = ResponsesEncoder::new(state.clone(), meta, keep);
                respond(state.clone(), exchange, stream, encoder)
            }
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match state.router.chat_with(&chat, &options).await {
        Ok(mut answer) => {
            add_usage_metrics(&state, &answer.served_by, answer.usage, answer.cost);
            let object = match answer
                .response
                .verbatim
                .take()
                .and_then(|v| v.in_dialect(ChatDialect::Responses).cloned())
            {
                // The provider's own response object, under the gateway's id.
                Some(bytes) => native_object(&bytes, &meta),
                None => encode::response_object(&meta, &answer.response).0,
            };
            if let Some(keep) = keep {
                state.responses.keep(meta.id.clone(), keep.entry(&object)).await;
            }
            let body = serde_json::to_vec(&object).unwrap_or_default();
            answered(&state, &exchange, body, Delivered::from(&mut answer))
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// Puts the items `input`'s references name in their place (a reference to an item not kept
/// for `owner` stays, and is refused by its path), and reads the input's messages. The items
/// read back may add up to `gateway.max_body`, what the client could have sent itself.
async fn read_references(
    state: &AppState,
    owner: &str,
    input: &mut [Value],
) -> Result<Vec<Message>, ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message);
    let positions: Vec<usize> = (0..input.len()).filter(|&i| decode::is_reference(&input[i])).collect();
    let ids: Vec<String> =
        positions.iter().map(|&i| input[i]["id"].as_str().unwrap_or_default().to_owned()).collect();
    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
    let found = state.responses.items(owner, &names, state.gateway.max_body).await.map_err(|why| {
        bad(match why {
            Unreadable::TooMany => format!("input holds more than {MAX_REFERENCES} item references"),
            Unreadable::TooLarge => format!(
                "the items input references add up to more than gateway.max_body ({} bytes)",
                state.gateway.max_body
            ),
        })
    })?;
    for (position, item) in positions.into_iter().zip(found) {
        if let Some(item) = item {
            input[position] = item;
        }
    }
    decode::messages_from_items(input, "input").map_err(|error| bad(error.to_string()))
}

/// What is kept of a response once it is whole: whose it is, and the conversation before its
/// output.
struct Keep {
    owner: String,
    items: Vec<Value>,
}

/// The body a provider that speaks the Responses API is sent: the client's, with the whole
/// conversation as its input, nothing for the provider to keep (`store: false`, no
/// `previous_response_id`), and reasoning returned encrypted so that a later turn can send it
/// back.
///
/// A reasoning item without `encrypted_content` is left out: with nothing kept by the
/// provider, only the encrypted form can be read back (the gateway writes such items for the
/// reasoning of models of other kinds, and a client may hold ones a provider kept). So is
/// Claude's thinking as the gateway sealed it, which OpenAI could not read.
fn native_body(mut body: Map<String, Value>, items: &[Value]) -> Verbatim {
    let readable = |item: &&Value| {
        item["type"] != "reasoning"
            || (item["encrypted_content"].as_str().is_some_and(|c| !c.is_empty())
                && !is_claude_thinking(item))
    };
    body.insert("input".to_owned(), Value::Array(items.iter().filter(readable).cloned().collect()));
    body.remove("previous_response_id");
    body.insert("store".to_owned(), Value::Bool(false));
    let include = body.entry("include").or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(include) = include
        && !include.iter().any(|i| i == "reasoning.encrypted_content")
    {
        include.push(Value::from("reasoning.encrypted_content"));
    }
    Verbatim::new(ChatDialect::Responses, serde_json::to_vec(&body).unwrap_or_default())
}

/// A provider's response object as the client gets it: under the gateway's id, saying what
/// the client asked of the store and which response it continues.
fn native_object(bytes: &[u8], meta: &Meta) -> Value {
    let mut object: Value = serde_json::from_slice(bytes).unwrap_or_else(|_| json!({}));
    restamp(&mut object, meta);
    object
}

/// Puts the gateway's id, `store` and `previous_response_id` on a provider's response object.
fn restamp(object: &mut Value, meta: &Meta) {
    if let Value::Object(object) = object {
        object.insert("id".to_owned(), Value::from(meta.id.clone()));
        object.insert("store".to_owned(), Value::Bool(meta.store));
        object.insert("previous_response_id".to_owned(), json!(meta.previous_response_id));
    }
}

impl Keep {
    /// The entry for `response`: the conversation so far, then its output items.
    fn entry(mut self, response: &Value) -> Stored {
        self.items.extend(response["output"].as_array().into_iter().flatten().cloned());
        Stored { owner: self.owner, response: response.clone(), items: self.items }
    }
}

/// Canonical chunks as Responses events, or a provider's own events passed on (under the
/// gateway's id); the response is kept when the stream completes.
struct ResponsesEncoder {
    state: Arc<AppState>,
    meta: Meta,
    encoder: StreamEncoder,
    keep: Option<Keep>,
    /// Set once a provider's own event was passed on.
    native: Option<Native>,
    /// The kept response's write to the fleet's Redis, which its completion waits for.
    sharing: Option<super::sse::Held>,
}

/// What passing a provider's events on has seen.
#[derive(Default)]
struct Native {
    /// The last event's `sequence_number`.
    sequence: u64,
}

impl ResponsesEncoder {
    fn new(state: Arc<AppState>, meta: Meta, keep: Option<Keep>) -> Self {
        Self { state, encoder: StreamEncoder::new(meta.clone()), meta, keep, native: None, sharing: None }
    }

    fn write(events: Vec<encode::Event>, out: &mut Vec<u8>) {
        for (name, data) in events {
            write_event(out, name, &data);
        }
    }

    /// A provider's event, passed on; a response object in it is restamped.
    fn pass(&mut self, frame: &Bytes, out: &mut Vec<u8>) {
        let native = self.native.get_or_insert_with(Native::default);
        let text = std::str::from_utf8(frame).unwrap_or_default();
        let data = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim_start)
            .collect::<Vec<_>>();
        let Ok(mut event) = serde_json::from_str::<Value>(&data.join("\n")) else {
            out.extend_from_slice(frame);
            return;
        };
        if let Some(sequence) = event["sequence_number"].as_u64() {
            native.sequence = sequence;
        }
        let Some(response) = event.get_mut("response") else {
            out.extend_from_slice(frame);
            return;
        };
        restamp(response, &self.meta);
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        if matches!(kind.as_str(), "response.completed" | "response.incomplete") {
            // Kept now, so that this event waits for it to reach the fleet.
            let response = event["response"].clone();
            self.keep(&response);
        }
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
        super::sse::write_data(out, &event);
    }

    /// Keeps `response` (whole) as the gateway's: in this replica's memory at once and, with a
    /// fleet, in Redis before the event that says it completed reaches the client.
    fn keep(&mut self, response: &Value) {
        if let Some(keep) = self.keep.take() {
            let entry = keep.entry(response);
            let id = self.meta.id.clone();
            if let Some(to_share) = self.state.responses.remember(id.clone(), entry) {
                let state = self.state.clone();
                self.sharing = Some(Box::pin(async move { state.responses.share(&id, &to_share).await }));
            }
        }
    }
}

impl Encoder for ResponsesEncoder {
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        if let Some(frame) = chunk.verbatim.as_ref().and_then(|v| v.in_dialect(ChatDialect::Responses)) {
            return self.pass(frame, out);
        }
        Self::write(self.encoder.push(&chunk), out);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        // A provider's own `response.completed` was kept as it passed.
        if self.native.is_none() {
            Self::write(self.encoder.finish(), out);
            let response = self.encoder.response();
            self.keep(&response);
        }
    }

    fn hold(&mut self) -> Option<super::sse::Held> {
        self.sharing.take()
    }

    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        let code = match error.kind() {
            ErrorKind::RateLimited | ErrorKind::QuotaExceeded => "rate_limit_exceeded",
            _ => "server_error",
        };
        if let Some(native) = &self.native {
            self.encoder.continue_after(native.sequence);
        }
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
    let owner = match caller(&state, &headers) {
        Ok(owner) => owner,
        Err(response) => return *response,
    };
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
    let owner = match caller(&state, &headers) {
        Ok(owner) => owner,
        Err(response) => return *response,
    };
    if state.responses.forget(&id, &owner).await {
        axum::Json(json!({ "id": id, "object": "response", "deleted": true })).into_response()
    } else {
        not_found(&id)
    }
}

/// The owner name of an authorized caller's kept responses, or the 401.
fn caller(state: &AppState, headers: &HeaderMap) -> Result<String, Box<Response>> {
    if !authorized(&state.gateway.keys, headers) {
        return Err(Box::new(unauthorized(headers).into_response(Dialect::OpenAi, "")));
    }
    Ok(owner_of(presented_key(headers).filter(|_| !state.gateway.keys.is_empty())))
}

/// The 404 for an id not kept for this key: the same whether it never existed, expired, or is
/// another key's.
fn not_found(id: &str) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no response `{id}` is kept here for this key"))
        .into_response(Dialect::OpenAi, "")
}
