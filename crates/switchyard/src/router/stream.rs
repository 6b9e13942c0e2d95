//! Streaming through the router: fail over until the first chunk the caller is shown, then
//! forward.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;
use tokio::time::{Instant, Sleep};

use super::continuation::{Continued, Resume, Splice, merge_trail};
use super::exchange::{Exchange, Served};
use super::settler::StreamSettler;
use crate::assembly::Finishes;
use crate::chat::{
    ChatChunk, ChatRequest, ChatResponse, ChunkChoice, Delta, ReasoningShown, StreamNotice, Usage,
};
use crate::pacing::Permit;
use crate::provider::{BoxFuture, Call, ChunkStream, Provider};
use crate::route::Route;
use crate::timeouts::deadline_share;
use crate::trail::{CutCall, Outcome, Timing, Trail, Via};
use crate::{ErrorKind, ProviderError, Target};

/// A stream opened and read up to the first chunk its caller is shown: the buffered chunks, and
/// the rest.
pub(crate) struct Prefetched {
    pub(crate) buffer: VecDeque<ChatChunk>,
    pub(crate) rest: Option<ChunkStream>,
    pub(crate) filtered: bool,
    /// When the stream showed life, if it was held after (reasoning its caller is not shown).
    pub(crate) alive_since: Option<Instant>,
    /// A continuation that takes the caller's text as a prefill: its usage counts only what
    /// follows that text.
    pub(crate) prefilled: bool,
}

impl Prefetched {
    /// Says `notice` ahead of the stream's chunks: its record takes it from there.
    pub(crate) fn lead_with(&mut self, notice: crate::chat::StreamNotice) {
        self.buffer.push_front(ChatChunk::notice(notice));
    }
}

pub(crate) struct StreamExchange<'r> {
    request: &'r ChatRequest,
    /// The route's `drop_params` (see [`dropping`](super::exchange::dropping)).
    drop_params: bool,
    /// Which reasoning the caller is shown.
    reasoning: ReasoningShown,
    /// A stream showed life while held for its caller (see [`prefetch`]): set once, since only
    /// the request's first attempt is hedged and it is the first to set it.
    alive: AtomicBool,
    /// The (credential, model) pairs that refused every stream lately: asked whole, and the
    /// answer replayed as the stream.
    refusals: &'r super::refusals::StreamRefusals,
}

impl<'r> StreamExchange<'r> {
    pub(crate) fn new(
        request: &'r ChatRequest,
        (reasoning, drop_params): (ReasoningShown, bool),
        refusals: &'r super::refusals::StreamRefusals,
    ) -> Self {
        Self { request, drop_params, reasoning, alive: AtomicBool::new(false), refusals }
    }

    /// `prefetch`, or, of a target that refuses to stream this request (every stream, lately),
    /// the answer asked whole and replayed: the caller gets the whole answer at once rather
    /// than a refusal of what it did not ask for (how the answer travels is the gateway's).
    async fn open(
        &self,
        provider: &dyn Provider,
        call: Call<'_>,
        request: &ChatRequest,
    ) -> Result<Prefetched, ProviderError> {
        let refusals = self.refusals;
        let (credential, model) = (call.credential.id(), call.model);
        if !refusals.refused(credential, model) {
            match prefetch(provider, call, (request, self.reasoning), &self.alive).await {
                Err(error) if super::exchange::refuses_to_stream(&error) => {
                    let answer = super::exchange::ChatExchange::asked_whole(provider, call, request).await;
                    if answer.is_ok() && super::exchange::refuses_every_stream(&error) {
                        refusals.note(credential, model);
                    }
                    return answer.map(|answer| replayed_as(answer, super::exchange::REFUSED));
                }
                opened => return opened,
            }
        }
        let answer = super::exchange::ChatExchange::asked_whole(provider, call, request).await;
        answer.map(|answer| replayed_as(answer, super::exchange::LATELY))
    }
}

/// A whole answer asked whole as the stream of it, its trail saying why (`note`).
fn replayed_as(response: ChatResponse, note: &str) -> Prefetched {
    let mut replay = replayed(response);
    replay.lead_with(StreamNotice::Resent(note.to_owned()));
    replay
}

/// A whole answer as the stream of it, tool calls and usage included.
fn replayed(response: ChatResponse) -> Prefetched {
    let buffer = VecDeque::from(response.into_chunks());
    Prefetched { buffer, rest: None, filtered: false, alive_since: None, prefilled: false }
}

impl Exchange for StreamExchange<'_> {
    type Output = Prefetched;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<Prefetched, ProviderError>> {
        if !self.drop_params {
            return Box::pin(self.open(provider, call, self.request));
        }
        Box::pin(super::exchange::dropping(
            self.request,
            move |request, _| Box::pin(self.open(provider, call, request)),
            Prefetched::lead_with,
        ))
    }

    fn answers_caller_whole(&self) -> bool {
        false
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        // `prefetch` holds the attempt to `first_byte` until the upstream shows life.
        (route.timeouts().total, "total")
    }

    fn is_content_filtered(&self, output: &Prefetched) -> bool {
        output.filtered
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        Some(self.request)
    }

    fn candidate_output(&self, response: ChatResponse) -> Option<Prefetched> {
        Some(replayed(response))
    }

    fn estimated_tokens(&self) -> u32 {
        self.request.estimated_tokens()
    }

    fn used_tokens(&self, _: &Prefetched) -> Option<u32> {
        None
    }

    fn billed_prompt(&self) -> Option<u32> {
        Some(self.request.estimated_prompt_tokens())
    }

    fn answering_since(&self, output: &Prefetched) -> Option<Instant> {
        output.alive_since
    }

    fn answering(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    fn pins_sessions(&self) -> bool {
        true
    }
}

/// Opens the stream and reads it up to the first chunk the caller is shown.
///
/// Two moments matter, and they can differ. The upstream shows life with its first content,
/// reasoning included, or its finish (an empty answer is an answer): that ends the
/// `first_byte` wait, so a model that thinks for minutes is never failed over for slowness.
/// The stream commits with the first chunk the caller will be shown
/// ([`ChatChunk::shows_content`]) or a finish: until then the router may still retry or fall back
/// without the caller seeing a restart. Between the two (reasoning an Anthropic caller is not
/// shown) chunks are held, each within the `idle` limit, less the reasoning itself, and for the
/// `first_byte` limit at most: then the stream commits, so that the caller hears from it.
pub(crate) async fn prefetch(
    provider: &dyn Provider,
    call: Call<'_>,
    (request, reasoning): (&ChatRequest, ReasoningShown),
    answering: &AtomicBool,
) -> Result<Prefetched, ProviderError> {
    let timeouts = call.timeouts;
    let (mut stream, mut buffer, alive) = first_life(provider, call, request).await?;
    if !alive {
        // Ended with no content and no finish (only its terminator, or chunks of nothing): no
        // answer, as for one asked whole; the caller has seen nothing, so it is asked again.
        return Err(ProviderError::new(ErrorKind::MalformedResponse, "the stream ended without an answer"));
    }
    let alive_since = Instant::now();
    // The caller hears from the stream within the first-byte limit either way: reasoning it is
    // not shown is held that long at most after it began, then the stream commits.
    let hold_until = alive_since + timeouts.first_byte;
    let mut held = false;
    let mut chunk = buffer.pop_back().expect("the chunk that showed life");
    loop {
        let (shown, filtered) = (chunk.shows_content(reasoning), chunk.is_content_filtered());
        if !shown && !filtered && chunk.finishes() {
            buffer.push_back(chunk);
            if let Some(next) = after_empty(&mut stream, &mut buffer, timeouts.idle).await? {
                chunk = next;
                continue;
            }
            let alive_since = held.then_some(alive_since);
            return Ok(Prefetched { buffer, rest: None, filtered: false, alive_since, prefilled: false });
        }
        if shown || filtered {
            buffer.push_back(chunk);
            let filtered = filtered && !shown;
            return Ok(Prefetched {
                buffer,
                rest: Some(stream),
                filtered,
                alive_since: held.then_some(alive_since),
                prefilled: false,
            });
        }
        // Held, the reasoning the caller will not be shown is let go as it comes: a long think
        // does not pile up in memory.
        buffer.extend(without_reasoning(chunk));
        held = true;
        answering.store(true, Ordering::Relaxed);
        let limit = timeouts.idle;
        let wait = limit.min(hold_until.saturating_duration_since(Instant::now()));
        let next = match tokio::time::timeout(wait, stream.next()).await {
            Ok(next) => next,
            Err(_) if Instant::now() >= hold_until => {
                let alive_since = Some(alive_since);
                return Ok(Prefetched {
                    buffer,
                    rest: Some(stream),
                    filtered: false,
                    alive_since,
                    prefilled: false,
                });
            }
            Err(_) => {
                let message = format!("no chunk within the idle timeout of {limit:?}");
                return Err(ProviderError::stall(message));
            }
        };
        match next {
            Some(item) => chunk = item?,
            None => {
                return Ok(Prefetched {
                    buffer,
                    rest: None,
                    filtered: false,
                    alive_since: held.then_some(alive_since),
                    prefilled: false,
                });
            }
        }
    }
}

/// Opens the stream and reads it up to the first chunk that shows life (content, a content
/// filter's stop, or a finish: an empty answer is an answer), within the `first_byte` limit;
/// whether one came (not: the stream ended first).
async fn first_life(
    provider: &dyn Provider,
    call: Call<'_>,
    request: &ChatRequest,
) -> Result<(ChunkStream, VecDeque<ChatChunk>, bool), ProviderError> {
    let timeouts = *call.timeouts;
    let first = async {
        let mut stream = provider.chat_stream(call, request).await?;
        let mut buffer = VecDeque::new();
        let alive = read_until(&mut stream, &mut buffer, ChatChunk::answers).await?;
        Ok::<_, ProviderError>((stream, buffer, alive))
    };
    // At equal limits the first-byte timer, polled first, names the wait.
    if timeouts.first_byte <= timeouts.total {
        let limit = timeouts.first_byte;
        tokio::time::timeout(limit, first).await.map_err(|_| {
            ProviderError::silence(format!("no answer within the first_byte timeout of {limit:?}"))
        })?
    } else {
        first.await
    }
}

/// Reads what follows an answer's finish that came without content: the next chunk (the
/// usage, say), or `None` once the stream ended or went quiet for
/// [`AFTER_FINISH`](super::AFTER_FINISH) (the empty answer stands; gone quiet, its terminator
/// missing, which `buffer` is told); the error it broke with if it broke (an empty answer that
/// broke is asked again, not kept).
async fn after_empty(
    stream: &mut ChunkStream,
    buffer: &mut VecDeque<ChatChunk>,
    idle: Duration,
) -> Result<Option<ChatChunk>, ProviderError> {
    match tokio::time::timeout(idle.min(super::AFTER_FINISH), stream.next()).await {
        Ok(Some(next)) => next.map(Some),
        Ok(None) => Ok(None),
        Err(_) => {
            buffer.push_back(ChatChunk::notice(StreamNotice::Unterminated));
            Ok(None)
        }
    }
}

/// `chunk` without the reasoning its caller is not shown; `None` when nothing else is left.
fn without_reasoning(mut chunk: ChatChunk) -> Option<ChatChunk> {
    for choice in &mut chunk.choices {
        choice.delta.reasoning_content = None;
        choice.delta.thinking_blocks.clear();
    }
    let bare = chunk.usage.is_none()
        && chunk.extra.is_empty()
        && chunk.verbatim.is_none()
        && chunk.choices.iter().all(|c| c.finish_reason.is_none() && c.delta == Delta::default());
    (!bare).then_some(chunk)
}

/// Reads `stream` into `buffer` up to the first chunk `stop` holds for, and says whether one came
/// (not: the stream ended first).
async fn read_until(
    stream: &mut ChunkStream,
    buffer: &mut VecDeque<ChatChunk>,
    stop: impl Fn(&ChatChunk) -> bool,
) -> Result<bool, ProviderError> {
    while let Some(item) = stream.next().await {
        let chunk = item?;
        let stopped = stop(&chunk);
        buffer.push_back(chunk);
        if stopped {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A failure after streamed content reached the caller: the stream's last item.
#[derive(Debug, Clone, thiserror::Error)]
#[error("stream failed after content was sent: {error}")]
pub struct StreamError {
    /// The failure, stamped with the serving target and credential; a stream that exceeded its
    /// idle or total limit fails as [`ErrorKind::Timeout`](crate::ErrorKind::Timeout).
    pub error: ProviderError,
    /// The trail, with the serving attempt marked failed mid-stream.
    pub trail: Trail,
}

/// A routed stream of chunks. Yields `Err` at most once, as its last item, when the upstream
/// fails after content was sent; it is never restarted silently. Holds the pacing permit until
/// it ends or is dropped.
pub struct RoutedStream {
    router: StreamSettler,
    buffer: VecDeque<ChatChunk>,
    rest: Option<ChunkStream>,
    idle_limit: Duration,
    /// The deadline a continuation could still finish the answer within: each wait for a chunk
    /// is at most half of what is left of it, so a stall leaves the continuation the rest.
    share_of: Option<Instant>,
    /// When the last chunk that showed life came (content or a finish; not a keep-alive): the
    /// idle limit runs from it.
    last_chunk: Instant,
    /// The end of the total limit (the attempt's `total` or the request's deadline).
    end: Instant,
    /// The stream's one timer, for both limits: it fires at the earlier of the two or before
    /// it. It is not moved with every chunk (a move re-files it in the timer wheel), but when it
    /// fires early, to the limit that is then the nearer.
    timer: Pin<Box<Sleep>>,
    total_name: &'static str,
    /// The total limit is the request's deadline, not the attempt's `total` timeout.
    cut_by_deadline: bool,
    answered: Option<(Target, usize)>,
    permit: Option<Permit>,
    served_by: Via,
    route: Arc<str>,
    trail: Trail,
    timing: Timing,
    usage: Option<Usage>,
    /// What the answer used before its usage came, estimated: for a caller that leaves first.
    so_far: SoFar,
    /// The choices asked for or begun, and those finished.
    choices: Finishes,
    done: bool,
    /// The answer being streamed, kept for the route's `cache` candidates when it ends well.
    keeping: Option<Box<Keeping>>,
    /// What another target needs to finish the answer if this stream breaks (see
    /// [`continuation`](super::continuation)); taken when it does.
    resume: Option<Box<Resume>>,
    /// Another target finishing the answer, while it is asked.
    continuing: Option<Box<Continuing>>,
    /// How the continuing target's chunks follow on, once it answered.
    splice: Option<Splice>,
    /// The chunks from a tool call's first on, held back until the answer's finish while the
    /// stream could be continued: a call cut halfway is no use to the caller, and with it
    /// unseen the text before it can still be continued by another target.
    held: Option<Held>,
    /// The call that broke before another target continued its answer: what it delivered
    /// (as it said it, else estimated) is the caller's answer too, and was billed.
    broken: Option<CutCall>,
}

/// Chunks held back ([`RoutedStream::held`]): the size of the provider's frames of them, and
/// what they say (the bound where no frame came; an estimate for a caller that leaves).
#[derive(Default)]
struct Held {
    chunks: Vec<ChatChunk>,
    bytes: usize,
    so_far: SoFar,
}

impl Held {
    fn add(&mut self, chunk: ChatChunk) {
        self.so_far.add(&chunk);
        self.bytes += chunk.verbatim.as_ref().map_or(0, |frame| frame.bytes().len());
        self.chunks.push(chunk);
    }
}

/// The most a stream holds back for a tool call (its arguments, as the provider's frames say
/// them): past it the chunks go on, and a break there is the caller's as before.
const MAX_HELD: usize = 4 << 20;

/// The prompt's tokens and the answer's characters delivered before the usage came, for an
/// estimate of what a stream its caller left used (a provider bills what it generated).
#[derive(Debug, Default, Clone, Copy)]
struct SoFar {
    prompt_tokens: u32,
    chars: usize,
}

impl SoFar {
    /// Counts what `chunk` delivers: text, reasoning, refusal and tool calls' arguments.
    fn add(&mut self, chunk: &ChatChunk) {
        for choice in &chunk.choices {
            let delta = &choice.delta;
            let text = [&delta.content, &delta.reasoning_content, &delta.refusal];
            self.chars += text.iter().map(|piece| piece.as_ref().map_or(0, String::len)).sum::<usize>();
            let calls = delta.tool_calls.iter().filter_map(|call| call.function.as_ref());
            self.chars += calls.map(|f| f.arguments.as_ref().map_or(0, String::len)).sum::<usize>();
        }
    }

    /// Four characters a token, as a prompt is estimated; `None` when nothing was delivered.
    fn usage(self) -> Option<Usage> {
        if self.chars == 0 {
            return None;
        }
        let completion_tokens = u32::try_from(self.chars.div_ceil(4)).unwrap_or(u32::MAX);
        let total_tokens = self.prompt_tokens.saturating_add(completion_tokens);
        Some(Usage { prompt_tokens: self.prompt_tokens, completion_tokens, total_tokens, ..Usage::default() })
    }
}

/// A continuation being asked for, and the break the caller is told of if none comes.
struct Continuing {
    walk: BoxFuture<'static, Continued>,
    broken: ProviderError,
    /// Where the continuation's attempts fall in the request's trail.
    offset: Duration,
    splice: Splice,
}

/// A streamed answer put back together, for a `cache` candidate.
pub(crate) struct Keeping {
    pub(crate) request: ChatRequest,
    pub(crate) scope: String,
    answer: ChatResponse,
}

impl Keeping {
    pub(crate) fn new(request: ChatRequest, scope: String) -> Self {
        let mut answer = ChatResponse::from_text("", "");
        answer.choices[0].message.content = None;
        Self { request, scope, answer }
    }

    /// Adds what `chunk` says of the first choice.
    fn add(&mut self, chunk: &ChatChunk) {
        if self.answer.model.is_empty() {
            self.answer.model.clone_from(&chunk.model);
        }
        if chunk.usage.is_some() {
            self.answer.usage = chunk.usage;
        }
        let Some(choice) = chunk.choices.iter().find(|c| c.index == 0) else { return };
        let target = &mut self.answer.choices[0];
        if let Some(text) = &choice.delta.content {
            match &mut target.message.content {
                Some(crate::chat::Content::Text(so_far)) => so_far.push_str(text),
                _ => target.message.content = Some(crate::chat::Content::Text(text.clone())),
            }
        }
        for call in choice.delta.tool_calls.iter().filter(|call| call.index < crate::chat::MAX_TOOL_CALLS) {
            let index = call.index as usize;
            let calls = &mut target.message.tool_calls;
            while calls.len() <= index {
                calls.push(crate::chat::ToolCall::function("", "", ""));
            }
            calls[index].absorb(call);
        }
        if choice.finish_reason.is_some() {
            target.finish_reason.clone_from(&choice.finish_reason);
        }
    }
}

impl fmt::Debug for RoutedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoutedStream")
            .field("served_by", &self.served_by)
            .field("route", &self.route)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl RoutedStream {
    pub(crate) fn new(router: StreamSettler, served: Served<Prefetched>, resume: Option<Resume>) -> Self {
        let attempt_end = served.attempt_started + served.timeouts.total;
        let (end, total_name, cut_by_deadline) = match served.deadline {
            Some(deadline) if deadline < attempt_end => (deadline, "request deadline", true),
            _ => (attempt_end, "total", false),
        };
        let mut timing = served.timing;
        timing.first_token = Some(timing.total);
        let resume = resume.map(|mut resume| {
            let now = Instant::now();
            resume.timed(now.checked_sub(timing.total).unwrap_or(now), served.deadline);
            Box::new(resume)
        });
        // With a deadline, a stall leaves a continuation its share of what is left.
        let share_of = served.deadline.filter(|_| resume.is_some());
        let mut stream = Self {
            router,
            buffer: served.output.buffer,
            rest: served.output.rest,
            idle_limit: served.timeouts.idle,
            share_of,
            last_chunk: Instant::now(),
            end,
            timer: Box::pin(tokio::time::sleep_until(within(
                end,
                Instant::now(),
                idle_within(served.timeouts.idle, share_of, Instant::now()),
            ))),
            total_name,
            cut_by_deadline,
            answered: served.answered,
            permit: served.permit,
            served_by: served.via,
            route: served.route.name_arc().clone(),
            trail: served.trail,
            timing,
            usage: None,
            so_far: SoFar::default(),
            choices: Finishes::default(),
            done: false,
            keeping: None,
            resume,
            continuing: None,
            splice: None,
            held: None,
            broken: None,
        };
        stream.hold_an_opening_call();
        stream
    }

    /// An answer that opens with its tool call (no text before it: the call committed the
    /// stream) holds it back too, from the chunks read before the commit on. Its opener goes on
    /// at once, the call's first chunk without the call (the answer's id, model and role), so
    /// that the caller's writer begins its message (Anthropic's `message_start`, after which
    /// its pings may come) and a caller answered by the next target after a cut has its role.
    fn hold_an_opening_call(&mut self) {
        if self.rest.is_none() || !self.resume.as_ref().is_some_and(|r| r.text_only()) {
            return;
        }
        let Some(at) = self.buffer.iter().position(starts_a_call) else { return };
        // Whole already: no break can come between the call and its finish.
        if self.buffer.iter().skip(at).any(|chunk| chunk.choices.iter().any(|c| c.finish_reason.is_some())) {
            return;
        }
        let mut chunks = self.buffer.split_off(at);
        if let Some(opener) = chunks.front_mut().and_then(opener_of) {
            self.buffer.push_back(opener);
        }
        let held = self.held.insert(Held::default());
        for chunk in chunks {
            held.add(chunk);
        }
    }

    /// Takes the answer as whole only once all `choices` of `request` have finished, not
    /// only those begun so far, and estimates its prompt for [`usage_so_far`](Self::usage_so_far).
    pub(crate) fn answering(mut self, request: &ChatRequest) -> Self {
        self.choices = Finishes::expecting(request.choices_asked());
        self.so_far.prompt_tokens = request.estimated_prompt_tokens();
        self
    }

    /// Keeps the answer for the route's `cache` candidates when the stream ends well.
    pub(crate) fn keeping(mut self, keeping: Keeping) -> Self {
        self.keeping = Some(Box::new(keeping));
        self
    }

    /// Who is answering: a target or a candidate.
    pub fn served_by(&self) -> &Via {
        &self.served_by
    }

    /// The route that governed the request (the default route's name when `model` named a target).
    pub fn route(&self) -> &str {
        &self.route
    }

    /// The trail so far; after a mid-stream failure, the serving attempt is marked failed.
    pub fn trail(&self) -> &Trail {
        &self.trail
    }

    /// Timing up to the first chunk the caller is shown (`total` and `first_token` are that
    /// moment).
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Usage, once a chunk carrying it has passed.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The cost of the answer at the provider's configured price, once usage is known.
    pub fn cost(&self) -> Option<f64> {
        let (target, _) = self.answered.as_ref()?;
        Some(self.router.price(target)?.cost(&self.usage?))
    }

    /// What the answer used as far as it went, for a caller that leaves before the end: the
    /// usage once a chunk said it, else an estimate of the prompt and of what was delivered
    /// (four characters a token); `None` when nothing was.
    pub fn usage_so_far(&self) -> Option<Usage> {
        let mut so_far = self.so_far;
        // What is held back was generated (and is billed) though not yet delivered.
        if let Some(held) = &self.held {
            so_far.chars += held.so_far.chars;
        }
        self.usage.or_else(|| so_far.usage())
    }

    /// The cost of [`usage_so_far`](Self::usage_so_far) at the provider's configured price.
    pub fn cost_so_far(&self) -> Option<f64> {
        let (target, _) = self.answered.as_ref()?;
        Some(self.router.price(target)?.cost(&self.usage_so_far()?))
    }

    /// The call that broke before another target continued the answer, with what it
    /// delivered (its usage, else an estimate of its prompt and of what the caller was shown)
    /// and its cost: part of the caller's answer, billed by its provider, and not in
    /// [`usage_so_far`](Self::usage_so_far), which is the continuing call's.
    pub fn broken_call(&self) -> Option<&CutCall> {
        // While another target is asked, the stream is still the broken call's (its
        // `usage_so_far`): a caller that leaves then is charged it once.
        self.broken.as_ref().filter(|_| self.continuing.is_none())
    }

    /// Whether every choice of the answer finished: the caller has the whole answer, whatever
    /// its terminator (a client that leaves now has been answered).
    pub fn is_whole(&self) -> bool {
        self.choices.is_whole()
    }

    /// Whether the stream holds a pacing permit right now.
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }

    fn deliver(&mut self, mut chunk: ChatChunk) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        if let Some(splice) = self.splice.as_mut() {
            splice.apply(&mut chunk);
        }
        if let Some(resume) = self.resume.as_mut() {
            resume.shown(&chunk);
        }
        if chunk.usage.is_some() {
            // The call's own, for its bill; the caller is told its whole answer's.
            self.usage = chunk.usage;
            if let (Some(splice), Some(usage)) = (&self.splice, chunk.usage.as_mut()) {
                splice.tell_whole(usage);
            }
        } else if self.usage.is_none() {
            self.so_far.add(&chunk);
        }
        if let Some(keeping) = self.keeping.as_mut() {
            keeping.add(&chunk);
        }
        if chunk.is_content_filtered()
            && let Via::Target(target) = &self.served_by
            && let Some(attempt) = self.trail.serving_mut(target)
        {
            attempt.filtered();
        }
        let was_whole = self.choices.is_whole();
        self.choices.see(&chunk);
        if !was_whole && self.choices.is_whole() {
            // Only the terminator (and the usage that may come before it) is left to wait for.
            let due = within(self.end, Instant::now(), self.wait_limit());
            self.timer.as_mut().reset(due);
        }
        Poll::Ready(Some(Ok(chunk)))
    }

    /// The provider's stream ended without a break: what was held is the answer's and goes on,
    /// then the stream ends.
    fn ended(&mut self) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        self.rest = None;
        if let Some(held) = self.held.take() {
            self.buffer.extend(held.chunks);
        }
        match self.buffer.pop_front() {
            Some(chunk) => self.deliver(chunk),
            None => {
                self.finish();
                Poll::Ready(None)
            }
        }
    }

    /// `chunk`, or `None` when it is held back: from a tool call's first chunk on, while a
    /// break could still be continued (nothing but text shown), until the answer's finish,
    /// which lets everything held go on in order (or until [`MAX_HELD`]).
    fn hold(&mut self, chunk: ChatChunk) -> Option<ChatChunk> {
        let held = match self.held.as_mut() {
            Some(held) => held,
            None if starts_a_call(&chunk) && self.resume.as_ref().is_some_and(|r| r.text_only()) => {
                self.held.insert(Held::default())
            }
            None => return Some(chunk),
        };
        let ends = chunk.choices.iter().any(|choice| choice.finish_reason.is_some());
        held.add(chunk);
        // The provider's frames where it framed them, else what the chunks say.
        if !ends && held.bytes.max(held.so_far.chars) <= MAX_HELD {
            return None;
        }
        let held = self.held.take().unwrap_or_default();
        self.buffer.extend(held.chunks);
        self.buffer.pop_front()
    }

    /// Ends a whole answer whose terminator did not come (held open, cut, past its limit).
    fn end_whole(&mut self, notice: StreamNotice) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        self.notice(notice);
        self.finish();
        Poll::Ready(None)
    }

    /// How long the stream may go without a chunk: the `idle` limit, and once the answer is
    /// whole no more than [`AFTER_FINISH`](super::AFTER_FINISH).
    fn wait_limit(&self) -> Duration {
        match self.choices.is_whole() {
            true => self.idle_limit.min(super::AFTER_FINISH),
            false => {
                idle_within(self.idle_limit, self.share_of.filter(|_| self.resume.is_some()), self.last_chunk)
            }
        }
    }

    fn finish(&mut self) {
        self.done = true;
        self.rest = None;
        self.resume = None;
        if self.splice.is_some()
            && let Some((target, _)) = &self.answered
            && let Some(attempt) = self.trail.serving_mut(target)
        {
            attempt.usage = self.usage;
        }
        if let Some(keeping) = self.keeping.take() {
            let Keeping { request, scope, answer } = *keeping;
            // Nothing said is nothing to remember.
            let message = &answer.choices[0].message;
            if message.content.is_some() || !message.tool_calls.is_empty() {
                for cache in self.router.route().answer_caches() {
                    cache.remember(&scope, &self.route, &request, &answer);
                }
            }
        }
        if let Some(mut permit) = self.permit.take() {
            permit.settle(self.usage.map(|u| u.total_tokens));
        }
    }

    fn fail(
        &mut self,
        error: ProviderError,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        self.fail_as(error, Blame::Provider, cx)
    }

    /// Ends the stream with `error`, unless another target may finish the answer; health
    /// learns of it only when the provider is to blame (the caller's deadline says nothing
    /// about the provider, as for an unstreamed attempt).
    fn fail_as(
        &mut self,
        error: ProviderError,
        blame: Blame,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        let mut error = error;
        // A cut answer is no good answer to remember.
        self.keeping = None;
        // A tool call cut halfway was never shown: the caller has the text before it.
        let held = self.held.take();
        let unshown = held.is_some();
        // What was held back was generated, and billed, though never shown: the stream's
        // estimate keeps counting it.
        if let (Some(held), None) = (&held, self.usage) {
            self.so_far.chars += held.so_far.chars;
        }
        if let Some((target, credential)) = self.answered.clone() {
            error = self.router.failed_mid_stream(&target, credential, error, blame == Blame::Provider);
            let note = self.router.after_content_sent(&error);
            // The attempt that was streaming: after a hedged race it need not be the last
            // record (the cancelled hedge's follows the first attempt that won).
            if let Some(served) = self.trail.serving_mut(&target) {
                served.outcome = Outcome::Failed;
                served.mid_stream = true;
                served.error = Some(error.clone());
                served.note = match (note, unshown) {
                    (note, false) => note,
                    (Some(note), true) => Some(format!("{note}; {HELD_NOTE}")),
                    (None, true) => Some(HELD_NOTE.to_owned()),
                };
                served.usage = self.usage;
            }
            let resume = self.resume.take().filter(|_| blame != Blame::Caller);
            if let Some(continuation) =
                resume.and_then(|resume| resume.continuation(self.router.route(), &target, &self.trail))
            {
                self.broken = self.delivered_by(target);
                // Its record (the last failed one of its target) says what it delivered, as the
                // caller is charged it.
                if let Some(broken) = &self.broken
                    && let Some(served) = self.trail.broken_mut(&broken.target)
                {
                    served.usage = Some(broken.usage);
                }
                self.continuing = Some(Box::new(Continuing {
                    walk: self.router.continuation(
                        continuation.exchange,
                        continuation.chain,
                        continuation.options,
                    ),
                    broken: error,
                    offset: continuation.offset,
                    splice: continuation.splice,
                }));
                return self.poll_continuing(cx);
            }
        }
        self.finish();
        Poll::Ready(Some(Err(StreamError { error, trail: self.trail.clone() })))
    }

    /// What `target`'s call, broken, delivered: its usage when it came, else the estimate of
    /// its prompt and of what it generated (what was held back included), at its price.
    fn delivered_by(&self, target: Target) -> Option<CutCall> {
        let usage = self.usage.or_else(|| self.so_far.usage())?;
        let cost = self.router.price(&target).map(|price| price.cost(&usage));
        Some(CutCall { target, usage, cost })
    }

    /// Waits for the target finishing the answer: then its chunks follow, or, if none could,
    /// the break ends the stream.
    fn poll_continuing(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        let Some(continuing) = self.continuing.as_mut() else { return self.poll_chunk(cx) };
        let Poll::Ready(walked) = continuing.walk.as_mut().poll(cx) else { return Poll::Pending };
        let Continuing { broken, offset, splice, .. } = *self.continuing.take().expect("polled above");
        match walked {
            Ok(served) => {
                self.carry_on(served, offset, splice);
                self.poll_chunk(cx)
            }
            Err(failed) => {
                merge_trail(&mut self.trail, failed.into_trail(), offset);
                // Nothing continued it: what the broken call delivered is the stream's own
                // (`usage_so_far`), not a call beside another's.
                self.broken = None;
                self.finish();
                Poll::Ready(Some(Err(StreamError { error: broken, trail: self.trail.clone() })))
            }
        }
    }

    /// Carries on with the continuing target's stream, within its own limits.
    fn carry_on(&mut self, served: Served<Prefetched>, offset: Duration, splice: Splice) {
        merge_trail(&mut self.trail, served.trail, offset);
        if let Some(mut permit) = self.permit.take() {
            permit.settle(self.usage.map(|u| u.total_tokens));
        }
        let now = Instant::now();
        let attempt_end = served.attempt_started + served.timeouts.total;
        (self.end, self.total_name, self.cut_by_deadline) = match served.deadline {
            Some(deadline) if deadline < attempt_end => (deadline, "request deadline", true),
            _ => (attempt_end, "total", false),
        };
        self.idle_limit = served.timeouts.idle;
        self.last_chunk = now;
        self.timer.as_mut().reset(within(self.end, now, self.idle_limit));
        self.buffer = served.output.buffer;
        self.rest = served.output.rest;
        self.answered = served.answered;
        self.permit = served.permit;
        self.served_by = served.via;
        self.usage = None;
        // What the continuing call delivers is its own; what the broken one did is `broken`.
        self.so_far.chars = 0;
        self.splice = Some(splice);
        // A prefilled continuation's usage counts what follows the caller's text alone: the
        // caller's answer, whose usage it is told, holds the broken call's words before it.
        if served.output.prefilled
            && let Some(splice) = self.splice.as_mut()
        {
            splice.output_before = self.broken.as_ref().map_or(0, |broken| broken.usage.completion_tokens);
        }
    }
}

impl Stream for RoutedStream {
    type Item = Result<ChatChunk, StreamError>;

    /// The next chunk; what a chunk's notice says goes to the serving attempt's record, and a
    /// chunk that carried only a notice is not passed on.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.poll_chunk(cx) {
                Poll::Ready(Some(Ok(mut chunk))) => {
                    let Some(notice) = chunk.notice.take() else { return Poll::Ready(Some(Ok(chunk))) };
                    self.notice(notice);
                    if !bare(&chunk) {
                        return Poll::Ready(Some(Ok(chunk)));
                    }
                }
                other => return other,
            }
        }
    }
}

/// Whether `chunk` carries nothing at all for its caller.
fn bare(chunk: &ChatChunk) -> bool {
    chunk.choices.is_empty() && chunk.usage.is_none() && chunk.verbatim.is_none() && chunk.extra.is_empty()
}

impl RoutedStream {
    /// Says on the serving attempt what its stream did short of failing.
    fn notice(&mut self, notice: StreamNotice) {
        let Via::Target(target) = &self.served_by else { return };
        if let Some(attempt) = self.trail.serving_mut(target) {
            attempt.notice(notice);
        }
    }

    /// The next chunk of the stream, within its limits.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        let this = self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.continuing.is_some() {
            return this.poll_continuing(cx);
        }
        if let Some(chunk) = this.buffer.pop_front() {
            return this.deliver(chunk);
        }
        // A chunk held back is followed at once by the next.
        loop {
            let Some(rest) = this.rest.as_mut() else { return this.ended() };
            // The total limit first: an upstream that always has a chunk ready must not outrun
            // it. Read off the clock while chunks come; the timer is polled (its waker
            // registered) only when the stream is to wait.
            let now = Instant::now();
            if now >= this.end {
                return this.fail_total(cx);
            }
            match rest.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    // A keep-alive is passed on (the client's own timers see it) but does not
                    // reset the idle wait: an upstream that stalled and pings is still stalled.
                    if chunk.shows_life() {
                        this.last_chunk = now;
                    }
                    if let Some(chunk) = this.hold(chunk) {
                        return this.deliver(chunk);
                    }
                }
                Poll::Ready(Some(Err(error))) => return this.broke(error, cx),
                Poll::Ready(None) => return this.ended(),
                Poll::Pending => return this.poll_limits(cx),
            }
        }
    }

    /// The provider's stream broke: the answer fails, unless it is whole (then a break before
    /// its terminator costs it nothing).
    fn broke(
        &mut self,
        error: ProviderError,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        match self.choices.is_whole() {
            true => self.end_whole(StreamNotice::BrokenAfterFinish(error.detail().to_owned())),
            false => self.fail(error, cx),
        }
    }

    /// Nothing came yet: the idle and total limits are watched.
    fn poll_limits(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if now >= self.end {
                return self.fail_total(cx);
            }
            let due = within(self.end, self.last_chunk, self.wait_limit());
            if now < due {
                self.timer.as_mut().reset(due);
                continue;
            }
            if self.choices.is_whole() {
                return self.end_whole(StreamNotice::Unterminated);
            }
            let limit = self.wait_limit();
            if limit < self.idle_limit {
                // The deadline's share cut the wait: the model may only be pausing, which says
                // nothing of its health; the continuation goes on.
                let message = format!(
                    "no chunk within {limit:?}, its idle wait shortened to leave a continuation a share of the request deadline"
                );
                return self.fail_as(ProviderError::stall(message), Blame::Share, cx);
            }
            let error = ProviderError::stall(format!("no chunk within the idle timeout of {limit:?}"));
            return self.fail(error, cx);
        }
        Poll::Pending
    }
}

/// The `idle` wait from `from`, at most half of what is then left of the deadline `share_of`
/// (a stream a continuation could still finish, leaving it the other half).
fn idle_within(idle: Duration, share_of: Option<Instant>, from: Instant) -> Duration {
    share_of
        .and_then(|deadline| deadline_share(deadline.saturating_duration_since(from), 1))
        .map_or(idle, |share| share.min(idle))
}

/// `from` + `limit`, but no later than `end` (nor past what an instant can hold).
fn within(end: Instant, from: Instant, limit: Duration) -> Instant {
    from.checked_add(limit).map_or(end, |due| due.min(end))
}

impl RoutedStream {
    /// Ends the stream at its total limit (the attempt's `total` timeout or the request's
    /// deadline, whichever came first).
    fn fail_total(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, StreamError>>> {
        if self.choices.is_whole() {
            return self.end_whole(StreamNotice::Unterminated);
        }
        let name = self.total_name;
        let error = ProviderError::new(ErrorKind::Timeout, format!("stream exceeded the {name} timeout"));
        let blame = if self.cut_by_deadline { Blame::Caller } else { Blame::Provider };
        self.fail_as(error, blame, cx)
    }
}

/// The note of a stream that broke while a tool call it had begun was held back.
const HELD_NOTE: &str =
    "broke inside a tool call, which was held back: the caller was shown only the text before it";

/// The opener of an answer whose first chunk, `chunk`, carries its role with its tool call
/// (OpenAI's does): that chunk with nothing but the role, which `chunk` then leaves out (a
/// client adds up a role said twice); `None` when `chunk` says no role.
fn opener_of(chunk: &mut ChatChunk) -> Option<ChatChunk> {
    if chunk.choices.iter().all(|choice| choice.delta.role.is_none()) {
        return None;
    }
    // Changed, the chunk is no longer the provider's frame.
    chunk.verbatim = None;
    let choices = chunk
        .choices
        .iter_mut()
        .map(|choice| ChunkChoice {
            index: choice.index,
            delta: Delta { role: choice.delta.role.take(), ..Delta::default() },
            finish_reason: None,
        })
        .collect();
    Some(ChatChunk {
        id: chunk.id.clone(),
        model: chunk.model.clone(),
        created: chunk.created,
        choices,
        usage: None,
        extra: chunk.extra.clone(),
        verbatim: None,
        notice: None,
    })
}

/// Whether `chunk` begins or carries a tool call.
fn starts_a_call(chunk: &ChatChunk) -> bool {
    chunk.choices.iter().any(|choice| !choice.delta.tool_calls.is_empty())
}

/// Who a stream's failure is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blame {
    /// The provider: it failed, stalled or ran past its timeout.
    Provider,
    /// Nobody: the deadline's share for a continuation cut a wait the model may have meant.
    Share,
    /// The caller: its deadline cut the stream.
    Caller,
}
