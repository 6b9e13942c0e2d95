//! The Responses dialect: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.
//!
//! A request is translated to a canonical chat request and routed like any chat, so every
//! target of the route can answer it; the answer (or stream) is written back as a response
//! object (or its events). The conversation is the gateway's: with `previous_response_id`,
//! the turns it kept are sent upstream in full, so no provider's memory is needed and a
//! conversation goes on after a failover to a provider of another kind.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::ProviderError;
use switchyard::chat::{ChatChunk, ChatRequest, Dialect, Message};
use switchyard_providers::codec::StreamWriter;
use switchyard_providers::responses::decode::{self, ResponsesRequest};
use switchyard_providers::responses::encode::{self, Meta, ResponsesStreamWriter};
use switchyard_providers::responses::{is_sealed_by_gateway, native};

use super::auth::{admitted, presented_key, unauthorized};
use super::deliver::{Delivered, answered, route_failed};
use super::errors::ApiError;
use super::finished::metrics::usage;
use super::lifecycle::Accepted;
use super::options::session_of;
use super::request::{NoteOn, RequestContext};
use super::sse::{Encoder, Held, respond};
use super::state::AppState;
use crate::clock::unix_now;
use crate::responses::{FleetAway, MAX_REFERENCES, Stored, Unreadable, owner_of};

/// `POST /v1/responses`: the request's turn put after the conversation it continues, routed
/// like any chat, the answer (or its stream) written as a response object (or its events),
/// and kept for the next turn when the client asked.
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Accepted { context, body }: Accepted,
) -> Response {
    let parsed = decode::request_from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()));
    let (mut exchange, parsed) =
        match context.accept(&state, parsed, |r: &ResponsesRequest| &r.chat.model).await {
            Ok(accepted) => accepted,
            Err(response) => return *response,
        };
    let owner = owner_of(presented_key(&headers).filter(|_| !exchange.live.gateway.keys.is_empty()));
    let turn = match conversation(&state, &mut exchange, &owner, parsed).await {
        Ok(turn) => turn,
        Err(error) => return exchange.fail(&state, error),
    };
    let Turn { chat, meta, keep, conversation } = turn;
    let mut options = exchange.options(&headers);
    options.session = session_of(&headers, &chat).or(conversation);
    if chat.stream {
        return match exchange.live.router.chat_stream(&chat, &options).await {
            Ok(stream) => {
                let reasoned_by = stream.trail().called_model(stream.served_by()).map(str::to_owned);
                let encoder = ResponsesEncoder::new(state.clone(), Meta { reasoned_by, ..meta }, keep);
                respond(state.clone(), exchange, stream, encoder)
            }
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match exchange.live.router.chat_with(&chat, &options).await {
        Ok(mut answer) => {
            usage(&state, &exchange.live, (&answer.served_by, &answer.route), answer.usage, answer.cost);
            let meta =
                Meta { reasoned_by: answer.trail.called_model(&answer.served_by).map(str::to_owned), ..meta };
            let object = whole_object(&mut answer.response, &meta);
            if let Some(keep) = keep {
                state.responses.keep(meta.id.clone(), keep.entry(&object)).await;
            }
            let body = serde_json::to_vec(&object).unwrap_or_default();
            answered(&state, &exchange, body, Delivered::from(&mut answer))
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// The response object of a whole answer: the provider's own under the gateway's id (as it
/// wrote it, or as the stream it sent ends), else the answer translated.
fn whole_object(response: &mut switchyard::chat::ChatResponse, meta: &Meta) -> Value {
    if let Some(bytes) = response.verbatim.take().and_then(|v| v.in_dialect(Dialect::Responses).cloned()) {
        return native::native_object(&bytes, meta);
    }
    let frames: Vec<bytes::Bytes> =
        response.frames.iter().filter_map(|v| v.in_dialect(Dialect::Responses).cloned()).collect();
    if let Some(object) = native::object_of_frames(&frames, meta) {
        return object;
    }
    encode::response_object(meta, response).0
}

/// One turn, ready to route: the canonical request with the whole conversation, the response
/// object's identity, and what to keep of it.
struct Turn {
    chat: ChatRequest,
    meta: Meta,
    keep: Option<Keep>,
    /// The conversation, for session affinity: named by its first item, which every turn of it
    /// (continued by `previous_response_id` or sent whole) begins with.
    conversation: Option<String>,
}

/// The conversation so far (kept by the gateway, or named by item references), then this
/// turn's input; what some providers are not sent noted for the trail.
async fn conversation(
    state: &AppState,
    exchange: &mut RequestContext,
    owner: &str,
    parsed: ResponsesRequest,
) -> Result<Turn, ApiError> {
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
        exchange.unsent.push((NoteOn::NotResponsesNative, note));
    }
    let instructions = usize::from(!echo.instructions.is_null());
    if references {
        chat.messages.extend(read_references(state, owner, &mut input).await?);
    }
    let mut items = Vec::new();
    if let Some(previous) = &previous_response_id {
        let stored = previous_turns(state, owner, previous).await?;
        items.extend(stored);
        let history = decode::messages_from_items(&items, "previous_response_id")
            .map_err(|error| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", error.to_string()))?;
        // The instructions of this turn, then the conversation so far, then this turn's input.
        let this_turn = chat.messages.split_off(instructions);
        chat.messages.extend(history);
        chat.messages.extend(this_turn);
    }
    items.extend(input);
    let conversation = items.first().map(|first| format!("conversation:{:032x}", hash_of(first)));
    note_unsent_items(exchange, &items);
    exchange.note_claude_thinking(&chat);
    exchange.note_thinking_off(&chat);
    chat.verbatim = Some(native::native_body(body, &items));
    let meta = Meta {
        id: state.responses.new_id(),
        created_at: unix_now(),
        echo,
        previous_response_id,
        store,
        reasoned_by: None,
    };
    let keep = store.then(|| Keep { owner: owner.to_owned(), items });
    Ok(Turn { chat, meta, keep, conversation })
}

/// A stable 128-bit hash of `item`'s JSON.
fn hash_of(item: &Value) -> u128 {
    switchyard::affinity::hash_of(item.to_string().as_bytes())
}

/// A response not kept here, while the fleet's Redis, which may keep it, does not answer: a
/// 503, which the SDKs ask again.
fn fleet_away(id: &str) -> ApiError {
    let message = format!(
        "response `{id}` is not kept on this replica, and the fleet's store (Redis) did not answer: try again"
    );
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "fleet_unavailable", message)
}

/// The items of the conversation `previous` ended, kept for `owner`.
async fn previous_turns(state: &AppState, owner: &str, previous: &str) -> Result<Vec<Value>, ApiError> {
    match state.responses.find(previous, owner).await {
        Ok(Some(stored)) => Ok(stored.items.clone()),
        Err(FleetAway) => Err(fleet_away(previous)),
        Ok(None) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "previous_response_not_found",
            format!(
                "previous_response_id: no response `{previous}` is kept here (it expired, was deleted, was sent with store: false, or belongs to another key)"
            ),
        )),
    }
}

/// Notes what of the conversation only a provider of the Responses API reads: reasoning
/// (which travels only as encrypted content; what the gateway sealed is read back by the
/// model that wrote it), and items Switchyard does not model.
fn note_unsent_items(exchange: &mut RequestContext, items: &[Value]) {
    let reasoning =
        items.iter().filter(|item| item["type"] == "reasoning" && !is_sealed_by_gateway(item)).count();
    if reasoning > 0 {
        exchange.unsent.push((
            NoteOn::NotResponsesNative,
            format!(
                "{reasoning} reasoning item(s) of the conversation were not sent: only a provider spoken to in the Responses API reads them"
            ),
        ));
    }
    let unread = decode::unread_items(items);
    if !unread.is_empty() {
        exchange.unsent.push((
            NoteOn::NotResponsesNative,
            format!(
                "the conversation's {} item(s) were not sent: only a provider spoken to in the Responses API reads them",
                unread.join(", ")
            ),
        ));
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
    let max_body = state.live().gateway.max_body;
    let found = state.responses.items(owner, &names, max_body).await.map_err(|why| {
        bad(match why {
            Unreadable::TooMany => format!("input holds more than {MAX_REFERENCES} item references"),
            Unreadable::TooLarge => {
                format!("the items input references add up to more than gateway.max_body ({max_body} bytes)")
            }
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

impl Keep {
    /// The entry for `response`: the conversation so far, then its output items.
    fn entry(mut self, response: &Value) -> Stored {
        self.items.extend(response["output"].as_array().into_iter().flatten().cloned());
        Stored { owner: self.owner, response: response.clone(), items: self.items }
    }
}

/// The Responses codec's stream writer, with the response kept as the stream completes: in
/// this replica's memory at once and, with a fleet, in Redis before the event that says it
/// completed reaches the client (who may continue it on another replica).
struct ResponsesEncoder {
    state: Arc<AppState>,
    writer: ResponsesStreamWriter,
    id: String,
    keep: Option<Keep>,
    /// The kept response's write to the fleet's Redis, which its completion waits for.
    sharing: Option<Held>,
}

impl ResponsesEncoder {
    fn new(state: Arc<AppState>, meta: Meta, keep: Option<Keep>) -> Self {
        let id = meta.id.clone();
        Self { state, writer: ResponsesStreamWriter::new(meta), id, keep, sharing: None }
    }

    /// Keeps the response, once the stream has it whole.
    fn keep_completed(&mut self) {
        let Some(response) = self.writer.take_completed() else { return };
        if let Some(keep) = self.keep.take() {
            let entry = keep.entry(&response);
            let id = self.id.clone();
            if let Some(to_share) = self.state.responses.remember(id.clone(), entry) {
                let state = self.state.clone();
                self.sharing = Some(Box::pin(async move {
                    state.responses.share(&id, &to_share).await;
                }));
            }
        }
    }
}

impl StreamWriter for ResponsesEncoder {
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        self.writer.chunk(chunk, out);
        self.keep_completed();
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.writer.end(out);
        self.keep_completed();
    }

    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        self.writer.fail(error, out)
    }
}

impl Encoder for ResponsesEncoder {
    fn hold(&mut self) -> Option<Held> {
        self.sharing.take()
    }

    fn keep_alive(&mut self, out: &mut Vec<u8>) {
        self.writer.keep_alive(out);
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
        Ok(Some(stored)) => axum::Json(stored.response.clone()).into_response(),
        Ok(None) => not_found(&id),
        Err(FleetAway) => fleet_away(&id).into_response(Dialect::OpenAi, ""),
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
    match state.responses.forget(&id, &owner).await {
        Ok(true) => axum::Json(json!({ "id": id, "object": "response", "deleted": true })).into_response(),
        Ok(false) => not_found(&id),
        Err(FleetAway) => fleet_away(&id).into_response(Dialect::OpenAi, ""),
    }
}

/// The owner name of an authorized caller's kept responses, or the 401.
fn caller(state: &AppState, headers: &HeaderMap) -> Result<String, Box<Response>> {
    let keys = &state.live().gateway.keys;
    if !admitted(keys, headers) {
        return Err(Box::new(unauthorized(headers).into_response(Dialect::Responses, "")));
    }
    Ok(owner_of(presented_key(headers).filter(|_| !keys.is_empty())))
}

/// The 404 for an id not kept for this key: the same whether it never existed, expired, or is
/// another key's.
fn not_found(id: &str) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no response `{id}` is kept here for this key"))
        .into_response(Dialect::Responses, "")
}
