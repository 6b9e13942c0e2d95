//! Who this replica is in the fleet: the name it claims at start, and what its heartbeat tells
//! the others (`P:replica:<name>`, renewed by the link's reconciliation).

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Replica, Shared, StateError, TargetView};

/// What the heartbeat tells of this run of the replica, beside its name and configuration.
pub(crate) struct Member {
    /// Tells this run from another under the same name (a restart, or a second process).
    pub(crate) instance: String,
    pub(crate) started_ms: u64,
    pub(crate) in_flight: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>,
    pub(crate) views: OnceLock<Box<dyn Fn() -> Vec<TargetView> + Send + Sync>>,
}

/// Unwell targets a heartbeat carries at most.
const MAX_VIEWS: usize = 64;

impl Member {
    pub(crate) fn new() -> Self {
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self {
            instance: format!("{:016x}", switchyard::trace::random_id()),
            started_ms: started.as_millis() as u64,
            in_flight: OnceLock::new(),
            views: OnceLock::new(),
        }
    }

    /// The heartbeat's description of this replica.
    pub(crate) fn describe(&self, name: &str, config_hash: &str) -> Replica {
        Replica {
            id: name.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            config_hash: config_hash.to_owned(),
            host: crate::host_name(),
            pid: std::process::id(),
            started_ms: self.started_ms,
            in_flight: self.in_flight.get().map_or(0, |count| count()),
            instance: self.instance.clone(),
            unwell: self.views.get().map_or_else(Vec::new, |views| {
                let mut views = views();
                views.truncate(MAX_VIEWS);
                views
            }),
        }
    }
}

/// The heartbeat's lifetime: three reconcile periods, a second at least.
pub(crate) fn heartbeat_ttl(every: Duration) -> Duration {
    (every * 3).max(Duration::from_secs(1))
}

/// Claims the replica's name (see [`RedisStore::claim`](crate::RedisStore::claim)).
pub(crate) async fn claim(shared: &Shared, client: &redis::Client) -> Result<bool, StateError> {
    let settings = &shared.settings;
    let key = format!("{}:replica:{}", settings.prefix, settings.replica);
    let ttl = heartbeat_ttl(settings.reconcile_every);
    let hash = shared.config_hash.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let me = shared.member.describe(&settings.replica, &hash);
    let info = serde_json::to_string(&me).unwrap_or_default();
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(settings.timeout * 4, client.get_multiplexed_async_connection()).await
    else {
        return Ok(false);
    };
    // A claim left by a run that did not leave lapses within the heartbeat's lifetime.
    let deadline = tokio::time::Instant::now() + ttl + settings.reconcile_every;
    let mut holder = None;
    loop {
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(&info).arg("NX").arg("PX").arg(ttl.as_millis() as u64);
        let claimed =
            tokio::time::timeout(settings.timeout, set.query_async::<Option<String>>(&mut conn)).await;
        let Ok(Ok(claimed)) = claimed else { return Ok(false) };
        if claimed.is_some() {
            return Ok(true);
        }
        let mut get = redis::cmd("GET");
        get.arg(&key);
        let Ok(Ok(found)) =
            tokio::time::timeout(settings.timeout, get.query_async::<Option<String>>(&mut conn)).await
        else {
            return Ok(false);
        };
        let found = found.and_then(|text| serde_json::from_str::<Replica>(&text).ok());
        if found.as_ref().is_some_and(|found| found.instance == me.instance) {
            return Ok(true);
        }
        holder = found.or(holder);
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(StateError::NameTaken {
        name: settings.replica.clone(),
        holder: holder.map_or_else(String::new, describe_holder),
    })
}

/// `host vm-1, pid 812, up since 2026-12-04T10:00:00Z`.
fn describe_holder(holder: Replica) -> String {
    let started = UNIX_EPOCH + Duration::from_millis(holder.started_ms);
    let since = switchyard::time::rfc3339(started);
    format!("host {}, pid {}, started {since}", holder.host, holder.pid)
}
