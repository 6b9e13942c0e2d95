//! Property tests: backoff bounds and target parsing.

use std::time::Duration;

use proptest::prelude::*;
use switchyard::Target;
use switchyard::backoff::{backoff, retry_delay};
use switchyard::route::Retry;

proptest! {
    #[test]
    fn backoff_never_exceeds_backoff_max(
        base_ms in 1u64..5_000,
        max_ms in 1u64..120_000,
        retry_number in 1u32..100,
        unit in 0.0f64..1.0,
    ) {
        let retry = Retry {
            backoff_base: Duration::from_millis(base_ms.min(max_ms)),
            backoff_max: Duration::from_millis(max_ms),
            ..Retry::default()
        };
        prop_assert!(backoff(&retry, retry_number, unit) <= retry.backoff_max);
    }

    #[test]
    fn backoff_ceiling_doubles_until_the_cap(base_ms in 1u64..1_000, retry_number in 1u32..10) {
        let retry = Retry {
            backoff_base: Duration::from_millis(base_ms),
            backoff_max: Duration::from_secs(3600),
            ..Retry::default()
        };
        // A unit just under 1 gives (almost) the ceiling: base × 2^(n-1).
        let ceiling = Duration::from_millis(base_ms) * 2u32.pow(retry_number - 1);
        let near = backoff(&retry, retry_number, 0.999_999);
        prop_assert!(near <= ceiling && near >= ceiling.mul_f64(0.999));
    }

    #[test]
    fn retry_delay_is_never_below_retry_after(
        retry_number in 1u32..20,
        unit in 0.0f64..1.0,
        retry_after_ms in 0u64..600_000,
    ) {
        let retry = Retry::default();
        let retry_after = Duration::from_millis(retry_after_ms);
        let delay = retry_delay(&retry, retry_number, unit, Some(retry_after));
        prop_assert!(delay >= retry_after);
        prop_assert!(delay <= retry_after.max(retry.backoff_max));
    }

    #[test]
    fn a_target_splits_at_the_first_colon(
        provider in "[a-z0-9_.-]{1,12}",
        model in "[A-Za-z0-9_.:/-]{1,24}",
    ) {
        let target: Target = format!("{provider}:{model}").parse().unwrap();
        prop_assert_eq!(target.provider(), provider.as_str());
        prop_assert_eq!(target.model(), model.as_str());
        prop_assert_eq!(target.to_string(), format!("{provider}:{model}"));
    }

    #[test]
    fn text_without_both_parts_is_rejected(text in "[^:]{0,20}") {
        prop_assert!(text.parse::<Target>().is_err());
        let empty_model = format!("{text}:");
        prop_assert!(empty_model.parse::<Target>().is_err());
        let empty_provider = format!(":{text}");
        prop_assert!(empty_provider.parse::<Target>().is_err());
    }

    #[test]
    fn any_text_parses_or_fails_without_panicking(text in ".{0,40}") {
        let _ = text.parse::<Target>();
    }
}
