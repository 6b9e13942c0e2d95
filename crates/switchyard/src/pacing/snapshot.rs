//! What a pacer shows operators of its lanes ([`Pacer::snapshot`](super::Pacer::snapshot)):
//! concurrency, buckets, the budgets the provider's headers state, and a fleet's share.

use crate::credential::CredentialId;
use crate::ratelimit::RateLimits;

/// The allowance of one lane right now, for operators.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LaneSnapshot {
    /// The paced provider.
    pub provider: String,
    /// Set when each key of the provider has its own allowance.
    pub credential_id: Option<CredentialId>,
    /// Calls sent whose permits are still held (streams until they end), counted whether or
    /// not `max_concurrent` is set.
    pub in_flight: u32,
    /// The configured bound on calls in flight, if any.
    pub max_concurrent: Option<u32>,
    /// Requests the bucket holds now (negative: debt being paid back).
    pub requests_available: Option<f64>,
    /// Tokens the bucket holds now (negative: debt being paid back).
    pub tokens_available: Option<f64>,
    /// How long the provider's headers still hold requests back.
    pub held_for_ms: Option<f64>,
    /// The allowance the provider's headers state, as this lane counts it now.
    pub headers: HeadersSnapshot,
    /// What the provider's headers said last.
    pub learned: Option<RateLimits>,
    /// With shared pacing: the fleet's buckets and header budget, and this replica's lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSnapshot>,
}

/// The budget learned from a provider's headers, per dimension it states.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct HeadersSnapshot {
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Requests, as `x-ratelimit-*-requests` or `anthropic-ratelimit-requests-*` state them.
    pub requests: Option<StatedSnapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Tokens (OpenAI's `-tokens`, Anthropic's `tokens-*`).
    pub tokens: Option<StatedSnapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Anthropic's `input-tokens-*`.
    pub input_tokens: Option<StatedSnapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Anthropic's `output-tokens-*`.
    pub output_tokens: Option<StatedSnapshot>,
}

/// One dimension of a header budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StatedSnapshot {
    /// The window's whole allowance, when the provider says.
    pub limit: Option<u64>,
    /// Left in this window, with this lane's calls in flight counted.
    pub remaining: u64,
    /// Until the window refills; `None` when no answer has said yet.
    pub reset_in_ms: Option<u64>,
}

/// A lane's view of the fleet, for `/admin/health`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FleetSnapshot {
    /// `shared` (from leased slices) or `degraded` (at this replica's share).
    pub mode: &'static str,
    /// The fleet size this lane divides by when degraded.
    pub replicas: usize,
    /// The fleet's buckets as of the last lease.
    pub bucket: FleetLevels,
    /// What this replica holds leased and unspent.
    pub lease: FleetLevels,
    /// While degraded: what this replica's share holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<FleetLevels>,
    /// Leased units that expired unspent since start.
    pub stranded: FleetLevels,
    /// The budget the provider's headers state, as the fleet counts it.
    pub headers: HeadersSnapshot,
}

/// Requests and tokens, for the dimensions the lane has.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct FleetLevels {
    /// Requests.
    pub requests: Option<f64>,
    /// Tokens.
    pub tokens: Option<f64>,
}
