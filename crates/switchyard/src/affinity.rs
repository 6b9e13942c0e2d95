//! Session affinity: a conversation's requests go back to the target and key that served it,
//! so that the provider's prompt cache (kept per account) serves its prefix again.
//!
//! A session is named by the caller ([`RequestOptions::session`](crate::RequestOptions)): the
//! gateway reads the `x-switchyard-session` header, else the request's own identifier. After a
//! request of a session is served, its route remembers the target and credential
//! ([`Pins::remember`]); the session's next request puts that target first in its chain and
//! asks for that credential first. Affinity never overrides health: a gated, open, exhausted or
//! cooling target is skipped as always, and the session sticks to where it is served next. A
//! pin is forgotten after the route's `affinity_ttl` without a request, and kept in a
//! [`SharedEntries`] store too (the gateway's Redis) so that every replica of a fleet honours it.
//!
//! Sessions are kept under a 128-bit hash of the caller's scope, the route and the session id,
//! never the id itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::Target;
use crate::credential::CredentialId;
use crate::shared::SharedEntries;

/// Where a session was last served: its target and the id of the key it used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    /// The `provider:model` that served it.
    pub target: String,
    /// The credential it was served with.
    pub credential_id: String,
    /// When, in Unix milliseconds: a pin read from the fleet is honoured within the route's
    /// `affinity_ttl` of it.
    #[serde(default)]
    pub at_ms: u64,
}

impl Pin {
    /// The pinned target, when it reads as one.
    pub fn target(&self) -> Option<Target> {
        self.target.parse().ok()
    }
}

/// Sessions kept at most in one process; past it the oldest half is let go.
const LOCAL_MAX: usize = 100_000;

/// The pins of every route's sessions.
#[derive(Debug, Default)]
pub struct Pins {
    local: Mutex<HashMap<u128, (Pin, Instant)>>,
    shared: OnceLock<Arc<dyn SharedEntries>>,
}

impl Pins {
    /// Keeps pins in `shared` too (once; later calls change nothing).
    pub fn share(&self, shared: Arc<dyn SharedEntries>) {
        let _ = self.shared.set(shared);
    }

    /// Where the session `key` was served within `ttl`: this process's pin, else the fleet's.
    pub(crate) async fn recall(&self, key: u128, ttl: Duration) -> Option<Pin> {
        if let Some(pin) = self.local_pin(key, ttl) {
            return Some(pin);
        }
        let shared = self.shared.get()?;
        // A fleet store that is away or slow must not hold the request up for long.
        let read = tokio::time::timeout(Duration::from_millis(100), shared.get(name_of(key))).await;
        match read {
            Ok(Ok(Some(bytes))) => {
                let pin: Pin = serde_json::from_slice(&bytes).ok()?;
                (unix_ms().saturating_sub(pin.at_ms) < ttl.as_millis() as u64).then_some(pin)
            }
            Ok(Ok(None)) => None,
            Ok(Err(reason)) => {
                tracing::debug!(reason, "a session pin could not be read from the fleet");
                None
            }
            Err(_) => None,
        }
    }

    fn local_pin(&self, key: u128, ttl: Duration) -> Option<Pin> {
        let local = self.local.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (pin, at) = local.get(&key)?;
        (at.elapsed() < ttl).then(|| pin.clone())
    }

    /// Remembers that the session `key` was served as `pin` (and tells the fleet, off the
    /// request path).
    pub(crate) fn remember(&self, key: u128, mut pin: Pin) {
        let now = Instant::now();
        pin.at_ms = unix_ms();
        {
            let mut local = self.local.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if local.len() >= LOCAL_MAX && !local.contains_key(&key) {
                forget_oldest_half(&mut local);
            }
            local.insert(key, (pin.clone(), now));
        }
        let Some(shared) = self.shared.get().cloned() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let Ok(value) = serde_json::to_vec(&pin) else { return };
        runtime.spawn(async move {
            if let Err(reason) = shared.put(name_of(key), value).await {
                tracing::debug!(reason, "a session pin could not be shared; this replica keeps it");
            }
        });
    }
}

fn forget_oldest_half(local: &mut HashMap<u128, (Pin, Instant)>) {
    let mut ages: Vec<Instant> = local.values().map(|(_, at)| *at).collect();
    ages.sort_unstable();
    let cut = ages[ages.len() / 2];
    local.retain(|_, (_, at)| *at > cut);
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The name of a session's pin in a shared store.
fn name_of(key: u128) -> String {
    format!("{key:032x}")
}

/// The key of session `session` of caller `scope` on route `route`.
pub(crate) fn key_of(scope: &str, route: &str, session: &str) -> u128 {
    crate::answer_cache::hash_parts(&[scope.as_bytes(), route.as_bytes(), session.as_bytes()])
}

/// A stable 128-bit hash of `bytes` (the same across builds and replicas), for naming a
/// session by what its requests share.
pub fn hash_of(bytes: &[u8]) -> u128 {
    crate::answer_cache::hash_parts(&[bytes])
}

/// A credential id as a pin carries it, and back.
pub(crate) fn credential_index(ids: &[CredentialId], id: &str) -> Option<usize> {
    ids.iter().position(|c| c.as_str() == id)
}
