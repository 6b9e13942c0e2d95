"""User-space instructions per request of Switchyard, beside nginx-proxy, counted by valgrind's
callgrind.

Timings on a shared 2-core machine move by more than a change to the request path does;
instruction counts do not: the same binary, inputs and load count the same instructions
whatever else the machine is doing. So this is the A/B for the request path's code. It is
not a latency figure: the kernel's share of a request (syscalls, wake-ups) is not counted,
and cold caches make an instruction cost more than the count says.

Each gateway runs under callgrind in front of the mock, one request at a time (one
connection); after a warm-up the counters are zeroed, the load runs, and the count is read:

- request: a non-streamed chat completion;
- stream-1: a stream of one content chunk (the role, the chunk, the finish and usage);
- stream-20: a stream of 20 content chunks 5 ms apart (what `bench/run hop` streams).

    bench/run instructions                       # nginx and this tree's release build
    bench/run instructions --quick               # a tenth of the requests: a smoke run
    bench/run instructions --bin before=/tmp/switchyard-old --bin after=target/release/switchyard
    bench/run instructions --no-nginx --keep     # and keep the dumps, to read with
                                                 # callgrind_annotate --inclusive=yes
    bench/run instructions --legs                # the first token's two legs instead

With `--legs` the count is cut where `bench/run legs` cuts its timings, at the system calls: a
dump is written as each `recv`, `recvfrom` and `writev` begins (`--dump-before`), and for each
stream of 3 chunks 300 ms apart (each chunk a read of its own, even at callgrind's pace) it
sums the instructions from the client's request read to the upstream request written, and from
the upstream's answer read (its head, the role chunk and the first content) to the first write
to the client. These are what the time to first token runs beyond the upstream's own time; the
counts of a whole request also hold the rest of the stream and its end.

Needs `valgrind` and `nginx` (apt-get install -y valgrind nginx, as root). Everything listens
on 127.0.0.1 and stops by itself; about three minutes per gateway.
"""

import os
import shutil
import statistics
import subprocess
import tempfile

from benchkit import legs, services
from benchkit.gateway import NginxProxy, Switchyard, Target, start_mock

SUMMARY = "user-space instructions per request (callgrind), beside nginx-proxy; --legs: the first token's legs"

LOADS = {
    "request": {"scenario": "ok", "args": [], "count": 300},
    "stream-1": {"scenario": "ok~chunks=1", "args": ["--stream"], "count": 300},
    "stream-20": {"scenario": "ok~chunks=20~gap=5ms", "args": ["--stream"], "count": 100},
}
WARMUP = 30

# --legs: streams whose every chunk is a read of its own, and the calls that cut them.
LEGS_LOAD = {"scenario": "ok~chunks=3~gap=300ms", "args": ["--stream"], "count": 12, "warmup": 8}


def arguments(p):
    p.add_argument("--quick", action="store_true", help="a tenth of the requests (a smoke run; counts still repeat)")
    p.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                   help="a switchyard binary to count, named (repeatable; default: this tree's release build)")
    p.add_argument("--no-nginx", action="store_true", help="leave nginx out")
    p.add_argument("--legs", action="store_true",
                   help="count the first token's two legs (request read → upstream write, answer read → client write)")
    p.add_argument("--keep", action="store_true",
                   help="keep the callgrind dumps (one a load, for callgrind_annotate) and print their folder")


def check(p, args):
    # nginx's figures and the mock's log sit beside each build's.
    args.binaries = services.named_binaries(p, args.bin, ["nginx", "mock"])
    scale = 10 if args.quick else 1
    args.loads = {name: dict(spec, count=spec["count"] // scale) for name, spec in LOADS.items()}
    args.warmup = WARMUP // scale
    args.legs_load = dict(LEGS_LOAD, count=LEGS_LOAD["count"] // (3 if args.quick else 1))


def callgrind(out, *options):
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *options]


def counted(path):
    """The instruction total of a callgrind dump."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


def control(gateway, what):
    subprocess.run(["callgrind_control", what, str(gateway.pid)], check=True, capture_output=True)


def started(gateway, scenario):
    """Starts `gateway` (under callgrind) and waits until it answers `scenario`."""
    gateway.start(timeout=120)
    url, model = gateway.endpoint(scenario)
    services.wait_until_answers(gateway.service, url, services.chat_body(model), timeout=120)


def count_requests(bins, folder, gateway, args):
    """Instructions per request of each load, for `gateway` started under callgrind."""
    out = os.path.join(folder, f"{gateway.name}.callgrind")
    gateway.wrapper = callgrind(out)
    try:
        started(gateway, args.loads["request"]["scenario"])
        figures = {}
        for dump, (load_name, spec) in enumerate(args.loads.items(), start=1):
            url, model = gateway.endpoint(spec["scenario"])
            services.send_counted(bins, url, model, args.warmup, spec["args"])
            control(gateway, "--zero")
            services.send_counted(bins, url, model, spec["count"], spec["args"])
            control(gateway, "--dump")
            figures[load_name] = counted(f"{out}.{dump}") / spec["count"]
            print(f"{gateway.name:<12} {load_name:<10} {figures[load_name]:>10,.0f} instructions per request", flush=True)
        return figures
    finally:
        gateway.stop()


def count_legs(bins, folder, gateway, args):
    """Medians of the first token's two legs, in instructions, for `gateway` under callgrind."""
    out = os.path.join(folder, f"{gateway.name}.legs")
    load = args.legs_load
    gateway.wrapper = callgrind(out, *[f"--dump-before={call}" for call in legs.READS + legs.WRITES])
    try:
        started(gateway, load["scenario"])
        url, model = gateway.endpoint(load["scenario"])
        services.send_counted(bins, url, model, load["warmup"], load["args"])
        control(gateway, "--dump")
        first = max(legs.numbers(out), default=0) + 1
        services.send_counted(bins, url, model, load["count"], load["args"])
        control(gateway, "--dump")
    finally:
        gateway.stop()
    found = legs.first_token_legs(legs.dumps(out, first))
    if len(found) != load["count"]:
        raise SystemExit(f"{gateway.name}: found the legs of {len(found)} streams in its dumps, not {load['count']}")
    figures = {"request read → upstream write": statistics.median(a for a, _ in found),
               "answer read → client write": statistics.median(b for _, b in found)}
    for leg, count in figures.items():
        print(f"{gateway.name:<12} {leg:<32} {count:>10,.0f} instructions", flush=True)
    return figures


def gateways(folder, mock, binaries, nginx):
    """The gateways to count, not yet started: nginx-proxy (one process) and each build, with a
    route per load named by its scenario."""
    out = [NginxProxy(folder, mock, one_process=True)] if nginx else []
    for name, path in binaries.items():
        gateway = Switchyard(path, folder, name)
        for spec in [*LOADS.values(), LEGS_LOAD]:
            gateway.route(spec["scenario"], [Target(mock, spec["scenario"])])
        out.append(gateway)
    return out


def print_table(results, args, folder):
    names = list(results)
    rows = results[names[0]] if names else {}
    print()
    print(f"| {'leg' if args.legs else 'load'} | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for row in rows:
        print(f"| {row} | " + " | ".join(f"{results[n][row]:,.0f}" for n in names) + " |")
    if args.legs:
        print("\nUser-space instructions of the first token's legs (callgrind), medians over "
              f"{args.legs_load['count']} streams, one connection.")
    else:
        print("\nUser-space instructions per request (callgrind), one connection.")
    if args.keep:
        kept = "<gateway>.legs.<n>, one a system call" if args.legs else "<gateway>.callgrind.<n>, n = 1 for the first load"
        print(f"callgrind dumps kept in {folder} ({kept})")


def run(args):
    services.install_signal_handlers()
    services.need("valgrind", "valgrind")
    services.need("callgrind_control", "valgrind")
    nginx = not args.no_nginx and services.need("nginx", "nginx")
    bins = services.build_release()
    binaries = args.binaries or {"switchyard": bins["switchyard"]}
    folder = tempfile.mkdtemp(prefix="switchyard-instructions-")
    count = count_legs if args.legs else count_requests
    results = {}
    try:
        mock = start_mock(bins, folder)
        for gateway in gateways(folder, mock, binaries, nginx):
            results[gateway.name] = count(bins, folder, gateway, args)
    finally:
        services.stop_all()
    print_table(results, args, folder)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
