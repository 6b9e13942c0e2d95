"""Processes the benchmark starts: each in its own process group, so that stopping it also
stops its workers (nginx, LiteLLM's uvicorn workers, Node), and all of them stopped on exit,
Ctrl-C or failure."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

_RUNNING = []
# The checkout: bench/benchkit/services.py is two folders below it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Service:
    """One started process group with its log file."""

    def __init__(self, name, argv, log_path, env=None, cwd=None, environ=None):
        """`env` adds to this process's environment; `environ`, when given, is the whole of it."""
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "wb")
        merged = dict(os.environ if environ is None else environ)
        merged.update(env or {})
        # A new session gives the service its own process group (and no terminal), so a
        # Ctrl-C meant for the benchmark reaches it only through stop().
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=merged, cwd=cwd, start_new_session=True)
        _RUNNING.append(self)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines=15):
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_line(self, pattern, timeout):
        """Waits until the log matches `pattern`; returns the match or raises."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            match = regex.search(self.log_text())
            if match:
                return match
            if not self.alive():
                raise StartError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            time.sleep(0.1)
        raise StartError(f"{self.name} did not print /{pattern}/ within {timeout:.0f}s: {self.log_tail()}")

    def stop(self, grace=5.0):
        if self in _RUNNING:
            _RUNNING.remove(self)
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # The leader may have exited while its workers live on: kill what is left.
        _signal_group(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class StartError(Exception):
    """A service did not come up; the message says why, with the end of its log."""


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all():
    """Stops every service still running, newest first."""
    for service in reversed(list(_RUNNING)):
        try:
            service.stop(grace=3.0)
        except Exception:  # noqa: BLE001 - cleanup must go on for the others
            pass


def install_signal_handlers():
    """Turns SIGTERM and SIGHUP into SystemExit so the `finally` that stops services runs."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def post_json(url, body, headers=None, timeout=5.0):
    """One POST; returns (status, body text). Never raises for HTTP or connection errors."""
    data = body if isinstance(body, bytes) else body.encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("content-type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as error:
        return 0, str(error)


def get(url, timeout=5.0):
    """One GET; returns (status, body text). Never raises for HTTP or connection errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as error:
        return 0, str(error)


def wait_until_answers(service, url, body, headers=None, timeout=60.0, expect="mock answer"):
    """Polls with a real chat request until it succeeds: a port that accepts connections is
    not yet a gateway that answers (LiteLLM loads its router after binding)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not service.alive():
            raise StartError(f"{service.name} exited with {service.proc.returncode}: {service.log_tail()}")
        status, text = post_json(url, body, headers, timeout=5.0)
        if status == 200 and expect in text:
            return
        last = f"{status} {text[:300]}"
        time.sleep(0.5)
    raise StartError(f"{service.name} did not answer within {timeout:.0f}s (last: {last}): {service.log_tail()}")


SETTLE_LIMIT = 30.0


def cpu_seconds(pgid):
    """CPU seconds used so far by the processes of group `pgid` (a service and its children)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # After the command name (which may hold spaces): state, ppid, pgrp, ..., utime, stime.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(service, idle_share=0.1, interval=0.5, limit=SETTLE_LIMIT):
    """Waits until `service` uses under `idle_share` of a core over `interval`, at most `limit`
    seconds; returns whether it did."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(service.pid)
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = cpu_seconds(service.pid)
        if now - last < idle_share * interval:
            return True
        last = now
    return False


def free_port():
    """A port the kernel considers free right now on 127.0.0.1."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(tool, package):
    """The path of `tool`, or an exit naming the Debian `package` that has it."""
    path = shutil.which(tool) or (f"/usr/sbin/{tool}" if os.path.exists(f"/usr/sbin/{tool}") else None)
    if not path:
        raise SystemExit(f"{tool} is not installed: apt-get install -y {package}")
    return path


def layout_env():
    """The environment of a benchmark's release build: the request path laid out
    (`SWITCHYARD_LAYOUT=on`, opt-in for other builds), unless the caller said otherwise."""
    return dict(os.environ, SWITCHYARD_LAYOUT=os.environ.get("SWITCHYARD_LAYOUT", "on"))


def build_release(repo=REPO):
    """Release builds of the gateway, the mock and the load driver in `repo`; their paths by
    binary name."""
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "switchyard-gateway", "-p", "switchyard-mock",
                    "-p", "switchyard-bench"], cwd=repo, check=True, env=layout_env())
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target"))
    return {name: os.path.join(target, "release", name) for name in ("switchyard", "switchyard-mock", "switchyard-bench")}


def seconds(text):
    """The seconds of a duration as the driver reads it (`500ms`, `5s`, `2m`, `5`), or None."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s|m)?", text or "")
    if not match:
        return None
    return float(match.group(1)) * {"us": 1e-6, "ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]


def named_binaries(parser, items, reserved):
    """`--bin NAME=PATH` items as {NAME: absolute PATH}, in order; a bad item is `parser`'s
    error. A name heads a gateway's rows and names its files and its entries in the tables of
    ports and processes, so it is a plain word (letters, digits, `-`, `_`), given once, and none
    of `reserved` (the names of what else the benchmark starts)."""
    binaries = {}
    for item in items:
        name, sep, path = item.partition("=")
        if (not sep or not re.fullmatch(r"[A-Za-z0-9_-]+", name) or name in reserved or name in binaries
                or not os.path.isfile(path)):
            parser.error(f"--bin {item!r}: expected NAME=PATH of an existing file, NAME new, of letters, digits, "
                         f"'-' and '_', and not one of {', '.join(reserved)}")
        binaries[name] = os.path.abspath(path)
    return binaries


def nginx_conf(folder, http, one_process=False):
    """Writes an nginx configuration under `folder`/nginx: in the foreground, its pid, logs and
    temporary files in that folder, no access log, and `http` (upstreams, servers and other
    directives) inside its `http` block. One process where a tool watches the process that
    serves (`one_process`: no master, one worker), else a worker per core. (Its prefix, for
    `nginx -p`, and the file's path.)"""
    prefix = os.path.join(folder, "nginx")
    for sub in ("", "tmp", "logs"):
        os.makedirs(os.path.join(prefix, sub), exist_ok=True)
    processes = "master_process off;" if one_process else "worker_processes auto;"
    conf = f"""
daemon off;
{processes}
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections {1024 if one_process else 8192}; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
{http}
}}
"""
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return prefix, path


def chat_body(model):
    """The chat completion the one-connection benchmarks send: one short user message."""
    return json.dumps({"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Hello!"}]})


def send_counted(bins, url, model, count, args=()):
    """Sends `count` requests of `model` to `url`, one at a time on one connection, with the
    driver's flags `args` (`--stream`); every one must answer."""
    argv = [bins["switchyard-bench"], "--url", url, "--body", chat_body(model), "--connections", "1",
            "--duration", "10m", "--max-requests", str(count), "--timeout", "30s", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    if report.get("ok") != count or report.get("error_count"):
        raise SystemExit(f"{model} against {url}: not every request answered: {done.stderr.strip()[-400:]}")
