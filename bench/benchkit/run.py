"""`bench/run QUESTION [options]`: the one entry to the benchmarks. Each question is a module of
`benchkit.questions`; this parses its options the same way for all and runs it."""

import argparse
import importlib
import sys

from benchkit.questions import QUESTIONS

USAGE = "usage: bench/run QUESTION [options]   (bench/run QUESTION --help for its options)"


def module(name):
    return importlib.import_module(f"benchkit.questions.{name}")


def overview():
    """What `bench/run --help` prints: every question with its one line."""
    width = max(len(name) for name in QUESTIONS)
    lines = [USAGE, "", "Questions:"]
    lines += [f"  {name:<{width}}  {module(name).SUMMARY}" for name in QUESTIONS]
    lines += ["", "Method and current results: docs/BENCHMARKS.md; the dated runs: docs/bench/journal/."]
    return "\n".join(lines)


def parser(name):
    """The option parser of question `name`."""
    question = module(name)
    p = argparse.ArgumentParser(prog=f"bench/run {name}", description=question.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    question.arguments(p)
    return p


def parse(name, argv):
    """Question `name`'s options from `argv`, checked; a bad one exits through its parser."""
    p = parser(name)
    args = p.parse_args(argv)
    question = module(name)
    if hasattr(question, "check"):
        question.check(p, args)
    return args


def main(argv=None):
    """Runs the question `argv` names with the rest of `argv` as its options; the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(overview(), file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name in ("-h", "--help", "help"):
        print(overview())
        return 0
    if name not in QUESTIONS:
        print(f"bench/run: unknown question {name!r}; the questions are {', '.join(QUESTIONS)} "
              "(bench/run --help says what each answers)", file=sys.stderr)
        return 2
    args = parse(name, rest)
    return module(name).run(args) or 0
