//! Shared health for a fleet of Switchyard replicas, through Redis.
//!
//! [`RedisStore`] is a [`HealthStore`]: hand it to the router builder
//! ([`RouterBuilder::health_store`](switchyard::RouterBuilder::health_store)) and every replica
//! configured with the same Redis and prefix honours the others' exhausted benches, cooldowns
//! (a credential's, and a (credential, model)'s), unauthorized keys, Retry-After holds, health gates, open circuits and operators' resets.
//!
//! The request path never waits for Redis. Every read is of this process's memory (a
//! [`MemoryStore`]); a change the board makes is diffed and handed to a background task that
//! writes it with one atomic Lua script, and that same task applies the other replicas'
//! changes as Redis publishes them, reconciles everything once a second, and resyncs after any
//! reconnect or lost subscription. When Redis is down or stalled the replica carries on from
//! its own memory, reports `degraded`, and writes what it learned back when Redis returns.
//!
//! The store is also a [`FleetPacing`](switchyard_pacing::fleet::FleetPacing): hand it to
//! [`LimitPacer::shared`](switchyard_pacing::LimitPacer::shared) and the requests and
//! tokens per minute, the header-stated budgets and the 429 holds of every lane are one
//! allowance for the fleet, leased to each replica in small slices (see
//! `switchyard_pacing::fleet` for the slice size and the error bound). Call
//! [`RedisStore::close`] at shutdown to give back what was leased and not spent.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use switchyard::Router;
//! use switchyard_state::{RedisStore, StateSettings};
//!
//! let store = Arc::new(RedisStore::new(StateSettings::new("redis://127.0.0.1:6379/0"))?);
//! store.start(); // on the current tokio runtime
//! let router = Router::builder()
//!     .health_store(store.clone())
//!     // .provider(...).route(...)
//!     .build()?;
//! store.publish_events_to(router.events().clone());
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use switchyard::Target;
use switchyard::credential::CredentialId;
use switchyard::events::EventBus;
use switchyard::health::{AllRecords, CredentialRecord, HealthStore, MemoryStore, ProbeClaim, Records};
use tokio::sync::mpsc;

pub mod feed;
pub mod hedges;
mod link;
mod members;
mod pace;
pub mod responses;
mod scripts;
pub use scripts::MOST_RECORDS;
pub mod spend;
#[doc(hidden)]
pub mod testing;
pub mod trails;
pub mod wire;

use wire::{Change, Key};

/// Where the fleet's shared state lives, and how the store talks to it.
#[derive(Clone)]
pub struct StateSettings {
    /// `redis://[user:password@]host:port/db`, or `rediss://` for TLS. Printed only masked
    /// ([`mask_url`]).
    pub url: String,
    /// Prefixes every key and the channel, so that several fleets can share one Redis.
    /// Default `switchyard`.
    pub prefix: String,
    /// This replica's name in the fleet, unique in it ([`RedisStore::claim`]). Default: the
    /// host name (a pod's name in Kubernetes).
    pub replica: String,
    /// The bound on every call to Redis (connecting takes twice as long). Default 250 ms.
    pub timeout: Duration,
    /// How often the replica renews its heartbeat and reconciles every record, the backstop
    /// behind published changes. Default 1 s.
    pub reconcile_every: Duration,
    /// Calls to Redis failing in a row before the replica reports `degraded` and stops
    /// calling it except to probe. Default 3.
    pub failures_to_degrade: u32,
    /// Whether the replica writes its finished requests' trails and its events to Redis, for
    /// the fleet's view ([`trails`], [`feed`]). Default on.
    pub trails: bool,
}

impl StateSettings {
    /// Settings for the Redis at `url`, with every default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "switchyard".to_owned(),
            replica: default_replica_id(),
            timeout: Duration::from_millis(250),
            reconcile_every: Duration::from_secs(1),
            failures_to_degrade: 3,
            trails: true,
        }
    }
}

impl StateSettings {
    /// Checks what [`RedisStore::new`] would refuse of these settings (the prefix, the replica
    /// id, the URL), without connecting.
    pub fn check(&self) -> Result<(), StateError> {
        self.client().map(drop)
    }

    /// The Redis client of the URL, once the prefix and the replica id are found usable.
    fn client(&self) -> Result<redis::Client, StateError> {
        let prefix_ok = !self.prefix.is_empty()
            && self.prefix.len() <= 64
            && self.prefix.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if !prefix_ok {
            return Err(StateError::BadPrefix(self.prefix.clone()));
        }
        let replica_ok = !self.replica.is_empty()
            && self.replica.len() <= 128
            && self.replica.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c));
        if !replica_ok {
            return Err(StateError::BadReplica(self.replica.clone()));
        }
        redis::Client::open(self.url.as_str()).map_err(|error| StateError::BadUrl {
            url: mask_url(&self.url),
            reason: scrub(&error.to_string(), &self.url),
        })
    }
}

impl std::fmt::Debug for StateSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSettings")
            .field("url", &mask_url(&self.url))
            .field("prefix", &self.prefix)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// The host name (a pod's name in Kubernetes), which names a replica unless it is told a name.
fn default_replica_id() -> String {
    host_name()
}

/// This machine's host name, with only the characters a replica id may hold; `host` when
/// none can be read.
pub fn host_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host.chars().filter(|c| c.is_ascii_alphanumeric() || "-._".contains(*c)).collect();
    if host.is_empty() { "host".to_owned() } else { host }
}

/// `url` with its password replaced by `****`, for logs, errors and operator displays: the
/// user info's, and the value of any query parameter that names a secret (`password`, `pass`,
/// a token, a key).
///
/// ```
/// assert_eq!(switchyard_state::mask_url("redis://:hunter2@db:6379/0"), "redis://:****@db:6379/0");
/// assert_eq!(switchyard_state::mask_url("redis://app:hunter2@db/1"), "redis://app:****@db/1");
/// assert_eq!(switchyard_state::mask_url("redis://:ab/c+d=@db/1"), "redis://:****@db/1");
/// assert_eq!(switchyard_state::mask_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// assert_eq!(switchyard_state::mask_url("redis://db/0?password=hunter2&protocol=resp3"), "redis://db/0?password=****&protocol=resp3");
/// assert_eq!(switchyard_state::mask_url("redis://db/0?password=p@ss"), "redis://db/0?password=****");
/// assert_eq!(switchyard_state::mask_url("redis://:pa?ss@db/0"), "redis://:****@db/0");
/// ```
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "(not a URL)".to_owned() };
    // An `@` after a query's `name=` is the query's (`?password=p@ss`), not the user info's end.
    let (rest, query) = match (rest.find('?'), rest.rfind('@')) {
        (Some(q), Some(at)) if q < at && rest[q..at].contains('=') => (&rest[..q], Some(&rest[q + 1..])),
        _ => (rest, None),
    };
    // Up to the last `@`: a password may hold a `/` (base64 does) that a parser would take for
    // the path.
    let (user_info, host_and_path) = match rest.rsplit_once('@') {
        Some((user_info, host_and_path)) => {
            (format!("{}:****@", user_info.split_once(':').map_or("", |(user, _)| user)), host_and_path)
        }
        None => (String::new(), rest),
    };
    let host_and_path =
        match query.map(|query| (host_and_path, query)).or_else(|| host_and_path.split_once('?')) {
            Some((path, query)) => {
                let masked = query.split('&').map(|pair| match pair.split_once('=') {
                    Some((name, _)) if switchyard::credential::names_a_secret(name) => format!("{name}=****"),
                    _ => pair.to_owned(),
                });
                format!("{path}?{}", masked.collect::<Vec<_>>().join("&"))
            }
            None => host_and_path.to_owned(),
        };
    format!("{scheme}://{user_info}{host_and_path}")
}

/// Why a Redis URL holds a password where the client does not read it (a `password=` query
/// parameter: only the user info, `redis://:PASSWORD@host`, is sent), if it does.
pub fn unread_password(url: &str) -> Option<&'static str> {
    // The query follows the user info (whose password may hold a `?`).
    let after_user = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    let query = after_user.split_once('?').or_else(|| url.split_once('?'))?.1;
    query.split('&').any(|pair| pair.split_once('=').is_some_and(|(name, _)| switchyard::credential::names_a_secret(name))).then_some(
        "a password in the query is never sent to Redis: write it as redis://:PASSWORD@host:6379/0 (or rediss:// for TLS)",
    )
}

/// Why a store could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The URL does not parse as a Redis URL.
    #[error("`{url}` is not a Redis URL ({reason}): use redis://host:port/db or rediss:// for TLS")]
    BadUrl {
        /// The URL, masked.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The prefix is empty or holds characters keys should not.
    #[error("prefix `{0}` must be 1 to 64 letters, digits, `-`, `_`, `.` or `:`")]
    BadPrefix(String),
    /// The replica id is empty or holds characters ids should not.
    #[error("replica id `{0}` must be 1 to 128 letters, digits, `-`, `_`, `.`, `:` or `@`")]
    BadReplica(String),
    /// Another live replica of the fleet goes by this replica's name.
    #[error(
        "replica name `{name}` is taken by a live replica of this fleet ({holder}): give this one another name (state.replica, or SWITCHYARD_REPLICA)"
    )]
    NameTaken {
        /// The name.
        name: String,
        /// Who holds it: its host, process id and start time.
        holder: String,
    },
}

/// How the fleet's shared state is doing, as `/admin/health` shows it under `shared_state`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SharedStateStatus {
    /// Always `redis` here (the gateway shows `memory` when no store is configured).
    pub backend: &'static str,
    /// `ok` while Redis answers, `degraded` while this replica runs on its own memory.
    pub status: &'static str,
    /// The Redis URL, masked.
    pub url: String,
    /// The key prefix.
    pub prefix: String,
    /// This replica's id.
    pub replica: String,
    /// The replicas whose heartbeat was alive at the last reconciliation, this one included.
    pub replicas: Vec<Replica>,
    /// Why the store is degraded, while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Changes learned here and not yet written to Redis (resets included).
    pub pending_writes: usize,
}

/// One replica of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replica {
    /// Its id.
    pub id: String,
    /// Its Switchyard version.
    #[serde(default)]
    pub version: String,
    /// The hash of the configuration it runs, as its `/admin/health` shows it (empty from a
    /// replica that does not say, or predates it).
    #[serde(default)]
    pub config_hash: String,
    /// The host it runs on and its process id.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub pid: u32,
    /// When it started, in milliseconds since the Unix epoch (0 from one that does not say).
    #[serde(default)]
    pub started_ms: u64,
    /// The requests it was serving at its last heartbeat.
    #[serde(default)]
    pub in_flight: u64,
    /// What tells this run of the replica from another run under the same name.
    #[serde(default)]
    pub instance: String,
    /// The targets it saw unwell (not `available` or `unknown`, or a circuit not closed) at its
    /// last heartbeat: where its view may differ from another's (a circuit it opened while
    /// Redis was away). At most 64. Left out when empty: Redis's Lua would give an empty
    /// list back as an empty object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwell: Vec<TargetView>,
}

/// One replica's view of one target, as its heartbeat tells it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetView {
    /// `provider:model`.
    pub target: String,
    /// Its health status (`exhausted`, `temporarily_unavailable`, ...).
    pub status: String,
    /// Its circuit: `closed`, `open` or `half_open`.
    pub breaker: String,
}

/// A change for the background task to write.
#[derive(Debug)]
pub(crate) enum Op {
    /// A record changed: `change`, with what the replica knew of the shared record then.
    /// `id` names the write, so that a reset sent twice (its first answer lost) runs once.
    Write { key: Key, change: Change, seen: u64, id: u64 },
    /// An operator forgot everything.
    ResetAll { id: u64 },
}

/// What the request path and the background task share.
pub(crate) struct Shared {
    memory: MemoryStore,
    /// Names each write (see [`Op::Write`]).
    next_op: std::sync::atomic::AtomicU64,
    settings: StateSettings,
    book: Mutex<Book>,
    events: Mutex<Option<EventBus>>,
    /// Whether the link is up and the fleet's size, for pacing.
    fleet: pace::FleetView,
    /// The hash of the configuration this replica runs, told to the fleet with its heartbeat.
    config_hash: Mutex<String>,
    /// What the heartbeat tells of this run of the replica.
    pub(crate) member: members::Member,
    /// Every kind of entries kept in Redis through this store, for the round that writes
    /// again what Redis missed ([`RedisStore::resend_missed`]).
    kept: Mutex<Vec<std::sync::Weak<responses::Entries>>>,
    /// The targets the configuration names: their records are always shared; any other's
    /// only while the fleet keeps fewer than [`MOST_RECORDS`].
    configured: std::sync::RwLock<std::collections::HashSet<Target>>,
    /// How many times Redis was found to have lost the shared records (restarted empty).
    pub(crate) losses: tokio::sync::watch::Sender<u64>,
}

/// The store's bookkeeping of the shared records: the generation each was last seen at, and
/// which have writes of this replica not yet made.
#[derive(Debug)]
pub(crate) struct Book {
    /// The generation of each shared record this replica has applied or written.
    pub seen: HashMap<Key, u64>,
    /// Writes queued and not yet made, per record: another replica's change to a record with
    /// a write pending here waits for the write's answer (the merged record).
    pub pending: HashMap<Key, u32>,
    /// The last status, for `/admin/health`.
    pub status: SharedStateStatus,
    /// Probes waiting to hear whether they are the fleet's, per target record: told once the
    /// record's writes are answered ([`RedisStore::claim_probe`](HealthStore::claim_probe)).
    pub claims: HashMap<Key, Vec<tokio::sync::oneshot::Sender<bool>>>,
}

impl Book {
    /// Tells the probes waiting on `key` whether they are the fleet's, from the record in
    /// memory as the write's answer left it: no when another replica probes, or when the
    /// circuit is open again (another replica's probe failed, or the write was refused for an
    /// open time another replica set); yes when this replica holds the probe, or the circuit
    /// closed meanwhile (an ordinary call).
    pub(crate) fn settle_claims(&mut self, memory: &MemoryStore, key: &Key) {
        let Some(waiting) = self.claims.remove(key) else { return };
        let mine = match key {
            Key::Target(target) => !probed_elsewhere(memory, target),
            _ => true,
        };
        for tell in waiting {
            let _ = tell.send(mine);
        }
    }

    /// Tells every waiting probe to go: Redis cannot be asked, and each replica bounds its
    /// own probes meanwhile.
    pub(crate) fn release_claims(&mut self) {
        for tell in self.claims.drain().flat_map(|(_, waiting)| waiting) {
            let _ = tell.send(true);
        }
    }
}

/// Whether this replica's record of `target` says its probe is not this replica's to send:
/// another replica holds it, or the circuit is open.
fn probed_elsewhere(memory: &MemoryStore, target: &Target) -> bool {
    let mut elsewhere = false;
    memory.update(target, &[], &mut |records| {
        elsewhere = wire::probed_elsewhere(&records.target)
            || matches!(records.target.breaker, switchyard::health::Breaker::Open { .. })
    });
    elsewhere
}

impl Shared {
    /// Whether the fleet bounds its records of `key` ([`MOST_RECORDS`]): a target's (or a key's
    /// rest for one) that the configuration does not name; never a key's own record.
    pub(crate) fn bounded(&self, key: &Key) -> bool {
        let target = match key {
            Key::Target(target) | Key::KeyCooldown { target, .. } => target,
            Key::Credential(_) => return false,
        };
        !self.configured.read().unwrap_or_else(|p| p.into_inner()).contains(target)
    }

    pub(crate) fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn op_id(&self) -> u64 {
        self.next_op.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn publish(&self, kind: switchyard::events::EventKind) {
        let bus = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(bus) = bus {
            bus.publish(kind);
        }
    }
}

/// The health store of a fleet: this process's memory, kept in step with the other replicas'
/// through Redis. See the [crate docs](crate).
pub struct RedisStore {
    shared: Arc<Shared>,
    client: redis::Client,
    ops: mpsc::UnboundedSender<Op>,
    pace: mpsc::UnboundedSender<pace::PaceOp>,
    inbox: Mutex<Option<(mpsc::UnboundedReceiver<Op>, mpsc::UnboundedReceiver<pace::PaceOp>)>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("settings", &self.shared.settings).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for the Redis of `settings`. Nothing connects until [`start`](Self::start):
    /// until then (and whenever Redis is away) it works as this process's memory alone.
    pub fn new(settings: StateSettings) -> Result<Self, StateError> {
        let client = settings.client()?;
        let (ops, inbox) = mpsc::unbounded_channel();
        let (pace, pace_inbox) = mpsc::unbounded_channel();
        let status = link::initial_status(&settings);
        let shared = Arc::new(Shared {
            memory: MemoryStore::default(),
            // From the wall clock's nanoseconds: a replica restarted under the same id (the
            // same host name and process id, as in a container) names its writes anew.
            next_op: std::sync::atomic::AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64),
            ),
            settings,
            book: Mutex::new(Book {
                seen: HashMap::new(),
                pending: HashMap::new(),
                status,
                claims: HashMap::new(),
            }),
            events: Mutex::new(None),
            fleet: pace::FleetView::default(),
            config_hash: Mutex::new(String::new()),
            configured: Default::default(),
            losses: tokio::sync::watch::Sender::new(0),
            member: members::Member::new(),
            kept: Mutex::default(),
        });
        Ok(Self { shared, client, ops, pace, inbox: Mutex::new(Some((inbox, pace_inbox))) })
    }

    /// Starts the background task on the current tokio runtime: it connects, resyncs, applies
    /// the fleet's changes and writes this replica's. Calling it again does nothing. The task
    /// ends, leaving the membership, once the store is dropped.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(&self) {
        let inbox = self.inbox.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((inbox, pace)) = inbox {
            tokio::spawn(link::Link::new(self.shared.clone(), self.client.clone(), inbox, pace).run());
        }
    }

    /// Tells the fleet, from the next heartbeat on, that this replica runs the configuration
    /// of `hash` (each replica lists the others' in [`SharedStateStatus::replicas`]).
    pub fn set_config_hash(&self, hash: &str) {
        *self.shared.config_hash.lock().unwrap_or_else(|p| p.into_inner()) = hash.to_owned();
    }

    /// Publishes `shared_state_degraded` and `shared_state_restored` on `bus` from now on.
    pub fn publish_events_to(&self, bus: EventBus) {
        *self.shared.events.lock().unwrap_or_else(|p| p.into_inner()) = Some(bus);
    }

    /// How the shared state is doing: reachable or not, and the fleet's members.
    pub fn status(&self) -> SharedStateStatus {
        let book = self.shared.book();
        let mut status = book.status.clone();
        // Counted at the source: changes still on their way to the background task count too.
        status.pending_writes = book.pending.values().map(|n| *n as usize).sum();
        status
    }

    /// The settings the store was made with.
    pub fn settings(&self) -> &StateSettings {
        &self.shared.settings
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.shared.settings.replica
    }

    /// How many times Redis was found to have lost the fleet's records (restarted empty, or
    /// flushed) since this store started, changing as it is found: what else this replica
    /// wrote there (client keys' spend) is to be written again then.
    pub fn losses(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.losses.subscribe()
    }

    /// Reads how many requests this replica is serving, for its heartbeat (the operator page
    /// shows every replica's). Once; later calls change nothing.
    pub fn count_in_flight_with(&self, count: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.shared.member.in_flight.set(Box::new(count));
    }

    /// Reads the targets this replica sees unwell, for its heartbeat ([`Replica::unwell`]).
    /// Once; later calls change nothing.
    pub fn describe_targets_with(&self, views: impl Fn() -> Vec<TargetView> + Send + Sync + 'static) {
        let _ = self.shared.member.views.set(Box::new(views));
    }

    /// Claims this replica's name in the fleet before it serves: refused with
    /// [`StateError::NameTaken`] while another live replica holds it. A claim left by a run
    /// that stopped without leaving (killed) lapses with its heartbeat, which this waits for
    /// (three reconcile periods at most). When Redis does not answer, the name is not checked
    /// (`Ok(false)`): the replica serves from its own memory, as it would anyway.
    pub async fn claim(&self) -> Result<bool, StateError> {
        members::claim(&self.shared, &self.client).await
    }

    /// Names `entries` for [`resend_missed`](Self::resend_missed).
    pub(crate) fn keep_resending(&self, entries: &Arc<responses::Entries>) {
        let mut kept = self.shared.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|entries| entries.strong_count() > 0);
        kept.push(Arc::downgrade(entries));
    }

    /// Writes again, kind by kind, what Redis missed of the entries kept through this store
    /// ([`SharedResponses`](responses::SharedResponses)): the periodic round, for a replica
    /// that has no later write to send them after. Off any request's path.
    pub async fn resend_missed(&self) {
        let kinds: Vec<Arc<responses::Entries>> = {
            let kept = self.shared.kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.iter().filter_map(std::sync::Weak::upgrade).collect()
        };
        for entries in kinds {
            entries.resend().await;
        }
    }

    /// Queues `changes` for the background task, noting what this replica knew of each
    /// (read under the same lock as the change was made, so no change applied between the
    /// two can be mistaken for what the replica recovered from).
    fn send(&self, book: &mut Book, changes: Vec<(Key, Change)>) {
        for (key, change) in changes {
            let seen = book.seen.get(&key).copied().unwrap_or(0);
            *book.pending.entry(key.clone()).or_default() += 1;
            let id = self.shared.op_id();
            // The task ends only when the store is dropped, so the send cannot fail while
            // `self` lives.
            let _ = self.ops.send(Op::Write { key, change, seen, id });
        }
    }
}

impl HealthStore for RedisStore {
    fn update(&self, target: &Target, credentials: &[CredentialId], apply: &mut dyn FnMut(&mut Records)) {
        let mut changes = Vec::new();
        // The bookkeeping first, then the memory: the background task takes them in the same
        // order, so it cannot apply another replica's change between this step and its note.
        let mut book = self.shared.book();
        self.shared.memory.update(target, credentials, &mut |records| {
            // What the step started from, to tell what it changed: copied without allocating
            // for the usual handful of keys (this runs around every call).
            let target_before = records.target.clone();
            let mut few: [Option<CredentialRecord>; 4] = Default::default();
            let many: Vec<CredentialRecord> =
                if records.credentials.len() > few.len() { records.credentials.clone() } else { Vec::new() };
            if many.is_empty() {
                for (slot, record) in few.iter_mut().zip(&records.credentials) {
                    *slot = Some(record.clone());
                }
            }
            apply(records);
            changes.clear();
            if let Some(change) = wire::target_change(&target_before, &records.target) {
                changes.push((Key::Target(target.clone()), change));
            }
            changes.extend(wire::key_cooldown_changes(target, &target_before, &records.target));
            for (i, (id, new)) in credentials.iter().zip(&records.credentials).enumerate() {
                let old = if many.is_empty() { few.get(i).and_then(Option::as_ref) } else { many.get(i) };
                if let Some(change) = old.and_then(|old| wire::credential_change(old, new)) {
                    changes.push((Key::Credential(id.clone()), change));
                }
            }
        });
        if !changes.is_empty() {
            self.send(&mut book, changes);
        }
    }

    /// The probe's write goes out as any change does; the probe waits for its answer, in which
    /// Redis has said whose the probe is (a half-open write takes no live lease of another
    /// replica's: `scripts::PUT`), at most twice the store's timeout (then it goes, as it
    /// does at once while Redis is away).
    fn claim_probe(&self, target: &Target) -> Option<ProbeClaim> {
        if !self.shared.fleet.up.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let key = Key::Target(target.clone());
        let mut book = self.shared.book();
        if !book.pending.contains_key(&key) {
            // Answered already, or the probe changed nothing the fleet hears of (another slot
            // of a lease this replica holds): the record says whose the probe is.
            let elsewhere = probed_elsewhere(&self.shared.memory, target);
            return elsewhere.then(|| Box::pin(std::future::ready(false)) as ProbeClaim);
        }
        let (tell, told) = tokio::sync::oneshot::channel();
        book.claims.entry(key).or_default().push(tell);
        let wait = self.shared.settings.timeout * 2;
        Some(Box::pin(async move {
            tokio::time::timeout(wait, told).await.map_or(true, |answer| answer.unwrap_or(true))
        }))
    }

    fn all(&self) -> AllRecords {
        self.shared.memory.all()
    }

    fn forget(&self, target: &Target, credentials: &[CredentialId]) {
        // The step itself queued a reset of each record this replica held; this one reaches
        // the records it did not (queued resets of one record fold into one).
        let rests = credentials
            .iter()
            .map(|credential| Key::KeyCooldown { credential: credential.clone(), target: target.clone() });
        let keys = std::iter::once(Key::Target(target.clone()))
            .chain(credentials.iter().cloned().map(Key::Credential))
            .chain(rests);
        let mut book = self.shared.book();
        self.send(&mut book, keys.map(|key| (key, Change::Reset)).collect());
    }

    fn drop_records(&self, targets: &[Target], credentials: &[CredentialId]) {
        // This replica's copies only: the fleet's records are every replica's, and the others
        // may still run a configuration that names them (they expire by themselves).
        self.shared.memory.drop_records(targets, credentials);
    }

    fn configured(&self, targets: &[Target]) {
        let mut configured = self.shared.configured.write().unwrap_or_else(|p| p.into_inner());
        *configured = targets.iter().cloned().collect();
    }

    fn clear(&self) {
        let mut book = self.shared.book();
        self.shared.memory.clear();
        book.seen.clear();
        let _ = self.ops.send(Op::ResetAll { id: self.shared.op_id() });
    }
}

/// `text` without the URL's password, for errors the client library words.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(user_info, _)| user_info.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match password {
        Some(password) => text.replace(password, "****"),
        None => text.to_owned(),
    }
}

/// What `switchyard doctor` reports of a Redis: whether it answers, and the fleet on it.
pub async fn check(settings: &StateSettings) -> Result<Vec<Replica>, String> {
    link::check(settings).await
}

/// A connection to a store's Redis kept for one use of it (the spend, the trails, the events,
/// kept responses, hedge windows): made on first call and kept; each call bounded by the store's
/// timeout, connecting by twice that with one retry; errors with the URL's password scrubbed.
/// Once Redis let a call time out, the calls on a request's path ([`Kept::retried`]) fail at
/// once for [`QUIET`]: a stalled Redis would else hold every request that asks it for the whole
/// timeout (each falls back on this replica's memory, as it would after the timeout). Writers
/// in the background wait their timeout as before.
pub(crate) struct Kept {
    client: redis::Client,
    /// For scrubbing error texts: it may hold a password.
    url: String,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<redis::aio::ConnectionManager>>,
    /// Until when calls fail at once.
    quiet_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// How long calls fail at once after one Redis did not answer in time.
const QUIET: Duration = Duration::from_secs(1);

impl Kept {
    pub(crate) fn new(store: &RedisStore) -> Self {
        let settings = store.settings();
        Self {
            client: store.client.clone(),
            url: settings.url.clone(),
            timeout: settings.timeout,
            conn: tokio::sync::Mutex::new(None),
            quiet_until: std::sync::Mutex::new(None),
        }
    }

    /// How long one call waits.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The kept connection, made on first use.
    pub(crate) async fn connection(&self) -> Result<redis::aio::ConnectionManager, String> {
        let mut conn = self.conn.lock().await;
        if let Some(conn) = conn.as_ref() {
            return Ok(conn.clone());
        }
        // Callers that queued behind a connect that failed do not each try again.
        self.unless_quiet()?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.timeout))
            .set_connection_timeout(Some(self.timeout * 2))
            .set_number_of_retries(1);
        let made =
            tokio::time::timeout(self.timeout * 4, self.client.get_connection_manager_with_config(config))
                .await
                .map_err(|_| {
                    self.timed_out();
                    "connecting to Redis timed out".to_owned()
                })?
                .map_err(|error| self.scrubbed(&error))?;
        *conn = Some(made.clone());
        Ok(made)
    }

    /// `call` within the timeout: its value, or its error with the URL's password scrubbed,
    /// or that Redis did not answer in time.
    pub(crate) async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            // The connection's own response timeout (the same length) may come first.
            Ok(Err(error)) if error.is_timeout() => Err(self.timed_out()),
            Ok(Err(error)) => Err(self.scrubbed(&error)),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// An error while calls fail at once.
    fn unless_quiet(&self) -> Result<(), String> {
        let quiet = self.quiet_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *quiet {
            Some(until) if tokio::time::Instant::now() < until => {
                Err("Redis did not answer in time lately: asked again in a moment".to_owned())
            }
            _ => Ok(()),
        }
    }

    /// A call timed out: the next ones fail at once for a while.
    fn timed_out(&self) -> String {
        let mut quiet = self.quiet_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *quiet = Some(tokio::time::Instant::now() + QUIET);
        "Redis did not answer in time".to_owned()
    }

    /// `call`, on a request's path, on the kept connection within the timeout, as
    /// [`bounded`](Self::bounded) runs it, or at once an error while Redis is quiet; made once
    /// more when Redis had dropped the connection under it (a restart, its idle `timeout`, a
    /// proxy or a failover between): the connection is remade behind the failure, and a command
    /// that never ran is not lost with it. For calls that may run twice.
    pub(crate) async fn retried<T, F, Fut>(&self, call: F) -> Result<T, String>
    where
        F: Fn(redis::aio::ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.unless_quiet()?;
        let conn = self.connection().await?;
        match tokio::time::timeout(self.timeout, call(conn.clone())).await {
            Ok(Err(error)) if error.is_timeout() => Err(self.timed_out()),
            Ok(Err(error)) if error.is_connection_dropped() || error.is_io_error() => {
                self.bounded(call(conn)).await
            }
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.scrubbed(&error)),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// `error`'s text without the URL's password.
    pub(crate) fn scrubbed(&self, error: &redis::RedisError) -> String {
        scrub(&error.to_string(), &self.url)
    }

    /// A connection of its own (not the kept one), for reads that wait up to `wait`.
    pub(crate) async fn own_connection(
        &self,
        wait: Duration,
    ) -> Result<redis::aio::MultiplexedConnection, String> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout * 4))
            .set_response_timeout(Some(wait + self.timeout * 4));
        tokio::time::timeout(
            self.timeout * 8,
            self.client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| "connecting to Redis timed out".to_owned())?
        .map_err(|error| self.scrubbed(&error))
    }

    /// The URL as configured (it may hold a password), for a reader that scrubs its own errors.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard::health::{Breaker, TargetRecord};
    use tokio::time::Instant;

    use super::*;

    /// The answer a probe waiting on `record` is given.
    fn told(record: TargetRecord) -> bool {
        let target: Target = "openai:gpt-4o".parse().expect("a target");
        let memory = MemoryStore::default();
        memory.edit_target(&target, |held| *held = record);
        let status = link::initial_status(&StateSettings::new("redis://127.0.0.1:1/0"));
        let mut book = Book { seen: HashMap::new(), pending: HashMap::new(), status, claims: HashMap::new() };
        let (tell, mut told) = tokio::sync::oneshot::channel();
        book.claims.insert(Key::Target(target.clone()), vec![tell]);
        book.settle_claims(&memory, &Key::Target(target));
        told.try_recv().expect("told")
    }

    #[tokio::test]
    async fn a_probe_is_the_fleets_only_while_no_other_replica_holds_it_and_no_open_time_runs() {
        let later = Instant::now() + Duration::from_secs(30);
        let half_open = |probes| TargetRecord {
            breaker: Breaker::HalfOpen { probes, lease_until: later },
            ..TargetRecord::default()
        };
        assert!(told(half_open(1)), "this replica holds it");
        assert!(told(TargetRecord::default()), "closed meanwhile: an ordinary call");
        assert!(!told(half_open(u32::MAX)), "another replica holds it");
        assert!(!told(half_open(u32::MAX - 1)), "another's, with a slot of this one given back");
        // The write was refused for an open time another replica set (its probe failed).
        let open = TargetRecord { breaker: Breaker::Open { until: later }, ..TargetRecord::default() };
        assert!(!told(open), "open again: not probed now");
    }
}
