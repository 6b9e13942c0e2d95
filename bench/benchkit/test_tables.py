"""How the targets table judges a run: `python3 -B -m unittest discover -s bench -t bench` (run by
scripts/test)."""

import unittest

from benchkit import hop, tables


def report(p50, p99=None, throughput=1000.0, ttft=None):
    r = {"throughput": throughput, "ok": 1000, "errors": {},
         "latency_ms": {"p50": p50, "p99": p99 if p99 is not None else 2 * p50}}
    if ttft is not None:
        r["ttft_ms"] = {"p50": ttft}
    return r


def row(scenario, gateway, r):
    return {"scenario": scenario, "gateway": gateway, "status": "ok", "report": r}


def judged(items, prefix):
    [found] = [(value, ok) for name, value, ok in items if name.startswith(prefix)]
    return found


OVERHEAD = "overhead: p50 added over direct ≤ 150 µs (open loop"
SWEEP = "overhead: p50 added over direct ≤ 150 µs (sweep"
TTFT = "streaming: TTFT"


class Targets(unittest.TestCase):
    def rows(self, direct, nginx, switchyard):
        return [row("overhead-1000", "direct", report(direct)),
                row("overhead-1000", "nginx", report(nginx)),
                row("overhead-1000", "switchyard", report(switchyard)),
                row("stream-32", "direct", report(100, ttft=0.30)),
                row("stream-32", "nginx", report(100, ttft=0.45)),
                row("stream-32", "switchyard", report(100, ttft=0.62))]

    def test_added_latency_is_judged_against_the_limit_with_nginx_beside_it(self):
        items = tables.targets(self.rows(direct=0.10, nginx=0.23, switchyard=0.24), {}, None)
        self.assertEqual(judged(items, OVERHEAD), ("+140 µs (nginx-proxy +130 µs)", True))
        items = tables.targets(self.rows(direct=0.10, nginx=0.23, switchyard=0.26), {}, None)
        self.assertEqual(judged(items, OVERHEAD), ("+160 µs (nginx-proxy +130 µs)", False))
        self.assertEqual(judged(items, TTFT), ("+320 µs (nginx-proxy +150 µs)", False))

    def test_issue_17s_ttft_is_judged_against_nginx_proxys_over_plain_http_and_behind_tls(self):
        rows = self.rows(direct=0.10, nginx=0.23, switchyard=0.24) + [
            row("stream-32-tls", "direct", report(100, ttft=0.30)),
            row("stream-32-tls", "nginx", report(100, ttft=0.45)),
            row("stream-32-tls", "switchyard", report(100, ttft=0.53))]
        items = tables.targets(rows, {}, None)
        self.assertEqual(judged(items, "streaming (plain)"), ("+170 µs beyond nginx-proxy's", False))
        self.assertEqual(judged(items, "streaming (TLS)"), ("+80 µs beyond nginx-proxy's", True))
        # Without nginx-proxy's row there is nothing to judge against.
        items = tables.targets([r for r in rows if r["gateway"] != "nginx"], {}, None)
        self.assertEqual([n for n, _, _ in items if n.startswith("streaming (")], [])

    def test_issue_17s_ttft_is_judged_on_the_interleaved_rounds_when_the_run_has_them(self):
        # One row per gateway, run minutes apart, reads Switchyard 170 µs beyond nginx-proxy ...
        rows = self.rows(direct=0.10, nginx=0.23, switchyard=0.24)
        # ... where the rounds, each pairing the two within minutes, read +40, +130 and +60 over
        # plain HTTP (median 60) and +150, +90 and +120 behind TLS (median 120).
        stream = {"plain": ([0.30, 0.50, 0.36], [0.34, 0.63, 0.42]), "tls": ([0.30, 0.40, 0.35], [0.45, 0.49, 0.47])}
        results = {}
        for upstream in hop.UPSTREAMS:
            for load in hop.LOADS:
                nginx, switchyard = stream[upstream] if load == "stream" else ([0.2] * 3, [0.25] * 3)
                for gateway, values in (("direct", [0.1] * 3), ("nginx", nginx), ("switchyard", switchyard)):
                    results[(upstream, load, gateway)] = [{"ms": v, "cpu_us": 10.0, "errors": 0, "conns": 0}
                                                          for v in values]
        rounds = {"status": "ok", "rounds": 3, "results": hop.to_json(results)}
        items = tables.targets(rows, {}, None, rounds)
        self.assertEqual(judged(items, "streaming (plain)"),
                         ("+60 µs beyond nginx-proxy's (median of 3 interleaved rounds, +40 to +130)", True))
        self.assertEqual(judged(items, "streaming (TLS)"),
                         ("+120 µs beyond nginx-proxy's (median of 3 interleaved rounds, +90 to +150)", False))
        # Rounds that failed leave the judgement to the rows.
        items = tables.targets(rows, {}, None, {"status": "failed", "reason": "rounds failed: x"})
        self.assertEqual(judged(items, "streaming (plain)"), ("+170 µs beyond nginx-proxy's", False))

    def test_the_rounds_table_pairs_each_round_and_shows_the_spread(self):
        results = {(u, load, g): [{"ms": 0.1, "cpu_us": None, "errors": 0, "conns": 0}] * 2
                   for u in hop.UPSTREAMS for load in hop.LOADS for g in ("direct", "nginx", "switchyard")}
        results[("plain", "stream", "nginx")] = [{"ms": 0.3, "cpu_us": 20.0, "errors": 0, "conns": 0},
                                                 {"ms": 0.5, "cpu_us": 22.0, "errors": 0, "conns": 0}]
        results[("plain", "stream", "switchyard")] = [{"ms": 0.45, "cpu_us": 30.0, "errors": 1, "conns": 0},
                                                      {"ms": 0.55, "cpu_us": 32.0, "errors": 0, "conns": 0}]
        self.assertEqual([round(g) for g in hop.gaps(results, "switchyard")[("plain", "stream")]], [150, 50])
        text = hop.table(results, 2, ["direct", "nginx", "switchyard"])
        self.assertIn("| plain | stream | switchyard | 0.500 | +400 | +100 (+50 to +150) | 31.0 | 0 | 1 |", text)
        self.assertIn("| plain | stream | nginx | 0.400 | +300 |  | 21.0 | 0 | 0 |", text)
        self.assertTrue(text.endswith("Medians of 2 interleaved rounds."))
        self.assertEqual(hop.from_json(hop.to_json(results)), results)

    def test_a_table_of_one_round_says_it_is_one_round_not_a_median(self):
        results = {(u, load, g): [{"ms": 0.1, "cpu_us": None, "errors": 0, "conns": 0}]
                   for u in hop.UPSTREAMS for load in hop.LOADS for g in ("direct", "nginx", "switchyard")}
        text = hop.table(results, 1, ["direct", "nginx", "switchyard"], pin=True)
        self.assertTrue(text.endswith("One interleaved round, gateways on a core of their own (--pin)."))

    def test_a_gateway_faster_than_the_mock_itself_is_a_disturbed_baseline_not_a_pass(self):
        sweep = {g: [{"rate": 1000, "held": True, "report": report(p50)}]
                 for g, p50 in (("direct", 1.13), ("nginx", 0.29), ("switchyard", 0.31))}
        value, ok = judged(tables.targets([], sweep, None), SWEEP)
        self.assertEqual(value, "-820 µs (nginx-proxy -840 µs)")
        self.assertEqual(ok, "disturbed")
        self.assertIn("not judged", tables.targets_lines([("t", value, ok)], markdown=True))

    def test_a_sweep_point_not_held_is_not_used(self):
        sweep = {"direct": [{"rate": 1000, "held": True, "report": report(0.1)}],
                 "switchyard": [{"rate": 1000, "held": False, "report": report(0.2)}]}
        self.assertEqual([n for n, _, _ in tables.targets([], sweep, None) if n.startswith(SWEEP)], [])


if __name__ == "__main__":
    unittest.main()
