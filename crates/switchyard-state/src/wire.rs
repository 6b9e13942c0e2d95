//! What of a record is shared, and how it crosses to Redis and back.
//!
//! A record is shared as a Redis hash of short fields. Times never cross as this host's
//! clock: a replica sends each time relative to its own now (milliseconds, signed), the Lua
//! script adds Redis's `TIME`, and a replica reading a record maps each time back through the
//! server's now that came with it. Two replicas whose clocks disagree therefore agree on every
//! deadline.
//!
//! | field    | target                              | credential              |
//! |----------|-------------------------------------|-------------------------|
//! | `st`     | status                              | status                  |
//! | `re`     | reason                              | reason                  |
//! | `since`  | when the status changed             | same                    |
//! | `failed` | last gating failure (TTL runs from) |                         |
//! | `retry`  | provider's reset / Retry-After      | quota reset             |
//! | `cool`   |                                     | cooldown end            |
//! | `br`     | `closed`, `open`, `half_open`       |                         |
//! | `bu`     | open until, or the probe's lease end |                        |
//! | `ro`     | failed probes in a row              |                         |
//! | `pr`     | the replica that moved the breaker  |                         |
//! | `gen`    | the write's fleet-wide sequence number                        |
//! | `by`     | the replica that wrote last                                   |
//!
//! A (credential, model) cooldown, a key resting for one target's model after a rate limit of
//! the model, is a record of its own (`k:<credential id>:<provider>:<model>`, fields `cool`,
//! `gen`, `by`), merged and cleared as the others are; in memory it lives in the target's
//! record ([`TargetRecord::key_cooldowns`]), and what the target's own record does (a put, a
//! clear, a forget) leaves it alone. Replicas that predate it skip the name.
//!
//! Consecutive failures are not shared: each replica counts its own, and the circuit's
//! opening is what the fleet shares (docs/ARCHITECTURE.md says why).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use switchyard::Target;
use switchyard::credential::CredentialId;
use switchyard::health::{Breaker, CredentialRecord, HealthStatus, TargetRecord};
use tokio::time::Instant;

/// How long a replica that did not open a circuit waits past its open time before it probes:
/// the replica that opened it probes first, so the fleet sends one probe, not one per replica.
pub const PROBE_HEAD_START: Duration = Duration::from_secs(1);

/// The breaker field of a half-open circuit whose probe another replica holds: every slot
/// counts as taken here until the lease ends.
const REMOTE_PROBES: u32 = u32::MAX;

/// What a shared record is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A target's record: `t:<provider>:<model>`.
    Target(Target),
    /// A credential's record: `c:<id>`, the non-secret id.
    Credential(CredentialId),
    /// A key resting for one target's model: `k:<credential id>:<target>`.
    KeyCooldown {
        /// The key, by its non-secret id.
        credential: CredentialId,
        /// The target whose model it rests for.
        target: Target,
    },
}

impl Key {
    /// The name under the prefix.
    pub fn name(&self) -> String {
        match self {
            Key::Target(target) => format!("t:{target}"),
            Key::Credential(id) => format!("c:{id}"),
            Key::KeyCooldown { credential, target } => format!("k:{credential}:{target}"),
        }
    }

    /// The key a name stands for; `None` for a name no replica writes.
    pub fn parse(name: &str) -> Option<Key> {
        if let Some(target) = name.strip_prefix("t:") {
            return Target::from_str(target).ok().map(Key::Target);
        }
        if let Some(rest) = name.strip_prefix("k:") {
            let (id, target) = rest.split_once(':')?;
            let credential = credential_id(id)?;
            return Target::from_str(target).ok().map(|target| Key::KeyCooldown { credential, target });
        }
        name.strip_prefix("c:").and_then(credential_id).map(Key::Credential)
    }
}

/// The credential id `id` names, if it is one (short, letters and digits).
fn credential_id(id: &str) -> Option<CredentialId> {
    let valid = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then(|| serde_json::from_value(serde_json::Value::String(id.to_owned())).ok()).flatten()
}

/// One field's value as a replica sends it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text: a status, a reason, a breaker state.
    Text(Arc<str>),
    /// A time of this process, sent relative to the moment of sending; `None` clears it.
    At(Option<Instant>),
    /// A count.
    Count(u32),
}

impl Value {
    /// The value as the script receives it: times as signed milliseconds from `now`, rounded
    /// away from now so that a deadline is never shortened by the rounding.
    pub fn encode(&self, now: Instant) -> String {
        match self {
            Value::Text(text) => text.to_string(),
            Value::Count(count) => count.to_string(),
            Value::At(None) => String::new(),
            Value::At(Some(at)) if *at >= now => ceil_millis(*at - now).to_string(),
            Value::At(Some(at)) => format!("-{}", (now - *at).as_millis()),
        }
    }
}

fn ceil_millis(d: Duration) -> u128 {
    d.as_micros().div_ceil(1000)
}

/// What one update of the health board changed in a shared record.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// These fields changed; the script merges them (deadlines never shorten).
    Put(Fields),
    /// The record recovered: clear the shared one unless it is newer than what this replica
    /// knew.
    Clear,
    /// An operator forgot the record.
    Reset,
}

/// A record's fields, by name, as the script reads them.
pub type Fields = Vec<(&'static str, Value)>;

/// The fields every put carries whole, whatever moved: the status with its reason and time,
/// then `times`. A record gone from Redis meanwhile (expired, cleared, lost) is then written
/// whole again rather than as a fragment.
fn status_and_times(
    status: HealthStatus,
    reason: &Arc<str>,
    since: Option<Instant>,
    times: [(&'static str, Option<Instant>); 2],
) -> Fields {
    let mut fields = vec![
        ("st", Value::Text(status.as_str().into())),
        ("since", Value::At(since)),
        ("re", Value::Text(reason.clone())),
    ];
    fields.extend(times.into_iter().map(|(name, at)| (name, Value::At(at))));
    fields
}

/// A target record's change between `before` and `after`, if it is news to the fleet. A put
/// carries the status and times whole, and the breaker only when it moved (another
/// replica's open time, adopted with its head start, must not be written back as this one's).
pub fn target_change(before: &TargetRecord, after: &TargetRecord) -> Option<Change> {
    let breaker = breaker_moved(before.breaker, after.breaker);
    let moved = before.status != after.status
        || before.reason != after.reason
        || before.failed_at != after.failed_at
        || before.retry_until != after.retry_until
        || breaker
        || before.reopens != after.reopens;
    if !moved {
        return None;
    }
    // The failure count stays local, and the keys' rests are records of their own.
    let shared =
        |r: &TargetRecord| TargetRecord { consecutive_failures: 0, key_cooldowns: Vec::new(), ..r.clone() };
    if shared(after) == TargetRecord::default() {
        return Some(Change::Reset);
    }
    if target_healthy(after) {
        return Some(Change::Clear);
    }
    let times = [("failed", after.failed_at), ("retry", after.retry_until)];
    let mut fields = status_and_times(after.status, &after.reason, after.since, times);
    if breaker {
        let (name, until) = breaker_fields(after.breaker);
        fields.push(("br", Value::Text(name.into())));
        fields.push(("bu", Value::At(until)));
    }
    if before.reopens != after.reopens {
        fields.push(("ro", Value::Count(after.reopens)));
    }
    Some(Change::Put(fields))
}

/// The changes of the (credential, model) cooldowns of `target` between its records `before`
/// and `after`: a rest begun or made longer is a put, one ended (a success, its time) a clear,
/// and every one of a record forgotten (an operator's reset) a reset.
pub fn key_cooldown_changes(
    target: &Target,
    before: &TargetRecord,
    after: &TargetRecord,
) -> Vec<(Key, Change)> {
    if before.key_cooldowns == after.key_cooldowns {
        return Vec::new();
    }
    let key = |credential: &CredentialId| Key::KeyCooldown {
        credential: credential.clone(),
        target: target.clone(),
    };
    let forgotten = *after == TargetRecord::default();
    let ended = before
        .key_cooldowns
        .iter()
        .filter(|(id, _)| !after.key_cooldowns.iter().any(|(kept, _)| kept == id))
        .map(|(id, _)| (key(id), if forgotten { Change::Reset } else { Change::Clear }));
    let begun = after
        .key_cooldowns
        .iter()
        .filter(|rest| !before.key_cooldowns.contains(rest))
        .map(|(id, until)| (key(id), Change::Put(vec![("cool", Value::At(Some(*until)))])));
    ended.chain(begun).collect()
}

/// A credential record's change between `before` and `after`, if it is news to the fleet.
pub fn credential_change(before: &CredentialRecord, after: &CredentialRecord) -> Option<Change> {
    if before == after {
        return None;
    }
    if *after == CredentialRecord::default() {
        return Some(Change::Reset);
    }
    if after.status == HealthStatus::Available
        && after.cooldown_until.is_none()
        && after.retry_until.is_none()
    {
        return Some(Change::Clear);
    }
    let times = [("cool", after.cooldown_until), ("retry", after.retry_until)];
    Some(Change::Put(status_and_times(after.status, &after.reason, after.since, times)))
}

fn target_healthy(record: &TargetRecord) -> bool {
    record.status == HealthStatus::Available
        && record.retry_until.is_none()
        && record.failed_at.is_none()
        && record.breaker == Breaker::Closed
}

/// Whether the breaker moved in a way the fleet must hear of: a probe slot given back or taken
/// again within one lease is this replica's business.
fn breaker_moved(before: Breaker, after: Breaker) -> bool {
    match (before, after) {
        (Breaker::HalfOpen { lease_until: a, .. }, Breaker::HalfOpen { lease_until: b, .. }) => a != b,
        (a, b) => a != b,
    }
}

fn breaker_fields(breaker: Breaker) -> (&'static str, Option<Instant>) {
    match breaker {
        Breaker::Closed => ("closed", None),
        Breaker::Open { until } => ("open", Some(until)),
        Breaker::HalfOpen { lease_until, .. } => ("half_open", Some(lease_until)),
    }
}

/// A shared record as read from Redis, with the server's now of the reading.
#[derive(Debug, Clone)]
pub struct Shared<'a> {
    /// The hash's fields.
    pub fields: &'a HashMap<String, String>,
    /// Redis's `TIME` when the record was read or written, in milliseconds.
    pub server_now: i64,
    /// This process's now at about the same moment.
    pub local_now: Option<Instant>,
    /// This replica's id, to tell its own breaker moves from the others'.
    pub me: &'a str,
}

impl Shared<'_> {
    fn text(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// A time field as an instant of this process.
    fn at(&self, field: &str) -> Option<Instant> {
        let server_ms: i64 = self.text(field)?.parse().ok()?;
        let local = self.local_now.unwrap_or_else(Instant::now);
        let offset = server_ms - self.server_now;
        let magnitude = Duration::from_millis(offset.unsigned_abs());
        Some(if offset >= 0 { local + magnitude } else { local.checked_sub(magnitude).unwrap_or(local) })
    }

    fn status(&self) -> HealthStatus {
        self.text("st").and_then(parse_status).unwrap_or_default()
    }

    fn reason(&self) -> Arc<str> {
        self.text("re").unwrap_or("").into()
    }

    /// The record's generation: the fleet-wide sequence number of its last write.
    pub fn generation(&self) -> u64 {
        self.text("gen").and_then(|g| g.parse().ok()).unwrap_or(0)
    }
}

/// Whether a record says another replica holds the target's probe (a slot this replica took
/// and gave back meanwhile takes one off the mark).
pub fn probed_elsewhere(record: &TargetRecord) -> bool {
    matches!(record.breaker, Breaker::HalfOpen { probes, .. } if probes >= REMOTE_PROBES / 2)
}

/// Puts the shared fields of `shared` into a target record of this replica. Its own count of
/// failures stays; a half-open circuit whose probe this replica holds keeps its slots.
pub fn adopt_target(record: &mut TargetRecord, shared: &Shared<'_>) {
    record.status = shared.status();
    record.reason = shared.reason();
    record.since = shared.at("since");
    record.failed_at = shared.at("failed");
    record.retry_until = shared.at("retry");
    record.reopens = shared.text("ro").and_then(|r| r.parse().ok()).unwrap_or(0);
    let mine = shared.text("pr") == Some(shared.me);
    let until = shared.at("bu");
    record.breaker = match (shared.text("br"), until) {
        (Some("open"), Some(until)) => {
            Breaker::Open { until: if mine { until } else { until + PROBE_HEAD_START } }
        }
        (Some("half_open"), Some(lease_until)) => {
            let probes = match record.breaker {
                Breaker::HalfOpen { probes, .. } if mine => probes,
                _ => REMOTE_PROBES,
            };
            Breaker::HalfOpen { probes, lease_until }
        }
        _ => Breaker::Closed,
    };
}

/// Puts the shared fields of `shared` into a credential record of this replica.
pub fn adopt_credential(record: &mut CredentialRecord, shared: &Shared<'_>) {
    record.status = shared.status();
    record.reason = shared.reason();
    record.since = shared.at("since");
    record.cooldown_until = shared.at("cool");
    record.retry_until = shared.at("retry");
}

/// A target record after another replica's success cleared it (the keys' rests for its model
/// are records of their own, and stay).
pub fn clear_target(record: &mut TargetRecord, now: Instant) {
    let since = if record.status == HealthStatus::Available { record.since } else { Some(now) };
    let key_cooldowns = std::mem::take(&mut record.key_cooldowns);
    *record =
        TargetRecord { status: HealthStatus::Available, since, key_cooldowns, ..TargetRecord::default() };
}

/// A target record after its shared record was forgotten: what the target's own record held
/// goes, the keys' rests for its model (records of their own) stay.
pub fn forget_target(record: &mut TargetRecord) {
    let key_cooldowns = std::mem::take(&mut record.key_cooldowns);
    *record = TargetRecord { key_cooldowns, ..TargetRecord::default() };
}

/// Puts a shared (credential, model) cooldown into the target's record of this replica: the
/// fleet's merged rest of `credential` for the model, or none.
pub fn adopt_key_cooldown(record: &mut TargetRecord, credential: &CredentialId, shared: &Shared<'_>) {
    drop_key_cooldown(record, credential);
    if let Some(until) = shared.at("cool") {
        record.key_cooldowns.push((credential.clone(), until));
    }
}

/// Ends the rest of `credential` for the target's model in this replica's record (another
/// replica's success ended it, or it was forgotten).
pub fn drop_key_cooldown(record: &mut TargetRecord, credential: &CredentialId) {
    record.key_cooldowns.retain(|(id, _)| id != credential);
}

/// A credential record after another replica's success cleared it.
pub fn clear_credential(record: &mut CredentialRecord, now: Instant) {
    let since = if record.status == HealthStatus::Available { record.since } else { Some(now) };
    *record = CredentialRecord { status: HealthStatus::Available, since, ..CredentialRecord::default() };
}

fn parse_status(name: &str) -> Option<HealthStatus> {
    use HealthStatus::*;
    [Unknown, Available, RateLimited, Exhausted, TemporarilyUnavailable, Unauthorized]
        .into_iter()
        .find(|status| status.as_str() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn keys_name_targets_and_credential_ids_and_parse_back() {
        let target: Target = "openai:gpt-4o".parse().unwrap();
        let key = Key::Target(target.clone());
        assert_eq!(key.name(), "t:openai:gpt-4o");
        assert_eq!(Key::parse("t:openai:gpt-4o"), Some(key));
        let id = CredentialId::derive("openai", "https://api.openai.com/v1", None);
        let name = Key::Credential(id.clone()).name();
        assert_eq!(Key::parse(&name), Some(Key::Credential(id)));
        assert_eq!(Key::parse("c:not an id"), None);
        assert_eq!(Key::parse("x:whatever"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_s_rest_for_a_model_is_a_record_of_its_own_the_target_s_changes_leave_alone() {
        let now = Instant::now();
        let target: Target = "openai:gpt-4o".parse().unwrap();
        let id = CredentialId::derive("openai", "https://api.openai.com/v1", None);
        let key = Key::KeyCooldown { credential: id.clone(), target: target.clone() };
        assert_eq!(key.name(), format!("k:{id}:openai:gpt-4o"));
        assert_eq!(Key::parse(&key.name()), Some(key.clone()));
        assert_eq!(Key::parse("k:not an id:openai:gpt-4o"), None);

        let until = now + Duration::from_secs(5);
        let resting = TargetRecord {
            status: HealthStatus::RateLimited,
            key_cooldowns: vec![(id.clone(), until)],
            ..Default::default()
        };
        let begun = key_cooldown_changes(&target, &TargetRecord::default(), &resting);
        assert_eq!(begun, [(key.clone(), Change::Put(vec![("cool", Value::At(Some(until)))]))]);
        let fine = TargetRecord { status: HealthStatus::Available, ..Default::default() };
        assert_eq!(key_cooldown_changes(&target, &resting, &fine), [(key.clone(), Change::Clear)]);
        let forgotten = key_cooldown_changes(&target, &resting, &TargetRecord::default());
        assert_eq!(forgotten, [(key, Change::Reset)]);
        assert_eq!(
            target_change(&TargetRecord::default(), &resting).map(|c| matches!(c, Change::Put(_))),
            Some(true)
        );

        let mut record = resting.clone();
        clear_target(&mut record, now);
        assert_eq!(record.key_cooldowns, resting.key_cooldowns, "a clear of the target keeps the rest");
        forget_target(&mut record);
        assert_eq!(record.key_cooldowns, resting.key_cooldowns, "so does a forget");
        // An old record without the field reads as no rest; the rest reads back from its own.
        let f = fields(&[("cool", "5000"), ("gen", "3")]);
        adopt_key_cooldown(
            &mut record,
            &id,
            &Shared { fields: &f, server_now: 0, local_now: Some(now), me: "a" },
        );
        assert_eq!(record.key_cooldowns, [(id.clone(), until)]);
        drop_key_cooldown(&mut record, &id);
        assert!(record.key_cooldowns.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn times_cross_as_offsets_from_each_side_s_now() {
        let now = Instant::now();
        assert_eq!(Value::At(Some(now + Duration::from_micros(1_500))).encode(now), "2");
        assert_eq!(Value::At(Some(now - Duration::from_millis(40))).encode(now), "-40");
        assert_eq!(Value::At(None).encode(now), "");
        // Read back on a replica whose clock is anywhere: only the distance to the server's
        // now matters.
        let later = now + Duration::from_secs(3_600);
        let f = fields(&[("retry", "1000060000"), ("since", "999990000")]);
        let shared = Shared { fields: &f, server_now: 1_000_000_000, local_now: Some(later), me: "a" };
        assert_eq!(shared.at("retry"), Some(later + Duration::from_secs(60)));
        assert_eq!(shared.at("since"), Some(later - Duration::from_secs(10)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_a_put_of_what_moved_a_clear_on_recovery_and_a_reset_when_forgotten() {
        let now = Instant::now();
        let fine = TargetRecord { status: HealthStatus::Available, since: Some(now), ..Default::default() };
        let counted = TargetRecord { consecutive_failures: 2, ..fine.clone() };
        assert_eq!(target_change(&fine, &counted), None, "failure counts stay local");
        let open = TargetRecord {
            status: HealthStatus::TemporarilyUnavailable,
            reason: "503".into(),
            since: Some(now),
            failed_at: Some(now),
            breaker: Breaker::Open { until: now + Duration::from_secs(30) },
            ..Default::default()
        };
        let Some(Change::Put(put)) = target_change(&fine, &open) else { panic!("expected a put") };
        let names: Vec<_> = put.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["st", "since", "re", "failed", "retry", "br", "bu"]);
        let later = TargetRecord { retry_until: Some(now + Duration::from_secs(9)), ..open.clone() };
        let Some(Change::Put(put)) = target_change(&open, &later) else { panic!("expected a put") };
        let names: Vec<_> = put.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["st", "since", "re", "failed", "retry"], "whole, but the breaker did not move");
        assert_eq!(target_change(&open, &fine), Some(Change::Clear));
        assert_eq!(target_change(&open, &TargetRecord::default()), Some(Change::Reset));
        let half = |probes| TargetRecord {
            breaker: Breaker::HalfOpen { probes, lease_until: now + Duration::from_secs(30) },
            ..open.clone()
        };
        assert_eq!(target_change(&half(1), &half(0)), None, "a released slot stays local");
    }

    #[tokio::test(start_paused = true)]
    async fn another_replica_s_open_circuit_waits_out_the_head_start_and_its_probe_fills_every_slot() {
        let now = Instant::now();
        let f = fields(&[("st", "temporarily_unavailable"), ("br", "open"), ("bu", "30000"), ("pr", "b")]);
        let shared = |me| Shared { fields: &f, server_now: 0, local_now: Some(now), me };
        let mut record = TargetRecord::default();
        adopt_target(&mut record, &shared("a"));
        assert_eq!(record.breaker, Breaker::Open { until: now + Duration::from_secs(30) + PROBE_HEAD_START });
        adopt_target(&mut record, &shared("b"));
        assert_eq!(record.breaker, Breaker::Open { until: now + Duration::from_secs(30) });
        let f = fields(&[("br", "half_open"), ("bu", "30000"), ("pr", "b")]);
        let mut record = TargetRecord::default();
        adopt_target(&mut record, &Shared { fields: &f, server_now: 0, local_now: Some(now), me: "a" });
        let lease_until = now + Duration::from_secs(30);
        assert_eq!(record.breaker, Breaker::HalfOpen { probes: REMOTE_PROBES, lease_until });
    }
}
