//! The command line, run as a user would: the real binary.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;

use support::{empty_folder, run, run_in, serve, serve_at, serve_in, stop, write_config};

#[test]
fn config_check_accepts_a_valid_file_and_refuses_a_bad_one_with_a_non_zero_exit() {
    let good = write_config(
        "good.yaml",
        "providers: { p: { kind: simulated } }\nroutes: { default: { targets: [p:m] } }\n",
    );
    let (code, out, _) = run(&["config", "check", good.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("ok (1 provider, routes: default)"), "{out}");

    let bad = write_config(
        "bad.yaml",
        "providers: { p: { kind: simulated } }\nroutes: { default: { targets: [q:m] } }\n",
    );
    let (code, _, err) = run(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.yaml: routes.default.targets[0]: unknown provider `q`"), "{err}");
}

#[test]
fn every_whole_configuration_the_readme_shows_passes_config_check() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let whole: Vec<&str> = readme
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .filter(|block| {
            block.lines().any(|l| l.starts_with("providers:"))
                && block.lines().any(|l| l.starts_with("routes:"))
        })
        .collect();
    assert!(whole.len() >= 3, "the README's example configurations were not found: {}", whole.len());
    for (n, block) in whole.iter().enumerate() {
        let file = write_config(&format!("readme-{n}.yaml"), block);
        let (code, out, err) = run(&["config", "check", file.to_str().unwrap()]);
        assert_eq!(code, 0, "the README's configuration\n{block}\nis refused: {out}{err}");
    }
}

/// A paid provider whose key comes from a variable no test sets.
const UNSET_SECRET: &str = "providers:\n  openai: { kind: openai, api_key: env://SWITCHYARD_TEST_UNSET_SECRET }\nroutes:\n  default: { targets: [openai:gpt-4o-mini] }\n";

#[test]
fn config_check_warns_of_an_unset_secret_and_exits_zero() {
    let config = write_config("unset-secret.yaml", UNSET_SECRET);
    let (code, out, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (1 provider, routes: default)"), "{out}");
    assert!(
        err.contains("warning: ") && err.contains("unset-secret.yaml: providers.openai.api_key: environment variable `SWITCHYARD_TEST_UNSET_SECRET` is not set"),
        "the warning names the key path and the variable: {err}"
    );
}

#[test]
fn config_check_strict_refuses_an_unset_secret() {
    let config = write_config("unset-secret-strict.yaml", UNSET_SECRET);
    let (code, _, err) = run(&["config", "check", "--strict", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "providers.openai.api_key: environment variable `SWITCHYARD_TEST_UNSET_SECRET` is not set"
        ),
        "{err}"
    );
    assert!(!err.contains("warning"), "an error, not a warning: {err}");
}

#[test]
fn serve_and_doctor_refuse_a_config_with_an_unset_secret() {
    let config = write_config("unset-secret-serve.yaml", UNSET_SECRET);
    let (code, stderr) = serve_at(&config, "127.0.0.1:0", &[]).expect_err("it must not start");
    assert_eq!(code, 1);
    assert!(stderr.contains("environment variable `SWITCHYARD_TEST_UNSET_SECRET` is not set"), "{stderr}");
    let (code, _, err) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("SWITCHYARD_TEST_UNSET_SECRET"), "{err}");
    // A variable exported empty is said to be empty, not missing: the fix is elsewhere.
    let dir = empty_folder("empty-secret");
    let (code, _, err) = run_in(
        &dir,
        &[("SWITCHYARD_TEST_UNSET_SECRET", " ")],
        &["doctor", "--config", config.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    assert!(err.contains("environment variable `SWITCHYARD_TEST_UNSET_SECRET` is set but empty"), "{err}");
}

#[test]
fn doctor_prints_routes_limits_and_masked_credentials() {
    let config = write_config(
        "doctor.yaml",
        r#"
providers:
  p: { kind: simulated, api_key: sk-doctor-SECRET-12345678, limits: { max_concurrent: 4, requests_per_minute: 120 } }
routes:
  default: { targets: [p:m], candidates: [{ name: apology, text: sorry }] }
  claude-*: { targets: ["p:{model}"], drop_params: true }
"#,
    );
    let (code, out, _) = run(&["doctor", "--config", config.to_str().unwrap(), "--ping"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not pinged: the model a client asks for fills it in"), "{out}");
    assert!(
        out.contains("route claude-*: p:{model}; drop_params"),
        "a route that drops parameters says so: {out}"
    );
    assert!(out.contains("1 of 1 target answered"), "a stand-in is not counted as answering: {out}");
    assert!(out.contains("route default: p:m; candidate: apology (default)"), "{out}");
    assert!(out.contains("limits: max_concurrent 4, requests_per_minute 120"), "{out}");
    assert!(out.contains("key ****5678 from literal"), "{out}");
    assert!(!out.contains("SECRET"), "{out}");
    assert!(out.lines().any(|l| l.contains("p:m") && l.trim_end().ends_with("ok")), "{out}");
    assert!(out.contains("pacing (as the providers' headers state it):"), "{out}");
    assert!(out.contains("  p: no rate-limit headers seen; 0 in flight"), "{out}");
    assert!(out.contains("telemetry: off (no traces exported)"), "{out}");
}

#[test]
fn doctor_says_where_traces_go_and_never_the_collectors_secrets() {
    let config = write_config(
        "doctor-traces.yaml",
        r#"
providers: { p: { kind: simulated } }
routes: { default: { targets: [p:m] } }
telemetry: { endpoint: "http://tracer:pa55-SECRET@127.0.0.1:4318", sampler: traceidratio, sampler_arg: 0.25,
             headers: { authorization: "Bearer collector-SECRET-token" } }
"#,
    );
    let (code, out, err) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("telemetry: traces to http://127.0.0.1:4318/v1/traces (http/protobuf), sampler traceidratio:0.25, service switchyard"),
        "{out}"
    );
    assert!(!out.contains("SECRET") && !out.contains("tracer"), "{out}");
}

#[test]
fn doctor_shows_a_vertex_provider_s_project_region_and_masked_google_credentials() {
    let key = write_config(
        "vertex-sa.json",
        r#"{"type":"service_account","project_id":"p","private_key_id":"0123456789abcdef0123456789abcdef0123abcd",
            "private_key":"-----BEGIN PRIVATE KEY-----\nMIIE-SECRET-KEY-BODY\n-----END PRIVATE KEY-----\n",
            "client_email":"router@p.iam.gserviceaccount.com","token_uri":"http://127.0.0.1:9/token"}"#,
    );
    let config = write_config(
        "doctor-vertex.yaml",
        &format!(
            r#"
providers:
  vertex: {{ kind: vertex, project: my-project, region: global, credentials: "{}" }}
routes:
  default: {{ targets: [vertex:claude-sonnet-4-5@20250929] }}
"#,
            key.display()
        ),
    );
    let (code, out, err) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("vertex (vertex https://aiplatform.googleapis.com/v1)"), "{out}");
    assert!(out.contains("    project my-project, region global"), "{out}");
    let found = format!(
        "    google credentials: service account router@p.iam.gserviceaccount.com (key ****abcd), from the file {}",
        key.display()
    );
    assert!(out.contains(&found), "{out}");
    assert!(!out.contains("SECRET") && !out.contains("0123456789abcdef"), "{out}");
}

#[test]
fn chat_prints_the_answer_then_the_trail() {
    let config = write_config(
        "chat.yaml",
        r#"
providers:
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
  up: { kind: simulated, reply: "hello from up" }
routes:
  default: { targets: [down:m, up:m], retry: { max_attempts: 1 } }
"#,
    );
    let (code, out, _) = run(&["chat", "--config", config.to_str().unwrap(), "hi"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("hello from up\n"), "{out}");
    assert!(out.contains("served by up:m"), "{out}");
    assert!(out.contains("down:m") && out.contains("failed") && out.contains("unavailable"), "{out}");

    let (code, out, _) =
        run(&["chat", "--config", config.to_str().unwrap(), "--stream", "--target", "up:m", "hi"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("hello from up"), "{out}");
}

#[test]
fn health_prints_the_table_of_a_running_gateway() {
    let config = write_config(
        "health.yaml",
        r#"
providers:
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
  up: { kind: simulated }
routes:
  default: { targets: [down:m, up:m], retry: { max_attempts: 1 } }
"#,
    );
    let (mut server, addr) = serve(&config, &[]);
    let mut stream = TcpStream::connect(&addr).unwrap();
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let (code, out, err) = run(&["health", "--url", &format!("http://{addr}")]);
    server.kill().unwrap();
    let _ = server.wait();
    assert_eq!(code, 0, "{err}");
    let down = out.lines().find(|l| l.starts_with("down:m")).unwrap_or_default();
    assert!(down.contains("temporarily_unavailable") && down.contains("closed"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("up:m") && l.contains("available")), "{out}");
}

/// Reads one HTTP response head and returns the reader positioned at the body.
fn read_head(reader: &mut BufReader<TcpStream>) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            return head;
        }
        head.push_str(&line);
    }
}

/// Asks the gateway at `addr` for a stream of the `default` route and returns the reader
/// positioned after the 200 response head.
fn open_stream(addr: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).unwrap();
    let body = r#"{"model":"default","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let head = read_head(&mut reader);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    reader
}

#[test]
fn sigterm_lets_an_open_stream_finish_then_exits() {
    let config = write_config(
        "shutdown.yaml",
        r#"
providers:
  slow: { kind: simulated, reply: "one two three four five six", stream: { chunks: 6, gap: 150ms } }
routes:
  default: { targets: [slow:m] }
gateway: { shutdown_grace: 10s }
"#,
    );
    let (mut server, addr) = serve(&config, &["--log-format", "json"]);

    let mut reader = open_stream(&addr);

    // The stream is open: ask the gateway to stop.
    let status = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(status.success());

    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    let tail = &rest[rest.len().saturating_sub(400)..];
    assert!(rest.contains("\"finish_reason\":\"stop\""), "the open stream ran to its end: {tail:?}");
    assert!(rest.contains("data: [DONE]"), "and ended well: {tail:?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(exit) = server.try_wait().unwrap() {
            assert!(exit.success(), "{exit:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the gateway did not exit after its streams finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The stream's access log line was written before the exit, as one JSON object.
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    let line = logs
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["target"] == "switchyard::access")
        .unwrap_or_else(|| panic!("no access log line in {logs}"));
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["route"], "default", "{line}");
    assert_eq!(line["served_by"], "slow:m", "{line}");
    assert!(line["request_id"].as_str().is_some_and(|id| id.starts_with("req_")), "{line}");
    assert!(line["latency_ms"].as_f64().is_some_and(|ms| ms >= 750.0), "the whole stream: {line}");
    // The start and the stop are records of the log too, each one JSON object.
    let records: Vec<serde_json::Value> =
        logs.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let said =
        |message: &str| records.iter().any(|r| r["target"] == "switchyard::serve" && r["message"] == message);
    assert!(said("listening") && said("shutting down"), "{logs}");
    // Every line of stderr is one: a log collector reads them all.
    assert!(logs.lines().all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok()), "{logs}");
}

#[test]
fn a_gateway_logging_json_says_why_it_cannot_start_in_json() {
    let config = write_config(
        "json-refused.yaml",
        "providers:\n  p: { kind: simulated }\nroutes:\n  default: { targets: [q:m] }\n",
    );
    let (code, _, stderr) =
        support::run(&["serve", "--config", config.to_str().unwrap(), "--log-format", "json"]);
    assert_ne!(code, 0);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let record: serde_json::Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|_| panic!("not JSON: {stderr}"));
    assert_eq!(record["level"], "ERROR", "{record}");
    assert!(record["message"].as_str().unwrap().contains("routes.default"), "names the problem: {record}");
}

/// A gateway whose one route streams for about 20 s, with `grace` to drain, and a stream of
/// it read through its first chunk.
fn endless_stream(name: &str, grace: &str) -> (std::process::Child, BufReader<TcpStream>) {
    let config = write_config(
        name,
        &format!(
            r#"
providers:
  endless: {{ kind: simulated, reply: "a b c d e f g h i j k l m n o p q r s t", stream: {{ chunks: 100, gap: 200ms }} }}
routes:
  default: {{ targets: [endless:m] }}
gateway: {{ shutdown_grace: {grace} }}
"#
        ),
    );
    let (server, addr) = serve(&config, &[]);
    let mut reader = open_stream(&addr);
    next_data_line(&mut reader, "the stream ended before its first chunk");
    (server, reader)
}

/// Reads up to the next `data:` line, which must come.
fn next_data_line(reader: &mut BufReader<TcpStream>, or_else: &str) {
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "{or_else}");
    }
}

#[test]
fn sigterm_cuts_a_stream_that_outlasts_the_grace_period_and_exits() {
    let (mut server, mut reader) = endless_stream("grace.yaml", "1s");

    // The stream has about 20 s to go; the grace period is 1 s.
    let asked = Instant::now();
    let status = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(status.success());

    // Chunks keep coming during the grace period; then the process ends and the stream with it.
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let open_for = asked.elapsed();
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        open_for >= Duration::from_millis(900),
        "the stream was cut before the grace period: {open_for:?}"
    );
    assert!(rest.matches("data: {").count() >= 2, "no chunk arrived during the grace period: {rest}");
    assert!(!rest.contains("data: [DONE]"), "the stream was not cut: {rest}");
    // Cut, the client is told why, as for any stream that breaks: an error event, last.
    let last = rest.lines().rfind(|line| line.starts_with("data: ")).unwrap_or_default();
    assert!(last.starts_with("data: {\"error\"") && last.contains("shut down"), "{rest}");
    let deadline = asked + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = server.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "the gateway outlived its grace period");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "exited before the grace period: {:?}",
        asked.elapsed()
    );
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    assert!(logs.contains("open streams have 1s to finish"), "{logs}");
    assert!(logs.contains("grace period over, exiting"), "{logs}");
    // The cut stream has its record, as a stream that broke does.
    assert!(
        logs.contains(r#"route="default" served_by="endless:m" attempts=1 status=200 error=unavailable"#),
        "{logs}"
    );
}

#[test]
fn a_second_signal_ends_the_grace_period_at_once() {
    let (mut server, mut reader) = endless_stream("grace-twice.yaml", "60s");
    let kill = |signal: &str| {
        let status = Command::new("kill").args([signal, &server.id().to_string()]).status().unwrap();
        assert!(status.success());
    };
    kill("-TERM");
    // The drain has begun: a chunk still comes.
    next_data_line(&mut reader, "the stream ended at the first signal");
    let asked = Instant::now();
    kill("-INT");
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    let last = rest.lines().rfind(|line| line.starts_with("data: ")).unwrap_or_default();
    assert!(last.starts_with("data: {\"error\"") && last.contains("shut down"), "{rest}");
    let exit = server.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(asked.elapsed() < Duration::from_secs(30), "waited out the grace period: {:?}", asked.elapsed());
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    assert!(logs.contains("a second signal, exiting"), "{logs}");
}

#[test]
fn sigterm_answers_503_to_a_request_still_waiting_for_its_answer_when_the_grace_period_ends() {
    // A slow whole answer (or a stream's first byte) outlasting the grace period: told why,
    // and logged, rather than cut off without a word.
    let config = write_config(
        "grace-waiting.yaml",
        "providers:\n  slow: { kind: simulated, latency: 60s }\nroutes:\n  default: { targets: [slow:m] }\ngateway: { shutdown_grace: 1s, keys: [{ name: t, key: gw-grace-key-0001 }] }\n",
    );
    let (mut server, addr) = serve(&config, &[]);
    let mut stream = TcpStream::connect(&addr).unwrap();
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer gw-grace-key-0001\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(format!("{head}{body}").as_bytes()).unwrap();
    // And one whose body is still coming: the gateway reads it (it said `100 Continue`).
    let mut slow = TcpStream::connect(&addr).unwrap();
    write!(
        slow,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer gw-grace-key-0001\r\ncontent-type: application/json\r\ncontent-length: 100\r\nexpect: 100-continue\r\n\r\n"
    )
    .unwrap();
    let mut slow = BufReader::new(slow);
    assert!(read_head(&mut slow).starts_with("HTTP/1.1 100"));
    slow.get_mut().write_all(br#"{"model":"#).unwrap();
    // In flight (its key says so) before the signal.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get_text(&addr, "/admin/keys", "gw-grace-key-0001").contains("\"in_flight\":1") {
        assert!(Instant::now() < deadline, "the request never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(status.success());

    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("\"unavailable\"") && answer.contains("shutting down"), "{answer}");
    // Its body tells the attempt its log line counts, and why it was cut.
    assert!(answer.contains(r#""target":"slow:m""#), "{answer}");
    assert!(answer.contains("cut short: the gateway's shutdown grace period ended"), "{answer}");
    let head = read_head(&mut slow);
    assert!(head.starts_with("HTTP/1.1 503"), "the request whose body was coming: {head}");
    assert!(server.wait().unwrap().success());
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    assert!(logs.contains(r#"route="default" key="t" attempts=1 status=503"#), "{logs}");
}

/// A provider that costs money (nothing listens at its address: no test calls it).
const PAID: &str = "providers:\n  openai: { kind: openai, api_key: sk-live-SECRET-abcdef123456, base_url: \"http://127.0.0.1:9/v1\" }\nroutes:\n  default: { targets: [openai:gpt-4o-mini] }\n";

/// GET `path` on `addr` with a bearer key; returns the whole answer, head and body.
fn get_text(addr: &str, path: &str, key: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// GET `path` on `addr` with an optional bearer key; returns the status code.
fn get_status(addr: &str, path: &str, key: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    let auth = key.map(|k| format!("authorization: Bearer {k}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

#[test]
fn serve_beyond_loopback_without_keys_refuses_to_start_and_names_the_settings() {
    let config = write_config("exposed.yaml", PAID);
    let (code, stderr) = serve_at(&config, "0.0.0.0:0", &[]).expect_err("it must not start");
    assert_ne!(code, 0);
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0"), "{stderr}");
    assert!(stderr.contains("gateway.keys and gateway.admin_key"), "{stderr}");
    assert!(stderr.contains("gateway.open: true"), "the explicit opt-out is named: {stderr}");
    assert!(stderr.contains("openai"), "the account at stake is named: {stderr}");
    assert!(!stderr.contains("SECRET"), "no key in the message: {stderr}");

    // One of the two is not enough.
    let half = write_config("half.yaml", &format!("{PAID}gateway: {{ keys: [gw-key-123456789] }}\n"));
    let (_, stderr) = serve_at(&half, "0.0.0.0:0", &[]).expect_err("it must not start");
    assert!(stderr.contains("without gateway.admin_key:"), "{stderr}");
    assert!(!stderr.contains("gw-key-123456789"), "{stderr}");
}

#[test]
fn serve_beyond_loopback_with_keys_starts_and_guards_metrics_with_the_admin_key() {
    let config = write_config(
        "guarded.yaml",
        &format!("{PAID}gateway: {{ keys: [gw-key-123456789], admin_key: admin-key-987654321 }}\n"),
    );
    let (server, addr) = serve_at(&config, "0.0.0.0:0", &[]).unwrap();
    let anonymous = get_status(&addr, "/metrics", None);
    let client = get_status(&addr, "/metrics", Some("gw-key-123456789"));
    let admin = get_status(&addr, "/metrics", Some("admin-key-987654321"));
    let health = get_status(&addr, "/admin/health", None);
    stop(server);
    assert_eq!(anonymous, 401, "/metrics beyond loopback needs the admin key");
    assert_eq!(client, 401, "a client key is not the admin key");
    assert_eq!(admin, 200, "Prometheus sends the admin key as a bearer token");
    assert_eq!(health, 401);

    let open_metrics = write_config(
        "metrics-open.yaml",
        &format!(
            "{PAID}gateway: {{ keys: [gw-key-123456789], admin_key: admin-key-987654321, metrics_open: true }}\n"
        ),
    );
    let (server, addr) = serve_at(&open_metrics, "0.0.0.0:0", &[]).unwrap();
    let anonymous = get_status(&addr, "/metrics", None);
    stop(server);
    assert_eq!(anonymous, 200, "gateway.metrics_open: true opens /metrics");
}

#[test]
fn serve_beyond_loopback_with_gateway_open_starts_and_warns_that_it_is_an_open_relay() {
    let config = write_config("open.yaml", &format!("{PAID}gateway: {{ open: true }}\n"));
    let (server, addr) = serve_at(&config, "0.0.0.0:0", &[]).unwrap();
    let models = get_status(&addr, "/v1/models", None);
    let logs = stop(server);
    assert_eq!(models, 200, "an open relay serves without keys");
    assert!(logs.contains("open relay"), "{logs}");
    assert!(logs.contains("gateway.open"), "{logs}");
    assert!(!logs.contains("SECRET"), "{logs}");
}

#[test]
fn serve_on_loopback_without_keys_starts_as_before_with_metrics_open() {
    let config = write_config("loopback.yaml", PAID);
    let (server, addr) = serve(&config, &[]);
    let metrics = get_status(&addr, "/metrics", None);
    let health = get_status(&addr, "/admin/health", None);
    let logs = stop(server);
    assert_eq!(metrics, 200);
    assert_eq!(health, 200);
    assert!(!logs.contains("open relay"), "{logs}");
}

#[test]
fn doctor_warns_of_targets_a_budget_cannot_charge_for_want_of_a_price() {
    let yaml = "providers:\n  openai: { kind: openai, api_key: sk-live-SECRET-abcdef123456, base_url: \"http://127.0.0.1:9/v1\", prices: { gpt-4o: { input: 2.5, output: 10 } } }\nroutes:\n  default: { targets: [openai:gpt-4o, openai:gpt-4o-mini] }\n  gpt-*: { targets: [\"openai:{model}\"] }\ngateway:\n  keys: [{ name: team, key: gw-team-0123456789, budget: { usd: 5, per: day } }]\n";
    let config = write_config("doctor-unpriced.yaml", yaml);
    let (_, out, _) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert!(
        out.contains(
            "warning: the budgets of team are not charged for openai:gpt-4o-mini, openai:{model}: no price"
        ),
        "{out}"
    );
}

#[test]
fn doctor_reports_the_exposure_and_the_connection_settings() {
    let config = write_config(
        "doctor-exposed.yaml",
        &format!(
            "listen: 0.0.0.0:4680\n{PAID}gateway: {{ header_timeout: 10s, body_timeout: 500ms, send_timeout: 45s, max_connections: 500 }}\n"
        ),
    );
    let (code, out, _) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 1, "a gateway serve refuses to start is not well: {out}");
    assert!(
        out.contains(
            "connections: header_timeout 10s, body_timeout 500ms, idle_timeout 75s, send_timeout 45s, max_connections 500"
        ),
        "{out}"
    );
    assert!(
        out.contains("exposure: REFUSED: refusing to listen on 0.0.0.0:4680 without gateway.keys"),
        "{out}"
    );
    assert!(!out.contains("SECRET"), "{out}");

    // `config check` says so too: as a problem with --strict, else as a warning.
    let (code, _, err) = run(&["config", "check", "--strict", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("serve refuses to start: refusing to listen on 0.0.0.0:4680 without gateway.keys"),
        "{err}"
    );
    let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.starts_with("warning: ") && err.contains("serve refuses to start"), "{err}");

    let loopback = write_config("doctor-loopback.yaml", PAID);
    let (code, out, _) = run(&["doctor", "--config", loopback.to_str().unwrap()]);
    assert!(out.contains("exposure: 127.0.0.1:4680 is loopback"), "{out}");
    assert_eq!(code, 0, "{out}");
}

#[test]
fn serve_beyond_loopback_with_only_simulated_providers_needs_no_keys() {
    let config = write_config(
        "demo-exposed.yaml",
        "providers: { sim: { kind: simulated } }\nroutes: { default: { targets: [sim:m] } }\n",
    );
    let (server, addr) = serve_at(&config, "0.0.0.0:0", &[]).expect("nothing to spend: it starts");
    let models = get_status(&addr, "/v1/models", None);
    let metrics = get_status(&addr, "/metrics", None);
    let logs = stop(server);
    assert_eq!(models, 200);
    assert_eq!(metrics, 200, "no admin key is configured to ask for");
    assert!(!logs.contains("open relay"), "{logs}");
}

/// POSTs a chat of the `default` route to `addr` and returns the whole response.
fn post_chat(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_fresh_route_hedges_its_very_first_slow_request() {
    let config = write_config(
        "cold-hedge.yaml",
        r#"
providers:
  slow: { kind: simulated, latency: 5s, reply: slow }
  fast: { kind: simulated, latency: 20ms, reply: fast }
routes:
  default: { targets: [slow:m, fast:m], hedge: { after: 200ms } }
"#,
    );
    let (server, addr) = serve(&config, &[]);
    let started = Instant::now();
    let answer = post_chat(&addr);
    let took = started.elapsed();
    stop(server);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let head = answer.to_ascii_lowercase();
    assert!(head.contains("x-switchyard-target: fast:m"), "{answer}");
    assert!(head.contains("x-switchyard-hedged: 1"), "{answer}");
    assert!(took < Duration::from_secs(5), "the slow primary was waited out: {took:?}");
}

/// A simulated provider whose answers say where the configuration came from.
fn answering(reply: &str) -> String {
    format!(
        "providers: {{ here: {{ kind: simulated, reply: \"{reply}\" }} }}\nroutes: {{ default: {{ targets: [here:m] }} }}\n"
    )
}

#[test]
fn serve_and_doctor_find_switchyard_yaml_in_the_working_directory() {
    let dir = empty_folder("working-directory");
    std::fs::write(dir.join("switchyard.yaml"), answering("from the working directory")).unwrap();
    let (server, addr, config) = serve_in(&dir, &[], &["--listen", "127.0.0.1:0"]).unwrap();
    let answer = post_chat(&addr);
    stop(server);
    assert_eq!(config, "config: file ./switchyard.yaml (found in the working directory)");
    assert!(answer.contains("from the working directory"), "{answer}");

    let (code, out, err) = run_in(&dir, &[], &["doctor"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("config: file ./switchyard.yaml (found in the working directory)"), "{out}");

    // The other spelling of the extension is found too.
    let yml = empty_folder("working-directory-yml");
    std::fs::write(yml.join("switchyard.yml"), answering("from switchyard.yml")).unwrap();
    let (code, out, err) = run_in(&yml, &[], &["doctor"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("config: file ./switchyard.yml (found in the working directory)"), "{out}");
}

#[test]
fn switchyard_config_wins_over_the_working_directory_and_config_over_both() {
    let dir = empty_folder("variable");
    std::fs::write(dir.join("switchyard.yaml"), answering("from the working directory")).unwrap();
    let named = write_config("named.yaml", &answering("from SWITCHYARD_CONFIG"));
    let named = named.to_str().unwrap();
    let (server, addr, config) =
        serve_in(&dir, &[("SWITCHYARD_CONFIG", named)], &["--listen", "127.0.0.1:0"]).unwrap();
    let answer = post_chat(&addr);
    stop(server);
    assert_eq!(config, format!("config: file {named} (named by SWITCHYARD_CONFIG)"));
    assert!(answer.contains("from SWITCHYARD_CONFIG"), "{answer}");

    let flagged = write_config("flagged.yaml", &answering("from --config"));
    let flagged = flagged.to_str().unwrap();
    let (code, out, err) =
        run_in(&dir, &[("SWITCHYARD_CONFIG", named)], &["chat", "--config", flagged, "hi"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("from --config"), "{out}");
}

#[test]
fn a_missing_file_named_by_switchyard_config_is_an_error_not_a_fallback() {
    let dir = empty_folder("variable-missing");
    let (code, _, err) = run_in(&dir, &[("SWITCHYARD_CONFIG", "/nonexistent/switchyard.yaml")], &["doctor"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/switchyard.yaml: (file): cannot read it"), "{err}");
}

/// Whether a system-wide configuration would be found before the demo on this machine.
fn system_config_present() -> bool {
    let present = ["yaml", "yml", "toml"]
        .iter()
        .any(|ext| std::path::Path::new(&format!("/etc/switchyard/switchyard.{ext}")).exists());
    if present {
        eprintln!(
            "skipped: /etc/switchyard holds a switchyard.yaml, .yml or .toml on this machine, so no demo is chosen"
        );
    }
    present
}

#[test]
fn serve_beyond_loopback_with_no_config_found_refuses_the_demo() {
    if system_config_present() {
        return;
    }
    let dir = empty_folder("nothing-found");
    let (code, stderr) =
        serve_in(&dir, &[], &["--listen", "0.0.0.0:0"]).expect_err("no demo beyond loopback");
    assert_ne!(code, 0);
    assert!(
        stderr.contains("refusing to serve the embedded demo's simulated answers on 0.0.0.0:0"),
        "{stderr}"
    );
    assert!(stderr.contains("--config FILE or SWITCHYARD_CONFIG=FILE"), "{stderr}");
    assert!(stderr.contains("--demo"), "{stderr}");

    // On loopback the demo still runs with nothing configured, and says why.
    let (server, addr, config) = serve_in(&dir, &[], &["--listen", "127.0.0.1:0"]).unwrap();
    let models = get_status(&addr, "/v1/models", None);
    stop(server);
    assert_eq!(models, 200);
    assert_eq!(
        config,
        "config: embedded demo (simulated providers, no provider keys needed; no config file given or found)"
    );
}

#[test]
fn serve_demo_serves_the_demo_beyond_loopback_when_asked() {
    let dir = empty_folder("demo-asked");
    std::fs::write(dir.join("switchyard.yaml"), answering("from the working directory")).unwrap();
    let (server, addr, config) = serve_in(&dir, &[], &["--demo", "--listen", "0.0.0.0:0"]).unwrap();
    let models = get_status(&addr, "/v1/models", None);
    stop(server);
    assert_eq!(models, 200);
    assert_eq!(
        config,
        "config: embedded demo (simulated providers, no provider keys needed; asked for with --demo)"
    );

    let (code, _, err) = run(&["serve", "--demo", "--config", "x.yaml"]);
    assert_eq!(code, 2, "--demo and --config do not go together: {err}");
}

#[test]
fn serve_listens_on_a_host_name() {
    let config = write_config("localhost.yaml", &answering("by name"));
    let (server, addr) = serve_at(&config, "localhost:0", &[]).unwrap();
    let answer = post_chat(&addr);
    stop(server);
    assert!(answer.contains("by name"), "{answer}");

    let (code, stderr) = serve_at(&config, "no-such-host.invalid:4680", &[]).expect_err("it must not start");
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--listen: `no-such-host.invalid` in `no-such-host.invalid:4680` does not resolve"),
        "{stderr}"
    );
}

/// Stops a gateway with SIGTERM, as an operator does, and returns its logs once it has exited:
/// every line it logged has been written (a kill could lose the last batch).
fn stop_gracefully(mut server: std::process::Child) -> String {
    let status = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = server.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let mut logs = String::new();
    server.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
    logs
}

#[test]
fn log_access_false_turns_the_access_log_off() {
    let logged = write_config("access-on.yaml", &answering("hello"));
    let (server, addr) = serve(&logged, &[]);
    assert!(post_chat(&addr).starts_with("HTTP/1.1 200"));
    let logs = stop_gracefully(server);
    assert!(logs.contains("switchyard::access"), "by default a request is logged: {logs}");

    let quiet = write_config("access-off.yaml", &format!("{}log: {{ access: false }}\n", answering("hello")));
    let (server, addr) = serve(&quiet, &[]);
    assert!(post_chat(&addr).starts_with("HTTP/1.1 200"));
    let logs = stop_gracefully(server);
    assert!(!logs.contains("switchyard::access"), "{logs}");
}

#[test]
fn log_level_warn_drops_info_lines_and_keeps_warnings() {
    let config =
        write_config("log-level.yaml", &format!("{PAID}gateway: {{ open: true }}\nlog: {{ level: info }}\n"));
    let (server, addr) = serve_at(&config, "0.0.0.0:0", &["--log-level", "warn"]).unwrap();
    assert_eq!(get_status(&addr, "/v1/models", None), 200);
    let _ = post_chat(&addr);
    let logs = stop_gracefully(server);
    assert!(logs.contains("WARN") && logs.contains("open relay"), "warnings stay: {logs}");
    assert!(!logs.contains(" INFO "), "no info line: {logs}");

    // Without the flag the file's level rules, and the request's info line is written.
    let (server, addr) = serve_at(&config, "0.0.0.0:0", &[]).unwrap();
    let _ = post_chat(&addr);
    let logs = stop_gracefully(server);
    assert!(logs.contains(" INFO switchyard::access"), "{logs}");
}

#[test]
fn rust_log_comes_after_the_flag_and_before_the_file() {
    let config = write_config("rust-log.yaml", &format!("{}log: {{ level: info }}\n", answering("hello")));
    let quiet = support::serve_with_env(&[("RUST_LOG", "warn")], &config, "127.0.0.1:0", &[]).unwrap();
    let _ = post_chat(&quiet.1);
    let logs = stop_gracefully(quiet.0);
    assert!(!logs.contains("switchyard::access"), "RUST_LOG=warn wins over log.level: {logs}");

    let flagged =
        support::serve_with_env(&[("RUST_LOG", "warn")], &config, "127.0.0.1:0", &["--log-level", "info"])
            .unwrap();
    let _ = post_chat(&flagged.1);
    let logs = stop_gracefully(flagged.0);
    assert!(logs.contains("switchyard::access"), "--log-level wins over RUST_LOG: {logs}");

    let (code, stderr) = support::serve_with_env(&[("RUST_LOG", "loud")], &config, "127.0.0.1:0", &[])
        .expect_err("a bad RUST_LOG");
    assert_eq!(code, 1);
    assert!(stderr.contains("RUST_LOG: `loud` is not a level"), "{stderr}");
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8(output.stdout).unwrap().trim().to_owned());
    let commit = head.as_deref().unwrap_or("unknown");
    let prefix = format!("switchyard {} (commit {commit}, built ", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&prefix), "expected {prefix:?}…, got {out:?}");
    let date =
        out.trim_end().strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(')')).unwrap_or_default();
    let digits: Vec<&str> = date.split('-').collect();
    assert!(
        digits.len() == 3 && digits.iter().all(|part| part.chars().all(|c| c.is_ascii_digit())),
        "a YYYY-MM-DD date: {out:?}"
    );
}

/// Runs the binary to its end with no admin key in its environment; exit code, stdout, stderr.
fn run_keyless(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(support::BIN)
        .args(args)
        .env_remove("SWITCHYARD_ADMIN_KEY")
        .env_remove("SWITCHYARD_KEY")
        .output()
        .unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// Sends `request` (a whole HTTP/1.1 request with `connection: close`) to `addr`; the answer.
fn exchange(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn health_lists_every_target_and_key_as_unknown_before_any_request_and_after_a_reset() {
    let config = write_config(
        "first-hour.yaml",
        r#"
providers:
  keyed: { kind: openai_compatible, base_url: "http://127.0.0.1:9/v1", api_keys: [sk-first-key-000001, sk-second-key-000002] }
  sim: { kind: simulated }
routes:
  default: { targets: [sim:m, keyed:m] }
  cheap: { targets: [keyed:small, sim:m] }
"#,
    );
    let (server, addr) = serve(&config, &[]);
    // No scheme: the address as `serve` prints it.
    let (code, before, err) = run_keyless(&["health", "--url", &addr]);
    assert!(post_chat(&addr).starts_with("HTTP/1.1 200"));
    let reset =
        "POST /admin/health/reset HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    assert!(exchange(&addr, reset).starts_with("HTTP/1.1 200"));
    let (_, after, _) = run_keyless(&["health", "--url", &addr]);
    stop(server);
    assert_eq!(code, 0, "{err}");
    for out in [&before, &after] {
        for target in ["keyed:m", "keyed:small", "sim:m"] {
            let line = out.lines().find(|l| l.starts_with(target)).unwrap_or_default();
            assert!(line.contains(" unknown "), "{target}: {out}");
        }
        let keys: Vec<&str> = out.lines().filter(|l| l.contains(" keyed ") && l.contains("****")).collect();
        assert_eq!(keys.len(), 2, "both keys of keyed: {out}");
        assert!(keys.iter().all(|l| l.contains(" unknown ")), "{out}");
        assert!(!out.contains("sk-first") && !out.contains("sk-second"), "{out}");
    }
}

#[test]
fn health_and_events_refused_for_the_admin_key_say_how_to_pass_it() {
    let config = write_config(
        "admin-keyed.yaml",
        "providers: { sim: { kind: simulated } }\nroutes: { default: { targets: [sim:m] } }\ngateway: { admin_key: admin-key-987654321 }\n",
    );
    let (server, addr) = serve(&config, &[]);
    let health = run_keyless(&["health", "--url", &addr]);
    let events = run_keyless(&["events", "--url", &addr]);
    let wrong = run_keyless(&["keys", "--url", &addr, "--key", "not-the-admin-key"]);
    let (code, out, _) = run_keyless(&["health", "--url", &addr, "--key", "admin-key-987654321"]);
    stop(server);
    for (code, _, err) in [health, events] {
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("asks for its admin key (401)")
                && err.contains("--key")
                && err.contains("SWITCHYARD_ADMIN_KEY"),
            "{err}"
        );
    }
    let (wrong_code, _, err) = wrong;
    assert_eq!(wrong_code, 1, "{err}");
    assert!(
        err.contains("refused the admin key given (401)"),
        "a key was given, and it is not the one: {err}"
    );
    assert!(!err.contains("not-the-admin-key"), "{err}");
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("sim:m")), "{out}");
}

/// Reads `reader`'s lines on a thread of its own, into a channel.
fn lines_of(reader: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// Lines from `lines` until one satisfies `done`, each waited for at most `wait`; panics
/// naming what it saw when none does in time.
fn lines_until(
    lines: &std::sync::mpsc::Receiver<String>,
    wait: Duration,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(wait) {
            Ok(line) => {
                let stop = done(&line);
                seen.push(line);
                if stop {
                    return seen;
                }
            }
            Err(_) => panic!("the expected line did not come within {wait:?}; saw {seen:#?}"),
        }
    }
}

/// `switchyard events --url ADDR`, its stdout and stderr as line channels.
fn follow_events(
    addr: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(support::BIN)
        .args(["events", "--url", addr])
        .env_remove("SWITCHYARD_ADMIN_KEY")
        .env_remove("SWITCHYARD_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let err = lines_of(child.stderr.take().unwrap());
    (child, out, err)
}

/// Sends chats to `addr` until `events` prints a `request_finished` line (it may connect after
/// the first ones); the lines it printed.
fn until_a_request_is_seen(addr: &str, events: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        assert!(post_chat(addr).starts_with("HTTP/1.1 200"));
        while let Ok(line) = events.recv_timeout(Duration::from_millis(300)) {
            let finished = line.split_whitespace().nth(1) == Some("request_finished");
            seen.push(line);
            if finished {
                return seen;
            }
        }
    }
    panic!("no request_finished line in 20 s: {seen:#?}");
}

#[test]
fn events_prints_in_order_one_line_per_health_change_with_rounded_numbers() {
    let config = write_config(
        "events-order.yaml",
        r#"
providers:
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
  up: { kind: simulated }
routes:
  default: { targets: [down:m, up:m], retry: { max_attempts: 3, backoff_base: 1ms, backoff_max: 1ms }, health_gate: false }
health: { failure_threshold: 100 }
"#,
    );
    let (server, addr) = serve(&config, &[]);
    let (mut events, lines, _) = follow_events(&addr);
    // The first request seen may have begun before `events` connected; the next one is seen
    // whole.
    until_a_request_is_seen(&addr, &lines);
    assert!(post_chat(&addr).starts_with("HTTP/1.1 200"));
    let is_end = |line: &str| line.split_whitespace().nth(1) == Some("request_finished");
    let seen = lines_until(&lines, Duration::from_secs(20), is_end);
    events.kill().unwrap();
    events.wait().unwrap();
    stop(server);

    let names: Vec<&str> = seen.iter().filter_map(|l| l.split_whitespace().nth(1)).collect();
    let finished = names.iter().rposition(|n| *n == "request_finished").unwrap();
    let last = &seen[finished];
    assert!(last.contains("attempts=4") && last.contains("fallback=true"), "{last}");
    // Its events precede it: three failures of down:m, then up:m.
    let failures = names[..finished].iter().filter(|n| **n == "attempt_failed").count();
    assert_eq!(failures, 3, "its failures came before its end: {seen:#?}");
    let down_changes =
        seen.iter().filter(|l| l.contains(" health_changed ") && l.contains("target=down:m")).count();
    assert!(down_changes <= 1, "three failures of down:m: at most one health line for it: {seen:#?}");
    let times: Vec<&str> = seen.iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "stamped in order: {seen:#?}");
    let duration = last.split(" duration=").nth(1).unwrap_or_default();
    let (number, unit) = duration.split_once(' ').unwrap_or_default();
    assert!(unit.starts_with("ms") || unit.starts_with('s'), "a unit: {last}");
    assert!(number.split('.').nth(1).is_none_or(|decimals| decimals.len() == 1), "rounded: {last}");
}

#[test]
fn events_follows_a_gateway_restarted_on_the_same_port() {
    let config = write_config(
        "events-restart.yaml",
        "providers: { sim: { kind: simulated } }\nroutes: { default: { targets: [sim:m] } }\n",
    );
    let (server, addr) = serve(&config, &[]);
    let (mut events, lines, problems) = follow_events(&format!("http://{addr}"));
    until_a_request_is_seen(&addr, &lines);

    stop(server);
    let dropped = lines_until(&problems, Duration::from_secs(10), |l| l.contains("dropped"));
    let (server, again) = serve_at(&config, &addr, &[]).expect("the port is free again");
    assert_eq!(again, addr);
    lines_until(&problems, Duration::from_secs(15), |l| l.contains("is back"));
    let answer = post_chat(&addr);
    let id = answer
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("{answer}"));
    let seen = lines_until(&lines, Duration::from_secs(10), |l| l.contains(&id));
    let still_running = events.try_wait().unwrap().is_none();
    // Ctrl-C ends it, as a success.
    let interrupted = Command::new("kill").args(["-INT", &events.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let ended = loop {
        if let Some(status) = events.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            events.kill().unwrap();
            events.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop(server);
    assert!(interrupted.success());
    assert!(ended.is_some_and(|status| status.success()), "Ctrl-C ends it: {ended:?}");
    assert!(still_running, "the same process follows the new gateway");
    assert_eq!(dropped.len(), 1, "one line when the stream drops: {dropped:?}");
    assert!(seen.last().unwrap().contains(" request_finished "), "{seen:?}");
}

/// A loopback upstream speaking OpenAI's chat API that answers 500 to its first call and a
/// completion after; its address and a count of the calls it took.
fn fails_once_upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream);
            let head = read_head(&mut reader);
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length: ").map(|n| n.trim().to_owned())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let (status, json) = if n == 0 {
                (
                    "500 Internal Server Error",
                    r#"{"error":{"message":"boom","type":"server_error"}}"#.to_owned(),
                )
            } else {
                ("200 OK", r#"{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}]}"#.to_owned())
            };
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
                json.len()
            );
        }
    });
    (addr, calls)
}

#[test]
fn doctor_ping_makes_one_call_per_target_and_reports_what_that_call_did() {
    let (upstream, calls) = fails_once_upstream();
    let config = write_config(
        "ping-once.yaml",
        &format!(
            r#"
providers:
  flaky: {{ kind: openai_compatible, base_url: "http://{upstream}/v1", api_keys: [sk-first-key-000001, sk-second-key-000002] }}
routes:
  default: {{ targets: [flaky:m], retry: {{ max_attempts: 3, backoff_base: 1ms }} }}
"#
        ),
    );
    let (code, out, _) = run(&["doctor", "--config", config.to_str().unwrap(), "--ping"]);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "one call, no retry, no other key: {out}");
    assert_eq!(code, 1, "{out}");
    let line = out.lines().find(|l| l.trim_start().starts_with("flaky:m")).unwrap_or_default();
    assert!(line.contains("unavailable (HTTP 500): "), "{out}");
    assert!(out.contains("0 of 1 target answered"), "{out}");
}

#[test]
fn doctor_prints_the_health_settings_and_the_retry_budget() {
    let config = write_config(
        "doctor-health.yaml",
        r#"
providers: { p: { kind: simulated } }
routes:
  default: { targets: [p:m], health_ttl: 30s }
  loose: { targets: [p:m], health_gate: false }
health: { failure_threshold: 5, open_for: 1m, cooldown_on_rate_limit: 250ms }
retry_budget: { ratio: 0.5, min_retries: 3 }
"#,
    );
    let (code, out, err) = run(&["doctor", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("health: failure_threshold 5, open_for 1m, open_max 1m, half_open_probes 1, cooldown_on_rate_limit 250ms (at most 5m), cooldown_on_error off"),
        "{out}"
    );
    assert!(out.contains("  route default: health_gate on, health_ttl 30s"), "{out}");
    assert!(out.contains("  route loose: health_gate off"), "{out}");
    assert!(out.contains("  retry_budget: ratio 0.5, min_retries 3, window 10s"), "{out}");
    assert!(out.contains("gateway: 0 client keys,"), "{out}");
}

#[test]
fn chat_counts_attempts_in_words_and_rounds_durations() {
    let config = write_config(
        "chat-words.yaml",
        r#"
providers:
  down: { kind: simulated, error_rates: { unavailable: 1.0 } }
  up: { kind: simulated, reply: "hello from up" }
routes:
  default: { targets: [down:m, up:m], retry: { max_attempts: 1 } }
"#,
    );
    let (code, out, _) = run(&["chat", "--config", config.to_str().unwrap(), "hi"]);
    assert_eq!(code, 0, "{out}");
    let served = out.lines().find(|l| l.starts_with("served by")).unwrap_or_default();
    assert!(served.starts_with("served by up:m after 2 attempts (a fallback) in "), "{out}");
    let (code, out, _) = run(&["chat", "--config", config.to_str().unwrap(), "--target", "up:m", "hi"]);
    assert_eq!(code, 0);
    let served = out.lines().find(|l| l.starts_with("served by")).unwrap_or_default();
    assert!(served.starts_with("served by up:m after 1 attempt in "), "{out}");
    let took = served.rsplit(" in ").next().unwrap_or_default();
    let (number, unit) = took.split_once(' ').unwrap_or_default();
    assert!(["ms", "s", "min"].contains(&unit), "a unit: {served}");
    assert!(number.split('.').nth(1).is_none_or(|d| d.len() == 1), "rounded: {served}");
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly_not_with_a_panic() {
    // `switchyard doctor | head -1`: the pipe is closed before the command has said it all.
    let mut child = std::process::Command::new(support::BIN)
        .arg("doctor")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(141), "as a Unix tool the pipe closed on: {stderr}");
}

#[test]
fn threads_zero_is_refused_in_the_gateways_words() {
    let (code, _, stderr) = support::run(&["serve", "--threads", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("0 threads would serve nothing: give 1 or more"), "{stderr}");
}
