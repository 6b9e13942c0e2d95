//! A log-linear latency histogram in the spirit of HdrHistogram: values below
//! [`SUB_BUCKETS`] are counted exactly, larger ones in buckets whose width is at most
//! 1/128 of their value, so every percentile is within 0.8% of the true sample while the
//! memory stays fixed (about 60 KB) however long the run.
//!
//! ```ignore
//! let mut h = Histogram::new();
//! h.record(1_250); // microseconds
//! assert_eq!(h.percentile(50.0), 1_250);
//! ```

/// Values below this are counted exactly; above it each power-of-two range is split into
/// `SUB_BUCKETS / 2` equal buckets.
const SUB_BUCKETS: u64 = 256;
/// log2 of [`SUB_BUCKETS`].
const SUB_BITS: u32 = 8;
/// Buckets per power-of-two range above the exact region.
const HALF: u64 = SUB_BUCKETS / 2;
/// Exact region plus one range for every magnitude from `SUB_BITS` to 63.
const BUCKETS: usize = (SUB_BUCKETS + (64 - SUB_BITS as u64) * HALF) as usize;

/// Counts of recorded values (the unit is the caller's; the bench records microseconds).
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self { counts: vec![0; BUCKETS], total: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    /// Counts one value.
    pub fn record(&mut self, value: u64) {
        self.counts[index(value)] += 1;
        self.total += 1;
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Adds every count of `other` (per-worker histograms are merged at the end of a run).
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded, exactly (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The smallest value recorded, exactly (0 when empty).
    pub fn min(&self) -> u64 {
        if self.total == 0 { 0 } else { self.min }
    }

    /// The arithmetic mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.sum as f64 / self.total as f64 }
    }

    /// The value at or below which `pct` percent of the values lie (nearest-rank), reported
    /// as the middle of its bucket and clamped to the exact min and max; 0 when empty.
    pub fn percentile(&self, pct: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        // Nearest rank: the smallest value whose cumulative count reaches ceil(p * n).
        let rank = ((pct.clamp(0.0, 100.0) / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, high) = bounds(i);
                return (low + (high - low) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

/// The bucket of `value`.
fn index(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let magnitude = 63 - value.leading_zeros(); // floor(log2 value) >= SUB_BITS
    let shift = magnitude - (SUB_BITS - 1);
    let top = value >> shift; // in [HALF, SUB_BUCKETS)
    (SUB_BUCKETS + u64::from(magnitude - SUB_BITS) * HALF + (top - HALF)) as usize
}

/// The smallest and largest value that land in bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return (i, i);
    }
    let range = (i - SUB_BUCKETS) / HALF;
    let top = (i - SUB_BUCKETS) % HALF + HALF;
    let shift = range as u32 + 1;
    let low = top << shift;
    (low, low + ((1u64 << shift) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), 50);
        assert_eq!(h.percentile(90.0), 90);
        assert_eq!(h.percentile(99.0), 99);
        assert_eq!(h.percentile(100.0), 100);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 100);
        assert!((h.mean() - 50.5).abs() < 1e-9);
    }

    #[test]
    fn large_values_are_within_one_percent() {
        let mut h = Histogram::new();
        let values: Vec<u64> = (1..=10_000u64).map(|i| i * 997).collect();
        for &v in &values {
            h.record(v);
        }
        for pct in [50.0, 90.0, 99.0, 99.9] {
            let rank = ((pct / 100.0) * values.len() as f64).ceil() as usize;
            let exact = values[rank - 1] as f64;
            let got = h.percentile(pct) as f64;
            assert!((got - exact).abs() / exact < 0.01, "p{pct}: {got} vs {exact}");
        }
        assert_eq!(h.max(), 10_000 * 997);
    }

    #[test]
    fn every_value_lands_in_a_bucket_that_contains_it() {
        for v in [0, 1, 255, 256, 257, 511, 512, 1_000_000, u64::MAX / 3, u64::MAX] {
            let (low, high) = bounds(index(v));
            assert!(low <= v && v <= high, "{v} not in [{low}, {high}]");
            assert!(index(v) < BUCKETS);
        }
    }

    #[test]
    fn buckets_are_contiguous() {
        for i in 1..BUCKETS {
            assert_eq!(bounds(i - 1).1 + 1, bounds(i).0, "gap before bucket {i}");
        }
    }

    #[test]
    fn empty_histogram_reports_zero() {
        let h = Histogram::new();
        assert_eq!(h.percentile(99.0), 0);
        assert_eq!(h.max(), 0);
        assert_eq!(h.min(), 0);
        assert_eq!(h.mean(), 0.0);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        let mut both = Histogram::new();
        for v in 0..5_000u64 {
            let value = v * v % 100_003;
            if v % 2 == 0 {
                a.record(value)
            } else {
                b.record(value)
            }
            both.record(value);
        }
        a.merge(&b);
        assert_eq!(a.count(), both.count());
        for pct in [1.0, 50.0, 99.0, 100.0] {
            assert_eq!(a.percentile(pct), both.percentile(pct));
        }
        assert_eq!(a.max(), both.max());
    }

    #[test]
    fn one_slow_outlier_shows_in_p99_only_when_it_is_one_percent() {
        let mut h = Histogram::new();
        for _ in 0..99 {
            h.record(1_000);
        }
        h.record(50_000);
        // 100 samples: p99 is the 99th value, still the fast one; max shows the outlier.
        assert!(h.percentile(99.0) < 1_010);
        assert_eq!(h.max(), 50_000);
        h.record(50_000);
        assert!(h.percentile(99.0) > 49_000);
    }
}
