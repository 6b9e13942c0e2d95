//! A real `redis-server` for tests: started on a free loopback port with nothing saved to
//! disk, stopped (by its process id) when dropped. Not for production use.
//!
//! Without the `redis-server` binary it panics naming the Debian package: a test that needs
//! Redis never skips silently.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// With TLS: the folder holding its certificate authority (`ca.crt`) and its own key pair.
    tls: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed or does not start.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts a server that speaks only TLS, with a certificate for 127.0.0.1 signed by a
    /// certificate authority made for it (see [`ca_file`](Self::ca_file)).
    ///
    /// # Panics
    ///
    /// When `openssl` or `redis-server` is not installed or does not start.
    pub fn start_tls() -> Self {
        let dir =
            std::env::temp_dir().join(format!("switchyard-redis-tls-{}-{}", std::process::id(), free_port()));
        make_certificates(&dir);
        Self::start_with(Some(dir))
    }

    fn start_with(tls: Option<PathBuf>) -> Self {
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn(port, tls.as_deref()) {
                return Self { child: Some(child), port, tls };
            }
        }
        panic!("redis-server did not start on a free port after 5 tries");
    }

    /// `redis://127.0.0.1:<port>/0`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// The certificate authority a client must trust to reach a TLS server (for instance
    /// through `SSL_CERT_FILE`); `None` without TLS.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls.as_ref().map(|dir| dir.join("ca.crt"))
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
            if let Some(child) = spawn(self.port, self.tls.as_deref()) {
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
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(ca) = self.ca_file() {
            command.arg("--tls").arg("--cacert").arg(ca);
        }
        let output = command
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
        self.kill();
        if let Some(dir) = &self.tls {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// Makes, in `dir`, a certificate authority (`ca.crt`) and a key pair for 127.0.0.1 signed by
/// it (`server.crt`, `server.key`), with `openssl`: for any test server that speaks TLS.
///
/// # Panics
/// When `openssl` is not installed or fails.
pub fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).expect("a folder for the certificates");
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs (Debian package `openssl`)");
        assert!(status.success(), "openssl {args:?}");
    };
    let rsa = ["-newkey", "rsa:2048", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &rsa,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=switchyard-test-ca"],
        ]
        .concat(),
    );
    openssl(
        &[&["req"][..], &rsa, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]]
            .concat(),
    );
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
        .expect("write");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
}

/// Starts `redis-server` on `port` (TLS only, with the certificates in `tls`) and waits until
/// it accepts connections; `None` if it exited (the port was taken).
fn spawn(port: u16, tls: Option<&Path>) -> Option<Child> {
    let mut command = Command::new("redis-server");
    match tls {
        None => command.args(["--port", &port.to_string()]),
        Some(dir) => command
            .args(["--port", "0", "--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(dir.join("server.crt"))
            .arg("--tls-key-file")
            .arg(dir.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(dir.join("ca.crt")),
    };
    let mut child = match command
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
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
            // Another test's server may have taken the port between its probe and this start:
            // only this process's own server will do.
            if serves(port, tls, child.id()) {
                return Some(child);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Whether the server answering on `port` is the process `pid`.
fn serves(port: u16, tls: Option<&Path>, pid: u32) -> bool {
    let mut command = Command::new("redis-cli");
    command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
    if let Some(dir) = tls {
        command.arg("--tls").arg("--cacert").arg(dir.join("ca.crt"));
    }
    let Ok(output) = command.args(["INFO", "server"]).stdin(Stdio::null()).output() else { return false };
    let info = String::from_utf8_lossy(&output.stdout);
    info.lines().any(|line| line.trim().strip_prefix("process_id:") == Some(pid.to_string().as_str()))
}
