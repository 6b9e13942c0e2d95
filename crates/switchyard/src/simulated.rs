//! The simulated provider: scripted latency and faults, a first-class provider kind.
//!
//! Tests, the zero-config demo and the benchmarks all use it. Everything it does is driven by
//! tokio's clock and a seeded random source, so a run replays exactly under paused time.
//!
//! ```
//! use std::time::Duration;
//! use switchyard::ErrorKind;
//! use switchyard::simulated::{Latency, SimulatedProvider, Step};
//!
//! let flaky = SimulatedProvider::new()
//!     .latency(Latency::Uniform(Duration::from_millis(20), Duration::from_millis(80)))
//!     .error_rate(ErrorKind::Unavailable, 0.3)
//!     .script([Step::fail(ErrorKind::RateLimited), Step::Reply]);
//! assert_eq!(flaky.calls(), 0);
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Jitter;
use crate::chat::{
    ChatChunk, ChatRequest, ChatResponse, ChunkChoice, Delta, Embedding, EmbeddingsRequest,
    EmbeddingsResponse, FinishReason, Role, TokenCount, Usage,
};
use crate::provider::{BoxFuture, Call, ChunkStream, Provider};
use crate::{ErrorKind, ProviderError};

/// How long the simulated provider takes before it answers (for streams: before the first chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// Always this long.
    Fixed(Duration),
    /// Uniform between the two bounds, drawn from the seeded source.
    Uniform(Duration, Duration),
}

/// What one call does. Scripted steps are used in order, one per call; after the script, calls
/// follow the outage windows, error rates and default reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The default reply.
    Reply,
    /// A reply with this text.
    Text(String),
    /// Fail with this error (before any chunk, for streams).
    Fail(ProviderError),
    /// Never answer (the router's timeouts must end it).
    Hang,
    /// Answer after this extra delay, doing the inner step.
    Delay(Duration, Box<Step>),
    /// An answer withheld by the content filter (`finish_reason: content_filter`, no content).
    ContentFilter,
    /// Streams: send this many content chunks, then fail with a transport error.
    CutAfter(usize),
    /// Streams: send this many content chunks, then go silent forever.
    StallAfter(usize),
    /// Streams: send the whole answer, its finish and usage, then go silent forever instead of
    /// ending (a provider that never sends its terminator nor closes the stream).
    StallAfterFinish,
    /// Streams: send the whole answer, its finish and usage, then break (a transport error)
    /// before the terminator.
    CutAfterFinish,
    /// Streams: an answer without content (its role, then its finish and usage), then silence
    /// with the stream held open.
    EmptyThenStall,
    /// Streams: an answer without content, then a break (a transport error).
    EmptyThenCut,
    /// Send this many content chunks, then end with `finish_reason: content_filter` (the
    /// provider's filter cut the answer midway).
    FilterAfter(usize),
    /// Streams: send this many content chunks, then only keep-alives (chunks of nothing, as an
    /// Anthropic `ping` or an empty delta), one a second for ten minutes, then silence: an
    /// upstream that stalled and pings.
    PingAfter(usize),
    /// Streams: the role chunk, then the stream's end: no content and no finish.
    RoleOnly,
}

impl Step {
    /// A failure of `kind` shaped as providers typically send it (status and code).
    pub fn fail(kind: ErrorKind) -> Step {
        Step::Fail(typical_error(kind))
    }

    /// A 429 with a Retry-After.
    pub fn rate_limited(retry_after: Duration) -> Step {
        Step::Fail(typical_error(ErrorKind::RateLimited).with_retry_after(retry_after))
    }
}

/// An error of `kind` with the status and code a real provider would send.
pub fn typical_error(kind: ErrorKind) -> ProviderError {
    let (status, code, detail) = match kind {
        ErrorKind::RateLimited => (Some(429), Some("rate_limit_exceeded"), "simulated rate limit"),
        ErrorKind::QuotaExceeded => (Some(429), Some("insufficient_quota"), "simulated quota exhaustion"),
        ErrorKind::Timeout => (None, None, "simulated timeout"),
        ErrorKind::Transport => (None, None, "simulated connection reset"),
        ErrorKind::Unavailable => (Some(503), Some("service_unavailable"), "simulated outage"),
        ErrorKind::MalformedResponse => (Some(200), None, "simulated unparseable body"),
        ErrorKind::Auth => (Some(401), Some("invalid_api_key"), "simulated invalid key"),
        ErrorKind::ModelNotFound => (Some(404), Some("model_not_found"), "simulated unknown model"),
        ErrorKind::ContextLength => (Some(400), Some("context_length_exceeded"), "simulated prompt too long"),
        ErrorKind::ContentFiltered => (Some(400), Some("content_filter"), "simulated content filter"),
        ErrorKind::InvalidRequest => (Some(400), Some("invalid_request_error"), "simulated invalid request"),
        ErrorKind::SchemaViolation => (None, None, "simulated schema violation"),
        ErrorKind::Cancelled => (None, None, "simulated cancellation"),
    };
    let mut error = ProviderError::new(kind, detail);
    if let Some(status) = status {
        error = error.with_status(status);
    }
    if let Some(code) = code {
        error = error.with_code(code);
    }
    error
}

#[derive(Debug)]
struct State {
    latency: Latency,
    jitter: Jitter,
    script: Mutex<VecDeque<Step>>,
    error_rates: Vec<(ErrorKind, f64)>,
    outages: Vec<(Duration, Duration)>,
    created: Instant,
    reply: Option<String>,
    stream_chunks: usize,
    chunk_gap: Duration,
    /// Answers a non-streamed chat through its stream when the route streams upstream.
    streams_upstream: bool,
    /// Continues a prefilled answer.
    accepts_prefill: bool,
    embedding_dims: usize,
    calls: AtomicU64,
    /// An operator's fault drill, over the configured error rates and latency.
    drill: Mutex<Drill>,
}

/// A fault drill: error rates and latency set while the provider is in use, in place of the
/// configured ones. What a drill leaves `None` stays as configured; [`Drill::default`] restores
/// the configuration. Scripted steps and outage windows still come first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drill {
    /// Calls fail with each kind at its rate (0 to 1, adding up to at most 1).
    pub error_rates: Option<Vec<(ErrorKind, f64)>>,
    /// How long each call takes before it answers.
    pub latency: Option<Latency>,
}

impl Drill {
    /// Whether the drill changes nothing.
    pub fn is_empty(&self) -> bool {
        self.error_rates.is_none() && self.latency.is_none()
    }
}

/// A provider that answers from a script. Clones share the script and the call counter, so a
/// test can keep one to inspect while the router owns another.
#[derive(Debug, Clone)]
pub struct SimulatedProvider {
    state: Arc<State>,
}

impl Default for SimulatedProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl SimulatedProvider {
    /// Answers at once, echoing the last user message, streamed in four chunks.
    pub fn new() -> Self {
        Self {
            state: Arc::new(State {
                latency: Latency::Fixed(Duration::ZERO),
                jitter: Jitter::new(7),
                script: Mutex::new(VecDeque::new()),
                error_rates: Vec::new(),
                outages: Vec::new(),
                created: Instant::now(),
                reply: None,
                stream_chunks: 4,
                chunk_gap: Duration::ZERO,
                streams_upstream: false,
                accepts_prefill: false,
                embedding_dims: 8,
                calls: AtomicU64::new(0),
                drill: Mutex::new(Drill::default()),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut State)) -> Self {
        match Arc::get_mut(&mut self.state) {
            Some(state) => f(state),
            None => panic!("configure a SimulatedProvider before cloning it"),
        }
        self
    }

    /// How long each call takes before it answers (for streams, before the first chunk); default
    /// zero. A scripted [`Step::Delay`] adds to it.
    pub fn latency(self, latency: Latency) -> Self {
        self.edit(|s| s.latency = latency)
    }

    /// Reseeds the random source behind [`Latency::Uniform`] and [`SimulatedProvider::error_rate`]
    /// (default seed 7): another run, still reproducible.
    pub fn seed(self, seed: u64) -> Self {
        self.edit(|s| s.jitter = Jitter::new(seed))
    }

    /// Calls fail with `kind` at this rate (0 to 1), drawn from the seeded source.
    pub fn error_rate(self, kind: ErrorKind, rate: f64) -> Self {
        self.edit(|s| s.error_rates.push((kind, rate.clamp(0.0, 1.0))))
    }

    /// Calls between `from` and `until` after creation fail with 503.
    pub fn outage(self, from: Duration, until: Duration) -> Self {
        self.edit(|s| s.outages.push((from, until)))
    }

    /// The steps of the next calls, in order (every call takes one: a chat, a stream, an
    /// embedding, a token count).
    pub fn script(self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.edit(|s| s.script.get_mut().unwrap_or_else(|p| p.into_inner()).extend(steps))
    }

    /// The text of every default reply (instead of echoing).
    pub fn reply(self, text: impl Into<String>) -> Self {
        self.edit(|s| s.reply = Some(text.into()))
    }

    /// How many content chunks a streamed reply has, and the gap between them.
    pub fn stream(self, chunks: usize, gap: Duration) -> Self {
        self.edit(|s| {
            s.stream_chunks = chunks.max(1);
            s.chunk_gap = gap;
        })
    }

    /// Answers a non-streamed chat through its stream, put back together, when the route
    /// streams upstream, as a provider across a network does (default: answers it whole).
    pub fn streams_upstream(self, on: bool) -> Self {
        self.edit(|s| s.streams_upstream = on)
    }

    /// Continues an answer from a final assistant message (a prefill), as Claude does: the
    /// reply is what follows that text in the reply it would give, or the whole reply when
    /// it does not begin so (default: no, a prefill is answered anew).
    pub fn accepts_prefill(self, on: bool) -> Self {
        self.edit(|s| s.accepts_prefill = on)
    }

    /// Appends steps to the script of a provider already in use.
    pub fn push_steps(&self, steps: impl IntoIterator<Item = Step>) {
        self.state.script.lock().unwrap_or_else(|p| p.into_inner()).extend(steps);
    }

    /// Starts a fault drill in place of any earlier one; [`Drill::default`] ends it. Takes
    /// effect from the next call.
    pub fn drill(&self, drill: Drill) {
        *self.state.drill.lock().unwrap_or_else(|p| p.into_inner()) = drill;
    }

    /// The drill in force ([`Drill::default`] when none).
    pub fn current_drill(&self) -> Drill {
        self.state.drill.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many calls it received.
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }

    fn next_step(&self) -> Step {
        let state = &self.state;
        state.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(step) = state.script.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            return step;
        }
        let age = Instant::now().saturating_duration_since(state.created);
        if state.outages.iter().any(|(from, until)| age >= *from && age < *until) {
            return Step::fail(ErrorKind::Unavailable);
        }
        let drilled = state.drill.lock().unwrap_or_else(|p| p.into_inner()).error_rates.clone();
        let error_rates = drilled.as_deref().unwrap_or(&state.error_rates);
        if !error_rates.is_empty() {
            let mut draw = state.jitter.unit();
            for (kind, rate) in error_rates {
                if draw < *rate {
                    return Step::fail(*kind);
                }
                draw -= rate;
            }
        }
        Step::Reply
    }

    fn latency_now(&self) -> Duration {
        let drilled = self.state.drill.lock().unwrap_or_else(|p| p.into_inner()).latency;
        match drilled.unwrap_or(self.state.latency) {
            Latency::Fixed(d) => d,
            Latency::Uniform(lo, hi) if hi > lo => lo + (hi - lo).mul_f64(self.state.jitter.unit()),
            Latency::Uniform(lo, _) => lo,
        }
    }

    fn reply_text(&self, request: &ChatRequest, model: &str) -> String {
        let whole = self.whole_reply(request, model);
        let prefill = match request.messages.last() {
            Some(last) if self.state.accepts_prefill && last.role == Role::Assistant => last.text_content(),
            _ => None,
        };
        match prefill {
            Some(prefill) => whole.strip_prefix(prefill.as_str()).map_or(whole.clone(), str::to_owned),
            None => whole,
        }
    }

    fn whole_reply(&self, request: &ChatRequest, model: &str) -> String {
        if let Some(text) = &self.state.reply {
            return text.clone();
        }
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.text_content())
            .unwrap_or_default();
        format!("[{model}] {last_user}")
    }
}

impl SimulatedProvider {
    /// The next step with its delays waited out: an error step as that error; a hang never
    /// settles.
    async fn settle(&self) -> Result<Step, ProviderError> {
        match resolve(self.next_step(), self.latency_now()).await {
            Some(Step::Fail(error)) => Err(error),
            Some(step) => Ok(step),
            None => Err(ProviderError::new(ErrorKind::Timeout, "unreachable: a hang never settles")),
        }
    }
}

/// Resolves a step's delays, returning the step to perform.
async fn resolve(step: Step, base: Duration) -> Option<Step> {
    let mut step = step;
    let mut wait = base;
    while let Step::Delay(extra, inner) = step {
        wait += extra;
        step = *inner;
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    match step {
        Step::Hang => {
            std::future::pending::<()>().await;
            None
        }
        step => Some(step),
    }
}

/// A scripted stream: each item with the pause before it; `None` stalls the stream there.
type StreamScript = Vec<(Duration, Option<Result<ChatChunk, ProviderError>>)>;

impl SimulatedProvider {
    /// The chunks of a streamed answer for `step`: a role chunk, the text in pieces `gap`
    /// apart, then its ending (finish with usage, a content filter, a cut or a stall).
    fn stream_script(&self, step: &Step, model: &str, text: &str, usage: Usage) -> StreamScript {
        let pieces = split_text(text, self.state.stream_chunks);
        let gap = self.state.chunk_gap;
        let mut items: StreamScript = Vec::new();
        let role = Delta { role: Some(Role::Assistant), ..Delta::default() };
        items.push((Duration::ZERO, Some(Ok(chunk(model, role, None, None)))));
        let (limit, ending) = match step {
            Step::CutAfter(k) => (*k, Ending::Cut),
            Step::StallAfter(k) => (*k, Ending::Stall),
            Step::StallAfterFinish | Step::CutAfterFinish => (usize::MAX, Ending::Normal),
            Step::EmptyThenStall | Step::EmptyThenCut => (0, Ending::Normal),
            Step::ContentFilter => (0, Ending::Filtered),
            Step::FilterAfter(k) => (*k, Ending::Filtered),
            Step::PingAfter(k) => (*k, Ending::Pings),
            Step::RoleOnly => return items,
            _ => (usize::MAX, Ending::Normal),
        };
        for (i, piece) in pieces.iter().enumerate().take(limit) {
            let delay = if i == 0 { Duration::ZERO } else { gap };
            let delta = Delta { content: Some(piece.clone()), ..Delta::default() };
            items.push((delay, Some(Ok(chunk(model, delta, None, None)))));
        }
        let last = match ending {
            Ending::Normal => (
                Duration::ZERO,
                Some(Ok(chunk(model, Delta::default(), Some(FinishReason::Stop), Some(usage)))),
            ),
            Ending::Filtered => (
                Duration::ZERO,
                Some(Ok(chunk(model, Delta::default(), Some(FinishReason::ContentFilter), None))),
            ),
            Ending::Cut => (gap, Some(Err(typical_error(ErrorKind::Transport)))),
            Ending::Stall => (gap, None),
            Ending::Pings => {
                let ping = || (Duration::from_secs(1), Some(Ok(chunk(model, Delta::default(), None, None))));
                items.extend(std::iter::repeat_with(ping).take(600));
                (gap, None)
            }
        };
        items.push(last);
        match step {
            Step::StallAfterFinish | Step::EmptyThenStall => items.push((gap, None)),
            Step::CutAfterFinish | Step::EmptyThenCut => {
                items.push((gap, Some(Err(typical_error(ErrorKind::Transport)))));
            }
            _ => {}
        }
        items
    }
}

fn usage_for(request: &ChatRequest, text: &str) -> Usage {
    let completion = u32::try_from(text.len().div_ceil(4)).unwrap_or(u32::MAX);
    Usage::new(request.estimated_prompt_tokens(), completion)
}

fn chunk(model: &str, delta: Delta, finish_reason: Option<FinishReason>, usage: Option<Usage>) -> ChatChunk {
    ChatChunk {
        id: "chatcmpl-sim".to_owned(),
        model: model.to_owned(),
        choices: vec![ChunkChoice { index: 0, delta, finish_reason }],
        usage,
        ..ChatChunk::default()
    }
}

impl Provider for SimulatedProvider {
    fn kind(&self) -> &str {
        "simulated"
    }

    fn streams_upstream(&self) -> bool {
        self.state.streams_upstream
    }

    fn accepts_prefill(&self, _model: &str) -> bool {
        self.state.accepts_prefill
    }

    fn chat<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let text = match self.settle().await? {
                Step::ContentFilter | Step::FilterAfter(_) => {
                    let mut response = ChatResponse::from_text(call.model, "");
                    response.choices[0].message.content = None;
                    response.choices[0].finish_reason = Some(FinishReason::ContentFilter);
                    return Ok(response);
                }
                Step::Text(text) => text,
                _ => self.reply_text(request, call.model),
            };
            let usage = usage_for(request, &text);
            let mut response = ChatResponse::from_text(call.model, text);
            response.id = "chatcmpl-sim".to_owned();
            response.usage = Some(usage);
            Ok(response)
        })
    }

    fn chat_stream<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(async move {
            let mut step = self.next_step();
            let mut delayed = self.latency_now();
            while let Step::Delay(extra, inner) = step {
                delayed += extra;
                step = *inner;
            }
            let model = call.model.to_owned();
            // The request is accepted at once; latency delays the first chunk, as with real SSE.
            if let Step::Fail(error) = step {
                tokio::time::sleep(delayed).await;
                return Err(error);
            }
            let text = match &step {
                Step::Text(text) => text.clone(),
                _ => self.reply_text(request, &model),
            };
            let items = self.stream_script(&step, &model, &text, usage_for(request, &text));
            let hang = matches!(step, Step::Hang);
            let start_delay = delayed;
            let stream = futures_util::stream::unfold(
                (items.into_iter(), true),
                move |(mut items, first)| async move {
                    if first {
                        tokio::time::sleep(start_delay).await;
                        if hang {
                            std::future::pending::<()>().await;
                        }
                    }
                    let (delay, item) = items.next()?;
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    match item {
                        Some(item) => Some((item, (items, false))),
                        None => {
                            std::future::pending::<()>().await;
                            None
                        }
                    }
                },
            );
            Ok(Box::pin(stream) as ChunkStream)
        })
    }

    fn embeddings<'a>(
        &'a self,
        call: Call<'a>,
        request: &'a EmbeddingsRequest,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        Box::pin(async move {
            self.settle().await?;
            let dims = self.state.embedding_dims;
            // Token ids are embedded as the text of their numbers.
            let inputs: Vec<String> = match &request.input {
                crate::chat::EmbeddingInput::Tokens(lists) => {
                    lists.iter().map(|ids| format!("{ids:?}")).collect()
                }
                input => input.texts().into_iter().map(str::to_owned).collect(),
            };
            let data = inputs
                .iter()
                .enumerate()
                .map(|(index, text)| Embedding {
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    embedding: pseudo_vector(call.model, text, dims),
                })
                .collect();
            // A token for four characters, as the estimates count.
            let chars: usize = inputs.iter().map(String::len).sum();
            let usage = Usage::new(u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX), 0);
            Ok(EmbeddingsResponse {
                data,
                model: call.model.to_owned(),
                usage: Some(usage),
                ..EmbeddingsResponse::default()
            })
        })
    }

    /// The request's estimated input tokens, on the script's next step (a hang, an error or a
    /// delay as a chat would take it).
    fn count_tokens<'a>(
        &'a self,
        _: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        Box::pin(async move {
            self.settle().await?;
            Ok(TokenCount { input_tokens: request.estimated_prompt_tokens(), verbatim: None })
        })
    }
}

enum Ending {
    Normal,
    Filtered,
    Cut,
    Stall,
    Pings,
}

/// Splits `text` into `n` pieces of about equal length (on char boundaries).
fn split_text(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.max(1);
    let size = chars.len().div_ceil(n).max(1);
    let mut pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    while pieces.len() < n {
        pieces.push(String::new());
    }
    pieces.retain(|p| !p.is_empty());
    if pieces.is_empty() {
        pieces.push(" ".to_owned());
    }
    pieces
}

/// A deterministic vector for `text` in the space of `model`.
fn pseudo_vector(model: &str, text: &str, dims: usize) -> Vec<f32> {
    let seed = model
        .bytes()
        .chain(text.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let jitter = Jitter::new(seed);
    (0..dims).map(|_| jitter.unit() as f32 * 2.0 - 1.0).collect()
}
