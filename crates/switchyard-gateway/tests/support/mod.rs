//! What the gateway's tests share: for those that run the real `switchyard` binary, config
//! files, one-shot commands, and gateways started on a free port and stopped by their process
//! id; for the others, a gateway of a configuration served in process.

#![allow(clippy::unwrap_used, dead_code)]

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

thread_local! {
    /// The gateways this test's thread started and has not stopped. They are killed when the
    /// thread ends (a failed assertion unwinds it too), so that a test that fails midway leaves
    /// no gateway running.
    static STARTED: Reaper = const { Reaper(RefCell::new(Vec::new())) };
}

/// Kills, when dropped, each listed process that is still a child of this test process (an id
/// the system gave to another process since is left alone).
struct Reaper(RefCell<Vec<u32>>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.0.borrow().iter().copied().filter(|pid| is_child(*pid)) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// Whether process `pid` exists and this process is its parent (`/proc/PID/stat`, the field
/// after the state that follows the parenthesised name).
fn is_child(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name.split_whitespace().nth(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(std::process::id())
}

/// Lists `pid` for the thread's [`Reaper`].
fn started(pid: u32) {
    STARTED.with(|reaper| reaper.0.borrow_mut().push(pid));
}

/// Takes `pid` off the thread's [`Reaper`]: the test stopped it.
fn stopped(pid: u32) {
    STARTED.with(|reaper| reaper.0.borrow_mut().retain(|listed| *listed != pid));
}

/// This test process's own folder, under the build's `target/tmp` (never the system's
/// temporary folder, where every run would leave one behind).
fn own_folder() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("switchyard-cli-{}", std::process::id()))
}

/// Writes a config file for this test process; returns its path.
pub fn write_config(name: &str, text: &str) -> PathBuf {
    let dir = own_folder();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the binary to its end; returns the exit code, stdout and stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts `switchyard serve` with `args` on a free loopback port; its stderr (the logs) is
/// piped. Returns the process and the address it listens on.
pub fn serve(config: &Path, args: &[&str]) -> (Child, String) {
    match serve_at(config, "127.0.0.1:0", args) {
        Ok(started) => started,
        Err((code, stderr)) => panic!("the gateway exited with {code}: {stderr}"),
    }
}

/// Starts `switchyard serve --listen LISTEN`: the process and the loopback address to reach
/// it at, or, when it refuses to start, its exit code and stderr.
pub fn serve_at(config: &Path, listen: &str, args: &[&str]) -> Result<(Child, String), (i32, String)> {
    serve_with_env(&[], config, listen, args)
}

/// [`serve_at`], with `env` added to the gateway's environment (such as an `LD_PRELOAD`: the
/// child stays the gateway itself, so stopping it by its id stops the gateway).
pub fn serve_with_env(
    env: &[(&str, &str)],
    config: &Path,
    listen: &str,
    args: &[&str],
) -> Result<(Child, String), (i32, String)> {
    let mut command = Command::new(BIN);
    command.env_remove("RUST_LOG").envs(env.iter().copied());
    command.args(["serve", "--config", config.to_str().unwrap(), "--listen", listen]).args(args);
    command.env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
    start(command).map(|(server, addr, _)| (server, addr))
}

/// The variables that would give the gateway a configuration: a file, or providers' keys.
const CONFIGURING: &[&str] = &[
    "SWITCHYARD_CONFIG",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GROQ_API_KEY",
    "MISTRAL_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "RUST_LOG",
];

/// Starts `switchyard serve` with `args` and no `--config`, in the working directory `dir`,
/// with none of the variables that configure it but `env`: how it finds its configuration.
/// The process, the loopback address to reach it at and the banner's `config:` line; or, when
/// it refuses to start, its exit code and stderr.
pub fn serve_in(
    dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> Result<(Child, String, String), (i32, String)> {
    let mut command = Command::new(BIN);
    for name in CONFIGURING {
        command.env_remove(name);
    }
    command.current_dir(dir).envs(env.iter().copied()).arg("serve").args(args);
    start(command)
}

/// Runs the binary to its end in the working directory `dir`, with none of the variables that
/// configure it but `env`; returns the exit code, stdout and stderr.
pub fn run_in(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(BIN);
    for name in CONFIGURING {
        command.env_remove(name);
    }
    let output = command.current_dir(dir).envs(env.iter().copied()).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts `switchyard serve --config CONFIG` on the `listen` its file says (no `--listen`):
/// the process and the loopback address to reach it at.
pub fn serve_on_the_files_listen(config: &Path, args: &[&str]) -> (Child, String) {
    let mut command = Command::new(BIN);
    command.env_remove("RUST_LOG").env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
    command.args(["serve", "--config", config.to_str().unwrap()]).args(args);
    match start(command) {
        Ok((server, addr, _)) => (server, addr),
        Err((code, stderr)) => panic!("the gateway exited with {code}: {stderr}"),
    }
}

/// Starts a gateway as `command` says, with its stdout and stderr piped: the process, the
/// loopback address to reach it at and the banner's `config:` line, or its exit code and stderr.
fn start(mut command: Command) -> Result<(Child, String, String), (i32, String)> {
    // Replicas of one host are told apart by name (the host name is the default), unless the
    // test names them itself.
    if !command.get_envs().any(|(name, _)| name == "SWITCHYARD_REPLICA") {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        command.env("SWITCHYARD_REPLICA", format!("test-{}-{n}", std::process::id()));
    }
    let mut server = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    started(server.id());
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    if first.is_empty() {
        let status = server.wait().unwrap();
        stopped(server.id());
        let mut stderr = String::new();
        server.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        return Err((status.code().unwrap_or(-1), stderr));
    }
    let mut config = String::new();
    stdout.read_line(&mut config).unwrap();
    let bound = first.trim().rsplit("http://").next().unwrap().to_owned();
    let port = bound.rsplit(':').next().unwrap();
    // Keep reading what the server prints: a closed pipe would fail its next println.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    Ok((server, format!("127.0.0.1:{port}"), config.trim().to_owned()))
}

/// A folder of this test process's own named `name`, empty.
pub fn empty_folder(name: &str) -> PathBuf {
    let dir = own_folder().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops a gateway by its process id and returns what it logged.
pub fn stop(mut server: Child) -> String {
    stopped(server.id());
    server.kill().unwrap();
    server.wait().unwrap();
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    logs
}

/// Stops a gateway whose logs are read elsewhere, by its process id.
pub fn stop_piped(mut server: Child) {
    stopped(server.id());
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Reads each gateway's logs as they come, on a thread of its own (a full pipe would stall
/// the gateway's log writer); each handle gives the whole log once the gateway stops.
pub fn read_logs(gateways: &mut [(Child, String)]) -> Vec<std::thread::JoinHandle<String>> {
    gateways
        .iter_mut()
        .map(|(child, _)| {
            let mut stderr = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut text = String::new();
                stderr.read_to_string(&mut text).unwrap();
                text
            })
        })
        .collect()
}

/// A gateway of `yaml`, served in process on this test's runtime from a free loopback port;
/// its address. It stops with the runtime. A `#[tokio::test]` runtime has one thread, so the
/// gateway has one connection pool per provider.
pub async fn in_process(yaml: &str) -> SocketAddr {
    use switchyard_gateway::{config, server};
    let file = config::parse(yaml, false, "test.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("test.yaml".into()), &|_: &str| None).unwrap();
    let state = server::AppState::new(loaded.router, loaded.gateway);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, server::app(state)).await.unwrap() });
    addr
}

/// [`in_process`], as the `http://` base URL to send to.
pub async fn in_process_url(yaml: &str) -> String {
    format!("http://{}", in_process(yaml).await)
}

/// Sends `signal` (`HUP`, `TERM`) to a process this test started, by its id.
pub fn signal(process: &Child, signal: &str) {
    let status =
        Command::new("kill").args([&format!("-{signal}"), &process.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -{signal} {}", process.id());
}

/// Waits until `check` gives a value, asking again every 20 ms for at most `within` of real
/// time (a real process is changing): the value, or a panic naming `what` and the last answer.
pub async fn until<T>(
    what: &str,
    within: std::time::Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if std::time::Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

/// Stops a gateway with SIGTERM, as an operator does, and returns its logs once it has exited:
/// every line it logged has been written (a kill could lose the last batch).
pub fn stop_flushed(mut server: Child) -> String {
    signal(&server, "TERM");
    stopped(server.id());
    let exit = server.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    logs
}

/// [`in_process`], with its access log written as text into the buffer returned.
pub async fn in_process_logged(yaml: &str) -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use switchyard_gateway::logging::{AccessLog, LogFormat};
    use switchyard_gateway::{config, server};
    let file = config::parse(yaml, false, "test.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("test.yaml".into()), &|_: &str| None).unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let access = AccessLog::to_buffer(LogFormat::Text, log.clone());
    let state = server::AppState::with_access_log(loaded.router, loaded.gateway, access);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, server::app(state)).await.unwrap() });
    (addr, log)
}

/// Claude's tool turn, thought in: whole, and streamed.
pub const CLAUDE_TOOL_TURN: &str = r#"{"id":"msg_3","type":"message","role":"assistant","model":"claude-opus-4-7","content":[{"type":"thinking","thinking":"Need the tool.","signature":"EqQBCgIYAhIM"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":12}}"#;
pub const CLAUDE_TOOL_TURN_SSE: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_3\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-4-7\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Need the tool.\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":12}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

/// Serves `router` on a free loopback port until the test's runtime ends: its address.
pub async fn serve_router(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}
