//! The HTTP surface: the OpenAI, Anthropic and Responses dialects over one router, plus health,
//! metrics and admin endpoints. The gateway knows nothing of retry rules: it translates
//! dialects and renders what the router decided.
//!
//! A model endpoint's request goes through the [`lifecycle`] layer (id, key, trace, body),
//! then its dialect's handler ([`openai`], [`anthropic`], [`responses`]: decode, route,
//! encode), and ends once in [`request::RequestContext::finish`], whose outputs are in
//! [`finished`].

mod admin;
mod anthropic;
mod auth;
mod azure;
mod body;
mod deliver;
mod errors;
mod events;
mod finished;
mod fleet_events;
mod history;
mod ids;
mod kept_thinking;
mod keys;
mod lifecycle;
mod openai;
mod options;
mod page;
mod request;
mod responses;
mod sse;
mod state;

use std::sync::Arc;

use axum::Router as HttpRouter;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use switchyard::chat::Dialect;

pub use errors::ApiError;
pub use request::RequestContext;
pub use state::{AppState, Live};

use lifecycle::{Endpoint, lifecycle};

/// The whole HTTP application.
pub fn app(state: Arc<AppState>) -> HttpRouter {
    // A model endpoint: its handler behind the lifecycle layer.
    let model = |handler: MethodRouter<Arc<AppState>>, dialect: Dialect, name: &'static str| {
        handler.route_layer(from_fn_with_state((state.clone(), Endpoint { dialect, name }), lifecycle))
    };
    let api: [(&str, MethodRouter<Arc<AppState>>); 8] = [
        ("/chat/completions", model(post(openai::chat_completions), Dialect::OpenAi, "chat_completions")),
        ("/embeddings", model(post(openai::embeddings), Dialect::OpenAi, "embeddings")),
        ("/models", get(openai::models)),
        ("/models/{*id}", get(openai::model)),
        ("/messages", model(post(anthropic::messages), Dialect::Anthropic, "messages")),
        ("/responses", model(post(responses::create), Dialect::Responses, "responses")),
        ("/responses/{id}", get(responses::retrieve).delete(responses::delete)),
        ("/messages/count_tokens", model(post(anthropic::count_tokens), Dialect::Anthropic, "count_tokens")),
    ];
    // Each API endpoint also answers without its `/v1` (a client given the gateway's bare
    // address as its base URL, as LiteLLM's and other gateways' guides write it) and under
    // `/openai/v1` (one made for Azure OpenAI's v1 API, the model in the body).
    let mut app = HttpRouter::new();
    for (path, handler) in api {
        for prefix in ["/v1", "/openai/v1"] {
            app = app.route(&format!("{prefix}{path}"), handler.clone());
        }
        app = app.route(path, handler);
    }
    // Azure OpenAI's paths, the deployment naming the model.
    let azure = [
        ("chat/completions", model(post(azure::chat_completions), Dialect::OpenAi, "chat_completions")),
        ("embeddings", model(post(azure::embeddings), Dialect::OpenAi, "embeddings")),
    ];
    for (operation, handler) in azure {
        app = app.route(&format!("/openai/deployments/{{deployment}}/{operation}"), handler);
    }
    app.route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/readyz", get(admin::ready))
        // LiteLLM's probe paths, so that a deployment's probes carry over unchanged.
        .route("/health/liveliness", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/health/readiness", get(admin::ready))
        .route("/metrics", get(admin::metrics))
        .route("/admin/health", get(admin::health))
        .route("/admin/health/reset", post(admin::reset))
        .route("/admin/keys", get(keys::list))
        .route("/admin/config/reload", post(admin::reload))
        .route("/admin/requests", get(history::requests))
        .route("/admin/requests/{id}", get(history::request))
        .route("/admin/events", get(events::stream))
        .route("/admin/simulated/{provider}", post(admin::drill))
        .route("/admin", get(page::redirect))
        .route("/admin/", get(page::page))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    let bare = path.strip_prefix("/openai").unwrap_or(path);
    if bare.strip_prefix("/v1").unwrap_or(bare) == "/completions" {
        let message = "the legacy Completions API (POST /v1/completions) is not served: send the prompt as a \
                       user message to POST /v1/chat/completions";
        return ApiError::new(StatusCode::NOT_FOUND, "unknown_endpoint", message)
            .into_response(Dialect::OpenAi, "");
    }
    let message = format!(
        "no such endpoint: {} {}. Endpoints (the API's also without /v1, and under /openai/v1): POST /v1/chat/completions, POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses, POST /v1/embeddings, GET /v1/models, GET /v1/models/{{id}}, GET /healthz, GET /readyz, GET /metrics, GET /admin/, GET /admin/health, POST /admin/health/reset, GET /admin/keys, POST /admin/config/reload, GET /admin/requests, GET /admin/requests/{{id}}, GET /admin/events, POST /admin/simulated/{{provider}}",
        request.method(),
        request.uri().path()
    );
    ApiError::new(StatusCode::NOT_FOUND, "unknown_endpoint", message)
        .into_response(dialect_of(request.uri().path()), "")
}

async fn method_not_allowed(request: Request) -> Response {
    let message = format!("{} is not allowed on {}", request.method(), request.uri().path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
        .into_response(dialect_of(request.uri().path()), "")
}

/// The dialect of a path no endpoint answers: its errors are written in it.
fn dialect_of(path: &str) -> Dialect {
    let anthropic = path.strip_prefix("/v1").unwrap_or(path).starts_with("/messages");
    if anthropic { Dialect::Anthropic } else { Dialect::OpenAi }
}
