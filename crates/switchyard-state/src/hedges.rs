//! Hedge budgets counted fleet-wide: a route's hedges may be `max_share` of the fleet's
//! requests over the last 10 s, less the hedges the whole fleet started.
//!
//! Once a second each replica writes its hedged routes' windows (requests and hedges over the
//! last 10 s) to `P:hedges:<route>`, one hash field per replica stamped with Redis's clock,
//! and reads the others' in the same script. The router's budget adds them to its own. The
//! request path never waits for Redis: a budget reads what the last exchange brought. A window
//! older than 3 s is left out, so a replica that loses Redis (or whose peers went away) governs
//! by its own counts alone, which keep the fleet within `max_share` anyway, only less evenly.

use std::time::Duration;

use redis::Script;
use switchyard::Router;

use crate::{Kept, RedisStore};

/// How long another replica's window counts after it was written.
const FRESH_MS: u64 = 3_000;
/// How often each replica exchanges its windows.
const EVERY: Duration = Duration::from_secs(1);

const EXCHANGE: &str = r#"
local key, replica, requests, hedges, fresh = KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', key, replica, requests .. ' ' .. hedges .. ' ' .. now)
redis.call('PEXPIRE', key, 60000)
local total_requests, total_hedges = 0, 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  if all[i] ~= replica then
    local r, h, at = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$')
    if r and now - tonumber(at) <= fresh then
      total_requests = total_requests + tonumber(r)
      total_hedges = total_hedges + tonumber(h)
    elseif not r or now - tonumber(at) > 60000 then
      redis.call('HDEL', key, all[i])
    end
  end
end
return {total_requests, total_hedges}
"#;

/// The exchange of one replica's hedge windows with the fleet's.
pub struct SharedHedges {
    redis: Kept,
    prefix: String,
    replica: String,
    exchange: Script,
}

impl SharedHedges {
    /// The exchange through `store`'s Redis, under its prefix, as its replica.
    pub fn new(store: &RedisStore) -> Self {
        let settings = store.settings();
        Self {
            redis: Kept::new(store),
            prefix: settings.prefix.clone(),
            replica: settings.replica.clone(),
            exchange: Script::new(EXCHANGE),
        }
    }

    /// Exchanges once a second, for as long as the process runs, on the current runtime.
    pub fn start(self, router: Router) {
        self.start_with(move || Some(router.clone()));
    }

    /// [`start`](Self::start), exchanging the windows of whichever router `current` returns at
    /// each tick (a gateway that reloads its configuration hands over its routes as they are),
    /// until it returns `None`.
    pub fn start_with(self, current: impl Fn() -> Option<Router> + Send + 'static) {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(router) = current() else { return };
                if let Err(reason) = self.sync(&router).await {
                    // The budgets fall back to this replica's own counts as the fleet's go stale.
                    tracing::debug!(reason, "hedge budgets not exchanged with the fleet");
                }
            }
        });
    }

    /// One exchange: writes every hedged route's window and sets what the rest of the fleet
    /// counted (nothing, for windows gone stale).
    pub async fn sync(&self, router: &Router) -> Result<(), String> {
        let windows = router.hedge_windows();
        if windows.is_empty() {
            return Ok(());
        }
        let result = self.exchange_all(router, &windows).await;
        if result.is_err() {
            // What the fleet said is going stale: each replica governs by its own counts.
            for window in &windows {
                router.set_fleet_hedges(&window.route, 0, 0);
            }
        }
        result
    }

    async fn exchange_all(&self, router: &Router, windows: &[switchyard::HedgeWindow]) -> Result<(), String> {
        let mut conn = self.redis.connection().await?;
        for window in windows {
            let key = format!("{}:hedges:{}", self.prefix, window.route);
            let mut call = self.exchange.key(key);
            call.arg(&self.replica).arg(window.requests).arg(window.hedges).arg(FRESH_MS);
            let (requests, hedges): (u64, u64) = self.redis.bounded(call.invoke_async(&mut conn)).await?;
            router.set_fleet_hedges(&window.route, requests, hedges);
        }
        Ok(())
    }
}
