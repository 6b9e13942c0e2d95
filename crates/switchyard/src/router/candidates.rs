//! Candidates: non-provider answers at the end of a route (a fixed degraded answer, or any
//! async function), tried once each, in order, after every target failed with a kind the route
//! falls back on. Not for requests that named a target or turned fallback off.

use tokio::time::Instant;

use super::exchange::{Exchange, Served};
use super::run::Run;
use crate::trail::{Attempt, Via};
use crate::{ErrorKind, ProviderError};

impl<X: Exchange> Run<'_, X> {
    /// The first candidate that answers, if any; each one tried is recorded.
    pub(super) async fn candidates(&mut self) -> Option<Served<X::Output>> {
        if self.ctx.explicit || self.ctx.no_fallback() {
            return None;
        }
        let (x, options) = (self.ctx.x, self.ctx.options);
        let request = x.chat_request()?;
        let route = self.ctx.route.clone();
        for candidate in route.candidates() {
            let name = candidate.name().clone();
            self.record.candidate_started(&name);
            let at = Instant::now();
            if options.no_cache && candidate.answer_cache().is_some() {
                continue;
            }
            let result = candidate.answer(request, &options.cache_scope, route.name()).await;
            let mut attempt = Attempt::candidate(&name, self.record.offset(at), at.elapsed());
            let result = result.map(|(response, age)| {
                attempt.age = age;
                if let Some(age) = age {
                    attempt.note = Some(format!("a remembered answer, {}s old", age.as_secs()));
                }
                x.candidate_output(response)
            });
            match result {
                Ok(Some(output)) => {
                    self.record.candidate_answered(attempt, &name);
                    return Some(self.served(output, Via::Candidate(name), at));
                }
                Ok(None) => {}
                Err(detail) => {
                    let attempt = attempt.failed(ProviderError::new(ErrorKind::Unavailable, detail.clone()));
                    self.record.candidate_failed(attempt, name, detail);
                }
            }
        }
        None
    }
}
