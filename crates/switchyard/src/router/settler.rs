//! A routed stream's only window on the router once it is the caller's: the price of its
//! answer, recording a failure after content was sent, and asking another target to finish
//! the answer. Nothing else of the router's insides reaches a stream.

use std::sync::Arc;

use super::continuation::{ContinueExchange, Continued};
use super::entry::Price;
use super::inner::Inner;
use super::options::RequestOptions;
use super::policy;
use super::resolve::Resolved;
use super::run::Run;
use crate::events::EventKind;
use crate::provider::BoxFuture;
use crate::route::Route;
use crate::{ProviderError, Target};

/// What a routed stream may ask of the router once it is the caller's.
pub(crate) struct StreamSettler {
    inner: Arc<Inner>,
    /// The route that governed the request, for the policy's word after content was sent.
    route: Arc<Route>,
}

impl StreamSettler {
    pub(super) fn new(inner: Arc<Inner>, route: Arc<Route>) -> Self {
        Self { inner, route }
    }

    /// The route that governed the request.
    pub(crate) fn route(&self) -> &Route {
        &self.route
    }

    /// What follows a failure after streamed content reached the caller: the policy's
    /// decision (always to stop: nothing may restart), with its note for the trail.
    pub(crate) fn after_content_sent(&self, error: &ProviderError) -> Option<String> {
        let at = policy::FailurePoint {
            retries: 0,
            can_rotate: false,
            chain: policy::Chain::General,
            no_fallback: false,
            single_call: false,
            deadline: None,
            now: tokio::time::Instant::now(),
            cut_by_deadline: false,
            deadline_note: crate::trail::DEADLINE_PASSED,
            content_sent: true,
            special_chains: true,
            circuit_opened: false,
        };
        let decision = policy::decide(&self.route, error, &at, &mut policy::NoMeans);
        debug_assert_eq!(decision.next, policy::Next::Stop, "a stream is never restarted");
        decision.note
    }

    /// Another target finishing the answer: `exchange` walked along `chain` under the route's
    /// policy, as a request of its own.
    pub(crate) fn continuation(
        &self,
        exchange: ContinueExchange,
        chain: Vec<Target>,
        options: RequestOptions,
    ) -> BoxFuture<'static, Continued> {
        let (inner, route) = (self.inner.clone(), self.route.clone());
        Box::pin(async move {
            let resolved = Resolved { route, chain, explicit: false };
            Run::new(&inner, &exchange, resolved, &options).go().await
        })
    }

    /// The configured price of `target`'s model.
    pub(crate) fn price(&self, target: &Target) -> Option<Price> {
        self.inner.price(target).copied()
    }

    /// Records that `target`, with credential `credential`, failed after its stream's content
    /// reached the caller; returns the error redacted and stamped with the target and
    /// credential.
    /// Health learns of it when `record` (not when the caller's deadline cut the stream).
    pub(crate) fn failed_mid_stream(
        &self,
        target: &Target,
        credential: usize,
        error: ProviderError,
        record: bool,
    ) -> ProviderError {
        let slot = &self.inner.providers[target.provider()];
        let error = slot.attribute(error, target, credential);
        if record {
            let events = self.inner.health.record_failure(target, &slot.credential_ids, credential, &error);
            self.inner.publish_all(events);
        }
        self.inner.events.publish(EventKind::AttemptFailed {
            target: target.clone(),
            credential_id: Some(slot.credential_ids[credential].clone()),
            error: error.clone(),
            will_retry: false,
        });
        error
    }
}
