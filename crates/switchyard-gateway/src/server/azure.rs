//! Azure OpenAI's paths, for clients made for it (`AzureOpenAI(azure_endpoint=...)` of the
//! OpenAI SDKs): `POST /openai/deployments/{deployment}/chat/completions` and `.../embeddings`.
//! The deployment names the model (a route or a target), as it names the model on Azure: the
//! body's own `model`, which those clients leave out, is set to it. The `api-version` query is
//! not read. The key comes as `api-key`, which every endpoint takes ([`super::auth`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::lifecycle::Accepted;
use super::openai;
use super::state::AppState;

/// `POST /openai/deployments/{deployment}/chat/completions`.
pub async fn chat_completions(
    Path(deployment): Path<String>,
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    accepted: Accepted,
) -> Response {
    openai::chat_completions(state, headers, named(accepted, &deployment)).await
}

/// `POST /openai/deployments/{deployment}/embeddings`.
pub async fn embeddings(
    Path(deployment): Path<String>,
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    accepted: Accepted,
) -> Response {
    openai::embeddings(state, headers, named(accepted, &deployment)).await
}

/// The request with its `model` the deployment's name, its other members as written; a body
/// that is not a JSON object is left for the handler to refuse.
fn named(Accepted { context, body }: Accepted, deployment: &str) -> Accepted {
    match switchyard_providers::with_model(&body, deployment) {
        Ok(named) => Accepted { context, body: Bytes::from(named) },
        Err(_) => Accepted { context, body },
    }
}
