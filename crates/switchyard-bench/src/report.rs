//! The result of a run: one JSON object for scripts and a short summary for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::histogram::Histogram;
use crate::load::Tally;
use crate::options::Options;
use crate::process::Sample;

/// Percentiles of one histogram, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    /// Values behind the figures.
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    /// Useful for chunk gaps: whether any were collapsed together by buffering.
    pub min: f64,
}

impl Percentiles {
    /// Percentiles of a histogram of microseconds, or `None` when it is empty.
    pub fn of(h: &Histogram) -> Option<Self> {
        let ms = |us: u64| us as f64 / 1000.0;
        (h.count() > 0).then(|| Self {
            count: h.count(),
            p50: ms(h.percentile(50.0)),
            p90: ms(h.percentile(90.0)),
            p99: ms(h.percentile(99.0)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
            min: ms(h.min()),
        })
    }
}

/// CPU and memory of the target over the run.
#[derive(Debug, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    /// Processes in the tree at the end.
    pub processes: usize,
    /// CPU seconds used during the measured part.
    pub cpu_seconds: f64,
    /// `cpu_seconds` per wall second: 1.0 is one core busy.
    pub cpu_cores: f64,
    /// CPU microseconds per successful request.
    pub cpu_us_per_request: Option<f64>,
    pub rss_start_kb: u64,
    pub rss_end_kb: u64,
    /// Highest resident memory sampled (every 100 ms) during the run.
    pub rss_peak_kb: u64,
    /// Lifetime peak resident memory (VmHWM) at the end, summed over the tree.
    pub hwm_kb: u64,
}

/// Everything one run found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub label: String,
    pub url: String,
    /// `closed` or `open`.
    pub mode: &'static str,
    pub connections: usize,
    /// Offered requests/s in open loop.
    pub rate: Option<f64>,
    pub stream: bool,
    pub body_bytes: usize,
    /// Length of the measured part (duration less warm-up), seconds.
    pub seconds: f64,
    /// Requests in the measured part, of any outcome.
    pub requests: u64,
    pub ok: u64,
    pub error_count: u64,
    pub errors: BTreeMap<String, u64>,
    pub warmup_requests: u64,
    pub warmup_errors: BTreeMap<String, u64>,
    /// Successful requests per second of the measured part.
    pub throughput: f64,
    pub latency_ms: Option<Percentiles>,
    pub ttft_ms: Option<Percentiles>,
    pub chunk_gap_ms: Option<Percentiles>,
    pub chunks: u64,
    pub response_bytes: u64,
    /// Connections the server closed between requests (reopened; not failures).
    pub reconnects: u64,
    pub process: Option<ProcessReport>,
    /// One example per error kind (the body of an error status, the cause of a cut).
    pub error_samples: BTreeMap<String, String>,
}

impl Report {
    /// Builds the report from the merged tally and the process readings.
    pub fn new(options: &Options, tally: Tally, seconds: f64, process: Option<ProcessReport>) -> Self {
        let error_count = tally.error_count();
        Self {
            label: options.label.clone(),
            url: format!("http://{}{}", options.target.authority, options.target.path),
            mode: if options.rate.is_some() { "open" } else { "closed" },
            connections: options.connections,
            rate: options.rate,
            stream: options.stream,
            body_bytes: options.body.len(),
            seconds,
            requests: tally.ok + error_count,
            ok: tally.ok,
            error_count,
            errors: tally.errors,
            warmup_requests: tally.warmup_requests,
            warmup_errors: tally.warmup_errors,
            throughput: if seconds > 0.0 { tally.ok as f64 / seconds } else { 0.0 },
            latency_ms: Percentiles::of(&tally.latency),
            ttft_ms: Percentiles::of(&tally.ttft),
            chunk_gap_ms: Percentiles::of(&tally.gaps),
            chunks: tally.chunks,
            response_bytes: tally.bytes,
            reconnects: tally.reconnects,
            process,
            error_samples: tally.samples,
        }
    }

    /// A few lines for a person reading the terminal.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let load = match self.rate {
            Some(rate) => format!("open loop at {rate:.0} req/s, up to {} in flight", self.connections),
            None => format!("closed loop, {} connections", self.connections),
        };
        let _ = writeln!(
            s,
            "{} {} ({load}{})",
            self.label,
            self.url,
            if self.stream { ", streaming" } else { "" }
        );
        let _ = writeln!(
            s,
            "  {} requests in {:.1}s: {} ok, {} failed; {:.0} ok/s",
            self.requests, self.seconds, self.ok, self.error_count, self.throughput
        );
        let line = |name: &str, p: &Option<Percentiles>| match p {
            Some(p) => format!(
                "  {name:<9} p50 {:.3} ms  p90 {:.3}  p99 {:.3}  max {:.3}\n",
                p.p50, p.p90, p.p99, p.max
            ),
            None => String::new(),
        };
        s.push_str(&line("latency", &self.latency_ms));
        s.push_str(&line("ttft", &self.ttft_ms));
        s.push_str(&line("chunk gap", &self.chunk_gap_ms));
        for (kind, n) in &self.errors {
            let _ = writeln!(
                s,
                "  error {kind}: {n}  {}",
                self.error_samples.get(kind).map_or("", String::as_str)
            );
        }
        if self.reconnects > 0 {
            let _ = writeln!(s, "  the server closed {} idle connections (reopened)", self.reconnects);
        }
        if !self.warmup_errors.is_empty() {
            let _ = writeln!(s, "  warm-up errors: {:?}", self.warmup_errors);
        }
        if let Some(p) = &self.process {
            let _ = writeln!(
                s,
                "  target pid {} ({} processes): {:.2} CPU s ({:.2} cores), RSS {} -> {} KiB, peak {} KiB, VmHWM {} KiB",
                p.pid,
                p.processes,
                p.cpu_seconds,
                p.cpu_cores,
                p.rss_start_kb,
                p.rss_end_kb,
                p.rss_peak_kb,
                p.hwm_kb
            );
        }
        s
    }
}

/// The process figures from readings at the start and end and the highest RSS sampled.
pub fn process_report(
    pid: u32,
    start: Sample,
    end: Sample,
    peak_rss_kb: u64,
    seconds: f64,
    ok: u64,
) -> ProcessReport {
    let cpu_seconds = (end.cpu_seconds - start.cpu_seconds).max(0.0);
    ProcessReport {
        pid,
        processes: end.processes,
        cpu_seconds,
        cpu_cores: if seconds > 0.0 { cpu_seconds / seconds } else { 0.0 },
        cpu_us_per_request: (ok > 0).then(|| cpu_seconds * 1e6 / ok as f64),
        rss_start_kb: start.rss_kb,
        rss_end_kb: end.rss_kb,
        rss_peak_kb: peak_rss_kb.max(start.rss_kb).max(end.rss_kb),
        hwm_kb: end.hwm_kb,
    }
}
