//! Configuration reload on the real binary: a new route served after `SIGHUP`, after an edit
//! of the file, after a Kubernetes-style symlink swap and after `POST /admin/config/reload`; a
//! stream in flight finishing on its configuration; a bad file refused with the old one kept;
//! what the gateway learned kept for what did not change and forgotten for what did; each
//! replica's config hash in a fleet.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};
use support::{serve, signal, stop, stop_flushed, until, write_config};

const ADMIN: &str = "reload-admin-0123456789";
/// How long a real gateway may take to see a change (the watch polls every 250 ms and waits
/// for 500 ms of quiet; a loaded machine runs slower).
const WITHIN: Duration = Duration::from_secs(10);

/// A configuration whose route `default` goes to `up:m`, with `routes` (YAML lines under
/// `routes:`) and `providers` (lines under `providers:`) added.
fn config(providers: &str, routes: &str, rest: &str) -> String {
    format!(
        "providers:
  up: {{ kind: simulated, reply: from up }}
{providers}
routes:
  default: {{ targets: [up:m] }}
{routes}
gateway: {{ admin_key: {ADMIN} }}
health: {{ failure_threshold: 2, open_for: 60s, open_max: 60s }}
{rest}"
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// The status of a chat with `model`, and the target that served it.
async fn chat(addr: &str, model: &str) -> (u16, String) {
    let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
    let response =
        client().post(format!("http://{addr}/v1/chat/completions")).json(&body).send().await.unwrap();
    let target = response.headers().get("x-switchyard-target").map(|v| v.to_str().unwrap().to_owned());
    (response.status().as_u16(), target.unwrap_or_default())
}

async fn health(addr: &str) -> Value {
    let response =
        client().get(format!("http://{addr}/admin/health")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// `POST /admin/config/reload`: its status and answer.
async fn reload(addr: &str) -> (u16, Value) {
    let response =
        client().post(format!("http://{addr}/admin/config/reload")).bearer_auth(ADMIN).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Waits until the route `model` is served.
async fn until_served(addr: &str, model: &str) {
    until(&format!("the route {model} is served"), WITHIN, async || match chat(addr, model).await {
        (200, _) => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
}

fn target<'a>(health: &'a Value, name: &str) -> Option<&'a Value> {
    health["targets"].as_array()?.iter().find(|t| t["target"] == name)
}

/// The credential ids of `provider`.
fn credential_ids(health: &Value, provider: &str) -> Vec<String> {
    let providers = health["providers"].as_array().unwrap();
    let entry = providers.iter().find(|p| p["id"] == provider).unwrap();
    entry["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["credential_id"].as_str().unwrap().to_owned())
        .collect()
}

/// The status of credential `id` (`unknown` when the health lists no record of it).
fn credential_status(health: &Value, id: &str) -> String {
    let credentials = health["credentials"].as_array().unwrap();
    let found = credentials.iter().find(|c| c["credential_id"] == id);
    found.map_or("unknown".to_owned(), |c| c["status"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_and_a_new_route_is_served() {
    let path = write_config("reload-hup.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    assert_eq!(chat(&addr, "fast").await.0, 404, "no route fast yet");

    std::fs::write(&path, config("", "  fast: { targets: [up:m] }", "")).unwrap();
    signal(&server, "HUP");
    until_served(&addr, "fast").await;
    assert_eq!(chat(&addr, "default").await, (200, "up:m".to_owned()), "still serving, same process");
    let logs = stop_flushed(server);
    assert!(logs.contains("configuration reloaded") && logs.contains("SIGHUP"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_watched_file_is_served_without_a_signal() {
    let path = write_config("reload-edit.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &[]);
    std::fs::write(&path, config("", "  fast: { targets: [up:m] }", "")).unwrap();
    until_served(&addr, "fast").await;
    let logs = stop_flushed(server);
    assert!(logs.contains("file change"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_file_deleted_is_said_and_the_running_configuration_stays_until_it_is_back() {
    let path = write_config("reload-deleted.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &[]);
    std::fs::remove_file(&path).unwrap();
    until("the missing file is reported", WITHIN, async || {
        let last = &health(&addr).await["config"]["last_error"];
        let said = last["problems"].to_string();
        if said.contains("cannot read it") { Ok(()) } else { Err(last.to_string()) }
    })
    .await;
    assert_eq!(chat(&addr, "default").await, (200, "up:m".to_owned()), "the running configuration serves");

    std::fs::write(&path, config("", "  fast: { targets: [up:m] }", "")).unwrap();
    until_served(&addr, "fast").await;
    assert!(health(&addr).await["config"]["last_error"].is_null());
    let logs = stop_flushed(server);
    assert!(logs.contains("cannot read it"), "the log says the file is gone: {logs}");
}

/// Lays out `dir` as a Kubernetes ConfigMap volume: `switchyard.yaml -> ..data/switchyard.yaml`,
/// `..data -> ..<version>`, the file in `..<version>`.
fn configmap_version(dir: &Path, version: &str, text: &str) {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir_all(&versioned).unwrap();
    std::fs::write(versioned.join("switchyard.yaml"), text).unwrap();
    // The kubelet's swap: a new link beside the old one, renamed over it (one atomic step).
    let staged = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(format!("..{version}"), &staged).unwrap();
    std::fs::rename(&staged, dir.join("..data")).unwrap();
    let link = dir.join("switchyard.yaml");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/switchyard.yaml", &link).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_is_served() {
    let dir = support::empty_folder("reload-configmap");
    configmap_version(&dir, "2026_01", &config("", "", ""));
    let (server, addr) = serve(&dir.join("switchyard.yaml"), &[]);
    assert_eq!(chat(&addr, "fast").await.0, 404);

    configmap_version(&dir, "2026_02", &config("", "  fast: { targets: [up:m] }", ""));
    std::fs::remove_dir_all(dir.join("..2026_01")).unwrap();
    until_served(&addr, "fast").await;
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_admin_config_reload_answers_what_changed_and_needs_the_admin_key() {
    let path = write_config("reload-post.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    std::fs::write(&path, config("  spare: { kind: simulated }", "  fast: { targets: [spare:m] }", ""))
        .unwrap();

    let refused = client().post(format!("http://{addr}/admin/config/reload")).send().await.unwrap();
    assert_eq!(refused.status(), 401, "the admin key is asked for");
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"], "reloaded");
    assert_eq!(answer["changes"], json!(["providers.spare: added", "routes.fast: added"]));
    assert_ne!(answer["hash"], answer["previous_hash"]);
    assert_eq!(chat(&addr, "fast").await, (200, "spare:m".to_owned()), "served at once");

    let (status, again) = reload(&addr).await;
    assert_eq!((status, &again["result"]), (200, &json!("unchanged")), "{again}");
    let health = health(&addr).await;
    assert_eq!(health["config"]["hash"], answer["hash"]);
    assert!(health["config"]["last_error"].is_null());
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_flight_across_a_reload_finishes_on_its_configuration() {
    let slow = "  slow: { kind: simulated, reply: 'one two three four five six', stream: { chunks: 6, gap: 150ms } }";
    let path = write_config("reload-stream.yaml", &config(slow, "  story: { targets: [slow:m] }", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    let body = json!({ "model": "story", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
    let mut stream =
        client().post(format!("http://{addr}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut text = String::from_utf8(stream.chunk().await.unwrap().unwrap().to_vec()).unwrap();

    // The provider and its route go; the stream was routed to it before.
    std::fs::write(&path, config("", "  story: { targets: [up:m] }", "")).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["forgotten"]["targets"], json!(["slow:m"]));
    while let Some(chunk) = stream.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"finish_reason\":\"stop\"") && text.contains("data: [DONE]"), "{text}");
    assert_eq!(text.matches("\"content\":").count(), 6, "every chunk arrived: {text}");
    assert_eq!(chat(&addr, "story").await, (200, "up:m".to_owned()), "new requests take the new route");
    stop(server);
}

/// Follows `/admin/events` and returns each event's JSON as it comes, on a channel.
async fn follow_events(addr: &str) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let mut response =
        client().get(format!("http://{addr}/admin/events")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut pending = String::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let frame: String = pending.drain(..end + 2).collect();
                if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                    let _ = sender.send(serde_json::from_str(data).unwrap_or(Value::Null));
                }
            }
        }
    });
    receiver
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_keeps_the_running_configuration_and_says_why_everywhere() {
    let path = write_config("reload-invalid.yaml", &config("", "  fast: { targets: [up:m] }", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    let mut events = follow_events(&addr).await;
    let running = health(&addr).await["config"]["hash"].clone();

    let broken = config(
        "",
        "  fast: { targets: [nowhere:m] }\n  slow: { targets: [up:m], retry: { max_attempts: 0 } }",
        "",
    );
    std::fs::write(&path, broken).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["result"], "rejected");
    let paths: Vec<&str> =
        answer["problems"].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert!(paths.iter().any(|p| p.starts_with("routes.fast")), "{answer}");
    assert!(paths.iter().any(|p| p.starts_with("routes.slow")), "every problem at once: {answer}");

    assert_eq!(chat(&addr, "fast").await, (200, "up:m".to_owned()), "the running configuration stays");
    let health = health(&addr).await;
    assert_eq!(health["config"]["hash"], running);
    let last = &health["config"]["last_error"];
    assert_eq!(last["hash"], answer["hash"], "{health}");
    assert_eq!(last["problems"], answer["problems"]);
    let rejected = until("config_rejected on the event stream", WITHIN, async || match events.recv().await {
        Some(event) if event["event"] == "config_rejected" => Ok(event),
        other => Err(format!("{other:?}")),
    })
    .await;
    assert_eq!(rejected["hash"], answer["hash"]);
    assert!(rejected["problems"][0].as_str().unwrap().starts_with("routes."), "{rejected}");
    let metrics = client().get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("switchyard_config_reloads_total{result=\"rejected\"} 1"), "{metrics}");
    let logs = stop_flushed(server);
    assert!(logs.contains("configuration rejected") && logs.contains("routes.fast"), "{logs}");
}

/// Providers that fail: `down` (every call unavailable) behind the route `flaky`, and `paid`
/// (every call out of quota) with `key` behind `billed`.
fn failing(key: &str) -> (String, String) {
    let providers = format!(
        "  down: {{ kind: simulated, error_rates: {{ unavailable: 1.0 }} }}
  paid: {{ kind: simulated, api_key: {key}, error_rates: {{ quota_exceeded: 1.0 }} }}"
    );
    let routes = "  flaky: { targets: [down:m, up:m], retry: { max_attempts: 1 }, health_gate: false }
  billed: { targets: [paid:m, up:m], retry: { max_attempts: 1 } }";
    (providers, routes.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_and_an_exhausted_key_survive_an_unrelated_change_and_go_with_their_providers() {
    let (providers, routes) = failing("sk-spent-0123456789");
    let path = write_config("reload-learned.yaml", &config(&providers, &routes, ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    for _ in 0..2 {
        assert_eq!(chat(&addr, "flaky").await, (200, "up:m".to_owned()));
    }
    assert_eq!(chat(&addr, "billed").await, (200, "up:m".to_owned()));
    let before = health(&addr).await;
    assert_eq!(target(&before, "down:m").unwrap()["breaker"], "open", "{before}");
    let spent = credential_ids(&before, "paid").remove(0);
    assert_eq!(credential_status(&before, &spent), "exhausted");

    // An unrelated route added: both are kept.
    std::fs::write(&path, config(&providers, &format!("{routes}\n  fast: {{ targets: [up:m] }}"), ""))
        .unwrap();
    assert_eq!(reload(&addr).await.0, 200);
    let kept = health(&addr).await;
    assert_eq!(target(&kept, "down:m").unwrap()["breaker"], "open", "{kept}");
    assert_eq!(credential_status(&kept, &spent), "exhausted");

    // Both providers removed: forgotten.
    std::fs::write(&path, config("", "", "")).unwrap();
    let (_, answer) = reload(&addr).await;
    assert_eq!(answer["forgotten"]["targets"], json!(["down:m", "paid:m"]), "{answer}");
    assert_eq!(
        answer["forgotten"]["credentials"].as_array().unwrap().len(),
        2,
        "down's keyless one and paid's"
    );
    let gone = health(&addr).await;
    assert!(target(&gone, "down:m").is_none(), "{gone}");
    assert_eq!(credential_status(&gone, &spent), "unknown");

    // And back: they start fresh.
    std::fs::write(&path, config(&providers, &routes, "")).unwrap();
    assert_eq!(reload(&addr).await.0, 200);
    let fresh = health(&addr).await;
    assert_eq!(target(&fresh, "down:m").unwrap()["breaker"], "closed", "{fresh}");
    assert_eq!(credential_status(&fresh, &spent), "unknown");
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_a_fresh_credential_and_the_old_one_is_forgotten() {
    let (providers, routes) = failing("sk-spent-0123456789");
    let path = write_config("reload-rotated.yaml", &config(&providers, &routes, ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    assert_eq!(chat(&addr, "billed").await, (200, "up:m".to_owned()));
    let before = health(&addr).await;
    let spent = credential_ids(&before, "paid").remove(0);
    assert_eq!(target(&before, "paid:m").unwrap()["status"], "exhausted");

    let (rotated, _) = failing("sk-rotated-0123456789");
    std::fs::write(&path, config(&rotated, &routes, "")).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["forgotten"]["credentials"], json!([spent]));
    let after = health(&addr).await;
    let fresh = credential_ids(&after, "paid").remove(0);
    assert_ne!(fresh, spent, "a new key is a new credential");
    assert_eq!(credential_status(&after, &fresh), "unknown");
    assert!(after["credentials"].as_array().unwrap().iter().all(|c| c["credential_id"] != spent.as_str()));
    assert_eq!(target(&after, "paid:m").unwrap()["status"], "unknown", "its exhaustion was the old key's");
    let logs_key = stop_flushed(server);
    assert!(
        !logs_key.contains("sk-rotated-0123456789") && !logs_key.contains("sk-spent-0123456789"),
        "keys never logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_threads_need_a_restart_and_the_rest_of_the_reload_applies() {
    // Started on the file's `listen`, with no `--threads`: a restart would take both from it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("listen: 127.0.0.1:{port}\n");
    let path = write_config("reload-restart.yaml", &config("", "", &listen));
    let (server, addr) = support::serve_on_the_files_listen(&path, &["--no-watch"]);
    std::fs::write(
        &path,
        config("", "  fast: { targets: [up:m] }", "listen: 127.0.0.1:4999\n")
            .replace("gateway: {", "gateway: { threads: 3,"),
    )
    .unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["restart_required"], json!(["gateway.threads", "listen"]));
    assert_eq!(chat(&addr, "fast").await.0, 200, "the rest applies");
    assert_eq!(health(&addr).await["config"]["restart_required"], json!(["gateway.threads", "listen"]));

    // A later reload that changes only a route still says what awaits a restart; one that puts
    // a setting back as it runs no longer lists it.
    std::fs::write(
        &path,
        config("", "  fast: { targets: [up:m] }\n  faster: { targets: [up:m] }", "listen: 127.0.0.1:4999\n")
            .replace("gateway: {", "gateway: { threads: 3,"),
    )
    .unwrap();
    let (_, answer) = reload(&addr).await;
    assert_eq!(answer["restart_required"], json!(["gateway.threads", "listen"]), "{answer}");
    // Nothing changed: the answer still says what awaits a restart, in the same shape.
    let (_, answer) = reload(&addr).await;
    assert_eq!(answer["result"], "unchanged", "{answer}");
    assert_eq!(answer["restart_required"], json!(["gateway.threads", "listen"]), "{answer}");
    assert_eq!(answer["forgotten"], json!({ "targets": [], "credentials": [] }), "{answer}");
    std::fs::write(&path, config("", "  fast: { targets: [up:m] }", &listen)).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!((status, &answer["restart_required"]), (200, &json!([])), "{answer}");
    assert_eq!(health(&addr).await["config"]["restart_required"], json!([]));
    let logs = stop_flushed(server);
    assert!(logs.contains("apply only at a restart"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_restart_would_not_change_needs_no_restart() {
    // `--listen` and `--threads` given: a restart with the same command line keeps them, whatever
    // the file says; a value written as it runs (a default, another spelling) changes nothing.
    let path = write_config("reload-no-restart.yaml", &config("", "", "listen: 127.0.0.1:4680\n"));
    let (server, addr) = serve(&path, &["--no-watch", "--threads", "1"]);
    let rest = "listen: 127.0.0.1:4999\n";
    let same = config("", "", rest).replace("gateway: {", "gateway: { threads: 8, header_timeout: 30000ms,");
    std::fs::write(&path, &same).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["restart_required"], json!([]), "{answer}");
    // A value that does differ from the one running still does.
    std::fs::write(&path, same.replace("header_timeout: 30000ms", "header_timeout: 5s")).unwrap();
    let (_, answer) = reload(&addr).await;
    assert_eq!(answer["restart_required"], json!(["gateway.header_timeout"]), "{answer}");
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_redis_show_each_others_config_hash_and_say_when_they_disagree() {
    let redis = switchyard_state::testing::RedisServer::start();
    let state = format!("state: {{ redis: '{}', prefix: reload-test }}\n", redis.url());
    let first = write_config("reload-fleet-1.yaml", &config("", "", &state));
    let second = write_config("reload-fleet-2.yaml", &config("", "  fast: { targets: [up:m] }", &state));
    let (one, addr_one) = serve(&first, &["--no-watch"]);
    let (two, addr_two) = serve(&second, &["--no-watch"]);

    let (hash_one, hash_two) = (
        health(&addr_one).await["config"]["hash"].clone(),
        health(&addr_two).await["config"]["hash"].clone(),
    );
    assert_ne!(hash_one, hash_two);
    let fleet = until("each replica sees the other's hash", WITHIN, async || {
        let fleet = health(&addr_one).await["config"]["fleet"].clone();
        let hashes: Vec<Value> =
            fleet["replicas"].as_array().into_iter().flatten().map(|r| r["hash"].clone()).collect();
        if hashes.contains(&hash_one) && hashes.contains(&hash_two) {
            Ok(fleet)
        } else {
            Err(fleet.to_string())
        }
    })
    .await;
    assert_eq!(fleet["agrees"], false, "{fleet}");
    let (code, printed, _) =
        support::run(&["health", "--url", &format!("http://{addr_one}"), "--key", ADMIN]);
    assert_eq!(code, 0, "{printed}");
    assert!(printed.contains("the fleet disagrees"), "{printed}");
    assert!(printed.contains(hash_two.as_str().unwrap()), "{printed}");

    // The second replica's file made like the first's: they agree.
    std::fs::write(&second, std::fs::read_to_string(&first).unwrap()).unwrap();
    assert_eq!(reload(&addr_two).await.0, 200);
    until("the fleet agrees", WITHIN, async || {
        let fleet = health(&addr_one).await["config"]["fleet"].clone();
        if fleet["agrees"] == true { Ok(()) } else { Err(fleet.to_string()) }
    })
    .await;
    stop(one);
    stop(two);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_still_stops_the_gateway_after_a_reload() {
    let path = write_config("reload-term.yaml", &config("", "", ""));
    let (mut server, addr) = serve(&path, &["--no-watch"]);
    signal(&server, "HUP");
    signal(&server, "TERM");
    let exit = until("the gateway exits", WITHIN, async || match server.try_wait().unwrap() {
        Some(exit) => Ok(exit),
        None => Err("running".to_owned()),
    })
    .await;
    assert!(exit.success(), "{exit:?}");
    let _: (Child, String) = (server, addr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_rotates_the_admin_key_ends_the_event_streams_it_opened() {
    let path = write_config("reload-admin-rotated.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    let mut events =
        client().get(format!("http://{addr}/admin/events")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(events.status(), 200);
    let opening = events.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&opening).contains("switchyard events"));

    std::fs::write(&path, config("", "", "").replace(ADMIN, "rotated-admin-9876543210")).unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(chat(&addr, "default").await.0, 200);

    // The old key reads nothing more: its stream ends, what happened after is not sent.
    let mut after = String::new();
    let ended = tokio::time::timeout(WITHIN, async {
        while let Some(chunk) = events.chunk().await.unwrap() {
            after.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream of the rotated key is still open: {after}");
    assert!(!after.contains("request_finished"), "{after}");
    stop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_budgets_a_key_over_unpriced_targets_says_so_as_a_start_would() {
    let path = write_config("reload-unpriced.yaml", &config("", "", ""));
    let (server, addr) = serve(&path, &["--no-watch"]);
    let budgeted = "keys: [{ name: team, key: team-key-0123456789, budget: { usd: 5, per: day } }] }";
    std::fs::write(
        &path,
        config("", "", "").replace(&format!("{ADMIN} }}"), &format!("{ADMIN}, {budgeted}")),
    )
    .unwrap();
    let (status, answer) = reload(&addr).await;
    assert_eq!(status, 200, "{answer}");
    let warning = answer["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("the budgets of team are not charged for up:m"), "{answer}");
    let logs = stop_flushed(server);
    assert!(logs.contains("are not charged for up:m"), "{logs}");
}
