#!/usr/bin/python3
"""allreduce_crossover.py's reading of benchmark JSON, its verdicts and its
tables, on a canned run (no benchmark is started)."""
import unittest

import allreduce_crossover as crossover
import cost_model


def row(algorithm, size, time_us, cpu_us=100.0, predicted_us=0.0, **extra):
    entry = {"name": f"{algorithm}/{size}", "bytes": size, "real_time": time_us,
             "cpu_us_all_ranks": cpu_us, "wrong": 0, "predicted_us": predicted_us}
    entry.update(extra)
    return entry


DOCUMENT = {
    "context": {"workers": 4, "prediction_link_alpha_us": 1000.0,
                "prediction_link_bytes_per_s": 1.25e8, "link_bits_per_s": 1e9},
    "benchmarks": [
        row("gradsync_ring", 4096, 6000, predicted_us=6000),
        row("gradsync_tree", 4096, 4000, predicted_us=4400),
        row("gradsync_allreduce", 4096, 4100, predicted_us=4400),
        row("gradsync_ps", 4096, 3000, cpu_us=3500, ps_key_bytes=4096,
            ps_largest_share=1.0),
        row("gradsync_ring", 1 << 20, 14000, predicted_us=14000),
        row("gradsync_tree", 1 << 20, 26000, predicted_us=21000, retrans_segments=1234,
            busiest_link_share=0.83),
        row("gradsync_allreduce", 1 << 20, 14500, predicted_us=14000),
    ],
}


class Crossover(unittest.TestCase):
    def setUp(self):
        self.points = crossover.points_from_run(DOCUMENT, 1000, cores=2)

    def test_family_predictions_come_from_the_benchmark_and_the_ps_from_the_model(self):
        by_key = {(p["algorithm"], p["bytes"]): p for p in self.points}
        self.assertEqual(by_key[("gradsync_tree", 4096)]["predicted_us"], 4400)
        link = cost_model.Link(1e-3, 1.25e8)
        self.assertAlmostEqual(
            by_key[("gradsync_ps", 4096)]["predicted_us"],
            1e6 * cost_model.colocated_ps_time(4, 4096, link, last_key=4096,
                                               largest_share=1.0))

    def test_the_measured_busiest_link_is_kept_where_the_benchmark_gave_it(self):
        by_key = {(p["algorithm"], p["bytes"]): p for p in self.points}
        self.assertEqual(by_key[("gradsync_tree", 1 << 20)]["busiest_link_share"], 0.83)
        self.assertIsNone(by_key[("gradsync_ring", 1 << 20)]["busiest_link_share"])

    def test_cpu_share_is_over_the_machine(self):
        ps = next(p for p in self.points if p["algorithm"] == "gradsync_ps")
        self.assertAlmostEqual(ps["cpu_share"], 3500 / 3000 / 2)

    def test_verdict_names_the_fastest_and_compares_the_selector_with_all_reduces_only(self):
        grid = crossover.cells(self.points)
        fastest, ratio, pick, pick_ratio, cpu_bound = crossover.verdict(
            grid[(1000, 4, 4096)], 0.5)
        self.assertEqual(fastest, "gradsync_ps")   # the PS is on the map...
        self.assertAlmostEqual(ratio, 4100 / 4000)  # ...not the selector's yardstick
        self.assertEqual(pick, "gradsync_tree")     # same prediction as the tree's
        self.assertAlmostEqual(pick_ratio, 1.0)
        self.assertTrue(cpu_bound)                  # the PS used 58 % of 2 cores
        fastest, ratio, pick, pick_ratio, cpu_bound = crossover.verdict(
            grid[(1000, 4, 1 << 20)], 0.75)
        self.assertEqual(fastest, "gradsync_ring")
        self.assertAlmostEqual(ratio, 14500 / 14000)
        self.assertEqual(pick, "gradsync_ring")
        self.assertFalse(cpu_bound)

    def test_tables(self):
        text = crossover.markdown(self.points, crossover.DEFAULT_ALGORITHMS.split(","),
                                  0.5, "header")
        self.assertIn("| 1 ms | 4 | ps* | ring |", text)
        self.assertIn("**3.00", text)      # the fastest in bold
        self.assertIn("4.00 (0.91)", text)  # measured over predicted
        self.assertIn("| ring | 1.04 | ring (1.00) |", text)  # selector, its pick

    def test_bars_leave_out_cpu_bound_points_and_count_the_token_bucket_apart(self):
        model, model_burst, selector = crossover.bar_counts(self.points, 0.75)
        # 1 MiB: the ring at 1.00, the tree at 1.24 (outside 15 %).
        self.assertEqual(model["gradsync_ring"], [1, 1])
        self.assertEqual(model["gradsync_tree"], [0, 1])
        # 4 KiB fits the 128 KiB bucket of a 1 Gbit/s link: counted apart.
        self.assertEqual(model_burst["gradsync_tree"], [1, 1])
        # The selector: its pick (the tree, then the ring) within 5 % at
        # both points, and its own row too (1.025 and 1.036 of the best).
        self.assertEqual(selector["all"], [2, 2, 2])
        self.assertEqual(selector["outside"], [1, 1, 1])  # 1 MiB only
        text = crossover.markdown(self.points, crossover.DEFAULT_ALGORITHMS.split(","),
                                  0.75, "header")
        self.assertIn("| tree | 0 of 1 | 1 of 1 |", text)
        self.assertIn("4.00 (0.91)‡", text)
        self.assertIn("| tree 1234 |", text)

    def test_token_bucket(self):
        self.assertEqual(crossover.token_bucket_bytes(1e9), 128 << 10)
        self.assertEqual(crossover.token_bucket_bytes(10e9), 1250000)

    def test_labels(self):
        self.assertEqual(crossover.size_label(64 << 20), "64 MiB")
        self.assertEqual(crossover.size_label(4096), "4 KiB")
        self.assertEqual(crossover.latency_label(20), "20 µs")
        self.assertEqual(crossover.latency_label(5000), "5 ms")


if __name__ == "__main__":
    unittest.main()
