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

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// Worker threads serving an [`axum::Router`]; see the module docs.
#[derive(Debug)]
pub struct Workers {
    done: Vec<oneshot::Receiver<io::Result<()>>>,
}

/// What a worker is handed: an accepted connection, not yet registered with any runtime.
type Handoff = (std::net::TcpStream, SocketAddr);

impl Workers {
    /// Starts `threads` worker threads serving `app` on `listener`, and returns once they run.
    ///
    /// Each worker runs `prepare` on its thread before it serves (the gateway makes its
    /// upstream pools there, so that no request waits for them). Must be called on a Tokio
    /// runtime, which runs the acceptor. When `stop` turns `true`, the acceptor stops and every
    /// worker shuts down gracefully: open connections finish what they are sending (streams
    /// included), then the worker exits.
    pub fn start(
        listener: TcpListener,
        threads: NonZeroUsize,
        app: axum::Router,
        prepare: Arc<dyn Fn() + Send + Sync>,
        stop: watch::Receiver<bool>,
    ) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let mut senders = Vec::with_capacity(threads.get());
        let mut done = Vec::with_capacity(threads.get());
        for index in 0..threads.get() {
            let (connections, inbox) = mpsc::unbounded_channel::<Handoff>();
            let (finished, finished_rx) = oneshot::channel();
            let app = app.clone();
            let prepare = prepare.clone();
            let stop = stop.clone();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            thread::Builder::new().name(format!("switchyard-worker-{index}")).spawn(move || {
                let listener = Inbox { inbox, local };
                let result = runtime.block_on(async move {
                    prepare();
                    axum::serve(listener, app).with_graceful_shutdown(stopped(stop)).await
                });
                let _ = finished.send(result);
            })?;
            senders.push(connections);
            done.push(finished_rx);
        }
        tokio::spawn(accept(listener, senders, stop));
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

/// Accepts connections and deals them out to the workers in turn, until `stop`.
async fn accept(
    listener: TcpListener,
    workers: Vec<mpsc::UnboundedSender<Handoff>>,
    stop: watch::Receiver<bool>,
) {
    let mut next = 0;
    let stop = stopped(stop);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Without TCP_NODELAY, a small SSE event written after the headers waits for
                // their acknowledgement (Nagle), adding latency to the first token of a stream.
                let _ = stream.set_nodelay(true);
                let Ok(stream) = stream.into_std() else { continue };
                if workers[next].send((stream, peer)).is_err() {
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

/// A worker's side of the hand-off: the connections the acceptor gives it.
struct Inbox {
    inbox: mpsc::UnboundedReceiver<Handoff>,
    local: SocketAddr,
}

impl axum::serve::Listener for Inbox {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Some((stream, peer)) = self.inbox.recv().await else {
                // The acceptor has stopped; graceful shutdown ends this worker.
                return std::future::pending().await;
            };
            // Registers the socket with this thread's runtime.
            match TcpStream::from_std(stream) {
                Ok(stream) => return (stream, peer),
                Err(error) => tracing::warn!(%error, "a handed-off connection could not be registered"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
