"""CPU per request of the real gateway one way against another, in interleaved rounds: what the
questions `tracing`, `upstream`, `keys` and `trails` each ask of one setting.

A question gives the two ways' labels and a function that makes the gateway of each (not yet
started); this starts the mock (and whatever `prepare` adds), then for each round starts each
way's gateway in turn, loads it with the bench driver at 32 connections (at a fixed rate, the
same work both ways, or in a closed loop), stops it, and prints one line per load and the
medians. CPU is the gateway process's, every thread included.
"""

import json
import statistics
import subprocess
import tempfile

from benchkit import services
from benchkit.gateway import start_mock


def arguments(p, rate):
    """The options every A/B question takes; `rate` is its default requests/s."""
    p.add_argument("--quick", action="store_true", help="1 round of 3 s each way unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--duration", help="load each way per round (default 8s; --quick 3s)")
    p.add_argument("--rate", type=int, default=rate,
                   help="open loop at this many requests/s, the same load both ways (0: closed loop, as fast as it goes)")


def check(p, args):
    """Fills the defaults `--quick` implies and refuses what cannot run."""
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    args.duration = args.duration or ("3s" if args.quick else "8s")
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")
    if args.rate < 0:
        p.error("--rate must be 0 (closed loop) or more")


def load(bins, args, gw, label, headers=()):
    """The driver's report of one load of the started gateway `gw` (its `default` route)."""
    url, model = gw.endpoint("default")
    argv = [bins["switchyard-bench"], "--url", url, "--body", services.chat_body(model),
            "--duration", args.duration, "--warmup", "1s", "--connections", "32", "--pid", str(gw.pid),
            "--label", label]
    for header in headers:
        argv += ["--header", header]
    if args.rate:
        argv += ["--rate", str(args.rate)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if report["error_count"]:
        raise SystemExit(f"the load saw errors: {report['errors']}")
    return report


def rounds(args, labels, gateway, headers=(), prepare=None, after=None):
    """Runs the rounds: `gateway(bins, folder, mock, extra, label)` makes each way's gateway;
    `prepare(bins, folder)` starts what the ways share (its result is `extra`); `after(bins,
    folder, mock, extra)` runs once the rounds are done, its result returned beside the medians.
    Prints each load and the medians; returns ({label: median µs}, what `after` returned)."""
    services.install_signal_handlers()
    bins = services.build_release()
    figures = {label: [] for label in labels}
    width = max(len(label) for label in labels)
    with tempfile.TemporaryDirectory() as folder:
        try:
            mock = start_mock(bins, folder)
            extra = prepare(bins, folder) if prepare else None
            for _ in range(args.rounds):
                for label in labels:
                    gw = gateway(bins, folder, mock, extra, label).start()
                    try:
                        report = load(bins, args, gw, label, headers)
                    finally:
                        gw.stop()
                    per = report["process"]["cpu_us_per_request"]
                    figures[label].append(per)
                    print(f"{label:>{width}}: {report['ok']} answers, {report['throughput']:.0f}/s, "
                          f"{per:.1f} µs CPU per request, p99 {report['latency_ms']['p99']:.2f} ms", flush=True)
            told = after(bins, folder, mock, extra) if after else None
        finally:
            services.stop_all()
    medians = {label: statistics.median(values) for label, values in figures.items()}
    base, other = labels
    print(f"medians: {base} {medians[base]:.1f} µs, {other} {medians[other]:.1f} µs: "
          f"{100 * (medians[other] / medians[base] - 1):+.1f}% CPU per request")
    return medians, told
