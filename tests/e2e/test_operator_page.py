"""Operating the demo: the operator page in headless Chromium, `switchyard events`, and fault
drills, against `switchyard serve` on the embedded demo behind an admin key."""

import json
import os
import subprocess
import time

import pytest

from conftest import ADMIN_KEY, BIN, GATEWAY_KEY, _http, _read_listening
from test_node_openai_sdk import NODE_MODULES

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_DIR = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "..", "..", "target"))
# Provider keys in the environment would make `serve` route to real providers, not the demo.
PROVIDER_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "SWITCHYARD_KEY")


@pytest.fixture
def demo():
    """`switchyard serve` on the embedded demo, with an admin key, on a free port."""
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARS}
    env["SWITCHYARD_ADMIN_KEY"] = ADMIN_KEY
    process = subprocess.Popen(
        [BIN, "serve", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        address = _read_listening(process, "switchyard serve")
        yield f"http://{address}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def chat(url, model="default"):
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    return _http("POST", url + "/v1/chat/completions", body)


def test_the_operator_page_follows_a_fault_drill_live(demo):
    if not os.path.exists("/usr/bin/chromium"):
        pytest.fail("the Debian package chromium is not installed (scripts/test installs it)")
    if not os.path.isdir(os.path.join(NODE_MODULES, "playwright-core")):
        pytest.fail(f"the npm package playwright-core is not installed in {NODE_MODULES} (scripts/e2e installs it)")
    screenshot = os.path.abspath(os.path.join(TARGET_DIR, "operator-page.png"))
    if os.path.exists(screenshot):
        os.remove(screenshot)
    result = subprocess.run(
        ["node", os.path.join(HERE, "operator_page.js")],
        env={**os.environ, "NODE_PATH": os.path.abspath(NODE_MODULES), "GATEWAY": demo, "ADMIN_KEY": ADMIN_KEY,
             "SCREENSHOT": screenshot},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert sorted(report["targets"]) == ["flaky:embed-small", "flaky:fast-model", "steady:embed-small", "steady:solid-model"]
    assert report["drill_without_key"] == 401
    assert report["drill"] == {"provider": "steady", "drill": {"error_rates": {"unavailable": 1.0}}}
    assert report["breaker_text"].startswith("open probe in"), report["breaker_text"]
    assert any("unavailable" in row and "503" in row for row in report["trail"]), report["trail"]
    assert "circuit_opened" in report["events"], report["events"]
    assert report["dialogs"] == ["Reset target steady:solid-model? Its health, breaker and cooldowns are forgotten."]
    assert report["page_errors"] == []
    assert os.path.getsize(screenshot) > 10_000, "the screenshot is written under target/"
    # The reset reached the gateway, not only the page.
    _, health, _ = _http("GET", demo + "/admin/health", None, {"authorization": f"Bearer {ADMIN_KEY}"})
    steady = next((t for t in health["targets"] if t["target"] == "steady:solid-model"), None)
    assert steady is None or steady["breaker"] == "closed", steady


def run_page(url, scenario, screenshot_name, extra_env=None):
    """operator_page.js in SCENARIO against the gateway at `url`: its report."""
    if not os.path.exists("/usr/bin/chromium"):
        pytest.fail("the Debian package chromium is not installed (scripts/test installs it)")
    if not os.path.isdir(os.path.join(NODE_MODULES, "playwright-core")):
        pytest.fail(f"the npm package playwright-core is not installed in {NODE_MODULES} (scripts/e2e installs it)")
    screenshot = os.path.abspath(os.path.join(TARGET_DIR, screenshot_name))
    result = subprocess.run(
        ["node", os.path.join(HERE, "operator_page.js")],
        env={**os.environ, "NODE_PATH": os.path.abspath(NODE_MODULES), "GATEWAY": url, "ADMIN_KEY": ADMIN_KEY,
             "GATEWAY_KEY": GATEWAY_KEY, "SCREENSHOT": screenshot, "SCENARIO": scenario, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def details_config(mock):
    """A failing target before a quick one, a stream the mock cuts after two chunks."""
    return f"""
providers:
  down: {{ kind: simulated, error_rates: {{ unavailable: 1.0 }} }}
  steady: {{ kind: simulated }}
  cut: {{ kind: openai_compatible, base_url: "{mock.base('cut=2')}/v1" }}
  limited: {{ kind: openai_compatible, base_url: "{mock.base('model429=gpt-a')}/v1", api_key: sk-limited-0123456789 }}
routes:
  default: {{ targets: [down:m, steady:m], retry: {{ max_attempts: 1 }} }}
  broken: {{ targets: [cut:m] }}
  limited: {{ targets: [limited:gpt-a, limited:gpt-b], retry: {{ max_attempts: 1 }} }}
gateway:
  admin_key: env://E2E_ADMIN_KEY
  keys:
    - {{ name: team-a, key: env://E2E_GATEWAY_KEY, routes: [default, broken, limited, steady:m],
        limits: {{ requests_per_minute: 1000, max_concurrent: 8 }}, budget: {{ usd: 5, per: day }} }}
"""


def test_the_operator_page_shows_what_the_first_hour_needs(mock, gateway):
    gw = gateway(details_config(mock))
    url = gw.url
    # A reload the gateway refuses: the page says so, naming the problem.
    gw.config_path.write_text(details_config(mock).replace("[down:m, steady:m]", "[nowhere:m, steady:m]"))
    status, _, _ = _http("POST", url + "/admin/config/reload", {}, {"authorization": f"Bearer {ADMIN_KEY}"})
    assert status == 422
    report = run_page(url, "details", "operator-page-details.png")
    assert "reload refused: routes.default" in report["config_text"], report["config_text"]
    assert report["broken_status"] == 200, report
    # The events the gateway kept from before the page opened fill its panel.
    assert "attempt_failed" in report["first_events"], report["first_events"]
    assert report["broken_row"]["broken"] == "transport", report["broken_row"]
    assert report["broken_row"]["status"] == "200 broken", report["broken_row"]
    assert "the stream broke after its first content: transport" in report["broken_summary"], report
    for quick in report["quick"]:
        assert quick["text"] == f"{quick['ms']:.1f} ms" and quick["text"] != "0.0 ms", quick
    assert report["hash"].startswith("#req_"), report["hash"]
    # The client key: its requests this minute against its limit, in flight, its budget.
    key = report["key_row"]
    assert key["name"].startswith("team-a") and "default, broken" in key["routes"], key
    requests, limit = key["requests"].split(" / ")
    assert int(requests) >= 12 and limit == "1000", key
    assert key["in_flight"] == "0 / 8", key
    assert key["budget"].startswith("$0.0000 of $5 a day") and "resets" in key["budget"], key
    assert int(report["key_requests_after"].split(" / ")[0]) > int(requests), "read again as requests finish"
    # A key rate-limited for one model rests for that model only, and the page says so.
    assert report["limited_status"] == 200, report
    assert "rests" in report["key_rest"] and report["key_rest"].split()[0] in report["keys_of_limited"], report
    assert report["page_errors"] == []


def test_the_page_and_the_history_need_the_admin_key(demo):
    status, page, headers = _http("GET", demo + "/admin/", None)
    # The page itself holds nothing; everything it shows is behind the key.
    assert status == 200 and "<title>Switchyard</title>" in page
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in headers["content-security-policy"]
    assert _http("GET", demo + "/admin/requests", None)[0] == 401
    assert _http("GET", demo + "/admin/events", None)[0] == 401
    for _ in range(3):
        chat(demo)
    auth = {"authorization": f"Bearer {ADMIN_KEY}"}
    status, body, _ = _http("GET", demo + "/admin/requests?limit=2", None, auth)
    assert status == 200 and len(body["requests"]) == 2
    newest, older = body["requests"]
    assert newest["time_ms"] >= older["time_ms"]
    assert set(newest) >= {"request_id", "time", "route", "served_by", "attempts", "status", "duration_ms"}
    assert _http("GET", demo + "/admin/requests?limit=none", None, auth)[0] == 400


def test_switchyard_events_prints_the_stream(demo):
    env = {**os.environ, "SWITCHYARD_ADMIN_KEY": ADMIN_KEY}
    tail = subprocess.Popen([BIN, "events", "--url", demo], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # The tail is connected once a request it sees appears; send until one does.
        _http("POST", demo + "/admin/simulated/flaky", {"error_rates": {"unavailable": 1.0}}, {"authorization": f"Bearer {ADMIN_KEY}"})
        lines = []
        deadline = time.monotonic() + 30
        seen = lambda name: any(len(line.split()) > 1 and line.split()[1] == name for line in lines)  # noqa: E731
        while time.monotonic() < deadline and not (seen("attempt_failed") and seen("request_finished")):
            chat(demo, "flaky:fast-model")
            chat(demo)
            lines.append(tail.stdout.readline().rstrip("\n"))
        names = [line.split()[1] for line in lines if len(line.split()) > 1]
        assert "attempt_failed" in names, lines
        failed = next(line for line in lines if " attempt_failed " in line)
        assert "target=flaky:fast-model" in failed and "error=unavailable 503" in failed, failed
        assert any(line.split()[1] == "request_finished" for line in lines), lines
        assert ADMIN_KEY not in "\n".join(lines)
    finally:
        tail.terminate()
        tail.wait(timeout=10)
        _http("POST", demo + "/admin/simulated/flaky", {}, {"authorization": f"Bearer {ADMIN_KEY}"})


def test_the_operator_page_shows_the_whole_fleet(gateway, redis_url):
    config = f"""
providers:
  steady: {{ kind: simulated }}
routes:
  default: {{ targets: [steady:m] }}
gateway: {{ keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }}
state: {{ redis: "{redis_url}", prefix: page-fleet }}
"""
    a, b, c = (gateway(config, env={"SWITCHYARD_REPLICA": name}).url for name in "abc")
    body = {"model": "default", "messages": [{"role": "user", "content": "hello"}]}
    for _ in range(2):
        status, _, _ = _http("POST", b + "/v1/chat/completions", body, {"authorization": f"Bearer {GATEWAY_KEY}"})
        assert status == 200
    report = run_page(c, "fleet", "operator-page-fleet.png", {"OTHER": a})
    assert sorted(report["replicas"]) == ["a", "b", "c"], report
    # Healthy everywhere: every replica sees each target as this one does.
    assert report["fleet_view"] and set(report["fleet_view"]) == {"same"}, report
    assert report["other_row_replica"] == "a", report
    assert "at replica a" in report["trail_summary"], report
    assert report["picked"] and set(report["picked"]) == {"b"}, report
    assert report["page_errors"] == []
