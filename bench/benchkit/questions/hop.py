"""What one hop through Switchyard adds, beside nginx-proxy, in front of an upstream spoken to
over plain HTTP and over TLS, in interleaved rounds with medians.

Every real provider is behind TLS: a gateway that opened a new upstream connection per stream
would pay a handshake on most requests, which a plain-HTTP benchmark never shows. So the mock
runs twice, plainly and behind TLS with a certificate from a throwaway authority (made here
with `openssl`), which nginx (`proxy_ssl_trusted_certificate`) and Switchyard (`ca_file`) are
configured to trust. Each round loads, in an order that rotates from round to round:

- direct: the driver against the mock (over TLS for the TLS rows, with `--ca-file`);
- nginx: Debian's nginx, keep-alive upstream (`keepalive 512`, TLS sessions reused);
- switchyard: `switchyard serve` (release build).

with two loads each: **stream**, SSE of 20 chunks 5 ms apart on 32 connections, closed loop
(time to first content chunk, CPU per chunk); **request**, non-streamed at 1000 requests/s open
loop on 32 connections (p50 latency, CPU per request). `added` is a gateway's median minus
direct's over the same upstream; `beyond nginx-proxy` is what a build's p50 exceeds nginx-proxy's
by in the same round, its median and range over the rounds (paired within a round, so that the
machine's drift between rounds cancels); `upstream conns` counts the connections the mock
accepted during the row (handshakes, behind TLS). The rounds are `benchkit/hop.py`'s, which
`bench/run compare` runs too.

    bench/run hop                        # 3 rounds, 5 s per row (about 4 minutes)
    bench/run hop --quick                # 1 round of 2 s rows: a smoke run of about a minute
    bench/run hop --rounds 5 --duration 8s
    bench/run hop --connections 1        # the hop alone, without CPU contention
    bench/run hop --connections 1 --pin  # and each gateway on a core of its own
    bench/run hop --bin before=/tmp/switchyard-old --bin after=target/release/switchyard
                                         # two builds side by side, in the same rounds

With `--pin` every gateway runs on the first core and the mocks and the driver on the second
(`taskset`), as in a deployment, where neither the clients nor the providers run on the
gateway's cores: on a machine of two cores a gateway otherwise shares its core, and its caches,
with the mock and the driver, and a one-connection row measures as much how far they evicted the
gateway's code and data as what the gateway does.

Needs `nginx` (apt-get install nginx, as root, when missing) and `openssl`. Everything listens
on 127.0.0.1 and stops by itself; configs, logs and raw reports go to a temporary folder.
"""

import json
import os
import shutil
import tempfile

from benchkit import hop, services
from benchkit.gateway import start_mock
from benchkit.tls import certificates

SUMMARY = "what one hop adds beside nginx-proxy, plain and TLS upstream, in interleaved rounds"


def arguments(p):
    p.add_argument("--quick", action="store_true", help="1 round of 2 s rows unless given (a smoke run)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 1)")
    p.add_argument("--duration", help="load per row, warm-up second included (default 5s; --quick 2s)")
    p.add_argument("--connections", type=int, default=32,
                   help="connections of each load (default 32; 1 shows the hop without contention)")
    p.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                   help="a switchyard binary to measure, named (repeatable; default: this tree's release build)")
    p.add_argument("--pin", action="store_true",
                   help="gateways on the first core, the mocks and the driver on the second (taskset)")


def check(p, args):
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    args.duration = args.duration or ("2s" if args.quick else "5s")
    if args.pin and (os.cpu_count() or 1) < 2:
        p.error("--pin needs two cores")
    if args.pin and not shutil.which("taskset"):
        p.error("--pin needs taskset (apt-get install -y util-linux)")
    args.binaries = services.named_binaries(p, args.bin, hop.RESERVED)
    if not 1 <= args.rounds <= 20:
        p.error("--rounds must be between 1 and 20")
    if (services.seconds(args.duration) or 0) <= 1:
        p.error(f"--duration {args.duration!r}: a row's first second is its warm-up, so give more than 1s "
                "(e.g. 2s, 1500ms)")
    if not 1 <= args.connections <= 256:
        p.error("--connections must be between 1 and 256")


def run(args):
    services.install_signal_handlers()
    services.need("nginx", "nginx")
    bins = services.build_release()
    folder = tempfile.mkdtemp(prefix="switchyard-hop-")
    try:
        tls = certificates(folder)
        core = hop.LOAD_CORE if args.pin else None
        mocks = {"plain": start_mock(bins, folder, core=core), "tls": start_mock(bins, folder, tls, core=core)}
        builds = args.binaries or {"switchyard": bins["switchyard"]}
        settings = hop.Settings(args.duration, args.connections, args.pin)
        try:
            results, gateways = hop.measure(bins, folder, settings, mocks, builds, args.rounds,
                                            lambda line: print(line, flush=True))
        except (RuntimeError, services.StartError) as e:
            raise SystemExit(str(e))
        print()
        print(hop.table(results, args.rounds, gateways, args.pin))
        with open(os.path.join(folder, "results.json"), "w") as f:
            json.dump(hop.to_json(results), f, indent=1)
        print(f"\nraw results in {folder}")
    finally:
        services.stop_all()
