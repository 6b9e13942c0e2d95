//! What a new version of a configuration file changes, section by section, and which of the
//! changes only a restart applies: the answer of a reload, its log line and its event. Only
//! key paths are named, never a value (values hold keys).

use serde_json::Value;

use super::read;

/// The settings a running gateway cannot change: they are fixed when it starts (the listening
/// socket, the fleet's store, the serving threads and their connection rules, the stores sized
/// at start, logging and trace export). A reload reports them and keeps the running values.
pub const RESTART_ONLY: &[&str] = &[
    "listen",
    "state",
    "gateway.threads",
    "gateway.max_connections",
    "gateway.header_timeout",
    "gateway.idle_timeout",
    "gateway.send_timeout",
    "gateway.recent_requests",
    "gateway.responses",
    "telemetry",
    "log",
];

/// The sections whose entries are named one by one (`routes.fast: added`).
const BY_ENTRY: &[&str] = &["providers", "routes", "gateway"];

/// What changed between two versions of a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Each changed key, with how: `routes.fast: added`, `providers.openai: changed`.
    pub changed: Vec<String>,
    /// The keys of [`RESTART_ONLY`] that changed: the running values stay until a restart.
    pub restart: Vec<String>,
}

/// What `new` changes of `old` (both the text of one file, TOML when `is_toml`).
pub fn changes(old: &str, new: &str, is_toml: bool) -> Changes {
    let (old, new) = (read::tree(old, is_toml), read::tree(new, is_toml));
    let mut changed = Vec::new();
    for key in keys(&old, &new) {
        let (was, is) = (&old[key.as_str()], &new[key.as_str()]);
        if BY_ENTRY.contains(&key.as_str()) && (was.is_object() || is.is_object()) {
            for entry in keys(was, is) {
                compare(&format!("{key}.{entry}"), &was[entry.as_str()], &is[entry.as_str()], &mut changed);
            }
        } else {
            compare(&key, was, is, &mut changed);
        }
    }
    changed.extend(through_references(&new["routes"], &changed));
    let restart = changed
        .iter()
        .filter_map(|line| line.split(':').next())
        .filter(|path| {
            RESTART_ONLY.iter().any(|fixed| path == fixed || path.starts_with(&format!("{fixed}.")))
        })
        .map(str::to_owned)
        .collect();
    Changes { changed, restart }
}

/// The routes of `routes` whose lists name a route that `changed` says changed (a route's
/// name in another's list stands for its targets, so they changed with it), to any depth:
/// `routes.gpt: changed (through routes.claude)`.
fn through_references(routes: &Value, changed: &[String]) -> Vec<String> {
    let Some(routes) = routes.as_object() else { return Vec::new() };
    let route_of = |line: &String| {
        line.strip_prefix("routes.").and_then(|rest| rest.split(':').next()).map(str::to_owned)
    };
    let mut touched: Vec<String> = changed.iter().filter_map(route_of).collect();
    let mut found = Vec::new();
    loop {
        let next = routes.iter().find_map(|(name, route)| {
            let names = ["targets", "context_window", "content_policy"]
                .iter()
                .filter_map(|list| route[*list].as_array())
                .flatten()
                .filter_map(|entry| entry.as_str().or_else(|| entry["target"].as_str()));
            let through = names.into_iter().find(|named| touched.iter().any(|t| t == named))?;
            (!touched.contains(name)).then(|| (name.clone(), through.to_owned()))
        });
        let Some((name, through)) = next else { return found };
        found.push(format!("routes.{name}: changed (through routes.{through})"));
        touched.push(name);
    }
}

/// Every key of two mappings, sorted (none of what is not a mapping).
fn keys(a: &Value, b: &Value) -> Vec<String> {
    let mut keys: Vec<String> =
        [a, b].iter().filter_map(|v| v.as_object()).flat_map(|m| m.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    keys
}

fn compare(path: &str, was: &Value, is: &Value, changed: &mut Vec<String>) {
    let how = match (was.is_null(), is.is_null()) {
        (true, true) => return,
        (true, false) => "added",
        (false, true) => "removed",
        (false, false) if was == is => return,
        (false, false) => "changed",
    };
    changed.push(format!("{path}: {how}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "
listen: 127.0.0.1:4680
providers:
  a: { kind: simulated }
  b: { kind: simulated }
routes:
  default: { targets: [a:m] }
gateway: { keys: [one], header_timeout: 30s }
";

    #[test]
    fn a_route_that_names_a_changed_route_in_its_lists_changed_with_it() {
        let old = "providers: { a: { kind: simulated } }\nroutes:\n  claude: { targets: [a:x] }\n  gpt: { targets: [a:g, claude] }\n  all: { targets: [{ target: gpt, tier: 1 }] }\n  alone: { targets: [a:z] }\n";
        let new = old.replace("claude: { targets: [a:x] }", "claude: { targets: [a:y] }");
        assert_eq!(
            changes(old, &new, false).changed,
            [
                "routes.claude: changed",
                "routes.gpt: changed (through routes.claude)",
                "routes.all: changed (through routes.gpt)",
            ]
        );
    }

    #[test]
    fn entries_of_providers_routes_and_gateway_are_named_one_by_one_and_values_never() {
        let new = "
listen: 127.0.0.1:4680
providers:
  a: { kind: simulated, reply: hi }
  c: { kind: simulated }
routes:
  default: { targets: [a:m] }
  fast: { targets: [c:m] }
gateway: { keys: [two], header_timeout: 30s }
health: { failure_threshold: 5 }
";
        let changes = changes(OLD, new, false);
        assert_eq!(
            changes.changed,
            [
                "gateway.keys: changed",
                "health: added",
                "providers.a: changed",
                "providers.b: removed",
                "providers.c: added",
                "routes.fast: added"
            ]
        );
        assert!(changes.restart.is_empty(), "{changes:?}");
    }

    #[test]
    fn listen_state_threads_and_connection_rules_need_a_restart() {
        let new = "
listen: 127.0.0.1:4690
providers:
  a: { kind: simulated }
  b: { kind: simulated }
routes:
  default: { targets: [a:m] }
gateway: { keys: [one], header_timeout: 10s, threads: 2 }
state: { redis: 'redis://127.0.0.1:6379/0' }
";
        let changes = changes(OLD, new, false);
        assert_eq!(changes.restart, ["gateway.header_timeout", "gateway.threads", "listen", "state"]);
    }

    #[test]
    fn the_same_text_changes_nothing() {
        assert_eq!(changes(OLD, OLD, false), Changes::default());
    }
}
