//! Where a Bedrock provider's AWS credentials come from, through the real binary: `switchyard
//! doctor` names the provider of the chain that gave them and the access key, masked. Each
//! source is a local double on 127.0.0.1: the environment, profile files in a temporary home,
//! web identity against a fake STS, container credentials, instance metadata, and a role
//! assumed on top of explicit keys. The binary runs with a cleared environment, so that
//! nothing of the machine's AWS setup (nor 169.254.169.254) is reached.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const TOKEN: &str = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN";

/// A fake AWS endpoint on 127.0.0.1 answering each request with `reply(method, path, body,
/// headers)`; every request is kept.
struct FakeAws {
    origin: String,
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl FakeAws {
    async fn start(reply: impl Fn(&str, &str, &str) -> Response + Send + Sync + 'static) -> FakeAws {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let reply = Arc::new(reply);
        let app = Router::new().fallback(move |request: Request| {
            let (record, reply) = (record.clone(), reply.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = String::from_utf8_lossy(&axum::body::to_bytes(body, usize::MAX).await.unwrap())
                    .into_owned();
                let auth = parts
                    .headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                record.lock().unwrap().push((parts.uri.path().to_owned(), body.clone(), auth));
                reply(parts.method.as_str(), parts.uri.path(), &body)
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeAws { origin, seen }
    }

    fn seen(&self) -> Vec<(String, String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn sts_reply(action: &str, access_key: &str) -> Response {
    let xml = format!(
        r#"<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><{action}Result><Credentials><AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>{SECRET}</SecretAccessKey><SessionToken>{TOKEN}</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/bedrock/switchyard</Arn><AssumedRoleId>AROAEXAMPLE:switchyard</AssumedRoleId></AssumedRoleUser></{action}Result><ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata></{action}Response>"#
    );
    ([("content-type", "text/xml")], xml).into_response()
}

fn credentials_json(access_key: &str) -> String {
    format!(
        r#"{{"Code":"Success","LastUpdated":"2026-01-01T00:00:00Z","Type":"AWS-HMAC","AccessKeyId":"{access_key}","SecretAccessKey":"{SECRET}","Token":"{TOKEN}","Expiration":"2099-01-01T00:00:00Z"}}"#
    )
}

/// A temporary home for one test, with the config file naming a bedrock provider.
fn home(name: &str, aws: &str) -> (PathBuf, PathBuf) {
    let dir = support::empty_folder(name);
    let config = dir.join("switchyard.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  bedrock: {{ kind: bedrock, region: us-east-1, base_url: \"http://127.0.0.1:9\"{aws} }}\nroutes:\n  default: {{ targets: [bedrock:claude] }}\n"
        ),
    )
    .unwrap();
    (dir, config)
}

/// `switchyard doctor` with only `env` (and a home of its own), on a blocking thread.
async fn doctor(home: &Path, config: &Path, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(support::BIN);
    command.env_clear().env("HOME", home).env("PATH", std::env::var("PATH").unwrap_or_default());
    command.envs(env.iter().copied()).args(["doctor", "--config", config.to_str().unwrap()]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    for secret in [SECRET, TOKEN] {
        assert!(!text.contains(secret), "doctor printed a secret: {text}");
    }
    text
}

fn credentials_line(output: &str) -> &str {
    output
        .lines()
        .find(|l| l.trim_start().starts_with("aws credentials:"))
        .unwrap_or_else(|| panic!("{output}"))
}

const NO_IMDS: (&str, &str) = ("AWS_EC2_METADATA_DISABLED", "true");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_the_environment() {
    let (dir, config) = home("aws-env", "");
    let out = doctor(
        &dir,
        &config,
        &[("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT0001"), ("AWS_SECRET_ACCESS_KEY", SECRET), NO_IMDS],
    )
    .await;
    assert_eq!(
        credentials_line(&out).trim(),
        "aws credentials: EnvironmentVariable (access key AKIA****0001)",
        "{out}"
    );
    assert!(
        out.contains("region us-east-1") && out.contains("auth: SigV4 with the AWS default chain"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_a_named_profile_of_the_shared_files() {
    let (dir, config) = home("aws-profile", ", aws: { profile: prod }");
    std::fs::create_dir_all(dir.join(".aws")).unwrap();
    std::fs::write(
        dir.join(".aws/credentials"),
        format!("[default]\naws_access_key_id = AKIADEFAULTPROFILE01\naws_secret_access_key = {SECRET}\n\n[prod]\naws_access_key_id = AKIAPRODPROFILE00001\naws_secret_access_key = {SECRET}\naws_session_token = {TOKEN}\n"),
    )
    .unwrap();
    let out = doctor(&dir, &config, &[NO_IMDS]).await;
    assert_eq!(
        credentials_line(&out).trim(),
        "aws credentials: ProfileFile (access key AKIA****0001, with a session token)",
        "{out}"
    );
    assert!(out.contains("profile `prod`"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_a_config_file_named_by_aws_config_file() {
    let (dir, config) = home("aws-config-file", "");
    let file = dir.join("elsewhere.ini");
    std::fs::write(
        &file,
        format!(
            "[profile team]\naws_access_key_id = AKIACONFIGFILE000001\naws_secret_access_key = {SECRET}\n"
        ),
    )
    .unwrap();
    let out = doctor(
        &dir,
        &config,
        &[("AWS_CONFIG_FILE", file.to_str().unwrap()), ("AWS_PROFILE", "team"), NO_IMDS],
    )
    .await;
    assert_eq!(
        credentials_line(&out).trim(),
        "aws credentials: ProfileFile (access key AKIA****0001)",
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_web_identity_exchanged_at_sts() {
    let sts = FakeAws::start(|_, _, body| {
        if body.contains("Action=AssumeRoleWithWebIdentity")
            && body.contains("WebIdentityToken=eyJ.web.identity")
        {
            sts_reply("AssumeRoleWithWebIdentity", "ASIAWEBIDENTITY00001")
        } else {
            (axum::http::StatusCode::FORBIDDEN, "no").into_response()
        }
    })
    .await;
    let (dir, config) = home("aws-web-identity", "");
    let token = dir.join("token");
    std::fs::write(&token, "eyJ.web.identity").unwrap();
    let out = doctor(
        &dir,
        &config,
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/bedrock"),
            ("AWS_ROLE_SESSION_NAME", "switchyard-test"),
            ("AWS_ENDPOINT_URL_STS", &sts.origin),
            NO_IMDS,
        ],
    )
    .await;
    assert!(
        credentials_line(&out).trim().starts_with(
            "aws credentials: WebIdentityToken (access key ASIA****0001, with a session token, expiring in"
        ),
        "{out}"
    );
    assert_eq!(sts.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_the_container_endpoint() {
    let ecs = FakeAws::start(|_, path, _| {
        if path == "/v2/credentials/task" {
            credentials_json("ASIACONTAINER0000001").into_response()
        } else {
            axum::http::StatusCode::NOT_FOUND.into_response()
        }
    })
    .await;
    let (dir, config) = home("aws-container", "");
    let uri = format!("{}/v2/credentials/task", ecs.origin);
    let out = doctor(
        &dir,
        &config,
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token"),
            NO_IMDS,
        ],
    )
    .await;
    assert!(
        credentials_line(&out)
            .trim()
            .starts_with("aws credentials: EcsContainer (access key ASIA****0001, with a session token"),
        "{out}"
    );
    assert_eq!(ecs.seen()[0].2, "pod-token", "the container token is sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_instance_metadata() {
    let imds = FakeAws::start(|method, path, _| match (method, path) {
        ("PUT", "/latest/api/token") => {
            ([("x-aws-ec2-metadata-token-ttl-seconds", "21600")], "imds-session-token").into_response()
        }
        ("GET", "/latest/meta-data/iam/security-credentials/") => "bedrock-role".into_response(),
        ("GET", "/latest/meta-data/iam/security-credentials/bedrock-role") => {
            credentials_json("ASIAINSTANCE00000001").into_response()
        }
        _ => axum::http::StatusCode::NOT_FOUND.into_response(),
    })
    .await;
    let (dir, config) = home("aws-imds", "");
    let out = doctor(&dir, &config, &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds.origin)]).await;
    assert!(
        credentials_line(&out)
            .trim()
            .starts_with("aws credentials: IMDSv2 (access key ASIA****0001, with a session token"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_is_assumed_with_the_explicit_keys() {
    let sts = FakeAws::start(|_, _, body| {
        if body.contains("Action=AssumeRole") && body.contains("RoleSessionName=switchyard") {
            sts_reply("AssumeRole", "ASIAASSUMEDROLE00001")
        } else {
            (axum::http::StatusCode::FORBIDDEN, "no").into_response()
        }
    })
    .await;
    let aws = format!(
        ", aws: {{ access_key_id: AKIAEXPLICITBASE0001, secret_access_key: \"{SECRET}\", role_arn: \"arn:aws:iam::123456789012:role/bedrock\" }}"
    );
    let (dir, config) = home("aws-assume-role", &aws);
    let out = doctor(&dir, &config, &[("AWS_ENDPOINT_URL_STS", &sts.origin), NO_IMDS]).await;
    assert!(
        credentials_line(&out)
            .trim()
            .starts_with("aws credentials: AssumeRoleProvider (access key ASIA****0001"),
        "{out}"
    );
    assert!(
        out.contains("explicit keys (AKIA****0001), assuming arn:aws:iam::123456789012:role/bedrock"),
        "{out}"
    );
    let (_, _, authorization) = &sts.seen()[0];
    assert!(
        authorization.contains("Credential=AKIAEXPLICITBASE0001/"),
        "AssumeRole is signed with the base keys: {authorization}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_anywhere_is_said_plainly() {
    let (dir, config) = home("aws-none", "");
    let out = doctor(&dir, &config, &[NO_IMDS]).await;
    assert!(credentials_line(&out).contains("none found"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_is_used_instead_of_sigv4() {
    let (dir, config) = home("aws-api-key", ", api_key: env://AWS_BEARER_TOKEN_BEDROCK");
    let out =
        doctor(&dir, &config, &[("AWS_BEARER_TOKEN_BEDROCK", "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"), NO_IMDS])
            .await;
    assert!(out.contains("auth: Bedrock API key (Authorization: Bearer)"), "{out}");
    assert!(!out.contains("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"), "{out}");
}
