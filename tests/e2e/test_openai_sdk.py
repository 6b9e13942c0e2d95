"""The official OpenAI Python SDK, pointed at the gateway unchanged."""

import re

import openai
import pytest

from conftest import GATEWAY_KEY, config

KEY = "api_key: sk-upstream-openai-0001"
FAST_RETRY = "retry: { max_attempts: 2, backoff_base: 10ms, backoff_max: 50ms, max_wait: 5s }"


def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, timeout=30)


def ask(sdk, model="default", **kwargs):
    return sdk.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Hello there"}], **kwargs
    )


def test_plain_chat_answers_with_the_served_target(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    raw = ask(client(gw))
    completion = raw.parse()
    assert completion.choices[0].message.content == "mock answer from gpt-test"
    assert completion.usage.total_tokens > 0
    assert raw.headers["x-switchyard-target"] == "a:gpt-test"
    assert raw.headers["x-switchyard-attempts"] == "1"
    assert raw.headers["x-request-id"]


def test_streamed_chat_arrives_in_chunks(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok~chunks=5", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    stream = client(gw).chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 2
    assert "".join(pieces) == "mock answer from gpt-test"


def test_tool_calls_come_back_whole_and_streamed(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "tools", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    tools = [{
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }]
    sdk = client(gw)
    message = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools
    ).choices[0].message
    assert message.tool_calls[0].function.name == "get_weather"
    assert message.tool_calls[0].function.arguments.replace(" ", "") == '{"city":"Paris"}'

    arguments, names = "", []
    for chunk in sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools, stream=True
    ):
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if call.function and call.function.name:
                names.append(call.function.name)
            if call.function and call.function.arguments:
                arguments += call.function.arguments
    assert names == ["get_weather"]
    assert arguments.replace(" ", "") == '{"city":"Paris"}'


def test_a_500_fails_over_to_the_next_target(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "status=500", KEY), "b": ("openai", "ok", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    raw = ask(client(gw))
    assert raw.parse().choices[0].message.content == "mock answer from gpt-backup"
    assert raw.headers["x-switchyard-target"] == "b:gpt-backup"
    assert raw.headers["x-switchyard-attempts"] == "2"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert [a["outcome"] for a in record["attempts"]] == ["failed", "ok"]
    assert record["attempts"][0]["error"]["status"] == 500


def test_a_429_with_retry_after_is_waited_then_retried(mock, gateway):
    gw = gateway(config(
        mock, {"a": ("openai", "ratelimit=1,ok", KEY)}, {"default": "{ targets: [a:gpt-test], " + FAST_RETRY + " }"}
    ))
    raw = ask(client(gw))
    assert raw.parse().choices[0].message.content == "mock answer from gpt-test"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert [a["outcome"] for a in record["attempts"]] == ["retried", "ok"]
    assert record["attempts"][1]["start_ms"] >= 1000, "the retry waited for Retry-After"


def test_quota_exhaustion_skips_the_target_until_a_direct_call_recovers_it(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "quota,ok", KEY), "b": ("openai", "ok", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup] }"},
    ))
    sdk = client(gw)
    assert ask(sdk).headers["x-switchyard-target"] == "b:gpt-backup"
    assert gw.health_of("a:gpt-test")["status"] == "exhausted"

    skipped = ask(sdk)
    _, record, _ = gw.get("/admin/requests/" + skipped.headers["x-request-id"])
    assert record["attempts"][0]["outcome"] == "skipped_exhausted"

    direct = ask(sdk, model="a:gpt-test")
    assert direct.headers["x-switchyard-target"] == "a:gpt-test"
    assert gw.health_of("a:gpt-test")["status"] == "available"
    assert ask(sdk).headers["x-switchyard-target"] == "a:gpt-test"


def test_an_auth_error_on_one_key_rotates_to_the_next(mock, gateway):
    keys = "api_keys: [sk-upstream-bad-key, sk-upstream-good-key]"
    gw = gateway(config(
        mock, {"a": ("openai", "authkey=sk-upstream-bad-key", keys)}, {"default": "{ targets: [a:gpt-test] }"}
    ))
    raw = ask(client(gw))
    assert raw.parse().choices[0].message.content == "mock answer from gpt-test"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    credentials = [a["credential_id"] for a in record["attempts"]]
    assert len(set(credentials)) == 2, "the second attempt used the other key"
    _, health, _ = gw.get("/admin/health")
    statuses = {c["credential_id"]: c["status"] for c in health["credentials"]}
    assert statuses[credentials[0]] == "unauthorized"
    assert "sk-upstream" not in str(health), "keys never appear, only masked"


def test_a_context_length_failure_moves_to_the_context_window_chain(mock, gateway):
    gw = gateway(config(
        mock,
        {"small": ("openai", "context", KEY), "other": ("openai", "ok", KEY), "big": ("openai", "ok", KEY)},
        {"default": "{ targets: [small:gpt-small, other:gpt-other], context_window: [big:gpt-big] }"},
    ))
    raw = ask(client(gw))
    assert raw.headers["x-switchyard-target"] == "big:gpt-big"


def test_a_content_filter_refusal_moves_to_the_content_policy_chain(mock, gateway):
    gw = gateway(config(
        mock,
        {"strict": ("openai", "filter", KEY), "lenient": ("openai", "ok", KEY)},
        {"default": "{ targets: [strict:gpt-strict], content_policy: [lenient:gpt-lenient] }"},
    ))
    raw = ask(client(gw))
    assert raw.headers["x-switchyard-target"] == "lenient:gpt-lenient"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert [a["outcome"] for a in record["attempts"]] == ["redirected", "ok"]


def test_a_mid_stream_cut_surfaces_as_an_sdk_error(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "cut=2", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    stream = client(gw).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], stream=True
    )
    received = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert len(received) == 2, "what was streamed before the cut arrived"
    assert "stream failed" in str(raised.value)


def test_every_target_failing_is_a_502_with_the_trail(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "status=500", KEY), "b": ("openai", "status=503", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    with pytest.raises(openai.APIStatusError) as raised:
        ask(client(gw))
    error = raised.value
    assert error.status_code == 502
    assert error.body["code"] == "all_targets_failed"
    attempts = error.response.json()["switchyard"]["attempts"]
    assert [a["target"] for a in attempts] == ["a:gpt-test", "b:gpt-backup"]


def test_every_target_rate_limited_is_a_429_with_retry_after(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "ratelimit=30", KEY)},
        {"default": "{ targets: [a:gpt-test], retry: { max_attempts: 1 } }"},
    ))
    with pytest.raises(openai.RateLimitError) as raised:
        ask(client(gw))
    assert raised.value.response.headers["retry-after"] == "30"


def test_embeddings_and_models(mock, gateway):
    gw = gateway(config(
        mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }", "embed": "{ targets: [a:text-embed] }"}
    ))
    sdk = client(gw)
    vectors = sdk.embeddings.create(model="embed", input=["one", "two"])
    assert [d.index for d in vectors.data] == [0, 1]
    assert len(vectors.data[0].embedding) > 0
    ids = [m.id for m in sdk.models.list()]
    assert ids[:2] == ["default", "embed"]
    assert "a:gpt-test" in ids


def test_admin_health_reset_and_metrics(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "status=503", KEY), "b": ("openai", "ok", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    ask(client(gw))
    assert gw.health_of("a:gpt-test")["status"] == "temporarily_unavailable"
    status, body, _ = gw.post("/admin/health/reset", {"target": "a:gpt-test"})
    assert status == 200 and body == {"reset": "a:gpt-test", "applies_to": "this replica"}
    assert gw.health_of("a:gpt-test")["status"] == "unknown"

    status, text, _ = gw.get("/metrics")
    assert status == 200
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples['switchyard_requests_total{endpoint="chat_completions",route="default",status="200"}'] == 1
    assert samples['switchyard_fallbacks_total{route="default"}'] == 1
    assert any(re.match(r"switchyard_overhead_seconds_bucket", name) for name in samples)


def test_openai_sdk_reaches_an_anthropic_upstream_through_translation(mock, gateway):
    gw = gateway(config(
        mock, {"claude": ("anthropic", "ok", "api_key: sk-upstream-ant-01")}, {"default": "{ targets: [claude:claude-test] }"}
    ))
    completion = client(gw).chat.completions.create(
        model="default",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
        max_tokens=64,
    )
    assert completion.choices[0].message.content == "mock answer from claude-test"
    request = mock.stats()["scenarios"]["ok"]["last_request"]
    assert request["headers"]["x-api-key"] == "sk-upstream-ant-01"


def test_a_models_refusal_is_an_answer_parse_returns_it(mock, gateway):
    """A model declining (`message.refusal`, finish `stop`) is served as it is: the SDK's
    `parse()` returns `.refusal` instead of raising a content-filter error, and a stream
    carries the refusal's words."""
    from pydantic import BaseModel

    class Answer(BaseModel):
        reason: str
        answer: str

    gw = gateway(config(mock, {"a": ("openai", "refuse", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    sdk = client(gw)
    parse = getattr(sdk.chat.completions, "parse", None) or sdk.beta.chat.completions.parse
    completion = parse(
        model="default", messages=[{"role": "user", "content": "Something it declines"}], response_format=Answer
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert message.refusal == "I'm sorry, I can't help with that."
    assert message.parsed is None
    stream = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Something it declines"}], stream=True
    )
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks) == "I'm sorry, I can't help with that."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_models_retrieve_names_a_route_or_a_target(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    sdk = client(gw)
    assert sdk.models.retrieve("default").id == "default"
    assert sdk.models.retrieve("a:gpt-test").id == "a:gpt-test"
    with pytest.raises(openai.NotFoundError) as raised:
        sdk.models.retrieve("no-such-model")
    assert "default" in str(raised.value)


def test_a_stream_carries_usage_only_when_the_client_asked(mock, gateway):
    """The gateway asks the upstream for usage for its own accounting; a client that did not
    ask gets no usage-only chunk (`choices: []`), which some clients cannot read."""
    gw = gateway(config(mock, {"a": ("openai", "ok~chunks=3", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    sdk = client(gw)
    plain = list(sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], stream=True
    ))
    assert all(c.choices for c in plain), "no usage-only chunk"
    assert all(c.usage is None for c in plain)
    asked = list(sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], stream=True,
        stream_options={"include_usage": True},
    ))
    assert asked[-1].choices == [] and asked[-1].usage.total_tokens > 0


def test_a_translated_stream_carries_usage_in_a_last_chunk_of_its_own(mock, gateway):
    """From an Anthropic upstream the usage comes with the finish; an OpenAI client gets it as
    OpenAI writes it, in a chunk with `choices: []` after the finish."""
    claude = ("anthropic", "ok~chunks=3", "api_key: sk-upstream-ant-0003")
    gw = gateway(config(mock, {"claude": claude}, {"default": "{ targets: [claude:claude-test] }"}))
    sdk = client(gw)
    asked = list(sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], stream=True,
        stream_options={"include_usage": True},
    ))
    assert asked[-2].choices[0].finish_reason == "stop" and asked[-2].usage is None
    assert asked[-1].choices == [] and asked[-1].usage.total_tokens > 0
    assert asked[-1].id == asked[0].id
    plain = list(sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], stream=True
    ))
    assert all(c.choices and c.usage is None for c in plain)


def test_file_and_audio_parts_and_a_custom_tool_reach_an_openai_upstream_as_written(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Transcribe and summarise"},
                {"type": "file", "file": {"file_id": "file-abc123"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        }
    ]
    tools = [{"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python"}}]
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["reasoning", "answer"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "out", "strict": True, "schema": schema}}
    completion = client(gw).chat.completions.create(
        model="default", messages=messages, tools=tools, response_format=response_format
    )
    assert completion.choices[0].message.content == "mock answer from gpt-test"
    sent = mock.stats()["scenarios"]["ok"]["last_request"]["json"]
    assert sent["messages"] == messages
    assert sent["tools"] == tools
    # Key order is meaning here: the model writes its reasoning first.
    assert list(sent["response_format"]["json_schema"]["schema"]["properties"]) == ["reasoning", "answer"]


def _reasoning_and_text(stream):
    """The reasoning and the text of a chat stream, and which came first."""
    reasoning, text, order = "", "", []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = (delta.model_extra or {}).get("reasoning_content")
        if piece:
            reasoning += piece
            order.append("reasoning")
        if delta.content:
            text += delta.content
            order.append("text")
    return reasoning, text, order


@pytest.mark.parametrize("kind", ["anthropic", "openai_compatible"])
def test_a_models_reasoning_reaches_the_sdk_as_reasoning_content_before_its_answer(mock, gateway, kind):
    # Claude's thinking, translated; a reasoning server's `reasoning_content`, as it wrote it.
    gw = gateway(config(
        mock, {"up": (kind, "think~chunks=4", "api_key: sk-upstream-0001")}, {"default": "{ targets: [up:model-test] }"}
    ))
    sdk = client(gw)
    completion = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Think first."}], max_tokens=2048
    )
    message = completion.choices[0].message
    assert message.content == "mock answer from model-test"
    assert message.model_extra["reasoning_content"] == "The user wants the mock answer."

    stream = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Think first."}], max_tokens=2048, stream=True
    )
    reasoning, text, order = _reasoning_and_text(stream)
    assert (reasoning, text) == ("The user wants the mock answer.", "mock answer from model-test")
    assert order[0] == "reasoning" and order.count("reasoning") == 1


def test_reasoning_effort_makes_claude_think_and_its_signed_blocks_carry_the_tool_turn(mock, gateway):
    # An agent on the OpenAI SDK asks Claude to think, keeps the answer's message as a dict (as
    # agents do), and sends it back with the tool result: the turn opens on the signed block.
    scenario = "think~chunks=4"
    gw = gateway(config(
        mock, {"up": ("anthropic", scenario, "api_key: sk-upstream-0001")}, {"default": "{ targets: [up:claude-opus-4-7] }"}
    ))
    sdk = client(gw)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    first = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Think first."}], reasoning_effort="high", tools=tools
    )
    sent = mock.stats()["scenarios"][scenario]["last_request"]["json"]
    assert sent["thinking"] == {"type": "adaptive", "display": "summarized"} and sent["output_config"] == {"effort": "high"}
    message = first.choices[0].message
    blocks = message.model_extra["thinking_blocks"]
    assert blocks == [{"type": "thinking", "thinking": "The user wants the mock answer.",
                       "signature": "EqQBCkYIBxgCKkBmocksignature"}]

    streamed = sdk.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Think first."}], reasoning_effort="high", stream=True
    )
    seen = [b for chunk in streamed if chunk.choices for b in (chunk.choices[0].delta.model_extra or {}).get("thinking_blocks", [])]
    assert seen == blocks

    kept = message.model_dump(exclude_none=True)
    kept["tool_calls"] = [{"id": "toolu_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]
    sdk.chat.completions.create(
        model="default",
        reasoning_effort="high",
        tools=tools,
        messages=[{"role": "user", "content": "Think first."}, kept, {"role": "tool", "tool_call_id": "toolu_1", "content": "42"}],
    )
    sent = mock.stats()["scenarios"][scenario]["last_request"]["json"]
    assert sent["thinking"] == {"type": "adaptive", "display": "summarized"}
    assistant = sent["messages"][1]["content"]
    assert assistant[0] == blocks[0] and assistant[-1]["type"] == "tool_use"


CUSTOM_TOOL = {"type": "custom", "custom": {"name": "code_exec", "description": "Runs Python"}}
CUSTOM_INPUT = 'print("hello")\nprint(42)'


def test_a_custom_tool_call_answer_comes_back_whole_and_streamed(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "custom~chunks=3", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    sdk = client(gw)
    ask_code = [{"role": "user", "content": "Run some code"}]
    raw = sdk.chat.completions.with_raw_response.create(model="default", messages=ask_code, tools=[CUSTOM_TOOL])
    assert raw.status_code == 200
    call = raw.parse().choices[0].message.tool_calls[0]
    assert (call.type, call.custom.name, call.custom.input) == ("custom", "code_exec", CUSTOM_INPUT)
    assert raw.parse().choices[0].finish_reason == "tool_calls"

    stream = sdk.chat.completions.create(model="default", messages=ask_code, tools=[CUSTOM_TOOL], stream=True)
    pieces, first = [], None
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                custom = delta.model_extra.get("custom") if delta.model_extra else None
                custom = custom or getattr(delta, "custom", None)
                if custom is None:
                    continue
                custom = custom if isinstance(custom, dict) else custom.model_dump()
                first = first or custom.get("name")
                pieces.append(custom.get("input", ""))
    assert first == "code_exec"
    assert len(pieces) >= 2 and "".join(pieces) == CUSTOM_INPUT


def test_a_custom_tool_call_from_a_translated_target_is_kept_for_the_history(mock, gateway):
    # An assistant turn holding a custom call goes back to an OpenAI upstream as written.
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    history = [
        {"role": "user", "content": "Run some code"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "custom", "custom": {"name": "code_exec", "input": CUSTOM_INPUT}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "hello\n42"},
    ]
    answer = client(gw).chat.completions.create(model="default", messages=history, tools=[CUSTOM_TOOL])
    assert answer.choices[0].message.content == "mock answer from gpt-test"
    sent = mock.stats()["scenarios"]["ok"]["last_request"]["json"]
    assert sent["messages"][1]["tool_calls"][0] == history[1]["tool_calls"][0]


def test_the_azure_openai_client_is_served_with_its_deployment_as_the_model(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    azure = openai.AzureOpenAI(
        azure_endpoint=gw.url, api_key=GATEWAY_KEY, api_version="2024-10-21", max_retries=0, timeout=30
    )
    raw = azure.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "Hello there"}]
    )
    assert raw.parse().choices[0].message.content == "mock answer from gpt-test"
    assert raw.headers["x-switchyard-target"] == "a:gpt-test"
    stream = azure.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello there"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "mock answer from gpt-test"
    with pytest.raises(openai.AuthenticationError):
        openai.AzureOpenAI(
            azure_endpoint=gw.url, api_key="not-the-key", api_version="2024-10-21", max_retries=0
        ).chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])


def test_a_turn_that_opens_with_a_tool_call_cut_halfway_is_answered_whole_by_the_fallback(mock, gateway):
    # The call's first chunk carries the role: held back, its role goes on at once, and once
    # only (the SDK's helper adds up a role said twice), then the fallback's whole call.
    gw = gateway(config(
        mock,
        {"a": ("openai", "cut=2~tools", KEY), "b": ("openai", "tools", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    tools = [{
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }]
    with client(gw).chat.completions.stream(
        model="default", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.role == "assistant"
    assert [call.function.name for call in message.tool_calls] == ["get_weather"]
    assert message.tool_calls[0].function.arguments.replace(" ", "") == '{"city":"Paris"}'
    assert final.choices[0].finish_reason == "tool_calls"
    _, recent, _ = gw.get("/admin/requests")
    _, record, _ = gw.get("/admin/requests/" + recent["requests"][0]["request_id"])
    assert [a["outcome"] for a in record["attempts"]] == ["failed", "continued"]
