//! Routes named in other routes' lists: `targets: [openai:gpt-4o, claude]`, where `claude` is a
//! route of its own, stands for that route's targets, so a chain can fall back to a whole
//! other chain (LiteLLM's `fallbacks` between model groups) without repeating it. Only the
//! referenced route's targets come: its policy, special chains and candidates stay its own.

use std::collections::BTreeMap;

use crate::config::file::{DetailedTarget, RouteConfig, TargetConfig};

/// A reference that cannot stand: where, and why.
pub(super) type Refused = (String, String);

/// `routes` with every reference to another route in a list (`targets`, `context_window`,
/// `content_policy`) replaced by that route's targets, in its chain's order (its tiers first
/// to last), at the tier of the reference, but those the list already has. A
/// reference to a pattern route, or one that comes back to a route on the way, is refused.
pub(super) fn expanded(
    routes: &BTreeMap<String, RouteConfig>,
) -> (BTreeMap<String, RouteConfig>, Vec<Refused>) {
    let mut refused = Vec::new();
    let mut out = BTreeMap::new();
    for (name, config) in routes {
        let path = format!("routes.{name}");
        let mut config = config.clone();
        let mut stack = vec![name.as_str()];
        config.targets =
            targets(&config.targets, routes, &format!("{path}.targets"), &mut stack, &mut refused);
        for (list, key) in
            [(&mut config.context_window, "context_window"), (&mut config.content_policy, "content_policy")]
        {
            let entries: Vec<TargetConfig> = list.iter().cloned().map(TargetConfig::Plain).collect();
            let path = format!("{path}.{key}");
            *list = targets(&entries, routes, &path, &mut stack, &mut refused)
                .iter()
                .map(|t| t.text().to_owned())
                .collect();
        }
        out.insert(name.clone(), config);
    }
    (out, refused)
}

/// `entries` with each route reference replaced by its route's targets (a target already in
/// the list is not added again).
fn targets<'a>(
    entries: &[TargetConfig],
    routes: &'a BTreeMap<String, RouteConfig>,
    path: &str,
    stack: &mut Vec<&'a str>,
    refused: &mut Vec<Refused>,
) -> Vec<TargetConfig> {
    let mut out: Vec<TargetConfig> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some((name, referenced)) = reference(entry.text(), routes) else {
            out.push(entry.clone());
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
        inner.sort_by_key(tier_of);
        let tier = tier_of(entry);
        for target in inner {
            push_once(&mut out, at_tier(target, tier));
        }
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

fn push_once(out: &mut Vec<TargetConfig>, target: TargetConfig) {
    if !out.iter().any(|known| known.text() == target.text()) {
        out.push(target);
    }
}
