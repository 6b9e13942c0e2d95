//! `switchyard doctor`: the configuration as the gateway would run it, and `--ping`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use switchyard::chat::{ChatRequest, Message};
use switchyard::trail::Attempt;
use switchyard::{RequestOptions, RouteError, Target};
use switchyard_gateway::config::{self, Exposure, Loaded};

use super::print_routes;
use super::text::{counted, duration_text, setting};

pub(crate) async fn doctor(loaded: &Loaded, ping: bool) -> anyhow::Result<ExitCode> {
    println!("config: {}", loaded.origin());
    println!("listen: {}", loaded.listen);
    print_providers(loaded).await;
    print_routes_settings(loaded);
    print_health(loaded);
    print_gateway(loaded);
    let shared_ok = shared_state(loaded).await;
    // A gateway `serve` would refuse to start is not well.
    let exposure_ok = !matches!(config::exposure(loaded.listen, loaded), Exposure::Refused(_));
    if !ping {
        return Ok(if shared_ok && exposure_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let failures = ping_targets(loaded).await;
    print_pacing(loaded);
    Ok(if failures == 0 && shared_ok && exposure_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Each provider with its limits and its credentials, masked.
async fn print_providers(loaded: &Loaded) {
    println!("providers:");
    for provider in &loaded.providers {
        let base = if provider.base_url.is_empty() {
            String::new()
        } else {
            format!(" {}", switchyard_providers::without_password(&provider.base_url))
        };
        println!("  {} ({}{base})", provider.id, provider.kind);
        if let Some(limits) = &provider.limits {
            let mut parts = Vec::new();
            if let Some(n) = limits.max_concurrent {
                parts.push(format!("max_concurrent {n}"));
            }
            if let Some(n) = limits.requests_per_minute {
                parts.push(format!("requests_per_minute {n}"));
            }
            if let Some(n) = limits.tokens_per_minute {
                parts.push(format!("tokens_per_minute {n}"));
            }
            if !limits.min_interval.is_zero() {
                parts.push(format!("min_interval {}", setting(limits.min_interval)));
            }
            parts.push(format!(
                "respect_headers {} (waits clamped to {})",
                limits.respect_headers,
                setting(limits.max_header_wait)
            ));
            if limits.reserve_fraction > 0.0 {
                parts.push(format!("reserve_fraction {}", limits.reserve_fraction));
            }
            if limits.per_credential {
                parts.push("per credential".to_owned());
            }
            println!("    limits: {}", parts.join(", "));
            if loaded.gateway.shared_state.is_some() {
                let shared = limits.requests_per_minute.is_some() || limits.tokens_per_minute.is_some();
                if shared || limits.respect_headers {
                    println!(
                        "    pacing: requests/tokens per minute, header budgets and 429 holds are shared by the fleet"
                    );
                }
                if limits.max_concurrent.is_some() || !limits.min_interval.is_zero() {
                    println!(
                        "    pacing: max_concurrent and min_interval are per replica: divide them by the fleet size"
                    );
                }
            }
        }
        for note in &provider.notes {
            println!("    {note}");
        }
        let credentials = loaded.router.credentials(&provider.id).unwrap_or_default();
        for (i, credential) in credentials.iter().enumerate() {
            if provider.kind == "vertex" {
                println!(
                    "    credential {}: a Google access token, from the credentials above",
                    credential.id()
                );
                continue;
            }
            match provider.credentials.get(i) {
                Some(origin) => {
                    println!("    credential {} key {} from {origin}", credential.id(), credential.masked());
                }
                None => println!("    credential {}: keyless (no api_key given)", credential.id()),
            }
        }
        if let Some(bedrock) = &provider.bedrock {
            print_bedrock(bedrock, !provider.credentials.is_empty()).await;
        }
    }
}

/// A Bedrock provider's region and what its credentials are: the API key (bearer), or the AWS
/// credentials the chain finds now (which provider of the chain, the access key masked, when
/// they expire); never a secret.
async fn print_bedrock(bedrock: &config::BedrockSummary, keyed: bool) {
    println!("    region {}", bedrock.region);
    if keyed {
        println!("    auth: Bedrock API key (Authorization: Bearer); SigV4 is not used");
        return;
    }
    println!("    auth: SigV4 with {}", bedrock.credentials.source());
    match tokio::time::timeout(Duration::from_secs(15), bedrock.credentials.info()).await {
        Ok(Ok(info)) => {
            let token = if info.session_token { ", with a session token" } else { "" };
            let expiry = info.expiry.and_then(|at| at.duration_since(std::time::SystemTime::now()).ok());
            let expiry =
                expiry.map_or_else(String::new, |left| format!(", expiring in {}", duration_text(left)));
            println!(
                "    aws credentials: {} (access key {}{token}{expiry})",
                info.provider, info.access_key_id
            );
        }
        Ok(Err(error)) => println!("    aws credentials: none found: {}", error.detail()),
        Err(_) => println!("    aws credentials: none found within 15s"),
    }
}

/// Each route's chain, then its retry, timeouts, hedge and cache settings.
fn print_routes_settings(loaded: &Loaded) {
    println!("routes:");
    print_routes(&loaded.router);
    for route in loaded.router.routes() {
        let retry = route.retry();
        let timeouts = route.timeouts();
        let deadline = timeouts.deadline.map_or_else(String::new, |d| format!(" deadline {}", setting(d)));
        println!(
            "  {}: retry max_attempts {} backoff {}..{} max_wait {}; timeouts first_byte {} idle {} total {} whole {}{deadline}",
            route.name(),
            retry.max_attempts,
            setting(retry.backoff_base),
            setting(retry.backoff_max),
            setting(retry.max_wait),
            setting(timeouts.first_byte),
            setting(timeouts.idle),
            setting(timeouts.total),
            setting(timeouts.whole)
        );
        if let Some(hedge) = route.hedge() {
            let after = match hedge.after {
                switchyard::route::HedgeAfter::P95 => format!("p95 (at least {})", setting(hedge.min_after)),
                switchyard::route::HedgeAfter::Fixed(delay) => setting(delay),
            };
            println!(
                "    hedge: after {after}, at most {} of requests (never fewer than {} per 10 s)",
                hedge.max_share, hedge.min_hedges
            );
        }
        for candidate in route.candidates() {
            if let Some(cache) = candidate.answer_cache() {
                let settings = cache.settings();
                let kept = if loaded.gateway.shared_state.is_some() {
                    "kept in Redis for the fleet (and in this replica when Redis is away)"
                } else {
                    "kept in this replica"
                };
                println!(
                    "    candidate {}: the last good answer, max_age {}, max_entries {}, max_bytes {}, tool_calls {}, {kept}",
                    candidate.name(),
                    setting(settings.max_age),
                    settings.max_entries,
                    settings.max_bytes,
                    settings.tool_calls
                );
            }
        }
    }
}

/// The health board's settings, each route's health gate, and the retry budget.
fn print_health(loaded: &Loaded) {
    let health = loaded.router.health_settings();
    let off = |d: Duration| if d.is_zero() { "off".to_owned() } else { setting(d) };
    println!(
        "health: failure_threshold {}, open_for {}, open_max {}, half_open_probes {}, cooldown_on_rate_limit {} (at most {}), cooldown_on_error {}",
        health.failure_threshold,
        setting(health.open_for),
        setting(health.open_max),
        health.half_open_probes,
        setting(health.cooldown_on_rate_limit),
        setting(health.max_cooldown_on_rate_limit),
        off(health.cooldown_on_error)
    );
    for route in loaded.router.routes() {
        let gate = if route.health_gate() {
            format!("on, health_ttl {}", setting(route.health_ttl()))
        } else {
            "off (open circuits and exhausted targets are still skipped)".to_owned()
        };
        println!("  route {}: health_gate {gate}", route.name());
    }
    let budget = loaded.router.retry_budget();
    println!(
        "  retry_budget: ratio {}, min_retries {}, window {}",
        budget.ratio,
        budget.min_retries,
        setting(budget.window)
    );
}

/// The gateway's keys, body limit, connection rules and exposure.
fn print_gateway(loaded: &Loaded) {
    let gateway = &loaded.gateway;
    println!(
        "gateway: {}, admin key {}, max body {} bytes",
        counted(gateway.keys.len(), "client key"),
        if gateway.admin_key.is_some() { "set" } else { "not set" },
        gateway.max_body
    );
    if !gateway.direct_targets {
        println!(
            "  models: routes only (gateway.direct_targets: false): no client may name a provider:model"
        );
    }
    for key in gateway.keys.iter().filter(|key| key.named || key.rules != Default::default()) {
        println!("  key {}: {}", key.label, key_rules(&key.rules));
    }
    if let Some(unpriced) = loaded.unpriced_for_budgets() {
        println!("  warning: {unpriced}");
    }
    let limited =
        gateway.keys.iter().any(|key| key.rules.limits != Default::default() || key.rules.budget.is_some());
    if limited && gateway.shared_state.is_some() {
        println!(
            "  keys: requests/tokens per minute and budgets are the fleet's; max_concurrent is split among the replicas"
        );
    }
    let limits = gateway.connections;
    println!(
        "connections: header_timeout {}, body_timeout {}, idle_timeout {}, send_timeout {}, max_connections {}",
        setting(limits.header_timeout),
        setting(limits.body_timeout),
        setting(limits.idle_timeout),
        setting(limits.send_timeout),
        limits.max_connections
    );
    println!("exposure: {}", exposure_line(loaded.listen, loaded));
    match &gateway.telemetry {
        Some(telemetry) => println!("telemetry: {}", telemetry.describe()),
        None => println!("telemetry: off (no traces exported)"),
    }
}

/// A client key's rules in a line: the models it may use, its limits, its budget.
fn key_rules(rules: &switchyard_gateway::keys::KeyRules) -> String {
    let mut parts = Vec::new();
    if let Some(routes) = &rules.routes {
        parts.push(format!("may use {}", routes.join(", ")));
    }
    let limits = rules.limits;
    for (name, value) in [
        ("requests_per_minute", limits.requests_per_minute),
        ("tokens_per_minute", limits.tokens_per_minute),
        ("max_concurrent", limits.max_concurrent.map(u64::from)),
    ] {
        if let Some(value) = value {
            parts.push(format!("{name} {value}"));
        }
    }
    if let Some(budget) = rules.budget {
        parts.push(format!("budget ${} per {}", budget.usd, budget.per.as_str()));
    }
    if parts.is_empty() { "no limits".to_owned() } else { parts.join(", ") }
}

/// Where health is kept; with Redis, whether it answers and who is alive. False when it does
/// not answer.
async fn shared_state(loaded: &Loaded) -> bool {
    match &loaded.gateway.shared_state {
        None => {
            println!("shared state: memory (this process only; add `state: {{ redis: URL }}` to share it)");
            true
        }
        Some(store) => {
            let settings = store.settings();
            let at = format!("{} (prefix {})", switchyard_state::mask_url(&settings.url), settings.prefix);
            match switchyard_state::check(settings).await {
                Ok(replicas) => {
                    let ids: Vec<&str> = replicas.iter().map(|r| r.id.as_str()).collect();
                    println!(
                        "shared state: redis {at}: ok, {} alive: {}",
                        counted(ids.len(), "replica"),
                        ids.join(", ")
                    );
                    true
                }
                Err(error) => {
                    println!("shared state: redis {at}: unreachable: {error}");
                    false
                }
            }
        }
    }
}

/// One call to every target, and nothing more (no retry, no other key, no fallback): what
/// that call did. The number that failed.
async fn ping_targets(loaded: &Loaded) -> usize {
    println!("\nping (one call per target):");
    println!("  {:<40} {:>10}  result", "target", "latency");
    let (mut failures, mut pinged) = (0, 0);
    let mut seen: Vec<&Target> = Vec::new();
    for route in loaded.router.routes() {
        for target in route.all_targets() {
            if seen.contains(&target) {
                continue;
            }
            seen.push(target);
            if switchyard::route::is_template(target) {
                println!(
                    "  {:<40} {:>10}  not pinged: the model a client asks for fills it in",
                    target.as_str(),
                    "-"
                );
                continue;
            }
            pinged += 1;
            let mut request = ChatRequest::new(target.to_string(), vec![Message::user("ping")]);
            request.max_tokens = Some(1);
            let options = RequestOptions {
                single_call: true,
                deadline: Some(Duration::from_secs(30)),
                ..RequestOptions::default()
            };
            let started = Instant::now();
            let result = loaded.router.chat_with(&request, &options).await;
            let elapsed = duration_text(started.elapsed());
            let result = match result {
                Ok(_) => "ok".to_owned(),
                Err(error) => {
                    failures += 1;
                    failure_text(&error)
                }
            };
            println!("  {:<40} {elapsed:>10}  {result}", target.to_string());
        }
    }
    println!("  {} of {} answered", pinged - failures, counted(pinged, "target"));
    failures
}

/// What the one call of a ping did: its error's kind, status and detail, or why it was not
/// sent (a skip).
fn failure_text(error: &RouteError) -> String {
    let Some(Attempt { outcome, error: Some(failure), .. }) = error.trail().last() else {
        return error.to_string();
    };
    let status = failure.status().map_or_else(String::new, |status| format!(" (HTTP {status})"));
    let skipped = if outcome.is_skip() { format!("{outcome}: ") } else { String::new() };
    format!("{skipped}{}{status}: {}", failure.kind(), failure.detail())
}

/// What the providers' rate-limit headers said during the pings.
fn print_pacing(loaded: &Loaded) {
    let lanes = loaded.router.pacing();
    if !lanes.is_empty() {
        println!("\npacing (as the providers' headers state it):");
    }
    for lane in lanes {
        let name = match &lane.credential_id {
            Some(id) => format!("{} key {id}", lane.provider),
            None => lane.provider.clone(),
        };
        let headers = &lane.headers;
        let stated: Vec<String> = [
            ("requests", &headers.requests),
            ("tokens", &headers.tokens),
            ("input_tokens", &headers.input_tokens),
            ("output_tokens", &headers.output_tokens),
        ]
        .into_iter()
        .filter_map(|(name, stated)| {
            let stated = stated.as_ref()?;
            let limit = stated.limit.map_or_else(|| "?".to_owned(), |l| l.to_string());
            let reset = stated.reset_in_ms.map_or_else(String::new, |ms| {
                format!(", resets in {}", duration_text(Duration::from_millis(ms)))
            });
            Some(format!("{name} {}/{limit} left{reset}", stated.remaining))
        })
        .collect();
        let stated =
            if stated.is_empty() { "no rate-limit headers seen".to_owned() } else { stated.join("; ") };
        println!("  {name}: {stated}; {} in flight", lane.in_flight);
    }
}

/// What `doctor` says of who can reach a gateway listening at `listen`.
fn exposure_line(listen: std::net::SocketAddr, loaded: &Loaded) -> String {
    let metrics = if loaded.gateway.metrics_open {
        "/metrics open (gateway.metrics_open)"
    } else {
        "/metrics needs the admin key"
    };
    match config::exposure(listen, loaded) {
        Exposure::Loopback => format!("{listen} is loopback: reachable from this machine only"),
        Exposure::Demo => {
            format!(
                "{listen} is beyond loopback, with simulated providers only (nothing to spend); {metrics}"
            )
        }
        Exposure::Guarded => format!(
            "{listen} is beyond loopback: clients need a gateway key, /admin the admin key; {metrics}"
        ),
        Exposure::OpenRelay => format!(
            "WARNING: {listen} is beyond loopback and gateway.open is set: an open relay to the providers' accounts; {metrics}"
        ),
        Exposure::Refused(missing) => format!("REFUSED: {}", config::refusal(listen, loaded, &missing)),
    }
}
