//! The last good answers, for a route's `cache` candidate: when every target has failed, a
//! recent answer to the same request is better than an error (HTTP's `stale-if-error`).
//!
//! It is a fallback, not a cache in front of providers: every successful answer on the route is
//! remembered, and only a request whose every target failed is answered from here. Answers
//! are remembered under a key of the request's meaning, the same whichever dialect it came in:
//! the route (and on a pattern route the model the client named), each message's role, content,
//! tool calls and tool call id, the tools and tool choice, the response format, the parameters
//! that change an answer (temperature, top_p, max tokens, stop, seed) and the dialects' own that
//! do (`n`, `logprobs`, `top_logprobs`, `reasoning_effort`, `thinking`, `output_config`, ...:
//! [`SHAPING`]); not `stream`, `user`, metadata or other fields the canonical types do not
//! model. Entries are kept per scope (the gateway key, hashed), so no caller is
//! answered with what another caller was told. Bounded by age, count and bytes, oldest first.

use std::hash::Hasher;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::bounded::{Bounded, Bounds};
use crate::chat::{ChatRequest, ChatResponse};

/// How much a `cache` candidate keeps, and what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerCacheSettings {
    /// The oldest answer served. Default 1 h.
    pub max_age: Duration,
    /// Answers kept at most. Default 1,000.
    pub max_entries: usize,
    /// Their bytes at most, as JSON. Default 64 MiB.
    pub max_bytes: usize,
    /// Whether answers that call tools are kept (default no: a stale tool call may act twice).
    pub tool_calls: bool,
}

impl Default for AnswerCacheSettings {
    fn default() -> Self {
        Self { max_age: Duration::from_secs(3600), max_entries: 1000, max_bytes: 64 << 20, tool_calls: false }
    }
}

/// Where a candidate's answers are also kept, so that every replica of a fleet can serve what
/// any one saw: a [`SharedEntries`](crate::shared::SharedEntries) holding the candidate's
/// bounds and expiring entries at `max_age` itself.
pub use crate::shared::SharedEntries as SharedAnswers;

/// The remembered answers of one candidate.
#[derive(Debug)]
pub struct AnswerCache {
    settings: AnswerCacheSettings,
    inner: Mutex<Bounded<u128, ChatResponse, KeyHasher>>,
    shared: OnceLock<Arc<dyn SharedAnswers>>,
}

/// An answer as it is kept in a [`SharedAnswers`]: with when it was remembered.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    /// Unix milliseconds.
    at_ms: u64,
    answer: ChatResponse,
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl AnswerCache {
    /// An empty cache.
    pub fn new(settings: AnswerCacheSettings) -> Self {
        let bounds = Bounds {
            max_entries: settings.max_entries,
            max_age: settings.max_age,
            max_bytes: settings.max_bytes,
        };
        Self { settings, inner: Mutex::new(Bounded::new(bounds)), shared: OnceLock::new() }
    }

    /// Keeps the answers in `shared` too (once; later calls change nothing).
    pub fn share(&self, shared: Arc<dyn SharedAnswers>) {
        let _ = self.shared.set(shared);
    }

    /// The settings.
    pub fn settings(&self) -> &AnswerCacheSettings {
        &self.settings
    }

    /// Remembers `answer` to `request` on `route` for `scope`, unless it calls tools and the
    /// settings keep none, or it is larger than the byte bound.
    pub fn remember(&self, scope: &str, route: &str, request: &ChatRequest, answer: &ChatResponse) {
        let calls_tools = answer.choices.iter().any(|c| !c.message.tool_calls.is_empty());
        if (calls_tools && !self.settings.tool_calls)
            || answer.choices.is_empty()
            || answer.is_content_filtered()
        {
            return;
        }
        let bytes = size_of(answer);
        let mut stored = answer.clone();
        stored.verbatim = None;
        let key = key_of(scope, route, request);
        let shared = self
            .shared
            .get()
            .cloned()
            .map(|shared| (shared, Kept { at_ms: unix_ms(), answer: stored.clone() }));
        let kept =
            self.inner.lock().unwrap_or_else(|p| p.into_inner()).insert(key, stored, bytes, Instant::now());
        if !kept {
            return;
        }
        if let (Some((shared, kept)), Ok(runtime)) = (shared, tokio::runtime::Handle::try_current()) {
            let name = format!("{key:032x}");
            let value = serde_json::to_vec(&kept).unwrap_or_default();
            // Off the request's path: the fleet learns of it a round trip later.
            runtime.spawn(async move {
                if let Err(reason) = shared.put(name, value).await {
                    tracing::warn!(reason, "a remembered answer could not be shared; this replica keeps it");
                }
            });
        }
    }

    /// [`recall`](Self::recall), asking the shared store first when there is one: what any
    /// replica remembered, else what this one did.
    pub async fn recall_shared(
        &self,
        scope: &str,
        route: &str,
        request: &ChatRequest,
    ) -> Option<(ChatResponse, Duration)> {
        if let Some(shared) = self.shared.get() {
            let key = key_of(scope, route, request);
            match shared.get(format!("{key:032x}")).await {
                Ok(Some(bytes)) => {
                    if let Ok(kept) = serde_json::from_slice::<Kept>(&bytes) {
                        let age = Duration::from_millis(unix_ms().saturating_sub(kept.at_ms));
                        if age <= self.settings.max_age {
                            return Some((kept.answer, age));
                        }
                    }
                }
                Ok(None) => {}
                Err(reason) => {
                    tracing::warn!(reason, "the shared answers did not answer; reading this replica's")
                }
            }
        }
        self.recall(scope, route, request)
    }

    /// The answer remembered for `request` on `route` and `scope`, with its age, when it is no
    /// older than `max_age`.
    pub fn recall(
        &self,
        scope: &str,
        route: &str,
        request: &ChatRequest,
    ) -> Option<(ChatResponse, Duration)> {
        let key = key_of(scope, route, request);
        let mut entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(&key, Instant::now()).map(|(answer, age)| (answer.clone(), age))
    }

    /// How many answers are kept, and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).usage(Instant::now())
    }
}

/// The map's hasher: its keys are hashes already, so their low bits serve.
#[derive(Debug, Default, Clone, Copy)]
struct KeyHasher;

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = LowBits;
    fn build_hasher(&self) -> LowBits {
        LowBits(0)
    }
}

/// See [`KeyHasher`].
#[derive(Debug, Default)]
struct LowBits(u64);

impl Hasher for LowBits {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// The bytes an answer is counted at: its text and tool calls, and a fixed allowance for the
/// rest (counting by writing it out would cost more than remembering it).
fn size_of(answer: &ChatResponse) -> usize {
    let choices: usize = answer
        .choices
        .iter()
        .map(|choice| {
            let text = choice.message.content.as_ref().map_or(0, |c| c.to_text().len());
            let calls: usize = choice
                .message
                .tool_calls
                .iter()
                .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len() + 64)
                .sum();
            text + calls + 128
        })
        .sum();
    choices + answer.id.len() + answer.model.len() + 256
}

/// The request's meaning as a 128-bit key: two independent 64-bit hashes of what changes an
/// answer (see the [module docs](self)), fed as it is read, with nothing written out.
fn key_of(scope: &str, route: &str, request: &ChatRequest) -> u128 {
    let mut key = Key::default();
    key.part(scope.as_bytes());
    key.part(route.as_bytes());
    for message in &request.messages {
        key.part(&[message.role as u8]);
        match &message.content {
            None => key.part(b"-"),
            Some(crate::chat::Content::Text(text)) => key.part(text.as_bytes()),
            Some(parts) => key.json(parts),
        }
        if !message.tool_calls.is_empty() {
            key.json(&message.tool_calls);
        }
        key.part(message.tool_call_id.as_deref().unwrap_or_default().as_bytes());
    }
    if !request.tools.is_empty() {
        key.json(&request.tools);
    }
    key.json(&request.tool_choice);
    key.json(&request.response_format);
    key.json(&(request.temperature, request.top_p, request.max_tokens, &request.stop, request.seed));
    for field in SHAPING {
        if let Some(value) = request.extra.get(*field) {
            key.part(field.as_bytes());
            key.json(value);
        }
    }
    // A pattern route serves each model a client names: the model is part of the question.
    if route.ends_with('*') {
        key.part(request.model.as_bytes());
    }
    key.finish()
}

/// Fields the canonical types do not model that change what an answer is (how many choices,
/// their log probabilities, how long or how thought through, structured or not): part of the
/// key when a client sends them.
const SHAPING: &[&str] = &[
    "n",
    "logprobs",
    "top_logprobs",
    "max_completion_tokens",
    "reasoning_effort",
    "thinking",
    "output_config",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
];

/// `parts` as one 128-bit key (see [`Key`]): stable across builds, for keys kept in a fleet.
pub(crate) fn hash_parts(parts: &[&[u8]]) -> u128 {
    let mut key = Key::default();
    for part in parts {
        key.part(part);
    }
    key.finish()
}

/// FNV-1a and a multiply-xor hash with another constant side by side, fed byte by byte (cheap
/// on the small writes JSON makes), the second finished by a SplitMix64 mix: 128 bits against
/// accidental collisions, stable across builds.
struct Key {
    fnv: u64,
    mix: u64,
}

impl Default for Key {
    fn default() -> Self {
        Self { fnv: 0xcbf2_9ce4_8422_2325, mix: 0x9e37_79b9_7f4a_7c15 }
    }
}

impl Key {
    /// One part, ended by a separator so that parts cannot run into each other.
    fn part(&mut self, bytes: &[u8]) {
        self.feed(bytes);
        self.feed(&[0x1f]);
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.fnv = (self.fnv ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            self.mix = (self.mix ^ u64::from(byte)).wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(27);
        }
    }

    /// A part written as JSON straight into the hashes.
    fn json(&mut self, value: &impl serde::Serialize) {
        let _ = serde_json::to_writer(&mut *self, value);
        self.part(b"");
    }

    fn finish(self) -> u128 {
        let mut z = self.mix;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (u128::from(self.fnv) << 64) | u128::from(z)
    }
}

impl std::io::Write for Key {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.feed(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{Dialect, Message};

    fn request(text: &str) -> ChatRequest {
        ChatRequest::new("route", vec![Message::user(text)])
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_recalled_for_the_same_request_and_scope_until_it_is_too_old() {
        let cache =
            AnswerCache::new(AnswerCacheSettings { max_age: Duration::from_secs(60), ..Default::default() });
        cache.remember("alice", "default", &request("hi"), &ChatResponse::from_text("m", "hello"));
        let mut anthropic = request("hi");
        (anthropic.origin, anthropic.stream, anthropic.model) =
            (Dialect::Anthropic, true, "other-name".into());
        assert_eq!(cache.recall("alice", "default", &anthropic).unwrap().0.text().as_deref(), Some("hello"));
        assert!(cache.recall("bob", "default", &request("hi")).is_none(), "another scope");
        assert!(cache.recall("alice", "other", &request("hi")).is_none(), "another route");
        assert!(cache.recall("alice", "default", &request("hi!")).is_none(), "another question");
        let mut warmer = request("hi");
        warmer.temperature = Some(0.9);
        assert!(cache.recall("alice", "default", &warmer).is_none(), "another temperature");
        let mut three = request("hi");
        three.extra.insert("n".into(), 3.into());
        assert!(cache.recall("alice", "default", &three).is_none(), "another number of choices");
        let mut logprobs = request("hi");
        logprobs.extra.insert("logprobs".into(), true.into());
        assert!(cache.recall("alice", "default", &logprobs).is_none(), "log probabilities asked");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(cache.recall("alice", "default", &request("hi")).unwrap().1, Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(cache.recall("alice", "default", &request("hi")).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pattern_route_recalls_an_answer_only_for_the_model_it_was_given_for() {
        let cache = AnswerCache::new(AnswerCacheSettings::default());
        let small = ChatRequest::new("m-small", vec![Message::user("which model?")]);
        cache.remember("alice", "m-*", &small, &ChatResponse::from_text("m-small", "m-small here"));
        assert!(cache.recall("alice", "m-*", &small).is_some());
        let large = ChatRequest::new("m-large", vec![Message::user("which model?")]);
        assert!(cache.recall("alice", "m-*", &large).is_none(), "another model's answer");
    }

    /// A shared store that is away.
    #[derive(Debug)]
    struct Away;

    impl SharedAnswers for Away {
        fn put(&self, _: String, _: Vec<u8>) -> crate::provider::BoxFuture<'_, Result<(), String>> {
            Box::pin(async { Err("connection refused".to_owned()) })
        }
        fn get(&self, _: String) -> crate::provider::BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
            Box::pin(async { Err("connection refused".to_owned()) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn with_the_shared_store_away_this_replicas_answers_still_serve() {
        let cache = AnswerCache::new(AnswerCacheSettings::default());
        cache.share(std::sync::Arc::new(Away));
        cache.remember("s", "r", &request("hi"), &ChatResponse::from_text("m", "hello"));
        tokio::task::yield_now().await;
        let (answer, _) = cache.recall_shared("s", "r", &request("hi")).await.unwrap();
        assert_eq!(answer.text().as_deref(), Some("hello"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_answered_again_is_one_entry_and_the_older_ones_still_expire() {
        let cache = AnswerCache::new(AnswerCacheSettings {
            max_age: Duration::from_secs(60),
            max_entries: 2,
            ..Default::default()
        });
        cache.remember("s", "r", &request("old"), &ChatResponse::from_text("m", "old"));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(10)).await;
            cache.remember("s", "r", &request("hot"), &ChatResponse::from_text("m", "hot"));
        }
        assert_eq!(cache.usage().0, 2);
        for _ in 0..200 {
            cache.remember("s", "r", &request("hot"), &ChatResponse::from_text("m", "hot"));
        }
        assert_eq!(cache.usage().0, 2, "places of rewritten keys stay bounded (see `bounded`)");
        tokio::time::advance(Duration::from_secs(11)).await;
        // "old" is 61 s old: gone, though the hot key's older places stood before... after it.
        assert!(cache.recall("s", "r", &request("old")).is_none());
        assert_eq!(cache.recall("s", "r", &request("hot")).unwrap().1, Duration::from_secs(11));
        assert_eq!(cache.usage().0, 1);
        // A new key evicts the oldest real entry, not the hot key through a stale place.
        cache.remember("s", "r", &request("new"), &ChatResponse::from_text("m", "new"));
        cache.remember("s", "r", &request("newer"), &ChatResponse::from_text("m", "newer"));
        assert!(cache.recall("s", "r", &request("hot")).is_none());
        assert!(
            cache.recall("s", "r", &request("new")).is_some()
                && cache.recall("s", "r", &request("newer")).is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tool_calls_are_kept_only_when_asked_and_the_oldest_go_first() {
        let cache = AnswerCache::new(AnswerCacheSettings { max_entries: 2, ..Default::default() });
        let mut calls = ChatResponse::from_text("m", "");
        calls.choices[0].message.tool_calls.push(crate::chat::ToolCall::function("c", "f", "{}"));
        cache.remember("s", "r", &request("tool"), &calls);
        assert!(cache.recall("s", "r", &request("tool")).is_none());
        for text in ["a", "b", "c"] {
            cache.remember("s", "r", &request(text), &ChatResponse::from_text("m", text));
        }
        assert!(cache.recall("s", "r", &request("a")).is_none());
        assert_eq!(cache.usage().0, 2);
        let keeping = AnswerCache::new(AnswerCacheSettings { tool_calls: true, ..Default::default() });
        keeping.remember("s", "r", &request("tool"), &calls);
        assert!(keeping.recall("s", "r", &request("tool")).is_some());
    }
}
