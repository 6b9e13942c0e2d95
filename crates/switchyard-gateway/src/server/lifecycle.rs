//! The steps every model endpoint takes before its handler, as one layer: the request's id
//! and clock, the gateway key, the trace it continues, and its JSON body, read within
//! `gateway.max_body` and `gateway.body_timeout`. What it accepted reaches the handler as
//! [`Accepted`], so that a handler is only its dialect's translation.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use switchyard::chat::Dialect;

use super::auth::{client_key, unauthorized};
use super::body;
use super::errors::ApiError;
use super::request::RequestContext;
use super::state::AppState;
use crate::config::GatewaySettings;

/// A model endpoint: the dialect its errors are written in, and its name in the metrics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoint {
    pub dialect: Dialect,
    pub name: &'static str,
}

/// What the lifecycle hands the endpoint's handler: the request's context and its whole body.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub context: RequestContext,
    pub body: Bytes,
}

/// The layer: a request refused here (no valid key, a body too large, too slow or not JSON)
/// is answered in the endpoint's dialect and logged, and its handler never runs.
pub(crate) async fn lifecycle(
    State((state, endpoint)): State<(Arc<AppState>, Endpoint)>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let mut context = RequestContext::start(&state, &parts.headers, endpoint.dialect, endpoint.name);
    match client_key(&context.live.gateway.keys, &parts.headers) {
        Ok(key) => context.key = key,
        Err(()) => return context.fail(&state, unauthorized(&parts.headers)),
    }
    // Only a client with a key chooses a trace to continue.
    context.trace = state.telemetry.as_ref().map(|telemetry| telemetry.begin(&parts.headers));
    // Watched from here: a client that leaves while its body is read is logged too.
    let watch = Abandoned { state: state.clone(), context: Some(context.clone()), status: 499 };
    // A body still coming when the shutdown's grace period ends is answered too.
    let read = tokio::select! {
        biased;
        read = json_body(&parts.headers, body, &context.live.gateway) => read,
        () = state.cut_waiting() => Err(shutting_down()),
    };
    match read {
        Ok(body) => {
            // Ended, still waiting, when the shutdown's grace period is over (`None`); the
            // attempt it cuts short says so, before the handler is dropped.
            let waiting = state.cut_waiting();
            let unfinished = context.progress.unfinished.clone();
            let cut = async move {
                waiting.await;
                unfinished.dropping_because(CUT_NOTE);
            };
            parts.extensions.insert(Accepted { context, body });
            let handler = Box::pin(async move {
                tokio::select! {
                    biased;
                    response = next.run(Request::from_parts(parts, Body::empty())) => Some(response),
                    () = cut => None,
                }
            });
            Watched { handler, watch }.await
        }
        // Logged here: the watch finds it logged.
        Err(error) => context.fail(&state, error),
    }
}

/// The note of an attempt the shutdown's grace period cut short.
const CUT_NOTE: &str = "cut short: the gateway's shutdown grace period ended";

/// The answer to a request the shutdown's grace period ended before it was answered.
fn shutting_down() -> ApiError {
    let message = "the gateway is shutting down and its grace period ended before the answer came: send the request again";
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
}

/// A handler watched for its client going away: dropped unfinished, the handler goes first
/// (fields drop in order), its router leaving the route and trail in the request's
/// [`Unfinished`](switchyard::trail::Unfinished), then the watch logs the request with them.
struct Watched<F> {
    handler: std::pin::Pin<Box<F>>,
    watch: Abandoned,
}

impl<F: Future<Output = Option<Response>>> Future for Watched<F> {
    type Output = Response;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Response> {
        let answered = std::task::ready!(self.handler.as_mut().poll(cx));
        if let Some(response) = answered {
            self.watch.context = None;
            return std::task::Poll::Ready(response);
        }
        // The shutdown cut it: the client is told so, and the watch logs it as it ends.
        self.watch.status = 503;
        let mut error = shutting_down();
        let response = match &self.watch.context {
            Some(context) => {
                // What the router did before it was cut, as the log line tells it.
                let trail = context.progress.unfinished.peek();
                error.attempts = trail.and_then(|(_, trail)| serde_json::to_value(trail).ok()).map(Box::new);
                let mut response = error.into_response(context.dialect, &context.id);
                context.stamp(&mut response, None, 0);
                response
            }
            None => error.into_response(Dialect::OpenAi, ""),
        };
        std::task::Poll::Ready(response)
    }
}

/// A request whose client goes away before it is answered, or that the shutdown cut while it
/// waited: the handler is dropped unfinished, and this logs it then (499, as a stream its
/// client left is; 503, cut), with the route and the trail
/// of what its router did, so that every request has its line, metrics and `/admin/requests`
/// entry.
struct Abandoned {
    state: Arc<AppState>,
    /// Until the handler answered.
    context: Option<RequestContext>,
    /// What it is logged as: 499, its client gone; 503, cut by the shutdown.
    status: u16,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        // A handler that panicked did not lose its client.
        let Some(context) = self.context.take().filter(|_| !std::thread::panicking()) else { return };
        match context.progress.unfinished.take() {
            Some(left) => {
                // The calls it cut were billed their prompt: charged to its key, as a stream
                // its client leaves is charged what it delivered.
                let cut = context.progress.unfinished.cut_short();
                context.finish_failure(&self.state, left, self.status, cut);
            }
            None => {
                let ending = super::finished::Ending {
                    route: "".into(),
                    served_by: None,
                    status: self.status,
                    attempts: 0,
                    settled: None,
                };
                context.finish(&self.state, ending);
            }
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Accepted {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        parts.extensions.remove::<Accepted>().ok_or_else(|| {
            // A handler routed without the layer: a wiring mistake, never a client's.
            let error =
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the request was not accepted");
            error.into_response(Dialect::OpenAi, "")
        })
    }
}

/// Reads a JSON request body, refusing a wrong content type, a body over `gateway.max_body`
/// and one that stops arriving for `gateway.body_timeout` (answered `408`, and the connection
/// closed: the rest of the body may still come, and nothing could tell it from a next request).
pub(crate) async fn json_body(
    headers: &HeaderMap,
    body: Body,
    gateway: &GatewaySettings,
) -> Result<Bytes, ApiError> {
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or_default().to_ascii_lowercase();
        let essence = text.split(';').next().unwrap_or_default().trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("content type `{essence}` is not JSON: send `Content-Type: application/json`"),
            ));
        }
    }
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok())
        && !encoding.trim().eq_ignore_ascii_case("identity")
    {
        // Read as JSON, a compressed body would be refused as garbage at its first byte.
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("a body with content encoding `{}` is not read: send it uncompressed", encoding.trim()),
        )
        .closing());
    }
    let bytes =
        body::read(body, gateway.max_body, gateway.connections.body_timeout).await.map_err(|error| {
            match error {
                // What is left of the body on the connection cannot be told from a next request.
                body::BodyError::TooLarge { .. } => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("{error} (gateway.max_body)"),
                )
                .closing(),
                body::BodyError::Stalled { .. } => stalled(&error),
                body::BodyError::Unreadable(_) => {
                    ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", error.to_string())
                }
            }
        })?;
    if bytes.len() > body::COUNTED_FROM && body::values_past(&bytes, body::MAX_VALUES) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the request body holds more than {} JSON values (objects, arrays and their members): send fewer",
                body::MAX_VALUES
            ),
        ));
    }
    Ok(bytes)
}

/// The answer to a body that stopped arriving: `408`, and the connection closes after it.
pub(crate) fn stalled(error: &body::BodyError) -> ApiError {
    ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", format!("{error} (gateway.body_timeout)"))
        .closing()
}

/// A JSON parse error, with the line and column.
pub(crate) fn invalid_json(error: &serde_json::Error) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_json",
        format!("the body is not a valid request: {error}"),
    )
}

/// A body of valid JSON that `T` refuses, as a 400 naming the member at fault: the body is read
/// again, on this path only, to find where (`messages[0].role`, `tool_choice`).
pub(crate) fn invalid_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    error: &serde_json::Error,
) -> ApiError {
    // Not JSON at all: the parser's line and column say where.
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return invalid_json(error);
    }
    let mut reader = serde_json::Deserializer::from_slice(body);
    let path = match serde_path_to_error::deserialize::<_, T>(&mut reader) {
        Err(located) => located.path().to_string(),
        Ok(_) => String::new(),
    };
    let said = in_json_words(&error.to_string());
    let message = match path.as_str() {
        "" | "." => format!("the body is not a valid request: {said}"),
        path => format!("the body is not a valid request: `{path}`: {said}"),
    };
    // JSON, but not the request: the request's fault, not its syntax's.
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

/// A reader's words with its own type names said as JSON says them (`expected struct
/// ChatRequest` is `expected an object`).
fn in_json_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("struct ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "struct ".len()..];
        let name = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        out.push_str("an object");
        rest = &after[name..];
    }
    out.push_str(rest);
    out
}
