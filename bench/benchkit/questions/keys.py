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

from benchkit import ab
from benchkit.gateway import MODEL, Switchyard, Target

SUMMARY = "CPU per request of a client key with limits, routes and a budget against a bare key"

KEY = "bench-client-key-0123456789"


def arguments(p):
    ab.arguments(p, rate=10000)


def check(p, args):
    ab.check(p, args)


def gateway(bins, folder, mock, _, label):
    """The gateway under test, one route to the mock, its one key bare or `limited`."""
    key = KEY
    if label == "limited":
        key = {"name": "bench", "key": KEY, "routes": ["default"],
               "limits": {"requests_per_minute": 100_000_000, "tokens_per_minute": 10_000_000_000,
                          "max_concurrent": 10_000},
               "budget": {"usd": 1_000_000_000, "per": "month"}}
    gw = Switchyard(bins["switchyard"], folder, f"gateway-{label}", gateway={"keys": [key]})
    gw.route("default", [Target(mock, "ok", provider="mock")])
    # Priced both ways, so that the limited key's budget is charged each answer's cost.
    gw.providers["mock"]["prices"] = {MODEL: {"input": 1.0, "output": 2.0}}
    return gw


def run(args):
    ab.rounds(args, ("bare", "limited"), gateway, headers=[f"Authorization: Bearer {KEY}"])
