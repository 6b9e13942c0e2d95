"""The Rust micro-benchmarks: the product crates measured in process, without sockets, each an
example of crates/switchyard-bench (examples/NAME.rs; the product crates are its
dev-dependencies, so nothing here reaches them). `bench/run micro NAME [ARGS...]` builds NAME
in release mode and runs it with ARGS, which are NAME's own (see the top of its file).

    bench/run micro pacing 200000            # what pacing costs a request through the router
    bench/run micro shared_state             # health shared through a real redis-server
    bench/run micro tracing_app 20000        # exporting traces, the gateway's app in process

Each runs in a few seconds to a few minutes; `cargo test --workspace --all-targets` builds them
all (without running them), so they keep compiling with the crates they measure. The ones that
start a redis-server need it installed (apt-get install -y redis-server).
"""

import argparse
import os
import subprocess

from benchkit import services

SUMMARY = "the Rust micro-benchmarks (crates/switchyard-bench/examples): bench/run micro NAME [ARGS]"

EXAMPLES = os.path.join(services.REPO, "crates", "switchyard-bench", "examples")
# Each micro-benchmark, with what it measures.
BENCHMARKS = {
    "pacing": "what the pacer costs a request through the router: no limits against limits never reached",
    "answer_cache": "what a `cache` candidate that remembers every answer costs a request",
    "shared_state": "health shared through Redis: how fast a change travels, and what it costs a request",
    "fleet_pacing": "pacing one allowance across the fleet through Redis against pacing alone",
    "tracing_app": "exporting every trace (always_on) against telemetry off, the gateway's HTTP app in process",
    "sigv4": "what SigV4 costs a Bedrock request: signing it, and taking kept credentials from the cache",
}


def arguments(p):
    p.epilog = "benchmarks:\n" + "\n".join(f"  {name:<13} {what}" for name, what in BENCHMARKS.items())
    p.add_argument("name", choices=list(BENCHMARKS), metavar="NAME", help="the micro-benchmark (listed below)")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="ARGS", help="its own arguments")


def command(name, rest):
    """The cargo command that builds and runs micro-benchmark `name` with `rest`."""
    return ["cargo", "run", "--release", "--quiet", "-p", "switchyard-bench", "--example", name, "--", *rest]


def run(args):
    return subprocess.run(command(args.name, args.rest), cwd=services.REPO).returncode
