//! The configuration's life in a running gateway: its hash and when it was loaded, and its
//! reloads. Three triggers, one path ([`ConfigLife::reload`]): `SIGHUP`, a change of the file
//! (watched by [`watch`], debounced), and `POST /admin/config/reload`.
//!
//! A reload reads the file and checks it completely, as at start, before anything changes. A
//! file with problems changes nothing: the problems are logged with their key paths, published
//! as `config_rejected`, counted in `switchyard_config_reloads_total{result="rejected"}` and
//! kept as `last_error` for `/admin/health`. A good file is assembled over the running
//! configuration (the router reconfigured, keeping what it learned by key; the fleet's store
//! and the pacer's lanes handed on) and swapped in whole: requests from then on use it, those
//! running finish on the one they started with. Settings fixed at start
//! ([`RESTART_ONLY`](crate::config::RESTART_ONLY)) keep their running values and are reported
//! as needing a restart.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use switchyard::Forgotten;
use switchyard::events::EventKind;

use crate::config::{self, ConfigError, GatewaySettings, Loaded, Problem, Running};
use crate::metrics::labels;
use crate::server::{AppState, Live};

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `SIGHUP` (`systemctl reload`, `kill -HUP`).
    Signal,
    /// The file changed (an edit, or a Kubernetes ConfigMap's symlink swap).
    FileChanged,
    /// `POST /admin/config/reload`.
    Admin,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChanged => "file change",
            Trigger::Admin => "POST /admin/config/reload",
        }
    }
}

/// What a reload came to.
#[derive(Debug)]
pub enum Outcome {
    /// The new file is in force.
    Reloaded(Reloaded),
    /// The file is the one in force (the same text): nothing to do.
    Unchanged {
        /// Its hash.
        hash: String,
        /// The settings an earlier reload changed that still wait for a restart.
        restart: Vec<String>,
    },
    /// The file has problems: the running configuration stays.
    Rejected {
        /// The refused file's hash (empty when it could not be read).
        hash: String,
        /// Every problem found.
        error: ConfigError,
    },
    /// The configuration did not come from a file (the environment, the demo): there is
    /// nothing to read again.
    NotAFile,
}

/// A configuration swapped in: what changed, and what still needs a restart.
#[derive(Debug)]
pub struct Reloaded {
    /// The new configuration's hash.
    pub hash: String,
    /// The hash it replaced.
    pub previous: String,
    /// What the file changed, by key path (`routes.fast: added`).
    pub changes: Vec<String>,
    /// Settings whose value in force differs from the running one, which applies until a
    /// restart (whichever reload changed them; none once a change is reverted).
    pub restart: Vec<String>,
    /// What the router forgot: targets and credentials removed or changed.
    pub forgotten: Forgotten,
    /// What the new configuration should be told of, as at start (a budget not charged for
    /// targets without a price).
    pub warnings: Vec<String>,
}

impl Outcome {
    /// The metric label of the outcome: `reloaded`, `unchanged` or `rejected`.
    pub fn result(&self) -> &'static str {
        match self {
            Outcome::Reloaded(_) => "reloaded",
            Outcome::Unchanged { .. } | Outcome::NotAFile => "unchanged",
            Outcome::Rejected { .. } => "rejected",
        }
    }

    /// The outcome as the answer of `POST /admin/config/reload` writes it.
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Reloaded(done) => json!({
                "result": "reloaded",
                "hash": done.hash,
                "previous_hash": done.previous,
                "changes": done.changes,
                "restart_required": done.restart,
                "forgotten": {
                    "targets": done.forgotten.targets,
                    "credentials": done.forgotten.credentials,
                },
                "warnings": done.warnings,
            }),
            Outcome::Unchanged { hash, restart } => json!({
                "result": "unchanged",
                "hash": hash,
                "changes": [],
                "restart_required": restart,
                "forgotten": { "targets": [], "credentials": [] },
            }),
            Outcome::Rejected { hash, error } => json!({
                "result": "rejected",
                "hash": hash,
                "file": error.file,
                "problems": problems_json(&error.problems),
            }),
            Outcome::NotAFile => {
                json!({ "result": "unchanged", "changes": [], "reason": "the configuration does not come from a file: nothing to read again" })
            }
        }
    }
}

fn problems_json(problems: &[Problem]) -> Vec<Value> {
    problems.iter().map(|p| json!({ "path": p.path, "message": p.message })).collect()
}

/// The last file refused, for `/admin/health`.
#[derive(Debug, Clone)]
struct LastError {
    at: SystemTime,
    hash: String,
    error: ConfigError,
}

/// The configuration in force, as the operator sees it.
#[derive(Debug)]
struct Status {
    hash: String,
    loaded_at: SystemTime,
    /// The text in force, to tell what the next one changes.
    text: String,
    /// The text the process started with: what the settings that apply only at a restart run.
    started: String,
    last_error: Option<LastError>,
    /// The settings that apply only at a restart whose value in force differs from the one
    /// running (a change reverted is no longer one).
    restart: Vec<String>,
}

/// The configuration's life in a running gateway: where it came from, its hash, and how it
/// reloads. See the [module docs](self).
pub struct ConfigLife {
    /// The file, when the configuration came from one.
    path: Option<PathBuf>,
    /// The file as it was when it was loaded: what the watch compares with.
    loaded_as: Option<Fingerprint>,
    /// The address the gateway listens on: a new configuration must be allowed there.
    listen: SocketAddr,
    /// What the command line fixed, which a restart keeps whatever the file says.
    command_line: CommandLine,
    status: Mutex<Status>,
    /// One reload at a time: two triggers at once read the file once each, in turn.
    reloading: Mutex<()>,
}

impl std::fmt::Debug for ConfigLife {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigLife").field("path", &self.path).finish_non_exhaustive()
    }
}

impl ConfigLife {
    /// The life of `loaded`, served at `listen`: reloads read its file again, when it came
    /// from one (`text` is what was read).
    pub fn new(loaded: &Loaded, text: Option<String>, listen: SocketAddr) -> Self {
        let path = match &loaded.source {
            config::Source::File(path) => Some(PathBuf::from(path)),
            _ => None,
        };
        let text = text.unwrap_or_default();
        let status = Status {
            hash: loaded.hash.clone(),
            loaded_at: SystemTime::now(),
            started: text.clone(),
            text,
            last_error: None,
            restart: Vec::new(),
        };
        let loaded_as = path.as_deref().and_then(fingerprint);
        let command_line = CommandLine::default();
        Self { path, loaded_as, listen, command_line, status: Mutex::new(status), reloading: Mutex::new(()) }
    }

    /// The same life, of a gateway whose command line fixed `command_line`.
    pub fn with_command_line(self, command_line: CommandLine) -> Self {
        Self { command_line, ..self }
    }

    /// Which of `pending`, the settings applied only at a restart whose text differs from what
    /// the gateway started with, a restart would really change: a value the same as the one
    /// running (a default written out, `30s` as `30000ms`) or one the command line sets
    /// (`--listen`, `--threads`) is not.
    fn restart_changes(&self, pending: Vec<String>, next: &Loaded, running: &GatewaySettings) -> Vec<String> {
        let (new, now) = (&next.gateway.connections, &running.connections);
        let threads =
            |threads: Option<NonZeroUsize>| threads.or_else(|| std::thread::available_parallelism().ok());
        pending
            .into_iter()
            .filter(|path| match path.as_str() {
                "listen" => !self.command_line.listen && next.listen != self.listen,
                "gateway.threads" => {
                    self.command_line.threads.is_none()
                        && threads(next.gateway.threads) != threads(running.threads)
                }
                "gateway.header_timeout" => new.header_timeout != now.header_timeout,
                "gateway.idle_timeout" => new.idle_timeout != now.idle_timeout,
                "gateway.send_timeout" => new.send_timeout != now.send_timeout,
                "gateway.max_connections" => new.max_connections != now.max_connections,
                "gateway.recent_requests" => next.gateway.recent_requests != running.recent_requests,
                "gateway.responses" => next.gateway.responses != running.responses,
                _ => true,
            })
            .collect()
    }

    /// Watches the file from the state it was loaded in (a change made since is seen) and
    /// calls `changed` once per settled change; see [`watch`]. Never returns without a file.
    pub async fn watch(&self, changed: impl FnMut()) {
        match &self.path {
            Some(path) => watch_with(|| fingerprint(path), self.loaded_as, POLL, QUIET, changed).await,
            None => std::future::pending().await,
        }
    }

    /// The file the configuration came from, when it did.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The hash of the configuration in force.
    pub fn hash(&self) -> String {
        self.lock().hash.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `config` of `/admin/health`: `hash`, `loaded_at`, `last_error` (null, or the refused
    /// file's hash, when, and its problems), `restart_required`, and with shared state the
    /// `fleet`: each replica's hash and whether they agree.
    pub fn to_json(&self, live: &Live) -> Value {
        let status = self.lock();
        let last_error = status.last_error.as_ref().map(|last| {
            json!({
                "at": crate::logging::rfc3339(last.at),
                "hash": last.hash,
                "file": last.error.file,
                "problems": problems_json(&last.error.problems),
            })
        });
        let mut value = json!({
            "hash": status.hash,
            "loaded_at": crate::logging::rfc3339(status.loaded_at),
            "source": self.path.as_ref().map(|p| p.display().to_string()),
            "last_error": last_error,
            "restart_required": status.restart,
        });
        if let Some(store) = &live.gateway.shared_state {
            value["fleet"] = fleet(store, &status.hash);
        }
        value
    }

    /// Reads the file again and puts it in force when it is good; see the [module
    /// docs](self). Blocks while it reads and builds (call it off the async threads).
    pub fn reload(&self, state: &AppState, trigger: Trigger) -> Outcome {
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = self.read_and_swap(state);
        let result = outcome.result();
        state.metrics.increment("switchyard_config_reloads_total", labels([("result", result.into())]), 1);
        let events = state.live().router.events().clone();
        match &outcome {
            Outcome::Reloaded(done) => {
                tracing::info!(
                    trigger = trigger.as_str(),
                    hash = %done.hash,
                    previous = %done.previous,
                    changes = %done.changes.join(", "),
                    "configuration reloaded"
                );
                if !done.restart.is_empty() {
                    tracing::warn!(
                        settings = %done.restart.join(", "),
                        "configuration reloaded, but these settings apply only at a restart: the running values stay"
                    );
                }
                for warning in &done.warnings {
                    tracing::warn!("{warning}");
                }
                events.publish(EventKind::ConfigReloaded {
                    hash: done.hash.clone(),
                    changes: done.changes.clone(),
                });
            }
            Outcome::Rejected { hash, error } => {
                tracing::error!(trigger = trigger.as_str(), hash = %hash, "configuration rejected, the running one stays: {error}");
                let problems = error.problems.iter().map(|p| format!("{}: {}", p.path, p.message)).collect();
                events.publish(EventKind::ConfigRejected { hash: hash.clone(), problems });
            }
            Outcome::Unchanged { .. } => {
                tracing::info!(trigger = trigger.as_str(), "configuration unchanged");
            }
            Outcome::NotAFile => {
                tracing::warn!(
                    trigger = trigger.as_str(),
                    "reload asked, but the configuration does not come from a file"
                );
            }
        }
        outcome
    }

    /// The reload itself: read, check, assemble over the running configuration, swap.
    fn read_and_swap(&self, state: &AppState) -> Outcome {
        let Some(path) = &self.path else { return Outcome::NotAFile };
        let text = match config::read_text(path) {
            Ok(text) => text,
            Err(error) => {
                let error = ConfigError {
                    file: path.display().to_string(),
                    problems: vec![Problem {
                        path: "(file)".to_owned(),
                        message: format!("cannot read it: {error}"),
                    }],
                };
                return self.rejected(String::new(), error);
            }
        };
        let hash = config::file_hash(path, &text);
        {
            let mut status = self.lock();
            if hash == status.hash {
                status.last_error = None;
                return Outcome::Unchanged { hash, restart: status.restart.clone() };
            }
        }
        let live = state.live();
        let running = Running {
            router: &live.router,
            store: live.gateway.shared_state.clone(),
            pacer: live.gateway.pacer.as_deref(),
            adapters: &live.gateway.adapters,
        };
        let env = |name: &str| std::env::var(name).ok();
        let (loaded, forgotten) = match config::reload(path, &text, &env, running, self.listen) {
            Ok(reloaded) => reloaded,
            Err(error) => return self.rejected(hash, error),
        };
        let is_toml = config::is_toml(path);
        let changes = config::changes(&self.lock().text, &text, is_toml);
        // Against what runs, not the last file: a change reverted needs no restart.
        let pending = config::changes(&self.lock().started, &text, is_toml).restart;
        let pending = self.restart_changes(pending, &loaded, &live.gateway);
        let warnings: Vec<String> = loaded.unpriced_for_budgets().into_iter().collect();
        let gateway = keep_fixed(loaded.gateway, &live.gateway);
        if let Some(store) = &gateway.shared_state {
            store.set_config_hash(&hash);
        }
        state.swap(loaded.router, gateway);
        let mut status = self.lock();
        let previous = std::mem::replace(&mut status.hash, hash.clone());
        status.loaded_at = SystemTime::now();
        status.text = text;
        status.last_error = None;
        status.restart.clone_from(&pending);
        Outcome::Reloaded(Reloaded {
            hash,
            previous,
            changes: changes.changed,
            restart: pending,
            forgotten,
            warnings,
        })
    }

    fn rejected(&self, hash: String, error: ConfigError) -> Outcome {
        self.lock().last_error =
            Some(LastError { at: SystemTime::now(), hash: hash.clone(), error: error.clone() });
        Outcome::Rejected { hash, error }
    }
}

/// `next`'s settings, but for those fixed at start, which keep `running`'s values.
fn keep_fixed(mut next: GatewaySettings, running: &GatewaySettings) -> GatewaySettings {
    next.threads = running.threads;
    next.connections.header_timeout = running.connections.header_timeout;
    next.connections.idle_timeout = running.connections.idle_timeout;
    next.connections.send_timeout = running.connections.send_timeout;
    next.connections.max_connections = running.connections.max_connections;
    next.recent_requests = running.recent_requests;
    next.responses = running.responses;
    next.telemetry = running.telemetry.clone();
    next.shared_state = running.shared_state.clone();
    next
}

/// What `switchyard serve`'s command line fixed: a restart with the same command line keeps
/// it whatever the file says.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandLine {
    /// `--listen` was given.
    pub listen: bool,
    /// `--threads`.
    pub threads: Option<NonZeroUsize>,
}

/// `fleet` of `/admin/health`'s `config`: each replica's configuration hash (this one's as it
/// is now, the others' as their last heartbeat said), and whether they all agree.
fn fleet(store: &switchyard_state::RedisStore, mine: &str) -> Value {
    let me = &store.settings().replica;
    let mut replicas: Vec<(String, String)> = store
        .status()
        .replicas
        .into_iter()
        .map(|r| {
            let hash = if &r.id == me { mine.to_owned() } else { r.config_hash };
            (r.id, hash)
        })
        .collect();
    if !replicas.iter().any(|(id, _)| id == me) {
        replicas.push((me.clone(), mine.to_owned()));
    }
    let agrees = replicas.iter().all(|(_, hash)| hash == mine);
    let listed: Vec<Value> =
        replicas.iter().map(|(id, hash)| json!({ "replica": id, "hash": hash })).collect();
    json!({ "agrees": agrees, "replicas": listed })
}

/// What identifies a file's content on disk without reading it: its device and inode (a
/// Kubernetes ConfigMap swaps a symlink to a new file), size and modification time. Read
/// through symlinks.
pub type Fingerprint = (u64, u64, u64, Option<SystemTime>);

/// The fingerprint of the file at `path`, through symlinks; `None` when it cannot be read (a
/// swap in progress, a file being replaced).
pub fn fingerprint(path: &Path) -> Option<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.len(), meta.modified().ok()))
}

/// Waits for a file to change and settle: a change is reported once the file has read the same
/// for `quiet` (an editor writes in several steps, a ConfigMap update swaps a link and a
/// directory), so that one edit is one reload.
#[derive(Debug)]
pub struct Settle {
    quiet: Duration,
    seen: Option<Fingerprint>,
    changed_at: Option<tokio::time::Instant>,
}

impl Settle {
    /// Starting from the file as it is now (`seen`): a change is reported after `quiet`.
    pub fn new(seen: Option<Fingerprint>, quiet: Duration) -> Self {
        Self { quiet, seen, changed_at: None }
    }

    /// Takes the file's fingerprint at `now`; true once a change has settled (once per change).
    pub fn observe(&mut self, now_seen: Option<Fingerprint>, now: tokio::time::Instant) -> bool {
        if now_seen != self.seen {
            self.seen = now_seen;
            self.changed_at = Some(now);
            return false;
        }
        match self.changed_at {
            // A file that vanished and stayed away is reported too: its reload is refused,
            // saying the file cannot be read, and the running configuration stays.
            Some(at) if now.saturating_duration_since(at) >= self.quiet => {
                self.changed_at = None;
                true
            }
            _ => false,
        }
    }
}

/// How often a watched file is looked at.
pub const POLL: Duration = Duration::from_millis(250);
/// How long a changed file must stay the same before it is reloaded.
pub const QUIET: Duration = Duration::from_millis(500);

/// Watches `path` every [`POLL`] by its metadata (one `stat` through its symlinks: no
/// notification API, so a symlink swap, an edit in place, a file replaced by rename and a
/// network filesystem are seen alike) and calls `changed` once per settled change
/// ([`Settle`], [`QUIET`]). Runs until the task is dropped.
pub async fn watch(path: PathBuf, changed: impl FnMut()) {
    let now = fingerprint(&path);
    watch_with(|| fingerprint(&path), now, POLL, QUIET, changed).await;
}

/// [`watch`] over any fingerprint source from `from` (what was last loaded), every `every`,
/// settling for `quiet`.
pub async fn watch_with(
    mut look: impl FnMut() -> Option<Fingerprint>,
    from: Option<Fingerprint>,
    every: Duration,
    quiet: Duration,
    mut changed: impl FnMut(),
) {
    let mut settle = Settle::new(from, quiet);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now = ticks.tick().await;
        if settle.observe(look(), now) {
            changed();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn at(version: u64) -> Option<Fingerprint> {
        Some((1, version, 10, None))
    }

    /// Runs a watch over a file whose fingerprint is `version` (0: no file), counting reloads.
    fn watched(version: Arc<AtomicU64>) -> (tokio::task::JoinHandle<()>, Arc<AtomicU64>) {
        let reloads = Arc::new(AtomicU64::new(0));
        let counted = reloads.clone();
        let task = tokio::spawn(async move {
            let look = move || Some(version.load(Ordering::SeqCst)).filter(|v| *v > 0).and_then(at);
            let changed = move || {
                counted.fetch_add(1, Ordering::SeqCst);
            };
            watch_with(look, at(1), POLL, QUIET, changed).await;
        });
        (task, reloads)
    }

    /// Lets the watch run for `span` of paused time.
    async fn run_for(span: Duration) {
        tokio::time::sleep(span).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_writes_is_one_reload_once_the_file_is_quiet() {
        let version = Arc::new(AtomicU64::new(1));
        let (task, reloads) = watched(version.clone());
        run_for(Duration::from_secs(5)).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 0, "an unchanged file is never reloaded");

        for v in 2..6 {
            version.store(v, Ordering::SeqCst);
            run_for(POLL).await;
        }
        assert_eq!(reloads.load(Ordering::SeqCst), 0, "still being written");
        run_for(QUIET + POLL).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 1, "one reload for the burst");
        run_for(Duration::from_secs(5)).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 1, "and no other");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_reloaded_within_the_quiet_time_and_one_poll() {
        let version = Arc::new(AtomicU64::new(1));
        let (task, reloads) = watched(version.clone());
        run_for(POLL).await;
        version.store(2, Ordering::SeqCst);
        let changed = tokio::time::Instant::now();
        while reloads.load(Ordering::SeqCst) == 0 {
            run_for(Duration::from_millis(10)).await;
        }
        let took = changed.elapsed();
        assert!(took >= QUIET && took <= QUIET + 2 * POLL, "{took:?}");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_made_before_the_watch_began_is_reloaded() {
        let version = Arc::new(AtomicU64::new(2));
        let (task, reloads) = watched(version.clone());
        run_for(QUIET + 2 * POLL).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 1, "the file is not the one loaded");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_that_vanishes_is_reported_once_and_loaded_again_when_it_is_back() {
        let version = Arc::new(AtomicU64::new(1));
        let (task, reloads) = watched(version.clone());
        run_for(POLL).await;
        version.store(0, Ordering::SeqCst);
        run_for(Duration::from_secs(3)).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 1, "its reload says it is gone, once");
        version.store(7, Ordering::SeqCst);
        run_for(QUIET + 2 * POLL).await;
        assert_eq!(reloads.load(Ordering::SeqCst), 2, "the new file is loaded");
        task.abort();
    }
}
