//! Reading a request body: at most `gateway.max_body` bytes, and never a wait of more than
//! `gateway.body_timeout` without a byte of it.
//!
//! The clock counts time without a byte: each piece that arrives starts it again, so a body
//! that keeps trickling in is read (its size is bounded by the limit), and one that stops
//! arriving is given up on. The connection's own watch ([`crate::connection`]) sets no deadline
//! while a request is answered; this is the one for its body. It runs only while a handler
//! reads: a body already in hand when it starts costs no timer.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, Bytes};
use bytes::BytesMut;
use http_body::Body as _;
use tokio::time::{Instant, Sleep};

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// It is longer than the limit.
    #[error("the request body is over the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// No byte of it arrived for `waited`.
    #[error("the request body stopped arriving: no byte for {waited:?}")]
    Stalled { waited: Duration },
    /// The connection failed under it (the client went away mid-body, or sent a broken chunk).
    #[error("the request body could not be read: {0}")]
    Unreadable(axum::Error),
}

/// The most JSON values a request body may hold (objects, arrays and their members): read, each
/// takes tens of bytes, so a 30 MB body of `{}` took 1.4 GB. Far more than a request needs
/// (OpenAI takes 300,000 tokens of embeddings input at most).
pub(crate) const MAX_VALUES: usize = 500_000;

/// Bodies up to this size are not counted: they cannot hold [`MAX_VALUES`] values.
pub(crate) const COUNTED_FROM: usize = 1 << 20;

/// Whether the JSON text `json` holds more than `most` values: objects, arrays and the members
/// after their first (each `{`, `[` and `,` outside a string). Strings, a base64 image the
/// longest, are skipped over.
pub(crate) fn values_past(json: &[u8], most: usize) -> bool {
    let mut count = 0usize;
    let mut at = 0;
    while let Some(offset) = json[at..].iter().position(|b| matches!(b, b'"' | b'{' | b'[' | b',')) {
        at += offset;
        if json[at] == b'"' {
            at = string_end(json, at + 1);
            continue;
        }
        count += 1;
        if count > most {
            return true;
        }
        at += 1;
    }
    false
}

/// Where the string that begins at `from` (after its quote) ends: past its closing quote.
fn string_end(json: &[u8], mut from: usize) -> usize {
    while let Some(offset) = json[from..].iter().position(|b| matches!(b, b'"' | b'\\')) {
        from += offset;
        if json[from] == b'"' {
            return from + 1;
        }
        // An escape and the character it escapes (a quote, perhaps).
        from = (from + 2).min(json.len());
    }
    json.len()
}

/// Reads `body` whole, refusing it past `limit` bytes or after `patience` without a byte.
pub(crate) async fn read(mut body: Body, limit: usize, patience: Duration) -> Result<Bytes, BodyError> {
    // A `Content-Length` over the limit is refused before a byte is read (and before a
    // client that asked `Expect: 100-continue` is told to send it).
    if http_body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    let mut joined = Joined::default();
    // Made at the first wait, and moved on by each piece that ends one.
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    let mut waited = false;
    loop {
        let frame = poll_fn(|cx| {
            if let Poll::Ready(frame) = Pin::new(&mut body).poll_frame(cx) {
                return Poll::Ready(Some(frame));
            }
            let deadline = Instant::now() + patience;
            let timer = match &mut timer {
                // Still the same wait: the deadline stays where it is.
                Some(timer) if waited => timer,
                Some(timer) => {
                    timer.as_mut().reset(deadline);
                    timer
                }
                None => timer.insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            waited = true;
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await;
        waited = false;
        match frame {
            None => return Err(BodyError::Stalled { waited: patience }),
            Some(None) => return Ok(joined.into_bytes()),
            Some(Some(Err(error))) => return Err(BodyError::Unreadable(error)),
            Some(Some(Ok(frame))) => {
                // Trailers carry nothing a JSON request reads.
                if let Ok(piece) = frame.into_data() {
                    if joined.len() + piece.len() > limit {
                        return Err(BodyError::TooLarge { limit });
                    }
                    joined.push(piece);
                }
            }
        }
    }
}

/// A body's pieces, joined: a body that came in one piece is kept as it came, uncopied.
#[derive(Default)]
struct Joined {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Joined {
    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn push(&mut self, piece: Bytes) {
        if let Some(more) = &mut self.more {
            more.extend_from_slice(&piece);
        } else if self.first.is_empty() {
            self.first = piece;
        } else if !piece.is_empty() {
            let mut more = BytesMut::with_capacity(self.first.len() + piece.len());
            more.extend_from_slice(&self.first);
            more.extend_from_slice(&piece);
            self.more = Some(more);
        }
    }

    fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
    }
}

#[cfg(test)]
mod tests;
