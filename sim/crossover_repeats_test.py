"""sim/crossover_repeats.py: the median of repeats, what it keeps of each,
and one clear refusal for repeats that are not of one sweep."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crossover_repeats  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def sweep(times, retrans=(0, 0), alpha=100.0, iters=8):
    """Two points of one run (N = 4 at 1 ms): `times` their time_us."""
    context = {"iters": iters, "warmup": 2, "link_bits_per_s": 1000000000,
               "relay_latency_us": 1000.0, "workers": 4, "allreduce_eager_kb": 256,
               "ring_chunk_kb": 256, "ring_socket_buffer_kb": 4096,
               "executable": "allreduce_benchmark", "prediction_link_alpha_us": alpha,
               "prediction_link_bytes_per_s": 1.2e8, "load_before": 1.0,
               "date": "2026-11-28T03:00:00+00:00"}
    points = [{"latency_us": 1000.0, "workers": 4, "bytes": b, "algorithm": "gradsync_tree",
               "time_us": t, "cpu_share": 0.2, "retrans_segments": r}
              for b, t, r in zip((4096, 65536), times, retrans)]
    return {"points": points, "runs": [{"latency_us": 1000.0, "workers": 4,
                                        "context": context}]}


class MergeTest(unittest.TestCase):
    def test_each_point_is_its_repeats_median(self):
        merged = crossover_repeats.merge(
            [sweep((100, 400), alpha=90), sweep((130, 380), (0, 3), alpha=110),
             sweep((90, 1000), alpha=100)])
        first, second = merged["points"]
        self.assertEqual(first["time_us"], 100)
        self.assertEqual(first["time_us_repeats"], [100, 130, 90])
        self.assertEqual(second["time_us"], 400)
        # One repeat that retransmitted marks the point.
        self.assertEqual(second["retrans_segments"], 3)
        self.assertEqual(merged["runs"][0]["context"]["prediction_link_alpha_us"], 100)
        self.assertEqual(merged["repeats"], 3)
        # 100, 90 within 10 % of 100; 400, 380 of 400: 4 of 6.
        self.assertEqual(crossover_repeats.reproducibility(merged), (4, 6))

    def test_repeats_of_other_sweeps_are_refused(self):
        other_points = sweep((100, 400))
        other_points["points"][1]["bytes"] = 1 << 20
        with self.assertRaisesRegex(crossover_repeats.RepeatsError,
                                    "hold different points.*1048576"):
            crossover_repeats.merge([sweep((100, 400)), other_points])
        with self.assertRaisesRegex(crossover_repeats.RepeatsError,
                                    "has iters=3, repeat 1 8"):
            crossover_repeats.merge([sweep((100, 400)), sweep((100, 400), iters=3)])
        twice = sweep((100, 400))
        twice["points"].append(dict(twice["points"][0]))
        with self.assertRaisesRegex(crossover_repeats.RepeatsError, "appears twice"):
            crossover_repeats.merge([sweep((100, 400)), twice])
        with self.assertRaisesRegex(crossover_repeats.RepeatsError, "two sweeps or more"):
            crossover_repeats.merge([sweep((100, 400))])

    def test_the_command_writes_the_merge_or_one_error(self):
        with tempfile.TemporaryDirectory() as directory:
            paths = []
            for i, times in enumerate(((100, 400), (120, 420))):
                paths.append(os.path.join(directory, f"r{i}.json"))
                with open(paths[-1], "w") as f:
                    json.dump(sweep(times), f)
            out = os.path.join(directory, "merged", "points.json")
            script = os.path.join(HERE, "crossover_repeats.py")
            done = subprocess.run([sys.executable, script, f"--out={out}", *paths],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(out) as f:
                self.assertEqual(json.load(f)["points"][0]["time_us"], 110)
            self.assertIn("2 points, 2 repeats each", done.stdout)
            missing = os.path.join(directory, "nothing.json")
            done = subprocess.run([sys.executable, script, f"--out={out}.2", paths[0],
                                   missing], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("nothing.json", done.stderr)
            self.assertFalse(os.path.exists(out + ".2"))


if __name__ == "__main__":
    unittest.main()
