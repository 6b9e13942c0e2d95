//! What an error response's words say that its status and code do not. OpenAI and Anthropic
//! code their context overflow; the servers that speak their dialects mostly do not, and say it
//! only in the message (vLLM, Ollama, Mistral, DeepSeek, TGI, older llama.cpp). A request larger
//! than a provider takes (a 413, OpenAI's "Request too large" 429 against a per-minute limit)
//! is no failure of the provider's and no fault of the request: another provider may take it.
//! Read for every error response of every HTTP adapter, after the adapter classified it.

use switchyard::{ErrorKind, ProviderError};

/// `error` (classified from an HTTP error response by its adapter) refined by its words: a
/// context overflow said only in words is `context_length`; a request too large for this
/// provider is unsupported here (the route's next target is asked; health is untouched).
pub(crate) fn refine(error: ProviderError) -> ProviderError {
    if error.is_unsupported() {
        return error;
    }
    let detail = error.detail().to_ascii_lowercase();
    // A prompt too long first: said in words much like an output limit too high.
    let overflow = matches!(error.kind(), ErrorKind::InvalidRequest | ErrorKind::Unavailable)
        && overflows_context(&detail);
    if overflow {
        return rebuilt(&error, ProviderError::new(ErrorKind::ContextLength, error.detail()));
    }
    let too_large = error.status() == Some(413)
        || (error.kind() == ErrorKind::RateLimited && detail.starts_with("request too large"))
        || (error.kind() == ErrorKind::InvalidRequest && asks_more_output_than_the_model_gives(&detail));
    match too_large {
        true => rebuilt(&error, ProviderError::unsupported(error.detail())),
        false => error,
    }
}

/// `into` with `from`'s status, code and Retry-After.
fn rebuilt(from: &ProviderError, into: ProviderError) -> ProviderError {
    let mut error = into;
    if let Some(status) = from.status() {
        error = error.with_status(status);
    }
    if let Some(code) = from.code() {
        error = error.with_code(code);
    }
    match from.retry_after() {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    }
}

/// Whether a (lower-cased) message refuses the output limit the request asked as more than
/// the model writes ("max_tokens: 100000 > 64000, which is the maximum allowed number of output
/// tokens for claude-...", Bedrock's "The maximum tokens you requested exceeds the model limit
/// of 8192"): a model of the route that writes more may take it.
fn asks_more_output_than_the_model_gives(message: &str) -> bool {
    let output =
        message.contains("max_tokens") || message.contains("maximum tokens") || message.contains("output");
    output
        && (message.contains("maximum allowed number of output tokens")
            || message.contains("exceeds the model limit"))
}

/// Whether a (lower-cased) message says the prompt is longer than the model's context.
fn overflows_context(message: &str) -> bool {
    // "This model's maximum context length is 4096 tokens" (vLLM, DeepSeek, OpenAI's older
    // wording); "too large for model with 131072 maximum context length" (Mistral).
    message.contains("maximum context length")
        // "prompt too long; exceeded max context length by 904 tokens" (Ollama).
        || message.contains("exceeded max context length")
        // "the request exceeds the available context size" (llama.cpp), "exceeds the context
        // window" (OpenAI's Responses API, some servers).
        || (message.contains("exceed") && (message.contains("context size") || message.contains("context window")))
        // "prompt is too long: 208000 tokens > 200000 maximum" (Claude's wording, copied).
        || message.contains("prompt is too long")
        // "`inputs` tokens + `max_new_tokens` must be <= 4096" (Hugging Face TGI).
        || (message.contains("max_new_tokens") && message.contains("must be <="))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refined(kind: ErrorKind, status: u16, message: &str) -> ProviderError {
        refine(ProviderError::new(kind, message).with_status(status).with_code("x"))
    }

    #[test]
    fn context_overflow_in_words_of_compatible_servers_is_context_length() {
        let worded = [
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "prompt too long; exceeded max context length by 904 tokens",
            "Prompt contains 140000 tokens, too large for model with 131072 maximum context length",
            "the request exceeds the available context size, try increasing it",
            "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 5000 `inputs` tokens and 16 `max_new_tokens`",
        ];
        for message in worded {
            let error = refined(ErrorKind::InvalidRequest, 400, message);
            assert_eq!(error.kind(), ErrorKind::ContextLength, "{message}");
            assert_eq!((error.status(), error.code()), (Some(400), Some("x")));
        }
        // llama.cpp's older 500.
        assert_eq!(refined(ErrorKind::Unavailable, 500, worded[3]).kind(), ErrorKind::ContextLength);
        // What the code said stands: a rate limit's words are not read for context.
        assert_eq!(refined(ErrorKind::RateLimited, 429, worded[0]).kind(), ErrorKind::RateLimited);
        assert_eq!(
            refined(ErrorKind::InvalidRequest, 400, "temperature must be <= 2").kind(),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn a_request_too_large_for_the_provider_is_unsupported_there() {
        let tpm = "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 52000.";
        let error = refined(ErrorKind::RateLimited, 429, tpm);
        assert!(error.is_unsupported() && error.status() == Some(429), "{error:?}");
        assert!(error.detail().contains("Limit 30000"), "{error:?}");
        let error = refined(ErrorKind::InvalidRequest, 413, "<html>413 Request Entity Too Large</html>");
        assert!(error.is_unsupported(), "{error:?}");
        let output = "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929";
        assert!(refined(ErrorKind::InvalidRequest, 400, output).is_unsupported());
        let bedrock = "The maximum tokens you requested exceeds the model limit of 8192. Try again with a maximum tokens value that is lower than 8192.";
        assert!(refined(ErrorKind::InvalidRequest, 400, bedrock).is_unsupported());
        let input = "input length exceeds the model limit of 8192 tokens";
        assert!(
            !refined(ErrorKind::InvalidRequest, 400, input).is_unsupported(),
            "an input too long is not an output limit"
        );
        let plain = "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.";
        assert_eq!(refined(ErrorKind::RateLimited, 429, plain).kind(), ErrorKind::RateLimited);
        assert!(!refined(ErrorKind::RateLimited, 429, plain).is_unsupported());
    }
}
