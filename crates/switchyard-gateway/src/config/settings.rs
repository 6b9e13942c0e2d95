//! The gateway's own settings, as checked: keys, body and connection limits, the Responses
//! API's store bounds, and what assembly adds (the shared store, drills, traces).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use switchyard::credential::Secret;
use switchyard_pacing::LimitPacer;
use switchyard_state::RedisStore;

use crate::drills::Drills;
use crate::telemetry::TelemetrySettings;

/// Gateway settings that are not routing.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// `gateway.keys`: the keys clients send (none: no key needed), with their rules and
    /// what each has used.
    pub keys: crate::keys::ClientKeys,
    /// `gateway.admin_key`: the key of `/admin` and, beyond loopback, `/metrics`.
    pub admin_key: Option<Secret>,
    /// `gateway.max_body`: the largest request body, in bytes.
    pub max_body: usize,
    /// `gateway.recent_requests`: how many finished requests the history keeps.
    pub recent_requests: usize,
    /// `gateway.shutdown_grace`: how long open streams may run on at shutdown.
    pub shutdown_grace: Duration,
    /// `gateway.open`: an open relay beyond loopback, on purpose.
    pub open: bool,
    /// `gateway.metrics_open`: `/metrics` beyond loopback without the admin key.
    pub metrics_open: bool,
    /// `gateway.direct_targets`: whether clients may name a `provider:model` target; off, only
    /// routes (patterns included) are models a client can send.
    pub direct_targets: bool,
    /// The connection rules every client connection is held to.
    pub connections: ConnectionLimits,
    /// `gateway.threads`: serving threads, each one event loop (`--threads` comes first;
    /// default one per core). Fixed at start.
    pub threads: Option<NonZeroUsize>,
    /// The fleet's shared state (`state:`), when configured; started by `serve`.
    pub shared_state: Option<Arc<RedisStore>>,
    /// The HTTP providers' adapters, which a reload reuses where a provider's settings did not
    /// change.
    pub(crate) adapters: Arc<crate::config::assemble::BuiltAdapters>,
    /// The pacer assembly made of the providers' limits, when some provider has limits: a
    /// reload hands its lanes on ([`LimitPacer::reconfigured`]).
    pub pacer: Option<Arc<LimitPacer>>,
    /// The bounds of the Responses API's conversation store (`gateway.responses`).
    pub responses: ResponsesBounds,
    /// The providers fault drills can change (`POST /admin/simulated/{provider}`).
    pub drills: Drills,
    /// Where traces go, when they are exported (`telemetry:` or the `OTEL_*` environment).
    pub telemetry: Option<TelemetrySettings>,
    /// The providers spoken to in the Responses API itself (OpenAI, Azure, and
    /// `openai_compatible` ones with `responses: native`); the others get it translated.
    pub responses_native: Vec<String>,
    /// The providers that may write Claude's Messages bodies (Anthropic's, and Vertex's and
    /// Bedrock's), with their kind: of their models, those that speak the Messages API
    /// ([`ProviderKind::speaks_messages`](switchyard_providers::ProviderKind::speaks_messages))
    /// are the only ones that read Claude's signed thinking of earlier turns, and an Anthropic
    /// client's fields that no other dialect has.
    pub anthropic_providers: Vec<(String, switchyard_providers::ProviderKind)>,
}

/// How much of the Responses API's conversations the gateway keeps: the oldest go first when
/// a bound is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesBounds {
    /// Responses kept at most.
    pub max_entries: usize,
    /// How long one is kept.
    pub max_age: Duration,
    /// The most bytes they may take together (their JSON, as stored).
    pub max_bytes: usize,
}

impl Default for ResponsesBounds {
    /// 10,000 responses, 24 hours, 256 MiB.
    fn default() -> Self {
        Self { max_entries: 10_000, max_age: Duration::from_secs(24 * 3600), max_bytes: 256 << 20 }
    }
}

/// How long a client connection may take and how many may be open: what keeps a client that
/// opens connections and never finishes a request from holding the gateway's descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A connection that has not sent a complete request head by then is closed (with a 408
    /// when it had started one). The first head's clock starts at accept, a later one's at
    /// its first byte.
    pub header_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A request whose body goes this long without a byte, while its handler reads it, is
    /// answered `408` and its connection closed.
    pub body_timeout: Duration,
    /// A response the client takes no byte of for this long (it stopped reading) ends its
    /// connection: a client that never reads cannot hold a connection, its upstream call and
    /// what is buffered for it. A slow reader that takes some bytes is not cut.
    pub send_timeout: Duration,
    /// Connections open at once; at the bound the gateway stops accepting until some close.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The defaults: 30 s for a head, 75 s idle, 30 s without a byte of a body, 60 s without
    /// a byte taken by the client, and [`default_max_connections`].
    pub fn defaults() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            body_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            max_connections: default_max_connections(),
        }
    }
}

/// The smaller of 10,000 and 80% of this process's descriptor limit (the rest is left for
/// upstream connections, logs and the listener). 10,000 where the limit cannot be read.
pub fn default_max_connections() -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| {
        let line = text.lines().find(|line| line.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    match limit {
        Some(limit) => (limit / 10 * 8).clamp(1, 10_000),
        None => 10_000,
    }
}
