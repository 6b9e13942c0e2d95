//! The access log's line of a finished request.

use crate::logging::AccessEntry;
use crate::server::AppState;

use super::FinishedRequest;

/// Writes the request's access-log line (when the access log is on).
pub(crate) fn record(state: &AppState, done: &FinishedRequest<'_>) {
    state.access.record(&AccessEntry {
        request_id: done.id,
        endpoint: done.endpoint,
        route: &done.route,
        served_by: done.served_by,
        attempts: done.attempts,
        status: done.status,
        error: done.late_error,
        latency: done.elapsed,
        overhead: done.overhead(),
        key: done.key.as_deref(),
    });
}
