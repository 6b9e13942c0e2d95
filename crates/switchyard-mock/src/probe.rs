//! Reads the few request fields an answer depends on. serde skips every other field without
//! building values, and the model name is borrowed from the body unless it contains escapes.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The fields of a chat, messages or embeddings request that shape the mock's answer.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Probe<'a> {
    /// Echoed in the answer.
    #[serde(borrow, default)]
    pub(crate) model: Cow<'a, str>,
    /// `true` asks for an SSE stream.
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    /// OpenAI: `include_usage` adds a usage chunk before `[DONE]`.
    #[serde(default)]
    pub(crate) stream_options: Option<StreamOptions>,
    /// Embeddings: how many vectors to return.
    #[serde(default)]
    pub(crate) input: Option<InputCount>,
    /// Embeddings: `"base64"` (the OpenAI SDK's default on the wire) or `"float"`.
    #[serde(borrow, default)]
    pub(crate) encoding_format: Option<Cow<'a, str>>,
    /// Embeddings: vector length.
    #[serde(default)]
    pub(crate) dimensions: Option<u32>,
    /// Chat and messages: the last message, unread (the others are skipped as they are
    /// parsed), for [`Probe::prefill`].
    #[serde(borrow, default, rename = "messages", deserialize_with = "last_element")]
    last_message: Option<&'a RawValue>,
}

/// OpenAI `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The number of inputs in an embeddings request: a string is one input, an array of strings or
/// of token arrays is one per element, an array of token numbers is one input.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InputCount(pub(crate) usize);

impl<'a> Probe<'a> {
    /// Parses the fields out of a JSON request body.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Probe<'a>, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// Parses only `model` and `stream`: for the Responses API, whose `input` is not an
    /// embeddings input.
    pub(crate) fn parse_head(body: &'a [u8]) -> Result<Probe<'a>, serde_json::Error> {
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(borrow, default)]
            model: Cow<'a, str>,
            #[serde(default)]
            stream: Option<bool>,
        }
        let head: Head<'a> = serde_json::from_slice(body)?;
        Ok(Probe { model: head.model, stream: head.stream, ..Probe::default() })
    }

    /// Whether the client asked for a stream.
    pub(crate) fn streaming(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether an OpenAI stream should end with a usage chunk.
    pub(crate) fn include_usage(&self) -> bool {
        self.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true)
    }

    /// The text of the last message when it is the assistant's (a prefill the answer
    /// continues): its `content` string, or the `text` of its parts (OpenAI) or blocks
    /// (Anthropic), which share that shape; empty when it has none. `None` when the last
    /// message is another role's, or there are no messages.
    pub(crate) fn prefill(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Role<'a> {
            #[serde(borrow, default)]
            role: Cow<'a, str>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Content {
            Text(String),
            Parts(Vec<Part>),
            Other(IgnoredAny),
        }
        #[derive(Deserialize)]
        struct Part {
            #[serde(default)]
            text: Option<String>,
        }
        #[derive(Deserialize)]
        struct Message {
            #[serde(default)]
            content: Option<Content>,
        }
        let last = self.last_message?.get();
        // A user's message (perhaps megabytes, in a benchmark) is passed over by a search for
        // the role's value rather than parsed a second time; one that holds the word is parsed
        // for its role before its content is read. (A role spelled with escapes is not found.)
        if !last.contains("\"assistant\"") || serde_json::from_str::<Role<'_>>(last).ok()?.role != "assistant"
        {
            return None;
        }
        let message: Message = serde_json::from_str(last).ok()?;
        Some(match message.content {
            Some(Content::Text(text)) => text,
            Some(Content::Parts(parts)) => parts.into_iter().filter_map(|part| part.text).collect(),
            Some(Content::Other(_)) | None => String::new(),
        })
    }
}

/// Deserializes a JSON array into its last element, unread; anything else into `None`.
fn last_element<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    struct LastVisitor;
    impl<'de> Visitor<'de> for LastVisitor {
        type Value = Option<&'de RawValue>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut last = None;
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                last = Some(item);
            }
            Ok(last)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(LastVisitor)
}

impl<'de> Deserialize<'de> for InputCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<InputCount, D::Error> {
        deserializer.deserialize_any(InputVisitor)
    }
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = InputCount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of strings or tokens")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<InputCount, E> {
        Ok(InputCount(1))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<InputCount, A::Error> {
        let mut count = 0;
        let mut tokens = false;
        while let Some(item) = seq.next_element::<Item>()? {
            count += 1;
            tokens |= item == Item::Token;
        }
        Ok(InputCount(if tokens { 1 } else { count }))
    }
}

/// One element of an embeddings `input` array.
#[derive(PartialEq, Eq)]
enum Item {
    Token,
    Other,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Item, D::Error> {
        struct ItemVisitor;
        impl<'de> Visitor<'de> for ItemVisitor {
            type Value = Item;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a token or an array of tokens")
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Item, E> {
                Ok(Item::Token)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Item, E> {
                Ok(Item::Token)
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Item, E> {
                Ok(Item::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Item::Other)
            }
        }
        deserializer.deserialize_any(ItemVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_model_and_stream_flags_from_sdk_bodies() {
        let body = br#"{"messages":[{"role":"user","content":"hi \"there\""}],"model":"gpt-4o-mini",
            "stream":true,"stream_options":{"include_usage":true},"temperature":0.5}"#;
        let probe = Probe::parse(body).unwrap();
        assert_eq!(probe.model, "gpt-4o-mini");
        assert!(matches!(probe.model, Cow::Borrowed(_)));
        assert!(probe.streaming());
        assert!(probe.include_usage());

        let probe =
            Probe::parse(br#"{"model":"a\/b","max_tokens":5,"stream":null,"stream_options":null}"#).unwrap();
        assert_eq!(probe.model, "a/b");
        assert!(!probe.streaming());
        assert!(!probe.include_usage());
    }

    #[test]
    fn a_last_assistant_message_is_a_prefill_in_either_dialect() {
        let prefill = |body: &[u8]| Probe::parse(body).unwrap().prefill();
        let openai =
            br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"w1 w2"}]}"#;
        assert_eq!(prefill(openai).as_deref(), Some("w1 w2"));
        let blocks = br#"{"messages":[{"role":"user","content":"hi"},
            {"content":[{"type":"text","text":"w1"},{"type":"text","text":" w2"}],"role":"assistant"}]}"#;
        assert_eq!(prefill(blocks).as_deref(), Some("w1 w2"));
        let tool_call = br#"{"messages":[{"role":"assistant","content":null,"tool_calls":[]}]}"#;
        assert_eq!(prefill(tool_call).as_deref(), Some(""));
    }

    #[test]
    fn no_prefill_without_a_last_assistant_message() {
        let prefill = |body: &[u8]| Probe::parse(body).unwrap().prefill();
        assert_eq!(
            prefill(br#"{"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}"#),
            None
        );
        assert_eq!(prefill(br#"{"messages":[]}"#), None);
        assert_eq!(prefill(br#"{"messages":null}"#), None);
        assert_eq!(prefill(br#"{"input":"embed me"}"#), None);
    }

    #[test]
    fn counts_embedding_inputs() {
        let count = |body: &[u8]| Probe::parse(body).unwrap().input.unwrap().0;
        assert_eq!(count(br#"{"input":"one"}"#), 1);
        assert_eq!(count(br#"{"input":["one","two"]}"#), 2);
        assert_eq!(count(br#"{"input":[1,2,3]}"#), 1);
        assert_eq!(count(br#"{"input":[[1,2],[3]]}"#), 2);
    }
}
