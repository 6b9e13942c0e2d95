//! `GET /admin/events`: the router's typed events, and each finished request, as Server-Sent
//! Events, for `switchyard events` and the operator page.
//!
//! Every frame is `event: <name>` with one JSON object as `data` (the object's `event` member
//! repeats the name). A subscriber that falls behind loses the oldest events and is told how
//! many in a `missed` event; routing never waits for it. A comment every 15 s keeps idle
//! proxies from closing the stream; it ends when the gateway shuts down.
//!
//! Frames come in the order things happened: a request's `request_finished` after the events
//! it caused. With `?recent=N` the stream opens with the last N router events the gateway
//! kept (at most [`HISTORY`]), so that a page opened after an incident shows it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use switchyard::Router;
use switchyard::events::{Event, Subscription};
use tokio::sync::{broadcast, watch};

use super::admin::admin_reader;
use switchyard::chat::Dialect;

use super::auth::admin_unauthorized;
use super::errors::ApiError;
use super::state::AppState;
use crate::recent::RequestRecord;

pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How many of the router's recent events the gateway keeps for a new subscriber
/// (`?recent=N`): as many as the operator page shows.
pub const HISTORY: usize = 200;

/// What `/admin/events` serves beside the router's live bus: each finished request, rendered
/// for subscribers only when there are some (a gateway nobody watches pays one atomic load
/// per request), and the router's recent events, so that a new subscriber (the operator page
/// opening) starts with what just happened.
#[derive(Debug)]
pub struct RequestFeed {
    sender: broadcast::Sender<Finished>,
    history: Mutex<History>,
}

/// A finished request's `request_finished` line, with the client key it came with: a reader
/// who reads `/admin/*` with a client key (there being no `admin_key`) sees only its own.
#[derive(Debug, Clone)]
pub struct Finished {
    key: Option<Arc<str>>,
    json: Arc<str>,
}

/// The router's recent events: a subscription of its own, read only when someone asks. The
/// bus keeps what it has not read (and drops the oldest past its capacity, which is what a
/// history wants), so keeping it costs nothing on the request path but publishing events
/// that nobody else listens to (events mark failures and changes, not every request).
#[derive(Debug)]
struct History {
    unread: Subscription,
    kept: VecDeque<Arc<Event>>,
}

impl RequestFeed {
    /// A feed that keeps `router`'s events from now on.
    pub fn new(router: &Router) -> Self {
        let history = History { unread: router.subscribe(), kept: VecDeque::with_capacity(HISTORY) };
        Self { sender: broadcast::channel(256).0, history: Mutex::new(history) }
    }

    /// `record`'s `request_finished` line, when someone listens.
    pub fn render(&self, record: &RequestRecord) -> Option<Finished> {
        if self.sender.receiver_count() == 0 {
            return None;
        }
        let mut json = serde_json::to_value(record.summary()).ok()?;
        json["event"] = "request_finished".into();
        // `time_ms` is when the request arrived, as `/admin/requests` lists it; the event also
        // says when it finished, on the clock of every other event's `time_ms`.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        json["finished_ms"] = (now.as_millis() as u64).into();
        Some(Finished { key: record.key.clone(), json: json.to_string().into() })
    }

    /// Tells every subscriber a request finished.
    pub fn send(&self, line: Option<Finished>) {
        if let Some(line) = line {
            let _ = self.sender.send(line);
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Finished> {
        self.sender.subscribe()
    }

    /// A new subscription to `router`'s events and the `recent` events before it, oldest
    /// first. The subscription is made under the history's lock, before the history reads
    /// what it has not read: nothing falls between the two, and what both hold (published in
    /// between) is the history's tail, which [`Feed`] skips on the live side.
    fn follow(&self, router: &Router, recent: usize) -> (Subscription, Vec<Arc<Event>>) {
        let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let live = router.subscribe();
        while let Some(event) = history.unread.try_recv() {
            if history.kept.len() == HISTORY {
                history.kept.pop_front();
            }
            history.kept.push_back(event);
        }
        let skip = history.kept.len().saturating_sub(recent);
        (live, history.kept.iter().skip(skip).cloned().collect())
    }
}

/// `GET /admin/events[?recent=N]`: the stream; with `recent`, it opens with the last N router
/// events the gateway kept (at most [`HISTORY`]).
pub async fn stream(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let Ok(reader) = admin_reader(&state, &headers) else {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    };
    let access = Access { state: state.clone(), headers, reader: reader.clone() };
    let (recent, fleet) = match parameters(&query) {
        Ok(asked) => asked,
        Err(message) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
                .into_response(Dialect::OpenAi, "");
        }
    };
    if fleet {
        return super::fleet_events::stream(&state, recent, access).await;
    }
    let (events, replay) = state.feed.follow(&state.live().router, recent);
    let feed = Feed {
        events,
        requests: state.feed.subscribe(),
        reader,
        stopping: state.stop_signal(),
        keep_alive: tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        missed: 0,
        opened: false,
        replay,
        replayed: Vec::new(),
    };
    let body = futures_util::stream::unfold(feed, |mut feed| async move {
        let frame = feed.next().await?;
        Some((Ok::<_, std::convert::Infallible>(frame), feed))
    });
    event_stream(Body::from_stream(access.ending(body)))
}

/// Who reads a stream of `/admin/events`, asked again before each frame: a reload that
/// rotates the admin key, or removes the client key it was opened with, ends the streams that
/// key opened (within a keep-alive, [`KEEP_ALIVE`], when nothing happens).
pub(super) struct Access {
    state: Arc<AppState>,
    headers: HeaderMap,
    reader: Option<Arc<str>>,
}

impl Access {
    /// Whether the stream's key still reads `/admin/*` as it did.
    fn still(&self) -> bool {
        admin_reader(&self.state, &self.headers).is_ok_and(|reader| reader == self.reader)
    }

    /// Who reads: the client key, when not the admin's.
    pub(super) fn reader(&self) -> Option<Arc<str>> {
        self.reader.clone()
    }

    /// `frames`, until the key they were opened with no longer reads them.
    pub(super) fn ending<S>(self, frames: S) -> impl futures_util::Stream<Item = S::Item> + Send + 'static
    where
        S: futures_util::Stream + Send + 'static,
        S::Item: Send,
    {
        use futures_util::StreamExt;
        frames.take_while(move |_| std::future::ready(self.still()))
    }
}

/// `recent` and whether the fleet's events are asked for (`scope=fleet`).
fn parameters(query: &[(String, String)]) -> Result<(usize, bool), String> {
    let (mut recent, mut fleet) = (0, false);
    for (name, value) in query {
        match (name.as_str(), value.parse::<usize>()) {
            ("recent", Ok(n)) if n <= HISTORY => recent = n,
            ("recent", _) => {
                return Err(format!("recent `{value}` is not a whole number from 0 to {HISTORY}"));
            }
            ("scope", _) => match value.as_str() {
                "fleet" => fleet = true,
                "replica" => fleet = false,
                other => return Err(format!("scope `{other}` is not `fleet` or `replica`")),
            },
            (other, _) => return Err(format!("unknown parameter `{other}`: `recent` and `scope` are taken")),
        }
    }
    Ok((recent, fleet))
}

/// A response of server-sent events with `body`.
pub(super) fn event_stream(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies in front (nginx) must not buffer a stream that is all small frames.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

struct Feed {
    events: Subscription,
    requests: broadcast::Receiver<Finished>,
    /// The client key it is read with, when not the admin's: only its requests are shown.
    reader: Option<Arc<str>>,
    stopping: watch::Receiver<bool>,
    keep_alive: tokio::time::Interval,
    /// Router events lost so far and already reported.
    missed: u64,
    opened: bool,
    /// The recent events to send first.
    replay: Vec<Arc<Event>>,
    /// The replayed events the live subscription may hold too (published while it was
    /// made), skipped there.
    replayed: Vec<Arc<Event>>,
}

impl Feed {
    /// The next frame; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        if !self.opened {
            self.opened = true;
            // At once, so the subscriber knows the stream is live before anything happens.
            let mut out = b"retry: 2000\n: switchyard events\n\n".to_vec();
            for event in &self.replay {
                out.extend_from_slice(&frame(event.kind.name(), &serde_json::to_string(&**event).ok()?));
            }
            self.replayed = std::mem::take(&mut self.replay);
            return Some(out.into());
        }
        loop {
            let stopping = &mut self.stopping;
            let stopped = async move {
                // A gateway without a stop signal (its sender gone) runs until dropped.
                if stopping.wait_for(|stop| *stop).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let mut out = Vec::new();
            tokio::select! {
                biased;
                () = stopped => return None,
                event = self.events.recv() => self.event_frame(&event?, &mut out),
                line = self.requests.recv() => match line {
                    Ok(line) if !shown_to(self.reader.as_deref(), line.key.as_deref()) => {}
                    Ok(Finished { json, .. }) => {
                        // A request's events were published before it finished, but on
                        // another channel: any still unread here go first, so that the stream
                        // never shows a request ending before what it caused.
                        while let Some(event) = self.events.try_recv() {
                            self.event_frame(&event, &mut out);
                        }
                        out.extend_from_slice(&frame("request_finished", &json));
                    }
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        out = frame("missed", &format!("{{\"event\":\"missed\",\"missed\":{lost}}}"));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.keep_alive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
            }
            // Empty when the event was one the replay already sent.
            if !out.is_empty() {
                return Some(out.into());
            }
        }
    }

    /// Appends `event`'s frame to `out`, after a `missed` frame when events were lost since
    /// the last one; nothing for an event the replay already sent.
    fn event_frame(&mut self, event: &Arc<Event>, out: &mut Vec<u8>) {
        if !self.replayed.is_empty() {
            if let Some(at) = self.replayed.iter().position(|sent| Arc::ptr_eq(sent, event)) {
                self.replayed.remove(at);
                return;
            }
            // Past the overlap: nothing later can be a replayed event.
            self.replayed.clear();
        }
        let missed = self.events.missed();
        if missed > self.missed {
            let lost = missed - self.missed;
            self.missed = missed;
            out.extend_from_slice(&frame("missed", &format!("{{\"event\":\"missed\",\"missed\":{lost}}}")));
        }
        if let Ok(json) = serde_json::to_string(&**event) {
            out.extend_from_slice(&frame(event.kind.name(), &json));
        }
    }
}

/// Whether a request of `key` is shown to `reader`: every request to the admin (`None`), its
/// own to a client key.
pub(super) fn shown_to(reader: Option<&str>, key: Option<&str>) -> bool {
    reader.is_none_or(|reader| key == Some(reader))
}

/// One SSE frame. The JSON is on one line, so one `data:` field carries it.
pub(super) fn frame(name: &str, json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + json.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}
