//! Configuration problems as data: where, what, and how to fix it. The engine checks each
//! rule once; a configuration layer (the gateway's file loader) maps `path` onto its own keys
//! instead of checking the rule again.
//!
//! ```
//! use switchyard::route::{Retry, Route};
//!
//! let error = Route::builder("default")
//!     .target("openai:gpt-4o-mini")
//!     .retry(Retry { max_attempts: 0, ..Retry::default() })
//!     .build()
//!     .unwrap_err();
//! let problem = &error.problems[0];
//! assert_eq!(problem.path, "retry.max_attempts");
//! assert_eq!(problem.fix, "use 1 for no retries");
//! ```

use std::fmt;

/// One problem with a configuration, at one place, with its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, relative to what was being built (`retry.max_attempts` of a route, `targets[1]`);
    /// empty for the thing itself (a route's name).
    pub path: String,
    /// What is wrong, naming the value.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

impl Problem {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into(), fix: fix.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message, self.fix)
    }
}
