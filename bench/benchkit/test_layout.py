"""Unit tests of reading callgrind dumps for the release binary's layout."""

import unittest

from benchkit import layout

# A dump in callgrind's compressed form: names given once, then by id; a call's inclusive cost
# on the line after `calls=`; a function of another object (libc) and the names callgrind
# makes up left out, a recursive call's cycle mark taken off.
DUMP = """\
version: 1
creator: callgrind-3.19.0
events: Ir
ob=(1) /build/target/release/switchyard
fl=(1) src/main.rs
fn=(1) _RNvCs1_4main5serve
10 7
+2 3
cfn=(2) _RNvCs1_4main4read
calls=4 20
* 400
ob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(2) memcpy.S
fn=(3) __memcpy_avx_unaligned_erms
5 90
ob=(1)
fl=(1)
fn=(2)
20 100
fi=(3) src/inlined.rs
-1 20
fn=(4) _RNvCs1_4main4idle
30 0
fn=(5) (below main)
1 9
fn=(7) _RNvCs1_4main4read'2
3 30
fn=(6) 0x000000000001ab70
1 4
fn=(1)
12 5
totals: 625
"""


class FunctionsRunTest(unittest.TestCase):
    def test_own_costs_of_the_binarys_functions(self):
        costs = layout.functions_run(DUMP.splitlines(True), "switchyard")
        self.assertEqual(dict(costs), {
            "_RNvCs1_4main5serve": 15,  # 7 + 3 + 5; the call's 400 is read's, not serve's
            "_RNvCs1_4main4read": 150,  # an inlined file's lines and a recursion are read's
            "_RNvCs1_4main4idle": 0,  # ran, at no cost of its own
        })

    def test_an_object_is_matched_by_its_file_name(self):
        self.assertEqual(layout.functions_run(DUMP.splitlines(True), "release/switchyard").keys(),
                         {"_RNvCs1_4main5serve", "_RNvCs1_4main4read", "_RNvCs1_4main4idle"})
        self.assertEqual(dict(layout.functions_run(DUMP.splitlines(True), "witchyard")), {})

    def test_the_order_is_by_cost_then_name(self):
        self.assertEqual(layout.ordered({"b": 5, "a": 5, "c": 9, "d": 0}), ["c", "a", "b", "d"])


class PlacementTest(unittest.TestCase):
    TABLE = [
        "0000000000001000 0000000000000010 t _Rhot_a\n",
        "0000000000001ff8 0000000000000010 T _Rhot_b\n",  # crosses into the next page
        "0000000000009000 0000000000000001 t _Rhot_c\n",
        "0000000000002000 D _Rno_size\n",
    ]

    def test_pages_touched_against_the_fewest(self):
        found, size, pages, fewest = layout.placement(["_Rhot_a", "_Rhot_b", "_Rhot_c", "_Rgone"], self.TABLE)
        self.assertEqual((found, size, pages, fewest), (3, 33, 3, 1))


if __name__ == "__main__":
    unittest.main()
