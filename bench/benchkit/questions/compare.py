"""Switchyard side by side with nginx-proxy, TensorZero, Portkey and LiteLLM.

Installs the peers on demand outside the repository, builds Switchyard, the mock and the load
driver in release mode, starts the mock, runs the same loads through every gateway (and
against the mock directly), stops everything it started, and prints one table with each
gateway's figures and its ratio to nginx-proxy. Full runs also rewrite the results section of
docs/BENCHMARKS.md and docs/bench/latency-vs-rate.svg.

    bench/run compare                          # everything (about 35 minutes on 2 cores)
    bench/run compare --quick                  # a smoke run of a few minutes
    bench/run compare --only switchyard,nginx  # selected gateways (the mock baseline always runs)
    bench/run compare --rounds 7               # more interleaved rounds for issue 17's targets (default 5)

After every gateway has run its rows, the mock alone, nginx-proxy and Switchyard run again side
by side in interleaved rounds (`benchkit/hop.py`, as `bench/run hop`): streams and requests over the
mock spoken to plainly and behind TLS, each gateway in turn, in an order that rotates from round
to round. Issue 17's targets (the time to first token Switchyard adds, within 100 µs of what
nginx-proxy adds) are judged on those rounds' medians, not on one row per gateway run minutes
apart.

`bench/run compare --render` runs nothing: it redraws the results in docs/ from
docs/bench/results.json.

Peers live in $SWITCHYARD_BENCH_HOME (default $XDG_CACHE_HOME/switchyard-bench, or
~/.cache/switchyard-bench); each run's configs, logs and raw results go to its runs/ folder.
Everything listens on and is loaded through 127.0.0.1 only.
"""

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

from benchkit import chart, hop, peers, services, tables
from benchkit.gateway import start_mock
from benchkit.tls import certificates
from benchkit.scenarios import (ROUTES, SCENARIOS, SWEEP_CONNECTIONS, SWEEP_P99_MS, SWEEP_RATES,
                                SWEEP_RATES_QUICK, Soak, body)

SUMMARY = "the full comparison beside nginx-proxy, TensorZero, Portkey and LiteLLM (--quick: a smoke run)"
REPO = services.REPO
DOC = os.path.join(REPO, "docs", "BENCHMARKS.md")
SVG = os.path.join(REPO, "docs", "bench", "latency-vs-rate.svg")
RESULTS_JSON = os.path.join(REPO, "docs", "bench", "results.json")
START, END = "<!-- results:start -->", "<!-- results:end -->"


def arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="short loads and a subset of scenarios (a smoke run of a few minutes)")
    p.add_argument("--only", default="",
                   help="comma-separated gateways: nginx,switchyard,switchyard-redis,tensorzero,portkey,litellm")
    p.add_argument("--duration", type=float, help="seconds per scenario (default 10, --quick 3)")
    p.add_argument("--sweep-step", type=float, help="seconds per sweep rate (default 5, --quick 2)")
    p.add_argument("--soak", type=float, help="soak seconds (default 300, --quick 30; 0 skips it)")
    p.add_argument("--rounds", type=int,
                   help="interleaved rounds of direct, nginx-proxy and Switchyard (default 5, --quick 2; 0 skips them)")
    p.add_argument("--home", help="where peers are installed and runs are kept")
    p.add_argument("--no-install", action="store_true", help="do not install missing peers; report them")
    docs = p.add_mutually_exclusive_group()
    docs.add_argument("--docs", dest="docs", action="store_true", default=None,
                      help="rewrite docs/BENCHMARKS.md results (default for full runs of every gateway)")
    docs.add_argument("--no-docs", dest="docs", action="store_false", help="leave docs/ alone")
    docs.add_argument("--render", action="store_true",
                      help="run nothing: redraw the results in docs/ from docs/bench/results.json")


def check(p, args):
    known = set(peers.ORDER) - {"direct"}
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in known]
    if unknown:
        p.error(f"--only: unknown gateway {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    args.gateways = ["direct"] + (only or sorted(known, key=peers.ORDER.index))
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    args.sweep_step = args.sweep_step or (2.0 if args.quick else 5.0)
    args.soak = args.soak if args.soak is not None else (30.0 if args.quick else 300.0)
    args.rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    # Published results compare every gateway: a run of some of them only prints, unless asked.
    args.docs = (not args.quick and not only) if args.docs is None else args.docs
    if not 0 < args.duration <= 600 or not 0 < args.sweep_step <= 120 or not 0 <= args.soak <= 1800:
        p.error("durations are bounded: --duration (0, 600], --sweep-step (0, 120], --soak [0, 1800]")
    if not 0 <= args.rounds <= 20:
        p.error("--rounds must be between 0 and 20")


def say(text=""):
    print(text, flush=True)


def build(home):
    """Release builds; the mock and the driver are required, the gateway may fail (reported)."""
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    release = os.path.join(target, "release")
    log = os.path.join(home, "logs", "cargo-build.log")
    bins = {}
    for packages, names in ((["switchyard-mock", "switchyard-bench"], ["switchyard-mock", "switchyard-bench"]),
                            (["switchyard-gateway"], ["switchyard"])):
        argv = ["cargo", "build", "--release", "--quiet"] + [a for p in packages for a in ("-p", p)]
        say(f"building {', '.join(packages)} (release)")
        with open(log, "ab") as out:
            done = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=services.layout_env())
        for name in names:
            path = os.path.join(release, name)
            if done.returncode == 0 and os.path.exists(path):
                bins[name] = path
            else:
                bins[f"{name}_error"] = f"cargo build failed (exit {done.returncode}; log: {log})"
    if "switchyard-mock" not in bins or "switchyard-bench" not in bins:
        raise SystemExit(f"cannot build the mock and the load driver: see {log}")
    return bins


def machine():
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""
    cpu = re.search(r"model name\s*:\s*(.+)", read("/proc/cpuinfo"))
    mem = re.search(r"MemTotal:\s*(\d+)", read("/proc/meminfo"))
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu": cpu.group(1).strip() if cpu else platform.processor(),
            "memory_gb": round(int(mem.group(1)) / 1024 / 1024, 1) if mem else None,
            "kernel": platform.release(), "rustc": rustc, "python": platform.python_version()}


class Runner:
    """Runs the load driver for one gateway and scenario and keeps every raw report."""

    def __init__(self, ctx, args):
        self.ctx = ctx
        self.args = args
        self.raw = open(os.path.join(ctx.run_dir, "results.jsonl"), "a")
        self.log = open(os.path.join(ctx.run_dir, "driver.log"), "a")
        os.makedirs(os.path.join(ctx.run_dir, "bodies"), exist_ok=True)

    def drive(self, gateway, route, label, duration, connections, stream=False, body_bytes=0,
              warmup=0.0, rate=None, expect="mock answer", background=False):
        """Starts or runs switchyard-bench; returns its report (or the Popen when background)."""
        if ROUTES[route].api != "chat" and not (gateway.name == "direct" or getattr(gateway, "serves_responses", False)):
            raise peers.NotExpressible(f"{gateway.label} is measured on Chat Completions only")
        if ROUTES[route].tls and not getattr(gateway, "serves_tls", False):
            raise peers.NotExpressible(f"{gateway.label} is measured over plain HTTP only")
        url, payload, headers = gateway.request(self.ctx, ROUTES[route], body("", body_bytes))
        body_file = os.path.join(self.ctx.run_dir, "bodies", f"{gateway.name}-{label}.json")
        with open(body_file, "w") as f:
            json.dump(payload, f)
        argv = [self.ctx.bins["switchyard-bench"], "--url", url, "--body-file", body_file,
                "--duration", f"{duration:g}s", "--connections", str(connections), "--timeout", "10s",
                "--label", f"{gateway.name}/{label}", "--expect", expect]
        if gateway.pid:
            argv += ["--pid", str(gateway.pid)]
        if url.startswith("https://"):
            argv += ["--ca-file", self.ctx.ca_file]
        if stream:
            argv.append("--stream")
        if warmup:
            argv += ["--warmup", f"{warmup:g}s"]
        if rate:
            argv += ["--rate", f"{rate:g}"]
        for key, value in headers.items():
            argv += ["--header", f"{key}: {value}"]
        command = " ".join(shlex.quote(a) for a in argv)
        if background:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            proc.command = command
            return proc
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 90)
        return self.collect(done.returncode, done.stdout, done.stderr, command)

    def collect(self, code, stdout, stderr, command):
        self.log.write(stderr)
        self.log.flush()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            raise RuntimeError((stderr.strip().splitlines() or [f"exit {code}"])[-1][:200])
        report = json.loads(lines[-1])
        report["command"] = command
        self.raw.write(json.dumps(report) + "\n")
        self.raw.flush()
        return report


def brief(r):
    lat = r.get("latency_ms") or {}
    extra = ""
    if r.get("ttft_ms"):
        extra = f", TTFT p50 {tables.ms(r['ttft_ms']['p50'])} ms, gap p50 {tables.ms((r.get('chunk_gap_ms') or {}).get('p50'))} ms"
    return (f"{r['throughput']:.0f} ok/s, p50 {tables.ms(lat.get('p50'))} ms, p99 {tables.ms(lat.get('p99'))} ms"
            f"{extra}, errors {tables.errors_text(r)}")


WARMUP_SECONDS = 1.0


def run_gateway(runner, gateway, args, rows, sweep):
    scenarios = [s for s in SCENARIOS if s.in_quick or not args.quick]
    # One unmeasured second of the `ok` load first, the same for every gateway, so that no
    # first row pays for a gateway's start: connection pools, lazy imports, JIT.
    try:
        runner.drive(gateway, "ok", "warm-up", WARMUP_SECONDS, 32)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        say(f"  {gateway.name:<11} warm-up failed: {e}")
    for s in scenarios:
        row = {"scenario": s.name, "gateway": gateway.name}
        try:
            warmup = s.warmup * (0.75 if args.quick else 1.0)
            report = runner.drive(gateway, s.route, s.name, args.duration + (warmup if s.extra else 0),
                                  s.connections, s.stream, s.body_bytes, warmup, rate=s.rate, expect=s.expect)
            row.update(status="ok", report=report)
            say(f"  {gateway.name:<11} {s.name:<14} {brief(report)}")
        except peers.NotExpressible as e:
            row.update(status="na", reason=f"n/a: {e}")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            row.update(status="failed", reason=f"run failed: {e}")
            say(f"  {gateway.name:<11} {s.name:<14} run failed: {e}")
        rows.append(row)
        if gateway.service and not gateway.service.alive():
            say(f"  {gateway.name} exited during {s.name}: {gateway.service.log_tail(5)}")
            why = f"not run: {gateway.name} exited during {s.name}"
            rows.extend({"scenario": rest.name, "gateway": gateway.name, "status": "failed", "reason": why}
                        for rest in scenarios[scenarios.index(s) + 1:])
            return
        # A gateway that fell behind is still answering what the driver gave up on; that work
        # must not run into its next row.
        if gateway.service and not services.settle(gateway.service):
            say(f"  {gateway.name:<11} still busy {services.SETTLE_LIMIT:.0f} s after {s.name}; going on")
    points = []
    rates = SWEEP_RATES_QUICK if args.quick else SWEEP_RATES
    warm = 0.5 if args.quick else 1.0
    for rate in rates:
        try:
            report = runner.drive(gateway, "ok", f"sweep-{rate}", args.sweep_step + warm, SWEEP_CONNECTIONS,
                                  warmup=warm, rate=rate)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            say(f"  {gateway.name:<11} sweep {rate}/s failed: {e}")
            break
        errors = sum(tables.all_errors(report).values())
        p99 = (report.get("latency_ms") or {}).get("p99", float("inf"))
        held = errors == 0 and p99 < SWEEP_P99_MS and report["throughput"] >= 0.97 * rate
        points.append({"rate": rate, "held": held, "report": report})
        say(f"  {gateway.name:<11} sweep {rate:>6}/s  {brief(report)}  {'held' if held else 'NOT held'}")
        if not held:
            break  # higher rates only fail harder; keep the run bounded
    sweep[gateway.name] = points


def run_soak(runner, gateway, seconds):
    """Mixed traffic against Switchyard; RSS read by the stream driver after a 10% warm-up
    and at the end."""
    loads = []
    procs = []
    warm = max(1.0, seconds * 0.1)
    for i, (route, connections, stream, expect_errors) in enumerate(Soak().loads):
        proc = runner.drive(gateway, route, f"soak-{route}", seconds, connections, stream,
                            warmup=warm if i == 0 else 0.0, background=True)
        procs.append(proc)
        loads.append({"route": route, "connections": connections, "stream": stream,
                      "expect_errors": expect_errors})
    for load, proc in zip(loads, procs):
        try:
            out, err = proc.communicate(timeout=seconds + 90)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        load["report"] = runner.collect(proc.returncode, out, err, proc.command)
    process = loads[0]["report"].get("process")
    if not process:
        return {"status": "failed", "reason": "no process figures from the stream load"}
    start, end = process["rss_start_kb"], process["rss_end_kb"]
    return {"status": "ok", "seconds": seconds, "loads": loads,
            "rss": {"start_kb": start, "end_kb": end, "peak_kb": process["rss_peak_kb"],
                    "growth_pct": (end - start) * 100.0 / start if start else 0.0}}


def run_rounds(args, bins, run_dir, mocks, gateways):
    """The interleaved rounds of the mock alone, nginx-proxy and Switchyard (see `benchkit/hop.py`),
    when both gateways ran and rounds were asked for: results.json's `rounds` entry, or None."""
    ran = {g["name"] for g in gateways if g.get("status") == "ran"}
    if not args.rounds or not {"nginx", "switchyard"} <= ran:
        return None
    say(f"interleaved rounds: direct, nginx-proxy and switchyard, {args.rounds} of them")
    folder = os.path.join(run_dir, "rounds")
    os.makedirs(folder, exist_ok=True)
    settings = hop.Settings(f"{args.duration:g}s", 32)
    try:
        results, _ = hop.measure(bins, folder, settings, mocks, {"switchyard": bins["switchyard"]}, args.rounds,
                                 lambda line: say(f"  {line}"))
    except (RuntimeError, services.StartError, subprocess.TimeoutExpired) as e:
        say(f"  rounds failed: {e}")
        return {"status": "failed", "reason": f"rounds failed: {str(e)[:300]}"}
    return {"status": "ok", "rounds": args.rounds, "duration": args.duration, "connections": settings.connections,
            "results": hop.to_json(results)}


def rounds_text(rounds):
    """The rounds' table, or why there is none."""
    if not rounds:
        return "Interleaved rounds: not run (they need nginx-proxy and Switchyard in the run, and --rounds above 0)."
    if rounds.get("status") != "ok":
        return f"Interleaved rounds: {rounds.get('reason')}"
    return hop.table(hop.from_json(rounds["results"]), rounds["rounds"], hop.BASELINES + ["switchyard"])


TITLES = {
    "nonstream-32": "non-streaming, 32 connections, closed loop",
    "overhead-1000": "non-streaming, open loop at 1000 req/s on 32 connections; `added p50 µs` is the overhead check",
    "nonstream-256": "non-streaming, 256 connections (RSS MB is the memory check)",
    "stream-32": "SSE, 20 chunks 5 ms apart, 32 connections; TTFT = time to first content chunk",
    "stream-gap50": "SSE, 5 chunks 50 ms apart, 8 connections; a gap p50 near 50 ms means chunks are forwarded as they arrive",
    "fallback-500": "primary answers 500, healthy fallback; errors include the warm-up",
    "hang": "primary never answers (1 s attempt limit), healthy fallback; figures after a 2 s warm-up, errors include it",
    "ratelimit-429": "primary answers 429 with Retry-After: 30, healthy fallback",
    "body-1mb": "1 MB request body, 32 connections; run last, since the allocator keeps some of that memory",
}


def results_markdown(data):
    meta = data["meta"]
    m = meta["machine"]
    lines = [f"Generated by `{meta['command']}` on {meta['date']} ({meta['mode']} run: {meta['duration']:g} s per "
             f"scenario, {meta['sweep_step']:g} s per sweep rate, {meta['soak']:g} s soak).", "",
             f"Machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gb']} GB memory, Linux {m['kernel']}, "
             f"{m['rustc']}, Python {m['python']}. Everything (load driver, gateway, mock) shares these cores, "
             "so absolute figures are noisy; compare ratios within one run.", "",
             "| gateway | version | status |", "|---|---|---|"]
    for g in data["gateways"]:
        lines.append(f"| {g['name']} | {g.get('version') or '-'} | {g['status']} |")
    lines += ["", "### Scenarios", "", tables.markdown_table(data["rows"], TITLES),
              "Columns: `ok req/s` counts only answers with status 200 and the expected body; latency from "
              "send (closed loop) to the end of the answer; `errors` are every failed request, by kind; "
              "`CPU s`, `CPU µs/req` (CPU time per checked answer) and `RSS MB` (peak during the row) are "
              "the gateway's, all its processes (for direct, the mock's); "
              "`added p50 µs` is the gateway's p50 (TTFT for streams) minus direct's.", "",
              "### Open-loop rate sweep", "",
              f"Fixed offered rates, latency measured from each request's scheduled send time; a rate is held "
              f"when p99 < {SWEEP_P99_MS:g} ms, no request fails and at least 97% of the offered rate is "
              "answered. Each gateway's sweep stops at its first rate not held.", "",
              tables.sweep_lines(data["sweep"], markdown=True), "",
              "![latency vs offered rate](bench/latency-vs-rate.svg)", "",
              "### Soak (leak check)", "", tables.soak_lines(data.get("soak"), markdown=True), "",
              "### Interleaved rounds", "",
              "The mock alone, nginx-proxy and Switchyard side by side after the rows above, each loaded in turn "
              "in an order that rotates from round to round: SSE of 20 chunks 5 ms apart (TTFT, CPU per chunk) "
              "and requests at 1000/s open loop (p50, CPU per request), on 32 connections, over the mock spoken "
              "to plainly and behind TLS. `beyond nginx-proxy` pairs Switchyard's row with nginx-proxy's of the "
              "same round. Issue 17's targets below are judged on these rounds.", "",
              rounds_text(data.get("rounds")), "",
              "### Targets (issues 6 and 17)", "",
              tables.targets_lines(tables.targets(data["rows"], data["sweep"], data.get("soak"), data.get("rounds")),
                                   markdown=True)]
    return "\n".join(lines)


def portable(value):
    """The published results name no path of this machine: the checkout reads as `.`, the
    home directory as `~`."""
    if isinstance(value, str):
        return value.replace(REPO, ".").replace(os.path.expanduser("~"), "~")
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    return value


def write_docs(data, run_dir=None):
    """Rewrites the results section of docs/BENCHMARKS.md, the chart and results.json from
    `data`; with the `run_dir` of the run that made it, also the configurations it ran with
    (a redraw from results.json leaves them as they are: the run's folder is not kept there)."""
    os.makedirs(os.path.dirname(SVG), exist_ok=True)
    series = {}
    for name, points in data["sweep"].items():
        series[name] = [(p["rate"], p["report"]["latency_ms"]["p50"], p["report"]["latency_ms"]["p99"])
                        for p in points if p["report"].get("latency_ms")]
    with open(SVG, "w") as f:
        f.write(chart.render(series, SWEEP_P99_MS, "Latency vs offered rate (p50 solid, p99 dashed)"))
    with open(RESULTS_JSON, "w") as f:
        json.dump(portable(data), f, indent=1)
    if run_dir:
        # The exact configurations each gateway ran with (ports are this run's).
        configs = os.path.join(os.path.dirname(SVG), "configs")
        # Only this run's: a gateway left out of it must not seem to have run with an old config.
        shutil.rmtree(configs, ignore_errors=True)
        os.makedirs(configs, exist_ok=True)
        for name in ("switchyard.yaml", "tensorzero.toml", "litellm.yaml", os.path.join("nginx", "nginx.conf")):
            path = os.path.join(run_dir, name)
            if os.path.exists(path):
                shutil.copy(path, os.path.join(configs, os.path.basename(path)))
    try:
        with open(DOC) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Benchmarks\n\n"
    with open(DOC, "w") as f:
        f.write(with_results(text, results_markdown(data)))


def with_results(text, results):
    """`text` (docs/BENCHMARKS.md) with `results` between its results markers, and the rest as
    it was; at the end under `## Results` when the markers are missing."""
    section = f"{START}\n{results}\n{END}"
    if START in text and END in text:
        return text[:text.index(START)] + section + text[text.index(END) + len(END):]
    return text.rstrip() + "\n\n## Results\n\n" + section + "\n"


def bench_home(args):
    """Where peers are installed and this run is kept: (home, this run's folder), both made."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = os.path.abspath(args.home or os.environ.get("SWITCHYARD_BENCH_HOME") or os.path.join(cache, "switchyard-bench"))
    if os.path.commonpath([home, REPO]) == REPO:
        raise SystemExit(f"--home {home} is inside the repository; peers must live outside it")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = os.path.join(home, "runs", stamp)
    os.makedirs(os.path.join(home, "logs"), exist_ok=True)
    os.makedirs(run_dir, exist_ok=True)
    return home, run_dir


def start_gateway(ctx, gateway, args):
    """Installs and starts `gateway`: its entry in results.json's `gateways` (`status` "ran",
    or why not)."""
    entry = {"name": gateway.name}
    try:
        gateway.install(ctx, allow=not args.no_install)
    except peers.Unavailable as e:
        entry["status"] = f"not installed: {e}"
    if "status" not in entry:
        say(f"starting {gateway.label}")
        try:
            gateway.start(ctx)
            entry["status"] = "ran"
        except (peers.Unavailable, services.StartError) as e:
            entry["status"] = f"did not start: {str(e)[:400]}"
            gateway.stop()
    entry["version"] = gateway.version
    return entry


def soak_switchyard(ctx, runner, gateway, seconds):
    """The soak on a fresh process of `gateway`: its results, or why it failed."""
    say(f"  switchyard  soak for {seconds:g} s (mixed streaming and failing requests), on a fresh process")
    try:
        # A fresh process: memory the allocator kept from the 1 MB bodies would otherwise be
        # returned during the soak and hide a leak behind the drop.
        gateway.stop()
        gateway.start(ctx)
        soak = run_soak(runner, gateway, seconds)
        say("  " + tables.soak_lines(soak, markdown=False).replace("\n", "\n  "))
        return soak
    except (RuntimeError, subprocess.TimeoutExpired, services.StartError) as e:
        return {"status": "failed", "reason": f"soak failed: {e}"}


def run_gateways(ctx, runner, args):
    """Every gateway's rows, one gateway after the other: (rows, sweep, gateways, soak)."""
    rows, sweep, gateways, soak = [], {}, [], None
    for gateway in peers.make(args.gateways, ctx.plain):
        entry = start_gateway(ctx, gateway, args)
        gateways.append(entry)
        if entry["status"] != "ran":
            say(f"  {gateway.name}: {entry['status']}")
            rows.extend({"scenario": s.name, "gateway": gateway.name, "status": "unavailable",
                         "reason": entry["status"][:120]} for s in SCENARIOS if s.in_quick or not args.quick)
            continue
        try:
            run_gateway(runner, gateway, args, rows, sweep)
            if gateway.name == "switchyard" and args.soak > 0:
                soak = soak_switchyard(ctx, runner, gateway, args.soak)
        finally:
            gateway.stop()
    rows.sort(key=lambda r: ([s.name for s in SCENARIOS].index(r["scenario"]), peers.ORDER.index(r["gateway"])))
    return rows, sweep, gateways, soak


def publish(data, run_dir, args):
    """Prints the run's tables and keeps them in `run_dir`; with --docs, also in docs/."""
    rows, sweep, soak, rounds = data["rows"], data["sweep"], data["soak"], data["rounds"]
    with open(os.path.join(run_dir, "results.json"), "w") as f:
        json.dump(data, f, indent=1)
    text = "\n".join(["", tables.text_table(rows), "", "open-loop sweep (p99 < 50 ms, no errors):",
                      tables.sweep_lines(sweep, markdown=False), "", tables.soak_lines(soak, markdown=False), "",
                      "interleaved rounds:", rounds_text(rounds), "",
                      "targets:", tables.targets_lines(tables.targets(rows, sweep, soak, rounds), markdown=False)])
    with open(os.path.join(run_dir, "table.txt"), "w") as f:
        f.write(text + "\n")
    say(text)
    say("")
    for g in data["gateways"]:
        say(f"{g['name']:<11} {g.get('version') or '':<40} {g['status']}")
    if args.docs:
        write_docs(data, run_dir)
        say(f"\nwrote {os.path.relpath(DOC, REPO)}, {os.path.relpath(SVG, REPO)} and "
            f"{os.path.relpath(RESULTS_JSON, REPO)}")


def run(args):
    if args.render:
        with open(RESULTS_JSON) as f:
            write_docs(json.load(f))
        say(f"redrew {os.path.relpath(DOC, REPO)} and its chart from {os.path.relpath(RESULTS_JSON, REPO)}")
        return 0
    home, run_dir = bench_home(args)
    say(f"bench/run compare ({'quick' if args.quick else 'full'}): peers in {home}, this run in {run_dir}")
    services.install_signal_handlers()
    started = time.monotonic()
    try:
        bins = build(home)
        # The mock twice: plainly, and behind TLS with a throwaway authority nginx and Switchyard trust.
        tls = certificates(run_dir)
        mocks = {"plain": start_mock(bins, run_dir), "tls": start_mock(bins, run_dir, tls)}
        ctx = peers.Context(home, run_dir, bins, REPO, mocks["plain"], mocks["tls"])
        rows, sweep, gateways, soak = run_gateways(ctx, Runner(ctx, args), args)
        rounds = run_rounds(args, bins, run_dir, mocks, gateways)
        data = {"meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                         "mode": "quick" if args.quick else "full", "command": "bench/run " + " ".join(sys.argv[1:]),
                         "duration": args.duration, "sweep_step": args.sweep_step, "soak": args.soak,
                         "machine": machine(), "run_dir": run_dir},
                "gateways": gateways, "rows": rows, "sweep": sweep, "soak": soak, "rounds": rounds}
        publish(data, run_dir, args)
        say(f"done in {time.monotonic() - started:.0f} s; raw results in {run_dir}")
    except KeyboardInterrupt:
        say("\ninterrupted: stopping everything this run started")
        return 130
    finally:
        services.stop_all()
    return 0
