"""The official Anthropic Python SDK, pointed at the gateway unchanged."""

import anthropic
import pytest

from conftest import GATEWAY_KEY, config

ANT_KEY = "api_key: sk-upstream-ant-0001"
OPENAI_KEY = "api_key: sk-upstream-openai-0002"


def client(gateway):
    return anthropic.Anthropic(base_url=gateway.url, api_key=GATEWAY_KEY, max_retries=0, timeout=30)


def ask(sdk, model="default", **kwargs):
    return sdk.messages.with_raw_response.create(
        model=model, max_tokens=128, messages=[{"role": "user", "content": "Hello there"}], **kwargs
    )


def test_plain_message_answers_with_the_served_target(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    raw = ask(client(gw), system="Be brief.")
    message = raw.parse()
    assert message.content[0].text == "mock answer from claude-test"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 0
    assert raw.headers["x-switchyard-target"] == "claude:claude-test"
    sent = mock.stats()["scenarios"]["ok"]["last_request"]
    assert sent["json"]["system"] == "Be brief."


def test_streamed_message_arrives_as_text_deltas(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok~chunks=5", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    with client(gw).messages.stream(
        model="default", max_tokens=128, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 2
    assert "".join(pieces) == "mock answer from claude-test"
    assert final.stop_reason == "end_turn"


def test_tool_use_comes_back_whole_and_streamed(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "tools", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    sdk = client(gw)
    message = sdk.messages.create(
        model="default", max_tokens=128, tools=tools, messages=[{"role": "user", "content": "Weather in Paris?"}]
    )
    tool_use = next(block for block in message.content if block.type == "tool_use")
    assert (tool_use.name, tool_use.input) == ("get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"

    with sdk.messages.stream(
        model="default", max_tokens=128, tools=tools, messages=[{"role": "user", "content": "Weather in Paris?"}]
    ) as stream:
        final = stream.get_final_message()
    tool_use = next(block for block in final.content if block.type == "tool_use")
    assert tool_use.input == {"city": "Paris"}


def test_an_overloaded_upstream_fails_over_to_an_openai_upstream(mock, gateway):
    gw = gateway(config(
        mock,
        {"claude": ("anthropic", "status=529", ANT_KEY), "gpt": ("openai", "ok", OPENAI_KEY)},
        {"default": "{ targets: [claude:claude-test, gpt:gpt-backup], retry: { max_attempts: 1 } }"},
    ))
    raw = ask(client(gw))
    assert raw.parse().content[0].text == "mock answer from gpt-backup"
    assert raw.headers["x-switchyard-target"] == "gpt:gpt-backup"
    _, record, _ = gw.get("/admin/requests/" + raw.headers["x-request-id"])
    assert record["attempts"][0]["error"]["status"] == 529
    assert record["attempts"][0]["error"]["kind"] == "unavailable"


def claude_alone(mock, gateway, scenario):
    """A gateway whose route is one Claude target on the mock's `scenario`, tried once."""
    return gateway(config(
        mock,
        {"claude": ("anthropic", scenario, ANT_KEY)},
        {"default": "{ targets: [claude:claude-test], retry: { max_attempts: 1 } }"},
    ))


def test_every_target_overloaded_is_the_sdks_overloaded_error(mock, gateway):
    # Clients that act on an overload (Claude Code's --fallback-model) read it as Anthropic says it.
    gw = claude_alone(mock, gateway, "status=529")
    with pytest.raises(anthropic.OverloadedError) as raised:
        ask(client(gw))
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"


def test_every_target_failing_is_an_error_in_anthropic_shape(mock, gateway):
    gw = claude_alone(mock, gateway, "status=500")
    with pytest.raises(anthropic.APIStatusError) as raised:
        ask(client(gw))
    error = raised.value
    assert error.status_code == 502
    body = error.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert body["switchyard"]["attempts"][0]["target"] == "claude:claude-test"


def test_a_mid_stream_cut_surfaces_as_an_sdk_error(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "cut=2", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    received = []
    with pytest.raises(anthropic.APIError):
        with client(gw).messages.stream(
            model="default", max_tokens=128, messages=[{"role": "user", "content": "Hello"}]
        ) as stream:
            for text in stream.text_stream:
                received.append(text)
    assert len(received) == 2


def test_a_wrong_gateway_key_is_an_authentication_error(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    sdk = anthropic.Anthropic(base_url=gw.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        ask(sdk)


def test_an_openai_models_refusal_reaches_an_anthropic_client_in_words(mock, gateway):
    gw = gateway(config(mock, {"gpt": ("openai", "refuse", OPENAI_KEY)}, {"default": "{ targets: [gpt:gpt-test] }"}))
    message = ask(client(gw)).parse()
    assert message.content[0].text == "I'm sorry, I can't help with that."
    assert message.stop_reason == "end_turn"
    with client(gw).messages.stream(
        model="default", max_tokens=64, messages=[{"role": "user", "content": "Something it declines"}]
    ) as stream:
        assert "".join(stream.text_stream) == "I'm sorry, I can't help with that."


def test_count_tokens_is_routed_to_the_first_target_that_counts(mock, gateway):
    gw = gateway(
        config(
            mock,
            {"gpt": ("openai", "ok", OPENAI_KEY), "claude": ("anthropic", "ok", ANT_KEY)},
            {"default": "{ targets: [gpt:gpt-test, claude:claude-test] }"},
        )
    )
    raw = client(gw).messages.with_raw_response.count_tokens(
        model="default", system="Be brief.", messages=[{"role": "user", "content": "Hello there"}]
    )
    # The mock counts a quarter of the characters of every string: 9 + 4 ("user") + 11, so 6.
    assert raw.parse().input_tokens == 6
    assert raw.headers["x-switchyard-target"] == "claude:claude-test"
    sent = mock.stats()["scenarios"]["ok"]["last_request"]
    assert sent["path"].endswith("/v1/messages/count_tokens")
    assert sent["json"]["model"] == "claude-test"


def test_a_document_and_thinking_reach_an_anthropic_upstream_as_written(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "ok", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "The sky is green."},
        "title": "facts.txt",
    }
    history = [
        {"role": "user", "content": [document, {"type": "text", "text": "What colour is the sky?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "It says green.", "signature": "sig-1"}, {"type": "text", "text": "Green."}]},
        {"role": "user", "content": "Sure?"},
    ]
    message = client(gw).messages.create(
        model="default", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}, messages=history
    )
    assert message.content[0].text == "mock answer from claude-test"
    sent = mock.stats()["scenarios"]["ok"]["last_request"]["json"]
    assert sent["messages"] == history
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def test_thinking_streams_as_it_comes_and_its_signed_block_goes_back_as_written(mock, gateway):
    gw = gateway(config(mock, {"claude": ("anthropic", "think~chunks=4", ANT_KEY)}, {"default": "{ targets: [claude:claude-test] }"}))
    sdk = client(gw)
    question = [{"role": "user", "content": "Think, then answer."}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    seen = []
    with sdk.messages.stream(model="default", max_tokens=2048, thinking=thinking, messages=question) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                seen.append(event.delta.type)
        final = stream.get_final_message()
    # The thinking, its signature and then the text, each as the provider streamed it.
    assert seen[:2] == ["thinking_delta", "signature_delta"] and set(seen[2:]) == {"text_delta"}
    block = final.content[0]
    assert (block.type, block.thinking, block.signature) == (
        "thinking",
        "The user wants the mock answer.",
        "EqQBCkYIBxgCKkBmocksignature",
    )
    assert final.content[1].text == "mock answer from claude-test"

    # The next turn carries the signed block back; the provider receives it unchanged.
    history = question + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
                          {"role": "user", "content": "And then?"}]
    sdk.messages.create(model="default", max_tokens=2048, thinking=thinking, messages=history)
    sent = mock.stats()["scenarios"]["think~chunks=4"]["last_request"]["json"]
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants the mock answer.",
        "signature": "EqQBCkYIBxgCKkBmocksignature",
    }


def test_a_turn_that_opens_with_a_tool_call_cut_halfway_is_answered_whole_by_the_fallback(mock, gateway):
    # An OpenAI upstream's first chunk carries its role with the call's start: the gateway holds
    # the call back, yet the client's message begins at once (its message_start), and after the
    # cut the fallback's whole call follows, in the one message.
    gw = gateway(config(
        mock,
        {"gpt": ("openai", "cut=2~tools", OPENAI_KEY), "claude": ("anthropic", "tools", ANT_KEY)},
        {"default": "{ targets: [gpt:gpt-test, claude:claude-test], retry: { max_attempts: 1 } }"},
    ))
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with client(gw).messages.stream(
        model="default", max_tokens=128, tools=tools, messages=[{"role": "user", "content": "Weather in Paris?"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1, kinds
    calls = [block for block in final.content if block.type == "tool_use"]
    assert [(call.name, call.input) for call in calls] == [("get_weather", {"city": "Paris"})]
    assert final.stop_reason == "tool_use"
    _, record, _ = gw.get("/admin/requests/" + request_id)
    assert [a["outcome"] for a in record["attempts"]] == ["failed", "continued"]
    assert "held back" in record["attempts"][0]["note"]
