//! The OpenAI dialect: `/v1/chat/completions`, `/v1/embeddings`, `/v1/models`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::chat::{ChatRequest, Dialect, EmbeddingsRequest};
use switchyard_providers::openai::codec;

use super::auth::{client_key, unauthorized};
use super::deliver::{Delivered, answered, route_failed};
use super::errors::ApiError;
use super::finished::metrics::usage;
use super::kept_thinking::{Keeping, keep_answer};
use super::lifecycle::{Accepted, invalid_body};
use super::options::session_of;
use super::request::model_names;
use super::sse::respond;
use super::state::{AppState, Live};
use crate::clock::unix_now;

/// `POST /v1/chat/completions`: the client's request routed, the answer (or its stream) in
/// the same dialect.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Accepted { context, body }: Accepted,
) -> Response {
    let parsed = codec::request_from_bytes(&body)
        .map_err(|e| invalid_body::<ChatRequest>(&body, &e))
        .and_then(|request| codec::check(&request).map(|()| request).map_err(invalid));
    let (mut exchange, mut request) = match context.accept(&state, parsed, |r: &ChatRequest| &r.model).await {
        Ok(accepted) => accepted,
        Err(response) => return *response,
    };
    let key: Arc<str> = exchange.key.as_ref().map_or_else(|| "".into(), |key| key.label.clone());
    if !exchange.live.gateway.anthropic_providers.is_empty() {
        // Only Claude reads it: without a Claude provider, nothing was kept to ask for.
        state.kept_thinking.restore(&key, &mut request).await;
    }
    exchange.note_claude_thinking(&request);
    exchange.note_thinking_off(&request);
    let mut options = exchange.options(&headers);
    options.session = session_of(&headers, &request);
    if request.stream {
        let writer = codec::ChatStreamWriter::new(&exchange.id, unix_now(), codec::wants_usage(&request));
        let writer = Keeping::new(writer, state.clone(), key);
        return match exchange.live.router.chat_stream(&request, &options).await {
            Ok(stream) => respond(state.clone(), exchange, stream, writer),
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match exchange.live.router.chat_with(&request, &options).await {
        Ok(mut answer) => {
            usage(&state, &exchange.live, (&answer.served_by, &answer.route), answer.usage, answer.cost);
            keep_answer(&state, &key, &answer.response).await;
            let body = codec::response_body(&mut answer.response, &exchange.id, unix_now());
            answered(&state, &exchange, body, Delivered::from(&mut answer))
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// A request the codec refuses, as a 400.
fn invalid(error: switchyard_providers::codec::CodecError) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", error.to_string())
}

/// How the client wants its vectors: `float` (the default) or `base64`, the little-endian
/// f32 bytes (what OpenAI's Node SDK asks for by default, and decodes).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Float,
    Base64,
}

impl Encoding {
    fn of(request: &EmbeddingsRequest) -> Result<Self, ApiError> {
        match request.extra.get("encoding_format") {
            None | Some(Value::Null) => Ok(Encoding::Float),
            Some(Value::String(format)) if format == "float" => Ok(Encoding::Float),
            Some(Value::String(format)) if format == "base64" => Ok(Encoding::Base64),
            Some(other) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("encoding_format must be \"float\" or \"base64\", not {other}"),
            )),
        }
    }
}

/// One vector as the client asked for it: floats written as f32 (`0.1`, not the
/// `0.10000000149011612` of a detour through f64), or base64.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Floats(&'a [f32]),
    Base64(String),
}

impl<'a> Vector<'a> {
    fn of(floats: &'a [f32], encoding: Encoding) -> Self {
        match encoding {
            Encoding::Float => Vector::Floats(floats),
            Encoding::Base64 => {
                use base64::Engine;
                let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

#[derive(serde::Serialize)]
struct EmbeddingOut<'a> {
    object: &'static str,
    index: u32,
    embedding: Vector<'a>,
}

#[derive(serde::Serialize)]
struct EmbeddingsOut<'a> {
    object: &'static str,
    data: Vec<EmbeddingOut<'a>>,
    model: &'a str,
    usage: Value,
}

/// `POST /v1/embeddings`, within one embedding space.
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Accepted { context, body }: Accepted,
) -> Response {
    let parsed = serde_json::from_slice::<EmbeddingsRequest>(&body)
        .map_err(|e| invalid_body::<EmbeddingsRequest>(&body, &e))
        .and_then(|request| Encoding::of(&request).map(|_| request))
        .and_then(|request| match request.input.is_empty() {
            // As OpenAI refuses it: no provider is asked to embed nothing.
            true => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "input is empty: give at least one text to embed",
            )),
            false => Ok(request),
        });
    let (exchange, request) = match context.accept(&state, parsed, |r: &EmbeddingsRequest| &r.model).await {
        Ok(accepted) => accepted,
        Err(response) => return *response,
    };
    match exchange.live.router.embeddings(&request, &exchange.options(&headers)).await {
        Ok(answer) => {
            let encoding = Encoding::of(&request).unwrap_or(Encoding::Float);
            let data = answer
                .response
                .data
                .iter()
                .map(|e| EmbeddingOut {
                    object: "embedding",
                    index: e.index,
                    embedding: Vector::of(&e.embedding, encoding),
                })
                .collect();
            let usage = answer.response.usage.map_or(
                json!({ "prompt_tokens": 0, "total_tokens": 0 }),
                |u| json!({ "prompt_tokens": u.prompt_tokens, "total_tokens": u.total_tokens }),
            );
            let out = EmbeddingsOut { object: "list", data, model: &answer.response.model, usage };
            let body = serde_json::to_vec(&out).unwrap_or_default();
            let served = Delivered {
                route: answer.route,
                served_by: answer.served_by,
                trail: answer.trail,
                timing: answer.timing,
                usage: answer.response.usage.map(|u| switchyard::chat::Usage::new(u.prompt_tokens, 0)),
                cost: answer.cost,
            };
            answered(&state, &exchange, body, served)
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// The model object of `id`, a route or a target, as `/v1/models` lists it.
fn model_object(live: &Live, id: &str, created: u64) -> Value {
    let kind = match live.router.routes().find(|r| r.name() == id) {
        Some(route) if route.pattern().is_some() => "pattern",
        Some(_) => "route",
        None if live.router.governing_route(id).is_some_and(|name| name != id && name.ends_with('*')) => {
            "route"
        }
        None => "target",
    };
    json!({ "id": id, "object": "model", "created": created, "owned_by": "switchyard", "switchyard_kind": kind })
}

/// The routes, then every target one can name (none with `gateway.direct_targets: false`).
pub async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let live = state.live();
    let Ok(key) = client_key(&live.gateway.keys, &headers) else {
        return unauthorized(&headers).into_response(Dialect::OpenAi, "");
    };
    let created = unix_now();
    // A key held to some `routes` is shown the models it may use.
    let allowed = |id: &String| key.as_ref().is_none_or(|key| key.rules.allows(id, &live.router));
    let data: Vec<Value> = model_names(&live.router, !live.gateway.direct_targets)
        .into_iter()
        .filter(allowed)
        .map(|id| model_object(&live, &id, created))
        .collect();
    axum::Json(json!({ "object": "list", "data": data })).into_response()
}

/// One model (`GET /v1/models/{id}`, as the SDKs' `models.retrieve` asks): a route or a
/// target one can name, else a 404 in OpenAI's shape naming what there is.
pub async fn model(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let live = state.live();
    let Ok(key) = client_key(&live.gateway.keys, &headers) else {
        return unauthorized(&headers).into_response(Dialect::OpenAi, "");
    };
    // A key held to some `routes` is shown the models it may use.
    let allowed = |id: &String| key.as_ref().is_none_or(|key| key.rules.allows(id, &live.router));
    let names: Vec<String> =
        model_names(&live.router, !live.gateway.direct_targets).into_iter().filter(allowed).collect();
    // A name a pattern governs (a dated model id) is a model here too.
    let patterned = live.router.governing_route(&id).is_some_and(|name| name.ends_with('*'));
    if names.contains(&id) || (patterned && allowed(&id)) {
        return axum::Json(model_object(&live, &id, unix_now())).into_response();
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        "model_not_found",
        format!(
            "the model `{id}` does not exist here: name {} ({})",
            if live.gateway.direct_targets { "a route or a target" } else { "a route" },
            names.join(", ")
        ),
    )
    .into_response(Dialect::OpenAi, "")
}
