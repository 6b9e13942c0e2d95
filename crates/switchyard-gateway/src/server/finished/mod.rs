//! A request as it ended, built once ([`FinishedRequest`]), and what each output makes of it:
//! the metrics ([`metrics`]), the trace ([`telemetry`]), the access log ([`access`]) and the
//! history with its event feed ([`history`]), each in a room of its own.

pub(crate) mod access;
pub(crate) mod history;
pub(crate) mod metrics;
pub(crate) mod telemetry;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use switchyard::chat::Usage;
use switchyard::trace::TraceContext;
use switchyard::trail::{Timing, Trail, Via};

/// How a routed request ended: its trail, where its time went, and the tokens it used.
pub(crate) struct Settled {
    /// Every attempt, with the notes of what each was not sent.
    pub trail: Trail,
    /// The request's total, queued and first-token times as the router measured them.
    pub timing: Timing,
    /// The tokens the answer used, when the provider said.
    pub usage: Option<Usage>,
    /// What the answer cost at the configured prices (failed attempts are not billed).
    pub cost: Option<f64>,
}

/// How a request ends, as the code that ends it says: the route that governed it, who served
/// it, the status the client received, and, for a routed request, how it settled.
pub(crate) struct Ending<'a> {
    pub route: Arc<str>,
    pub served_by: Option<&'a Via>,
    pub status: u16,
    /// Attempts made, for a request whose trail is not kept (refused before routing: the
    /// attempts an error carried).
    pub attempts: usize,
    pub settled: Option<Settled>,
}

/// One request as it ended: what every output reads.
pub(crate) struct FinishedRequest<'a> {
    pub id: &'a str,
    pub endpoint: &'static str,
    /// When it arrived, by the wall clock.
    pub wall: SystemTime,
    /// From arrival to its end (a stream's end, for a stream).
    pub elapsed: Duration,
    /// From arrival to when the router took it.
    pub routed: Duration,
    pub route: Arc<str>,
    pub served_by: Option<&'a Via>,
    pub status: u16,
    pub attempts: usize,
    /// The error kind that ended it after its status was sent (a stream cut mid-way).
    pub late_error: Option<&'static str>,
    /// Its span and the client's span it continues, when traces are exported.
    pub trace: Option<(TraceContext, Option<u64>)>,
    /// The `model` the client named (kept only for a traced request).
    pub model: &'a str,
    pub settled: Option<Settled>,
    /// The configuration the request ran on: which targets it names, for metric labels.
    pub live: &'a super::state::Live,
    /// The label of the client key it came with (its name, never the key).
    pub key: Option<Arc<str>>,
}

impl FinishedRequest<'_> {
    /// The time the gateway added beyond the upstream calls, pacing and the waits between
    /// attempts (a retry's backoff, a Retry-After: the policy's, not the gateway's cost): up to
    /// a stream's first chunk (its time after that belongs to the upstream), else the whole
    /// request. A request that ended unsettled after the router took it (its client left while
    /// the providers worked) counts only its time until then.
    pub(crate) fn overhead(&self) -> Duration {
        let Some(Settled { trail, timing, .. }) = &self.settled else {
            return if self.routed.is_zero() { self.elapsed } else { self.routed };
        };
        let until = if timing.first_token.is_some() { timing.total } else { self.elapsed };
        // What ran before then: a stream's continuation, begun after its first chunk, is the
        // upstream's time of the stream, not time to take from the gateway's.
        let attempts: Vec<_> = trail.attempts().iter().filter(|a| a.started < until).collect();
        let upstream: Duration =
            attempts.iter().map(|a| a.duration.min(until - a.started).saturating_sub(a.queued)).sum();
        // From the latest end so far: a hedge runs beside the attempt before it.
        let mut ended = Duration::ZERO;
        let mut waited = Duration::ZERO;
        for (i, attempt) in attempts.iter().enumerate() {
            if i > 0 {
                waited += attempt.started.saturating_sub(ended);
            }
            ended = ended.max(attempt.started + attempt.duration);
        }
        until.saturating_sub(upstream).saturating_sub(timing.queued).saturating_sub(waited)
    }

    /// The time it waited for pacing.
    pub(crate) fn queued(&self) -> Duration {
        self.settled.as_ref().map_or(Duration::ZERO, |settled| settled.timing.queued)
    }

    /// The tokens its answer used.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.settled.as_ref().and_then(|settled| settled.usage)
    }

    /// Its trail, when it was routed.
    pub(crate) fn trail(&self) -> Option<&Trail> {
        self.settled.as_ref().map(|settled| &settled.trail)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard::Target;
    use switchyard::credential::CredentialId;
    use switchyard::trail::{Attempt, Timing, Trail};

    use super::*;

    fn finished(settled: Option<Settled>, elapsed: Duration) -> FinishedRequest<'static> {
        FinishedRequest {
            id: "req_1",
            endpoint: "chat_completions",
            wall: SystemTime::UNIX_EPOCH,
            elapsed,
            routed: Duration::ZERO,
            route: "default".into(),
            served_by: None,
            status: 200,
            attempts: 1,
            late_error: None,
            trace: None,
            model: "",
            settled,
            live: live(),
            key: None,
        }
    }

    /// The demo's configuration, for a request that ran on it.
    fn live() -> &'static crate::server::Live {
        let loaded = crate::config::load_demo().unwrap();
        let exposure = crate::config::Exposure::Loopback;
        Box::leak(Box::new(crate::server::Live::new(loaded.router, loaded.gateway, &exposure)))
    }

    #[test]
    fn the_overhead_is_what_the_upstream_and_pacing_did_not_take() {
        let target: Target = "p:m".parse().unwrap();
        let id = CredentialId::derive("openai", "http://x", None);
        // 30 ms of attempt, 10 of which queued for pacing.
        let trail: Trail = [Attempt::called(
            &target,
            &id,
            Duration::ZERO,
            Duration::from_millis(30),
            Duration::from_millis(10),
        )]
        .into_iter()
        .collect();
        let timing =
            Timing { total: Duration::from_millis(35), queued: Duration::from_millis(10), first_token: None };
        let whole = finished(
            Some(Settled { trail: trail.clone(), timing, usage: None, cost: None }),
            Duration::from_millis(36),
        );
        assert_eq!(whole.overhead(), Duration::from_millis(6), "36 - 20 upstream - 10 queued");
        // A stream: only up to its first chunk, whenever it ended.
        let timing = Timing { first_token: Some(Duration::from_millis(31)), ..timing };
        let stream = finished(
            Some(Settled { trail: trail.clone(), timing, usage: None, cost: None }),
            Duration::from_secs(9),
        );
        assert_eq!(stream.overhead(), Duration::from_millis(5), "35 - 20 - 10");
        // A stream broken after its first chunk and continued by another target: the
        // continuation ran after the first chunk, on the stream's time, not the gateway's.
        let continued = Attempt::called(
            &target,
            &id,
            Duration::from_millis(2000),
            Duration::from_millis(900),
            Duration::ZERO,
        );
        let trail_continued: Trail = [trail.attempts()[0].clone(), continued].into_iter().collect();
        let stream = finished(
            Some(Settled { trail: trail_continued, timing, usage: None, cost: None }),
            Duration::from_secs(9),
        );
        assert_eq!(stream.overhead(), Duration::from_millis(5), "the continuation is none of it");
        assert_eq!(finished(None, Duration::from_millis(4)).overhead(), Duration::from_millis(4));
        // Left by its client while the providers worked: only the time before the router took it.
        let abandoned = FinishedRequest {
            routed: Duration::from_millis(1),
            ..finished(None, Duration::from_millis(900))
        };
        assert_eq!(abandoned.overhead(), Duration::from_millis(1));

        // A retry 400 ms of backoff after a 3 ms failure: the backoff is the policy's wait.
        let failed = Attempt::called(&target, &id, Duration::ZERO, Duration::from_millis(3), Duration::ZERO);
        let retried = Attempt::called(
            &target,
            &id,
            Duration::from_millis(403),
            Duration::from_millis(3),
            Duration::ZERO,
        );
        let trail: Trail = [failed, retried].into_iter().collect();
        let timing = Timing { total: Duration::from_millis(407), queued: Duration::ZERO, first_token: None };
        let backed_off =
            finished(Some(Settled { trail, timing, usage: None, cost: None }), Duration::from_millis(407));
        assert_eq!(backed_off.overhead(), Duration::from_millis(1), "407 - 6 upstream - 400 backoff");

        // A hedge beside a slow first attempt, then a fallback 250 ms after the first ended.
        let at = |start: u64, length: u64| {
            let (start, length) = (Duration::from_millis(start), Duration::from_millis(length));
            Attempt::called(&target, &id, start, length, Duration::ZERO)
        };
        let trail: Trail = [at(0, 2000), at(300, 100), at(2250, 10)].into_iter().collect();
        let timing = Timing { total: Duration::from_millis(2400), queued: Duration::ZERO, first_token: None };
        let hedged =
            finished(Some(Settled { trail, timing, usage: None, cost: None }), Duration::from_millis(2400));
        assert_eq!(hedged.overhead(), Duration::from_millis(40), "2400 - 2110 upstream - 250 waited");
    }
}
