//! Validation: the file model checked against every rule, all problems at once, into a
//! [`CheckedConfig`] that assembly ([`super::assemble`]) builds from without checking again.
//! Nothing is built and nothing connects here: the environment is read through the `env`
//! given (`env://` resolved once, in [`Validator::resolve`]), and `ca_file`s are read to be
//! checked.

mod keys;
mod provider;
mod references;
mod route;
mod sections;
mod telemetry;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use switchyard::RetryBudgetSettings;
use switchyard::credential::Secret;
use switchyard::health::HealthSettings;
use switchyard::route::Route;
use switchyard_state::StateSettings;

pub(crate) use provider::{Adapter, CheckedProvider};

use super::read::{self, Removed};
use super::settings::GatewaySettings;
use super::{ConfigError, DEFAULT_LISTEN, Kind, LogSettings, Problem, UnsetEnv, file, listen_address};

/// A configuration every rule holds for: what assembly builds the router and the gateway from.
pub(crate) struct CheckedConfig {
    pub listen: SocketAddr,
    pub providers: Vec<CheckedProvider>,
    pub routes: Vec<Route>,
    pub default_route: Option<String>,
    pub health: HealthSettings,
    pub budget: RetryBudgetSettings,
    /// The gateway's settings, but for what assembly adds (the shared store, the drills).
    pub gateway: GatewaySettings,
    /// `state:`: the fleet's Redis, when configured.
    pub state: Option<StateSettings>,
    pub log: LogSettings,
}

/// Checks the file model `parsed` holds (named `name` in errors): every problem of the file,
/// with those found as it was read first, or the checked configuration and its warnings.
pub(crate) fn check(
    parsed: read::Parsed,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
    unset_env: UnsetEnv,
) -> Result<(CheckedConfig, Vec<Problem>), ConfigError> {
    let Some(file) = parsed.file else {
        return Err(ConfigError { file: name.to_owned(), problems: parsed.problems });
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
    let providers = v.providers(&file.providers);
    let routes = v.routes(&file);
    let health = v.health(&file.health);
    let budget = v.budget(&file.retry_budget);
    let gateway = v.gateway(&file.gateway);
    let client_keys = v.client_keys(&file);
    if let Some(admin) = gateway.as_ref().and_then(|g| g.admin_key.as_ref())
        && client_keys.find(admin.expose()).is_some()
    {
        // A client holding it could reset health, reload and read every request.
        v.problem(
            "gateway.admin_key",
            "is also a client key (`gateway.keys`): give the admin key its own value",
        );
    }
    let state = file.state.as_ref().and_then(|state| v.shared_state(state));
    let telemetry = v.telemetry(file.telemetry.as_ref());
    let log = v.log(file.log.as_ref());
    if !v.problems.is_empty() {
        return Err(ConfigError { file: name.to_owned(), problems: v.problems });
    }
    let (Some(listen), Some(mut gateway)) = (listen, gateway) else {
        return Err(ConfigError::one(name, "(top level)", "invalid configuration"));
    };
    gateway.keys = client_keys;
    gateway.telemetry = telemetry;
    gateway.responses_native = responses_native(&file.providers);
    gateway.anthropic_providers = file
        .providers
        .iter()
        .filter_map(|(id, p)| {
            let kind = match p.kind {
                Kind::Anthropic => switchyard_providers::ProviderKind::Anthropic,
                Kind::Vertex => switchyard_providers::ProviderKind::Vertex,
                Kind::Bedrock => switchyard_providers::ProviderKind::Bedrock,
                _ => return None,
            };
            Some((id.clone(), kind))
        })
        .collect();
    let checked = CheckedConfig {
        listen,
        providers,
        routes,
        default_route: file.default_route.clone(),
        health,
        budget,
        gateway,
        state,
        log,
    };
    Ok((checked, v.warnings))
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

/// The checker of one file: the problems and warnings found so far, and how to read the
/// environment.
pub(super) struct Validator<'e> {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// Keys taken out of the file for their problems: what refers to them is not reported.
    removed: Removed,
    unset_env: UnsetEnv,
}

impl Validator<'_> {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem { path: path.into(), message: message.into() });
    }

    /// A problem the engine found, at `path` in the file plus the problem's own path.
    fn engine_problem(&mut self, path: &str, problem: switchyard::problem::Problem) {
        let at = if problem.path.is_empty() { path.to_owned() } else { format!("{path}.{}", problem.path) };
        self.problem(at, problem.to_string());
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

    /// Takes a literal secret or resolves `env://NAME`; returns it with where it came from.
    fn secret(&mut self, path: &str, text: &str) -> Option<(Secret, String)> {
        let (value, origin) = self.resolve(path, text, "key", "OPENAI_API_KEY")?;
        if value.is_empty() {
            self.problem(path, "the key is empty");
            return None;
        }
        Some((Secret::new(value), origin))
    }

    /// [`Self::secret`], for a key that is one word (an API key, a client or admin key): one
    /// with a space, a line break or a control character would be refused at every call, so
    /// it is refused now (and not shown).
    fn key(&mut self, path: &str, text: &str) -> Option<(Secret, String)> {
        let (secret, origin) = self.secret(path, text)?;
        if secret.expose().chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.problem(
                path,
                "the key holds a space, a line break or a control character: a key is one word",
            );
            return None;
        }
        // The shipped Kubernetes Secret's placeholder: a known key, never one to serve with.
        if secret.expose() == "replace-me" {
            self.problem(path, "is still the placeholder `replace-me`: put the real key in the Secret");
            return None;
        }
        Some((secret, origin))
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
            value => {
                let state = if value.is_some() { "set but empty" } else { "not set" };
                let unset = Problem {
                    path: path.to_owned(),
                    message: format!(
                        "environment variable `{var}` is {state}: export it, or write the {what} itself"
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
}
