//! The command line's commands, one file each, and what they share.

pub(crate) mod chat;
pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod keys;
pub(crate) mod serve;
pub(crate) mod text;

use std::path::PathBuf;

use anyhow::Context;
use serde_json::Value;
use switchyard::Router;
use switchyard_gateway::config::{self as loader, Loaded};

/// A variable of the process's environment.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The configuration `--config` names (`path`), else the one `SWITCHYARD_CONFIG` names, else
/// `./switchyard.yaml` (or `.yml`, `.toml`), else `/etc/switchyard/switchyard.yaml` (or `.yml`,
/// `.toml`), else the environment's API keys, else the demo; the demo at once when `demo`
/// asks for it.
pub(crate) fn load(path: Option<&PathBuf>, demo: bool) -> anyhow::Result<Loaded> {
    let choice = loader::locate(path.map(PathBuf::as_path), demo, &env, &loader::standard_places());
    Ok(loader::load(&choice, &env)?)
}

pub(crate) fn print_routes(router: &Router) {
    for line in route_lines(router) {
        println!("{line}");
    }
}

/// One line per route: its chain, special chains, candidates, and which is the default.
pub(crate) fn route_lines(router: &Router) -> Vec<String> {
    let mut lines = Vec::new();
    for route in router.routes() {
        let targets: Vec<String> = route.targets().iter().map(|t| t.target.to_string()).collect();
        let mut line = format!("  route {}: {}", route.name(), targets.join(" -> "));
        if !route.context_window().is_empty() {
            let chain: Vec<String> = route.context_window().iter().map(ToString::to_string).collect();
            line.push_str(&format!("; context_window: {}", chain.join(", ")));
        }
        if !route.content_policy().is_empty() {
            let chain: Vec<String> = route.content_policy().iter().map(ToString::to_string).collect();
            line.push_str(&format!("; content_policy: {}", chain.join(", ")));
        }
        for candidate in route.candidates() {
            line.push_str(&format!("; candidate: {}", candidate.name()));
        }
        if route.drop_params() {
            line.push_str("; drop_params");
        }
        if route.name() == router.default_route().name() {
            line.push_str(" (default)");
        }
        lines.push(line);
    }
    lines
}

/// A GET of the admin endpoint `path` with the admin key, refused statuses named.
pub(crate) async fn admin_get(
    url: &str,
    path: &str,
    key: Option<String>,
) -> anyhow::Result<reqwest::Response> {
    let key = key.or_else(|| env("SWITCHYARD_ADMIN_KEY")).or_else(|| env("SWITCHYARD_KEY"));
    let mut request = reqwest::Client::new().get(format!("{}{path}", url.trim_end_matches('/')));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.with_context(|| format!("cannot reach the gateway at {url}"))
}

/// The gateway's base URL as given, `http://` added when it names no scheme
/// (`127.0.0.1:4680`), without a trailing slash.
pub(crate) fn gateway_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.contains("://") { url.to_owned() } else { format!("http://{url}") }
}

/// The error for an admin endpoint's refusal: a 401 says how to pass the admin key, or that
/// the one `sent` is not it.
pub(crate) fn refused(status: reqwest::StatusCode, body: &Value, sent: bool) -> anyhow::Error {
    let message = body["error"]["message"].as_str().unwrap_or_default();
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return match sent {
            true => anyhow::anyhow!(
                "the gateway refused the admin key given (401): it is not the gateway's `gateway.admin_key`"
            ),
            false => anyhow::anyhow!(
                "the gateway asks for its admin key (401): pass it with --key KEY or set SWITCHYARD_ADMIN_KEY"
            ),
        };
    }
    anyhow::anyhow!("the gateway answered {status}: {message}")
}

#[cfg(test)]
mod tests {
    use super::gateway_url;

    #[test]
    fn a_gateway_address_without_a_scheme_is_http() {
        assert_eq!(gateway_url("127.0.0.1:4680"), "http://127.0.0.1:4680");
        assert_eq!(gateway_url("https://gw.example/"), "https://gw.example");
    }
}
