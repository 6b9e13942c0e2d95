//! Where the configuration comes from: `--config FILE`, else the file `SWITCHYARD_CONFIG`
//! names, else `./switchyard.yaml` (or `.yml`, `.toml`), else
//! `/etc/switchyard/switchyard.yaml` (or `.yml`, `.toml`), else providers from API keys in the
//! environment, else the embedded demo.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::environment::demo;
use super::{ConfigError, Loaded, Source, load_default, load_file};

/// Why a configuration was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `--config FILE`.
    Flag,
    /// The `SWITCHYARD_CONFIG` variable.
    Variable,
    /// Found in one of the places looked at; how the place is said ("found in the working
    /// directory").
    Found(&'static str),
    /// No file given or found: the environment's API keys, else the demo.
    NothingFound,
    /// `serve --demo`.
    DemoAsked,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Flag => f.write_str("given with --config"),
            Reason::Variable => f.write_str("named by SWITCHYARD_CONFIG"),
            Reason::Found(place) => f.write_str(place),
            Reason::NothingFound => f.write_str("no config file given or found"),
            Reason::DemoAsked => f.write_str("asked for with --demo"),
        }
    }
}

/// A place a configuration file is looked for when none is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file's path.
    pub path: PathBuf,
    /// How a file found there is announced: "found in the working directory".
    pub found: &'static str,
}

/// The names a configuration file is looked for under, in order.
const NAMES: [&str; 3] = ["switchyard.yaml", "switchyard.yml", "switchyard.toml"];

/// The places looked at, in order: the working directory, then `/etc/switchyard`; in each,
/// the [`NAMES`].
pub fn standard_places() -> Vec<Place> {
    let folders =
        [("./", "found in the working directory"), ("/etc/switchyard/", "found in /etc/switchyard")];
    folders
        .into_iter()
        .flat_map(|(folder, found)| {
            NAMES.map(|name| Place { path: PathBuf::from(format!("{folder}{name}")), found })
        })
        .collect()
}

/// What to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// A configuration file.
    /// A file, and why it was chosen.
    File {
        /// The file.
        path: PathBuf,
        /// Why it was chosen.
        reason: Reason,
    },
    /// No file: providers from API keys in the environment, else the embedded demo.
    Default,
    /// The embedded demo, asked for.
    Demo,
}

/// Chooses the configuration from the command line's `--config` (`flag`) and `--demo`, the
/// environment (`SWITCHYARD_CONFIG`) and the first of `places` that is a file. A file named by
/// the flag or the variable is chosen whether it exists or not: loading it says what is wrong.
pub fn locate(
    flag: Option<&Path>,
    demo: bool,
    env: &dyn Fn(&str) -> Option<String>,
    places: &[Place],
) -> Choice {
    if demo {
        return Choice::Demo;
    }
    if let Some(path) = flag {
        return Choice::File { path: path.to_owned(), reason: Reason::Flag };
    }
    if let Some(path) = env("SWITCHYARD_CONFIG").filter(|path| !path.trim().is_empty()) {
        return Choice::File { path: PathBuf::from(path), reason: Reason::Variable };
    }
    match places.iter().find(|place| place.path.is_file()) {
        Some(place) => Choice::File { path: place.path.clone(), reason: Reason::Found(place.found) },
        None => Choice::Default,
    }
}

/// Loads what `choice` says, and records why it was chosen.
pub fn load(choice: &Choice, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    let (mut loaded, reason) = match choice {
        Choice::File { path, reason } => (load_file(path, env)?, *reason),
        Choice::Default => (load_default(env)?, Reason::NothingFound),
        Choice::Demo => (demo(env)?, Reason::DemoAsked),
    };
    loaded.reason = Some(reason);
    Ok(loaded)
}

impl Loaded {
    /// Where the configuration came from and, when known, why it was chosen, for the start
    /// banner and `doctor`: `file ./switchyard.yaml (found in the working directory)`.
    pub fn origin(&self) -> String {
        let Some(reason) = self.reason else { return self.source.to_string() };
        match &self.source {
            Source::File(path) => format!("file {path} ({reason})"),
            Source::Environment(vars) => format!("environment ({}; {reason})", vars.join(", ")),
            Source::Demo => format!("embedded demo (simulated providers, no provider keys needed; {reason})"),
        }
    }
}

/// Why `serve` refuses to start at `listen`, when it does, because no configuration was found:
/// beyond loopback the demo's simulated answers are served only when `--demo` asks for them,
/// never because a server's configuration was forgotten.
pub fn unasked_demo(listen: SocketAddr, loaded: &Loaded) -> Option<String> {
    let unasked = loaded.source == Source::Demo && loaded.reason == Some(Reason::NothingFound);
    (unasked && !listen.ip().to_canonical().is_loopback()).then(|| {
        format!(
            "refusing to serve the embedded demo's simulated answers on {listen}: no configuration was found \
             (no --config, SWITCHYARD_CONFIG not set, no switchyard.yaml, .yml or .toml in the working directory or /etc/switchyard, \
             no provider API key in the environment). To fix: give the configuration with --config FILE or \
             SWITCHYARD_CONFIG=FILE; or pass --demo to serve the demo beyond loopback on purpose"
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A folder of this test's own, with `files` written in it; removed when dropped.
    fn folder(name: &str, files: &[&str]) -> Folder {
        let dir = std::env::temp_dir().join(format!("switchyard-locate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in files {
            std::fs::write(dir.join(file), "providers: {}\n").unwrap();
        }
        Folder(dir)
    }

    /// See [`folder`].
    struct Folder(PathBuf);

    impl std::ops::Deref for Folder {
        type Target = Path;

        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn places(dir: &Path) -> Vec<Place> {
        vec![
            Place { path: dir.join("here.yaml"), found: "found here" },
            Place { path: dir.join("system.yaml"), found: "found in the system's place" },
        ]
    }

    fn variable(value: &str) -> impl Fn(&str) -> Option<String> {
        let value = value.to_owned();
        move |name: &str| (name == "SWITCHYARD_CONFIG").then(|| value.clone())
    }

    #[test]
    fn the_flag_wins_over_the_variable_and_the_places() {
        let dir = folder("flag", &["here.yaml"]);
        let choice = locate(Some(Path::new("given.yaml")), false, &variable("named.yaml"), &places(&dir));
        assert_eq!(choice, Choice::File { path: "given.yaml".into(), reason: Reason::Flag });
    }

    #[test]
    fn the_variable_wins_over_the_places_even_when_its_file_is_missing() {
        let dir = folder("variable", &["here.yaml"]);
        let choice = locate(None, false, &variable("/nowhere/named.yaml"), &places(&dir));
        assert_eq!(choice, Choice::File { path: "/nowhere/named.yaml".into(), reason: Reason::Variable });
    }

    #[test]
    fn an_empty_variable_is_not_set() {
        let dir = folder("empty-variable", &["here.yaml"]);
        let choice = locate(None, false, &variable(" "), &places(&dir));
        assert_eq!(choice, Choice::File { path: dir.join("here.yaml"), reason: Reason::Found("found here") });
    }

    #[test]
    fn the_first_place_with_a_file_is_chosen() {
        let dir = folder("places", &["system.yaml"]);
        let choice = locate(None, false, &|_| None, &places(&dir));
        assert_eq!(
            choice,
            Choice::File {
                path: dir.join("system.yaml"),
                reason: Reason::Found("found in the system's place")
            }
        );
        std::fs::write(dir.join("here.yaml"), "").unwrap();
        let choice = locate(None, false, &|_| None, &places(&dir));
        assert_eq!(choice, Choice::File { path: dir.join("here.yaml"), reason: Reason::Found("found here") });
    }

    #[test]
    fn a_folder_where_a_file_is_looked_for_is_not_a_file() {
        let dir = folder("folder", &[]);
        std::fs::create_dir_all(dir.join("here.yaml")).unwrap();
        assert_eq!(locate(None, false, &|_| None, &places(&dir)), Choice::Default);
    }

    #[test]
    fn with_nothing_found_the_environment_or_the_demo_is_chosen() {
        let dir = folder("nothing", &[]);
        assert_eq!(locate(None, false, &|_| None, &places(&dir)), Choice::Default);
    }

    #[test]
    fn the_demo_asked_for_wins_over_everything() {
        let dir = folder("demo", &["here.yaml"]);
        assert_eq!(locate(None, true, &variable("named.yaml"), &places(&dir)), Choice::Demo);
    }

    #[test]
    fn the_standard_places_are_the_working_directory_then_etc() {
        let paths: Vec<PathBuf> = standard_places().into_iter().map(|place| place.path).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("./switchyard.yaml"),
                PathBuf::from("./switchyard.yml"),
                PathBuf::from("./switchyard.toml"),
                PathBuf::from("/etc/switchyard/switchyard.yaml"),
                PathBuf::from("/etc/switchyard/switchyard.yml"),
                PathBuf::from("/etc/switchyard/switchyard.toml")
            ]
        );
    }

    #[test]
    fn the_origin_says_why_the_configuration_was_chosen() {
        let dir = folder("origin", &[]);
        let file = dir.join("switchyard.yaml");
        std::fs::write(
            &file,
            "providers: { p: { kind: simulated } }\nroutes: { default: { targets: [p:m] } }\n",
        )
        .unwrap();
        let choice =
            Choice::File { path: file.clone(), reason: Reason::Found("found in the working directory") };
        let loaded = load(&choice, &|_| None).unwrap();
        assert_eq!(loaded.origin(), format!("file {} (found in the working directory)", file.display()));
        let demo = load(&Choice::Default, &|_| None).unwrap();
        assert_eq!(
            demo.origin(),
            "embedded demo (simulated providers, no provider keys needed; no config file given or found)"
        );
        let keys = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-a".to_owned());
        assert_eq!(
            load(&Choice::Default, &keys).unwrap().origin(),
            "environment (OPENAI_API_KEY; no config file given or found)"
        );
    }

    #[test]
    fn only_a_demo_nobody_asked_for_is_refused_and_only_beyond_loopback() {
        let beyond: SocketAddr = "0.0.0.0:4680".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:4680".parse().unwrap();
        let found_nothing = load(&Choice::Default, &|_| None).unwrap();
        let message = unasked_demo(beyond, &found_nothing).unwrap();
        assert!(message.contains("--config") && message.contains("SWITCHYARD_CONFIG"), "{message}");
        assert!(message.contains("--demo"), "{message}");
        assert_eq!(unasked_demo(loopback, &found_nothing), None);
        let asked = load(&Choice::Demo, &|_| None).unwrap();
        assert_eq!(unasked_demo(beyond, &asked), None);
    }
}
