"""Unit tests of `bench/run`: which question runs, and how each parses its options. Nothing is
built or started: every case ends before a question's `run`."""

import contextlib
import io
import os
import subprocess
import sys
import unittest

from benchkit import run
from benchkit.questions import QUESTIONS, compare, micro

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def captured(argv):
    """(exit status, stdout, stderr) of `run.main(argv)`, an argparse exit included."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run.main(argv)
        except SystemExit as e:
            status = e.code
    return status, out.getvalue(), err.getvalue()


class DispatchTest(unittest.TestCase):
    def test_help_lists_every_question_with_its_one_line(self):
        status, out, _ = captured(["--help"])
        self.assertEqual(status, 0)
        for name in QUESTIONS:
            [line] = [line for line in out.splitlines() if line.split()[:1] == [name]]
            self.assertIn(run.module(name).SUMMARY, line)

    def test_an_unknown_question_fails_naming_the_known_ones(self):
        status, out, err = captured(["speed"])
        self.assertEqual(status, 2)
        self.assertEqual(out, "")
        self.assertIn("'speed'", err)
        for name in QUESTIONS:
            self.assertIn(name, err)

    def test_no_question_fails_with_the_list(self):
        status, _, err = captured([])
        self.assertEqual(status, 2)
        self.assertIn("hop", err)

    def test_each_question_has_its_own_help_under_bench_run(self):
        for name in QUESTIONS:
            status, out, _ = captured([name, "--help"])
            self.assertEqual(status, 0, name)
            self.assertTrue(out.startswith(f"usage: bench/run {name}"), name)

    def test_every_question_has_the_same_shape(self):
        for name in QUESTIONS:
            question = run.module(name)
            self.assertTrue(question.__doc__ and callable(question.arguments) and callable(question.run), name)
            self.assertNotIn("\n", question.SUMMARY, name)
            self.assertLessEqual(len(question.SUMMARY), 110, name)

    def test_a_bad_option_is_refused_by_its_question_before_anything_runs(self):
        for argv in (["hop", "--rounds", "0"], ["compare", "--only", "nginx,haproxy"], ["tracing", "--rate", "-1"],
                     ["hop", "--bin", "nginx=/bin/sh"], ["hop", "--duration", "1s"], ["hop", "--duration", "5x"]):
            status, _, err = captured(argv)
            self.assertEqual(status, 2, argv)
            self.assertIn(f"bench/run {argv[0]}: error:", err)

    def test_the_entry_script_runs_the_dispatcher(self):
        done = subprocess.run([sys.executable, os.path.join(BENCH, "run"), "--help"], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("instructions", done.stdout)
        failed = subprocess.run([sys.executable, os.path.join(BENCH, "run"), "speed"], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(failed.returncode, 2)


class QuickTest(unittest.TestCase):
    def test_quick_shortens_a_question_and_what_is_given_stands(self):
        args = run.parse("hop", ["--quick"])
        self.assertEqual((args.rounds, args.duration), (1, "2s"))
        args = run.parse("hop", ["--quick", "--rounds", "4"])
        self.assertEqual((args.rounds, args.duration), (4, "2s"))
        args = run.parse("hop", [])
        self.assertEqual((args.rounds, args.duration), (3, "5s"))

    def test_a_row_longer_than_its_warm_up_second_is_taken_in_any_unit_the_driver_reads(self):
        for duration in ("1500ms", "2s", "2", "0.5m"):
            self.assertEqual(run.parse("hop", ["--duration", duration]).duration, duration)

    def test_quick_counts_fewer_requests_of_every_load(self):
        quick, full = run.parse("instructions", ["--quick"]), run.parse("instructions", [])
        for load in full.loads:
            self.assertLess(quick.loads[load]["count"], full.loads[load]["count"])
            self.assertGreater(quick.loads[load]["count"], 0)

    def test_a_quick_comparison_prints_and_leaves_the_docs_alone(self):
        self.assertFalse(run.parse("compare", ["--quick"]).docs)
        self.assertTrue(run.parse("compare", []).docs)
        self.assertFalse(run.parse("compare", ["--only", "switchyard,nginx"]).docs)


class MicroTest(unittest.TestCase):
    def test_every_micro_benchmark_is_an_example_and_every_example_is_listed(self):
        examples = sorted(f[:-3] for f in os.listdir(micro.EXAMPLES) if f.endswith(".rs"))
        self.assertEqual(examples, sorted(micro.BENCHMARKS))

    def test_a_micro_benchmark_runs_in_release_with_its_own_arguments(self):
        args = run.parse("micro", ["pacing", "1000", "--fast"])
        self.assertEqual(micro.command(args.name, args.rest),
                         ["cargo", "run", "--release", "--quiet", "-p", "switchyard-bench", "--example", "pacing",
                          "--", "1000", "--fast"])


class ResultsSectionTest(unittest.TestCase):
    def test_the_results_go_between_the_markers_and_the_rest_stays(self):
        text = f"# Benchmarks\n\nMethod.\n\n{compare.START}\nold\n{compare.END}\n\nAfter.\n"
        self.assertEqual(compare.with_results(text, "new"),
                         f"# Benchmarks\n\nMethod.\n\n{compare.START}\nnew\n{compare.END}\n\nAfter.\n")

    def test_without_markers_the_results_are_added_at_the_end(self):
        self.assertEqual(compare.with_results("# Benchmarks\n\nMethod.\n", "new"),
                         f"# Benchmarks\n\nMethod.\n\n## Results\n\n{compare.START}\nnew\n{compare.END}\n")


if __name__ == "__main__":
    unittest.main()
