"""Which functions a request runs, for the linker to lay side by side in the release binary.

Between two requests of a quiet connection, the mock, the client and the kernel take the
caches, and a request's first token waits on its code coming back from memory. With fat LTO
that code is about 920 functions spread over 10 MB of text; laid out one after the other, it
fills half the pages and comes back with fewer misses. So the gateway's build script hands the
linker the list this question writes, crates/switchyard-gateway/layout/symbols.txt, as
`--symbol-ordering-file` (lld's option, which the toolchain's default linker on x86_64 Linux
has been since Rust 1.90; the script first checks that the build's linker takes it); see
docs/BENCHMARKS.md for what it buys.

The list is the functions of the release build that ran under callgrind (`--demangle=no`, the
names the linker knows) while it served the loads of `bench/run instructions`, over a plain and
a TLS upstream: a non-streamed chat completion, a stream of one chunk and one of 20 (1 ms apart
here, to be quick), after a warm-up; then the same loads as Anthropic messages over the plain
upstream. Most ran first, the Chat Completions path's functions before those only the Messages
path runs. Names follow the code, the dependency versions and the compiler; one that is gone is
skipped by the linker, so a stale list costs nothing but its benefit. `--check` says how much of
it the current release build still has.

    bench/run layout              # rewrite the list from this tree's release build (the build,
                                  # then under a minute)
    bench/run layout --check      # how much of the list the release build has, and how packed

Needs `valgrind` (apt-get install -y valgrind, as root) and `openssl`. Everything listens on
127.0.0.1 and stops by itself.
"""

import os
import shutil
import subprocess
import tempfile

from benchkit import layout, services
from benchkit.gateway import Switchyard, Target, start_mock
from benchkit.tls import certificates

SUMMARY = "write (or --check) the request path's function list the release link lays side by side"

REPO = services.REPO
SYMBOLS = os.path.join(REPO, "crates", "switchyard-gateway", "layout", "symbols.txt")
LOADS = {
    "request": {"scenario": "ok", "args": [], "count": 100},
    "stream-1": {"scenario": "ok~chunks=1", "args": ["--stream"], "count": 100},
    "stream-20": {"scenario": "ok~chunks=20~gap=1ms", "args": ["--stream"], "count": 30},
}
# Each dialect's path through the gateway: where a client sends, the provider kind, and the
# upstreams it is profiled over.
DIALECTS = {
    "openai": {"path": "/v1/chat/completions", "kind": "openai_compatible", "upstreams": ["plain", "tls"]},
    "anthropic": {"path": "/v1/messages", "kind": "anthropic", "upstreams": ["plain"]},
}
WARMUP = 20
# Below this share of the list found in the binary, --check fails: the list is stale.
FRESH = 0.9


def arguments(p):
    p.add_argument("--check", action="store_true", help="only say how much of the list the release build has")


def route(dialect, upstream, spec):
    return f"{dialect}-{upstream}-{spec['scenario']}"


def gateway_under_callgrind(binary, folder, mocks, out):
    """The release build under callgrind, a route per dialect, upstream and load; not started."""
    gateway = Switchyard(binary, folder, wrapper=["valgrind", "--tool=callgrind", "--demangle=no",
                                                  f"--callgrind-out-file={out}"])
    for dialect, way in DIALECTS.items():
        for upstream in way["upstreams"]:
            for spec in LOADS.values():
                gateway.route(route(dialect, upstream, spec), [Target(mocks[upstream], spec["scenario"], way["kind"])])
    return gateway


def profile(bins, folder, mocks):
    """{dialect: {symbol: own instructions}} of the release build over every load and upstream."""
    out = os.path.join(folder, "switchyard.callgrind")
    gateway = gateway_under_callgrind(bins["switchyard"], folder, mocks, out)
    costs = {dialect: {} for dialect in DIALECTS}
    try:
        gateway.start(timeout=120)
        url, model = gateway.endpoint(route("openai", "plain", LOADS["request"]))
        services.wait_until_answers(gateway.service, url, services.chat_body(model), timeout=120)
        dump = 0
        for dialect, way in DIALECTS.items():
            for upstream in way["upstreams"]:
                for name, spec in LOADS.items():
                    url, model = gateway.endpoint(route(dialect, upstream, spec), way["path"])
                    services.send_counted(bins, url, model, WARMUP, spec["args"])
                    subprocess.run(["callgrind_control", "--zero", str(gateway.pid)], check=True, capture_output=True)
                    services.send_counted(bins, url, model, spec["count"], spec["args"])
                    subprocess.run(["callgrind_control", "--dump", str(gateway.pid)], check=True, capture_output=True)
                    dump += 1
                    with open(f"{out}.{dump}") as f:
                        for symbol, own in layout.functions_run(f, "switchyard").items():
                            costs[dialect][symbol] = costs[dialect].get(symbol, 0) + own
                    print(f"{dialect:<9} {upstream:<6} {name:<10} {len(costs[dialect]):>5} functions", flush=True)
    finally:
        gateway.stop()
    return costs


def check_list(binary, symbols):
    services.need("nm", "binutils")
    table = subprocess.run(["nm", "-S", binary], capture_output=True, text=True, check=True).stdout.splitlines()
    found, size, pages, fewest = layout.placement(symbols, table)
    print(f"{binary}: {found} of the {len(symbols)} functions listed, {size:,} bytes of code "
          f"on {pages} pages of 4 KiB (fewest possible {fewest})")
    if not symbols or found < FRESH * len(symbols):
        raise SystemExit(f"the list is stale ({found} of {len(symbols)} found): run bench/run layout to rewrite it")


def run(args):
    services.install_signal_handlers()
    bins = services.build_release()
    if args.check:
        with open(SYMBOLS) as f:
            check_list(bins["switchyard"], [line.strip() for line in f if line.strip()])
        return
    for tool in ("valgrind", "callgrind_control"):
        services.need(tool, "valgrind")
    folder = tempfile.mkdtemp(prefix="switchyard-layout-")
    try:
        tls = certificates(folder)
        mocks = {"plain": start_mock(bins, folder), "tls": start_mock(bins, folder, tls)}
        costs = profile(bins, folder, mocks)
    finally:
        services.stop_all()
    # The OpenAI dialect's functions first, as they were measured; then those only the
    # Anthropic dialect ran.
    symbols = []
    for dialect in DIALECTS:
        listed = set(symbols)
        symbols += layout.ordered({name: own for name, own in costs[dialect].items() if name not in listed})
    if not symbols:
        raise SystemExit("no function of the binary ran under callgrind: the list is left as it was")
    os.makedirs(os.path.dirname(SYMBOLS), exist_ok=True)
    with open(SYMBOLS, "w") as f:
        f.write("".join(f"{symbol}\n" for symbol in symbols))
    print(f"wrote {len(symbols)} functions to {os.path.relpath(SYMBOLS, REPO)}: the next release build "
          "lays them out (bench/run layout --check then shows how closely)")
    shutil.rmtree(folder, ignore_errors=True)
