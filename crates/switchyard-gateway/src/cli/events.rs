//! `switchyard events`: a running gateway's events, one line each, in the order they happened.
//! It follows the gateway through restarts: when the stream drops it says so once, reconnects
//! with a bounded backoff, and says so once more when the stream is back. Ctrl-C ends it.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use super::admin_get;
use super::text::ms_text;
use super::{gateway_url, refused};

/// The first wait before reconnecting, doubled after each failed try up to [`MOST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two tries: a restarted gateway is followed within this.
const MOST_WAIT: Duration = Duration::from_secs(5);

/// Follows the events at `path` (`/admin/events`, or with `?scope=fleet` the fleet's).
pub(crate) async fn events(
    url: &str,
    key: Option<String>,
    json: bool,
    path: &str,
) -> anyhow::Result<ExitCode> {
    let url = gateway_url(url);
    let follow = async {
        // The first connection must work: a wrong address or key is said at once.
        let mut response = connect(&url, path, key.clone()).await.map_err(|failure| failure.error)?;
        loop {
            let why = match relay(response, json).await {
                Relayed::OutputClosed => return Ok(ExitCode::SUCCESS),
                Relayed::Ended(why) => why,
            };
            eprintln!("switchyard: the event stream from {url} dropped ({why}); reconnecting");
            response = reconnect(&url, path, &key).await?;
            eprintln!("switchyard: the event stream from {url} is back");
        }
    };
    tokio::select! {
        result = follow => result,
        _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
    }
}

/// Why a connection attempt failed, and whether trying again can help.
struct Failure {
    error: anyhow::Error,
    /// The gateway refused the key (it will again), as opposed to not answering yet.
    refused: bool,
}

/// Opens the event stream.
async fn connect(url: &str, path: &str, key: Option<String>) -> Result<reqwest::Response, Failure> {
    let sent = key.is_some();
    let response = admin_get(url, path, key).await.map_err(|error| Failure { error, refused: false })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let bytes = response.bytes().await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let refused_key = status == reqwest::StatusCode::UNAUTHORIZED;
    Err(Failure { error: refused(status, &body, sent), refused: refused_key })
}

/// Tries again until the stream opens, waiting longer after each failure (never longer than
/// [`MOST_WAIT`]); a refused key ends it.
async fn reconnect(url: &str, path: &str, key: &Option<String>) -> anyhow::Result<reqwest::Response> {
    let mut wait = FIRST_WAIT;
    loop {
        tokio::time::sleep(wait).await;
        match connect(url, path, key.clone()).await {
            Ok(response) => return Ok(response),
            Err(failure) if failure.refused => return Err(failure.error),
            Err(_) => wait = (wait * 2).min(MOST_WAIT),
        }
    }
}

/// How a stream's relay ended.
enum Relayed {
    /// Nobody reads the output any more (`events | head`).
    OutputClosed,
    /// The stream ended or broke, for this reason.
    Ended(String),
}

/// Prints each event of `response` as it comes, until the stream ends.
async fn relay(mut response: reqwest::Response, json: bool) -> Relayed {
    let mut buffer: Vec<u8> = Vec::new();
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = match response.chunk().await.context("the stream broke off") {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Relayed::Ended("the gateway closed it".to_owned()),
            Err(error) => return Relayed::Ended(format!("{error:#}")),
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            let Some(data) = text.lines().find_map(|line| line.strip_prefix("data: ")) else { continue };
            let line = if json { data.to_owned() } else { event_line(data) };
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return Relayed::OutputClosed;
            }
        }
    }
}

/// One event as a line for a person: time, name, then its fields as `key=value`, durations
/// (`*_ms`) with their unit and numbers rounded.
fn event_line(data: &str) -> String {
    let Ok(Value::Object(event)) = serde_json::from_str::<Value>(data) else {
        return data.to_owned();
    };
    let name = event.get("event").and_then(Value::as_str).unwrap_or("event");
    // A finished request's `time_ms` is when it arrived (as `/admin/requests` lists it); its
    // line is stamped when it finished, after the events it caused, as every other event is.
    let time = event
        .get("finished_ms")
        .or_else(|| event.get("time_ms"))
        .and_then(Value::as_u64)
        .map(|ms| switchyard_gateway::logging::rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(ms)))
        .unwrap_or_default();
    let mut line = format!("{time} {name:<20}");
    for (field, value) in &event {
        if ["event", "time_ms", "time", "finished_ms"].contains(&field.as_str()) || value.is_null() {
            continue;
        }
        let (field, value) = match (field.strip_suffix("_ms"), value.as_f64()) {
            (Some(duration), Some(ms)) => (duration, ms_text(ms)),
            _ => (field.as_str(), field_text(field, value)),
        };
        line.push_str(&format!(" {field}={value}"));
    }
    line
}

/// A field's value as text: strings bare, an error as `kind status "detail"`, numbers rounded.
fn field_text(field: &str, value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Object(object) if field == "error" => {
            let part = |name: &str| object.get(name).map(|v| v.to_string().trim_matches('"').to_owned());
            [part("kind"), part("status"), part("detail").map(|d| format!("{d:?}"))]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ")
        }
        Value::Number(number) if number.is_f64() => {
            let x = number.as_f64().unwrap_or_default();
            if x.abs() >= 100.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.3}").trim_end_matches('0').trim_end_matches('.').to_owned()
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_carry_their_unit_and_numbers_are_rounded() {
        let line = event_line(
            r#"{"event":"request_finished","time_ms":0,"duration_ms":96.28731,"first_token_ms":0.41,"attempts":1,"share":0.123456,"ratio":2.0}"#,
        );
        assert!(line.contains(" duration=96.3 ms "), "{line}");
        assert!(line.contains(" first_token=0.4 ms "), "{line}");
        assert!(line.contains(" attempts=1 "), "{line}");
        assert!(line.ends_with(" share=0.123 ratio=2"), "{line}");
        let opened = event_line(r#"{"event":"circuit_opened","time_ms":0,"open_for_ms":30000.0}"#);
        assert!(opened.ends_with(" open_for=30 s"), "{opened}");
    }

    #[test]
    fn a_finished_request_is_stamped_when_it_finished() {
        let line = event_line(
            r#"{"event":"request_finished","time_ms":1000,"finished_ms":1250,"duration_ms":250.4}"#,
        );
        assert!(line.starts_with("1970-01-01T00:00:01.250000Z request_finished "), "{line}");
    }
}
