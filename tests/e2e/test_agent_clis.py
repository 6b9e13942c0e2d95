"""The two most used agent CLIs, run as users run them against a gateway: Claude Code
(`claude -p`, with ANTHROPIC_BASE_URL) and Codex CLI (`codex exec`, a `model_providers` entry
with `wire_api = "responses"`), each toward an upstream of its own API and toward another
(Claude Code toward Gemini on Vertex too, and both toward a DeepSeek that wants its reasoning
back through a tool turn), and Codex rescued by another target's continuation.

The versions are pinned in scripts/e2e. Both send what Switchyard does not model on their first
request: Claude Code a `role: "system"` message inside `messages` (beta
`mid-conversation-system-2026-04-07`), `context_management`, `output_config`, adaptive
thinking and `?beta=true`; Codex a `namespace` tool, the hosted `web_search` tool,
`client_metadata` and input items with ids.
"""

import json
import os
import subprocess
import time

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
    # A test may have put files there for Claude Code to read.
    work.mkdir(exist_ok=True)
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


def run_codex(gateway, tmp_path, prompt="say hi", key=GATEWAY_KEY, check=True):
    """`codex exec PROMPT` with a provider entry for the gateway (Responses API); its stdout (with
    `check` false, the finished process, whatever its exit)."""
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
    env = clean_env(home, CODEX_HOME=str(codex_home), SWITCHYARD_KEY=key)
    done = subprocess.run(
        [CODEX, "exec", "--skip-git-repo-check", prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if not check:
        return done
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


class LoopbackFake:
    """An upstream on loopback that keeps every body it was sent and answers each with
    `answer(body)`: a status, a content type and the payload."""

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        import threading

        self.bodies, fake = [], self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.bodies.append(body)
                status, content_type, payload = fake.answer(body)
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class ThinkingClaude(LoopbackFake):
    """A Claude on loopback that thinks, as the Messages API streams it: its first answer a
    signed thinking block and a `Read` of `path`, its next (the tool's result came) a text. It
    names itself by its dated id, as Anthropic does, and keeps every body it was sent."""

    SIGNATURE = "EqQBCkYIBxgCKkCthinkingsignature"

    def __init__(self, path):
        self.path = path
        super().__init__()

    def answer(self, body):
        answered = any(
            isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in body["messages"]
        )
        return 200, "text/event-stream", self.events(answered, self.path).encode()

    @classmethod
    def events(cls, answered, path):
        def event(kind, data):
            return f"event: {kind}\ndata: {json.dumps(data | {'type': kind})}\n\n"

        usage = {"input_tokens": 50, "output_tokens": 1}
        out = event("message_start", {"message": {"id": "msg_t", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
        if answered:
            out += event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
            out += event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "The note says hello."}})
            out += event("content_block_stop", {"index": 0})
            stop = "end_turn"
        else:
            out += event("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
            out += event("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "I should read the note."}})
            out += event("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": cls.SIGNATURE}})
            out += event("content_block_stop", {"index": 0})
            out += event("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_note", "name": "Read", "input": {}}})
            out += event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": json.dumps({"file_path": str(path)})}})
            out += event("content_block_stop", {"index": 1})
            stop = "tool_use"
        out += event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 9}})
        return out + event("message_stop", {})


def claude_reads_the_note(gateway, tmp_path, work_note, provider, target):
    """Claude Code told to read `work_note` through a gateway whose route `default` is `target`
    on `provider` (its YAML entry); its answer checked."""
    gw = gateway(f"""
providers:
  {provider}
routes:
  default: {{ targets: ["{target}"] }}
gateway: {{ keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }}
""")
    (tmp_path / "claude-work").mkdir()
    work_note.write_text("hello\n")
    result = run_claude(gw, tmp_path, prompt="read note.txt")
    assert result["is_error"] is False, result
    assert result["result"] == "The note says hello."


def test_claude_code_keeps_its_thinking_through_a_tool_turn_on_a_route(gateway, tmp_path):
    # Claude Code sends a past turn's thinking back only when that turn's `model` is the one it
    # asks for now (the route's name), not the dated id of the Claude that answered.
    work_note = tmp_path / "claude-work" / "note.txt"
    claude = ThinkingClaude(work_note)
    try:
        provider = f'claude: {{ kind: anthropic, base_url: "{claude.url}", api_key: sk-upstream-ant-0001 }}'
        claude_reads_the_note(gateway, tmp_path, work_note, provider, "claude:claude-sonnet-4-5")
        tool_turns = [b for b in claude.bodies if any(isinstance(m["content"], list) and any(x.get("type") == "tool_result" for x in m["content"]) for m in b["messages"])]
        assert tool_turns, claude.bodies
        assistant = [m for m in tool_turns[-1]["messages"] if m["role"] == "assistant"][-1]
        kinds = [block["type"] for block in assistant["content"]]
        assert kinds[0] == "thinking", kinds
        assert assistant["content"][0]["signature"] == ThinkingClaude.SIGNATURE
        assert tool_turns[-1].get("thinking", {}).get("type") not in (None, "disabled"), "thinking goes on"
    finally:
        claude.stop()


class ThinkingDeepSeek(LoopbackFake):
    """A DeepSeek in thinking mode on loopback, speaking Chat Completions: its first answer
    streams its reasoning and a call that reads `path` (Claude Code's `Read`, or a command
    through Codex's shell tool), its next (the tool's result came) a text. As DeepSeek does, it
    refuses a conversation whose tool-call turn comes back without the `reasoning_content` it
    wrote; it keeps every body it was sent."""

    REASONING = "I should read the note."

    def __init__(self, path):
        self.path = path
        super().__init__()

    def answer(self, body):
        turns = [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
        if any(m.get("reasoning_content") != self.REASONING for m in turns):
            refusal = {"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to the API.", "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}
            return 400, "application/json", json.dumps(refusal).encode()
        answered = any(m["role"] == "tool" for m in body["messages"])
        tools = [t["function"]["name"] for t in body.get("tools", []) if t.get("type") == "function"]
        return 200, "text/event-stream", self.events(answered, self.reading(tools, self.path)).encode()

    @staticmethod
    def reading(tools, path):
        """The call, of one of `tools`, that reads `path`."""
        if "Read" in tools:
            return "Read", {"file_path": str(path)}
        if "exec_command" in tools:
            return "exec_command", {"cmd": f"cat {path}"}
        if "shell_command" in tools:
            return "shell_command", {"command": f"cat {path}"}
        return "shell", {"command": ["bash", "-lc", f"cat {path}"]}

    @classmethod
    def events(cls, answered, reading):
        def chunk(delta, finish=None):
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            data = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "deepseek-v4-pro", "choices": [choice]}
            return f"data: {json.dumps(data)}\n\n"

        out = chunk({"role": "assistant", "content": None, "reasoning_content": cls.REASONING})
        if answered:
            out += chunk({"content": "The note says hello."}) + chunk({}, "stop")
        else:
            name, arguments = reading
            call = {"index": 0, "id": "call_note", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            out += chunk({"tool_calls": [call]}) + chunk({}, "tool_calls")
        usage = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "deepseek-v4-pro", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}}
        return out + f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n"


def test_claude_code_on_deepseek_gives_its_reasoning_back_through_a_tool_turn(gateway, tmp_path):
    # DeepSeek's thinking mode refuses a tool turn sent back without its reasoning: Claude Code
    # is shown it as a thinking block the gateway signed, and sends it back with the turn.
    work_note = tmp_path / "claude-work" / "note.txt"
    deepseek = ThinkingDeepSeek(work_note)
    try:
        provider = f'deepseek: {{ kind: openai_compatible, base_url: "{deepseek.url}/v1", api_key: sk-upstream-ds-0003 }}'
        claude_reads_the_note(gateway, tmp_path, work_note, provider, "deepseek:deepseek-v4-pro")
        tool_turns = [b for b in deepseek.bodies if any(m["role"] == "tool" for m in b["messages"])]
        assert tool_turns, deepseek.bodies
        assistant = [m for m in tool_turns[-1]["messages"] if m.get("tool_calls")][-1]
        assert assistant["reasoning_content"] == ThinkingDeepSeek.REASONING, assistant
        assert len(deepseek.bodies) == 2, "nothing refused, nothing sent twice"
    finally:
        deepseek.stop()


def test_codex_on_deepseek_gives_its_reasoning_back_through_a_tool_turn(gateway, tmp_path):
    # The same through the Responses API: the reasoning item Codex sends back carries it.
    note = tmp_path / "note.txt"
    note.write_text("hello\n")
    deepseek = ThinkingDeepSeek(note)
    try:
        gw = gateway(f"""
providers:
  deepseek: {{ kind: openai_compatible, base_url: "{deepseek.url}/v1", api_key: sk-upstream-ds-0003 }}
routes:
  default: {{ targets: ["deepseek:deepseek-v4-pro"] }}
gateway: {{ keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }}
""")
        out = run_codex(gw, tmp_path, prompt="read note.txt")
        assert "The note says hello." in out, out
        tool_turns = [b for b in deepseek.bodies if any(m["role"] == "tool" for m in b["messages"])]
        assert tool_turns, deepseek.bodies
        assistant = [m for m in tool_turns[-1]["messages"] if m.get("tool_calls")][-1]
        assert assistant["reasoning_content"] == ThinkingDeepSeek.REASONING, assistant
        def lacking(body):
            turns = [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
            return any(m.get("reasoning_content") != ThinkingDeepSeek.REASONING for m in turns)

        assert not [b for b in deepseek.bodies if lacking(b)], "nothing refused"
    finally:
        deepseek.stop()


def test_codex_on_a_key_whose_budget_is_spent_stops_at_once_saying_so(mock, gateway, tmp_path):
    # Every answer of the mock costs 10 prompt tokens: at $100,000 a million, $1 an answer.
    thrifty = "sk-thrifty-e2e-key-0000000009"
    gw = gateway(
        f"""
providers:
  up: {{ kind: openai_compatible, base_url: "{mock.base('ok')}/v1", prices: {{ gpt-test: {{ input: 100000, output: 0 }} }} }}
routes:
  default: {{ targets: [up:gpt-test] }}
gateway:
  admin_key: env://E2E_ADMIN_KEY
  keys:
    - {{ name: thrifty, key: {thrifty}, budget: {{ usd: 0.5, per: day }} }}
"""
    )
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    run_codex(gw, tmp_path / "first", key=thrifty)  # $1 spent of $0.50: the answer in flight completes
    started = time.monotonic()
    done = run_codex(gw, tmp_path / "second", key=thrifty, check=False)
    assert done.returncode != 0, done.stdout
    # Said as a spent quota, which Codex stops at; with a Retry-After of hours it slept on it.
    assert time.monotonic() - started < 60, f"codex waited: {done.stdout}\n{done.stderr}"
    assert "budget" in (done.stdout + done.stderr).lower() or "quota" in (done.stdout + done.stderr).lower(), (
        done.stdout + done.stderr
    )


def _codex_refused(mock, gateway, tmp_path, scenario):
    """Codex on a route whose one target answers `scenario`; the finished process, how long it
    took and how many requests the upstream saw."""
    mock.reset()
    gw = gateway(
        f"""
providers:
  up: {{ kind: openai_compatible, base_url: "{mock.base(scenario)}/v1", api_key: sk-e2e-upstream-0001 }}
routes:
  default: {{ targets: [up:gpt-test] }}
"""
    )
    started = time.monotonic()
    done = run_codex(gw, tmp_path, check=False)
    seen = mock.stats()["scenarios"].get(scenario, {}).get("requests", 0)
    return done, time.monotonic() - started, seen


def test_codex_whose_provider_is_out_of_quota_stops_at_once_saying_so(mock, gateway, tmp_path):
    # Said as a rate limit with a second's Retry-After, Codex asked five times more and never
    # showed the quota; said as a spent quota, it stops.
    done, took, seen = _codex_refused(mock, gateway, tmp_path, "quota")
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "quota" in said.lower(), said
    assert seen == 1, f"the upstream was asked {seen} times: {said}"
    assert took < 60, said


def test_codex_over_its_context_window_is_told_so_in_its_own_words(mock, gateway, tmp_path):
    # OpenAI's code (`context_length_exceeded`), not the gateway's kind name, is what Codex knows.
    done, _, _ = _codex_refused(mock, gateway, tmp_path, "context")
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "context window" in said.lower(), said
