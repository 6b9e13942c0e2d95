//! An Anthropic client's own thinking, in the style the target model takes. Claude Code asks a
//! model name it does not know (a route's) for adaptive thinking with an effort, which Claude
//! before 4.6 refuses; and a client that knows an older model asks for a budget, which Claude
//! from 4.7 on refuses ("`thinking.type.enabled` is not supported for this model"). The body
//! otherwise goes as written; only `thinking` and `output_config.effort` are rewritten, and only
//! where the target's generation (or the provider's `thinking` setting) says the other style.

use serde_json::{Map, Value, json};
use switchyard::chat::ChatRequest;

use super::thinking::{ThinkingStyle, generation};

/// The least budget Anthropic takes.
const LEAST_BUDGET: u64 = 1024;

/// How a client's `thinking` and `output_config` are rewritten for the target.
#[derive(Debug, PartialEq)]
pub(crate) enum Restyled {
    /// As written.
    Kept,
    /// These members as JSON text; `None` takes a member out (a budget with no room left in
    /// `max_tokens`, an `output_config` left empty).
    Members { thinking: Option<String>, output_config: Option<String> },
}

/// The client's thinking restyled for `model`, asked to think in `style` (the provider's
/// `thinking` setting), else as its generation says.
pub(crate) fn restyled(request: &ChatRequest, model: &str, style: Option<ThinkingStyle>) -> Restyled {
    let Some(thinking) = request.extra.get("thinking") else { return Restyled::Kept };
    let config = request.extra.get("output_config").and_then(Value::as_object);
    let known = generation(model);
    let budget_era = known.is_some_and(|version| ((3, 7)..(4, 6)).contains(&version));
    let adaptive_only = known.is_some_and(|version| version >= (4, 7));
    match (thinking["type"].as_str(), style) {
        (Some("adaptive"), Some(ThinkingStyle::Budget)) => to_budget(request, config),
        (Some("adaptive"), None) if budget_era => to_budget(request, config),
        (Some("enabled"), Some(ThinkingStyle::Adaptive)) => to_adaptive(thinking, config),
        (Some("enabled"), None) if adaptive_only => to_adaptive(thinking, config),
        _ => Restyled::Kept,
    }
}

/// Adaptive thinking as a budget: `low` 2,048, `medium` 8,192, `high` 16,384, more 24,576
/// tokens (as an OpenAI client's efforts are), within the answer's `max_tokens`; the effort,
/// which these models do not take, out of `output_config`.
fn to_budget(request: &ChatRequest, config: Option<&Map<String, Value>>) -> Restyled {
    let effort = config.and_then(|c| c.get("effort")).and_then(Value::as_str).unwrap_or("high");
    let budget: u64 = match effort {
        "low" => 2048,
        "medium" => 8192,
        "xhigh" | "max" => 24_576,
        _ => 16_384,
    };
    let room = request.max_tokens.map_or(u64::MAX, |most| u64::from(most).saturating_sub(1));
    let thinking = (room >= LEAST_BUDGET)
        .then(|| json!({ "type": "enabled", "budget_tokens": budget.min(room) }).to_string());
    let output_config = config.and_then(|config| {
        let mut config = config.clone();
        config.remove("effort");
        (!config.is_empty()).then(|| Value::Object(config).to_string())
    });
    Restyled::Members { thinking, output_config }
}

/// A budget as adaptive thinking (its summaries shown, as a budget's thinking is), with the
/// effort the budget was: up to 4,096 `low`, up to 16,384 `medium`, more `high`.
fn to_adaptive(thinking: &Value, config: Option<&Map<String, Value>>) -> Restyled {
    let effort = match thinking["budget_tokens"].as_u64().unwrap_or(16_384) {
        0..=4096 => "low",
        4097..=16_384 => "medium",
        _ => "high",
    };
    let mut config = config.cloned().unwrap_or_default();
    config.entry("effort").or_insert_with(|| Value::from(effort));
    Restyled::Members {
        thinking: Some(json!({ "type": "adaptive", "display": "summarized" }).to_string()),
        output_config: Some(Value::Object(config).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchyard::chat::{ChatRequest, Message};

    use super::*;

    fn asking(thinking: Value, config: Option<Value>, max_tokens: u32) -> ChatRequest {
        let mut request = ChatRequest::new("route", vec![Message::user("hi")]);
        request.max_tokens = Some(max_tokens);
        request.extra.insert("thinking".into(), thinking);
        if let Some(config) = config {
            request.extra.insert("output_config".into(), config);
        }
        request
    }

    fn members(thinking: Option<Value>, config: Option<Value>) -> Restyled {
        Restyled::Members {
            thinking: thinking.map(|t| t.to_string()),
            output_config: config.map(|c| c.to_string()),
        }
    }

    #[test]
    fn claude_codes_adaptive_thinking_is_a_budget_for_claude_before_4_6() {
        let request = asking(json!({"type": "adaptive"}), Some(json!({"effort": "medium"})), 32_000);
        assert_eq!(
            restyled(&request, "claude-sonnet-4-5-20250929", None),
            members(Some(json!({"type": "enabled", "budget_tokens": 8192})), None)
        );
        assert_eq!(restyled(&request, "claude-sonnet-4-6", None), Restyled::Kept, "4.6 takes it");
        assert_eq!(restyled(&request, "claude-opus-4-7", None), Restyled::Kept);
        assert_eq!(restyled(&request, "kimi-k3", None), Restyled::Kept, "a model the name tells nothing of");
        // The budget stays within the answer, and a format stays in `output_config`.
        let small = asking(
            json!({"type": "adaptive"}),
            Some(json!({"effort": "max", "format": {"type": "json_schema"}})),
            4000,
        );
        assert_eq!(
            restyled(&small, "us.anthropic.claude-haiku-4-5-20251001-v1:0", None),
            members(
                Some(json!({"type": "enabled", "budget_tokens": 3999})),
                Some(json!({"format": {"type": "json_schema"}}))
            )
        );
        let no_room = asking(json!({"type": "adaptive"}), None, 1000);
        assert_eq!(restyled(&no_room, "claude-sonnet-4-5", None), members(None, None), "no room to think");
    }

    #[test]
    fn a_budget_is_adaptive_thinking_for_claude_from_4_7() {
        let request = asking(json!({"type": "enabled", "budget_tokens": 10_000}), None, 32_000);
        assert_eq!(
            restyled(&request, "claude-opus-4-7", None),
            members(
                Some(json!({"type": "adaptive", "display": "summarized"})),
                Some(json!({"effort": "medium"}))
            )
        );
        assert_eq!(restyled(&request, "claude-sonnet-4-6", None), Restyled::Kept, "4.6 still takes a budget");
        assert_eq!(restyled(&request, "claude-sonnet-4-5", None), Restyled::Kept);
        // The provider's setting decides for a name that tells nothing.
        assert_ne!(restyled(&request, "my-claude", Some(ThinkingStyle::Adaptive)), Restyled::Kept);
    }
}
