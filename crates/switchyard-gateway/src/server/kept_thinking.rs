//! Claude's signed thinking of the tool turns it answered a client of OpenAI's dialect, kept
//! for the turn to be sent back with. Claude thinks on through a tool loop only when its tool
//! turn comes back opening on the thinking it was thought in, and most clients of OpenAI's API
//! keep none of it on the assistant message (`thinking_blocks` is LiteLLM's form): the turn
//! went on without thinking. Kept by the client's key and the turn's first tool call's id (an
//! id Claude made up, which the client sends back with the turn), held to the bounds of
//! `gateway.responses` (a tool loop is a conversation too), the oldest forgotten first.
//!
//! With `state.redis`, each turn's thinking is also kept in the fleet's Redis (`P:thinking:`,
//! under a hash of its turn, with the turn itself inside, so that only that turn reads it), so
//! that a tool loop one replica answered thinks on through any other. A turn this replica does
//! not hold is asked of Redis, the last [`ASKED`] of a request in one round trip; when Redis
//! does not answer, the turn goes on without thinking, as it would have without a fleet; what it
//! found is held here from then on. A turn whose write Redis missed is written again after the
//! next write it takes.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use switchyard::ProviderError;
use switchyard::bounded::{Bounded, Bounds};
use switchyard::chat::{ChatChunk, ChatRequest, ChatResponse, Message, Role, THINKING_BLOCKS};
use switchyard::credential::{CredentialId, Secret};
use switchyard_providers::codec::StreamWriter;
use switchyard_state::responses::SharedResponses;
use tokio::time::Instant;

use super::sse::Held;
use crate::config::ResponsesBounds;

/// How many of a request's tool turns, the latest, the fleet's Redis is asked for at most:
/// Claude thinks on from the last one; earlier ones only add to what it remembers.
const ASKED: usize = 64;

/// Whose turn: the client key's label (empty without keys) and the turn's first call's id.
fn turn(key: &str, call: &str) -> String {
    format!("{key}\u{1f}{call}")
}

/// A turn's name in Redis: a hash of it, which says neither whose nor which it is.
fn shared_id(turn: &str) -> String {
    CredentialId::derive("thinking", "turn", Some(&Secret::new(turn.to_owned()))).as_str().to_owned()
}

/// A turn's thinking as Redis holds it: with the turn, so that another turn whose hash is the
/// same does not read it.
#[derive(serde::Serialize)]
struct Sharing<'a> {
    turn: &'a str,
    blocks: &'a [Value],
}

#[derive(serde::Deserialize)]
struct Shared {
    turn: String,
    blocks: Vec<Value>,
}

/// The thinking of the tool turns answered lately: this replica's, and the fleet's with
/// shared state (a write Redis missed is written again once it takes one: `SharedResponses`).
#[derive(Debug)]
pub(crate) struct KeptThinking {
    here: Mutex<Bounded<String, Arc<[Value]>>>,
    shared: Option<Arc<SharedResponses>>,
}

impl KeptThinking {
    /// Thinking kept here, held to `bounds`, and with `shared` in the fleet's Redis too.
    pub(crate) fn new(bounds: ResponsesBounds, shared: Option<SharedResponses>) -> Self {
        let bounds = Bounds {
            max_entries: bounds.max_entries,
            max_age: bounds.max_age.saturating_sub(Duration::from_nanos(1)),
            max_bytes: bounds.max_bytes,
        };
        Self { here: Mutex::new(Bounded::new(bounds)), shared: shared.map(Arc::new) }
    }

    fn here(&self) -> MutexGuard<'_, Bounded<String, Arc<[Value]>>> {
        self.here.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the thinking of `message`, Claude's answer to `key`, when it calls tools; with a
    /// fleet, what writes it to Redis.
    pub(crate) fn keep(&self, key: &str, message: &Message) -> Option<Held> {
        let call = message.tool_calls.first()?;
        self.keep_blocks(key, &call.id, message.thinking_blocks())
    }

    /// Keeps `blocks`, the thinking of the turn to `key` whose first call is `call`, here;
    /// with a fleet, returns what writes it to Redis, for the answer to wait on (so that the
    /// client, once it has its answer, may send the turn back to any replica).
    fn keep_blocks(&self, key: &str, call: &str, blocks: &[Value]) -> Option<Held> {
        if blocks.is_empty() {
            return None;
        }
        let turn = turn(key, call);
        let json = serde_json::to_vec(&Sharing { turn: &turn, blocks }).unwrap_or_default();
        let bytes = turn.len() + json.len();
        self.here().insert(turn.clone(), Arc::from(blocks), bytes, Instant::now());
        let (shared, id) = (self.shared.clone()?, shared_id(&turn));
        Some(Box::pin(async move {
            if let Err(reason) = shared.put(&id, &json).await {
                tracing::warn!(
                    reason,
                    "a tool turn's thinking could not be kept in Redis; this replica keeps it, and writes it again once Redis takes a write"
                );
            }
        }))
    }

    /// Opens each tool turn of `request` (from `key`) that came back without its thinking on
    /// the thinking kept for it: this replica's, else the fleet's.
    pub(crate) async fn restore(&self, key: &str, request: &mut ChatRequest) {
        let lacking = |m: &&mut Message| {
            m.role == Role::Assistant && !m.tool_calls.is_empty() && m.thinking_blocks().is_empty()
        };
        let mut turns: Vec<&mut Message> = request.messages.iter_mut().filter(lacking).collect();
        if turns.is_empty() {
            return;
        }
        let mut missing = Vec::new();
        {
            let (mut here, now) = (self.here(), Instant::now());
            for (n, message) in turns.iter_mut().enumerate() {
                let turn = turn(key, &message.tool_calls[0].id);
                match here.get(&turn, now) {
                    Some((blocks, _)) => open(message, blocks),
                    None => missing.push((n, turn)),
                }
            }
        }
        let Some(shared) = &self.shared else { return };
        let missing = &missing[missing.len().saturating_sub(ASKED)..];
        let ids: Vec<String> = missing.iter().map(|(_, turn)| shared_id(turn)).collect();
        let found = match shared.get_many(&ids).await {
            Ok(found) => found,
            Err(reason) => {
                tracing::debug!(reason, "Redis did not say what thinking it keeps; the turns go on without");
                return;
            }
        };
        let (mut here, now) = (self.here(), Instant::now());
        for ((n, turn), json) in missing.iter().zip(found) {
            let Some(json) = json else { continue };
            let Some(kept) = serde_json::from_slice::<Shared>(&json).ok().filter(|kept| kept.turn == *turn)
            else {
                continue;
            };
            open(turns[*n], &kept.blocks);
            // Held here from now on: the loop's next requests find it without asking again.
            let bytes = turn.len() + json.len();
            here.insert(turn.clone(), Arc::from(kept.blocks), bytes, now);
        }
    }
}

/// Opens `message` on `blocks`.
fn open(message: &mut Message, blocks: &[Value]) {
    message.extra.insert(THINKING_BLOCKS.to_owned(), Value::Array(blocks.to_vec()));
}

/// A stream's writer that keeps the thinking of the tool turn it writes, once it ended well.
pub(crate) struct Keeping<W> {
    inner: W,
    kept: Arc<super::AppState>,
    key: Arc<str>,
    /// The answer's first call's id, once a chunk told it.
    call: Option<String>,
    /// The answer's signed thinking so far.
    blocks: Vec<Value>,
    /// Its write to the fleet's Redis, once the answer ended, for its last events to wait on.
    sharing: Option<Held>,
}

impl<W: StreamWriter> Keeping<W> {
    pub(crate) fn new(inner: W, kept: Arc<super::AppState>, key: Arc<str>) -> Self {
        Self { inner, kept, key, call: None, blocks: Vec::new(), sharing: None }
    }

    /// Notes what of `chunk` the kept turn needs: a call's id, a signed thinking block.
    fn note(&mut self, chunk: &ChatChunk) {
        let Some(choice) = chunk.choices.iter().find(|choice| choice.index == 0) else { return };
        if self.call.is_none() {
            self.call = choice.delta.tool_calls.iter().find_map(|call| call.id.clone());
        }
        self.blocks.extend(choice.delta.thinking_blocks.iter().cloned());
    }
}

impl<W: StreamWriter> StreamWriter for Keeping<W> {
    fn frame(&mut self, chunk: &ChatChunk) -> Option<Bytes> {
        self.note(chunk);
        self.inner.frame(chunk)
    }

    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        self.inner.chunk(chunk, out);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if let Some(call) = &self.call {
            self.sharing = self.kept.kept_thinking.keep_blocks(&self.key, call, &self.blocks);
        }
        self.inner.end(out);
    }

    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        self.inner.fail(error, out)
    }
}

impl<W: super::sse::Encoder> super::sse::Encoder for Keeping<W> {
    fn hold(&mut self) -> Option<Held> {
        self.sharing.take().or_else(|| self.inner.hold())
    }

    fn keep_alive(&mut self, out: &mut Vec<u8>) {
        self.inner.keep_alive(out);
    }
}

/// The thinking of a whole answer to `key`, kept (in the fleet's Redis before it is answered).
pub(crate) async fn keep_answer(state: &super::AppState, key: &str, answer: &ChatResponse) {
    let sharing = answer.choices.first().and_then(|choice| state.kept_thinking.keep(key, &choice.message));
    if let Some(sharing) = sharing {
        sharing.await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard::chat::ToolCall;
    use switchyard_state::responses::KeptBounds;

    use super::*;

    fn turn(id: &str, blocks: Value) -> Message {
        let mut message =
            Message { tool_calls: vec![ToolCall::function(id, "f", "{}")], ..Message::assistant("") };
        if !blocks.is_null() {
            message.extra.insert(THINKING_BLOCKS.to_owned(), blocks);
        }
        message
    }

    fn kept(max_entries: usize, max_bytes: usize) -> KeptThinking {
        let bounds = ResponsesBounds { max_entries, max_bytes, ..ResponsesBounds::default() };
        KeptThinking::new(bounds, None)
    }

    fn blocks_of(request: &ChatRequest, n: usize) -> Value {
        Value::Array(request.messages[n].thinking_blocks().to_vec())
    }

    #[tokio::test]
    async fn a_tool_turn_sent_back_bare_opens_on_the_thinking_kept_for_its_key_alone() {
        let kept = kept(10, 1 << 20);
        let block = json!([{"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"}]);
        kept.keep("team", &turn("toolu_1", block.clone()));
        let mut request = ChatRequest::new("m", vec![Message::user("hi"), turn("toolu_1", Value::Null)]);
        kept.restore("other", &mut request).await;
        assert_eq!(blocks_of(&request, 1), json!([]), "another key's is not its own");
        kept.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 1), block);
        // A turn sent back with thinking of its own keeps it.
        let mine = json!([{"type": "thinking", "thinking": "Mine.", "signature": "EqQC"}]);
        let mut request = ChatRequest::new("m", vec![turn("toolu_1", mine.clone())]);
        kept.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 0), mine);
    }

    #[tokio::test]
    async fn the_oldest_turns_are_forgotten_past_the_count_and_a_turn_past_the_bytes_is_not_kept() {
        let kept = kept(3, 400);
        let thought = json!([{"type": "thinking", "signature": "s"}]);
        for n in 0..4 {
            kept.keep("", &turn(&format!("toolu_{n}"), thought.clone()));
        }
        kept.keep("", &turn("toolu_big", json!([{"type": "redacted_thinking", "data": "x".repeat(400)}])));
        let bare = |id: &str| turn(id, Value::Null);
        let ids = ["toolu_0", "toolu_1", "toolu_3", "toolu_big"];
        let mut request = ChatRequest::new("m", ids.iter().map(|id| bare(id)).collect());
        kept.restore("", &mut request).await;
        let opened: Vec<bool> = (0..4).map(|n| blocks_of(&request, n) == thought).collect();
        assert_eq!(opened, [false, true, true, false]);
    }

    /// A replica's kept thinking, in `redis` for the fleet.
    fn replica(redis: &switchyard_state::testing::RedisServer) -> KeptThinking {
        use switchyard_state::{RedisStore, StateSettings};
        let store = RedisStore::new(StateSettings::new(redis.url())).unwrap();
        let bounds = KeptBounds { max_entries: 10, max_age: Duration::from_secs(60), max_bytes: 1 << 20 };
        KeptThinking::new(
            ResponsesBounds::default(),
            Some(SharedResponses::named(&store, "thinking", bounds)),
        )
    }

    #[tokio::test]
    async fn once_redis_failed_to_answer_it_is_left_alone_for_a_while_and_what_it_found_is_held() {
        use switchyard_state::testing::RedisServer;
        let redis = RedisServer::start();
        let (here, there) = (replica(&redis), replica(&redis));
        let thought = json!([{"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"}]);
        let asked = || ChatRequest::new("m", vec![Message::user("hi"), turn("toolu_1", Value::Null)]);

        redis.stall();
        let mut request = asked();
        here.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 1), json!([]), "Redis did not answer");
        redis.resume();
        there.keep("team", &turn("toolu_1", thought.clone())).expect("a write to Redis").await;
        let mut request = asked();
        here.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 1), json!([]), "Redis is not asked again at once");

        // Once the quiet is over, it is, and what it found is held here from then on.
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::time::resume();
        let mut request = asked();
        here.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 1), thought);
        redis.stall();
        let mut request = asked();
        here.restore("team", &mut request).await;
        assert_eq!(blocks_of(&request, 1), thought, "found here, without Redis");
        redis.resume();
    }

    #[tokio::test]
    async fn a_turn_kept_while_redis_was_away_reaches_it_with_the_next_turn() {
        use switchyard_state::testing::RedisServer;
        let mut redis = RedisServer::start();
        let (here, there) = (replica(&redis), replica(&redis));
        let thought = json!([{"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"}]);
        redis.kill();
        here.keep("team", &turn("toolu_1", thought.clone())).expect("a write to Redis").await;
        redis.restart();
        here.keep("team", &turn("toolu_2", thought.clone())).expect("a write to Redis").await;
        // The one Redis missed goes in the background, once it took the next.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut request =
                ChatRequest::new("m", vec![turn("toolu_1", Value::Null), turn("toolu_2", Value::Null)]);
            there.restore("team", &mut request).await;
            assert_eq!(blocks_of(&request, 1), thought, "the turn Redis took");
            if blocks_of(&request, 0) == thought {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the turn Redis missed never reached it");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
