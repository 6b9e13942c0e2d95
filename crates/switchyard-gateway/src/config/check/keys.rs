//! `gateway.keys`, checked: each key's text, name, the models it may use, its limits and its
//! budget.

use std::collections::BTreeMap;

use super::Validator;
use crate::config::file::{self, ClientKeyConfig, NamedKeyConfig};
use crate::keys::{Budget, ClientKey, ClientKeys, KeyLimits, KeyRules, Period};

/// How a key is written, for a problem with one.
const WHAT_A_KEY_IS: &str = "give the key (its text or `env://NAME`), or a map with its `key` (and `name`, `routes`, `limits`, `budget`)";

impl Validator<'_> {
    /// The client keys of `gateway.keys`, every problem with its key path.
    pub(super) fn client_keys(&mut self, file: &file::FileConfig) -> ClientKeys {
        let mut keys: Vec<ClientKey> = Vec::new();
        let mut paths: Vec<String> = Vec::new();
        for (i, entry) in file.gateway.keys.iter().enumerate() {
            let path = format!("gateway.keys[{i}]");
            let key = match entry {
                ClientKeyConfig::Text(text) => {
                    self.key(&path, text).map(|(secret, _)| ClientKey::new(secret, None, KeyRules::default()))
                }
                ClientKeyConfig::Named(named) => self.named_key(&path, named, file),
                ClientKeyConfig::Invalid(what) => {
                    self.problem(&path, format!("is {what}: {WHAT_A_KEY_IS}"));
                    None
                }
            };
            let Some(key) = key else { continue };
            if let Some(at) = keys.iter().position(|k| k.hash == key.hash) {
                self.problem(
                    &path,
                    format!("is the same key as {}: give each client a key of its own", paths[at]),
                );
                continue;
            }
            if key.named && keys.iter().any(|k| k.label == key.label) {
                self.problem(
                    format!("{path}.name"),
                    format!("`{}` names two keys: give each its own name", key.label),
                );
            }
            keys.push(key);
            paths.push(path);
        }
        ClientKeys::new(keys)
    }

    fn named_key(
        &mut self,
        path: &str,
        named: &NamedKeyConfig,
        file: &file::FileConfig,
    ) -> Option<ClientKey> {
        let name = named.name.as_deref().map(str::trim);
        let name_ok = name.is_none_or(|name| {
            !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c))
        });
        if let Some(name) = name.filter(|_| !name_ok) {
            self.problem(
                format!("{path}.name"),
                format!(
                    "`{name}` is not a key name: use up to 64 letters, digits, `-`, `_`, `.`, `:` or `@`"
                ),
            );
        }
        let secret = match &named.key {
            Some(key) => self.key(&format!("{path}.key"), key),
            None => {
                self.problem(path, format!("has no `key`: {WHAT_A_KEY_IS}"));
                None
            }
        };
        let routes = named.routes.as_ref().map(|routes| self.key_routes(path, routes, file));
        let limits = self.key_limits(path, named.limits.as_ref());
        let budget = named.budget.as_ref().and_then(|budget| self.key_budget(path, budget));
        let rules = KeyRules { routes, limits, budget };
        Some(ClientKey::new(secret?.0, name.filter(|_| name_ok).map(str::to_owned), rules))
    }

    /// The models a key may use: each a route, a pattern or a target of a configured provider.
    fn key_routes(&mut self, path: &str, routes: &[String], file: &file::FileConfig) -> Vec<String> {
        if routes.is_empty() {
            self.problem(
                format!("{path}.routes"),
                "is empty: the key could use no model; leave `routes` out for every model",
            );
        }
        for (j, entry) in routes.iter().enumerate() {
            if let Some(message) = unknown_model(entry, &file.routes, &file.providers) {
                self.problem(format!("{path}.routes[{j}]"), message);
            } else if file.gateway.direct_targets == Some(false)
                && !file.routes.contains_key(entry)
                && entry.contains(':')
            {
                self.problem(
                    format!("{path}.routes[{j}]"),
                    format!(
                        "`{entry}` is a provider's model, which no client may name with \
                         `gateway.direct_targets: false`: name the route that serves it"
                    ),
                );
            }
        }
        routes.to_vec()
    }

    fn key_limits(&mut self, path: &str, config: Option<&file::KeyLimitsConfig>) -> KeyLimits {
        let config = config.cloned().unwrap_or_default();
        let limits = KeyLimits {
            requests_per_minute: config.requests_per_minute,
            tokens_per_minute: config.tokens_per_minute,
            max_concurrent: config.max_concurrent,
        };
        for (name, value) in [
            ("requests_per_minute", limits.requests_per_minute),
            ("tokens_per_minute", limits.tokens_per_minute),
            ("max_concurrent", limits.max_concurrent.map(u64::from)),
        ] {
            if value == Some(0) {
                self.problem(
                    format!("{path}.limits.{name}"),
                    "0 would refuse every request: remove it for no limit",
                );
            }
        }
        limits
    }

    fn key_budget(&mut self, path: &str, config: &file::BudgetConfig) -> Option<Budget> {
        if !(config.usd.is_finite() && config.usd > 0.0) {
            self.problem(
                format!("{path}.budget.usd"),
                format!("{} is not a budget: give a positive amount of dollars, like 50", config.usd),
            );
            return None;
        }
        let per = match config.per {
            file::BudgetPeriod::Day => Period::Day,
            file::BudgetPeriod::Month => Period::Month,
        };
        Some(Budget { usd: config.usd, per })
    }
}

/// Why `entry` of a key's `routes` names nothing, when it does not: not a route, not a
/// pattern (`prefix*`), not a `provider:model` of a configured provider.
fn unknown_model<R, P>(
    entry: &str,
    routes: &BTreeMap<String, R>,
    providers: &BTreeMap<String, P>,
) -> Option<String> {
    if routes.contains_key(entry) {
        return None;
    }
    if let Some(prefix) = entry.strip_suffix('*') {
        if prefix.is_empty() || prefix.contains('*') {
            return Some(format!("`{entry}` is not a pattern: write a prefix then `*`, like claude-*"));
        }
        return None;
    }
    if let Some((provider, model)) = entry.split_once(':') {
        if providers.contains_key(provider) && !model.is_empty() {
            return None;
        }
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Some(format!("`{entry}` names no configured provider: providers are {}", known.join(", ")));
    }
    let known: Vec<&str> = routes.keys().map(String::as_str).collect();
    Some(format!(
        "`{entry}` is no route: name a route ({}), a pattern like claude-*, or a provider:model target",
        known.join(", ")
    ))
}
