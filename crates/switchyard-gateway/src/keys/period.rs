//! A budget's period: the UTC day or the calendar month (UTC) a spend counts in, and when it
//! resets.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a budget runs before it starts again (`budget.per`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// A UTC day: it resets at midnight UTC.
    Day,
    /// A calendar month in UTC: it resets at 00:00 UTC on the first.
    Month,
}

impl Period {
    /// `day` or `month`, as the file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// Whether the window named `id` is one of this kind of period (`d…` a day's, `m…` a
    /// month's).
    pub(crate) fn names(self, id: &str) -> bool {
        id.starts_with(match self {
            Period::Day => 'd',
            Period::Month => 'm',
        })
    }

    /// The period `at` falls in.
    pub(crate) fn at(self, at: SystemTime) -> Window {
        let days = (at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / 86_400) as i64;
        let (year, month, day) = switchyard::time::civil_from_days(days);
        let (id, next) = match self {
            Period::Day => (format!("d{year:04}{month:02}{day:02}"), days + 1),
            Period::Month => {
                let (y, m) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
                // Within the calendar's range for any date a clock gives.
                let first = switchyard::time::days_from_civil(y, m, 1).unwrap_or(days + 1);
                (format!("m{year:04}{month:02}"), first)
            }
        };
        let resets = UNIX_EPOCH + Duration::from_secs(u64::try_from(next).unwrap_or(0) * 86_400);
        Window { id, resets }
    }
}

/// One period: its name in Redis (`d20261204`, `m202612`) and when the next one begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    pub id: String,
    pub resets: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        switchyard::time::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn a_day_resets_at_the_next_utc_midnight() {
        let window = Period::Day.at(at("2026-12-04T23:06:33Z"));
        assert_eq!(window.id, "d20261204");
        assert_eq!(window.resets, at("2026-12-05T00:00:00Z"));
    }

    #[test]
    fn a_month_resets_on_the_first_of_the_next_and_december_turns_the_year() {
        let window = Period::Month.at(at("2026-12-31T23:59:59Z"));
        assert_eq!(window.id, "m202612");
        assert_eq!(window.resets, at("2027-01-01T00:00:00Z"));
        assert_eq!(Period::Month.at(at("2028-02-10T00:00:00Z")).resets, at("2028-03-01T00:00:00Z"));
    }
}
