//! The attempt trail: what happened to one request, attempt by attempt.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::credential::CredentialId;
use crate::{ProviderError, Target};

/// The note of a `failed` attempt the pacer refused: it was never sent.
pub const PACER_REFUSED: &str = "the pacer refused the call";

/// The note of the last attempt of a request whose deadline passed.
pub const DEADLINE_PASSED: &str = "request deadline passed";

/// The note of the last attempt of a request whose deadline, the caller's own timeout
/// ([`RequestOptions::caller_timeout`](crate::RequestOptions::caller_timeout)), passed: unlike
/// a route's deadline, the caller may well ask again, as it would have on its own timeout.
pub const CALLER_TIMEOUT_PASSED: &str = "request deadline passed: the caller's own timeout";

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It answered; this is the answer the caller got.
    Ok,
    /// It failed and the same target was tried again.
    Retried,
    /// It failed and the router moved on (or gave up).
    Failed,
    /// Not called: the health gate or the circuit breaker said the target is unhealthy.
    SkippedUnhealthy,
    /// Not called: the target (or every credential of it) is out of quota.
    SkippedExhausted,
    /// Not called: the request cannot be written in the target's API (the error says why).
    SkippedUnsupported,
    /// It answered with a content-filter refusal, which was discarded and redirected to the
    /// route's content-policy targets.
    Redirected,
    /// A fallback candidate answered.
    Candidate,
    /// Stopped unfinished: the other of a hedged pair answered first (the note says which).
    Cancelled,
    /// It finished an answer another target's stream broke off: asked to continue from what the
    /// caller already had, its text followed on the same stream.
    Continued,
}

impl Outcome {
    /// The snake_case name JSON, logs and `Display` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Retried => "retried",
            Outcome::Failed => "failed",
            Outcome::SkippedUnhealthy => "skipped_unhealthy",
            Outcome::SkippedExhausted => "skipped_exhausted",
            Outcome::SkippedUnsupported => "skipped_unsupported",
            Outcome::Redirected => "redirected",
            Outcome::Candidate => "candidate",
            Outcome::Cancelled => "cancelled",
            Outcome::Continued => "continued",
        }
    }

    /// Whether the attempt was a skip, not a call.
    pub fn is_skip(self) -> bool {
        matches!(self, Outcome::SkippedUnhealthy | Outcome::SkippedExhausted | Outcome::SkippedUnsupported)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who an attempt went to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Via {
    /// A provider target: the usual case.
    Target(Target),
    /// A non-provider fallback, by name.
    Candidate(Arc<str>),
}

impl Via {
    /// The text `Display` writes, without a copy for a target (the common case, on every
    /// answer's headers and log line).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Via::Target(target) => target.as_str().into(),
            Via::Candidate(_) => self.to_string().into(),
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Via::Target(target) => write!(f, "{target}"),
            Via::Candidate(name) => write!(f, "candidate {name}"),
        }
    }
}

/// One attempt: a call to one target with one credential, a skipped target, or a candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// Where it went: a target, or a candidate by name.
    pub via: Via,
    /// The key used; `None` for skips and candidates.
    pub credential_id: Option<CredentialId>,
    /// What became of it: answered, retried, failed, skipped, redirected or a candidate's answer.
    pub outcome: Outcome,
    /// The classified failure; `None` when the attempt answered and for unhealthy skips. A
    /// `redirected` attempt holds the refusal as `content_filtered`, a `skipped_exhausted` one the
    /// quota error.
    pub error: Option<ProviderError>,
    /// When the attempt started, from the start of the request.
    pub started: Duration,
    /// How long the attempt took, queueing included.
    pub duration: Duration,
    /// How long the attempt waited for the pacer before it was sent.
    pub queued: Duration,
    /// Whether the attempt failed after streamed content reached the caller.
    pub mid_stream: bool,
    /// Whether the attempt was a hedge: started beside another that was slow to answer.
    pub hedge: bool,
    /// For a `cache` candidate's answer: how old the remembered answer was.
    pub age: Option<Duration>,
    /// Why the router decided what it did, when the outcome alone does not say (a skip reason,
    /// "retry budget spent", "Retry-After 30s exceeds max_wait 5s").
    pub note: Option<String>,
    /// The attempt's span id, when the request was traced and the attempt was sent: the id
    /// its upstream call carried in `traceparent`.
    pub span_id: Option<u64>,
    /// Events of its stream skipped as unreadable (each said in the note).
    pub skipped_events: u32,
    /// What the provider counted for this attempt, where the request's usage does not say it
    /// alone: the two attempts of a continued stream (the broken one's as far as it told).
    pub usage: Option<crate::chat::Usage>,
    /// The provider's own id of the target's model, when the provider maps the name the
    /// route used to another (`models:`); `None` when they are the same.
    pub provider_model: Option<Arc<str>>,
}

impl Attempt {
    /// Whether the attempt was sent: not a skip, nor a call the pacer refused.
    pub fn sent(&self) -> bool {
        !self.outcome.is_skip() && self.note.as_deref() != Some(PACER_REFUSED)
    }

    /// Whether the target could not take the request, as its adapter or the provider said:
    /// health untouched, and it says nothing of why the others failed.
    pub fn unsupported(&self) -> bool {
        self.error.as_ref().is_some_and(ProviderError::is_unsupported)
    }

    /// A call to `target` with the credential `credential_id`, `started` after the request
    /// began, taking `duration` of which `queued` waiting for the pacer; outcome `ok` until
    /// the router says otherwise.
    pub fn called(
        target: &Target,
        credential_id: &CredentialId,
        started: Duration,
        duration: Duration,
        queued: Duration,
    ) -> Self {
        Self {
            via: Via::Target(target.clone()),
            credential_id: Some(credential_id.clone()),
            outcome: Outcome::Ok,
            error: None,
            started,
            duration,
            queued,
            mid_stream: false,
            hedge: false,
            age: None,
            note: None,
            span_id: None,
            skipped_events: 0,
            usage: None,
            provider_model: None,
        }
    }

    /// A target the health gate skipped (as exhausted, or as unhealthy), and why.
    pub fn skipped(
        target: &Target,
        exhausted: bool,
        error: Option<ProviderError>,
        started: Duration,
        reason: String,
    ) -> Self {
        Self {
            via: Via::Target(target.clone()),
            credential_id: None,
            outcome: if exhausted { Outcome::SkippedExhausted } else { Outcome::SkippedUnhealthy },
            error,
            started,
            duration: Duration::ZERO,
            queued: Duration::ZERO,
            mid_stream: false,
            hedge: false,
            age: None,
            note: Some(reason),
            span_id: None,
            skipped_events: 0,
            usage: None,
            provider_model: None,
        }
    }

    /// A candidate that answered, `started` after the request began, taking `duration`.
    pub fn candidate(name: &Arc<str>, started: Duration, duration: Duration) -> Self {
        Self {
            via: Via::Candidate(name.clone()),
            credential_id: None,
            outcome: Outcome::Candidate,
            error: None,
            started,
            duration,
            queued: Duration::ZERO,
            mid_stream: false,
            hedge: false,
            age: None,
            note: None,
            span_id: None,
            skipped_events: 0,
            usage: None,
            provider_model: None,
        }
    }

    /// The same attempt, failed with `error`.
    pub fn failed(mut self, error: ProviderError) -> Self {
        self.outcome = Outcome::Failed;
        self.error = Some(error);
        self
    }

    /// The same attempt, sent as span `span` of the request's trace (untraced for `None`).
    pub fn with_span(mut self, span: Option<crate::trace::TraceContext>) -> Self {
        self.span_id = span.map(|span| span.span_id);
        self
    }

    /// The same attempt with `note` (unchanged by `None`).
    pub fn with_note(mut self, note: Option<String>) -> Self {
        if note.is_some() {
            self.note = note;
        }
        self
    }

    /// Writes down what its stream did short of failing (see [`StreamNotice`](crate::chat::StreamNotice)).
    pub(crate) fn notice(&mut self, notice: crate::chat::StreamNotice) {
        match notice {
            crate::chat::StreamNotice::Unterminated => {
                Trail::add_note(self, "the stream ended after its finish without its terminator");
            }
            crate::chat::StreamNotice::BrokenAfterFinish(detail) => {
                Trail::add_note(
                    self,
                    &format!("the stream broke after its finish, before its terminator: {detail}"),
                );
            }
            crate::chat::StreamNotice::Skipped(detail) => {
                self.skipped_events += 1;
                Trail::add_note(self, &format!("an unreadable event was skipped: {detail}"));
            }
            crate::chat::StreamNotice::Resent(detail) => Trail::add_note(self, &detail),
            crate::chat::StreamNotice::TerminatedUnfinished => Trail::add_note(
                self,
                "the stream ended with its terminator before a finish reason: taken as whole",
            ),
            crate::chat::StreamNotice::LeftOut(params) => Trail::add_note(
                self,
                &format!(
                    "drop_params: sent without {}, which its API has no equivalent of",
                    params.join(", ")
                ),
            ),
        }
    }

    /// Writes down, once, that the provider's content filter stopped the answer it served: the
    /// attempt answered (`ok`), but what the caller got is a refusal, and the trail says so.
    pub(crate) fn filtered(&mut self) {
        const FILTERED: &str =
            "the provider's content filter stopped the answer (finish_reason content_filter)";
        if !self.note.as_deref().is_some_and(|note| note.contains(FILTERED)) {
            Trail::add_note(self, FILTERED);
        }
    }

    /// The target of the attempt, `None` for a candidate.
    pub fn target(&self) -> Option<&Target> {
        match &self.via {
            Via::Target(target) => Some(target),
            Via::Candidate(_) => None,
        }
    }

    /// The error kind, if it failed.
    pub fn error_kind(&self) -> Option<crate::ErrorKind> {
        self.error.as_ref().map(ProviderError::kind)
    }
}

impl Serialize for Attempt {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.via {
            Via::Target(target) => map.serialize_entry("target", target.as_str())?,
            Via::Candidate(name) => map.serialize_entry("candidate", &**name)?,
        }
        if let Some(model) = &self.provider_model {
            map.serialize_entry("provider_model", &**model)?;
        }
        if let Some(id) = &self.credential_id {
            map.serialize_entry("credential_id", id.as_str())?;
        }
        map.serialize_entry("outcome", &self.outcome)?;
        if let Some(error) = &self.error {
            map.serialize_entry("error", &ErrorView(error))?;
        }
        map.serialize_entry("start_ms", &millis(self.started))?;
        map.serialize_entry("duration_ms", &millis(self.duration))?;
        map.serialize_entry("queued_ms", &millis(self.queued))?;
        if self.hedge {
            map.serialize_entry("hedge", &true)?;
        }
        if let Some(age) = self.age {
            map.serialize_entry("age_s", &age.as_secs())?;
        }
        if self.mid_stream {
            map.serialize_entry("mid_stream", &true)?;
        }
        if let Some(note) = &self.note {
            map.serialize_entry("note", note)?;
        }
        if let Some(span_id) = self.span_id {
            map.serialize_entry("span_id", &format!("{span_id:016x}"))?;
        }
        if self.skipped_events > 0 {
            map.serialize_entry("skipped_events", &self.skipped_events)?;
        }
        if let Some(usage) = &self.usage {
            map.serialize_entry("usage", usage)?;
        }
        map.end()
    }
}

/// A failure as the trail and events show it: kind, status, code, detail, Retry-After.
pub(crate) struct ErrorView<'a>(pub(crate) &'a ProviderError);

impl Serialize for ErrorView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let error = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("kind", &error.kind())?;
        if let Some(status) = error.status() {
            map.serialize_entry("status", &status)?;
        }
        if let Some(code) = error.code() {
            map.serialize_entry("code", code)?;
        }
        map.serialize_entry("detail", error.detail())?;
        if let Some(retry_after) = error.retry_after() {
            map.serialize_entry("retry_after_ms", &millis(retry_after))?;
        }
        if error.is_unsupported() {
            map.serialize_entry("unsupported", &true)?;
        }
        map.end()
    }
}

/// Milliseconds with microsecond precision, for JSON.
pub(crate) fn millis(duration: Duration) -> f64 {
    (duration.as_micros() as f64) / 1000.0
}

/// Where a request's trail goes when its caller drops the request before the router answered
/// (a gateway's client went away): the route and what the attempts that ended recorded, the
/// one under way as `cancelled`. Give a clone in
/// [`RequestOptions::unfinished`](crate::RequestOptions::unfinished) and [`take`](Self::take)
/// it once the request is dropped; it stays empty for a request that ended.
#[derive(Debug, Clone, Default)]
pub struct Unfinished(Arc<std::sync::Mutex<Left>>);

/// What an [`Unfinished`] holds: the trail left, and why the request was dropped when its
/// caller said.
#[derive(Debug, Default)]
struct Left {
    trail: Option<RouteTrail>,
    why: Option<&'static str>,
    cut: Option<CutShort>,
}

/// What the calls a dropped request cut short cost at the least: each was sent with the
/// request's prompt, which its provider bills whether or not the answer is read (estimated,
/// four characters a token). None of the answer is counted.
#[derive(Debug, Clone, PartialEq)]
pub struct CutShort {
    /// Each call cut, in the order sent.
    pub calls: Vec<CutCall>,
}

/// One call a dropped request cut short.
#[derive(Debug, Clone, PartialEq)]
pub struct CutCall {
    /// Where it was sent.
    pub target: Target,
    /// The prompt's tokens.
    pub usage: crate::chat::Usage,
    /// Their cost at the target's configured price; `None` when its model has none.
    pub cost: Option<f64>,
}

impl CutShort {
    /// The tokens of every call.
    pub fn usage(&self) -> crate::chat::Usage {
        let tokens = self.calls.iter().fold(0u32, |sum, call| sum.saturating_add(call.usage.prompt_tokens));
        crate::chat::Usage { prompt_tokens: tokens, total_tokens: tokens, ..Default::default() }
    }

    /// The cost of every priced call; `None` when none is priced.
    pub fn cost(&self) -> Option<f64> {
        self.calls.iter().filter_map(|call| call.cost).fold(None, |sum, usd| Some(sum.unwrap_or(0.0) + usd))
    }
}

/// A route's name and a trail of it.
pub type RouteTrail = (Arc<str>, Trail);

impl Unfinished {
    fn left(&self) -> std::sync::MutexGuard<'_, Left> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The route and the trail of a request dropped before it ended.
    pub fn take(&self) -> Option<RouteTrail> {
        self.left().trail.take()
    }

    /// The route and the trail of a request dropped before it ended, left for
    /// [`take`](Self::take).
    pub fn peek(&self) -> Option<RouteTrail> {
        self.left().trail.clone()
    }

    /// Says why the request is about to be dropped, for the note of the attempt it cuts short
    /// (else "the caller went away"): a gateway's shutdown, say.
    pub fn dropping_because(&self, why: &'static str) {
        self.left().why = Some(why);
    }

    /// The note of an attempt the drop cut short.
    pub(crate) fn cut_note(&self) -> &'static str {
        self.left().why.unwrap_or("the caller went away")
    }

    /// What the calls the drop cut short cost at the least, once: `None` for a request that
    /// ended, or whose calls cost nothing (a token count).
    pub fn cut_short(&self) -> Option<CutShort> {
        self.left().cut.take()
    }

    pub(crate) fn put(&self, route: Arc<str>, trail: Trail, cut: Option<CutShort>) {
        let mut left = self.left();
        left.trail = Some((route, trail));
        left.cut = cut;
    }
}

/// The ordered attempts of one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Trail(Vec<Attempt>);

impl Trail {
    /// Whether the request's deadline passed before anything answered (its last attempt says
    /// so): asking again at once would meet it again.
    pub fn out_of_time(&self) -> bool {
        self.0.last().is_some_and(|last| last.note.as_deref() == Some(DEADLINE_PASSED))
    }

    /// Every attempt, in order.
    pub fn attempts(&self) -> &[Attempt] {
        &self.0
    }

    /// The model `served` was called as: the provider's own id of it when the provider maps
    /// the target's (`models:`), else the target's; `None` for a candidate.
    pub fn called_model<'a>(&'a self, served: &'a Via) -> Option<&'a str> {
        let Via::Target(target) = served else { return None };
        let mapped = self
            .0
            .iter()
            .rev()
            .find(|a| a.target() == Some(target))
            .and_then(|a| a.provider_model.as_deref());
        Some(mapped.unwrap_or(target.model()))
    }

    /// Whether the request fell back: it was served (`served_by`), and by anything but the
    /// target its chain began with, the first attempt's (after a failure, or a skip of that
    /// target: gated, unhealthy, exhausted, unsupported; a hedge that won, a special chain or
    /// a candidate alike). Not when no target of the chain could take the request at all
    /// (every one skipped as unsupported: a token count the gateway estimates for a route of
    /// servers that count nothing): there was nothing to fall back from. The one definition
    /// of a fallback: `switchyard_fallbacks_total`, the recent requests' `fallback` and a
    /// trail's `fallback` all read it.
    pub fn fell_back_to(&self, served_by: Option<&Via>) -> bool {
        let first = self.0.first().map(|a| &a.via);
        served_by.is_some() && first != served_by && !self.none_could_serve()
    }

    /// See [`none_could_serve`].
    pub fn none_could_serve(&self) -> bool {
        none_could_serve(&self.0)
    }

    /// How many attempts, skips and candidates included.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing was recorded: only for a request whose `model` named nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The latest attempt; `None` when the trail is empty.
    pub fn last(&self) -> Option<&Attempt> {
        self.0.last()
    }

    /// How many times a target was asked again with the same key: a rotation to the provider's
    /// next key (also marked `retried`) is not a retry, nor counted against `max_attempts`.
    pub fn retries(&self) -> usize {
        let attempts = &self.0;
        let again = |(i, a): &(usize, &Attempt)| {
            a.outcome == Outcome::Retried
                && attempts.get(i + 1).is_none_or(|next| next.credential_id == a.credential_id)
        };
        attempts.iter().enumerate().filter(again).count()
    }

    /// The outcomes in order, handy in tests and logs.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.0.iter().map(|a| a.outcome).collect()
    }

    /// Adds `other`'s attempts after these.
    pub(crate) fn append(&mut self, other: Trail) {
        self.0.extend(other.0);
    }

    pub(crate) fn push(&mut self, attempt: Attempt) {
        self.0.push(attempt);
    }

    /// Adds `note` to the attempt's note (after what it said already).
    pub(crate) fn add_note(attempt: &mut Attempt, note: &str) {
        attempt.note = Some(match attempt.note.take() {
            Some(earlier) => format!("{earlier}; {note}"),
            None => note.to_owned(),
        });
    }

    /// The attempt that answered from `target`: the last `ok` one to it.
    pub(crate) fn serving_mut(&mut self, target: &Target) -> Option<&mut Attempt> {
        self.0
            .iter_mut()
            .rev()
            .find(|a| matches!(a.outcome, Outcome::Ok | Outcome::Continued) && a.target() == Some(target))
    }

    /// The attempt of `target` that broke mid-stream last.
    pub(crate) fn broken_mut(&mut self, target: &Target) -> Option<&mut Attempt> {
        self.0.iter_mut().rev().find(|a| a.mid_stream && a.target() == Some(target))
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut Attempt> {
        self.0.last_mut()
    }

    /// Every attempt, to annotate: a caller that knows more of an attempt than the router (what
    /// a translation left out) adds it to the attempt's note.
    pub fn attempts_mut(&mut self) -> &mut [Attempt] {
        &mut self.0
    }

    /// Puts `attempt` at `index` (or last, when the trail is shorter).
    pub(crate) fn insert(&mut self, index: usize, attempt: Attempt) {
        self.0.insert(index.min(self.0.len()), attempt);
    }
}

/// Whether no target of the chain could take the request at all: every one of `attempts` was
/// skipped as unsupported, none called (a token count no target of its route can give), but
/// for the skip for its health of a target also skipped so (see [`every_target_could_not`]).
pub fn none_could_serve(attempts: &[Attempt]) -> bool {
    every_target_could_not(attempts, |a| a.outcome == Outcome::SkippedUnsupported)
}

/// Whether every target of `attempts` could not take the request, as `could_not` says of an
/// attempt: each attempt is such, or the skip for its health of a target that such an attempt
/// names (the router tries a resting target after all when no other could take the request).
pub(crate) fn every_target_could_not(attempts: &[Attempt], could_not: impl Fn(&Attempt) -> bool) -> bool {
    let refused: Vec<&Target> =
        attempts.iter().filter(|a| could_not(a)).filter_map(Attempt::target).collect();
    !refused.is_empty()
        && attempts.iter().all(|a| {
            could_not(a)
                || (matches!(a.outcome, Outcome::SkippedUnhealthy | Outcome::SkippedExhausted)
                    && a.target().is_some_and(|target| refused.contains(&target)))
        })
}

impl FromIterator<Attempt> for Trail {
    /// A trail of `attempts`, in order: what a consumer of trails builds its tests from.
    fn from_iter<I: IntoIterator<Item = Attempt>>(attempts: I) -> Self {
        Self(attempts.into_iter().collect())
    }
}

impl fmt::Display for Trail {
    /// One line per attempt: `1. openai:gpt-4o  failed  unavailable (HTTP 503)  12.0ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, attempt) in self.0.iter().enumerate() {
            write!(f, "{:>2}. {:<32} {:<17}", n + 1, attempt.via.to_string(), attempt.outcome.as_str())?;
            if let Some(error) = &attempt.error {
                write!(f, " {}", error.kind())?;
                if let Some(status) = error.status() {
                    write!(f, " (HTTP {status})")?;
                }
            }
            write!(f, " {:.1}ms", millis(attempt.duration))?;
            if let Some(note) = &attempt.note {
                write!(f, " [{note}]")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a Trail {
    type Item = &'a Attempt;
    type IntoIter = std::slice::Iter<'a, Attempt>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Where the time of one request went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// From the call to the answer (for streams, to the first content chunk).
    pub total: Duration,
    /// Time spent waiting for the pacer, summed over attempts.
    pub queued: Duration,
    /// Time to first content chunk, for streams.
    pub first_token: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str) -> Target {
        name.parse().unwrap()
    }

    fn called(name: &str) -> Attempt {
        let id = CredentialId::derive("openai", "http://x", None);
        Attempt::called(&target(name), &id, Duration::ZERO, Duration::ZERO, Duration::ZERO)
    }

    fn trail(attempts: Vec<Attempt>) -> Trail {
        let mut trail = Trail::default();
        for attempt in attempts {
            trail.push(attempt);
        }
        trail
    }

    fn via(name: &str) -> Via {
        Via::Target(target(name))
    }

    #[test]
    fn served_by_anything_but_the_chains_first_target_is_a_fallback() {
        let gated = Attempt::skipped(&target("a:m"), false, None, Duration::ZERO, "circuit open".into());
        assert!(trail(vec![gated, called("b:m")]).fell_back_to(Some(&via("b:m"))), "after a gated skip");
        let failed = called("a:m").failed(ProviderError::new(crate::ErrorKind::Unavailable, "down"));
        assert!(
            trail(vec![failed.clone(), called("b:m")]).fell_back_to(Some(&via("b:m"))),
            "after a failure"
        );
        let candidate = Via::Candidate("apology".into());
        assert!(trail(vec![failed.clone()]).fell_back_to(Some(&candidate)), "a candidate");
    }

    #[test]
    fn a_retry_asks_again_with_the_same_key_and_a_rotation_is_none() {
        let retried = |attempt: Attempt| Attempt { outcome: Outcome::Retried, ..attempt };
        let again = trail(vec![retried(called("a:m")), called("a:m")]);
        assert_eq!(again.retries(), 1);
        let other_key =
            CredentialId::derive("openai", "http://x", Some(&crate::credential::Secret::new("sk-2")));
        let next =
            Attempt::called(&target("a:m"), &other_key, Duration::ZERO, Duration::ZERO, Duration::ZERO);
        assert_eq!(trail(vec![retried(called("a:m")), next]).retries(), 0, "a rotation");
    }

    #[test]
    fn the_first_target_answering_or_nothing_answering_is_no_fallback() {
        let failed = called("a:m").failed(ProviderError::new(crate::ErrorKind::Unavailable, "down"));
        assert!(!trail(vec![failed.clone(), called("a:m")]).fell_back_to(Some(&via("a:m"))), "a retry");
        assert!(!trail(vec![called("a:m")]).fell_back_to(Some(&via("a:m"))));
        assert!(!trail(vec![failed]).fell_back_to(None), "a failure is no fallback");
    }
}
