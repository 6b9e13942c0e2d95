"""One hop through Switchyard beside nginx-proxy and the mock alone, in interleaved rounds with
medians: what `bench/run hop` prints, and the rounds `bench/run compare` judges issue 17's targets by.

A gateway's figures move from minute to minute on a shared machine by more than what one hop
costs, so a comparison made of one row per gateway, run one after the other, reads the drift
as a difference. Here every gateway runs at once; each round loads each of them in turn, in an
order that rotates from round to round, and a figure is the median over the rounds. A gateway's
gap to nginx-proxy is also taken round by round (the two rows of a round run at most one row
apart) and summarised by its median and range.

Loads: **stream**, SSE of 20 chunks 5 ms apart, closed loop (time to first content chunk, CPU
per chunk); **request**, non-streamed at 1000 requests/s open loop (p50 latency, CPU per
request). Each over the mock spoken to plainly and behind TLS."""

import json
import os
import statistics
import subprocess

from benchkit import services
from benchkit.gateway import NginxProxy, Switchyard, Target, pinned

STREAM = "ok~chunks=20~gap=5ms"
LOADS = {
    "stream": {"scenario": STREAM, "args": ["--stream"]},
    "request": {"scenario": "ok", "args": ["--rate", "1000"]},
}
BASELINES = ["direct", "nginx"]
UPSTREAMS = ["plain", "tls"]
# Names a build given with --bin may not take.
RESERVED = BASELINES + UPSTREAMS + ["mock", "mock-tls"]

# The cores of --pin: gateways on the first, what loads them and answers them on the second.
GATEWAY_CORE, LOAD_CORE = 0, 1


class Settings:
    """How each row is loaded: `duration` (warm-up second included, as the driver reads it:
    `5s`), `connections`, and whether gateways are pinned to a core of their own (`pin`)."""

    def __init__(self, duration="5s", connections=32, pin=False):
        self.duration = duration
        self.connections = connections
        self.pin = pin


def start_switchyard(name, binary, folder, mocks, pin):
    """`binary` serving one route per upstream and load, `UPSTREAM-SCENARIO`, each to its mock's
    scenario."""
    gateway = Switchyard(binary, folder, name, core=GATEWAY_CORE if pin else None)
    for upstream in UPSTREAMS:
        for load in LOADS.values():
            gateway.route(f"{upstream}-{load['scenario']}", [Target(mocks[upstream], load["scenario"])])
    return gateway.start()


def endpoint(gateway, upstream, scenario, started, mocks):
    """Where the driver sends, the body's model, and the process it watches."""
    if gateway == "direct":
        return (*mocks[upstream].endpoint(scenario), mocks[upstream].pid)
    if gateway == "nginx":
        return (*started["nginx"].endpoint(scenario, tls=upstream == "tls"), started["nginx"].pid)
    return (*started[gateway].endpoint(f"{upstream}-{scenario}"), started[gateway].pid)


def drive(bins, folder, settings, gateway, upstream, load, started, mocks):
    """One row: the driver's report, with the connections the mock accepted during it."""
    target, model, pid = endpoint(gateway, upstream, LOADS[load]["scenario"], started, mocks)
    body = os.path.join(folder, f"body-{model}.json")
    with open(body, "w") as f:
        f.write(services.chat_body(model))
    argv = [bins["switchyard-bench"], "--url", target, "--body-file", body, "--duration", settings.duration,
            "--warmup", "1s", "--pid", str(pid), "--label", f"{gateway}/{upstream}/{load}",
            "--connections", str(settings.connections), *LOADS[load]["args"]]
    if target.startswith("https://"):
        argv += ["--ca-file", mocks[upstream].ca]
    before = mocks[upstream].stats()["connections"]
    done = subprocess.run(pinned(argv, LOAD_CORE if settings.pin else None), capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{gateway}/{upstream}/{load}: {done.stderr.strip()[-400:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Less one: the connection that asked for these figures.
    report["upstream_connections"] = mocks[upstream].stats()["connections"] - before - 1
    return report


def figures(report, load):
    """What a row keeps of its report: p50 ms (TTFT for streams), CPU µs per chunk or per
    request, errors, upstream connections opened."""
    process = report.get("process") or {}
    if load == "stream":
        chunks = report.get("chunks") or 0
        cpu = process.get("cpu_seconds", 0) * 1e6 / chunks if chunks else None
        return {"ms": report["ttft_ms"]["p50"], "cpu_us": cpu, "errors": report["error_count"],
                "conns": report["upstream_connections"]}
    return {"ms": report["latency_ms"]["p50"], "cpu_us": process.get("cpu_us_per_request"),
            "errors": report["error_count"], "conns": report["upstream_connections"]}


def run_rounds(bins, folder, settings, started, mocks, gateways, rounds, say):
    """`rounds` interleaved rounds over `gateways` (the names of `started`, or `direct`):
    {(upstream, load, gateway): [figures of each round]}."""
    results = {(u, load, g): [] for u in UPSTREAMS for load in LOADS for g in gateways}
    for n in range(rounds):
        order = gateways[n % len(gateways):] + gateways[:n % len(gateways)]
        for upstream in UPSTREAMS:
            for load in LOADS:
                for gateway in order:
                    report = drive(bins, folder, settings, gateway, upstream, load, started, mocks)
                    row = figures(report, load)
                    results[(upstream, load, gateway)].append(row)
                    say(f"round {n + 1} {upstream:<5} {load:<7} {gateway:<10} p50 {row['ms']:.3f} ms, "
                        f"CPU {row['cpu_us'] or 0:.1f} µs, upstream conns {row['conns']}, errors {row['errors']}")
    return results


def measure(bins, folder, settings, mocks, builds, rounds, say):
    """Starts nginx-proxy and each of `builds` ({name: binary}) in front of `mocks` (`plain` and
    `tls`: `gateway.Upstream`s), runs the rounds over the mock alone, nginx-proxy and the builds,
    and stops what it started. The rounds' results (see `run_rounds`) and the gateways in order."""
    started = {}
    try:
        core = GATEWAY_CORE if settings.pin else None
        started["nginx"] = NginxProxy(folder, mocks["plain"], mocks["tls"], core=core).start()
        for name, binary in builds.items():
            started[name] = start_switchyard(name, binary, folder, mocks, settings.pin)
        gateways = BASELINES + list(builds)
        return run_rounds(bins, folder, settings, started, mocks, gateways, rounds, say), gateways
    finally:
        for gateway in started.values():
            gateway.stop()


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def gaps(results, gateway, baseline="nginx"):
    """{(upstream, load): [µs by which `gateway`'s p50 exceeded `baseline`'s, round by round]}:
    what `gateway` adds beyond `baseline`, paired within each round so that drift between rounds
    cancels."""
    out = {}
    for upstream in UPSTREAMS:
        for load in LOADS:
            mine = results.get((upstream, load, gateway)) or []
            theirs = results.get((upstream, load, baseline)) or []
            out[(upstream, load)] = [(a["ms"] - b["ms"]) * 1000 for a, b in zip(mine, theirs)]
    return out


def table(results, rounds, gateways, pin=False):
    """The rounds as a markdown table: medians of each gateway's figures, what each adds over
    the mock alone, and what each build adds beyond nginx-proxy round by round."""
    lines = ["| upstream | load | gateway | p50 ms (TTFT for streams) | added µs | beyond nginx-proxy µs: median (range) "
             "| CPU µs (per chunk / per request) | upstream conns per row | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    paired = {gateway: gaps(results, gateway) for gateway in gateways if gateway not in BASELINES}
    for upstream in UPSTREAMS:
        for load in LOADS:
            direct = median([r["ms"] for r in results[(upstream, load, "direct")]])
            for gateway in gateways:
                rows = results[(upstream, load, gateway)]
                ms = median([r["ms"] for r in rows])
                added = "" if gateway == "direct" else f"{(ms - direct) * 1000:+.0f}"
                beyond = ""
                if gateway in paired:
                    mine = paired[gateway][(upstream, load)]
                    beyond = f"{median(mine):+.0f} ({min(mine):+.0f} to {max(mine):+.0f})"
                cpu = median([r["cpu_us"] for r in rows])
                conns = median([r["conns"] for r in rows])
                errors = sum(r["errors"] for r in rows)
                lines.append(f"| {upstream} | {load} | {gateway} | {ms:.3f} | {added} | {beyond} | "
                             f"{'' if cpu is None else f'{cpu:.1f}'} | {conns:.0f} | {errors} |")
    where = ", gateways on a core of their own (--pin)." if pin else "."
    medians = "One interleaved round" if rounds == 1 else f"Medians of {rounds} interleaved rounds"
    return "\n".join(lines) + f"\n\n{medians}{where}"


def to_json(results):
    """The rounds' results keyed `upstream|load|gateway`, as results.json keeps them."""
    return {"|".join(key): rows for key, rows in results.items()}


def from_json(data):
    """The inverse of `to_json`."""
    return {tuple(key.split("|")): rows for key, rows in data.items()}
