//! CPU time and memory of the process under test, read from `/proc`. A gateway may run as a
//! tree (LiteLLM's workers, a Node cluster), so every figure covers the process and all its
//! descendants alive at the moment of the sample.

use std::collections::BTreeMap;
use std::fs;
use std::io;

/// Linux reports times in `/proc/PID/stat` in USER_HZ, which is 100 on every architecture the
/// kernel's ABI fixes it for (the constant behind `sysconf(_SC_CLK_TCK)`).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// User plus system CPU seconds used so far, summed over the tree.
    pub cpu_seconds: f64,
    /// Resident memory now (VmRSS), summed over the tree, in KiB.
    pub rss_kb: u64,
    /// Each process's lifetime peak resident memory (VmHWM), summed, in KiB.
    pub hwm_kb: u64,
    /// How many processes the tree had.
    pub processes: usize,
}

/// Reads `pid` and its descendants.
///
/// # Errors
/// When `pid` itself cannot be read (it exited, or this is not Linux).
pub fn sample(pid: u32) -> io::Result<Sample> {
    let tree = tree(pid);
    let mut total = Sample::default();
    for (i, member) in tree.iter().enumerate() {
        let reading = read_one(*member);
        let (ticks, rss_kb, hwm_kb) = match reading {
            Ok(values) => values,
            // A descendant may exit between the listing and the read; the root may not.
            Err(error) if i == 0 => return Err(error),
            Err(_) => continue,
        };
        total.cpu_seconds += ticks as f64 / TICKS_PER_SECOND;
        total.rss_kb += rss_kb;
        total.hwm_kb += hwm_kb;
        total.processes += 1;
    }
    Ok(total)
}

/// `pid` first, then every descendant found by walking the parent links in `/proc/*/stat`.
fn tree(pid: u32) -> Vec<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
            if let Some(parent) = stat_fields(&stat).and_then(|f| f.get(1).and_then(|p| p.parse().ok())) {
                children.entry(parent).or_default().push(child);
            }
        }
    }
    let mut out = vec![pid];
    let mut next = 0;
    while next < out.len() {
        if let Some(kids) = children.get(&out[next]) {
            out.extend(kids.iter().copied().filter(|k| *k != pid));
        }
        next += 1;
    }
    out
}

/// CPU ticks, VmRSS and VmHWM of one process.
fn read_one(pid: u32) -> io::Result<(u64, u64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("/proc/{pid}/stat: unexpected format"))
    })?;
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok((ticks, status_kb(&status, "VmRSS:"), status_kb(&status, "VmHWM:")))
}

/// The fields after the command name, which is in parentheses and may itself contain spaces
/// and parentheses, so the split starts after the last `)`. Index 0 is field 3 (state).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// utime + stime (fields 14 and 15 of `proc(5)`), in ticks.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let fields = stat_fields(stat)?;
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// A `Key:   1234 kB` line of `/proc/PID/status`; 0 when absent (kernel threads have none).
fn status_kb(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_survive_parentheses_in_the_command_name() {
        let stat = "4242 (we(ird) n) S 1 4242 4242 0 -1 4194560 500 0 0 0 123 45 0 0 20 0 4 0 100 \
                    1000000 250 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat), Some(168));
        assert_eq!(stat_fields(stat).and_then(|f| f.get(1).map(|p| p.to_string())), Some("1".into()));
    }

    #[test]
    fn status_values_are_read_in_kib() {
        let status = "Name:\tnginx\nVmHWM:\t   10240 kB\nVmRSS:\t    8192 kB\n";
        assert_eq!(status_kb(status, "VmHWM:"), 10_240);
        assert_eq!(status_kb(status, "VmRSS:"), 8_192);
        assert_eq!(status_kb(status, "VmSwap:"), 0);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("own /proc entry");
        assert!(s.rss_kb > 0 && s.hwm_kb >= s.rss_kb && s.processes >= 1);
    }
}
