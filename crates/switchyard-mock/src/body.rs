//! The response body: either a whole buffer, or a script of frames and pauses played without a
//! background task, so a stream's gaps reach the client unbuffered and cost only a timer.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::registry::HangGuard;

/// A response body produced by the mock.
pub(crate) struct MockBody(Inner);

enum Inner {
    Full(Option<Bytes>),
    Script(Box<Script>),
}

/// One element of a scripted body.
pub(crate) enum Part {
    /// Send these bytes as one frame.
    Data(Bytes),
    /// Wait this long before the next part. hyper flushes what it has written whenever the body
    /// is not ready, so every frame before a pause reaches the client before the pause starts.
    Pause(Duration),
}

/// How a scripted body ends after its last part.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Normally: the chunked encoding is terminated.
    Clean,
    /// With an error, which makes hyper drop the connection without a terminator: the client sees
    /// a truncated body.
    Cut,
    /// Never: the body stays pending, sending nothing, until the client goes away (hyper then
    /// drops it).
    Stall,
}

struct Script {
    parts: VecDeque<Part>,
    ending: Ending,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether the yield before a cut has happened.
    flushed: bool,
    done: bool,
    /// Kept for as long as the body lives: a stalled stream counts as a hanging request.
    hold: Option<HangGuard>,
    /// A stalled body's keep-alive, sent every so often while it stalls.
    keep_alive: Option<(Bytes, Duration)>,
}

impl MockBody {
    /// A body sent in one piece with a `content-length`.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> MockBody {
        MockBody(Inner::Full(Some(bytes.into())))
    }

    /// A body played part by part, ending as `ending` says.
    pub(crate) fn script(parts: VecDeque<Part>, ending: Ending) -> MockBody {
        MockBody(Inner::Script(Box::new(Script {
            parts,
            ending,
            sleep: None,
            flushed: false,
            done: false,
            hold: None,
            keep_alive: None,
        })))
    }

    /// Has a stalled body (a scripted one ending in [`Ending::Stall`]) send `piece` every
    /// `every` while it stalls, as a server that keeps a stalled stream alive.
    pub(crate) fn keep_alive(&mut self, piece: Bytes, every: Duration) {
        if let Inner::Script(script) = &mut self.0 {
            script.keep_alive = Some((piece, every));
        }
    }

    /// Keeps `guard` until the body is dropped (a scripted body only).
    pub(crate) fn hold(&mut self, guard: HangGuard) {
        if let Inner::Script(script) = &mut self.0 {
            script.hold = Some(guard);
        }
    }

    /// The bytes of a body built with [`MockBody::full`] and not yet polled.
    pub(crate) fn into_full(self) -> Option<Bytes> {
        match self.0 {
            Inner::Full(bytes) => bytes,
            Inner::Script(_) => None,
        }
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.0 {
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Script(script) => script.poll_part(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Full(bytes) => bytes.is_none(),
            Inner::Script(script) => script.done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Inner::Full(None) => SizeHint::with_exact(0),
            Inner::Script(_) => SizeHint::default(),
        }
    }
}

impl Script {
    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            if let Some(sleep) = &mut self.sleep
                && sleep.as_mut().poll(cx).is_pending()
            {
                return Poll::Pending;
            }
            match self.parts.pop_front() {
                Some(Part::Data(bytes)) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Some(Part::Pause(pause)) => {
                    let deadline = Instant::now() + pause;
                    // One timer per body, re-armed for every pause.
                    match &mut self.sleep {
                        Some(sleep) => sleep.as_mut().reset(deadline),
                        None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                }
                None if self.ending == Ending::Stall => match &self.keep_alive {
                    Some((piece, every)) => {
                        self.parts.extend([Part::Pause(*every), Part::Data(piece.clone())]);
                    }
                    // Nothing will wake this task: hyper drops the body when the client leaves.
                    None => return Poll::Pending,
                },
                None if self.ending == Ending::Cut && !self.flushed => {
                    // hyper flushes its write buffer when the body is not ready, but discards it
                    // when the body fails. Yield once so the frames before the cut reach the
                    // client before the connection drops.
                    self.flushed = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                None => {
                    self.done = true;
                    self.sleep = None;
                    return Poll::Ready(match self.ending {
                        Ending::Clean | Ending::Stall => None,
                        Ending::Cut => Some(Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "switchyard-mock: stream cut as the scenario asked",
                        ))),
                    });
                }
            }
        }
    }
}
