//! Providers as the router holds them: an id, the implementation, its credentials and prices.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::chat::Usage;
use crate::credential::{Credential, CredentialId, Secret};
use crate::problem::Problem;
use crate::provider::Provider;
use crate::{ProviderError, Target};

/// Price of one model, in a currency of your choice per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Price {
    /// Per million prompt (input) tokens.
    pub input_per_million: f64,
    /// Per million completion (output) tokens.
    pub output_per_million: f64,
}

impl Price {
    /// The cost of `usage` at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (f64::from(usage.prompt_tokens) * self.input_per_million
            + f64::from(usage.completion_tokens) * self.output_per_million)
            / 1_000_000.0
    }
}

/// One configured provider: an id, its implementation, its keys and prices.
///
/// ```
/// use switchyard::ProviderEntry;
/// use switchyard::simulated::SimulatedProvider;
///
/// let entry = ProviderEntry::new("local", SimulatedProvider::new());
/// assert_eq!(entry.id(), "local");
/// ```
pub struct ProviderEntry {
    pub(super) id: Arc<str>,
    pub(super) provider: Arc<dyn Provider>,
    /// Each key with its priority (lower first).
    pub(super) keys: Vec<(Secret, u32)>,
    pub(super) prices: HashMap<String, Price>,
    /// The provider's own id of each model a target names, where they differ.
    pub(super) models: HashMap<String, Arc<str>>,
    pub(super) key_rotation: KeyRotation,
    /// Other secrets its calls carry (a header's token), cut out of its errors as its keys are.
    pub(super) secrets: Vec<Secret>,
}

/// How a provider's keys share its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyRotation {
    /// The first usable key of the highest priority takes every call; the next is used only
    /// when it cools down, is benched or fails. The default.
    #[default]
    Ordered,
    /// Calls alternate over the usable keys of the highest priority (a key cooling down or
    /// benched drops out until it recovers); lower priorities stay pure fallback.
    RoundRobin,
}

impl ProviderEntry {
    /// A provider under `id` (the part of a target before the colon), keyless until
    /// [`ProviderEntry::key`] adds keys.
    pub fn new(id: impl Into<Arc<str>>, provider: impl Provider) -> Self {
        Self::from_arc(id, Arc::new(provider))
    }

    /// [`ProviderEntry::new`] for a provider already shared behind an `Arc` (the gateway builds
    /// its adapters that way).
    pub fn from_arc(id: impl Into<Arc<str>>, provider: Arc<dyn Provider>) -> Self {
        Self {
            id: id.into(),
            provider,
            keys: Vec::new(),
            prices: HashMap::new(),
            models: HashMap::new(),
            key_rotation: KeyRotation::Ordered,
            secrets: Vec::new(),
        }
    }

    /// Another secret the provider's calls carry beside its keys (a proxy's token in a
    /// header the adapter sends): cut out of every error of the provider, as its keys are.
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Adds a key of `priority`: lower priorities are tried first, as route tiers, and a key
    /// of a higher number is used only when every key above it is unusable. [`key`](Self::key)
    /// adds priority 0.
    pub fn key_with_priority(mut self, key: Secret, priority: u32) -> Self {
        self.keys.push((key, priority));
        self
    }

    /// How the keys share the traffic. Default [`KeyRotation::Ordered`].
    pub fn key_rotation(mut self, rotation: KeyRotation) -> Self {
        self.key_rotation = rotation;
        self
    }

    /// Adds an API key; with several, the router rotates to the next on auth failures,
    /// exhaustion and cooldowns.
    pub fn key(self, key: Secret) -> Self {
        self.key_with_priority(key, 0)
    }

    /// Sets the price of `model`, for the cost of each answer.
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// Calls to targets naming `model` ask the provider for `provider_model`, its own id of it
    /// (`claude-sonnet-4-5` as Bedrock's `us.anthropic.claude-sonnet-4-5-20250929-v1:0`), so
    /// that one route can name the same model on several providers. The trail and the answer
    /// show the target's name; each attempt also records the provider's id
    /// ([`Attempt::provider_model`](crate::trail::Attempt::provider_model)). Prices stay keyed
    /// by the target's name.
    ///
    /// ```
    /// use switchyard::ProviderEntry;
    /// use switchyard::simulated::SimulatedProvider;
    ///
    /// let entry = ProviderEntry::new("bedrock", SimulatedProvider::new())
    ///     .model("claude-sonnet-4-5", "us.anthropic.claude-sonnet-4-5-20250929-v1:0");
    /// assert_eq!(entry.id(), "bedrock");
    /// ```
    pub fn model(mut self, model: impl Into<String>, provider_model: impl Into<Arc<str>>) -> Self {
        self.models.insert(model.into(), provider_model.into());
        self
    }

    /// The id targets name this provider by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether `id` is one a target can name: letters, digits, `-`, `_` or `.`, and no
    /// colon (a target splits at its first colon). The one place this rule is checked.
    ///
    /// ```
    /// use switchyard::ProviderEntry;
    ///
    /// assert!(ProviderEntry::check_id("openai-eu").is_ok());
    /// assert_eq!(ProviderEntry::check_id("open:ai").unwrap_err().fix, "rename it");
    /// ```
    pub fn check_id(id: &str) -> Result<(), Problem> {
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return Ok(());
        }
        let message =
            format!("provider id `{id}` may hold only letters, digits, `-`, `_` and `.` (no colon)");
        Err(Problem::new("", message, "rename it"))
    }

    /// The provider as the router keeps it, with one credential per key (or one keyless).
    pub(super) fn into_slot(self) -> ProviderSlot {
        let (kind, base_url) = (self.provider.kind().to_owned(), self.provider.base_url().to_owned());
        let priorities: Vec<u32> = self.keys.iter().map(|(_, priority)| *priority).collect();
        let credentials: Vec<Credential> = if self.keys.is_empty() {
            vec![Credential::keyless(&kind, &base_url, &self.id)]
        } else {
            self.keys.into_iter().map(|(key, _)| Credential::new(&kind, &base_url, Some(key))).collect()
        };
        // Stable: keys of one priority keep their configured order.
        let mut order: Vec<usize> = (0..credentials.len()).collect();
        order.sort_by_key(|&i| priorities.get(i).copied().unwrap_or(0));
        let tiers =
            order.chunk_by(|&a, &b| priorities.get(a) == priorities.get(b)).map(<[usize]>::len).collect();
        ProviderSlot {
            id: self.id,
            provider: self.provider,
            credential_ids: credentials.iter().map(|c| c.id().clone()).collect(),
            credentials,
            prices: self.prices,
            models: self.models,
            key_order: order,
            key_tiers: tiers,
            key_rotation: self.key_rotation,
            turn: AtomicU64::new(0),
            secrets: self.secrets,
        }
    }
}

impl fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("id", &self.id)
            .field("kind", &self.provider.kind())
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// A provider as the router holds it.
pub(crate) struct ProviderSlot {
    pub(crate) id: Arc<str>,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) credentials: Vec<Credential>,
    pub(crate) credential_ids: Vec<CredentialId>,
    prices: HashMap<String, Price>,
    /// The provider's own id of a target's model, where it has one ([`ProviderEntry::model`]).
    models: HashMap<String, Arc<str>>,
    /// Credential indexes by priority, then configured order.
    key_order: Vec<usize>,
    /// How many keys each priority holds, highest first, along `key_order`.
    key_tiers: Vec<usize>,
    key_rotation: KeyRotation,
    /// Counts calls, for round-robin keys.
    turn: AtomicU64,
    /// Secrets beside the keys, cut out of its errors ([`ProviderEntry::secret`]).
    secrets: Vec<Secret>,
}

impl ProviderSlot {
    /// The order this call considers the keys in: by priority; under round robin each
    /// priority starts one further along than the call before. Empty when that is the
    /// configured order (one priority, ordered keys), which the gate reads as such.
    pub(crate) fn key_order(&self) -> Vec<usize> {
        let rotated = self.key_rotation == KeyRotation::RoundRobin && self.credentials.len() > 1;
        if !rotated && self.key_tiers.len() <= 1 {
            return Vec::new();
        }
        if !rotated {
            return self.key_order.clone();
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize;
        let mut order = Vec::with_capacity(self.key_order.len());
        let mut rest = self.key_order.as_slice();
        for &size in &self.key_tiers {
            let (tier, after) = rest.split_at(size);
            let start = turn % size;
            order.extend_from_slice(&tier[start..]);
            order.extend_from_slice(&tier[..start]);
            rest = after;
        }
        order
    }

    /// Whether calls alternate over its keys (round robin among several).
    pub(crate) fn rotates_keys(&self) -> bool {
        self.key_rotation == KeyRotation::RoundRobin && self.credentials.len() > 1
    }

    /// The provider's own id of `model` (a target's model), when the provider maps it to one.
    pub(crate) fn provider_model(&self, model: &str) -> Option<&Arc<str>> {
        self.models.get(model)
    }

    /// Whether some price names a prefix (`name*`): what a pattern route's models can take.
    pub(crate) fn prices_a_prefix(&self) -> bool {
        self.prices.keys().any(|name| name.ends_with('*'))
    }

    /// The configured price of `model`, if any: its own, else that of the model it is a dated
    /// snapshot of (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`: what a pattern route
    /// is called with), else the longest prefix priced as `name*`.
    pub(crate) fn price(&self, model: &str) -> Option<&Price> {
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        if let Some(price) = undated(model).and_then(|base| self.prices.get(base)) {
            return Some(price);
        }
        self.prices
            .iter()
            .filter_map(|(name, price)| Some((name.strip_suffix('*')?, price)))
            .filter(|(prefix, _)| model.starts_with(prefix))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, price)| price)
    }

    /// The error of a call to `target` with credential `credential`, redacted of the key and
    /// stamped with both.
    pub(crate) fn attribute(
        &self,
        error: ProviderError,
        target: &Target,
        credential: usize,
    ) -> ProviderError {
        let credential = &self.credentials[credential];
        let error = self.secrets.iter().fold(redact(error, credential), ProviderError::redacted);
        error.with_target(target.clone()).with_credential(credential.id().clone())
    }
}

/// Removes the credential's key from whatever an upstream put in an error, so that no
/// provider (adapters, custom providers) can leak a key into trails, events, health or logs.
/// Every error from a provider passes here (and its other secrets after it): an attempt's,
/// and a stream's after its first chunk.
fn redact(error: ProviderError, credential: &Credential) -> ProviderError {
    match credential.key() {
        Some(key) => error.redacted(key),
        None => error,
    }
}

/// `model` without the date of a snapshot it names (`-20250929`, `-2024-08-06`), when it names
/// one.
fn undated(model: &str) -> Option<&str> {
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let (base, date) = model.rsplit_once('-')?;
    if date.len() == 8 && digits(date) {
        return Some(base);
    }
    // `-YYYY-MM-DD`: the last three dash-separated parts.
    let (rest, day) = (base, date);
    let (rest, month) = rest.rsplit_once('-')?;
    let (base, year) = rest.rsplit_once('-')?;
    let dated =
        year.len() == 4 && month.len() == 2 && day.len() == 2 && [year, month, day].iter().all(|p| digits(p));
    dated.then_some(base)
}

#[cfg(test)]
mod price_tests {
    use super::*;

    #[test]
    fn a_dated_snapshot_or_a_prefix_takes_the_price_of_the_model_it_names() {
        let price = |input: f64| Price { input_per_million: input, output_per_million: input };
        let slot = ProviderEntry::new("p", crate::simulated::SimulatedProvider::new())
            .price("claude-sonnet-4-5", price(3.0))
            .price("gpt-4o", price(2.5))
            .price("llama-*", price(0.1))
            .price("llama-3-70b*", price(0.9))
            .into_slot();
        let of = |model: &str| slot.price(model).map(|p| p.input_per_million);
        assert_eq!(of("claude-sonnet-4-5"), Some(3.0));
        assert_eq!(of("claude-sonnet-4-5-20250929"), Some(3.0), "Anthropic's dated id");
        assert_eq!(of("gpt-4o-2024-08-06"), Some(2.5), "OpenAI's dated id");
        assert_eq!(of("gpt-4o-mini"), None, "another model, not a snapshot");
        assert_eq!(of("gpt-4o-1234"), None);
        assert_eq!(of("llama-3-70b-instruct"), Some(0.9), "the longest prefix");
        assert_eq!(of("llama-3-8b"), Some(0.1));
        assert_eq!(of("mistral"), None);
    }
}
