//! Thinking a Claude target refuses as not its own. A past turn's signed thinking is bound to
//! the model (and, for some models, the account) that wrote it: sent to another after a
//! failover (Claude on Anthropic's API, then on Bedrock, or another Claude), it may be refused
//! with a 400 ("Invalid `signature` in `thinking` block", "bound to a different
//! conversation"), which would end the route for a conversation any Claude could go on with.
//! The request is then sent once more without its past thinking, as a client of another
//! dialect's would be: what it loses is the reasoning of past turns, which the model writes
//! anew.

use std::collections::HashSet;
use std::future::Future;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use switchyard::chat::{ChatChunk, ChatRequest, StreamNotice};
use switchyard::credential::CredentialId;
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

/// What the trail of an attempt sent again without its past thinking says.
const RESENT: &str = "the target refused a past turn's thinking as not its own: sent again without it";

/// What the trail of an attempt sent without thinking the target refused before says.
const LEFT_OUT: &str = "a past turn's thinking the target refused before as not its own was left out";

/// How many refused signatures a model's memory holds; past it, it starts again empty.
const REMEMBERED: usize = 4096;

/// The signed thinking each model of a provider refused as not its own under each key (keys
/// of one provider may be different accounts'), by a fingerprint of its signature. A
/// conversation that failed over between Claudes carries the other's thinking in every later
/// request; remembered, it goes at once rather than after another refusal each time.
#[derive(Debug, Default)]
pub(crate) struct Refused(std::sync::Mutex<Vec<Memory>>);

/// What one model refused under one key.
#[derive(Debug)]
struct Memory {
    model: String,
    key: CredentialId,
    refused: HashSet<u64>,
}

/// Whose refusals a request reads and adds to: its model, under its key.
pub(crate) type Whose<'a> = (&'a Refused, &'a str, &'a CredentialId);

impl Refused {
    fn known(&self) -> std::sync::MutexGuard<'_, Vec<Memory>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with<T>(&self, model: &str, key: &CredentialId, read: impl FnOnce(&HashSet<u64>) -> T) -> Option<T> {
        self.known().iter().find(|m| m.model == model && m.key == *key).map(|m| read(&m.refused))
    }

    /// Whether `model` refused any thinking under `key` yet: a body is read only then.
    fn any(&self, model: &str, key: &CredentialId) -> bool {
        self.with(model, key, |set| !set.is_empty()).unwrap_or(false)
    }

    fn refused(&self, model: &str, key: &CredentialId, fingerprint: u64) -> bool {
        self.with(model, key, |set| set.contains(&fingerprint)).unwrap_or(false)
    }

    fn remember(&self, model: &str, key: &CredentialId, mut fingerprints: Vec<u64>) {
        fingerprints.truncate(REMEMBERED);
        let mut known = self.known();
        let at = match known.iter().position(|m| m.model == model && m.key == *key) {
            Some(at) => at,
            None => {
                known.push(Memory { model: model.to_owned(), key: key.clone(), refused: HashSet::new() });
                known.len() - 1
            }
        };
        let set = &mut known[at].refused;
        if set.len() + fingerprints.len() > REMEMBERED {
            set.clear();
        }
        set.extend(fingerprints);
    }
}

/// Sends `body` for `model` under `key` with `send`, without the past thinking `model` refused
/// under `key` before, and
/// once more without its past thinking when the target refuses that thinking as not its own
/// (remembered in `refused`); the answer, with the notice for the attempt's trail when thinking
/// was left out.
pub(crate) async fn sent<T, F, Fut>(
    body: Bytes,
    (refused, model, key): Whose<'_>,
    send: F,
) -> Result<(T, Option<StreamNotice>), ProviderError>
where
    F: Fn(Bytes) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let (body, left_out) = match refused.any(model, key) {
        true => {
            match without_past_thinking(&body, |_, block| refused.refused(model, key, fingerprint(block))) {
                Some((stripped, _)) => (Bytes::from(stripped), true),
                None => (body, false),
            }
        }
        false => (body, false),
    };
    let notice = |text: &str| Some(StreamNotice::Resent(text.to_owned()));
    let error = match send(body.clone()).await {
        Err(error) if refuses_past_thinking(&error) => error,
        sent => return sent.map(|answer| (answer, if left_out { notice(LEFT_OUT) } else { None })),
    };
    // First without the thinking up to the turn the refusal names (what came after it, the
    // target may have written itself: it keeps thinking on), then without all of it.
    if let Some(upto) = refused_turn(&error)
        && let Some((stripped, gone)) = without_past_thinking(&body, |turn, _| turn <= upto)
    {
        match send(Bytes::from(stripped)).await {
            Err(again) if refuses_past_thinking(&again) => {}
            sent => {
                let answer = sent?;
                refused.remember(model, key, gone);
                return Ok((answer, notice(RESENT)));
            }
        }
    }
    let Some((stripped, gone)) = without_past_thinking(&body, |_, _| true) else { return Err(error) };
    let answer = send(Bytes::from(stripped)).await?;
    refused.remember(model, key, gone);
    Ok((answer, notice(RESENT)))
}

/// A thinking block's fingerprint: of its signature (`data` for redacted thinking).
fn fingerprint(block: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let signed =
        block.get("signature").or_else(|| block.get("data")).and_then(Value::as_str).unwrap_or_default();
    let mut hasher = std::hash::DefaultHasher::new();
    signed.hash(&mut hasher);
    hasher.finish()
}

/// `body`, the Messages body of `request`, without the thinking blocks no Claude takes: another
/// dialect's reasoning as the gateway signed it for an Anthropic client (see
/// [`crate::codec::REASONING_SEAL`]), and one cut before it was signed; read again only when
/// the client sent such a block.
pub(crate) fn without_sealed_reasoning(body: Vec<u8>, request: &ChatRequest) -> Vec<u8> {
    let sealed = request.messages.iter().any(|m| m.extra.contains_key(crate::codec::SEALED_REASONING));
    match sealed {
        true => without_past_thinking(&body, |_, block| crate::codec::is_unsendable_thinking(block))
            .map_or(body, |(stripped, _)| stripped),
        false => body,
    }
}

/// The message a refusal of past thinking names (`messages.3.content.0: Invalid
/// `signature` in `thinking` block`).
fn refused_turn(error: &ProviderError) -> Option<usize> {
    let rest = error.detail().split("messages.").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// `stream`, led by `notice` when there is one (the router writes it into the attempt's trail).
pub(crate) fn led_by(notice: Option<StreamNotice>, stream: ChunkStream) -> ChunkStream {
    match notice {
        Some(notice) => {
            let lead = futures_util::stream::once(std::future::ready(Ok(ChatChunk::notice(notice))));
            Box::pin(lead.chain(stream))
        }
        None => stream,
    }
}

/// Whether `error` refuses the thinking of a past turn as not the target's own.
fn refuses_past_thinking(error: &ProviderError) -> bool {
    if error.kind() != ErrorKind::InvalidRequest || error.status() != Some(400) {
        return false;
    }
    let detail = error.detail().to_ascii_lowercase();
    detail.contains("thinking")
        && (detail.contains("signature")
            || detail.contains("bound to")
            || detail.contains("cannot be modified"))
}

/// `body` (a Messages body) without the thinking blocks of its assistant turns that `strip`
/// (given the message's index and the block) picks, and the fingerprints of those it took out;
/// `None` when it picks none. A conversation whose last assistant turn calls tools then goes
/// on without thinking (Anthropic refuses thinking after a tool turn that has none), and
/// without the clearing of thinking in its `context_management` (refused without thinking).
fn without_past_thinking(body: &[u8], strip: impl Fn(usize, &Value) -> bool) -> Option<(Vec<u8>, Vec<u64>)> {
    let mut body: Value = serde_json::from_slice(body).ok()?;
    let messages = body.get_mut("messages")?.as_array_mut()?;
    let mut gone = Vec::new();
    for (turn, message) in
        messages.iter_mut().enumerate().filter(|(_, message)| message["role"] == "assistant")
    {
        if let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) {
            blocks.retain(|block| {
                let thinking = matches!(block["type"].as_str(), Some("thinking" | "redacted_thinking"));
                let goes = thinking && strip(turn, block);
                if goes {
                    gone.push(fingerprint(block));
                }
                !goes
            });
        }
    }
    if gone.is_empty() {
        return None;
    }
    // Thinking goes on only after a tool turn that kept its own thinking.
    let tool_turn_without_thinking =
        messages.iter().rev().find(|message| message["role"] == "assistant").is_some_and(|turn| {
            let blocks = turn["content"].as_array().map_or(&[][..], Vec::as_slice);
            let thinks = blocks
                .iter()
                .any(|block| matches!(block["type"].as_str(), Some("thinking" | "redacted_thinking")));
            blocks.iter().any(|block| block["type"] == "tool_use") && !thinks
        });
    if let Some(object) = body.as_object_mut().filter(|_| tool_turn_without_thinking) {
        object.remove("thinking");
        let clears =
            object.get("context_management").and_then(|m| m["edits"].as_array()).is_some_and(|edits| {
                edits
                    .iter()
                    .any(|edit| edit["type"].as_str().is_some_and(|kind| kind.starts_with("clear_thinking")))
            });
        if clears {
            object.remove("context_management");
        }
    }
    Some((serde_json::to_vec(&body).ok()?, gone))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_refusal_of_past_thinking_is_told_from_other_refusals() {
        let refused = |message: &str| ProviderError::new(ErrorKind::InvalidRequest, message).with_status(400);
        assert!(refuses_past_thinking(&refused(
            "messages.1.content.0: Invalid `signature` in `thinking` block"
        )));
        assert!(refuses_past_thinking(&refused("The thinking block is bound to a different conversation")));
        assert!(!refuses_past_thinking(&refused("max_tokens: must be greater than thinking.budget_tokens")));
        let overloaded =
            ProviderError::new(ErrorKind::Unavailable, "Invalid `signature` in `thinking` block");
        assert!(!refuses_past_thinking(&overloaded));
    }

    #[test]
    fn past_thinking_goes_and_thinking_with_it_after_a_tool_turn() {
        let body = json!({
            "model": "m", "thinking": {"type": "adaptive"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
            "messages": [
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}
            ]
        });
        let sent: Value = serde_json::from_slice(
            &without_past_thinking(body.to_string().as_bytes(), |_, _| true).unwrap().0,
        )
        .unwrap();
        assert_eq!(
            sent["messages"][1]["content"],
            json!([{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}])
        );
        assert!(sent.get("thinking").is_none() && sent.get("context_management").is_none(), "{sent}");

        // After a plain answer, thinking goes on; a body without past thinking is not resent.
        let mut plain = body.clone();
        plain["messages"][1]["content"] =
            json!([{"type": "redacted_thinking", "data": "d"}, {"type": "text", "text": "ok"}]);
        plain["messages"][2] = json!({"role": "user", "content": "and?"});
        let sent: Value = serde_json::from_slice(
            &without_past_thinking(plain.to_string().as_bytes(), |_, _| true).unwrap().0,
        )
        .unwrap();
        assert_eq!(sent["messages"][1]["content"], json!([{"type": "text", "text": "ok"}]));
        assert_eq!(sent["thinking"], json!({"type": "adaptive"}));
        assert!(without_past_thinking(sent.to_string().as_bytes(), |_, _| true).is_none());
    }
}
