//! The routes of a file, checked by the engine's own rules, with the file's key paths.

use std::collections::BTreeMap;

use switchyard::Target;
use switchyard::answer_cache::AnswerCacheSettings;
use switchyard::route::{
    Candidate, ErrorFilter, Hedge, HedgeAfter, Retry, Rotation, Route, RouteBuilder, RouteTarget, Timeouts,
};

use super::Validator;
use crate::config::{FileConfig, file};

impl Validator<'_> {
    /// The file's routes, and its `default_route` checked against them.
    pub(super) fn routes(&mut self, file: &FileConfig) -> Vec<Route> {
        if file.routes.is_empty() && !self.removed.any_in("routes") {
            self.problem(
                "routes",
                "none configured: add one, like `default: { targets: [openai:gpt-4o-mini] }`",
            );
        }
        // A route named in another's list stands for its targets.
        let (expanded, refused) = super::references::expanded(&file.routes);
        for (path, message) in refused {
            self.problem(path, message);
        }
        let mut routes = Vec::new();
        for (route_name, (route, origins)) in &expanded {
            if let Some(route) = self.route(route_name, route, origins, &file.providers) {
                routes.push(route);
            }
        }
        if let Some(default) = &file.default_route
            && !file.routes.contains_key(default)
            && !self.removed.entry("routes", default)
        {
            let known: Vec<&str> = file.routes.keys().map(String::as_str).collect();
            self.problem(
                "default_route",
                format!("route `{default}` is not configured (routes: {})", known.join(", ")),
            );
        }
        routes
    }

    /// One route: its settings given to the engine's builder, whose rules check them.
    fn route(
        &mut self,
        name: &str,
        config: &file::RouteConfig,
        origins: &super::references::Origins,
        providers: &BTreeMap<String, file::ProviderConfig>,
    ) -> Option<Route> {
        let path = format!("routes.{name}");
        let before = self.problems.len();
        let builder = self.targets(Route::builder(name), origins, config, providers);
        let builder = retry_and_timeouts(builder, config);
        let builder = self.candidates(builder, &path, &config.candidates);
        let builder = filters_and_hedge(builder, config);
        // The route's own rules are the engine's: its problems come back with their paths.
        match builder.build() {
            Ok(route) if self.problems.len() == before => Some(route),
            Ok(_) => None,
            Err(error) => {
                for mut problem in error.problems {
                    // A place in an expanded list is the place it was written in the file.
                    match written_at(&problem.path, origins) {
                        Some(at) => {
                            problem.path = String::new();
                            self.engine_problem(&at, problem);
                        }
                        None => self.engine_problem(&path, problem),
                    }
                }
                None
            }
        }
    }

    /// The route's targets and its context-window and content-policy chains, each naming a
    /// configured provider.
    fn targets(
        &mut self,
        mut builder: RouteBuilder,
        origins: &super::references::Origins,
        config: &file::RouteConfig,
        providers: &BTreeMap<String, file::ProviderConfig>,
    ) -> RouteBuilder {
        for (target, at) in config.targets.iter().zip(&origins.targets) {
            let Some(parsed) = self.known_provider(at, target.text(), providers) else {
                // The engine names what is wrong with the text.
                builder = builder.target(target.text());
                continue;
            };
            builder = builder.route_target(route_target(parsed, target));
        }
        for (text, at) in config.context_window.iter().zip(&origins.context_window) {
            self.known_provider(at, text, providers);
            builder = builder.context_window(text);
        }
        for (text, at) in config.content_policy.iter().zip(&origins.content_policy) {
            self.known_provider(at, text, providers);
            builder = builder.content_policy(text);
        }
        builder
    }

    /// The route's candidates (fixed answers or the answer cache), their names distinct.
    fn candidates(
        &mut self,
        mut builder: RouteBuilder,
        path: &str,
        candidates: &[file::CandidateConfig],
    ) -> RouteBuilder {
        let mut names = Vec::new();
        for (i, candidate) in candidates.iter().enumerate() {
            if names.contains(&candidate.name.as_str()) {
                self.problem(
                    format!("{path}.candidates[{i}].name"),
                    format!("`{}` is used twice: names must differ", candidate.name),
                );
            }
            names.push(&candidate.name);
            let at = format!("{path}.candidates[{i}]");
            match (&candidate.text, &candidate.cache) {
                (Some(text), None) => {
                    builder = builder.candidate(Candidate::text(candidate.name.clone(), text.clone()))
                }
                (None, Some(cache)) => {
                    let settings = self.answer_cache(&at, cache);
                    builder = builder.candidate(Candidate::cache(candidate.name.clone(), settings));
                }
                _ => self.problem(
                    at,
                    "give a candidate either `text` (a fixed answer) or `cache` (the last good answer)",
                ),
            }
        }
        builder
    }

    /// A cache candidate's settings over the defaults, each limit above 0.
    fn answer_cache(&mut self, at: &str, cache: &file::CacheConfig) -> AnswerCacheSettings {
        let defaults = AnswerCacheSettings::default();
        let settings = AnswerCacheSettings {
            max_age: cache.max_age.map_or(defaults.max_age, |d| d.0),
            max_entries: cache.max_entries.unwrap_or(defaults.max_entries),
            max_bytes: cache.max_bytes.map_or(defaults.max_bytes, |b| b.0),
            tool_calls: cache.tool_calls.unwrap_or(defaults.tool_calls),
        };
        if settings.max_age.is_zero() || settings.max_entries == 0 || settings.max_bytes == 0 {
            self.problem(format!("{at}.cache"), "max_age, max_entries and max_bytes must be above 0");
        }
        settings
    }
}

/// A target naming a configured provider, with its tier, weight and embedding space.
fn route_target(parsed: Target, target: &file::TargetConfig) -> RouteTarget {
    match target {
        file::TargetConfig::Plain(_) => {
            RouteTarget { target: parsed, tier: 0, weight: 1, embedding_space: None }
        }
        file::TargetConfig::Detailed(d) => RouteTarget {
            target: parsed,
            tier: d.tier,
            weight: d.weight,
            embedding_space: d.embedding_space.clone(),
        },
    }
}

/// Where the engine's problem at `path` (`targets[3]`, `context_window[0].model`) was written
/// in the file, when it names an entry of an expanded list: `None` for any other path.
fn written_at(path: &str, origins: &super::references::Origins) -> Option<String> {
    let (list, rest) = path.split_once('[')?;
    let (index, after) = rest.split_once(']')?;
    let places = match list {
        "targets" => &origins.targets,
        "context_window" => &origins.context_window,
        "content_policy" => &origins.content_policy,
        _ => return None,
    };
    let place = places.get(index.parse::<usize>().ok()?)?;
    Some(format!("{place}{after}"))
}

/// The route's rotation, retry, health gate and timeouts, each over the engine's default.
fn retry_and_timeouts(mut builder: RouteBuilder, config: &file::RouteConfig) -> RouteBuilder {
    if let Some(rotation) = config.rotation {
        builder = builder.rotation(match rotation {
            file::RotationConfig::Ordered => Rotation::Ordered,
            file::RotationConfig::RoundRobin => Rotation::RoundRobin,
            file::RotationConfig::Weighted => Rotation::Weighted,
            file::RotationConfig::LeastLatency => Rotation::LeastLatency,
            file::RotationConfig::Cheapest => Rotation::Cheapest,
        });
    }
    if let Some(retry) = &config.retry {
        let default = Retry::default();
        let retry = Retry {
            max_attempts: retry.max_attempts.unwrap_or(default.max_attempts),
            backoff_base: retry.backoff_base.map_or(default.backoff_base, |d| d.0),
            backoff_max: retry.backoff_max.map_or(default.backoff_max, |d| d.0),
            max_wait: retry.max_wait.map_or(default.max_wait, |d| d.0),
        };
        builder = builder.retry(retry);
    }
    if let Some(gate) = config.health_gate {
        builder = builder.health_gate(gate);
    }
    if let Some(ttl) = config.health_ttl {
        builder = builder.health_ttl(ttl.0);
    }
    if let Some(timeouts) = &config.timeouts {
        let default = Timeouts::default();
        let timeouts = Timeouts {
            first_byte: timeouts.first_byte.map_or(default.first_byte, |d| d.0),
            idle: timeouts.idle.map_or(default.idle, |d| d.0),
            total: timeouts.total.map_or(default.total, |d| d.0),
            // A configuration that sets `total` alone meant it for every attempt.
            whole: timeouts.whole.or(timeouts.total).map_or(default.whole, |d| d.0),
            deadline: timeouts.deadline.map(|d| d.0),
        };
        builder = builder.timeouts(timeouts);
    }
    builder
}

/// The route's error filters, hedging and spill-over.
fn filters_and_hedge(mut builder: RouteBuilder, config: &file::RouteConfig) -> RouteBuilder {
    if let Some(kinds) = &config.retry_on {
        builder = builder.retry_on(ErrorFilter::Kinds(kinds.clone()));
    }
    if let Some(kinds) = &config.fallback_on {
        builder = builder.fallback_on(ErrorFilter::Kinds(kinds.clone()));
    }
    if let Some(hedge) = &config.hedge {
        builder = builder.hedge(hedge_of(hedge));
    }
    if let Some(spill) = config.spill_over {
        builder = builder.spill_over(spill);
    }
    if let Some(on) = config.stream_upstream {
        builder = builder.stream_upstream(on);
    }
    if let Some(on) = config.drop_params {
        builder = builder.drop_params(on);
    }
    if let Some(file::Switch(on)) = config.continuation {
        builder = builder.continuation(on);
    }
    if let Some(affinity) = config.affinity {
        builder = builder.affinity(affinity == file::AffinityConfig::Session);
    }
    if let Some(ttl) = &config.affinity_ttl {
        builder = builder.affinity_ttl(ttl.0);
    }
    builder
}

/// The `hedge:` block over the engine's p95 defaults.
fn hedge_of(hedge: &file::HedgeConfig) -> Hedge {
    let defaults = Hedge::p95();
    Hedge {
        after: match hedge.after {
            file::HedgeAfterConfig::P95 => HedgeAfter::P95,
            file::HedgeAfterConfig::Fixed(delay) => HedgeAfter::Fixed(delay),
        },
        min_after: hedge.min_after.map_or(defaults.min_after, |d| d.0),
        max_share: hedge.max_share.unwrap_or(defaults.max_share),
        min_hedges: hedge.min_hedges.unwrap_or(defaults.min_hedges),
    }
}
