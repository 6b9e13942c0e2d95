"""The failover people build by hand: the same Claude model on Anthropic, AWS Bedrock and Google
Vertex AI, one route over all three. Anthropic is overloaded (529), Bedrock throttles
(ThrottlingException, before and inside its event stream), and Vertex answers; the client
asks for a dated model id, which a pattern route fills into each target and each cloud's
`models:` map turns into its own id. The fakes verify what the real services verify: Bedrock's
SigV4 with botocore (fake_bedrock.py), the service account's JWT with PyJWT (fake_vertex.py)."""

import anthropic
import pytest

from conftest import GATEWAY_KEY
from fake_bedrock import FakeBedrock, Reply, exception
from fake_vertex import FakeVertex

DATED = "claude-sonnet-4-5-20250929"
BEDROCK_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_ID = "claude-sonnet-4-5@20250929"
ACCESS_KEY = "AKIAE2ETHREECLOUDS001"
# Named so that the gateway fixture's leak check (no `sk-upstream` in the logs) covers it.
SECRET = "sk-upstream-aws-secret-three-clouds-K7MDENG"


def throttled(model, action, body, record):
    if action == "invoke":
        return Reply.error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    return Reply(stream=exception("throttlingException", "Too many tokens, please wait before trying again."))


@pytest.fixture
def clouds(tmp_path):
    bedrock = FakeBedrock(throttled, {ACCESS_KEY: SECRET})
    vertex = FakeVertex()
    vertex.sa_file = vertex.key_file(tmp_path)
    yield bedrock, vertex
    bedrock.close()
    vertex.stop()


def three_clouds(mock, bedrock, vertex):
    return f"""
providers:
  anthropic: {{ kind: anthropic, base_url: "{mock.base('status=529')}", api_key: sk-upstream-ant-0001 }}
  bedrock:
    kind: bedrock
    region: us-east-1
    base_url: "{bedrock.url}"
    models: {{ {DATED}: "{BEDROCK_ID}" }}
    aws: {{ access_key_id: {ACCESS_KEY}, secret_access_key: "{SECRET}" }}
  vertex:
    kind: vertex
    project: switchyard-e2e
    region: us-east5
    base_url: "{vertex.url}/v1"
    credentials: "{vertex.sa_file}"
    models: {{ {DATED}: "{VERTEX_ID}" }}
routes:
  "claude-*": {{ targets: ["anthropic:{{model}}", "bedrock:{{model}}", "vertex:{{model}}"], retry: {{ max_attempts: 1 }} }}
gateway: {{ keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }}
"""


def client(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key=GATEWAY_KEY, max_retries=0, timeout=30)


def check_trail(gw, request_id):
    _, record, _ = gw.get("/admin/requests/" + request_id)
    attempts = [(a["target"], a["outcome"], (a.get("error") or {}).get("kind"), a.get("provider_model")) for a in record["attempts"]]
    assert attempts == [
        (f"anthropic:{DATED}", "failed", "unavailable", None),
        (f"bedrock:{DATED}", "failed", "rate_limited", BEDROCK_ID),
        (f"vertex:{DATED}", "ok", None, VERTEX_ID),
    ], record
    assert record["route"] == "claude-*"


def test_one_claude_route_over_three_clouds_reaches_the_one_that_answers(mock, gateway, clouds):
    bedrock, vertex = clouds
    gw = gateway(three_clouds(mock, bedrock, vertex))
    raw = client(gw).messages.with_raw_response.create(
        model=DATED, max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
    )
    message = raw.parse()
    assert message.content[0].text == f"vertex answer from {VERTEX_ID}"
    assert raw.headers["x-switchyard-target"] == f"vertex:{DATED}"
    check_trail(gw, raw.headers["x-request-id"])
    # Each cloud was asked for its own id of the model, and Bedrock's signature verified.
    assert bedrock.requests[-1]["path"].startswith("/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/")
    assert bedrock.verified == 1 and bedrock.refused == 0
    path, _, body = vertex.calls[-1]
    assert path.endswith(f"/publishers/anthropic/models/{VERTEX_ID}:streamRawPredict")
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16"


def test_the_three_cloud_failover_streams_to_an_anthropic_client(mock, gateway, clouds):
    bedrock, vertex = clouds
    gw = gateway(three_clouds(mock, bedrock, vertex))
    with client(gw).messages.with_streaming_response.create(
        model=DATED, max_tokens=64, stream=True, messages=[{"role": "user", "content": "Hi"}]
    ) as response:
        request_id = response.headers["x-request-id"]
        events = list(response.parse())
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text == f"vertex answer from {VERTEX_ID}"
    assert events[-1].type == "message_stop"
    check_trail(gw, request_id)
    # Bedrock was asked to stream and refused inside its event stream, before any content.
    assert bedrock.requests[-1]["path"].endswith("/invoke-with-response-stream")
