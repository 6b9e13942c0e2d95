//! `switchyard health`: a running gateway's health table.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

use super::text::{counted, ms_text};
use super::{admin_get, gateway_url, refused};

pub(crate) async fn health(url: &str, key: Option<String>) -> anyhow::Result<ExitCode> {
    let url = gateway_url(url);
    let sent = key.is_some();
    let response = admin_get(&url, "/admin/health", key).await?;
    let status = response.status();
    let bytes = response.bytes().await.context("the gateway's answer broke off")?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if !status.is_success() {
        return Err(refused(status, &body, sent));
    }
    if !body.is_object() {
        bail!("the gateway at {url} answered /admin/health with something that is not JSON");
    }
    println!("{}", shared_state_line(&body["shared_state"]));
    for line in config_lines(&body["config"]) {
        println!("{line}");
    }
    println!();
    print_targets(&body);
    print_credentials(&body);
    print_pacing(&body);
    Ok(ExitCode::SUCCESS)
}

/// `shared state: redis ok, 3 replicas: a, b, c`.
fn shared_state_line(shared: &Value) -> String {
    let mut line = format!(
        "shared state: {} {}",
        shared["backend"].as_str().unwrap_or("memory"),
        shared["status"].as_str().unwrap_or("ok")
    );
    if let Some(reason) = shared["reason"].as_str() {
        line.push_str(&format!(" ({reason})"));
    }
    if let Some(replicas) = shared["replicas"].as_array() {
        let ids: Vec<&str> = replicas.iter().filter_map(|r| r["id"].as_str()).collect();
        line.push_str(&format!(", {}: {}", counted(ids.len(), "replica"), ids.join(", ")));
    }
    line
}

/// `config: 3f2a… loaded 2026-…Z`, what awaits a restart, the last file refused, and, with
/// shared state, whether the fleet runs the same configuration (each replica's hash when not).
fn config_lines(config: &Value) -> Vec<String> {
    let Some(hash) = config["hash"].as_str() else { return Vec::new() };
    let mut lines = vec![format!("config: {hash} loaded {}", config["loaded_at"].as_str().unwrap_or("-"))];
    let restart: Vec<&str> =
        config["restart_required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if !restart.is_empty() {
        lines.push(format!("  changed, applies at the next restart: {}", restart.join(", ")));
    }
    if let Some(error) = config["last_error"].as_object() {
        lines.push(format!(
            "  last reload rejected at {} (the running configuration stays):",
            error.get("at").and_then(Value::as_str).unwrap_or("-")
        ));
        for problem in error.get("problems").and_then(Value::as_array).into_iter().flatten() {
            lines.push(format!(
                "    {}: {}",
                problem["path"].as_str().unwrap_or_default(),
                problem["message"].as_str().unwrap_or_default()
            ));
        }
    }
    let fleet = &config["fleet"];
    match fleet["agrees"].as_bool() {
        Some(true) => lines.push("  every replica runs this configuration".to_owned()),
        Some(false) => {
            lines.push("  the fleet disagrees: its replicas run different configurations:".to_owned());
            for replica in fleet["replicas"].as_array().into_iter().flatten() {
                let hash = replica["hash"].as_str().filter(|h| !h.is_empty()).unwrap_or("(not said)");
                lines.push(format!("    {} {hash}", replica["replica"].as_str().unwrap_or_default()));
            }
        }
        None => {}
    }
    lines
}

/// Every configured target (`unknown` until first called), with its breaker and latency.
fn print_targets(body: &Value) {
    println!(
        "{:<36} {:<24} {:<10} {:>8} {:>20}  reason",
        "target", "status", "breaker", "failures", "p50/p95/p99 ms"
    );
    for target in body["targets"].as_array().into_iter().flatten() {
        let latency = &target["latency"];
        let latency =
            match (latency["p50_ms"].as_f64(), latency["p95_ms"].as_f64(), latency["p99_ms"].as_f64()) {
                (Some(p50), Some(p95), Some(p99)) => {
                    format!("{}/{}/{}", ms_number(p50), ms_number(p95), ms_number(p99))
                }
                _ => "-".to_owned(),
            };
        println!(
            "{:<36} {:<24} {:<10} {:>8} {:>20}  {}",
            target["target"].as_str().unwrap_or_default(),
            target["status"].as_str().unwrap_or_default(),
            target["breaker"].as_str().unwrap_or_default(),
            target["consecutive_failures"].as_u64().unwrap_or_default(),
            latency,
            target["reason"].as_str().unwrap_or_default(),
        );
    }
}

/// Every credential of every provider (`unknown` until first used), by id and masked key.
fn print_credentials(body: &Value) {
    let providers = body["providers"].as_array().into_iter().flatten();
    let keys: Vec<(&str, &Value)> = providers
        .flat_map(|p| {
            let id = p["id"].as_str().unwrap_or_default();
            p["credentials"].as_array().into_iter().flatten().map(move |c| (id, c))
        })
        .collect();
    if keys.is_empty() {
        return;
    }
    println!(
        "\n{:<14} {:<20} {:<12} {:<24} {:>9}  reason",
        "credential", "provider", "key", "status", "rests"
    );
    let health = body["credentials"].as_array();
    for (provider, credential) in keys {
        let id = credential["credential_id"].as_str().unwrap_or_default();
        let state = health.and_then(|all| all.iter().find(|c| c["credential_id"] == id));
        let field = |name: &str| state.and_then(|s| s[name].as_str()).unwrap_or_default().to_owned();
        let status = state.and_then(|s| s["status"].as_str()).unwrap_or("unknown");
        let rests = state.and_then(|s| s["cooldown"].as_f64()).map_or_else(|| "-".to_owned(), ms_text);
        println!(
            "{id:<14} {provider:<20} {:<12} {status:<24} {rests:>9}  {}",
            credential["key"].as_str().unwrap_or("-"),
            field("reason"),
        );
    }
}

/// The pacing lanes, when some provider is paced.
fn print_pacing(body: &Value) {
    let Some(lanes) = body["pacing"].as_array().filter(|lanes| !lanes.is_empty()) else { return };
    println!("\n{:<36} {:>9} {:>10} {:>10}  fleet", "pacing lane", "in flight", "requests", "tokens");
    for lane in lanes {
        let name = match lane["credential_id"].as_str() {
            Some(credential) => format!("{}/{credential}", lane["provider"].as_str().unwrap_or_default()),
            None => lane["provider"].as_str().unwrap_or_default().to_owned(),
        };
        let level = |value: &Value| value.as_f64().map_or("-".to_owned(), |v| format!("{v:.1}"));
        let fleet = &lane["fleet"];
        let fleet = if fleet.is_object() {
            let mut text = format!(
                "{}, {}: bucket {}, lease {}",
                fleet["mode"].as_str().unwrap_or_default(),
                counted(fleet["replicas"].as_u64().unwrap_or_default() as usize, "replica"),
                level(&fleet["bucket"]["requests"]),
                level(&fleet["lease"]["requests"])
            );
            if let Some(left) = fleet["headers"]["requests"]["remaining"].as_u64() {
                text.push_str(&format!(", header budget {left}"));
            }
            text
        } else {
            "this replica alone".to_owned()
        };
        println!(
            "{name:<36} {:>9} {:>10} {:>10}  {fleet}",
            lane["in_flight"].as_u64().unwrap_or_default(),
            level(&lane["requests_available"]),
            level(&lane["tokens_available"]),
        );
    }
}

/// Milliseconds as a bare number for a column headed `ms`: a tenth below 10, whole above.
fn ms_number(ms: f64) -> String {
    if ms < 10.0 { format!("{ms:.1}") } else { format!("{ms:.0}") }
}
