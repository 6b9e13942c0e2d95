//! Embeddings on Bedrock: Amazon Titan (`amazon.titan-embed-text-v1`, `-v2:0`: one text per
//! call, a few at once, `dimensions` as Titan v2's) and Cohere (`cohere.embed-*`: a batch of texts,
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
    if request.input.is_tokens() {
        return Err(ProviderError::unsupported("`input` is token ids, which only OpenAI's dialect reads"));
    }
    let texts = request.input.texts();
    let mut input_type = None;
    for (key, value) in &request.extra {
        match key.as_str() {
            _ if value.is_null() => {}
            "user" => {}
            // The gateway writes the vectors as the client asked (base64: the OpenAI SDK's default).
            "encoding_format" => {}
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
        return cohere(provider, &call, request, (&texts, input_type)).await;
    }
    if !model.contains("titan-embed") {
        return Err(ProviderError::unsupported(format!(
            "model `{}` does not embed on Bedrock here (Titan and Cohere embedding models do)",
            call.model
        )));
    }
    // Only Titan Text Embeddings v2 takes `dimensions`; sent to another, it is refused.
    if request.dimensions.is_some() && !model.contains("text-v2") {
        return Err(ProviderError::unsupported(format!("`dimensions`: `{}` embeds at one size", call.model)));
    }
    // Titan embeds one text a call: a few calls at once, the answers kept in input order.
    let bodies: Vec<Value> = texts
        .iter()
        .map(|text| match request.dimensions {
            Some(dimensions) => json!({ "inputText": text, "dimensions": dimensions }),
            None => json!({ "inputText": text }),
        })
        .collect();
    let mut answers = Vec::with_capacity(bodies.len());
    for batch in bodies.chunks(TITAN_AT_ONCE) {
        let mut calls = Vec::with_capacity(batch.len());
        for body in batch {
            calls.push(call_model(provider, &call, body));
        }
        answers.extend(futures_util::future::try_join_all(calls).await?);
    }
    let mut tokens = 0u32;
    let mut data = Vec::with_capacity(answers.len());
    for (i, (answer, _)) in answers.iter().enumerate() {
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

/// Cohere's vectors of `texts`, in calls of at most [`COHERE_BATCH`] texts. Embed v4 is asked
/// for float vectors (answered by type, `embeddings.float`) of the request's `dimensions`
/// (`output_dimension`); v3 answers a list and embeds at one size, so `dimensions` is refused.
async fn cohere(
    provider: &BedrockProvider,
    call: &Call<'_>,
    request: &EmbeddingsRequest,
    (texts, input_type): (&[&str], Value),
) -> Result<EmbeddingsResponse, ProviderError> {
    let v4 = call.model.to_ascii_lowercase().contains("embed-v4");
    if request.dimensions.is_some() && !v4 {
        return Err(ProviderError::unsupported(format!("`dimensions`: `{}` embeds at one size", call.model)));
    }
    let mut data = Vec::with_capacity(texts.len());
    // The tokens every call counted, when each said (Bedrock's header, or Cohere's own
    // `meta.billed_units`).
    let mut tokens = Some(0u32);
    for batch in texts.chunks(COHERE_BATCH) {
        let mut body = json!({ "texts": batch, "input_type": input_type });
        if v4 {
            body["embedding_types"] = json!(["float"]);
            if let Some(dimensions) = request.dimensions {
                body["output_dimension"] = json!(dimensions);
            }
        }
        let (answer, counted) = call_model(provider, call, &body).await?;
        let billed = || answer.pointer("/meta/billed_units/input_tokens")?.as_u64()?.try_into().ok();
        tokens = tokens.zip(counted.or_else(billed)).map(|(sum, n)| sum.saturating_add(n));
        let vectors = match answer.get("embeddings") {
            Some(Value::Array(vectors)) => vectors,
            Some(by_type) => by_type.get("float").and_then(Value::as_array).map_or(&[][..], Vec::as_slice),
            None => &[][..],
        };
        if vectors.len() != batch.len() {
            let detail = format!("Cohere returned {} vectors for {} texts", vectors.len(), batch.len());
            return Err(ProviderError::new(ErrorKind::MalformedResponse, detail));
        }
        for v in vectors {
            data.push(vector(data.len(), v)?);
        }
    }
    let usage = tokens.map(|tokens| Usage::new(tokens, 0));
    Ok(EmbeddingsResponse { data, model: call.model.to_owned(), usage, ..EmbeddingsResponse::default() })
}

/// How many Titan calls (a text each) go at once.
const TITAN_AT_ONCE: usize = 4;

/// The most texts one Cohere embed call takes.
const COHERE_BATCH: usize = 96;

/// One InvokeModel call with `body`: its answer as JSON, and the input tokens Bedrock counted
/// (`x-amzn-bedrock-input-token-count`), when it says.
async fn call_model(
    provider: &BedrockProvider,
    call: &Call<'_>,
    body: &Value,
) -> Result<(Value, Option<u32>), ProviderError> {
    let bytes = serde_json::to_vec(body).map_err(|error| ProviderError::unsupported(error.to_string()))?;
    let (response, redactor): (http::Response, Redactor) =
        provider.send(call, &model_path(call.model, "invoke"), bytes, "application/json").await?;
    let counted = response
        .headers()
        .get("x-amzn-bedrock-input-token-count")
        .and_then(|value| value.to_str().ok()?.trim().parse().ok());
    let bytes = http::read_body(response).await?;
    let answer = serde_json::from_slice(&bytes).map_err(|error| {
        let error = ProviderError::new(
            ErrorKind::MalformedResponse,
            format!("the answer is not JSON ({error}): {}", http::excerpt(&String::from_utf8_lossy(&bytes))),
        );
        redact(error, &redactor)
    })?;
    Ok((answer, counted))
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
