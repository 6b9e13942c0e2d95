//! The trails of the fleet's recent requests in Redis, so that any replica answers "why did
//! that request fail?" for a request another one served.
//!
//! Keys, under the prefix `P`: `P:trail:<name>` holds one request's record (JSON, opaque here;
//! the gateway names it by the request's id and its client key),
//! expiring after the age bound; `P:trails` orders the fleet's ids by when each request
//! arrived, and `P:trails:line` holds each one's line in the list (its summary); each
//! replica's own ids are ordered in `P:trails:of:<replica>`, which is held to the replica's
//! count bound. One script writes a batch and makes room: the expired leave first, then a
//! replica's oldest beyond its bound; each request's line goes to the fleet's event stream
//! too, as its `request_finished` event.
//!
//! Writes are off the request path (the gateway hands records to a background task); reads
//! are an operator's, each bounded by the store's timeout.

use std::time::Duration;

use redis::Script;

use crate::{Kept, RedisStore};

/// ARGV: prefix, replica, count bound, age bound (ms), the event stream's bound, then (id,
/// score, record, line) for each request of the batch. Each request's line also goes to the
/// fleet's event stream as its `request_finished` event (see [`crate::feed`]), in the same
/// round trip.
const PUT: &str = r#"
local prefix, replica = ARGV[1], ARGV[2]
local max_count, max_age, max_events = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local order, lines, mine = prefix .. ':trails', prefix .. ':trails:line', prefix .. ':trails:of:' .. replica
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(id)
  redis.call('ZREM', order, id)
  redis.call('ZREM', mine, id)
  redis.call('HDEL', lines, id)
  redis.call('DEL', prefix .. ':trail:' .. id)
end
for i = 6, #ARGV, 4 do
  local id, score, line = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 3]
  redis.call('SET', prefix .. ':trail:' .. id, ARGV[i + 2], 'PX', max_age)
  redis.call('ZADD', order, score, id)
  redis.call('ZADD', mine, score, id)
  redis.call('HSET', lines, id, line)
  local event = '{"event":"request_finished",' .. string.sub(line, 2)
  redis.call('XADD', prefix .. ':events', 'MAXLEN', '~', max_events, '*', 'n', 'request_finished', 'd', event)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now - max_age, 'LIMIT', 0, 1000)) do drop(id) end
local excess = redis.call('ZCARD', mine) - max_count
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGE', mine, 0, excess - 1)) do drop(id) end
end
redis.call('PEXPIRE', mine, max_age)
redis.call('PEXPIRE', order, max_age)
redis.call('PEXPIRE', lines, max_age)
return redis.call('ZCARD', order)
"#;

/// One finished request, as the fleet keeps it.
#[derive(Debug, Clone)]
pub struct TrailEntry {
    /// The request id.
    pub id: String,
    /// When it arrived, in milliseconds since the Unix epoch: the list's order.
    pub at_ms: u64,
    /// Its whole record (`GET /admin/requests/{id}`).
    pub record: Vec<u8>,
    /// Its line in the list (`GET /admin/requests`).
    pub line: Vec<u8>,
}

/// The fleet's trails in the Redis of a [`RedisStore`].
pub struct SharedTrails {
    redis: Kept,
    prefix: String,
    replica: String,
    max_count: usize,
    max_age: Duration,
    put: Script,
}

impl std::fmt::Debug for SharedTrails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTrails")
            .field("prefix", &self.prefix)
            .field("replica", &self.replica)
            .field("max_count", &self.max_count)
            .field("max_age", &self.max_age)
            .finish()
    }
}

impl SharedTrails {
    /// This replica's trails in `store`'s Redis: its newest `max_count` kept, each for
    /// `max_age` at most.
    pub fn new(store: &RedisStore, max_count: usize, max_age: Duration) -> Self {
        let settings = store.settings();
        Self {
            redis: Kept::new(store),
            prefix: settings.prefix.clone(),
            replica: settings.replica.clone(),
            max_count,
            max_age,
            put: Script::new(PUT),
        }
    }

    /// Keeps `batch`, making room as the bounds say.
    pub async fn put(&self, batch: &[TrailEntry]) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut call = self.put.prepare_invoke();
        call.arg(&self.prefix)
            .arg(&self.replica)
            .arg(self.max_count)
            .arg(self.max_age.as_millis().max(1) as u64)
            .arg(crate::feed::KEPT);
        for entry in batch {
            call.arg(&entry.id).arg(entry.at_ms).arg(&entry.record).arg(&entry.line);
        }
        // Not made twice: the script also adds the request to the fleet's event stream. A batch
        // that fails waits in the writer's backlog.
        let mut conn = self.redis.connection().await?;
        self.redis.bounded(call.invoke_async::<i64>(&mut conn)).await.map(drop)
    }

    /// The record of request `id`, when the fleet keeps it.
    pub async fn get(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        let get = &redis::cmd("GET").arg(format!("{}:trail:{id}", self.prefix)).clone();
        self.redis
            .retried(move |mut conn| async move { get.query_async::<Option<Vec<u8>>>(&mut conn).await })
            .await
    }

    /// The record of the first of `names` the fleet keeps (one round trip).
    pub async fn get_first(&self, names: &[String]) -> Result<Option<Vec<u8>>, String> {
        if names.is_empty() {
            return Ok(None);
        }
        let mut mget = redis::cmd("MGET");
        for name in names {
            mget.arg(format!("{}:trail:{name}", self.prefix));
        }
        let mget = &mget;
        let found: Vec<Option<Vec<u8>>> =
            self.redis.retried(move |mut conn| async move { mget.query_async(&mut conn).await }).await?;
        Ok(found.into_iter().flatten().next())
    }

    /// The lines of the fleet's `limit` newest requests, newest first.
    pub async fn latest(&self, limit: usize) -> Result<Vec<Vec<u8>>, String> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let newest =
            &redis::cmd("ZREVRANGE").arg(format!("{}:trails", self.prefix)).arg(0).arg(limit - 1).clone();
        let ids: Vec<String> =
            self.redis.retried(move |mut conn| async move { newest.query_async(&mut conn).await }).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let lines = format!("{}:trails:line", self.prefix);
        let read = &redis::cmd("HMGET").arg(&lines).arg(&ids).clone();
        let found: Vec<Option<Vec<u8>>> =
            self.redis.retried(move |mut conn| async move { read.query_async(&mut conn).await }).await?;
        Ok(found.into_iter().flatten().collect())
    }
}
