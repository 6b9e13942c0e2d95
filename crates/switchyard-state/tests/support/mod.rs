//! Replicas for the tests: health boards over stores, and waiting for what they share.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use switchyard::credential::CredentialId;
use switchyard::health::{Gate, GateQuery, HealthBoard, HealthSettings, HealthStore, MemoryStore};
use switchyard::{ErrorKind, ProviderError, Target};
use switchyard_state::testing::RedisServer;
use switchyard_state::{RedisStore, StateSettings};

/// How long a change may take to reach the other replicas in these tests: the contract's
/// 100 ms at p99 on loopback, with room for a loaded CI machine.
pub const PROPAGATION: Duration = Duration::from_millis(250);

/// One replica: a board over a store, and the store when it is shared.
pub struct Replica {
    pub board: HealthBoard,
    pub store: Option<Arc<RedisStore>>,
}

impl Replica {
    pub fn gate(&self, target: &Target, credentials: &[CredentialId]) -> Gate {
        self.board.peek(&query(target, credentials))
    }

    pub fn fail(
        &self,
        target: &Target,
        credentials: &[CredentialId],
        credential: usize,
        error: &ProviderError,
    ) {
        self.board.record_failure(target, credentials, credential, error);
    }

    pub fn succeed(&self, target: &Target, credentials: &[CredentialId], credential: usize) {
        self.board.record_success(target, credentials, credential);
    }

    pub fn store(&self) -> &RedisStore {
        self.store.as_deref().expect("a shared replica")
    }
}

pub fn query<'a>(target: &'a Target, credentials: &'a [CredentialId]) -> GateQuery<'a> {
    GateQuery {
        target,
        credentials,
        health_ttl: Some(Duration::from_secs(30)),
        explicit: false,
        force: false,
        exclude: 0,
        order: &[],
        probe_lease: Duration::from_secs(30),
    }
}

pub fn settings() -> HealthSettings {
    HealthSettings { open_for: Duration::from_millis(300), ..HealthSettings::default() }
}

/// Two replicas sharing one in-process memory: the fleet of one process.
pub fn memory_fleet() -> (Replica, Replica) {
    let store: Arc<dyn HealthStore> = Arc::new(MemoryStore::default());
    let replica = || Replica { board: HealthBoard::with_store(settings(), store.clone()), store: None };
    (replica(), replica())
}

/// A replica on `server`, started and connected.
pub async fn redis_replica(server: &RedisServer, id: &str, tune: impl FnOnce(&mut StateSettings)) -> Replica {
    let mut state = StateSettings::new(server.url());
    state.replica = id.to_owned();
    tune(&mut state);
    let store = Arc::new(RedisStore::new(state).expect("valid settings"));
    store.start();
    let replica = Replica { board: HealthBoard::with_store(settings(), store.clone()), store: Some(store) };
    let store = replica.store();
    eventually(&format!("{id} connects"), Duration::from_secs(5), || store.status().status == "ok").await;
    replica
}

/// Two connected replicas on `server`.
pub async fn redis_fleet(server: &RedisServer) -> (Replica, Replica) {
    (redis_replica(server, "a", |_| {}).await, redis_replica(server, "b", |_| {}).await)
}

/// Waits until `check` holds, polling every millisecond; panics naming `what` after `within`.
pub async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    loop {
        if check() {
            return;
        }
        if start.elapsed() > within {
            panic!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub fn target() -> Target {
    "openai:gpt-4o".parse().expect("a target")
}

pub fn keys(n: usize) -> Vec<CredentialId> {
    (0..n)
        .map(|i| {
            let key = switchyard::credential::Secret::new(format!("sk-test-secret-{i}-0123456789"));
            CredentialId::derive("openai", "https://api.openai.com/v1", Some(&key))
        })
        .collect()
}

pub fn error(kind: ErrorKind, retry_after: Option<Duration>) -> ProviderError {
    let error = ProviderError::new(kind, format!("{kind} from the provider"));
    match retry_after {
        Some(after) => error.with_retry_after(after),
        None => error,
    }
}

pub fn is_skip(gate: &Gate) -> bool {
    matches!(gate, Gate::Skip { .. })
}

pub fn skip_until(gate: &Gate) -> Option<tokio::time::Instant> {
    match gate {
        Gate::Skip { until, .. } => *until,
        Gate::Pass { .. } => None,
    }
}
