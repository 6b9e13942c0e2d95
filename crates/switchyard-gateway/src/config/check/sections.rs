//! The file's other sections, checked: pacing limits, health, the retry budget, logging, the
//! gateway's own settings and the fleet's Redis.

use std::time::Duration;

use switchyard::RetryBudgetSettings;
use switchyard::health::HealthSettings;
use switchyard_pacing::Limits;
use switchyard_state::{StateError, StateSettings};

use super::Validator;
use crate::config::settings::{ConnectionLimits, GatewaySettings, ResponsesBounds};
use crate::config::{LogSettings, file};
use crate::drills::Drills;
use crate::logging::LogFilter;

impl Validator<'_> {
    pub(super) fn limits(&mut self, path: &str, config: &file::LimitsConfig) -> Option<Limits> {
        let default = Limits::default();
        let limits = Limits {
            max_concurrent: config.max_concurrent,
            requests_per_minute: config.requests_per_minute,
            tokens_per_minute: config.tokens_per_minute,
            min_interval: config.min_interval.map_or(default.min_interval, |d| d.0),
            respect_headers: config.respect_headers.unwrap_or(default.respect_headers),
            reserve_fraction: config.reserve_fraction.unwrap_or(default.reserve_fraction),
            max_header_wait: config.max_header_wait.map_or(default.max_header_wait, |d| d.0),
            per_credential: config.per_credential.unwrap_or(default.per_credential),
        };
        for (key, value) in [
            ("max_concurrent", limits.max_concurrent),
            ("requests_per_minute", limits.requests_per_minute),
            ("tokens_per_minute", limits.tokens_per_minute),
        ] {
            if value == Some(0) {
                self.problem(format!("{path}.{key}"), "0 would never send a request: remove it for no limit");
            }
        }
        if !(0.0..1.0).contains(&limits.reserve_fraction) {
            self.problem(
                format!("{path}.reserve_fraction"),
                format!("{} is not a fraction below 1, like 0.1", limits.reserve_fraction),
            );
        }
        // `respect_headers` alone still paces once a provider's headers speak.
        Some(limits)
    }

    pub(super) fn health(&mut self, config: &file::HealthConfig) -> HealthSettings {
        let default = HealthSettings::default();
        let open_for = config.open_for.map_or(default.open_for, |d| d.0);
        let settings = HealthSettings {
            failure_threshold: config.failure_threshold.unwrap_or(default.failure_threshold),
            open_for,
            // Unset, the bound is never below the first open time it bounds.
            open_max: config.open_max.map_or(default.open_max.max(open_for), |d| d.0),
            half_open_probes: config.half_open_probes.unwrap_or(default.half_open_probes),
            cooldown_on_rate_limit: config
                .cooldown_on_rate_limit
                .map_or(default.cooldown_on_rate_limit, |d| d.0),
            max_cooldown_on_rate_limit: config
                .max_cooldown_on_rate_limit
                .map_or(default.max_cooldown_on_rate_limit, |d| d.0),
            cooldown_on_error: config.cooldown_on_error.map_or(default.cooldown_on_error, |d| d.0),
        };
        if settings.failure_threshold == 0 {
            self.problem("health.failure_threshold", "0 would open every circuit at once: use 1 or more");
        }
        if settings.half_open_probes == 0 {
            self.problem(
                "health.half_open_probes",
                "0 would keep a circuit half-open forever: use 1 or more",
            );
        }
        if settings.open_max < settings.open_for {
            self.problem("health.open_max", "is below health.open_for: raise it");
        }
        if settings.max_cooldown_on_rate_limit < settings.cooldown_on_rate_limit {
            self.problem(
                "health.max_cooldown_on_rate_limit",
                "is below health.cooldown_on_rate_limit: raise it",
            );
        }
        settings
    }

    pub(super) fn log(&mut self, config: Option<&file::LogConfig>) -> LogSettings {
        let config = config.cloned().unwrap_or_default();
        let level = config.level.and_then(|text| match LogFilter::parse(&text) {
            Ok(filter) => Some(filter),
            Err(problem) => {
                self.problem("log.level", problem);
                None
            }
        });
        LogSettings { level, access: config.access.unwrap_or(true) }
    }

    pub(super) fn budget(&mut self, config: &file::RetryBudgetConfig) -> RetryBudgetSettings {
        let default = RetryBudgetSettings::default();
        let settings = RetryBudgetSettings {
            ratio: config.ratio.unwrap_or(default.ratio),
            min_retries: config.min_retries.unwrap_or(default.min_retries),
            window: config.window.map_or(default.window, |d| d.0),
        };
        if !(0.0..=10.0).contains(&settings.ratio) {
            self.problem(
                "retry_budget.ratio",
                format!("{} is not a fraction of requests: use a value like 0.2", settings.ratio),
            );
        }
        if settings.window.is_zero() {
            self.problem("retry_budget.window", "is 0: use a window such as 10s");
        }
        settings
    }

    fn responses(&mut self, config: Option<&file::ResponsesConfig>) -> ResponsesBounds {
        let defaults = ResponsesBounds::default();
        let Some(config) = config else { return defaults };
        let bounds = ResponsesBounds {
            max_entries: config.max_entries.unwrap_or(defaults.max_entries),
            max_age: config.max_age.map_or(defaults.max_age, |d| d.0),
            max_bytes: config.max_bytes.map_or(defaults.max_bytes, |b| b.0),
        };
        for (field, zero) in [
            ("gateway.responses.max_entries", bounds.max_entries == 0),
            ("gateway.responses.max_age", bounds.max_age.is_zero()),
            ("gateway.responses.max_bytes", bounds.max_bytes == 0),
        ] {
            if zero {
                self.problem(field, "0 would keep nothing: to keep no response, send `store: false`");
            }
        }
        bounds
    }

    pub(super) fn gateway(&mut self, config: &file::GatewayConfig) -> Option<GatewaySettings> {
        let admin_key =
            config.admin_key.as_ref().and_then(|text| self.key("gateway.admin_key", text).map(|(s, _)| s));
        // 32 MiB: a photo or two as base64 (the providers take requests of that order).
        let max_body = config.max_body.map_or(32 << 20, |b| b.0);
        if max_body < 1024 {
            self.problem(
                "gateway.max_body",
                format!("{max_body} bytes is too small for any request: use at least 1kb"),
            );
        }
        let defaults = ConnectionLimits::defaults();
        let header_timeout =
            self.nonzero("gateway.header_timeout", config.header_timeout, defaults.header_timeout);
        let idle_timeout = self.nonzero("gateway.idle_timeout", config.idle_timeout, defaults.idle_timeout);
        let body_timeout = self.nonzero("gateway.body_timeout", config.body_timeout, defaults.body_timeout);
        let send_timeout = self.nonzero("gateway.send_timeout", config.send_timeout, defaults.send_timeout);
        let max_connections = config.max_connections.unwrap_or(defaults.max_connections);
        if max_connections == 0 {
            self.problem(
                "gateway.max_connections",
                "0 would accept no connection: use at least 1, or leave it out for the default",
            );
        }
        if config.threads == Some(0) {
            self.problem(
                "gateway.threads",
                "0 would serve nothing: use at least 1, or leave it out for one per core",
            );
        }
        Some(GatewaySettings {
            // Checked with the routes they may name: `client_keys`.
            keys: crate::keys::ClientKeys::default(),
            admin_key,
            max_body,
            recent_requests: config.recent_requests.unwrap_or(1000),
            shutdown_grace: config.shutdown_grace.map_or(Duration::from_secs(30), |d| d.0),
            open: config.open.unwrap_or(false),
            metrics_open: config.metrics_open.unwrap_or(false),
            direct_targets: config.direct_targets.unwrap_or(true),
            connections: ConnectionLimits {
                header_timeout,
                idle_timeout,
                body_timeout,
                send_timeout,
                max_connections,
            },
            threads: config.threads.and_then(std::num::NonZeroUsize::new),
            shared_state: None,
            adapters: Default::default(),
            pacer: None,
            responses: self.responses(config.responses.as_ref()),
            drills: Drills::default(),
            telemetry: None,
            responses_native: Vec::new(),
            anthropic_providers: Vec::new(),
        })
    }

    /// The settings of the fleet's Redis (`state:`): its URL and prefix, checked as the store
    /// would take them; nothing connects here.
    pub(super) fn shared_state(&mut self, config: &file::StateConfig) -> Option<StateSettings> {
        let (url, _) = self.resolve("state.redis", &config.redis, "URL", "REDIS_URL")?;
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            self.problem(
                "state.redis",
                format!(
                    "`{}` is not a Redis URL: use redis://host:6379/0, or rediss:// for TLS",
                    switchyard_state::mask_url(&url)
                ),
            );
            return None;
        }
        if let Some(problem) = switchyard_state::unread_password(&url) {
            self.problem("state.redis", format!("`{}`: {problem}", switchyard_state::mask_url(&url)));
            return None;
        }
        let mut settings = StateSettings::new(url);
        if let Some(prefix) = &config.prefix {
            settings.prefix = prefix.clone();
        }
        settings.trails = config.trails.unwrap_or(true);
        let named = config.replica.as_ref().map(|name| (name.trim().to_owned(), "state.replica"));
        let named = named.or_else(|| {
            (self.env)("SWITCHYARD_REPLICA").map(|name| (name.trim().to_owned(), "SWITCHYARD_REPLICA"))
        });
        let mut replica_from = "state.replica";
        if let Some((name, from)) = named {
            settings.replica = name;
            replica_from = from;
        }
        match settings.check() {
            Ok(()) => Some(settings),
            Err(error) => {
                let path = match error {
                    StateError::BadPrefix(_) => "state.prefix",
                    StateError::BadReplica(_) => replica_from,
                    _ => "state.redis",
                };
                self.problem(path, error.to_string());
                None
            }
        }
    }
}
