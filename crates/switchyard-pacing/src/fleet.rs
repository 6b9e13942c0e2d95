//! Pacing as one fleet: the lanes of several replicas spend one account's allowance.
//!
//! A lane with a [`FleetPacing`] leases small *slices* of the fleet's buckets (requests and
//! tokens per minute, and the windows the provider's headers state) and spends them locally,
//! so a request costs no round trip while the lane holds a slice. The next slice is asked for
//! in the background once less than half of one is left; a slice not spent within
//! [`SLICE_TTL`] (or by the end of the header window it came from) expires, and what is left
//! at shutdown goes back.
//!
//! The slice of an allowance of `L` per window among `N` replicas is `clamp(⌈L/100⌉, 1,
//! ⌊L/(4N)⌋)`: 1% of the allowance, never so much that the replicas' slices together hold
//! more than a quarter of it. Leasing never admits more than the fleet's bucket holds; what a
//! slice can shift is *when*: units leased in one window and spent in the next. Over any
//! stretch of time the fleet dispatches at most the bucket's burst, plus its rate times the
//! stretch, plus the slices outstanding, at most `N` slices (≤ N% of the allowance, and never
//! more than a quarter of it). Expired slices are stranded: they go unspent, never over.
//!
//! When the fleet cannot be reached (degraded), every lane paces at its *share*: the allowance
//! divided by the last known fleet size, until the fleet answers again. `max_concurrent` and
//! `min_interval` are never shared: they stay per replica.
//!
//! A shared store (`switchyard-state`'s `RedisStore`) implements [`FleetPacing`] and tells the
//! lanes what other replicas learned through [`FleetSink`]; the types here are what passes
//! between them. The lease arithmetic is `fleet/book.rs`, a lane's link to the fleet
//! `fleet/gate.rs`.

use std::sync::Weak;
use std::time::Duration;

use switchyard::provider::BoxFuture;

mod book;
mod gate;

pub(crate) use book::{LeaseBook, Taken, Uncounted};
pub(crate) use gate::FleetGate;

/// How many dimensions a lease covers: the requests and tokens buckets, then the header
/// windows of requests, tokens, input tokens and output tokens.
pub const DIMENSIONS: usize = 6;

/// Index of the requests-per-minute bucket.
pub const RPM: usize = 0;
/// Index of the tokens-per-minute bucket.
pub const TPM: usize = 1;
/// Index of the first header window (requests; then tokens, input and output tokens).
pub const HEADERS: usize = 2;

/// How long a leased slice may be spent. Past it, what is left of it is stranded.
pub const SLICE_TTL: Duration = Duration::from_secs(2);

/// The least time between two lease calls of a lane whose fleet said to wait.
const MIN_RETRY: Duration = Duration::from_millis(5);

/// How long a lane whose lease went unanswered paces at its share before it asks the fleet
/// again: the share's bucket starts full (a second's share) and refills for that second, so
/// the fleet's bucket is passed by at most about two seconds' share, once per silence.
const UNREACHED: Duration = Duration::from_secs(1);

/// The slice of an allowance of `per_window` among `replicas`: 1% of it, at least 1, and at
/// most a quarter of the allowance split among the replicas.
///
/// ```
/// use switchyard_pacing::fleet::slice_size;
/// assert_eq!(slice_size(300.0, 3), 3.0);
/// assert_eq!(slice_size(100_000.0, 4), 1_000.0);
/// assert_eq!(slice_size(20.0, 3), 1.0, "small allowances go one unit at a time");
/// assert_eq!(slice_size(1_000.0, 100), 2.0, "never a quarter of the allowance in slices");
/// ```
pub fn slice_size(per_window: f64, replicas: usize) -> f64 {
    let replicas = replicas.max(1) as f64;
    let most = (per_window / (4.0 * replicas)).floor().max(1.0);
    (per_window / 100.0).ceil().clamp(1.0, most)
}

/// What a lane's fleet bucket is: it holds `capacity` and refills `per_sec`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketSpec {
    /// The burst the fleet's bucket holds (one second's share, at least one unit).
    pub capacity: f64,
    /// Units per second.
    pub per_sec: f64,
}

/// What a lane asks the fleet for, per dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseAsk {
    /// The least worth granting: what a waiting call needs (0 for a prefetch). When some
    /// dimension cannot grant its need, nothing is granted.
    pub need: [f64; DIMENSIONS],
    /// The slice wanted.
    pub want: [f64; DIMENSIONS],
    /// The buckets (requests, tokens) of the lane; a dimension without one is not leased.
    pub buckets: [Option<BucketSpec>; 2],
    /// Each bucket's level as this replica last heard it from the fleet, refilled to now:
    /// where a fleet that lost the bucket (its Redis restarted empty) starts it, rather than
    /// full, which would give the fleet a new burst at every restart; `None` when unknown.
    pub seen: [Option<f64>; 2],
}

/// What the fleet granted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaseGrant {
    /// Units granted per dimension.
    pub granted: [f64; DIMENSIONS],
    /// The fleet's level per dimension after the grant; `None` for a header window the fleet
    /// knows nothing of (not paced by the fleet).
    pub level: [Option<f64>; DIMENSIONS],
    /// The header windows the fleet knows of: their limit and how long they still run.
    pub windows: [Option<Window>; 4],
    /// Nothing granted: when the need could be met.
    pub retry_in: Option<Duration>,
    /// A 429's hold on the account, still running.
    pub hold: Option<Duration>,
}

/// One header window as the fleet knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// The window's allowance, when the provider stated it.
    pub limit: Option<u64>,
    /// How long the window still runs.
    pub ends_in: Duration,
    /// A probe window: the last one reset and no answer has stated the next yet (one
    /// request goes to learn it).
    pub probe: bool,
}

/// One header dimension of a report: the allowance as the lane now counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StatedReport {
    /// The window's whole allowance, when the provider says.
    pub limit: Option<u64>,
    /// The stated `remaining` less the lane's own calls in flight.
    pub remaining: f64,
    /// How long until the window resets, when the provider says.
    pub reset_in: Option<Duration>,
    /// What the answered call cost this dimension when it took none of the fleet's units of
    /// it (it went before this replica knew the window, or out of the fleet's reach): the
    /// provider counted it and the fleet did not, so a running window counts it too. 0 for a
    /// call the fleet counted.
    pub uncounted: f64,
}

/// What one answer's headers told a lane, for the fleet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetReport {
    /// Per header dimension (requests, tokens, input and output tokens).
    pub stated: [Option<StatedReport>; 4],
    /// A 429's hold (its Retry-After).
    pub hold: Option<Duration>,
}

/// The fleet a lane leases from: implemented by a shared-state backend (Redis).
pub trait FleetPacing: Send + Sync + 'static {
    /// Leases a slice of the lane's buckets; `None` when the fleet cannot be reached.
    fn lease(&self, lane: &str, ask: LeaseAsk) -> BoxFuture<'static, Option<LeaseGrant>>;
    /// Tells the fleet what the provider's headers said (lowering its windows, or opening
    /// them) and any hold a 429 imposed. Fire and forget.
    fn report(&self, lane: &str, report: FleetReport);
    /// Gives unspent units of the buckets back. Fire and forget.
    fn give_back(&self, lane: &str, units: [f64; 2], buckets: [Option<BucketSpec>; 2]);
    /// Whether the fleet answers now; while it does not, lanes pace at their share.
    fn shared(&self) -> bool;
    /// The fleet's size as last known (at least 1).
    fn replicas(&self) -> usize;
    /// Where to tell lanes what other replicas learned (holds, new header windows).
    fn watch(&self, sink: Weak<dyn FleetSink>);
}

/// What the fleet tells this process's lanes.
pub trait FleetSink: Send + Sync {
    /// Another replica met a 429 holding the account for `hold`.
    fn held(&self, lane: &str, hold: Duration);
    /// Another replica learned a window of the lane's header dimension `header` (0 requests,
    /// 1 tokens, 2 input tokens, 3 output tokens): lease against it from now on.
    fn window_opened(&self, lane: &str, header: usize);
    /// At shutdown: every lane's unspent bucket units, given back to the fleet.
    fn surrender(&self);
}
