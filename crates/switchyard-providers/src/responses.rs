//! OpenAI's Responses API (`POST /v1/responses`) as a client dialect: its requests into the
//! canonical types, and canonical answers and streams back into its response object and
//! events.
//!
//! The gateway serves the Responses API by translation: a Responses request becomes a
//! canonical chat request, which any target of the route can answer, and the answer becomes a
//! response object (or its stream of events). Conversation state is the gateway's (see its
//! `responses` store): [`decode`] reads one request's own input, and the gateway puts the
//! conversation it kept for `previous_response_id` in front.
//!
//! ```
//! use switchyard_providers::responses::decode;
//!
//! let request = decode::request_from_slice(br#"{"model": "default", "input": "Hello", "instructions": "Be brief."}"#).unwrap();
//! assert_eq!(request.chat.messages.len(), 2);
//! assert!(request.store);
//! ```

pub mod decode;
pub mod encode;

use std::fmt;

/// A request the codec cannot read, naming the field at fault by its JSON path
/// (`input[2].content[0].type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// The JSON path of the field at fault (`body` for the body as a whole).
    pub field: String,
    /// What is wrong with it, phrased to follow the field (`is required`, `must be a string`).
    pub reason: String,
}

impl CodecError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.field, self.reason)
    }
}

impl std::error::Error for CodecError {}
