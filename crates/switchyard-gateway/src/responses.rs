//! The Responses API's conversations, kept by the gateway: each response it served (unless the
//! client sent `store: false`) with the whole conversation up to it, so that
//! `previous_response_id` continues a conversation whichever provider answered its turns.
//!
//! Bounded by count, age and bytes (`gateway.responses`); the oldest go first. An entry
//! belongs to the gateway key that created it, named by a hash of the key, never the key: to
//! another key it does not exist.
//!
//! Each output item of a kept response is also kept on its own, under a hash of its owner and
//! its id, so that an `item_reference` (an item of an earlier response named by id, as the
//! Vercel AI SDK sends a conversation) is read back whichever replica served it, without
//! reading the whole conversation its response holds. Deleting a response deletes its items.
//!
//! With `state.redis`, entries are also kept in Redis (`switchyard_state::responses`), with
//! the same bounds for the fleet, so that a conversation one replica served goes on through
//! any other. Reads ask Redis first and fall back to this replica's memory when Redis does not
//! answer; writes go to both, and one Redis missed is written again after the next it takes.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard::bounded::{Bounded, Bounds};
use switchyard::credential::{CredentialId, Secret};
use switchyard_state::responses::SharedResponses;
use tokio::time::Instant;

use crate::config::ResponsesBounds;

/// One kept response.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    /// The hash of the gateway key that created it (empty on a gateway without keys).
    pub owner: String,
    /// The response object, as `GET /v1/responses/{id}` returns it.
    pub response: Value,
    /// The conversation through this response's output, as Responses items, without its
    /// instructions (which a continuation does not inherit). Items only the provider that
    /// wrote them can read (reasoning, with its encrypted content) travel to providers that
    /// speak the Responses API and are left out of translations; Claude's thinking as the
    /// gateway encoded it travels the other way, to an Anthropic target only.
    pub items: Vec<Value>,
}

/// One kept response as this replica holds it: its JSON, so that the bytes the bounds count
/// are the bytes held (a `Value` tree takes several times its JSON), read again on the rare
/// continuation or `GET`.
#[derive(Debug)]
struct Entry {
    owner: String,
    json: Box<[u8]>,
    /// How many times Redis had been found emptied when this was kept (0 without a fleet).
    losses: u64,
}

/// The store: this replica's memory, and the fleet's Redis when there is one.
#[derive(Debug)]
pub struct ResponseStore {
    inner: Mutex<Bounded<String, Entry>>,
    /// Each kept response's output items (their JSON), by [`index_key`]: how an
    /// `item_reference` is read back. Held to [`index_bounds`].
    index: Mutex<Bounded<String, Box<[u8]>>>,
    ids: AtomicU64,
    random: RandomState,
    shared: Option<Shared>,
}

/// The fleet's Redis: the entries, and their items. A write Redis missed is written again
/// once it takes one (`SharedResponses` keeps it meanwhile), and this replica keeps the
/// response meanwhile.
#[derive(Debug)]
struct Shared {
    responses: SharedResponses,
    items: SharedResponses,
}

/// Output items per response the item index makes room for.
pub const ITEMS_PER_RESPONSE: usize = 16;

/// The item index's bounds, from the entries' own: as old, room for [`ITEMS_PER_RESPONSE`]
/// items per entry, and as many bytes again as the entries (an item is held twice: in its
/// response, and on its own).
pub fn index_bounds(bounds: ResponsesBounds) -> ResponsesBounds {
    ResponsesBounds {
        max_entries: bounds.max_entries.saturating_mul(ITEMS_PER_RESPONSE),
        max_age: bounds.max_age,
        max_bytes: bounds.max_bytes,
    }
}

/// The index key of item `item` of `owner`'s responses: a hash of both, so that another key's
/// items are not found, and a key name in Redis says neither whose nor which item it is.
fn index_key(owner: &str, item: &str) -> String {
    CredentialId::derive("responses", "item", Some(&Secret::new(format!("{owner}/{item}"))))
        .as_str()
        .to_owned()
}

/// What [`ResponseStore::remember`] kept here, for [`ResponseStore::share`] to write to the
/// fleet's Redis: the entry's JSON, and its output items' index keys and JSON.
#[derive(Debug)]
pub struct ToShare {
    bytes: Vec<u8>,
    items: Vec<(String, Vec<u8>)>,
}

/// The fleet's Redis did not answer, and the response asked for is not kept here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetAway;

/// Why the items a request references cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// More references than [`MAX_REFERENCES`].
    TooMany,
    /// The items they name add up to more bytes than the request may carry.
    TooLarge,
}

/// The most `item_reference`s one request may hold.
pub const MAX_REFERENCES: usize = 4096;

/// The bounds of a [`Bounded`] from `bounds`: kept while younger than `max_age`, so that at
/// `max_age` itself an entry is gone.
fn kept(bounds: ResponsesBounds) -> Bounds {
    Bounds {
        max_entries: bounds.max_entries,
        max_age: bounds.max_age.saturating_sub(Duration::from_nanos(1)),
        max_bytes: bounds.max_bytes,
    }
}

impl ResponseStore {
    /// An empty store with `bounds`, in memory only.
    pub fn new(bounds: ResponsesBounds) -> Self {
        Self {
            inner: Mutex::new(Bounded::new(kept(bounds))),
            index: Mutex::new(Bounded::new(kept(index_bounds(bounds)))),
            ids: AtomicU64::new(0),
            random: RandomState::new(),
            shared: None,
        }
    }

    /// A store that also keeps its entries, and the index of their items (held to
    /// [`index_bounds`]), in the fleet's Redis.
    pub fn shared(bounds: ResponsesBounds, responses: SharedResponses, items: SharedResponses) -> Self {
        Self { shared: Some(Shared { responses, items }), ..Self::new(bounds) }
    }

    /// Keeps `stored` under `id` here and, with a fleet, in Redis (a failure there is logged:
    /// this replica still has it).
    pub async fn keep(&self, id: String, stored: Stored) -> bool {
        match self.remember(id.clone(), stored) {
            Some(to_share) => self.share(&id, &to_share).await,
            None => false,
        }
    }

    /// Keeps `stored` under `id` in this replica's memory, and indexes its output items; with
    /// a fleet, returns what [`share`](Self::share) writes to Redis.
    pub fn remember(&self, id: String, stored: Stored) -> Option<ToShare> {
        let items = output_items(&stored);
        let json = serde_json::to_vec(&stored).unwrap_or_default();
        let to_share = self.shared.as_ref().map(|_| ToShare { bytes: json.clone(), items: items.clone() });
        if !self.put_json(id, stored.owner, json) {
            return None;
        }
        let mut index = self.index.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        for (key, item) in items {
            let bytes = key.len() + item.len();
            index.insert(key, item.into_boxed_slice(), bytes, now);
        }
        to_share
    }

    /// Writes what [`remember`](Self::remember) returned to the fleet's Redis; whether Redis
    /// took it. A failure is logged, and the response written again once Redis takes a write:
    /// this replica keeps it meanwhile.
    pub async fn share(&self, id: &str, to_share: &ToShare) -> bool {
        let Some(shared) = &self.shared else { return false };
        if let Err(reason) = shared.responses.put(id, &to_share.bytes).await {
            tracing::warn!(
                id,
                reason,
                "a response could not be kept in Redis; this replica keeps it, and writes it again once Redis takes a write"
            );
            // Its items go with it when Redis takes writes again.
            for (key, item) in &to_share.items {
                shared.items.defer(key, item);
            }
            return false;
        }
        for (key, item) in &to_share.items {
            if let Err(reason) = shared.items.put(key, item).await {
                tracing::warn!(id, reason, "a response's items could not be kept in Redis");
            }
        }
        true
    }

    /// The output items of `owner`'s kept responses that `ids` name (an `item_reference`
    /// each), in order, `None` for one not kept. Each distinct id is read once; after Redis
    /// fails to answer once, only this replica's memory is read. At most
    /// [`MAX_REFERENCES`] ids, and items of `max_bytes` together.
    pub async fn items(
        &self,
        owner: &str,
        ids: &[&str],
        max_bytes: usize,
    ) -> Result<Vec<Option<Value>>, Unreadable> {
        if ids.len() > MAX_REFERENCES {
            return Err(Unreadable::TooMany);
        }
        // Each distinct item once: its value and its size as JSON.
        let mut read: HashMap<&str, Option<(Value, usize)>> = HashMap::new();
        let (mut fleet, mut bytes) = (self.shared.as_ref(), 0usize);
        let mut found = Vec::with_capacity(ids.len());
        for &id in ids {
            if !read.contains_key(id) {
                let key = index_key(owner, id);
                let mut json = None;
                if let Some(shared) = fleet {
                    match shared.items.get(&key).await {
                        Ok(kept) => json = kept,
                        Err(reason) => {
                            tracing::warn!(reason, "Redis did not answer; reading this replica's items");
                            fleet = None;
                        }
                    }
                }
                let item = json.or_else(|| self.local_item(&key)).and_then(|json| {
                    serde_json::from_slice::<Value>(&json).ok().map(|value| (value, json.len()))
                });
                read.insert(id, item);
            }
            let item = read[id].as_ref();
            bytes = bytes.saturating_add(item.map_or(0, |(_, size)| *size));
            if bytes > max_bytes {
                return Err(Unreadable::TooLarge);
            }
            found.push(item.map(|(value, _)| value.clone()));
        }
        Ok(found)
    }

    /// The item under index key `key` in this replica's memory.
    fn local_item(&self, key: &str) -> Option<Vec<u8>> {
        let mut index = self.index.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        index.get(&key.to_owned(), Instant::now()).map(|(json, _)| json.to_vec())
    }

    /// The response `id`, when it is kept (here or in the fleet's Redis) and belongs to `owner`;
    /// `Err` when it is not here and the fleet's Redis did not answer (another replica may
    /// keep it: asking again may find it).
    pub async fn find(&self, id: &str, owner: &str) -> Result<Option<Arc<Stored>>, FleetAway> {
        if let Some(shared) = &self.shared {
            match shared.responses.get(id).await {
                Ok(Some(bytes)) => match serde_json::from_slice::<Stored>(&bytes) {
                    Ok(stored) => return Ok((stored.owner == owner).then(|| Arc::new(stored))),
                    Err(error) => tracing::warn!(id, %error, "a response kept in Redis could not be read"),
                },
                // Not in the fleet's store (expired, deleted through another replica): only
                // an entry that never reached Redis, or that a Redis found emptied since lost,
                // is still to be found here.
                Ok(None) => {
                    let lost = self.kept_before(id, shared.responses.losses());
                    let found = self.get(id, owner).filter(|_| lost || shared.responses.waiting(id));
                    if let (Some(stored), true) = (&found, lost) {
                        // Written back, for the replicas that have it only from Redis; once:
                        // gone from Redis again later, it was deleted or evicted there.
                        let bytes = serde_json::to_vec(&**stored).unwrap_or_default();
                        match shared.responses.put(id, &bytes).await {
                            Ok(()) => self.restamp(id, shared.responses.losses()),
                            Err(reason) => {
                                tracing::warn!(id, reason, "a response Redis lost could not be written back")
                            }
                        }
                    }
                    return Ok(found);
                }
                Err(reason) => {
                    tracing::warn!(id, reason, "Redis did not answer; reading this replica's responses");
                    return self.get(id, owner).map(Some).ok_or(FleetAway);
                }
            }
        }
        Ok(self.get(id, owner))
    }

    /// Forgets the response `id` here and in the fleet's Redis; whether it was kept for `owner`
    /// (`Err` when the fleet's Redis did not answer and may keep it: not here, or here and
    /// shared, when deleting it here alone would leave it to the other replicas while the
    /// client is told it is gone; nothing is deleted then, and asking again deletes it).
    pub async fn forget(&self, id: &str, owner: &str) -> Result<bool, FleetAway> {
        let Some(found) = self.find(id, owner).await? else { return Ok(false) };
        let items = output_items(&found);
        if let Some(shared) = &self.shared {
            // One that never reached Redis is deleted here alone (and not sent again).
            let only_here = shared.responses.waiting(id);
            if let Err(reason) = shared.responses.delete(id).await
                && !only_here
            {
                tracing::warn!(
                    id,
                    reason,
                    "a response could not be deleted from Redis; kept until asked again"
                );
                return Err(FleetAway);
            }
            // Each one: a delete also drops its write that waits, which must not be made later.
            let mut failed = None;
            for (key, _) in &items {
                if let Err(reason) = shared.items.delete(key).await {
                    failed = Some(reason);
                }
            }
            if let Some(reason) = failed {
                tracing::warn!(id, reason, "a response's items could not be deleted from Redis");
            }
        }
        self.delete(id, &found.owner);
        let mut index = self.index.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (key, _) in items {
            index.remove(&key);
        }
        Ok(true)
    }

    /// A fresh response id (`resp_` and 32 hex digits): the time, a counter and random bits,
    /// so ids of two replicas never meet.
    pub fn new_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let random = self.random.hash_one((n, now));
        format!("resp_{:08x}{:08x}{random:016x}", now & 0xffff_ffff, n & 0xffff_ffff)
    }

    /// Keeps `stored` under `id`, making room by dropping the oldest entries.
    pub fn put(&self, id: String, stored: Stored) {
        let json = serde_json::to_vec(&stored).unwrap_or_default();
        self.put_json(id, stored.owner, json);
    }

    /// Keeps `json` under `id`; `false` when it is larger than the byte bound alone.
    fn put_json(&self, id: String, owner: String, json: Vec<u8>) -> bool {
        let bytes = json.len() + owner.len();
        let losses = self.shared.as_ref().map_or(0, |shared| shared.responses.losses());
        let entry = Entry { owner, json: json.into_boxed_slice(), losses };
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let kept = inner.insert(id.clone(), entry, bytes, Instant::now());
        if !kept {
            tracing::warn!(id, bytes, "a response larger than gateway.responses.max_bytes is not kept");
        }
        kept
    }

    /// Whether the response `id` is kept here from before Redis was last found emptied (the
    /// count of such findings is now `losses`): Redis lost it, no replica deleted it.
    fn kept_before(&self, id: &str, losses: u64) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        inner.get(&id.to_owned(), Instant::now()).is_some_and(|(entry, _)| entry.losses < losses)
    }

    /// Notes that the response `id` is in Redis again since it was last found emptied.
    fn restamp(&self, id: &str, losses: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = inner.get_mut(&id.to_owned()) {
            entry.losses = losses;
        }
    }

    /// The response `id`, when it is kept and belongs to `owner`.
    pub fn get(&self, id: &str, owner: &str) -> Option<Arc<Stored>> {
        let json = {
            let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let (entry, _) = inner.get(&id.to_owned(), Instant::now())?;
            if entry.owner != owner {
                return None;
            }
            entry.json.clone()
        };
        // Read outside the lock.
        match serde_json::from_slice::<Stored>(&json) {
            Ok(stored) => Some(Arc::new(stored)),
            Err(error) => {
                tracing::warn!(id, %error, "a kept response could not be read");
                None
            }
        }
    }

    /// Forgets the response `id`; whether it was kept and belonged to `owner`.
    pub fn delete(&self, id: &str, owner: &str) -> bool {
        if self.get(id, owner).is_none() {
            return false;
        }
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&id.to_owned());
        true
    }

    /// How many responses are kept, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).usage(Instant::now())
    }
}

/// The output items of `stored` that have an id: their index keys and JSON.
fn output_items(stored: &Stored) -> Vec<(String, Vec<u8>)> {
    let output = stored.response["output"].as_array().into_iter().flatten();
    output
        .filter_map(|item| {
            Some((index_key(&stored.owner, item["id"].as_str()?), serde_json::to_vec(item).ok()?))
        })
        .collect()
}

/// The owner name of a gateway key: a hash, never the key.
pub fn owner_of(key: Option<&str>) -> String {
    key.map(|key| CredentialId::derive("gateway", "responses", Some(&Secret::new(key))).as_str().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn stored(owner: &str, text: &str) -> Stored {
        Stored {
            owner: owner.to_owned(),
            response: json!({"id": text}),
            items: vec![json!({"role": "user", "content": text})],
        }
    }

    fn bounds(max_entries: usize, max_age: u64, max_bytes: usize) -> ResponsesBounds {
        ResponsesBounds { max_entries, max_age: Duration::from_secs(max_age), max_bytes }
    }

    #[tokio::test(start_paused = true)]
    async fn output_items_are_read_back_by_id_for_their_owner_until_their_response_is_deleted() {
        let store = ResponseStore::new(bounds(10, 60, 1 << 20));
        let response = json!({"id": "resp_1", "output": [
            {"type": "reasoning", "id": "rs_1_0", "summary": []},
            {"type": "message", "id": "msg_1_1", "role": "assistant", "content": []}]});
        store.keep("resp_1".into(), Stored { owner: "alice".into(), response, items: Vec::new() }).await;
        let found = store.items("alice", &["msg_1_1", "rs_1_0", "msg_9", "msg_1_1"], 1 << 20).await.unwrap();
        let kinds: Vec<_> = found.iter().map(|item| item.as_ref().map(|item| item["type"].clone())).collect();
        assert_eq!(kinds, [Some(json!("message")), Some(json!("reasoning")), None, Some(json!("message"))]);
        assert_eq!(
            store.items("bob", &["msg_1_1"], 1 << 20).await.unwrap(),
            [None],
            "another key's items are not found"
        );

        // What references may read back is bounded: in count, and in bytes (each use counts).
        let many = vec!["msg_1_1"; MAX_REFERENCES + 1];
        assert_eq!(store.items("alice", &many, usize::MAX).await, Err(Unreadable::TooMany));
        let one = serde_json::to_vec(&found[0]).unwrap().len();
        assert!(store.items("alice", &["msg_1_1", "msg_1_1"], 2 * one).await.is_ok());
        assert_eq!(
            store.items("alice", &["msg_1_1", "msg_1_1"], 2 * one - 1).await,
            Err(Unreadable::TooLarge)
        );

        assert_eq!(store.forget("resp_1", "alice").await, Ok(true));
        assert_eq!(
            store.items("alice", &["msg_1_1"], 1 << 20).await.unwrap(),
            [None],
            "nor a deleted response's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_items_of_a_response_too_large_to_keep_are_not_kept_either() {
        let item = json!({"type": "message", "id": "msg_1_0", "content": "x".repeat(100)});
        // Room for the item (and its index key) on its own, not for the entry that holds it.
        let room = serde_json::to_vec(&item).unwrap().len() + 32;
        let stored = Stored {
            owner: "alice".into(),
            response: json!({"id": "resp_1", "output": [item]}),
            items: Vec::new(),
        };
        assert!(serde_json::to_vec(&stored).unwrap().len() > room);
        let store = ResponseStore::new(bounds(10, 60, room));
        store.keep("resp_1".into(), stored).await;
        assert!(store.get("resp_1", "alice").is_none());
        assert_eq!(store.items("alice", &["msg_1_0"], 1 << 20).await.unwrap(), [None]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_is_kept_for_its_owner_until_it_is_too_old() {
        let store = ResponseStore::new(bounds(10, 60, 1 << 20));
        store.put("resp_1".into(), stored("alice", "hi"));
        assert_eq!(
            store.get("resp_1", "alice").unwrap().items,
            vec![json!({"role": "user", "content": "hi"})]
        );
        assert!(store.get("resp_1", "bob").is_none(), "another key sees nothing");
        assert!(!store.delete("resp_1", "bob"));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(store.get("resp_1", "alice").is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(store.get("resp_1", "alice").is_none());
        assert_eq!(store.usage(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_go_first_when_the_count_or_the_bytes_are_reached() {
        // Counted at what is held: the entry's JSON, and its owner's name.
        let one = serde_json::to_vec(&stored("a", "x0")).unwrap().len() + "a".len();
        let store = ResponseStore::new(bounds(3, 3600, one * 2));
        for i in 0..3 {
            store.put(format!("resp_{i}"), stored("a", &format!("x{i}")));
        }
        assert!(store.get("resp_0", "a").is_none(), "bytes: two fit");
        assert!(store.get("resp_1", "a").is_some() && store.get("resp_2", "a").is_some());
        let store = ResponseStore::new(bounds(2, 3600, 1 << 20));
        for i in 0..3 {
            store.put(format!("resp_{i}"), stored("a", &format!("x{i}")));
        }
        assert_eq!(store.usage().0, 2);
        assert!(store.get("resp_0", "a").is_none());
        assert!(store.delete("resp_2", "a"));
        assert!(store.get("resp_2", "a").is_none());
        assert_eq!(store.usage(), (1, one));
    }

    #[test]
    fn ids_are_distinct_and_owners_never_hold_the_key() {
        let store = ResponseStore::new(ResponsesBounds::default());
        let ids: std::collections::HashSet<_> = (0..1000).map(|_| store.new_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.starts_with("resp_") && id.len() == 37));
        let owner = owner_of(Some("gw-secret-key-123456"));
        assert!(!owner.contains("secret") && owner.len() == 12);
        assert_ne!(owner, owner_of(Some("gw-secret-key-654321")));
        assert_eq!(owner_of(None), "");
    }

    /// What these tests keep in Redis: ten responses for a minute.
    const KEPT: switchyard_state::responses::KeptBounds = switchyard_state::responses::KeptBounds {
        max_entries: 10,
        max_age: Duration::from_secs(60),
        max_bytes: 1 << 20,
    };

    /// A store over `redis`, its responses and their items kept there as the gateway keeps them.
    fn kept_in(
        redis: &switchyard_state::testing::RedisServer,
    ) -> (switchyard_state::RedisStore, ResponseStore) {
        let settings = switchyard_state::StateSettings::new(redis.url());
        let store = switchyard_state::RedisStore::new(settings).unwrap();
        let responses = ResponseStore::shared(
            bounds(10, 60, 1 << 20),
            SharedResponses::named(&store, "response", KEPT),
            SharedResponses::named(&store, "response_item", KEPT),
        );
        (store, responses)
    }

    #[tokio::test]
    async fn what_redis_missed_is_sent_by_the_periodic_round_without_a_later_write() {
        use switchyard_state::testing::RedisServer;
        let mut redis = RedisServer::start();
        let (store, responses) = kept_in(&redis);
        let shared = || SharedResponses::named(&store, "response", KEPT);
        redis.kill();
        let mut answered = stored("alice", "one");
        answered.response["output"] = json!([{"type": "message", "id": "msg_1", "content": []}]);
        assert!(!responses.keep("resp_1".to_owned(), answered.clone()).await, "Redis is away");
        redis.restart();
        store.resend_missed().await;
        let held = shared().get("resp_1").await.unwrap().expect("sent again");
        assert_eq!(serde_json::from_slice::<Stored>(&held).unwrap(), answered);
        assert_eq!(responses.find("resp_1", "alice").await.map(|found| found.is_some()), Ok(true));
        // Its items too, for another replica to read them by reference.
        let items = SharedResponses::named(&store, "response_item", KEPT);
        assert!(items.get(&index_key("alice", "msg_1")).await.unwrap().is_some(), "its item sent again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_response_a_redis_restarted_empty_lost_is_found_here_and_written_back() {
        use switchyard_state::testing::RedisServer;
        let mut redis = RedisServer::start();
        let (store, responses) = kept_in(&redis);
        store.start();
        let shared = || SharedResponses::named(&store, "response", KEPT);
        let losses = shared();
        // The store has read Redis once (its epoch) before it can find it emptied.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.status().replicas.is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(responses.keep("resp_1".to_owned(), stored("alice", "one")).await, "Redis takes it");
        redis.restart();
        while losses.losses() == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(losses.losses(), 1, "the store found Redis emptied");
        assert_eq!(responses.find("resp_1", "alice").await.map(|found| found.is_some()), Ok(true));
        assert!(shared().get("resp_1").await.unwrap().is_some(), "written back for the other replicas");
        assert_eq!(
            responses.find("resp_1", "bob").await.map(|found| found.is_some()),
            Ok(false),
            "its owner's only"
        );
        // Deleted through another replica since: gone, not written back again.
        shared().delete("resp_1").await.unwrap();
        assert_eq!(responses.find("resp_1", "alice").await.map(|found| found.is_some()), Ok(false));
    }
}
