"""End-to-end fixtures: the real `switchyard serve` binary between the official SDKs and the
mock upstream (`switchyard-mock`), all on loopback.

The binaries come from SWITCHYARD_BIN and SWITCHYARD_MOCK_BIN (scripts/e2e builds them).
"""

import itertools
import json
import os
import subprocess
import tempfile
import time
import urllib.request

import pytest

BIN = os.environ.get("SWITCHYARD_BIN", "target/debug/switchyard")
MOCK_BIN = os.environ.get("SWITCHYARD_MOCK_BIN", "target/debug/switchyard-mock")
GATEWAY_KEY = "sk-gateway-e2e-0123456789"
ADMIN_KEY = "sk-admin-e2e-9876543210"


def _read_listening(process, what):
    """The address from the `listening on ...` line a server prints first."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            return line.strip().rsplit(" ", 1)[-1].removeprefix("http://")
    raise RuntimeError(f"{what} did not start: {process.stderr.read() if process.stderr else ''}")


@pytest.fixture(scope="session")
def mock():
    """The mock upstream, shared by every test; counters reset before each test."""
    process = subprocess.Popen([MOCK_BIN, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        address = _read_listening(process, "switchyard-mock")
        yield Mock(f"http://{address}")
    finally:
        process.kill()
        process.wait(timeout=10)


class Mock:
    def __init__(self, url):
        self.url = url

    def base(self, scenario):
        """A provider base URL whose requests follow `scenario`."""
        return f"{self.url}/{scenario}"

    def reset(self):
        _http("POST", f"{self.url}/_reset", None)

    def stats(self):
        return _http("GET", f"{self.url}/_stats", None)[1]


def _http(method, url, body, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            return response.status, _maybe_json(text), dict(response.headers)
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        return error.code, _maybe_json(text), dict(error.headers)


def _maybe_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


class Gateway:
    """One running gateway."""

    def __init__(self, url, log=None):
        self.url = url
        self._log = log

    def logs(self):
        """What the gateway has logged so far (its stderr)."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def get(self, path, key=ADMIN_KEY):
        return _http("GET", self.url + path, None, {"authorization": f"Bearer {key}"})

    def post(self, path, body=None, key=ADMIN_KEY):
        return _http("POST", self.url + path, body, {"authorization": f"Bearer {key}"})

    def health_of(self, target):
        _, body, _ = self.get("/admin/health")
        return next((t for t in body["targets"] if t["target"] == target), None)


_REPLICAS = itertools.count()


class _Gateways:
    """The gateways one fixture starts in `directory`: stopped together, their logs then checked
    for keys."""

    def __init__(self, directory):
        self.directory = directory
        self.processes = []

    def start(self, config_yaml, args=(), env=None):
        """Starts `switchyard serve` on that config (with more `args`, and `env` added to the
        environment) and a free port."""
        path = self.directory / f"switchyard-{len(self.processes)}.yaml"
        path.write_text(config_yaml)
        env = dict(os.environ, E2E_GATEWAY_KEY=GATEWAY_KEY, E2E_ADMIN_KEY=ADMIN_KEY, **(env or {}))
        # Replicas on one host are told apart by name (the host name is the default).
        env.setdefault("SWITCHYARD_REPLICA", f"e2e-{os.getpid()}-{next(_REPLICAS)}")
        log = tempfile.TemporaryFile(mode="w+")
        process = subprocess.Popen(
            [BIN, "serve", "--config", str(path), "--listen", "127.0.0.1:0", "--log-format", "json", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
        self.processes.append((process, log))
        try:
            address = _read_listening(process, "switchyard serve")
        except RuntimeError:
            log.seek(0)
            raise RuntimeError(f"switchyard serve did not start: {log.read()}") from None
        gateway = Gateway(f"http://{address}", log)
        gateway.config_path = path
        return gateway

    def stop(self):
        for process, log in self.processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
            log.seek(0)
            logs = log.read()
            # The access log must never carry a key.
            for secret in (GATEWAY_KEY, ADMIN_KEY, "sk-upstream"):
                assert secret not in logs, f"a key leaked into the logs: {secret}"


@pytest.fixture
def gateway(mock, tmp_path):
    """A factory: `gateway(yaml)` starts `switchyard serve` on that config and a free port."""
    mock.reset()
    gateways = _Gateways(tmp_path)
    yield gateways.start
    gateways.stop()


@pytest.fixture(scope="module")
def module_gateway(mock, tmp_path_factory):
    """`gateway` for a whole module: a module that starts one gateway per config and resets
    the mock and the gateway's health between its tests itself."""
    gateways = _Gateways(tmp_path_factory.mktemp("gateways"))
    yield gateways.start
    gateways.stop()


def config(mock, providers, routes, extra=""):
    """A gateway config: `providers` maps id -> (kind, scenario, extra keys)."""
    lines = ["providers:"]
    for provider_id, (kind, scenario, more) in providers.items():
        base = mock.base(scenario)
        if kind in ("openai", "openai_compatible"):
            base += "/v1"
        lines.append(f"  {provider_id}: {{ kind: {kind}, base_url: \"{base}\"{', ' + more if more else ''} }}")
    lines.append("routes:")
    for name, body in routes.items():
        lines.append(f"  {name}: {body}")
    lines.append("gateway: { keys: [env://E2E_GATEWAY_KEY], admin_key: env://E2E_ADMIN_KEY }")
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def redis_url(tmp_path):
    """A `redis-server` of this test's own on a free port, stopped by its process id after."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as attempt:
            if attempt.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.02)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)
