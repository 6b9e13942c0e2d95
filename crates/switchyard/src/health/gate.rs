//! The gate: whether a target may be called now, and with which credential.
//!
//! The checks run in order and the first that refuses decides: exhaustion, the circuit
//! breaker, the health TTL, then the choice of a credential.

use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{self, Admission, BreakerInput};
use super::{CredentialRecord, HealthEvent, HealthSettings, HealthStatus, Records, TargetRecord, cooldown};
use crate::Target;
use crate::credential::CredentialId;

/// May a target be called now?
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Yes, with the credential at index `credential` of the provider's list (0 for a provider
    /// without credentials). `probe` is set when the call is a half-open circuit's probe: if
    /// its outcome says nothing about the provider, give the slot back with
    /// [`HealthBoard::release_probe`](super::HealthBoard::release_probe).
    Pass {
        /// The index of the credential to call with.
        credential: usize,
        /// Whether this call is the half-open circuit's probe.
        probe: bool,
    },
    /// No: skip the target. `exhausted` when it (or every credential of it) is out of quota,
    /// so the skip reads as a quota error rather than ill health; `until` is when the verdict
    /// expires, when known; `reason` says why, for the attempt trail.
    Skip {
        /// Out of quota, rather than unhealthy.
        exhausted: bool,
        /// When the verdict expires, when known.
        until: Option<Instant>,
        /// Why, for the attempt trail.
        reason: String,
    },
}

impl Gate {
    fn skip(exhausted: bool, until: Option<Instant>, reason: String) -> Self {
        Gate::Skip { exhausted, until, reason }
    }
}

/// How the router asks for a gate decision.
#[derive(Debug, Clone, Copy)]
pub struct GateQuery<'a> {
    /// The target to call.
    pub target: &'a Target,
    /// Its provider's credential ids, in the provider's order; [`Gate::Pass`] indexes them.
    pub credentials: &'a [CredentialId],
    /// `None` turns the TTL gate off (the breaker and exhaustion still apply).
    pub health_ttl: Option<Duration>,
    /// The request named this target: exhausted targets and credentials are tried anyway.
    pub explicit: bool,
    /// Call even if gated (every target was gated and this one recovers first).
    pub force: bool,
    /// Credentials already tried by this request on this target (an auth failure moves on).
    /// Bit `i` excludes credential `i`; credentials past the 64th cannot be excluded.
    pub exclude: u64,
    /// The order to consider the credentials in (indexes into `credentials`): priorities and
    /// key rotation. Empty for their configured order.
    pub order: &'a [usize],
    /// How long the call may last (its limit within the request's deadline): a probe holds its
    /// half-open slot that long at most, should its caller go away without an outcome, and no
    /// second probe goes while it runs.
    pub probe_lease: Duration,
}

/// The gate rules, on loaded records. Mutates only to move an open circuit to half-open, to
/// take a probe slot, and to let one call at a time try a refused key again, and only when
/// the call will really be made.
pub(super) fn decide(
    settings: &HealthSettings,
    records: &mut Records,
    query: &GateQuery<'_>,
    now: Instant,
) -> (Gate, Vec<HealthEvent>) {
    let (credential, probe) = match check(settings, records, query, now) {
        Ok(pass) => pass,
        Err(skip) => return (skip, Vec::new()),
    };
    let mut events = Vec::new();
    if probe {
        let take = BreakerInput::TakeProbe { now, lease: query.probe_lease };
        breaker::drive(&mut records.target, query.target, take, settings, &mut events);
    }
    // A refused key whose bench has passed is tried by one call at a time: the others wait
    // out the call's limit (its outcome benches the key again or restores it), not all send
    // it at once.
    if let Some(key) = records.credentials.get_mut(credential)
        && key.status == HealthStatus::Unauthorized
    {
        key.retry_until = Some(now + query.probe_lease.min(super::failure::AUTH_REST));
    }
    (Gate::Pass { credential, probe }, events)
}

/// Every check, in order: the credential to call with and whether the call is a probe, or the
/// skip of the first check that refused.
fn check(
    settings: &HealthSettings,
    records: &Records,
    query: &GateQuery<'_>,
    now: Instant,
) -> Result<(usize, bool), Gate> {
    let target = &records.target;
    check_exhaustion(target, query, now)?;
    let probe = check_breaker(settings, target, query, now)?;
    // A probe is how an open circuit learns whether the target is back: a TTL must not stop it.
    if !probe {
        check_health_ttl(target, query, now)?;
    }
    let credential = choose_credential(records, query, probe, now)?;
    Ok((credential, probe))
}

fn check_exhaustion(target: &TargetRecord, query: &GateQuery<'_>, now: Instant) -> Result<(), Gate> {
    // Exhaustion lifts by itself once the provider's reset time has passed.
    let exhausted_now =
        target.status == HealthStatus::Exhausted && target.retry_until.is_none_or(|u| now < u);
    if exhausted_now && !query.explicit && !query.force {
        return Err(Gate::skip(true, target.retry_until, format!("exhausted: {}", target.reason)));
    }
    Ok(())
}

/// Whether the breaker lets the call through, and as a probe.
fn check_breaker(
    settings: &HealthSettings,
    target: &TargetRecord,
    query: &GateQuery<'_>,
    now: Instant,
) -> Result<bool, Gate> {
    match target.breaker.admission(settings, now, query.force) {
        Admission::Call => Ok(false),
        Admission::Probe => Ok(true),
        Admission::Open { until } => {
            Err(Gate::skip(false, Some(until), format!("circuit open: {}", target.reason)))
        }
        Admission::ProbeInFlight { until } => {
            Err(Gate::skip(false, Some(until), "circuit half-open: probe in flight".to_owned()))
        }
    }
}

/// A target that just failed rests for the route's health TTL, or until the provider's
/// Retry-After when that is later.
fn check_health_ttl(target: &TargetRecord, query: &GateQuery<'_>, now: Instant) -> Result<(), Gate> {
    if !query.force
        && let Some(ttl) = query.health_ttl
        && target.status == HealthStatus::TemporarilyUnavailable
        && let Some(failed_at) = target.failed_at
    {
        let until = (failed_at + ttl).max(target.retry_until.unwrap_or(failed_at));
        if now < until {
            return Err(Gate::skip(false, Some(until), format!("unhealthy: {}", target.reason)));
        }
    }
    Ok(())
}

/// The credential to call with. A resting one (for every model, or for this target's) serves
/// only a forced call, a probe, or a call with the TTL gate off (such as a retry within one
/// request).
fn choose_credential(
    records: &Records,
    query: &GateQuery<'_>,
    probe: bool,
    now: Instant,
) -> Result<usize, Gate> {
    match pick_credential(&records.credentials, &records.target.key_cooldowns, query, now) {
        Pick::Fresh(index) => Ok(index),
        Pick::Resting(index, _) if query.force || probe || query.health_ttl.is_none() => Ok(index),
        Pick::Resting(_, until) => {
            Err(Gate::skip(false, Some(until), "every credential is cooling down".to_owned()))
        }
        Pick::None { exhausted: true } => {
            Err(Gate::skip(true, None, "every credential is exhausted".to_owned()))
        }
        Pick::None { exhausted: false } => Err(Gate::skip(
            false,
            None,
            "no usable credential: every key was refused as unauthorized".to_owned(),
        )),
    }
}

enum Pick {
    Fresh(usize),
    /// Every usable credential is cooling down; this one rests the shortest.
    Resting(usize, Instant),
    None {
        exhausted: bool,
    },
}

/// The first usable credential in the provider's order that is not resting (for every model,
/// or for this target's in `model_rests`), else the one that rests the shortest. Unauthorized
/// ones are usable once their bench has passed, exhausted ones only when the request named the
/// target (or their reset has passed).
fn pick_credential(
    credentials: &[CredentialRecord],
    model_rests: &[(CredentialId, Instant)],
    query: &GateQuery<'_>,
    now: Instant,
) -> Pick {
    if credentials.is_empty() {
        return Pick::Fresh(0);
    }
    let mut resting: Option<(usize, Instant)> = None;
    let mut exhausted = false;
    let natural = 0..credentials.len();
    let order: &mut dyn Iterator<Item = usize> =
        if query.order.is_empty() { &mut natural.into_iter() } else { &mut query.order.iter().copied() };
    for (index, c) in order.filter_map(|index| Some((index, credentials.get(index)?))) {
        if index < 64 && query.exclude & (1 << index) != 0 {
            continue;
        }
        match c.status {
            HealthStatus::Unauthorized if c.retry_until.is_none_or(|u| now < u) => continue,
            HealthStatus::Exhausted if !query.explicit && c.retry_until.is_none_or(|u| now < u) => {
                exhausted = true;
                continue;
            }
            _ => {}
        }
        match cooldown::rests_until(c, model_rests, query.credentials.get(index)) {
            Some(until) if now < until => {
                if resting.is_none_or(|(_, best)| until < best) {
                    resting = Some((index, until));
                }
            }
            _ => return Pick::Fresh(index),
        }
    }
    match resting {
        Some((index, until)) => Pick::Resting(index, until),
        None => Pick::None { exhausted },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Breaker;

    const TTL: Duration = Duration::from_secs(10);

    struct Case {
        t0: Instant,
        target: Target,
    }

    impl Case {
        fn new() -> Self {
            Self { t0: Instant::now(), target: "p:m".parse().unwrap() }
        }

        fn at(&self, secs: u64) -> Instant {
            self.t0 + Duration::from_secs(secs)
        }

        fn query(&self) -> GateQuery<'_> {
            GateQuery {
                target: &self.target,
                credentials: &[],
                order: &[],
                health_ttl: Some(TTL),
                explicit: false,
                force: false,
                exclude: 0,
                probe_lease: Duration::from_secs(30),
            }
        }

        /// The gate at second 100.
        fn decide(&self, records: &mut Records, query: GateQuery<'_>) -> (Gate, Vec<HealthEvent>) {
            decide(&HealthSettings::default(), records, &query, self.at(100))
        }
    }

    fn records(target: TargetRecord, credentials: Vec<CredentialRecord>) -> Records {
        Records { target, credentials }
    }

    fn skipped_until(gate: &Gate) -> (bool, Option<Instant>) {
        match gate {
            Gate::Skip { exhausted, until, .. } => (*exhausted, *until),
            Gate::Pass { .. } => panic!("passed: {gate:?}"),
        }
    }

    fn status(status: HealthStatus) -> CredentialRecord {
        CredentialRecord { status, ..CredentialRecord::default() }
    }

    fn resting(until: Instant) -> CredentialRecord {
        CredentialRecord { cooldown_until: Some(until), ..CredentialRecord::default() }
    }

    #[test]
    fn exhaustion_decides_first_until_its_reset_unless_the_target_was_named() {
        let case = Case::new();
        let exhausted = TargetRecord {
            status: HealthStatus::Exhausted,
            retry_until: Some(case.at(160)),
            breaker: Breaker::Open { until: case.at(130) },
            ..TargetRecord::default()
        };
        let mut r = records(exhausted.clone(), vec![]);
        assert_eq!(skipped_until(&case.decide(&mut r, case.query()).0), (true, Some(case.at(160))));

        let named = GateQuery { explicit: true, ..case.query() };
        let (_, until) = skipped_until(&case.decide(&mut r, named).0);
        assert_eq!(until, Some(case.at(130)), "named: the open circuit decides next");

        let reset_passed =
            TargetRecord { retry_until: Some(case.at(90)), breaker: Breaker::Closed, ..exhausted };
        let mut r = records(reset_passed, vec![]);
        assert_eq!(case.decide(&mut r, case.query()).0, Gate::Pass { credential: 0, probe: false });
    }

    #[test]
    fn an_open_circuit_refuses_until_its_time_is_over_then_lets_one_probe_past_ttl_and_rest() {
        let case = Case::new();
        let open = |until| TargetRecord {
            status: HealthStatus::TemporarilyUnavailable,
            failed_at: Some(case.at(95)),
            breaker: Breaker::Open { until },
            ..TargetRecord::default()
        };
        let mut r = records(open(case.at(130)), vec![]);
        assert_eq!(skipped_until(&case.decide(&mut r, case.query()).0), (false, Some(case.at(130))));
        let forced = GateQuery { force: true, ..case.query() };
        assert_eq!(case.decide(&mut r, forced).0, Gate::Pass { credential: 0, probe: false });
        assert_eq!(r.target.breaker, Breaker::Open { until: case.at(130) }, "a forced call takes no slot");

        // The TTL (failed at 95) and the resting key would refuse an ordinary call.
        let mut r = records(open(case.at(100)), vec![resting(case.at(120))]);
        let (gate, events) = case.decide(&mut r, case.query());
        assert_eq!(gate, Gate::Pass { credential: 0, probe: true });
        assert_eq!(events, [HealthEvent::CircuitHalfOpen { target: case.target.clone() }]);
        assert_eq!(r.target.breaker, Breaker::HalfOpen { probes: 1, lease_until: case.at(130) });
        let (_, until) = skipped_until(&case.decide(&mut r, case.query()).0);
        assert_eq!(until, Some(case.at(130)), "the one probe slot is taken");
    }

    #[test]
    fn a_failed_target_rests_for_the_ttl_or_the_providers_longer_wait() {
        let case = Case::new();
        let failed = |retry_until| TargetRecord {
            status: HealthStatus::TemporarilyUnavailable,
            failed_at: Some(case.at(95)),
            retry_until,
            ..TargetRecord::default()
        };
        let mut r = records(failed(None), vec![]);
        assert_eq!(skipped_until(&case.decide(&mut r, case.query()).0), (false, Some(case.at(105))));
        let mut r = records(failed(Some(case.at(140))), vec![]);
        assert_eq!(skipped_until(&case.decide(&mut r, case.query()).0), (false, Some(case.at(140))));
        let no_ttl = GateQuery { health_ttl: None, ..case.query() };
        assert_eq!(case.decide(&mut r, no_ttl).0, Gate::Pass { credential: 0, probe: false });
    }

    #[test]
    fn a_key_resting_for_this_model_gives_way_to_its_sibling_and_serves_the_other_models() {
        let case = Case::new();
        let key =
            |n: &str| CredentialId::derive("openai", "http://x", Some(&crate::credential::Secret::new(n)));
        let ids = [key("sk-first"), key("sk-second")];
        let query = GateQuery { credentials: &ids, ..case.query() };
        let pass = |credential| Gate::Pass { credential, probe: false };
        let fresh = || vec![CredentialRecord::default(), CredentialRecord::default()];
        let limited = |rests| TargetRecord { key_cooldowns: rests, ..TargetRecord::default() };

        let mut r = records(limited(vec![(ids[0].clone(), case.at(130))]), fresh());
        assert_eq!(case.decide(&mut r, query).0, pass(1), "the sibling, for this model");
        let mut other_model = records(TargetRecord::default(), fresh());
        assert_eq!(case.decide(&mut other_model, query).0, pass(0), "the key serves other models");

        // The second key rests for every model until 120: the shorter of the two rests decides.
        let mut r = records(
            limited(vec![(ids[0].clone(), case.at(130))]),
            vec![CredentialRecord::default(), resting(case.at(120))],
        );
        assert_eq!(skipped_until(&case.decide(&mut r, query).0), (false, Some(case.at(120))));
        let mut ended = records(limited(vec![(ids[0].clone(), case.at(90))]), fresh());
        assert_eq!(case.decide(&mut ended, query).0, pass(0), "a rest that ended rests nothing");
    }

    #[test]
    fn the_first_fresh_usable_credential_is_picked_else_the_one_resting_shortest() {
        let case = Case::new();
        let pick = |credentials: Vec<CredentialRecord>, query: GateQuery<'_>| {
            case.decide(&mut records(TargetRecord::default(), credentials), query).0
        };
        let pass = |credential| Gate::Pass { credential, probe: false };
        let q = case.query();
        let unauthorized = || status(HealthStatus::Unauthorized);
        let spent = || status(HealthStatus::Exhausted);

        assert_eq!(pick(vec![resting(case.at(120)), status(HealthStatus::Available)], q), pass(1));
        assert_eq!(pick(vec![unauthorized(), spent(), CredentialRecord::default()], q), pass(2));
        assert_eq!(pick(vec![CredentialRecord::default(), CredentialRecord::default()], q), pass(0));
        let tried_first = GateQuery { exclude: 1, ..q };
        assert_eq!(
            pick(vec![CredentialRecord::default(), CredentialRecord::default()], tried_first),
            pass(1)
        );
        let named = GateQuery { explicit: true, ..q };
        assert_eq!(pick(vec![unauthorized(), spent()], named), pass(1));

        let both_resting = vec![resting(case.at(130)), resting(case.at(120))];
        assert_eq!(skipped_until(&pick(both_resting.clone(), q)), (false, Some(case.at(120))));
        assert_eq!(pick(both_resting, GateQuery { health_ttl: None, ..q }), pass(1));
        assert_eq!(skipped_until(&pick(vec![spent(), unauthorized()], q)), (true, None));
        assert_eq!(skipped_until(&pick(vec![unauthorized()], q)), (false, None));
    }
}
