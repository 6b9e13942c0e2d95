//! The spans of a finished request, when traces are exported.

use crate::server::AppState;
use crate::telemetry::RequestSpan;

use super::FinishedRequest;

/// Writes the request's span and its attempts' spans, for a traced request.
pub(crate) fn record(state: &AppState, done: &FinishedRequest<'_>) {
    let (Some(telemetry), Some((context, parent))) = (&state.telemetry, done.trace) else { return };
    telemetry.record(&RequestSpan {
        context,
        parent,
        wall: done.wall,
        routed: done.routed,
        duration: done.elapsed,
        endpoint: done.endpoint,
        request_id: done.id,
        model: done.model,
        route: &done.route,
        served_by: done.served_by,
        status: done.status,
        late_error: done.late_error,
        queued: done.queued(),
        usage: done.usage(),
        trail: done.trail(),
        key: done.key.as_deref(),
    });
}
