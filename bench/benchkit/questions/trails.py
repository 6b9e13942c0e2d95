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

import subprocess
import time

from benchkit import ab, services
from benchkit.gateway import Switchyard, Target, start_redis

SUMMARY = "CPU per request with the fleet's trails written to Redis against not, and Redis memory per 1000 trails"


def arguments(p):
    ab.arguments(p, rate=2000)


def check(p, args):
    ab.check(p, args)


def redis_cli(redis_url, *args):
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    return subprocess.run(["redis-cli", "-p", port, *args], capture_output=True, text=True, check=True).stdout


def redis_memory(redis_url):
    out = redis_cli(redis_url, "info", "memory")
    return next(int(line.split(":")[1]) for line in out.splitlines() if line.startswith("used_memory:"))


def start(bins, folder):
    """The Redis both ways share."""
    return start_redis(folder)[1]


def gateway(bins, folder, mock, redis_url, label):
    """The gateway under test on the shared Redis, one route to the mock, trails on or off."""
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}", state=redis_url,
                    state_settings={"trails": label == "trails"}, env={"SWITCHYARD_REPLICA": f"bench-{label}"})
    gw.route("default", [Target(mock, "ok", provider="mock")])
    return gw


def memory_per_thousand(bins, folder, mock, redis_url):
    """Redis's used memory before and after one replica's 1000 trails, with their events."""
    redis_cli(redis_url, "flushall")
    before = redis_memory(redis_url)
    gw = gateway(bins, folder, mock, redis_url, "trails").start()
    try:
        url, model = gw.endpoint("default")
        services.send_counted(bins, url, model, 1000)
        # The writer is a batch or two behind the last answer.
        time.sleep(1)
    finally:
        gw.stop()
    return redis_memory(redis_url) - before


def run(args):
    _, memory = ab.rounds(args, ("off", "trails"), gateway, prepare=start, after=memory_per_thousand)
    print(f"Redis memory for 1000 trails (and their events): {memory / 1e6:.2f} MB")
