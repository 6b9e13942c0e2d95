//! `switchyard keys`: a running gateway's client keys, their limits, usage and budgets.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

use super::{admin_get, gateway_url, refused};

pub(crate) async fn keys(url: &str, key: Option<String>) -> anyhow::Result<ExitCode> {
    let url = gateway_url(url);
    let sent = key.is_some();
    let response = admin_get(&url, "/admin/keys", key).await?;
    let status = response.status();
    let bytes = response.bytes().await.context("the gateway's answer broke off")?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if !status.is_success() {
        return Err(refused(status, &body, sent));
    }
    let Some(keys) = body["keys"].as_array() else {
        bail!("the gateway at {url} answered /admin/keys with something that is not its keys");
    };
    if keys.is_empty() {
        println!("no client keys: the gateway takes requests without a key");
        return Ok(ExitCode::SUCCESS);
    }
    for line in lines(keys, body["shared"].as_bool().unwrap_or(false)) {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The table: one line per key, and what its budget says.
fn lines(keys: &[Value], shared: bool) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<24} {:>14} {:>18} {:>12}  {}",
        "key",
        "requests/min",
        "tokens/min",
        "in flight",
        if shared { "budget (the fleet's spend)" } else { "budget" }
    )];
    if shared {
        lines.push(
            "  (requests, tokens and requests in flight are this replica's; in flight against its share of max_concurrent)"
                .to_owned(),
        );
    }
    for key in keys {
        let limits = &key["limits"];
        let usage = &key["usage"];
        let of = |used: &Value, limit: &Value| match limit.as_u64() {
            Some(limit) => format!("{}/{limit}", used.as_u64().unwrap_or_default()),
            None => used.as_u64().unwrap_or_default().to_string(),
        };
        lines.push(format!(
            "{:<24} {:>14} {:>18} {:>12}  {}",
            key["name"].as_str().unwrap_or_default(),
            of(&usage["requests_this_minute"], &limits["requests_per_minute"]),
            of(&usage["tokens_this_minute"], &limits["tokens_per_minute"]),
            of(&usage["in_flight"], usage.get("max_concurrent_here").unwrap_or(&limits["max_concurrent"])),
            budget(&key["budget"]),
        ));
        if let Some(routes) = key["routes"].as_array() {
            let routes: Vec<&str> = routes.iter().filter_map(Value::as_str).collect();
            lines.push(format!("  may use: {}", routes.join(", ")));
        }
    }
    lines
}

/// `$12.5000 of $50 per day, $37.5000 left, resets 2026-12-05T00:00:00Z`, or `-`.
fn budget(budget: &Value) -> String {
    if !budget.is_object() {
        return "-".to_owned();
    }
    let money = |v: &Value| v.as_f64().unwrap_or_default();
    format!(
        "${:.4} of ${} per {}, ${:.4} left, resets {}",
        money(&budget["spent_usd"]),
        money(&budget["usd"]),
        budget["per"].as_str().unwrap_or_default(),
        money(&budget["remaining_usd"]),
        budget["resets_at"].as_str().unwrap_or_default()
    )
}
