"""The gateway's CPU per request with traces exported at sampler 1.0 (`always_on`) against
telemetry off, through the real `switchyard serve` on loopback.

Starts the mock upstream, whose `/_otlp/v1/traces` is also the OTLP/HTTP collector (it reads
each export and keeps nothing, at next to no CPU), then runs interleaved rounds: a gateway
without `telemetry:`, then one with `telemetry: { endpoint, sampler: always_on }`, each loaded
by the bench driver at 32 connections at a fixed rate (10,000 requests/s by default: the same
work both ways). The driver reports the gateway process's CPU seconds, every thread included
(the exporter's too), and the answers. Prints one line per round and the medians.

    bench/run tracing                  # 3 rounds of 8 s each way at 10,000 requests/s
    bench/run tracing --quick          # 1 round of 3 s each way: a smoke run
    bench/run tracing --rounds 5 --duration 10s --rate 0   # closed loop instead

The same cost in process, without sockets: `bench/run micro tracing_app`. Release binaries are
built first. Everything listens on 127.0.0.1 and stops by itself.
"""

import json
import statistics
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import Switchyard, Target, start_mock

SUMMARY = "CPU per request with every trace exported (sampler always_on) against telemetry off"


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


def gateway(binary, folder, mock, traced):
    """The gateway under test, one route to the mock; exporting every trace to it when `traced`."""
    telemetry = {"endpoint": f"http://127.0.0.1:{mock.port}/_otlp", "sampler": "always_on"} if traced else None
    gw = Switchyard(binary, folder, f"gateway-{'on' if traced else 'off'}", telemetry=telemetry)
    gw.route("default", [Target(mock, "ok", provider="mock")])
    return gw


def one_round(bins, args, mock, traced, folder):
    gw = gateway(bins["switchyard"], folder, mock, traced).start()
    try:
        url, model = gw.endpoint("default")
        result = subprocess.run(
            [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model),
             "--duration", args.duration, "--warmup", "1s", "--connections", "32", "--pid", str(gw.pid),
             "--label", "on" if traced else "off"] + (["--rate", str(args.rate)] if args.rate else []),
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
                for traced in (False, True):
                    report = one_round(bins, args, mock, traced, folder)
                    if report["error_count"]:
                        raise SystemExit(f"the load saw errors: {report['errors']}")
                    per = report["process"]["cpu_us_per_request"]
                    figures[traced].append(per)
                    print(f"{'always_on' if traced else 'off':>9}: {report['ok']} answers, {report['throughput']:.0f}/s, "
                          f"{per:.1f} µs CPU per request, p99 {report['latency_ms']['p99']:.2f} ms", flush=True)
        finally:
            services.stop_all()
    off, on = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"medians: off {off:.1f} µs, always_on {on:.1f} µs: {100 * (on / off - 1):+.1f}% CPU per request")
