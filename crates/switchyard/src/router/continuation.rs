//! Continuation: a stream that broke after its caller saw content, finished by another target.
//!
//! While a stream runs, [`Resume`] keeps what the caller has been shown of the answer's text.
//! When the stream breaks (cut, stalled, failed by an error event) and the route continues
//! ([`Route::continuation`](crate::route::Route::continuation)), the route's other targets are
//! walked as one more request, a [`ContinueExchange`]: a target that accepts a prefill
//! ([`Provider::accepts_prefill`]) is asked to continue from that text, given as a final
//! assistant message; any other is asked for the whole answer again, kept only if it begins
//! with exactly what the caller has. The first that answers continues the caller's stream
//! ([`Splice`] makes its chunks follow on); if none does, the caller is told of the original
//! break. Only text is continued (not a tool call, a refusal or a structured answer), once per
//! request.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::exchange::{Exchange, Served};
use super::options::RequestOptions;
use super::stream::{Prefetched, prefetch};
use crate::chat::{ChatChunk, ChatRequest, ChatResponse, Message, ReasoningShown, ResponseFormat};
use crate::provider::{BoxFuture, Call, ChunkStream, Provider};
use crate::route::Route;
use crate::trail::{Outcome, Trail};
use crate::{ErrorKind, ProviderError, Target};

/// The most text of an answer kept for a continuation: 4 MiB, a million tokens and more, past
/// any model's context. A longer answer is not continued, and its text not held.
const MAX_DELIVERED: usize = 4 << 20;

/// What a routed stream keeps so that another target can finish its answer.
pub(crate) struct Resume {
    /// The request as the caller sent it.
    request: ChatRequest,
    /// The caller's options, for the continuing walk.
    options: RequestOptions,
    /// The text of the answer the caller has been shown.
    delivered: String,
    /// Nothing but text has been shown: no tool call, no refusal, no finish. (A Responses
    /// client's writer takes over a provider's own events where they stop.)
    text_only: bool,
    /// The id and time the caller's chunks carry, for the continuation's.
    id: Option<(String, u64)>,
    /// When the request began: the continuation's attempts are placed in its trail from it.
    started: Instant,
    /// The request's deadline, which the continuation keeps.
    deadline: Option<Instant>,
}

impl Resume {
    /// Whether the caller has been shown nothing but text: a break now may be continued.
    pub(crate) fn text_only(&self) -> bool {
        self.text_only
    }

    /// What to keep for `request` on `route`, when its stream could be continued at all.
    pub(crate) fn for_request(
        route: &Route,
        request: &ChatRequest,
        options: &RequestOptions,
    ) -> Option<Self> {
        let structured = matches!(
            request.response_format,
            Some(ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. })
        );
        let several = request.choices_asked() > 1;
        // A route of one target has no other to continue: nothing is kept.
        let alone = route.targets().len() < 2;
        if !route.continuation() || options.first_target_only() || structured || several || alone {
            return None;
        }
        let mut options = options.clone();
        options.no_cache = true;
        Some(Self {
            request: request.clone(),
            options,
            delivered: String::new(),
            text_only: true,
            id: None,
            started: Instant::now(),
            deadline: None,
        })
    }

    /// Sets when the request began and its deadline, once its stream is served.
    pub(crate) fn timed(&mut self, started: Instant, deadline: Option<Instant>) {
        self.started = started;
        self.deadline = deadline;
    }

    /// Takes note of a chunk the caller is shown.
    pub(crate) fn shown(&mut self, chunk: &ChatChunk) {
        if !self.text_only {
            return;
        }
        if self.id.is_none() && !chunk.id.is_empty() {
            self.id = Some((chunk.id.clone(), chunk.created));
        }
        for choice in &chunk.choices {
            let delta = &choice.delta;
            if choice.index != 0
                || !delta.tool_calls.is_empty()
                || delta.refusal.is_some()
                || choice.finish_reason.is_some()
            {
                self.text_only = false;
                return;
            }
            if let Some(text) = &delta.content {
                // An answer longer than any model takes back as a prefill is not kept.
                if self.delivered.len() + text.len() > MAX_DELIVERED {
                    self.text_only = false;
                    self.delivered = String::new();
                    return;
                }
                self.delivered.push_str(text);
            }
        }
    }

    /// The continuing walk over `route`'s targets other than `broken` and those that failed
    /// already in `trail`, when the stream may be continued; `None` leaves the break as it is.
    /// A stream that broke before any text (the caller was shown reasoning alone) is answered
    /// by the next target from the start.
    pub(crate) fn continuation(&self, route: &Route, broken: &Target, trail: &Trail) -> Option<Continuation> {
        if !self.text_only {
            return None;
        }
        let failed = |target: &Target| {
            trail.attempts().iter().any(|a| {
                a.target() == Some(target) && matches!(a.outcome, Outcome::Failed | Outcome::Retried)
            })
        };
        let chain: Vec<Target> =
            route.targets().iter().map(|t| t.target.clone()).filter(|t| t != broken && !failed(t)).collect();
        if chain.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut options = self.options.clone();
        if let Some(deadline) = self.deadline {
            options.deadline = Some(deadline.saturating_duration_since(now).max(Duration::from_millis(1)));
        }
        Some(Continuation {
            exchange: ContinueExchange::new(&self.request, &self.delivered, options.reasoning)
                .dropping_params(route.drop_params()),
            chain,
            options,
            offset: now.saturating_duration_since(self.started),
            splice: Splice {
                id: self.id.clone(),
                trim_start: self.delivered.ends_with(char::is_whitespace),
                output_before: 0,
            },
        })
    }
}

/// One continuing walk, ready to run: the exchange, the targets, the options, where its
/// attempts fall in the request's trail, and how its chunks follow on.
pub(crate) struct Continuation {
    pub(crate) exchange: ContinueExchange,
    pub(crate) chain: Vec<Target>,
    pub(crate) options: RequestOptions,
    pub(crate) offset: Duration,
    pub(crate) splice: Splice,
}

/// What a continued stream's chunks are given to follow on from the caller's: the caller's id
/// and time, no event of the provider's own (the caller's writer continues its own events),
/// no second role or leading whitespace the caller already has, and none of the continuing
/// model's reasoning (the caller is inside the answer's text: a model that thinks before it
/// continues would split it in two).
#[derive(Debug, Clone, Default)]
pub(crate) struct Splice {
    id: Option<(String, u64)>,
    /// The caller's text ended in whitespace, which a prefill leaves out: the continuation's
    /// leading whitespace is dropped until its first other character.
    trim_start: bool,
    /// What the broken call wrote before a prefilled continuation (output tokens): the
    /// caller's answer holds it, and its usage says so.
    pub(crate) output_before: u32,
}

impl Splice {
    /// `usage` of the continuing call as the caller's whole answer's: with what came before.
    pub(crate) fn tell_whole(&self, usage: &mut crate::chat::Usage) {
        usage.completion_tokens = usage.completion_tokens.saturating_add(self.output_before);
        usage.total_tokens = usage.total_tokens.saturating_add(self.output_before);
    }

    /// `chunk` made to follow on.
    pub(crate) fn apply(&mut self, chunk: &mut ChatChunk) {
        chunk.verbatim = None;
        if let Some((id, created)) = &self.id {
            chunk.id.clone_from(id);
            chunk.created = *created;
        }
        for choice in &mut chunk.choices {
            choice.delta.role = None;
            choice.delta.reasoning_content = None;
            choice.delta.thinking_blocks.clear();
            if self.trim_start
                && let Some(text) = choice.delta.content.as_mut()
            {
                let trimmed = text.trim_start();
                if !trimmed.is_empty() {
                    self.trim_start = false;
                }
                *text = trimmed.to_owned();
                if text.is_empty() {
                    choice.delta.content = None;
                }
            }
        }
    }
}

/// Finishing a broken stream's answer: a prefill for a target that accepts one, the whole
/// answer again for one that does not.
pub(crate) struct ContinueExchange {
    /// The caller's request with what it has been shown as a final assistant message.
    prefill: ChatRequest,
    /// The caller's request as it came, for a target that regenerates.
    original: ChatRequest,
    /// What the caller has been shown, which a regenerated answer must begin with.
    delivered: String,
    reasoning: ReasoningShown,
    alive: AtomicBool,
    /// The route's `drop_params` (see [`dropping`](super::exchange::dropping)).
    drop_params: bool,
}

impl ContinueExchange {
    /// The call of `request` (the prefilled one or the original, perhaps without a parameter
    /// the target refused): continued from the prefill, or answered again (`prefills` false).
    fn send<'q>(
        &'q self,
        provider: &'q dyn Provider,
        call: Call<'q>,
        request: &'q ChatRequest,
        prefills: bool,
    ) -> BoxFuture<'q, Result<Prefetched, ProviderError>> {
        match prefills {
            true => Box::pin(async move {
                let prefetched = prefetch(provider, call, (request, self.reasoning), &self.alive).await;
                prefetched
                    .map(|prefetched| Prefetched { prefilled: true, ..prefetched })
                    .map_err(refused_prefill)
            }),
            false => Box::pin(regenerate(provider, call, self, request)),
        }
    }

    /// The same, sending a target the request without what it cannot express when `on`.
    fn dropping_params(mut self, on: bool) -> Self {
        self.drop_params = on;
        self
    }

    fn new(request: &ChatRequest, delivered: &str, reasoning: ReasoningShown) -> Self {
        let mut prefill = request.clone();
        // Rewritten, the request is no longer the caller's bytes; and no provider thinks
        // before continuing a prefilled answer (Anthropic refuses thinking with a prefill).
        prefill.verbatim = None;
        for key in ["thinking", "reasoning_effort", "reasoning"] {
            prefill.extra.remove(key);
        }
        without_clearing_of_thinking(&mut prefill.extra);
        // Anthropic refuses a final assistant message that ends in whitespace.
        prefill.messages.push(Message::assistant(delivered.trim_end()));
        let mut original = request.clone();
        original.verbatim = None;
        Self {
            prefill,
            original,
            delivered: delivered.to_owned(),
            reasoning,
            alive: AtomicBool::new(false),
            drop_params: false,
        }
    }
}

/// `extra` without an Anthropic client's clearing of thinking (Claude Code's
/// `context_management` edit `clear_thinking_…`), which Anthropic refuses in a request that
/// does not think: its other edits stay; with none left, `context_management` goes.
fn without_clearing_of_thinking(extra: &mut crate::chat::Extra) {
    let Some(management) = extra.get_mut("context_management") else { return };
    let Some(edits) = management.get_mut("edits").and_then(serde_json::Value::as_array_mut) else { return };
    let before = edits.len();
    edits.retain(|edit| !edit["type"].as_str().is_some_and(|kind| kind.starts_with("clear_thinking")));
    if edits.is_empty() && before > 0 {
        extra.remove("context_management");
    }
}

impl Exchange for ContinueExchange {
    type Output = Prefetched;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<Prefetched, ProviderError>> {
        // Without text to go on from (reasoning alone was shown), the answer starts over.
        let prefills = provider.accepts_prefill(call.model) && !self.delivered.trim().is_empty();
        let request = if prefills { &self.prefill } else { &self.original };
        match self.drop_params {
            false => self.send(provider, call, request, prefills),
            true => Box::pin(super::exchange::dropping(
                request,
                move |request, _| self.send(provider, call, request, prefills),
                Prefetched::lead_with,
            )),
        }
    }

    fn answers_caller_whole(&self) -> bool {
        false
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        (route.timeouts().total, "total")
    }

    fn is_content_filtered(&self, output: &Prefetched) -> bool {
        output.filtered
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        // No candidates: a remembered whole answer cannot follow a part of one.
        None
    }

    fn candidate_output(&self, _: ChatResponse) -> Option<Prefetched> {
        None
    }

    fn estimated_tokens(&self) -> u32 {
        self.prefill.estimated_tokens()
    }

    fn used_tokens(&self, _: &Prefetched) -> Option<u32> {
        None
    }

    fn billed_prompt(&self) -> Option<u32> {
        Some(self.prefill.estimated_prompt_tokens())
    }

    fn answering_since(&self, output: &Prefetched) -> Option<Instant> {
        output.alive_since
    }

    fn answering(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn takes_special_chains(&self) -> bool {
        false
    }
}

/// A prefill refused as a bad request is the target's lack, not the request's fault: the
/// target is skipped (health untouched) and the walk goes on.
fn refused_prefill(error: ProviderError) -> ProviderError {
    if error.kind() == ErrorKind::InvalidRequest && !error.is_unsupported() {
        let refused =
            ProviderError::unsupported(format!("refused to continue the answer: {}", error.detail()));
        return match error.status() {
            Some(status) => refused.with_status(status),
            None => refused,
        };
    }
    error
}

/// Asks for the whole answer again and reads past what the caller has, which it must begin
/// with: what follows is the continuation.
async fn regenerate(
    provider: &dyn Provider,
    call: Call<'_>,
    x: &ContinueExchange,
    original: &ChatRequest,
) -> Result<Prefetched, ProviderError> {
    let idle = call.timeouts.idle;
    let mut prefetched = prefetch(provider, call, (original, x.reasoning), &x.alive).await?;
    // Blank (reasoning alone was shown), what the caller has asks nothing of the answer.
    let mut expected: &str = if x.delivered.trim().is_empty() { "" } else { &x.delivered };
    let mismatch = || {
        ProviderError::unsupported(format!(
            "cannot continue the answer: it does not accept a prefill, and its answer did not begin \
             with the {} characters the caller has",
            x.delivered.chars().count()
        ))
        // It answered (and was billed for it): a call that failed, not a skip.
        .with_status(200)
    };
    let mut kept = VecDeque::new();
    loop {
        let Some(mut chunk) = next_chunk(&mut prefetched, idle).await? else { return Err(mismatch()) };
        if expected.is_empty() {
            kept.push_back(chunk);
            break;
        }
        match past_prefix(&mut chunk, &mut expected) {
            Some(true) => {
                if !bare(&chunk) {
                    kept.push_back(chunk);
                }
                if expected.is_empty() {
                    break;
                }
            }
            Some(false) => {}
            None => return Err(mismatch()),
        }
    }
    kept.append(&mut prefetched.buffer);
    prefetched.buffer = kept;
    Ok(prefetched)
}

/// The next chunk of a prefetched stream, its buffer first, each within `idle`.
async fn next_chunk(prefetched: &mut Prefetched, idle: Duration) -> Result<Option<ChatChunk>, ProviderError> {
    if let Some(chunk) = prefetched.buffer.pop_front() {
        return Ok(Some(chunk));
    }
    let Some(rest) = prefetched.rest.as_mut() else { return Ok(None) };
    next_within(rest, idle).await
}

async fn next_within(rest: &mut ChunkStream, idle: Duration) -> Result<Option<ChatChunk>, ProviderError> {
    match tokio::time::timeout(idle, rest.next()).await {
        Ok(next) => next.transpose(),
        Err(_) => Err(ProviderError::stall(format!("no chunk within the idle timeout of {idle:?}"))),
    }
}

/// Reads `chunk` against the text still `expected`: `None` when it differs (or ends, or calls
/// a tool, before the text is matched); `Some(true)` when the text ran out within it, the
/// chunk left holding what follows; `Some(false)` when all of it was expected.
fn past_prefix(chunk: &mut ChatChunk, expected: &mut &str) -> Option<bool> {
    let mut through = false;
    for choice in &mut chunk.choices {
        if choice.index != 0 {
            continue;
        }
        if !choice.delta.tool_calls.is_empty() || choice.delta.refusal.is_some() {
            return None;
        }
        let text = choice.delta.content.take().unwrap_or_default();
        if let Some(rest) = expected.strip_prefix(text.as_str()) {
            *expected = rest;
        } else if let Some(after) = text.strip_prefix(*expected) {
            choice.delta.content = (!after.is_empty()).then(|| after.to_owned());
            *expected = "";
        } else {
            return None;
        }
        if expected.is_empty() {
            through = true;
        } else if choice.finish_reason.is_some() {
            return None;
        }
        choice.delta.role = None;
        choice.delta.reasoning_content = None;
        choice.delta.thinking_blocks.clear();
    }
    Some(through)
}

/// Whether `chunk` holds nothing once the expected text was taken out of it.
fn bare(chunk: &ChatChunk) -> bool {
    chunk.usage.is_none()
        && chunk.choices.iter().all(|c| c.finish_reason.is_none() && c.delta == crate::chat::Delta::default())
}

/// What a continuing walk came to, for the stream to carry on with or to give up on.
pub(crate) type Continued = Result<Served<Prefetched>, crate::RouteError>;

/// The attempts of a continuing walk, placed in the request's `trail` `offset` after its
/// start, the one that answered marked `continued`.
pub(crate) fn merge_trail(trail: &mut Trail, mut continued: Trail, offset: Duration) {
    for attempt in continued.attempts_mut() {
        attempt.started += offset;
        if attempt.outcome == Outcome::Ok {
            attempt.outcome = Outcome::Continued;
        }
    }
    trail.append(continued);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_stream_keeps_its_text_only_where_another_target_could_continue_it_and_within_the_most() {
        let request = ChatRequest::new("r", vec![crate::chat::Message::user("hi")]);
        let options = RequestOptions::default();
        let alone = Route::builder("r").target("a:m").build().unwrap();
        assert!(Resume::for_request(&alone, &request, &options).is_none(), "one target: nothing kept");

        let two = Route::builder("r").target("a:m").target("b:m").build().unwrap();
        let mut resume = Resume::for_request(&two, &request, &options).expect("kept");
        let piece = ChatChunk::text("x".repeat(1 << 20));
        for _ in 0..4 {
            resume.shown(&piece);
        }
        assert_eq!(resume.delivered.len(), 4 << 20);
        resume.shown(&ChatChunk::text("one more"));
        assert!(resume.delivered.is_empty() && !resume.text_only, "past the most: let go, not continued");
        assert!(resume.continuation(&two, &"a:m".parse().unwrap(), &Trail::default()).is_none());
    }

    #[test]
    fn a_continuation_that_does_not_think_clears_no_thinking() {
        let mut extra = crate::chat::Extra::new();
        extra.insert("context_management".into(), json!({"edits": [{"type": "clear_thinking_20251015"}]}));
        without_clearing_of_thinking(&mut extra);
        assert!(extra.get("context_management").is_none(), "its only edit went, and it with it");
        let tools = json!({"type": "clear_tool_uses_20250919"});
        extra.insert(
            "context_management".into(),
            json!({"edits": [{"type": "clear_thinking_20251015"}, tools]}),
        );
        without_clearing_of_thinking(&mut extra);
        assert_eq!(extra["context_management"], json!({"edits": [tools]}), "its other edits stay");
    }
}
