//! The kinds of exchange the engine runs (a chat, a stream, embeddings): what differs between
//! them at the points where the engine asks, and what it hands back on success.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::chat::{
    ChatRequest, ChatResponse, DROPPABLE, EmbeddingsRequest, EmbeddingsResponse, FinishReason, TokenCount,
};
use crate::pacing::Permit;
use crate::provider::{BoxFuture, Call, Provider};
use crate::route::Route;
use crate::timeouts::Timeouts;
use crate::trail::{Timing, Trail, Via};
use crate::{ErrorKind, ProviderError, Target};

/// An exchange's [`billed_prompt`](Exchange::billed_prompt), as the record of a request asks
/// it: only when the request was dropped with a call under way.
pub(crate) trait BilledPrompt {
    fn billed_prompt(&self) -> Option<u32>;
}

impl<X: Exchange> BilledPrompt for X {
    fn billed_prompt(&self) -> Option<u32> {
        Exchange::billed_prompt(self)
    }
}

/// What one kind of exchange does at the points where they differ.
pub(crate) trait Exchange: Sync {
    type Output: Send;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<Self::Output, ProviderError>>;

    /// The longest one attempt may take before it counts as a timeout, and the name of the
    /// limit for the error message.
    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str);

    /// Whether the call to `provider` says nothing until its whole answer, so that its
    /// first-byte wait is the attempt's limit; otherwise (a stream, or a whole answer asked as
    /// one) its first content ends the `first_byte` wait.
    fn answers_whole(&self, provider: &dyn Provider, model: &str) -> bool {
        let _ = (provider, model);
        false
    }

    /// Whether the caller is given the answer whole, at its end (not a stream): the caller's
    /// own timeout ([`RequestOptions::caller_timeout`](crate::RequestOptions::caller_timeout))
    /// is the request's deadline then, and a stream's until its first chunk only.
    fn answers_caller_whole(&self) -> bool {
        true
    }

    /// Whether the answer is a content-filter refusal.
    fn is_content_filtered(&self, output: &Self::Output) -> bool;

    /// The chat request, for candidates; `None` when candidates cannot answer this exchange.
    fn chat_request(&self) -> Option<&ChatRequest>;

    /// A candidate's answer in this exchange's shape; `None` when it has none.
    fn candidate_output(&self, response: ChatResponse) -> Option<Self::Output>;

    /// The size of the request in tokens, for pacing's token budgets.
    fn estimated_tokens(&self) -> u32;

    /// The tokens the provider counted for an answer, when the answer says (streams settle
    /// their pacing reservation when they end instead).
    fn used_tokens(&self, output: &Self::Output) -> Option<u32>;

    /// The prompt's tokens, estimated, that a provider bills for a call of this exchange cut
    /// short (its caller went away while it ran): the least such a call cost. `None` for calls
    /// that cost nothing (a token count).
    fn billed_prompt(&self) -> Option<u32> {
        None
    }

    /// When the provider began to answer, if before the attempt ended (a stream held for the
    /// first chunk its caller is shown began with reasoning): the target's latency ends there.
    fn answering_since(&self, output: &Self::Output) -> Option<Instant> {
        let _ = output;
        None
    }

    /// Whether an attempt of this exchange still running has begun to answer (a stream held for
    /// the first chunk its caller is shown): such an attempt is not hedged.
    fn answering(&self) -> bool {
        false
    }

    /// Whether a failure may switch to the route's special chains (context window, content
    /// policy): not for embeddings, whose vectors may only come from their embedding space.
    fn takes_special_chains(&self) -> bool {
        true
    }

    /// Whether the call takes a pacing permit and reports its rate-limit headers to the pacer:
    /// not for token counting, which providers limit apart from generation.
    fn paced(&self) -> bool {
        true
    }

    /// Whether a session's requests of this exchange go back to where it was served (and move
    /// its pin): chats and streams; not embeddings or token counts.
    fn pins_sessions(&self) -> bool {
        false
    }

    /// What the answer's stream did short of failing, taken off it for the attempt's record
    /// (an answer put back together from a stream; see [`ChatResponse::notices`]).
    fn take_notices(&self, output: &mut Self::Output) -> Vec<crate::chat::StreamNotice> {
        let _ = output;
        Vec::new()
    }

    /// Whether the attempt's time counts toward the target's latency: not for token counting,
    /// which says nothing of how fast the model answers.
    fn measured(&self) -> bool {
        true
    }

    /// Whether a rate limit this exchange meets rests its target for every request: not a
    /// token count's, which providers limit apart from generation (one client counting
    /// without pause must not bench the model for everyone's chats).
    fn rests_on_rate_limit(&self) -> bool {
        true
    }
}

/// A chat answered whole: asked for whole, or streamed upstream and put back together
/// (`streamed`, as its route says).
pub(super) struct ChatExchange<'r> {
    pub(super) request: &'r ChatRequest,
    pub(super) streamed: bool,
    /// Which credentials' models refused a stream lately: asked whole at once.
    pub(super) refusals: &'r super::refusals::StreamRefusals,
    /// The route's `drop_params`: see [`dropping`].
    pub(super) drop_params: bool,
}

/// Says that a borrow `'q` is within `'a` (its type implies `'a: 'q`): what lets a call
/// made for each request [`dropping`] tries borrow what lives for `'a` too.
pub(super) type Within<'q, 'a> = std::marker::PhantomData<&'q &'a ()>;

/// The most parameters one call leaves out under `drop_params` (each refusal names one).
const MOST_DROPPED: usize = 8;

/// `send` of `request`, under a route's `drop_params`: again without each parameter
/// an adapter refuses as one the target's API cannot express and the request may go without
/// ([`ChatRequest::remove_param`]), until the target takes it or refuses something else.
/// Nothing is sent before an adapter takes the request, so each try costs a translation only.
/// The answer says what was left out (`note`).
pub(super) async fn dropping<'a, T>(
    request: &'a ChatRequest,
    send: impl for<'q> Fn(&'q ChatRequest, Within<'q, 'a>) -> BoxFuture<'q, Result<T, ProviderError>>,
    note: impl FnOnce(&mut T, crate::chat::StreamNotice),
) -> Result<T, ProviderError> {
    let mut owned: Option<ChatRequest> = None;
    let mut dropped = Vec::new();
    loop {
        let current = owned.as_ref().unwrap_or(request);
        let error = match send(current, std::marker::PhantomData).await {
            Ok(mut answer) => {
                if !dropped.is_empty() {
                    note(&mut answer, crate::chat::StreamNotice::LeftOut(dropped));
                }
                return Ok(answer);
            }
            Err(error) => error,
        };
        let refused = error.param().filter(|_| error.is_unsupported() && error.status().is_none());
        let Some(param) = refused.filter(|param| DROPPABLE.contains(param) && dropped.len() < MOST_DROPPED)
        else {
            return Err(error);
        };
        let param = param.to_owned();
        // The request is copied once, at the first parameter it goes without.
        let without = owned.get_or_insert_with(|| request.clone());
        if !without.remove_param(&param) {
            return Err(error);
        }
        dropped.push(param);
    }
}

impl<'r> ChatExchange<'r> {
    /// The call of `request` (the client's, or it without a parameter the target refused).
    fn call_with<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        if !self.asks_a_stream(provider, call.model) {
            return provider.chat(call, request);
        }
        Box::pin(async move {
            let (credential, model) = (call.credential.id(), call.model);
            if self.refusals.refused(credential, model) {
                return Self::asked_whole(provider, call, request).await.map(|answer| said(answer, LATELY));
            }
            match super::assembled::assembled(provider, call, request).await {
                Err(error) if refuses_to_stream(&error) => {
                    let answer = Self::asked_whole(provider, call, request).await;
                    if answer.is_ok() && refuses_every_stream(&error) {
                        self.refusals.note(credential, model);
                    }
                    answer.map(|answer| said(answer, REFUSED))
                }
                answered => answered,
            }
        })
    }

    /// Whether the whole answer of `model` is asked of `provider` as a stream and put together
    /// (the route's `stream_upstream`, a provider across a network).
    fn asks_a_stream(&self, provider: &dyn Provider, model: &str) -> bool {
        self.streamed && provider.streams_upstream_for(model)
    }

    /// The whole answer asked whole, of a provider that refused to be asked it as a stream: it
    /// says nothing until its end, so within `whole`, and within what the attempt has left.
    pub(super) async fn asked_whole(
        provider: &dyn Provider,
        call: Call<'_>,
        request: &ChatRequest,
    ) -> Result<ChatResponse, ProviderError> {
        let limit = call.timeouts.whole;
        let whole_end = tokio::time::Instant::now() + limit;
        let until = call.ends.map_or(whole_end, |ends| ends.min(whole_end));
        let whole = tokio::time::timeout_at(until, provider.chat(call, request));
        whole.await.map_err(|_| {
            let detail = format!("asked whole, no answer within the whole timeout of {limit:?}");
            ProviderError::new(ErrorKind::Timeout, detail)
        })?
    }
}

impl Exchange for ChatExchange<'_> {
    type Output = ChatResponse;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        let answer: BoxFuture<'a, _> = match self.drop_params {
            false => self.call_with(provider, call, self.request),
            true => Box::pin(dropping(
                self.request,
                move |request, _| self.call_with(provider, call, request),
                |answer: &mut ChatResponse, notice| answer.notices.push(notice),
            )),
        };
        if self.request.origin != crate::chat::Dialect::Anthropic {
            return answer;
        }
        Box::pin(async move {
            let response = answer.await?;
            inputs_are_objects(&response)?;
            Ok(response)
        })
    }

    fn answers_whole(&self, provider: &dyn Provider, model: &str) -> bool {
        // Asked as a stream and put together, it shows life long before its end.
        !self.asks_a_stream(provider, model)
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        match self.streamed {
            true => (route.timeouts().total, "total"),
            false => (route.timeouts().whole, "whole"),
        }
    }

    fn is_content_filtered(&self, output: &ChatResponse) -> bool {
        output.is_content_filtered()
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        Some(self.request)
    }

    fn candidate_output(&self, response: ChatResponse) -> Option<ChatResponse> {
        Some(response)
    }

    fn estimated_tokens(&self) -> u32 {
        self.request.estimated_tokens()
    }

    fn used_tokens(&self, output: &ChatResponse) -> Option<u32> {
        output.usage.map(|u| u.total_tokens)
    }

    fn billed_prompt(&self) -> Option<u32> {
        Some(self.request.estimated_prompt_tokens())
    }

    fn take_notices(&self, output: &mut ChatResponse) -> Vec<crate::chat::StreamNotice> {
        std::mem::take(&mut output.notices)
    }

    fn pins_sessions(&self) -> bool {
        true
    }
}

/// The trail note of an answer asked whole after the target refused to stream it.
pub(super) const REFUSED: &str = "the target refused to stream the answer: asked whole";

/// The trail note of an answer asked whole at once, the target having refused streams lately.
pub(super) const LATELY: &str = "asked whole at once: the target refused to stream lately";

/// `answer` with the trail note `note`.
fn said(mut answer: ChatResponse, note: &str) -> ChatResponse {
    answer.notices.push(crate::chat::StreamNotice::Resent(note.to_owned()));
    answer
}

/// Whether a provider refused a request for being streamed ("Your organization must be
/// verified to stream this model", "Unrecognized request argument supplied: stream_options",
/// "Streaming is not supported"): a whole answer the route asked as a stream is then asked
/// whole, as the client asked it.
pub(super) fn refuses_to_stream(error: &ProviderError) -> bool {
    let detail = error.detail().to_ascii_lowercase();
    // "stream" as a word of its own (`stream`, stream_options, streaming), not inside "upstream".
    let names_streaming = detail
        .match_indices("stream")
        .any(|(at, _)| !detail[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphabetic()));
    error.kind() == ErrorKind::InvalidRequest
        && error.status().is_none_or(|status| status == 400 || status == 422)
        && names_streaming
}

/// Whether a refusal to stream says the (credential, model) streams nothing, not only this
/// request: an organisation not verified to stream the model, a server that takes no
/// `stream_options` or no streaming at all. Only these are remembered (`refusals.rs`).
pub(super) fn refuses_every_stream(error: &ProviderError) -> bool {
    let detail = error.detail().to_ascii_lowercase();
    ["stream_options", "verified", "not supported", "does not support", "unsupported"]
        .iter()
        .any(|said| detail.contains(said))
}

/// Fails an answer for an Anthropic client whose tool call's arguments are not a JSON object (a
/// model that wrote broken JSON and said it was done): a `tool_use` block's input is an object,
/// so the answer cannot be written, and it is a malformed answer, asked again or of the next
/// target. A call cut by the answer's length limit stands: the client asked for no more, and
/// reads `max_tokens`.
fn inputs_are_objects(response: &ChatResponse) -> Result<(), ProviderError> {
    let choices = response.choices.iter().filter(|choice| choice.finish_reason != Some(FinishReason::Length));
    let calls = choices.flat_map(|choice| &choice.message.tool_calls).filter(|call| call.is_function());
    for call in calls {
        let arguments = call.function.arguments.trim();
        let object = arguments.is_empty()
            || serde_json::from_str::<&serde_json::value::RawValue>(arguments)
                .is_ok_and(|raw| raw.get().starts_with('{'));
        if !object {
            let name = &call.function.name;
            return Err(ProviderError::new(
                ErrorKind::MalformedResponse,
                format!("the answer's call of `{name}` has arguments that are not a JSON object"),
            ));
        }
    }
    Ok(())
}

/// An embeddings request.
pub(super) struct EmbeddingsExchange<'r>(pub(super) &'r EmbeddingsRequest);

impl Exchange for EmbeddingsExchange<'_> {
    type Output = EmbeddingsResponse;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<EmbeddingsResponse, ProviderError>> {
        provider.embeddings(call, self.0)
    }

    fn answers_whole(&self, _: &dyn Provider, _: &str) -> bool {
        true
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        (route.timeouts().whole, "whole")
    }

    fn is_content_filtered(&self, _: &EmbeddingsResponse) -> bool {
        false
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        None
    }

    fn candidate_output(&self, _: ChatResponse) -> Option<EmbeddingsResponse> {
        None
    }

    fn estimated_tokens(&self) -> u32 {
        let tokens = match &self.0.input {
            // Token ids count themselves.
            crate::chat::EmbeddingInput::Tokens(lists) => lists.iter().map(Vec::len).sum(),
            input => input.texts().iter().map(|t| t.len()).sum::<usize>().div_ceil(4),
        };
        u32::try_from(tokens).unwrap_or(u32::MAX)
    }

    fn used_tokens(&self, output: &EmbeddingsResponse) -> Option<u32> {
        output.usage.map(|u| u.total_tokens)
    }

    fn billed_prompt(&self) -> Option<u32> {
        Some(self.estimated_tokens())
    }

    fn takes_special_chains(&self) -> bool {
        false
    }
}

/// What the engine hands back on success.
pub(crate) struct Served<O> {
    pub(crate) output: O,
    pub(crate) via: Via,
    /// The route that governed: its name for the answer, its policy for what a stream asks
    /// later.
    pub(crate) route: Arc<Route>,
    pub(crate) trail: Trail,
    pub(crate) timing: Timing,
    /// The target and credential index that answered (none for candidates).
    pub(crate) answered: Option<(Target, usize)>,
    pub(crate) permit: Option<Permit>,
    pub(crate) attempt_started: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) timeouts: Timeouts,
}

/// Counting a request's input tokens: answered by the first target whose provider counts, with
/// no special chains, no candidates and no pacing (providers limit counting apart from
/// generation, and it costs nothing).
pub(super) struct CountTokensExchange<'r>(pub(super) &'r ChatRequest);

impl Exchange for CountTokensExchange<'_> {
    type Output = TokenCount;

    fn call<'a>(
        &'a self,
        provider: &'a dyn Provider,
        call: Call<'a>,
    ) -> BoxFuture<'a, Result<TokenCount, ProviderError>> {
        provider.count_tokens(call, self.0)
    }

    fn answers_whole(&self, _: &dyn Provider, _: &str) -> bool {
        true
    }

    fn attempt_limit(&self, route: &Route) -> (Duration, &'static str) {
        // A count is answered at once: a provider silent past the route's first-byte wait is as
        // silent as a chat that showed nothing by then (Claude Code counts before it asks).
        let timeouts = route.timeouts();
        if timeouts.first_byte < timeouts.total {
            (timeouts.first_byte, "first_byte")
        } else {
            (timeouts.total, "total")
        }
    }

    fn is_content_filtered(&self, _: &TokenCount) -> bool {
        false
    }

    fn chat_request(&self) -> Option<&ChatRequest> {
        None
    }

    fn candidate_output(&self, _: ChatResponse) -> Option<TokenCount> {
        None
    }

    fn estimated_tokens(&self) -> u32 {
        0
    }

    fn used_tokens(&self, _: &TokenCount) -> Option<u32> {
        None
    }

    fn takes_special_chains(&self) -> bool {
        false
    }

    fn paced(&self) -> bool {
        false
    }

    fn measured(&self) -> bool {
        false
    }

    fn rests_on_rate_limit(&self) -> bool {
        false
    }
}
