//! The Anthropic dialect: `/v1/messages`, translated to the canonical types by the Anthropic
//! codec and back.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use switchyard::chat::{ChatRequest, Dialect, Verbatim};
use switchyard::trail::Via;
use switchyard_providers::anthropic::codec::{self, MessagesStreamWriter};

use super::deliver::{Delivered, answered, route_failed, unwritable};
use super::errors::ApiError;
use super::finished::metrics::usage;
use super::lifecycle::Accepted;
use super::options::session_of;
use super::sse::respond;
use super::state::AppState;

/// `POST /v1/messages`: the client's request routed, the answer (or its stream) in the same
/// dialect.
pub async fn messages(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Accepted { context, body }: Accepted,
) -> Response {
    let parsed = codec::request_from_slice(&body).map_err(invalid).map(|mut request| {
        // An Anthropic provider receives the body as written, not a translation of it.
        request.verbatim = Some(Verbatim::new(Dialect::Anthropic, body.clone()));
        request
    });
    let (mut exchange, request) = match context.accept(&state, parsed, |r: &ChatRequest| &r.model).await {
        Ok(accepted) => accepted,
        Err(response) => return *response,
    };
    exchange.note_claude_thinking(&request);
    exchange.note_anthropic_fields(&request);
    let mut options = exchange.options(&headers);
    options.session = session_of(&headers, &request);
    if request.stream {
        return match exchange.live.router.chat_stream(&request, &options).await {
            Ok(stream) => {
                let called = stream.trail().called_model(stream.served_by());
                let writer = MessagesStreamWriter::answering(&request.model).reasoned_by(called);
                respond(state.clone(), exchange, stream, writer)
            }
            Err(error) => route_failed(&state, &exchange, error),
        };
    }
    match exchange.live.router.chat_with(&request, &options).await {
        Ok(mut answer) => {
            usage(&state, &exchange.live, (&answer.served_by, &answer.route), answer.usage, answer.cost);
            // The reasoning it writes is signed as the model the target was called as.
            if let Some(called) = answer.trail.called_model(&answer.served_by) {
                answer.response.model = called.to_owned();
            }
            match codec::response_body(&mut answer.response, &request.model) {
                Ok(body) => answered(&state, &exchange, body, Delivered::from(&mut answer)),
                Err(error) => unwritable(&state, &exchange, error.to_string(), Delivered::from(&mut answer)),
            }
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// A request the codec refuses, as a 400.
fn invalid(error: codec::CodecError) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", error.to_string())
}

/// `POST /v1/messages/count_tokens`, routed like a message: the route's first target that
/// counts (an Anthropic one) answers, as it wrote; a route with none answers 400 naming it.
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Accepted { context, body }: Accepted,
) -> Response {
    let (exchange, request) =
        match context.accept(&state, count_request(&body), |r: &ChatRequest| &r.model).await {
            Ok(accepted) => accepted,
            Err(response) => return *response,
        };
    match exchange.live.router.count_tokens(&request, &exchange.options(&headers)).await {
        Ok(answer) => {
            let body = match answer.count.verbatim.as_ref().and_then(|v| v.in_dialect(Dialect::Anthropic)) {
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
                cost: None,
            };
            answered(&state, &exchange, body, served)
        }
        Err(error) if switchyard::trail::none_could_serve(error.trail()) => {
            // Nothing of the route counts (an OpenAI-compatible route): the gateway's estimate,
            // said to be one, rather than a 400 that Claude Code sends dozens of times a session.
            let body = serde_json::json!({ "input_tokens": estimated_input_tokens(&body) }).to_string();
            let served = Delivered {
                route: error.route().unwrap_or_default().into(),
                served_by: Via::Candidate(ESTIMATE.into()),
                timing: switchyard::trail::Timing::default(),
                trail: error.into_trail(),
                usage: None,
                cost: None,
            };
            answered(&state, &exchange, Bytes::from(body), served)
        }
        Err(error) => route_failed(&state, &exchange, error),
    }
}

/// What answers a count no target of its route could give (`x-switchyard-target`).
const ESTIMATE: &str = "estimate";

/// An estimate of a Messages request's input tokens, from its JSON: the characters of every
/// name and text in it (system, messages, tools and their schemas) at four a token, rounded
/// up, and 1,600 tokens for each image or document sent as data (Anthropic's size for an image
/// of about a megapixel), whose base64 says nothing of its tokens. Errs high, as a count a
/// client sizes its context by should.
fn estimated_input_tokens(body: &[u8]) -> u64 {
    fn chars(value: &serde_json::Value) -> u64 {
        match value {
            serde_json::Value::String(text) => text.chars().count() as u64,
            serde_json::Value::Array(items) => items.iter().map(chars).sum(),
            serde_json::Value::Object(object) if object.get("type").is_some_and(|t| t == "base64") => {
                1600 * 4
            }
            serde_json::Value::Object(object) => {
                object.iter().map(|(name, value)| name.chars().count() as u64 + chars(value)).sum()
            }
            _ => 1,
        }
    }
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let counted =
        ["system", "messages", "tools"].iter().map(|key| value.get(key).map_or(0, chars)).sum::<u64>();
    counted.div_ceil(4)
}

/// A count request as a canonical request: a count takes no `max_tokens`, which the canonical
/// request, which routing reads, wants.
fn count_request(bytes: &Bytes) -> Result<ChatRequest, ApiError> {
    // Each member once, as a message's body.
    let mut object = switchyard_providers::codec::body_object(bytes).map_err(invalid)?;
    object.entry("max_tokens").or_insert(serde_json::Value::from(1));
    let mut request = codec::request_from_json(serde_json::Value::Object(object)).map_err(invalid)?;
    request.verbatim = Some(Verbatim::new(Dialect::Anthropic, bytes.clone()));
    Ok(request)
}
