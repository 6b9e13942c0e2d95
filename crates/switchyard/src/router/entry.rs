//! Providers as the router holds them: an id, the implementation, its credentials and prices.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::chat::Usage;
use crate::credential::{Credential, CredentialId, Secret};
use crate::problem::Problem;
use crate::provider::Provider;

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
    pub(super) keys: Vec<Secret>,
    pub(super) prices: HashMap<String, Price>,
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
        Self { id: id.into(), provider, keys: Vec::new(), prices: HashMap::new() }
    }

    /// Adds an API key; with several, the router rotates to the next on auth failures,
    /// exhaustion and cooldowns.
    pub fn key(mut self, key: Secret) -> Self {
        self.keys.push(key);
        self
    }

    /// Sets the price of `model`, for the cost of each answer.
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
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
        let credentials: Vec<Credential> = if self.keys.is_empty() {
            vec![Credential::keyless(&kind, &base_url, &self.id)]
        } else {
            self.keys.into_iter().map(|key| Credential::new(&kind, &base_url, Some(key))).collect()
        };
        ProviderSlot {
            id: self.id,
            provider: self.provider,
            credential_ids: credentials.iter().map(|c| c.id().clone()).collect(),
            credentials,
            prices: self.prices,
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
}

impl ProviderSlot {
    /// The configured price of `model`, if any.
    pub(crate) fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }
}
