//! Configuration validation: every bad file gets an error naming the file, the key path and
//! the fix. The expected messages are golden files beside the cases; run with
//! `SWITCHYARD_BLESS=1` to rewrite them after an intended change.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use switchyard_gateway::config;

fn env(name: &str) -> Option<String> {
    match name {
        "TEST_OPENAI_KEY" => Some("sk-test-0123456789".to_owned()),
        "SWITCHYARD_KEY" => Some("gw-key".to_owned()),
        _ => None,
    }
}

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/config_errors");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "toml"))
        .collect();
    cases.sort();
    cases
}

#[test]
fn every_invalid_file_fails_with_its_golden_message() {
    let bless = std::env::var_os("SWITCHYARD_BLESS").is_some();
    let cases = cases();
    assert!(cases.len() >= 10, "the golden cases are present");
    let mut mismatches = Vec::new();
    for case in cases {
        let error = config::load_file(&case, &env).expect_err(&format!("{} must be refused", case.display()));
        // Golden files hold the message with the file named relative to the crate.
        let root = format!("{}/", env!("CARGO_MANIFEST_DIR"));
        let message = error.to_string().replace(&root, "");
        let golden = case.with_extension("err");
        if bless {
            std::fs::write(&golden, format!("{message}\n")).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected.trim_end() != message {
            mismatches.push(format!(
                "{}:\n  expected: {}\n  actual:   {message}",
                case.display(),
                expected.trim_end()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn every_message_names_the_file_and_a_key_path() {
    for case in cases() {
        let error = config::load_file(&case, &env).unwrap_err();
        let file_name = case.file_name().unwrap().to_string_lossy().to_string();
        assert!(error.to_string().contains(&file_name), "{error}");
        for problem in &error.problems {
            assert!(!problem.path.is_empty(), "{error}");
        }
    }
}

#[test]
fn the_issue_example_config_loads() {
    let text = r#"
listen: 127.0.0.1:4680
providers:
  openai:   { kind: openai, api_key: env://TEST_OPENAI_KEY }
  claude:   { kind: anthropic, api_keys: [env://TEST_OPENAI_KEY, literal-second-key] }
  local:    { kind: openai_compatible, base_url: http://127.0.0.1:11434/v1 }
routes:
  default:
    targets: [openai:gpt-4o-mini, claude:claude-sonnet-4-5, local:qwen3:8b]
    retry: { max_attempts: 2, backoff_base: 250ms, backoff_max: 10s, max_wait: 5s }
    health_gate: true
    health_ttl: 30s
    context_window: [claude:claude-sonnet-4-5]
    content_policy: [local:qwen3:8b]
    timeouts: { first_byte: 20s, idle: 30s, total: 300s }
    candidates: [{ name: apology, text: "The assistant is busy, please retry shortly." }]
health: { failure_threshold: 3, open_for: 30s, cooldown_on_rate_limit: 60s, cooldown_on_error: 30s }
gateway:
  keys: [env://SWITCHYARD_KEY]
"#;
    let file = config::parse(text, false, "example.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("example.yaml".into()), &env).unwrap();
    let route = loaded.router.route("default").unwrap();
    assert_eq!(route.targets().len(), 3);
    assert_eq!(route.targets()[2].target.model(), "qwen3:8b");
    assert_eq!(route.retry().max_wait, std::time::Duration::from_secs(5));
    // `total` alone was meant for every attempt: those answered whole too.
    let timeouts = route.timeouts();
    assert_eq!(
        (timeouts.total, timeouts.whole),
        (std::time::Duration::from_secs(300), std::time::Duration::from_secs(300))
    );
    assert_eq!(loaded.router.credentials("claude").unwrap().len(), 2);
    assert_eq!(loaded.gateway.keys.len(), 1);
    assert_eq!(loaded.listen.port(), 4680);
}

#[test]
fn toml_is_accepted_too() {
    let text = r#"
[providers.local]
kind = "simulated"

[routes.default]
targets = ["local:m"]
health_ttl = "5s"
"#;
    let file = config::parse(text, true, "config.toml").unwrap();
    let loaded = config::build(file, config::Source::File("config.toml".into()), &env).unwrap();
    assert_eq!(loaded.router.default_route().health_ttl(), std::time::Duration::from_secs(5));
}

#[test]
fn a_route_named_in_another_routes_list_stands_for_its_targets() {
    let text = r#"
providers: { a: { kind: simulated }, b: { kind: simulated } }
routes:
  gpt: { targets: [a:x, claude], context_window: [claude] }
  claude: { targets: [{ target: b:y, tier: 1 }, b:z, a:x] }
  all: { targets: [gpt, { target: claude, tier: 2 }] }
"#;
    let file = config::parse(text, false, "refs.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("refs.yaml".into()), &env).unwrap();
    let chain = |route: &str| -> Vec<(String, u32)> {
        let route = loaded.router.route(route).unwrap();
        route.targets().iter().map(|t| (t.target.to_string(), t.tier)).collect()
    };
    // Its chain's order (tier 0 before tier 1), at the reference's tier, a target once.
    let owned = |list: &[(&str, u32)]| -> Vec<(String, u32)> {
        list.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    };
    assert_eq!(chain("gpt"), owned(&[("a:x", 0), ("b:z", 0), ("b:y", 0)]));
    assert_eq!(
        chain("all"),
        owned(&[("a:x", 0), ("b:z", 0), ("b:y", 0)]),
        "a target once, where it first comes"
    );
    let window: Vec<String> =
        loaded.router.route("gpt").unwrap().context_window().iter().map(ToString::to_string).collect();
    assert_eq!(window, ["b:z", "a:x", "b:y"]);

    // A target written after a reference that brought it comes once; a special chain may name
    // a route that names this one back (only targets make a cycle).
    let text = r#"
providers: { a: { kind: simulated }, b: { kind: simulated } }
routes:
  chain: { targets: [fast, b:m2, a:m9] }
  fast: { targets: [b:m2, a:m3] }
  small: { targets: [a:s], context_window: [big] }
  big: { targets: [a:b, small] }
"#;
    let file = config::parse(text, false, "refs2.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("refs2.yaml".into()), &env).unwrap();
    let targets = |route: &str| -> Vec<String> {
        loaded.router.route(route).unwrap().targets().iter().map(|t| t.target.to_string()).collect()
    };
    assert_eq!(targets("chain"), ["b:m2", "a:m3", "a:m9"]);
    assert_eq!(targets("big"), ["a:b", "a:s"]);

    // A problem is named where it was written.
    let text = r#"
providers: { a: { kind: simulated } }
routes:
  main: { targets: [fast, nope:m] }
  fast: { targets: [a:x, a:y] }
"#;
    let file = config::parse(text, false, "where.yaml").unwrap();
    let error = config::build(file, config::Source::File("where.yaml".into()), &env).unwrap_err().to_string();
    assert!(error.contains("routes.main.targets[1]: unknown provider `nope`"), "{error}");

    // A reference that comes back to itself, or names a pattern, is refused where it is.
    let text = r#"
providers: { a: { kind: simulated } }
routes:
  one: { targets: [a:x, two] }
  two: { targets: [one] }
  three: { targets: ["claude-*"] }
  "claude-*": { targets: ["a:{model}"] }
"#;
    let file = config::parse(text, false, "loop.yaml").unwrap();
    let error = config::build(file, config::Source::File("loop.yaml".into()), &env).unwrap_err().to_string();
    assert!(error.contains("routes.two.targets[0]: route `one` comes back to itself"), "{error}");
    assert!(error.contains("routes.three.targets[0]: `claude-*` is a pattern route"), "{error}");
}

#[test]
fn settings_shared_by_routes_live_under_an_x_key_and_are_merged_in() {
    let text = r#"
providers: { a: { kind: simulated } }
x-defaults: &defaults { retry: { max_attempts: 3 }, drop_params: true }
routes:
  one: { <<: *defaults, targets: [a:m] }
  two: { <<: *defaults, targets: [a:n], retry: { max_attempts: 5 } }
"#;
    let file = config::parse(text, false, "shared.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("shared.yaml".into()), &env).unwrap();
    let one = loaded.router.route("one").unwrap();
    assert_eq!(one.retry().max_attempts, 3);
    assert!(one.drop_params());
    assert_eq!(loaded.router.route("two").unwrap().retry().max_attempts, 5, "a route's own setting wins");
    // Any other unknown top-level key is still refused.
    let error = config::parse("providers: {}\nroutez: {}\n", false, "typo.yaml").unwrap_err().to_string();
    assert!(error.contains("routez"), "{error}");
}

#[test]
fn no_file_and_no_keys_serves_the_demo() {
    let loaded = config::load_default(&|_| None).unwrap();
    assert_eq!(loaded.source, config::Source::Demo);
    assert!(loaded.router.route("default").is_some());
}

#[test]
fn api_keys_in_the_environment_become_providers_and_a_default_route() {
    let env = |name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-a".to_owned()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-b".to_owned()),
        _ => None,
    };
    let loaded = config::load_default(&env).unwrap();
    assert_eq!(
        loaded.source,
        config::Source::Environment(vec!["OPENAI_API_KEY".into(), "ANTHROPIC_API_KEY".into()])
    );
    let targets: Vec<String> =
        loaded.router.default_route().targets().iter().map(|t| t.target.to_string()).collect();
    assert_eq!(targets, ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"]);
}

#[test]
fn durations_take_units() {
    assert_eq!(config::parse_duration("250ms"), Some(std::time::Duration::from_millis(250)));
    assert_eq!(config::parse_duration("5m"), Some(std::time::Duration::from_secs(300)));
    assert_eq!(config::parse_duration("1m30s"), Some(std::time::Duration::from_secs(90)));
    assert_eq!(config::parse_duration("5 minutes"), None);
    assert_eq!(config::parse_duration("-1s"), None);
    // Past a day, as written (a month of kept responses is not a day's), up to a year.
    assert_eq!(config::parse_duration("720h"), Some(std::time::Duration::from_secs(720 * 3600)));
    assert_eq!(config::parse_duration("9000h"), None);

    let text = "providers:\n  p: { kind: simulated }\nroutes:\n  default: { targets: [p:m], timeouts: { total: 99999999999999999999h } }\n";
    let error = config::parse(text, false, "long.yaml")
        .and_then(|file| config::build(file, config::Source::File("long.yaml".into()), &env).map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(error.contains("longer than a year"), "refused, not cut to a day: {error}");
}

/// A provider that costs money, with the gateway settings `gateway` adds.
fn paid(gateway: &str) -> config::Loaded {
    let text = format!(
        "providers:\n  openai: {{ kind: openai, api_key: env://TEST_OPENAI_KEY }}\nroutes:\n  default: {{ targets: [openai:gpt-4o-mini] }}\n{gateway}"
    );
    let file = config::parse(&text, false, "paid.yaml").unwrap();
    config::build(file, config::Source::File("paid.yaml".into()), &env).unwrap()
}

fn refusal_of(loaded: &config::Loaded) -> String {
    let listen = "0.0.0.0:4680".parse().unwrap();
    match config::exposure(listen, loaded) {
        config::Exposure::Refused(missing) => config::refusal(listen, loaded, &missing),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_refusal_without_both_keys_names_both() {
    let message = refusal_of(&paid(""));
    assert!(message.contains("without gateway.keys and gateway.admin_key:"), "{message}");
    assert!(
        message
            .contains("`gateway: { keys: [env://SWITCHYARD_KEY], admin_key: env://SWITCHYARD_ADMIN_KEY }`"),
        "{message}"
    );
    assert!(message.contains("spend the accounts of openai"), "{message}");
}

#[test]
fn the_refusal_without_only_the_admin_key_names_only_the_admin_key() {
    let message = refusal_of(&paid("gateway: { keys: [gw-key-123456789] }\n"));
    assert!(message.contains("without gateway.admin_key:"), "{message}");
    assert!(message.contains("`gateway: { admin_key: env://SWITCHYARD_ADMIN_KEY }`"), "{message}");
    assert!(!message.contains("keys:") && !message.contains("SWITCHYARD_KEY"), "{message}");
    assert!(!message.contains("spend the accounts"), "clients need a key already: {message}");
    assert!(!message.contains("gw-key-123456789"), "{message}");
}

#[test]
fn the_refusal_without_only_the_client_keys_names_only_the_client_keys() {
    let message = refusal_of(&paid("gateway: { admin_key: admin-key-987654321 }\n"));
    assert!(message.contains("without gateway.keys:"), "{message}");
    assert!(message.contains("`gateway: { keys: [env://SWITCHYARD_KEY] }` to the configuration (the key comes from that variable)"), "{message}");
    assert!(!message.contains("admin_key") && !message.contains("SWITCHYARD_ADMIN_KEY"), "{message}");
    assert!(!message.contains("/admin"), "the admin key guards it: {message}");
}

#[test]
fn the_refusal_for_providers_from_the_environment_names_the_variables_to_set() {
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-a".to_owned());
    let loaded = config::load_default(&env).unwrap();
    let message = refusal_of(&loaded);
    assert!(
        message.contains(
            "set SWITCHYARD_KEY (the key clients send) and SWITCHYARD_ADMIN_KEY (for /admin and /metrics)"
        ),
        "{message}"
    );
}

#[test]
fn a_listen_address_may_name_a_host() {
    let localhost = config::listen_address("localhost:4680").unwrap();
    assert!(localhost.ip().is_loopback(), "{localhost}");
    assert_eq!(localhost.port(), 4680);
    assert_eq!(config::listen_address("127.0.0.1:4680").unwrap(), "127.0.0.1:4680".parse().unwrap());
    let ipv6: std::net::SocketAddr = "[::1]:4680".parse().unwrap();
    assert_eq!(config::listen_address("[::1]:4680").unwrap(), ipv6);
    assert_eq!(config::listen_address("::1:4680").unwrap(), ipv6, "the port after the last colon");
}

#[test]
fn a_listen_address_that_does_not_resolve_is_named() {
    // `.invalid` never resolves (RFC 6761).
    let problem = config::listen_address("no-such-host.invalid:4680").unwrap_err();
    assert!(
        problem.starts_with("`no-such-host.invalid` in `no-such-host.invalid:4680` does not resolve"),
        "{problem}"
    );
    assert!(problem.contains("127.0.0.1:4680"), "the fix: {problem}");
    let problem = config::listen_address("localhost").unwrap_err();
    assert_eq!(problem, "`localhost` is not an address: write host:port, like 127.0.0.1:4680");
    let problem = config::listen_address("localhost:http").unwrap_err();
    assert!(problem.contains("is not an address"), "{problem}");
}

#[test]
fn the_file_listen_may_name_a_host() {
    let text = "listen: localhost:4681\nproviders: { p: { kind: simulated } }\nroutes: { default: { targets: [p:m] } }\n";
    let file = config::parse(text, false, "t.yaml").unwrap();
    let loaded = config::build(file, config::Source::File("t.yaml".into()), &env).unwrap();
    assert!(loaded.listen.ip().is_loopback() && loaded.listen.port() == 4681, "{}", loaded.listen);
}
