"""Starts TensorZero's HTTP gateway in-process from its Python wheel and keeps it running.

usage: python tensorzero_gateway.py CONFIG.toml

Prints `listening on BASE_URL` (the gateway binds an ephemeral port) and then sleeps until it
is signalled; `bench/run compare` stops it by its process group."""

import os
import sys
import time

# Set before the import: the wheel reads it when the gateway starts.
os.environ.setdefault("TENSORZERO_DISABLE_PSEUDONYMOUS_USAGE_ANALYTICS", "1")

import tensorzero  # noqa: E402


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    gateway = tensorzero._start_http_gateway(
        config_file=sys.argv[1], clickhouse_url=None, postgres_url=None, valkey_url=None,
        async_setup=False)
    print(f"listening on {gateway.base_url}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
