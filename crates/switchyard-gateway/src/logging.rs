//! Logs written off the request path. Formatted lines are appended to a shared buffer (an
//! uncontended lock, no system call); one thread writes the buffer to stderr every few
//! milliseconds. A request never waits on a write, and never wakes another thread to log.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime};

use switchyard::trail::Via;

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};
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
    batches: BatchedStderr,
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
        if !self.line.is_empty() {
            self.batches.append(&self.line);
        }
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { batches: self.clone(), line: Vec::with_capacity(256) }
    }
}

impl BatchedStderr {
    /// Appends one whole line (or several) to the next batch; past [`BACKLOG`], writes the
    /// batch itself.
    fn append(&self, lines: &[u8]) {
        let overflow = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.extend_from_slice(lines);
            (pending.len() > BACKLOG).then(|| std::mem::take(&mut *pending))
        };
        if let Some(batch) = overflow {
            let _ = io::stderr().lock().write_all(&batch);
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line.
    Json,
}

/// Which log lines are written: a default level and levels per target (a module path and what
/// is under it), written as `RUST_LOG` writes them for `tracing`'s `EnvFilter`: `warn`,
/// `info,switchyard::access=off`, `warn,switchyard=debug`. Span and field filters are not
/// supported, and a bare word must be a level (a typo such as `warning` is refused, where
/// `EnvFilter` would read it as a target and log nothing else).
#[derive(Debug, Clone, PartialEq)]
pub struct LogFilter {
    targets: Targets,
    max: LevelFilter,
}

impl LogFilter {
    /// Parses directives; the error names what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut targets = Targets::new();
        let mut max = LevelFilter::OFF;
        let fix = "use off, error, warn, info, debug or trace, or target=level pairs such as `warn,switchyard=debug`";
        for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let (target, level) = match directive.split_once('=') {
                Some((target, level)) => (Some(target.trim()), level.trim()),
                None => (None, directive),
            };
            let level: LevelFilter =
                level.parse().map_err(|_| format!("`{directive}` is not a level: {fix}"))?;
            match target {
                Some(target) if target.is_empty() || target.contains(['[', ']', '{', '}']) => {
                    return Err(format!(
                        "`{directive}` is not a target=level pair (span and field filters are not supported): {fix}"
                    ));
                }
                Some(target) => targets = targets.with_target(target, level),
                None => targets = targets.with_default(level),
            }
            max = max.max(level);
        }
        if max == LevelFilter::OFF && targets.default_level().is_none() && targets.iter().next().is_none() {
            return Err(format!("no level given: {fix}"));
        }
        Ok(Self { targets: aws_capped(targets), max })
    }

    /// `info`: what is written when nothing says otherwise.
    pub fn info() -> Self {
        Self { targets: Targets::new().with_default(LevelFilter::INFO), max: LevelFilter::INFO }
    }

    /// The filter of `--log-level` (`flag`), else of `RUST_LOG`, else of the file's `log.level`,
    /// else [`LogFilter::info`]. A bad flag or variable is an error naming it.
    pub fn choose(
        flag: Option<&str>,
        rust_log: Option<&str>,
        file: Option<&LogFilter>,
    ) -> Result<Self, String> {
        if let Some(flag) = flag {
            return Self::parse(flag).map_err(|problem| format!("--log-level: {problem}"));
        }
        if let Some(variable) = rust_log.filter(|text| !text.trim().is_empty()) {
            return Self::parse(variable).map_err(|problem| format!("RUST_LOG: {problem}"));
        }
        Ok(file.cloned().unwrap_or_else(Self::info))
    }

    /// Whether a line of `target` at `level` is written.
    pub fn enables(&self, target: &str, level: Level) -> bool {
        self.targets.would_enable(target, &level)
    }

    /// The most verbose level any directive lets through.
    pub fn max_level(&self) -> LevelFilter {
        self.max
    }

    /// The filter as a `tracing-subscriber` layer.
    pub fn layer(&self) -> Targets {
        self.targets.clone()
    }
}

/// `targets` with the AWS SDK's crates (`aws_config`, `aws_sigv4`, `aws_smithy_*`, ...) at
/// `info` at most, whatever the directives say: their debug and trace lines can carry what a
/// request was signed with (aws-sigv4 traces the canonical request, session token included)
/// and the answers of STS or the metadata service (credentials).
fn aws_capped(targets: Targets) -> Targets {
    const AWS: &str = "aws_";
    let cap = |level: LevelFilter| level.min(LevelFilter::INFO);
    let default = targets.default_level().unwrap_or(LevelFilter::OFF);
    let mut capped = targets.clone().with_target(AWS, cap(default));
    for (target, level) in targets.iter() {
        if target.starts_with(AWS) {
            capped = capped.with_target(target, cap(level));
        }
    }
    capped
}

/// The access log: one line per request, in the format of the other log lines.
///
/// It is written on every request, so it is formatted by hand into a reused buffer rather than
/// through `tracing`'s field visitors: that cut its cost from about a tenth of the gateway's
/// CPU per request to a few percent.
#[derive(Clone)]
pub struct AccessLog {
    format: LogFormat,
    sink: Sink,
}

#[derive(Clone)]
enum Sink {
    Off,
    Batched(BatchedStderr),
    Stderr,
    Memory(Arc<Mutex<Vec<u8>>>),
}

/// What the access log says of one request.
pub struct AccessEntry<'a> {
    /// The request's id.
    pub request_id: &'a str,
    /// The endpoint (`chat_completions`, `messages`).
    pub endpoint: &'a str,
    /// The route that governed it.
    pub route: &'a str,
    /// Who served it, when someone did.
    pub served_by: Option<&'a Via>,
    /// Attempts made.
    pub attempts: usize,
    /// The status the client received.
    pub status: u16,
    /// The kind of the error that ended the request, when it failed after its status was
    /// sent (a stream cut mid-way still logs the 200 the client received).
    pub error: Option<&'a str>,
    /// From arrival to the end.
    pub latency: Duration,
    /// What the gateway added beyond the upstream calls and pacing.
    pub overhead: Duration,
    /// The label of the client key it came with (its name, never the key).
    pub key: Option<&'a str>,
}

thread_local! {
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl AccessLog {
    /// No access log (tests, embedding).
    pub fn off() -> Self {
        Self { format: LogFormat::Text, sink: Sink::Off }
    }

    /// Lines in `format`, batched through `writer`, or written straight to stderr without one.
    pub fn new(format: LogFormat, writer: Option<BatchedStderr>) -> Self {
        Self { format, sink: writer.map_or(Sink::Stderr, Sink::Batched) }
    }

    /// [`AccessLog::new`] when the access log is on (`log.access`) and `filter` lets its lines
    /// (`switchyard::access` at info) through; [`AccessLog::off`] otherwise.
    pub fn filtered(on: bool, filter: &LogFilter, format: LogFormat, writer: Option<BatchedStderr>) -> Self {
        if on && filter.enables("switchyard::access", Level::INFO) {
            Self::new(format, writer)
        } else {
            Self::off()
        }
    }

    /// Lines in `format`, appended to `buffer` (tests, and embedders with their own log sink).
    pub fn to_buffer(format: LogFormat, buffer: Arc<Mutex<Vec<u8>>>) -> Self {
        Self { format, sink: Sink::Memory(buffer) }
    }

    /// Writes `entry`'s line (when the access log is on).
    pub fn record(&self, entry: &AccessEntry<'_>) {
        if matches!(self.sink, Sink::Off) {
            return;
        }
        LINE.with_borrow_mut(|line| {
            line.clear();
            match self.format {
                LogFormat::Text => text_line(line, entry, SystemTime::now()),
                LogFormat::Json => json_line(line, entry, SystemTime::now()),
            }
            match &self.sink {
                Sink::Off => {}
                Sink::Batched(writer) => writer.append(line),
                Sink::Stderr => {
                    let _ = io::stderr().lock().write_all(line);
                }
                Sink::Memory(buffer) => {
                    buffer.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).extend_from_slice(line)
                }
            }
        });
    }
}

/// `2026-11-29T17:43:39.473797Z  INFO switchyard::access: request request_id=… status=200 …`,
/// as `tracing`'s text format writes it.
fn text_line(out: &mut Vec<u8>, entry: &AccessEntry<'_>, now: SystemTime) {
    timestamp(out, now);
    out.extend_from_slice(b"  INFO switchyard::access: request request_id=");
    out.extend_from_slice(entry.request_id.as_bytes());
    out.extend_from_slice(b" endpoint=");
    out.extend_from_slice(entry.endpoint.as_bytes());
    // Route and target names may come from clients: quoted and escaped as Debug does.
    out.extend_from_slice(b" route=");
    debug_quoted(out, entry.route);
    if let Some(via) = entry.served_by {
        out.extend_from_slice(b" served_by=");
        debug_quoted(out, &via.text());
    }
    if let Some(key) = entry.key {
        out.extend_from_slice(b" key=");
        debug_quoted(out, key);
    }
    out.extend_from_slice(b" attempts=");
    number(out, entry.attempts as u64);
    out.extend_from_slice(b" status=");
    number(out, u64::from(entry.status));
    if let Some(error) = entry.error {
        out.extend_from_slice(b" error=");
        out.extend_from_slice(error.as_bytes());
    }
    out.extend_from_slice(b" latency_ms=");
    millis(out, entry.latency);
    out.extend_from_slice(b" overhead_ms=");
    millis(out, entry.overhead);
    out.push(b'\n');
}

/// One JSON object per line, with the fields `tracing`'s JSON format gives other events.
fn json_line(out: &mut Vec<u8>, entry: &AccessEntry<'_>, now: SystemTime) {
    out.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(out, now);
    out.extend_from_slice(b"\",\"level\":\"INFO\",\"message\":\"request\"");
    json_field(out, "request_id", entry.request_id);
    json_field(out, "endpoint", entry.endpoint);
    json_field(out, "route", entry.route);
    if let Some(via) = entry.served_by {
        json_field(out, "served_by", &via.text());
    }
    if let Some(key) = entry.key {
        json_field(out, "key", key);
    }
    out.extend_from_slice(b",\"attempts\":");
    number(out, entry.attempts as u64);
    out.extend_from_slice(b",\"status\":");
    number(out, u64::from(entry.status));
    if let Some(error) = entry.error {
        json_field(out, "error", error);
    }
    out.extend_from_slice(b",\"latency_ms\":");
    millis(out, entry.latency);
    out.extend_from_slice(b",\"overhead_ms\":");
    millis(out, entry.overhead);
    out.extend_from_slice(b",\"target\":\"switchyard::access\"}\n");
}

/// `,"name":"value"`, the value escaped.
fn json_field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b',');
    json_string(out, name);
    out.push(b':');
    json_string(out, value);
}

fn json_string(out: &mut Vec<u8>, text: &str) {
    // Writing a &str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Milliseconds with microsecond precision: `7.934`. Digit by digit, as the timestamp is.
fn millis(out: &mut Vec<u8>, duration: Duration) {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    number(out, micros / 1000);
    out.push(b'.');
    digits(out, micros % 1000, 3);
}

/// `value` in decimal.
fn number(out: &mut Vec<u8>, value: u64) {
    digits(out, value, value.checked_ilog10().map_or(1, |log| log as usize + 1));
}

/// `text` quoted as `{:?}` writes it. Printable ASCII other than `"` and `\` is itself, so
/// such text (every name a configuration gives) is copied; the rest is left to `Debug`.
fn debug_quoted(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        let _ = write!(out, "{text:?}");
    }
}

pub use switchyard::time::rfc3339;
use switchyard::time::write_rfc3339 as timestamp;

/// The last `width` decimal digits of `value`, zero-padded.
fn digits(out: &mut Vec<u8>, mut value: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use switchyard::Target;

    #[test]
    fn a_level_alone_is_the_default_of_every_target() {
        let filter = LogFilter::parse("warn").unwrap();
        assert!(filter.enables("switchyard::access", Level::WARN));
        assert!(!filter.enables("switchyard::access", Level::INFO));
        assert!(!filter.enables("hyper", Level::INFO));
        assert_eq!(filter.max_level(), LevelFilter::WARN);
    }

    #[test]
    fn the_aws_sdks_lines_stay_at_info_whatever_is_asked() {
        let filter = LogFilter::parse("trace,aws_config=debug").unwrap();
        assert!(!filter.enables("aws_sigv4::http_request::sign", Level::TRACE));
        assert!(!filter.enables("aws_config::sts", Level::DEBUG));
        assert!(filter.enables("aws_config::sts", Level::INFO));
        assert!(filter.enables("switchyard::router", Level::TRACE));
        assert!(!LogFilter::parse("warn").unwrap().enables("aws_config", Level::INFO));
    }

    #[test]
    fn targets_take_their_own_levels_over_the_default() {
        let filter = LogFilter::parse(" info , switchyard::access=off,switchyard_state=DEBUG ").unwrap();
        assert!(!filter.enables("switchyard::access", Level::INFO), "the access log off");
        assert!(filter.enables("switchyard::shared_state", Level::INFO));
        assert!(filter.enables("switchyard_state::link", Level::DEBUG), "a module under the target");
        assert!(!filter.enables("hyper", Level::DEBUG));
        assert_eq!(filter.max_level(), LevelFilter::DEBUG);
    }

    #[test]
    fn with_targets_only_nothing_else_is_written() {
        let filter = LogFilter::parse("switchyard=debug").unwrap();
        assert!(filter.enables("switchyard::access", Level::INFO));
        assert!(!filter.enables("hyper", Level::ERROR));
    }

    #[test]
    fn words_that_are_not_levels_are_refused_with_the_fix() {
        for text in ["warning", "switchyard=loud", "[span]=debug", "=info", ""] {
            let problem = LogFilter::parse(text).unwrap_err();
            assert!(problem.contains("use off, error, warn, info, debug or trace"), "{text}: {problem}");
        }
    }

    #[test]
    fn the_flag_wins_over_rust_log_which_wins_over_the_file() {
        let file = LogFilter::parse("debug").unwrap();
        let chosen = |flag, rust_log, file| LogFilter::choose(flag, rust_log, file).unwrap().max_level();
        assert_eq!(chosen(Some("error"), Some("warn"), Some(&file)), LevelFilter::ERROR);
        assert_eq!(chosen(None, Some("warn"), Some(&file)), LevelFilter::WARN);
        assert_eq!(chosen(None, Some(" "), Some(&file)), LevelFilter::DEBUG, "an empty RUST_LOG is unset");
        assert_eq!(chosen(None, None, Some(&file)), LevelFilter::DEBUG);
        assert_eq!(chosen(None, None, None), LevelFilter::INFO);
    }

    #[test]
    fn a_bad_flag_or_variable_is_named() {
        let problem = LogFilter::choose(Some("loud"), None, None).unwrap_err();
        assert!(problem.starts_with("--log-level: `loud` is not a level"), "{problem}");
        let problem = LogFilter::choose(None, Some("loud"), None).unwrap_err();
        assert!(problem.starts_with("RUST_LOG: `loud` is not a level"), "{problem}");
    }

    #[test]
    fn the_access_log_follows_log_access_and_the_filter() {
        let info = LogFilter::info();
        let buffer = || None;
        assert!(!matches!(AccessLog::filtered(true, &info, LogFormat::Text, buffer()).sink, Sink::Off));
        assert!(matches!(AccessLog::filtered(false, &info, LogFormat::Text, buffer()).sink, Sink::Off));
        let warn = LogFilter::parse("warn").unwrap();
        assert!(matches!(AccessLog::filtered(true, &warn, LogFormat::Text, buffer()).sink, Sink::Off));
        let only_access = LogFilter::parse("warn,switchyard::access=info").unwrap();
        assert!(!matches!(
            AccessLog::filtered(true, &only_access, LogFormat::Text, buffer()).sink,
            Sink::Off
        ));
    }

    #[test]
    fn names_are_quoted_as_debug_quotes_them() {
        for text in [
            "default",
            "",
            "a b~",
            "say \"hi\"",
            "back\\slash",
            "tab\there",
            "new\nline",
            "é😀",
            "\u{7f}\u{1b}[0m",
        ] {
            let mut out = Vec::new();
            debug_quoted(&mut out, text);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{text:?}"));
        }
    }

    #[test]
    fn milliseconds_are_written_with_three_decimals() {
        let written = |micros: u64| {
            let mut out = Vec::new();
            millis(&mut out, Duration::from_micros(micros));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(written(0), "0.000");
        assert_eq!(written(7), "0.007");
        assert_eq!(written(7_934), "7.934");
        assert_eq!(written(10_000), "10.000");
        assert_eq!(written(123_456_789), "123456.789");
        assert_eq!(written(u64::MAX), "18446744073709551.615");
    }

    fn entry<'a>(via: Option<&'a Via>, route: &'a str) -> AccessEntry<'a> {
        AccessEntry {
            request_id: "req_1",
            endpoint: "chat_completions",
            route,
            served_by: via,
            attempts: 2,
            status: 200,
            error: None,
            latency: Duration::from_micros(7_934),
            overhead: Duration::from_micros(76),
            key: None,
        }
    }

    fn at(seconds: u64, micros: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros)
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        for (seconds, expected) in [
            (0, "1970-01-01T00:00:00.000000Z"),
            (951_782_400, "2000-02-29T00:00:00.000000Z"),
            (1_796_059_419, "2026-11-30T17:23:39.000000Z"),
            (4_107_542_399, "2100-02-28T23:59:59.000000Z"),
        ] {
            let mut out = Vec::new();
            timestamp(&mut out, at(seconds, 0));
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
        let mut out = Vec::new();
        timestamp(&mut out, at(0, 473_797));
        assert_eq!(String::from_utf8(out).unwrap(), "1970-01-01T00:00:00.473797Z");
    }

    #[test]
    fn text_lines_quote_what_clients_named() {
        let via = Via::Target("ok:bench-\"model\"".parse::<Target>().unwrap());
        let mut out = Vec::new();
        text_line(&mut out, &entry(Some(&via), "a\"b"), at(0, 5));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1970-01-01T00:00:00.000005Z  INFO switchyard::access: request request_id=req_1 \
             endpoint=chat_completions route=\"a\\\"b\" served_by=\"ok:bench-\\\"model\\\"\" attempts=2 \
             status=200 latency_ms=7.934 overhead_ms=0.076\n"
        );
    }

    #[test]
    fn json_lines_are_json_objects() {
        let via = Via::Target("ok:m\"x\\".parse::<Target>().unwrap());
        for (via, served_by) in
            [(Some(&via), serde_json::json!("ok:m\"x\\")), (None, serde_json::Value::Null)]
        {
            let mut out = Vec::new();
            json_line(&mut out, &entry(via, "r\\"), at(0, 0));
            assert_eq!(out.last(), Some(&b'\n'));
            let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(line["route"], "r\\");
            assert_eq!(line["served_by"], served_by);
            assert_eq!(line["status"], 200);
            assert_eq!(line["latency_ms"], 7.934);
            assert_eq!(line["overhead_ms"], 0.076);
            assert_eq!(line["target"], "switchyard::access");
            assert!(line.get("error").is_none(), "{line}");
        }
    }

    /// `entry`'s access line in the text format, and in JSON read back.
    fn both_lines(entry: &AccessEntry<'_>) -> (String, serde_json::Value) {
        let (mut text, mut json) = (Vec::new(), Vec::new());
        text_line(&mut text, entry, at(0, 0));
        json_line(&mut json, entry, at(0, 0));
        (String::from_utf8(text).unwrap(), serde_json::from_slice(&json).unwrap())
    }

    #[test]
    fn a_request_that_failed_after_its_status_names_the_error() {
        let (text, line) = both_lines(&AccessEntry { error: Some("timeout"), ..entry(None, "r") });
        assert!(text.contains(" status=200 error=timeout latency_ms=7.934 "), "{text}");
        assert_eq!((line["status"].as_u64(), line["error"].as_str()), (Some(200), Some("timeout")));
    }

    #[test]
    fn a_request_names_its_client_key_by_label_in_both_formats() {
        let (text, line) = both_lines(&AccessEntry { key: Some("search \"team\""), ..entry(None, "r") });
        assert!(text.contains(" route=\"r\" key=\"search \\\"team\\\"\" attempts=2 "), "{text}");
        assert_eq!(line["key"], "search \"team\"");
    }
}
