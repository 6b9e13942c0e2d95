//! `GET /admin/events?scope=fleet`: every replica's events, through the fleet's stream in Redis
//! ([`SharedEvents`](switchyard_state::feed::SharedEvents)), in the order Redis received them,
//! each naming its replica. With `recent=N` it opens with the fleet's last N. When Redis stops
//! answering, a `fleet_unavailable` event says why and the stream ends (`switchyard events`
//! reconnects).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use switchyard::chat::Dialect;
use switchyard_state::feed::{EventReader, FleetEvent};
use tokio::sync::watch;

use super::errors::ApiError;
use super::events::{Access, KEEP_ALIVE, event_stream, frame, shown_to};
use super::state::AppState;

/// The stream of the fleet's events, or why there is none.
/// `watcher` is the client key it is read with, when not the admin's: only its own requests'
/// `request_finished` are shown.
pub(super) async fn stream(state: &AppState, recent: usize, access: Access) -> Response {
    let watcher = access.reader();
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
    for event in replay.iter().filter(|event| shown(watcher.as_deref(), event)) {
        opening.extend_from_slice(&frame(&event.name, &event.json));
    }
    let follow = Follow {
        reader,
        watcher,
        last: from,
        stopping: state.stop_signal(),
        opening: Some(opening),
        done: false,
    };
    let body = futures_util::stream::unfold(follow, |mut follow| async move {
        let frame = follow.next().await?;
        Some((Ok::<_, std::convert::Infallible>(frame), follow))
    });
    event_stream(Body::from_stream(access.ending(body)))
}

/// Whether `event` is shown to `watcher`: a `request_finished` only to the admin and its key.
fn shown(watcher: Option<&str>, event: &FleetEvent) -> bool {
    if watcher.is_none() || event.name != "request_finished" {
        return true;
    }
    let key =
        serde_json::from_str::<serde_json::Value>(&event.json).ok().and_then(|json| match &json["key"] {
            serde_json::Value::String(key) => Some(key.clone()),
            _ => None,
        });
    shown_to(watcher, key.as_deref())
}

/// A subscriber's place in the fleet's stream.
struct Follow {
    reader: EventReader,
    /// The client key it is read with, when not the admin's.
    watcher: Option<Arc<str>>,
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
        for event in events.iter().filter(|event| shown(self.watcher.as_deref(), event)) {
            out.extend_from_slice(&frame(&event.name, &event.json));
        }
        if let Some(last) = events.last() {
            self.last = last.id.clone();
        }
        if out.is_empty() {
            return Bytes::from_static(b": keep-alive\n\n");
        }
        out.into()
    }

    fn unavailable(&mut self, reason: String) -> Bytes {
        self.done = true;
        let json = json!({ "event": "fleet_unavailable", "reason": reason }).to_string();
        frame("fleet_unavailable", &json).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, json: &str) -> FleetEvent {
        FleetEvent { id: "1-0".to_owned(), name: name.to_owned(), json: json.to_owned() }
    }

    #[test]
    fn a_client_key_is_shown_its_own_finished_requests_and_every_router_event() {
        let team = event("request_finished", r#"{"request_id":"a","key":"team"}"#);
        let other = event("request_finished", r#"{"request_id":"b","key":"other"}"#);
        let keyless = event("request_finished", r#"{"request_id":"c","key":null}"#);
        let circuit = event("circuit_opened", r#"{"target":"up:m"}"#);
        let shown_to_team: Vec<bool> =
            [&team, &other, &keyless, &circuit].iter().map(|e| shown(Some("team"), e)).collect();
        assert_eq!(shown_to_team, [true, false, false, true]);
        assert!([&team, &other, &keyless, &circuit].iter().all(|e| shown(None, e)), "the admin sees all");
    }
}
