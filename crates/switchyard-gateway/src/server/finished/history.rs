//! A finished request kept in the history (`/admin/requests`) and announced on the event feed
//! (`/admin/events`).

use crate::recent::RequestRecord;
use crate::server::AppState;

use super::{FinishedRequest, Settled};

/// Keeps a routed request's record, then announces it: a subscriber may open its trail at once.
/// A request refused before routing is kept too when it came with a client key (its budget
/// spent, its rate or its routes exceeded: what the key's owner asks about), with no attempt.
pub(crate) fn keep(state: &AppState, done: FinishedRequest<'_>) {
    let (trail, timing) = match done.settled {
        Some(Settled { trail, timing, .. }) => (trail, timing),
        None if done.key.is_some() => (
            switchyard::trail::Trail::default(),
            switchyard::trail::Timing { total: done.elapsed, ..Default::default() },
        ),
        None => return,
    };
    let record = RequestRecord {
        id: done.id.to_owned(),
        replica: state.replica.clone(),
        at: done.wall,
        endpoint: done.endpoint,
        route: done.route,
        served_by: done.served_by.cloned(),
        status: done.status,
        duration: done.elapsed,
        queued: timing.queued,
        first_token: timing.first_token,
        trail,
        key: done.key,
    };
    let line = state.feed.render(&record);
    let record = std::sync::Arc::new(record);
    if let Some(trails) = state.trails.get() {
        trails.publish(record.clone());
    }
    state.recent.insert(record);
    state.feed.send(line);
}
