//! `switchyard serve`: the gateway, until a signal stops it.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use std::net::SocketAddr;

use anyhow::{Context, anyhow, bail};
use switchyard_gateway::config::{self, Exposure, Loaded};
use switchyard_gateway::logging::{AccessLog, BatchedStderr, LogFilter, LogFormat};
use switchyard_gateway::server::{AppState, app};
use switchyard_gateway::workers::Workers;
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
    let result = serve_logged(loaded, addr, options.threads, access, log.clone()).await;
    if let Some(log) = log {
        log.flush();
    }
    result
}

async fn serve_logged(
    loaded: Loaded,
    addr: SocketAddr,
    threads: Option<NonZeroUsize>,
    access: AccessLog,
    log: Option<BatchedStderr>,
) -> anyhow::Result<ExitCode> {
    let exposure = config::exposure(addr, &loaded);
    match &exposure {
        Exposure::Refused(missing) => bail!("{}", config::refusal(addr, &loaded, missing)),
        Exposure::OpenRelay => tracing::warn!(
            listen = %addr,
            "gateway.open is set: this gateway is an open relay; anyone who can reach {addr} spends the \
             providers' accounts and can use /admin"
        ),
        Exposure::Loopback | Exposure::Demo | Exposure::Guarded => {}
    }
    // A warning at start is read at start, not at the next batch.
    if let Some(log) = &log {
        log.flush();
    }
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // The banner is for a person; a closed stdout (`serve | head -1`) must not stop the gateway.
    let mut banner = format!("switchyard listening on http://{local}\n  config: {}\n", loaded.origin());
    for line in route_lines(&loaded.router) {
        banner.push_str(&line);
        banner.push('\n');
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), banner.as_bytes());
    if let Some(store) = &loaded.gateway.shared_state {
        let settings = store.settings();
        banner.push_str(&format!(
            "  shared state: {} (prefix {}, replica {})\n",
            switchyard_state::mask_url(&settings.url),
            settings.prefix,
            settings.replica
        ));
        store.publish_events_to(loaded.router.events().clone());
        store.start();
        // Hedge budgets counted fleet-wide: each replica's windows exchanged once a second.
        if !loaded.router.hedge_windows().is_empty() {
            switchyard_state::hedges::SharedHedges::new(store).start(loaded.router.clone());
        }
    }
    let grace = loaded.gateway.shutdown_grace;
    let limits = loaded.gateway.connections;
    let store = loaded.gateway.shared_state.clone();
    // Held until the store closes: its pacer's unspent slices go back then.
    let pacing = loaded.router.clone();
    let router = loaded.router.clone();
    let prepare = Arc::new(move || router.warm());
    let state = AppState::exposed(loaded.router, loaded.gateway, access, &exposure);
    let threads = threads.or_else(|| std::thread::available_parallelism().ok()).unwrap_or(NonZeroUsize::MIN);
    let stop = state.clone();
    let workers = Workers::start(listener, threads, app(state.clone()), limits, prepare, state.stop_signal())
        .context("cannot start the workers")?;
    let finished = workers.finished();
    tokio::pin!(finished);
    tokio::select! {
        result = &mut finished => result.context("the server failed")?,
        () = shutdown_signal() => {
            eprintln!("switchyard: shutting down; open streams have {grace:?} to finish");
            stop.stop();
            // Bound the drain: a stream that never ends must not hold the process forever.
            tokio::select! {
                result = finished => result.context("the server failed")?,
                () = tokio::time::sleep(grace) => {
                    if let Some(store) = &store {
                        store.close().await;
                    }
                    flush_traces(&stop).await;
                    if let Some(log) = log {
                        log.flush();
                    }
                    eprintln!("switchyard: grace period over, exiting");
                    std::process::exit(0);
                }
            }
        }
    }
    // Slices of the fleet's pacing buckets not spent go back; the membership is left.
    if let Some(store) = &store {
        store.close().await;
    }
    flush_traces(&stop).await;
    drop(pacing);
    Ok(ExitCode::SUCCESS)
}

/// Exports the traces still waiting, off the async threads (the exporter blocks).
async fn flush_traces(state: &AppState) {
    if let Some(telemetry) = state.telemetry.clone() {
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
