//! What a provider's models refused lately: a model noted here is sent the request without
//! what it refused, for an hour from the refusal (it may take it again later: a deployment
//! moved to another API version, a model that gained the feature). At most 1,024 models are
//! held, the names being the clients'. Read on every request of the kind it concerns, so the
//! common one, of a provider whose models never refused, takes no lock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long a refusal is remembered.
const REMEMBERED: Duration = Duration::from_secs(3600);

/// Models held at most.
const AT_MOST: usize = 1024;

/// The models that refused one thing lately, and until when each is sent without it.
#[derive(Debug, Default)]
pub(crate) struct Lately {
    /// Whether any was ever noted.
    any: AtomicBool,
    until: Mutex<HashMap<String, Instant>>,
}

impl Lately {
    fn until(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.until.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `model` refused it within the hour.
    pub(crate) fn refused(&self, model: &str) -> bool {
        self.any.load(Ordering::Relaxed)
            && self.until().get(model).is_some_and(|until| Instant::now() < *until)
    }

    /// Notes that `model` refused it, now.
    pub(crate) fn note(&self, model: &str) {
        let now = Instant::now();
        let mut until = self.until();
        until.retain(|_, ends| now < *ends);
        if until.len() < AT_MOST {
            until.insert(model.to_owned(), now + REMEMBERED);
            self.any.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_held_an_hour_for_its_model_only_and_models_are_bounded() {
        let lately = Lately::default();
        assert!(!lately.refused("m"));
        lately.note("m");
        assert!(lately.refused("m") && !lately.refused("n"));
        tokio::time::advance(REMEMBERED - Duration::from_secs(1)).await;
        assert!(lately.refused("m"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!lately.refused("m"), "asked again after an hour");
        for i in 0..AT_MOST + 5 {
            lately.note(&format!("m{i}"));
        }
        assert!(lately.refused("m0") && !lately.refused(&format!("m{AT_MOST}")), "past the bound, not held");
    }
}
