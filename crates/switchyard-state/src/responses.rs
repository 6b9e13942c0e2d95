//! Kept responses (the Responses API's conversations) in Redis, so that every replica of a
//! fleet can continue a conversation another one served.
//!
//! Keys, under the prefix `P`: `P:response:<id>` holds one entry (opaque bytes to this crate),
//! expiring after the age bound; `P:responses` orders the ids by when they were written,
//! `P:responses:size` holds each one's size and `P:responses:bytes` their total. One script
//! writes an entry and makes room (expired ids first, then the oldest, until the count and the
//! bytes fit), so the bounds hold for the fleet as a whole.
//!
//! Unlike health, reading here is on the request path: an entry written by another replica is
//! only in Redis. Every call is bounded by the store's timeout; the caller falls back to its
//! own memory when Redis does not answer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use crate::{Kept, RedisStore};

const PUT: &str = r#"
local base, id, value = ARGV[1], ARGV[2], ARGV[3]
local max_entries, max_age, max_bytes = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local entry = ARGV[7]
-- Larger than the byte bound alone: kept nowhere, and nothing else is dropped for it.
if string.len(value) > max_bytes then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local order, sizes, total = base, base .. ':size', base .. ':bytes'
local function drop(victim)
  local size = tonumber(redis.call('HGET', sizes, victim) or '0')
  redis.call('HDEL', sizes, victim)
  redis.call('ZREM', order, victim)
  redis.call('DEL', entry .. victim)
  redis.call('DECRBY', total, size)
end
for _, victim in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now - max_age)) do drop(victim) end
if redis.call('ZSCORE', order, id) then drop(id) end
local len = string.len(value)
while redis.call('ZCARD', order) >= max_entries or tonumber(redis.call('GET', total) or '0') + len > max_bytes do
  local oldest = redis.call('ZRANGE', order, 0, 0)
  if #oldest == 0 then break end
  drop(oldest[1])
end
redis.call('SET', entry .. id, value, 'PX', max_age)
redis.call('ZADD', order, now, id)
redis.call('HSET', sizes, id, len)
redis.call('INCRBY', total, len)
return 1
"#;

const DELETE: &str = r#"
local base, id, entry = ARGV[1], ARGV[2], ARGV[3]
local sizes, total = base .. ':size', base .. ':bytes'
local size = tonumber(redis.call('HGET', sizes, id) or '0')
redis.call('HDEL', sizes, id)
redis.call('ZREM', base, id)
redis.call('DECRBY', total, size)
return redis.call('DEL', entry .. id)
"#;

/// The bounds the fleet's kept responses are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptBounds {
    /// Entries at most.
    pub max_entries: usize,
    /// How long one is kept.
    pub max_age: Duration,
    /// Their bytes together.
    pub max_bytes: usize,
}

/// Kept responses in the Redis of a [`RedisStore`].
///
/// A write Redis missed (away, or stalled past its timeout) is kept, and written again once
/// Redis takes a write of these entries, or by the store's periodic round
/// ([`RedisStore::resend_missed`]): at most [`MISSED_BYTES`] wait, the oldest dropped first,
/// none written past the age bound, and one deleted meanwhile not at all.
pub struct SharedResponses {
    inner: Arc<Entries>,
    /// How many times the store found Redis emptied ([`RedisStore::losses`]).
    losses: tokio::sync::watch::Receiver<u64>,
}

/// What a [`SharedResponses`] holds: shared with the resend in the background, and named in
/// its store's list for the periodic round.
pub(crate) struct Entries {
    redis: Kept,
    /// `P:responses`: the ordered set of ids, and the stem of its size hash and byte count.
    base: String,
    /// `P:response:`: what an entry's key starts with.
    entry: String,
    bounds: KeptBounds,
    put: Script,
    delete: Script,
    missed: Mutex<Missed>,
    /// A resend runs.
    resending: AtomicBool,
    /// Held by a resend while it writes an entry, and by a put or a delete of an id whose
    /// write waits: one of them at a time, so that an older value sent again never lands after
    /// a newer one, nor after a delete.
    turn: tokio::sync::Mutex<()>,
}

/// The writes Redis missed, oldest first: each its id, its value and when it was written.
#[derive(Default)]
struct Missed {
    writes: VecDeque<(String, Arc<[u8]>, Instant)>,
    bytes: usize,
    /// The ids of writes dropped for room (past [`MISSED_BYTES`]), the last [`DROPPED`]: never
    /// made, so their entries are still the writer's alone.
    dropped: VecDeque<String>,
}

/// How many ids of writes dropped for room are remembered.
const DROPPED: usize = 4096;

/// How many bytes of writes Redis missed wait to be written again, at most (per kind).
pub const MISSED_BYTES: usize = 16 << 20;

impl std::fmt::Debug for SharedResponses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedResponses")
            .field("base", &self.inner.base)
            .field("bounds", &self.inner.bounds)
            .finish()
    }
}

impl SharedResponses {
    /// Kept responses in `store`'s Redis, under its prefix, held to `bounds`.
    pub fn new(store: &RedisStore, bounds: KeptBounds) -> Self {
        Self::named(store, "response", bounds)
    }

    /// Entries of another kind in the same shape: `P:<kind>:<id>`, ordered in `P:<kind>s`
    /// (a `cache` candidate's answers, say), held to `bounds` of their own.
    pub fn named(store: &RedisStore, kind: &str, bounds: KeptBounds) -> Self {
        let settings = store.settings();
        let inner = Arc::new(Entries {
            redis: Kept::new(store),
            base: format!("{}:{kind}s", settings.prefix),
            entry: format!("{}:{kind}:", settings.prefix),
            bounds,
            put: Script::new(PUT),
            delete: Script::new(DELETE),
            missed: Mutex::default(),
            resending: AtomicBool::new(false),
            turn: tokio::sync::Mutex::new(()),
        });
        store.keep_resending(&inner);
        Self { inner, losses: store.losses() }
    }

    /// How many times Redis was found emptied so far: an entry written before the last time
    /// may be gone from Redis though no replica deleted it.
    pub fn losses(&self) -> u64 {
        *self.losses.borrow()
    }

    /// Keeps `value` under `id`, making room as the bounds say; an error, with nothing else
    /// dropped, when it is larger than the byte bound alone. A write Redis missed is an error
    /// too, and waits to be written again; one Redis took sends those that wait, in the
    /// background.
    pub async fn put(&self, id: &str, value: &[u8]) -> Result<(), String> {
        let turn = self.inner.turn_of(id).await;
        let written = match self.inner.write(id, value).await {
            Ok(()) => {
                // An older write of it that waits is not made after this one.
                self.inner.unmissed(id);
                Ok(())
            }
            Err(Refused::TooLarge(reason)) => Err(reason),
            Err(Refused::Missed(reason)) => {
                self.inner.missed_write(id, value.into(), Instant::now());
                Err(reason)
            }
        };
        drop(turn);
        if written.is_ok() {
            self.inner.resend_in_background();
        }
        written
    }

    /// Keeps `value` under `id` to be written with the writes Redis missed, without trying now:
    /// the parts of an entry whose own write Redis just missed.
    pub fn defer(&self, id: &str, value: &[u8]) {
        self.inner.missed_write(id, value.into(), Instant::now());
    }

    /// Whether a write of `id` Redis missed waits to be written again, or was dropped for room
    /// and never made: the entry is kept by the replica that wrote it alone.
    pub fn waiting(&self, id: &str) -> bool {
        let missed = self.inner.missed();
        missed.writes.iter().any(|(waiting, _, _)| waiting == id)
            || missed.dropped.iter().any(|gone| gone == id)
    }

    /// Writes again what Redis missed, unless a resend runs; off any request's path.
    pub async fn resend(&self) {
        self.inner.resend().await;
    }

    /// The entry `id`, when it is kept.
    pub async fn get(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        let get = &redis::cmd("GET").arg(format!("{}{id}", self.inner.entry)).clone();
        self.inner
            .redis
            .retried(move |mut conn| async move { get.query_async::<Option<Vec<u8>>>(&mut conn).await })
            .await
    }

    /// The entries `ids` name, in order, `None` for one not kept: one round trip.
    pub async fn get_many(&self, ids: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut mget = redis::cmd("MGET");
        for id in ids {
            mget.arg(format!("{}{id}", self.inner.entry));
        }
        let mget = &mget;
        self.inner
            .redis
            .retried(move |mut conn| async move { mget.query_async::<Vec<Option<Vec<u8>>>>(&mut conn).await })
            .await
    }

    /// Forgets the entry `id` (and a write of it that waits to be made again); whether Redis
    /// kept it.
    pub async fn delete(&self, id: &str) -> Result<bool, String> {
        let _turn = self.inner.turn_of(id).await;
        self.inner.unmissed(id);
        let inner = &self.inner;
        let mut invocation = inner.delete.prepare_invoke();
        invocation.arg(&inner.base).arg(id).arg(&inner.entry);
        let invocation = &invocation;
        let deleted =
            inner.redis.retried(|mut conn| async move { invocation.invoke_async::<i64>(&mut conn).await });
        deleted.await.map(|n| n > 0)
    }
}

/// Why a write was not made.
enum Refused {
    /// Larger than the byte bound alone: never kept.
    TooLarge(String),
    /// Redis did not take it (away, stalled, refusing writes).
    Missed(String),
}

impl Entries {
    /// One write.
    async fn write(&self, id: &str, value: &[u8]) -> Result<(), Refused> {
        let bounds = self.bounds;
        let mut invocation = self.put.prepare_invoke();
        invocation
            .arg(&self.base)
            .arg(id)
            .arg(value)
            .arg(bounds.max_entries)
            .arg(bounds.max_age.as_millis().max(1) as u64)
            .arg(bounds.max_bytes)
            .arg(&self.entry);
        let invocation = &invocation;
        let written =
            self.redis.retried(|mut conn| async move { invocation.invoke_async::<i64>(&mut conn).await });
        match written.await.map_err(Refused::Missed)? {
            0 => Err(Refused::TooLarge(format!(
                "{} bytes is more than the fleet's byte bound, {}",
                value.len(),
                bounds.max_bytes
            ))),
            _ => Ok(()),
        }
    }

    fn missed(&self) -> MutexGuard<'_, Missed> {
        self.missed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a write Redis missed (`at`: when it was first written), in place of an older
    /// write of the same id.
    fn missed_write(&self, id: &str, value: Arc<[u8]>, at: Instant) {
        let mut missed = self.missed();
        missed.remove(id);
        if value.len() > MISSED_BYTES {
            return;
        }
        missed.bytes += value.len();
        missed.writes.push_back((id.to_owned(), value, at));
        while missed.bytes > MISSED_BYTES {
            let Some((id, value, _)) = missed.writes.pop_front() else { break };
            missed.bytes -= value.len();
            if missed.dropped.len() == DROPPED {
                missed.dropped.pop_front();
            }
            missed.dropped.push_back(id);
        }
    }

    /// Drops the write of `id` that waits, if one does.
    fn unmissed(&self, id: &str) {
        self.missed().remove(id);
    }

    /// The turn to write or delete `id`, when a write of it waits (a resend may be making it
    /// now); none is needed otherwise.
    async fn turn_of(&self, id: &str) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let waiting = self.missed().writes.iter().any(|(waiting, _, _)| waiting == id);
        match waiting {
            true => Some(self.turn.lock().await),
            false => None,
        }
    }

    /// Has [`resend`](Self::resend) run in the background when writes wait and none runs.
    fn resend_in_background(self: &Arc<Self>) {
        if !self.missed().writes.is_empty() && !self.resending.load(Ordering::Acquire) {
            let entries = self.clone();
            tokio::spawn(async move { entries.resend().await });
        }
    }

    /// Writes again what Redis missed, oldest first, until a write fails; one past the age
    /// bound is dropped instead. Does nothing while another resend runs. Each waits in the queue
    /// while it is written (the entry is still this replica's alone: `waiting` says so).
    pub(crate) async fn resend(&self) {
        if self.resending.swap(true, Ordering::AcqRel) {
            return;
        }
        loop {
            let turn = self.turn.lock().await;
            let front = self.missed().writes.front().cloned();
            let Some((id, value, at)) = front else { break };
            if at.elapsed() < self.bounds.max_age
                && let Err(Refused::Missed(_)) = self.write(&id, &value).await
            {
                break;
            }
            // Made (or past its age, or too large to be kept): no longer waiting.
            let mut missed = self.missed();
            if missed.writes.front().is_some_and(|(waiting, _, when)| *waiting == id && *when == at) {
                missed.bytes -= value.len();
                missed.writes.pop_front();
            }
            drop(missed);
            drop(turn);
        }
        self.resending.store(false, Ordering::Release);
    }
}

impl Missed {
    /// Forgets the write of `id` (written since, or deleted), waiting or dropped for room.
    fn remove(&mut self, id: &str) {
        let at = self.writes.iter().position(|(waiting, _, _)| waiting == id);
        if let Some((_, value, _)) = at.and_then(|at| self.writes.remove(at)) {
            self.bytes -= value.len();
        }
        self.dropped.retain(|gone| gone != id);
    }
}
