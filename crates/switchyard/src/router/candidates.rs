//! Candidates: non-provider answers at the end of a route (a fixed degraded answer, or any
//! async function), tried once each, in order, after every target failed with a kind the route
//! falls back on. Not for requests that named a target or turned fallback off.

use tokio::time::Instant;

use super::exchange::{Exchange, Served};
use super::run::Run;
use crate::events::EventKind;
use crate::trail::{Attempt, Via};
use crate::{ErrorKind, ProviderError};

impl<X: Exchange> Run<'_, X> {
    /// The first candidate that answers, if any; each one tried is recorded.
    pub(super) async fn candidates(&mut self) -> Option<Served<X::Output>> {
        if self.explicit || self.no_fallback {
            return None;
        }
        let request = self.x.chat_request()?;
        let route = self.route.clone();
        for candidate in route.candidates() {
            let name = candidate.name().clone();
            self.inner.events.publish(EventKind::CandidateStarted { name: name.clone() });
            let at = Instant::now();
            if self.no_cache && candidate.answer_cache().is_some() {
                continue;
            }
            let result = candidate.answer(request, &self.cache_scope, route.name()).await;
            let mut attempt = Attempt::candidate(&name, at - self.started, at.elapsed());
            let result = result.map(|(response, age)| {
                attempt.age = age;
                if let Some(age) = age {
                    attempt.note = Some(format!("a remembered answer, {}s old", age.as_secs()));
                }
                self.x.candidate_output(response)
            });
            match result {
                Ok(Some(output)) => {
                    self.trail.push(attempt);
                    self.inner.events.publish(EventKind::CandidateSucceeded { name: name.clone() });
                    return Some(self.served(output, Via::Candidate(name), at));
                }
                Ok(None) => {}
                Err(detail) => {
                    self.trail
                        .push(attempt.failed(ProviderError::new(ErrorKind::Unavailable, detail.clone())));
                    self.inner.events.publish(EventKind::CandidateFailed { name, detail });
                }
            }
        }
        None
    }
}
