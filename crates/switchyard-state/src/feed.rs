//! The fleet's events in Redis: every replica appends its router events and finished requests
//! to one stream, `P:events` (capped at about [`KEPT`] entries), so that `/admin/events?scope=fleet`
//! on any replica follows the whole fleet in the order Redis received them. Each entry is the
//! event's name (`n`) and its JSON (`d`, naming its replica).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::{Kept, RedisStore};

/// Entries the stream keeps, about (Redis trims it in whole nodes).
pub const KEPT: usize = 10_000;

/// One event of the fleet's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetEvent {
    /// Its id in the stream (`<ms>-<seq>`): where the next read starts.
    pub id: String,
    /// Its name (`circuit_opened`, `request_finished`).
    pub name: String,
    /// Its JSON.
    pub json: String,
}

/// The fleet's event stream in the Redis of a [`RedisStore`].
pub struct SharedEvents {
    redis: Kept,
    key: String,
}

impl std::fmt::Debug for SharedEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEvents").field("key", &self.key).finish_non_exhaustive()
    }
}

impl SharedEvents {
    /// The stream of `store`'s fleet.
    pub fn new(store: &RedisStore) -> Self {
        Self { redis: Kept::new(store), key: format!("{}:events", store.settings().prefix) }
    }

    /// Appends `events` (name, JSON), in order.
    pub async fn add(&self, events: &[(&str, &str)]) -> Result<(), String> {
        if events.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.connection().await?;
        let mut pipe = redis::pipe();
        for (name, json) in events {
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(KEPT)
                .arg("*")
                .arg("n")
                .arg(*name)
                .arg("d")
                .arg(*json)
                .ignore();
        }
        pipe.cmd("PEXPIRE").arg(&self.key).arg(86_400_000u64).ignore();
        self.redis.bounded(pipe.query_async::<()>(&mut conn)).await
    }

    /// A reader of the stream: a connection of its own, for reads that wait.
    pub async fn reader(&self) -> Result<EventReader, String> {
        let conn = self.redis.own_connection(WAIT).await?;
        Ok(EventReader { conn, key: self.key.clone(), url: self.redis.url().to_owned() })
    }
}

/// How long one read waits for new events.
const WAIT: Duration = Duration::from_secs(5);

/// Reads the fleet's stream from a connection of its own.
pub struct EventReader {
    conn: MultiplexedConnection,
    key: String,
    url: String,
}

impl std::fmt::Debug for EventReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReader").field("key", &self.key).finish_non_exhaustive()
    }
}

type Entries = Vec<(String, Vec<(String, String)>)>;

impl EventReader {
    /// The last `count` events, oldest first, and the id to read on from (`$`-like: the newest
    /// id, or `0` when the stream is empty).
    pub async fn recent(&mut self, count: usize) -> Result<(Vec<FleetEvent>, String), String> {
        let newest: Entries = redis::cmd("XREVRANGE")
            .arg(&self.key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count.max(1))
            .query_async(&mut self.conn)
            .await
            .map_err(|error| crate::scrub(&error.to_string(), &self.url))?;
        let from = newest.first().map_or_else(|| "0".to_owned(), |(id, _)| id.clone());
        let mut events: Vec<FleetEvent> = newest.into_iter().take(count).filter_map(event).collect();
        events.reverse();
        Ok((events, from))
    }

    /// The events after `after`, waiting a few seconds for one; empty when none came.
    pub async fn after(&mut self, after: &str) -> Result<Vec<FleetEvent>, String> {
        let reply: Option<Vec<(String, Entries)>> = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(256)
            .arg("BLOCK")
            .arg(WAIT.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(after)
            .query_async(&mut self.conn)
            .await
            .map_err(|error| crate::scrub(&error.to_string(), &self.url))?;
        Ok(reply.into_iter().flatten().flat_map(|(_, entries)| entries).filter_map(event).collect())
    }
}

/// An entry as an event; `None` for one missing its fields.
fn event((id, fields): (String, Vec<(String, String)>)) -> Option<FleetEvent> {
    let field = |name: &str| fields.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
    Some(FleetEvent { id, name: field("n")?, json: field("d")? })
}
