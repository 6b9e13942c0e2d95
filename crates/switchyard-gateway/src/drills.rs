//! Fault drills: an operator (or a demo, or a test) changes a `simulated` provider's error
//! rates and latency while the gateway runs, and watches the router route around it.
//!
//! `POST /admin/simulated/{provider}` takes `{"error_rates": {"unavailable": 1.0}, "latency":
//! "2s"}`; what the body leaves out stays as configured, and `{}` restores the configuration.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard::ErrorKind;
use switchyard::simulated::{Drill, Latency, SimulatedProvider};

use crate::config::file::LatencyConfig;

/// The providers of the configuration, by id: the simulated ones can be drilled.
#[derive(Debug, Clone, Default)]
pub struct Drills {
    providers: BTreeMap<String, Drillable>,
}

#[derive(Debug, Clone)]
enum Drillable {
    Simulated(SimulatedProvider),
    Other { kind: &'static str },
}

/// Why a drill was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrillError {
    /// No provider has that id.
    Unknown(String),
    /// The provider is real: drills change only simulated ones.
    NotSimulated { id: String, kind: &'static str },
    /// The body is not a drill; the message names the field.
    Invalid(String),
}

impl std::fmt::Display for DrillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrillError::Unknown(id) => write!(f, "no provider `{id}` is configured"),
            DrillError::NotSimulated { id, kind } => {
                write!(f, "provider `{id}` is {kind}: fault drills change only `simulated` providers")
            }
            DrillError::Invalid(message) => f.write_str(message),
        }
    }
}

/// The body of a drill, as the configuration spells the same settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrillBody {
    error_rates: Option<BTreeMap<ErrorKind, f64>>,
    latency: Option<LatencyConfig>,
}

impl Drills {
    /// Every provider of the configuration: its id, its kind, and the simulated provider itself
    /// when it is one.
    pub fn new(
        providers: impl IntoIterator<Item = (String, &'static str, Option<SimulatedProvider>)>,
    ) -> Self {
        let providers = providers
            .into_iter()
            .map(|(id, kind, simulated)| {
                let drillable = match simulated {
                    Some(provider) => Drillable::Simulated(provider),
                    None => Drillable::Other { kind },
                };
                (id, drillable)
            })
            .collect();
        Self { providers }
    }

    /// Starts the drill `body` describes on provider `id`, in place of any earlier one, and
    /// returns the drill now in force.
    pub fn apply(&self, id: &str, body: &[u8]) -> Result<Value, DrillError> {
        let provider = self.simulated(id)?;
        let body: DrillBody = if body.iter().all(u8::is_ascii_whitespace) {
            DrillBody { error_rates: None, latency: None }
        } else {
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
                let path = error.path().to_string();
                let inner = error.into_inner();
                DrillError::Invalid(if path == "." { inner.to_string() } else { format!("{path}: {inner}") })
            })?
        };
        let drill = Drill {
            error_rates: match body.error_rates {
                Some(rates) => {
                    if let Some((field, problem)) = error_rate_problems(&rates).into_iter().next() {
                        return Err(DrillError::Invalid(format!("error_rates{field}: {problem}")));
                    }
                    Some(rates.into_iter().collect())
                }
                None => None,
            },
            latency: body.latency.map(|latency| latency.to_latency()),
        };
        provider.drill(drill);
        Ok(self.describe(id).unwrap_or(Value::Null))
    }

    /// The drill in force on provider `id` (`null` when none), for `/admin/health`; `None` for a
    /// provider that is not simulated.
    pub fn describe(&self, id: &str) -> Option<Value> {
        let Some(Drillable::Simulated(provider)) = self.providers.get(id) else { return None };
        let drill = provider.current_drill();
        if drill.is_empty() {
            return Some(Value::Null);
        }
        let rates: serde_json::Map<String, Value> = drill
            .error_rates
            .iter()
            .flatten()
            .map(|(kind, rate)| (kind.as_str().to_owned(), json!(rate)))
            .collect();
        let latency = drill.latency.map(|latency| match latency {
            Latency::Fixed(d) => json!({ "fixed_ms": d.as_millis() as u64 }),
            Latency::Uniform(min, max) => {
                json!({ "min_ms": min.as_millis() as u64, "max_ms": max.as_millis() as u64 })
            }
        });
        let mut object = serde_json::Map::new();
        if drill.error_rates.is_some() {
            object.insert("error_rates".to_owned(), Value::Object(rates));
        }
        if let Some(latency) = latency {
            object.insert("latency".to_owned(), latency);
        }
        Some(Value::Object(object))
    }

    fn simulated(&self, id: &str) -> Result<&SimulatedProvider, DrillError> {
        match self.providers.get(id) {
            Some(Drillable::Simulated(provider)) => Ok(provider),
            Some(Drillable::Other { kind }) => Err(DrillError::NotSimulated { id: id.to_owned(), kind }),
            None => Err(DrillError::Unknown(id.to_owned())),
        }
    }
}

impl LatencyConfig {
    /// The simulated provider's latency this setting describes.
    pub fn to_latency(&self) -> Latency {
        match self {
            LatencyConfig::Fixed(d) => Latency::Fixed(d.0),
            LatencyConfig::Range { min, max } => Latency::Uniform(min.0, max.0),
        }
    }
}

/// What is wrong with a set of error rates, as (`.kind` or empty, problem): each a rate
/// between 0 and 1, together at most 1. The configuration and drills hold rates to the same
/// rules.
pub fn error_rate_problems(rates: &BTreeMap<ErrorKind, f64>) -> Vec<(String, String)> {
    let mut problems: Vec<(String, String)> = rates
        .iter()
        .filter(|(_, rate)| !(0.0..=1.0).contains(*rate))
        .map(|(kind, rate)| (format!(".{kind}"), format!("{rate} is not a rate between 0 and 1")))
        .collect();
    let sum: f64 = rates.values().sum();
    if sum > 1.0 + 1e-9 {
        problems.push((String::new(), format!("the rates add up to {sum}, more than 1")));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drills() -> (Drills, SimulatedProvider) {
        let sim = SimulatedProvider::new();
        let drills = Drills::new([
            ("demo".to_owned(), "simulated", Some(sim.clone())),
            ("openai".to_owned(), "openai", None),
        ]);
        (drills, sim)
    }

    #[test]
    fn a_drill_names_what_it_changes_and_an_empty_body_lifts_it() {
        let (drills, sim) = drills();
        let now = drills.apply("demo", br#"{"error_rates": {"unavailable": 1.0}, "latency": "2s"}"#).unwrap();
        assert_eq!(now, json!({ "error_rates": { "unavailable": 1.0 }, "latency": { "fixed_ms": 2000 } }));
        assert_eq!(sim.current_drill().error_rates, Some(vec![(ErrorKind::Unavailable, 1.0)]));

        let now = drills.apply("demo", br#"{"latency": {"min": "10ms", "max": "30ms"}}"#).unwrap();
        assert_eq!(now, json!({ "latency": { "min_ms": 10, "max_ms": 30 } }), "a drill replaces the last");

        assert_eq!(drills.apply("demo", b"{}").unwrap(), Value::Null);
        assert!(sim.current_drill().is_empty());
    }

    #[test]
    fn bad_drills_name_the_problem_and_change_nothing() {
        let (drills, sim) = drills();
        let cases: [(&[u8], &str); 5] = [
            (br#"{"error_rates": {"unavailable": 1.5}}"#, "error_rates.unavailable: 1.5 is not a rate"),
            (br#"{"error_rates": {"unavailable": 0.6, "timeout": 0.6}}"#, "add up to 1.2"),
            (br#"{"error_rates": {"flaky": 0.5}}"#, "error_rates"),
            (br#"{"latency": "soon"}"#, "latency"),
            (br#"{"errors": {}}"#, "unknown field `errors`"),
        ];
        for (body, expected) in cases {
            match drills.apply("demo", body) {
                Err(DrillError::Invalid(message)) => {
                    assert!(message.contains(expected), "{message:?} should contain {expected:?}")
                }
                other => panic!("{} gave {other:?}", String::from_utf8_lossy(body)),
            }
        }
        assert!(sim.current_drill().is_empty());
        assert_eq!(
            drills.apply("openai", b"{}"),
            Err(DrillError::NotSimulated { id: "openai".to_owned(), kind: "openai" })
        );
        assert_eq!(drills.apply("nope", b"{}"), Err(DrillError::Unknown("nope".to_owned())));
    }
}
