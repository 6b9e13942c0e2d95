"""The gateways `bench/run compare` puts side by side: how each installs (outside the repository,
on demand), how it is configured to proxy every route to the mock, how it starts, and what
request reaches each route through it; the install and start facts of each peer are written
beside its code below. Switchyard and nginx-proxy are `benchkit.gateway`'s models, as in every
other question; the peers that only this question runs are modelled here."""

import json
import os
import shutil
import subprocess
import sys

from . import gateway, services
from .gateway import MODEL
from .scenarios import ROUTES, responses_body

HERE = os.path.dirname(os.path.abspath(__file__))


class Unavailable(Exception):
    """A gateway could not be installed or started; the message is the reason shown."""


class NotExpressible(Exception):
    """A gateway has no way to express a route (shown as n/a with the reason)."""


class Context:
    """What every gateway needs to configure and start itself: the mock plainly (`plain`) and
    behind TLS (`tls`), both `gateway.Upstream`s."""

    def __init__(self, home, run_dir, bins, repo, plain, tls):
        self.home = home
        self.run_dir = run_dir
        self.bins = bins
        self.repo = repo
        self.plain = plain
        self.tls = tls

    @property
    def ca_file(self):
        """The authority that signed the TLS mock's certificate."""
        return self.tls.ca

    def mock_base(self, scenario, tls=False):
        """The mock's OpenAI base URL for one scenario string (behind TLS when `tls`)."""
        return (self.tls if tls else self.plain).base(scenario)


def _run(argv, log, timeout, env=None, cwd=None):
    """Runs an install step, appending its output to `log`; returns an error text or None."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        merged = dict(os.environ)
        merged.update(env or {})
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=timeout, env=merged, cwd=cwd)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(argv[:3])}` timed out after {timeout}s (log: {log})"
        except OSError as error:
            return f"`{argv[0]}`: {error}"
    if done.returncode != 0:
        return f"`{' '.join(argv[:4])}` exited {done.returncode} (log: {log})"
    return None


def _last_lines(path, n=3):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " | ".join(line.strip() for line in f.read().splitlines()[-n:])
    except OSError:
        return ""


class Gateway:
    """Base: subclasses set `name` and implement install/start/request."""
    name = ""
    label = ""
    version = ""
    service = None

    def install(self, ctx, allow):
        """Makes the gateway available; raises Unavailable with the reason."""

    def start(self, ctx):
        raise NotImplementedError

    def request(self, ctx, route, body):
        """(url, body dict, headers dict) reaching `route`, or raises NotExpressible."""
        raise NotImplementedError

    @property
    def pid(self):
        return self.service.pid if self.service else None

    def stop(self):
        if self.service:
            self.service.stop()
            self.service = None

    def _ready(self, ctx, timeout):
        url, body, headers = self.request(ctx, ROUTES["ok"], {"model": "", "messages": [
            {"role": "user", "content": "ready?"}]})
        services.wait_until_answers(self.service, url, json.dumps(body), headers, timeout=timeout)


class Direct(Gateway):
    """The mock itself: the floor every gateway is measured against."""
    name = "direct"
    label = "direct (mock, no proxy)"

    def __init__(self, mock):
        self.mock = mock

    def start(self, ctx):
        self.version = "switchyard-mock (this checkout)"

    @property
    def pid(self):
        return self.mock.pid

    def stop(self):
        pass  # the mock outlives every gateway

    serves_tls = True

    def request(self, ctx, route, body):
        if route.is_fallback:
            raise NotExpressible("the mock alone has no fallback")
        body = dict(body, model=MODEL)
        if route.api == "responses":
            return f"{ctx.mock_base(route.target)}/responses", responses_body(body), {}
        return f"{ctx.mock_base(route.target, route.tls)}/chat/completions", body, {}


class Nginx(Gateway):
    """nginx as a keepalive reverse proxy: the floor cost of one proxy hop. Fallback is
    expressible with `proxy_intercept_errors` and `error_page` to a named location, but nginx
    has no health tracking per path, so every request tries the primary."""
    name = "nginx"
    label = "nginx-proxy"

    def install(self, ctx, allow):
        if shutil.which("nginx"):
            return
        if not allow:
            raise Unavailable("nginx not found (run without --no-install, as root, to apt-get it)")
        if os.geteuid() != 0:
            raise Unavailable("nginx not found and apt-get needs root")
        log = os.path.join(ctx.home, "logs", "nginx-install.log")
        error = _run(["apt-get", "install", "-y", "nginx", "wrk"], log, 900)
        if error:
            _run(["apt-get", "update"], log, 600)
            error = _run(["apt-get", "install", "-y", "nginx", "wrk"], log, 900)
        if error or not shutil.which("nginx"):
            raise Unavailable(error or "apt-get installed no nginx binary")

    def start(self, ctx):
        done = subprocess.run([gateway.nginx_binary(), "-v"], capture_output=True, text=True)
        self.version = (done.stderr or done.stdout).strip().replace("nginx version: ", "")
        fallback = []
        for route in ROUTES.values():
            if not route.is_fallback:
                continue
            timeout = f"proxy_read_timeout {route.primary_timeout:g}s;" if route.primary_timeout else ""
            fallback.append(f"""
        location = /fallback/{route.name}/v1/chat/completions {{
            rewrite ^ /{route.primary}/v1/chat/completions break;
            proxy_pass http://mock;
            {timeout}
            proxy_intercept_errors on;
            error_page 429 500 502 503 504 = @{route.name}_fallback;
        }}
        location @{route.name}_fallback {{
            rewrite ^ /{route.target}/v1/chat/completions break;
            proxy_pass http://mock;
        }}""")
        self.proxy = gateway.NginxProxy(ctx.run_dir, ctx.plain, ctx.tls, locations="".join(fallback))
        self.proxy.start()
        self.service, self.port = self.proxy.service, self.proxy.port
        self._ready(ctx, 20)

    serves_tls = True

    def request(self, ctx, route, body):
        body = dict(body, model=MODEL)
        if route.is_fallback:
            return f"http://127.0.0.1:{self.port}/fallback/{route.name}/v1/chat/completions", body, {}
        return self.proxy.endpoint(route.target, tls=route.tls)[0], body, {}


class Switchyard(Gateway):
    """This repository's gateway, built in release mode: one route per scenario, no retries on
    the fallback routes (as configured for every peer), health gate and breaker at defaults."""
    name = "switchyard"
    label = "switchyard"

    def start(self, ctx):
        binary = ctx.bins.get("switchyard")
        if not binary:
            raise Unavailable(ctx.bins.get("switchyard_error", "the release build failed"))
        self.version = _git_version(ctx.repo)
        self.gateway = gateway.Switchyard(binary, ctx.run_dir, self.name, state=self._state(ctx))
        for route in ROUTES.values():
            upstream = ctx.tls if route.tls else ctx.plain
            targets = [gateway.Target(upstream, route.target, provider=route.name)]
            spec = {}
            if route.is_fallback:
                targets.insert(0, gateway.Target(ctx.plain, route.primary, provider=f"{route.name}_primary"))
                spec["retry"] = {"max_attempts": 1}
            if route.primary_timeout:
                limit = f"{int(route.primary_timeout * 1000)}ms"
                # `total` too: `first_byte` alone does not end a non-streaming attempt whose
                # upstream never answers (see docs/BENCHMARKS.md).
                spec["timeouts"] = {"first_byte": limit, "total": limit}
            self.gateway.route(route.name, targets, **spec)
        self.gateway.start()
        self.service, self.port = self.gateway.service, self.gateway.port
        self._ready(ctx, 20)

    def _state(self, ctx):
        """The Redis URL its health is shared through, or None."""
        return None

    # The Responses API is Switchyard's (and the mock's) alone among the rows measured here.
    serves_responses = True
    serves_tls = True

    def request(self, ctx, route, body):
        body = dict(body, model=route.name)
        if route.api == "responses":
            return f"http://127.0.0.1:{self.port}/v1/responses", responses_body(body), {}
        return f"http://127.0.0.1:{self.port}/v1/chat/completions", body, {}


class SwitchyardRedis(Switchyard):
    """The same gateway and configuration with `state:` on a local redis-server (started on a
    free port, nothing saved): what sharing health through Redis costs a request."""
    name = "switchyard-redis"
    label = "switchyard + redis"

    def _state(self, ctx):
        try:
            self.redis, url = gateway.start_redis(ctx.run_dir)
        except services.StartError as e:
            raise Unavailable(str(e)) from e
        return url

    def stop(self):
        super().stop()
        if getattr(self, "redis", None):
            self.redis.stop()
            self.redis = None


class TensorZero(Gateway):
    """TensorZero's gateway from its Python wheel, started in-process by a small launcher.
    Fallback is a model's `routing` list; the hang limit is the provider's `timeouts`."""
    name = "tensorzero"
    label = "tensorzero"

    def _venv(self, ctx):
        return os.path.join(ctx.home, "tensorzero")

    def install(self, ctx, allow):
        python = os.path.join(self._venv(ctx), "bin", "python")
        if _has_module(python, "tensorzero"):
            return
        if not allow:
            raise Unavailable(f"missing from {ctx.home} and --no-install was given")
        log = os.path.join(ctx.home, "logs", "tensorzero-install.log")
        error = (_run([sys.executable, "-m", "venv", self._venv(ctx)], log, 300)
                 or _run([python, "-m", "pip", "install", "tensorzero"], log, 1200))
        if error or not _has_module(python, "tensorzero"):
            raise Unavailable(f"pip install tensorzero failed: {error or ''} {_last_lines(log)}")

    def start(self, ctx):
        python = os.path.join(self._venv(ctx), "bin", "python")
        self.version = _pip_version(python, "tensorzero")
        lines = []
        for route in ROUTES.values():
            providers = [("fallback" if route.is_fallback else "mock", route.target, None)]
            if route.is_fallback:
                providers.insert(0, ("primary", route.primary, route.primary_timeout))
            lines.append(f"[models.{route.name}]")
            lines.append(f"routing = {json.dumps([p[0] for p in providers])}")
            for provider, scenario, timeout in providers:
                lines.append(f"[models.{route.name}.providers.{provider}]")
                lines.append('type = "openai"')
                lines.append(f'api_base = "{ctx.mock_base(scenario)}/"')
                lines.append(f'model_name = "{MODEL}"')
                lines.append('api_key_location = "none"')
                if timeout:
                    ms = int(timeout * 1000)
                    lines.append(f"timeouts = {{ non_streaming = {{ total_ms = {ms} }}, "
                                 f"streaming = {{ ttft_ms = {ms} }} }}")
            lines.append("")
        path = os.path.join(ctx.run_dir, "tensorzero.toml")
        with open(path, "w") as f:
            f.write("\n".join(lines))
        launcher = os.path.join(HERE, "tensorzero_gateway.py")
        self.service = services.Service(
            "tensorzero", [python, launcher, path], os.path.join(ctx.run_dir, "tensorzero.log"),
            env={"TENSORZERO_DISABLE_PSEUDONYMOUS_USAGE_ANALYTICS": "1"})
        match = self.service.wait_for_line(r"listening on (http://\S+)", 60)
        self.base_url = match.group(1).rstrip("/")
        self._ready(ctx, 30)

    def request(self, ctx, route, body):
        return (f"{self.base_url}/chat/completions",
                dict(body, model=f"tensorzero::model_name::{route.name}"), {})


class Portkey(Gateway):
    """Portkey's open-source gateway on Node, routed by the `x-portkey-config` header; fallback
    is `strategy.mode = fallback` and the hang limit the target's `request_timeout`."""
    name = "portkey"
    label = "portkey"

    def _dir(self, ctx):
        return os.path.join(ctx.home, "portkey")

    def _entry(self, ctx):
        return os.path.join(self._dir(ctx), "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")

    def install(self, ctx, allow):
        if os.path.exists(self._entry(ctx)):
            return
        if not shutil.which("npm") or not shutil.which("node"):
            raise Unavailable("node and npm are needed (apt-get install nodejs npm)")
        if not allow:
            raise Unavailable(f"missing from {ctx.home} and --no-install was given")
        os.makedirs(self._dir(ctx), exist_ok=True)
        # Without this override every streamed request fails with 500 `TypeError: immutable`.
        with open(os.path.join(self._dir(ctx), "package.json"), "w") as f:
            json.dump({"name": "switchyard-bench-portkey", "private": True,
                       "overrides": {"@hono/node-server": "1.13.8"}}, f)
        log = os.path.join(ctx.home, "logs", "portkey-install.log")
        error = _run(["npm", "install", "--no-audit", "--no-fund", "@portkey-ai/gateway"], log, 1200,
                     cwd=self._dir(ctx))
        if error or not os.path.exists(self._entry(ctx)):
            raise Unavailable(f"npm install @portkey-ai/gateway failed: {error or ''} {_last_lines(log)}")

    def start(self, ctx):
        try:
            with open(os.path.join(self._dir(ctx), "node_modules", "@portkey-ai", "gateway",
                                   "package.json")) as f:
                self.version = json.load(f).get("version", "")
        except OSError:
            self.version = "?"
        done = subprocess.run(["node", "--version"], capture_output=True, text=True)
        self.version += f" (node {done.stdout.strip()})"
        self.port = services.free_port()
        self.service = services.Service(
            "portkey", ["node", self._entry(ctx), f"--port={self.port}", "--headless"],
            os.path.join(ctx.run_dir, "portkey.log"), cwd=self._dir(ctx))
        self._ready(ctx, 60)

    def request(self, ctx, route, body):
        def target(scenario, timeout=None):
            t = {"provider": "openai", "api_key": "x", "custom_host": ctx.mock_base(scenario)}
            if timeout:
                t["request_timeout"] = int(timeout * 1000)
            return t
        if route.is_fallback:
            config = {"strategy": {"mode": "fallback"},
                      "targets": [target(route.primary, route.primary_timeout), target(route.target)]}
        else:
            config = target(route.target)
        headers = {"x-portkey-config": json.dumps(config, separators=(",", ":"))}
        return f"http://127.0.0.1:{self.port}/v1/chat/completions", dict(body, model=MODEL), headers


class LiteLLM(Gateway):
    """LiteLLM's proxy with two workers: one model group per route, fallbacks between groups,
    no retries, the hang limit as the primary deployment's `timeout`."""
    name = "litellm"
    label = "litellm"
    KEY = "sk-switchyard-bench"

    def _venv(self, ctx):
        return os.path.join(ctx.home, "litellm")

    def install(self, ctx, allow):
        binary = os.path.join(self._venv(ctx), "bin", "litellm")
        if os.path.exists(binary):
            return
        if not allow:
            raise Unavailable(f"missing from {ctx.home} and --no-install was given")
        log = os.path.join(ctx.home, "logs", "litellm-install.log")
        python = os.path.join(self._venv(ctx), "bin", "python")
        error = (_run([sys.executable, "-m", "venv", self._venv(ctx)], log, 300)
                 or _run([python, "-m", "pip", "install", "litellm[proxy]"], log, 1800))
        if error or not os.path.exists(binary):
            raise Unavailable(f"pip install 'litellm[proxy]' failed: {error or ''} {_last_lines(log)}")

    def start(self, ctx):
        python = os.path.join(self._venv(ctx), "bin", "python")
        self.version = _pip_version(python, "litellm")
        models, fallbacks = [], []

        def deployment(name, scenario, timeout=None):
            params = {"model": f"openai/{MODEL}", "api_base": ctx.mock_base(scenario), "api_key": "x",
                      "max_retries": 0}
            if timeout:
                params["timeout"] = timeout
                params["stream_timeout"] = timeout
            return {"model_name": name, "litellm_params": params}
        for route in ROUTES.values():
            if route.is_fallback:
                models.append(deployment(route.name, route.primary, route.primary_timeout))
                models.append(deployment(f"{route.name}-fallback", route.target))
                fallbacks.append({route.name: [f"{route.name}-fallback"]})
            else:
                models.append(deployment(route.name, route.target))
        config = {"model_list": models,
                  "router_settings": {"num_retries": 0, "fallbacks": fallbacks},
                  "litellm_settings": {"num_retries": 0, "telemetry": False}}
        path = os.path.join(ctx.run_dir, "litellm.yaml")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        self.port = services.free_port()
        self.service = services.Service(
            "litellm",
            [os.path.join(self._venv(ctx), "bin", "litellm"), "--config", path, "--host", "127.0.0.1",
             "--port", str(self.port), "--num_workers", "2"],
            os.path.join(ctx.run_dir, "litellm.log"),
            env={"LITELLM_MASTER_KEY": self.KEY, "LITELLM_TELEMETRY": "False"})
        self._ready(ctx, 120)

    def request(self, ctx, route, body):
        return (f"http://127.0.0.1:{self.port}/v1/chat/completions", dict(body, model=route.name),
                {"authorization": f"Bearer {self.KEY}"})


def _has_module(python, module):
    if not os.path.exists(python):
        return False
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def _pip_version(python, package):
    done = subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version('{package}'))"],
        capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _git_version(repo):
    def git(*args):
        done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
        return done.stdout.strip()
    rev = git("rev-parse", "--short", "HEAD") or "?"
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{rev}{dirty}"


# Order of the table: the baselines, then this project, then the peers.
ORDER = ["direct", "nginx", "switchyard", "switchyard-redis", "tensorzero", "portkey", "litellm"]


def make(names, mock):
    classes = {"nginx": Nginx, "switchyard": Switchyard, "switchyard-redis": SwitchyardRedis,
               "tensorzero": TensorZero,
               "portkey": Portkey, "litellm": LiteLLM}
    out = []
    for name in ORDER:
        if name not in names:
            continue
        out.append(Direct(mock) if name == "direct" else classes[name]())
    return out


