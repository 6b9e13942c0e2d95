//! `GET /admin/events`: the router's typed events, and each finished request, as Server-Sent
//! Events, for `switchyard events` and the operator page.
//!
//! Every frame is `event: <name>` with one JSON object as `data` (the object's `event` member
//! repeats the name). A subscriber that falls behind loses the oldest events and is told how
//! many in a `missed` event; routing never waits for it. A comment every 15 s keeps idle
//! proxies from closing the stream; it ends when the gateway shuts down.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use switchyard::events::Subscription;
use tokio::sync::{broadcast, watch};

use super::admin::admin_allowed;
use super::{AppState, Dialect, unauthorized};
use crate::recent::RequestRecord;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Finished requests, rendered for subscribers only when there are some: a gateway nobody
/// watches pays one atomic load per request.
#[derive(Debug)]
pub struct RequestFeed {
    sender: broadcast::Sender<Arc<str>>,
}

impl Default for RequestFeed {
    fn default() -> Self {
        Self { sender: broadcast::channel(256).0 }
    }
}

impl RequestFeed {
    /// `record`'s `request_finished` line, when someone listens.
    pub fn render(&self, record: &RequestRecord) -> Option<Arc<str>> {
        if self.sender.receiver_count() == 0 {
            return None;
        }
        let mut json = serde_json::to_value(record.summary()).ok()?;
        json["event"] = "request_finished".into();
        Some(json.to_string().into())
    }

    /// Tells every subscriber a request finished.
    pub fn send(&self, line: Option<Arc<str>>) {
        if let Some(line) = line {
            let _ = self.sender.send(line);
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.sender.subscribe()
    }
}

pub async fn stream(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !admin_allowed(&state, &headers) {
        return unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let feed = Feed {
        events: state.router.subscribe(),
        requests: state.feed.subscribe(),
        stopping: state.stop_signal(),
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        missed: 0,
        opened: false,
    };
    let body = futures_util::stream::unfold(feed, |mut feed| async move {
        let frame = feed.next().await?;
        Some((Ok::<_, std::convert::Infallible>(frame), feed))
    });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies in front (nginx) must not buffer a stream that is all small frames.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

struct Feed {
    events: Subscription,
    requests: broadcast::Receiver<Arc<str>>,
    stopping: watch::Receiver<bool>,
    keep_alive: tokio::time::Interval,
    /// Router events lost so far and already reported.
    missed: u64,
    opened: bool,
}

impl Feed {
    /// The next frame; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        if !self.opened {
            self.opened = true;
            // At once, so the subscriber knows the stream is live before anything happens.
            return Some(Bytes::from_static(b"retry: 2000\n: switchyard events\n\n"));
        }
        let stopping = &mut self.stopping;
        let stopped = async move {
            // A gateway without a stop signal (its sender gone) runs until dropped.
            if stopping.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            () = stopped => None,
            event = self.events.recv() => {
                let event = event?;
                let missed = self.events.missed();
                if missed > self.missed {
                    let lost = missed - self.missed;
                    self.missed = missed;
                    let mut frames = frame("missed", &format!("{{\"event\":\"missed\",\"missed\":{lost}}}"));
                    frames.extend_from_slice(&frame(event.kind.name(), &serde_json::to_string(&*event).ok()?));
                    return Some(frames.into());
                }
                Some(frame(event.kind.name(), &serde_json::to_string(&*event).ok()?).into())
            }
            line = self.requests.recv() => match line {
                Ok(json) => Some(frame("request_finished", &json).into()),
                Err(broadcast::error::RecvError::Lagged(lost)) => Some(
                    frame("missed", &format!("{{\"event\":\"missed\",\"missed\":{lost}}}")).into(),
                ),
                Err(broadcast::error::RecvError::Closed) => None,
            },
            _ = self.keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
        }
    }
}

/// One SSE frame. The JSON is on one line, so one `data:` field carries it.
fn frame(name: &str, json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + json.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}
