"""The two most used agent CLIs, run as users run them against a gateway: Claude Code
(`claude -p`, with ANTHROPIC_BASE_URL) and Codex CLI (`codex exec`, a `model_providers` entry
with `wire_api = "responses"`), each toward an upstream of its own API and toward another
(Claude Code toward Gemini on Vertex too), and Codex rescued by another target's continuation.

The versions are pinned in scripts/e2e. Both send what Switchyard does not model on their first
request: Claude Code a `role: "system"` message inside `messages` (beta
`mid-conversation-system-2026-04-07`), `context_management`, `output_config`, adaptive
thinking and `?beta=true`; Codex a `namespace` tool, the hosted `web_search` tool,
`client_metadata` and input items with ids.
"""

import json
import os
import subprocess

import pytest

from conftest import GATEWAY_KEY, config

NODE_MODULES = os.environ.get("SWITCHYARD_NODE_MODULES", "target/e2e-node/node_modules")
CLAUDE = os.path.join(NODE_MODULES, ".bin", "claude")
CODEX = os.path.join(NODE_MODULES, ".bin", "codex")
ANT_KEY = "api_key: sk-upstream-ant-0001"
OPENAI_KEY = "api_key: sk-upstream-openai-0002"


def clean_env(home, **more):
    """A minimal environment: nothing of the caller's (no real keys, no proxies)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TERM": "dumb"}
    env.update(more)
    return env


def run_claude(gateway, tmp_path, prompt="say hi"):
    """`claude -p PROMPT --output-format json` against the gateway's route `default`; its result."""
    home, work = tmp_path / "claude-home", tmp_path / "claude-work"
    home.mkdir()
    work.mkdir()
    env = clean_env(
        home,
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_API_KEY=GATEWAY_KEY,
        # A model name Claude Code does not know, as a route's name is: it then sends the
        # mid-conversation system message and the beta that announces it.
        ANTHROPIC_MODEL="default",
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    done = subprocess.run(
        [CLAUDE, "-p", prompt, "--output-format", "json"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"claude exited {done.returncode}: {done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def run_codex(gateway, tmp_path, prompt="say hi"):
    """`codex exec PROMPT` with a provider entry for the gateway (Responses API); its stdout."""
    home, codex_home, work = tmp_path / "codex-home", tmp_path / "codex", tmp_path / "codex-work"
    for folder in (home, codex_home, work):
        folder.mkdir()
    (codex_home / "config.toml").write_text(
        'model_provider = "switchyard"\n'
        'model = "default"\n'
        "[model_providers.switchyard]\n"
        'name = "Switchyard"\n'
        f'base_url = "{gateway.url}/v1"\n'
        'env_key = "SWITCHYARD_KEY"\n'
        'wire_api = "responses"\n'
    )
    env = clean_env(home, CODEX_HOME=str(codex_home), SWITCHYARD_KEY=GATEWAY_KEY)
    done = subprocess.run(
        [CODEX, "exec", "--skip-git-repo-check", prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"codex exited {done.returncode}: {done.stdout}\n{done.stderr}"
    return done.stdout


def last_sent(mock, scenario):
    return mock.stats()["scenarios"][scenario]["last_request"]


def trail(gateway):
    """The newest request's record from the gateway's history."""
    _, recent, _ = gateway.get("/admin/requests")
    _, record, _ = gateway.get("/admin/requests/" + recent["requests"][0]["request_id"])
    return record


@pytest.fixture(autouse=True)
def _installed():
    for binary in (CLAUDE, CODEX):
        assert os.path.exists(binary), f"{binary} is missing: scripts/e2e installs it"


def test_claude_code_toward_anthropic_reaches_it_as_sent(mock, gateway, tmp_path):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    result = run_claude(gw, tmp_path)
    assert result["is_error"] is False, result
    assert result["result"] == "mock answer from claude-test"
    sent = last_sent(mock, "ok")
    body = sent["json"]
    # What Switchyard does not model reached the provider of the client's own API unchanged.
    assert any(message["role"] == "system" for message in body["messages"]), body["messages"]
    assert "context_management" in body and "output_config" in body
    assert body["thinking"]["type"] == "adaptive"
    assert "mid-conversation-system-2026-04-07" in sent["headers"]["anthropic-beta"]
    assert body["model"] == "claude-test"


def test_claude_code_toward_an_openai_upstream_gets_its_answer(mock, gateway, tmp_path):
    gw = gateway(config(mock, {"gpt": ("openai", "ok", OPENAI_KEY)}, {"default": "{ targets: [gpt:gpt-test] }"}))
    result = run_claude(gw, tmp_path)
    assert result["is_error"] is False, result
    assert result["result"] == "mock answer from gpt-test"
    messages = last_sent(mock, "ok")["json"]["messages"]
    roles = [message["role"] for message in messages]
    # The mid-conversation system message is a system message in its place, after the first
    # user turn, not hoisted to the front.
    assert roles[0] == "system" and "system" in roles[roles.index("user"):], roles


def test_codex_toward_openai_reaches_it_as_sent(mock, gateway, tmp_path):
    gw = gateway(config(mock, {"openai": ("openai", "ok", OPENAI_KEY)}, {"default": "{ targets: [openai:gpt-test] }"}))
    out = run_codex(gw, tmp_path)
    assert "mock answer from gpt-test" in out
    sent = last_sent(mock, "ok")
    assert sent["path"].endswith("/v1/responses")
    tools = sent["json"]["tools"]
    assert any(tool["type"] == "namespace" for tool in tools), tools
    assert any(tool["type"] == "web_search" for tool in tools), tools
    assert "client_metadata" in sent["json"]


def test_codex_toward_an_anthropic_upstream_gets_its_answer(mock, gateway, tmp_path):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    out = run_codex(gw, tmp_path)
    assert "mock answer from claude-test" in out
    body = last_sent(mock, "ok")["json"]
    names = [tool["name"] for tool in body["tools"]]
    # A namespace's functions are function tools, named so that a call maps back to it; the
    # hosted web search is left out, and the attempt's note says so.
    assert any(name.startswith("multi_agent_v1") for name in names), names
    assert all(tool.get("type") in (None, "custom") for tool in body["tools"]), body["tools"]
    note = trail(gw)["attempts"][0].get("note", "")
    assert "web_search" in note, trail(gw)


def test_codex_toward_a_chat_completions_upstream_gets_its_answer(mock, gateway, tmp_path):
    gw = gateway(
        config(mock, {"chat": ("openai_compatible", "ok", OPENAI_KEY)}, {"default": "{ targets: [chat:gpt-test] }"})
    )
    out = run_codex(gw, tmp_path)
    assert "mock answer from gpt-test" in out
    body = last_sent(mock, "ok")["json"]
    assert all(tool["type"] == "function" for tool in body["tools"]), body["tools"]
    assert body["messages"][0]["role"] in ("system", "developer")


def test_codex_on_openai_gets_a_whole_answer_when_its_stream_breaks_and_claude_continues_it(
    mock, gateway, tmp_path
):
    gw = gateway(config(
        mock,
        {"openai": ("openai", "cut=3~words=8", OPENAI_KEY), "claude": ("anthropic", "ok~words=8", ANT_KEY)},
        {"default": "{ targets: [openai:gpt-test, claude:claude-test], retry: { max_attempts: 1 } }"},
    ))
    out = run_codex(gw, tmp_path)
    assert "w1 w2 w3 w4 w5 w6 w7 w8" in out, out
    assert [a["outcome"] for a in trail(gw)["attempts"]] == ["failed", "continued"]


def test_claude_code_toward_gemini_on_vertex_gets_its_answer(mock, gateway, tmp_path):
    from fake_vertex import FakeVertex

    vertex = FakeVertex()
    try:
        sa_file = vertex.key_file(tmp_path)
        gw = gateway(f"""
providers:
  vertex: {{ kind: vertex, project: switchyard-e2e, region: us-east5, base_url: "{vertex.url}/v1", credentials: "{sa_file}" }}
routes:
  default: {{ targets: ["vertex:gemini-2.5-flash"] }}
gateway: {{ keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }}
""")
        result = run_claude(gw, tmp_path)
        # Claude Code's thinking, context management and effort reached Gemini translated or
        # left out, not refused.
        assert result["is_error"] is False, result
        assert result["result"] == "gemini on vertex: gemini-2.5-flash"
        path, _, body = vertex.calls[-1]
        assert "gemini-2.5-flash" in path
        assert not {"thinking", "context_management", "output_config"} & set(body), body
    finally:
        vertex.stop()
