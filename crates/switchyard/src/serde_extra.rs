//! Reading JSON objects that keep the fields they do not model, in one pass.
//!
//! The wire types keep unknown fields in an `extra` map so that parameters Switchyard knows
//! nothing about still reach a provider of the same dialect. serde's `#[serde(flatten)]` can
//! collect them, but it first copies the whole object into an intermediate tree (every key and
//! string allocated once more) and then reads each field again from that copy. On the request
//! path that is a request, an answer and every chunk of a stream read twice.
//! [`deserialize_with_extra!`](crate::deserialize_with_extra) writes the `Deserialize` impl
//! that reads each field once, with the same rules and the same error messages as the derive:
//! a field listed as [`Required`] that is missing is an error (`missing field `...``), a field
//! given twice is an error (`duplicate field `...``), and anything else lands in `extra`.
//!
//! ```
//! use serde_json::{Map, Value};
//! use switchyard::deserialize_with_extra;
//!
//! #[derive(Debug)]
//! struct Pet {
//!     name: String,
//!     age: u32,
//!     tags: Vec<String>,
//!     extra: Map<String, Value>,
//! }
//!
//! deserialize_with_extra!(Pet {
//!     "name" => name: Required,
//!     "age" => age: OrDefault,
//!     "tags" => tags: NullAsDefault,
//! });
//!
//! let pet: Pet = serde_json::from_str(r#"{"name": "Rex", "tags": null, "color": "brown"}"#).unwrap();
//! assert_eq!((pet.name.as_str(), pet.age, pet.tags.len()), ("Rex", 0, 0));
//! assert_eq!(pet.extra["color"], "brown");
//!
//! let error = serde_json::from_str::<Pet>(r#"{"age": 3}"#).unwrap_err();
//! assert!(error.to_string().starts_with("missing field `name`"));
//! ```

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// `serde_json::from_slice`, with UTF-8 checked once for the whole input: reading from a
/// slice checks each string on its own, which costs more than the string's parse on the
/// short strings of requests, answers and stream chunks. Input that is not UTF-8 is read by
/// `from_slice`, for its error and the position it names.
///
/// ```
/// let value: serde_json::Value = switchyard::serde_extra::from_slice(br#"{"a": "b"}"#).unwrap();
/// assert_eq!(value["a"], "b");
/// let error = switchyard::serde_extra::from_slice::<serde_json::Value>(b"{\"a\": \"\xff\"}").unwrap_err();
/// assert!(error.to_string().contains("line 1"), "{error}");
/// ```
pub fn from_slice<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// Reads a JSON object that gives each member once: a member given twice is an error
/// (`duplicate field `...``), as it is in the types [`deserialize_with_extra!`] reads, so that
/// no two readers of one body (the gateway, and a provider it is passed on to) take different
/// values from it. A body that is no object is an error of [`Category::Data`], as a member
/// given twice is.
///
/// ```
/// use switchyard::serde_extra::unique_members;
///
/// assert!(unique_members(br#"{"model": "a", "n": 1}"#).is_ok());
/// let twice = unique_members(br#"{"model": "a", "model": "b"}"#).unwrap_err();
/// assert_eq!(twice.to_string(), "duplicate field `model` at line 1 column 28");
/// assert!(unique_members(b"[1]").is_err());
/// ```
///
/// [`deserialize_with_extra!`]: crate::deserialize_with_extra
/// [`Category::Data`]: serde_json::error::Category::Data
pub fn unique_members(bytes: &[u8]) -> serde_json::Result<serde_json::Map<String, serde_json::Value>> {
    from_slice::<UniqueMembers>(bytes).map(|read| read.0)
}

/// A JSON object whose members are each given once (see [`unique_members`]).
struct UniqueMembers(serde_json::Map<String, serde_json::Value>);

impl<'de> serde::Deserialize<'de> for UniqueMembers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        use serde_json::{Map, Value};

        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Map<String, Value>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut object = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: Value = map.next_value()?;
                    match object.entry(key) {
                        serde_json::map::Entry::Vacant(slot) => {
                            slot.insert(value);
                        }
                        serde_json::map::Entry::Occupied(slot) => {
                            return Err(A::Error::custom(format_args!("duplicate field `{}`", slot.key())));
                        }
                    }
                }
                Ok(object)
            }
        }
        deserializer.deserialize_map(Members).map(UniqueMembers)
    }
}

#[doc(hidden)]
pub mod __private {
    pub use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, Visitor};
    pub use serde_json::{Map, Value};
}

/// Implements `Deserialize` for a struct with an `extra: Map<String, Value>` field that
/// collects the fields not listed; see the [module docs](crate::serde_extra).
///
/// Each listed field is `"json key" => field: Rule`, where the rule is [`Required`],
/// [`OrDefault`] (missing reads as the default) or [`NullAsDefault`] (missing or `null` reads
/// as the default). Fields after `defaults:` are not read and start at their default.
///
/// The type also gets `deserialize_keeping(deserializer, keep)`, which keeps in `extra` only
/// the members `keep` names and skips the others unread: for a reader that passes the bytes on
/// as they are and looks only at some members.
#[macro_export]
macro_rules! deserialize_with_extra {
    (
        $ty:ident { $($key:literal => $field:ident: $rule:ident),* $(,)? }
        $(defaults: $($default:ident),* $(,)?)?
    ) => {
        impl $ty {
            /// Reads one, keeping in `extra` only the unmodelled members that `keep` names:
            /// the others are skipped unread, never built into a tree.
            fn deserialize_keeping<'de, D>(deserializer: D, keep: fn(&str) -> bool) -> ::std::result::Result<Self, D::Error>
            where
                D: $crate::serde_extra::__private::Deserializer<'de>,
            {
                struct Fields {
                    keep: fn(&str) -> bool,
                }
                impl<'de> $crate::serde_extra::__private::Visitor<'de> for Fields {
                    type Value = $ty;

                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(concat!("struct ", stringify!($ty)))
                    }

                    fn visit_map<A>(self, mut map: A) -> ::std::result::Result<$ty, A::Error>
                    where
                        A: $crate::serde_extra::__private::MapAccess<'de>,
                    {
                        $(let mut $field = $crate::serde_extra::$rule::new($key);)*
                        let mut extra = $crate::serde_extra::__private::Map::new();
                        while let Some(key) = map.next_key::<$crate::serde_extra::Key<'de>>()? {
                            match &*key.0 {
                                $($key => $field.read(&mut map)?,)*
                                name if (self.keep)(name) => {
                                    let value: $crate::serde_extra::__private::Value = map.next_value()?;
                                    extra.insert(key.0.into_owned(), value);
                                }
                                _ => {
                                    map.next_value::<$crate::serde_extra::__private::IgnoredAny>()?;
                                }
                            }
                        }
                        Ok($ty {
                            $($field: $field.finish()?,)*
                            extra,
                            $($($default: ::std::default::Default::default(),)*)?
                        })
                    }
                }
                deserializer.deserialize_map(Fields { keep })
            }
        }

        impl<'de> $crate::serde_extra::__private::Deserialize<'de> for $ty {
            fn deserialize<D>(deserializer: D) -> ::std::result::Result<Self, D::Error>
            where
                D: $crate::serde_extra::__private::Deserializer<'de>,
            {
                Self::deserialize_keeping(deserializer, |_| true)
            }
        }
    };
}

/// An object key, borrowed from the input when it has no escapes.
#[doc(hidden)]
pub struct Key<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }

            fn visit_string<E: de::Error>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A field that must be present.
pub struct Required<T> {
    name: &'static str,
    value: Option<T>,
}

/// A field that reads as its default when missing.
pub struct OrDefault<T> {
    name: &'static str,
    value: Option<T>,
}

/// A field that reads as its default when missing or `null` (compatible servers send
/// `"tool_calls": null` and the like).
pub struct NullAsDefault<T> {
    name: &'static str,
    value: Option<T>,
}

macro_rules! slot {
    ($rule:ident) => {
        impl<T> $rule<T> {
            /// An empty slot for the field under JSON key `name`, which its errors name.
            pub fn new(name: &'static str) -> Self {
                Self { name, value: None }
            }

            fn store<E: de::Error>(&mut self, value: T) -> Result<(), E> {
                match self.value {
                    Some(_) => Err(E::duplicate_field(self.name)),
                    None => {
                        self.value = Some(value);
                        Ok(())
                    }
                }
            }
        }
    };
    // A rule that reads the value as it is.
    ($rule:ident, reads as is) => {
        slot!($rule);

        impl<T> $rule<T> {
            /// Reads the field's value from `map`; a second occurrence of the key is a
            /// `duplicate field` error.
            pub fn read<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error>
            where
                T: Deserialize<'de>,
            {
                self.store(map.next_value()?)
            }
        }
    };
}

slot!(Required, reads as is);
slot!(OrDefault, reads as is);
slot!(NullAsDefault);

impl<T> Required<T> {
    /// The value read, or a `missing field` error naming the key.
    pub fn finish<E: de::Error>(self) -> Result<T, E> {
        self.value.ok_or_else(|| E::missing_field(self.name))
    }
}

impl<T: Default> OrDefault<T> {
    /// The value read, or `T::default()` when the key was absent.
    pub fn finish<E: de::Error>(self) -> Result<T, E> {
        Ok(self.value.unwrap_or_default())
    }
}

impl<T: Default> NullAsDefault<T> {
    /// Reads the field's value from `map`, `null` as `T::default()`; a second occurrence of the
    /// key is a `duplicate field` error.
    pub fn read<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<(), A::Error>
    where
        T: Deserialize<'de>,
    {
        let value: Option<T> = map.next_value()?;
        self.store(value.unwrap_or_default())
    }

    /// The value read, or `T::default()` when the key was absent.
    pub fn finish<E: de::Error>(self) -> Result<T, E> {
        Ok(self.value.unwrap_or_default())
    }
}

/// Reads a JSON string as `one` and an array as `many`: what `#[serde(untagged)]` does for a
/// string-or-list enum, without copying the value into an intermediate tree first.
pub fn string_or_list<'de, D, T, Item>(
    deserializer: D,
    expecting: &'static str,
    one: fn(String) -> T,
    many: fn(Vec<Item>) -> T,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    Item: Deserialize<'de>,
{
    struct StringOrList<T, Item> {
        expecting: &'static str,
        one: fn(String) -> T,
        many: fn(Vec<Item>) -> T,
        item: PhantomData<Item>,
    }

    impl<'de, T, Item: Deserialize<'de>> Visitor<'de> for StringOrList<T, Item> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            Ok((self.one)(text.to_owned()))
        }

        fn visit_string<E: de::Error>(self, text: String) -> Result<T, E> {
            Ok((self.one)(text))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
            let items = Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
            Ok((self.many)(items))
        }
    }

    deserializer.deserialize_any(StringOrList { expecting, one, many, item: PhantomData })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Map, Value, json};

    #[derive(Debug, PartialEq)]
    struct Probe {
        name: String,
        count: u32,
        list: Vec<u32>,
        note: Option<String>,
        extra: Map<String, Value>,
        local: bool,
    }

    crate::deserialize_with_extra!(Probe {
        "name" => name: Required,
        "count" => count: OrDefault,
        "list" => list: NullAsDefault,
        "note" => note: OrDefault,
    } defaults: local);

    fn read(text: &str) -> Result<Probe, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn listed_fields_are_read_and_the_rest_is_kept() {
        let probe =
            read(r#"{"x": [1, {"y": null}], "name": "a\"b", "list": [3], "count": 2, "z": 1}"#).unwrap();
        assert_eq!(probe.name, "a\"b");
        assert_eq!((probe.count, probe.list.as_slice(), probe.note.as_deref()), (2, &[3][..], None));
        assert_eq!(Value::Object(probe.extra), json!({ "x": [1, { "y": null }], "z": 1 }));
        assert!(!probe.local);
    }

    #[test]
    fn rules_decide_what_missing_and_null_mean() {
        let probe = read(r#"{"name": "n", "list": null, "note": null}"#).unwrap();
        assert_eq!((probe.count, probe.list.len(), probe.note), (0, 0, None));
        // `OrDefault` does not turn `null` into a default for a type that has no null.
        assert!(read(r#"{"name": "n", "count": null}"#).unwrap_err().starts_with("invalid type: null"));
        assert!(read(r#"{"count": 1}"#).unwrap_err().starts_with("missing field `name`"));
    }

    #[test]
    fn errors_match_the_derives() {
        assert!(read(r#"{"name": "a", "name": "b"}"#).unwrap_err().starts_with("duplicate field `name`"));
        let error = read(r#"["a"]"#).unwrap_err();
        assert!(error.starts_with("invalid type: sequence, expected struct Probe"), "{error}");
        let error = read(r#"{"name": "a", "count": "many"}"#).unwrap_err();
        assert!(error.starts_with("invalid type: string \"many\", expected u32 at line 1"), "{error}");
    }

    #[test]
    fn a_value_tree_reads_the_same() {
        let value = json!({ "name": "n", "count": 4, "other": true });
        let probe: Probe = serde_json::from_value(value).unwrap();
        assert_eq!((probe.name.as_str(), probe.count), ("n", 4));
        assert_eq!(probe.extra["other"], true);
    }

    #[derive(Debug, PartialEq)]
    enum Words {
        One(String),
        Many(Vec<String>),
    }

    fn words(text: &str) -> Result<Words, String> {
        let mut de = serde_json::Deserializer::from_str(text);
        super::string_or_list(&mut de, "a string or a list of strings", Words::One, Words::Many)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn string_or_list_reads_either_and_names_what_it_expected() {
        assert_eq!(words(r#""a\nb""#).unwrap(), Words::One("a\nb".to_owned()));
        assert_eq!(words(r#"["x", "y"]"#).unwrap(), Words::Many(vec!["x".to_owned(), "y".to_owned()]));
        let error = words("5").unwrap_err();
        assert!(
            error.starts_with("invalid type: integer `5`, expected a string or a list of strings"),
            "{error}"
        );
        assert!(words("[1]").unwrap_err().starts_with("invalid type: integer `1`, expected a string"));
    }
}
