//! `switchyard-bench`: the load driver behind `bench/run`. It sends POST requests with a
//! JSON body to one loopback URL, closed loop (fixed connections, back to back) or open loop
//! (fixed rate, latency from each scheduled send time), checks every status and body (SSE
//! streams included), and reports throughput, latency percentiles, time to first token,
//! chunk gaps, errors by kind and the target's CPU seconds and peak RSS.
//!
//! ```sh
//! switchyard-bench --url http://127.0.0.1:4680/v1/chat/completions --connections 32 --duration 10s
//! switchyard-bench --url http://127.0.0.1:9000/ok~chunks=20~gap=5ms/v1/chat/completions --stream
//! switchyard-bench --url http://127.0.0.1:4680/v1/chat/completions --rate 2000 --pid 1234
//! ```

mod histogram;
mod load;
mod options;
mod process;
mod report;
mod sse;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::load::Plan;
use crate::options::{Options, USAGE};
use crate::report::Report;

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("switchyard-bench: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = if options.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(options.threads).enable_all().build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("switchyard-bench: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(drive(options)) {
        Ok(report) => {
            eprint!("{}", report.summary());
            match serde_json::to_string(&report) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("switchyard-bench: cannot encode the report: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(message) => {
            eprintln!("switchyard-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the connections, runs the load while sampling the target's memory, and reports.
async fn drive(options: Options) -> Result<Report, String> {
    let pid = options.pid;
    if let Some(pid) = pid {
        process::sample(pid).map_err(|e| format!("--pid {pid}: cannot read /proc/{pid}: {e}"))?;
    }
    // Connections are opened before the clock starts so that the first second does not
    // measure TCP handshakes; the plan gets its start time afterwards.
    let probe = Plan::new(options.clone(), Instant::now())?;
    let mut opening = tokio::task::JoinSet::new();
    let probe = Arc::new(probe);
    for _ in 0..options.connections {
        let probe = Arc::clone(&probe);
        opening.spawn(async move { load::connect(&probe).await });
    }
    let mut connections = Vec::with_capacity(options.connections);
    let mut first_error = None;
    while let Some(opened) = opening.join_next().await {
        match opened {
            Ok(Ok(connection)) => connections.push(Some(connection)),
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
                connections.push(None);
            }
            Err(error) => return Err(format!("a connecting task failed: {error}")),
        }
    }
    if connections.iter().all(Option::is_none) {
        let error = first_error.unwrap_or_default();
        return Err(format!("cannot connect to {}: {error}", options.target.addr));
    }

    let start = Instant::now();
    let plan = Arc::new(Plan::new(options.clone(), start)?);
    // The measured window starts after the warm-up; CPU is read then, memory throughout. The
    // readings run on a thread of their own: reading /proc on the driver's runtime would stall
    // the requests due meanwhile, and the stall would be charged to the target.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let readings = pid.map(|pid| {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        let warm = start + options.warmup;
        std::thread::spawn(move || {
            std::thread::sleep(warm.saturating_duration_since(Instant::now()));
            let first = process::sample(pid).ok();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = process::sample(pid) {
                    peak.fetch_max(s.rss_kb, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            first
        })
    });
    let tally = load::run(Arc::clone(&plan), connections).await;
    let seconds = measured_seconds(&options, start, tally.last_sent, Instant::now());
    stop.store(true, Ordering::Relaxed);
    let process = match (pid, readings) {
        (Some(pid), Some(thread)) => {
            let first = thread.join().ok().flatten();
            let last = process::sample(pid).ok();
            match (first, last) {
                (Some(first), Some(last)) => Some(report::process_report(
                    pid,
                    first,
                    last,
                    peak.load(Ordering::Relaxed),
                    seconds,
                    tally.ok,
                )),
                _ => None,
            }
        }
        _ => None,
    };
    Ok(Report::new(plan.options(), tally, seconds, process))
}

/// How long the measured part of a run took, for a run started at `start` that ended at
/// `finished` and sent its last measured request at `last_sent`. Requests are counted by when
/// they started, so the window is the time in which the counted requests could be sent.
///
/// Closed loop sends until the deadline (or until its request budget runs out), then waits for
/// what is in flight. Open loop sends on schedule while the target keeps up; one that fell
/// behind leaves requests waiting for a free connection, sent late as it answers its backlog,
/// and that time counts: dividing by the schedule's length alone would report the offered rate
/// as achieved by a target answering a fraction of it (latency told the truth, throughput did
/// not). The send, not the answer, ends it, so one slow answer or timeout does not stretch it.
fn measured_seconds(options: &Options, start: Instant, last_sent: Option<Instant>, finished: Instant) -> f64 {
    let deadline = start + options.duration;
    let end = match options.rate {
        Some(_) => last_sent.map_or(deadline, |sent| sent.max(deadline)),
        None => finished.min(deadline),
    };
    end.saturating_duration_since(start + options.warmup).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Options {
        let mut argv = vec!["--url", "http://127.0.0.1:1/", "--duration", "10s", "--warmup", "2s"];
        argv.extend_from_slice(args);
        Options::parse(argv.into_iter().map(String::from)).unwrap()
    }

    #[test]
    fn an_open_loop_run_lasts_until_its_backlog_is_sent() {
        let open = options(&["--rate", "1000"]);
        let start = Instant::now();
        let at = |s: f64| start + Duration::from_secs_f64(s);
        // Kept up: the last request left on schedule, the window is the schedule less warm-up,
        // however long its answer took.
        assert_eq!(measured_seconds(&open, start, Some(at(9.999)), at(19.0)), 8.0);
        // Fell behind: the last request could only be sent 30 s after the schedule ended.
        assert_eq!(measured_seconds(&open, start, Some(at(40.0)), at(40.2)), 38.0);
        assert_eq!(measured_seconds(&open, start, None, at(10.0)), 8.0);
    }

    #[test]
    fn a_closed_loop_run_ends_at_its_deadline() {
        let closed = options(&[]);
        let start = Instant::now();
        let at = |s: f64| start + Duration::from_secs_f64(s);
        // Answers in flight at the deadline are waited for; the window is still the deadline's.
        assert_eq!(measured_seconds(&closed, start, Some(at(9.2)), at(11.0)), 8.0);
        // Stopped early (the request budget ran out).
        assert_eq!(measured_seconds(&closed, start, Some(at(5.9)), at(6.0)), 4.0);
    }
}
