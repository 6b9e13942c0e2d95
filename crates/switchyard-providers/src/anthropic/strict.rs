//! Strict tool use carried to Claude for a client of another dialect. An OpenAI client's
//! `function.strict: true` (what the OpenAI SDK's `parse()` with `pydantic_function_tool`
//! writes) asks that the call's arguments follow the schema exactly; Claude takes the same ask
//! as a tool's `strict: true`, so a failover keeps the guarantee. But not every Claude does:
//! older models, a cloud that gates it, a schema its grammar refuses (keywords OpenAI's strict
//! takes, such as `minimum` or `pattern`). A 400 to a request that carries it is therefore
//! sent once more without it, whatever the refusal says (a request that was refused for
//! another reason is refused again, and that refusal stands); a model that took the request
//! without it is sent none for an hour (per provider and model), and the trail says so each
//! time. An Anthropic client's own `strict` is its own ask, sent as written.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use switchyard::chat::{ChatRequest, Dialect, StreamNotice};
use switchyard::{ErrorKind, ProviderError};
use tokio::time::Instant;

/// What the trail of an attempt sent again without strict tool use says.
pub(crate) const RESENT: &str = "the target refused the request with strict tool use: sent again without it";

/// What the trail of an attempt sent without strict tool use the model refused before says.
pub(crate) const LEFT_OUT: &str = "strict tool use, which the model refused lately, was left out";

/// How long a model that refused strict tool use is sent none.
const REMEMBERED: Duration = Duration::from_secs(3600);

/// The models of a provider that refused strict tool use lately, and until when.
#[derive(Debug, Default)]
pub(crate) struct StrictRefusals(Mutex<HashMap<String, Instant>>);

impl StrictRefusals {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn refused(&self, model: &str) -> bool {
        self.held().get(model).is_some_and(|until| Instant::now() < *until)
    }

    /// Notes that `model` refused strict tool use (at most 1,024 models: the names are the
    /// clients').
    pub(crate) fn note(&self, model: &str) {
        let now = Instant::now();
        let mut held = self.held();
        held.retain(|_, until| now < *until);
        if held.len() < 1024 {
            held.insert(model.to_owned(), now + REMEMBERED);
        }
    }
}

/// Whether the translation of `request` carries strict tool use a client of another dialect
/// asked for ([`request`](super::request) writes it).
pub(crate) fn carried(request: &ChatRequest) -> bool {
    request.origin != Dialect::Anthropic
        && request.tools.iter().any(|tool| tool.function.extra.get("strict") == Some(&Value::Bool(true)))
}

/// Whose refusals a request reads and adds to: its provider's, for its model, and whether its
/// body carries strict tool use of the gateway's translation at all.
pub(crate) type Strict<'a> = (&'a StrictRefusals, &'a str, bool);

/// Sends `body` with `send`; when it carries strict tool use of the gateway's translation,
/// without it for a model that refused it lately, and once more without it after a 400.
pub(crate) async fn sent<T, F, Fut>(
    body: Bytes,
    (refusals, model, carried): Strict<'_>,
    send: F,
) -> Result<(T, Option<StreamNotice>), ProviderError>
where
    F: Fn(Bytes) -> Fut,
    Fut: Future<Output = Result<(T, Option<StreamNotice>), ProviderError>>,
{
    if !carried {
        return send(body).await;
    }
    let notice =
        |text: &str, earlier: Option<StreamNotice>| earlier.or(Some(StreamNotice::Resent(text.to_owned())));
    if refusals.refused(model) {
        let (answer, earlier) = send(without_strict(&body)).await?;
        return Ok((answer, notice(LEFT_OUT, earlier)));
    }
    match send(body.clone()).await {
        Err(error) if error.kind() == ErrorKind::InvalidRequest && error.status() == Some(400) => {
            let (answer, earlier) = send(without_strict(&body)).await?;
            refusals.note(model);
            Ok((answer, notice(RESENT, earlier)))
        }
        sent => sent,
    }
}

/// `body` with no tool's `strict`.
fn without_strict(body: &Bytes) -> Bytes {
    let Ok(mut value) = serde_json::from_slice::<Value>(body) else { return body.clone() };
    let tools = value.get_mut("tools").and_then(Value::as_array_mut);
    for tool in tools.into_iter().flatten() {
        if let Some(tool) = tool.as_object_mut() {
            tool.remove("strict");
        }
    }
    serde_json::to_vec(&value).map_or_else(|_| body.clone(), Bytes::from)
}
