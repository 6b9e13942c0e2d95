//! A stream put back together into the answer it streamed: what a non-streamed request sent
//! upstream as a stream ([`Route::stream_upstream`](crate::route::Route::stream_upstream)) is
//! answered with, and what a `cache` candidate keeps of a stream.
//!
//! Each choice (by its index, so `n > 1` answers too) gets its text, refusal, reasoning,
//! Claude's thinking blocks and tool calls (fragments put together by
//! [`ToolCall::absorb`]), and its finish reason; the answer gets the first id, model and time,
//! the last usage, and the chunks' unmodelled members. The events as the provider wrote them,
//! when it passed them on, are kept in [`ChatResponse::frames`]: a client of the provider's
//! dialect is then written the whole answer the provider would have written.
//!
//! ```
//! use switchyard::assembly::Assembly;
//! use switchyard::chat::{ChatChunk, FinishReason};
//!
//! let mut assembly = Assembly::default();
//! assembly.push(ChatChunk::text("Hel"));
//! assembly.push(ChatChunk::text("lo."));
//! assembly.push(ChatChunk::finish(FinishReason::Stop));
//! let answer = assembly.finish();
//! assert_eq!(answer.text().as_deref(), Some("Hello."));
//! assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::Stop));
//! ```

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::ProviderError;
use crate::chat::{
    ChatChunk, ChatResponse, Choice, Content, Delta, Extra, Message, Role, StreamNotice, THINKING_BLOCKS,
    ToolCall,
};
use crate::provider::ChunkStream;

/// An answer being put back together from its stream's chunks, in order.
#[derive(Debug, Default)]
pub struct Assembly {
    response: ChatResponse,
    /// How many choices were asked for (`n`); 0 reads as 1.
    asked: u64,
}

impl Assembly {
    /// Adds what `chunk` says.
    pub fn push(&mut self, chunk: ChatChunk) {
        let ChatChunk { id, model, created, choices, usage, extra, verbatim, notice } = chunk;
        if let Some(notice) = notice {
            self.response.notices.push(notice);
        }
        let response = &mut self.response;
        if response.id.is_empty() {
            response.id = id;
        }
        if response.model.is_empty() {
            response.model = model;
        }
        if response.created == 0 {
            response.created = created;
        }
        if usage.is_some() {
            response.usage = usage;
        }
        // A chunk's own members (`system_fingerprint`, `service_tier`) are the answer's.
        for (name, value) in extra {
            if name != "object" {
                response.extra.insert(name, value);
            }
        }
        for choice in choices {
            let target = self.choice(choice.index);
            add_delta(&mut target.message, choice.delta);
            if choice.finish_reason.is_some() {
                target.finish_reason = choice.finish_reason;
            }
        }
        if let Some(frame) = verbatim {
            self.response.frames.push(frame);
        }
    }

    /// The choice of `index`, made when it is new; the choices stay in index order.
    fn choice(&mut self, index: u32) -> &mut Choice {
        let choices = &mut self.response.choices;
        let at = match choices.binary_search_by_key(&index, |c| c.index) {
            Ok(at) => at,
            Err(at) => {
                let message = Message { content: None, ..Message::text(Role::Assistant, "") };
                choices.insert(at, Choice { index, message, finish_reason: None, extra: Extra::new() });
                at
            }
        };
        &mut choices[at]
    }

    /// The answer the chunks made.
    pub fn finish(self) -> ChatResponse {
        self.response
    }

    /// Whether no chunk said anything of a choice yet.
    pub fn is_empty(&self) -> bool {
        self.response.choices.is_empty()
    }

    /// Whether any choice has something to show: text, a refusal, reasoning or a tool call.
    pub fn has_content(&self) -> bool {
        self.response.choices.iter().any(|choice| {
            let message = &choice.message;
            message.content.is_some() || !message.tool_calls.is_empty() || !message.extra.is_empty()
        })
    }

    /// An assembly of an answer with `choices` choices (`n`): it is whole once that many
    /// finished, not only those begun so far.
    pub fn expecting(mut self, choices: u64) -> Self {
        self.asked = choices;
        self
    }

    /// Whether every choice asked for (at least one) has begun and finished: the answer is
    /// whole.
    pub fn is_whole(&self) -> bool {
        let choices = &self.response.choices;
        choices.len() as u64 >= self.asked.max(1)
            && choices.iter().all(|choice| choice.finish_reason.is_some())
    }
}

/// Adds one chunk's `delta` to `message`: text, refusal and reasoning pieces concatenated,
/// thinking blocks appended, tool-call fragments put together by their index.
fn add_delta(message: &mut Message, delta: Delta) {
    let Delta { role, content, tool_calls, refusal, reasoning_content, thinking_blocks } = delta;
    if let Some(role) = role {
        message.role = role;
    }
    if let Some(text) = content.filter(|t| !t.is_empty()) {
        match &mut message.content {
            Some(Content::Text(so_far)) => so_far.push_str(&text),
            _ => message.content = Some(Content::Text(text)),
        }
    }
    for (name, piece) in [("refusal", refusal), ("reasoning_content", reasoning_content)] {
        if let Some(piece) = piece {
            match message.extra.get_mut(name) {
                Some(Value::String(so_far)) => so_far.push_str(&piece),
                _ => {
                    message.extra.insert(name.to_owned(), Value::String(piece));
                }
            }
        }
    }
    if !thinking_blocks.is_empty() {
        let blocks = message.extra.entry(THINKING_BLOCKS).or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(blocks) = blocks {
            blocks.extend(thinking_blocks);
        }
    }
    // A call past the most a stream may make is refused by its adapter; none is made room for.
    for call in tool_calls.into_iter().filter(|call| call.index < crate::chat::MAX_TOOL_CALLS) {
        let index = call.index as usize;
        while message.tool_calls.len() <= index {
            message.tool_calls.push(ToolCall::function("", "", ""));
        }
        message.tool_calls[index].absorb(&call);
    }
}

/// Which choices of a streamed answer have begun and which have finished, by index: the answer
/// is whole once every choice asked for ([`Finishes::expecting`]) and every one begun has
/// finished. Only the first 64 indexes are counted; an answer of more, or a choice past them,
/// is never whole before its stream ends. (A stream's readers and the router keep one each;
/// [`Assembly::is_whole`] reads the same from the answer it holds.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finishes(Option<(u64, u64)>);

impl Default for Finishes {
    fn default() -> Self {
        Self(Some((0, 0)))
    }
}

impl Finishes {
    /// Expecting `choices` choices (`n`), whether they have begun or not.
    pub fn expecting(choices: u64) -> Self {
        let asked = u32::try_from(choices).ok().and_then(|n| 1u64.checked_shl(n)).map(|bit| bit - 1);
        Self(asked.map(|asked| (asked, 0)))
    }

    /// Notes what `chunk` says of its choices.
    pub fn see(&mut self, chunk: &ChatChunk) {
        for choice in &chunk.choices {
            let bit = 1u64.checked_shl(choice.index);
            self.0 = self.0.zip(bit).map(|((seen, finished), bit)| match choice.finish_reason {
                Some(_) => (seen | bit, finished | bit),
                None => (seen | bit, finished),
            });
        }
    }

    /// Whether some choice has begun and not every one has finished.
    pub fn is_unfinished(&self) -> bool {
        self.0.is_some_and(|(seen, finished)| seen != 0 && seen != finished)
    }

    /// Whether every choice expected or begun (at least one) has finished.
    pub fn is_whole(&self) -> bool {
        self.0.is_some_and(|(seen, finished)| seen != 0 && seen == finished)
    }
}

/// Reads the rest of `stream` into `assembly`, a chunk that shows life within `idle` of the
/// last (keep-alives pass the time, not reset it); once every choice
/// finished, within [`AFTER_FINISH`](crate::AFTER_FINISH) and the attempt's end (`ends`),
/// after which a stream that said nothing more, or broke, is whole without its terminator.
/// What a non-streamed chat asked as a stream reads ([`Route::stream_upstream`](crate::route::Route::stream_upstream)),
/// and an adapter whose server streamed an answer asked whole.
pub async fn read_to_end(
    stream: &mut ChunkStream,
    assembly: &mut Assembly,
    idle: Duration,
    ends: Option<Instant>,
) -> Result<(), ProviderError> {
    let mut alive_at = Instant::now();
    loop {
        let whole = assembly.is_whole();
        let due = match (whole, ends) {
            // Up to the attempt's end exactly, which the attempt cuts at: ended whole, not cut.
            (true, Some(ends)) => (Instant::now() + idle.min(crate::AFTER_FINISH)).min(ends),
            (true, None) => Instant::now() + idle.min(crate::AFTER_FINISH),
            (false, _) => alive_at + idle,
        };
        match tokio::time::timeout_at(due, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                if chunk.shows_life() {
                    alive_at = Instant::now();
                }
                assembly.push(chunk);
            }
            Ok(None) => return Ok(()),
            Err(_) if whole => {
                assembly.push(ChatChunk::notice(StreamNotice::Unterminated));
                return Ok(());
            }
            // An empty answer that then broke is no answer to keep: it is asked again.
            Ok(Some(Err(error))) if whole && assembly.has_content() => {
                let notice = StreamNotice::BrokenAfterFinish(error.detail().to_owned());
                assembly.push(ChatChunk::notice(notice));
                return Ok(());
            }
            Ok(Some(Err(error))) => return Err(error),
            Err(_) => {
                let message = format!("no chunk within the idle timeout of {idle:?}");
                return Err(ProviderError::stall(message));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::chat::{ChunkChoice, FinishReason, Usage};

    fn chunk(index: u32, delta: Value, finish: Option<FinishReason>) -> ChatChunk {
        let delta: Delta = serde_json::from_value(delta).unwrap();
        ChatChunk {
            id: "chatcmpl-1".into(),
            model: "m-1".into(),
            created: 7,
            choices: vec![ChunkChoice { index, delta, finish_reason: finish }],
            ..ChatChunk::default()
        }
    }

    #[test]
    fn a_call_past_the_most_a_choice_makes_is_given_no_room() {
        let mut assembly = Assembly::default();
        let far = json!({"tool_calls": [{"index": 4_000_000_000u32, "function": {"name": "f", "arguments": "{}"}}]});
        assembly.push(chunk(0, far, None));
        assembly.push(chunk(
            0,
            json!({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "{}"}}]}),
            None,
        ));
        let answer = assembly.finish();
        assert_eq!(answer.choices[0].message.tool_calls.len(), 2, "room up to the last call within the most");
    }

    #[test]
    fn every_choice_of_a_stream_is_put_back_together_with_its_calls_and_the_usage() {
        let mut assembly = Assembly::default();
        assembly.push(chunk(1, json!({"role": "assistant", "content": "B"}), None));
        assembly.push(chunk(0, json!({"role": "assistant", "reasoning_content": "Hm"}), None));
        assembly.push(chunk(0, json!({"content": "A", "reasoning_content": "m."}), None));
        assembly.push(chunk(
            0,
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}),
            None,
        ));
        assembly.push(chunk(
            0,
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
            None,
        ));
        assembly.push(chunk(0, json!({}), Some(FinishReason::ToolCalls)));
        assembly.push(chunk(1, json!({"refusal": "No."}), Some(FinishReason::Stop)));
        let mut usage = ChatChunk { usage: Some(Usage::new(3, 4)), ..ChatChunk::default() };
        usage.extra.insert("system_fingerprint".into(), json!("fp_1"));
        assembly.push(usage);
        let answer = assembly.finish();
        assert_eq!((answer.id.as_str(), answer.model.as_str(), answer.created), ("chatcmpl-1", "m-1", 7));
        let [first, second] = answer.choices.as_slice() else { panic!("{:?}", answer.choices) };
        assert_eq!((first.index, second.index), (0, 1));
        assert_eq!(first.message.text_content().as_deref(), Some("A"));
        assert_eq!(first.message.extra["reasoning_content"], "Hmm.");
        assert_eq!(first.message.tool_calls, [ToolCall::function("call_1", "f", "{\"a\":1}")]);
        assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(second.message.text_content().as_deref(), Some("B"));
        assert_eq!(second.message.extra["refusal"], "No.");
        assert_eq!(answer.usage, Some(Usage::new(3, 4)));
        assert_eq!(answer.extra["system_fingerprint"], "fp_1");
    }

    #[test]
    fn finishes_count_the_choices_asked_for_begun_and_finished() {
        let finish = |index| ChatChunk {
            choices: vec![ChunkChoice {
                index,
                finish_reason: Some(FinishReason::Stop),
                ..ChunkChoice::default()
            }],
            ..ChatChunk::default()
        };
        let begin = |index| ChatChunk {
            choices: vec![ChunkChoice { index, ..ChunkChoice::default() }],
            ..ChatChunk::default()
        };
        let mut any = Finishes::default();
        assert!(!any.is_whole(), "nothing begun");
        any.see(&begin(1));
        any.see(&finish(0));
        assert!(!any.is_whole(), "choice 1 begun, not finished");
        any.see(&finish(1));
        assert!(any.is_whole());
        let mut two = Finishes::expecting(2);
        two.see(&finish(0));
        assert!(!two.is_whole(), "choice 1 asked for, not begun");
        two.see(&finish(1));
        assert!(two.is_whole());
        let mut past = Finishes::default();
        past.see(&finish(64));
        past.see(&finish(0));
        assert!(!past.is_whole(), "a choice past the count is never whole");
        assert!(!Finishes::expecting(65).is_whole());
    }

    #[test]
    fn an_answer_is_whole_once_every_choice_asked_for_finished() {
        let mut one = Assembly::default();
        let mut two = Assembly::default().expecting(2);
        assert!(!one.is_whole() && !two.is_whole(), "nothing yet");
        for assembly in [&mut one, &mut two] {
            assembly.push(chunk(0, json!({"content": "A"}), Some(FinishReason::Stop)));
        }
        assert!(one.is_whole());
        assert!(!two.is_whole(), "choice 1 has not begun");
        two.push(chunk(1, json!({"content": "B"}), None));
        assert!(!two.is_whole());
        two.push(chunk(1, json!({}), Some(FinishReason::Stop)));
        assert!(two.is_whole());
    }

    #[test]
    fn a_whole_answer_through_its_chunks_and_back_is_itself() {
        let mut answer = ChatResponse::from_text("m-1", "Checking.");
        answer.id = "chatcmpl-2".into();
        answer.created = 9;
        answer.choices[0].message.tool_calls = vec![ToolCall::function("call_1", "weather", "{}")];
        answer.choices[0].finish_reason = Some(FinishReason::ToolCalls);
        answer.usage = Some(Usage::new(10, 5));
        let mut assembly = Assembly::default();
        for chunk in answer.clone().into_chunks() {
            assembly.push(chunk);
        }
        assert_eq!(assembly.finish(), answer);
    }
}
