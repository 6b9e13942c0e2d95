//! A small Prometheus registry: counters, gauges and histograms with labels, rendered in the
//! text exposition format. Written here rather than pulled in, so that each gateway instance
//! has its own registry (no process-global recorder) and the hot path is a read lock and an
//! atomic add.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A label value: a static string or a shared one, so that recording a sample allocates
/// nothing once its series exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelValue {
    Static(&'static str),
    Shared(Arc<str>),
}

impl LabelValue {
    fn as_str(&self) -> &str {
        match self {
            LabelValue::Static(text) => text,
            LabelValue::Shared(text) => text,
        }
    }
}

impl From<&'static str> for LabelValue {
    fn from(text: &'static str) -> Self {
        LabelValue::Static(text)
    }
}

impl From<Arc<str>> for LabelValue {
    fn from(text: Arc<str>) -> Self {
        LabelValue::Shared(text)
    }
}

impl From<String> for LabelValue {
    fn from(text: String) -> Self {
        LabelValue::Shared(text.into())
    }
}

/// Up to three label pairs: enough for every Switchyard series, and no heap for the key.
pub type Labels = [Option<(&'static str, LabelValue)>; 3];

/// Labels from a list of pairs (at most three; more are a programming error and are dropped).
pub fn labels<const N: usize>(pairs: [(&'static str, LabelValue); N]) -> Labels {
    let mut out: Labels = [None, None, None];
    for (slot, pair) in out.iter_mut().zip(pairs) {
        *slot = Some(pair);
    }
    out
}

type Key = (&'static str, Labels);

/// The Fx hash (rustc's): series keys are short, trusted strings, and SipHash's DoS resistance
/// is wasted on them while it showed in the request path's profile.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Whole words read as they are; only the tail is copied out (a copy of a length known
        // only at run time is a call).
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.write_u64(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let tail = words.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            word[..tail.len()].copy_from_slice(tail);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FxHasher`]s: for maps whose keys the configuration and the code choose, never a
/// client (a client could then pick keys that collide).
pub(crate) type FxBuild = std::hash::BuildHasherDefault<FxHasher>;
type Series<T> = RwLock<HashMap<Key, Arc<T>, FxBuild>>;

/// Upper bounds of histogram buckets, in seconds: 100 µs to 60 s.
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0];

#[derive(Debug, Default)]
struct Histogram {
    /// Samples per bucket, each counted once, in the first bucket whose bound holds it (the
    /// exposition's cumulative counts are summed at render time): one atomic add per sample
    /// instead of one per bucket above it.
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in nanoseconds, so it can be an integer atomic.
    sum_nanos: AtomicU64,
}

/// The registry. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Series<AtomicU64>,
    /// Floating-point counters (cost), stored as f64 bits.
    sums: Series<AtomicU64>,
    histograms: Series<Histogram>,
    help: RwLock<HashMap<&'static str, &'static str>>,
}

/// Runs `record` on the series of `name` and `labels`, creating it on first use. The common
/// case holds the read lock for the duration of one atomic update and touches no reference
/// count.
fn record<T: Default>(map: &Series<T>, name: &'static str, labels: Labels, record: impl FnOnce(&T)) {
    let key = (name, labels);
    if let Some(found) = map.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return record(found);
    }
    record(map.write().unwrap_or_else(|p| p.into_inner()).entry(key).or_default());
}

/// A map's entries sorted by key, for a stable exposition.
fn sorted<T>(map: &Series<T>) -> Vec<(Key, Arc<T>)> {
    let mut entries: Vec<(Key, Arc<T>)> =
        map.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
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
        record(&self.counters, name, labels, |cell| {
            cell.fetch_add(by, Ordering::Relaxed);
        });
    }

    /// Adds to a floating-point counter.
    pub fn add(&self, name: &'static str, labels: Labels, value: f64) {
        record(&self.sums, name, labels, |cell| {
            let mut current = cell.load(Ordering::Relaxed);
            loop {
                let next = (f64::from_bits(current) + value).to_bits();
                match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(actual) => current = actual,
                }
            }
        });
    }

    pub fn observe(&self, name: &'static str, labels: Labels, seconds: f64) {
        record(&self.histograms, name, labels, |histogram| {
            // Past the last bound, a sample is only in `+Inf`, that is in `count`.
            if let Some(bucket) = BUCKETS.iter().position(|bound| seconds <= *bound) {
                histogram.buckets[bucket].fetch_add(1, Ordering::Relaxed);
            }
            histogram.count.fetch_add(1, Ordering::Relaxed);
            histogram.sum_nanos.fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
        });
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
        for ((name, labels), value) in sorted(&self.counters) {
            header(&mut out, name, "counter", &mut last);
            let _ = writeln!(out, "{name}{} {}", render_labels(&labels, None), value.load(Ordering::Relaxed));
        }
        for ((name, labels), value) in sorted(&self.sums) {
            header(&mut out, name, "counter", &mut last);
            let value = f64::from_bits(value.load(Ordering::Relaxed));
            let _ = writeln!(out, "{name}{} {value}", render_labels(&labels, None));
        }
        for ((name, labels), histogram) in sorted(&self.histograms) {
            header(&mut out, name, "histogram", &mut last);
            let mut cumulative = 0;
            for (bound, bucket) in BUCKETS.iter().zip(&histogram.buckets) {
                let le = bound.to_string();
                cumulative += bucket.load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}_bucket{} {cumulative}", render_labels(&labels, Some(&le)));
            }
            let count = histogram.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{} {count}", render_labels(&labels, Some("+Inf")));
            let sum = histogram.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum{} {sum}", render_labels(&labels, None));
            let _ = writeln!(out, "{name}_count{} {count}", render_labels(&labels, None));
        }
        // One family's samples together, each family described once (Prometheus refuses a
        // scrape that types a metric twice): the gauges come per subject (each key's spend,
        // then its budget), so they are grouped by name, each family's order kept.
        let mut gauges: Vec<_> = gauges.iter().collect();
        gauges.sort_by_key(|(name, ..)| *name);
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
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .flatten()
        .map(|(name, value)| (*name, value.as_str()))
        .chain(le.map(|le| ("le", le)))
        .collect();
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{name}=\"{}\"", escape(value));
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
    fn each_gauge_family_is_described_once_its_samples_together() {
        // Two keys' spend and budget, given key by key: one HELP and TYPE a family.
        let key = |name: &'static str| labels([("key", name.into())]);
        let gauges = [
            ("spend", "Spent.", key("a"), 1.0),
            ("budget", "Budget.", key("a"), 10.0),
            ("spend", "Spent.", key("b"), 2.0),
            ("budget", "Budget.", key("b"), 20.0),
        ];
        let text = Metrics::new().render(&gauges);
        assert_eq!(text.matches("# TYPE spend gauge").count(), 1, "{text}");
        assert_eq!(text.matches("# TYPE budget gauge").count(), 1, "{text}");
        assert!(text.contains("# TYPE spend gauge\nspend{key=\"a\"} 1\nspend{key=\"b\"} 2\n"), "{text}");
    }

    #[test]
    fn counters_and_histograms_render_in_the_text_format() {
        let metrics = Metrics::new();
        metrics.describe("x_total", "Things.");
        metrics.increment("x_total", labels([("route", "a\"b".into())]), 2);
        metrics.observe("lat_seconds", labels([]), 0.003);
        let text = metrics.render(&[("g", "A gauge.", labels([("t", "p:m".into())]), 1.0)]);
        assert!(
            text.contains("# HELP x_total Things.\n# TYPE x_total counter\nx_total{route=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("lat_seconds_bucket{le=\"0.0025\"} 0\n"), "{text}");
        assert!(text.contains("lat_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("lat_seconds_count 1\n"), "{text}");
        assert!(text.contains("g{t=\"p:m\"} 1\n"), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let metrics = Metrics::new();
        for seconds in [0.003, 0.02, 0.02, 100.0] {
            metrics.observe("lat_seconds", labels([]), seconds);
        }
        let text = metrics.render(&[]);
        for (le, count) in [("0.0025", 0), ("0.005", 1), ("0.01", 1), ("0.025", 3), ("60", 3), ("+Inf", 4)] {
            let line = format!("lat_seconds_bucket{{le=\"{le}\"}} {count}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains("lat_seconds_count 4\n"), "{text}");
    }
}
