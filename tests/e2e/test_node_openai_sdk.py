"""OpenAI's Node SDK against the gateway. Its embeddings call asks for base64 by default and
decodes the answer as little-endian f32: a gateway that answered floats regardless gave it
corrupt vectors with no error."""

import json
import os
import subprocess

import openai
import pytest

from conftest import GATEWAY_KEY
from test_openai_sdk import KEY, config

NODE_MODULES = os.environ.get("SWITCHYARD_NODE_MODULES", "target/e2e-node/node_modules")

SCRIPT = """
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
(async () => {
  const answer = await client.embeddings.create({ model: 'embed', input: ['one', 'two'] });
  console.log(JSON.stringify(answer.data.map((d) => ({ index: d.index, embedding: d.embedding }))));
})().catch((error) => { console.error(String(error)); process.exit(1); });
"""


def node(script, env):
    if not os.path.isdir(os.path.join(NODE_MODULES, "openai")):
        pytest.fail(f"the npm package openai is not installed in {NODE_MODULES} (scripts/e2e installs it)")
    result = subprocess.run(
        ["node", "-e", script],
        env={**os.environ, "NODE_PATH": os.path.abspath(NODE_MODULES), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_node_sdk_default_embeddings_decode_to_the_same_floats(mock, gateway):
    gw = gateway(config(mock, {"a": ("openai", "ok", KEY)}, {"embed": "{ targets: [a:text-embed] }"}))
    from_node = node(SCRIPT, {"BASE_URL": gw.url + "/v1", "API_KEY": GATEWAY_KEY})
    python = openai.OpenAI(base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0)
    floats = python.embeddings.create(model="embed", input=["one", "two"], encoding_format="float")
    assert [d["index"] for d in from_node] == [0, 1]
    for node_vector, float_vector in zip(from_node, floats.data):
        assert len(node_vector["embedding"]) == len(float_vector.embedding) > 1
        # The same f32 values, read through base64 and through floats.
        assert node_vector["embedding"] == pytest.approx(float_vector.embedding, rel=1e-7, abs=1e-12)


AI_SDK = """
const { generateText, streamText, tool, stepCountIs } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');
// The default provider: `openai(model)` speaks the Responses API.
const openai = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `21C in ${city}`,
});
(async () => {
  const options = { model: openai('default'), prompt: 'Weather in Paris?', tools: { get_weather: weather }, stopWhen: stepCountIs(3) };
  if (process.env.MODE === 'generate') {
    const result = await generateText(options);
    const calls = result.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input]));
    console.log(JSON.stringify({ text: result.text, steps: result.steps.length, calls }));
  } else {
    const result = streamText(options);
    const pieces = [];
    for await (const piece of result.textStream) pieces.push(piece);
    const steps = await result.steps;
    const calls = steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input]));
    console.log(JSON.stringify({ text: pieces.join(''), pieces: pieces.length, steps: steps.length, calls }));
  }
})().catch((error) => { console.error(String(error)); process.exit(1); });
"""


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_the_vercel_ai_sdks_default_provider_runs_a_tool_through_the_responses_api(mock, gateway, mode):
    for package in ("ai", "@ai-sdk/openai", "zod"):
        if not os.path.isdir(os.path.join(NODE_MODULES, package)):
            pytest.fail(f"the npm package {package} is not installed in {NODE_MODULES} (scripts/e2e installs it)")
    scenario = "tools,ok~chunks=3"
    gw = gateway(config(mock, {"a": ("openai", scenario, KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    result = node(AI_SDK, {"BASE_URL": gw.url + "/v1", "API_KEY": GATEWAY_KEY, "MODE": mode})
    assert result["calls"] == [["get_weather", {"city": "Paris"}]]
    assert result["steps"] == 2
    assert result["text"] == "mock answer from gpt-test"
    if mode == "stream":
        assert result["pieces"] >= 2
    # An `openai` provider is spoken to in the Responses API, natively.
    sent = mock.stats()["scenarios"][scenario]["last_request"]
    assert sent["path"].endswith("/v1/responses")
    outputs = [item for item in sent["json"]["input"] if item.get("type") == "function_call_output"]
    assert len(outputs) == 1 and "21C in Paris" in json.dumps(outputs[0]["output"])


AI_SDK_CONVERSATION = """
const { generateText, streamText } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const openai = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
(async () => {
  // A chat as an app keeps it: the first answer's messages, then the next question. With the
  // provider's default store: true, earlier answers go back as item references.
  const first = await generateText({ model: openai('default'), prompt: 'My name is Ada.' });
  const messages = [{ role: 'user', content: 'My name is Ada.' }, ...first.response.messages,
    { role: 'user', content: 'What is my name?' }];
  let second;
  if (process.env.MODE === 'generate') {
    second = (await generateText({ model: openai('default'), messages })).text;
  } else {
    const pieces = [];
    for await (const piece of streamText({ model: openai('default'), messages }).textStream) pieces.push(piece);
    second = pieces.join('');
  }
  console.log(JSON.stringify({ first: first.text, second }));
})().catch((error) => { console.error(String(error)); process.exit(1); });
"""


@pytest.mark.parametrize("mode", ["generate", "stream"])
@pytest.mark.parametrize("kind", ["openai", "openai_compatible"])
def test_a_vercel_ai_sdk_conversation_goes_on_by_item_reference(mock, gateway, mode, kind):
    scenario = "ok~chunks=3"
    gw = gateway(config(mock, {"a": (kind, scenario, KEY)}, {"default": "{ targets: [a:gpt-test] }"}))
    result = node(AI_SDK_CONVERSATION, {"BASE_URL": gw.url + "/v1", "API_KEY": GATEWAY_KEY, "MODE": mode})
    assert result == {"first": "mock answer from gpt-test", "second": "mock answer from gpt-test"}
    # The referenced answer reached the provider in its place, as the text it was.
    sent = mock.stats()["scenarios"][scenario]["last_request"]["json"]
    if kind == "openai":
        assert [item.get("role") for item in sent["input"]] == ["user", "assistant", "user"], sent["input"]
        assert sent["input"][1]["content"][0]["text"] == "mock answer from gpt-test"
    else:
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
        assert sent["messages"][1]["content"] == "mock answer from gpt-test"
