//! The Anthropic dialect: `/v1/messages`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{ApiError, AppState, Dialect, Exchange};

pub async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, _body: Body) -> Response {
    let exchange = Exchange::start(&state, &headers, Dialect::Anthropic, "messages");
    exchange.fail(
        &state,
        "",
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", "the Anthropic dialect is coming"),
    )
}
