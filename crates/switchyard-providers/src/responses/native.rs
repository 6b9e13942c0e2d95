//! A provider that speaks the Responses API itself: the body it is sent (the client's, with
//! the whole conversation), and its response object and events as the client gets them (under
//! the gateway's id).

use serde_json::{Map, Value, json};
use switchyard::chat::{Dialect, Verbatim};

use super::encode::Meta;
use super::is_sealed_by_gateway;

/// The body a provider that speaks the Responses API is sent: the client's, with the whole
/// conversation (`items`) as its input, nothing for the provider to keep (`store: false`, no
/// `previous_response_id`), and reasoning returned encrypted so that a later turn can send it
/// back.
///
/// A reasoning item without `encrypted_content` is left out: with nothing kept by the
/// provider, only the encrypted form can be read back (the gateway writes such items for the
/// reasoning of models of other kinds, and a client may hold ones a provider kept). So is what
/// the gateway sealed (Claude's thinking, another dialect's reasoning), which OpenAI could not
/// read.
pub fn native_body(mut body: Map<String, Value>, items: &[Value]) -> Verbatim {
    let readable = |item: &&Value| {
        item["type"] != "reasoning"
            || (item["encrypted_content"].as_str().is_some_and(|c| !c.is_empty())
                && !is_sealed_by_gateway(item))
    };
    body.insert("input".to_owned(), Value::Array(items.iter().filter(readable).cloned().collect()));
    body.remove("previous_response_id");
    body.insert("store".to_owned(), Value::Bool(false));
    let include = body.entry("include").or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(include) = include
        && !include.iter().any(|i| i == "reasoning.encrypted_content")
    {
        include.push(Value::from("reasoning.encrypted_content"));
    }
    Verbatim::new(Dialect::Responses, serde_json::to_vec(&body).unwrap_or_default())
}

/// A provider's response object as the client gets it: under the gateway's id, saying what
/// the client asked of the store and which response it continues.
pub fn native_object(bytes: &[u8], meta: &Meta) -> Value {
    let mut object: Value = serde_json::from_slice(bytes).unwrap_or_else(|_| json!({}));
    restamp(&mut object, meta);
    object
}

/// The response object a provider's stream of events ends with (`response.completed`, or
/// `response.incomplete`), as the client gets it; `None` when the events hold none.
pub fn object_of_frames(frames: &[bytes::Bytes], meta: &Meta) -> Option<Value> {
    let mut whole = None;
    for frame in frames {
        let Some(data) = crate::pieces::data_of(frame) else { continue };
        let Ok(mut event) = serde_json::from_str::<Value>(&data) else { continue };
        if matches!(event["type"].as_str(), Some("response.completed" | "response.incomplete")) {
            whole = Some(event["response"].take());
        }
    }
    let mut object = whole?;
    restamp(&mut object, meta);
    Some(object)
}

/// Puts the gateway's id, `store` and `previous_response_id` on a provider's response object.
pub fn restamp(object: &mut Value, meta: &Meta) {
    if let Value::Object(object) = object {
        object.insert("id".to_owned(), Value::from(meta.id.clone()));
        object.insert("store".to_owned(), Value::Bool(meta.store));
        object.insert("previous_response_id".to_owned(), json!(meta.previous_response_id));
    }
}
