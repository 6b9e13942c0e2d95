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

use std::time::Duration;

use redis::Script;

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
pub struct SharedResponses {
    redis: Kept,
    /// `P:responses`: the ordered set of ids, and the stem of its size hash and byte count.
    base: String,
    /// `P:response:`: what an entry's key starts with.
    entry: String,
    bounds: KeptBounds,
    put: Script,
    delete: Script,
}

impl std::fmt::Debug for SharedResponses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedResponses").field("base", &self.base).field("bounds", &self.bounds).finish()
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
        Self {
            redis: Kept::new(store),
            base: format!("{}:{kind}s", settings.prefix),
            entry: format!("{}:{kind}:", settings.prefix),
            bounds,
            put: Script::new(PUT),
            delete: Script::new(DELETE),
        }
    }

    /// Keeps `value` under `id`, making room as the bounds say; an error, with nothing else
    /// dropped, when it is larger than the byte bound alone.
    pub async fn put(&self, id: &str, value: &[u8]) -> Result<(), String> {
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
        match written.await? {
            0 => Err(format!(
                "{} bytes is more than the fleet's byte bound, {}",
                value.len(),
                bounds.max_bytes
            )),
            _ => Ok(()),
        }
    }

    /// The entry `id`, when it is kept.
    pub async fn get(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        let get = &redis::cmd("GET").arg(format!("{}{id}", self.entry)).clone();
        self.redis
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
            mget.arg(format!("{}{id}", self.entry));
        }
        let mget = &mget;
        self.redis
            .retried(move |mut conn| async move { mget.query_async::<Vec<Option<Vec<u8>>>>(&mut conn).await })
            .await
    }

    /// Forgets the entry `id`; whether it was kept.
    pub async fn delete(&self, id: &str) -> Result<bool, String> {
        let mut invocation = self.delete.prepare_invoke();
        invocation.arg(&self.base).arg(id).arg(&self.entry);
        let invocation = &invocation;
        let deleted =
            self.redis.retried(|mut conn| async move { invocation.invoke_async::<i64>(&mut conn).await });
        deleted.await.map(|n| n > 0)
    }
}
