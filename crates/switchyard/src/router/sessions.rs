//! Session affinity on the request path (see [`affinity`](crate::affinity)): which session a
//! request belongs to, where its pin puts it in the chain, and where its answer moves the pin.

use super::inner::Inner;
use super::options::RequestOptions;
use super::resolve::Resolved;
use crate::Target;
use crate::affinity::{self, Pin};

/// Where a request's session was served before: its target, first in the chain, and the
/// credential (by index) to ask for first.
pub(super) struct SessionPin {
    pub(super) target: Target,
    pub(super) credential: Option<usize>,
}

impl Inner {
    /// The key of the request's session on its route, when it names one and the route keeps
    /// sessions (a request that named a target has no route to keep them).
    pub(super) fn session(&self, resolved: &Resolved, options: &RequestOptions) -> Option<u128> {
        let session = options.session.as_deref().filter(|s| !s.is_empty())?;
        let keeps = self.routes.get(resolved.route.name()).is_some_and(|slot| slot.affinity);
        if resolved.explicit || !keeps {
            return None;
        }
        Some(affinity::key_of(&options.cache_scope, resolved.route.name(), session))
    }

    /// The session's pin, its target moved to the front of the chain; `None` when the session
    /// has none, or its target is no longer in the route.
    pub(super) async fn pinned(&self, resolved: &mut Resolved, key: u128) -> Option<SessionPin> {
        let pin = self.pins.recall(key, resolved.route.affinity_ttl()).await?;
        let target = pin.target()?;
        let at = resolved.chain.iter().position(|t| *t == target)?;
        let first = resolved.chain.remove(at);
        resolved.chain.insert(0, first);
        let credential = self
            .providers
            .get(target.provider())
            .and_then(|slot| affinity::credential_index(&slot.credential_ids, &pin.credential_id));
        Some(SessionPin { target, credential })
    }

    /// Pins the session `key` to where it was just served.
    pub(super) fn pin(&self, key: u128, target: &Target, credential: usize) {
        let Some(id) =
            self.providers.get(target.provider()).and_then(|slot| slot.credential_ids.get(credential))
        else {
            return;
        };
        let pin = Pin { target: target.to_string(), credential_id: id.as_str().to_owned(), at_ms: 0 };
        self.pins.remember(key, pin);
    }
}
