//! Server-sent events: an incremental parser that accepts bytes split anywhere (inside a line,
//! inside a UTF-8 character, between `\r` and `\n`) and a stream adapter over a response body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use futures_util::future::BoxFuture;
use switchyard::chat::{ChatChunk, StreamNotice};
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

/// One event: its `event:` name (if any) and its `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (Anthropic's event type, OpenAI's `error`); `None` when the event
    /// had no `event:` line, as with OpenAI Chat and Gemini.
    pub event: Option<String>,
    /// The `data:` lines, each without its single leading space, joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// The event written out again as one frame: its `event:` line (if any), a `data:` line per
    /// line of data, and the blank line that ends it. Comments, `id:` and `retry:` lines are not
    /// kept, so this is the event as a client's parser reads it, not necessarily its bytes.
    pub fn to_frame(&self) -> Bytes {
        // Exactly as long as the frame: a `Vec` with room to spare costs `Bytes` a second
        // allocation to share it.
        let lines = 1 + memchr::memchr_iter(b'\n', self.data.as_bytes()).count();
        let head = self.event.as_ref().map_or(0, |name| "event: \n".len() + name.len());
        let mut out = Vec::with_capacity(head + self.data.len() + lines * "data: ".len() + 2);
        if let Some(name) = &self.event {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(name.as_bytes());
            out.push(b'\n');
        }
        let mut rest = self.data.as_bytes();
        loop {
            let (line, next) = match memchr::memchr(b'\n', rest) {
                Some(end) => (&rest[..end], Some(&rest[end + 1..])),
                None => (rest, None),
            };
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line);
            out.push(b'\n');
            match next {
                Some(next) => rest = next,
                None => break,
            }
        }
        out.push(b'\n');
        debug_assert_eq!(out.len(), out.capacity(), "the frame's length was reckoned wrong");
        Bytes::from(out)
    }
}

/// The most an unfinished line and event may hold together. LLM events are kilobytes (a few
/// megabytes for inline media); an upstream that sends more without ending its event is broken,
/// and reading on would let it take the gateway's memory.
pub const MAX_EVENT_BYTES: usize = 32 << 20;

/// Unreadable events a stream may skip before it fails as `malformed_response`: one stray
/// event is noise; more say the stream is broken.
pub const MAX_SKIPPED: u32 = 3;

/// The unreadable events a stream skipped: each a notice while fewer than [`MAX_SKIPPED`] were,
/// the next the stream's end.
#[derive(Debug, Default)]
pub(crate) struct Skips(u32);

impl Skips {
    /// The notice that skips the event whose `data` `error` says does not read; or `error`
    /// itself once [`MAX_SKIPPED`] were skipped, or when the event carried part of the answer
    /// ([`carries_text`]): skipped, the answer would lack it and still read as whole.
    pub(crate) fn skip(&mut self, error: ProviderError, data: &str) -> Result<ChatChunk, ProviderError> {
        if carries_text(data) {
            let detail = format!("{} (it carried part of the answer, which would be lost)", error.detail());
            return Err(ProviderError::new(error.kind(), detail));
        }
        if self.0 >= MAX_SKIPPED {
            return Err(error);
        }
        self.0 += 1;
        Ok(ChatChunk::notice(StreamNotice::Skipped(error.detail().to_owned())))
    }
}

/// Whether an event that does not read carried part of an answer: a member that holds one
/// (`content`, `text`, a reasoning, a call's `arguments`, a Responses `delta`, ...) whose string
/// was begun and is not the empty string (one cut right after its opening quote counts: what it
/// held is unknown). An event cut short in its text, or whose text the parser refused (half of a
/// surrogate pair), carries some; a stray line or an empty delta does not.
pub(crate) fn carries_text(data: &str) -> bool {
    const MEMBERS: [&str; 9] = [
        "\"content\"",
        "\"text\"",
        "\"reasoning_content\"",
        "\"reasoning\"",
        "\"thinking\"",
        "\"arguments\"",
        "\"partial_json\"",
        "\"refusal\"",
        "\"delta\"",
    ];
    MEMBERS.iter().any(|member| {
        data.match_indices(member).any(|(at, _)| {
            let after = data[at + member.len()..].trim_start();
            let Some(value) = after.strip_prefix(':') else { return false };
            value.trim_start().strip_prefix('"').is_some_and(|text| !text.starts_with('"'))
        })
    })
}

/// The most of the stray lines kept: enough for any error body, not a stream of garbage.
pub const MAX_STRAY_BYTES: usize = 64 << 10;

/// An incremental SSE parser (the WHATWG event-stream rules, minus `id`/`retry`, which no LLM
/// provider relies on).
#[derive(Debug, Default)]
pub struct SseParser {
    /// The start of a line split across feeds, completed by the next feed.
    buffer: Vec<u8>,
    /// The current event's `event:` field, if one was seen.
    event: Option<String>,
    /// The current event's `data:` lines so far; `None` until the first one, so that an event
    /// with no data line is not dispatched.
    data: Option<String>,
    /// The last byte fed was `\r`: a following `\n` belongs to the same line end.
    after_cr: bool,
    /// A line has been read: a byte-order mark can only start the first.
    past_first_line: bool,
    /// Lines that are not `field: value` (some providers send raw JSON error bodies mid-stream),
    /// at most [`MAX_STRAY_BYTES`] of them.
    stray: Vec<String>,
    /// The total length of `stray`, checked against [`MAX_STRAY_BYTES`].
    stray_bytes: usize,
}

impl SseParser {
    /// A parser at the start of a stream, with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    ///
    /// Whole lines are read straight from `bytes`; only a line split across two feeds is
    /// copied, to be completed by the next one.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        // memchr: several bytes at a time, where a byte-by-byte scan cost each event more than
        // reading its JSON.
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            if self.buffer.is_empty() {
                self.line(&rest[..end], &mut events);
            } else {
                let mut line = std::mem::take(&mut self.buffer);
                line.extend_from_slice(&rest[..end]);
                self.line(&line, &mut events);
                line.clear();
                self.buffer = line;
            }
            // `\r\n` is one line end; a `\r` that ends the feed may be followed by the `\n`.
            rest = match (rest[end], rest.get(end + 1)) {
                (b'\r', Some(b'\n')) => &rest[end + 2..],
                (b'\r', None) => {
                    self.after_cr = true;
                    &[]
                }
                _ => &rest[end + 1..],
            };
        }
        self.buffer.extend_from_slice(rest);
        events
    }

    /// Ends the input: a final event without its blank line is still delivered.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut events = Vec::new();
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, &mut events);
        }
        self.dispatch(&mut events);
        events.pop()
    }

    /// Takes the non-SSE lines seen so far.
    pub fn take_stray(&mut self) -> Vec<String> {
        self.stray_bytes = 0;
        std::mem::take(&mut self.stray)
    }

    /// Whether a partial line or event is pending.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty() || self.data.is_some()
    }

    /// Bytes held for the line and the event not yet complete.
    pub fn pending_bytes(&self) -> usize {
        self.buffer.len() + self.data.as_ref().map_or(0, String::len)
    }

    /// One line, without its line end. Text that is not UTF-8 is read with replacement
    /// characters; `:` is ASCII, so splitting the bytes first changes nothing.
    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) {
        let line = match std::mem::replace(&mut self.past_first_line, true) {
            false => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            true => line,
        };
        let Some(&first) = line.first() else {
            self.dispatch(events);
            return;
        };
        if first == b':' {
            return; // a comment (keep-alive)
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                let value = text(value);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(&value);
                    }
                    None => self.data = Some(value.into_owned()),
                }
            }
            b"event" => self.event = Some(text(value).into_owned()),
            b"id" | b"retry" => {}
            _ if self.stray_bytes + line.len() <= MAX_STRAY_BYTES => {
                self.stray_bytes += line.len();
                self.stray.push(String::from_utf8_lossy(line).into_owned());
            }
            _ => {}
        }
    }

    /// Ends the current event (a blank line or the end of input): appends it to `events` if it
    /// had a `data:` line, and resets the `event:` name either way.
    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            events.push(SseEvent { event, data });
        }
    }
}

/// `bytes` as text, with replacement characters for what is not UTF-8. Valid text, which every
/// provider sends, is checked by `str::from_utf8` (several bytes at a time); only invalid text
/// takes the slower lossy walk.
fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// How long the end of a body may keep a finished stream waiting: the end of a chunked body
/// comes with the last event or right after it (one that a server holds back, for instance
/// behind Nagle's algorithm and a delayed ACK, 40 ms, is read in the background instead).
const RELEASE_INLINE: std::time::Duration = std::time::Duration::from_millis(5);

/// How long a body that did not end in [`RELEASE_INLINE`] is read in the background.
const RELEASE_BACKGROUND: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads what is left of a body after its last event, so that its connection goes back to
/// the pool: a body dropped before its end closes its connection, and the next call pays a
/// new TCP (and TLS) handshake. The end is awaited for at most [`RELEASE_INLINE`], then read
/// in the background for at most [`RELEASE_BACKGROUND`]; a body that still has not ended is
/// dropped (its connection closed). Only a stream read to its last item is released (the end
/// of its answer, or the error that ended it, after which a provider's error event may still
/// leave the connection reusable): a caller that goes away mid-stream drops the body, which
/// closes the upstream call at once.
///
/// Most bodies end in bytes already read, and then the first look finds the end: an HTTP/1
/// body's read drives its connection, which decodes what it holds, and the inline timer
/// (armed only when the body is still pending) is never set. Arming one earlier than any
/// other wakes the event loop it is armed on (an eventfd write and an extra `epoll_wait`),
/// and this one, of 5 ms, always is. (Over HTTP/2 the connection's own task passes the end
/// on, and may need a turn of the event loop to do so.)
pub(crate) async fn release<S>(mut events: S)
where
    S: Stream + Send + Unpin + 'static,
    S::Item: Send,
{
    use futures_util::StreamExt;
    {
        let rest = async { while events.next().await.is_some() {} };
        if tokio::time::timeout(RELEASE_INLINE, rest).await.is_ok() {
            return;
        }
    }
    tokio::spawn(async move {
        let rest = async { while events.next().await.is_some() {} };
        let _ = tokio::time::timeout(RELEASE_BACKGROUND, rest).await;
    });
}

/// What reads a stream's chunks from its events where it lies (see [`read_chunks`]).
pub(crate) trait ReadChunks: Send + Unpin + 'static {
    /// The events it reads, read to their end once it is done.
    type Events: Stream + Send + Unpin + 'static;

    /// The next chunk, or the error that ends the stream; `None` once it ended.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>>;

    /// The events not read yet.
    fn into_events(self) -> Self::Events;
}

/// The chunks `reader` reads, then, once it ended, the rest of its events read ([`release`]) so
/// that the connection is kept. The reader stays where it is from chunk to chunk (a future per
/// chunk, as `stream::unfold` makes, moves the whole reader in and out each time).
pub(crate) fn read_chunks<R: ReadChunks>(reader: R) -> ChunkStream
where
    <R::Events as Stream>::Item: Send,
{
    Box::pin(Chunks::Reading(reader))
}

// One per stream, boxed: the ended variants' unused room costs nothing worth a second box.
#[allow(clippy::large_enum_variant)]
enum Chunks<R> {
    Reading(R),
    Releasing(BoxFuture<'static, ()>),
    Ended,
}

impl<R: ReadChunks> Stream for Chunks<R>
where
    <R::Events as Stream>::Item: Send,
{
    type Item = Result<ChatChunk, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match this {
                Chunks::Reading(reader) => match std::task::ready!(reader.poll_chunk(cx)) {
                    Some(Ok(chunk)) if let Some(index) = call_past_the_most(&chunk) => {
                        // Nothing more is read: the stream is malformed, and ends here.
                        *this = Chunks::Ended;
                        let most = switchyard::chat::MAX_TOOL_CALLS;
                        let detail =
                            format!("a tool call index of {index}: a choice makes fewer than {most} calls");
                        return Poll::Ready(Some(Err(ProviderError::new(
                            ErrorKind::MalformedResponse,
                            detail,
                        ))));
                    }
                    Some(item) => return Poll::Ready(Some(item)),
                    None => {
                        let Chunks::Reading(reader) = std::mem::replace(this, Chunks::Ended) else {
                            unreachable!()
                        };
                        *this = Chunks::Releasing(Box::pin(release(reader.into_events())));
                    }
                },
                Chunks::Releasing(release) => {
                    std::task::ready!(release.as_mut().poll(cx));
                    *this = Chunks::Ended;
                }
                Chunks::Ended => return Poll::Ready(None),
            }
        }
    }
}

/// The index of a tool call `chunk` names past the most a choice may make, if it names one.
fn call_past_the_most(chunk: &ChatChunk) -> Option<u32> {
    let calls = chunk.choices.iter().flat_map(|choice| &choice.delta.tool_calls);
    calls.map(|call| call.index).find(|index| *index >= switchyard::chat::MAX_TOOL_CALLS)
}

/// Turns a byte stream (a response body) into SSE events. A body error ends the stream with a
/// transport error; an event past [`MAX_EVENT_BYTES`], with a malformed-response error.
pub struct SseStream<S> {
    /// The byte stream being read.
    body: S,
    /// Splits the bytes into events.
    parser: SseParser,
    /// Events parsed and not yet yielded (one feed can complete several).
    ready: std::collections::VecDeque<SseEvent>,
    /// The body has ended or failed: no more bytes are read.
    done: bool,
    /// What ends the stream once `ready` is empty.
    failed: Option<ProviderError>,
}

impl<S> SseStream<S> {
    /// Reads the events of `body`, a stream of byte chunks split anywhere.
    pub fn new(body: S) -> Self {
        Self { body, parser: SseParser::new(), ready: Default::default(), done: false, failed: None }
    }

    /// Non-SSE lines seen so far (for providers that put raw JSON errors in the stream).
    pub fn take_stray(&mut self) -> Vec<String> {
        self.parser.take_stray()
    }
}

impl<S, E> Stream for SseStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<SseEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.done {
                return Poll::Ready(this.failed.take().map(Err));
            }
            match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    this.ready.extend(this.parser.feed(&bytes));
                    if this.parser.pending_bytes() > MAX_EVENT_BYTES {
                        // The events completed before it still count; the error comes after them.
                        this.done = true;
                        this.failed = Some(ProviderError::new(
                            ErrorKind::MalformedResponse,
                            format!(
                                "an event of the stream grew past {} MiB without ending",
                                MAX_EVENT_BYTES >> 20
                            ),
                        ));
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(ProviderError::new(
                        ErrorKind::Transport,
                        format!("the stream broke: {error}"),
                    ))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.ready.extend(this.parser.finish());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn an_unreadable_event_carries_text_when_a_string_of_the_answer_was_begun() {
        for lost in [
            r#"{"choices":[{"delta":{"content":"w31"#,
            r#"{"choices":[{"delta":{"content": "\ud83d"}}]}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hel"#,
            r#"{"type":"response.output_text.delta","delta":""#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"ci"#,
        ] {
            assert!(carries_text(lost), "{lost}");
        }
        for noise in [
            "{broken",
            r#"{"choices":[{"delta":{"content":""}}]"#,
            r#"{"choices":[{"delta":{"role":"assistant"#,
            r#"{"usage": {"prompt_tokens": 3"#,
            "content without quotes",
        ] {
            assert!(!carries_text(noise), "{noise}");
        }
    }

    /// Feeds `bytes` in pieces ending at `cuts`, then ends the input.
    fn parse_in_pieces(bytes: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, Vec<String>) {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&bytes.len()]) {
            let cut = cut.clamp(from, bytes.len());
            events.extend(parser.feed(&bytes[from..cut]));
            from = cut;
        }
        events.extend(parser.finish());
        (events, parser.take_stray())
    }

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: name.map(str::to_owned), data: data.to_owned() }
    }

    #[test]
    fn a_crlf_split_between_two_feeds_is_one_line_end() {
        // Read as two line ends, the `\n` would be a blank line: an event of no data, which
        // would drop the `event:` name before its data arrived.
        let mut parser = SseParser::new();
        assert_eq!(parser.feed(b"event: delta\r"), vec![]);
        assert_eq!(parser.feed(b""), vec![], "an empty feed keeps the pending \\r");
        assert_eq!(parser.feed(b"\ndata: a\r"), vec![]);
        assert_eq!(parser.feed(b"\n\r\n"), vec![event(Some("delta"), "a")]);
    }

    #[test]
    fn a_line_split_across_feeds_is_joined() {
        let (events, _) = parse_in_pieces(b"event: delta\ndata: {\"a\":\ndata: 1}\n\n", &[3, 9, 20, 21]);
        assert_eq!(events, vec![event(Some("delta"), "{\"a\":\n1}")]);
    }

    #[test]
    fn text_that_is_not_utf8_is_replaced_not_dropped() {
        let (events, stray) = parse_in_pieces(b"data: caf\xc3\nretry: 5\n\n{\"bad\xff\": 1}\n", &[10]);
        assert_eq!(events, vec![event(None, "caf\u{fffd}")]);
        assert_eq!(stray, vec!["{\"bad\u{fffd}\": 1}".to_owned()]);
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_skipped_even_when_split() {
        for cut in 0..=4 {
            let (events, stray) = parse_in_pieces("\u{feff}data: a\n\n\u{feff}x\n".as_bytes(), &[cut]);
            assert_eq!(events, vec![event(None, "a")], "cut at {cut}");
            assert_eq!(stray, vec!["\u{feff}x".to_owned()], "only the first line may start with one");
        }
    }

    #[test]
    fn stray_lines_are_kept_up_to_a_bound() {
        let line = format!("{{{}}}\n", "e".repeat(1022));
        let (_, stray) = parse_in_pieces(line.repeat(100).as_bytes(), &[]);
        assert_eq!(stray.len(), MAX_STRAY_BYTES / 1024);
    }

    #[tokio::test]
    async fn an_event_that_never_ends_is_an_error_after_the_events_before_it() {
        use futures_util::StreamExt;
        let mut pieces = vec![Bytes::from_static(b"data: ok\n\ndata: ")];
        pieces.extend(std::iter::repeat_n(Bytes::from(vec![b'x'; 1 << 20]), (MAX_EVENT_BYTES >> 20) + 1));
        let body = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>));
        let mut stream = SseStream::new(body);
        assert_eq!(stream.next().await.unwrap().unwrap(), event(None, "ok"));
        let error = stream.next().await.unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
        assert!(error.detail().contains("grew past 32 MiB"), "{error}");
        assert!(stream.next().await.is_none());
    }

    #[test]
    fn the_last_event_needs_no_blank_line() {
        let (events, _) = parse_in_pieces(b": keep-alive\n\ndata: [DONE]", &[]);
        assert_eq!(events, vec![event(None, "[DONE]")]);
    }

    /// One line of a stream: what is written, and what it means.
    #[derive(Debug, Clone)]
    enum Line {
        Event { name: Option<String>, data: Vec<String> },
        Comment(String),
        Ignored(String),
        Stray(String),
    }

    fn text() -> impl Strategy<Value = String> {
        // Anything but line ends, leading spaces included.
        "[^\r\n]{0,12}"
    }

    fn line() -> impl Strategy<Value = Line> {
        prop_oneof![
            4 => (proptest::option::of("[a-z_]{1,10}"), proptest::collection::vec(text(), 1..4))
                .prop_map(|(name, data)| Line::Event { name, data }),
            1 => text().prop_map(Line::Comment),
            1 => ("(id|retry)", "[0-9]{0,4}").prop_map(|(field, value)| Line::Ignored(format!("{field}: {value}"))),
            1 => "\\{[^\r\n]{0,12}".prop_map(Line::Stray),
        ]
    }

    /// Writes lines, each with the next of `ends` (cycled). A blank line after a `\r` gets
    /// `\r\n` instead of `\n`: `\r` then `\n` would be one line end, not two.
    struct Writer<'a> {
        bytes: String,
        ends: std::iter::Cycle<std::slice::Iter<'a, &'static str>>,
        after_cr: bool,
    }

    impl Writer<'_> {
        fn line(&mut self, text: &str) {
            let mut end = *self.ends.next().expect("at least one line end");
            if text.is_empty() && self.after_cr && end == "\n" {
                end = "\r\n";
            }
            self.bytes += text;
            self.bytes += end;
            self.after_cr = end == "\r";
        }
    }

    proptest! {
        /// Any stream, with its lines ended by any mix of the three line ends, cut anywhere,
        /// reads the same events and stray lines as were written.
        #[test]
        fn a_stream_cut_anywhere_reads_as_written(
            lines in proptest::collection::vec(line(), 0..12),
            ends in proptest::collection::vec(prop_oneof![Just("\n"), Just("\r\n"), Just("\r")], 1..4),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        ) {
            let mut writer = Writer { bytes: String::new(), ends: ends.iter().cycle(), after_cr: false };
            let (mut events, mut stray) = (Vec::new(), Vec::new());
            for line in &lines {
                match line {
                    Line::Event { name, data } => {
                        if let Some(name) = name {
                            writer.line(&format!("event: {name}"));
                        }
                        for piece in data {
                            writer.line(&format!("data: {piece}"));
                        }
                        writer.line("");
                        events.push(SseEvent { event: name.clone(), data: data.join("\n") });
                    }
                    Line::Comment(text) => writer.line(&format!(":{text}")),
                    Line::Ignored(text) => writer.line(text),
                    Line::Stray(text) => {
                        writer.line(text);
                        stray.push(text.clone());
                    }
                }
            }
            let bytes = writer.bytes.into_bytes();
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            prop_assert_eq!(parse_in_pieces(&bytes, &cuts), (events, stray));
        }

        /// An event written out as a frame reads back as the same event: what a passed-on
        /// event means to the client's parser is what it meant to ours.
        #[test]
        fn a_frame_reads_back_as_its_event(
            name in proptest::option::of("[a-z_]{1,10}"),
            data in proptest::collection::vec(text(), 1..4),
        ) {
            let event = SseEvent { event: name, data: data.join("\n") };
            prop_assert_eq!(SseParser::new().feed(&event.to_frame()), vec![event]);
        }
    }
}
