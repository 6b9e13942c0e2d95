//! OpenAI's `reasoning_effort` as Claude's extended thinking.
//!
//! Claude is asked to think in one of two ways, and which one a model takes depends on its
//! generation: Claude 4.6 and later think *adaptively* (`thinking: {type: "adaptive"}`, how
//! hard set by `output_config.effort`), and Opus 4.7 and later accept nothing else; earlier
//! models take a fixed *budget* (`thinking: {type: "enabled", budget_tokens}`). The style is
//! read from the model's name ([`ThinkingStyle::of_model`]) unless the provider's settings
//! name it, as they must for a model whose name says nothing (an alias, a deployment id).
//!
//! | `reasoning_effort` | adaptive: `output_config.effort` | budget: `budget_tokens` |
//! |---|---|---|
//! | `none` | no thinking | no thinking |
//! | `minimal`, `low` | `low` | 1024, 2048 |
//! | `medium` | `medium` | 8192 |
//! | `high`, `xhigh` | `high` | 16384, 32768 |
//!
//! A budget must be less than `max_tokens`; when the request's is not larger, the budget is
//! added to it, so the answer keeps the room the client asked for. Thinking rules out what
//! Anthropic refuses beside it, and those are refused here, naming the field: a temperature
//! other than 1, `top_p` under 0.95, and a forced tool choice.
//!
//! A tool-use turn must go on with the thinking it opened on: Anthropic refuses a request that
//! thinks when its last assistant turn calls a tool without its signed thinking block. A client
//! that sends the `thinking_blocks` it was given back keeps thinking through the turn; one that
//! does not has the turn continued without thinking, which is what Anthropic can serve.

use serde_json::{Value, json};
use switchyard::ProviderError;
use switchyard::chat::{ChatRequest, ToolChoice};

use super::request::invalid;
use super::wire::{Block, MessagesRequest, Turn};

/// How a Claude model is asked to think.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingStyle {
    /// `thinking: {type: "adaptive"}` with `output_config.effort`: Claude 4.6 and later.
    Adaptive,
    /// `thinking: {type: "enabled", budget_tokens}`: the models before 4.6.
    Budget,
}

impl ThinkingStyle {
    /// The style of `model`, by the generation its name gives (`claude-opus-4-7`,
    /// `claude-sonnet-4-20250514`, `claude-3-7-sonnet-latest`, Bedrock's
    /// `anthropic.claude-sonnet-4-5-20250929-v1:0`, Vertex's `claude-opus-4-1@20250805`):
    /// adaptive from 4.6 on. A name that gives none is taken for a current model: adaptive.
    pub fn of_model(model: &str) -> Self {
        match generation(model) {
            Some(version) if version < (4, 6) => Self::Budget,
            _ => Self::Adaptive,
        }
    }
}

/// The `(major, minor)` generation a Claude model's name gives: its first one- or two-digit
/// number after `claude`, and the next one when it follows at once (a date is not a minor).
fn generation(model: &str) -> Option<(u32, u32)> {
    let lower = model.to_ascii_lowercase();
    let (_, rest) = lower.rsplit_once("claude")?;
    let mut parts = rest.split(['-', '.', '@', ':', '_']).filter(|part| !part.is_empty()).peekable();
    let small = |part: &str| (part.len() <= 2).then(|| part.parse::<u32>().ok()).flatten();
    while let Some(part) = parts.next() {
        if let Some(major) = small(part) {
            let minor = parts.peek().and_then(|next| small(next)).unwrap_or(0);
            return Some((major, minor));
        }
    }
    None
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

/// The thinking `effort` (OpenAI's `reasoning_effort`) asks of a model of `style`; `None` for
/// `none`.
fn from_effort(effort: &Value, style: ThinkingStyle) -> Result<Option<Thinking>, ProviderError> {
    let (level, budget) = match effort.as_str() {
        Some("none") => return Ok(None),
        Some("minimal") => ("low", 1024),
        Some("low") => ("low", 2048),
        Some("medium") => ("medium", 8192),
        Some("high") => ("high", 16384),
        Some("xhigh") => ("high", 32768),
        _ => {
            return Err(invalid(
                "reasoning_effort",
                format_args!("is {effort}: expected one of none, minimal, low, medium, high, xhigh"),
            ));
        }
    };
    Ok(Some(match style {
        ThinkingStyle::Adaptive => {
            Thinking { thinking: json!({"type": "adaptive"}), effort: Some(level), budget: None }
        }
        ThinkingStyle::Budget => Thinking {
            thinking: json!({"type": "enabled", "budget_tokens": budget}),
            effort: None,
            budget: Some(budget),
        },
    }))
}

/// Asks `wire` (the translation of `request`) to think as `effort` asks, in `style`.
pub(crate) fn ask(
    wire: &mut MessagesRequest<'_>,
    effort: &Value,
    style: ThinkingStyle,
    request: &ChatRequest,
) -> Result<(), ProviderError> {
    let Some(thinking) = from_effort(effort, style)? else { return Ok(()) };
    if tool_turn_without_its_thinking(&wire.messages) {
        return Ok(());
    }
    check_compatible(request)?;
    if let Some(budget) = thinking.budget.filter(|budget| wire.max_tokens <= *budget) {
        // The budget is part of `max_tokens`: the answer keeps the room the client asked for.
        wire.max_tokens = wire.max_tokens.saturating_add(budget);
    }
    if let Some(effort) = thinking.effort {
        let config = wire.output_config.get_or_insert_with(|| json!({}));
        config["effort"] = Value::from(effort);
    }
    wire.thinking = Some(thinking.thinking);
    Ok(())
}

/// Whether the conversation is in the middle of a tool-use turn whose thinking it does not
/// carry: its last assistant turn calls a tool without opening on a thinking block. Anthropic
/// refuses thinking then (the turn must open with the block it was thought in), so the turn
/// is continued without thinking.
fn tool_turn_without_its_thinking(turns: &[Turn]) -> bool {
    let Some(last) = turns.iter().rev().find(|turn| turn.role == "assistant") else { return false };
    let calls_a_tool = last.content.iter().any(|block| matches!(block, Block::ToolUse { .. }));
    let opens_on_thinking = matches!(
        last.content.first(),
        Some(Block::Raw(block)) if block["type"] == "thinking" || block["type"] == "redacted_thinking"
    );
    calls_a_tool && !opens_on_thinking
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
            ("claude-sonnet-5", ThinkingStyle::Adaptive),
            ("my-house-model", ThinkingStyle::Adaptive),
        ];
        for (model, style) in cases {
            assert_eq!(ThinkingStyle::of_model(model), style, "{model}");
        }
    }

    #[test]
    fn each_effort_maps_to_an_effort_or_a_budget() {
        let adaptive = from_effort(&json!("medium"), ThinkingStyle::Adaptive).unwrap().unwrap();
        assert_eq!(adaptive.thinking, json!({"type": "adaptive"}));
        assert_eq!((adaptive.effort, adaptive.budget), (Some("medium"), None));
        let budget = from_effort(&json!("high"), ThinkingStyle::Budget).unwrap().unwrap();
        assert_eq!(budget.thinking, json!({"type": "enabled", "budget_tokens": 16384}));
        assert_eq!((budget.effort, budget.budget), (None, Some(16384)));
        assert_eq!(from_effort(&json!("none"), ThinkingStyle::Budget).unwrap(), None);
        let error = from_effort(&json!("extreme"), ThinkingStyle::Adaptive).unwrap_err();
        assert!(
            error.is_unsupported() && error.detail().contains("`reasoning_effort`"),
            "{}",
            error.detail()
        );
    }
}
