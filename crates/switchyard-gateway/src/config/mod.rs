//! Configuration: one file (YAML, or TOML), the environment, or the embedded demo; checked
//! once at load, with errors that name the file, the key path and the fix.
//!
//! Three rooms: the file model ([`file`], read with its lines by `read`, found by `locate`),
//! validation into a checked model (`check`: every rule, every problem at once, nothing
//! built), and assembly of the router, the providers and the stores from it (`assemble`).

mod assemble;
mod changes;
mod check;
mod environment;
mod exposure;
pub(crate) mod file;
mod locate;
mod read;
mod settings;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use switchyard::Router;
use switchyard::simulated::SimulatedProvider;
use switchyard_pacing::Limits;

use crate::logging::LogFilter;

pub(crate) use assemble::Running;
pub use changes::{Changes, RESTART_ONLY, changes};
pub use environment::{from_env, load_demo};
pub use exposure::{Exposure, exposure, listen_address, refusal};
pub use file::{FileConfig, Kind, parse_duration};
pub use locate::{Choice, Place, Reason, load, locate, standard_places, unasked_demo};
pub use settings::{ConnectionLimits, GatewaySettings, ResponsesBounds, default_max_connections};

/// The address the gateway listens on when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4680";

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file, by its path.
    File(String),
    /// API keys in the environment, by the variables found.
    Environment(Vec<String>),
    /// The embedded demo.
    Demo,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "file {path}"),
            Source::Environment(vars) => write!(f, "environment ({})", vars.join(", ")),
            Source::Demo => f.write_str("embedded demo (simulated providers, no provider keys needed)"),
        }
    }
}

/// One problem, at one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path (`routes.default.targets[1]`).
    pub path: String,
    /// What is wrong, and the fix.
    pub message: String,
}

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (or `(environment)`, `(embedded demo)`).
    pub file: String,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = Shown(&self.file);
        match self.problems.as_slice() {
            [one] => write!(f, "{file}: {}: {}", Shown(&one.path), Shown(&one.message)),
            many => {
                write!(f, "{file}: {} problems:", many.len())?;
                for problem in many {
                    write!(f, "\n  {}: {}", Shown(&problem.path), Shown(&problem.message))?;
                }
                Ok(())
            }
        }
    }
}

/// Text of a file as a terminal shows it safely: control and bidirectional-formatting
/// characters (which could make a line read as another) escaped, and a line longer than
/// [`Shown::LINE`] characters cut short, saying how much was left out.
struct Shown<'a>(&'a str);

impl Shown<'_> {
    /// The most of a line shown.
    const LINE: usize = 1000;
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |c: char| {
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        };
        for (i, line) in self.0.split('\n').enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            for c in line.chars().take(Self::LINE) {
                match hidden(c) {
                    true => write!(f, "\\u{{{:04x}}}", u32::from(c))?,
                    false => write!(f, "{c}")?,
                }
            }
            let left = line.chars().count().saturating_sub(Self::LINE);
            if left > 0 {
                write!(f, "… ({left} more characters)")?;
            }
        }
        Ok(())
    }
}

impl ConfigError {
    fn one(file: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { file: file.to_owned(), problems: vec![Problem { path: path.into(), message: message.into() }] }
    }
}

/// A provider as the operator sees it (for `doctor` and the start banner): no secrets.
#[derive(Debug, Clone)]
pub struct ProviderSummary {
    /// Its id, what targets name it by.
    pub id: String,
    /// Its kind, as the file writes it.
    pub kind: &'static str,
    /// Its base URL (empty for a simulated one).
    pub base_url: String,
    /// Where each key came from (`env://NAME` or `literal`), with the key masked.
    pub credentials: Vec<String>,
    /// Client-side pacing, when configured.
    pub limits: Option<Limits>,
    /// The provider itself when it is `simulated`, for fault drills.
    pub simulated: Option<SimulatedProvider>,
    /// A Bedrock provider's region and credential cache, for `doctor`.
    pub bedrock: Option<BedrockSummary>,
    /// What else an operator is shown of it, a line each (a `vertex` provider's project and
    /// region, and its Google credentials, masked, with where they were found).
    pub notes: Vec<String>,
}

/// What `doctor` shows of a Bedrock provider.
#[derive(Debug, Clone)]
pub struct BedrockSummary {
    /// The AWS region.
    pub region: String,
    /// The credentials its SigV4 calls use (a keyed provider sends its API key instead).
    pub credentials: std::sync::Arc<switchyard_providers::bedrock::CredentialCache>,
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
    /// Where it came from.
    pub source: Source,
    /// Why this configuration was chosen, when [`load`] chose it.
    pub reason: Option<Reason>,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The router of its providers and routes.
    pub router: Router,
    /// The gateway's own settings.
    pub gateway: GatewaySettings,
    /// Each provider as the operator sees it.
    pub providers: Vec<ProviderSummary>,
    /// What to log.
    pub log: LogSettings,
    /// The configuration's hash ([`config_hash`] of the file's text, or of what stands for it:
    /// the demo's text, the environment's variable names); empty when built from a model.
    pub hash: String,
}

impl Loaded {
    /// When a client key has a budget and some targets have no price: what to tell the
    /// operator (their answers cost nothing, so budgets do not see them). `None` otherwise.
    pub fn unpriced_for_budgets(&self) -> Option<String> {
        let budgeted: Vec<&str> = self
            .gateway
            .keys
            .iter()
            .filter(|key| key.rules.budget.is_some())
            .map(|key| &*key.label)
            .collect();
        let unpriced = self.router.unpriced_targets();
        if budgeted.is_empty() || unpriced.is_empty() {
            return None;
        }
        Some(format!(
            "the budgets of {} are not charged for {}: no price under its provider's `prices` (a dated snapshot takes its model's price; a pattern route's models take a `name*` price)",
            budgeted.join(", "),
            unpriced.join(", ")
        ))
    }
}

/// The hash a configuration is known by in `/admin/health`, its events and the fleet: 16 hex
/// digits of FNV-1a (64 bits) over `text`, stable across builds and platforms, so that two
/// replicas of any version agree on it.
///
/// ```
/// let hash = switchyard_gateway::config::config_hash("routes: {}\n");
/// assert_eq!(hash.len(), 16);
/// assert_ne!(hash, switchyard_gateway::config::config_hash("routes: {} \n"));
/// ```
pub fn config_hash(text: &str) -> String {
    format!("{:016x}", fnv(FNV_START, text.as_bytes()))
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a (64 bits) of `bytes`, from `hash`.
fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The hash of the configuration file at `path` whose text is `text`: [`config_hash`] of the
/// text, and with it the content of each file it names that the gateway reads as it loads
/// (a provider's `ca_file`, a Vertex provider's `credentials`), so that a certificate or a key
/// file replaced on disk is a changed configuration, which a reload then reads (the text alone
/// would be `unchanged`). The text's own hash when it names none.
pub fn file_hash(path: &Path, text: &str) -> String {
    let named = named_files(&read::tree(text, is_toml(path)));
    if named.is_empty() {
        return config_hash(text);
    }
    let mut hash = fnv(FNV_START, text.as_bytes());
    for file in named {
        hash = fnv(hash, b"\0");
        hash = fnv(hash, file.as_bytes());
        hash = match switchyard_providers::files::read_bounded(Path::new(&file), MAX_FILE_BYTES) {
            Ok(bytes) => fnv(fnv(hash, b"\0"), &bytes),
            Err(_) => fnv(hash, b"\0(unread)"),
        };
    }
    format!("{hash:016x}")
}

/// The files a configuration's `tree` names for the gateway to read, sorted: `ca_file` and
/// `credentials` paths of its providers (not an `env://` name).
fn named_files(tree: &serde_json::Value) -> Vec<String> {
    let providers = tree["providers"].as_object().into_iter().flat_map(|providers| providers.values());
    let paths = providers.flat_map(|provider| [&provider["ca_file"], &provider["credentials"]]);
    let mut named: Vec<String> = paths
        .filter_map(|path| path.as_str())
        // As the check reads them.
        .map(str::trim)
        .filter(|path| !path.starts_with("env://"))
        .map(str::to_owned)
        .collect();
    named.sort();
    named.dedup();
    named
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
    /// The configuration, ready to serve.
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
    let text =
        read_text(path).map_err(|e| ConfigError::one(&name, "(file)", format!("cannot read it: {e}")))?;
    let parsed = read::read(&text, is_toml(path), &name)?;
    let mut checked = build_parsed(parsed, Source::File(name), env, unset_env)?;
    checked.loaded.hash = file_hash(path, &text);
    Ok(checked)
}

/// The most a configuration file may hold: far more than any configuration needs, and a
/// bound on what a path mistaken for one (`/dev/zero`, a log) can cost the gateway.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The text of the configuration file at `path`. Only a regular file (or a link to one) of at
/// most [`MAX_FILE_BYTES`] is read: a pipe or a device would block a reload or fill memory.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    let bytes = switchyard_providers::files::read_bounded(path, MAX_FILE_BYTES)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// Whether the file at `path` is TOML (it ends in `.toml`); else it is YAML.
pub fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("toml"))
}

/// `text`, the new content of the file at `path`, checked completely as at start and
/// assembled over the `running` gateway's: its router reconfigured (what it learned kept by
/// key), its fleet's store and pacer's lanes handed on. Nothing of the running gateway changes
/// here but what the router's reconfiguration forgets, and only once everything checked.
///
/// The gateway listens on `listen`: beyond loopback, a configuration without the keys that
/// guard it there is refused, as at start, before anything is built.
pub(crate) fn reload(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    running: Running<'_>,
    listen: SocketAddr,
) -> Result<(Loaded, switchyard::Forgotten), ConfigError> {
    let name = path.display().to_string();
    let parsed = read::read(text, is_toml(path), &name)?;
    let (checked, _) = check::check(parsed, &name, env, UnsetEnv::Error)?;
    let kinds = checked.providers.iter().map(|p| p.kind.as_str());
    if let Exposure::Refused(missing) = exposure::exposure_of(listen, kinds, &checked.gateway) {
        let message = format!(
            "is needed to serve real providers on {listen}, beyond loopback: add it, or set `gateway.open: true` to run an open relay on purpose"
        );
        let problems =
            missing.iter().map(|key| Problem { path: (*key).to_owned(), message: message.clone() });
        return Err(ConfigError { file: name, problems: problems.collect() });
    }
    let (mut loaded, forgotten) = assemble::reassemble(checked, Source::File(name.clone()), &name, running)?;
    loaded.hash = file_hash(path, text);
    Ok((loaded, forgotten))
}

/// The configuration when no file is given: providers from API keys in the environment, or
/// the embedded demo when there are none.
pub fn load_default(env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    match from_env(env) {
        Some((file, vars)) => {
            let hash = config_hash(&format!("(environment) {}", vars.join(",")));
            build(file, Source::Environment(vars), env).map(|loaded| Loaded { hash, ..loaded })
        }
        None => environment::demo(env),
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
    let (checked, warnings) = check::check(parsed, &name, env, unset_env)?;
    let loaded = assemble::assemble(checked, source, &name)?;
    Ok(Checked { loaded, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_shown_without_control_characters_nor_endless_lines() {
        let error = ConfigError::one(
            "f.toml",
            "providers.\u{202e}evil",
            format!("bad line:\n{}\n\t^ here\u{1b}[2J", "x".repeat(1760)),
        );
        let shown = error.to_string();
        assert!(shown.contains("providers.\\u{202e}evil") && shown.contains("here\\u{001b}[2J"), "{shown}");
        // A tab stays a tab: it places the caret under the source line.
        assert!(shown.contains(&format!("{}… (760 more characters)\n\t^ here", "x".repeat(1000))), "{shown}");
        assert!(shown.len() < 1200, "{shown}");
    }

    #[test]
    fn only_a_regular_file_of_bounded_size_is_read_as_a_configuration() {
        let refused = |path: &Path| read_text(path).unwrap_err().to_string();
        // A device would fill memory, a pipe block the reload that read it.
        assert!(refused(Path::new("/dev/zero")).contains("not a regular file"));
        let dir = std::env::temp_dir().join(format!("switchyard-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(refused(&dir).contains("a directory"));
        let large = dir.join("large.yaml");
        std::fs::File::create(&large).unwrap().set_len(MAX_FILE_BYTES + 1).unwrap();
        assert!(refused(&large).contains("more than 16 MiB"), "{}", refused(&large));
        let fine = dir.join("fine.yaml");
        std::fs::write(&fine, "routes: {}\n").unwrap();
        assert_eq!(read_text(&fine).unwrap(), "routes: {}\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
