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

use std::future::Future;

use bytes::Bytes;
use serde_json::Value;
use switchyard::chat::{ChatRequest, Dialect, StreamNotice};
use switchyard::{ErrorKind, ProviderError};

/// What the trail of an attempt sent again without strict tool use says.
pub(crate) const RESENT: &str = "the target refused the request with strict tool use: sent again without it";

/// What the trail of an attempt sent without strict tool use the model refused before says.
pub(crate) const LEFT_OUT: &str = "strict tool use, which the model refused lately, was left out";

/// The models of a provider that refused strict tool use lately.
pub(crate) type StrictRefusals = crate::lately::Lately;

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
    // Said beside what a layer below said of its own resend (past thinking left out).
    let notice = |text: &str, earlier: Option<StreamNotice>| {
        Some(match earlier {
            Some(StreamNotice::Resent(said)) => StreamNotice::Resent(format!("{said}; {text}")),
            Some(other) => other,
            None => StreamNotice::Resent(text.to_owned()),
        })
    };
    if refusals.refused(model) {
        let (answer, earlier) = send(without_strict(&body)).await?;
        return Ok((answer, notice(LEFT_OUT, earlier)));
    }
    match send(body.clone()).await {
        Err(error) if may_refuse(&error) => {
            let (answer, earlier) = send(without_strict(&body)).await?;
            refusals.note(model);
            Ok((answer, notice(RESENT, earlier)))
        }
        sent => sent,
    }
}

/// Whether `error` may refuse a request for the strict tools its translation carried: any 400
/// the target says is the request's (a model without strict mode, or a schema its grammar does
/// not take, in words of its own); sent once more without them, a refusal for another reason
/// stands. One the target already said it cannot take (unsupported) would be refused again.
pub(crate) fn may_refuse(error: &ProviderError) -> bool {
    error.kind() == ErrorKind::InvalidRequest && error.status() == Some(400) && !error.is_unsupported()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_resend_without_strict_tools_is_said_beside_what_the_layer_below_said() {
        let refusals = StrictRefusals::default();
        let body = Bytes::from_static(br#"{"tools":[{"name":"f","strict":true}]}"#);
        let send =
            |body: Bytes| async move {
                match body.windows(6).any(|w| w == b"strict") {
                    true => Err(ProviderError::new(ErrorKind::InvalidRequest, "strict: not supported")
                        .with_status(400)),
                    false => Ok(((), Some(StreamNotice::Resent("past thinking left out".to_owned())))),
                }
            };
        let (_, notice) = sent(body, (&refusals, "m", true), send).await.unwrap();
        assert_eq!(notice, Some(StreamNotice::Resent(format!("past thinking left out; {RESENT}"))));
    }
}
