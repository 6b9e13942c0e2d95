//! Which of a client's `anthropic-beta` flags a Claude provider passes on.
//!
//! Claude Code and the Anthropic SDKs send beta flags that only Anthropic's own API may know;
//! Bedrock and Vertex answer 400 "invalid beta flag" to one they do not. A provider's `betas`
//! decides: `forward` (the default) passes every flag on, and a refusal is unsupported: the
//! target fails for the request alone (health untouched); `drop` passes none; an allow-list
//! passes the flags it names. Flags the provider's own configuration sets always go.

/// A provider's rule for the client's beta flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum BetaPolicy {
    /// Every flag the client sends is passed on.
    #[default]
    Forward,
    /// No flag of the client's is passed on.
    Drop,
    /// Only these flags are passed on.
    Allow(Vec<String>),
}

impl BetaPolicy {
    /// The client's flags this policy passes on: every comma-separated flag of each
    /// `anthropic-beta` header in `forward`, in order, once each.
    ///
    /// ```
    /// use switchyard_providers::BetaPolicy;
    ///
    /// let forward = [("anthropic-beta".to_owned(), "a, b".to_owned()), ("anthropic-beta".to_owned(), "c".to_owned())];
    /// assert_eq!(BetaPolicy::Forward.client_betas(&forward), ["a", "b", "c"]);
    /// assert_eq!(BetaPolicy::Allow(vec!["b".into()]).client_betas(&forward), ["b"]);
    /// assert!(BetaPolicy::Drop.client_betas(&forward).is_empty());
    /// ```
    pub fn client_betas(&self, forward: &[(String, String)]) -> Vec<String> {
        let mut betas: Vec<String> = Vec::new();
        let flags = forward
            .iter()
            .filter(|(name, _)| name == "anthropic-beta")
            .flat_map(|(_, value)| value.split(','))
            .map(str::trim)
            .filter(|flag| !flag.is_empty());
        for flag in flags {
            let passes = match self {
                BetaPolicy::Forward => true,
                BetaPolicy::Drop => false,
                BetaPolicy::Allow(allowed) => allowed.iter().any(|a| a == flag),
            };
            if passes && !betas.iter().any(|b| b == flag) {
                betas.push(flag.to_owned());
            }
        }
        betas
    }

    /// `forward` with its `anthropic-beta` headers replaced by the one this policy leaves (none
    /// when it leaves no flag); `None` when the policy passes everything as it is.
    pub fn filter_forward(&self, forward: &[(String, String)]) -> Option<Vec<(String, String)>> {
        if *self == BetaPolicy::Forward || !forward.iter().any(|(name, _)| name == "anthropic-beta") {
            return None;
        }
        let betas = self.client_betas(forward);
        let mut kept: Vec<(String, String)> =
            forward.iter().filter(|(name, _)| name != "anthropic-beta").cloned().collect();
        if !betas.is_empty() {
            kept.push(("anthropic-beta".to_owned(), betas.join(",")));
        }
        Some(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_forward_keeps_other_headers_and_only_the_allowed_flags() {
        let forward = vec![
            ("anthropic-beta".to_owned(), "context-1m-2025-08-07,claude-code-20250219".to_owned()),
            ("idempotency-key".to_owned(), "k".to_owned()),
        ];
        let allow = BetaPolicy::Allow(vec!["context-1m-2025-08-07".into()]);
        assert_eq!(
            allow.filter_forward(&forward).unwrap(),
            [
                ("idempotency-key".to_owned(), "k".to_owned()),
                ("anthropic-beta".to_owned(), "context-1m-2025-08-07".to_owned())
            ]
        );
        assert_eq!(
            BetaPolicy::Drop.filter_forward(&forward).unwrap(),
            [("idempotency-key".to_owned(), "k".to_owned())]
        );
        assert_eq!(BetaPolicy::Forward.filter_forward(&forward), None);
    }
}
