//! Claude's signed thinking of the tool turns it answered a client of OpenAI's dialect, kept
//! for the turn to be sent back with. Claude thinks on through a tool loop only when its tool
//! turn comes back opening on the thinking it was thought in, and most clients of OpenAI's API
//! keep none of it on the assistant message (`thinking_blocks` is LiteLLM's form): the turn
//! went on without thinking. Kept by the client's key and the turn's first tool call's id (an
//! id Claude made up, which the client sends back with the turn), in this replica's memory, the
//! oldest forgotten past [`KEPT`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;
use switchyard::ProviderError;
use switchyard::chat::{ChatChunk, ChatRequest, ChatResponse, Message, Role, THINKING_BLOCKS};
use switchyard_providers::codec::StreamWriter;

/// How many tool turns' thinking a replica keeps at most.
const KEPT: usize = 10_000;

/// Whose turn: the client key's label (empty without keys) and the turn's first call's id.
type Turn = (Arc<str>, String);

/// The thinking of the tool turns answered lately.
#[derive(Debug, Default)]
pub(crate) struct KeptThinking(Mutex<Kept>);

#[derive(Debug, Default)]
struct Kept {
    blocks: HashMap<Turn, Arc<[Value]>>,
    /// The turns in the order they were kept: the oldest goes first.
    order: VecDeque<Turn>,
}

impl KeptThinking {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the thinking of `message`, Claude's answer to `key`, when it calls tools.
    pub(crate) fn keep(&self, key: &Arc<str>, message: &Message) {
        if let Some(call) = message.tool_calls.first() {
            self.keep_blocks(key, &call.id, message.thinking_blocks());
        }
    }

    /// Keeps `blocks`, the thinking of the turn to `key` whose first call is `call`.
    fn keep_blocks(&self, key: &Arc<str>, call: &str, blocks: &[Value]) {
        if blocks.is_empty() {
            return;
        }
        let (turn, blocks) = ((key.clone(), call.to_owned()), Arc::from(blocks));
        let mut kept = self.kept();
        if kept.blocks.insert(turn.clone(), blocks).is_none() {
            kept.order.push_back(turn);
        }
        while kept.order.len() > KEPT {
            if let Some(oldest) = kept.order.pop_front() {
                kept.blocks.remove(&oldest);
            }
        }
    }

    /// Opens each tool turn of `request` (from `key`) that came back without its thinking on
    /// the thinking kept for it.
    pub(crate) fn restore(&self, key: &Arc<str>, request: &mut ChatRequest) {
        let lacking = |m: &&mut Message| {
            m.role == Role::Assistant && !m.tool_calls.is_empty() && m.thinking_blocks().is_empty()
        };
        let mut turns = request.messages.iter_mut().filter(lacking).peekable();
        if turns.peek().is_none() {
            return;
        }
        let kept = self.kept();
        for message in turns {
            let turn = (key.clone(), message.tool_calls[0].id.clone());
            if let Some(blocks) = kept.blocks.get(&turn) {
                message.extra.insert(THINKING_BLOCKS.to_owned(), Value::Array(blocks.to_vec()));
            }
        }
    }
}

/// A stream's writer that keeps the thinking of the tool turn it writes, once it ended well.
pub(crate) struct Keeping<W> {
    inner: W,
    kept: Arc<super::AppState>,
    key: Arc<str>,
    /// The answer's first call's id, once a chunk told it.
    call: Option<String>,
    /// The answer's signed thinking so far.
    blocks: Vec<Value>,
}

impl<W: StreamWriter> Keeping<W> {
    pub(crate) fn new(inner: W, kept: Arc<super::AppState>, key: Arc<str>) -> Self {
        Self { inner, kept, key, call: None, blocks: Vec::new() }
    }

    /// Notes what of `chunk` the kept turn needs: a call's id, a signed thinking block.
    fn note(&mut self, chunk: &ChatChunk) {
        let Some(choice) = chunk.choices.iter().find(|choice| choice.index == 0) else { return };
        if self.call.is_none() {
            self.call = choice.delta.tool_calls.iter().find_map(|call| call.id.clone());
        }
        self.blocks.extend(choice.delta.thinking_blocks.iter().cloned());
    }
}

impl<W: StreamWriter> StreamWriter for Keeping<W> {
    fn frame(&mut self, chunk: &ChatChunk) -> Option<Bytes> {
        self.note(chunk);
        self.inner.frame(chunk)
    }

    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        self.inner.chunk(chunk, out);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if let Some(call) = &self.call {
            self.kept.kept_thinking.keep_blocks(&self.key, call, &self.blocks);
        }
        self.inner.end(out);
    }

    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        self.inner.fail(error, out)
    }
}

impl<W: super::sse::Encoder> super::sse::Encoder for Keeping<W> {
    fn hold(&mut self) -> Option<super::sse::Held> {
        self.inner.hold()
    }
}

/// The thinking of a whole answer to `key`, kept.
pub(crate) fn keep_answer(state: &super::AppState, key: &Arc<str>, answer: &ChatResponse) {
    if let Some(choice) = answer.choices.first() {
        state.kept_thinking.keep(key, &choice.message);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard::chat::ToolCall;

    use super::*;

    fn turn(id: &str, blocks: Value) -> Message {
        let mut message =
            Message { tool_calls: vec![ToolCall::function(id, "f", "{}")], ..Message::assistant("") };
        if !blocks.is_null() {
            message.extra.insert(THINKING_BLOCKS.to_owned(), blocks);
        }
        message
    }

    #[test]
    fn a_tool_turn_sent_back_bare_opens_on_the_thinking_kept_for_its_key_alone() {
        let kept = KeptThinking::default();
        let block = json!([{"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"}]);
        let (team, other): (Arc<str>, Arc<str>) = ("team".into(), "other".into());
        kept.keep(&team, &turn("toolu_1", block.clone()));
        let mut request = ChatRequest::new("m", vec![Message::user("hi"), turn("toolu_1", Value::Null)]);
        kept.restore(&other, &mut request);
        assert!(request.messages[1].thinking_blocks().is_empty(), "another key's is not its own");
        kept.restore(&team, &mut request);
        assert_eq!(Value::Array(request.messages[1].thinking_blocks().to_vec()), block);
        // A turn sent back with thinking of its own keeps it.
        let mine = json!([{"type": "thinking", "thinking": "Mine.", "signature": "EqQC"}]);
        let mut request = ChatRequest::new("m", vec![turn("toolu_1", mine.clone())]);
        kept.restore(&team, &mut request);
        assert_eq!(Value::Array(request.messages[0].thinking_blocks().to_vec()), mine);
    }

    #[test]
    fn the_oldest_turns_are_forgotten_past_the_bound() {
        let kept = KeptThinking::default();
        let key: Arc<str> = "".into();
        for n in 0..=KEPT {
            kept.keep(&key, &turn(&format!("toolu_{n}"), json!([{"type": "thinking", "signature": "s"}])));
        }
        let inner = kept.kept();
        assert_eq!((inner.blocks.len(), inner.order.len()), (KEPT, KEPT));
        assert!(!inner.blocks.contains_key(&(key.clone(), "toolu_0".to_owned())));
    }
}
