//! Reading a file's text into the file model, with every problem of its shape at once.
//!
//! The text is parsed into a tree first (YAML keeps each key's line, so that a key given twice
//! is named with its line and its key path), then deserialized into [`FileConfig`]. A key the
//! model refuses (unknown, of the wrong type) is recorded and taken out of the tree, and the
//! rest is deserialized again: an unknown key in `gateway` and a type error in each of two
//! routes are three problems of one run, and the settings around them are still validated.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use serde_path_to_error::Segment;

use super::file::FileConfig;
use super::{ConfigError, Problem};

/// A file's model, as much of it as could be read, and what could not.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// The model; `None` when the file's shape is wrong beyond a key (a list at the top).
    pub(crate) file: Option<FileConfig>,
    /// Keys given twice, unknown keys, values of the wrong type.
    pub(crate) problems: Vec<Problem>,
    /// The keys taken out of the tree because of those problems.
    pub(crate) removed: Removed,
}

/// The key paths taken out of the tree (each key's path from the top).
#[derive(Debug, Default, Clone)]
pub(crate) struct Removed(Vec<Vec<Step>>);

impl Removed {
    /// Whether `section` (`providers`, `routes`) or its entry `name` was taken out: then what
    /// refers to it is not reported again as unknown.
    pub(crate) fn entry(&self, section: &str, name: &str) -> bool {
        self.0.iter().any(|path| match path.as_slice() {
            [Step::Key(s)] => s == section,
            [Step::Key(s), Step::Key(n)] => s == section && n == name,
            _ => false,
        })
    }

    /// Whether `section` or any of its entries was taken out: then "none configured" is not
    /// reported.
    pub(crate) fn any_in(&self, section: &str) -> bool {
        self.0.iter().any(|path| match path.as_slice() {
            [Step::Key(s)] | [Step::Key(s), Step::Key(_)] => s == section,
            _ => false,
        })
    }
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Reads YAML (or TOML) text. A syntax error is the only error: the parser cannot go on.
pub(crate) fn read(text: &str, is_toml: bool, name: &str) -> Result<Parsed, ConfigError> {
    // The parser quotes the lines around where it stopped, which may hold keys written inline.
    let syntax = |message: String| {
        let message = values_masked(message.trim(), is_toml);
        ConfigError::one(name, "(syntax)", without_secrets(&message))
    };
    let (value, duplicates) = if is_toml {
        (toml::from_str::<Value>(text).map_err(|e| syntax(e.to_string()))?, Vec::new())
    } else {
        yaml(text).map_err(|e| syntax(e.to_string()))?
    };
    let value = if value.is_null() { Value::Object(Map::new()) } else { without_extensions(value) };
    if !value.is_object() {
        let problem = Problem {
            path: "(top level)".to_owned(),
            message: "is not a mapping: a configuration is keys such as `providers:` and `routes:`"
                .to_owned(),
        };
        return Ok(Parsed {
            file: None,
            problems: [duplicates, vec![problem]].concat(),
            ..Parsed::default()
        });
    }
    let mut parsed = shape(value);
    let mut problems = duplicates;
    problems.append(&mut parsed.problems);
    parsed.problems = problems;
    Ok(parsed)
}

/// A parser's `message` with every value on the lines of the file it quotes (`8 |   key: x`)
/// masked character for character, so that its caret still points where it did: the keys are
/// shown, no value is, since a file that does not parse cannot say which values are secrets.
fn values_masked(message: &str, is_toml: bool) -> String {
    let lines = message.lines().map(|line| match quoted_source(line) {
        Some((margin, text)) if is_toml => format!("{margin}{}", toml_masked(text)),
        Some((margin, text)) => format!("{margin}{}", yaml_masked(text)),
        None => line.to_owned(),
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// A line of the file as a parser's message quotes it: its margin (`8 | `) and its text.
fn quoted_source(line: &str) -> Option<(&str, &str)> {
    let bar = line.find(" | ")?;
    let number = line[..bar].trim();
    let numbered = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    numbered.then(|| line.split_at(bar + " | ".len()))
}

/// A YAML line with every word masked but the keys (a word followed by `:` and a space or
/// the line's end) and punctuation (`-`, `|`).
fn yaml_masked(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let ends_key = |at: usize| chars[at] == ':' && chars.get(at + 1).is_none_or(|c| c.is_whitespace());
        if chars[i].is_whitespace() || ",{}[]\"'#".contains(chars[i]) || ends_key(i) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && !(chars[i].is_whitespace() || ",{}[]\"'#".contains(chars[i]) || ends_key(i))
        {
            i += 1;
        }
        let word = &chars[start..i];
        // A key stands where a key may: first on its line or item, or in a flow mapping (in
        // `api_key: ab: cd`, `ab` is a value the parser stopped at).
        let placed = out.trim_end().chars().last().is_none_or(|c| "-{,?".contains(c));
        let key = i < chars.len() && ends_key(i) && placed;
        let shown = key || !word.iter().any(|c| c.is_alphanumeric());
        out.extend(word.iter().map(|&c| if shown { c } else { '*' }));
    }
    out
}

/// A TOML line with what follows its key's `=` masked, and a line without a key (an array's
/// items, a string's lines) masked whole, but a table's header (`[providers.openai]`). A key
/// is lower case, as the configuration's are: a line of base64 that ends in `=` is no key.
fn toml_masked(text: &str) -> String {
    let mask = |text: &str| {
        text.chars()
            .map(|c| if c.is_alphanumeric() || "-_+/=.~:@".contains(c) { '*' } else { c })
            .collect::<String>()
    };
    let is_key = |key: &str| {
        let key = key.trim();
        !key.is_empty()
            && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.\" ".contains(c))
    };
    match text.find('=').filter(|at| is_key(&text[..*at])) {
        Some(at) => format!("{}={}", &text[..at], mask(&text[at + 1..])),
        None if text.trim_start().starts_with('[') && !text.contains(['"', '\'']) => text.to_owned(),
        None => mask(text),
    }
}

/// `message` with every word that looks like a secret (16 characters or more of a key's
/// alphabet, letters and digits both) masked: a syntax error cannot tell which values are keys.
fn without_secrets(message: &str) -> String {
    let keyish = |c: char| c.is_ascii_alphanumeric() || "-_+/=.~".contains(c);
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if looks_like_a_secret(word) { "****" } else { word.as_str() });
        word.clear();
    };
    for c in message.chars() {
        if keyish(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Whether `word` looks like a key: 16 characters or more, letters and digits both.
fn looks_like_a_secret(word: &str) -> bool {
    word.len() >= 16
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

/// The text's tree as a JSON value (`null` when it does not parse), for comparing two
/// versions of a file section by section.
pub(crate) fn tree(text: &str, is_toml: bool) -> Value {
    let parsed = if is_toml { toml::from_str::<Value>(text).ok() } else { yaml(text).ok().map(|(v, _)| v) };
    parsed.map_or(Value::Null, without_extensions)
}

/// The document without its top-level keys that begin with `x-`: a place of the file's own,
/// as in Compose files, for YAML anchors that routes and providers merge in (`<<: *defaults`).
/// What they hold reaches the configuration only where it is merged.
fn without_extensions(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.retain(|key, _| !key.starts_with("x-"));
    }
    value
}

/// YAML text as a JSON value, and a problem for each key given twice in one mapping (the first
/// value is kept). The parser's own duplicate check is off: it stops at the first, and names
/// neither the key's path nor the way to fix it.
fn yaml(text: &str) -> Result<(Value, Vec<Problem>), serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    let tree: Node = serde_saphyr::from_str_with_options(text, options)?;
    let mut problems = Vec::new();
    let value = tree.into_value(&mut Vec::new(), &mut problems);
    Ok((value, problems))
}

/// A YAML document as parsed: mappings keep every entry, with the line of its key.
enum Node {
    Scalar(Value),
    List(Vec<Node>),
    Mapping(Vec<(String, u64, Node)>),
}

impl Node {
    fn into_value(self, path: &mut Vec<Step>, problems: &mut Vec<Problem>) -> Value {
        match self {
            Node::Scalar(value) => value,
            Node::List(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        path.push(Step::Index(i));
                        let value = item.into_value(path, problems);
                        path.pop();
                        value
                    })
                    .collect(),
            ),
            Node::Mapping(entries) => {
                let mut map = Map::new();
                let mut lines: Vec<(String, u64)> = Vec::new();
                for (key, line, node) in entries {
                    path.push(Step::Key(key.clone()));
                    if let Some((_, first)) = lines.iter().find(|(seen, _)| *seen == key) {
                        // A key written where a name goes (`- sk-…:` twice) is not quoted: the
                        // line numbers find it.
                        let (shown, at) = match looks_like_a_secret(&key) {
                            true => (
                                "****".to_owned(),
                                display(&[&path[..path.len() - 1], &[Step::Key("****".into())]].concat()),
                            ),
                            false => (key.clone(), display(path)),
                        };
                        problems.push(Problem {
                            path: format!("line {line}"),
                            message: format!(
                                "`{shown}` is given twice ({at}, first on line {first}): keep one"
                            ),
                        });
                    } else {
                        let value = node.into_value(path, problems);
                        lines.push((key.clone(), line));
                        map.insert(key, value);
                    }
                    path.pop();
                }
                Value::Object(map)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Scalar(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(Value::String(v.to_owned())))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<serde_saphyr::Spanned<String>>()? {
            let value = map.next_value()?;
            entries.push((key.value, key.referenced.line(), value));
        }
        Ok(Node::Mapping(entries))
    }
}

/// Deserializes `value` into the model, taking out each key it refuses and trying again,
/// until it reads or nothing more can be taken out.
fn shape(mut value: Value) -> Parsed {
    let mut parsed = Parsed::default();
    // Each round takes a key out of a finite tree: this bound is never reached.
    for _ in 0..10_000 {
        let error = match serde_path_to_error::deserialize::<_, FileConfig>(&value) {
            Ok(file) => {
                parsed.file = Some(file);
                return parsed;
            }
            Err(error) => error,
        };
        let path = steps(error.path());
        let mut message = error.into_inner().to_string();
        if holds_a_secret(&path) {
            message = without_values(&message);
        }
        let shown = shown_path(&path, &mut message);
        let at = owner(&path);
        if at.is_empty() || !remove(&mut value, at) {
            parsed.problems.push(Problem { path: shown, message });
            return parsed;
        }
        // A required key taken out in an earlier round makes its owner incomplete: that is not
        // a problem of the file, the key's own problem is already recorded.
        if !follows_removal(&path, &message, &parsed.removed) {
            parsed.problems.push(Problem { path: shown, message });
        }
        parsed.removed.0.push(at.to_vec());
    }
    parsed
}

/// Whether the key at `path` holds a secret (a key, a token, a password): its value is not
/// quoted in a problem, which goes to the log, `/admin/health` and the `config_rejected` event.
fn holds_a_secret(path: &[Step]) -> bool {
    path.iter().any(|step| match step {
        Step::Key(key) => ["key", "secret", "token", "password"].iter().any(|word| key.contains(word)),
        Step::Index(_) => false,
    })
}

/// The problem's path as shown, and its `message`, without an unknown field's name that looks
/// like a secret: a key written without its `api_key:` (`{ kind: openai, sk-proj-… }`) is a
/// field of that name, which both would quote.
fn shown_path(path: &[Step], message: &mut String) -> String {
    if path.is_empty() {
        return "(top level)".to_owned();
    }
    let secret = match path.last() {
        Some(Step::Key(name)) if message.starts_with("unknown field") && looks_like_a_secret(name) => name,
        _ => return display(path),
    };
    *message = message.replacen(secret.as_str(), "****", 1)
        + " (its name is not shown: it looks like a key; is `api_key:` or `key:` missing before it?)";
    let mut shown = path.to_vec();
    shown.pop();
    shown.push(Step::Key("****".to_owned()));
    display(&shown)
}

/// `message` without the value a type error quotes: "invalid type: integer `12345678901`,
/// expected a string" says "invalid type: integer, expected a string". Other messages name keys,
/// not values, and stand.
fn without_values(message: &str) -> String {
    let head = ["invalid type: ", "invalid value: "].into_iter().find(|head| message.starts_with(head));
    let (Some(head), Some(expected)) = (head, message.find(", expected")) else { return message.to_owned() };
    let kind = message[head.len()..expected].split([' ', '`', '"']).next().unwrap_or_default();
    format!("{head}{kind}{}", &message[expected..])
}

/// The error's path as steps, up to the first step the tracker could not follow.
fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    path.iter()
        .map_while(|segment| match segment {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// The path of the key to take out for a problem at `path`: its last key (a bad item of a list
/// takes its whole list out, so that the items after it keep their indexes in later messages).
fn owner(path: &[Step]) -> &[Step] {
    let last_key = path.iter().rposition(|step| matches!(step, Step::Key(_)));
    last_key.map_or(&[], |i| &path[..=i])
}

/// Whether a problem is "missing field `X`" at a path where `X` was taken out before.
fn follows_removal(path: &[Step], message: &str, removed: &Removed) -> bool {
    let Some(field) = message.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`')) else {
        return false;
    };
    removed.0.iter().any(|taken| {
        taken.len() == path.len() + 1
            && taken.starts_with(path)
            && taken.last() == Some(&Step::Key(field.to_owned()))
    })
}

/// Takes the key at `path` out of `value`; false when the path does not lead to it.
fn remove(value: &mut Value, path: &[Step]) -> bool {
    let Some((Step::Key(last), parents)) = path.split_last() else { return false };
    let mut at = value;
    for step in parents {
        let next = match step {
            Step::Key(key) => at.get_mut(key.as_str()),
            Step::Index(index) => at.get_mut(*index),
        };
        match next {
            Some(next) => at = next,
            None => return false,
        }
    }
    at.as_object_mut().is_some_and(|map| map.shift_remove(last.as_str()).is_some())
}

/// `routes.default.targets[1]`, as serde_path_to_error writes paths.
fn display(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        read(text, false, "t.yaml")
            .unwrap()
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn a_syntax_error_quotes_the_files_keys_and_not_one_of_its_values() {
        let yaml = "gateway:\n  admin_key: adm-short\n   keys: [ cli-short, 'q' ]\n";
        let Err(error) = read(yaml, false, "t.yaml") else { panic!("a syntax error") };
        let error = error.to_string();
        assert!(!error.contains("short"), "{error}");
        assert!(error.contains("2 |   admin_key: *********\n"), "{error}");
        assert!(error.contains("3 |    keys: [ *********, '*' ]\n"), "{error}");
        let toml = "[providers.oa]\napi_key = \"up-short\"\nbase_url = \"http://x/v1\nkind = 'openai'\n";
        let Err(error) = read(toml, true, "t.toml") else { panic!("a syntax error") };
        let error = error.to_string();
        assert!(!error.contains("x/v1") && !error.contains("up-short"), "{error}");
        assert!(error.contains("base_url = \"***********"), "{error}");
        // A value the parser stopped at that looks like a key is still a value.
        let Err(error) = read("gateway:\n  admin_key: adm-short: x\n", false, "t.yaml") else {
            panic!("a syntax error")
        };
        assert!(!error.to_string().contains("adm-short"), "{error}");
        assert_eq!(toml_masked("QUJDREVGR0g="), "************", "base64 is no key");
        assert_eq!(toml_masked("api_key = 'x'"), "api_key = '*'");
    }

    #[test]
    fn a_syntax_error_on_a_line_with_a_key_does_not_quote_the_key() {
        let key = "sk-FAKESYNTAXLEAK-0123456789abcdef";
        for (text, toml) in [
            (format!("providers:\n  oa: {{ api_key: \"{key}\", kind: openai, base_url: ] }}\n"), false),
            (format!("[providers.oa]\napi_key = \"{key}\" kind = \"openai\"\n"), true),
        ] {
            let Err(error) = read(&text, toml, "t.yaml") else { panic!("a syntax error") };
            let error = error.to_string();
            assert!(!error.contains("FAKESYNTAXLEAK") && !error.contains("0123456789abcdef"), "{error}");
            assert!(error.contains("(syntax)"), "{error}");
        }
    }

    #[test]
    fn a_key_given_twice_is_named_with_its_line_and_path() {
        let text = "providers:\n  p: { kind: simulated }\nroutes:\n  default: { targets: [p:m] }\n  other: { targets: [p:m] }\n  default: { targets: [p:n] }\n";
        assert_eq!(
            problems(text),
            ["line 6: `default` is given twice (routes.default, first on line 4): keep one"]
        );
    }

    #[test]
    fn keys_given_twice_in_lists_and_flow_mappings_are_all_found() {
        let text = "routes:\n  r:\n    targets: [p:m]\n    candidates: [{ name: a, text: x, text: y }]\n    targets: [p:n]\n";
        assert_eq!(
            problems(text),
            [
                "line 4: `text` is given twice (routes.r.candidates[0].text, first on line 4): keep one",
                "line 5: `targets` is given twice (routes.r.targets, first on line 3): keep one",
            ]
        );
    }

    #[test]
    fn a_secret_of_the_wrong_type_is_not_quoted() {
        let text = "providers:\n  p: { kind: openai, api_key: 12345678901 }\ngateway: { keys: [98765432109], admin_key: 55512345678 }\n";
        let found = problems(text);
        // The number among `gateway.keys` reads, for the check to name it ("is a number").
        assert_eq!(found.len(), 2, "{found:?}");
        for secret in ["12345678901", "98765432109", "55512345678"] {
            assert!(!found.iter().any(|problem| problem.contains(secret)), "{secret} quoted: {found:?}");
        }
        assert!(
            found.iter().any(|p| p.starts_with("providers.p.api_key: invalid type: integer, expected")),
            "{found:?}"
        );
    }

    #[test]
    fn a_key_given_twice_as_a_name_is_not_quoted() {
        let text = "gateway:\n  sk-dup-TOPSECRET-3: 1\n  sk-dup-TOPSECRET-3: 2\n";
        let found = problems(text);
        assert!(
            found.iter().any(|p| p.contains("is given twice (gateway.****, first on line 2)")),
            "{found:?}"
        );
        assert!(!found.iter().any(|p| p.contains("TOPSECRET")), "{found:?}");
    }

    #[test]
    fn a_key_written_without_its_name_is_an_unknown_field_not_quoted() {
        // A key rotated in a hurry, `api_key:` and `key:` dropped before the new ones.
        let text = "providers:\n  p: { kind: openai, sk-proj-NEWSECRET0002 }\ngateway:\n  keys:\n    - { name: team, sk-team-NEWCLIENT2 }\n";
        let found = problems(text);
        assert_eq!(found.len(), 2, "{found:?}");
        for secret in ["NEWSECRET0002", "NEWCLIENT2"] {
            assert!(!found.iter().any(|problem| problem.contains(secret)), "{secret} quoted: {found:?}");
        }
        assert!(found[0].starts_with("providers.p.****: unknown field `****`, expected"), "{found:?}");
        assert!(found[0].contains("`api_key:` or `key:` missing"), "{found:?}");
        // A name that is no key is shown, for the typo it is.
        assert!(problems("providers:\n  p: { kind: openai, api_kye: x }\n")[0].contains("`api_kye`"));
    }

    #[test]
    fn unknown_keys_in_different_sections_are_all_reported() {
        let text = "providers:\n  p: { kind: simulated, colour: red }\nroutes:\n  default: { targets: [p:m], retries: 2 }\ngateway: { key: x }\n";
        let found = problems(text);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("providers.p.colour: unknown field `colour`"), "{found:?}");
        assert!(found[1].starts_with("routes.default.retries: unknown field `retries`"), "{found:?}");
        assert!(found[2].starts_with("gateway.key: unknown field `key`"), "{found:?}");
    }

    #[test]
    fn a_required_key_taken_out_is_not_reported_again_as_missing() {
        let parsed = read("providers:\n  p: { kind: ollama }\n", false, "t.yaml").unwrap();
        assert_eq!(parsed.problems.len(), 1, "{:?}", parsed.problems);
        assert_eq!(parsed.problems[0].path, "providers.p.kind");
        assert!(parsed.removed.entry("providers", "p"), "the provider itself is out: {:?}", parsed.removed);
        assert!(parsed.file.is_some_and(|file| file.providers.is_empty()));
    }

    #[test]
    fn a_missing_required_key_is_reported() {
        let found = problems("providers:\n  p: { base_url: http://x }\n");
        assert_eq!(found, ["providers.p: missing field `kind`"]);
    }

    #[test]
    fn a_document_that_is_not_a_mapping_is_one_problem_at_the_top() {
        let parsed = read("- a\n- b\n", false, "t.yaml").unwrap();
        assert!(parsed.file.is_none());
        assert_eq!(parsed.problems.len(), 1);
        assert_eq!(parsed.problems[0].path, "(top level)");
    }
}
