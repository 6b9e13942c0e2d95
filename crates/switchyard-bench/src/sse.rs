//! Server-sent events as the OpenAI and Anthropic dialects stream them: a splitter that turns
//! arbitrary body frames into events, and a classifier that tells a content chunk from the
//! terminator, an error event and the bookkeeping events around them.

/// One dispatched event: its `event:` name (if any) and its `data:` lines joined by `\n`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, which Anthropic sets on every event and OpenAI never.
    pub name: Option<String>,
    /// The `data:` payload.
    pub data: String,
}

/// Splits a byte stream into events. Frames may cut an event, a line or a UTF-8 character
/// anywhere, so bytes wait in a buffer until their line is complete.
#[derive(Debug, Default)]
pub struct Splitter {
    buffer: Vec<u8>,
    name: Option<String>,
    data: Option<String>,
}

impl Splitter {
    /// A splitter at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one frame, pushing every event it completes onto `out`.
    pub fn feed(&mut self, frame: &[u8], out: &mut Vec<Event>) {
        self.buffer.extend_from_slice(frame);
        let mut start = 0;
        while let Some(offset) = self.buffer[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let mut line = &self.buffer[start..end];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.line(&line, out);
            start = end + 1;
        }
        self.buffer.drain(..start);
    }

    /// True when bytes of an unfinished line or event are still waiting (a stream that ends
    /// here was cut).
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty() || self.data.is_some()
    }

    fn line(&mut self, line: &str, out: &mut Vec<Event>) {
        if line.is_empty() {
            // A blank line dispatches the event; one with no data is dropped, as browsers do.
            let name = self.name.take();
            if let Some(data) = self.data.take() {
                out.push(Event { name, data });
            }
            return;
        }
        if line.starts_with(':') {
            return; // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.name = Some(value.to_owned()),
            _ => {} // id, retry and unknown fields do not matter to a benchmark
        }
    }
}

/// What one event means to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A piece of the answer's text (OpenAI `delta.content`, Anthropic `text_delta`).
    Content(String),
    /// The end of the stream (`data: [DONE]`, Anthropic `message_stop`).
    Done,
    /// An error event inside the stream (its payload, shortened).
    Error(String),
    /// Anything else: the role chunk, finish and usage chunks, Anthropic's block events.
    Other,
    /// A `data:` payload that is not JSON.
    Malformed,
}

/// Classifies an event of either dialect.
pub fn classify(event: &Event) -> Kind {
    let data = event.data.trim();
    if data == "[DONE]" {
        return Kind::Done;
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(data) else {
        return Kind::Malformed;
    };
    let kind = value.get("type").and_then(|t| t.as_str()).or(event.name.as_deref());
    if value.get("error").is_some_and(|e| !e.is_null()) || kind == Some("error") {
        let mut text = data.to_owned();
        text.truncate(200);
        return Kind::Error(text);
    }
    match kind {
        Some("message_stop") => return Kind::Done,
        Some("content_block_delta") => {
            let text = value.pointer("/delta/text").and_then(|t| t.as_str()).unwrap_or_default();
            return if text.is_empty() { Kind::Other } else { Kind::Content(text.to_owned()) };
        }
        _ => {}
    }
    match value.pointer("/choices/0/delta/content").and_then(|c| c.as_str()) {
        Some(text) if !text.is_empty() => Kind::Content(text.to_owned()),
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(frames: &[&[u8]]) -> Vec<Event> {
        let mut splitter = Splitter::new();
        let mut out = Vec::new();
        for frame in frames {
            splitter.feed(frame, &mut out);
        }
        out
    }

    fn data(text: &str) -> Event {
        Event { name: None, data: text.to_owned() }
    }

    #[test]
    fn openai_stream_splits_into_chunks_and_done() {
        let body = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{\"content\":\"mock \"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{\"content\":\"answer\"}}]}\n\n\
                     data: [DONE]\n\n";
        let kinds: Vec<Kind> = split_all(&[body]).iter().map(classify).collect();
        assert_eq!(
            kinds,
            vec![Kind::Other, Kind::Content("mock ".into()), Kind::Content("answer".into()), Kind::Done]
        );
    }

    #[test]
    fn frames_may_cut_events_and_lines_anywhere() {
        let body =
            b"data: {\"choices\":[{\"delta\":{\"content\":\"h\xc3\xa9\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n";
        for cut in 0..body.len() {
            let events = split_all(&[&body[..cut], &body[cut..]]);
            assert_eq!(events.len(), 2, "cut at {cut}");
            assert_eq!(classify(&events[0]), Kind::Content("hé".into()), "cut at {cut}");
            assert_eq!(classify(&events[1]), Kind::Done);
        }
    }

    #[test]
    fn anthropic_events_use_their_type() {
        let body = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                     event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n\
                     event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let kinds: Vec<Kind> = split_all(&[body]).iter().map(classify).collect();
        assert_eq!(kinds, vec![Kind::Other, Kind::Content("hi".into()), Kind::Done]);
    }

    #[test]
    fn error_events_are_recognised_in_both_dialects() {
        assert!(matches!(classify(&data(r#"{"error":{"message":"boom"}}"#)), Kind::Error(_)));
        let anthropic = Event { name: Some("error".into()), data: r#"{"type":"error"}"#.into() };
        assert!(matches!(classify(&anthropic), Kind::Error(_)));
        // OpenAI usage chunks carry `"error": null`-free fields; a null error is not an error.
        assert_eq!(classify(&data(r#"{"choices":[],"error":null}"#)), Kind::Other);
    }

    #[test]
    fn comments_and_multiline_data_follow_the_sse_rules() {
        let events = split_all(&[b": keep-alive\n\ndata: a\ndata: b\nid: 7\n\n"]);
        assert_eq!(events, vec![data("a\nb")]);
    }

    #[test]
    fn an_unterminated_event_is_partial_not_dispatched() {
        let mut splitter = Splitter::new();
        let mut out = Vec::new();
        splitter.feed(b"data: {\"choices\":[]}\n", &mut out);
        assert!(out.is_empty());
        assert!(splitter.has_partial());
        splitter.feed(b"\n", &mut out);
        assert_eq!(out.len(), 1);
        assert!(!splitter.has_partial());
    }

    #[test]
    fn empty_content_and_non_json_are_not_content() {
        assert_eq!(classify(&data(r#"{"choices":[{"delta":{"content":""}}]}"#)), Kind::Other);
        assert_eq!(classify(&data("not json")), Kind::Malformed);
    }
}
