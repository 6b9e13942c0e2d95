//! Requests sent as the client wrote them.
//!
//! When a client speaks the provider's own dialect, its body goes upstream with only what
//! routing must change: the model, and what the call's streaming needs. Every other member is
//! copied as its bytes (a schema's key order, a number's digits, a field Switchyard has never
//! heard of), so what the provider receives is what the client sent. Only the top level is
//! rebuilt, and only its whitespace can differ.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use switchyard::{ErrorKind, ProviderError};

/// What to do to one top-level member.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Edit<'a> {
    /// Write this string as its value, in its place (or at the end when absent).
    Text(&'a str),
    /// Write this boolean, in its place (or at the end when absent).
    Flag(bool),
    /// Write `false` in its place when present; leave it absent otherwise.
    FalseIfPresent,
    /// Merge `"<field>": true` into the object (or write a new object with it).
    Enable(&'a str),
}

/// `body` (a JSON object) with each named member edited, the rest as written.
pub(crate) fn rewrite(body: &[u8], edits: &[(&str, Edit<'_>)]) -> Result<Vec<u8>, ProviderError> {
    // UTF-8 checked once, as `serde_extra::from_slice` does; the members borrow from the text.
    let members: Result<Members<'_>, _> = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    };
    let members = members.map_err(|error| {
        ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("the request body is not a JSON object: {error}"),
        )
    })?;
    let mut out = Vec::with_capacity(body.len() + 64);
    out.push(b'{');
    let mut done = vec![false; edits.len()];
    for (key, value) in &members.0 {
        let edit = edits.iter().position(|(name, _)| name == key);
        if let Some(at) = edit {
            if done[at] {
                // A repeated member: the first occurrence carries the edit, later ones go.
                continue;
            }
            done[at] = true;
        }
        let written = match edit.map(|at| edits[at].1) {
            None => Some(Member::Raw(value.get())),
            Some(edit) => edited(edit, Some(value))?,
        };
        if let Some(member) = written {
            member.write(key, &mut out);
        }
    }
    for ((key, edit), done) in edits.iter().zip(done) {
        if !done && let Some(member) = edited(*edit, None)? {
            member.write(key, &mut out);
        }
    }
    if out.len() > 1 {
        out.pop(); // the last comma
    }
    out.push(b'}');
    Ok(out)
}

/// The value `edit` makes of `current` (`None` when absent); `None` to leave it out.
fn edited<'a>(edit: Edit<'a>, current: Option<&'a RawValue>) -> Result<Option<Member<'a>>, ProviderError> {
    Ok(match edit {
        Edit::Text(text) => Some(Member::Text(text)),
        Edit::Flag(flag) => Some(Member::Flag(flag)),
        Edit::FalseIfPresent => current.map(|_| Member::Flag(false)),
        Edit::Enable(field) => {
            let mut object = match current {
                Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
                    Ok(serde_json::Value::Object(object)) => object,
                    Ok(serde_json::Value::Null) => serde_json::Map::new(),
                    _ => {
                        return Err(ProviderError::new(
                            ErrorKind::InvalidRequest,
                            format!("a top-level member must be an object to set `{field}` in it"),
                        ));
                    }
                },
                None => serde_json::Map::new(),
            };
            object.insert(field.to_owned(), serde_json::Value::Bool(true));
            Some(Member::Object(object))
        }
    })
}

/// One member's value as it is written out.
enum Member<'a> {
    Raw(&'a str),
    Text(&'a str),
    Flag(bool),
    Object(serde_json::Map<String, serde_json::Value>),
}

impl Member<'_> {
    /// Writes `"key":value,`.
    fn write(&self, key: &str, out: &mut Vec<u8>) {
        // Writing a string or a map of JSON values into a vector cannot fail.
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        match self {
            Member::Raw(raw) => out.extend_from_slice(raw.as_bytes()),
            Member::Text(text) => {
                let _ = serde_json::to_writer(&mut *out, text);
            }
            Member::Flag(flag) => out.extend_from_slice(if *flag { b"true" } else { b"false" }),
            Member::Object(object) => {
                let _ = serde_json::to_writer(&mut *out, object);
            }
        }
        out.push(b',');
    }
}

/// A JSON object's top-level members in the order written, each value as its bytes.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(body: &str, edits: &[(&str, Edit<'_>)]) -> String {
        String::from_utf8(rewrite(body.as_bytes(), edits).unwrap()).unwrap()
    }

    #[test]
    fn only_the_edited_members_change_and_the_rest_keeps_its_bytes() {
        let body = r#"{ "model" : "route", "temperature": 1.0, "schema": {"b": 1, "a": 0.10000}, "n": 18446744073709551616, "x_new": [ 1 ,2 ] }"#;
        assert_eq!(
            text(body, &[("model", Edit::Text("gpt-4o\"x")), ("stream", Edit::FalseIfPresent)]),
            r#"{"model":"gpt-4o\"x","temperature":1.0,"schema":{"b": 1, "a": 0.10000},"n":18446744073709551616,"x_new":[ 1 ,2 ]}"#
        );
    }

    #[test]
    fn streaming_edits_set_in_place_merge_and_append() {
        let body = r#"{"stream":false,"model":"r","stream_options":{"x":1}}"#;
        let edits = [
            ("model", Edit::Text("m")),
            ("stream", Edit::Flag(true)),
            ("stream_options", Edit::Enable("include_usage")),
        ];
        assert_eq!(
            text(body, &edits),
            r#"{"stream":true,"model":"m","stream_options":{"x":1,"include_usage":true}}"#
        );
        assert_eq!(
            text(r#"{"model":"r"}"#, &edits),
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#
        );
        assert_eq!(text(r#"{"stream":true}"#, &[("stream", Edit::FalseIfPresent)]), r#"{"stream":false}"#);
        assert_eq!(text("{}", &[("stream", Edit::FalseIfPresent)]), "{}");
    }

    #[test]
    fn an_escaped_key_is_matched_by_its_text_and_a_repeated_member_is_written_once() {
        let body = r#"{"mod\u0065l":"a","model":"b","k\"":1}"#;
        assert_eq!(text(body, &[("model", Edit::Text("m"))]), r#"{"model":"m","k\"":1}"#);
    }

    #[test]
    fn a_body_that_is_not_an_object_is_an_invalid_request() {
        for body in ["[]", "1", "{", r#"{"stream_options": 3}"#] {
            let error =
                rewrite(body.as_bytes(), &[("stream_options", Edit::Enable("include_usage"))]).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{body}");
        }
    }
}
