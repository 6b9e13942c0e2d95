//! Which (credential, model) pairs refused a stream lately. A whole answer the route asks as a
//! stream (`stream_upstream`) is asked of them whole at once, rather than refused again first on
//! every request: an organisation not verified to stream a model, or a server that does not take
//! `stream_options`, refuses every stream alike. Kept an hour, then asked as a stream again (the
//! organisation may have been verified since). Keyed by the credential, which names the account
//! and the server, so it is handed on by a reload.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::credential::CredentialId;

/// How long a refusal is remembered.
const REMEMBERED: Duration = Duration::from_secs(3600);
/// Pairs remembered at most: models named by clients are unbounded.
const AT_MOST: usize = 1024;

/// The refusals of a whole answer asked as a stream, and those of a client's own stream, kept
/// apart: a refusal of the `stream_options` that a whole answer's stream asks for says nothing
/// of a client's stream, which the adapter sends without them.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Whole answers asked as streams ([`ChatExchange`](super::exchange::ChatExchange)).
    pub(crate) whole: StreamRefusals,
    /// Clients' streams ([`StreamExchange`](super::stream::StreamExchange)).
    pub(crate) streams: StreamRefusals,
}

/// The refusals, by credential and model, with when each is forgotten.
#[derive(Debug, Default)]
pub(crate) struct StreamRefusals {
    /// Whether any was ever noted: the common request takes no lock.
    any: AtomicBool,
    until: Mutex<HashMap<CredentialId, HashMap<Box<str>, Instant>>>,
}

impl StreamRefusals {
    fn until(&self) -> std::sync::MutexGuard<'_, HashMap<CredentialId, HashMap<Box<str>, Instant>>> {
        // Each change under this lock is one insert or removal: a panic leaves nothing half-done.
        self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `model` refused a stream with `credential` within the last hour.
    pub(crate) fn refused(&self, credential: &CredentialId, model: &str) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let mut until = self.until();
        let Some(models) = until.get_mut(credential) else { return false };
        match models.get(model) {
            Some(at) if Instant::now() < *at => true,
            Some(_) => {
                models.remove(model);
                false
            }
            None => false,
        }
    }

    /// Notes that `model` refused a stream with `credential` and answered whole.
    pub(crate) fn note(&self, credential: &CredentialId, model: &str) {
        let now = Instant::now();
        let mut until = self.until();
        let held: usize = until.values().map(HashMap::len).sum();
        if held >= AT_MOST {
            until.values_mut().for_each(|models| models.retain(|_, at| now < *at));
            until.retain(|_, models| !models.is_empty());
            if until.values().map(HashMap::len).sum::<usize>() >= AT_MOST {
                return;
            }
        }
        until.entry(credential.clone()).or_default().insert(model.into(), now + REMEMBERED);
        self.any.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(base_url: &str) -> CredentialId {
        CredentialId::derive("openai", base_url, None)
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_remembered_an_hour_for_its_credential_and_model_only() {
        let refusals = StreamRefusals::default();
        let (key, other) = (id("http://a"), id("http://b"));
        assert!(!refusals.refused(&key, "o3"));
        refusals.note(&key, "o3");
        assert!(refusals.refused(&key, "o3"));
        assert!(!refusals.refused(&key, "gpt-4o"), "another model streams");
        assert!(!refusals.refused(&other, "o3"), "another account may be verified");
        tokio::time::advance(REMEMBERED - Duration::from_secs(1)).await;
        assert!(refusals.refused(&key, "o3"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!refusals.refused(&key, "o3"), "asked as a stream again after an hour");
    }

    #[tokio::test(start_paused = true)]
    async fn models_named_without_end_are_held_to_a_bound() {
        let refusals = StreamRefusals::default();
        let key = id("http://a");
        for i in 0..AT_MOST + 10 {
            refusals.note(&key, &format!("model-{i}"));
        }
        assert!(refusals.refused(&key, "model-0"));
        assert!(!refusals.refused(&key, &format!("model-{AT_MOST}")), "past the bound, not held");
        tokio::time::advance(REMEMBERED).await;
        refusals.note(&key, "later");
        assert!(refusals.refused(&key, "later"), "expired ones make room");
    }
}
