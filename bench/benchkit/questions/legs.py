"""Where a stream's first token spends its time inside a gateway, leg by leg, for Switchyard
beside nginx-proxy, with caches warm and cold.

`bench/run instructions` counts a request's instructions; this times them where they run. Each
gateway is watched by `perf record` on three system-call tracepoints (a few microseconds each,
where `strace` adds tens), one stream at a time on one connection, and each stream's first
token is cut into legs:

- request read → upstream write: the client's request read (`recvfrom`) to the upstream
  request written (`writev`): parsing, routing, the upstream call set up;
- upstream write → answer read: the upstream's time, and the wake-up when its answer arrives;
- answer read → client write: the answer's head and first events read to the head and first
  content written to the client.

Two loads: **warm**, streams of 2 chunks sent back to back (the request path's code and data
stay in the caches); **cold**, streams of 20 chunks 5 ms apart (as `bench/run hop` streams:
between two requests the worker sleeps through 100 ms in which the mock, the driver and the
kernel use the cores). Figures are medians over the streams of the run.

    bench/run legs                  # this tree's release build, about a minute
    bench/run legs --quick          # 1 s per load: a smoke run
    bench/run legs --bin before=/tmp/switchyard-old --bin after=target/release/switchyard
    bench/run legs --duration 10s

Needs `perf` (apt-get install -y linux-perf, as root) and `nginx`. Everything listens on
127.0.0.1 and stops by itself.
"""

import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import NginxProxy, Switchyard, Target, start_mock

SUMMARY = "a stream's first token cut into legs at system calls (perf), warm and cold, beside nginx-proxy"

LOADS = {"warm": "ok~chunks=2", "cold": "ok~chunks=20~gap=5ms"}
EVENTS = "syscalls:sys_enter_recvfrom,syscalls:sys_enter_writev,syscalls:sys_exit_epoll_wait"
LEGS = ["request read → upstream write", "upstream write → answer read", "answer read → client write"]


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 s per load unless --duration is given (a smoke run)")
    p.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                   help="a switchyard binary to time, named (repeatable; default: this tree's release build)")
    p.add_argument("--duration", help="how long each gateway is loaded per load (default 4s; --quick 1s)")


def check(p, args):
    args.duration = args.duration or ("1s" if args.quick else "4s")
    args.binaries = services.named_binaries(p, args.bin, ["nginx", "mock", "direct"])


def drive(bins, url, model, duration):
    """Streams on one connection to `url` for `duration`; the driver's JSON report."""
    argv = [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model), "--stream", "--connections", "1",
            "--duration", duration, "--timeout", "30s"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    if not report.get("ok") or report.get("error_count"):
        raise SystemExit(f"streams to {url} failed: {done.stderr.strip()[-400:]}")
    return report


def legs_of(script):
    """Per stream, the three legs in microseconds, from `perf script` lines of one process on
    one client connection: the client's socket is the one written most, the upstream's the
    other one written."""
    events = []
    for line in script.splitlines():
        m = re.match(r"\s*\d+\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if m:
            fd = re.search(r"fd: (0x[0-9a-f]+)", m.group(3))
            events.append((float(m.group(1)) * 1e6, m.group(2).split(":")[-1], int(fd.group(1), 16) if fd else None))
    writes = collections.Counter(fd for _, name, fd in events if name == "sys_enter_writev")
    if len(writes) < 2:
        raise SystemExit("the trace holds no upstream writes: was the gateway traced while it served?")
    client = writes.most_common(1)[0][0]
    legs, read_at, stage, mark = [], None, 0, None
    for at, name, fd in events:
        if name == "sys_enter_recvfrom" and fd == client:
            read_at = at
        elif name == "sys_enter_writev" and fd != client and read_at is not None:
            legs.append([at - read_at])
            stage, mark = 1, at
        elif name == "sys_enter_recvfrom" and fd != client and stage == 1:
            legs[-1].append(at - mark)
            stage, mark = 2, at
        elif name == "sys_enter_writev" and fd == client and stage == 2:
            legs[-1].append(at - mark)
            stage = 0
    return [leg for leg in legs if len(leg) == 3]


def traced(bins, folder, gateway, load, duration):
    """The legs' medians and the driver's TTFT of `gateway` under `load`."""
    url, model = gateway.endpoint(LOADS[load])
    drive(bins, url, model, "1s")  # warm-up: pooled connections open, code paged in
    data = os.path.join(folder, f"{gateway.name}-{load}.data")
    perf = subprocess.Popen(["perf", "record", "-q", "-e", EVENTS, "-p", str(gateway.pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        report = drive(bins, url, model, duration)
    finally:
        perf.send_signal(2)
        perf.wait(timeout=60)
    script = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,event,trace"],
                            capture_output=True, text=True, check=True).stdout
    legs = legs_of(script)
    if not legs:
        raise SystemExit(f"{gateway.name}-{load}: no stream's legs were found in the trace")
    medians = [statistics.median(leg[i] for leg in legs) for i in range(3)]
    return {"streams": len(legs), "legs": medians, "ttft_ms": report.get("ttft_ms", {}).get("p50")}


def gateways(folder, mock, binaries):
    """nginx-proxy (one process: perf watches the process that serves) and each build, with a
    route per load named by its scenario; not yet started."""
    out = [NginxProxy(folder, mock, one_process=True)]
    for name, path in binaries.items():
        gateway = Switchyard(path, folder, name)
        for scenario in LOADS.values():
            gateway.route(scenario, [Target(mock, scenario)])
        out.append(gateway)
    return out


def run(args):
    services.install_signal_handlers()
    services.need("perf", "linux-perf")
    services.need("nginx", "nginx")
    bins = services.build_release()
    binaries = args.binaries or {"switchyard": bins["switchyard"]}
    folder = tempfile.mkdtemp(prefix="switchyard-legs-")
    results = {}
    try:
        mock = start_mock(bins, folder)
        for gateway in gateways(folder, mock, binaries):
            gateway.start(timeout=60)
            try:
                url, model = gateway.endpoint(LOADS["warm"])
                services.wait_until_answers(gateway.service, url, services.chat_body(model), timeout=60)
                for load in LOADS:
                    results[(gateway.name, load)] = traced(bins, folder, gateway, load, args.duration)
                    print(f"{gateway.name:<12} {load:<5} {results[(gateway.name, load)]}", flush=True)
            finally:
                gateway.stop()
    finally:
        services.stop_all()
    print()
    print("| load | gateway | streams | TTFT p50 | " + " | ".join(LEGS) + " |")
    print("|---|---|---|---|" + "---|" * len(LEGS))
    for load in LOADS:
        for name in ["nginx", *binaries]:
            r = results[(name, load)]
            legs = " | ".join(f"{leg:.0f} µs" for leg in r["legs"])
            print(f"| {load} | {name} | {r['streams']} | {r['ttft_ms']:.3f} ms | {legs} |")
    print("\nMedians per stream, one connection; legs from system-call tracepoints (perf).")
    shutil.rmtree(folder, ignore_errors=True)
