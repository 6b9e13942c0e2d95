"""The Responses API with the official OpenAI Python SDK, strict response validation on: every
object and event the gateway writes must match the SDK's own models."""

import openai
import pytest

from conftest import GATEWAY_KEY, config

KEY = "api_key: sk-upstream-openai-0001"
ANT = "api_key: sk-upstream-ant-0002"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(gateway, key=GATEWAY_KEY):
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=30, _strict_response_validation=True
    )


def one_target(mock, gateway, scenario="ok", kind="openai"):
    """`openai` speaks the Responses API natively; `openai_compatible` is translated to Chat
    Completions."""
    return gateway(config(mock, {"a": (kind, scenario, KEY)}, {"default": "{ targets: [a:gpt-test] }"}))


def sent(mock, scenario="ok"):
    return mock.stats()["scenarios"][scenario]["last_request"]["json"]


def test_a_plain_response_is_a_completed_response_object(mock, gateway):
    gw = one_target(mock, gateway)
    raw = client(gw).responses.with_raw_response.create(
        model="default", input="Hello there", instructions="Be brief.", max_output_tokens=64
    )
    response = raw.parse()
    assert response.output_text == "mock answer from gpt-test"
    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.usage.total_tokens > 0
    assert raw.headers["x-switchyard-target"] == "a:gpt-test"
    # Natively: the whole conversation, nothing for OpenAI to keep, reasoning encrypted.
    upstream = sent(mock)
    assert upstream["input"] == [{"role": "user", "content": "Hello there"}]
    assert upstream["instructions"] == "Be brief."
    assert upstream["store"] is False and "previous_response_id" not in upstream
    assert "reasoning.encrypted_content" in upstream["include"]
    assert upstream["max_output_tokens"] == 64
    assert upstream["model"] == "gpt-test"


def test_a_plain_response_from_a_chat_completions_server_is_translated(mock, gateway):
    gw = one_target(mock, gateway, kind="openai_compatible")
    response = client(gw).responses.create(
        model="default", input="Hello there", instructions="Be brief.", max_output_tokens=64
    )
    assert response.output_text == "mock answer from gpt-test"
    assert response.usage.input_tokens == 10
    assert sent(mock)["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]


def test_a_streamed_response_arrives_as_text_deltas_and_completes(mock, gateway):
    gw = one_target(mock, gateway, "ok~chunks=4")
    with client(gw).responses.stream(model="default", input="Hello") as stream:
        kinds = []
        deltas = []
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert len(deltas) >= 2 and "".join(deltas) == "mock answer from gpt-test"
    assert final.output_text == "mock answer from gpt-test"


@pytest.mark.parametrize("kind", ["openai", "openai_compatible"])
def test_a_function_tool_round_trip_by_previous_response_id(mock, gateway, kind):
    gw = one_target(mock, gateway, "tools,ok", kind)
    sdk = client(gw)
    first = sdk.responses.create(model="default", input="Weather in Paris?", tools=[WEATHER])
    call = next(item for item in first.output if item.type == "function_call")
    assert (call.name, call.arguments.replace(" ", "")) == ("get_weather", '{"city":"Paris"}')
    second = sdk.responses.create(
        model="default",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21C and sunny"}],
        tools=[WEATHER],
    )
    assert second.output_text == "mock answer from gpt-test"
    assert second.previous_response_id == first.id
    upstream = sent(mock, "tools,ok")
    if kind == "openai":
        # The gateway sent the whole conversation, the first turn's output included.
        items = upstream["input"]
        assert [item.get("type", "message") for item in items] == ["message", "function_call", "function_call_output"]
        assert items[1]["call_id"] == call.call_id
        assert items[2] == {"type": "function_call_output", "call_id": call.call_id, "output": "21C and sunny"}
        assert "previous_response_id" not in upstream
    else:
        messages = upstream["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
        assert messages[1]["tool_calls"][0]["id"] == call.call_id
        assert messages[2] == {"role": "tool", "content": "21C and sunny", "tool_call_id": call.call_id}


def test_a_function_tool_round_trip_by_full_input(mock, gateway):
    gw = one_target(mock, gateway, kind="openai_compatible")
    response = client(gw).responses.create(
        model="default",
        store=False,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_9", "output": "21C"},
        ],
        tools=[WEATHER],
    )
    assert response.output_text == "mock answer from gpt-test"
    assert [m["role"] for m in sent(mock)["messages"]] == ["user", "assistant", "tool"]
    with pytest.raises(openai.NotFoundError):
        client(gw).responses.retrieve(response.id)


def test_a_json_schema_text_format_reaches_the_upstream_as_structured_output(mock, gateway):
    gw = one_target(mock, gateway)
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["reasoning", "answer"],
        "additionalProperties": False,
    }
    client(gw).responses.create(
        model="default",
        input="Why?",
        text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}},
    )
    format = sent(mock)["text"]["format"]
    assert format["type"] == "json_schema"
    assert list(format["schema"]["properties"]) == ["reasoning", "answer"]
    gw = one_target(mock, gateway, kind="openai_compatible")
    client(gw).responses.create(
        model="default",
        input="Why?",
        text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}},
    )
    format = sent(mock)["response_format"]
    assert format["type"] == "json_schema"
    assert list(format["json_schema"]["schema"]["properties"]) == ["reasoning", "answer"]


def test_a_failure_before_the_first_event_fails_over(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "fail500", KEY), "b": ("openai", "ok~chunks=3", KEY)},
        {"default": "{ targets: [a:gpt-test, b:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    with client(gw).responses.stream(model="default", input="Hello") as stream:
        final = stream.get_final_response()
    assert final.output_text == "mock answer from gpt-backup"


def test_a_failure_after_the_first_event_is_response_failed_then_an_error_event(mock, gateway):
    gw = one_target(mock, gateway, "cut=2~chunks=5")
    with client(gw).responses.stream(model="default", input="Hello") as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert "response.output_text.delta" in kinds
    assert kinds[-2:] == ["response.failed", "error"]
    failed, error = events[-2], events[-1]
    assert failed.response.status == "failed" and failed.response.error.code == "server_error"
    assert "the stream failed after content was sent" in error.message
    assert [event.sequence_number for event in events] == list(range(len(events)))


def test_a_call_cut_by_a_stalled_stream_is_never_given_as_done(mock, gateway):
    # A translated stream that stops mid-call: a client that saw the call `done` would run it
    # with arguments cut short.
    gw = gateway(config(
        mock,
        {"a": ("openai_compatible", "tools~chunks=6~gap=1s", KEY)},
        {"default": "{ targets: [a:gpt-test], retry: { max_attempts: 1 }, timeouts: { idle: 200ms } }"},
    ))
    with client(gw).responses.stream(model="default", input="Weather in Paris?", tools=[WEATHER]) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" not in kinds
    assert not [e for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert kinds[-2:] == ["response.failed", "error"]
    calls = [item for item in events[-2].response.output if item.type == "function_call"]
    assert [call.status for call in calls] == ["incomplete"]
    assert calls[0].arguments != '{"city":"Paris"}'


def test_a_stream_an_openai_target_broke_is_finished_by_another_in_the_same_message(mock, gateway):
    # Codex on OpenAI: the provider's own events pass as they came until the cut, then Claude
    # continues the text and the gateway writes on in the provider's message.
    gw = gateway(config(
        mock,
        {"a": ("openai", "cut=3~words=8", KEY), "claude": ("anthropic", "ok~words=8", ANT)},
        {"default": "{ targets: [a:gpt-test, claude:claude-test], retry: { max_attempts: 1 } }"},
    ))
    with client(gw).responses.stream(model="default", input="Hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output_text == "w1 w2 w3 w4 w5 w6 w7 w8"
    assert [item.type for item in final.output] == ["message"]
    kinds = [event.type for event in events]
    assert kinds.count("response.created") == 1 and kinds.count("response.output_item.added") == 1
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert len({(event.item_id, event.output_index) for event in deltas}) == 1, "one message throughout"
    prefill = sent(mock, "ok~words=8")["messages"][-1]
    assert prefill["role"] == "assistant" and "w1 w2 w3" in str(prefill["content"])


def test_a_conversation_goes_on_after_its_provider_went_down_on_a_provider_of_another_kind(mock, gateway):
    gw = gateway(config(
        mock,
        {"a": ("openai", "ok,fail500", KEY), "claude": ("anthropic", "ok", ANT)},
        {"default": "{ targets: [a:gpt-test, claude:claude-test], retry: { max_attempts: 1 }, health_gate: false }"},
    ))
    sdk = client(gw)
    first = sdk.responses.create(model="default", input="My name is Ada.", instructions="Be brief.")
    assert first.output_text == "mock answer from gpt-test"
    raw = sdk.responses.with_raw_response.create(
        model="default", previous_response_id=first.id, input="What is my name?"
    )
    second = raw.parse()
    assert raw.headers["x-switchyard-target"] == "claude:claude-test"
    assert second.output_text == "mock answer from claude-test"
    # Anthropic was sent the whole conversation, in its own shape, without the first turn's
    # instructions (a continuation does not inherit them).
    upstream = sent(mock, "ok")
    assert "system" not in upstream
    texts = [(m["role"], "".join(block["text"] for block in m["content"])) for m in upstream["messages"]]
    assert texts == [
        ("user", "My name is Ada."),
        ("assistant", "mock answer from gpt-test"),
        ("user", "What is my name?"),
    ]


def test_kept_responses_can_be_read_and_deleted_by_their_key_only(mock, gateway):
    other = "sk-other-gateway-key-000111"
    yaml = config(mock, {"a": ("openai", "ok", KEY)}, {"default": "{ targets: [a:gpt-test] }"}).replace(
        "keys: [env://E2E_GATEWAY_KEY]", f"keys: [env://E2E_GATEWAY_KEY, {other}]"
    )
    gw = gateway(yaml)
    mine, theirs = client(gw), client(gw, other)
    response = mine.responses.create(model="default", input="Hello")
    assert mine.responses.retrieve(response.id).output_text == "mock answer from gpt-test"
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(response.id)
    with pytest.raises(openai.BadRequestError):
        theirs.responses.create(model="default", input="Hi", previous_response_id=response.id)
    mine.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        mine.responses.retrieve(response.id)


def test_a_malformed_item_is_a_400_naming_its_path(mock, gateway):
    gw = one_target(mock, gateway)
    with pytest.raises(openai.BadRequestError) as raised:
        client(gw).responses.create(
            model="default", input=[{"role": "user", "content": [{"type": "input_video", "video": "x"}]}]
        )
    assert "input[0].content[0].type" in str(raised.value)


def test_an_openai_agents_sdk_agent_runs_its_tool_through_the_gateway(mock, gateway):
    try:
        import agents
    except ImportError:
        pytest.fail("the pip package openai-agents is not installed (scripts/e2e installs it)")
    agents.set_tracing_disabled(True)  # traces would go to OpenAI's servers
    gw = one_target(mock, gateway, "tools,ok")
    called = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"21C in {city}"

    model = agents.OpenAIResponsesModel(model="default", openai_client=openai.AsyncOpenAI(
        base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, _strict_response_validation=True
    ))
    agent = agents.Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], model=model)
    result = agents.Runner.run_sync(agent, "Weather in Paris?")
    assert called == ["Paris"]
    assert result.final_output == "mock answer from gpt-test"
    upstream = sent(mock, "tools,ok")
    assert upstream["instructions"] == "Answer with the weather."
    outputs = [item for item in upstream["input"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in outputs] == ["21C in Paris"]


def test_a_compatible_server_with_the_responses_api_is_spoken_to_natively_when_configured(mock, gateway):
    gw = gateway(config(
        mock, {"a": ("openai_compatible", "ok", KEY + ", responses: native")}, {"default": "{ targets: [a:local] }"}
    ))
    response = client(gw).responses.create(model="default", input="Hello")
    assert response.output_text == "mock answer from local"
    last = mock.stats()["scenarios"]["ok"]["last_request"]
    assert last["path"].endswith("/v1/responses") and last["json"]["store"] is False


def test_a_reasoning_servers_thinking_is_a_reasoning_item_whole_and_streamed(mock, gateway):
    gw = one_target(mock, gateway, scenario="think~chunks=3", kind="openai_compatible")
    sdk = client(gw)
    response = sdk.responses.create(model="default", input="Think first.")
    reasoning, message = response.output
    assert (reasoning.type, [s.text for s in reasoning.summary]) == ("reasoning", ["The user wants the mock answer."])
    assert message.type == "message" and response.output_text == "mock answer from gpt-test"

    kinds, summary = [], ""
    with sdk.responses.stream(model="default", input="Think first.") as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.reasoning_summary_text.delta":
                summary += event.delta
        final = stream.get_final_response()
    assert summary == "The user wants the mock answer."
    assert kinds.index("response.reasoning_summary_text.done") < kinds.index("response.output_text.delta")
    assert [item.type for item in final.output] == ["reasoning", "message"]


def test_reasoning_only_the_gateway_wrote_is_not_sent_to_openai_when_the_conversation_moves_there(mock, gateway):
    # OpenAI is sent the conversation with nothing kept on its side: a reasoning item without
    # encrypted content (here, a reasoning server's thinking) is one it could not read.
    gw = gateway(config(
        mock,
        {"r1": ("openai_compatible", "think,fail500", KEY), "gpt": ("openai", "ok", KEY)},
        {"default": "{ targets: [r1:reasoner, gpt:gpt-test], retry: { max_attempts: 1 }, health_gate: false }"},
    ))
    sdk = client(gw)
    first = sdk.responses.create(model="default", input="Think first.")
    assert first.output[0].type == "reasoning"
    raw = sdk.responses.with_raw_response.create(model="default", previous_response_id=first.id, input="And then?")
    assert raw.headers["x-switchyard-target"] == "gpt:gpt-test"
    assert raw.parse().output_text == "mock answer from gpt-test"
    items = sent(mock, "ok")["input"]
    assert [item.get("type", "message") for item in items] == ["message", "message", "message"], items


def test_claudes_signed_thinking_travels_sealed_in_the_reasoning_item_to_the_next_turn(mock, gateway):
    # The Responses API has one place for reasoning a client hands back unread: encrypted
    # content. Claude's signed block travels there, so the next turn opens on it.
    gw = gateway(config(
        mock, {"claude": ("anthropic", "think~chunks=3", KEY)}, {"default": "{ targets: [claude:claude-opus-4-7] }"}
    ))
    sdk = client(gw)
    first = sdk.responses.create(model="default", input="Think first.", reasoning={"effort": "high"})
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert [s.text for s in reasoning.summary] == ["The user wants the mock answer."]
    assert sent(mock, "think~chunks=3")["thinking"] == {"type": "adaptive", "display": "summarized"}

    with sdk.responses.stream(model="default", input="Think first.", reasoning={"effort": "high"}) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "reasoning" and final.output[0].encrypted_content

    # Continued by id (the gateway kept it) and by the whole input (as a store: false client does).
    for follow_up in (
        {"previous_response_id": final.id, "input": "And then?"},
        {"input": [{"role": "user", "content": "Think first."}, *[item.model_dump(exclude_none=True) for item in first.output],
                   {"role": "user", "content": "And then?"}]},
    ):
        sdk.responses.create(model="default", reasoning={"effort": "high"}, **follow_up)
        assistant = sent(mock, "think~chunks=3")["messages"][1]
        assert assistant["role"] == "assistant"
        assert assistant["content"][0] == {
            "type": "thinking", "thinking": "The user wants the mock answer.", "signature": "EqQBCkYIBxgCKkBmocksignature"
        }
