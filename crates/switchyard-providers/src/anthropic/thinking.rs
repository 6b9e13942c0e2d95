//! OpenAI's `reasoning_effort` as Claude's extended thinking.
//!
//! Claude is asked to think in one of two ways, and which one a model takes depends on its
//! generation: Claude 4.6 and later think *adaptively* (`thinking: {type: "adaptive"}`, how
//! hard set by `output_config.effort`), and Opus 4.7 and later accept nothing else; earlier
//! models take a fixed *budget* (`thinking: {type: "enabled", budget_tokens}`). The style is
//! read from the model's name ([`ThinkingStyle::of_model`]) unless the provider's settings
//! name it (for every model of the provider), as they must for a model whose name says
//! nothing (an alias, a deployment id). A model the name places before Claude 3.7, which cannot
//! think, is refused as unsupported, so that the route goes on to a target that can.
//!
//! | `reasoning_effort` | adaptive: `output_config.effort` | budget: `budget_tokens` |
//! |---|---|---|
//! | `none` | no thinking | no thinking |
//! | `minimal`, `low` | `low` | 1024, 2048 |
//! | `medium` | `medium` | 8192 |
//! | `high` | `high` | 16384 |
//! | `xhigh` | `xhigh` from Claude 4.7 on, `high` before | 24576 |
//!
//! Adaptive thinking asks for `display: "summarized"`: Opus 4.7 and later leave the thinking's
//! text out by default (`omitted`), and a client that asks for reasoning expects to read it, as
//! it does from earlier models, whose default that is.
//!
//! `max_tokens` bounds the thinking and the answer together. A request that sets none gets
//! [`THINKING_MAX_TOKENS`] rather than the usual default, so that a hard think still leaves
//! room to answer. A budget must be less than `max_tokens`; when the request's is not larger,
//! the budget is added to it (up to [`THINKING_MAX_TOKENS`], the smallest output limit of the
//! models that take a budget), so the answer keeps the room the client asked for. Thinking
//! rules out what Anthropic refuses beside it, and those are refused here, naming the field: a
//! temperature other than 1, `top_p` under 0.95, and a forced tool choice.
//!
//! Two conversations are continued without thinking, since Anthropic serves them only so: one
//! whose last message is the assistant's (a prefill), and one in the middle of a tool-use turn
//! sent back without the signed thinking block it opened on. A client that sends the
//! `thinking_blocks` it was given back keeps thinking through the turn. Conversely, thinking
//! blocks sent back on a request that does not think are left out: Anthropic refuses them
//! then.

use serde_json::{Value, json};
use switchyard::ProviderError;
use switchyard::chat::{ChatRequest, Dialect, Role, ToolChoice};

use super::request::{VERBATIM_BLOCKS, invalid, sendable_thinking};
use super::wire::{Block, MessagesRequest, Turn};

/// How a Claude model is asked to think.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingStyle {
    /// `thinking: {type: "adaptive", display: "summarized"}` with `output_config.effort`:
    /// Claude 4.6 and later.
    Adaptive,
    /// `thinking: {type: "enabled", budget_tokens}`: the models before 4.6.
    Budget,
}

impl ThinkingStyle {
    /// The style of `model`, by the generation its name gives (`claude-opus-4-7`,
    /// `claude-sonnet-4-20250514`, `claude-3-7-sonnet-latest`, Bedrock's
    /// `anthropic.claude-sonnet-4-5-20250929-v1:0`, Vertex's `claude-opus-4-1@20250805`):
    /// adaptive from 4.6 on, a budget from 3.7, and `None` before (those models cannot think).
    /// A name that gives no generation is taken for a current model: adaptive.
    pub fn of_model(model: &str) -> Option<Self> {
        match generation(model) {
            Some(version) if version < (3, 7) => None,
            Some(version) if version < (4, 6) => Some(Self::Budget),
            _ => Some(Self::Adaptive),
        }
    }
}

/// Whether `model` takes `temperature` or `top_p`, not both: Claude from Opus 4.1 on, by the
/// generation its name gives (a name that gives none is sent both, as it was asked).
pub(crate) fn takes_one_sampler(model: &str) -> bool {
    generation(model).is_some_and(|version| version >= (4, 1))
}

/// The `(major, minor)` generation a Claude model's name gives: the one- or two-digit number
/// right after `claude` (`claude-3-7-sonnet`, `claude-2.1`) or after its family
/// (`claude-sonnet-4-5`, `claude-instant-1.2`), and the next one when it follows at once (a
/// date is not a minor).
pub(crate) fn generation(model: &str) -> Option<(u32, u32)> {
    let lower = model.to_ascii_lowercase();
    let (_, rest) = lower.rsplit_once("claude")?;
    let mut parts = rest.split(['-', '.', '@', ':', '_']).filter(|part| !part.is_empty()).peekable();
    let small = |part: &str| (part.len() <= 2).then(|| part.parse::<u32>().ok()).flatten();
    let _family = parts.next_if(|part| ["opus", "sonnet", "haiku", "instant"].contains(part));
    let major = small(parts.next()?)?;
    let minor = parts.peek().and_then(|next| small(next)).unwrap_or(0);
    Some((major, minor))
}

/// What a `reasoning_effort` asks of the model, in Anthropic's terms.
#[derive(Debug, PartialEq)]
struct Thinking {
    /// The `thinking` parameter.
    pub thinking: Value,
    /// `output_config.effort`, for adaptive thinking.
    pub effort: Option<&'static str>,
    /// `budget_tokens`, for a budget: `max_tokens` must exceed it.
    pub budget: Option<u32>,
}

/// The thinking `effort` (OpenAI's `reasoning_effort`) asks of `model`, of `style`; `None` for
/// `none`.
fn from_effort(effort: &Value, style: ThinkingStyle, model: &str) -> Result<Option<Thinking>, ProviderError> {
    // Opus 4.7 and later have an effort between high and max; earlier models stop at high.
    let xhigh = if generation(model).is_some_and(|version| version >= (4, 7)) { "xhigh" } else { "high" };
    let (level, budget) = match effort.as_str() {
        Some("none") => return Ok(None),
        Some("minimal") => ("low", 1024),
        Some("low") => ("low", 2048),
        Some("medium") => ("medium", 8192),
        Some("high") => ("high", 16384),
        Some("xhigh") => (xhigh, 24576),
        _ => {
            return Err(invalid(
                "reasoning_effort",
                format_args!("is {effort}: expected one of none, minimal, low, medium, high, xhigh"),
            ));
        }
    };
    Ok(Some(match style {
        ThinkingStyle::Adaptive => Thinking {
            thinking: json!({"type": "adaptive", "display": "summarized"}),
            effort: Some(level),
            budget: None,
        },
        ThinkingStyle::Budget => Thinking {
            thinking: json!({"type": "enabled", "budget_tokens": budget}),
            effort: None,
            budget: Some(budget),
        },
    }))
}

/// The `max_tokens` of a request that thinks and sets none, and the most a budget may grow
/// one to: the smallest output limit of the models that think (Claude Opus 4 and 4.1).
pub const THINKING_MAX_TOKENS: u32 = 32_000;

/// Asks `wire` (the translation of `request`) to think as `effort` asks: in `style`, else in
/// the style the model's name gives. Leaves it not thinking when Anthropic would refuse
/// thinking for this conversation, and then drops the thinking blocks sent back in it.
pub(crate) fn ask(
    wire: &mut MessagesRequest<'_>,
    effort: &Value,
    style: Option<ThinkingStyle>,
    request: &ChatRequest,
) -> Result<(), ProviderError> {
    let Some(style) = style.or_else(|| ThinkingStyle::of_model(wire.model)) else {
        return Err(invalid(
            "reasoning_effort",
            format_args!("asks `{}` to think, which Claude models before 3.7 cannot", wire.model),
        ));
    };
    let thinking = from_effort(effort, style, wire.model)?;
    let prefilled = wire.messages.last().is_some_and(|turn| turn.role == "assistant");
    let Some(thinking) = thinking.filter(|_| !prefilled && !tool_turn_without_its_thinking(request)) else {
        drop_thinking(&mut wire.messages);
        return Ok(());
    };
    check_compatible(request)?;
    let set_max_tokens = request.max_tokens.is_some() || request.extra.contains_key("max_completion_tokens");
    if !set_max_tokens {
        wire.max_tokens = THINKING_MAX_TOKENS;
    }
    if let Some(budget) = thinking.budget.filter(|budget| wire.max_tokens <= *budget) {
        // The budget is part of `max_tokens`: the answer keeps the room the client asked for.
        wire.max_tokens = wire.max_tokens.saturating_add(budget).min(THINKING_MAX_TOKENS);
    }
    if let Some(effort) = thinking.effort {
        let config = wire.output_config.get_or_insert_with(|| json!({}));
        config["effort"] = Value::from(effort);
    }
    wire.thinking = Some(thinking.thinking);
    Ok(())
}

/// Leaves out of a conversation that does not think the thinking blocks a client sent back
/// (as `thinking_blocks`), and any assistant turn that held nothing else.
pub(crate) fn drop_thinking(turns: &mut Vec<Turn>) {
    for turn in turns.iter_mut().filter(|turn| turn.role == "assistant") {
        turn.content.retain(|block| !is_thinking(block));
    }
    turns.retain(|turn| !turn.content.is_empty());
}

/// Whether the conversation is in the middle of a tool-use turn whose thinking it does not
/// carry: its last assistant turn calls a tool without opening on a thinking block (as when
/// another model, a fallback of another kind, answered it). Anthropic refuses thinking then
/// ("Expected `thinking` or `redacted_thinking`, but found `tool_use`": the turn must open with
/// the block it was thought in), so the turn is continued without thinking. One rule for a
/// translated request and for a client's own Messages body: the turn opens as the client wrote
/// it (its kept blocks), else on the signed `thinking_blocks` it sent back.
pub fn tool_turn_without_its_thinking(request: &ChatRequest) -> bool {
    let Some(last) = request.messages.iter().rev().find(|message| message.role == Role::Assistant) else {
        return false;
    };
    let written = last.extra.get(VERBATIM_BLOCKS).filter(|_| request.origin == Dialect::Anthropic);
    let opens_on_thinking = match written {
        Some(blocks) => blocks
            .get(0)
            .is_some_and(|block| block["type"] == "thinking" || block["type"] == "redacted_thinking"),
        None => last.thinking_blocks().iter().any(|block| sendable_thinking(block).is_some()),
    };
    !last.tool_calls.is_empty() && !opens_on_thinking
}

/// Whether `block` is a thinking block, redacted or not.
fn is_thinking(block: &Block) -> bool {
    matches!(block, Block::Raw(raw) if raw["type"] == "thinking" || raw["type"] == "redacted_thinking")
}

/// Refuses what Anthropic does not take beside thinking, naming the field.
fn check_compatible(request: &ChatRequest) -> Result<(), ProviderError> {
    if let Some(temperature) = request.temperature.filter(|t| *t != 1.0) {
        return Err(invalid(
            "temperature",
            format_args!("is {temperature}, but Claude thinks (`reasoning_effort`) only at temperature 1"),
        ));
    }
    if let Some(top_p) = request.top_p.filter(|p| *p < 0.95) {
        return Err(invalid(
            "top_p",
            format_args!("is {top_p}, but Claude thinks (`reasoning_effort`) only with top_p of 0.95 to 1"),
        ));
    }
    let forced = match &request.tool_choice {
        Some(ToolChoice::Mode(mode)) => mode == "required",
        Some(ToolChoice::Function { .. }) => true,
        None => false,
    };
    match forced {
        true => Err(invalid(
            "tool_choice",
            "forces a tool, which Claude does not allow while it thinks (`reasoning_effort`): use `auto`",
        )),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_style_follows_the_generation_in_the_model_name() {
        let cases = [
            ("claude-opus-4-7", ThinkingStyle::Adaptive),
            ("claude-sonnet-4-6", ThinkingStyle::Adaptive),
            ("claude-opus-4-6-20260205", ThinkingStyle::Adaptive),
            ("claude-opus-4-5-20251101", ThinkingStyle::Budget),
            ("claude-sonnet-4-20250514", ThinkingStyle::Budget),
            ("claude-3-7-sonnet-latest", ThinkingStyle::Budget),
            ("claude-haiku-4-5", ThinkingStyle::Budget),
            ("anthropic.claude-sonnet-4-5-20250929-v1:0", ThinkingStyle::Budget),
            ("us.anthropic.claude-opus-4-6-v1", ThinkingStyle::Adaptive),
            ("claude-opus-4-1@20250805", ThinkingStyle::Budget),
            ("claude-opus-4-1-20250805", ThinkingStyle::Budget),
            ("claude-haiku-4-5-20251001", ThinkingStyle::Budget),
            ("claude-sonnet-5", ThinkingStyle::Adaptive),
            ("my-house-model", ThinkingStyle::Adaptive),
            ("claude-test-1", ThinkingStyle::Adaptive),
        ];
        for (model, style) in cases {
            assert_eq!(ThinkingStyle::of_model(model), Some(style), "{model}");
        }
        for model in [
            "claude-3-5-sonnet-20241022",
            "claude-3-opus-20240229",
            "claude-3-5-haiku-latest",
            "claude-instant-1.2",
            "claude-2.1",
        ] {
            assert_eq!(ThinkingStyle::of_model(model), None, "{model} cannot think");
        }
    }

    #[test]
    fn xhigh_is_asked_only_of_the_models_that_have_it() {
        let ask = |model: &'static str| {
            let request = ChatRequest::new("m", vec![switchyard::chat::Message::user("hi")]);
            let mut wire = crate::anthropic::request::build(model, &request, false, None).unwrap();
            super::ask(&mut wire, &json!("xhigh"), None, &request).unwrap();
            wire.output_config.map(|config| config["effort"].clone())
        };
        assert_eq!(ask("claude-opus-4-7"), Some(json!("xhigh")));
        assert_eq!(ask("claude-opus-5"), Some(json!("xhigh")));
        assert_eq!(ask("claude-sonnet-4-6"), Some(json!("high")));
        assert_eq!(ask("house-model"), Some(json!("high")), "a name without a version: the safe level");
        assert_eq!(ask("claude-sonnet-4-5"), None, "a budget, without an effort");
    }

    #[test]
    fn each_effort_maps_to_an_effort_or_a_budget() {
        let adaptive =
            from_effort(&json!("medium"), ThinkingStyle::Adaptive, "claude-opus-4-7").unwrap().unwrap();
        assert_eq!(adaptive.thinking, json!({"type": "adaptive", "display": "summarized"}));
        assert_eq!((adaptive.effort, adaptive.budget), (Some("medium"), None));
        let budget =
            from_effort(&json!("high"), ThinkingStyle::Budget, "claude-sonnet-4-5").unwrap().unwrap();
        assert_eq!(budget.thinking, json!({"type": "enabled", "budget_tokens": 16384}));
        assert_eq!((budget.effort, budget.budget), (None, Some(16384)));
        assert_eq!(from_effort(&json!("none"), ThinkingStyle::Budget, "claude-sonnet-4-5").unwrap(), None);
        let error = from_effort(&json!("extreme"), ThinkingStyle::Adaptive, "claude-opus-4-7").unwrap_err();
        assert!(
            error.is_unsupported() && error.detail().contains("`reasoning_effort`"),
            "{}",
            error.detail()
        );
    }
}
