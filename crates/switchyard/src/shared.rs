//! What a fleet's replicas keep in common beyond health: opaque entries under string keys in a
//! store every replica reads (the gateway's is Redis), for the `cache` candidates' answers
//! ([`answer_cache`](crate::answer_cache)) and the sessions' pins ([`affinity`](crate::affinity)).

/// A store of entries shared by a fleet: opaque bytes under a string key. The store holds its
/// user's bounds (count, bytes, age) and expires entries itself.
pub trait SharedEntries: Send + Sync + std::fmt::Debug {
    /// Keeps `value` under `key`.
    fn put(&self, key: String, value: Vec<u8>) -> crate::provider::BoxFuture<'_, Result<(), String>>;
    /// The entry under `key`, if kept.
    fn get(&self, key: String) -> crate::provider::BoxFuture<'_, Result<Option<Vec<u8>>, String>>;
}
