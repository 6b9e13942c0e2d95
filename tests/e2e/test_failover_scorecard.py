"""The failover scorecard (issue 40): every way a provider misbehaves, each through the real
binary with the OpenAI and the Anthropic SDK, streamed and not, on a route with a fallback and
one plain policy (three tries, first-byte and idle limits of 1 s, defaults elsewhere).

The checks are the client's: a whole answer (the mock's `words=40` text, the same from every
target) or a clean error; how many requests each target saw (the mock's `/_stats`) and when
(the trail's `start_ms`); how long the request took (bounds generous enough for a loaded
2-core machine). Each SDK talks to providers of its own dialect, so both of the mock's dialects
and the gateway's passthrough are on the path. One gateway serves every route of a config; the
mock's counters and the gateway's health are reset before each test.
"""

import time
from dataclasses import dataclass

import anthropic
import openai
import pytest

from conftest import GATEWAY_KEY, config



def words(n):
    """The mock's `words=N` text: `w1 w2 … wN`."""
    return " ".join(f"w{i}" for i in range(1, n + 1))


# Every answer is the same 40 words, whichever target says it; a broken one breaks after 20.
WORDS = 40
ANSWER = "ok~words=40"
PARTIAL = words(20)
KEY = "api_key: sk-upstream-scorecard-0001"
POLICY = "retry: { max_attempts: 3 }, timeouts: { first_byte: 1s, idle: 1s }"
FIRST_BYTE = 1.0
# Retries may add far more than 20% of requests here: every test fails on purpose.
EXTRA = "retry_budget: { min_retries: 1000 }\n"
# What a request that fails over at once may take on a loaded machine.
QUICK = 3.0

DIALECTS = ("openai", "anthropic")
VARIANTS = [(dialect, stream) for dialect in DIALECTS for stream in (False, True)]
VARIANT_IDS = [f"{dialect}-{'stream' if stream else 'whole'}" for dialect, stream in VARIANTS]
MODELS = {"openai": ("gpt-primary", "gpt-fallback"), "anthropic": ("claude-primary", "claude-fallback")}

# The primary's scenario of each fault. Each has a route per dialect, `{fault}_{dialect}`: that
# primary, then a fallback that answers (`{fault}_{dialect}_fb`, scenario ANSWER).
FAULTS = {
    "retry_after": "ratelimit=1,ok~words=40",
    "once500": "fail500,ok~words=40",
    "reset": "reset,ok~words=40",
    "noterm": "noterm~words=40",
    "noend": "noend~words=40",
    "badevent": "badevent=10~words=40",
    "hang": "hang",
    "down": "down=2s~words=40",
    "cut": "cut=20~words=40",
    "stall": "stall=20~words=40",
    "keepalive": "keepalive=20~words=40",
    "errafter": "errevent=20~words=40",
    "errbefore": "errevent=0~words=40",
    "filter": "filter",
    "context": "context",
}
# The context window's target (`big_{dialect}`) says 30 words, so its answer names it.
BIG = "ok~words=30"


def scorecard_config(mock):
    providers, routes = {}, {}
    for dialect in DIALECTS:
        primary_model, fallback_model = MODELS[dialect]
        for fault, scenario in FAULTS.items():
            primary, fallback = f"{fault}_{dialect}", f"{fault}_{dialect}_fb"
            providers[primary] = (dialect, scenario, KEY)
            providers[fallback] = (dialect, ANSWER, KEY)
            chain = f", context_window: [big_{dialect}:{fallback_model}]" if fault == "context" else ""
            targets = f"[{primary}:{primary_model}, {fallback}:{fallback_model}]"
            routes[primary] = f"{{ targets: {targets}, {POLICY}{chain} }}"
        providers[f"big_{dialect}"] = (dialect, BIG, KEY)
        # A rate limit on one model of a key: the fallback is the other model, same provider, same key.
        providers[f"limited_{dialect}"] = (dialect, f"model429={primary_model}~words=40", KEY)
        routes[f"model429_{dialect}"] = (
            f"{{ targets: [limited_{dialect}:{primary_model}, limited_{dialect}:{fallback_model}], {POLICY} }}"
        )
        # A deadline and a silent primary: the first-byte wait is left long, the deadline short.
        routes[f"deadline_{dialect}"] = (
            f"{{ targets: [hang_{dialect}:{primary_model}, hang_{dialect}_fb:{fallback_model}], "
            "retry: { max_attempts: 3 }, timeouts: { first_byte: 30s, idle: 30s, deadline: 3s } }"
        )
        # The same without a deadline: the client's SDK says how long it waits.
        routes[f"patience_{dialect}"] = (
            f"{{ targets: [hang_{dialect}:{primary_model}, hang_{dialect}_fb:{fallback_model}], "
            "retry: { max_attempts: 3 }, timeouts: { first_byte: 30s, idle: 30s } }"
        )
    return config(mock, providers, routes, EXTRA)


@pytest.fixture(scope="module")
def scorecard(module_gateway, mock):
    return module_gateway(scorecard_config(mock))


@pytest.fixture
def gw(scorecard, mock):
    """The scorecard's gateway, with the mock's counters and the gateway's health reset."""
    mock.reset()
    status, _, _ = scorecard.post("/admin/health/reset")
    assert status == 200
    return scorecard


# --- the client's view -------------------------------------------------------------------------


@dataclass
class Asked:
    """What one request came to, as the client saw it."""

    text: str = ""
    error: Exception | None = None
    finish: str | None = None
    output_tokens: int | None = None
    request_id: str | None = None
    seconds: float = 0.0

    def whole(self, count=WORDS):
        """Asserts a whole answer of the numbered words."""
        assert self.error is None, f"the request failed: {self.error!r} after {self.text!r}"
        assert self.text == words(count), self.text
        assert self.output_tokens is not None and self.output_tokens > 0


def ask(gw, dialect, route, stream, messages=None, timeout=30):
    """Sends one chat with the `dialect`'s SDK (which gives up after `timeout` seconds), reads
    it to its end and times it."""
    messages = messages or [{"role": "user", "content": "Count to forty."}]
    asked = Asked()
    started = time.monotonic()
    try:
        if dialect == "openai":
            _ask_openai(gw, route, stream, messages, asked, timeout)
        else:
            _ask_anthropic(gw, route, stream, messages, asked, timeout)
    except (openai.APIError, anthropic.APIError) as error:
        asked.error = error
    asked.seconds = time.monotonic() - started
    return asked


def _ask_openai(gw, route, stream, messages, asked, timeout):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, timeout=timeout)
    options = {"stream_options": {"include_usage": True}} if stream else {}
    raw = client.chat.completions.with_raw_response.create(model=route, messages=messages, stream=stream, **options)
    asked.request_id = raw.headers.get("x-request-id")
    if not stream:
        completion = raw.parse()
        asked.text = completion.choices[0].message.content or ""
        asked.finish = completion.choices[0].finish_reason
        asked.output_tokens = completion.usage.completion_tokens
        return
    for chunk in raw.parse():
        if chunk.usage:
            asked.output_tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            asked.text += choice.delta.content or ""
            asked.finish = choice.finish_reason or asked.finish


def _ask_anthropic(gw, route, stream, messages, asked, timeout):
    client = anthropic.Anthropic(base_url=gw.url, api_key=GATEWAY_KEY, max_retries=0, timeout=timeout)
    raw = client.messages.with_raw_response.create(model=route, max_tokens=256, messages=messages, stream=stream)
    asked.request_id = raw.headers.get("x-request-id")
    if not stream:
        message = raw.parse()
        asked.text = "".join(block.text for block in message.content if block.type == "text")
        asked.finish = message.stop_reason
        asked.output_tokens = message.usage.output_tokens
        return
    for event in raw.parse():
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            asked.text += event.delta.text
        elif event.type == "message_delta":
            asked.finish = event.delta.stop_reason
            asked.output_tokens = event.usage.output_tokens


def trail(gw, asked):
    """The attempts of a finished request, from `/admin/requests/{id}`."""
    assert asked.request_id, "every answer carries x-request-id"
    deadline = time.monotonic() + 5
    while True:
        status, record, _ = gw.get("/admin/requests/" + asked.request_id)
        # A stream's record is kept when the gateway finishes it, a moment after the client.
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert status == 200, record
    return record["attempts"]


def seen(mock, scenario):
    """How many requests the mock took for `scenario`."""
    return mock.stats()["scenarios"].get(scenario, {}).get("requests", 0)


def route_of(fault, dialect):
    return f"{fault}_{dialect}"


def primary_of(dialect):
    return MODELS[dialect][0]


def nothing_left_hanging(mock):
    """The gateway let go of every upstream request it gave up on."""
    deadline = time.monotonic() + 5
    while mock.stats()["hanging"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mock.stats()["hanging"] == 0, "an upstream request the gateway gave up on is still held"


# --- faults rescued before any content ---------------------------------------------------------


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_persistent_429_on_one_model_is_answered_by_the_other_model_on_the_same_key(gw, mock, dialect, stream):
    primary, fallback = MODELS[dialect]
    asked = ask(gw, dialect, f"model429_{dialect}", stream)
    asked.whole()
    assert asked.seconds < QUICK
    attempts = trail(gw, asked)
    assert attempts[-1]["target"] == f"limited_{dialect}:{fallback}" and attempts[-1]["outcome"] == "ok"
    limited = attempts[:-1]
    assert 1 <= len(limited) <= 3 and all(a["target"] == f"limited_{dialect}:{primary}" for a in limited)
    assert all(a["error"]["kind"] == "rate_limited" for a in limited)
    assert {a["credential_id"] for a in attempts} == {attempts[-1]["credential_id"]}, "one key for both models"
    scenario = f"model429={primary}~words=40"
    assert seen(mock, scenario) == len(attempts)

    # The key rests for the limited model only: the next request skips it and is served by the
    # fallback model at once, on the same key.
    again = ask(gw, dialect, f"model429_{dialect}", stream)
    again.whole()
    assert [(a["target"], a["outcome"]) for a in trail(gw, again)] == [
        (f"limited_{dialect}:{primary}", "skipped_unhealthy"),
        (f"limited_{dialect}:{fallback}", "ok"),
    ]
    assert seen(mock, scenario) == len(attempts) + 1
    assert again.seconds < QUICK


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_429_with_retry_after_is_waited_for_then_retried_on_the_same_target(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("retry_after", dialect), stream)
    asked.whole()
    assert seen(mock, FAULTS["retry_after"]) == 2 and seen(mock, ANSWER) == 0
    attempts = trail(gw, asked)
    assert [a["outcome"] for a in attempts] == ["retried", "ok"]
    assert attempts[1]["start_ms"] >= 1000, "the retry waited for Retry-After: 1"
    assert 1.0 <= asked.seconds < 1.0 + QUICK


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_500_once_is_retried_on_the_same_target(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("once500", dialect), stream)
    asked.whole()
    assert seen(mock, FAULTS["once500"]) == 2 and seen(mock, ANSWER) == 0
    assert [a["outcome"] for a in trail(gw, asked)] == ["retried", "ok"]
    assert asked.seconds < QUICK


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_connection_reset_is_retried_on_the_same_target(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("reset", dialect), stream)
    asked.whole()
    assert seen(mock, FAULTS["reset"]) == 2 and seen(mock, ANSWER) == 0
    attempts = trail(gw, asked)
    assert [a["outcome"] for a in attempts] == ["retried", "ok"]
    assert attempts[0]["error"]["kind"] == "transport"
    assert asked.seconds < QUICK


# A stream without its terminator: closed after its answer (`noterm`), or held open (`noend`).
UNTERMINATED = ("noterm", "noend")


@pytest.mark.parametrize("fault", UNTERMINATED)
@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_stream_without_its_terminator_is_whole_and_leaves_the_target_healthy(gw, mock, dialect, stream, fault):
    route, scenario = route_of(fault, dialect), FAULTS[fault]
    asked = ask(gw, dialect, route, stream)
    asked.whole()
    assert seen(mock, scenario) == 1 and seen(mock, ANSWER) == 0, "one attempt"
    assert [a["outcome"] for a in trail(gw, asked)] == ["ok"]
    assert gw.health_of(f"{route}:{primary_of(dialect)}")["status"] == "available"
    assert asked.seconds < QUICK

    again = ask(gw, dialect, route, stream)
    again.whole()
    assert seen(mock, scenario) == 2 and seen(mock, ANSWER) == 0, "the next request goes to the primary"


@pytest.mark.parametrize("fault", UNTERMINATED)
@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_missing_terminator_is_noted_in_the_trail(gw, mock, dialect, stream, fault):
    asked = ask(gw, dialect, route_of(fault, dialect), stream)
    asked.whole()
    note = trail(gw, asked)[0].get("note", "")
    assert "terminator" in note, f"the trail does not say the stream ended without its terminator: {note!r}"


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_one_malformed_event_is_skipped_and_the_answer_is_whole(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("badevent", dialect), stream)
    asked.whole()
    assert seen(mock, FAULTS["badevent"]) == 1 and seen(mock, ANSWER) == 0
    assert [a["outcome"] for a in trail(gw, asked)] == ["ok"]
    assert gw.health_of(f"{route_of('badevent', dialect)}:{primary_of(dialect)}")["status"] == "available"


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_skipped_event_is_counted_in_the_trail(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("badevent", dialect), stream)
    asked.whole()
    attempt = trail(gw, asked)[0]
    assert attempt.get("skipped_events") == 1, attempt
    assert "skipped" in attempt.get("note", ""), attempt


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_silent_primary_is_asked_once_and_the_fallback_at_once(gw, mock, dialect):
    asked = ask(gw, dialect, route_of("hang", dialect), True)
    asked.whole()
    assert seen(mock, "hang") == 1, "a target that said nothing is not asked again"
    assert seen(mock, ANSWER) == 1
    attempts = trail(gw, asked)
    assert [a["outcome"] for a in attempts] == ["failed", "ok"]
    assert attempts[0]["error"]["kind"] == "timeout"
    assert FIRST_BYTE * 0.9 <= attempts[1]["start_ms"] / 1000 < FIRST_BYTE + QUICK
    assert asked.seconds < FIRST_BYTE + QUICK
    nothing_left_hanging(mock)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_non_streamed_request_to_a_hung_primary_fails_over_after_first_byte(gw, mock, dialect):
    # Sent upstream as a stream (`stream_upstream`), so `first_byte` guards it, not `total`.
    asked = ask(gw, dialect, route_of("hang", dialect), False)
    asked.whole()
    assert seen(mock, "hang") == 1 and seen(mock, ANSWER) == 1
    assert FIRST_BYTE * 0.9 <= asked.seconds < FIRST_BYTE + QUICK
    nothing_left_hanging(mock)


def test_a_primary_back_from_a_503_outage_is_used_again_within_the_documented_bound(gw, mock):
    """`down=2s`: while the primaries are down their requests go to the fallbacks, then each
    primary is used again within 5 s of its recovery (README, `health`: `open_for` 5 s). Steady
    traffic, the four variants in turn, one request every 0.1 s."""
    outage, bound, margin = 2.0, 5.0, 1.5
    started = time.monotonic()
    served, back = [], {}
    i = 0
    while len(back) < len(DIALECTS) and time.monotonic() - started < outage + bound + margin:
        dialect, stream = VARIANTS[i % len(VARIANTS)]
        i += 1
        asked = ask(gw, dialect, route_of("down", dialect), stream)
        asked.whole()
        by_primary = trail(gw, asked)[-1]["target"] == f"down_{dialect}:{primary_of(dialect)}"
        at = time.monotonic() - started
        served.append((round(at, 2), dialect, "primary" if by_primary else "fallback"))
        if by_primary:
            assert at >= outage * 0.9, f"served by the primary during its outage: {served}"
            back.setdefault(dialect, at)
        time.sleep(0.1)
    assert set(back) == set(DIALECTS), f"a primary was not used again: {served}"
    for dialect, at in back.items():
        assert at - outage <= bound + margin, f"{dialect}: back {at - outage:.1f}s after recovery: {served}"
    assert any(by == "fallback" for _, _, by in served), f"no request went to a fallback: {served}"


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_an_error_event_before_any_content_fails_over(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("errbefore", dialect), stream)
    asked.whole()
    assert seen(mock, FAULTS["errbefore"]) == 3, "three tries of the primary"
    assert seen(mock, ANSWER) == 1
    attempts = trail(gw, asked)
    assert [a["outcome"] for a in attempts] == ["retried", "retried", "failed", "ok"]
    assert attempts[0]["error"]["kind"] == "unavailable"
    assert asked.seconds < QUICK + 2


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_prompt_too_long_goes_to_the_context_window_chain_without_a_retry(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("context", dialect), stream)
    asked.whole(count=30)
    assert seen(mock, "context") == 1 and seen(mock, ANSWER) == 0 and seen(mock, BIG) == 1
    attempts = trail(gw, asked)
    assert attempts[0]["error"]["kind"] == "context_length"
    assert attempts[-1]["target"] == f"big_{dialect}:{MODELS[dialect][1]}"


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_content_filter_refusal_is_propagated_without_a_retry(gw, mock, dialect, stream):
    asked = ask(gw, dialect, route_of("filter", dialect), stream)
    assert asked.error is None, repr(asked.error)
    assert asked.finish == ("content_filter" if dialect == "openai" else "refusal")
    assert asked.text == ""
    assert seen(mock, "filter") == 1 and seen(mock, ANSWER) == 0
    assert asked.seconds < QUICK


@pytest.mark.parametrize("dialect,stream", VARIANTS, ids=VARIANT_IDS)
def test_a_deadline_leaves_the_fallback_room_when_the_primary_is_silent(gw, mock, dialect, stream):
    deadline = 3.0
    asked = ask(gw, dialect, f"deadline_{dialect}", stream)
    asked.whole()
    assert asked.seconds < deadline, "the fallback answered within the deadline"
    assert seen(mock, "hang") == 1 and seen(mock, ANSWER) == 1
    attempts = trail(gw, asked)
    # The silent primary had at most an equal share of the deadline: 3 s / 2.
    assert attempts[1]["start_ms"] / 1000 <= deadline / 2 + 0.5
    nothing_left_hanging(mock)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_sdks_timeout_leaves_the_fallback_room_when_the_primary_is_silent(gw, mock, dialect):
    """The SDK says how long it waits (`x-stainless-read-timeout`, `x-stainless-timeout`): for
    an answer it is given whole that is the request's deadline, less a margin. The route waits
    30 s for a first byte; a client that gives up after 3 s is answered by the fallback."""
    patience = 3.0
    asked = ask(gw, dialect, f"patience_{dialect}", False, timeout=patience)
    asked.whole()
    assert asked.seconds < patience
    assert seen(mock, "hang") == 1 and seen(mock, ANSWER) == 1
    attempts = trail(gw, asked)
    # The silent primary had half of the 2.7 s the gateway gave itself.
    assert attempts[1]["start_ms"] / 1000 <= 1.35 + 0.5
    nothing_left_hanging(mock)


# --- breaks after content: whole when not streamed, continued when streamed --------------------

AFTER_CONTENT = ["cut", "stall", "keepalive", "errafter"]
# Faults that hold the connection open: caught by `idle`, after the content's last word.
STALLS = ("stall", "keepalive")


@pytest.mark.parametrize("fault", AFTER_CONTENT)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_break_after_content_upstream_of_a_whole_answer_is_retried_or_failed_over_whole(gw, mock, dialect, fault):
    # The client has seen nothing: the primary's three tries, then the fallback; a stall (as a
    # silence) is not waited out again while the fallback remains: one idle wait, then it.
    asked = ask(gw, dialect, route_of(fault, dialect), False)
    asked.whole()
    tries = 1 if fault in STALLS else 3
    assert seen(mock, FAULTS[fault]) == tries and seen(mock, ANSWER) == 1
    outcomes = ["failed", "ok"] if fault in STALLS else ["retried", "retried", "failed", "ok"]
    assert [a["outcome"] for a in trail(gw, asked)] == outcomes
    limit = FIRST_BYTE if fault in STALLS else 0
    assert asked.seconds < limit + QUICK + 2
    nothing_left_hanging(mock)


@pytest.mark.parametrize("fault", AFTER_CONTENT)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_broken_after_content_is_continued_by_the_fallback(gw, mock, dialect, fault):
    """Continuation: the Anthropic fallback takes the partial text as a prefill; the OpenAI one
    (an `openai` provider, which takes none) regenerates the answer, which begins with exactly
    what the client has."""
    asked = ask(gw, dialect, route_of(fault, dialect), True)
    asked.whole()
    assert seen(mock, FAULTS[fault]) == 1, "a stream that showed content is not restarted"
    assert seen(mock, ANSWER) == 1
    attempts = trail(gw, asked)
    assert [a["outcome"] for a in attempts] == ["failed", "continued"]
    assert attempts[0].get("mid_stream") is True
    last = mock.stats()["scenarios"][ANSWER]["last_request"]["json"]["messages"][-1]
    if dialect == "anthropic":
        assert last["role"] == "assistant", "Claude is asked to continue the partial text"
        assert _text_of(last) == PARTIAL
    else:
        assert last["role"] == "user", "a target without prefills is asked the question again"
    limit = FIRST_BYTE if fault in STALLS else 0
    assert asked.seconds < limit + QUICK
    nothing_left_hanging(mock)


def _text_of(message):
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


# --- continuation's settings: prefills on an OpenAI-compatible server, refusals, off ------------

def continuation_config(mock):
    providers = {
        "broken": ("openai", "cut=20~words=40", KEY),
        "prefills": ("openai_compatible", ANSWER, KEY + ", prefill: true"),
        "refuses": ("openai_compatible", "noprefill~words=40", KEY + ", prefill: true"),
    }
    routes = {
        "prefilled": f"{{ targets: [broken:gpt-primary, prefills:local-model], {POLICY} }}",
        "refused": f"{{ targets: [broken:gpt-primary, refuses:local-model], {POLICY} }}",
        "off": f"{{ targets: [broken:gpt-primary, prefills:local-model], {POLICY}, continuation: off }}",
    }
    return config(mock, providers, routes, EXTRA)


@pytest.fixture(scope="module")
def continuing(module_gateway, mock):
    return module_gateway(continuation_config(mock))


@pytest.fixture
def cgw(continuing, mock):
    mock.reset()
    status, _, _ = continuing.post("/admin/health/reset")
    assert status == 200
    return continuing


def test_an_openai_compatible_fallback_with_prefill_continues_the_partial_answer(cgw, mock):
    asked = ask(cgw, "openai", "prefilled", True)
    asked.whole()
    assert seen(mock, "cut=20~words=40") == 1 and seen(mock, ANSWER) == 1
    attempts = trail(cgw, asked)
    assert [a["outcome"] for a in attempts] == ["failed", "continued"]
    assert attempts[0].get("mid_stream") is True
    last = mock.stats()["scenarios"][ANSWER]["last_request"]["json"]["messages"][-1]
    assert last["role"] == "assistant" and _text_of(last) == PARTIAL, "the partial text, trailing space trimmed"


def test_a_fallback_that_refuses_the_prefill_leaves_the_client_the_original_break(cgw, mock):
    asked = ask(cgw, "openai", "refused", True)
    assert asked.text == PARTIAL, "what was streamed before the break, never passed off as whole"
    assert isinstance(asked.error, openai.APIError), repr(asked.error)
    assert "prefill" not in str(asked.error), "a prefill refusal never masks the real error"
    assert seen(mock, "noprefill~words=40") == 1, "the refusal was asked once"
    attempts = trail(cgw, asked)
    assert attempts[0]["outcome"] == "failed" and attempts[0].get("mid_stream") is True
    assert asked.seconds < QUICK


def test_continuation_off_ends_a_broken_stream_with_a_clean_error(cgw, mock):
    asked = ask(cgw, "openai", "off", True)
    assert asked.text == PARTIAL
    assert isinstance(asked.error, openai.APIError), repr(asked.error)
    assert seen(mock, ANSWER) == 0, "no target is asked to continue"


# --- a Responses client: an `openai` provider is spoken to in the Responses API --------------


@pytest.mark.parametrize("fault", STALLS)
def test_a_responses_stream_that_stalls_after_content_is_caught_by_idle(gw, mock, fault):
    """Through the Responses API upstream: the empty deltas an upstream sends while it holds a
    stalled answer open tell of no progress, so `idle` ends it and the fallback continues it."""
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=GATEWAY_KEY, max_retries=0, timeout=30)
    started, text, types = time.monotonic(), "", []
    raw = client.responses.with_raw_response.create(model=route_of(fault, "openai"), input="Count to forty.", stream=True)
    request_id = raw.headers.get("x-request-id")
    try:
        for event in raw.parse():
            types.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
    except openai.APIError as error:
        types.append(repr(error))
    seconds = time.monotonic() - started
    assert text == words(WORDS) and types[-1] == "response.completed", (text, types[-3:])
    attempts = trail(gw, Asked(request_id=request_id))
    assert [a["outcome"] for a in attempts] == ["failed", "continued"], attempts
    assert attempts[0]["error"]["detail"] == "no chunk within the idle timeout of 1s"
    assert seen(mock, FAULTS[fault]) == 1 and seen(mock, ANSWER) == 1
    assert seconds < FIRST_BYTE + QUICK
    nothing_left_hanging(mock)
