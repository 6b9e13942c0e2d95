//! What client keys spent, counted for the fleet: one hash per key and budget period,
//! `P:spend:<key hash>:<period>:by`, holding each run of each replica's own total in the period
//! (field `<replica>/<instance>`), and the fleet's total is their sum. The key is a hash of the
//! client's key, never the key; the hash expires a day after its period ends.
//!
//! A run writes its absolute total, never an increment, and a field only ever rises: a write
//! sent again (after a timeout that may have landed anyway) counts once, a late write cannot
//! lower a later one, and a Redis that restarted empty is written whole again by every live
//! replica. A run that restarts gets a field of its own, so the spend of the run before stays
//! counted. The string `P:spend:<key hash>:<period>` that earlier versions raised with
//! `INCRBYFLOAT` is added to the sum, so a fleet upgraded replica by replica keeps its spend.
//!
//! Every call is bounded by the store's timeout; a caller that gets an error counts on from
//! its own memory and writes again later.

use redis::Script;

use crate::{Kept, RedisStore};

/// How long a period's number outlives the period.
const KEPT_PAST_END: u64 = 86_400;

/// Writes this run's total when it is larger than the one held (`ARGV[2]` empty: reads only),
/// and answers the rest of the fleet's total and the one held for this run, as strings (Lua's
/// numbers would come back as integers): this run's as it is stored, exactly as the replica
/// wrote it, and the sum with 17 digits (`tostring` keeps 14, and a total that came back
/// rounded below what was written would be written again and again).
const SPEND: &str = r#"
local by, legacy, me, total, ends = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
if total ~= '' then
  local held = tonumber(redis.call('HGET', by, me) or '0') or 0
  if tonumber(total) > held then
    redis.call('HSET', by, me, total)
  end
  redis.call('EXPIREAT', by, ends)
end
local others, own = tonumber(redis.call('GET', legacy) or '0') or 0, '0'
local all = redis.call('HGETALL', by)
for i = 1, #all, 2 do
  if all[i] == me then own = all[i + 1] else others = others + (tonumber(all[i + 1]) or 0) end
end
return {string.format('%.17g', others), own}
"#;

/// What Redis holds of a key's spend in a period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    /// What the rest of the fleet spent: every other replica, and runs of this one before.
    pub others: f64,
    /// What it holds of this run's spend.
    pub own: f64,
}

/// The spend of client keys in the Redis of a [`RedisStore`].
pub struct SharedSpend {
    redis: Kept,
    prefix: String,
    /// This run's field: the replica's name and its run's instance.
    me: String,
    script: Script,
}

impl std::fmt::Debug for SharedSpend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSpend")
            .field("prefix", &self.prefix)
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl SharedSpend {
    /// Spend kept in `store`'s Redis, under its prefix, as this run of its replica.
    pub fn new(store: &RedisStore) -> Self {
        let me = format!("{}/{}", store.replica(), store.shared.member.instance);
        Self {
            redis: Kept::new(store),
            prefix: store.settings().prefix.clone(),
            me,
            script: Script::new(SPEND),
        }
    }

    async fn call(&self, key_hash: &str, period: &str, total: Option<(f64, u64)>) -> Result<Held, String> {
        let mut conn = self.redis.connection().await?;
        let legacy = format!("{}:spend:{key_hash}:{period}", self.prefix);
        let mut call = self.script.key(format!("{legacy}:by"));
        call.key(&legacy).arg(&self.me);
        match total {
            Some((usd, ends)) => call.arg(format!("{usd}")).arg(ends + KEPT_PAST_END),
            None => call.arg("").arg(0),
        };
        let (others, own): (String, String) = self.redis.bounded(call.invoke_async(&mut conn)).await?;
        let number =
            |text: String| text.parse::<f64>().map_err(|_| format!("Redis answered `{text}` for a spend"));
        Ok(Held { others: number(others)?, own: number(own)? })
    }

    /// Writes that this run of the replica spent `usd` in all for the key of `key_hash` in
    /// `period`, which ends at `ends_unix` (seconds since the epoch); what Redis holds after it.
    pub async fn put(&self, key_hash: &str, period: &str, usd: f64, ends_unix: u64) -> Result<Held, String> {
        self.call(key_hash, period, Some((usd, ends_unix))).await
    }

    /// How long one call waits for Redis: the longest a request should wait for a read.
    pub fn timeout(&self) -> std::time::Duration {
        self.redis.timeout()
    }

    /// What Redis holds of the spend of the key of `key_hash` in `period` (0s when nothing yet).
    pub async fn get(&self, key_hash: &str, period: &str) -> Result<Held, String> {
        self.call(key_hash, period, None).await
    }
}
