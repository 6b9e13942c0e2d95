//! Upstreams behind TLS, as every real provider is: a provider's `ca_file` trusts a private
//! certificate authority, and streamed and non-streamed calls keep reusing one connection, so
//! no request pays a second handshake.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::in_process_url;

/// A certificate authority and a certificate for 127.0.0.1 it signed, in a folder of their own.
fn certificates(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("switchyard-tls-{name}-{}", std::process::id()));
    switchyard_state::testing::make_certificates(&dir);
    dir
}

/// The mock behind TLS with the certificate in `dir`; its `https://` address.
async fn tls_mock(dir: &Path) -> (String, tokio::task::JoinHandle<()>) {
    let identity = switchyard_mock::TlsIdentity::from_pem(
        &std::fs::read(dir.join("server.crt")).unwrap(),
        &std::fs::read(dir.join("server.key")).unwrap(),
    )
    .unwrap();
    let (addr, server) = switchyard_mock::spawn_tls(&identity).await.unwrap();
    (format!("https://{addr}"), server)
}

/// A client of the mock itself, trusting the test authority: reads `/_stats`.
fn mock_client(dir: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.crt")).unwrap()).unwrap();
    reqwest::Client::builder().add_root_certificate(ca).build().unwrap()
}

async fn connections(client: &reqwest::Client, mock: &str) -> u64 {
    let stats: Value = client.get(format!("{mock}/_stats")).send().await.unwrap().json().await.unwrap();
    stats["connections"].as_u64().unwrap()
}

#[tokio::test]
async fn a_provider_behind_a_private_authority_is_reached_with_its_ca_file_and_refused_without() {
    let dir = certificates("trust");
    let (mock, _server) = tls_mock(&dir).await;
    let ca = dir.join("ca.crt");
    let yaml = format!(
        "providers:\n  trusted: {{ kind: openai_compatible, base_url: '{mock}/ok/v1', ca_file: '{}' }}\n  bare: {{ kind: openai_compatible, base_url: '{mock}/ok/v1' }}\nroutes:\n  default: {{ targets: [trusted:m] }}\n  bare: {{ targets: [bare:m], retry: {{ max_attempts: 1 }} }}\n",
        ca.display()
    );
    let gateway = in_process_url(&yaml).await;
    let client = reqwest::Client::new();
    let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});

    let answer =
        client.post(format!("{gateway}/v1/chat/completions")).json(&chat("default")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion", "{body}");

    // Without the authority, the platform's roots alone do not know the certificate: the
    // attempt fails at the handshake, and the trail says why.
    let refused =
        client.post(format!("{gateway}/v1/chat/completions")).json(&chat("bare")).send().await.unwrap();
    assert_ne!(refused.status(), 200);
    let id = refused.headers()["x-request-id"].to_str().unwrap().to_owned();
    let record: Value =
        client.get(format!("{gateway}/admin/requests/{id}")).send().await.unwrap().json().await.unwrap();
    let error = record["attempts"][0]["error"].to_string();
    assert!(error.contains("certificate"), "the handshake failure is not named: {record}");
}

#[tokio::test]
async fn sequential_requests_over_tls_reuse_one_upstream_connection_in_both_dialects() {
    let dir = certificates("reuse");
    let (mock, _server) = tls_mock(&dir).await;
    let ca = dir.join("ca.crt");
    let yaml = format!(
        "providers:\n  oai: {{ kind: openai_compatible, base_url: '{mock}/ok~chunks=4/v1', ca_file: '{ca}' }}\n  ant: {{ kind: anthropic, base_url: '{mock}/ok~chunks=4', api_key: sk-ant-test-0123456789, ca_file: '{ca}' }}\nroutes:\n  default: {{ targets: [oai:m] }}\n  claude: {{ targets: [ant:claude-haiku-4-5] }}\n",
        ca = ca.display()
    );
    let gateway = in_process_url(&yaml).await;
    let stats = mock_client(&dir);
    let before = connections(&stats, &mock).await;
    let client = reqwest::Client::new();
    let messages = json!([{"role": "user", "content": "hi"}]);
    for stream in [true, false, true, true, false, true, true, true] {
        let openai = client
            .post(format!("{gateway}/v1/chat/completions"))
            .json(&json!({"model": "default", "messages": messages, "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(openai.status(), 200);
        let text = openai.text().await.unwrap();
        assert!(!stream || text.contains("data: [DONE]"), "{text}");
        let anthropic = client
            .post(format!("{gateway}/v1/messages"))
            .json(&json!({"model": "claude", "max_tokens": 64, "messages": messages, "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(anthropic.status(), 200);
        let text = anthropic.text().await.unwrap();
        assert!(!stream || text.contains("event: message_stop"), "{text}");
    }
    // One connection per provider: each stream was read to its end and gave its connection
    // back, so no request paid a second handshake.
    assert_eq!(connections(&stats, &mock).await - before, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_replaced_on_disk_is_read_again_by_a_reload() {
    let (right, wrong) = (certificates("replaced-right"), certificates("replaced-wrong"));
    let (mock, _server) = tls_mock(&right).await;
    let ca = right.join("trusted.crt");
    std::fs::copy(wrong.join("ca.crt"), &ca).unwrap();
    let yaml = format!(
        "providers:\n  up: {{ kind: openai_compatible, base_url: '{mock}/ok/v1', ca_file: '{}' }}\nroutes:\n  default: {{ targets: [up:m], retry: {{ max_attempts: 1 }} }}\n",
        ca.display()
    );
    let path = support::write_config("tls-ca-replaced.yaml", &yaml);
    let (gateway, addr) = support::serve(&path, &["--no-watch"]);
    let client = reqwest::Client::new();
    let chat = || {
        let body = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
        client.post(format!("http://{addr}/v1/chat/completions")).json(&body).send()
    };
    assert_eq!(chat().await.unwrap().status(), 502, "the mock's authority is not the one trusted");

    // The operator installs the right authority in the same file; the configuration's text is
    // the same.
    std::fs::copy(right.join("ca.crt"), &ca).unwrap();
    let reloaded = client.post(format!("http://{addr}/admin/config/reload")).send().await.unwrap();
    let answer: Value = reloaded.json().await.unwrap();
    assert_eq!(answer["result"], "reloaded", "{answer}");
    assert_eq!(chat().await.unwrap().status(), 200);
    support::stop(gateway);
}
