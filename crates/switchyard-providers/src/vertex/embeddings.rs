//! Text embeddings on Vertex AI (`publishers/google/models/{model}:predict`): the canonical
//! embeddings call as one `predict` of one instance per text.
//!
//! `{"instances": [{"content", "task_type"?, "title"?}], "parameters": {"outputDimensionality"?}}`
//! answered by `{"predictions": [{"embeddings": {"values", "statistics": {"token_count"}}}]}`
//! (Vertex AI's "Get text embeddings" reference). `dimensions` becomes `outputDimensionality`;
//! Gemini's `taskType` and `title`, given in the request's extra members as for the Gemini
//! adapter, go on each instance.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchyard::chat::{Embedding, EmbeddingsRequest, EmbeddingsResponse, Extra, Usage};
use switchyard::{ErrorKind, ProviderError};

use crate::{gemini, http};

/// The `predict` bodies for `request` to `model`, and how many texts each embeds: one call for
/// at most [`PREDICT_BATCH`] texts, and one text a call for `gemini-embedding-*`, which Vertex
/// embeds one instance at a time.
pub(super) fn predict_bodies(
    request: &EmbeddingsRequest,
    model: &str,
) -> Result<Vec<(Vec<u8>, usize)>, ProviderError> {
    let options = gemini::embedding_options(request)?;
    // Token ids are refused by `embedding_options` above.
    let texts = request.input.texts();
    if texts.is_empty() {
        return Err(ProviderError::unsupported("input: give at least one text to embed"));
    }
    let mut shared = Map::new();
    if let Some(task) = options.get("taskType") {
        shared.insert("task_type".into(), task.clone());
    }
    if let Some(title) = options.get("title") {
        shared.insert("title".into(), title.clone());
    }
    let per_call = if model.to_ascii_lowercase().contains("gemini-embedding") { 1 } else { PREDICT_BATCH };
    texts
        .chunks(per_call)
        .map(|batch| {
            let instances: Vec<Value> = batch
                .iter()
                .map(|text| {
                    let mut instance = shared.clone();
                    instance.insert("content".into(), json!(text));
                    Value::Object(instance)
                })
                .collect();
            let mut body = json!({ "instances": instances });
            if let Some(dimensions) = options.get("outputDimensionality") {
                body["parameters"] = json!({ "outputDimensionality": dimensions });
            }
            let bytes = serde_json::to_vec(&body).map_err(|error| {
                ProviderError::unsupported(format!("the request could not be encoded: {error}"))
            })?;
            Ok((bytes, batch.len()))
        })
        .collect()
}

/// The most texts one `predict` call embeds (Vertex AI's text embedding models take 250).
const PREDICT_BATCH: usize = 250;

#[derive(Deserialize)]
struct PredictResponse {
    predictions: Vec<Prediction>,
}

#[derive(Deserialize)]
struct Prediction {
    embeddings: Values,
}

#[derive(Deserialize)]
struct Values {
    values: Vec<f32>,
    #[serde(default)]
    statistics: Option<Statistics>,
}

#[derive(Deserialize)]
struct Statistics {
    /// A number Vertex writes as a float (`6.0`).
    #[serde(default)]
    token_count: f64,
}

/// The canonical answer of a `predict` answer `bytes` for `texts` texts, by `model`.
pub(super) fn answer(bytes: &[u8], texts: usize, model: &str) -> Result<EmbeddingsResponse, ProviderError> {
    let malformed = |detail: String| ProviderError::new(ErrorKind::MalformedResponse, detail);
    let answer: PredictResponse = serde_json::from_slice(bytes).map_err(|error| {
        malformed(format!(
            "the answer is not a predict response ({error}): {}",
            http::excerpt(&String::from_utf8_lossy(bytes))
        ))
    })?;
    if answer.predictions.len() != texts {
        return Err(malformed(format!(
            "predict returned {} vectors for {texts} inputs",
            answer.predictions.len()
        )));
    }
    let counted: f64 = answer
        .predictions
        .iter()
        .filter_map(|p| p.embeddings.statistics.as_ref())
        .map(|s| s.token_count)
        .sum();
    let usage = (counted > 0.0).then(|| {
        // Token counts are whole numbers written as floats.
        let tokens = counted.round().clamp(0.0, f64::from(u32::MAX)) as u32;
        Usage { prompt_tokens: tokens, total_tokens: tokens, ..Usage::default() }
    });
    Ok(EmbeddingsResponse {
        data: answer
            .predictions
            .into_iter()
            .zip(0u32..)
            .map(|(prediction, index)| Embedding { index, embedding: prediction.embeddings.values })
            .collect(),
        model: model.to_owned(),
        usage,
        extra: Extra::new(),
    })
}

/// The answers of two calls as one: `next`'s vectors after `first`'s, numbered on, and the
/// tokens both counted.
pub(super) fn joined(mut first: EmbeddingsResponse, next: EmbeddingsResponse) -> EmbeddingsResponse {
    let offset = u32::try_from(first.data.len()).unwrap_or(u32::MAX);
    first.data.extend(next.data.into_iter().map(|e| Embedding { index: e.index + offset, ..e }));
    first.usage = match (first.usage, next.usage) {
        (Some(a), Some(b)) => {
            let tokens = a.prompt_tokens.saturating_add(b.prompt_tokens);
            Some(Usage { prompt_tokens: tokens, total_tokens: tokens, ..Usage::default() })
        }
        (a, b) => a.or(b),
    };
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::chat::EmbeddingInput;

    fn request(input: EmbeddingInput, extra: Value) -> EmbeddingsRequest {
        let mut request: EmbeddingsRequest = serde_json::from_value(json!({ "input": "x" })).unwrap();
        request.input = input;
        request.extra = serde_json::from_value(extra).unwrap();
        request
    }

    #[test]
    fn each_text_is_an_instance_and_dimensions_a_parameter() {
        let mut asked = request(
            EmbeddingInput::Many(vec!["a".into(), "b".into()]),
            json!({ "taskType": "RETRIEVAL_QUERY", "encoding_format": "float" }),
        );
        asked.dimensions = Some(256);
        let [(body, texts)] = predict_bodies(&asked, "text-embedding-005").unwrap().try_into().unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(texts, 2);
        assert_eq!(
            body,
            json!({
                "instances": [
                    { "content": "a", "task_type": "RETRIEVAL_QUERY" },
                    { "content": "b", "task_type": "RETRIEVAL_QUERY" }
                ],
                "parameters": { "outputDimensionality": 256 }
            })
        );
        let [(one, _)] = predict_bodies(&request(EmbeddingInput::One("a".into()), json!({})), "m")
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&one).unwrap(),
            json!({ "instances": [{ "content": "a" }] })
        );
    }

    #[test]
    fn texts_go_in_calls_of_at_most_250_and_one_at_a_time_to_gemini_embedding() {
        let texts = EmbeddingInput::Many((0..300).map(|i| i.to_string()).collect());
        let asked = request(texts, json!({}));
        let sizes =
            |model| predict_bodies(&asked, model).unwrap().iter().map(|(_, n)| *n).collect::<Vec<_>>();
        assert_eq!(sizes("text-embedding-005"), [250, 50]);
        let two = request(EmbeddingInput::Many(vec!["a".into(), "b".into()]), json!({}));
        let calls = predict_bodies(&two, "gemini-embedding-001").unwrap();
        assert_eq!(calls.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn an_unknown_member_or_no_text_is_refused_before_sending() {
        let unknown =
            predict_bodies(&request(EmbeddingInput::One("a".into()), json!({ "truncate": "END" })), "m");
        assert!(unknown.unwrap_err().is_unsupported());
        let empty = predict_bodies(&request(EmbeddingInput::Many(Vec::new()), json!({})), "m");
        assert!(empty.unwrap_err().is_unsupported());
    }

    #[test]
    fn predictions_are_the_vectors_in_order_with_their_token_counts() {
        let body = json!({ "predictions": [
            { "embeddings": { "values": [0.5, 1.0], "statistics": { "token_count": 3.0, "truncated": false } } },
            { "embeddings": { "values": [0.25, 2.0], "statistics": { "token_count": 4.0, "truncated": false } } }
        ]});
        let answer = answer(body.to_string().as_bytes(), 2, "text-embedding-005").unwrap();
        assert_eq!(answer.data[1].index, 1);
        assert_eq!(answer.data[1].embedding, vec![0.25, 2.0]);
        assert_eq!(answer.usage.unwrap().prompt_tokens, 7);
        let short = super::answer(body.to_string().as_bytes(), 3, "m").unwrap_err();
        assert_eq!(short.kind(), ErrorKind::MalformedResponse);
    }
}
