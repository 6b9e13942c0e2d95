"""The gateway under test, modelled once, and what it stands in front of and beside.

- `Upstream`: a `switchyard-mock` on 127.0.0.1, spoken to plainly or behind TLS (`ca`: the
  throwaway authority of `benchkit.tls` that signed its certificate). A scenario is the first
  segment of its URL path (crates/switchyard-mock/README.md).
- `Switchyard`: `switchyard serve` as every question runs it. Which binary (this tree's release
  build, or a named one from `--bin`), the configuration (one provider per target, each the mock's
  base URL for one scenario, with `ca_file` behind TLS; `state:` on Redis; `telemetry:`), the
  listen address (`--listen 127.0.0.1:0`, the port read from its banner), the environment (the
  caller's, less `OTEL_*`, so that a shell's exporter settings never reach a measurement), how it
  starts (optionally on one core, `taskset`, or under a tool such as callgrind), that it is ready
  (`GET /readyz` answers), and how it stops (its process group, by pid).
- `NginxProxy`: the peer every figure is read beside, built the same way: Debian's nginx as a
  keep-alive reverse proxy to the mock, plain at `/SCENARIO/...` and behind TLS at
  `/tls/SCENARIO/...`.

`command()`, `environment()` and `config()` start nothing, so the tests read them as they are.
"""

import json
import os
import shutil
import socket
import ssl
import time
import urllib.request
from dataclasses import dataclass, field

from . import services

# The model every target asks the mock for; long enough that a 20-chunk stream of the mock's
# answer ("mock answer from bench-model") has text in every chunk.
MODEL = "bench-model"
CHAT = "/v1/chat/completions"


@dataclass
class Upstream:
    """A mock upstream: its port, and the authority its certificate is from when behind TLS."""
    port: int
    ca: str | None = None
    service: object = field(default=None, repr=False, compare=False)

    @property
    def tls(self):
        return self.ca is not None

    @property
    def pid(self):
        return self.service.pid if self.service else None

    def base(self, scenario, suffix="/v1"):
        """The base URL a provider of `scenario` is given (`suffix` "" for Anthropic's)."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{scenario}{suffix}"

    def endpoint(self, scenario, path=CHAT):
        """Where a client reaches `scenario` on the mock itself, and the model it asks for."""
        return f"{self.base(scenario, '')}{path}", MODEL

    def _admin(self, path, method="GET"):
        context = ssl.create_default_context(cafile=self.ca) if self.tls else None
        scheme = "https" if self.tls else "http"
        request = urllib.request.Request(f"{scheme}://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return json.loads(response.read() or b"null")

    def stats(self):
        """The mock's `/_stats`: requests, connections accepted, requests per scenario."""
        return self._admin("/_stats")

    def reset(self):
        """Every scenario back at its first step (`POST /_reset`)."""
        self._admin("/_reset", "POST")


def start_mock(bins, folder, tls=None, core=None):
    """The mock on a free port of 127.0.0.1, behind TLS when `tls` holds the paths of
    `benchkit.tls.certificates`, on CPU `core` alone when one is given (`taskset`)."""
    argv = [bins["switchyard-mock"], "--listen", "127.0.0.1:0"]
    if tls:
        argv += ["--tls-cert", tls["server.crt"], "--tls-key", tls["server.key"]]
    name = "mock-tls" if tls else "mock"
    service = services.Service(name, pinned(argv, core), os.path.join(folder, f"{name}.log"))
    port = int(service.wait_for_line(r"listening on 127\.0\.0\.1:(\d+)", 20).group(1))
    return Upstream(port, tls["ca.crt"] if tls else None, service)


@dataclass(frozen=True)
class Target:
    """One target of a route: the mock's `scenario` on `upstream`, through a provider of `kind`
    (`anthropic` providers take the base URL without `/v1`). `provider` names it in the
    configuration (default: numbered)."""
    upstream: Upstream
    scenario: str
    kind: str = "openai_compatible"
    provider: str | None = None

    def settings(self):
        suffix = "" if self.kind == "anthropic" else "/v1"
        provider = {"kind": self.kind, "base_url": self.upstream.base(self.scenario, suffix)}
        if self.upstream.tls:
            provider["ca_file"] = self.upstream.ca
        return provider


def pinned(argv, core):
    """`argv` run on CPU `core` alone (`taskset`), or as it is when `core` is None."""
    return argv if core is None else ["taskset", "-c", str(core), *argv]


def wait_until(check, what, service, timeout):
    """Polls `check()` until it is true; a `StartError` naming `what` when `service` exits or
    `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            raise services.StartError(f"{service.name} exited with {service.proc.returncode}: {service.log_tail()}")
        if check():
            return
        time.sleep(0.1)
    raise services.StartError(f"{service.name}: {what} within {timeout:.0f} s: {service.log_tail()}")


class UnderTest:
    """What the gateway under test and its peers share: a name, an optional CPU (`core`) and
    tool (`wrapper`, such as `valgrind --tool=callgrind ...`) it runs on and under, its started
    service and port."""

    def __init__(self, name, folder, core=None, wrapper=()):
        self.name = name
        self.folder = folder
        self.core = core
        self.wrapper = list(wrapper)
        self.service = None
        self.port = None

    def launch(self, argv):
        """`argv` under the wrapper, on the core."""
        return pinned([*self.wrapper, *argv], self.core)

    @property
    def pid(self):
        return self.service.pid if self.service else None

    @property
    def log(self):
        return os.path.join(self.folder, f"{self.name}.log")

    def alive(self):
        return bool(self.service) and self.service.alive()

    def stop(self):
        """Stops its process group (by pid); a no-op when it is not running."""
        if self.service:
            self.service.stop()
            self.service = None


class Switchyard(UnderTest):
    """`switchyard serve` from `binary` with the routes given by `route()`; `state` (a Redis
    URL) shares its health through Redis, `telemetry` is its `telemetry:` section, `gateway` its
    `gateway:` section, `env` adds to its environment."""

    def __init__(self, binary, folder, name="switchyard", *, core=None, wrapper=(), env=None, state=None,
                 telemetry=None, state_settings=None, gateway=None):
        super().__init__(name, folder, core, wrapper)
        self.binary = binary
        self.env = dict(env or {})
        self.state = state
        self.state_settings = dict(state_settings or {})
        self.telemetry = telemetry
        self.gateway = gateway
        self.providers = {}
        self.routes = {}

    def route(self, name, targets, **spec):
        """Adds route `name` over `targets` (in order: the first is the primary), with the
        route's other settings (`retry`, `timeouts`, `hedge`, ...) as `spec`."""
        names = []
        for target in targets:
            provider = target.provider or f"p{len(self.providers)}"
            if provider in self.providers:
                raise ValueError(f"provider {provider} is configured twice")
            self.providers[provider] = target.settings()
            names.append(f"{provider}:{MODEL}")
        self.routes[name] = dict(spec, targets=names)
        return name

    def config(self):
        """The configuration it serves (JSON is YAML)."""
        config = {"providers": self.providers, "routes": self.routes}
        if self.state:
            config["state"] = {"redis": self.state, "prefix": "bench", **self.state_settings}
        if self.telemetry:
            config["telemetry"] = self.telemetry
        if self.gateway:
            config["gateway"] = self.gateway
        return config

    @property
    def config_path(self):
        return os.path.join(self.folder, f"{self.name}.yaml")

    def command(self):
        return self.launch([self.binary, "serve", "--config", self.config_path, "--listen", "127.0.0.1:0"])

    def environment(self, base=None):
        """The environment it runs with: `base` (default this process's) less `OTEL_*`, plus `env`."""
        base = os.environ if base is None else base
        env = {k: v for k, v in base.items() if not k.startswith("OTEL_")}
        env.update(self.env)
        return env

    def start(self, timeout=30):
        """Writes the configuration, starts the gateway and waits until `/readyz` answers."""
        if not self.routes:
            raise ValueError(f"{self.name} has no route")
        with open(self.config_path, "w") as f:
            json.dump(self.config(), f, indent=1)
        self.service = services.Service(self.name, self.command(), self.log, environ=self.environment())
        match = self.service.wait_for_line(r"listening on http://127\.0\.0\.1:(\d+)", timeout)
        self.port = int(match.group(1))
        ready = f"http://127.0.0.1:{self.port}/readyz"
        wait_until(lambda: services.get(ready)[0] == 200, "GET /readyz did not answer 200", self.service, timeout)
        return self

    def endpoint(self, route, path=CHAT):
        """Where a client reaches `route`, and the model it asks for (the route's name)."""
        return f"http://127.0.0.1:{self.port}{path}", route


def nginx_binary():
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(path):
        raise services.StartError("nginx is not installed: apt-get install -y nginx")
    return path


class NginxProxy(UnderTest):
    """nginx as a keep-alive reverse proxy in front of `plain` (at `/SCENARIO/...`) and `tls`
    (at `/tls/SCENARIO/...`, certificate verified, sessions reused): the floor cost of one
    proxy hop. `one_process` for the tools that watch the process that serves (callgrind,
    perf): no master, one worker; else a worker per core. `locations` go into its server block
    as they are (the failover drills of `compare`)."""

    def __init__(self, folder, plain, tls=None, name="nginx", *, one_process=False, core=None, wrapper=(),
                 locations=""):
        super().__init__(name, folder, core, wrapper)
        self.plain = plain
        self.tls = tls
        self.one_process = one_process
        self.locations = locations
        self.prefix = os.path.join(folder, "nginx")
        self.conf_path = os.path.join(self.prefix, "nginx.conf")

    def http(self, port):
        """The directives of its `http` block when it listens on `port`."""
        keep = "keepalive 512; keepalive_requests 1000000; keepalive_timeout 600s;"
        upstreams = f"    upstream mock {{ server 127.0.0.1:{self.plain.port}; {keep} }}\n"
        tls = ""
        if self.tls:
            upstreams += f"    upstream mock_tls {{ server 127.0.0.1:{self.tls.port}; {keep} }}\n"
            tls = f"""
        location /tls/ {{
            proxy_pass https://mock_tls/;
            proxy_ssl_trusted_certificate {self.tls.ca};
            proxy_ssl_verify on;
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;
        }}"""
        return f"""
    # Keep a 1 MB body in memory, as the gateways do.
    client_max_body_size 4m;
    client_body_buffer_size 2m;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    # keepalive_timeout 600s upstream: idle connections outlive the other rows of a round.
{upstreams}    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        # Forward stream chunks as they arrive, as an LLM gateway must.
        proxy_buffering off;
        location / {{ proxy_pass http://mock; }}{tls}
        {self.locations}
    }}"""

    def command(self, nginx="nginx"):
        return self.launch([nginx, "-p", self.prefix, "-c", self.conf_path])

    def start(self, timeout=20):
        """Writes its configuration, starts it and waits until its port accepts connections."""
        nginx = nginx_binary()
        self.port = services.free_port()
        # Written where `prefix` and `conf_path` say: the folder's nginx/.
        services.nginx_conf(self.folder, self.http(self.port), self.one_process)
        # Its workers may run as another user when started as root: they write bodies there.
        os.chmod(os.path.join(self.prefix, "tmp"), 0o777)
        self.service = services.Service(self.name, self.command(nginx), self.log)
        wait_until(lambda: accepts(self.port), f"port {self.port} did not accept connections", self.service, timeout)
        return self

    def endpoint(self, scenario, tls=False, path=CHAT):
        """Where a client reaches `scenario` through it (behind TLS upstream when `tls`)."""
        prefix = "/tls" if tls else ""
        return f"http://127.0.0.1:{self.port}{prefix}/{scenario}{path}", MODEL


def accepts(port):
    """Whether 127.0.0.1:`port` accepts a connection now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def start_redis(folder):
    """A local redis-server on a free port, nothing saved: (its service, its URL)."""
    if not shutil.which("redis-server"):
        raise services.StartError("redis-server is not installed (Debian package redis-server)")
    port = services.free_port()
    service = services.Service("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no"], os.path.join(folder, "redis.log"))
    service.wait_for_line(r"Ready to accept connections", 10)
    return service, f"redis://127.0.0.1:{port}/0"
