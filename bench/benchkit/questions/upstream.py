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

from benchkit import ab
from benchkit.gateway import Switchyard, Target

SUMMARY = "CPU per non-streamed request streamed upstream and put back together against asked whole"


def arguments(p):
    ab.arguments(p, rate=5000)


def check(p, args):
    ab.check(p, args)


def gateway(bins, folder, mock, _, label):
    """The gateway under test, one route to the mock, asking whole or streamed."""
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}")
    gw.route("default", [Target(mock, "ok", provider="mock")], stream_upstream=label == "streamed")
    return gw


def run(args):
    ab.rounds(args, ("whole", "streamed"), gateway)
