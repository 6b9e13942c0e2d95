"""Client keys through the real binary, in front of the mock upstream, with the official OpenAI
SDK: a key over its rate is refused with 429 `key_rate_limited` and Retry-After before any
provider is called while another key is served; a key outside its routes gets 403
`model_not_allowed`; a key whose budget is spent gets 429 `budget_exceeded` with its reset, said as
a spent quota the SDK does not retry; and
`/admin/keys` shows each key by name, never the key."""

import openai
import pytest

from conftest import ADMIN_KEY

TEAM = "sk-team-e2e-key-0000000001"
BUDGET = "sk-budget-e2e-key-0000000002"
BARE = "sk-bare-e2e-key-0000000003"


def keys_config(mock):
    # Every answer of the mock costs 10 prompt tokens: at $100,000 a million, $1 an answer.
    return f"""
providers:
  up: {{ kind: openai_compatible, base_url: "{mock.base('ok')}/v1", prices: {{ m: {{ input: 100000, output: 0 }} }} }}
routes:
  default: {{ targets: [up:m] }}
  other: {{ targets: [up:m] }}
gateway:
  admin_key: env://E2E_ADMIN_KEY
  keys:
    - {BARE}
    - {{ name: team, key: {TEAM}, routes: [default], limits: {{ requests_per_minute: 2 }} }}
    - {{ name: thrifty, key: {BUDGET}, budget: {{ usd: 1.5, per: day }} }}
"""


def client(gw, key):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


def chat(gw, key, model="default"):
    return client(gw, key).chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}])


def upstream_calls(mock):
    return mock.stats()["requests"]


def test_a_key_over_its_rate_is_refused_before_any_provider_while_another_is_served(mock, gateway):
    gw = gateway(keys_config(mock))
    for _ in range(2):
        assert chat(gw, TEAM).choices[0].message.content.startswith("mock answer")
    before = upstream_calls(mock)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(gw, TEAM)
    assert refused.value.status_code == 429
    assert refused.value.body["code"] == "key_rate_limited", refused.value.body
    assert int(refused.value.response.headers["retry-after"]) == 30, "one request every 30 s refills"
    assert upstream_calls(mock) == before, "no provider was called for the refusal"
    assert chat(gw, BARE).choices[0].message.content.startswith("mock answer"), "another key is served"


def test_a_model_outside_a_keys_routes_is_refused_naming_what_it_may_use(mock, gateway):
    gw = gateway(keys_config(mock))
    with pytest.raises(openai.PermissionDeniedError) as refused:
        chat(gw, TEAM, model="other")
    assert refused.value.status_code == 403
    assert refused.value.body["code"] == "model_not_allowed"
    assert "default" in refused.value.body["message"], refused.value.body
    assert chat(gw, BARE, model="other").choices[0].message.content.startswith("mock answer")


def test_a_spent_budget_is_refused_with_its_reset_and_the_admin_view_names_the_key(mock, gateway):
    gw = gateway(keys_config(mock))
    chat(gw, BUDGET)
    chat(gw, BUDGET)  # $2 spent of $1.50: the answer in flight when it ran out completes
    with pytest.raises(openai.RateLimitError) as refused:
        chat(gw, BUDGET)
    assert refused.value.body["code"] == "budget_exceeded", refused.value.body
    assert "resets" in refused.value.body["message"] or "reset" in refused.value.body["message"]
    # Said as a spent quota: the SDK does not retry it, nor sleep until the reset.
    assert refused.value.body["type"] == "insufficient_quota", refused.value.body
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert "retry-after" not in refused.value.response.headers
    status, keys, _ = gw.get("/admin/keys", key=ADMIN_KEY)
    assert status == 200
    text = str(keys)
    assert "thrifty" in text and "team" in text
    for secret in (TEAM, BUDGET, BARE):
        assert secret not in text, "a key reached /admin/keys"
