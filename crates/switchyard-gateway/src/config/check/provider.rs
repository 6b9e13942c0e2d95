//! The providers of a file, checked: their adapters' settings, keys, prices and limits.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use switchyard::credential::Secret;
use switchyard::simulated::SimulatedProvider;
use switchyard::{Price, ProviderEntry, Target};
use switchyard_pacing::Limits;
use switchyard_providers::anthropic::ThinkingStyle;
use switchyard_providers::bedrock::{AwsAuth, BedrockSettings};
use switchyard_providers::vertex::{GoogleCredentials, VertexSettings};
use switchyard_providers::{BetaPolicy, HttpSettings, ProviderKind, ProviderSettings};

use super::Validator;
use crate::config::{Kind, file};

/// A provider every rule holds for: what assembly makes its router entry from.
pub(crate) struct CheckedProvider {
    pub id: String,
    pub kind: Kind,
    pub adapter: Adapter,
    /// Its keys with their priorities, and where each came from (`env://NAME`, `literal`).
    pub keys: Vec<(Secret, u32)>,
    pub origins: Vec<String>,
    pub round_robin: bool,
    pub prices: Vec<(String, Price)>,
    /// The provider's own id of each model a target names (`models:`).
    pub models: Vec<(String, String)>,
    /// Client-side pacing, when configured.
    pub limits: Option<Limits>,
}

/// What a provider's adapter is made from.
pub(crate) enum Adapter {
    /// A simulated provider, made already (it makes nothing outside itself).
    Simulated(SimulatedProvider),
    /// An HTTP provider's settings, the base URL they resolve to, and the secrets its headers
    /// carry (cut out of its errors).
    Http { settings: Box<ProviderSettings>, base_url: String, secrets: Vec<Secret> },
}

impl Validator<'_> {
    /// Every provider of the file, checked; a provider with a problem is left out (and its
    /// problems reported).
    pub(super) fn providers(
        &mut self,
        providers: &BTreeMap<String, file::ProviderConfig>,
    ) -> Vec<CheckedProvider> {
        if providers.is_empty() && !self.removed.any_in("providers") {
            self.problem(
                "providers",
                "none configured: add at least one, like `openai: { kind: openai, api_key: env://OPENAI_API_KEY }`",
            );
        }
        providers.iter().filter_map(|(id, provider)| self.provider(id, provider)).collect()
    }

    /// One provider: its id, keys, adapter, prices and limits.
    fn provider(&mut self, id: &str, config: &file::ProviderConfig) -> Option<CheckedProvider> {
        let path = format!("providers.{id}");
        let before = self.problems.len();
        if let Err(problem) = ProviderEntry::check_id(id) {
            self.engine_problem(&path, problem);
        }
        let limits = config.limits.as_ref().and_then(|l| self.limits(&format!("{path}.limits"), l));
        let models = self.models(&path, &config.models);
        let (keys, origins) = self.keys(&path, config);
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
        for (model, price) in &config.prices {
            for (side, value) in [("input", price.input), ("output", price.output)] {
                if !(value.is_finite() && value >= 0.0) {
                    self.problem(
                        format!("{path}.prices.{model}.{side}"),
                        format!("is {value}: a price per million tokens is a number of dollars, 0 or more"),
                    );
                }
            }
        }
        let adapter = match config.kind {
            Kind::Simulated => Some(Adapter::Simulated(simulated(config))),
            kind => self.http(&path, kind, config),
        };
        if self.problems.len() > before {
            return None;
        }
        let prices = config
            .prices
            .iter()
            .map(|(model, price)| {
                (model.clone(), Price { input_per_million: price.input, output_per_million: price.output })
            })
            .collect();
        Some(CheckedProvider {
            id: id.to_owned(),
            kind: config.kind,
            adapter: adapter?,
            keys,
            origins,
            round_robin: config.rotation == Some(file::KeyRotationConfig::RoundRobin),
            prices,
            models,
            limits,
        })
    }

    /// The `models:` map: a route's name of a model to the provider's own id of it; neither
    /// may be empty or padded.
    fn models(&mut self, path: &str, models: &BTreeMap<String, String>) -> Vec<(String, String)> {
        for (name, id) in models {
            let at = format!("{path}.models.{name}");
            if name.trim().is_empty() || name.trim() != name {
                self.problem(
                    format!("{path}.models"),
                    format!(
                        "model name `{name}` is empty or has spaces around it: write the name targets use"
                    ),
                );
            } else if id.trim().is_empty() {
                self.problem(
                    at,
                    "is empty: write the provider's own id of the model (e.g. `us.anthropic.claude-sonnet-4-5-20250929-v1:0`), or remove the entry",
                );
            } else if id.trim() != id {
                self.problem(at, format!("`{id}` has spaces around it: write the provider's id alone"));
            }
        }
        models.iter().map(|(name, id)| (name.clone(), id.clone())).collect()
    }

    /// The provider's keys (`api_key`, or `api_keys` with their priorities), and where each
    /// came from.
    fn keys(&mut self, path: &str, config: &file::ProviderConfig) -> (Vec<(Secret, u32)>, Vec<String>) {
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
        let mut paths: Vec<String> = Vec::new();
        for (key_path, text, priority) in listed {
            let Some((secret, origin)) = self.key(&key_path, text) else { continue };
            // The same key twice would be one credential counted as two (its rests, its health).
            if let Some(at) =
                keys.iter().position(|(known, _): &(Secret, u32)| known.expose() == secret.expose())
            {
                self.problem(&key_path, format!("is the same key as {}: list each key once", paths[at]));
                continue;
            }
            origins.push(origin);
            keys.push((secret, priority));
            paths.push(key_path);
        }
        (keys, origins)
    }

    /// A provider's extra `headers`, each value read as a key is (`env://NAME` from the
    /// environment), and the values that are secrets: those read from the environment, and
    /// those of a header whose name says it carries one (`authorization`, `x-api-key`, a
    /// token, a cookie).
    fn headers(
        &mut self,
        path: &str,
        headers: &BTreeMap<String, String>,
    ) -> (Vec<(String, String)>, Vec<Secret>) {
        let mut secrets = Vec::new();
        let headers = headers
            .iter()
            .filter_map(|(name, text)| {
                let at = format!("{path}.headers.{name}");
                let (value, origin) = self.resolve(&at, text, "header's value", "PROXY_TOKEN")?;
                if origin != "literal" || switchyard::credential::names_a_secret(name) {
                    // `Bearer <token>`: the token alone is what an upstream may echo.
                    let scheme = value.split_once(' ').filter(|(scheme, _)| {
                        ["bearer", "basic", "token", "apikey"].contains(&scheme.to_ascii_lowercase().as_str())
                    });
                    if let Some((_, token)) = scheme {
                        secrets.push(Secret::new(token.trim()));
                    }
                    secrets.push(Secret::new(value.as_str()));
                }
                Some((name.clone(), value))
            })
            .collect();
        (headers, secrets)
    }

    /// An HTTP provider's settings, checked as its adapter would take them.
    fn http(&mut self, path: &str, kind: Kind, config: &file::ProviderConfig) -> Option<Adapter> {
        let kind = match kind {
            Kind::Openai => ProviderKind::OpenAi,
            Kind::Anthropic => ProviderKind::Anthropic,
            Kind::Gemini => ProviderKind::Gemini,
            Kind::Azure => ProviderKind::Azure,
            Kind::Bedrock => ProviderKind::Bedrock,
            Kind::Vertex => ProviderKind::Vertex,
            _ => ProviderKind::OpenAiCompatible,
        };
        let mut settings = ProviderSettings::new(kind);
        settings.base_url = config.base_url.clone();
        let (headers, secrets) = self.headers(path, &config.headers);
        settings.headers = headers;
        settings.api_version = config.api_version.clone();
        settings.organization = config.organization.clone();
        settings.project = config.project.clone();
        settings.responses_native = self.responses_mode(path, kind, config.responses);
        settings.prefill = self.prefill(path, kind, config.prefill);
        let claude = matches!(kind, ProviderKind::Anthropic | ProviderKind::Bedrock | ProviderKind::Vertex);
        settings.thinking = match (claude, config.thinking) {
            (_, None) => None,
            (true, Some(file::ThinkingConfig::Adaptive)) => Some(ThinkingStyle::Adaptive),
            (true, Some(file::ThinkingConfig::Budget)) => Some(ThinkingStyle::Budget),
            (false, Some(_)) => {
                self.problem(
                    format!("{path}.thinking"),
                    "applies only to anthropic, bedrock and vertex providers",
                );
                None
            }
        };
        settings.betas = self.betas(path, claude, config.betas.as_ref());
        settings.bedrock = self.bedrock(path, kind, config);
        settings.vertex = self.vertex(path, kind, config);
        settings.http = HttpSettings {
            http2: config.http2,
            connect_timeout: config.connect_timeout.map_or(HttpSettings::default().connect_timeout, |d| d.0),
            extra_roots: self.ca_file(path, config.ca_file.as_deref()),
            ..HttpSettings::default()
        };
        if config.base_url.as_deref().is_some_and(holds_user_info) {
            // Not quoted: what it holds is a password.
            self.problem(
                format!("{path}.base_url"),
                "holds a user name or password (`user:password@`), which is never sent: put the key in `api_key`, or an `authorization` header in `headers`",
            );
            return None;
        }
        match settings.check() {
            Ok(base_url) => Some(Adapter::Http { settings: Box::new(settings), base_url, secrets }),
            // Reported with the region's own problem.
            Err(switchyard_providers::BuildError::MissingRegion) => None,
            Err(error @ switchyard_providers::BuildError::MissingBaseUrl(_))
            | Err(error @ switchyard_providers::BuildError::InvalidBaseUrl(_)) => {
                self.problem(format!("{path}.base_url"), error.to_string());
                None
            }
            // Reported where the Vertex settings were read.
            Err(switchyard_providers::BuildError::Vertex { .. }) if settings.vertex.is_none() => None,
            Err(switchyard_providers::BuildError::Vertex { field, problem }) => {
                self.problem(format!("{path}.{field}"), problem);
                None
            }
            Err(error) => {
                self.problem(path, error.to_string());
                None
            }
        }
    }

    /// A `vertex` provider's project, region and credentials (`None`, with its problems, when
    /// one is missing or wrong); for another kind, `None`, and a problem for each of the
    /// Vertex-only keys given.
    fn vertex(
        &mut self,
        path: &str,
        kind: ProviderKind,
        config: &file::ProviderConfig,
    ) -> Option<VertexSettings> {
        if kind != ProviderKind::Vertex {
            if config.region.is_some() && kind != ProviderKind::Bedrock {
                self.problem(format!("{path}.region"), "applies only to bedrock and vertex providers");
            }
            if config.credentials.is_some() {
                self.problem(format!("{path}.credentials"), "applies only to vertex providers");
            }
            return None;
        }
        if config.api_key.is_some() || !config.api_keys.is_empty() {
            let key = if config.api_key.is_some() { "api_key" } else { "api_keys" };
            self.problem(
                format!("{path}.{key}"),
                "vertex providers authenticate with Google credentials, not API keys: remove it, and give `credentials: /path/to/key.json` or rely on Application Default Credentials",
            );
        }
        let required = |v: &mut Self, key: &str, value: &Option<String>, example: &str| {
            let value = value.as_deref().map(str::trim).filter(|value| !value.is_empty());
            if value.is_none() {
                v.problem(
                    format!("{path}.{key}"),
                    format!("is required for vertex providers, like `{key}: {example}`"),
                );
            }
            value.map(str::to_owned)
        };
        let project = required(self, "project", &config.project, "my-project");
        let region = required(self, "region", &config.region, "us-east5`, or `global");
        let credentials = match &config.credentials {
            Some(text) => {
                let (file, _) =
                    self.resolve(&format!("{path}.credentials"), text, "path", "GOOGLE_CREDENTIALS_FILE")?;
                GoogleCredentials::File(file.into())
            }
            None => GoogleCredentials::application_default(self.env),
        };
        match VertexSettings::new(project?, region?, credentials) {
            Ok(settings) => Some(settings),
            Err(switchyard_providers::BuildError::Vertex { field, problem }) => {
                self.problem(format!("{path}.{field}"), problem);
                None
            }
            Err(error) => {
                self.problem(path, error.to_string());
                None
            }
        }
    }

    /// `betas: forward | drop | [flags]`, for providers that speak to Claude.
    fn betas(&mut self, path: &str, claude: bool, betas: Option<&file::BetasConfig>) -> BetaPolicy {
        let at = format!("{path}.betas");
        match (claude, betas) {
            (_, None) => BetaPolicy::Forward,
            (false, Some(_)) => {
                self.problem(at, "applies only to anthropic, bedrock and vertex providers");
                BetaPolicy::Forward
            }
            (true, Some(file::BetasConfig::Mode(mode))) => match mode.as_str() {
                "forward" => BetaPolicy::Forward,
                "drop" => BetaPolicy::Drop,
                other => {
                    self.problem(
                        at,
                        format!("`{other}` is not `forward`, `drop` or a list of the beta flags to pass on"),
                    );
                    BetaPolicy::Forward
                }
            },
            (true, Some(file::BetasConfig::Allow(flags))) => {
                if flags.iter().any(|f| f.trim().is_empty() || f.contains(',')) {
                    self.problem(at, "a beta flag is empty or holds a comma: list one flag per entry");
                }
                BetaPolicy::Allow(flags.clone())
            }
        }
    }

    /// Bedrock's `region` (required) and `aws` credentials; either on another kind is a problem.
    fn bedrock(
        &mut self,
        path: &str,
        kind: ProviderKind,
        config: &file::ProviderConfig,
    ) -> Option<BedrockSettings> {
        if kind != ProviderKind::Bedrock {
            // A misplaced `region` is reported once, by `vertex`.
            if config.aws.is_some() {
                self.problem(format!("{path}.aws"), "applies only to bedrock providers");
            }
            return None;
        }
        let aws = config.aws.as_ref().map(|aws| self.aws(&format!("{path}.aws"), aws)).unwrap_or_default();
        let region = match config.region.as_deref().map(str::trim) {
            Some(region)
                if !region.is_empty() && region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                region.to_owned()
            }
            Some(region) => {
                self.problem(
                    format!("{path}.region"),
                    format!("`{region}` is not an AWS region: write one like us-east-1"),
                );
                return None;
            }
            None => {
                self.problem(format!("{path}.region"), "bedrock providers need a region: add `region: us-east-1` (the one your models are enabled in)");
                return None;
            }
        };
        Some(BedrockSettings { region, aws })
    }

    /// The `aws:` keys, resolved (`env://`), checked as a set.
    fn aws(&mut self, path: &str, aws: &file::AwsConfig) -> AwsAuth {
        let mut secret = |name: &str, value: &Option<String>| {
            value
                .as_deref()
                .and_then(|text| self.secret(&format!("{path}.{name}"), text))
                .map(|(secret, _)| secret)
        };
        let auth = AwsAuth {
            access_key_id: secret("access_key_id", &aws.access_key_id),
            secret_access_key: secret("secret_access_key", &aws.secret_access_key),
            session_token: secret("session_token", &aws.session_token),
            profile: aws.profile.clone(),
            role_arn: aws.role_arn.clone(),
        };
        if aws.access_key_id.is_some() != aws.secret_access_key.is_some() {
            self.problem(path, "give `access_key_id` and `secret_access_key` together (or neither, for the AWS default chain)");
        }
        if aws.session_token.is_some() && aws.access_key_id.is_none() {
            self.problem(
                format!("{path}.session_token"),
                "goes with `access_key_id` and `secret_access_key`",
            );
        }
        if aws.access_key_id.is_some() && aws.profile.is_some() {
            self.problem(format!("{path}.profile"), "give explicit keys or a profile, not both");
        }
        if let Some(role) = &aws.role_arn
            && !role.starts_with("arn:")
        {
            self.problem(
                format!("{path}.role_arn"),
                format!("`{role}` is not a role ARN: write one like arn:aws:iam::123456789012:role/bedrock"),
            );
        }
        auth
    }

    /// Whether a client of the Responses API is answered through the provider's own Responses
    /// API (`responses: native | translated`, which only `openai_compatible` chooses).
    /// Whether the server continues a prefill: said only of an `openai_compatible` one (an
    /// Anthropic provider always does; OpenAI's and Azure's APIs never do).
    fn prefill(&mut self, path: &str, kind: ProviderKind, prefill: Option<bool>) -> bool {
        match (kind, prefill) {
            (ProviderKind::OpenAiCompatible, prefill) => prefill.unwrap_or(false),
            (_, None) => false,
            (ProviderKind::Anthropic | ProviderKind::Bedrock, Some(_)) => {
                self.problem(
                    format!("{path}.prefill"),
                    "anthropic and bedrock providers continue a Claude prefill by themselves: remove the key",
                );
                false
            }
            (kind, Some(_)) => {
                self.problem(
                    format!("{path}.prefill"),
                    format!(
                        "applies only to openai_compatible (and simulated) providers, not {}",
                        kind.as_str()
                    ),
                );
                false
            }
        }
    }

    fn responses_mode(&mut self, path: &str, kind: ProviderKind, mode: Option<file::ResponsesMode>) -> bool {
        match (kind, mode) {
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
            (ProviderKind::OpenAi | ProviderKind::Azure, Some(file::ResponsesMode::Native)) | (_, None) => {
                false
            }
            (_, Some(_)) => {
                self.problem(format!("{path}.responses"), "applies only to openai_compatible providers");
                false
            }
        }
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

    /// Whether a target that parses names a provider of the file (the engine checks the
    /// text itself); `None` for one that does not parse, whose problem the engine reports.
    pub(super) fn known_provider(
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
}

/// A simulated provider as the file describes it.
fn simulated(config: &file::ProviderConfig) -> SimulatedProvider {
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
    sim.accepts_prefill(config.prefill.unwrap_or(false))
}

/// Whether `url` names a user (`https://user:password@host/`) before its host.
fn holds_user_info(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or_default();
    authority.contains('@')
}
