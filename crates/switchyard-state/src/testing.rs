//! A real `redis-server` for tests: started on a free loopback port with nothing saved to
//! disk, stopped (by its process id) when dropped. Not for production use.
//!
//! Without the `redis-server` binary it panics naming the Debian package: a test that needs
//! Redis never skips silently.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Starts a server on a free port.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed or does not start.
    pub fn start() -> Self {
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn(port) {
                return Self { child: Some(child), port };
            }
        }
        panic!("redis-server did not start on a free port after 5 tries");
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Freezes the server (`SIGSTOP`): it still accepts connections and never answers.
    pub fn stall(&self) {
        self.signal("-STOP");
    }

    /// Thaws a stalled server (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server; [`restart`](Self::restart) brings a fresh one up on the same port.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port (after [`kill`](Self::kill)).
    ///
    /// # Panics
    ///
    /// When the port cannot be bound again within five seconds.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(child) = spawn(self.port) {
                self.child = Some(child);
                return;
            }
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// Runs one command with `redis-cli` and returns its output.
    ///
    /// # Panics
    ///
    /// When `redis-cli` cannot run.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs (Debian package `redis-tools`, installed with `redis-server`)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill").arg(signal).arg(child.id().to_string()).status();
            assert!(status.is_ok_and(|s| s.success()), "kill {signal} redis-server");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A stalled server must be thawed to die promptly on some kernels; SIGKILL works either way.
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// Starts `redis-server` on `port` and waits until it accepts connections; `None` if it
/// exited (the port was taken).
fn spawn(port: u16) -> Option<Child> {
    let mut child = match Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--loglevel", "warning", "--protected-mode", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => panic!(
            "cannot run redis-server ({error}): install the Debian package `redis-server` \
             (`apt-get install -y redis-server`; scripts/test does this)"
        ),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(50)).is_ok() {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
