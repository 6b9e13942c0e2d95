//! The command line: what to load, how hard and for how long. Every run is bounded by a
//! duration and a request cap, and aimed at this machine only.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;

/// The usage text printed for `--help` and after an argument error.
pub const USAGE: &str = "\
usage: switchyard-bench --url http[s]://127.0.0.1:PORT/PATH [options]

Sends POST requests with a JSON body to a loopback URL and reports throughput, latency
percentiles, time to first token (streams), errors by kind and the target's CPU and memory.
Prints a human summary on stderr and one JSON line on stdout.

  --url URL             target; only 127.0.0.0/8, localhost or [::1] are accepted
  --ca-file PEM         for https:// URLs: the authorities to trust (required with https)
  --body JSON           request body (default: a one-message chat for model `default`)
  --body-file PATH      request body read from a file
  --header 'K: V'       extra request header (repeatable)
  --stream              set \"stream\": true in the body and read the answer as SSE
  --expect TEXT         text every successful answer must contain (default `mock answer`;
                        `--expect ''` checks only that the body parses)
  --duration D          how long to load (default 10s; at most 1h), e.g. 500ms, 10s, 2m
  --warmup D            leading part of the duration left out of the figures (default 0)
  --connections N       closed loop: connections each sending back to back (default 32);
                        open loop: the most requests in flight at once
  --rate R              open loop: R requests/s on a fixed schedule; a request that had to
                        wait for a free connection is measured from its scheduled time
  --timeout D           per-request limit, counted as a `timeout` error (default 10s)
  --max-requests N      hard cap on requests sent (default 10000000)
  --pid PID             process whose CPU seconds and peak RSS (with its children) to report
  --threads N           load-driver threads (default 1, to leave cores to the target)
  --label TEXT          name carried into the JSON line";

/// A validated loopback HTTP URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The `Host` header: the URL's authority as written.
    pub authority: String,
    /// Path and query sent in the request line.
    pub path: String,
    /// `https://`: each connection starts with a TLS handshake.
    pub tls: bool,
}

impl Target {
    /// Parses `http[s]://HOST[:PORT][/PATH]`, refusing every host that is not this machine: the
    /// driver can send tens of thousands of requests a second and must never aim them elsewhere.
    ///
    /// # Errors
    /// A message naming the problem.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(format!("--url `{url}`: only http:// and https:// URLs are supported")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) =
                v6.split_once(']').ok_or_else(|| format!("--url `{url}`: unclosed `[` in the host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port: u16 = match port {
            Some(p) => p.parse().map_err(|_| format!("--url `{url}`: bad port `{p}`"))?,
            None if tls => 443,
            None => 80,
        };
        let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            host.parse().map_err(|_| {
                format!("--url `{url}`: host `{host}` must be localhost or a loopback IP address")
            })?
        };
        if !ip.is_loopback() {
            return Err(format!(
                "--url `{url}`: {ip} is not a loopback address; this driver only loads 127.0.0.0/8 and ::1"
            ));
        }
        Ok(Self {
            addr: SocketAddr::new(ip, port),
            authority: authority.to_owned(),
            path: path.to_owned(),
            tls,
        })
    }
}

/// Everything one run needs, validated.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to send.
    pub target: Target,
    /// The PEM file of authorities an `https://` target's certificate is checked against.
    pub ca_file: Option<String>,
    /// The request body, sent unchanged on every request.
    pub body: Bytes,
    /// Extra headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Read answers as SSE.
    pub stream: bool,
    /// Text a successful answer must contain; empty checks only that it parses.
    pub expect: String,
    /// Total load time, warm-up included.
    pub duration: Duration,
    /// Leading part of `duration` whose requests are not in the figures.
    pub warmup: Duration,
    /// Closed loop: connections; open loop: the most requests in flight.
    pub connections: usize,
    /// Open loop when set: requests per second.
    pub rate: Option<f64>,
    /// Per-request limit.
    pub timeout: Duration,
    /// Hard cap on requests sent.
    pub max_requests: u64,
    /// Process to measure.
    pub pid: Option<u32>,
    /// Load-driver threads.
    pub threads: usize,
    /// Free text carried into the JSON line.
    pub label: String,
}

/// Longest run accepted, so a typo cannot leave a load running for a day.
const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Most connections accepted; each is a socket and a task.
const MAX_CONNECTIONS: usize = 10_000;
const DEFAULT_BODY: &str = r#"{"model":"default","messages":[{"role":"user","content":"Hello!"}]}"#;

impl Options {
    /// Parses the arguments after the program name. `Err("")` means `--help`.
    ///
    /// # Errors
    /// A message naming the argument and the problem.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut flags = Flags::default();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
                _ => (arg, None),
            };
            let value = || inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs a value"));
            flags.read(&flag, value)?;
        }
        flags.into_options()
    }
}

/// The flags as read, defaults filled in, before the run's bounds are checked.
struct Flags {
    url: Option<String>,
    ca_file: Option<String>,
    body_text: Option<String>,
    headers: Vec<(String, String)>,
    stream: bool,
    expect: String,
    duration: Duration,
    warmup: Duration,
    connections: usize,
    rate: Option<f64>,
    timeout: Duration,
    max_requests: u64,
    pid: Option<u32>,
    threads: usize,
    label: String,
}

impl Default for Flags {
    /// The values of every flag left out.
    fn default() -> Self {
        Self {
            url: None,
            ca_file: None,
            body_text: None,
            headers: Vec::new(),
            stream: false,
            expect: "mock answer".to_owned(),
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            connections: 32,
            rate: None,
            timeout: Duration::from_secs(10),
            max_requests: 10_000_000,
            pid: None,
            threads: 1,
            label: String::new(),
        }
    }
}

impl Flags {
    /// Reads one flag, taking its value from `value` only when the flag has one.
    fn read(&mut self, flag: &str, mut value: impl FnMut() -> Result<String, String>) -> Result<(), String> {
        match flag {
            "--url" => self.url = Some(value()?),
            "--ca-file" => self.ca_file = Some(value()?),
            "--body" => self.body_text = Some(value()?),
            "--body-file" => {
                let path = value()?;
                self.body_text =
                    Some(std::fs::read_to_string(&path).map_err(|e| format!("--body-file {path}: {e}"))?);
            }
            "--header" => {
                let text = value()?;
                let (name, val) =
                    text.split_once(':').ok_or(format!("--header `{text}`: expected `Name: value`"))?;
                self.headers.push((name.trim().to_ascii_lowercase(), val.trim().to_owned()));
            }
            "--stream" => self.stream = true,
            "--expect" => self.expect = value()?,
            "--duration" => self.duration = parse_duration(&value()?)?,
            "--warmup" => self.warmup = parse_duration(&value()?)?,
            "--connections" => self.connections = parse_number(flag, &value()?)?,
            "--rate" => self.rate = Some(parse_rate(&value()?)?),
            "--timeout" => self.timeout = parse_duration(&value()?)?,
            "--max-requests" => self.max_requests = parse_number(flag, &value()?)? as u64,
            "--pid" => self.pid = Some(parse_number(flag, &value()?)? as u32),
            "--threads" => self.threads = parse_number(flag, &value()?)?,
            "--label" => self.label = value()?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
        Ok(())
    }

    /// Checks the run's bounds and builds the body, giving the validated options.
    fn into_options(self) -> Result<Options, String> {
        let target = Target::parse(self.url.as_deref().ok_or("--url is required")?)?;
        self.check_bounds(&target)?;
        let body = self.body()?;
        Ok(Options {
            target,
            ca_file: self.ca_file,
            body,
            headers: self.headers,
            stream: self.stream,
            expect: self.expect,
            duration: self.duration,
            warmup: self.warmup,
            connections: self.connections,
            rate: self.rate,
            timeout: self.timeout,
            max_requests: self.max_requests,
            pid: self.pid,
            threads: self.threads,
            label: self.label,
        })
    }

    /// Refuses a run that is unbounded, all warm-up, or aimed at a target it cannot reach.
    fn check_bounds(&self, target: &Target) -> Result<(), String> {
        let (duration, warmup) = (self.duration, self.warmup);
        if duration.is_zero() || duration > MAX_DURATION {
            return Err(format!("--duration must be in (0, 1h], got {duration:?}"));
        }
        if warmup >= duration {
            return Err(format!("--warmup ({warmup:?}) must be shorter than --duration ({duration:?})"));
        }
        if target.tls != self.ca_file.is_some() {
            return Err("an https:// --url needs --ca-file, and --ca-file an https:// --url".into());
        }
        if self.connections > MAX_CONNECTIONS {
            return Err(format!("--connections must be at most {MAX_CONNECTIONS}"));
        }
        if self.timeout.is_zero() {
            return Err("--timeout must be positive".into());
        }
        Ok(())
    }

    /// The request body as sent: the given JSON (or the default), with `"stream": true` when
    /// streaming.
    fn body(&self) -> Result<Bytes, String> {
        let mut body: serde_json::Value =
            serde_json::from_str(self.body_text.as_deref().unwrap_or(DEFAULT_BODY))
                .map_err(|e| format!("the request body is not JSON: {e}"))?;
        if self.stream {
            match body.as_object_mut() {
                Some(object) => {
                    object.insert("stream".into(), serde_json::Value::Bool(true));
                }
                None => return Err("--stream needs a JSON object body".into()),
            }
        }
        let body = serde_json::to_vec(&body).map_err(|e| format!("cannot encode the body: {e}"))?;
        Ok(Bytes::from(body))
    }
}

/// `--rate`: requests per second, in (0, 1e6].
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1e6 => Ok(r),
        _ => Err(format!("--rate needs a number of requests/s in (0, 1e6], got `{text}`")),
    }
}

fn parse_number(flag: &str, text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} needs a positive whole number, got `{text}`")),
    }
}

/// `250ms`, `10s`, `1.5s`, `2m`, `500us`.
///
/// # Errors
/// A message naming the text.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("bad duration `{text}` (try 500ms, 10s, 2m)"))?;
    let seconds = match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" | "" => number,
        "m" => number * 60.0,
        _ => return Err(format!("bad duration unit in `{text}` (use us, ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("bad duration `{text}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn loopback_urls_are_accepted() {
        let t = Target::parse("http://127.0.0.1:8080/ok/v1/chat/completions").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.path, "/ok/v1/chat/completions");
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(Target::parse("http://localhost:1").unwrap().path, "/");
        assert_eq!(Target::parse("http://[::1]:9/x").unwrap().addr, "[::1]:9".parse().unwrap());
        assert!(Target::parse("http://127.9.9.9:1/").is_ok());
    }

    #[test]
    fn other_hosts_are_refused() {
        for url in [
            "http://10.0.0.1:80/",
            "http://192.168.1.1/",
            "http://8.8.8.8/",
            "http://example.com/",
            "https://10.0.0.1/",
            "ftp://127.0.0.1/",
            "http://[2001:db8::1]:80/",
        ] {
            assert!(Target::parse(url).is_err(), "{url} accepted");
        }
    }

    #[test]
    fn https_targets_default_to_443_and_need_their_authority() {
        let t = Target::parse("https://127.0.0.1/v1").unwrap();
        assert!(t.tls);
        assert_eq!(t.addr, "127.0.0.1:443".parse().unwrap());
        assert!(!Target::parse("http://127.0.0.1/v1").unwrap().tls);
        let refused = parse(&["--url", "https://127.0.0.1:1/"]).unwrap_err();
        assert!(refused.contains("--ca-file"), "{refused}");
        let refused = parse(&["--url", "http://127.0.0.1:1/", "--ca-file", "ca.pem"]).unwrap_err();
        assert!(refused.contains("--ca-file"), "{refused}");
        assert_eq!(
            parse(&["--url", "https://127.0.0.1:1/", "--ca-file", "ca.pem"]).unwrap().ca_file.unwrap(),
            "ca.pem"
        );
    }

    #[test]
    fn durations_read_as_written() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn stream_sets_the_flag_in_the_body_and_headers_are_lowercased() {
        let o =
            parse(&["--url", "http://127.0.0.1:1/", "--stream", "--header", "X-Portkey-Config: {\"a\":1}"])
                .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&o.body).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(o.headers, vec![("x-portkey-config".to_owned(), "{\"a\":1}".to_owned())]);
    }

    #[test]
    fn runs_are_bounded() {
        assert!(parse(&["--url", "http://127.0.0.1:1/", "--duration", "2h"]).is_err());
        assert!(parse(&["--url", "http://127.0.0.1:1/", "--duration", "1s", "--warmup", "1s"]).is_err());
        assert!(parse(&["--duration", "1s"]).is_err());
        assert!(parse(&["--url", "http://127.0.0.1:1/", "--body", "{not json"]).is_err());
    }
}
