//! `GET /admin/events?scope=fleet`: every replica's events, through the fleet's stream in Redis
//! ([`SharedEvents`](switchyard_state::feed::SharedEvents)), in the order Redis received them,
//! each naming its replica. With `recent=N` it opens with the fleet's last N. When Redis stops
//! answering, a `fleet_unavailable` event says why and the stream ends (`switchyard events`
//! reconnects).

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use switchyard::chat::Dialect;
use switchyard_state::feed::{EventReader, FleetEvent};
use tokio::sync::watch;

use super::errors::ApiError;
use super::events::{KEEP_ALIVE, event_stream, frame};
use super::state::AppState;

/// The stream of the fleet's events, or why there is none.
pub(super) async fn stream(state: &AppState, recent: usize) -> Response {
    let Some(trails) = state.trails.get() else {
        let message = "scope=fleet needs shared state (`state.redis`), or this replica keeps no trails (`gateway.recent_requests: 0`): without them, /admin/events is this replica's";
        return ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
            .into_response(Dialect::OpenAi, "");
    };
    let unavailable = |reason: String| {
        let message = format!("the fleet's events cannot be read: {reason}");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "fleet_unavailable", message)
            .into_response(Dialect::OpenAi, "")
    };
    let mut reader = match trails.events().reader().await {
        Ok(reader) => reader,
        Err(reason) => return unavailable(reason),
    };
    let (replay, from) = match reader.recent(recent).await {
        Ok(found) => found,
        Err(reason) => return unavailable(reason),
    };
    let mut opening = b"retry: 2000\n: switchyard fleet events\n\n".to_vec();
    for event in &replay {
        opening.extend_from_slice(&frame(&event.name, &event.json));
    }
    let follow =
        Follow { reader, last: from, stopping: state.stop_signal(), opening: Some(opening), done: false };
    let body = futures_util::stream::unfold(follow, |mut follow| async move {
        let frame = follow.next().await?;
        Some((Ok::<_, std::convert::Infallible>(frame), follow))
    });
    event_stream(Body::from_stream(body))
}

/// A subscriber's place in the fleet's stream.
struct Follow {
    reader: EventReader,
    /// The id of the last event sent: the next read starts after it.
    last: String,
    stopping: watch::Receiver<bool>,
    /// The first frame (the replayed events), until it is sent.
    opening: Option<Vec<u8>>,
    /// The stream has said why it ends.
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(opening) = self.opening.take() {
            return Some(opening.into());
        }
        if self.done {
            return None;
        }
        let stopping = &mut self.stopping;
        let stopped = async move {
            if stopping.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let read = tokio::time::timeout(KEEP_ALIVE, self.reader.after(&self.last));
        tokio::select! {
            biased;
            () = stopped => None,
            read = read => Some(match read {
                Ok(Ok(events)) if events.is_empty() => Bytes::from_static(b": keep-alive\n\n"),
                Ok(Ok(events)) => self.frames(&events),
                Ok(Err(reason)) => self.unavailable(reason),
                Err(_) => self.unavailable("Redis did not answer in time".to_owned()),
            }),
        }
    }

    fn frames(&mut self, events: &[FleetEvent]) -> Bytes {
        let mut out = Vec::new();
        for event in events {
            out.extend_from_slice(&frame(&event.name, &event.json));
        }
        if let Some(last) = events.last() {
            self.last = last.id.clone();
        }
        out.into()
    }

    fn unavailable(&mut self, reason: String) -> Bytes {
        self.done = true;
        let json = json!({ "event": "fleet_unavailable", "reason": reason }).to_string();
        frame("fleet_unavailable", &json).into()
    }
}
