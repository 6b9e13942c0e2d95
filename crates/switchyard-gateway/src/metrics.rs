//! A small Prometheus registry: counters, gauges and histograms with labels, rendered in the
//! text exposition format. Written here rather than pulled in, so that each gateway instance
//! has its own registry (no process-global recorder) and the hot path is a read lock and an
//! atomic add.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Label names and values of one series.
pub type Labels = Vec<(&'static str, String)>;

type Key = (&'static str, Labels);

/// Upper bounds of histogram buckets, in seconds: 100 µs to 60 s.
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in nanoseconds, so it can be an integer atomic.
    sum_nanos: AtomicU64,
}

/// The registry. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: RwLock<BTreeMap<Key, Arc<AtomicU64>>>,
    /// Floating-point counters (cost), stored as f64 bits.
    sums: RwLock<BTreeMap<Key, Arc<AtomicU64>>>,
    histograms: RwLock<BTreeMap<Key, Arc<Histogram>>>,
    help: RwLock<BTreeMap<&'static str, &'static str>>,
}

fn entry<T: Default>(map: &RwLock<BTreeMap<Key, Arc<T>>>, name: &'static str, labels: Labels) -> Arc<T> {
    let key = (name, labels);
    if let Some(found) = map.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return found.clone();
    }
    map.write().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().clone()
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Documents a metric family (shown as `# HELP`).
    pub fn describe(&self, name: &'static str, help: &'static str) {
        self.help.write().unwrap_or_else(|p| p.into_inner()).insert(name, help);
    }

    pub fn increment(&self, name: &'static str, labels: Labels, by: u64) {
        entry(&self.counters, name, labels).fetch_add(by, Ordering::Relaxed);
    }

    /// Adds to a floating-point counter.
    pub fn add(&self, name: &'static str, labels: Labels, value: f64) {
        let cell = entry(&self.sums, name, labels);
        let mut current = cell.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + value).to_bits();
            match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
    }

    pub fn observe(&self, name: &'static str, labels: Labels, seconds: f64) {
        let histogram = entry(&self.histograms, name, labels);
        for (bound, bucket) in BUCKETS.iter().zip(&histogram.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        histogram.count.fetch_add(1, Ordering::Relaxed);
        histogram.sum_nanos.fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
    }

    /// The text exposition of everything, with `gauges` (computed at scrape time) appended.
    pub fn render(&self, gauges: &[(&'static str, &'static str, Labels, f64)]) -> String {
        let help = self.help.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out = String::new();
        let header = |out: &mut String, name: &'static str, kind: &str, last: &mut Option<&'static str>| {
            if *last != Some(name) {
                if let Some(text) = help.get(name) {
                    let _ = writeln!(out, "# HELP {name} {text}");
                }
                let _ = writeln!(out, "# TYPE {name} {kind}");
                *last = Some(name);
            }
        };
        let mut last = None;
        for ((name, labels), value) in self.counters.read().unwrap_or_else(|p| p.into_inner()).iter() {
            header(&mut out, name, "counter", &mut last);
            let _ = writeln!(out, "{name}{} {}", render_labels(labels, None), value.load(Ordering::Relaxed));
        }
        for ((name, labels), value) in self.sums.read().unwrap_or_else(|p| p.into_inner()).iter() {
            header(&mut out, name, "counter", &mut last);
            let _ = writeln!(
                out,
                "{name}{} {}",
                render_labels(labels, None),
                f64::from_bits(value.load(Ordering::Relaxed))
            );
        }
        for ((name, labels), histogram) in self.histograms.read().unwrap_or_else(|p| p.into_inner()).iter() {
            header(&mut out, name, "histogram", &mut last);
            for (bound, bucket) in BUCKETS.iter().zip(&histogram.buckets) {
                let le = bound.to_string();
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    render_labels(labels, Some(&le)),
                    bucket.load(Ordering::Relaxed)
                );
            }
            let count = histogram.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{} {count}", render_labels(labels, Some("+Inf")));
            let sum = histogram.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum{} {sum}", render_labels(labels, None));
            let _ = writeln!(out, "{name}_count{} {count}", render_labels(labels, None));
        }
        let mut last_gauge = None;
        for (name, text, labels, value) in gauges {
            if last_gauge != Some(*name) {
                let _ = writeln!(out, "# HELP {name} {text}\n# TYPE {name} gauge");
                last_gauge = Some(*name);
            }
            let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
        }
        out
    }
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{name}=\"{}\"", escape(value));
    }
    if let Some(le) = le {
        if !labels.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "le=\"{le}\"");
    }
    out.push('}');
    out
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_render_in_the_text_format() {
        let metrics = Metrics::new();
        metrics.describe("x_total", "Things.");
        metrics.increment("x_total", vec![("route", "a\"b".to_owned())], 2);
        metrics.observe("lat_seconds", vec![], 0.003);
        let text = metrics.render(&[("g", "A gauge.", vec![("t", "p:m".to_owned())], 1.0)]);
        assert!(
            text.contains("# HELP x_total Things.\n# TYPE x_total counter\nx_total{route=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("lat_seconds_bucket{le=\"0.0025\"} 0\n"), "{text}");
        assert!(text.contains("lat_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("lat_seconds_count 1\n"), "{text}");
        assert!(text.contains("g{t=\"p:m\"} 1\n"), "{text}");
    }
}
