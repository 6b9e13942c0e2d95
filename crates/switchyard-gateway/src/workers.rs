//! Serving on one event loop per thread.
//!
//! A multi-threaded runtime pays for its flexibility on every request a proxy serves: the
//! client's connection, the upstream connection and the request itself are tasks that wake
//! each other, often on different threads (a futex and a cross-core hand-off per wake), and at
//! low load an idle worker must be woken for each event. A gateway's work splits by
//! connection, so Switchyard runs one single-threaded runtime per core instead, as nginx runs
//! one event loop per worker: every task of a client connection stays on the thread that
//! accepted it, and an event wakes the thread waiting for it directly.
//!
//! One acceptor hands new connections to the workers in turn; after that, a connection never
//! moves. The acceptor runs on the caller's runtime, so that the workers do nothing but serve.
//! It also keeps `max_connections`: each connection holds a place until it closes, and at the
//! bound the acceptor stops accepting, so one client cannot take every descriptor. Each
//! connection is then held to its header and idle timeouts by [`crate::connection`].

use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::config::ConnectionLimits;
use crate::connection;

/// Worker threads serving an [`axum::Router`]; see the module docs.
#[derive(Debug)]
pub struct Workers {
    done: Vec<oneshot::Receiver<io::Result<()>>>,
}

/// What a worker is handed: an accepted connection, not yet registered with any runtime, and
/// its place, given back when the connection closes.
type Handoff = (std::net::TcpStream, Place);

/// A connection's place: one of `max_connections`, or, at that bound, one of the few kept for
/// the health probes ([`PROBE_PLACES`]).
enum Place {
    Open(#[allow(dead_code)] OwnedSemaphorePermit),
    Probe(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// Places kept beyond `max_connections` for the health probes: at the bound, a connection is
/// still taken on one of these, answered once ([`connection::serve_at_bound`]) and closed, so
/// that a kubelet's liveness probe does not restart a gateway that is only busy.
const PROBE_PLACES: usize = 8;

/// How often a worker's event loop wakes with nothing to do. Tokio's timer wakes its event
/// loop (an eventfd write, then an `epoll_wait` that returns at once) whenever a timer is armed
/// earlier than the loop's next planned wake-up, even from the loop's own thread while it runs
/// tasks. A request arms several, all of them seconds long (a stream's keep-alive, its idle and
/// first-byte limits, the connection's header and idle timeouts): with a wake-up always planned
/// within this period, none of them costs the two system calls, at the price of one wake-up a
/// second for an idle worker. Each beat also closes the thread's idle upstream connections
/// that their servers closed or that have expired.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How often the acceptor repeats that it is at `max_connections` while it stays there.
const AT_BOUND_LOG_EVERY: Duration = Duration::from_secs(60);

impl Workers {
    /// Starts `threads` worker threads serving `app` on `listener`, and returns once they run.
    ///
    /// Each worker runs `prepare` on its thread before it serves (the gateway makes its
    /// upstream pools there, so that no request waits for them). Every connection is held to
    /// `limits` (see [`connection`]). Must be called on a Tokio runtime, which runs the
    /// acceptor. When `stop` turns `true`, the acceptor stops and every worker shuts down
    /// gracefully: open connections finish what they are sending (streams included), then the
    /// worker exits.
    pub fn start(
        listener: TcpListener,
        threads: NonZeroUsize,
        app: axum::Router,
        limits: ConnectionLimits,
        prepare: Arc<dyn Fn() + Send + Sync>,
        stop: watch::Receiver<bool>,
    ) -> io::Result<Self> {
        let mut senders = Vec::with_capacity(threads.get());
        let mut done = Vec::with_capacity(threads.get());
        for index in 0..threads.get() {
            let (connections, inbox) = mpsc::unbounded_channel::<Handoff>();
            let (finished, finished_rx) = oneshot::channel();
            let app = app.clone();
            let prepare = prepare.clone();
            let stop = stop.clone();
            // The runtime is made on its thread: made here, a thread that cannot start would drop
            // it inside this runtime, a panic that hides why.
            let worker = move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                let result = runtime.and_then(|runtime| {
                    runtime.block_on(async move {
                        prepare();
                        work(inbox, app, limits, stop).await;
                        Ok(())
                    })
                });
                let _ = finished.send(result);
            };
            thread::Builder::new().name(format!("switchyard-worker-{index}")).spawn(worker).map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!(
                        "cannot start worker thread {} of {threads} ({error}): lower `--threads` (`gateway.threads`) or raise the process's thread limit",
                        index + 1
                    ),
                )
            })?;
            senders.push(connections);
            done.push(finished_rx);
        }
        let bound =
            Bound { open: Arc::new(Semaphore::new(limits.max_connections)), max: limits.max_connections };
        tokio::spawn(accept(listener, senders, bound, stop));
        Ok(Self { done })
    }

    /// Resolves when every worker has exited, or as soon as one fails: a worker that died
    /// (a panic) no longer serves its share of the connections, and the process should end
    /// and be restarted rather than limp on.
    pub async fn finished(self) -> io::Result<()> {
        let mut running = self.done;
        while !running.is_empty() {
            let (result, _, rest) = futures_util::future::select_all(running).await;
            match result {
                Ok(Ok(())) => running = rest,
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(io::Error::other("a worker thread died (it panicked)")),
            }
        }
        Ok(())
    }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    // A dropped sender means nobody can ask for a stop any more: serve on.
    if stop.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The places of `max_connections`.
struct Bound {
    open: Arc<Semaphore>,
    max: usize,
}

/// Accepts connections and deals them out to the workers in turn, until `stop`. At
/// `max_connections` open, it takes new connections only on the probes' places, each answered
/// once (the health probes, or a 503), and says so once a minute while that lasts; with those
/// taken too, new connections wait in the kernel's backlog until one closes.
async fn accept(
    listener: TcpListener,
    workers: Vec<mpsc::UnboundedSender<Handoff>>,
    bound: Bound,
    stop: watch::Receiver<bool>,
) {
    let mut next = 0;
    let mut warned = None;
    let probes = Arc::new(Semaphore::new(PROBE_PLACES));
    let stop = stopped(stop);
    tokio::pin!(stop);
    loop {
        let place = match bound.open.clone().try_acquire_owned() {
            Ok(place) => Place::Open(place),
            Err(_) => {
                let place = at_bound(&bound.open, bound.max, &mut warned);
                tokio::select! {
                    biased;
                    () = &mut stop => return,
                    place = place => Place::Open(place),
                    Ok(probe) = probes.clone().acquire_owned() => Place::Probe(probe),
                }
            }
        };
        let accepted = tokio::select! {
            biased;
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        // A place may have freed while this connection was awaited on a probe's.
        let place = match place {
            Place::Probe(probe) => {
                bound.open.clone().try_acquire_owned().map_or(Place::Probe(probe), Place::Open)
            }
            open => open,
        };
        match accepted {
            Ok((stream, _peer)) => {
                // Without TCP_NODELAY, a small SSE event written after the headers waits for
                // their acknowledgement (Nagle), adding latency to the first token of a stream.
                let _ = stream.set_nodelay(true);
                let Ok(stream) = stream.into_std() else { continue };
                if workers[next].send((stream, place)).is_err() {
                    // Only a worker that died drops its inbox before a stop; `finished`
                    // reports it, and the process ends.
                    tracing::error!(worker = next, "a worker is gone; no longer accepting connections");
                    return;
                }
                next = (next + 1) % workers.len();
            }
            // Out of file descriptors and the like: back off instead of spinning on the error.
            Err(error) => {
                tracing::error!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Waits for a connection to close at `max_connections`, saying so when the last warning is a
/// minute old (or there was none): a gateway that hovers at its bound warns once a minute, not
/// once a connection.
async fn at_bound(
    bound: &Arc<Semaphore>,
    max_connections: usize,
    warned: &mut Option<tokio::time::Instant>,
) -> OwnedSemaphorePermit {
    loop {
        let due = warned.map_or(Duration::ZERO, |at| AT_BOUND_LOG_EVERY.saturating_sub(at.elapsed()));
        if due.is_zero() {
            tracing::warn!(
                max_connections,
                "at gateway.max_connections: new connections are answered 503 (the health probes as ever) until open ones close"
            );
            *warned = Some(tokio::time::Instant::now());
            continue;
        }
        if let Ok(Ok(place)) = tokio::time::timeout(due, bound.clone().acquire_owned()).await {
            return place;
        }
    }
}

/// A worker's loop: serves the connections the acceptor hands it, each in a task of its own,
/// until `stop`; then waits for its open connections to finish.
async fn work(
    mut inbox: mpsc::UnboundedReceiver<Handoff>,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
) {
    let mut open = JoinSet::new();
    let stopping = stopped(stop.clone());
    tokio::pin!(stopping);
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = &mut stopping => break,
            // Each beat also closes this thread's idle upstream connections that their servers
            // closed or that are past their timeout, rather than at this thread's next request.
            _ = heartbeat.tick() => switchyard_providers::http::tidy_idle(),
            Some(_) = open.join_next(), if !open.is_empty() => {}
            handoff = inbox.recv() => {
                // The acceptor has gone without a stop only if the process is ending.
                let Some((stream, place)) = handoff else { break };
                // Registers the socket with this thread's runtime.
                let stream = match TcpStream::from_std(stream) {
                    Ok(stream) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "a handed-off connection could not be registered");
                        continue;
                    }
                };
                let app = app.clone();
                let stop = stop.clone();
                open.spawn(async move {
                    match place {
                        Place::Open(_) => connection::serve(stream, app, limits, stop).await,
                        Place::Probe(_) => connection::serve_at_bound(stream, app, limits, stop).await,
                    }
                    drop(place);
                });
            }
        }
    }
    // Every connection saw the same stop and is shutting down gracefully.
    while open.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::at_bound;

    /// Log lines, kept for the test to read.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn warnings(lines: &Lines) -> usize {
        String::from_utf8_lossy(&lines.0.lock().unwrap()).matches("at gateway.max_connections").count()
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_bound_the_acceptor_says_so_once_a_minute_until_a_place_frees() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber =
            tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        let _log = tracing::subscriber::set_default(subscriber);

        let bound = Arc::new(Semaphore::new(0));
        let mut warned = None;
        // The place a connection takes, held while it is open.
        let place;
        {
            let waiting = at_bound(&bound, 2, &mut warned);
            tokio::pin!(waiting);
            assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
            assert_eq!(warnings(&lines), 1, "said at once");
            tokio::time::sleep(Duration::from_secs(59)).await;
            assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
            assert_eq!(warnings(&lines), 1, "not again within the minute");
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
            assert_eq!(warnings(&lines), 2, "again after a minute");
            for expected in [3, 4] {
                tokio::time::sleep(Duration::from_secs(60)).await;
                assert!(futures_util::FutureExt::now_or_never(waiting.as_mut()).is_none());
                assert_eq!(warnings(&lines), expected, "once a minute while it lasts");
            }

            bound.add_permits(1);
            place = futures_util::FutureExt::now_or_never(waiting.as_mut());
            assert!(place.is_some(), "a place freed: accepting again");
            assert_eq!(warnings(&lines), 4);
        }

        // Back at the bound at once (the next connection took the place): the last warning is
        // moments old, so nothing is said again. Once a minute, not once a connection.
        let again = at_bound(&bound, 2, &mut warned);
        tokio::pin!(again);
        assert!(futures_util::FutureExt::now_or_never(again.as_mut()).is_none());
        assert_eq!(warnings(&lines), 4);
        drop(place);
    }
}
