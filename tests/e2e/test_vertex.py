"""Google Vertex AI behind the real gateway: the official SDKs against `switchyard serve`, a
fake Vertex (fake_vertex.py) that verifies the service account's signed JWT before it issues a
token and refuses any call without a current one."""

import subprocess
import time

import anthropic
import openai
import pytest

from conftest import BIN, GATEWAY_KEY, config
from fake_vertex import SA_EMAIL, FakeVertex

CLAUDE = "claude-sonnet-4-5@20250929"
GEMINI = "gemini-2.5-flash"
ANT_KEY = "api_key: sk-upstream-ant-0001"
OPENAI_KEY = "api_key: sk-upstream-openai-0002"


@pytest.fixture
def vertex(tmp_path):
    fake = FakeVertex()
    fake.sa_file = fake.key_file(tmp_path)
    yield fake
    fake.stop()


def vertex_provider(fake, provider_id="vertex", prefix="", more=""):
    return (
        f"  {provider_id}: {{ kind: vertex, project: switchyard-e2e, region: us-east5, "
        f"base_url: \"{fake.url}{prefix}/v1\", credentials: \"{fake.sa_file}\"{more} }}\n"
    )


def with_vertex(text, *providers):
    """`text` (a config from conftest's `config`) with the Vertex providers added."""
    return text.replace("providers:\n", "providers:\n" + "".join(providers), 1)


def anthropic_client(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key=GATEWAY_KEY, max_retries=0, timeout=30)


def openai_client(gw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, timeout=30)


PRICED = f", prices: {{ \"{CLAUDE}\": {{ input: 3, output: 15 }} }}"


def claude_route(mock, vertex, gateway, args=(), route=""):
    text = config(
        mock,
        {"claude": ("anthropic", "status=529", ANT_KEY)},
        {"default": f"{{ targets: [claude:claude-sonnet-4-5, vertex:{CLAUDE}], retry: {{ max_attempts: 1 }}{route} }}"},
    )
    return gateway(with_vertex(text, vertex_provider(vertex, more=PRICED)), args=args)


def test_an_overloaded_anthropic_fails_over_to_the_same_claude_on_vertex_whole(mock, vertex, gateway):
    # Asked whole upstream too (by default a whole answer is streamed upstream and put together).
    gw = claude_route(mock, vertex, gateway, route=", stream_upstream: false")
    raw = anthropic_client(gw).messages.with_raw_response.create(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
    )
    message = raw.parse()
    assert message.content[0].text == f"vertex answer from {CLAUDE}"
    assert message.usage.output_tokens == 5
    assert raw.headers["x-switchyard-target"] == f"vertex:{CLAUDE}"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert [a["outcome"] for a in record["attempts"]] == ["failed", "ok"]
    assert (record["attempts"][0]["error"]["status"], record["attempts"][0]["error"]["kind"]) == (529, "unavailable")
    path, headers, body = vertex.calls[-1]
    assert path == f"/v1/projects/switchyard-e2e/locations/us-east5/publishers/anthropic/models/{CLAUDE}:rawPredict"
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16"
    assert body["messages"] == [{"role": "user", "content": "Hello"}], "the client's body, as written"
    # The answer is priced by the Vertex model id: 10 input and 5 output tokens at 3 and 15 per million.
    _, metrics, _ = gw.get("/metrics")
    cost = next(line for line in metrics.splitlines() if line.startswith("switchyard_cost_total") and CLAUDE in line)
    assert abs(float(cost.rsplit(" ", 1)[1]) - 0.000105) < 1e-12, cost


def test_an_overloaded_anthropic_fails_over_to_the_same_claude_on_vertex_streamed(mock, vertex, gateway):
    gw = claude_route(mock, vertex, gateway)
    with anthropic_client(gw).messages.stream(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == f"vertex answer from {CLAUDE}"
    assert len(pieces) == 3
    assert final.stop_reason == "end_turn"
    path, headers, body = vertex.calls[-1]
    assert path.endswith(f"/publishers/anthropic/models/{CLAUDE}:streamRawPredict")
    assert body["stream"] is True and "model" not in body
    lower = {name.lower(): value for name, value in headers.items()}
    assert lower.get("anthropic-beta") == "context-1m-2025-08-07"
    assert "anthropic-version" not in lower


def test_an_openai_client_is_answered_by_gemini_on_vertex_whole_and_streamed(mock, vertex, gateway):
    text = config(mock, {}, {"gem": f"{{ targets: [vertex:{GEMINI}] }}"})
    gw = gateway(with_vertex(text, vertex_provider(vertex)))
    sdk = openai_client(gw)
    raw = sdk.chat.completions.with_raw_response.create(model="gem", messages=[{"role": "user", "content": "Hi"}])
    completion = raw.parse()
    assert completion.choices[0].message.content == f"gemini on vertex: {GEMINI}"
    assert completion.usage.total_tokens == 11
    assert raw.headers["x-switchyard-target"] == f"vertex:{GEMINI}"
    stream = sdk.chat.completions.create(model="gem", messages=[{"role": "user", "content": "Hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == f"gemini on vertex: {GEMINI}"
    paths = [path for path, _, _ in vertex.calls]
    assert any(p.endswith(f"/publishers/google/models/{GEMINI}:streamGenerateContent?alt=sse") for p in paths), paths


def test_vertex_resource_exhausted_fails_over_and_rests_the_target_for_the_cooldown(mock, vertex, gateway):
    text = config(
        mock,
        {"gpt": ("openai", "ok", OPENAI_KEY)},
        {"default": f"{{ targets: [vertex:{GEMINI}, gpt:gpt-backup], retry: {{ max_attempts: 1 }} }}"},
        extra="health: { cooldown_on_rate_limit: 30s }\n",
    )
    gw = gateway(with_vertex(text, vertex_provider(vertex, prefix="/exhausted")))
    sdk = openai_client(gw)
    first = sdk.chat.completions.with_raw_response.create(model="default", messages=[{"role": "user", "content": "Hi"}])
    assert first.parse().choices[0].message.content == "mock answer from gpt-backup"
    assert first.headers["x-switchyard-target"] == "gpt:gpt-backup"
    _, record, _ = gw.get("/admin/requests/" + first.headers["x-request-id"])
    error = record["attempts"][0]["error"]
    assert (error["kind"], error["status"], error.get("code")) == ("rate_limited", 429, "RESOURCE_EXHAUSTED")
    # Within the cooldown, Vertex is not asked again.
    second = sdk.chat.completions.with_raw_response.create(model="default", messages=[{"role": "user", "content": "Hi"}])
    assert second.headers["x-switchyard-target"] == "gpt:gpt-backup"
    assert vertex.exhausted == 1


def test_the_token_is_fetched_once_for_many_calls_and_again_after_it_expires(mock, vertex, gateway):
    vertex.lifetime = 10
    text = config(mock, {}, {"gem": f"{{ targets: [vertex:{GEMINI}] }}", "claude": f"{{ targets: [vertex:{CLAUDE}] }}"})
    gw = gateway(with_vertex(text, vertex_provider(vertex)))
    sdk, claude = openai_client(gw), anthropic_client(gw)
    for _ in range(3):
        sdk.chat.completions.create(model="gem", messages=[{"role": "user", "content": "Hi"}])
        claude.messages.create(model="claude", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    assert len(vertex.grants) == 1, "one token for every call while it is good"
    assert len(vertex.assertions) == 1
    # Past the token's life (the gateway refreshes it before then, at the latest when it ends).
    time.sleep(max(0.0, vertex.grants[0] + vertex.lifetime + 0.2 - time.monotonic()))
    answer = sdk.chat.completions.create(model="gem", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content == f"gemini on vertex: {GEMINI}"
    assert len(vertex.grants) == 2
    assert vertex.refused_tokens == 0, "no call went out with an expired token"


def test_a_reload_that_leaves_the_provider_as_it_was_keeps_its_token(mock, vertex, gateway):
    text = config(mock, {}, {"claude": f"{{ targets: [vertex:{CLAUDE}] }}"})
    # Reloaded when asked, not when the watch sees the file change.
    gw = gateway(with_vertex(text, vertex_provider(vertex)), args=("--no-watch",))
    claude = anthropic_client(gw)
    claude.messages.create(model="claude", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    assert len(vertex.grants) == 1
    # A route added, the provider as it was: its adapter, and the token it holds, go on.
    text = config(mock, {}, {"claude": f"{{ targets: [vertex:{CLAUDE}] }}", "also": f"{{ targets: [vertex:{GEMINI}] }}"})
    gw.config_path.write_text(with_vertex(text, vertex_provider(vertex)))
    status, body, _ = gw.post("/admin/config/reload")
    assert status == 200 and body["result"] == "reloaded", body
    claude.messages.create(model="claude", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    claude.messages.create(model="also", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    assert len(vertex.grants) == 1, "no new token: the running adapter was kept"
    # The provider changed (another region): a new adapter, which fetches its own token.
    gw.config_path.write_text(with_vertex(text, vertex_provider(vertex).replace("us-east5", "europe-west1")))
    status, body, _ = gw.post("/admin/config/reload")
    assert status == 200 and body["result"] == "reloaded", body
    claude.messages.create(model="claude", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    assert len(vertex.grants) == 2
    assert vertex.calls[-1][0].startswith("/v1/projects/switchyard-e2e/locations/europe-west1/")


def test_no_key_assertion_or_token_reaches_the_logs_even_at_debug(mock, vertex, gateway):
    gw = claude_route(mock, vertex, gateway, args=("--log-level", "debug"))
    sdk = anthropic_client(gw)
    sdk.messages.create(model="default", max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    with sdk.messages.stream(model="default", max_tokens=16, messages=[{"role": "user", "content": "Hi"}]) as stream:
        stream.get_final_message()
    _, requests, _ = gw.get("/admin/requests")
    _, metrics, _ = gw.get("/metrics")
    logs = gw.logs()
    assert len(vertex.assertions) == 1 and vertex.issued
    for secret in vertex.secrets():
        for where, text in (("logs", logs), ("requests", str(requests)), ("metrics", str(metrics))):
            assert secret not in text, f"a secret reached the {where}"
    assert "PRIVATE KEY" not in logs


def test_doctor_ping_names_the_credentials_and_reaches_vertex(mock, vertex, tmp_path):
    path = tmp_path / "doctor.yaml"
    path.write_text(
        "providers:\n" + vertex_provider(vertex) + f"routes:\n  default: {{ targets: [vertex:{CLAUDE}, vertex:{GEMINI}] }}\n"
    )
    done = subprocess.run([BIN, "doctor", "--config", str(path), "--ping"], capture_output=True, text=True, timeout=60)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "project switchyard-e2e, region us-east5" in out
    assert f"google credentials: service account {SA_EMAIL} (key ****ffee), from the file {vertex.sa_file}" in out
    assert "2 of 2 targets answered" in out, out
    for secret in vertex.secrets():
        assert secret not in out + done.stderr
