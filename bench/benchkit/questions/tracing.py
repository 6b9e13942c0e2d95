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

from benchkit import ab
from benchkit.gateway import Switchyard, Target

SUMMARY = "CPU per request with every trace exported (sampler always_on) against telemetry off"


def arguments(p):
    ab.arguments(p, rate=10000)


def check(p, args):
    ab.check(p, args)


def gateway(bins, folder, mock, _, label):
    """The gateway under test, one route to the mock; exporting every trace to it when
    `always_on`."""
    traced = label == "always_on"
    telemetry = {"endpoint": f"http://127.0.0.1:{mock.port}/_otlp", "sampler": "always_on"} if traced else None
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}", telemetry=telemetry)
    gw.route("default", [Target(mock, "ok", provider="mock")])
    return gw


def run(args):
    ab.rounds(args, ("off", "always_on"), gateway)
