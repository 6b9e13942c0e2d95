//! The configuration file's shape: what YAML (or TOML) deserializes into, before validation.
//!
//! Every struct denies unknown keys, so a typo is an error that names the key, never a setting
//! silently ignored. The key names are the contract: extend, don't rename.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use switchyard::ErrorKind;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
/// The configuration file as written: every section, not yet checked.
pub struct FileConfig {
    /// `listen`: the address to serve on (default 127.0.0.1:4680).
    pub listen: Option<String>,
    #[serde(default)]
    /// `providers`: each upstream account by its id.
    pub providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    /// `routes`: each route by its name (the `model` clients send).
    pub routes: BTreeMap<String, RouteConfig>,
    /// Which route governs requests that name a target directly. Default: `default`, else the
    /// first route in name order.
    pub default_route: Option<String>,
    #[serde(default)]
    /// `health`: the health board's settings.
    pub health: HealthConfig,
    #[serde(default)]
    /// `retry_budget`: how many retries the router may add.
    pub retry_budget: RetryBudgetConfig,
    #[serde(default)]
    /// `gateway`: keys, limits and the HTTP server's own settings.
    pub gateway: GatewayConfig,
    /// Shared state across replicas; none keeps health in this process's memory.
    pub state: Option<StateConfig>,
    /// OpenTelemetry traces; the standard `OTEL_*` environment fills in what is not set.
    pub telemetry: Option<TelemetryConfig>,
    /// What `serve` logs.
    pub log: Option<LogConfig>,
}

/// `log: { level: info, access: true }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A level, or directives as `RUST_LOG` writes them (`warn,switchyard=debug`); below
    /// `--log-level` and `RUST_LOG`. Default `info`.
    pub level: Option<String>,
    /// One line per request (`switchyard::access`). Default true.
    pub access: Option<bool>,
}

/// `telemetry:`: traces exported as OTLP over HTTP.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is appended). Default
    /// `$OTEL_EXPORTER_OTLP_ENDPOINT`, else `http://localhost:4318`.
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    pub protocol: Option<String>,
    /// `service.name`. Default `$OTEL_SERVICE_NAME`, else `switchyard`.
    pub service_name: Option<String>,
    /// One of `OTEL_TRACES_SAMPLER`'s names. Default `parentbased_always_on`.
    pub sampler: Option<String>,
    /// The ratio of the ratio samplers.
    pub sampler_arg: Option<f64>,
    /// Headers for the collector; values may be `env://NAME`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long one export may take. Default 10s.
    pub timeout: Option<DurationText>,
}

/// `state: { redis: URL, prefix }`: replicas share health, breakers, cooldowns and resets.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// `redis://host:port/db`, `rediss://` for TLS, or `env://NAME`.
    pub redis: String,
    /// Prefixes every key, so that several fleets can share one Redis. Default `switchyard`.
    pub prefix: Option<String>,
    /// This replica's name in the fleet, unique in it: else `SWITCHYARD_REPLICA`, else the
    /// host name (a pod's name in Kubernetes).
    pub replica: Option<String>,
    /// Whether finished requests' trails and events go to Redis for the fleet's view (default
    /// true).
    pub trails: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
/// A provider's `kind`: which API it speaks.
pub enum Kind {
    /// OpenAI itself.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// Azure OpenAI.
    Azure,
    /// A server that speaks the OpenAI API (vLLM, Ollama, Groq, ...).
    OpenaiCompatible,
    /// AWS Bedrock's runtime.
    Bedrock,
    /// Google Vertex AI: Claude and Gemini of one project and region.
    Vertex,
    /// A simulated provider, for demos, drills and tests.
    Simulated,
}

impl Kind {
    /// The kind as the file writes it (`openai_compatible`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Azure => "azure",
            Kind::OpenaiCompatible => "openai_compatible",
            Kind::Bedrock => "bedrock",
            Kind::Vertex => "vertex",
            Kind::Simulated => "simulated",
        }
    }
}

/// One of a provider's `api_keys`.
#[derive(Debug, Clone)]
pub enum KeyConfig {
    /// `env://NAME` or the key itself, priority 0.
    Text(String),
    /// `{ key, priority }`.
    Ranked(RankedKey),
}

/// A provider key with its priority.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankedKey {
    pub key: String,
    #[serde(default)]
    pub priority: u32,
}

impl TextOrMap for KeyConfig {
    type Map = RankedKey;
    const EXPECTING: &'static str = "a key (`env://NAME` or its text), or `{ key, priority }`";
    fn text(text: String) -> Self {
        KeyConfig::Text(text)
    }
    fn map(map: RankedKey) -> Self {
        KeyConfig::Ranked(map)
    }
}

/// A setting written either as text or as a map. Read so (not `untagged`, which hides why a
/// map was refused behind "did not match any variant") that a mistake inside the map is
/// reported at its own key path: `unknown field `rpm`, expected one of ...`.
pub trait TextOrMap: Sized {
    /// What the map reads as.
    type Map: serde::de::DeserializeOwned;
    /// What the setting may be, for the refusal of anything else.
    const EXPECTING: &'static str;
    fn text(text: String) -> Self;
    fn map(map: Self::Map) -> Self;
}

/// Reads a [`TextOrMap`] setting.
fn text_or_map<'de, D: Deserializer<'de>, T: TextOrMap>(deserializer: D) -> Result<T, D::Error> {
    struct Visitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: TextOrMap> serde::de::Visitor<'de> for Visitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            Ok(T::text(v.to_owned()))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::Map::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(T::map)
        }
    }
    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

impl<'de> Deserialize<'de> for KeyConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        text_or_map(deserializer)
    }
}

impl KeyConfig {
    /// The key's text and priority.
    pub fn parts(&self) -> (&str, u32) {
        match self {
            KeyConfig::Text(key) => (key, 0),
            KeyConfig::Ranked(RankedKey { key, priority }) => (key, *priority),
        }
    }
}

/// How a provider's keys share its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyRotationConfig {
    Ordered,
    RoundRobin,
}

/// How an Anthropic provider's models are asked to think for `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingConfig {
    /// `thinking: {type: adaptive}` with `output_config.effort` (Claude 4.6 and later).
    Adaptive,
    /// `thinking: {type: enabled, budget_tokens}` (models before 4.6).
    Budget,
}

/// `aws: { access_key_id, secret_access_key, session_token, profile, role_arn }`: how a Bedrock
/// provider finds its credentials (keys may be `env://NAME`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    /// An explicit access key id, with `secret_access_key`.
    pub access_key_id: Option<String>,
    /// The secret of the explicit key.
    pub secret_access_key: Option<String>,
    /// The session token of temporary explicit keys.
    pub session_token: Option<String>,
    /// A profile of the shared config and credentials files.
    pub profile: Option<String>,
    /// A role assumed on top of the credentials found.
    pub role_arn: Option<String>,
}

/// `betas: forward | drop | [flag, ...]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum BetasConfig {
    /// `forward` or `drop`.
    Mode(String),
    /// The flags passed on.
    Allow(Vec<String>),
}

/// How a provider answers Responses API clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponsesMode {
    /// Through its own `/responses`.
    Native,
    /// Translated to Chat Completions.
    Translated,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: Kind,
    pub base_url: Option<String>,
    /// One key: `env://NAME` or the key itself.
    pub api_key: Option<String>,
    /// Several keys, rotated on auth failures, exhaustion and cooldowns; each a string
    /// (priority 0) or `{ key, priority }` (lower first, as route tiers).
    #[serde(default)]
    pub api_keys: Vec<KeyConfig>,
    /// How the keys share traffic: `ordered` (the default: the first usable key of the top
    /// priority takes every call) or `round_robin` (calls alternate over them).
    pub rotation: Option<KeyRotationConfig>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub api_version: Option<String>,
    pub organization: Option<String>,
    /// OpenAI's `OpenAI-Project`; a `vertex` provider's Google Cloud project.
    pub project: Option<String>,
    /// A `bedrock` provider's AWS region (`us-east-1`: its endpoint's and SigV4's), or a
    /// `vertex` provider's region (`us-east5`, or `global`).
    pub region: Option<String>,
    /// A `vertex` provider's Google credentials file (a service account key, gcloud's
    /// authorized user, a workload identity federation file), or `env://NAME` naming it.
    /// Default: Application Default Credentials.
    pub credentials: Option<String>,
    /// `native` or `translated`: how an `openai_compatible` server answers Responses API
    /// clients (default `translated`, to Chat Completions).
    pub responses: Option<ResponsesMode>,
    /// Bedrock's SigV4 credentials; the AWS default chain when absent.
    pub aws: Option<AwsConfig>,
    /// Which of a client's `anthropic-beta` flags a Claude provider passes on: `forward` (the
    /// default), `drop`, or a list of the flags allowed.
    pub betas: Option<BetasConfig>,
    /// `adaptive` or `budget`: how an `anthropic` provider's models think when an OpenAI client
    /// sends `reasoning_effort` (default: by each model's name, adaptive from Claude 4.6 on).
    pub thinking: Option<ThinkingConfig>,
    /// `true` for an `openai_compatible` (or simulated) server that continues a final
    /// assistant message rather than answering it anew, so that a stream broken after its
    /// first text can be continued on it (Anthropic providers always can). Default false.
    pub prefill: Option<bool>,
    #[serde(default)]
    pub http2: bool,
    pub connect_timeout: Option<DurationText>,
    /// A PEM file of certificate authorities trusted for this provider, beside the platform's.
    pub ca_file: Option<String>,
    /// Price per million tokens, by model.
    #[serde(default)]
    pub prices: BTreeMap<String, PriceConfig>,
    /// The provider's own id of each model a target names (`claude-sonnet-4-5:
    /// us.anthropic.claude-sonnet-4-5-20250929-v1:0`): one route can name the same model on
    /// several providers.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Client-side pacing of this provider's allowance.
    pub limits: Option<LimitsConfig>,
    // Simulated providers only: how they behave. (Not a flattened struct: serde cannot deny
    // unknown keys through a flatten.)
    pub latency: Option<LatencyConfig>,
    #[serde(default)]
    pub error_rates: BTreeMap<ErrorKind, f64>,
    pub reply: Option<String>,
    pub stream: Option<StreamConfig>,
    pub seed: Option<u64>,
}

impl ProviderConfig {
    /// A provider of `kind` with nothing else set.
    pub fn empty(kind: Kind) -> Self {
        Self {
            kind,
            base_url: None,
            api_key: None,
            api_keys: Vec::new(),
            rotation: None,
            headers: BTreeMap::new(),
            api_version: None,
            organization: None,
            project: None,
            region: None,
            credentials: None,
            responses: None,
            aws: None,
            betas: None,
            thinking: None,
            prefill: None,
            http2: false,
            connect_timeout: None,
            ca_file: None,
            prices: BTreeMap::new(),
            models: BTreeMap::new(),
            limits: None,
            latency: None,
            error_rates: BTreeMap::new(),
            reply: None,
            stream: None,
            seed: None,
        }
    }

    /// The simulated-only keys that are set, by name.
    pub fn keys_set(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.latency.is_some() {
            keys.push("latency");
        }
        if !self.error_rates.is_empty() {
            keys.push("error_rates");
        }
        if self.reply.is_some() {
            keys.push("reply");
        }
        if self.stream.is_some() {
            keys.push("stream");
        }
        if self.seed.is_some() {
            keys.push("seed");
        }
        keys
    }
}

/// `latency: 50ms` or `latency: { min: 20ms, max: 80ms }`.
#[derive(Debug, Clone)]
pub enum LatencyConfig {
    Fixed(DurationText),
    Range { min: DurationText, max: DurationText },
}

impl<'de> Deserialize<'de> for LatencyConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Not `untagged`: that would hide why a duration was refused behind "did not match".
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = LatencyConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 50ms, or { min, max }")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<LatencyConfig, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Range {
                    min: DurationText,
                    max: DurationText,
                }
                let range = Range::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(LatencyConfig::Range { min: range.min, max: range.max })
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<LatencyConfig, E> {
                DurationVisitor.visit_u64(v).map(LatencyConfig::Fixed)
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<LatencyConfig, E> {
                DurationVisitor.visit_i64(v).map(LatencyConfig::Fixed)
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<LatencyConfig, E> {
                DurationVisitor.visit_f64(v).map(LatencyConfig::Fixed)
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LatencyConfig, E> {
                DurationVisitor.visit_str(v).map(LatencyConfig::Fixed)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    pub chunks: usize,
    #[serde(default)]
    pub gap: Option<DurationText>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_concurrent: Option<u32>,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u32>,
    pub min_interval: Option<DurationText>,
    pub respect_headers: Option<bool>,
    pub reserve_fraction: Option<f64>,
    pub max_header_wait: Option<DurationText>,
    pub per_credential: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub input: f64,
    pub output: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub targets: Vec<TargetConfig>,
    #[serde(default)]
    pub rotation: Option<RotationConfig>,
    pub retry: Option<RetryConfig>,
    pub health_gate: Option<bool>,
    pub health_ttl: Option<DurationText>,
    #[serde(default)]
    pub context_window: Vec<String>,
    #[serde(default)]
    pub content_policy: Vec<String>,
    pub timeouts: Option<TimeoutsConfig>,
    #[serde(default)]
    pub candidates: Vec<CandidateConfig>,
    pub retry_on: Option<Vec<ErrorKind>>,
    pub fallback_on: Option<Vec<ErrorKind>>,
    /// Send a call that would wait longer than `retry.max_wait` for pacing to the next target.
    pub spill_over: Option<bool>,
    /// Hedge slow first attempts on the chain's next target.
    pub hedge: Option<HedgeConfig>,
    /// Send non-streamed chats upstream as streams and put them back together (default true).
    pub stream_upstream: Option<bool>,
    /// Continue a stream broken after its first text on the next target: `on` (default) or
    /// `off`.
    pub continuation: Option<Switch>,
    /// `session` (a session's requests go back to the target and key that served it) or
    /// `none`. Default `session` where a tier rotates or a provider rotates its keys.
    pub affinity: Option<AffinityConfig>,
    /// How long a session's pin lasts without a request. Default 1h.
    pub affinity_ttl: Option<DurationText>,
    /// Send a target the request without a parameter its API has no equivalent for, rather
    /// than skip it (default false).
    pub drop_params: Option<bool>,
}

/// `affinity: session | none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AffinityConfig {
    Session,
    None,
}

/// `on` or `off` (a boolean reads too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch(pub bool);

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Bool(on) => Ok(Switch(on)),
            serde_json::Value::String(text) if text == "on" => Ok(Switch(true)),
            serde_json::Value::String(text) if text == "off" => Ok(Switch(false)),
            other => Err(serde::de::Error::custom(format!("`{other}` is neither on nor off"))),
        }
    }
}

/// `hedge: { after: p95 | <duration>, min_after: <duration>, max_share: <share>, min_hedges: <n> }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeConfig {
    /// `p95` (the target's recent p95) or a fixed delay such as `800ms`.
    pub after: HedgeAfterConfig,
    /// The delay's floor, and the delay until the target has 20 samples. Default 300ms.
    pub min_after: Option<DurationText>,
    /// Hedges at most, as a share of the route's requests over the last 10 s. Default 0.1.
    pub max_share: Option<f64>,
    /// Hedges always allowed over the last 10 s, the fleet's with shared state. Default 3.
    pub min_hedges: Option<u32>,
}

/// `p95` or a duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeAfterConfig {
    P95,
    Fixed(Duration),
}

impl<'de> Deserialize<'de> for HedgeAfterConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HedgeAfterConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("p95, or a duration such as 800ms")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HedgeAfterConfig, E> {
                DurationVisitor.visit_u64(v).map(|d| HedgeAfterConfig::Fixed(d.0))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HedgeAfterConfig, E> {
                DurationVisitor.visit_i64(v).map(|d| HedgeAfterConfig::Fixed(d.0))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<HedgeAfterConfig, E> {
                DurationVisitor.visit_f64(v).map(|d| HedgeAfterConfig::Fixed(d.0))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HedgeAfterConfig, E> {
                if text == "p95" {
                    return Ok(HedgeAfterConfig::P95);
                }
                if let Some(message) = unit_missing(text) {
                    return Err(E::custom(message));
                }
                parse_duration(text)
                    .map(HedgeAfterConfig::Fixed)
                    .ok_or_else(|| E::custom(format!("`{text}` is neither p95 nor a duration such as 800ms")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl RouteConfig {
    /// A route over `targets` with every other setting at its default.
    pub fn with_targets(targets: Vec<TargetConfig>) -> Self {
        Self {
            targets,
            rotation: None,
            retry: None,
            health_gate: None,
            health_ttl: None,
            context_window: Vec::new(),
            content_policy: Vec::new(),
            timeouts: None,
            candidates: Vec::new(),
            retry_on: None,
            fallback_on: None,
            spill_over: None,
            hedge: None,
            stream_upstream: None,
            continuation: None,
            affinity: None,
            affinity_ttl: None,
            drop_params: None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum TargetConfig {
    Plain(String),
    Detailed(DetailedTarget),
}

impl TextOrMap for TargetConfig {
    type Map = DetailedTarget;
    const EXPECTING: &'static str =
        "a `provider:model` target, or `{ target, tier, weight, embedding_space }`";
    fn text(text: String) -> Self {
        TargetConfig::Plain(text)
    }
    fn map(map: DetailedTarget) -> Self {
        TargetConfig::Detailed(map)
    }
}

impl<'de> Deserialize<'de> for TargetConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        text_or_map(deserializer)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailedTarget {
    pub target: String,
    #[serde(default)]
    pub tier: u32,
    #[serde(default = "one")]
    pub weight: u32,
    pub embedding_space: Option<String>,
}

fn one() -> u32 {
    1
}

impl TargetConfig {
    pub fn text(&self) -> &str {
        match self {
            TargetConfig::Plain(text) => text,
            TargetConfig::Detailed(detailed) => &detailed.target,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RotationConfig {
    Ordered,
    RoundRobin,
    Weighted,
    LeastLatency,
    Cheapest,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    pub max_attempts: Option<u32>,
    pub backoff_base: Option<DurationText>,
    pub backoff_max: Option<DurationText>,
    pub max_wait: Option<DurationText>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsConfig {
    pub first_byte: Option<DurationText>,
    pub idle: Option<DurationText>,
    pub total: Option<DurationText>,
    pub whole: Option<DurationText>,
    pub deadline: Option<DurationText>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateConfig {
    pub name: String,
    /// A fixed answer.
    pub text: Option<String>,
    /// The last good answer to the same request (`stale-if-error`).
    pub cache: Option<CacheConfig>,
}

/// `cache: { max_age: 1h, max_entries: 1000, max_bytes: 64mb, tool_calls: false }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    pub max_age: Option<DurationText>,
    pub max_entries: Option<usize>,
    pub max_bytes: Option<ByteSize>,
    pub tool_calls: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    pub failure_threshold: Option<u32>,
    pub open_for: Option<DurationText>,
    pub open_max: Option<DurationText>,
    pub half_open_probes: Option<u32>,
    pub cooldown_on_rate_limit: Option<DurationText>,
    pub max_cooldown_on_rate_limit: Option<DurationText>,
    pub cooldown_on_error: Option<DurationText>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBudgetConfig {
    pub ratio: Option<f64>,
    pub min_retries: Option<u32>,
    pub window: Option<DurationText>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Keys clients must send (Bearer or x-api-key); none = open. Each a string, or a key
    /// with a name, the models it may use, limits and a budget.
    #[serde(default)]
    pub keys: Vec<ClientKeyConfig>,
    pub admin_key: Option<String>,
    /// The largest request body accepted, in bytes or with a unit (`4mb`). Default 32 MiB.
    pub max_body: Option<ByteSize>,
    /// How many recent requests' trails `/admin/requests/{id}` keeps. Default 1000.
    pub recent_requests: Option<usize>,
    /// How long open streams may run on after SIGINT/SIGTERM. Default 30 s.
    pub shutdown_grace: Option<DurationText>,
    /// Serve beyond loopback with real providers and no gateway keys, on purpose. Default off.
    pub open: Option<bool>,
    /// Serve `/metrics` beyond loopback without the admin key. Default off.
    pub metrics_open: Option<bool>,
    /// Let clients name a `provider:model` target no route is named as. Default on.
    pub direct_targets: Option<bool>,
    /// How long a connection may take to send a complete request head. Default 30 s.
    pub header_timeout: Option<DurationText>,
    /// How long a keep-alive connection may sit idle between requests. Default 75 s.
    pub idle_timeout: Option<DurationText>,
    /// How long a request body may go without a byte while it is read. Default 30 s.
    pub body_timeout: Option<DurationText>,
    /// How long a response may go without the client taking a byte of it. Default 60 s.
    pub send_timeout: Option<DurationText>,
    /// Client connections open at once. Default: the smaller of 10,000 and 80% of the
    /// process's descriptor limit.
    pub max_connections: Option<usize>,
    /// Serving threads, each one event loop. Default: one per core.
    pub threads: Option<usize>,
    /// The Responses API's conversation store.
    pub responses: Option<ResponsesConfig>,
}

/// One of `gateway.keys`: the key alone (`env://NAME` or the text), or with its rules.
#[derive(Debug, Clone)]
pub enum ClientKeyConfig {
    /// The key, with no limits.
    Text(String),
    /// A key with a name and rules.
    Named(NamedKeyConfig),
    /// Neither: what it is instead ("an integer"), for the check to name in its place while
    /// the other keys are checked on.
    Invalid(&'static str),
}

impl<'de> Deserialize<'de> for ClientKeyConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Not `untagged`: a mistake inside a key's map is reported at its own key path.
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = ClientKeyConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key (`env://NAME` or its text), or a map with its `key` (and `name`, `routes`, `limits`, `budget`)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Text(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ClientKeyConfig, A::Error> {
                let deserializer = serde::de::value::MapAccessDeserializer::new(map);
                NamedKeyConfig::deserialize(deserializer).map(ClientKeyConfig::Named)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Invalid("a boolean"))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Invalid("a number"))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Invalid("a number"))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Invalid("a number"))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<ClientKeyConfig, E> {
                Ok(ClientKeyConfig::Invalid("empty"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ClientKeyConfig, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(ClientKeyConfig::Invalid("a list"))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

/// A key of `gateway.keys` with its rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedKeyConfig {
    /// What logs, metrics, traces and `/admin/keys` call it; without one, `key-` and its
    /// hash's first digits.
    pub name: Option<String>,
    /// The key: `env://NAME` or its text (required: the check says so when it is missing,
    /// and checks the other keys on).
    pub key: Option<String>,
    /// The models it may use: route names, patterns, `provider:model` targets. Default all.
    pub routes: Option<Vec<String>>,
    /// Its rate and concurrency limits.
    pub limits: Option<KeyLimitsConfig>,
    /// What it may spend per period.
    pub budget: Option<BudgetConfig>,
}

/// `gateway.keys[].limits`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyLimitsConfig {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u32>,
}

/// `gateway.keys[].budget`: `{ usd: 50, per: day }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub usd: f64,
    pub per: BudgetPeriod,
}

/// `day` (UTC) or `month` (calendar, UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Day,
    Month,
}

/// `gateway.responses`: how much of the Responses API's conversations the gateway keeps.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponsesConfig {
    /// Responses kept at most. Default 10,000.
    pub max_entries: Option<usize>,
    /// How long one is kept. Default 24 h.
    pub max_age: Option<DurationText>,
    /// The most bytes they may take together. Default 256 MiB.
    pub max_bytes: Option<ByteSize>,
}

/// A duration written `250ms`, `30s`, `5m`, `1h` or `1m30s`. A number without a unit is
/// refused: `5` could mean seconds or milliseconds, and a guess would be silently wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationText(pub Duration);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Reads a [`DurationText`]; the other duration-like settings (`latency`, `hedge.after`) hand
/// their durations to it.
struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = DurationText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 250ms, 30s, 5m or 1h")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationText, E> {
        Err(E::custom(no_unit(&v.to_string(), v as f64)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationText, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(bad_duration(&v.to_string()))),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<DurationText, E> {
        if (0.0..1e9).contains(&v) {
            Err(E::custom(no_unit(&v.to_string(), v)))
        } else {
            Err(E::custom(bad_duration(&v.to_string())))
        }
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationText, E> {
        if let Some(message) = unit_missing(v) {
            return Err(E::custom(message));
        }
        let seconds = config_seconds(v).ok_or_else(|| E::custom(bad_duration(v)))?;
        if seconds > LONGEST.as_secs_f64() {
            return Err(E::custom(format!("duration `{v}` is longer than a year, the most a setting takes")));
        }
        Ok(DurationText(Duration::from_secs_f64(seconds)))
    }
}

/// The longest duration a setting takes.
const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

fn bad_duration(text: &str) -> String {
    format!("bad duration `{text}`: write a number with a unit, like 250ms, 30s, 5m or 1h")
}

/// The refusal of a text that is a number alone (`"5"`), `None` for any other text.
fn unit_missing(text: &str) -> Option<String> {
    let text = text.trim();
    let number = text.parse::<f64>().ok().filter(|n| (0.0..1e9).contains(n))?;
    Some(no_unit(text, number))
}

/// The refusal of a number without a unit, with the two spellings of what it most likely
/// meant: seconds below 1000 (`health_ttl: 5`: 5s or 5000ms), milliseconds from 1000 on
/// (`first_byte: 5000`: 5000ms or 5s).
fn no_unit(text: &str, number: f64) -> String {
    let (first, second) = if number < 1000.0 {
        (format!("{text}s"), format!("{}ms", (number * 1000.0).round()))
    } else {
        (format!("{text}ms"), format!("{}s", number / 1000.0))
    };
    format!("`{text}` has no unit: write {first} or {second}")
}

/// `250ms`, `1.5s`, `30s`, `5m`, `1h`, or `1m30s`, up to a year (`None` past it: a setting is
/// never shortened unseen).
pub fn parse_duration(text: &str) -> Option<Duration> {
    config_seconds(text).filter(|seconds| *seconds <= LONGEST.as_secs_f64()).map(Duration::from_secs_f64)
}

/// The seconds a setting's duration says, unclamped.
fn config_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    if !text.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    switchyard::time::duration_seconds(text)
}

/// A size in bytes: a number, or with a unit (`512kb`, `4mb`, `1gb`; powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        let bad =
            |text: &str| format!("bad size `{text}`: write bytes, or a number with kb, mb or gb, like 4mb");
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => {
                usize::try_from(n).map(ByteSize).map_err(|_| serde::de::Error::custom(bad(&n.to_string())))
            }
            Raw::Text(text) => {
                let lower = text.trim().to_ascii_lowercase();
                let (number, scale) = if let Some(n) = lower.strip_suffix("kb") {
                    (n, 1usize << 10)
                } else if let Some(n) = lower.strip_suffix("mb") {
                    (n, 1 << 20)
                } else if let Some(n) = lower.strip_suffix("gb") {
                    (n, 1 << 30)
                } else if let Some(n) = lower.strip_suffix('b') {
                    (n, 1)
                } else {
                    (lower.as_str(), 1)
                };
                number
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| n.checked_mul(scale))
                    .map(ByteSize)
                    .ok_or_else(|| serde::de::Error::custom(bad(&text)))
            }
        }
    }
}
