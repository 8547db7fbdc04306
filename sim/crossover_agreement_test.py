"""sim/crossover_agreement.py: two sets of the sweep's medians compared
point by point over the first set's points that are not CPU-bound, and one
clear refusal for sets of different points."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crossover_agreement  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def medians(times, shares=(0.2, 0.2, 0.2)):
    """Three points of one sweep (N = 4 at 1 ms): `times` their time_us."""
    return {"points": [{"latency_us": 1000.0, "workers": 4, "bytes": b,
                        "algorithm": "gradsync_ring", "time_us": t, "cpu_share": s}
                       for b, t, s in zip((4096, 65536, 1 << 20), times, shares)],
            "runs": []}


class AgreementTest(unittest.TestCase):
    def test_ratios_of_the_points_not_cpu_bound_in_the_first_set(self):
        # The third point is CPU-bound in the first set: left out. Of the
        # others, 105/100 lies within 10 %, 300/250 (1.2) does not. A PS
        # point is not the calibration's: left out.
        first = medians((100, 250, 900), (0.2, 0.3, 0.9))
        second = medians((105, 300, 2000), (0.2, 0.8, 0.9))
        for document in (first, second):
            document["points"].append(dict(document["points"][0], algorithm="gradsync_ps"))
        matched = crossover_agreement.pairs(first, second)
        self.assertEqual([p["bytes"] for p in matched], [4096, 65536])
        self.assertAlmostEqual(matched[0]["ratio"], 1.05)
        self.assertAlmostEqual(matched[1]["ratio"], 1.2)
        # Where the second set calls a point CPU-bound, the pair says so.
        self.assertEqual([p["second_cpu_bound"] for p in matched], [False, True])
        rows = crossover_agreement.summarize(matched)
        self.assertEqual(rows[-1]["latency_us"], "all")
        self.assertEqual((rows[-1]["within_10_percent"], rows[-1]["points"]), (1, 2))
        self.assertEqual(rows[-1]["highest_ratio"], 1.2)
        # Per latency too: here the one latency's row is the same count.
        latency = [r for r in rows if r["latency_us"] == 1000.0 and r["algorithm"] == "all"]
        self.assertEqual((latency[0]["within_10_percent"], latency[0]["points"]), (1, 2))

    def test_sets_of_different_points_are_refused(self):
        other = medians((100, 250, 900))
        other["points"][2]["bytes"] = 16 << 20
        with self.assertRaisesRegex(crossover_agreement.AgreementError,
                                    "different points.*1048576 bytes"):
            crossover_agreement.pairs(medians((100, 250, 900)), other)

    def test_command_writes_the_folder_and_refuses_bad_input_in_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
            for path, times in ((a, (100, 250, 900)), (b, (95, 260, 950))):
                with open(path, "w") as f:
                    json.dump(medians(times), f)
            script = os.path.join(HERE, "crossover_agreement.py")
            out = os.path.join(d, "out")
            done = subprocess.run([sys.executable, script, f"--out={out}", a, b],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("3 of 3 points within 10 %", done.stdout)
            with open(os.path.join(out, "points.json")) as f:
                self.assertEqual(len(json.load(f)["pairs"]), 3)
            self.assertTrue(os.path.exists(os.path.join(out, "manifest.json")))
            done = subprocess.run([sys.executable, script, f"--out={out}", a,
                                   os.path.join(d, "missing.json")],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 1)
            self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
            self.assertIn("missing.json", done.stderr)


if __name__ == "__main__":
    unittest.main()
