//! The bodies of `embedContent` and `batchEmbedContents` requests: the per-request options
//! and one `EmbedContentRequest` per text.

use serde_json::{Map, Value, json};
use switchyard::ProviderError;
use switchyard::chat::EmbeddingsRequest;

use super::request::invalid_request;

/// Per-request embedding options: `outputDimensionality` from `dimensions`, and Gemini's own
/// `taskType` / `title` when given in `extra`. OpenAI's `user` and `encoding_format` are
/// harmless (the gateway writes the vectors as the client asked: base64 is the OpenAI SDK's
/// default); anything else is refused.
pub(crate) fn embedding_options(request: &EmbeddingsRequest) -> Result<Map<String, Value>, ProviderError> {
    if request.input.is_tokens() {
        return Err(ProviderError::unsupported("`input` is token ids, which only OpenAI's dialect reads"));
    }
    let mut options = Map::new();
    if let Some(dimensions) = request.dimensions {
        options.insert("outputDimensionality".into(), json!(dimensions));
    }
    for (key, value) in &request.extra {
        match key.as_str() {
            _ if value.is_null() => {}
            "user" => {}
            "encoding_format" => {}
            "taskType" | "title" => {
                options.insert(key.clone(), value.clone());
            }
            _ => {
                return Err(invalid_request(format!(
                    "field `{key}` has no Gemini embeddings equivalent; remove it"
                )));
            }
        }
    }
    Ok(options)
}

/// One `EmbedContentRequest`; `model` (the resource name) only inside a batch.
pub(super) fn embed_request(text: &str, model: Option<&str>, options: &Map<String, Value>) -> Value {
    let mut request = Map::new();
    if let Some(model) = model {
        request.insert("model".into(), json!(model));
    }
    request.insert("content".into(), json!({ "parts": [{ "text": text }] }));
    request.extend(options.iter().map(|(k, v)| (k.clone(), v.clone())));
    Value::Object(request)
}
