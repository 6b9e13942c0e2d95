"""What hedging does to a slow tail, through the real `switchyard serve`.

The primary target is the mock with a heavy tail: 24 answers in 50 ms, then one in 2 s, over
and over (4% of requests). The backup answers in 50 ms. The same open-loop load (200 requests/s,
64 connections) goes through a route without hedging and through one with
`hedge: { after: p95, min_after: 60ms, max_share: 0.1 }`, in interleaved rounds. (The default
`min_after` of 300 ms suits answers that take seconds; this mock's healthy answers take 50 ms.)
Prints the latency percentiles, the gateway's CPU per request and how many calls reached the
upstream per request (the hedges' extra load). The target: with hedging, p99 within three times
the healthy p50, for at most 10% extra upstream requests.

    bench/run hedging                       # 2 rounds of 20 s each way
    bench/run hedging --quick               # 1 round of 6 s each way: a smoke run
    bench/run hedging --rounds 3 --duration 30s --min-after 300ms

Release binaries are built first. Everything listens on 127.0.0.1 and stops by itself.
"""

import json
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import Switchyard, Target, start_mock

SUMMARY = "what hedging does to a slow tail: p99 and upstream calls per request, hedged and not"

TAIL = ",".join(["ok~latency=50ms"] * 24 + ["ok~latency=2s", "loop"])


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 round of 6 s each way unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 2; --quick 1)")
    p.add_argument("--duration", help="load each way per round (default 20s; --quick 6s)")
    p.add_argument("--min-after", default="60ms", help="the hedge's floor (default 60ms)")


def check(p, args):
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    args.duration = args.duration or ("6s" if args.quick else "20s")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")


def gateway(binary, folder, mock, hedged, min_after):
    """The gateway under test with the tail first and the steady backup second; hedged or not."""
    name = "hedged" if hedged else "plain"
    spec = {"retry": {"max_attempts": 1}}
    if hedged:
        spec["hedge"] = {"after": "p95", "min_after": min_after, "max_share": 0.1}
    gw = Switchyard(binary, folder, f"gateway-{name}")
    gw.route("default", [Target(mock, TAIL, provider="tail"), Target(mock, "ok~latency=50ms", provider="steady")],
             **spec)
    return gw


def total_calls(stats):
    """Requests the mock answered, whatever its stats call them."""
    for key in ("requests", "total", "calls"):
        if isinstance(stats.get(key), int):
            return stats[key]
    return sum(v for v in stats.values() if isinstance(v, int))


def one_round(bins, args, mock, hedged, folder):
    mock.reset()
    gw = gateway(bins["switchyard"], folder, mock, hedged, args.min_after).start()
    try:
        url, model = gw.endpoint("default")
        result = subprocess.run(
            [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model),
             "--duration", args.duration, "--warmup", "2s", "--connections", "64", "--rate", "200",
             "--pid", str(gw.pid), "--label", "hedged" if hedged else "plain"],
            capture_output=True, text=True, timeout=900, check=True)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        stats = mock.stats()
    finally:
        gw.stop()
    return report, stats


def run(args):
    services.install_signal_handlers()
    bins = services.build_release()
    with tempfile.TemporaryDirectory() as folder:
        try:
            mock = start_mock(bins, folder)
            for _ in range(args.rounds):
                for hedged in (False, True):
                    report, stats = one_round(bins, args, mock, hedged, folder)
                    if report["error_count"]:
                        raise SystemExit(f"the load saw errors: {report['errors']}")
                    latency = report["latency_ms"]
                    answered = report["ok"] + report.get("warmup_requests", 0)
                    calls = total_calls(stats)
                    print(f"{'hedged' if hedged else 'plain':>6}: {report['ok']} answers; latency p50 {latency['p50']:.1f} ms, "
                          f"p90 {latency['p90']:.1f}, p99 {latency['p99']:.1f}, max {latency['max']:.1f}; "
                          f"{report['process']['cpu_us_per_request']:.1f} µs CPU per request; "
                          f"{calls / max(answered, 1):.3f} upstream calls per request", flush=True)
        finally:
            services.stop_all()
