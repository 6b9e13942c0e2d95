//! Logs written off the request path. Formatted lines are appended to a shared buffer (an
//! uncontended lock, no system call); one thread writes the buffer to stderr every few
//! milliseconds. A request never waits on a write, and never wakes another thread to log.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How often the writer thread writes what has accumulated.
const INTERVAL: Duration = Duration::from_millis(20);
/// Past this much unwritten text, the logging thread writes it itself: a flood of lines slows
/// its producers down rather than growing without bound.
const BACKLOG: usize = 4 << 20;

/// A `MakeWriter` whose lines reach stderr in batches.
#[derive(Clone)]
pub struct BatchedStderr {
    pending: Arc<Mutex<Vec<u8>>>,
}

impl BatchedStderr {
    /// Starts the writer thread; it writes until the process ends. Call [`BatchedStderr::flush`]
    /// before exiting so the last lines are not lost.
    pub fn start() -> io::Result<Self> {
        let writer = Self { pending: Arc::new(Mutex::new(Vec::with_capacity(64 * 1024))) };
        let background = writer.clone();
        thread::Builder::new().name("switchyard-log".to_owned()).spawn(move || {
            loop {
                thread::sleep(INTERVAL);
                background.flush();
            }
        })?;
        Ok(writer)
    }

    /// Writes everything buffered so far.
    pub fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if !batch.is_empty() {
            let mut stderr = io::stderr().lock();
            let _ = stderr.write_all(&batch);
            let _ = stderr.flush();
        }
    }
}

/// One event's writer: collects the formatted event and appends it whole, so lines of
/// concurrent requests never interleave.
pub struct LineWriter {
    pending: Arc<Mutex<Vec<u8>>>,
    line: Vec<u8>,
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let overflow = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.extend_from_slice(&self.line);
            (pending.len() > BACKLOG).then(|| std::mem::take(&mut *pending))
        };
        if let Some(batch) = overflow {
            let _ = io::stderr().lock().write_all(&batch);
        }
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { pending: self.pending.clone(), line: Vec::with_capacity(256) }
    }
}
