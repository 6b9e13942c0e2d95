//! Azure OpenAI's paths, for clients made for it (`AzureOpenAI(azure_endpoint=...)` of the
//! OpenAI SDKs): `POST /openai/deployments/{deployment}/chat/completions` and `.../embeddings`.
//! The deployment names the model (a route or a target), as it names the model on Azure: the
//! body's own `model`, which those clients leave out, is set to it. The `api-version` query is
//! not read. The key comes as `api-key`, which every endpoint takes ([`super::auth`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::value::RawValue;

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

/// The request with its `model` the deployment's name. Its members are kept as written (a
/// schema's key order, a number's spelling), in the order of their names; a body that is not a
/// JSON object is left for the handler to refuse.
fn named(Accepted { context, body }: Accepted, deployment: &str) -> Accepted {
    let Ok(mut members) = serde_json::from_slice::<BTreeMap<&str, &RawValue>>(&body) else {
        return Accepted { context, body };
    };
    let model = serde_json::to_string(deployment).unwrap_or_default();
    let model = RawValue::from_string(model).ok();
    let Some(model) = model.as_deref() else { return Accepted { context, body } };
    members.insert("model", model);
    let body = serde_json::to_vec(&members).map(Bytes::from).unwrap_or(body);
    Accepted { context, body }
}
