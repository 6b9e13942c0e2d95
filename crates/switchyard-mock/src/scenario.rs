//! Scenarios: the comma-separated list of steps named in the URL path, parsed once per distinct
//! scenario string and then consumed one step per request.
//!
//! Grammar (see the crate docs for what each step does):
//!
//! ```text
//! scenario := step ("," step)* ("," "loop")?
//! step     := kind ("~" modifier)*
//! kind     := ok | tools | custom | filter | refuse | think | quota | auth | context | hang
//!           | reset | noterm | noend | noprefill | status=NNN | failNNN | ratelimit=SECONDS
//!           | authkey=KEY | cut=N | stall=N | errevent=N | badevent=N | down=DURATION
//!           | model429=MODEL
//! modifier := latency=DURATION | jitter=DURATION | chunks=N | gap=DURATION | words=N | tools
//! DURATION := NUMBER ("us" | "ms" | "s" | "m")
//! ```
//!
//! With `words=N`, a step that breaks a stream after N chunks (`cut`, `stall`, `errevent`) must
//! break it before its last word.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Content chunks in a streamed answer unless `chunks=N` says otherwise.
const DEFAULT_CHUNKS: u32 = 4;
/// Upper bound on `chunks=N` and `cut=N`: a stream script is built up front, so an absurd count
/// would only burn memory.
const MAX_CHUNKS: u32 = 10_000;

/// A parsed scenario: the steps in order and what happens after the last one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    actions: Vec<Action>,
    /// `loop` as the final step: start again from the first step instead of repeating the last.
    cycle: bool,
}

/// One step with its modifiers: what a single request gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Action {
    pub(crate) step: Step,
    /// Wait this long before answering (before the response head, so also before a stream's
    /// first chunk).
    pub(crate) latency: Duration,
    /// Add a uniformly random extra wait in `[0, jitter)` on top of `latency`.
    pub(crate) jitter: Duration,
    /// Content chunks in a streamed answer.
    pub(crate) chunks: u32,
    /// Pause between consecutive content chunks of a streamed answer.
    pub(crate) gap: Duration,
    /// The text answer is the words `w1 w2 … wN`, one per chunk, whatever the model.
    pub(crate) words: Option<u32>,
    /// A stream's fault plays over a tool call (its arguments in pieces), not over text.
    pub(crate) tools: bool,
}

/// What kind of answer a step produces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// A normal text answer, "mock answer from {model}".
    Ok,
    /// A call of the tool `get_weather` with `{"city":"Paris"}`.
    Tools,
    /// A call of the custom tool `code_exec` with free-form input.
    Custom,
    /// A content-filtered (refused) answer.
    Filter,
    Refuse,
    /// Reasoning, then the normal text answer.
    Think,
    /// An error with this HTTP status.
    Status(u16),
    /// 429 with `retry-after` set to this text (seconds, as written in the scenario).
    RateLimit(Arc<str>),
    /// Out of credit / quota.
    Quota,
    /// 401, whatever the key.
    Auth,
    /// 401 only when the presented key equals this one, otherwise `Ok`.
    AuthKey(Arc<str>),
    /// The prompt is longer than the model's context window.
    Context,
    /// Never answer.
    Hang,
    /// Close the connection without a response.
    Reset,
    /// Send this many content chunks, then drop the connection.
    Cut(u32),
    /// A whole stream (content, finish, usage) that ends without its terminator.
    NoTerm,
    /// A whole stream without its terminator that then holds the connection open.
    NoEnd,
    /// An otherwise whole stream whose event at this position (1-based) is not JSON.
    BadEvent(u32),
    /// Send this many content chunks, then nothing, holding the connection open.
    Stall(u32),
    /// Send this many content chunks, then empty deltas now and then, holding the connection
    /// open: a stall behind keep-alives.
    KeepAlive(u32),
    /// Send this many content chunks, then an in-band error event, then end the stream.
    ErrEvent(u32),
    /// 503 until this long after the scenario's first request, then `Ok`.
    Down(Duration),
    /// 429 without Retry-After when the request's model is this one, otherwise `Ok`.
    Model429(Arc<str>),
    /// 400 when the request ends with an assistant message (a prefill), otherwise `Ok`.
    NoPrefill,
}

/// Why a scenario string was rejected; the message names the offending part and the fix.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScenarioError(String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Plan {
    /// Parses a scenario string such as `status=500,ok~latency=20ms`.
    pub(crate) fn parse(scenario: &str) -> Result<Plan, ScenarioError> {
        let mut actions = Vec::new();
        let mut cycle = false;
        for (i, text) in scenario.split(',').enumerate() {
            if cycle {
                return Err(ScenarioError(format!(
                    "bad scenario `{scenario}`: `loop` must be the last step, found step {} after it",
                    i + 1
                )));
            }
            if text == "loop" {
                if actions.is_empty() {
                    return Err(ScenarioError(format!(
                        "bad scenario `{scenario}`: `loop` needs at least one step before it"
                    )));
                }
                cycle = true;
                continue;
            }
            let action = Action::parse(text)
                .map_err(|why| ScenarioError(format!("bad scenario `{scenario}`, step `{text}`: {why}")))?;
            actions.push(action);
        }
        Ok(Plan { actions, cycle })
    }

    /// The action for the request that has `served` requests before it in this scenario.
    pub(crate) fn action_at(&self, served: u64) -> &Action {
        let len = self.actions.len() as u64;
        let index = if self.cycle { served % len } else { served.min(len - 1) };
        // The index is below `len` by construction and `parse` never yields an empty plan
        // (`"".split(',')` gives one empty step, which fails to parse).
        &self.actions[usize::try_from(index).unwrap_or(0)]
    }
}

impl Action {
    fn parse(text: &str) -> Result<Action, String> {
        let mut parts = text.split('~');
        let kind = parts.next().unwrap_or_default();
        let mut action = Action {
            step: Step::parse(kind)?,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            chunks: DEFAULT_CHUNKS,
            gap: Duration::ZERO,
            words: None,
            tools: false,
        };
        for modifier in parts {
            let (name, value) = modifier.split_once('=').unwrap_or((modifier, ""));
            match name {
                "latency" => action.latency = parse_duration(value)?,
                "jitter" => action.jitter = parse_duration(value)?,
                "gap" => action.gap = parse_duration(value)?,
                "tools" if value.is_empty() => action.tools = true,
                "chunks" => {
                    action.chunks = parse_count(value)?;
                    if action.chunks == 0 {
                        return Err("`chunks` must be at least 1".to_owned());
                    }
                }
                "words" => {
                    let words = parse_count(value)?;
                    if words == 0 {
                        return Err("`words` must be at least 1".to_owned());
                    }
                    action.words = Some(words);
                }
                _ => {
                    return Err(format!(
                        "unknown modifier `{modifier}` (expected latency=D, jitter=D, chunks=N, gap=D, words=N or tools)"
                    ));
                }
            }
        }
        action.check_words()?;
        Ok(action)
    }

    /// With `words=N` the answer has exactly N chunks (no room is made for a break, as it is
    /// for `chunks`), so a break after N chunks must come before the last word.
    fn check_words(&self) -> Result<(), String> {
        let Some(words) = self.words else { return Ok(()) };
        let (name, after) = match self.step {
            Step::Cut(n) => ("cut", n),
            Step::Stall(n) => ("stall", n),
            Step::KeepAlive(n) => ("keepalive", n),
            Step::ErrEvent(n) => ("errevent", n),
            _ => return Ok(()),
        };
        if after >= words {
            return Err(format!(
                "`{name}={after}` breaks the stream after {after} words but `words={words}` has only {words}: \
                 give words={} or more",
                after + 1
            ));
        }
        Ok(())
    }

    /// The number of content chunks of a streamed answer and completion tokens: `words` when
    /// given, else `chunks`, raised for a stream broken after N chunks so that it stops short
    /// of its end.
    pub(crate) fn pieces(&self) -> u32 {
        if let Some(words) = self.words {
            return words;
        }
        match self.step {
            Step::Cut(n) | Step::Stall(n) | Step::KeepAlive(n) | Step::ErrEvent(n) => self.chunks.max(n + 1),
            _ => self.chunks,
        }
    }
}

impl Step {
    fn parse(kind: &str) -> Result<Step, String> {
        let (name, value) = match kind.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (kind, None),
        };
        // `failNNN` reads better than `status=NNN` in a base URL such as `/fail500,ok/v1`.
        if let (Some(code), None) = (name.strip_prefix("fail"), value) {
            return Ok(Step::Status(parse_status(code)?));
        }
        let step = match (name, value) {
            ("ok", None) => Step::Ok,
            ("tools", None) => Step::Tools,
            ("custom", None) => Step::Custom,
            ("filter", None) => Step::Filter,
            ("refuse", None) => Step::Refuse,
            ("think", None) => Step::Think,
            ("quota", None) => Step::Quota,
            ("auth", None) => Step::Auth,
            ("context", None) => Step::Context,
            ("hang", None) => Step::Hang,
            ("reset", None) => Step::Reset,
            ("noterm", None) => Step::NoTerm,
            ("noend", None) => Step::NoEnd,
            ("noprefill", None) => Step::NoPrefill,
            ("status", Some(code)) => Step::Status(parse_status(code)?),
            ("ratelimit", Some(seconds)) => {
                // Echoed verbatim into `retry-after`, so it must be a number a client can read.
                match seconds.parse::<f64>() {
                    Ok(s) if s.is_finite() && s >= 0.0 => Step::RateLimit(seconds.into()),
                    _ => {
                        return Err(format!("`ratelimit` needs seconds like `ratelimit=2`, got `{seconds}`"));
                    }
                }
            }
            ("authkey", Some(key)) if !key.is_empty() => Step::AuthKey(key.into()),
            ("cut", Some(count)) => Step::Cut(parse_count(count)?),
            ("stall", Some(count)) => Step::Stall(parse_count(count)?),
            ("keepalive", Some(count)) => Step::KeepAlive(parse_count(count)?),
            ("errevent", Some(count)) => Step::ErrEvent(parse_count(count)?),
            ("badevent", Some(position)) => match parse_count(position)? {
                0 => return Err("`badevent` counts events from 1, got `0`".to_owned()),
                n => Step::BadEvent(n),
            },
            ("down", Some(duration)) => Step::Down(parse_duration(duration)?),
            ("model429", Some(model)) if !model.is_empty() => Step::Model429(model.into()),
            _ => {
                return Err(format!(
                    "unknown step `{kind}` (expected ok, tools, custom, filter, refuse, think, quota, auth, \
                     context, hang, reset, noterm, noend, noprefill, status=NNN, failNNN, ratelimit=S, authkey=KEY, \
                     cut=N, stall=N, keepalive=N, errevent=N, badevent=N, down=D or model429=MODEL)"
                ));
            }
        };
        Ok(step)
    }
}

fn parse_status(code: &str) -> Result<u16, String> {
    match code.parse::<u16>() {
        Ok(status) if (400..=599).contains(&status) => Ok(status),
        _ => Err(format!("an error status must be 400..=599, got `{code}`")),
    }
}

fn parse_count(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if n <= MAX_CHUNKS => Ok(n),
        _ => Err(format!("expected a count 0..={MAX_CHUNKS}, got `{value}`")),
    }
}

/// Parses `500us`, `20ms`, `1.5s` or `2m`. A bare number is rejected rather than guessed.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("expected a duration like `20ms` or `2s`, got `{text}`")),
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 => {
            Duration::try_from_secs_f64(n * scale).map_err(|_| format!("duration `{text}` is out of range"))
        }
        _ => Err(format!("expected a duration like `20ms` or `2s`, got `{text}`")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn steps_and_modifiers_parse() {
        let plan = Plan::parse("status=500,ok~latency=20ms~chunks=8~gap=1.5s").unwrap();
        assert_eq!(plan.action_at(0).step, Step::Status(500));
        let ok = plan.action_at(1);
        assert_eq!(ok.step, Step::Ok);
        assert_eq!(ok.latency, Duration::from_millis(20));
        assert_eq!(ok.chunks, 8);
        assert_eq!(ok.gap, Duration::from_millis(1500));
    }

    #[test]
    fn fault_steps_and_words_parse() {
        let steps: Vec<_> =
            Plan::parse("noterm,noend,badevent=10,stall=3,errevent=0,down=2s,model429=gpt-a,noprefill")
                .unwrap()
                .actions
                .into_iter()
                .map(|action| action.step)
                .collect();
        assert_eq!(
            steps,
            [
                Step::NoTerm,
                Step::NoEnd,
                Step::BadEvent(10),
                Step::Stall(3),
                Step::ErrEvent(0),
                Step::Down(Duration::from_secs(2)),
                Step::Model429("gpt-a".into()),
                Step::NoPrefill,
            ]
        );
        let cut = Plan::parse("cut=40~words=60").unwrap();
        assert_eq!(cut.action_at(0).words, Some(60));
        assert_eq!(cut.action_at(0).pieces(), 60);
        assert!(!cut.action_at(0).tools);
        let call = Plan::parse("cut=2~tools").unwrap();
        assert!(call.action_at(0).tools && call.action_at(0).step == Step::Cut(2));
        assert!(Plan::parse("cut=2~tools=1").is_err(), "`tools` takes no value");
    }

    #[test]
    fn a_break_after_n_chunks_leaves_a_piece_unsent() {
        assert_eq!(Plan::parse("cut=5").unwrap().action_at(0).pieces(), 6, "chunks are raised past the cut");
        assert_eq!(Plan::parse("stall=1~chunks=8").unwrap().action_at(0).pieces(), 8);
        assert_eq!(Plan::parse("errevent=0").unwrap().action_at(0).pieces(), 4);
    }

    #[test]
    fn last_step_repeats_and_loop_cycles() {
        let plan = Plan::parse("fail503,ok").unwrap();
        let steps: Vec<_> = (0..4).map(|i| plan.action_at(i).step.clone()).collect();
        assert_eq!(steps, [Step::Status(503), Step::Ok, Step::Ok, Step::Ok]);

        let plan = Plan::parse("fail503,ok,loop").unwrap();
        let steps: Vec<_> = (0..4).map(|i| plan.action_at(i).step.clone()).collect();
        assert_eq!(steps, [Step::Status(503), Step::Ok, Step::Status(503), Step::Ok]);
    }

    #[test]
    fn bad_scenarios_name_the_problem() {
        for (text, needle) in [
            ("", "unknown step ``"),
            ("nope", "unknown step `nope`"),
            ("ok~latency=20", "duration"),
            ("ok~speed=1", "unknown modifier"),
            ("status=200", "400..=599"),
            ("ratelimit=soon", "ratelimit"),
            ("loop", "at least one step"),
            ("ok,loop,ok", "last step"),
            ("ok~chunks=0", "at least 1"),
            ("ok~words=0", "at least 1"),
            ("badevent=0", "counts events from 1"),
            ("stall=x", "expected a count"),
            ("down=5", "duration"),
            ("model429=", "unknown step"),
            ("cut=5~words=5", "give words=6 or more"),
            ("stall=9~words=3", "`stall=9` breaks the stream after 9 words"),
        ] {
            let err = Plan::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
