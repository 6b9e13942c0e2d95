//! What providers say about their allowance: Retry-After and the rate-limit headers, parsed
//! into one structure the router and the pacer use.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use switchyard::ratelimit::RateLimits;
//!
//! let headers = [("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "1.5s")];
//! let limits = RateLimits::from_headers(headers, SystemTime::now());
//! assert_eq!(limits.requests.unwrap().reset_after, Some(Duration::from_millis(1500)));
//! ```

use std::time::{Duration, SystemTime};

use crate::time::{parse_duration, parse_http_date, parse_rfc3339, seconds};

/// The longest reset or Retry-After believed; anything later is clamped to it, so a skewed
/// clock or a garbled header costs a bounded pause instead of a hang. The same bound as the
/// readers of [`crate::time`] keep.
pub const MAX_RESET: Duration = crate::time::MAX_DURATION;

/// One dimension of an allowance (requests, tokens, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Allowance {
    /// The most the window allows (`*-limit`); `None` when not stated or not a number.
    pub limit: Option<u64>,
    /// What is left of the window (`*-remaining`); 0 means spent until `reset_after`. `None` when
    /// not stated or not a number.
    pub remaining: Option<u64>,
    /// How long until the window refills, relative to when the headers were read.
    pub reset_after: Option<Duration>,
}

impl Allowance {
    fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset_after.is_none()
    }
}

/// A provider's stated allowance, from one response's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RateLimits {
    /// Requests (`x-ratelimit-*-requests`, `anthropic-ratelimit-requests-*`); `None` when no header
    /// of it was understood.
    pub requests: Option<Allowance>,
    /// Tokens, input and output together (`x-ratelimit-*-tokens`, `anthropic-ratelimit-tokens-*`);
    /// `None` when no header of it was understood.
    pub tokens: Option<Allowance>,
    /// Input tokens (`anthropic-ratelimit-input-tokens-*`); `None` when no header of it was
    /// understood.
    pub input_tokens: Option<Allowance>,
    /// Output tokens (`anthropic-ratelimit-output-tokens-*`); `None` when no header of it was
    /// understood.
    pub output_tokens: Option<Allowance>,
    /// `retry-after-ms` or `retry-after`, when present.
    pub retry_after: Option<Duration>,
}

impl RateLimits {
    /// Parses OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (durations like
    /// `6m0s`), Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
    /// {limit,remaining,reset}` (RFC 3339 instants) and Retry-After. Header names are matched
    /// case-insensitively; unparseable values are ignored.
    ///
    /// Instants (Anthropic's resets, a Retry-After date) are read against the answer's own
    /// `Date` header when the local clock is off from it by more than the header's one-second
    /// precision: the provider's clock set them, so a skewed local clock does not stretch or
    /// cut the wait, and an agreeing one loses nothing to the header's rounding.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>, now: SystemTime) -> Self {
        let mut reading = Reading::default();
        for (name, value) in headers {
            // HTTP libraries hand names over lowercased already; copy only when one is not.
            let name: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                name.to_ascii_lowercase().into()
            } else {
                name.into()
            };
            reading.header(&name, value.trim());
        }
        reading.finish(now)
    }

    /// The four dimensions, in a fixed order (requests, tokens, input tokens, output tokens).
    fn dimensions_mut(&mut self) -> [&mut Option<Allowance>; 4] {
        [&mut self.requests, &mut self.tokens, &mut self.input_tokens, &mut self.output_tokens]
    }

    /// Whether any header was understood.
    pub fn is_empty(&self) -> bool {
        *self == RateLimits::default()
    }

    /// When every spent dimension refills: the longest reset among dimensions whose
    /// `remaining` is 0. Used as a Retry-After when a 429 carries no other.
    pub fn spent_reset(&self) -> Option<Duration> {
        [self.requests, self.tokens, self.input_tokens, self.output_tokens]
            .into_iter()
            .flatten()
            .filter(|a| a.remaining == Some(0))
            .filter_map(|a| a.reset_after)
            .max()
    }
}

/// What [`RateLimits::from_headers`] has read so far: instants wait for the `Date` header,
/// which may come after them.
#[derive(Default)]
struct Reading<'a> {
    limits: RateLimits,
    retry_after_ms: Option<Duration>,
    retry_after: Option<&'a str>,
    /// The `Date` header, read only when an instant needs the provider's clock (most answers
    /// carry one and no instant).
    date: Option<&'a str>,
    /// Reset instants by dimension, resolved once every header has been read.
    reset_at: [Option<SystemTime>; 4],
}

impl<'a> Reading<'a> {
    /// One header, its name lowercased and its value trimmed.
    fn header(&mut self, name: &str, value: &'a str) {
        match name {
            "date" => self.date = Some(value),
            "retry-after-ms" => {
                self.retry_after_ms = value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(|ms| seconds((ms / 1000.0).min(MAX_RESET.as_secs_f64())));
            }
            "retry-after" => self.retry_after = Some(value),
            _ => {
                if let Some(rest) = name.strip_prefix("anthropic-ratelimit-") {
                    // Anthropic: {dimension}-{field}, resets as instants.
                    if let Some((dimension, field)) = rest.rsplit_once('-') {
                        self.allowance(dimension, field, value, true);
                    }
                } else if let Some(rest) = name.strip_prefix("x-ratelimit-") {
                    // OpenAI: {field}-{dimension}, resets as durations.
                    if let Some((field, dimension)) = rest.split_once('-') {
                        self.allowance(dimension, field, value, false);
                    }
                }
            }
        }
    }

    fn allowance(&mut self, dimension: &str, field: &str, value: &str, instants: bool) {
        let index = match dimension {
            "requests" => 0,
            "tokens" => 1,
            "input-tokens" => 2,
            "output-tokens" => 3,
            _ => return,
        };
        let slot = match index {
            0 => &mut self.limits.requests,
            1 => &mut self.limits.tokens,
            2 => &mut self.limits.input_tokens,
            _ => &mut self.limits.output_tokens,
        };
        let allowance = slot.get_or_insert_with(Allowance::default);
        match field {
            "limit" => allowance.limit = value.parse().ok(),
            "remaining" => allowance.remaining = value.parse().ok(),
            "reset" => {
                let duration = if instants { None } else { parse_duration(value) };
                match duration {
                    Some(duration) => allowance.reset_after = Some(clamp(duration)),
                    None => self.reset_at[index] = parse_rfc3339(value),
                }
            }
            _ => {}
        }
    }

    fn finish(mut self, now: SystemTime) -> RateLimits {
        let instants = self.reset_at.iter().any(Option::is_some) || self.retry_after.is_some();
        let date = if instants { self.date.and_then(parse_http_date) } else { None };
        let clock = provider_clock(date, now);
        for (slot, instant) in self.limits.dimensions_mut().into_iter().zip(self.reset_at) {
            if let (Some(allowance), Some(at)) = (slot.as_mut(), instant) {
                allowance.reset_after = Some(clamp(until(at, clock)));
            }
            if slot.is_some_and(|a| a.is_empty()) {
                *slot = None;
            }
        }
        self.limits.retry_after =
            self.retry_after_ms.or_else(|| self.retry_after.and_then(|v| parse_retry_after(v, clock)));
        self.limits
    }
}

/// The clock to read a provider's instants against: its `Date` when ours disagrees with it
/// beyond the second `Date` is rounded to.
fn provider_clock(date: Option<SystemTime>, now: SystemTime) -> SystemTime {
    let Some(date) = date else { return now };
    let apart = date.duration_since(now).or_else(|_| now.duration_since(date)).unwrap_or_default();
    if apart > Duration::from_secs(1) { date } else { now }
}

fn clamp(duration: Duration) -> Duration {
    duration.min(MAX_RESET)
}

fn until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now).unwrap_or(Duration::ZERO)
}

/// Retry-After: delay-seconds (fractions tolerated) or an HTTP date; clamped to [`MAX_RESET`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| self::seconds(seconds.min(MAX_RESET.as_secs_f64())));
    }
    parse_http_date(value).map(|at| clamp(until(at, now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_header_values_are_clamped_or_ignored_never_a_panic() {
        let now = SystemTime::now();
        let headers = [
            ("retry-after-ms", "1e300"),
            ("anthropic-ratelimit-requests-reset", "99999999999-01-01T00:00:00Z"),
            ("x-ratelimit-reset-tokens", "99999999999999999999h"),
        ];
        let limits = RateLimits::from_headers(headers, now);
        assert_eq!(limits.retry_after, Some(MAX_RESET));
        assert_eq!(limits.requests, None, "an impossible instant is ignored");
        assert_eq!(limits.tokens.and_then(|t| t.reset_after), Some(MAX_RESET));
        assert_eq!(parse_retry_after("1e308", now), Some(MAX_RESET));
        assert_eq!(parse_http_date("Sun, 06 Nov 99999999999 08:49:37 GMT"), None);
    }

    #[test]
    fn reset_instants_are_read_against_the_answers_date_not_a_skewed_local_clock() {
        let provider_now = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let headers = [
            ("date", "Thu, 01 Jan 2026 00:00:00 GMT"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:03Z"),
            ("retry-after", "Thu, 01 Jan 2026 00:00:02 GMT"),
        ];
        for skew in [Duration::ZERO, Duration::from_secs(30)] {
            for local in [provider_now + skew, provider_now - skew] {
                let limits = RateLimits::from_headers(headers, local);
                assert_eq!(limits.requests.unwrap().reset_after, Some(Duration::from_secs(3)), "{skew:?}");
                assert_eq!(limits.retry_after, Some(Duration::from_secs(2)), "{skew:?}");
            }
        }
        // Without a Date the local clock is all there is: 30 s ahead, the reset looks passed.
        let limits =
            RateLimits::from_headers(headers[1..3].iter().copied(), provider_now + Duration::from_secs(30));
        assert_eq!(limits.requests.unwrap().reset_after, Some(Duration::ZERO));
    }
}
