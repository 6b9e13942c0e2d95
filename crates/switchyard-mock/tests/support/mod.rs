//! The mock as a client sees it: a running mock, a client that never goes through a proxy, and
//! readers of its answers and streams. Shared by every test file of the crate.

#![allow(clippy::unwrap_used, dead_code)]

use std::time::{Duration, Instant};

pub use reqwest::StatusCode;
pub use serde_json::{Value, json};

pub const CHAT: &str = "v1/chat/completions";
pub const MESSAGES: &str = "v1/messages";

/// A running mock and a client that never goes through a proxy.
pub struct Mock {
    pub base: String,
    pub addr: std::net::SocketAddr,
    pub client: reqwest::Client,
}

/// What came back from one request.
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap_or_else(|| panic!("no {name} header")).to_str().unwrap()
    }
}

/// One SSE event: its `event:` name (if any), its data, and when it arrived.
#[derive(Debug)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
    pub at: Instant,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }
}

/// A streamed answer read to its end: the events, and whether the body ended cleanly.
pub struct Stream {
    pub status: StatusCode,
    pub events: Vec<Event>,
    pub clean_end: bool,
    pub trailing: String,
}

impl Mock {
    pub async fn start() -> Mock {
        let (addr, _task) = switchyard_mock::spawn().await.unwrap();
        let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().unwrap();
        Mock { base: format!("http://{addr}"), addr, client }
    }

    pub fn url(&self, scenario: &str, endpoint: &str) -> String {
        format!("{}/{scenario}/{endpoint}", self.base)
    }

    pub async fn post_url(&self, url: &str, body: &Value) -> Reply {
        let response = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("authorization", "Bearer sk-test")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap();
        Reply { status, headers, body }
    }

    pub async fn post(&self, scenario: &str, endpoint: &str, body: &Value) -> Reply {
        self.post_url(&self.url(scenario, endpoint), body).await
    }

    /// Posts a request and reads the SSE answer chunk by chunk, timestamping each event as it
    /// arrives.
    pub async fn stream(&self, scenario: &str, endpoint: &str, body: &Value) -> Stream {
        let mut response = self
            .client
            .post(self.url(scenario, endpoint))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let mut buffer = String::new();
        let mut events = Vec::new();
        let clean_end = loop {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    let at = Instant::now();
                    buffer.push_str(std::str::from_utf8(&bytes).unwrap());
                    while let Some(end) = buffer.find("\n\n") {
                        let block: String = buffer.drain(..end + 2).collect();
                        events.push(parse_event(&block, at));
                    }
                }
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        Stream { status, events, clean_end, trailing: buffer }
    }

    /// Requests the mock is currently holding with `hang`.
    pub async fn hanging(&self) -> u64 {
        self.stats().await["hanging"].as_u64().unwrap()
    }

    pub async fn stats(&self) -> Value {
        let response = self.client.get(format!("{}/_stats", self.base)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        serde_json::from_str(&response.text().await.unwrap()).unwrap()
    }
}

pub fn parse_event(block: &str, at: Instant) -> Event {
    let mut name = None;
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event: ") {
            name = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("data: ") {
            data.push(value);
        }
    }
    Event { name, data: data.join("\n"), at }
}

pub fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn chat_stream(model: &str, include_usage: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": true,
           "stream_options": {"include_usage": include_usage}})
}

pub fn messages(model: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn messages_stream(model: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "stream": true})
}

/// The data of OpenAI chunks with a non-empty `choices`, as JSON.
pub fn openai_chunks(stream: &Stream) -> Vec<Value> {
    stream.events.iter().filter(|e| e.data != "[DONE]").map(Event::json).collect()
}

pub fn openai_text(stream: &Stream) -> String {
    openai_chunks(stream)
        .iter()
        .filter_map(|c| {
            c["choices"].get(0).and_then(|choice| choice["delta"]["content"].as_str()).map(str::to_owned)
        })
        .collect()
}

/// The events carrying answer content: Anthropic `content_block_delta`s, OpenAI chunks whose
/// delta is a non-empty `content` (not the role chunk).
pub fn content_events(stream: &Stream) -> Vec<&Event> {
    stream
        .events
        .iter()
        .filter(|e| match e.name.as_deref() {
            Some(name) => name == "content_block_delta",
            None if e.data == "[DONE]" => false,
            None => e.json()["choices"][0]["delta"]["content"].as_str().is_some_and(|c| !c.is_empty()),
        })
        .collect()
}

pub fn anthropic_names(stream: &Stream) -> Vec<&str> {
    stream.events.iter().map(|e| e.name.as_deref().unwrap()).collect()
}

/// The concatenated `field` of the `content_block_delta`s that carry it.
pub fn anthropic_deltas(stream: &Stream, field: &str) -> String {
    stream
        .events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .filter_map(|e| e.json()["delta"][field].as_str().map(str::to_owned))
        .collect()
}

pub fn assert_openai_error(reply: &Reply, status: u16, kind: &str, code: Option<&str>) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.body);
    let error = &reply.json()["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", reply.body);
    assert_eq!(error["type"], kind, "{}", reply.body);
    assert!(error.get("param").is_some(), "{}", reply.body);
    assert_eq!(error["code"], code.map_or(Value::Null, Value::from), "{}", reply.body);
}

pub fn assert_anthropic_error(reply: &Reply, status: u16, kind: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["type"], "error", "{}", reply.body);
    assert_eq!(body["error"]["type"], kind, "{}", reply.body);
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", reply.body);
}
