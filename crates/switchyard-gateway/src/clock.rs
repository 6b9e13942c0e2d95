//! The wall clock as the wire formats write it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in whole seconds since the Unix epoch (a response's `created`).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}
