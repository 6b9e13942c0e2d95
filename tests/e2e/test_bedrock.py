"""AWS Bedrock through the real gateway, against a fake Bedrock that verifies every request's
SigV4 signature with botocore and frames its event streams as AWS does (fake_bedrock.py):
the same Claude model failed over from Anthropic to Bedrock for the Anthropic SDK, whole and
streamed; a throttled Bedrock failing over; an OpenAI client on a Converse model; a refused
beta flag moving on with health untouched; a wrong signature refused."""

import base64
import json

import anthropic
import openai
import pytest

from conftest import GATEWAY_KEY
from fake_bedrock import FakeBedrock, Reply, claude_chunks, claude_message, claude_stream_events, converse_answer, converse_stream, exception

ACCESS_KEY = "AKIAE2EBEDROCK0000001"
# Named so that the gateway fixture's leak check (no `sk-upstream` in the logs) covers them.
SECRET = "sk-upstream-aws-secret-wJalrXUtnFEMI-K7MDENG"
TOKEN = "sk-upstream-aws-session-token-FwoGZXIvYXdz"
CLAUDE_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
LLAMA_ID = "meta.llama3-3-70b-instruct-v1:0"


@pytest.fixture
def bedrock():
    fakes = []

    def start(behave, keys=None):
        fake = FakeBedrock(behave, keys if keys is not None else {ACCESS_KEY: SECRET})
        fakes.append(fake)
        return fake

    yield start
    for fake in fakes:
        fake.close()


def answering(text="Hello from Bedrock"):
    """Claude answers through InvokeModel, Llama through Converse, whole and streamed."""

    def behave(model, action, body, record):
        if action == "invoke":
            return Reply(body=claude_message(text))
        if action == "invoke-with-response-stream":
            return Reply(stream=claude_chunks(claude_stream_events(text)))
        if action == "converse":
            return Reply(body=converse_answer(text))
        if action == "converse-stream":
            return Reply(stream=converse_stream(text))
        return Reply.error(404, "UnknownOperationException", action)

    return behave


def bedrock_provider(fake, secret=SECRET, extra=""):
    return (
        f'  bedrock: {{ kind: bedrock, region: us-east-1, base_url: "{fake.url}", '
        f'models: {{ claude-sonnet-4-5: "{CLAUDE_ID}", llama: "{LLAMA_ID}" }}, '
        f'aws: {{ access_key_id: {ACCESS_KEY}, secret_access_key: "{secret}", session_token: "{TOKEN}" }}{extra} }}'
    )


def gateway_config(mock, fake, routes, anthropic_scenario="status=529", secret=SECRET, extra=""):
    lines = [
        "providers:",
        f'  anthropic: {{ kind: anthropic, base_url: "{mock.base(anthropic_scenario)}", api_key: sk-upstream-ant-0001 }}',
        f'  gpt: {{ kind: openai, base_url: "{mock.base("ok")}/v1", api_key: sk-upstream-openai-0002 }}',
        bedrock_provider(fake, secret, extra),
        "routes:",
    ]
    lines += [f"  {name}: {body}" for name, body in routes.items()]
    lines.append("gateway: { keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }")
    return "\n".join(lines) + "\n"


def claude(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key=GATEWAY_KEY, max_retries=0, timeout=30)


CHAIN = "{ targets: [anthropic:claude-sonnet-4-5, bedrock:claude-sonnet-4-5], retry: { max_attempts: 1 } }"


def test_anthropic_overloaded_fails_over_to_the_same_claude_on_bedrock(mock, gateway, bedrock):
    fake = bedrock(answering())
    gw = gateway(gateway_config(mock, fake, {"default": CHAIN}))
    raw = claude(gw).messages.with_raw_response.create(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}],
    )
    message = raw.parse()
    assert message.content[0].text == "Hello from Bedrock"
    assert raw.headers["x-switchyard-target"] == "bedrock:claude-sonnet-4-5"
    sent = fake.requests[-1]
    # A whole answer is asked of Bedrock as a stream and put back together (stream_upstream).
    assert sent["path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    assert "model" not in sent["json"] and "stream" not in sent["json"]
    assert sent["json"]["anthropic_version"] == "bedrock-2023-05-31"
    assert fake.verified == 1 and fake.refused == 0
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    first, second = record["attempts"]
    assert (first["target"], first["error"]["status"]) == ("anthropic:claude-sonnet-4-5", 529)
    assert (second["target"], second["outcome"]) == ("bedrock:claude-sonnet-4-5", "ok")
    assert second["provider_model"] == CLAUDE_ID
    assert SECRET not in json.dumps(record) and TOKEN not in json.dumps(record)

    # Asked whole, Bedrock's InvokeModel answers whole.
    gw = gateway(gateway_config(mock, fake, {"default": "{ targets: [anthropic:claude-sonnet-4-5, bedrock:claude-sonnet-4-5], retry: { max_attempts: 1 }, stream_upstream: false }"}))
    message = claude(gw).messages.create(model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}])
    assert message.content[0].text == "Hello from Bedrock"
    assert fake.requests[-1]["path"] == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    assert fake.verified == 2


def test_count_tokens_fails_over_to_claude_on_bedrock_by_its_count_tokens_api(mock, gateway, bedrock):
    counted = []

    def behave(model, action, body, record):
        if action != "count-tokens":
            return Reply.error(404, "UnknownOperationException", action)
        # As AWS: a cross-region inference profile's id cannot be counted, its model's can.
        if not model.startswith("anthropic."):
            return Reply.error(400, "ValidationException", "The provided model doesn't support counting tokens.")
        invoke = json.loads(base64.b64decode(body["input"]["invokeModel"]["body"]))
        counted.append((model, invoke))
        return Reply(body={"inputTokens": 23})

    fake = bedrock(behave)
    gw = gateway(gateway_config(mock, fake, {"default": CHAIN}))
    result = claude(gw).messages.with_raw_response.count_tokens(
        model="default", system="Be brief", messages=[{"role": "user", "content": "Hello"}],
    )
    assert result.parse().input_tokens == 23
    assert result.headers["x-switchyard-target"] == "bedrock:claude-sonnet-4-5"
    ((model, invoke),) = counted
    assert model == "anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert invoke["anthropic_version"] == "bedrock-2023-05-31" and invoke["system"] == "Be brief"
    assert invoke["messages"] == [{"role": "user", "content": "Hello"}] and invoke["max_tokens"] >= 1
    assert fake.verified == 1 and fake.refused == 0


def test_anthropic_overloaded_fails_over_to_bedrock_streamed(mock, gateway, bedrock):
    fake = bedrock(answering("streamed from Bedrock"))
    gw = gateway(gateway_config(mock, fake, {"default": CHAIN}))
    with claude(gw).messages.stream(model="default", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "streamed from Bedrock"
    assert len(pieces) >= 2
    assert final.stop_reason == "end_turn"
    assert fake.requests[-1]["path"].endswith("/invoke-with-response-stream")
    assert fake.verified == 1


def test_bedrock_throttled_fails_over_whole_and_streamed(mock, gateway, bedrock):
    def behave(model, action, body, record):
        if action == "invoke":
            return Reply.error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        return Reply(stream=exception("throttlingException", "Too many tokens, please wait before trying again."))

    fake = bedrock(behave)
    routes = {"default": "{ targets: [bedrock:claude-sonnet-4-5, gpt:gpt-backup], retry: { max_attempts: 1 } }"}
    gw = gateway(gateway_config(mock, fake, routes))
    raw = claude(gw).messages.with_raw_response.create(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}],
    )
    assert raw.parse().content[0].text == "mock answer from gpt-backup"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert record["attempts"][0]["error"]["kind"] == "rate_limited"
    assert record["attempts"][0]["error"]["code"] == "ThrottlingException"

    with claude(gw).messages.stream(model="default", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]) as stream:
        text = "".join(stream.text_stream)
    assert text == "mock answer from gpt-backup"


def test_an_openai_client_on_a_converse_model_whole_and_streamed(mock, gateway, bedrock):
    fake = bedrock(answering("Llama on Bedrock says hi"))
    gw = gateway(gateway_config(mock, fake, {"llama": "{ targets: [bedrock:llama] }"}))
    sdk = openai.OpenAI(base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, timeout=30)
    answer = sdk.chat.completions.create(model="llama", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], max_tokens=20)
    assert answer.choices[0].message.content == "Llama on Bedrock says hi"
    assert answer.usage.prompt_tokens == 7
    sent = [r for r in fake.requests if r.get("action") in ("converse", "converse-stream")][-1]
    assert sent["path"] == "/model/meta.llama3-3-70b-instruct-v1%3A0/converse-stream", "a whole answer is streamed upstream"
    assert sent["json"]["system"] == [{"text": "Be brief."}]
    assert sent["json"]["inferenceConfig"] == {"maxTokens": 20}

    stream = sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Llama on Bedrock says hi"
    assert fake.refused == 0 and fake.verified == 2


def test_a_refused_beta_flag_skips_bedrock_with_health_untouched(mock, gateway, bedrock):
    def behave(model, action, body, record):
        if body.get("anthropic_beta"):
            return Reply.error(400, "ValidationException", "invalid beta flag")
        return answering()(model, action, body, record)

    fake = bedrock(behave)
    routes = {"default": "{ targets: [bedrock:claude-sonnet-4-5, anthropic:claude-sonnet-4-5] }"}
    gw = gateway(gateway_config(mock, fake, routes, anthropic_scenario="ok"))
    raw = claude(gw).messages.with_raw_response.create(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"anthropic-beta": "claude-code-20250219"},
    )
    assert raw.parse().content[0].text == "mock answer from claude-sonnet-4-5"
    assert fake.requests[-1]["json"]["anthropic_beta"] == ["claude-code-20250219"]
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    # Bedrock was asked and refused: a call that failed, the target's lack, not its health.
    assert [a["outcome"] for a in record["attempts"]] == ["failed", "ok"]
    refusal = record["attempts"][0]["error"]
    assert (refusal["status"], refusal["unsupported"]) == (400, True), refusal
    health = gw.health_of("bedrock:claude-sonnet-4-5")
    assert health["status"] in ("unknown", "available"), health


def test_betas_drop_lets_bedrock_answer_a_client_sending_flags(mock, gateway, bedrock):
    def behave(model, action, body, record):
        if body.get("anthropic_beta"):
            return Reply.error(400, "ValidationException", "invalid beta flag")
        return answering()(model, action, body, record)

    fake = bedrock(behave)
    gw = gateway(gateway_config(mock, fake, {"default": "{ targets: [bedrock:claude-sonnet-4-5] }"}, extra=", betas: drop"))
    message = claude(gw).messages.create(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"anthropic-beta": "claude-code-20250219"},
    )
    assert message.content[0].text == "Hello from Bedrock"
    assert "anthropic_beta" not in fake.requests[-1]["json"]


def test_a_wrong_signature_is_refused_and_reported_as_auth_without_secrets(mock, gateway, bedrock):
    fake = bedrock(answering())
    gw = gateway(gateway_config(mock, fake, {"default": "{ targets: [bedrock:claude-sonnet-4-5] }"}, secret="sk-upstream-aws-secret-WRONG-0000000000"))
    with pytest.raises(anthropic.APIStatusError) as refused:
        claude(gw).messages.create(model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}])
    assert fake.refused >= 1 and fake.verified == 0
    assert "sk-upstream" not in str(refused.value.body)
    _, record, _ = gw.get("/admin/requests/" + refused.value.response.headers["x-request-id"])
    assert "sk-upstream" not in json.dumps(record)
    error = record["attempts"][0]["error"]
    assert (error["kind"], error["status"], error["code"]) == ("auth", 403, "InvalidSignatureException")


class Collector:
    """An OTLP/HTTP collector on loopback that keeps every export's body as text."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                collector.bodies.append(body.decode("utf-8", "replace"))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def redis_dump(redis_url):
    """Every key of the Redis at `redis_url` and its value, as text."""
    import subprocess

    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    cli = lambda *args: subprocess.run(["redis-cli", "-p", port, *args], capture_output=True, text=True).stdout  # noqa: E731
    out = []
    for key in cli("--scan").split():
        kind = cli("type", key).strip()
        read = {"string": ("get",), "hash": ("hgetall",), "stream": ("xrange",), "zset": ("zrange",), "set": ("smembers",)}
        args = {"stream": (key, "-", "+"), "zset": (key, "0", "-1")}.get(kind, (key,))
        out.append(key + " " + cli(*read.get(kind, ("type",)), *args))
    return "\n".join(out)


def test_no_secret_key_session_token_or_signature_in_logs_events_metrics_or_trails(mock, bedrock, tmp_path, redis_url):
    import os
    import subprocess
    import tempfile
    import time
    import urllib.request

    from conftest import ADMIN_KEY, BIN, _read_listening

    signatures = []

    def behave(model, action, body, record):
        # A service that echoes everything it was sent, as SignatureDoesNotMatch echoes the
        # canonical request (session token included).
        signature = record["headers"]["authorization"].rsplit("Signature=", 1)[1]
        signatures.append(signature)
        return Reply.error(403, "AccessDeniedException", f"denied: token {TOKEN} secret {SECRET} signature {signature}")

    fake = bedrock(behave)
    collector = Collector()
    path = tmp_path / "leak.yaml"
    # With the fleet's Redis (health, trails, events) and every trace exported: none may hold them.
    shared = (
        f'state: {{ redis: "{redis_url}", prefix: leak }}\n'
        f'telemetry: {{ endpoint: "{collector.url}", protocol: http/json, sampler: always_on }}\n'
    )
    path.write_text(gateway_config(mock, fake, {"default": "{ targets: [bedrock:claude-sonnet-4-5] }"}) + shared)
    env = dict(os.environ, E2E_GATEWAY_KEY=GATEWAY_KEY, E2E_ADMIN_KEY=ADMIN_KEY, AWS_EC2_METADATA_DISABLED="true")
    env["SWITCHYARD_REPLICA"] = "leak-test"
    env.pop("RUST_LOG", None)
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(
        [BIN, "serve", "--config", str(path), "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "trace"],
        stdout=subprocess.PIPE, stderr=log, text=True, env=env,
    )
    try:
        url = "http://" + _read_listening(process, "switchyard serve")
        sdk = anthropic.Anthropic(base_url=url, api_key=GATEWAY_KEY, max_retries=0, timeout=30)
        seen = []
        for stream in (False, True):
            with pytest.raises(anthropic.APIStatusError) as refused:
                if stream:
                    with sdk.messages.stream(model="default", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]) as s:
                        list(s.text_stream)
                else:
                    sdk.messages.create(model="default", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
            seen.append(str(refused.value.body))
        for target in ("/metrics", "/admin/requests", "/admin/health"):
            request = urllib.request.Request(url + target, headers={"authorization": f"Bearer {ADMIN_KEY}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                seen.append(response.read().decode())
        request = urllib.request.Request(url + "/admin/events?recent=100", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            seen.append(response.read1(65536).decode())
        # The trails reach Redis within the writer's gathering (50 ms).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "trail:" not in redis_dump(redis_url):
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(timeout=10)
        collector.close()
    log.seek(0)
    seen.append(log.read())
    seen.append(redis_dump(redis_url))
    seen.extend(collector.bodies)
    text = "\n".join(seen)
    assert "trail:" in seen[-1 - len(collector.bodies)], "the trails reached Redis"
    assert collector.bodies and "chat" in "".join(collector.bodies), "the traces were exported"
    assert signatures and "AccessDeniedException" in text
    assert "denied: token [redacted]" in text, "the provider's message is kept, less its secrets"
    for secret in [SECRET, TOKEN, *signatures]:
        assert secret not in text, f"{secret[:12]}... leaked"


def test_doctor_pings_bedrock_with_a_signed_call_and_names_its_credentials(mock, bedrock, tmp_path):
    import os
    import subprocess

    from conftest import BIN

    fake = bedrock(answering("pong"))
    path = tmp_path / "doctor.yaml"
    path.write_text(gateway_config(mock, fake, {"default": "{ targets: [bedrock:claude-sonnet-4-5, bedrock:llama] }"}))
    env = dict(os.environ, E2E_GATEWAY_KEY=GATEWAY_KEY, E2E_ADMIN_KEY="sk-admin-e2e-9876543210", AWS_EC2_METADATA_DISABLED="true")
    done = subprocess.run([BIN, "doctor", "--ping", "--config", str(path)], capture_output=True, text=True, env=env, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "region us-east-1" in out
    assert "aws credentials: switchyard-config (access key AKIA****0001, with a session token)" in out
    assert sorted(r["model"] for r in fake.requests) == [LLAMA_ID, CLAUDE_ID], "one call per target"
    assert fake.verified == len(fake.requests) and fake.refused == 0
    assert SECRET not in out and TOKEN not in out


def test_sso_profile_credentials_sign_bedrock_calls(mock, gateway, bedrock, tmp_path):
    """A Bedrock provider on an IAM Identity Center (SSO) profile: the gateway reads the
    `sso-session` profile and the token `aws sso login` cached, asks the portal for the role's
    credentials, and signs with them (verified by botocore); no secret reaches the logs."""
    import hashlib
    import os
    import time

    from fake_bedrock import FakeSsoPortal

    sso_token = "sk-upstream-sso-access-token-aoJGUhKc"
    sso_key, sso_secret, sso_session = "ASIAE2ESSOROLE000001", "sk-upstream-sso-secret-Zx81", "sk-upstream-sso-session-Qw9"
    expiry_ms = int((time.time() + 3600) * 1000)
    portal = FakeSsoPortal(sso_token, "111122223333", "BedrockUser", (sso_key, sso_secret, sso_session, expiry_ms))
    home = tmp_path / "home"
    (home / ".aws" / "sso" / "cache").mkdir(parents=True)
    (home / ".aws" / "config").write_text(
        "[profile corp-dev]\nsso_session = corp\nsso_account_id = 111122223333\n"
        "sso_role_name = BedrockUser\nregion = us-east-1\n\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n"
        "sso_registration_scopes = sso:account:access\n"
    )
    # Where `aws sso login` leaves the token of session `corp`: the SHA-1 of its name.
    cached = home / ".aws" / "sso" / "cache" / (hashlib.sha1(b"corp").hexdigest() + ".json")
    cached.write_text(json.dumps({"accessToken": sso_token, "expiresAt": "2099-01-01T00:00:00Z",
                                  "region": "us-east-1", "startUrl": "https://corp.awsapps.com/start"}))
    fake = bedrock(answering("Signed through SSO"), keys={sso_key: sso_secret})
    provider = (f'  bedrock: {{ kind: bedrock, region: us-east-1, base_url: "{fake.url}", '
                f'models: {{ claude-sonnet-4-5: "{CLAUDE_ID}" }}, aws: {{ profile: corp-dev }} }}')
    config = "\n".join(["providers:", provider, "routes:",
                        "  default: { targets: [bedrock:claude-sonnet-4-5] }",
                        "gateway: { keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }"]) + "\n"
    env = {"HOME": str(home), "AWS_CONFIG_FILE": str(home / ".aws" / "config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(home / ".aws" / "credentials"),
           "AWS_ENDPOINT_URL_SSO": portal.url, "AWS_EC2_METADATA_DISABLED": "true"}
    assert "AWS_ACCESS_KEY_ID" not in os.environ, "AWS keys in the environment come before any profile"
    try:
        gw = gateway(config, env=env)
        for stream in (False, True):
            if stream:
                with claude(gw).messages.stream(model="default", max_tokens=64,
                                                messages=[{"role": "user", "content": "Hi"}]) as answer:
                    text = "".join(answer.text_stream)
            else:
                message = claude(gw).messages.create(model="default", max_tokens=64,
                                                     messages=[{"role": "user", "content": "Hi"}])
                text = message.content[0].text
            assert text == "Signed through SSO"
        assert fake.verified == 2 and fake.refused == 0, "both calls signed with the role's credentials"
        assert all(r["headers"].get("x-amz-security-token") == sso_session for r in fake.requests)
        assert [c["token_matches"] for c in portal.calls] == [True], "the portal asked once, with the cached token"
        _, metrics, _ = gw.get("/metrics")
        for secret in (sso_token, sso_secret, sso_session):
            assert secret not in str(metrics)
    finally:
        portal.close()
