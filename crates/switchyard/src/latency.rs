//! How fast each target answers: a decaying percentile sketch per target, fed by every
//! attempt, read by latency-aware rotation and shown to operators.
//!
//! An attempt's latency is its time to the first content (streams) or to the whole answer
//! (non-streamed). A failed attempt whose failure says the provider is slow or broken
//! (timeouts, transport and 5xx failures, broken answers) counts as its elapsed time, so a
//! target that hangs never looks fast; failures that say nothing about speed (a rate limit, an
//! invalid request) are not counted.
//!
//! The sketch keeps counts in logarithmic buckets, each 10% wider than the one below, from
//! 0.1 ms to about 30 minutes; a quantile is read as its bucket's geometric middle, so it is
//! within 5% of the true value of the samples counted. Counts halve every [`HALF_LIFE`]: the
//! sketch describes the last minute or so, and an old slow spell fades.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::Target;

/// How long a sample takes to count half as much.
pub const HALF_LIFE: Duration = Duration::from_secs(30);

/// The ratio of one bucket's bounds: 10% wider each.
const GROWTH: f64 = 1.1;
/// The lower bound of the first bucket, in milliseconds; faster samples count there.
const FLOOR_MS: f64 = 0.1;
/// Buckets: 0.1 ms · 1.1^168 ≈ 30 min.
const BUCKETS: usize = 168;

/// p50, p95 and p99 of a target's recent latency. As JSON: `p50_ms`, `p95_ms`, `p99_ms`
/// (milliseconds, to the microsecond) and `samples`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    /// The median.
    pub p50: Duration,
    /// The 95th percentile.
    pub p95: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// How many samples the figures stand on, decayed (a sample a half-life old counts 0.5).
    pub samples: f64,
}

impl serde::Serialize for LatencySummary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let ms = |d: Duration| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("p50_ms", &ms(self.p50))?;
        map.serialize_entry("p95_ms", &ms(self.p95))?;
        map.serialize_entry("p99_ms", &ms(self.p99))?;
        map.serialize_entry("samples", &((self.samples * 100.0).round() / 100.0))?;
        map.end()
    }
}

/// A decaying percentile sketch. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct LatencySketch {
    counts: Box<[f64; BUCKETS]>,
    total: f64,
    decayed_at: Instant,
}

impl LatencySketch {
    /// An empty sketch.
    pub fn new(now: Instant) -> Self {
        Self { counts: Box::new([0.0; BUCKETS]), total: 0.0, decayed_at: now }
    }

    /// Counts one sample of `latency`, at `now`.
    pub fn record(&mut self, latency: Duration, now: Instant) {
        self.decay(now);
        let bucket = bucket_of(latency);
        self.counts[bucket] += 1.0;
        self.total += 1.0;
    }

    /// Ages the counts to `now`.
    fn decay(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.decayed_at);
        // Decaying in steps of a tenth of the half-life keeps the cost off most samples.
        if elapsed < HALF_LIFE / 10 {
            return;
        }
        let factor = 0.5f64.powf(elapsed.as_secs_f64() / HALF_LIFE.as_secs_f64());
        for count in self.counts.iter_mut() {
            *count *= factor;
        }
        self.total *= factor;
        self.decayed_at = now;
    }

    /// The quantile `q` (0 to 1) of the samples, as of `now`; `None` before any sample.
    pub fn quantile(&mut self, q: f64, now: Instant) -> Option<Duration> {
        self.decay(now);
        if self.total <= 0.0 {
            return None;
        }
        let wanted = q.clamp(0.0, 1.0) * self.total;
        let mut seen = 0.0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted && *count > 0.0 {
                return Some(middle_of(bucket));
            }
        }
        self.counts.iter().rposition(|c| *c > 0.0).map(middle_of)
    }

    /// p50, p95, p99 and the sample weight, as of `now`; `None` before any sample.
    pub fn summary(&mut self, now: Instant) -> Option<LatencySummary> {
        Some(LatencySummary {
            p50: self.quantile(0.5, now)?,
            p95: self.quantile(0.95, now)?,
            p99: self.quantile(0.99, now)?,
            samples: self.total,
        })
    }
}

/// The bucket `latency` counts in.
fn bucket_of(latency: Duration) -> usize {
    let ms = latency.as_secs_f64() * 1000.0;
    if ms <= FLOOR_MS {
        return 0;
    }
    ((ms / FLOOR_MS).ln() / GROWTH.ln()).floor().clamp(0.0, (BUCKETS - 1) as f64) as usize
}

/// The geometric middle of `bucket`: within 5% of anything the bucket holds.
fn middle_of(bucket: usize) -> Duration {
    let low = FLOOR_MS * GROWTH.powi(bucket as i32);
    Duration::from_secs_f64(low * GROWTH.sqrt() / 1000.0)
}

/// Every target's sketch. Local to the process: latency is what this replica sees.
#[derive(Debug, Default)]
pub struct LatencyBoard {
    sketches: Mutex<HashMap<Target, LatencySketch>>,
}

impl LatencyBoard {
    /// Counts one attempt of `target` taking `latency`.
    pub fn record(&self, target: &Target, latency: Duration) {
        let now = Instant::now();
        let mut sketches = self.sketches.lock().unwrap_or_else(|p| p.into_inner());
        match sketches.get_mut(target) {
            Some(sketch) => sketch.record(latency, now),
            None => {
                let mut sketch = LatencySketch::new(now);
                sketch.record(latency, now);
                sketches.insert(target.clone(), sketch);
            }
        }
    }

    /// `target`'s recent latency; `None` before its first counted attempt.
    pub fn summary(&self, target: &Target) -> Option<LatencySummary> {
        let mut sketches = self.sketches.lock().unwrap_or_else(|p| p.into_inner());
        sketches.get_mut(target)?.summary(Instant::now())
    }

    /// `target`'s recent quantile `q`, with the sample weight it stands on.
    pub fn quantile(&self, target: &Target, q: f64) -> Option<(Duration, f64)> {
        let mut sketches = self.sketches.lock().unwrap_or_else(|p| p.into_inner());
        let sketch = sketches.get_mut(target)?;
        let now = Instant::now();
        Some((sketch.quantile(q, now)?, sketch.total))
    }

    /// Forgets the sketches of `targets` (a reconfiguration removed or changed them).
    pub fn forget(&self, targets: &[Target]) {
        let mut sketches = self.sketches.lock().unwrap_or_else(|p| p.into_inner());
        for target in targets {
            sketches.remove(target);
        }
    }

    /// The targets with a sketch.
    pub fn targets(&self) -> Vec<Target> {
        self.sketches.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// Every target's recent latency.
    pub fn all(&self) -> Vec<(Target, LatencySummary)> {
        let now = Instant::now();
        let mut sketches = self.sketches.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<_> = sketches
            .iter_mut()
            .filter_map(|(target, sketch)| Some((target.clone(), sketch.summary(now)?)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ms(n: f64) -> Duration {
        Duration::from_secs_f64(n / 1000.0)
    }

    proptest! {
        /// Whatever the samples, a quantile read is within 5% of the true quantile's value.
        #[test]
        fn a_quantile_is_within_five_percent_of_the_samples(
            mut samples in proptest::collection::vec(0.2f64..600_000.0, 1..300),
            q in 0.0f64..1.0,
        ) {
            let now = Instant::now();
            let mut sketch = LatencySketch::new(now);
            for sample in &samples {
                sketch.record(ms(*sample), now);
            }
            samples.sort_by(f64::total_cmp);
            // The sample at rank ⌈q·n⌉ (the sketch's definition).
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            let truth = samples[rank - 1];
            let read = sketch.quantile(q, now).unwrap().as_secs_f64() * 1000.0;
            prop_assert!((read - truth).abs() <= truth * 0.05 + 1e-9, "q {q}: read {read}, truth {truth}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn old_samples_fade_so_a_recovered_target_looks_fast_again() {
        let now = Instant::now();
        let mut sketch = LatencySketch::new(now);
        for _ in 0..100 {
            sketch.record(ms(2000.0), now);
        }
        assert!(sketch.quantile(0.5, now).unwrap() > ms(1900.0));
        tokio::time::advance(HALF_LIFE * 4).await;
        let later = Instant::now();
        for _ in 0..20 {
            sketch.record(ms(100.0), later);
        }
        // 100 slow samples four half-lives old weigh 6.25; 20 fresh fast ones outweigh them.
        let p50 = sketch.quantile(0.5, later).unwrap();
        assert!(p50 < ms(110.0) && p50 > ms(90.0), "{p50:?}");
        assert!(sketch.quantile(0.99, later).unwrap() > ms(1900.0), "the tail still shows the old spell");
        let summary = sketch.summary(later).unwrap();
        assert!((summary.samples - 26.25).abs() < 0.01, "{}", summary.samples);
    }

    #[test]
    fn extremes_land_in_the_end_buckets() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_secs(24 * 3600)), BUCKETS - 1);
    }
}
