"""The gateway's CPU per non-streamed request when it is sent upstream as a stream and put back
together (`stream_upstream: true`, the default) against asked for whole (`false`), through the
real `switchyard serve` on loopback.

Starts the mock upstream, then runs interleaved rounds: a gateway whose route has
`stream_upstream: false`, then one with `true`, each loaded by the bench driver with the same
non-streamed chat at 32 connections at a fixed rate (5,000 requests/s by default: the same work
both ways). The mock streams its answer in four pieces when asked to stream, and answers whole
otherwise. The driver reports the gateway process's CPU seconds and the answers. Prints one line
per round and the medians; the issue's target is under 5% more CPU per request.

    bench/run upstream                    # 3 rounds of 8 s each way at 5,000 requests/s
    bench/run upstream --quick            # 1 round of 3 s each way: a smoke run

Release binaries are built first. Everything listens on 127.0.0.1 and stops by itself.
"""

import json
import statistics
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import Switchyard, Target, start_mock

SUMMARY = "CPU per non-streamed request streamed upstream and put back together against asked whole"


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 round of 3 s each way unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--duration", help="load each way per round (default 8s; --quick 3s)")
    p.add_argument("--rate", type=int, default=5000,
                   help="open loop at this many requests/s, the same load both ways (0: closed loop)")


def check(p, args):
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    args.duration = args.duration or ("3s" if args.quick else "8s")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")
    if args.rate < 0:
        p.error("--rate must be 0 (closed loop) or more")


def one_round(bins, args, mock, streamed, folder):
    label = "streamed" if streamed else "whole"
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}")
    gw.route("default", [Target(mock, "ok", provider="mock")], stream_upstream=streamed)
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


def run(args):
    services.install_signal_handlers()
    bins = services.build_release()
    figures = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        try:
            mock = start_mock(bins, folder)
            for _ in range(args.rounds):
                for streamed in (False, True):
                    report = one_round(bins, args, mock, streamed, folder)
                    if report["error_count"]:
                        raise SystemExit(f"the load saw errors: {report['errors']}")
                    per = report["process"]["cpu_us_per_request"]
                    figures[streamed].append(per)
                    print(f"{'streamed' if streamed else 'whole':>8}: {report['ok']} answers, "
                          f"{report['throughput']:.0f}/s, {per:.1f} µs CPU per request, "
                          f"p99 {report['latency_ms']['p99']:.2f} ms", flush=True)
        finally:
            services.stop_all()
    whole, streamed = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"medians: whole {whole:.1f} µs, streamed {streamed:.1f} µs: "
          f"{100 * (streamed / whole - 1):+.1f}% CPU per request")
