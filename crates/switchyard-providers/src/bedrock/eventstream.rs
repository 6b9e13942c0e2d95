//! AWS event streams (`application/vnd.amazon.eventstream`), bounded.
//!
//! Each message is a frame: a prelude (total length, headers length, the prelude's CRC32), the
//! headers, the payload and the message's CRC32. `aws-smithy-eventstream` reads a whole frame
//! and checks both CRCs; this reader keeps the bytes until a frame is whole and refuses a frame
//! longer than [`MAX_FRAME`] before buffering it, so that a broken or hostile length cannot
//! make it hold more.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures_core::Stream;
use switchyard::{ErrorKind, ProviderError};

use crate::http::TransportError;

/// The longest frame read: Bedrock's are a few kilobytes (one event of a stream).
pub const MAX_FRAME: usize = 1024 * 1024;

/// The shortest frame: a prelude (12 bytes) and the message CRC (4).
const MIN_FRAME: usize = 16;

/// One message of an event stream, by its `:message-type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `event`: its `:event-type` (`chunk`, `messageStart`, `contentBlockDelta`, ...) and
    /// payload.
    Event {
        /// `:event-type`.
        kind: String,
        /// The payload (JSON for Bedrock).
        payload: Bytes,
    },
    /// `exception`: a modelled error (`:exception-type`, `throttlingException`, ...) and its
    /// payload (`{"message": ...}`).
    Exception {
        /// `:exception-type`.
        kind: String,
        /// The payload.
        payload: Bytes,
    },
    /// `error`: an unmodelled error, its `:error-code` and `:error-message`.
    Error {
        /// `:error-code`.
        code: String,
        /// `:error-message`.
        message: String,
    },
}

/// Frames out of bytes as they arrive.
#[derive(Debug, Default)]
pub struct FrameReader {
    buffer: BytesMut,
}

impl FrameReader {
    /// A reader with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Whether part of a frame is buffered.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// The next whole frame, `None` until one is buffered; an error for a frame that is too
    /// long, too short, fails a CRC or has no `:message-type` (the stream cannot go on).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProviderError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let length =
            u32::from_be_bytes([self.buffer[0], self.buffer[1], self.buffer[2], self.buffer[3]]) as usize;
        if length > MAX_FRAME {
            return Err(malformed(format!(
                "an event-stream frame of {length} bytes is longer than the {MAX_FRAME} bytes allowed"
            )));
        }
        if length < MIN_FRAME {
            return Err(malformed(format!(
                "an event-stream frame of {length} bytes is shorter than a frame"
            )));
        }
        if self.buffer.len() < length {
            return Ok(None);
        }
        let frame = self.buffer.split_to(length).freeze();
        let message = aws_smithy_eventstream::frame::read_message_from(frame)
            .map_err(|error| malformed(format!("an event-stream frame does not read: {error}")))?;
        frame_of(&message).map(Some)
    }
}

/// The frame a decoded message is, by its headers.
fn frame_of(message: &aws_smithy_types::event_stream::Message) -> Result<Frame, ProviderError> {
    let header = |name: &str| {
        message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| h.value().as_string().ok())
            .map(|v| v.as_str().to_owned())
    };
    let payload = message.payload().clone();
    match header(":message-type").as_deref() {
        Some("event") => Ok(Frame::Event { kind: header(":event-type").unwrap_or_default(), payload }),
        Some("exception") => {
            Ok(Frame::Exception { kind: header(":exception-type").unwrap_or_default(), payload })
        }
        Some("error") => Ok(Frame::Error {
            code: header(":error-code").unwrap_or_default(),
            message: header(":error-message").unwrap_or_default(),
        }),
        Some(other) => Err(malformed(format!("an event-stream frame has `:message-type` `{other}`"))),
        None => Err(malformed("an event-stream frame has no `:message-type`".to_owned())),
    }
}

fn malformed(detail: String) -> ProviderError {
    ProviderError::new(ErrorKind::MalformedResponse, detail)
}

/// The frames of a response body as they arrive. A body that ends inside a frame is a
/// transport error (it broke off); a frame that does not read ends the stream with its error.
pub struct Frames<S> {
    body: S,
    reader: FrameReader,
    done: bool,
}

impl<S> Frames<S> {
    /// The frames of `body`.
    pub fn new(body: S) -> Self {
        Self { body, reader: FrameReader::new(), done: false }
    }
}

impl<S> Stream for Frames<S>
where
    S: Stream<Item = Result<Bytes, TransportError>> + Unpin,
{
    type Item = Result<Frame, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.reader.next_frame() {
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) => {}
                Err(error) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(error)));
                }
            }
            match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Ready(Some(Ok(bytes))) => this.reader.feed(bytes.chunk()),
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(error.into())));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    if this.reader.has_partial() {
                        let error =
                            ProviderError::new(ErrorKind::Transport, "the event stream ended inside a frame");
                        return Poll::Ready(Some(Err(error)));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Encodes one frame as AWS does (both CRCs), for tests and the mock: `headers` are string
/// headers.
pub fn encode_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let mut message = Message::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        message =
            message.add_header(Header::new(name.to_string(), HeaderValue::String(value.to_string().into())));
    }
    let mut out = Vec::new();
    // Writing string headers of bounded length into a vector cannot fail.
    let _ = aws_smithy_eventstream::frame::write_message_to(&message, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: &str) -> Vec<u8> {
        encode_frame(
            &[(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")],
            payload.as_bytes(),
        )
    }

    #[test]
    fn whole_frames_read_however_the_bytes_are_cut() {
        let mut bytes = event("chunk", r#"{"bytes":"e30="}"#);
        bytes.extend(event("messageStop", r#"{"stopReason":"end_turn"}"#));
        for cut in 1..bytes.len() {
            let mut reader = FrameReader::new();
            let mut frames = Vec::new();
            for part in [&bytes[..cut], &bytes[cut..]] {
                reader.feed(part);
                while let Some(frame) = reader.next_frame().unwrap() {
                    frames.push(frame);
                }
            }
            assert_eq!(frames.len(), 2, "cut at {cut}");
            assert!(matches!(&frames[1], Frame::Event { kind, .. } if kind == "messageStop"));
            assert!(!reader.has_partial());
        }
    }

    #[test]
    fn a_frame_with_a_bad_crc_is_malformed() {
        let mut bytes = event("chunk", r#"{"bytes":"e30="}"#);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let mut reader = FrameReader::new();
        reader.feed(&bytes);
        let error = reader.next_frame().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
        // The prelude's own CRC too.
        let mut bytes = event("chunk", "{}");
        bytes[9] ^= 0xff;
        let mut reader = FrameReader::new();
        reader.feed(&bytes);
        assert_eq!(reader.next_frame().unwrap_err().kind(), ErrorKind::MalformedResponse);
    }

    #[test]
    fn an_oversized_frame_is_refused_before_it_is_buffered() {
        let mut reader = FrameReader::new();
        reader.feed(&((MAX_FRAME + 1) as u32).to_be_bytes());
        let error = reader.next_frame().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MalformedResponse);
        assert!(error.detail().contains("longer than"), "{}", error.detail());
    }

    #[test]
    fn exception_and_error_frames_say_what_they_are() {
        let mut reader = FrameReader::new();
        reader.feed(&encode_frame(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            br#"{"message":"slow down"}"#,
        ));
        reader.feed(&encode_frame(
            &[(":message-type", "error"), (":error-code", "InternalFailure"), (":error-message", "boom")],
            b"",
        ));
        assert_eq!(
            reader.next_frame().unwrap(),
            Some(Frame::Exception {
                kind: "throttlingException".into(),
                payload: Bytes::from_static(br#"{"message":"slow down"}"#)
            })
        );
        assert_eq!(
            reader.next_frame().unwrap(),
            Some(Frame::Error { code: "InternalFailure".into(), message: "boom".into() })
        );
    }
}
