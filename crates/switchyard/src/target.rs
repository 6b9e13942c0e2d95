//! `provider:model` targets.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where one attempt goes: a configured provider and one of its models.
///
/// Parsed from `provider:model`, split at the first colon, so model names may contain colons:
///
/// ```
/// use switchyard::Target;
///
/// let target: Target = "ollama:qwen3:8b".parse().unwrap();
/// assert_eq!(target.provider(), "ollama");
/// assert_eq!(target.model(), "qwen3:8b");
/// assert!("gpt-4o".parse::<Target>().is_err());
/// ```
///
/// Cloning is cheap: the text is shared.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    text: Arc<str>,
    colon: usize,
}

impl Target {
    /// A target from its two parts, each non-empty; the provider may not contain a colon.
    pub fn new(provider: &str, model: &str) -> Result<Self, TargetError> {
        format!("{provider}:{model}").parse()
    }

    /// The provider id: the text before the first colon, never empty.
    pub fn provider(&self) -> &str {
        &self.text[..self.colon]
    }

    /// The upstream model: everything after the first colon (it may hold more colons), never empty.
    pub fn model(&self) -> &str {
        &self.text[self.colon + 1..]
    }

    /// The whole `provider:model` text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The whole text, shared: for labels and keys that outlive a borrow, without copying.
    pub fn shared(&self) -> Arc<str> {
        self.text.clone()
    }
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let Some(colon) = text.find(':') else {
            return Err(TargetError { text: text.to_owned(), problem: "has no colon" });
        };
        if colon == 0 {
            return Err(TargetError { text: text.to_owned(), problem: "has an empty provider" });
        }
        if colon + 1 == text.len() {
            return Err(TargetError { text: text.to_owned(), problem: "has an empty model" });
        }
        if text.chars().any(char::is_whitespace) {
            return Err(TargetError { text: text.to_owned(), problem: "contains white space" });
        }
        Ok(Target { text: text.into(), colon })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({})", self.text)
    }
}

impl serde::Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A target text that is not `provider:model`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("target `{text}` {problem}: {FIX}")]
pub struct TargetError {
    text: String,
    problem: &'static str,
}

const FIX: &str = "write it as `provider:model`, for example `openai:gpt-4o-mini`";

impl TargetError {
    /// The same as a configuration problem at `path`.
    pub fn at(&self, path: impl Into<String>) -> crate::problem::Problem {
        crate::problem::Problem::new(path, format!("target `{}` {}", self.text, self.problem), FIX)
    }
}
