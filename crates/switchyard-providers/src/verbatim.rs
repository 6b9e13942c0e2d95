//! Requests sent as the client wrote them.
//!
//! When a client speaks the provider's own dialect, its body goes upstream with only what
//! routing must change: the model, and what the call's streaming needs. Everything else is
//! copied as its bytes (a schema's key order, a number's digits, a field Switchyard has never
//! heard of, the whitespace), so what the provider receives is what the client sent. The
//! edited members' values are spliced in where they stand; a member to add goes after the
//! last one.
//!
//! The body is read once, by a scanner of the top level that skips each value without
//! building it (this runs on every request before it goes upstream; reading the members
//! through serde, a key string and a raw value each, cost more). The scanner checks the structure
//! it walks (strings closed, brackets matched, a scalar where a value goes); it does not check
//! what a scalar spells or an escape means, which the provider reads and answers for.

use serde_json::Value;
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
    /// Write this JSON text as the value, in its place (or at the end when absent).
    Raw(&'a str),
    /// Take the member out (with its comma), wherever it stands.
    Remove,
    /// Leave the member as it stands (an edit that applies only sometimes).
    Keep,
}

/// `body` (a JSON object) with its `model` set to `model` (added when absent), the rest as
/// written: how a client that names its model elsewhere (Azure's deployment, in the path) is
/// heard as one that named it in the body.
pub fn with_model(body: &[u8], model: &str) -> Result<Vec<u8>, ProviderError> {
    rewrite(body, &[("model", Edit::Text(model))])
}

/// `body` (a JSON object) with each named member edited, the rest as written. Member names
/// in `edits` are plain (no character JSON escapes). A repeated edited member is edited in its
/// first place and its later occurrences go: the provider would otherwise read the last.
pub(crate) fn rewrite<const N: usize>(
    body: &[u8],
    edits: &[(&str, Edit<'_>); N],
) -> Result<Vec<u8>, ProviderError> {
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut copied = 0;
    let mut done = [false; N];
    // Members left in place, and whether the first of them must lose the comma before it (the
    // members before it were all taken out).
    let mut kept = 0usize;
    let mut drop_comma = false;
    let (end, _) = top_level(body, |member| {
        let at = member.edit(body, edits);
        let removing = at.is_some_and(|at| done[at] || matches!(edits[at].1, Edit::Remove));
        if removing {
            // From the comma before it (or, when no member before it stays, from its name) to
            // its value's end.
            let start = match (kept, body[member.comma]) {
                (0, b'{') => member.key.0,
                (0, _) => copied,
                _ => member.comma,
            };
            out.extend_from_slice(&body[copied..start]);
            copied = member.value.1;
            drop_comma |= kept == 0;
            if let Some(at) = at {
                done[at] = true;
            }
            return Ok(());
        }
        if std::mem::take(&mut drop_comma) {
            out.extend_from_slice(&body[copied..member.comma]);
            copied = member.comma + 1;
        }
        kept += 1;
        let Some(at) = at else { return Ok(()) };
        done[at] = true;
        if let Some(edited) = edited(edits[at], Some(&body[member.value.0..member.value.1]))? {
            out.extend_from_slice(&body[copied..member.value.0]);
            edited.write(&mut out);
            copied = member.value.1;
        }
        Ok(())
    })?;
    out.extend_from_slice(&body[copied..end]);
    let mut first = kept == 0;
    for ((key, edit), done) in edits.iter().zip(done) {
        if !done && let Some(edited) = edited((key, *edit), None)? {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            edited.write(&mut out);
        }
    }
    out.extend_from_slice(&body[end..]);
    Ok(out)
}

/// The value `edit` makes of member `name`'s `current` value (its text; `None` when absent);
/// `None` to leave it as it is, or absent.
fn edited<'a>(
    (name, edit): (&str, Edit<'a>),
    current: Option<&[u8]>,
) -> Result<Option<Member<'a>>, ProviderError> {
    Ok(match edit {
        Edit::Text(text) => Some(Member::Text(text)),
        Edit::Flag(flag) => Some(Member::Flag(flag)),
        Edit::FalseIfPresent => current.map(|_| Member::Flag(false)),
        Edit::Raw(text) => Some(Member::Raw(text)),
        Edit::Remove | Edit::Keep => None,
        Edit::Enable(field) => {
            let mut object = match current.map(serde_json::from_slice::<Value>) {
                None | Some(Ok(Value::Null)) => return Ok(Some(Member::Enabled(field))),
                Some(Ok(Value::Object(object))) => object,
                Some(_) => {
                    return Err(ProviderError::new(
                        ErrorKind::InvalidRequest,
                        format!("`{name}` must be an object (the gateway sets `{field}` in it)"),
                    ));
                }
            };
            object.insert(field.to_owned(), Value::Bool(true));
            Some(Member::Object(object))
        }
    })
}

/// One edited member's value as it is written out.
enum Member<'a> {
    Text(&'a str),
    Raw(&'a str),
    Flag(bool),
    /// `{"<field>":true}`.
    Enabled(&'a str),
    Object(serde_json::Map<String, Value>),
}

impl Member<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        // Writing a string or a map of JSON values into a vector cannot fail.
        match self {
            Member::Text(text) => {
                let _ = serde_json::to_writer(&mut *out, text);
            }
            Member::Flag(flag) => out.extend_from_slice(if *flag { b"true" } else { b"false" }),
            Member::Raw(text) => out.extend_from_slice(text.as_bytes()),
            Member::Enabled(field) => {
                out.extend_from_slice(b"{\"");
                out.extend_from_slice(field.as_bytes());
                out.extend_from_slice(b"\":true}");
            }
            Member::Object(object) => {
                let _ = serde_json::to_writer(&mut *out, object);
            }
        }
    }
}

/// One top-level member: byte offsets into the body.
struct Span {
    /// The key, quotes included.
    key: (usize, usize),
    /// The value.
    value: (usize, usize),
    /// The comma before the member (the object's `{` for the first).
    comma: usize,
}

impl Span {
    /// Which of `edits` names this member. A name is compared as its bytes, and read through
    /// its escapes only when it has one (a name never does in practice).
    fn edit(&self, body: &[u8], edits: &[(&str, Edit<'_>)]) -> Option<usize> {
        let quoted = &body[self.key.0..self.key.1];
        let text = &quoted[1..quoted.len() - 1];
        if memchr::memchr(b'\\', text).is_none() {
            return edits.iter().position(|(name, _)| name.as_bytes() == text);
        }
        let text: String = serde_json::from_slice(quoted).ok()?;
        edits.iter().position(|(name, _)| *name == text)
    }
}

/// What is wrong with a body that is not a JSON object, and where.
#[derive(Debug)]
struct Malformed {
    what: &'static str,
    at: usize,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

/// Walks the members of the object `body` (which nothing but whitespace may surround), handing
/// each to `each` in order. Returns where a member added at the end goes (after the last
/// member's value, or after `{`) and whether the object is empty.
fn top_level(
    body: &[u8],
    mut each: impl FnMut(&Span) -> Result<(), ProviderError>,
) -> Result<(usize, bool), ProviderError> {
    let not_an_object = |what: Malformed| {
        ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("the request body is not a JSON object: {what}"),
        )
    };
    let mut scan = Scanner { bytes: body, at: 0 };
    scan.space();
    scan.expect(b'{', "expected `{`").map_err(not_an_object)?;
    let mut end = scan.at;
    let mut comma = end - 1;
    scan.space();
    let empty = scan.peek() == Some(b'}');
    if empty {
        scan.at += 1;
    } else {
        loop {
            let member = scan.member(comma).map_err(not_an_object)?;
            each(&member)?;
            end = member.value.1;
            scan.space();
            match scan.next() {
                Some(b',') => comma = scan.at - 1,
                Some(b'}') => break,
                _ => return Err(not_an_object(scan.error("expected `,` or `}`"))),
            }
            scan.space();
        }
    }
    scan.space();
    if scan.at != body.len() {
        return Err(not_an_object(scan.error("expected the end after the object")));
    }
    Ok((end, empty))
}

/// A cursor over a JSON text that skips values without reading them.
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn error(&self, what: &'static str) -> Malformed {
        Malformed { what, at: self.at }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), Malformed> {
        if self.peek() != Some(byte) {
            return Err(self.error(what));
        }
        self.at += 1;
        Ok(())
    }

    /// Past the member that starts here (at its name), which follows the comma at `comma`.
    fn member(&mut self, comma: usize) -> Result<Span, Malformed> {
        let key_start = self.at;
        if self.peek() != Some(b'"') {
            return Err(self.error("expected a member name"));
        }
        self.string()?;
        let key = (key_start, self.at);
        self.space();
        self.expect(b':', "expected `:`")?;
        self.space();
        let value_start = self.at;
        self.value()?;
        Ok(Span { key, value: (value_start, self.at), comma })
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Past the string that starts here (at its `"`).
    fn string(&mut self) -> Result<(), Malformed> {
        /// How far a plain loop looks before memchr takes over: most strings of a request are
        /// short (names, roles, a model), where memchr's set-up costs more than the loop.
        const SHORT: usize = 24;
        let start = self.at;
        let bytes = self.bytes;
        let mut at = start + 1;
        loop {
            let short = bytes.len().min(at + SHORT);
            while at < short && bytes[at] != b'"' && bytes[at] != b'\\' {
                at += 1;
            }
            if at == short {
                match memchr::memchr2(b'"', b'\\', &bytes[at..]) {
                    Some(found) => at += found,
                    None => return Err(Malformed { what: "a string is not closed", at: start }),
                }
            }
            if bytes[at] == b'"' {
                self.at = at + 1;
                return Ok(());
            }
            // An escape: the byte after the backslash cannot end the string.
            at += 2;
            if at > bytes.len() {
                return Err(Malformed { what: "a string is not closed", at: start });
            }
        }
    }

    /// Past the value that starts here.
    fn value(&mut self) -> Result<(), Malformed> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'{' | b'[') => self.nested(),
            _ => self.scalar(),
        }
    }

    /// Past the object or array that starts here, its brackets matched.
    fn nested(&mut self) -> Result<(), Malformed> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            match self.peek() {
                Some(b'"') => self.string()?,
                Some(bracket @ (b'{' | b'[')) => {
                    open.push(if bracket == b'{' { b'}' } else { b']' });
                    self.at += 1;
                }
                Some(bracket @ (b'}' | b']')) => {
                    if open.pop() != Some(bracket) {
                        return Err(self.error("a bracket does not match"));
                    }
                    self.at += 1;
                    if open.is_empty() {
                        return Ok(());
                    }
                }
                Some(_) => self.at += 1,
                None => return Err(self.error("an object or array is not closed")),
            }
        }
    }

    /// Past the number, `true`, `false` or `null` that starts here.
    fn scalar(&mut self) -> Result<(), Malformed> {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'.' | b'+' | b'-')) {
            self.at += 1;
        }
        if self.at == start {
            return Err(self.error("expected a value"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<const N: usize>(body: &str, edits: &[(&str, Edit<'_>); N]) -> String {
        String::from_utf8(rewrite(body.as_bytes(), edits).unwrap()).unwrap()
    }

    #[test]
    fn only_the_edited_members_change_and_the_rest_keeps_its_bytes() {
        let body = r#"{ "model" : "route", "temperature": 1.0, "schema": {"b": 1, "a": 0.10000}, "n": 18446744073709551616, "x_new": [ 1 ,2 ] }"#;
        assert_eq!(
            text(body, &[("model", Edit::Text("gpt-4o\"x")), ("stream", Edit::FalseIfPresent)]),
            r#"{ "model" : "gpt-4o\"x", "temperature": 1.0, "schema": {"b": 1, "a": 0.10000}, "n": 18446744073709551616, "x_new": [ 1 ,2 ] }"#
        );
    }

    #[test]
    fn a_member_is_added_after_the_last_one_and_a_repeated_one_leaves_with_its_comma() {
        let edits = [("model", Edit::Text("m")), ("stream", Edit::Flag(true))];
        assert_eq!(
            text("{\"a\":1, \"model\":\"x\" , \"model\" : \"y\", \"b\":[{\"c\":\"}\"}]\n}\n", &edits),
            "{\"a\":1, \"model\":\"m\" , \"b\":[{\"c\":\"}\"}],\"stream\":true\n}\n"
        );
        assert_eq!(text("{ }", &edits), r#"{"model":"m","stream":true }"#);
        assert_eq!(text(r#"{"model":"x","model":"y"}"#, &edits), r#"{"model":"m","stream":true}"#);
    }

    #[test]
    fn a_removed_member_leaves_with_one_comma_wherever_it_stands() {
        let edits = [("model", Edit::Remove), ("anthropic_version", Edit::Text("v"))];
        assert_eq!(text(r#"{"model":"x","a":1}"#, &edits), r#"{"a":1,"anthropic_version":"v"}"#);
        assert_eq!(
            text(r#"{"a":1, "model" : "x" ,"b":2}"#, &edits),
            r#"{"a":1 ,"b":2,"anthropic_version":"v"}"#
        );
        assert_eq!(text(r#"{"a":1,"model":"x"}"#, &edits), r#"{"a":1,"anthropic_version":"v"}"#);
        assert_eq!(text(r#"{ "model":"x" }"#, &edits), r#"{ "anthropic_version":"v" }"#);
        assert_eq!(text(r#"{"model":"x","model":"y","a":1}"#, &edits), r#"{"a":1,"anthropic_version":"v"}"#);
        assert_eq!(text(r#"{"model":"x","model":"y"}"#, &[("model", Edit::Remove)]), "{}");
        for body in [r#"{"model":"x","a":1}"#, r#"{"a":1,"model":"x","b":{"model":2}}"#, r#"{"model":"x"}"#] {
            let out = text(body, &edits);
            let value: Value = serde_json::from_str(&out).unwrap();
            assert!(value.get("model").is_none(), "{out}");
            assert_eq!(value["anthropic_version"], "v", "{out}");
        }
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
    fn a_removed_member_leaves_with_its_comma_wherever_it_stands_and_raw_json_is_written() {
        let edits = [
            ("model", Edit::Remove),
            ("stream", Edit::Remove),
            ("anthropic_beta", Edit::Raw(r#"["a","b"]"#)),
        ];
        assert_eq!(
            text(r#"{"model":"m","max_tokens":5,"stream":true}"#, &edits),
            r#"{"max_tokens":5,"anthropic_beta":["a","b"]}"#
        );
        assert_eq!(
            text(r#"{ "model" : "m" , "stream":true, "x":1 }"#, &edits),
            r#"{  "x":1,"anthropic_beta":["a","b"] }"#
        );
        assert_eq!(
            text(r#"{"a":1,"model":"m","b":2}"#, &edits),
            r#"{"a":1,"b":2,"anthropic_beta":["a","b"]}"#
        );
        assert_eq!(text(r#"{"model":"m","stream":false}"#, &edits), r#"{"anthropic_beta":["a","b"]}"#);
        assert_eq!(text(r#"{"anthropic_beta":[],"model":"m"}"#, &edits), r#"{"anthropic_beta":["a","b"]}"#);
        let removed: serde_json::Value = serde_json::from_str(&text(
            r#"{"model":"m","model":"n","k":[1,{"model":2}]}"#,
            &[("model", Edit::Remove)],
        ))
        .unwrap();
        assert_eq!(removed, serde_json::json!({"k": [1, {"model": 2}]}));
    }

    #[test]
    fn an_escaped_key_is_matched_by_its_text_and_a_repeated_member_is_written_once() {
        let body = r#"{"mod\u0065l":"a","model":"b","k\"":1}"#;
        // The first occurrence keeps its spelling of the name; only its value changes.
        assert_eq!(text(body, &[("model", Edit::Text("m"))]), r#"{"mod\u0065l":"m","k\"":1}"#);
    }

    #[test]
    fn a_body_that_is_not_an_object_is_an_invalid_request() {
        let bodies = [
            "[]",
            "1",
            "{",
            "",
            r#"{"stream_options": 3}"#,
            r#"{"a":1"#,
            r#"{"a" 1}"#,
            r#"{"a":}"#,
            r#"{"a":"x}"#,
            r#"{"a":"x\"#,
            r#"{"a":[1}]}"#,
            r#"{"a":{"b":[1,2}"#,
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{a:1}"#,
        ];
        for body in bodies {
            let error =
                rewrite(body.as_bytes(), &[("stream_options", Edit::Enable("include_usage"))]).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{body}");
        }
        let error =
            rewrite(br#"{"stream_options": []}"#, &[("stream_options", Edit::Enable("include_usage"))])
                .unwrap_err();
        assert_eq!(
            error.detail(),
            "`stream_options` must be an object (the gateway sets `include_usage` in it)"
        );
    }

    /// A JSON value of a few levels, with strings that quote, escape and bracket.
    fn json() -> impl Strategy<Value = Value> {
        let text = "[a-z{}\\[\\]\":,\\\\ \u{e9}\u{1F600}\n]{0,8}|[a-z\"\\\\]{20,60}|[a-z ]{25,80}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            text.prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// A member name: often one that is edited.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("model".to_owned()),
            Just("stream".to_owned()),
            Just("stream_options".to_owned()),
            "[a-z\"\\\\]{0,6}",
        ]
    }

    /// What the edits of a streaming call make of `object`, done on the tree.
    fn edited_tree(mut object: serde_json::Map<String, Value>) -> Option<Value> {
        object.insert("model".into(), Value::from("m\"x"));
        object.insert("stream".into(), Value::from(true));
        let options = match object.get("stream_options") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(options)) => options.clone(),
            Some(_) => return None,
        };
        let mut options = options;
        options.insert("include_usage".into(), Value::from(true));
        object.insert("stream_options".into(), Value::Object(options));
        Some(Value::Object(object))
    }

    use proptest::prelude::*;

    proptest! {
        /// Any object, compact or pretty, reads after the splice as the same edits made on
        /// its tree read, member for member and in order.
        #[test]
        fn the_splice_is_the_edit_of_the_tree(
            members in proptest::collection::vec((key(), json()), 0..6),
            pretty in any::<bool>(),
        ) {
            let object: serde_json::Map<String, Value> = members.into_iter().collect();
            let body = if pretty {
                serde_json::to_string_pretty(&object).unwrap()
            } else {
                serde_json::to_string(&object).unwrap()
            };
            let edits = [
                ("model", Edit::Text("m\"x")),
                ("stream", Edit::Flag(true)),
                ("stream_options", Edit::Enable("include_usage")),
            ];
            // Both sides read the numbers from the same text.
            let read: serde_json::Map<String, Value> = serde_json::from_str(&body).unwrap();
            match (rewrite(body.as_bytes(), &edits), edited_tree(read)) {
                (Ok(out), Some(expected)) => {
                    let out: Value = serde_json::from_slice(&out).unwrap();
                    prop_assert_eq!(serde_json::to_string(&out).unwrap(), serde_json::to_string(&expected).unwrap());
                }
                (Err(error), None) => prop_assert_eq!(error.kind(), ErrorKind::InvalidRequest),
                (out, expected) => prop_assert!(false, "{body}: {out:?} against {expected:?}"),
            }
        }

        /// A body cut short is refused, and no cut, flipped or stray byte panics.
        #[test]
        fn a_broken_body_is_refused_without_a_panic(
            object in proptest::collection::vec((key(), json()), 1..5),
            cut in any::<proptest::sample::Index>(),
            flip in any::<(proptest::sample::Index, u8)>(),
        ) {
            let object: serde_json::Map<String, Value> = object.into_iter().collect();
            let body = serde_json::to_string(&object).unwrap().into_bytes();
            let short = &body[..cut.index(body.len())];
            prop_assert!(rewrite(short, &[("model", Edit::Text("m"))]).is_err());
            let mut flipped = body.clone();
            let at = flip.0.index(flipped.len());
            flipped[at] = flip.1;
            let _ = rewrite(&flipped, &[("model", Edit::Text("m")), ("stream", Edit::Enable("x"))]);
        }
    }
}
