//! What client keys spent, counted for the fleet: one number per key and budget period,
//! `P:spend:<key hash>:<period>`, raised with `INCRBYFLOAT` by the replica that served an
//! answer and read by the others. The key is a hash of the client's key, never the key; the
//! number expires a day after its period ends.
//!
//! Every call is bounded by the store's timeout; a caller that gets an error counts on from
//! its own memory and tries again later.

use crate::{Kept, RedisStore};

/// How long a period's number outlives the period.
const KEPT_PAST_END: u64 = 86_400;

/// The spend of client keys in the Redis of a [`RedisStore`].
pub struct SharedSpend {
    redis: Kept,
    prefix: String,
}

impl std::fmt::Debug for SharedSpend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSpend").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl SharedSpend {
    /// Spend kept in `store`'s Redis, under its prefix.
    pub fn new(store: &RedisStore) -> Self {
        Self { redis: Kept::new(store), prefix: store.settings().prefix.clone() }
    }

    fn key(&self, key_hash: &str, period: &str) -> String {
        format!("{}:spend:{key_hash}:{period}", self.prefix)
    }

    /// Adds `usd` to what the key of `key_hash` spent in `period`, which ends at
    /// `ends_unix` (seconds since the epoch); the fleet's total after it.
    pub async fn add(&self, key_hash: &str, period: &str, usd: f64, ends_unix: u64) -> Result<f64, String> {
        let mut conn = self.redis.connection().await?;
        let key = self.key(key_hash, period);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("INCRBYFLOAT")
            .arg(&key)
            .arg(format!("{usd}"))
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(ends_unix + KEPT_PAST_END)
            .ignore();
        let (total,): (String,) = self.redis.bounded(pipe.query_async(&mut conn)).await?;
        total.parse().map_err(|_| format!("Redis answered `{total}` for a spend"))
    }

    /// What the key of `key_hash` spent in `period`, the fleet's total (0 when nothing yet).
    pub async fn get(&self, key_hash: &str, period: &str) -> Result<f64, String> {
        let mut conn = self.redis.connection().await?;
        let value: Option<String> = self
            .redis
            .bounded(redis::cmd("GET").arg(self.key(key_hash, period)).query_async(&mut conn))
            .await?;
        Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0.0))
    }
}
