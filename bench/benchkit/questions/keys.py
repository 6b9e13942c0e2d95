"""The gateway's CPU per request for a client key with limits, routes and a budget against a
bare key, through the real `switchyard serve` on loopback.

Runs interleaved rounds: a gateway whose one key is bare (`gateway.keys: [KEY]`), then one
whose key has `routes`, `requests_per_minute`, `tokens_per_minute`, `max_concurrent` and a
`budget` (all far above the load, so every request is admitted and charged), each loaded by the
bench driver at 32 connections at a fixed rate (10,000 requests/s by default: the same work
both ways), sending the key as a bearer token. The driver reports the gateway process's CPU
seconds, every thread included, and the answers. Prints one line per round and the medians.

    bench/run keys                     # 3 rounds of 8 s each way at 10,000 requests/s
    bench/run keys --quick             # 1 round of 3 s each way: a smoke run
    bench/run keys --rounds 5 --duration 10s --rate 0   # closed loop instead

Release binaries are built first. Everything listens on 127.0.0.1 and stops by itself.
"""

import json
import statistics
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import MODEL, Switchyard, Target, start_mock

SUMMARY = "CPU per request of a client key with limits, routes and a budget against a bare key"

KEY = "bench-client-key-0123456789"


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 round of 3 s each way unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--duration", help="load each way per round (default 8s; --quick 3s)")
    p.add_argument("--rate", type=int, default=10000,
                   help="open loop at this many requests/s, the same load both ways (0: closed loop, as fast as it goes)")


def check(p, args):
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    args.duration = args.duration or ("3s" if args.quick else "8s")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")
    if args.rate < 0:
        p.error("--rate must be 0 (closed loop) or more")


def gateway(binary, folder, mock, limited):
    """The gateway under test, one route to the mock, its one key bare or `limited`."""
    key = KEY
    if limited:
        key = {"name": "bench", "key": KEY, "routes": ["default"],
               "limits": {"requests_per_minute": 100_000_000, "tokens_per_minute": 10_000_000_000,
                          "max_concurrent": 10_000},
               "budget": {"usd": 1_000_000_000, "per": "month"}}
    gw = Switchyard(binary, folder, f"gateway-{'limited' if limited else 'bare'}", gateway={"keys": [key]})
    gw.route("default", [Target(mock, "ok", provider="mock")])
    # Priced both ways, so that the limited key's budget is charged each answer's cost.
    gw.providers["mock"]["prices"] = {MODEL: {"input": 1.0, "output": 2.0}}
    return gw


def one_round(bins, args, mock, limited, folder):
    gw = gateway(bins["switchyard"], folder, mock, limited).start()
    try:
        url, model = gw.endpoint("default")
        result = subprocess.run(
            [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model),
             "--header", f"Authorization: Bearer {KEY}",
             "--duration", args.duration, "--warmup", "1s", "--connections", "32", "--pid", str(gw.pid),
             "--label", "limited" if limited else "bare"] + (["--rate", str(args.rate)] if args.rate else []),
            capture_output=True, text=True, timeout=600, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        gw.stop()


def run(args):
    services.install_signal_handlers()
    bins = services.build_release()
    figures = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        try:
            mock = start_mock(bins, folder)
            for _ in range(args.rounds):
                for limited in (False, True):
                    report = one_round(bins, args, mock, limited, folder)
                    if report["error_count"]:
                        raise SystemExit(f"the load saw errors: {report['errors']}")
                    per = report["process"]["cpu_us_per_request"]
                    figures[limited].append(per)
                    print(f"{'limited' if limited else 'bare':>7}: {report['ok']} answers, {report['throughput']:.0f}/s, "
                          f"{per:.1f} µs CPU per request, p99 {report['latency_ms']['p99']:.2f} ms", flush=True)
        finally:
            services.stop_all()
    bare, limited = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"medians: bare {bare:.1f} µs, limited {limited:.1f} µs: {100 * (limited / bare - 1):+.1f}% CPU per request")
