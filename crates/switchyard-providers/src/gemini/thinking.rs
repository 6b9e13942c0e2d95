//! OpenAI's `reasoning_effort` (and Anthropic's `thinking`) as Gemini's
//! `generationConfig.thinkingConfig`.
//!
//! Gemini 3 takes a thinking *level*, Gemini 2.5 a token *budget* (which Gemini 3 also reads,
//! so a name that gives no generation gets the budget); models before 2.5 do not think, and
//! are refused as unsupported so that the route goes on. The thoughts' summaries are asked for
//! (`includeThoughts`), since a client that asks for reasoning expects to read it: they come
//! back as `reasoning_content`.
//!
//! | `reasoning_effort` | Gemini 3: `thinkingLevel` | Gemini 2.5: `thinkingBudget` |
//! |---|---|---|
//! | `none` | refused: it always thinks | 0; refused on a Pro model, which always thinks |
//! | `minimal`, `low` | `low` | 1024 |
//! | `medium` | `high` | 8192 |
//! | `high`, `xhigh` | `high` | 24576 |
//!
//! An Anthropic client's `thinking` ([`from_anthropic`]): `enabled` as the effort its budget
//! stands for (up to 1024 `low`, up to 8192 `medium`, more `high`), `adaptive` as Gemini's own
//! dynamic thinking, `disabled` as `none` where the model can stop thinking.

use serde_json::{Value, json};
use switchyard::ProviderError;

use super::request::invalid_request;

/// The `thinkingConfig` `effort` asks of `model`.
pub(super) fn config(effort: &Value, model: &str) -> Result<Value, ProviderError> {
    let refuse =
        |why: &str| Err(invalid_request(format!("`reasoning_effort` is {effort}, but `{model}` {why}")));
    let effort_name = effort.as_str().unwrap_or_default();
    let (level, budget) = match effort_name {
        "none" => ("", 0),
        "minimal" | "low" => ("low", 1024),
        "medium" => ("high", 8192),
        "high" | "xhigh" => ("high", 24576),
        _ => {
            return Err(invalid_request(format!(
                "`reasoning_effort` is {effort}: expected one of none, minimal, low, medium, high, xhigh"
            )));
        }
    };
    let generation = generation(model);
    let levels = generation.is_some_and(|version| version >= (3, 0));
    match generation {
        Some(version) if version < (2, 5) => return refuse("cannot think (Gemini thinks from 2.5 on)"),
        _ if effort_name == "none" && (levels || model.contains("pro")) => {
            return refuse("always thinks: its thinking cannot be turned off");
        }
        _ => {}
    }
    Ok(match (effort_name, levels) {
        ("none", _) => json!({ "thinkingBudget": 0 }),
        (_, true) => json!({ "thinkingLevel": level, "includeThoughts": true }),
        (_, false) => json!({ "thinkingBudget": budget, "includeThoughts": true }),
    })
}

/// Gemini's `thinkingConfig` for an Anthropic client's `thinking`: `enabled` with a budget as
/// the effort that budget stands for, `adaptive` as Gemini's own dynamic thinking (its
/// default: nothing to send), `disabled` as no thinking where the model can stop (else its
/// default). `None` sends nothing.
pub(super) fn from_anthropic(thinking: &Value, model: &str) -> Result<Option<Value>, ProviderError> {
    match thinking["type"].as_str() {
        Some("enabled") => {
            let budget = thinking["budget_tokens"].as_u64().unwrap_or(1024);
            let effort = match budget {
                ..=1024 => "low",
                1025..=8192 => "medium",
                _ => "high",
            };
            config(&Value::from(effort), model).map(Some)
        }
        Some("disabled") => Ok(config(&Value::from("none"), model).ok()),
        Some("adaptive") => Ok(None),
        _ => Err(invalid_request(format!(
            "`thinking` is {thinking}: expected its type to be enabled, adaptive or disabled"
        ))),
    }
}

/// The `(major, minor)` generation a Gemini model's name gives (`gemini-2.5-flash`,
/// `models/gemini-3-pro-preview`, `gemini-3.1-flash-lite`); `None` for an alias
/// (`gemini-flash-latest`) or a tuned model.
fn generation(model: &str) -> Option<(u32, u32)> {
    let name = model.rsplit('/').next()?.to_ascii_lowercase();
    let rest = name.strip_prefix("gemini-")?;
    let version = rest.split('-').next()?;
    let (major, minor) = version.split_once('.').unwrap_or((version, "0"));
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_generation_gets_its_own_knob() {
        let ask = |effort: &str, model: &str| config(&json!(effort), model);
        assert_eq!(
            ask("high", "gemini-2.5-flash").unwrap(),
            json!({"thinkingBudget": 24576, "includeThoughts": true})
        );
        assert_eq!(
            ask("low", "models/gemini-3-pro-preview").unwrap(),
            json!({"thinkingLevel": "low", "includeThoughts": true})
        );
        assert_eq!(
            ask("medium", "gemini-3.1-flash-lite").unwrap(),
            json!({"thinkingLevel": "high", "includeThoughts": true})
        );
        assert_eq!(ask("none", "gemini-2.5-flash-lite").unwrap(), json!({"thinkingBudget": 0}));
        // An alias says no generation: the budget, which every thinking Gemini reads.
        assert_eq!(
            ask("medium", "gemini-flash-latest").unwrap(),
            json!({"thinkingBudget": 8192, "includeThoughts": true})
        );
        for (effort, model) in [
            ("low", "gemini-2.0-flash"),
            ("none", "gemini-2.5-pro"),
            ("none", "gemini-3-flash"),
            ("max", "gemini-2.5-flash"),
        ] {
            let error = ask(effort, model).unwrap_err();
            assert!(error.is_unsupported(), "{effort} {model}");
            assert!(error.detail().contains("`reasoning_effort`"), "{}", error.detail());
        }
    }
}
