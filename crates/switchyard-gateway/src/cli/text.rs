//! Numbers as people read them: durations rounded with their unit, settings as the
//! configuration writes them, counts with the right plural.

use std::time::Duration;

/// A measured duration for people: `0.4 ms`, `96.3 ms`, `412 ms`, `1.2 s`, `42 s`, `2.5 min`.
pub(crate) fn duration_text(duration: Duration) -> String {
    ms_text(duration.as_secs_f64() * 1000.0)
}

/// [`duration_text`] of a number of milliseconds (as the gateway's JSON gives them).
pub(crate) fn ms_text(ms: f64) -> String {
    if ms < 100.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms < 120_000.0 {
        format!("{:.0} s", ms / 1000.0)
    } else {
        format!("{:.1} min", ms / 60_000.0)
    }
}

/// A configured duration as the configuration writes it: `250ms`, `30s`, `5m`, `1h`, `0s`.
pub(crate) fn setting(duration: Duration) -> String {
    let ms = duration.as_millis();
    if Duration::from_millis(ms as u64) != duration {
        return duration_text(duration);
    }
    match ms {
        0 => "0s".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// `1 attempt`, `2 attempts`: a count and its noun, singular or plural.
pub(crate) fn counted(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let ms = Duration::from_micros;
        assert_eq!(duration_text(ms(400)), "0.4 ms");
        assert_eq!(duration_text(ms(96_287)), "96.3 ms");
        assert_eq!(duration_text(ms(412_400)), "412 ms");
        assert_eq!(duration_text(ms(1_234_567)), "1.2 s");
        assert_eq!(duration_text(Duration::from_secs(42)), "42 s");
        assert_eq!(duration_text(Duration::from_secs(150)), "2.5 min");
    }

    #[test]
    fn settings_read_as_the_configuration_writes_them() {
        assert_eq!(setting(Duration::from_millis(250)), "250ms");
        assert_eq!(setting(Duration::from_secs(75)), "75s");
        assert_eq!(setting(Duration::from_secs(300)), "5m");
        assert_eq!(setting(Duration::from_secs(3600)), "1h");
        assert_eq!(setting(Duration::ZERO), "0s");
        assert_eq!(setting(Duration::from_micros(1500)), "1.5 ms");
    }

    #[test]
    fn counts_take_the_plural_past_one() {
        assert_eq!(counted(1, "attempt"), "1 attempt");
        assert_eq!(
            (counted(0, "attempt"), counted(2, "attempt")),
            ("0 attempts".into(), "2 attempts".into())
        );
    }
}
