//! Routes named in other routes' lists: `targets: [openai:gpt-4o, claude]`, where `claude` is a
//! route of its own, stands for that route's targets, so a chain can fall back to a whole
//! other chain (LiteLLM's `fallbacks` between model groups) without repeating it. Only the
//! referenced route's targets come: its policy, special chains and candidates stay its own.

use std::collections::BTreeMap;

use crate::config::file::{DetailedTarget, RouteConfig, TargetConfig};

/// A reference that cannot stand: where, and why.
pub(super) type Refused = (String, String);

/// Where each entry of a route's expanded lists was written in the file: its own place, or
/// for a target a reference brought, the place of the reference.
#[derive(Debug, Default)]
pub(super) struct Origins {
    pub(super) targets: Vec<String>,
    pub(super) context_window: Vec<String>,
    pub(super) content_policy: Vec<String>,
}

/// `routes` with every reference to another route in a list (`targets`, `context_window`,
/// `content_policy`) replaced by that route's targets, in its chain's order (its tiers first
/// to last), at the tier of the reference; a list with a reference holds each target once
/// (where it first comes). A reference to a pattern route, or one that comes back to a route
/// through targets, is refused. Each route comes with where its entries were written.
pub(super) fn expanded(
    routes: &BTreeMap<String, RouteConfig>,
) -> (BTreeMap<String, (RouteConfig, Origins)>, Vec<Refused>) {
    let mut refused = Vec::new();
    let mut out = BTreeMap::new();
    for (name, config) in routes {
        let path = format!("routes.{name}");
        let mut config = config.clone();
        let mut origins = Origins::default();
        let at = format!("{path}.targets");
        (config.targets, origins.targets) = list(&config.targets, routes, &at, Some(name), &mut refused);
        for (key, entries, places) in [
            ("context_window", &mut config.context_window, &mut origins.context_window),
            ("content_policy", &mut config.content_policy, &mut origins.content_policy),
        ] {
            let plain: Vec<TargetConfig> = entries.iter().cloned().map(TargetConfig::Plain).collect();
            // A special chain is no target of its route: naming a route that names this one
            // back is no cycle.
            let (targets, at) = list(&plain, routes, &format!("{path}.{key}"), None, &mut refused);
            *entries = targets.iter().map(|t| t.text().to_owned()).collect();
            *places = at;
        }
        out.insert(name.clone(), (config, origins));
    }
    // A reference nested in a route that several name is found from each: said once.
    let mut said = std::collections::HashSet::new();
    refused.retain(|problem| said.insert(problem.clone()));
    (out, refused)
}

/// One list expanded (the targets of route `of`, or a special chain: `None`), and where each
/// entry was written.
fn list<'a>(
    entries: &[TargetConfig],
    routes: &'a BTreeMap<String, RouteConfig>,
    path: &str,
    of: Option<&'a str>,
    refused: &mut Vec<Refused>,
) -> (Vec<TargetConfig>, Vec<String>) {
    let referring = entries.iter().any(|entry| reference(entry.text(), routes).is_some());
    // A cycle runs through targets alone.
    let mut stack: Vec<&str> = of.into_iter().collect();
    let expanded = targets(entries, routes, path, &mut stack, refused);
    if !referring {
        return expanded.into_iter().unzip();
    }
    let mut once: Vec<(TargetConfig, String)> = Vec::new();
    for (target, at) in expanded {
        if !once.iter().any(|(known, _)| known.text() == target.text()) {
            once.push((target, at));
        }
    }
    once.into_iter().unzip()
}

/// `entries` with each route reference replaced by its route's targets, each with the place
/// of the entry it came from.
fn targets<'a>(
    entries: &[TargetConfig],
    routes: &'a BTreeMap<String, RouteConfig>,
    path: &str,
    stack: &mut Vec<&'a str>,
    refused: &mut Vec<Refused>,
) -> Vec<(TargetConfig, String)> {
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some((name, referenced)) = reference(entry.text(), routes) else {
            out.push((entry.clone(), at));
            continue;
        };
        if name.ends_with('*') {
            refused
                .push((at, format!("`{name}` is a pattern route: name a route of one name, or its targets")));
            continue;
        }
        if stack.contains(&name) {
            let around = stack.iter().chain([&name]).copied().collect::<Vec<_>>().join(" → ");
            refused.push((at, format!("route `{name}` comes back to itself: {around}")));
            continue;
        }
        stack.push(name);
        let mut inner =
            targets(&referenced.targets, routes, &format!("routes.{name}.targets"), stack, refused);
        stack.pop();
        // Its chain's order: tiers first to last, the configured order within each.
        inner.sort_by_key(|(target, _)| tier_of(target));
        let tier = tier_of(entry);
        out.extend(inner.into_iter().map(|(target, _)| (at_tier(target, tier), at.clone())));
    }
    out
}

/// The route `text` names, when it is a route's name and no `provider:model` target.
fn reference<'a>(
    text: &str,
    routes: &'a BTreeMap<String, RouteConfig>,
) -> Option<(&'a str, &'a RouteConfig)> {
    if text.contains(':') {
        return None;
    }
    routes.get_key_value(text).map(|(name, config)| (name.as_str(), config))
}

fn tier_of(target: &TargetConfig) -> u32 {
    match target {
        TargetConfig::Plain(_) => 0,
        TargetConfig::Detailed(detailed) => detailed.tier,
    }
}

/// `target` at `tier`, with its weight and embedding space.
fn at_tier(target: TargetConfig, tier: u32) -> TargetConfig {
    let (text, weight, embedding_space) = match target {
        TargetConfig::Plain(text) => (text, 1, None),
        TargetConfig::Detailed(d) => (d.target, d.weight, d.embedding_space),
    };
    TargetConfig::Detailed(DetailedTarget { target: text, tier, weight, embedding_space })
}
