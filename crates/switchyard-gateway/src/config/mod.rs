//! Configuration: one file (YAML, or TOML), the environment, or the embedded demo; validated
//! once at load, with errors that name the file, the key path and the fix.

pub(crate) mod file;
mod locate;
mod read;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use switchyard::credential::Secret;
use switchyard::health::HealthSettings;
use switchyard::provider::Provider;
use switchyard::route::{Candidate, ErrorFilter, Retry, Rotation, Route, RouteTarget, Timeouts};
use switchyard::simulated::SimulatedProvider;
use switchyard_pacing::{LimitPacer, Limits};

use crate::drills::Drills;
use crate::logging::LogFilter;
use crate::telemetry::{OtlpProtocol, SamplerSetting, TelemetrySettings};
use switchyard::{Price, ProviderEntry, RetryBudgetSettings, Router, Target};
use switchyard_providers::anthropic::ThinkingStyle;
use switchyard_providers::{HttpSettings, ProviderKind, ProviderSettings};
use switchyard_state::{RedisStore, StateError, StateSettings};

pub use file::{FileConfig, Kind, parse_duration};
pub use locate::{Choice, Place, Reason, load, locate, standard_places, unasked_demo};

/// The address the gateway listens on when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4680";

const DEMO: &str = include_str!("demo.yaml");

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(String),
    Environment(Vec<String>),
    Demo,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "file {path}"),
            Source::Environment(vars) => write!(f, "environment ({})", vars.join(", ")),
            Source::Demo => f.write_str("embedded demo (simulated providers, no keys needed)"),
        }
    }
}

/// One problem, at one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "{}: {}: {}", self.file, one.path, one.message),
            many => {
                write!(f, "{}: {} problems:", self.file, many.len())?;
                for problem in many {
                    write!(f, "\n  {}: {}", problem.path, problem.message)?;
                }
                Ok(())
            }
        }
    }
}

impl ConfigError {
    fn one(file: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { file: file.to_owned(), problems: vec![Problem { path: path.into(), message: message.into() }] }
    }
}

/// Gateway settings that are not routing.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub keys: Vec<Secret>,
    pub admin_key: Option<Secret>,
    pub max_body: usize,
    pub recent_requests: usize,
    pub shutdown_grace: Duration,
    /// `gateway.open`: an open relay beyond loopback, on purpose.
    pub open: bool,
    /// `gateway.metrics_open`: `/metrics` beyond loopback without the admin key.
    pub metrics_open: bool,
    /// The connection rules every client connection is held to.
    pub connections: ConnectionLimits,
    /// The fleet's shared state (`state:`), when configured; started by `serve`.
    pub shared_state: Option<Arc<RedisStore>>,
    /// The bounds of the Responses API's conversation store (`gateway.responses`).
    pub responses: ResponsesBounds,
    /// The providers fault drills can change (`POST /admin/simulated/{provider}`).
    pub drills: Drills,
    /// Where traces go, when they are exported (`telemetry:` or the `OTEL_*` environment).
    pub telemetry: Option<TelemetrySettings>,
    /// The providers spoken to in the Responses API itself (OpenAI, Azure, and
    /// `openai_compatible` ones with `responses: native`); the others get it translated.
    pub responses_native: Vec<String>,
    /// The Anthropic providers: the only ones that read Claude's signed thinking of earlier
    /// turns.
    pub anthropic_providers: Vec<String>,
}

/// How much of the Responses API's conversations the gateway keeps: the oldest go first when
/// a bound is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesBounds {
    /// Responses kept at most.
    pub max_entries: usize,
    /// How long one is kept.
    pub max_age: Duration,
    /// The most bytes they may take together (their JSON, as stored).
    pub max_bytes: usize,
}

impl Default for ResponsesBounds {
    /// 10,000 responses, 24 hours, 256 MiB.
    fn default() -> Self {
        Self { max_entries: 10_000, max_age: Duration::from_secs(24 * 3600), max_bytes: 256 << 20 }
    }
}

/// How long a client connection may take and how many may be open: what keeps a client that
/// opens connections and never finishes a request from holding the gateway's descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A connection that has not sent a complete request head by then is closed (with a 408
    /// when it had started one). The first head's clock starts at accept, a later one's at
    /// its first byte.
    pub header_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A request whose body goes this long without a byte, while its handler reads it, is
    /// answered `408` and its connection closed.
    pub body_timeout: Duration,
    /// Connections open at once; at the bound the gateway stops accepting until some close.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The defaults: 30 s for a head, 75 s idle, 30 s without a byte of a body, and
    /// [`default_max_connections`].
    pub fn defaults() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            body_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
        }
    }
}

/// The smaller of 10,000 and 80% of this process's descriptor limit (the rest is left for
/// upstream connections, logs and the listener). 10,000 where the limit cannot be read.
pub fn default_max_connections() -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| {
        let line = text.lines().find(|line| line.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    match limit {
        Some(limit) => (limit / 10 * 8).clamp(1, 10_000),
        None => 10_000,
    }
}

/// Who can reach a gateway at an address, and whether that is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// Listening on loopback: only this machine can reach it.
    Loopback,
    /// Beyond loopback with only simulated providers: nothing to spend.
    Demo,
    /// Beyond loopback, clients need a gateway key and operators the admin key.
    Guarded,
    /// Beyond loopback without keys, because `gateway.open: true` says so.
    OpenRelay,
    /// Beyond loopback with real providers and these settings missing: `serve` refuses.
    Refused(Vec<&'static str>),
}

impl Exposure {
    /// Whether `/metrics` asks for the admin key at this exposure.
    pub fn guards_metrics(&self, settings: &GatewaySettings) -> bool {
        !matches!(self, Exposure::Loopback) && !settings.metrics_open
    }
}

/// Whether a gateway may listen on `listen` with `loaded`'s providers and keys.
pub fn exposure(listen: SocketAddr, loaded: &Loaded) -> Exposure {
    if listen.ip().to_canonical().is_loopback() {
        return Exposure::Loopback;
    }
    if loaded.providers.iter().all(|p| p.kind == Kind::Simulated.as_str()) {
        return Exposure::Demo;
    }
    let gateway = &loaded.gateway;
    let mut missing = Vec::new();
    if gateway.keys.is_empty() {
        missing.push("gateway.keys");
    }
    if gateway.admin_key.is_none() {
        missing.push("gateway.admin_key");
    }
    match (missing.is_empty(), gateway.open) {
        (true, _) => Exposure::Guarded,
        (false, true) => Exposure::OpenRelay,
        (false, false) => Exposure::Refused(missing),
    }
}

/// The address `text` names: `127.0.0.1:4680`, `[::1]:4680`, or a host name and a port
/// (`localhost:4680`) resolved now. Of a name's addresses the first IPv4 one is taken (clients
/// of `localhost` try it), else the first.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let not_address = || format!("`{text}` is not an address: write host:port, like 127.0.0.1:4680");
    let (host, port) = text.rsplit_once(':').ok_or_else(not_address)?;
    let port: u16 = port.parse().map_err(|_| not_address())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(not_address());
    }
    let unresolved = |why: String| {
        format!(
            "`{host}` in `{text}` does not resolve ({why}): use a name this machine resolves, or an address like 127.0.0.1:4680"
        )
    };
    let addresses: Vec<SocketAddr> =
        (host, port).to_socket_addrs().map_err(|error| unresolved(error.to_string()))?.collect();
    addresses
        .iter()
        .find(|address| address.is_ipv4())
        .or(addresses.first())
        .copied()
        .ok_or_else(|| unresolved("no address".to_owned()))
}

/// Why `serve` refuses to start at `listen`: which settings are missing and how to set them,
/// naming only those that are missing. Names settings and variables, never a key.
pub fn refusal(listen: SocketAddr, loaded: &Loaded, missing: &[&str]) -> String {
    let paid: Vec<&str> = loaded
        .providers
        .iter()
        .filter(|p| p.kind != Kind::Simulated.as_str())
        .map(|p| p.id.as_str())
        .collect();
    let keys = missing.contains(&"gateway.keys");
    let admin = missing.contains(&"gateway.admin_key");
    let stake = match (keys, admin) {
        (true, true) => format!("spend the accounts of {} and use /admin and /metrics", paid.join(", ")),
        (true, false) => format!("spend the accounts of {}", paid.join(", ")),
        // Admin endpoints take a client key when there is no admin key.
        (false, _) => "use /admin and /metrics with a client key".to_owned(),
    };
    let mut settings = Vec::new();
    let mut variables = Vec::new();
    if keys {
        settings.push("keys: [env://SWITCHYARD_KEY]");
        variables.push(("SWITCHYARD_KEY", "the key clients send"));
    }
    if admin {
        settings.push("admin_key: env://SWITCHYARD_ADMIN_KEY");
        variables.push(("SWITCHYARD_ADMIN_KEY", "for /admin and /metrics"));
    }
    let block = format!("`gateway: {{ {} }}`", settings.join(", "));
    let how = match loaded.source {
        Source::Environment(_) => {
            let set: Vec<String> = variables.iter().map(|(name, what)| format!("{name} ({what})")).collect();
            format!("set {}, or write a config file with {block}", set.join(" and "))
        }
        _ => {
            let names: Vec<&str> = variables.iter().map(|(name, _)| *name).collect();
            let from = if names.len() == 1 {
                "the key comes from that variable"
            } else {
                "the keys come from those variables"
            };
            format!("add {block} to the configuration ({from})")
        }
    };
    format!(
        "refusing to listen on {listen} without {}: anyone who can reach it could {stake}. To fix: {how}; \
         or listen on 127.0.0.1; or set `gateway.open: true` to run an open relay on purpose",
        missing.join(" and "),
    )
}

/// A provider as the operator sees it (for `doctor` and the start banner): no secrets.
#[derive(Debug, Clone)]
pub struct ProviderSummary {
    pub id: String,
    pub kind: &'static str,
    pub base_url: String,
    /// Where each key came from (`env://NAME` or `literal`), with the key masked.
    pub credentials: Vec<String>,
    /// Client-side pacing, when configured.
    pub limits: Option<Limits>,
    /// The provider itself when it is `simulated`, for fault drills.
    pub simulated: Option<SimulatedProvider>,
}

/// What `serve` logs, as the file's `log:` says.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    /// `log.level`, when given (the command line's `--log-level` and `RUST_LOG` come first).
    pub level: Option<LogFilter>,
    /// `log.access`: one line per request. Default true.
    pub access: bool,
}

/// A loaded, validated configuration: the router and everything around it.
pub struct Loaded {
    pub source: Source,
    /// Why this configuration was chosen, when [`load`] chose it.
    pub reason: Option<Reason>,
    pub listen: SocketAddr,
    pub router: Router,
    pub gateway: GatewaySettings,
    pub providers: Vec<ProviderSummary>,
    pub log: LogSettings,
}

impl fmt::Debug for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded")
            .field("source", &self.source)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// What an `env://NAME` whose variable is not set makes of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsetEnv {
    /// A problem: the configuration cannot run (`serve`, `doctor`, `config check --strict`).
    Error,
    /// A warning, and the value left out (`config check`: CI has no production secrets).
    Warning,
}

/// A configuration that loaded, with what should still be looked at.
#[derive(Debug)]
pub struct Checked {
    pub loaded: Loaded,
    /// Variables `env://` names that are not set, with [`UnsetEnv::Warning`].
    pub warnings: Vec<Problem>,
}

/// Reads a configuration file (YAML, or TOML when it ends in `.toml`).
pub fn load_file(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    check_file(path, env, UnsetEnv::Error).map(|checked| checked.loaded)
}

/// Reads a configuration file as [`load_file`] does, with `unset_env` deciding what an unset
/// `env://` variable is.
pub fn check_file(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    unset_env: UnsetEnv,
) -> Result<Checked, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::one(&name, "(file)", format!("cannot read it: {e}")))?;
    let is_toml = path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("toml"));
    let parsed = read::read(&text, is_toml, &name)?;
    build_parsed(parsed, Source::File(name), env, unset_env)
}

/// The configuration when no file is given: providers from API keys in the environment, or
/// the embedded demo when there are none.
pub fn load_default(env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    match from_env(env) {
        Some((file, vars)) => build(file, Source::Environment(vars), env),
        None => demo(env),
    }
}

/// The embedded demo configuration.
pub fn load_demo() -> Result<Loaded, ConfigError> {
    demo(&|_| None)
}

/// The demo, with the gateway keys of the environment (`SWITCHYARD_KEY`,
/// `SWITCHYARD_ADMIN_KEY`) when set: a demo shown beyond loopback, or its operator page
/// behind an admin key.
fn demo(env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    let mut file = parse(DEMO, false, "(embedded demo)")?;
    gateway_keys_from_env(&mut file, env);
    build(file, Source::Demo, env)
}

fn gateway_keys_from_env(file: &mut FileConfig, env: &dyn Fn(&str) -> Option<String>) {
    if env("SWITCHYARD_KEY").is_some_and(|k| !k.is_empty()) {
        file.gateway.keys.push("env://SWITCHYARD_KEY".to_owned());
    }
    if env("SWITCHYARD_ADMIN_KEY").is_some_and(|k| !k.is_empty()) {
        file.gateway.admin_key = Some("env://SWITCHYARD_ADMIN_KEY".to_owned());
    }
}

/// Parses YAML or TOML text into the file model. Errors name the key path: every key given
/// twice, unknown, or of the wrong type at once.
pub fn parse(text: &str, is_toml: bool, name: &str) -> Result<FileConfig, ConfigError> {
    let parsed = read::read(text, is_toml, name)?;
    match parsed.file {
        Some(file) if parsed.problems.is_empty() => Ok(file),
        _ => Err(ConfigError { file: name.to_owned(), problems: parsed.problems }),
    }
}

/// Known providers whose API key in the environment makes a provider.
const ENV_PROVIDERS: &[(&str, &str, Kind, Option<&str>, &str)] = &[
    ("OPENAI_API_KEY", "openai", Kind::Openai, None, "gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic", Kind::Anthropic, None, "claude-sonnet-4-5"),
    ("GEMINI_API_KEY", "gemini", Kind::Gemini, None, "gemini-2.5-flash"),
    (
        "GROQ_API_KEY",
        "groq",
        Kind::OpenaiCompatible,
        Some("https://api.groq.com/openai/v1"),
        "llama-3.3-70b-versatile",
    ),
    (
        "MISTRAL_API_KEY",
        "mistral",
        Kind::OpenaiCompatible,
        Some("https://api.mistral.ai/v1"),
        "mistral-small-latest",
    ),
    (
        "DEEPSEEK_API_KEY",
        "deepseek",
        Kind::OpenaiCompatible,
        Some("https://api.deepseek.com/v1"),
        "deepseek-chat",
    ),
    (
        "OPENROUTER_API_KEY",
        "openrouter",
        Kind::OpenaiCompatible,
        Some("https://openrouter.ai/api/v1"),
        "openai/gpt-4o-mini",
    ),
];

/// A configuration from API keys in the environment, in a fixed order of preference; `None`
/// when no key is set.
pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Option<(FileConfig, Vec<String>)> {
    let mut file = FileConfig::default();
    let mut vars = Vec::new();
    let mut targets = Vec::new();
    for (var, id, kind, base_url, model) in ENV_PROVIDERS {
        if env(var).is_none_or(|v| v.trim().is_empty()) {
            continue;
        }
        vars.push((*var).to_owned());
        let provider = file::ProviderConfig {
            kind: *kind,
            base_url: base_url.map(str::to_owned),
            api_key: Some(format!("env://{var}")),
            ..file::ProviderConfig::empty(*kind)
        };
        file.providers.insert((*id).to_owned(), provider);
        targets.push(file::TargetConfig::Plain(format!("{id}:{model}")));
    }
    if targets.is_empty() {
        return None;
    }
    file.routes.insert("default".to_owned(), file::RouteConfig::with_targets(targets));
    gateway_keys_from_env(&mut file, env);
    Some((file, vars))
}

/// Validates the file model and builds the router. Every problem is collected before failing.
pub fn build(
    file: FileConfig,
    source: Source,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
    let parsed = read::Parsed { file: Some(file), ..read::Parsed::default() };
    build_parsed(parsed, source, env, UnsetEnv::Error).map(|checked| checked.loaded)
}

/// [`build`] of what was read of a file: its problems so far come first, and what was taken
/// out of it is not reported again where it is referred to.
fn build_parsed(
    parsed: read::Parsed,
    source: Source,
    env: &dyn Fn(&str) -> Option<String>,
    unset_env: UnsetEnv,
) -> Result<Checked, ConfigError> {
    let name = match &source {
        Source::File(path) => path.clone(),
        Source::Environment(_) => "(environment)".to_owned(),
        Source::Demo => "(embedded demo)".to_owned(),
    };
    let Some(file) = parsed.file else {
        return Err(ConfigError { file: name, problems: parsed.problems });
    };
    let mut v = Validator {
        problems: parsed.problems,
        warnings: Vec::new(),
        env,
        removed: parsed.removed,
        unset_env,
    };

    let listen_text = file.listen.clone().unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen = v.check("listen", listen_address(&listen_text));

    let Providers { entries, summaries, paced } = v.providers(&file.providers);
    let routes = v.routes(&file);
    let health = v.health(&file.health);
    let budget = v.budget(&file.retry_budget);
    let gateway = v.gateway(&file.gateway);
    let shared_state = file.state.as_ref().and_then(|state| v.shared_state(state));
    let telemetry = v.telemetry(file.telemetry.as_ref());
    let log = v.log(file.log.as_ref());

    if !v.problems.is_empty() {
        return Err(ConfigError { file: name, problems: v.problems });
    }
    let (Some(listen), Some(mut gateway)) = (listen, gateway) else {
        return Err(ConfigError::one(&name, "(top level)", "invalid configuration"));
    };

    let mut builder = Router::builder().health(health).retry_budget(budget);
    if let Some(store) = &shared_state {
        builder = builder.health_store(store.clone());
    }
    gateway.shared_state = shared_state;
    gateway.telemetry = telemetry;
    gateway.responses_native = responses_native(&file.providers);
    gateway.anthropic_providers =
        file.providers.iter().filter(|(_, p)| p.kind == Kind::Anthropic).map(|(id, _)| id.clone()).collect();
    gateway.drills = Drills::new(summaries.iter().map(|s| (s.id.clone(), s.kind, s.simulated.clone())));
    // No limits, no pacer: unpaced calls pay nothing for pacing.
    if !paced.is_empty() {
        builder = match &gateway.shared_state {
            // One allowance for the fleet: rpm, tpm, header budgets and 429 holds.
            Some(store) => builder.pacer(LimitPacer::shared(paced.clone(), store.clone())),
            None => builder.pacer(Arc::new(LimitPacer::new(paced.clone()))),
        };
    }
    for entry in entries {
        builder = builder.provider(entry);
    }
    for route in routes {
        builder = builder.route(route);
    }
    if let Some(default) = &file.default_route {
        builder = builder.default_route(default);
    }
    let router = builder.build().map_err(|e| ConfigError::one(&name, "routes", e.to_string()))?;
    let summaries = summaries
        .into_iter()
        .map(|summary| {
            let limits = paced.iter().find(|(id, _)| *id == summary.id).map(|(_, l)| l.clone());
            ProviderSummary { limits, ..summary }
        })
        .collect();
    let loaded = Loaded { source, reason: None, listen, router, gateway, providers: summaries, log };
    Ok(Checked { loaded, warnings: v.warnings })
}

/// The providers spoken to in the Responses API itself: OpenAI, Azure, and `openai_compatible`
/// ones with `responses: native`.
fn responses_native(providers: &BTreeMap<String, file::ProviderConfig>) -> Vec<String> {
    providers
        .iter()
        .filter(|(_, p)| match p.kind {
            Kind::Openai | Kind::Azure => true,
            Kind::OpenaiCompatible => p.responses == Some(file::ResponsesMode::Native),
            _ => false,
        })
        .map(|(id, _)| id.clone())
        .collect()
}

struct Validator<'e> {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// Keys taken out of the file for their problems: what refers to them is not reported.
    removed: read::Removed,
    unset_env: UnsetEnv,
}

/// The providers of a file as the router takes them, with their summaries and pacing limits.
struct Providers {
    entries: Vec<ProviderEntry>,
    summaries: Vec<ProviderSummary>,
    paced: Vec<(String, Limits)>,
}

impl Validator<'_> {
    fn providers(&mut self, providers: &BTreeMap<String, file::ProviderConfig>) -> Providers {
        if providers.is_empty() && !self.removed.any_in("providers") {
            self.problem(
                "providers",
                "none configured: add at least one, like `openai: { kind: openai, api_key: env://OPENAI_API_KEY }`",
            );
        }
        let mut found = Providers { entries: Vec::new(), summaries: Vec::new(), paced: Vec::new() };
        for (id, provider) in providers {
            if let Some(limits) =
                provider.limits.as_ref().and_then(|l| self.limits(&format!("providers.{id}.limits"), l))
            {
                found.paced.push((id.clone(), limits));
            }
            if let Some((entry, summary)) = self.provider(id, provider) {
                found.entries.push(entry);
                found.summaries.push(summary);
            }
        }
        found
    }

    /// The file's routes, and its `default_route` checked against them.
    fn routes(&mut self, file: &FileConfig) -> Vec<Route> {
        if file.routes.is_empty() && !self.removed.any_in("routes") {
            self.problem(
                "routes",
                "none configured: add one, like `default: { targets: [openai:gpt-4o-mini] }`",
            );
        }
        let mut routes = Vec::new();
        for (route_name, route) in &file.routes {
            if let Some(route) = self.route(route_name, route, &file.providers) {
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

    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem { path: path.into(), message: message.into() });
    }

    /// A problem the engine found, at `path` in the file plus the problem's own path.
    fn engine_problem(&mut self, path: &str, problem: switchyard::problem::Problem) {
        let at = if problem.path.is_empty() { path.to_owned() } else { format!("{path}.{}", problem.path) };
        self.problem(at, problem.to_string());
    }

    /// The certificates of a provider's `ca_file` (a path relative to the working directory),
    /// none when it has no such file; a file that cannot serve is a problem naming its path.
    fn ca_file(
        &mut self,
        path: &str,
        file: Option<&str>,
    ) -> Vec<switchyard_providers::http::CertificateDer<'static>> {
        let Some(file) = file else { return Vec::new() };
        match switchyard_providers::http::read_ca_file(Path::new(file)) {
            Ok(certificates) => certificates,
            Err(problem) => {
                self.problem(format!("{path}.ca_file"), format!("`{file}` {problem}"));
                Vec::new()
            }
        }
    }

    /// A duration that must be positive, or `default` when not given.
    fn nonzero(&mut self, path: &str, given: Option<file::DurationText>, default: Duration) -> Duration {
        let value = given.map_or(default, |d| d.0);
        if value.is_zero() {
            self.problem(path, "is 0: give a positive duration such as 30s");
        }
        value
    }

    fn check<T>(&mut self, path: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|message| self.problem(path, message)).ok()
    }

    /// The Redis store of `state:`, not yet connected: it connects when the gateway starts.
    /// Trace export: the `telemetry:` block over the standard `OTEL_*` variables. `None` when
    /// neither asks for it, or `OTEL_SDK_DISABLED=true`.
    fn telemetry(&mut self, config: Option<&file::TelemetryConfig>) -> Option<TelemetrySettings> {
        let var = |name: &str| (self.env)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return None,
            Some(other) => {
                self.problem(
                    "OTEL_TRACES_EXPORTER",
                    format!("`{other}` is not an exporter Switchyard has: otlp, or none"),
                );
                return None;
            }
        }
        let endpoint = config.and_then(|c| c.endpoint.clone());
        let (traces_url, origin) = match (
            &endpoint,
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(base), _, _) => (traces_url(base), "telemetry.endpoint"),
            (None, Some(url), _) => (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            (None, None, Some(base)) => (traces_url(&base), "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (None, None, None) if config.is_some() => {
                (traces_url("http://localhost:4318"), "telemetry.endpoint")
            }
            (None, None, None) => return None,
        };
        let before = self.problems.len();
        if !(traces_url.starts_with("http://") || traces_url.starts_with("https://")) {
            self.problem(
                origin,
                format!("`{traces_url}` is not an http:// or https:// URL of an OTLP/HTTP collector"),
            );
        }
        // Each problem names where its value came from: the file, or the variable.
        let protocol = config
            .and_then(|c| c.protocol.clone().map(|p| (p, "telemetry.protocol")))
            .or_else(|| {
                var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            })
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_PROTOCOL")));
        let protocol = match protocol.as_ref().map(|(p, origin)| (p.trim(), *origin)) {
            None | Some(("http/protobuf", _)) => OtlpProtocol::Protobuf,
            Some(("http/json", _)) => OtlpProtocol::Json,
            Some((other, origin)) => {
                self.problem(
                    origin,
                    format!("`{other}` is not supported: use http/protobuf (the collector's port 4318) or http/json"),
                );
                OtlpProtocol::Protobuf
            }
        };
        let (sampler_name, sampler_origin) = config
            .and_then(|c| c.sampler.clone().map(|s| (s, "telemetry.sampler")))
            .or_else(|| var("OTEL_TRACES_SAMPLER").map(|s| (s, "OTEL_TRACES_SAMPLER")))
            .unwrap_or_else(|| ("parentbased_always_on".to_owned(), "telemetry.sampler"));
        let sampler_arg = match config.and_then(|c| c.sampler_arg) {
            Some(arg) => Some(arg),
            None => match var("OTEL_TRACES_SAMPLER_ARG") {
                Some(text) => match text.parse::<f64>() {
                    Ok(arg) => Some(arg),
                    Err(_) => {
                        self.problem("OTEL_TRACES_SAMPLER_ARG", format!("`{text}` is not a number"));
                        None
                    }
                },
                None => None,
            },
        };
        let sampler = match SamplerSetting::parse(&sampler_name, sampler_arg) {
            Ok(sampler) => sampler,
            Err(problem) => {
                self.problem(sampler_origin, problem);
                SamplerSetting::ParentBasedAlwaysOn
            }
        };
        let mut headers = Vec::new();
        match config.filter(|c| !c.headers.is_empty()) {
            Some(config) => {
                for (name, value) in &config.headers {
                    if let Some((secret, _)) = self.secret(&format!("telemetry.headers.{name}"), value) {
                        headers.push((name.clone(), secret));
                    }
                }
            }
            None => {
                let listed =
                    var("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| var("OTEL_EXPORTER_OTLP_HEADERS"));
                for pair in listed.iter().flat_map(|text| text.split(',')) {
                    match pair.split_once('=') {
                        Some((name, value)) if !name.trim().is_empty() => {
                            headers.push((name.trim().to_owned(), Secret::new(percent_decode(value.trim()))));
                        }
                        _ => self.problem(
                            "OTEL_EXPORTER_OTLP_HEADERS",
                            "write headers as name=value,name2=value2",
                        ),
                    }
                }
            }
        }
        let timeout = match config.and_then(|c| c.timeout.as_ref()) {
            Some(timeout) => timeout.0,
            None => match var("OTEL_EXPORTER_OTLP_TIMEOUT").map(|ms| ms.parse::<u64>()) {
                Some(Ok(ms)) => Duration::from_millis(ms),
                Some(Err(_)) => {
                    self.problem(
                        "OTEL_EXPORTER_OTLP_TIMEOUT",
                        "give the timeout in milliseconds, like 10000",
                    );
                    Duration::from_secs(10)
                }
                None => Duration::from_secs(10),
            },
        };
        let service_name = config
            .and_then(|c| c.service_name.clone())
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "switchyard".to_owned());
        (self.problems.len() == before).then_some(TelemetrySettings {
            traces_url,
            protocol,
            service_name,
            sampler,
            headers,
            timeout,
        })
    }

    fn shared_state(&mut self, config: &file::StateConfig) -> Option<Arc<RedisStore>> {
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
        let mut settings = StateSettings::new(url);
        if let Some(prefix) = &config.prefix {
            settings.prefix = prefix.clone();
        }
        match RedisStore::new(settings) {
            Ok(store) => Some(Arc::new(store)),
            Err(error) => {
                let path =
                    if matches!(error, StateError::BadPrefix(_)) { "state.prefix" } else { "state.redis" };
                self.problem(path, error.to_string());
                None
            }
        }
    }

    /// Takes a literal secret or resolves `env://NAME`; returns it with where it came from.
    fn secret(&mut self, path: &str, text: &str) -> Option<(Secret, String)> {
        let (value, origin) = self.resolve(path, text, "key", "OPENAI_API_KEY")?;
        if value.is_empty() {
            self.problem(path, "the key is empty");
            return None;
        }
        Some((Secret::new(value), origin))
    }

    /// `text` itself (trimmed), or the value of the variable an `env://NAME` names, with where
    /// it came from (`literal` or `env://NAME`): the one place `env://` is resolved. An unset or
    /// empty variable is a problem, or with [`UnsetEnv::Warning`] a warning, and `None`. `what`
    /// and `example` word the fix: "write the {what} itself", "like env://{example}".
    fn resolve(&mut self, path: &str, text: &str, what: &str, example: &str) -> Option<(String, String)> {
        let Some(var) = text.strip_prefix("env://") else {
            return Some((text.trim().to_owned(), "literal".to_owned()));
        };
        if var.is_empty() {
            self.problem(path, format!("`env://` needs a variable name, like env://{example}"));
            return None;
        }
        match (self.env)(var) {
            Some(value) if !value.trim().is_empty() => {
                Some((value.trim().to_owned(), format!("env://{var}")))
            }
            _ => {
                let unset = Problem {
                    path: path.to_owned(),
                    message: format!(
                        "environment variable `{var}` is not set: export it, or write the {what} itself"
                    ),
                };
                match self.unset_env {
                    UnsetEnv::Error => self.problems.push(unset),
                    UnsetEnv::Warning => self.warnings.push(unset),
                }
                None
            }
        }
    }

    fn provider(
        &mut self,
        id: &str,
        config: &file::ProviderConfig,
    ) -> Option<(ProviderEntry, ProviderSummary)> {
        let path = format!("providers.{id}");
        let before = self.problems.len();
        if let Err(problem) = ProviderEntry::check_id(id) {
            self.engine_problem(&path, problem);
        }
        if config.api_key.is_some() && !config.api_keys.is_empty() {
            self.problem(format!("{path}.api_keys"), "give `api_key` or `api_keys`, not both");
        }
        let mut keys = Vec::new();
        let mut origins = Vec::new();
        let listed = config.api_key.iter().map(|k| (format!("{path}.api_key"), k.as_str(), 0)).chain(
            config.api_keys.iter().enumerate().map(|(i, k)| {
                let (text, priority) = k.parts();
                (format!("{path}.api_keys[{i}]"), text, priority)
            }),
        );
        for (key_path, text, priority) in listed {
            if let Some((secret, origin)) = self.secret(&key_path, text) {
                origins.push(origin);
                keys.push((secret, priority));
            }
        }
        if config.kind != Kind::Simulated {
            for key in config.keys_set() {
                self.problem(
                    format!("{path}.{key}"),
                    format!("only simulated providers take `{key}` (this one is {})", config.kind.as_str()),
                );
            }
        }
        for (field, problem) in crate::drills::error_rate_problems(&config.error_rates) {
            self.problem(format!("{path}.error_rates{field}"), problem);
        }
        let mut simulated = None;
        let provider: Option<(Arc<dyn Provider>, String)> = match config.kind {
            Kind::Simulated => {
                let mut sim = SimulatedProvider::new();
                if let Some(latency) = &config.latency {
                    sim = sim.latency(latency.to_latency());
                }
                for (kind, rate) in &config.error_rates {
                    sim = sim.error_rate(*kind, *rate);
                }
                if let Some(reply) = &config.reply {
                    sim = sim.reply(reply.clone());
                }
                if let Some(stream) = &config.stream {
                    sim = sim.stream(stream.chunks, stream.gap.map_or(Duration::ZERO, |g| g.0));
                }
                if let Some(seed) = config.seed {
                    sim = sim.seed(seed);
                }
                simulated = Some(sim.clone());
                Some((Arc::new(sim), String::new()))
            }
            kind => {
                let kind = match kind {
                    Kind::Openai => ProviderKind::OpenAi,
                    Kind::Anthropic => ProviderKind::Anthropic,
                    Kind::Gemini => ProviderKind::Gemini,
                    Kind::Azure => ProviderKind::Azure,
                    _ => ProviderKind::OpenAiCompatible,
                };
                let mut settings = ProviderSettings::new(kind);
                settings.base_url = config.base_url.clone();
                settings.headers = config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                settings.api_version = config.api_version.clone();
                settings.organization = config.organization.clone();
                settings.project = config.project.clone();
                settings.responses_native = match (kind, config.responses) {
                    (ProviderKind::OpenAiCompatible, Some(file::ResponsesMode::Native)) => true,
                    (ProviderKind::OpenAiCompatible, _) => false,
                    (ProviderKind::OpenAi | ProviderKind::Azure, Some(file::ResponsesMode::Translated)) => {
                        self.problem(
                            format!("{path}.responses"),
                            "`translated` is for openai_compatible servers: OpenAI and Azure's v1 API speak the Responses API natively",
                        );
                        false
                    }
                    // What they do anyway.
                    (ProviderKind::OpenAi | ProviderKind::Azure, Some(file::ResponsesMode::Native))
                    | (_, None) => false,
                    (_, Some(_)) => {
                        self.problem(
                            format!("{path}.responses"),
                            "applies only to openai_compatible providers",
                        );
                        false
                    }
                };
                settings.thinking = match (kind, config.thinking) {
                    (_, None) => None,
                    (ProviderKind::Anthropic, Some(file::ThinkingConfig::Adaptive)) => {
                        Some(ThinkingStyle::Adaptive)
                    }
                    (ProviderKind::Anthropic, Some(file::ThinkingConfig::Budget)) => {
                        Some(ThinkingStyle::Budget)
                    }
                    (_, Some(_)) => {
                        self.problem(format!("{path}.thinking"), "applies only to anthropic providers");
                        None
                    }
                };
                settings.http = HttpSettings {
                    http2: config.http2,
                    connect_timeout: config
                        .connect_timeout
                        .map_or(HttpSettings::default().connect_timeout, |d| d.0),
                    extra_roots: self.ca_file(&path, config.ca_file.as_deref()),
                    ..HttpSettings::default()
                };
                match settings.resolved_base_url() {
                    Err(error) => {
                        self.problem(format!("{path}.base_url"), error.to_string());
                        None
                    }
                    Ok(base_url) => match switchyard_providers::build(&settings) {
                        Ok(provider) => Some((provider, base_url)),
                        Err(error) => {
                            self.problem(&path, error.to_string());
                            None
                        }
                    },
                }
            }
        };
        if self.problems.len() > before {
            return None;
        }
        let (provider, base_url) = provider?;
        let summary = ProviderSummary {
            id: id.to_owned(),
            kind: config.kind.as_str(),
            base_url,
            credentials: Vec::new(),
            limits: None,
            simulated,
        };
        let mut entry = ProviderEntry::from_arc(id, provider);
        for (key, priority) in keys {
            entry = entry.key_with_priority(key, priority);
        }
        if config.rotation == Some(file::KeyRotationConfig::RoundRobin) {
            entry = entry.key_rotation(switchyard::KeyRotation::RoundRobin);
        }
        for (model, price) in &config.prices {
            entry = entry.price(
                model.clone(),
                Price { input_per_million: price.input, output_per_million: price.output },
            );
        }
        let summary = ProviderSummary { credentials: origins, ..summary };
        Some((entry, summary))
    }

    /// Whether a target that parses names a provider of the file (the engine checks the
    /// text itself); `None` for one that does not parse, whose problem the engine reports.
    fn known_provider(
        &mut self,
        path: &str,
        text: &str,
        providers: &BTreeMap<String, file::ProviderConfig>,
    ) -> Option<Target> {
        let target: Target = text.parse().ok()?;
        if !providers.contains_key(target.provider()) && !self.removed.entry("providers", target.provider()) {
            let known: Vec<&str> = providers.keys().map(String::as_str).collect();
            self.problem(
                path,
                format!(
                    "unknown provider `{}` in target `{text}`: configure it under `providers:` or use one of: {}",
                    target.provider(),
                    if known.is_empty() { "(none)".to_owned() } else { known.join(", ") }
                ),
            );
        }
        Some(target)
    }

    fn route(
        &mut self,
        name: &str,
        config: &file::RouteConfig,
        providers: &BTreeMap<String, file::ProviderConfig>,
    ) -> Option<Route> {
        let path = format!("routes.{name}");
        let before = self.problems.len();
        let mut builder = Route::builder(name);
        for (i, target) in config.targets.iter().enumerate() {
            let Some(parsed) = self.known_provider(&format!("{path}.targets[{i}]"), target.text(), providers)
            else {
                // The engine names what is wrong with the text.
                builder = builder.target(target.text());
                continue;
            };
            builder = builder.route_target(match target {
                file::TargetConfig::Plain(_) => {
                    RouteTarget { target: parsed, tier: 0, weight: 1, embedding_space: None }
                }
                file::TargetConfig::Detailed(d) => RouteTarget {
                    target: parsed,
                    tier: d.tier,
                    weight: d.weight,
                    embedding_space: d.embedding_space.clone(),
                },
            });
        }
        for (i, text) in config.context_window.iter().enumerate() {
            self.known_provider(&format!("{path}.context_window[{i}]"), text, providers);
            builder = builder.context_window(text);
        }
        for (i, text) in config.content_policy.iter().enumerate() {
            self.known_provider(&format!("{path}.content_policy[{i}]"), text, providers);
            builder = builder.content_policy(text);
        }
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
                deadline: timeouts.deadline.map(|d| d.0),
            };
            builder = builder.timeouts(timeouts);
        }
        let mut names = Vec::new();
        for (i, candidate) in config.candidates.iter().enumerate() {
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
                    let defaults = switchyard::answer_cache::AnswerCacheSettings::default();
                    let settings = switchyard::answer_cache::AnswerCacheSettings {
                        max_age: cache.max_age.map_or(defaults.max_age, |d| d.0),
                        max_entries: cache.max_entries.unwrap_or(defaults.max_entries),
                        max_bytes: cache.max_bytes.map_or(defaults.max_bytes, |b| b.0),
                        tool_calls: cache.tool_calls.unwrap_or(defaults.tool_calls),
                    };
                    if settings.max_age.is_zero() || settings.max_entries == 0 || settings.max_bytes == 0 {
                        self.problem(
                            format!("{at}.cache"),
                            "max_age, max_entries and max_bytes must be above 0",
                        );
                    }
                    builder = builder.candidate(Candidate::cache(candidate.name.clone(), settings));
                }
                _ => self.problem(
                    at,
                    "give a candidate either `text` (a fixed answer) or `cache` (the last good answer)",
                ),
            }
        }
        if let Some(kinds) = &config.retry_on {
            builder = builder.retry_on(ErrorFilter::Kinds(kinds.clone()));
        }
        if let Some(kinds) = &config.fallback_on {
            builder = builder.fallback_on(ErrorFilter::Kinds(kinds.clone()));
        }
        if let Some(hedge) = &config.hedge {
            let defaults = switchyard::route::Hedge::p95();
            builder = builder.hedge(switchyard::route::Hedge {
                after: match hedge.after {
                    file::HedgeAfterConfig::P95 => switchyard::route::HedgeAfter::P95,
                    file::HedgeAfterConfig::Fixed(delay) => switchyard::route::HedgeAfter::Fixed(delay),
                },
                min_after: hedge.min_after.map_or(defaults.min_after, |d| d.0),
                max_share: hedge.max_share.unwrap_or(defaults.max_share),
                min_hedges: hedge.min_hedges.unwrap_or(defaults.min_hedges),
            });
        }
        if let Some(spill) = config.spill_over {
            builder = builder.spill_over(spill);
        }
        // The route's own rules are the engine's: its problems come back with their paths.
        match builder.build() {
            Ok(route) if self.problems.len() == before => Some(route),
            Ok(_) => None,
            Err(error) => {
                for problem in error.problems {
                    self.engine_problem(&path, problem);
                }
                None
            }
        }
    }

    fn limits(&mut self, path: &str, config: &file::LimitsConfig) -> Option<Limits> {
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

    fn health(&mut self, config: &file::HealthConfig) -> HealthSettings {
        let default = HealthSettings::default();
        let settings = HealthSettings {
            failure_threshold: config.failure_threshold.unwrap_or(default.failure_threshold),
            open_for: config.open_for.map_or(default.open_for, |d| d.0),
            open_max: config.open_max.map_or(default.open_max, |d| d.0),
            half_open_probes: config.half_open_probes.unwrap_or(default.half_open_probes),
            cooldown_on_rate_limit: config
                .cooldown_on_rate_limit
                .map_or(default.cooldown_on_rate_limit, |d| d.0),
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
        settings
    }

    fn log(&mut self, config: Option<&file::LogConfig>) -> LogSettings {
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

    fn budget(&mut self, config: &file::RetryBudgetConfig) -> RetryBudgetSettings {
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

    fn gateway(&mut self, config: &file::GatewayConfig) -> Option<GatewaySettings> {
        let keys = config
            .keys
            .iter()
            .enumerate()
            .filter_map(|(i, text)| self.secret(&format!("gateway.keys[{i}]"), text).map(|(s, _)| s))
            .collect();
        let admin_key =
            config.admin_key.as_ref().and_then(|text| self.secret("gateway.admin_key", text).map(|(s, _)| s));
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
        let max_connections = config.max_connections.unwrap_or(defaults.max_connections);
        if max_connections == 0 {
            self.problem(
                "gateway.max_connections",
                "0 would accept no connection: use at least 1, or leave it out for the default",
            );
        }
        Some(GatewaySettings {
            keys,
            admin_key,
            max_body,
            recent_requests: config.recent_requests.unwrap_or(1000),
            shutdown_grace: config.shutdown_grace.map_or(Duration::from_secs(30), |d| d.0),
            open: config.open.unwrap_or(false),
            metrics_open: config.metrics_open.unwrap_or(false),
            connections: ConnectionLimits { header_timeout, idle_timeout, body_timeout, max_connections },
            shared_state: None,
            responses: self.responses(config.responses.as_ref()),
            drills: Drills::default(),
            telemetry: None,
            responses_native: Vec::new(),
            anthropic_providers: Vec::new(),
        })
    }
}

/// The OTLP/HTTP traces URL of a collector's base URL.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// `%XX` escapes decoded, as `OTEL_EXPORTER_OTLP_HEADERS` values are written.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}
