//! Request ids: a process prefix and a counter.

use std::sync::atomic::{AtomicU64, Ordering};

/// Request ids: a random process prefix (48 bits) and a counter; cheap, and unique across a
/// fleet, so that an id names one request in logs and in `/admin/requests/{id}` on any replica
/// (a prefix of the start time alone was the same for two replicas started in one millisecond).
pub(crate) struct IdSource {
    prefix: String,
    next: AtomicU64,
}

impl IdSource {
    pub(crate) fn new() -> Self {
        // 48 random bits (the engine's id source, seeded by the operating system).
        let random = switchyard::trace::random_id() & 0xffff_ffff_ffff;
        Self { prefix: format!("req_{random:012x}"), next: AtomicU64::new(1) }
    }

    /// The prefix and the counter in at least six hex digits, written digit by digit: this
    /// runs for every request, where `format!` showed in the profile (about 900 instructions).
    pub(crate) fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let digits = n.checked_ilog2().map_or(1, |log| log / 4 + 1).max(6);
        let mut id = String::with_capacity(self.prefix.len() + digits as usize);
        id.push_str(&self.prefix);
        for at in (0..digits).rev() {
            id.push(char::from(b"0123456789abcdef"[((n >> (at * 4)) & 0xf) as usize]));
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_the_prefix_and_at_least_six_hex_digits_of_the_counter() {
        for n in [0, 1, 0xabcdef, 0x100_0000, 0x1234_5678_9abc, u64::MAX] {
            let ids = IdSource { prefix: "req_1f".to_owned(), next: AtomicU64::new(n) };
            assert_eq!(ids.next(), format!("req_1f{n:06x}"));
        }
    }

    #[test]
    fn two_sources_made_at_once_hand_out_different_ids() {
        let (a, b) = (IdSource::new(), IdSource::new());
        let (x, y) = (a.next(), b.next());
        assert_ne!(x, y, "two replicas started together must not share ids");
        assert_eq!(x.len(), "req_".len() + 12 + 6);
    }
}
