//! Dates and durations as providers and configuration write them: Go-style durations
//! (`6m0s`), RFC 3339 timestamps, HTTP dates, and the calendar arithmetic behind them, which the
//! gateway's log lines and the tests' upstreams use too (only the mock upstream and the
//! gateway's build script, which do not link the engine, keep their own copy).
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use switchyard::time::{parse_duration, parse_http_date, parse_rfc3339};
//!
//! assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
//! let at = parse_rfc3339("1994-11-06T08:49:37Z");
//! assert_eq!(at, parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"));
//! assert_eq!(at, Some(UNIX_EPOCH + Duration::from_secs(784_111_777)));
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest duration the readers here return; a longer one is clamped to it, so that a
/// garbled value or a skewed clock costs a bounded pause instead of a hang. One day.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// A duration from a number of seconds, clamped to `0..=`[`MAX_DURATION`]:
/// `Duration::from_secs_f64` panics beyond its range, and an upstream header must never panic
/// a request.
pub(crate) fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.clamp(0.0, MAX_DURATION.as_secs_f64())).unwrap_or(MAX_DURATION)
}

/// Go-style durations as OpenAI sends them: `6m0s`, `1.5s`, `20ms`, `1h2m3.5s`, `250us`.
/// Clamped to [`MAX_DURATION`]; `None` when the text is not such a duration.
pub fn parse_duration(text: &str) -> Option<Duration> {
    duration_seconds(text).map(|total| seconds(total.min(MAX_DURATION.as_secs_f64())))
}

/// The seconds a Go-style duration says, unclamped (a configuration refuses what is too long
/// rather than shorten it unseen); `None` when the text is not such a duration.
pub fn duration_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let bytes = text.as_bytes();
    let mut total = 0f64;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let number: f64 = text[start..i].parse().ok()?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let scale = match &text[unit_start..i] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * scale;
    }
    total.is_finite().then_some(total)
}

/// RFC 3339 timestamps: `2025-01-01T00:00:30Z`, `2025-01-01T00:00:30.5+02:00`.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: u32 = date_parts.next()?.parse().ok()?;
    let day: u32 = date_parts.next()?.parse().ok()?;
    if date_parts.next().is_some() {
        return None;
    }
    let (clock, offset_seconds) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0i64)
    } else {
        let split = time.rfind(['+', '-'])?;
        let (clock, offset) = time.split_at(split);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = offset[1..].split_once(':')?;
        (clock, sign * (hours.parse::<i64>().ok()? * 3600 + minutes.parse::<i64>().ok()? * 60))
    };
    let mut clock_parts = clock.split(':');
    let hour: u32 = clock_parts.next()?.parse().ok()?;
    let minute: u32 = clock_parts.next()?.parse().ok()?;
    // Whole seconds and the fraction read apart: through an f64 of the whole timestamp the
    // fraction would lose its last digits (`.473797` read back as 473796964 ns).
    let second_text = clock_parts.next()?;
    let (second, fraction) = second_text.split_once('.').unwrap_or((second_text, ""));
    let second: u32 = second.parse().ok()?;
    if clock_parts.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let nanos = match fraction {
        "" => 0,
        digits if digits.bytes().all(|b| b.is_ascii_digit()) => digits
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(9)
            .fold(0u32, |n, b| n * 10 + u32::from(b - b'0')),
        _ => return None,
    };
    let days = days_from_civil(year, month, day)?;
    let whole = days
        .checked_mul(86_400)?
        .checked_add(i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second))?
        .checked_sub(offset_seconds)?;
    if !(0..=1_000_000_000_000).contains(&whole) {
        return None;
    }
    UNIX_EPOCH.checked_add(Duration::new(u64::try_from(whole).ok()?, nanos))
}

/// IMF-fixdate, the HTTP date: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.parse().ok()?;
    if parts.next()? != "GMT" || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    to_system_time(days.checked_mul(86_400)?.checked_add(hour * 3600 + minute * 60 + second)? as f64)
}

fn to_system_time(unix_seconds: f64) -> Option<SystemTime> {
    if !unix_seconds.is_finite() || !(0.0..=1e12).contains(&unix_seconds) {
        return None;
    }
    UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(unix_seconds).ok()?)
}

/// How long from `now` (seconds since the epoch) until the next midnight of a clock
/// `offset` seconds behind UTC (a full day at midnight itself): where a provider's daily
/// quota resets.
pub fn until_midnight(now: i64, offset: i64) -> Duration {
    let local = now - offset;
    let next_midnight = (local.div_euclid(86_400) + 1) * 86_400;
    Duration::from_secs(u64::try_from(next_midnight - local).unwrap_or(86_400))
}

/// The proleptic Gregorian date (year, month, day) of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`): the inverse of the parsing here, for whoever writes dates
/// (log lines, test upstreams' reset headers).
///
/// ```
/// use switchyard::time::civil_from_days;
/// assert_eq!(civil_from_days(0), (1970, 1, 1));
/// assert_eq!(civil_from_days(11_016), (2000, 2, 29));
/// ```
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `at` in RFC 3339, UTC, with microseconds: `2026-11-29T17:43:39.473797Z` (what
/// [`parse_rfc3339`] reads back).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let at = UNIX_EPOCH + Duration::from_micros(951_782_400_473_797);
/// assert_eq!(switchyard::time::rfc3339(at), "2000-02-29T00:00:00.473797Z");
/// assert_eq!(switchyard::time::parse_rfc3339("2000-02-29T00:00:00.473797Z"), Some(at));
/// ```
pub fn rfc3339(at: SystemTime) -> String {
    let mut out = Vec::with_capacity(27);
    write_rfc3339(&mut out, at);
    String::from_utf8(out).unwrap_or_default()
}

/// [`rfc3339`] appended to `out`, written digit by digit: the formatting machinery cost the
/// gateway's access line more than the rest of it.
pub fn write_rfc3339(out: &mut Vec<u8>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
    let time = seconds % 86_400;
    digits(out, u64::try_from(year).unwrap_or(0), 4);
    out.push(b'-');
    digits(out, u64::from(month), 2);
    out.push(b'-');
    digits(out, u64::from(day), 2);
    out.push(b'T');
    digits(out, time / 3600, 2);
    out.push(b':');
    digits(out, time / 60 % 60, 2);
    out.push(b':');
    digits(out, time % 60, 2);
    out.push(b'.');
    digits(out, u64::from(since.subsec_micros()), 6);
    out.push(b'Z');
}

/// The last `width` decimal digits of `value`, zero-padded.
fn digits(out: &mut Vec<u8>, mut value: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm), for years
/// 1970 to 9999; `None` for a date out of range.
///
/// ```
/// use switchyard::time::days_from_civil;
/// assert_eq!(days_from_civil(1970, 1, 1), Some(0));
/// assert_eq!(days_from_civil(2000, 2, 29), Some(11_016));
/// assert_eq!(days_from_civil(2000, 13, 1), None);
/// ```
pub fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || !(1970..=9999).contains(&year) {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_count_and_its_date_go_both_ways() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for days in (0..2_932_896).step_by(997) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), Some(days), "{year}-{month}-{day}");
        }
    }

    #[test]
    fn rfc3339_and_http_dates_agree_on_one_instant() {
        let a = parse_rfc3339("1994-11-06T08:49:37Z");
        let b = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_eq!(a, parse_rfc3339("1994-11-06T10:49:37+02:00"));
    }

    #[test]
    fn unix_epoch_is_day_zero() {
        assert_eq!(days_from_civil(1970, 1, 1), Some(0));
        assert_eq!(days_from_civil(2000, 3, 1), Some(11_017));
    }
}
