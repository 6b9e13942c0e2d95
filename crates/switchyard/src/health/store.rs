//! Where the records live: the [`HealthStore`] seam and the in-process [`MemoryStore`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use super::{Breaker, CredentialRecord, TargetRecord};
use crate::Target;
use crate::credential::CredentialId;

/// The records one decision reads and writes: a target and its provider's credentials, in the
/// order the caller listed their ids.
#[derive(Debug, Clone, Default)]
pub struct Records {
    /// The target's record.
    pub target: TargetRecord,
    /// One record per id passed to [`HealthStore::update`], at the same index; an id listed
    /// twice has two copies.
    pub credentials: Vec<CredentialRecord>,
}

/// A shared store's answer to [`HealthStore::claim_probe`]: whether this process's probe is
/// the fleet's.
pub type ProbeClaim = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// Every record of a store: targets sorted by target, credentials sorted by id.
pub type AllRecords = (Vec<(Target, TargetRecord)>, Vec<(CredentialId, CredentialRecord)>);

/// Where health records live. The board holds every rule; a store only loads and saves
/// records, so a shared store (Redis) can replace [`MemoryStore`] without touching the rules.
///
/// The contract:
///
/// - **One step per call.** [`update`](HealthStore::update) loads the target's record and one
///   record per credential id, runs `apply` on them and saves the result, and no other update
///   of the same target or credentials may interleave between the load and the save. Nothing
///   is held between calls: each gate decision and each recorded outcome is one call.
/// - **Absent is default.** A record never written loads as `Default::default()` (a target or
///   credential never heard of, status unknown); a record still equal to the default after
///   `apply` need not be saved. `update` is also the board's way to read one target (its
///   `apply` then changes nothing), so saving an unchanged record should cost nothing.
/// - **Credentials by position.** `Records::credentials[i]` is the record of
///   `credentials[i]`. The same id may be listed twice (two environment variables holding
///   the same key): both copies load the same record, and a copy that `apply` changed is
///   saved (when both changed, either may win).
/// - **Retries and refusals.** `apply` may run more than once in one call (a store that
///   retries on a write conflict): the board's closures start over each time, so only the run
///   whose result is saved counts. A store that cannot reach its records may return without
///   running `apply` at all; the board then refuses the call ("health store did not answer"),
///   records nothing and reports the target as unknown.
/// - **Synchronous and short.** `update` runs on the router's async task, with no lock of the
///   router held, before every call (to gate it) and after it (to record how it ended): it
///   must not block for long. `apply` itself never blocks.
/// - **Times are process-local.** Records hold [`tokio::time::Instant`]s, which mean nothing
///   outside this process (and stand still in paused-time tests): a store shared between
///   processes must translate them to a shared clock when it saves and back when it loads.
/// - **Forgetting is allowed.** A store may drop records to bound its size (as
///   [`MemoryStore`] does); a forgotten target or credential starts over as unknown.
pub trait HealthStore: Send + Sync + 'static {
    /// Loads the records of `target` and of each of `credentials` (defaults when absent), runs
    /// `apply` on them, and saves the result, all as one step.
    fn update(&self, target: &Target, credentials: &[CredentialId], apply: &mut dyn FnMut(&mut Records));

    /// Asks whether the probe of `target`'s half-open circuit that [`update`](Self::update)
    /// just gave this process (a gate's pass with `probe` set) is the only one: a store shared
    /// by processes answers no when another took the probe first, and its record of `target`
    /// then says so (the next gate skips it as probed elsewhere). `None` is yes at once, as a
    /// store of one process always answers (the default): its gate already let one probe
    /// through. A shared store that cannot ask answers yes (each process then bounds its own).
    /// Called on a probe's path only, never on a common call's.
    fn claim_probe(&self, target: &Target) -> Option<ProbeClaim> {
        let _ = target;
        None
    }

    /// Every record the store holds, for the operator's snapshot, sorted by key so that
    /// snapshots list targets and credentials in a stable order.
    fn all(&self) -> AllRecords;

    /// Forgets every record.
    fn clear(&self);

    /// Called after an operator's reset of `target` and `credentials` went through
    /// [`update`](HealthStore::update): a shared store forgets them everywhere, even where this
    /// process held no record of them (nothing here to diff). The default does nothing.
    fn forget(&self, target: &Target, credentials: &[CredentialId]) {
        let _ = (target, credentials);
    }

    /// Drops what this process holds of `targets` and `credentials`, and every target's rest
    /// of those credentials, announcing nothing: a reconfiguration removed them, or changed
    /// them so that what was learned no longer describes them
    /// ([`Router::reconfigure`](crate::Router::reconfigure)). Unlike an operator's reset, a
    /// shared store drops its own copies only: the fleet's records are every replica's, and
    /// other replicas may still run the configuration that names them.
    fn drop_records(&self, targets: &[Target], credentials: &[CredentialId]);

    /// The targets the configuration names (its routes' chains), told each time a router is
    /// built over the store (a reconfiguration too): a shared store bounds what it shares of
    /// any other target, which clients choose (`provider:model`, a pattern route's model), and
    /// never these. The default does nothing.
    fn configured(&self, targets: &[Target]) {
        let _ = targets;
    }
}

/// The in-process store: one mutex over two maps, held for microseconds and never across an
/// await.
///
/// It keeps at most [`MemoryStore::DEFAULT_TARGETS`] target records (see
/// [`MemoryStore::with_capacity`]): clients may name targets no configuration lists
/// (`provider:any-model`), and without a bound every new name would stay in memory for good.
/// When full, it forgets a tenth of its records at once, the least telling first: records that
/// gate nothing (available, circuit closed, no failure counted), then troubled ones, and only
/// then circuits that are open or waits the provider asked for that still run (a flood of
/// invented names that each fail once must not reset a real outage); within each, the one
/// heard of longest ago. A forgotten target starts over as unknown.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<MemoryState>,
    capacity: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_capacity(Self::DEFAULT_TARGETS)
    }
}

#[derive(Debug, Default)]
struct MemoryState {
    targets: HashMap<Target, TargetRecord>,
    credentials: HashMap<CredentialId, CredentialRecord>,
}

impl MemoryStore {
    /// How many target records the default store keeps.
    pub const DEFAULT_TARGETS: usize = 10_000;

    /// A store that keeps at most `targets` target records (at least 10). Credential records
    /// are not bounded: only configured keys have them.
    pub fn with_capacity(targets: usize) -> Self {
        Self { state: Mutex::default(), capacity: targets.max(10) }
    }

    /// Changes the record of `target` alone, as one step: for a shared store that applies
    /// another replica's change. A record left at its default is not kept.
    pub fn edit_target(&self, target: &Target, edit: impl FnOnce(&mut TargetRecord)) {
        let mut state = self.lock();
        let mut record = state.targets.get_mut(target).map(std::mem::take).unwrap_or_default();
        edit(&mut record);
        if state.targets.len() >= self.capacity
            && !state.targets.contains_key(target)
            && record != TargetRecord::default()
        {
            forget_least_telling(&mut state.targets, self.capacity / 10);
        }
        if record == TargetRecord::default() {
            state.targets.remove(target);
        } else {
            put_back(&mut state.targets, target, record);
        }
    }

    /// Changes the record of one credential alone, as one step (see
    /// [`edit_target`](Self::edit_target)).
    pub fn edit_credential(&self, id: &CredentialId, edit: impl FnOnce(&mut CredentialRecord)) {
        let mut state = self.lock();
        let mut record = state.credentials.get_mut(id).map(std::mem::take).unwrap_or_default();
        edit(&mut record);
        if record == CredentialRecord::default() {
            state.credentials.remove(id);
        } else {
            put_back(&mut state.credentials, id, record);
        }
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A panic while holding this lock cannot leave a record half-written (updates replace
        // whole records), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl HealthStore for MemoryStore {
    fn update(&self, target: &Target, credentials: &[CredentialId], apply: &mut dyn FnMut(&mut Records)) {
        let mut state = self.lock();
        let state = &mut *state;
        // The target's record is moved out and back rather than cloned (this runs twice per
        // call). Credential records are small and copied: one key listed twice appears twice
        // in `credentials`, and only a copy that changed may be written back.
        let before: Vec<CredentialRecord> =
            credentials.iter().map(|id| state.credentials.get(id).cloned().unwrap_or_default()).collect();
        let mut records = Records { target: TargetRecord::default(), credentials: before.clone() };
        if let Some(slot) = state.targets.get_mut(target) {
            // The common case: the target is known, and its slot is written through the one
            // lookup (the key is hashed once).
            records.target = std::mem::take(slot);
            apply(&mut records);
            *slot = records.target;
        } else {
            apply(&mut records);
            if records.target != TargetRecord::default() {
                if state.targets.len() >= self.capacity {
                    forget_least_telling(&mut state.targets, self.capacity / 10);
                }
                state.targets.insert(target.clone(), records.target);
            }
        }
        for ((id, record), old) in credentials.iter().zip(records.credentials).zip(before) {
            if record != old {
                state.credentials.insert(id.clone(), record);
            }
        }
    }

    fn all(&self) -> AllRecords {
        let state = self.lock();
        let mut targets: Vec<_> = state.targets.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut credentials: Vec<_> = state.credentials.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        targets.sort_by(|a, b| a.0.cmp(&b.0));
        credentials.sort_by(|a, b| a.0.cmp(&b.0));
        (targets, credentials)
    }

    fn clear(&self) {
        let mut state = self.lock();
        state.targets.clear();
        state.credentials.clear();
    }

    fn drop_records(&self, targets: &[Target], credentials: &[CredentialId]) {
        let mut state = self.lock();
        for target in targets {
            state.targets.remove(target);
        }
        for id in credentials {
            state.credentials.remove(id);
        }
        if !credentials.is_empty() {
            for record in state.targets.values_mut() {
                record.key_cooldowns.retain(|(id, _)| !credentials.contains(id));
            }
        }
    }
}

/// What forgetting `record` would lose, lowest first: 0 when it gates nothing; 1 for a
/// troubled status or failures counting towards the breaker; 2 for a circuit that is not
/// closed or a wait the provider asked for that is still running. Then when it was last heard
/// of.
fn worth(record: &TargetRecord, now: Instant) -> (u8, Option<Instant>) {
    let tier = if record.breaker != Breaker::Closed || record.retry_until.is_some_and(|until| until > now) {
        2
    } else if record.status.is_troubled() || record.consecutive_failures > 0 {
        1
    } else {
        0
    };
    (tier, record.since.max(record.failed_at))
}

/// Removes `count` target records, the least telling first (see [`MemoryStore`]). One pass
/// over the map, for a tenth of its capacity at a time.
fn forget_least_telling(targets: &mut HashMap<Target, TargetRecord>, count: usize) {
    let now = Instant::now();
    let mut ranked: Vec<((u8, Option<Instant>), Target)> =
        targets.iter().map(|(target, record)| (worth(record, now), target.clone())).collect();
    let count = count.clamp(1, ranked.len());
    ranked.select_nth_unstable_by_key(count - 1, |(worth, _)| *worth);
    for (_, target) in &ranked[..count] {
        targets.remove(target);
    }
}

/// Stores `record` under `key`; a record never seen before is stored only when it says
/// something (an untouched default would only grow the map).
fn put_back<K, V>(map: &mut HashMap<K, V>, key: &K, record: V)
where
    K: std::hash::Hash + Eq + Clone,
    V: Default + PartialEq,
{
    match map.get_mut(key) {
        Some(slot) => *slot = record,
        None if record != V::default() => {
            map.insert(key.clone(), record);
        }
        None => {}
    }
}
