//! Client keys (`gateway.keys`): who a request comes from, which models it may use, and its
//! own limits and budget.
//!
//! A key is known by its label (its `name`, or `key-` and 8 hex digits of its hash for a key
//! without one) wherever the gateway says who sent a request, and by its hash in Redis; the
//! key itself is only compared. What a key has used lives in its [`Ledger`], which a reload
//! hands on to the same key in the new configuration ([`ClientKeys::adopt`]).

mod ledger;
mod limiter;
mod period;
mod spend;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use switchyard::Router;
use switchyard::credential::Secret;

pub(crate) use ledger::{Ledger, Pass, Refusal, Shared};
pub use period::Period;

/// The rate and concurrency limits of a key (`gateway.keys[].limits`); none by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// Requests in any minute: a bucket of a minute's worth, refilled at the rate.
    pub requests_per_minute: Option<u64>,
    /// Tokens (prompt and completion) in any minute, charged as answers end.
    pub tokens_per_minute: Option<u64>,
    /// Requests in flight at once.
    pub max_concurrent: Option<u32>,
}

/// One of a key's limits, as its configuration names it: the one that refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `requests_per_minute`.
    RequestsPerMinute,
    /// `tokens_per_minute`.
    TokensPerMinute,
    /// `max_concurrent`.
    MaxConcurrent,
}

impl Limit {
    /// Its key under `limits` in the configuration.
    pub fn key(self) -> &'static str {
        match self {
            Limit::RequestsPerMinute => "requests_per_minute",
            Limit::TokensPerMinute => "tokens_per_minute",
            Limit::MaxConcurrent => "max_concurrent",
        }
    }
}

impl KeyLimits {
    /// The value configured for `limit`, if any.
    pub fn of(&self, limit: Limit) -> Option<u64> {
        match limit {
            Limit::RequestsPerMinute => self.requests_per_minute,
            Limit::TokensPerMinute => self.tokens_per_minute,
            Limit::MaxConcurrent => self.max_concurrent.map(u64::from),
        }
    }
}

/// What a key may spend per period (`gateway.keys[].budget`), in US dollars at the
/// providers' configured prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Dollars per period.
    pub usd: f64,
    /// The period: a UTC day or a calendar month.
    pub per: Period,
}

/// What a key may do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyRules {
    /// The models it may name: route names, patterns (`claude-*`), `provider:model` targets;
    /// `None`: every one.
    pub routes: Option<Vec<String>>,
    /// Its limits.
    pub limits: KeyLimits,
    /// Its budget, when it has one.
    pub budget: Option<Budget>,
}

impl KeyRules {
    /// Whether a request for `model` is allowed: an entry names it, a pattern entry is a
    /// prefix of it, or an entry names the route that governs it (as the router resolves it:
    /// a target is governed by no entry but its own).
    pub(crate) fn allows(&self, model: &str, router: &Router) -> bool {
        let Some(routes) = &self.routes else { return true };
        let governing = router.governing_route(model);
        let is_route = router.routes().any(|r| r.name() == model);
        let target = !is_route && governing.is_some_and(|g| !g.ends_with('*'));
        routes.iter().any(|entry| {
            entry == model
                || entry.strip_suffix('*').is_some_and(|prefix| model.starts_with(prefix))
                || (!target && governing == Some(entry.as_str()))
        })
    }
}

/// One client key: the secret, its label and hash, its rules and what it has used.
#[derive(Clone)]
pub struct ClientKey {
    secret: Secret,
    /// Its `name`, or `key-` and 8 hex digits of its hash: what logs, metrics and traces say.
    pub label: Arc<str>,
    /// Whether the label is a configured name.
    pub named: bool,
    /// The hash of the key, as Redis knows it (32 hex digits of SHA-256).
    pub(crate) hash: Arc<str>,
    /// What the key may do.
    pub rules: KeyRules,
    pub(crate) ledger: Arc<Ledger>,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey").field("label", &self.label).field("rules", &self.rules).finish()
    }
}

impl ClientKey {
    /// The key `secret`, named `name` (else labelled by its hash), held to `rules`.
    pub fn new(secret: Secret, name: Option<String>, rules: KeyRules) -> Self {
        let digest = Sha256::digest(format!("switchyard-client-key\u{1f}{}", secret.expose()).as_bytes());
        let hash: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        let named = name.is_some();
        let label = name.unwrap_or_else(|| format!("key-{}", &hash[..8]));
        let ledger = Arc::new(Ledger::new(&rules));
        Self { secret, label: label.into(), named, hash: hash.into(), rules, ledger }
    }

    /// Whether `presented` is this key, compared in a time that does not tell where they differ.
    pub(crate) fn is(&self, presented: &str) -> bool {
        constant_time_eq(self.secret.expose().as_bytes(), presented.as_bytes())
    }
}

/// Whether `a` and `b` are equal, in a time that does not tell where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The keys clients send (`gateway.keys`); none: no key needed.
#[derive(Debug, Clone, Default)]
pub struct ClientKeys(Vec<Arc<ClientKey>>);

impl ClientKeys {
    /// The keys of `keys`, in order.
    pub fn new(keys: Vec<ClientKey>) -> Self {
        Self(keys.into_iter().map(Arc::new).collect())
    }

    /// Whether no key is configured (the gateway is open).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The keys, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ClientKey>> {
        self.0.iter()
    }

    /// The key `presented` is, looked at whole: every key is compared.
    pub(crate) fn find(&self, presented: &str) -> Option<&Arc<ClientKey>> {
        self.0.iter().fold(None, |found, key| if key.is(presented) { Some(key) } else { found })
    }

    /// Takes over the ledgers of the same keys in `running` (the configuration this one
    /// replaces): a key whose text is unchanged keeps what it used and spent, under its new
    /// limits.
    pub(crate) fn adopt(&mut self, running: &ClientKeys) {
        for key in &mut self.0 {
            let Some(old) = running.0.iter().find(|old| old.hash == key.hash) else { continue };
            old.ledger.reconfigure(&old.rules, &key.rules);
            Arc::make_mut(key).ledger = old.ledger.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_without_a_name_is_labelled_by_its_hash_never_by_itself() {
        let key = ClientKey::new(Secret::new("sk-team-secret-0001"), None, KeyRules::default());
        assert!(key.label.starts_with("key-") && key.label.len() == 12, "{}", key.label);
        assert!(!key.hash.contains("secret"));
        assert!(!format!("{key:?}").contains("sk-team"));
        let named =
            ClientKey::new(Secret::new("sk-team-secret-0001"), Some("search".into()), KeyRules::default());
        assert_eq!(&*named.label, "search");
        assert_eq!(named.hash, key.hash, "the hash is the key's, whatever its name");
    }
}
