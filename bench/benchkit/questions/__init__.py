"""The questions `bench/run` answers, one module each, in the order `bench/run --help` lists them.

Every module has the same shape: its docstring (what `bench/run NAME --help` prints above the
options), `SUMMARY` (the one line of `bench/run --help`), `arguments(parser)` adding its options
to an `argparse` parser, an optional `check(parser, args)` refusing bad combinations through
`parser.error`, and `run(args)`, which returns the exit status (None for 0)."""

QUESTIONS = ["compare", "hop", "instructions", "legs", "layout", "hedging", "tracing", "upstream", "trails", "keys",
             "micro"]
