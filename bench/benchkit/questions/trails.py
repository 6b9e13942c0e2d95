"""The gateway's CPU per request with the fleet's trails on (`state.trails: true`, the default:
each finished request's trail and its `request_finished` event written to Redis by a background
task) against off, both with shared state on a local Redis, through the real `switchyard serve`
on loopback; and the Redis memory a thousand trails take.

Starts the mock upstream and a Redis, then runs interleaved rounds: a gateway with trails off,
then one with trails on, each loaded by the bench driver with the same chat at 32 connections at
a fixed rate (2,000 requests/s by default: the same work both ways). The driver reports the
gateway process's CPU seconds. Prints one line per round, the medians, and the Redis memory
used per thousand trails kept (`gateway.recent_requests` 1000). The issue's target is under 5%
more CPU per request.

    bench/run trails                    # 3 rounds of 8 s each way at 2,000 requests/s
    bench/run trails --quick            # 1 round of 3 s each way: a smoke run

Release binaries are built first. Everything listens on 127.0.0.1 and stops by itself.
"""

import json
import statistics
import subprocess
import tempfile
import time

from benchkit import services
from benchkit.gateway import Switchyard, Target, start_mock, start_redis

SUMMARY = "CPU per request with the fleet's trails written to Redis against not, and Redis memory per 1000 trails"


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 round of 3 s each way unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--duration", help="load each way per round (default 8s; --quick 3s)")
    p.add_argument("--rate", type=int, default=2000,
                   help="open loop at this many requests/s, the same load both ways (0: closed loop)")


def check(p, args):
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    args.duration = args.duration or ("3s" if args.quick else "8s")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")
    if args.rate < 0:
        p.error("--rate must be 0 (closed loop) or more")


def redis_memory(redis_url):
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    out = subprocess.run(["redis-cli", "-p", port, "info", "memory"], capture_output=True, text=True, check=True).stdout
    return next(int(line.split(":")[1]) for line in out.splitlines() if line.startswith("used_memory:"))


def flush(redis_url):
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    subprocess.run(["redis-cli", "-p", port, "flushall"], capture_output=True, check=True)


def one_round(bins, args, mock, redis_url, trails, folder):
    label = "trails" if trails else "off"
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}", state=redis_url,
                    state_settings={"trails": trails}, env={"SWITCHYARD_REPLICA": f"bench-{label}"})
    gw.route("default", [Target(mock, "ok", provider="mock")])
    gw.start()
    try:
        url, model = gw.endpoint("default")
        result = subprocess.run(
            [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model),
             "--duration", args.duration, "--warmup", "1s", "--connections", "32", "--pid", str(gw.pid),
             "--label", label] + (["--rate", str(args.rate)] if args.rate else []),
            capture_output=True, text=True, timeout=600, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        gw.stop()


def memory_per_thousand(bins, mock, redis_url, folder):
    """Redis's used memory before and after one replica's 1000 trails, with their events."""
    flush(redis_url)
    before = redis_memory(redis_url)
    gw = Switchyard(bins["switchyard"], folder, "gateway-memory", state=redis_url,
                    env={"SWITCHYARD_REPLICA": "bench-memory"})
    gw.route("default", [Target(mock, "ok", provider="mock")])
    gw.start()
    try:
        url, model = gw.endpoint("default")
        services.send_counted(bins, url, model, 1000)
        # The writer is a batch or two behind the last answer.
        time.sleep(1)
    finally:
        gw.stop()
    return redis_memory(redis_url) - before


def run(args):
    services.install_signal_handlers()
    bins = services.build_release()
    figures = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        try:
            mock = start_mock(bins, folder)
            _, redis_url = start_redis(folder)
            for _ in range(args.rounds):
                for trails in (False, True):
                    report = one_round(bins, args, mock, redis_url, trails, folder)
                    if report["error_count"]:
                        raise SystemExit(f"the load saw errors: {report['errors']}")
                    per = report["process"]["cpu_us_per_request"]
                    figures[trails].append(per)
                    print(f"{'trails' if trails else 'off':>6}: {report['ok']} answers, "
                          f"{report['throughput']:.0f}/s, {per:.1f} µs CPU per request, "
                          f"p99 {report['latency_ms']['p99']:.2f} ms", flush=True)
            memory = memory_per_thousand(bins, mock, redis_url, folder)
        finally:
            services.stop_all()
    off, on = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"medians: off {off:.1f} µs, trails {on:.1f} µs: {100 * (on / off - 1):+.1f}% CPU per request")
    print(f"Redis memory for 1000 trails (and their events): {memory / 1e6:.2f} MB")
