"""Unit tests of cutting callgrind dumps into the first token's legs."""

import os
import tempfile
import unittest

from benchkit import legs

REQUEST = "fn=(7) httparse::simd::avx2::match_uri_vectored\n"


class FirstTokenLegs(unittest.TestCase):
    def test_a_stream_is_its_request_span_and_the_span_after_it(self):
        parts = [
            ("epoll_wait", 900, ""), ("recv", 1_000, ""),    # the wake before the client's read
            ("recv", 50, REQUEST), ("writev", 30_000, ""),   # request read → upstream write
            ("recv", 5_000, ""),                             # waiting for the upstream
            ("writev", 45_000, ""),                          # answer read → client write
            ("recv", 900, ""), ("writev", 12_000, ""),       # a later chunk
            ("recv", 900, ""), ("writev", 40_000, ""),       # the last chunk and the end
        ]
        self.assertEqual(legs.first_token_legs(parts), [(30_050, 45_000)])

    def test_each_stream_of_a_run_is_found_and_a_write_before_any_read_is_not_a_span(self):
        stream = [("recv", 10, ""), ("writev", 100, REQUEST), ("recv", 10, ""), ("writev", 200, "")]
        parts = [("writev", 7, REQUEST), *stream, ("recv", 10, ""), ("writev", 300, ""), *stream]
        self.assertEqual(legs.first_token_legs(parts), [(100, 200), (100, 200)])

    def test_a_request_span_with_no_span_after_it_has_no_second_leg(self):
        self.assertEqual(legs.first_token_legs([("recv", 1, ""), ("writev", 100, REQUEST)]), [])


class Dumps(unittest.TestCase):
    def test_dumps_are_read_in_number_order_from_the_first_asked_for(self):
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "gw.legs")
            for number, trigger, total in [(2, "writev", 30), (10, "recv", 40), (1, "recv", 20)]:
                with open(f"{out}.{number}", "w") as f:
                    f.write(f"desc: Trigger: --dump-before={trigger}\nsummary: {total}\n")
            with open(os.path.join(folder, "gw.legs.log"), "w") as f:
                f.write("not a dump")
            self.assertEqual(legs.numbers(out), [1, 2, 10])
            self.assertEqual([(t, n) for t, n, _ in legs.dumps(out, 2)], [("writev", 30), ("recv", 40)])

    def test_a_dump_without_totals_is_an_error_naming_it(self):
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "gw.legs")
            with open(f"{out}.1", "w") as f:
                f.write("desc: Trigger: --dump-before=recv\n")
            with self.assertRaisesRegex(SystemExit, "gw.legs.1"):
                list(legs.dumps(out, 1))


if __name__ == "__main__":
    unittest.main()
