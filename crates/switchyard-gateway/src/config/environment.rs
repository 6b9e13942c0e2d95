//! The configurations that come without a file: providers from API keys in the environment,
//! and the embedded demo.

use super::{ConfigError, FileConfig, Kind, Loaded, Source, build, config_hash, file, parse};

const DEMO: &str = include_str!("demo.yaml");

/// The embedded demo configuration.
pub fn load_demo() -> Result<Loaded, ConfigError> {
    demo(&|_| None)
}

/// The demo, with the gateway keys of the environment (`SWITCHYARD_KEY`,
/// `SWITCHYARD_ADMIN_KEY`) when set: a demo shown beyond loopback, or its operator page
/// behind an admin key.
pub(crate) fn demo(env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    let mut file = parse(DEMO, false, "(embedded demo)")?;
    gateway_keys_from_env(&mut file, env);
    build(file, Source::Demo, env).map(|loaded| Loaded { hash: config_hash(DEMO), ..loaded })
}

fn gateway_keys_from_env(file: &mut FileConfig, env: &dyn Fn(&str) -> Option<String>) {
    if env("SWITCHYARD_KEY").is_some_and(|k| !k.is_empty()) {
        file.gateway.keys.push(super::file::ClientKeyConfig::Text("env://SWITCHYARD_KEY".to_owned()));
    }
    if env("SWITCHYARD_ADMIN_KEY").is_some_and(|k| !k.is_empty()) {
        file.gateway.admin_key = Some("env://SWITCHYARD_ADMIN_KEY".to_owned());
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
