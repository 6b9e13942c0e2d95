//! W3C trace context: the identity a request's trace carries to every upstream call.
//!
//! The router knows nothing of an exporter. A caller that traces gives the request's context
//! ([`RequestOptions::trace`](crate::RequestOptions::trace)): its trace id and the span id that
//! stands for the request. Each attempt the router sends gets a span id of its own before the
//! provider is called; the call carries it as `traceparent` ([`Call::trace`]), and the trail
//! keeps it ([`Attempt::span_id`]), so that the caller can report the attempt as a child span
//! with the very id the upstream saw.
//!
//! ```
//! use switchyard::trace::TraceContext;
//!
//! let incoming = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
//! assert!(incoming.sampled);
//! let attempt = incoming.child();
//! assert_eq!(attempt.trace_id, incoming.trace_id);
//! assert_ne!(attempt.span_id, incoming.span_id);
//! assert!(attempt.traceparent().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
//! ```
//!
//! [`Call::trace`]: crate::provider::Call::trace
//! [`Attempt::span_id`]: crate::trail::Attempt::span_id

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher, RandomState};

/// One span's place in a trace, as `traceparent` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace, never zero.
    pub trace_id: u128,
    /// The span, never zero.
    pub span_id: u64,
    /// Whether the trace is recorded (the `sampled` flag).
    pub sampled: bool,
}

impl TraceContext {
    /// A new trace's root span, with random ids.
    pub fn root(sampled: bool) -> Self {
        let trace_id = (u128::from(random_id()) << 64) | u128::from(random_id());
        Self { trace_id, span_id: random_id(), sampled }
    }

    /// A child span of this one: the same trace, a new random span id.
    pub fn child(&self) -> Self {
        Self { span_id: random_id(), ..*self }
    }

    /// Parses a `traceparent` header (W3C Trace Context, level 1). A version other than `00`
    /// is read by its first four fields, as the specification asks; all-zero ids, version
    /// `ff` and malformed headers give `None`.
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let mut fields = header.split('-');
        let (version, trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let rest = fields.next();
        let hex = |text: &str, len: usize| {
            text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        // Version 00 has exactly four fields; later versions may add more.
        if version == "00" && (rest.is_some() || header.len() != 55) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok().filter(|&id| id != 0)?;
        let span_id = u64::from_str_radix(span, 16).ok().filter(|&id| id != 0)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(Self { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// The `traceparent` header of this span: `00-<trace>-<span>-<flags>`.
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }
}

thread_local! {
    /// A per-thread xorshift state, seeded from the process's random hasher keys.
    static STATE: Cell<u64> = Cell::new(RandomState::new().build_hasher().finish() | 1);
}

/// A random non-zero 64-bit id: a span id, or half a trace id. Not for secrets.
pub fn random_id() -> u64 {
    STATE.with(|state| {
        // xorshift64*: fast, and plenty for ids that must only not collide.
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d).max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips() {
        let context = TraceContext {
            trace_id: 0x0af7651916cd43dd8448eb211c80319c,
            span_id: 0xb7ad6b7169203331,
            sampled: true,
        };
        let header = context.traceparent();
        assert_eq!(header, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(TraceContext::parse(&header), Some(context));
        let unsampled = TraceContext { sampled: false, ..context };
        assert_eq!(TraceContext::parse(&unsampled.traceparent()), Some(unsampled));
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for header in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceContext::parse(header), None, "{header:?}");
        }
        // A later version is read by its first four fields.
        assert!(
            TraceContext::parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later").is_some()
        );
    }

    #[test]
    fn ids_are_not_repeated() {
        let ids: std::collections::HashSet<u64> = (0..10_000).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(!ids.contains(&0));
    }
}
