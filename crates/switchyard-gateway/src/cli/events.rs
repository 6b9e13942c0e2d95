//! `switchyard events`: a running gateway's events, one line each.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};

use super::admin_get;

pub(crate) async fn events(url: &str, key: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let response = admin_get(url, "/admin/events", key).await?;
    let status = response.status();
    if !status.is_success() {
        let bytes = response.bytes().await.unwrap_or_default();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        bail!("the gateway answered {status}: {}", body["error"]["message"].as_str().unwrap_or_default());
    }
    let mut response = response;
    let mut buffer: Vec<u8> = Vec::new();
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = response.chunk().await.context("the event stream broke off")? {
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            let Some(data) = text.lines().find_map(|line| line.strip_prefix("data: ")) else { continue };
            let line = if json { data.to_owned() } else { event_line(data) };
            // A closed stdout (`events | head`) ends the tail.
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    eprintln!("switchyard: the gateway closed the event stream");
    Ok(ExitCode::SUCCESS)
}

/// One event as a line for a person: time, name, then its fields as `key=value`.
fn event_line(data: &str) -> String {
    let Ok(serde_json::Value::Object(event)) = serde_json::from_str::<serde_json::Value>(data) else {
        return data.to_owned();
    };
    let time = event
        .get("time_ms")
        .and_then(serde_json::Value::as_u64)
        .map(|ms| switchyard_gateway::logging::rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(ms)))
        .unwrap_or_default();
    let name = event.get("event").and_then(serde_json::Value::as_str).unwrap_or("event");
    let mut line = format!("{time} {name:<20}");
    for (field, value) in &event {
        if field == "event" || field == "time_ms" || field == "time" || value.is_null() {
            continue;
        }
        let value = match value {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Object(object) if field == "error" => {
                let part = |name: &str| object.get(name).map(|v| v.to_string().trim_matches('"').to_owned());
                [part("kind"), part("status"), part("detail").map(|d| format!("{d:?}"))]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            other => other.to_string(),
        };
        line.push_str(&format!(" {field}={value}"));
    }
    line
}
