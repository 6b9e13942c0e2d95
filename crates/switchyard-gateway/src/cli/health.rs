//! `switchyard health`: a running gateway's health table.

use std::process::ExitCode;

use anyhow::{Context, bail};

use super::admin_get;

pub(crate) async fn health(url: &str, key: Option<String>) -> anyhow::Result<ExitCode> {
    let response = admin_get(url, "/admin/health", key).await?;
    let status = response.status();
    let bytes = response.bytes().await.context("the gateway's answer broke off")?;
    let body: serde_json::Value =
        serde_json::from_slice(&bytes).context("the gateway's answer is not JSON")?;
    if !status.is_success() {
        bail!("the gateway answered {status}: {}", body["error"]["message"].as_str().unwrap_or_default());
    }
    let shared = &body["shared_state"];
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
        line.push_str(&format!(", {} replicas: {}", ids.len(), ids.join(", ")));
    }
    println!("{line}\n");
    println!(
        "{:<36} {:<24} {:<10} {:>8} {:>20}  reason",
        "target", "status", "breaker", "failures", "p50/p95/p99 ms"
    );
    for target in body["targets"].as_array().into_iter().flatten() {
        let latency = &target["latency"];
        let latency =
            match (latency["p50_ms"].as_f64(), latency["p95_ms"].as_f64(), latency["p99_ms"].as_f64()) {
                (Some(p50), Some(p95), Some(p99)) => format!("{p50:.0}/{p95:.0}/{p99:.0}"),
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
    let lanes = body["pacing"].as_array().filter(|lanes| !lanes.is_empty());
    if let Some(lanes) = lanes {
        println!("\n{:<36} {:>9} {:>10} {:>10}  fleet", "pacing lane", "in flight", "requests", "tokens");
        for lane in lanes {
            let name = match lane["credential_id"].as_str() {
                Some(credential) => format!("{}/{credential}", lane["provider"].as_str().unwrap_or_default()),
                None => lane["provider"].as_str().unwrap_or_default().to_owned(),
            };
            let level =
                |value: &serde_json::Value| value.as_f64().map_or("-".to_owned(), |v| format!("{v:.1}"));
            let fleet = &lane["fleet"];
            let fleet = if fleet.is_object() {
                let mut text = format!(
                    "{}, {} replicas: bucket {}, lease {}",
                    fleet["mode"].as_str().unwrap_or_default(),
                    fleet["replicas"],
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
    Ok(ExitCode::SUCCESS)
}
