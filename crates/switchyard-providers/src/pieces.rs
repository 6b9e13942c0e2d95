//! JSON put together from pieces of other JSON without building trees: what writes a whole
//! answer from the events of its stream ([`crate::openai::assemble`],
//! [`crate::anthropic::assemble`]).
//!
//! An event is read once ([`read`]): names decoded, the members the caller will add to (a
//! chunk's `choices` and their `delta`) opened, every other value left as the text the
//! provider wrote; such a value is only opened ([`Part::text_mut`], [`Part::items_mut`],
//! [`Part::object_mut`]) when a later piece adds to it. Whatever no piece touched is written
//! back byte for byte, so numbers, escapes and members nobody models pass as they came, and a
//! stream costs a scan of its events rather than a tree per event (a tree of `serde_json`
//! values cost several times what the whole answer's own reading does).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use switchyard::serde_extra::Key;

/// The JSON object `json` as parts, in one pass: the value of each member named in `open` (at
/// any depth) is read into an object or array of parts, and so are that array's items; every
/// other value is left as written. `None` when `json` is not an object (or not JSON).
pub(crate) fn read<'a>(json: &'a str, open: &[&str]) -> Option<Object<'a>> {
    // Anything else (`[DONE]`) is told apart before a parser builds an error to say so.
    if !json.trim_start().starts_with('{') {
        return None;
    }
    let mut reader = serde_json::Deserializer::from_str(json);
    let object = reader.deserialize_map(Opened(open)).ok()?;
    reader.end().ok()?;
    match object {
        Part::Object(object) => Some(object),
        _ => None,
    }
}

/// The items of a JSON array, each as written; `None` when `json` is not an array.
fn items(json: &str) -> Option<Vec<Part<'_>>> {
    if !json.starts_with('[') {
        return None;
    }
    match serde_json::Deserializer::from_str(json).deserialize_seq(Opened(&[])).ok()? {
        Part::Items(items) => Some(items),
        _ => None,
    }
}

/// Reads a value into parts, opening the members it names.
#[derive(Clone, Copy)]
struct Opened<'o>(&'o [&'o str]);

impl<'de> DeserializeSeed<'de> for Opened<'_> {
    type Value = Part<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Part<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Opened<'_> {
    type Value = Part<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part<'de>, A::Error> {
        let mut members = Vec::with_capacity(8);
        while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
            let part = if self.0.contains(&name.as_ref()) {
                map.next_value_seed(self)?
            } else {
                Part::Raw(map.next_value::<&'de RawValue>()?.get())
            };
            members.push((name, part));
        }
        Ok(Part::Object(Object(members)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Part<'de>, A::Error> {
        let mut items = Vec::with_capacity(4);
        if self.0.is_empty() {
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                items.push(Part::Raw(item.get()));
            }
        } else {
            while let Some(item) = seq.next_element_seed(self)? {
                items.push(item);
            }
        }
        Ok(Part::Items(items))
    }

    // An opened member that is no object or array is kept by value: a string decoded (and
    // written again escaped), a number or literal as serde_json reads it.
    fn visit_str<E>(self, text: &str) -> Result<Part<'de>, E> {
        Ok(Part::Text(text.to_owned()))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Part<'de>, E> {
        Ok(Part::Json(value.to_string()))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Part<'de>, E> {
        Ok(Part::Json(value.to_string()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Part<'de>, E> {
        Ok(Part::Json(value.to_string()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Part<'de>, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Part::Null, |n| Part::Json(n.to_string())))
    }

    fn visit_unit<E>(self) -> Result<Part<'de>, E> {
        Ok(Part::Null)
    }
}

/// One value of the JSON being put together.
#[derive(Debug)]
pub(crate) enum Part<'a> {
    /// `null`, or nothing yet.
    Null,
    /// A value as an event wrote it.
    Raw(&'a str),
    /// A string put together from pieces (decoded).
    Text(String),
    /// An array put together from pieces.
    Items(Vec<Part<'a>>),
    /// An object put together from pieces.
    Object(Object<'a>),
    /// JSON text this side wrote (a number, a usage the gateway kept).
    Json(String),
}

impl<'a> Part<'a> {
    /// A number.
    pub(crate) fn number(n: u64) -> Part<'a> {
        Part::Json(n.to_string())
    }

    /// Whether this is `null` (or nothing yet).
    pub(crate) fn is_null(&self) -> bool {
        self.kind() == Kind::Null
    }

    /// The string this is, decoded; `None` for anything else.
    pub(crate) fn text(&self) -> Option<Cow<'a, str>> {
        match self {
            // A string without escapes is borrowed; one with them is decoded.
            Part::Raw(raw) if raw.starts_with('"') && !raw.contains('\\') => {
                Some(Cow::Borrowed(&raw[1..raw.len() - 1]))
            }
            Part::Raw(raw) if raw.starts_with('"') => {
                serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
            }
            Part::Text(text) => Some(Cow::Owned(text.clone())),
            _ => None,
        }
    }

    /// The non-negative integer this is.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Part::Raw(raw) => raw.parse().ok(),
            Part::Json(json) => json.parse().ok(),
            _ => None,
        }
    }

    /// This string, opened to take more pieces; `None` when it is no string.
    pub(crate) fn text_mut(&mut self) -> Option<&mut String> {
        if let Part::Raw(_) = self {
            *self = Part::Text(self.text()?.into_owned());
        }
        match self {
            Part::Text(text) => Some(text),
            _ => None,
        }
    }

    /// This array, opened to take more items; `None` when it is no array.
    pub(crate) fn items_mut(&mut self) -> Option<&mut Vec<Part<'a>>> {
        if let Part::Raw(raw) = self {
            *self = Part::Items(items(raw)?);
        }
        match self {
            Part::Items(items) => Some(items),
            _ => None,
        }
    }

    /// This object, opened to take more members; `None` when it is no object.
    pub(crate) fn object_mut(&mut self) -> Option<&mut Object<'a>> {
        if let Part::Raw(raw) = self {
            *self = Part::Object(read(raw, &[])?);
        }
        match self {
            Part::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The items of this array; `None` when it is no array.
    pub(crate) fn into_items(self) -> Option<Vec<Part<'a>>> {
        match self {
            Part::Items(items) => Some(items),
            Part::Raw(raw) => items(raw),
            _ => None,
        }
    }

    /// The members of this object; `None` when it is no object.
    pub(crate) fn into_object(self) -> Option<Object<'a>> {
        match self {
            Part::Object(object) => Some(object),
            Part::Raw(raw) => read(raw, &[]),
            _ => None,
        }
    }

    /// What kind of JSON value this is, without reading it.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Part::Null => Kind::Null,
            Part::Text(_) => Kind::Text,
            Part::Items(_) => Kind::Items,
            Part::Object(_) => Kind::Object,
            Part::Raw(raw) => match raw.as_bytes().first() {
                Some(b'"') => Kind::Text,
                Some(b'[') => Kind::Items,
                Some(b'{') => Kind::Object,
                Some(b'n') => Kind::Null,
                _ => Kind::Scalar,
            },
            Part::Json(json) if json == "null" => Kind::Null,
            Part::Json(_) => Kind::Scalar,
        }
    }

    /// Appends this value's JSON to `out`.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match self {
            Part::Null => out.extend_from_slice(b"null"),
            Part::Raw(raw) => out.extend_from_slice(raw.as_bytes()),
            Part::Json(json) => out.extend_from_slice(json.as_bytes()),
            Part::Text(text) => write_string(text, out),
            Part::Items(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write(out);
                }
                out.push(b']');
            }
            Part::Object(object) => object.write(out),
        }
    }
}

/// The kinds of JSON value that put together differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Text,
    Items,
    Object,
    /// A number or a boolean.
    Scalar,
}

/// An object being put together: its members in order, each name once.
#[derive(Debug, Default)]
pub(crate) struct Object<'a>(Vec<(Cow<'a, str>, Part<'a>)>);

impl<'a> Object<'a> {
    /// The member `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Part<'a>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, part)| part)
    }

    /// The member `name`, to change.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Part<'a>> {
        self.0.iter_mut().find(|(n, _)| n == name).map(|(_, part)| part)
    }

    /// The member `name`, added last as [`Part::Null`] when it is new.
    pub(crate) fn entry(&mut self, name: Cow<'a, str>) -> &mut Part<'a> {
        let at = match self.0.iter().position(|(n, _)| *n == name) {
            Some(at) => at,
            None => {
                self.0.push((name, Part::Null));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// Sets the member `name` where it is, or last when it is new.
    pub(crate) fn insert(&mut self, name: Cow<'a, str>, part: Part<'a>) {
        *self.entry(name) = part;
    }

    /// Takes the member `name` out.
    pub(crate) fn remove(&mut self, name: &str) -> Option<Part<'a>> {
        let at = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(at).1)
    }

    /// Whether it has no member.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Its members in order.
    pub(crate) fn into_members(self) -> Vec<(Cow<'a, str>, Part<'a>)> {
        self.0
    }

    /// Appends the object's JSON to `out`.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (name, part)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(name, out);
            out.push(b':');
            part.write(out);
        }
        out.push(b'}');
    }
}

impl<'a> FromIterator<(Cow<'a, str>, Part<'a>)> for Object<'a> {
    fn from_iter<I: IntoIterator<Item = (Cow<'a, str>, Part<'a>)>>(members: I) -> Self {
        Object(members.into_iter().collect())
    }
}

/// Appends `text` as a JSON string.
fn write_string(text: &str, out: &mut Vec<u8>) {
    // Writing a string into a vector cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Merges a piece into what came before, member by member: a text member named in `joined`
/// appended, arrays appended, objects merged, a null left out (it does not undo what came
/// before), anything else replaced.
pub(crate) fn merge<'a>(so_far: &mut Object<'a>, piece: Object<'a>, joined: &[&str]) {
    for (name, value) in piece.into_members() {
        let join = joined.contains(&name.as_ref());
        let slot = so_far.entry(name);
        match value.kind() {
            Kind::Text if join => {
                if let (Some(text), Some(piece)) = (slot.text_mut(), value.text()) {
                    text.push_str(&piece);
                    continue;
                }
            }
            Kind::Items => {
                if let Some(items) = slot.items_mut() {
                    items.extend(value.into_items().into_iter().flatten());
                    continue;
                }
            }
            Kind::Object => {
                if let Some(object) = slot.object_mut() {
                    merge(object, value.into_object().unwrap_or_default(), joined);
                    continue;
                }
            }
            Kind::Null if !slot.is_null() => continue,
            _ => {}
        }
        *slot = value;
    }
}

/// The JSON of an SSE frame's `data:` lines (joined by newlines when there are several).
pub(crate) fn data_of(frame: &[u8]) -> Option<Cow<'_, str>> {
    let text = std::str::from_utf8(frame).ok()?;
    // The frames the decoders keep are one `data:` line and the blank line that ends them.
    if let Some(data) = text.strip_prefix("data: ").and_then(|rest| rest.strip_suffix("\n\n"))
        && !data.contains('\n')
    {
        return Some(Cow::Borrowed(data));
    }
    let lines: Vec<&str> =
        text.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
    match lines.as_slice() {
        [] => None,
        [one] => Some(Cow::Borrowed(one)),
        _ => Some(Cow::Owned(lines.join("\n"))),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn written(part: &Part<'_>) -> String {
        let mut out = Vec::new();
        part.write(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_joined_and_the_rest_the_last_events_as_written() {
        let mut answer = Object::default();
        for event in [r#"{"text": "Hel", "n": 1.50}"#, r#"{"text": "lo.", "n": 2.50}"#] {
            merge(&mut answer, read(event, &[]).unwrap(), &["text"]);
        }
        assert_eq!(written(&Part::Object(answer)), r#"{"text":"Hello.","n":2.50}"#);
    }

    #[test]
    fn a_merge_appends_arrays_merges_objects_and_a_null_keeps_what_came() {
        let mut answer = Object::default();
        for event in [
            r#"{"list": [1], "o": {"a": "x", "k": 1}, "s": "kept"}"#,
            r#"{"list": [2], "o": {"k": 2, "z": null}, "s": null}"#,
        ] {
            merge(&mut answer, read(event, &[]).unwrap(), &[]);
        }
        assert_eq!(
            written(&Part::Object(answer)),
            r#"{"list":[1,2],"o":{"a":"x","k":2,"z":null},"s":"kept"}"#
        );
    }

    #[test]
    fn what_no_piece_touched_is_written_as_it_came() {
        let event = r#"{"a": 1.50, "b": "caf\u00e9", "c": {"d": [1, 2e3]}, "e": null}"#;
        let object = read(event, &[]).unwrap();
        assert_eq!(
            written(&Part::Object(object)),
            r#"{"a":1.50,"b":"caf\u00e9","c":{"d": [1, 2e3]},"e":null}"#
        );
    }

    #[test]
    fn the_members_named_open_are_read_at_any_depth_and_the_rest_left_as_written() {
        let event = r#"{"id": "x", "choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": {"content": []}}]}"#;
        let mut object = read(event, &["choices", "delta"]).unwrap();
        assert!(matches!(object.get("id"), Some(Part::Raw("\"x\""))));
        let choices = object.remove("choices").unwrap();
        let Part::Items(choices) = &choices else { panic!("choices not opened: {choices:?}") };
        let Part::Object(choice) = &choices[0] else { panic!("a choice not opened") };
        assert!(matches!(choice.get("delta"), Some(Part::Object(_))));
        assert!(matches!(choice.get("logprobs"), Some(Part::Raw(_))), "not named, left as written");
        assert_eq!(
            written(&choices[0]),
            r#"{"index":0,"delta":{"content":"Hi"},"logprobs":{"content": []}}"#
        );
    }

    #[test]
    fn opened_values_take_pieces_and_stay_valid_json() {
        let mut text = Part::Raw(r#""line\none ""#);
        text.text_mut().unwrap().push_str("and \"two\"");
        assert_eq!(serde_json::from_str::<String>(&written(&text)).unwrap(), "line\none and \"two\"");

        let mut list = Part::Raw("[1, {\"x\": 2}]");
        list.items_mut().unwrap().push(Part::Raw("\"three\""));
        assert_eq!(serde_json::from_str::<Value>(&written(&list)).unwrap(), json!([1, {"x": 2}, "three"]));

        let mut object = Part::Raw(r#"{"k": "v", "n": 1}"#);
        let opened = object.object_mut().unwrap();
        opened.insert(Cow::Borrowed("n"), Part::number(2));
        opened.insert(Cow::Borrowed("new\"name"), Part::Null);
        assert_eq!(written(&object), r#"{"k":"v","n":2,"new\"name":null}"#);
    }

    #[test]
    fn a_value_of_another_kind_is_not_opened() {
        assert!(Part::Raw("12").text_mut().is_none());
        assert!(Part::Raw("\"s\"").items_mut().is_none());
        assert!(Part::Raw("[1]").object_mut().is_none());
        assert!(Part::Raw("null").is_null());
        assert_eq!(Part::Raw("7").as_u64(), Some(7));
        assert!(read("[1]", &[]).is_none());
        assert!(read("[DONE]", &[]).is_none());
        assert!(read("{\"a\": 1} trailing", &[]).is_none());
    }

    #[test]
    fn a_frame_is_its_data_lines() {
        assert_eq!(data_of(b"event: x\ndata: {\"a\":1}\n\n").as_deref(), Some("{\"a\":1}"));
        assert_eq!(data_of(b"data: {\"a\":1}\n\n").as_deref(), Some("{\"a\":1}"));
        assert_eq!(data_of(b"data:{\"a\":1}\r\n\r\n").as_deref(), Some("{\"a\":1}"));
        assert_eq!(data_of(b"data: {\"a\":\ndata: 1}\n\n").as_deref(), Some("{\"a\":\n1}"));
        assert_eq!(data_of(b": comment\n\n"), None);
    }

    /// Any JSON value, objects and arrays nested a few deep.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            // Fractions a double holds exactly in few digits: serde_json (without its
            // `float_roundtrip`) may read longer ones a bit off, differently each way.
            (any::<i32>(), 0..4).prop_map(|(m, e)| Value::from(f64::from(m) / f64::from(1 << e))),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::vec((any::<String>(), inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any object, written compact or spaced, reads into parts that write the same JSON,
        /// whichever members are opened.
        #[test]
        fn any_object_writes_back_as_the_same_json(
            members in proptest::collection::vec((prop_oneof![Just("a".to_owned()), any::<String>()], json()), 0..6),
            pretty in any::<bool>(),
        ) {
            let object = Value::Object(members.into_iter().collect());
            let text = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) }.unwrap();
            for open in [&[][..], &["a"][..]] {
                let parts = read(&text, open).expect("an object reads");
                let written = written(&Part::Object(parts));
                // Compared as read back, as serde_json reads floats the same way each time (not
                // always to the value written).
                let expected = serde_json::from_str::<Value>(&text).unwrap();
                prop_assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), expected);
            }
        }

        /// Whatever text it is given (JSON with one character changed, cut or doubled), what
        /// reads is JSON and is written as the JSON it was: anything else is refused.
        #[test]
        fn text_that_reads_is_json(
            members in proptest::collection::vec((any::<String>(), json()), 1..4),
            at in any::<proptest::sample::Index>(),
            change in prop_oneof![Just(None), "[ {}\\[\\]\",:0-9.eE+\\-\\\\tnrulfs]".prop_map(Some)],
            double in any::<bool>(),
        ) {
            let mut text: Vec<char> = serde_json::to_string(&Value::Object(members.into_iter().collect())).unwrap().chars().collect();
            let at = at.index(text.len());
            match change {
                Some(other) => text[at] = other.chars().next().unwrap(),
                None if double => text.insert(at, text[at]),
                None => drop(text.remove(at)),
            }
            let text: String = text.into_iter().collect();
            if let Some(parts) = read(&text, &["a", "b"]) {
                // JSON as serde_json scans it (which leaves a number's range unchecked).
                prop_assert!(serde_json::from_str::<&RawValue>(&text).is_ok(), "read what is no JSON: {}", text);
                let written = written(&Part::Object(parts));
                match serde_json::from_str::<Value>(&text) {
                    Ok(expected) => prop_assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), expected),
                    Err(_) => prop_assert!(serde_json::from_str::<&RawValue>(&written).is_ok()),
                }
            }
        }
    }
}
