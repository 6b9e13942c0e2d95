"""The first token's legs in callgrind dumps cut at system calls (`bench/run instructions --legs`).

The gateway runs under callgrind with `--dump-before=` each read and write call: each dump
holds the instructions that ran since the one before, up to the call that triggered it."""

import os

READS, WRITES = ("recv", "recvfrom"), ("writev",)
# What only the reading of a client's request runs: httparse's request-line URI matcher
# (hyper), nginx's request-line parser.
REQUEST_MARKS = ("match_uri", "ngx_http_parse_request_line")


def numbers(out):
    """The numbers N of the callgrind dumps `out`.N written so far, in order."""
    folder, prefix = os.path.split(out)
    return sorted(int(name.rsplit(".", 1)[1]) for name in os.listdir(folder)
                  if name.startswith(prefix + ".") and name.rsplit(".", 1)[1].isdigit())


def dumps(out, first):
    """(trigger, instructions, text) of each callgrind dump `out`.N from N = `first` on, in
    order; the trigger is the call a `--dump-before` named, or "" for another dump."""
    for number in (n for n in numbers(out) if n >= first):
        with open(f"{out}.{number}") as f:
            text = f.read()
        lines = text.splitlines()
        trigger = next((line.split("--dump-before=", 1)[1].strip() for line in lines
                        if line.startswith("desc: Trigger:") and "--dump-before=" in line), "")
        total = next((int(line.split()[1]) for line in lines if line.startswith(("summary:", "totals:"))), None)
        if total is None:
            raise SystemExit(f"no totals in {out}.{number}")
        yield trigger, total, text


def first_token_legs(parts):
    """The two legs of each stream's first token, from the dumps `parts`: [(request read →
    upstream write, answer read → client write)] in instructions. A span runs from a read to
    the next write (a dump holds what ran before its call began); the span in which a client's
    request was parsed is the first leg, and the span after it the second."""
    spans, current = [], None
    for trigger, total, text in parts:
        if current is None:
            if trigger in READS:
                current = [0, False]
            continue
        current[0] += total
        current[1] = current[1] or any(mark in text for mark in REQUEST_MARKS)
        if trigger in WRITES:
            spans.append(tuple(current))
            current = None
    return [(count, spans[i + 1][0]) for i, (count, request) in enumerate(spans[:-1]) if request]
