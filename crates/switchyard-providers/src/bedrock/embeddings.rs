//! Embeddings on Bedrock: Amazon Titan (`amazon.titan-embed-text-v1`, `-v2:0`: one text per
//! call, `dimensions` as Titan v2's) and Cohere (`cohere.embed-*`: a batch of texts,
//! `input_type` `search_document` unless the request's `input_type` says otherwise).
//! Other models do not embed here (unsupported: the router tries the next target).

use serde_json::{Value, json};
use switchyard::chat::{Embedding, EmbeddingsRequest, EmbeddingsResponse, Usage};
use switchyard::provider::Call;
use switchyard::{ErrorKind, ProviderError};

use super::{BedrockProvider, Redactor, model_path, redact};
use crate::http;

/// The vectors of `request`'s texts from `call.model`.
pub(super) async fn embed(
    provider: &BedrockProvider,
    call: Call<'_>,
    request: &EmbeddingsRequest,
) -> Result<EmbeddingsResponse, ProviderError> {
    let model = call.model.to_ascii_lowercase();
    let texts = request.input.texts();
    let mut input_type = None;
    for (key, value) in &request.extra {
        match key.as_str() {
            _ if value.is_null() => {}
            "user" => {}
            "encoding_format" if value == "float" => {}
            "input_type" if value.is_string() => input_type = Some(value.clone()),
            _ => {
                return Err(ProviderError::unsupported(format!(
                    "field `{key}` has no Bedrock embeddings equivalent"
                )));
            }
        }
    }
    if model.contains("cohere.embed") {
        let input_type = input_type.unwrap_or_else(|| json!("search_document"));
        let body = json!({ "texts": texts, "input_type": input_type });
        let answer = call_model(provider, &call, &body).await?;
        let vectors = answer.get("embeddings").and_then(Value::as_array).cloned().unwrap_or_default();
        let data = vectors.iter().enumerate().map(|(i, v)| vector(i, v)).collect::<Result<Vec<_>, _>>()?;
        return Ok(EmbeddingsResponse {
            data,
            model: call.model.to_owned(),
            ..EmbeddingsResponse::default()
        });
    }
    if !model.contains("titan-embed") {
        return Err(ProviderError::unsupported(format!(
            "model `{}` does not embed on Bedrock here (Titan and Cohere embedding models do)",
            call.model
        )));
    }
    let mut data = Vec::with_capacity(texts.len());
    let mut tokens = 0u32;
    for (i, text) in texts.iter().enumerate() {
        let mut body = json!({ "inputText": text });
        if let Some(dimensions) = request.dimensions {
            body["dimensions"] = json!(dimensions);
        }
        let answer = call_model(provider, &call, &body).await?;
        tokens += answer.get("inputTextTokenCount").and_then(Value::as_u64).unwrap_or(0) as u32;
        data.push(vector(i, answer.get("embedding").unwrap_or(&Value::Null))?);
    }
    Ok(EmbeddingsResponse {
        data,
        model: call.model.to_owned(),
        usage: Some(Usage::new(tokens, 0)),
        ..EmbeddingsResponse::default()
    })
}

/// One InvokeModel call with `body`, its answer as JSON.
async fn call_model(
    provider: &BedrockProvider,
    call: &Call<'_>,
    body: &Value,
) -> Result<Value, ProviderError> {
    let bytes = serde_json::to_vec(body).map_err(|error| ProviderError::unsupported(error.to_string()))?;
    let (response, redactor): (http::Response, Redactor) =
        provider.send(call, &model_path(call.model, "invoke"), bytes, "application/json").await?;
    let bytes = http::read_body(response).await?;
    serde_json::from_slice(&bytes).map_err(|error| {
        let error = ProviderError::new(
            ErrorKind::MalformedResponse,
            format!("the answer is not JSON ({error}): {}", http::excerpt(&String::from_utf8_lossy(&bytes))),
        );
        redact(error, &redactor)
    })
}

/// Vector `index` of an answer.
fn vector(index: usize, value: &Value) -> Result<Embedding, ProviderError> {
    let numbers = value.as_array().ok_or_else(|| {
        ProviderError::new(ErrorKind::MalformedResponse, "the answer holds no embedding vector")
    })?;
    let embedding =
        numbers.iter().map(|n| n.as_f64().map(|f| f as f32)).collect::<Option<Vec<f32>>>().ok_or_else(
            || {
                ProviderError::new(
                    ErrorKind::MalformedResponse,
                    "an embedding vector holds something other than numbers",
                )
            },
        )?;
    Ok(Embedding { index: index as u32, embedding })
}
