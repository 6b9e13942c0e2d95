//! `switchyard serve`: the gateway, until a signal stops it. `SIGHUP` reloads the
//! configuration, as a change of its file does (see `switchyard_gateway::reload`).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use std::net::SocketAddr;

use anyhow::{Context, anyhow, bail};
use switchyard_gateway::config::{self, Exposure, Loaded};
use switchyard_gateway::logging::{AccessLog, BatchedStderr, LogFilter, LogFormat};
use switchyard_gateway::reload::{CommandLine, ConfigLife, Trigger};
use switchyard_gateway::server::{AppState, app};
use switchyard_gateway::workers::Workers;
use switchyard_state::RedisStore;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use super::{load, route_lines};

/// Sets up logging to stderr, of the lines `filter` lets through; the returned writer must be
/// flushed before exiting.
fn init_logging(format: LogFormat, filter: &LogFilter) -> Option<BatchedStderr> {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let batched = BatchedStderr::start().ok();
    let writer = match &batched {
        Some(writer) => BoxMakeWriter::new(writer.clone()),
        // Without a writer thread, write directly: slower, but nothing is lost.
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let builder =
        tracing_subscriber::fmt().with_max_level(filter.max_level()).with_ansi(ansi).with_writer(writer);
    // Only `main` sets a subscriber, once.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).finish().with(filter.layer()).try_init(),
        LogFormat::Text => builder.finish().with(filter.layer()).try_init(),
    };
    batched
}

/// What `serve` is asked to do on the command line.
pub(crate) struct Options {
    /// `--config FILE`.
    pub(crate) config: Option<PathBuf>,
    /// `--demo`.
    pub(crate) demo: bool,
    /// `--listen ADDR`.
    pub(crate) listen: Option<String>,
    pub(crate) log_format: LogFormat,
    /// `--log-level LEVEL`.
    pub(crate) log_level: Option<String>,
    pub(crate) threads: Option<NonZeroUsize>,
    /// `--no-watch`: reload only on SIGHUP and `POST /admin/config/reload`.
    pub(crate) no_watch: bool,
}

pub(crate) async fn serve(options: Options) -> anyhow::Result<ExitCode> {
    let loaded = load(options.config.as_ref(), options.demo)?;
    let addr = match &options.listen {
        Some(text) => config::listen_address(text).map_err(|problem| anyhow!("--listen: {problem}"))?,
        None => loaded.listen,
    };
    if let Some(refusal) = config::unasked_demo(addr, &loaded) {
        bail!("{refusal}");
    }
    let rust_log = super::env("RUST_LOG");
    let filter =
        LogFilter::choose(options.log_level.as_deref(), rust_log.as_deref(), loaded.log.level.as_ref())
            .map_err(|problem| anyhow!("{problem}"))?;
    let log = init_logging(options.log_format, &filter);
    let access = AccessLog::filtered(loaded.log.access, &filter, options.log_format, log.clone());
    let human = matches!(options.log_format, LogFormat::Text);
    let serving = Serving {
        threads: options.threads,
        listen: options.listen.is_some(),
        watch: !options.no_watch,
        human,
    };
    let result = serve_logged(loaded, addr, serving, access, log.clone()).await;
    if let Some(log) = log {
        log.flush();
    }
    result
}

/// Serves on `addr` until a signal, once logging is set up: the exposure checked, the banner
/// printed, the fleet joined, the workers started and drained.
async fn serve_logged(
    loaded: Loaded,
    addr: SocketAddr,
    serving: Serving,
    access: AccessLog,
    log: Option<BatchedStderr>,
) -> anyhow::Result<ExitCode> {
    let exposure = check_exposure(addr, &loaded, log.as_ref())?;
    if let Some(store) = &loaded.gateway.shared_state {
        claim_name(store).await?;
    }
    // Before the banner: a SIGHUP from then on reloads, never kills, and a SIGTERM or SIGINT
    // drains (a signal before its handler is installed would end the process on the spot).
    let hangups = hangups()?;
    let stops = Stops::listen()?;
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    let command_line = CommandLine { listen: serving.listen, threads: serving.threads };
    let life = Arc::new(config_life(&loaded, addr).with_command_line(command_line));
    print_banner(local, &loaded);
    let limits = loaded.gateway.connections;
    let store = loaded.gateway.shared_state.clone();
    let threads = serving
        .threads
        .or(loaded.gateway.threads)
        .or_else(|| std::thread::available_parallelism().ok())
        .unwrap_or(NonZeroUsize::MIN);
    let router = loaded.router.clone();
    let state = AppState::exposed(loaded.router, loaded.gateway, access, &exposure);
    state.set_config(life.clone());
    if let Some(store) = &store {
        store.set_config_hash(&life.hash());
        join_fleet(store, &state);
    }
    // Each thread's provider state made before serving; a reload's new providers make theirs on
    // first use.
    let prepare = Arc::new(move || router.warm());
    let stop = state.clone();
    let workers = Workers::start(listener, threads, app(state.clone()), limits, prepare, state.stop_signal())
        .context("cannot start the workers")?;
    let reloads = Reloads { state: state.clone(), life, hangups, watch: serving.watch };
    let ending = Ending { stop: &stop, store: store.as_ref(), log, stops, human: serving.human };
    run_until_signal(workers, reloads, ending).await?;
    // Slices of the fleet's pacing buckets not spent go back; the membership is left.
    if let Some(store) = &store {
        store.close().await;
    }
    flush_traces(&stop).await;
    // Held until the store closed: the pacer's unspent slices went back then.
    drop(state);
    Ok(ExitCode::SUCCESS)
}

/// How `serve` runs, as its command line says.
struct Serving {
    /// `--threads`, before the file's `gateway.threads`.
    threads: Option<NonZeroUsize>,
    /// `--listen` was given: the file's `listen` is not used.
    listen: bool,
    /// Whether the configuration file is watched (not with `--no-watch`).
    watch: bool,
    /// Whether stderr is read by people (`--log-format text`).
    human: bool,
}

/// The configuration's life: reloads read its file again, when it came from one.
fn config_life(loaded: &Loaded, addr: SocketAddr) -> ConfigLife {
    let text = match &loaded.source {
        config::Source::File(path) => config::read_text(std::path::Path::new(path))
            .ok()
            // Changed since it was loaded: the next reload lists every section as changed.
            .filter(|text| config::file_hash(std::path::Path::new(path), text) == loaded.hash),
        _ => None,
    };
    ConfigLife::new(loaded, text, addr)
}

/// The `SIGHUP`s this process receives, from now on (its default, ending the process, is off).
fn hangups() -> anyhow::Result<Option<tokio::signal::unix::Signal>> {
    #[cfg(unix)]
    {
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot listen for SIGHUP")?;
        Ok(Some(signal))
    }
    #[cfg(not(unix))]
    Ok(None)
}

/// Refuses an exposure the configuration does not guard, warns of an open relay, and flushes
/// the log so a warning at start is read at start.
fn check_exposure(
    addr: SocketAddr,
    loaded: &Loaded,
    log: Option<&BatchedStderr>,
) -> anyhow::Result<Exposure> {
    let exposure = config::exposure(addr, loaded);
    match &exposure {
        Exposure::Refused(missing) => bail!("{}", config::refusal(addr, loaded, missing)),
        Exposure::OpenRelay => tracing::warn!(
            listen = %addr,
            "gateway.open is set: this gateway is an open relay; anyone who can reach {addr} spends the \
             providers' accounts and can use /admin"
        ),
        Exposure::Loopback | Exposure::Demo | Exposure::Guarded => {}
    }
    if let Some(unpriced) = loaded.unpriced_for_budgets() {
        tracing::warn!("{unpriced}");
    }
    // A warning at start is read at start, not at the next batch.
    if let Some(log) = log {
        log.flush();
    }
    Ok(exposure)
}

/// Prints where the gateway listens, its config and its routes on stdout.
fn print_banner(local: SocketAddr, loaded: &Loaded) {
    // The banner is for a person; a closed stdout (`serve | head -1`) must not stop the gateway.
    let mut banner = format!("switchyard listening on http://{local}\n  config: {}\n", loaded.origin());
    if let Some(telemetry) = &loaded.gateway.telemetry {
        banner.push_str(&format!("  {}\n", telemetry.describe()));
    }
    let keys = loaded.gateway.keys.len();
    if keys > 0 {
        let them = if keys == 1 { "a client key: send it" } else { "client keys: send one" };
        banner.push_str(&format!("  {them} as `Authorization: Bearer <key>`\n"));
    }
    for line in route_lines(&loaded.router) {
        banner.push_str(&line);
        banner.push('\n');
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), banner.as_bytes());
    // And a record for the log (one JSON object with `--log-format json`).
    tracing::info!(target: "switchyard::serve", address = %local, config = %loaded.origin(), "listening");
}

/// Starts the fleet's shared state: its events published to the router's, and hedge budgets
/// exchanged (those of the routes in force, which a reload may change).
fn join_fleet(store: &Arc<RedisStore>, state: &Arc<AppState>) {
    store.publish_events_to(state.live().router.events().clone());
    state.share_trails(store);
    let viewed = Arc::downgrade(state);
    store.describe_targets_with(move || {
        viewed.upgrade().map_or_else(Vec::new, |state| state.unwell_targets())
    });
    let counted = Arc::downgrade(state);
    store.count_in_flight_with(move || counted.upgrade().map_or(0, |state| state.in_flight()));
    store.start();
    // What Redis missed while it was away (kept responses, Claude's kept thinking, answers,
    // pins), sent again every few seconds.
    let resends = Arc::downgrade(store);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(store) = resends.upgrade() else { return };
            store.resend_missed().await;
        }
    });
    // Once Redis is found to have lost everything (restarted empty), each key's spend, read
    // and so written again at once: a budget else counted only what was spent after, until
    // the key's next request here.
    let mut losses = store.losses();
    let keys = Arc::downgrade(state);
    tokio::spawn(async move {
        while losses.changed().await.is_ok() {
            // Again a moment later: the spend's connection may still be coming back when the
            // records' is (a read that fails writes nothing).
            for wait in [0, 1, 2] {
                tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
                let Some(state) = keys.upgrade() else { return };
                state.read_spends().await;
            }
        }
    });
    // Hedge budgets counted fleet-wide: each replica's windows exchanged once a second.
    let state = Arc::downgrade(state);
    switchyard_state::hedges::SharedHedges::new(store)
        .start_with(move || state.upgrade().map(|state| state.live().router.clone()));
}

/// Claims the replica's name in the fleet: a live replica of the same name stops this one
/// here, before it listens; a Redis that does not answer leaves the name unchecked.
async fn claim_name(store: &RedisStore) -> anyhow::Result<()> {
    match store.claim().await {
        Ok(true) => Ok(()),
        Ok(false) => {
            tracing::warn!(
                replica = store.replica(),
                "Redis did not answer: the replica's name is not checked against the fleet"
            );
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// What a shutdown needs once the grace period is over.
struct Ending<'a> {
    /// The gateway's state: told to stop, and its traces flushed.
    stop: &'a AppState,
    /// The fleet's store, closed before exiting.
    store: Option<&'a Arc<RedisStore>>,
    /// The log, flushed before exiting.
    log: Option<BatchedStderr>,
    /// The signals that begin it.
    stops: Stops,
    /// Whether stderr is read by people (`--log-format text`): it is told of the shutdown in
    /// words beside the log's records; in JSON, the records alone.
    human: bool,
}

/// What reloads the configuration while the gateway serves: `SIGHUP`, and the file's watch.
struct Reloads {
    state: Arc<AppState>,
    life: Arc<ConfigLife>,
    hangups: Option<tokio::signal::unix::Signal>,
    /// Whether the file is watched.
    watch: bool,
}

impl Reloads {
    /// Reloads on each `SIGHUP` and each settled change of the file, one at a time, until
    /// dropped.
    async fn run(self) {
        let Reloads { state, life, hangups, watch } = self;
        let watch = {
            let (state, life) = (state.clone(), life.clone());
            async move {
                if watch {
                    // Reloads are one at a time (ConfigLife's lock): the watch need not wait.
                    life.watch(|| in_background(&state, &life, Trigger::FileChanged)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            }
        };
        let signals = async move {
            let Some(mut hangups) = hangups else { return std::future::pending().await };
            while hangups.recv().await.is_some() {
                reload_now(&state, &life, Trigger::Signal).await;
            }
        };
        tokio::join!(watch, signals);
    }
}

/// One reload, off the async threads, not waited for.
fn in_background(state: &Arc<AppState>, life: &Arc<ConfigLife>, trigger: Trigger) {
    let (state, life) = (state.clone(), life.clone());
    tokio::task::spawn_blocking(move || life.reload(&state, trigger));
}

/// One reload, off the async threads (it reads and builds).
async fn reload_now(state: &Arc<AppState>, life: &Arc<ConfigLife>, trigger: Trigger) {
    let (state, life) = (state.clone(), life.clone());
    let _ = tokio::task::spawn_blocking(move || life.reload(&state, trigger)).await;
}

/// How long the streams cut at the end of the grace period have to write their error events
/// and records before the process exits.
const CUT_WRITTEN: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits for the workers to finish or a signal, reloading meanwhile; after a signal, drains
/// for the grace period (a second signal ends it at once) and then exits the process.
async fn run_until_signal(workers: Workers, reloads: Reloads, ending: Ending<'_>) -> anyhow::Result<()> {
    let Ending { stop, store, log, mut stops, human } = ending;
    let finished = workers.finished();
    tokio::pin!(finished);
    tokio::select! {
        result = &mut finished => result.context("the server failed")?,
        () = reloads.run() => {}
        () = stops.wait() => {
            // The grace period of the configuration in force.
            let grace = stop.live().gateway.shutdown_grace;
            if human {
                eprintln!("switchyard: shutting down; open streams have {grace:?} to finish (a second signal ends them now)");
            }
            tracing::info!(target: "switchyard::serve", grace_s = grace.as_secs_f64(), "shutting down");
            stop.stop();
            // Bound the drain: a stream that never ends must not hold the process forever.
            let why = tokio::select! {
                result = &mut finished => return result.context("the server failed"),
                () = tokio::time::sleep(grace) => "grace period over",
                () = stops.wait() => "a second signal",
            };
            // The streams still open end with an error event and their records; they are
            // given a moment to write them.
            stop.cut_streams();
            let _ = tokio::time::timeout(CUT_WRITTEN, &mut finished).await;
            if let Some(store) = store {
                store.close().await;
            }
            flush_traces(stop).await;
            tracing::info!(target: "switchyard::serve", "{why}, exiting");
            if let Some(log) = log {
                log.flush();
            }
            if human {
                eprintln!("switchyard: {why}, exiting");
            }
            std::process::exit(0);
        }
    }
    Ok(())
}

/// Exports the traces still waiting, off the async threads (the exporter blocks).
async fn flush_traces(state: &AppState) {
    if let Some(telemetry) = state.telemetry.clone() {
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
}

/// `SIGTERM` and `SIGINT` (Ctrl-C), listened for from start: either begins the shutdown.
struct Stops {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Stops {
    fn listen() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
            let interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
            Ok(Self { terminate, interrupt })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Until one of them arrives.
    async fn wait(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {},
            _ = self.interrupt.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
