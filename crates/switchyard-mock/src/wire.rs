//! Small formatting helpers shared by the dialects: JSON strings, ids, clocks and text splitting.
//! Answers are formatted by hand instead of through `serde_json::Value` because the `ok` path must
//! stay far cheaper than any gateway in front of it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends `s` as a JSON string literal, quotes included.
pub(crate) fn push_json_str(buf: &mut String, s: &str) {
    buf.push('"');
    push_json_escaped(buf, s);
    buf.push('"');
}

/// Appends `s` escaped for the inside of a JSON string literal, without quotes, so a literal can
/// be assembled from several pieces without an intermediate string.
pub(crate) fn push_json_escaped(buf: &mut String, s: &str) {
    let mut start = 0;
    for (i, byte) in s.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        buf.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(buf, "\\u{byte:04x}");
        } else {
            buf.push_str(escape);
        }
        start = i + 1;
    }
    buf.push_str(&s[start..]);
}

/// A process-wide counter for response ids, so every answer carries a distinct id.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Formats Unix seconds as an RFC 3339 UTC timestamp, the form of Anthropic's rate-limit resets.
pub(crate) fn rfc3339(unix: u64) -> String {
    let days = unix / 86_400;
    let secs = unix % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Howard Hinnant's days-to-civil algorithm, for days since 1970-01-01 (no date crate needed).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Splits `s` into `n` consecutive pieces of near-equal length on char boundaries; their
/// concatenation is `s`. When `n` exceeds the number of chars some pieces are empty.
pub(crate) fn split_even(s: &str, n: u32) -> Vec<&str> {
    let n = n.max(1) as usize;
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len())).collect();
    let chars = bounds.len() - 1;
    (0..n).map(|k| &s[bounds[k * chars / n]..bounds[(k + 1) * chars / n]]).collect()
}

/// Encodes bytes as standard base64 with padding (embeddings' `encoding_format: "base64"`).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut buf = String::new();
        push_json_str(&mut buf, "a\"b\\c\nd\u{1}é");
        assert_eq!(buf, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn pieces_concatenate_to_the_text() {
        assert_eq!(split_even("abcdefgh", 4), ["ab", "cd", "ef", "gh"]);
        assert_eq!(split_even("héllo", 2).concat(), "héllo");
        assert_eq!(split_even("ab", 4).concat(), "ab");
        assert_eq!(split_even("ab", 4).len(), 4);
    }

    #[test]
    fn timestamps_and_base64_match_known_values() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_755_780_059), "2025-08-21T12:40:59Z");
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
    }
}
