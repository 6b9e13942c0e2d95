//! Per-scenario state: the parsed plan, how many requests it has served (which picks the next
//! step), and the last request as received, for tests that assert what a gateway sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::HeaderMap;
use serde_json::{Map, Value, json};

use crate::scenario::{Action, Plan, ScenarioError};

/// The endpoint a request was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    ChatCompletions,
    Messages,
    /// Anthropic's `messages/count_tokens`.
    CountTokens,
    /// OpenAI's Responses API.
    Responses,
    Embeddings,
}

impl Endpoint {
    fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Messages => "/v1/messages",
            Endpoint::CountTokens => "/v1/messages/count_tokens",
            Endpoint::Responses => "/v1/responses",
            Endpoint::Embeddings => "/v1/embeddings",
        }
    }
}

/// All scenarios seen since start or the last reset. One per `serve` call, shared by its
/// connections.
#[derive(Default)]
pub(crate) struct Registry {
    scenarios: Mutex<HashMap<Box<str>, Entry>>,
    /// Requests currently held by `hang` or a `stall`ed stream, so tests can see them released
    /// when clients leave.
    hanging: Arc<AtomicUsize>,
    /// Connections accepted (and, behind TLS, through their handshake), so tests can see
    /// whether a client reuses its connections.
    connections: AtomicUsize,
}

struct Entry {
    plan: Arc<Plan>,
    requests: u64,
    /// When the scenario's first request arrived (its clock, for `down=D`).
    first: Instant,
    last: Option<LastRequest>,
}

struct LastRequest {
    endpoint: Endpoint,
    method: hyper::Method,
    headers: HeaderMap,
    body: Bytes,
}

/// Counts one held request (`hang`, a stalled stream) for as long as it is held.
pub(crate) struct HangGuard(Arc<AtomicUsize>);

impl Drop for HangGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Registry {
    /// Counts a request against `scenario`, keeps it as the scenario's last request, and returns
    /// the action it gets and how long ago the scenario's first request arrived. The headers
    /// and body are moved in, not copied.
    pub(crate) fn record(
        &self,
        scenario: &str,
        endpoint: Endpoint,
        method: hyper::Method,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(Action, Duration), ScenarioError> {
        let last = Some(LastRequest { endpoint, method, headers, body });
        let mut scenarios = self.scenarios.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = match scenarios.get_mut(scenario) {
            Some(entry) => entry,
            None => {
                let plan = Arc::new(Plan::parse(scenario)?);
                let entry = Entry { plan, requests: 0, first: Instant::now(), last: None };
                scenarios.entry(scenario.into()).or_insert(entry)
            }
        };
        let action = entry.plan.action_at(entry.requests).clone();
        let since_first = entry.first.elapsed();
        entry.requests += 1;
        let previous = std::mem::replace(&mut entry.last, last);
        drop(scenarios);
        // Freed outside the lock: a previous multi-megabyte body should not stall other requests.
        drop(previous);
        Ok((action, since_first))
    }

    /// Forgets every scenario: counters restart at the first step.
    pub(crate) fn reset(&self) {
        let old = std::mem::take(&mut *self.scenarios.lock().unwrap_or_else(PoisonError::into_inner));
        drop(old);
    }

    /// Counts one accepted connection.
    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks a request as hanging until the guard is dropped.
    pub(crate) fn hang(&self) -> HangGuard {
        self.hanging.fetch_add(1, Ordering::Relaxed);
        HangGuard(Arc::clone(&self.hanging))
    }

    /// The `/_stats` document:
    ///
    /// ```json
    /// {"requests": 3, "hanging": 0, "connections": 1,
    ///  "scenarios": {"fail500,ok": {"requests": 3, "last_request": {
    ///     "method": "POST", "path": "/v1/chat/completions",
    ///     "headers": {"authorization": "Bearer k1", ...},
    ///     "body": "{\"model\":...}", "json": {"model": ...}}}}}
    /// ```
    ///
    /// Header values repeated under one name are joined with `", "`. `body` is the raw text
    /// (lossy UTF-8) and `json` its parse, or null when it is not JSON.
    pub(crate) fn stats(&self) -> Value {
        let scenarios = self.scenarios.lock().unwrap_or_else(PoisonError::into_inner);
        let mut total = 0;
        let mut out = Map::new();
        for (name, entry) in scenarios.iter() {
            total += entry.requests;
            let last = entry.last.as_ref().map_or(Value::Null, LastRequest::to_json);
            out.insert(name.to_string(), json!({"requests": entry.requests, "last_request": last}));
        }
        json!({
            "requests": total,
            "hanging": self.hanging.load(Ordering::Relaxed),
            "connections": self.connections.load(Ordering::Relaxed),
            "scenarios": out,
        })
    }
}

impl LastRequest {
    fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for name in self.headers.keys() {
            let values: Vec<String> = self
                .headers
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect();
            headers.insert(name.as_str().to_owned(), Value::String(values.join(", ")));
        }
        json!({
            "method": self.method.as_str(),
            "path": self.endpoint.path(),
            "headers": headers,
            "body": String::from_utf8_lossy(&self.body),
            "json": serde_json::from_slice::<Value>(&self.body).unwrap_or(Value::Null),
        })
    }
}
