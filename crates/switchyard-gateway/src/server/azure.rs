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
/// schema's key order, a number's spelling), in order, the model first; a body that is not a
/// JSON object, or names a member twice (which `/v1` refuses), is left for the handler to
/// refuse.
fn named(Accepted { context, body }: Accepted, deployment: &str) -> Accepted {
    let Ok(Members(members)) = serde_json::from_slice::<Members>(&body) else {
        return Accepted { context, body };
    };
    let Ok(model) = serde_json::value::to_raw_value(deployment) else { return Accepted { context, body } };
    let mut rewritten = Vec::with_capacity(body.len() + deployment.len() + 16);
    rewritten.push(b'{');
    let _ = serde_json::to_writer(&mut rewritten, "model");
    rewritten.push(b':');
    rewritten.extend_from_slice(model.get().as_bytes());
    for (name, value) in members.iter().filter(|(name, _)| name != "model") {
        rewritten.push(b',');
        let _ = serde_json::to_writer(&mut rewritten, name);
        rewritten.push(b':');
        rewritten.extend_from_slice(value.get().as_bytes());
    }
    rewritten.push(b'}');
    Accepted { context, body: Bytes::from(rewritten) }
}

/// A JSON object's members, in order, each as written; refused when one is named twice.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members: Vec<(String, Box<RawValue>)> = Vec::new();
                let mut names = std::collections::HashSet::new();
                while let Some((name, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    if !names.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format_args!("`{name}` is given twice")));
                    }
                    members.push((name, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
