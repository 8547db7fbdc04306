#!/usr/bin/python3
"""tools/render_results.py on made-up pages and data: a page that agrees with
its data passes --check; a number changed in the data or in the page fails
it; rendering rewrites only the marked parts; bad markers are one error;
the points and crossover tables mark CPU-bound points instead of ranking
them; ratios, transcribed manifests, no-data notices and pages outside the
results folder render and check the same way."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_results  # noqa: E402

# The ring's machine share was read over its measured steps, the PS's over
# the whole job (a run from before that window was recorded): marked †.
POINTS = """strategy,workers,servers,step_ms,step_ms_min,step_ms_max,predicted_step_ms,retrans_segments,rto_timeouts,port_drops,job_cpu_fraction,machine_busy_unniced_max,machine_busy_unniced_timed_max
local,1,0,2.609,2.1,4.5,,0,0,0,0.01,0.3,
ring,2,0,209.443,209.404,210.634,211.742,0,0,0,0.04,0.34,0.31
ps,2,2,216.092,211.394,233.187,222.706,2,0,0,0.11,0.40,
"""
SWEEP = '{"manifest": {"git_commit": "abcdef0123", "time": "2026-11-24T23:20:23", "command": "bench/scaling.py --links=100mbit"}}'
PAGE = """# A page

Hand-written prose stays as it is.

<!-- render:table sweep data/run -->
{table}
<!-- render:end -->

The reference stepped in <!-- render:value data/run strategy=local,workers=1 step_ms {{:.1f}} -->{value}<!-- render:end --> ms.
"""
TABLE = """| strategy | N | K | step ms | predicted ms | measured / predicted | retrans. (RTOs) per job | drops | job CPU (whole job) / machine busy |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| ring | 2 | – | 209 (209–211) | 212 | 0.99 | 0 (0) | 0 | 4% / 31% |
| ps, K=N | 2 | 2 | 216 (211–233) | 223 | 0.97 | 2 (0) | 0 | 11% / 40%† |

*Job CPU: the job's processes over the whole job; machine busy over the measured steps (warm-up and start-up left out); † machine busy over the whole job, start-up included (a run from before the measured steps' window was recorded).*"""


class Fixture(unittest.TestCase):
    """A results folder with one sweep (data/run) and one page."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.results = self.dir.name
        os.makedirs(os.path.join(self.results, "data", "run"))
        self.write("data/run/points.csv", POINTS)
        self.write("data/run/sweep.json", SWEEP)
        self.write("page.md", PAGE.format(table=TABLE, value="2.6"))

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        with open(os.path.join(self.results, name), "w") as f:
            f.write(text)

    def read(self, name):
        with open(os.path.join(self.results, name)) as f:
            return f.read()

    def run_main(self, *args):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            code = render_results.main([*args, f"--results_dir={self.results}"])
        return code, stderr.getvalue()

class RenderResultsTest(Fixture):
    def test_a_page_that_agrees_with_its_data_passes(self):
        self.assertEqual(self.run_main("--check"), (0, ""))

    def test_a_number_changed_in_the_data_fails_the_check(self):
        self.write("data/run/points.csv", POINTS.replace("216.092", "226.092"))
        code, stderr = self.run_main("--check")
        self.assertEqual(code, 1)
        self.assertIn("page.md differs from its data", stderr)
        self.assertIn("226 (211–233)", stderr)

    def test_a_number_changed_in_the_page_fails_the_check(self):
        self.write("page.md", PAGE.format(table=TABLE, value="2.4"))
        code, stderr = self.run_main("--check")
        self.assertEqual(code, 1)
        self.assertIn("-The reference stepped in", stderr)

    def test_rendering_rewrites_only_the_marked_parts(self):
        self.write("page.md", PAGE.format(table="| stale |", value="9.9"))
        self.assertEqual(self.run_main()[0], 0)
        self.assertEqual(self.read("page.md"), PAGE.format(table=TABLE, value="2.6"))
        self.assertEqual(self.run_main("--check"), (0, ""))

    def test_bad_markers_are_one_error(self):
        for marker, words in (
                ("<!-- render:table nosuch data/run -->x<!-- render:end -->", "table 'nosuch"),
                ("<!-- render:value data/run strategy=ps,workers=4 step_ms {:.0f} -->x<!-- render:end -->",
                 "selects 0 points"),
                ("<!-- render:value data/run strategy=ring,workers=2 nosuch {:.0f} -->x"
                 "<!-- render:end -->", "has no nosuch"),
                ("<!-- render:table sweep data/missing -->x<!-- render:end -->",
                 "data/missing does not exist"),
                ("<!-- render:provenance data/run/other.csv -->x<!-- render:end -->",
                 "has no manifest (other.manifest.json)"),
                ("<!-- render:nodata extra -->x<!-- render:end -->", "nodata takes no arguments"),
                ("<!-- render:count data/run workers~2 -->x<!-- render:end -->",
                 "each selector is column=value"),
                ("A page with numbers and no marker: 42 ms.", "renders nothing from data"),
                ("<!-- render:chart data/run -->x<!-- render:end -->", "unknown marker")):
            self.write("page.md", marker)
            code, stderr = self.run_main("--check")
            self.assertEqual(code, 2, marker)
            self.assertEqual(len(stderr.strip().splitlines()), 1, marker)
            self.assertIn("page.md: ", stderr)
            self.assertIn(words, stderr, marker)


# A scaling points file of its own name, one point CPU-bound (machine 80 % busy).
OTHER = """strategy,compression,workers,servers,repeats,step_ms,step_ms_min,step_ms_max,exposed_ms,busiest_link_bytes,predicted_step_ms,retrans_segments,port_drops,machine_busy_unniced_max
ring,none,4,0,2,132.07,131.3,132.8,125.8,15000000,130.4,1,0,0.26
ring,topk:0.01,4,0,2,68.1,67.2,69.0,60.0,600063,57.7,3,0,0.84
ps,none,4,4,2,118.6,116.0,122.0,110.0,10000000,92.8,5,1,0.62
"""
OTHER_MANIFEST = ('{"manifest": {"git_commit": "6d286d2", "time": "2026-11-25", '
                  '"command": "bench/scaling.py --links=1gbit", '
                  '"transcribed_from": "the page\'s first text"}}')
# A crossover sweep: one cell clear (the PS fastest), one CPU-bound (ranks at 90 %).
CROSSOVER = """{"points": [
 {"latency_us": 1000.0, "workers": 4, "bytes": 4096, "algorithm": "gradsync_ring", "time_us": 7000, "predicted_us": 7000, "cpu_share": 0.1},
 {"latency_us": 1000.0, "workers": 4, "bytes": 4096, "algorithm": "gradsync_tree", "time_us": 5000, "predicted_us": 4000, "cpu_share": 0.1},
 {"latency_us": 1000.0, "workers": 4, "bytes": 4096, "algorithm": "gradsync_allreduce", "time_us": 5100, "predicted_us": 4000, "cpu_share": 0.1},
 {"latency_us": 1000.0, "workers": 4, "bytes": 4096, "algorithm": "gradsync_ps", "time_us": 2500, "predicted_us": 2000, "cpu_share": 0.4},
 {"latency_us": 1000.0, "workers": 4, "bytes": 65536, "algorithm": "gradsync_ring", "time_us": 9000, "predicted_us": 9000, "cpu_share": 0.2},
 {"latency_us": 1000.0, "workers": 4, "bytes": 65536, "algorithm": "gradsync_tree", "time_us": 8000, "predicted_us": 8000, "cpu_share": 0.2},
 {"latency_us": 1000.0, "workers": 4, "bytes": 65536, "algorithm": "gradsync_ps", "time_us": 6000, "predicted_us": 3000, "cpu_share": 0.9}
]}"""
ACCURACY = """{"strategy": "ring", "workers": 2, "seeds": [1, 2], "rows": [
 {"model": "cnn", "method": "none", "accuracy": [86.19, 88.14], "mean": 87.165, "difference": 0.0},
 {"model": "cnn", "method": "fp16", "accuracy": [86.49, 88.29], "mean": 87.39, "difference": 0.225}]}"""
KINDS_PAGE = """# Kinds

<!-- render:table accuracy data/run/accuracy.json -->
<!-- render:end -->

<!-- render:nodata -->
<!-- render:end -->

<!-- render:provenance data/run/other.csv -->
<!-- render:end -->

<!-- render:table points data/run/other.csv -->
<!-- render:end -->

<!-- render:table crossover data/run/crossover.json -->
<!-- render:end -->

<!-- render:table crossover_points data/run/crossover.json -->
<!-- render:end -->

Ring over PS: <!-- render:ratio data/run/other.csv strategy=ring,compression=none strategy=ps,compression=none step_ms {:.2f} -->x<!-- render:end -->;
over the headline's PS: <!-- render:ratio data/run/other.csv strategy=ring,compression=none data/run@strategy=ps,workers=2 step_ms {:.3f} -->x<!-- render:end -->;
counts: <!-- render:count data/run/crossover.json workers>=4,algorithm!=gradsync_allreduce -->x<!-- render:end --> points,
<!-- render:count data/run/crossover.json bytes>=65536 cpu_bound -->x<!-- render:end --> CPU-bound;
its step over its prediction: <!-- render:ratio data/run/other.csv strategy=ps,compression=none strategy=ps,compression=none step_ms:predicted_step_ms {:.2f} -->x<!-- render:end -->;
the PS at 4 KiB: <!-- render:value data/run/crossover.json workers=4,bytes=4096,algorithm=gradsync_ps time_us {:.0f} -->x<!-- render:end --> µs,
<!-- render:value data/run/crossover.json workers=4,bytes=4096,algorithm=gradsync_ps time_us/1000 {:.1f} -->x<!-- render:end --> ms.
"""


SCHEDULES = """strategy,sweep,workers,servers,model,link,step_ms,exposed_ms,measured_compute_ms,machine_busy_unniced_max
local,,1,0,cnn,100mbit,80,0,80,0.3
ps-colocated,--schedule=fifo,2,2,cnn,100mbit,200,120,70,0.4
ps-colocated,--schedule=priority,2,2,cnn,100mbit,150,70,71,0.5
ps-colocated,--schedule=fifo,2,2,cnn,10mbit,1400,1380,20,0.9
ps-colocated,--schedule=priority,2,2,cnn,10mbit,1410,1385,22,0.2
"""


class SchedulePairsTest(Fixture):
    """fifo beside priority, from one sweep over --schedule."""

    def setUp(self):
        super().setUp()
        self.write("data/run/schedules.csv", SCHEDULES)
        self.write("data/run/schedules.manifest.json", SWEEP)
        self.write("schedules.md", "<!-- render:table schedule_pairs data/run/schedules.csv -->"
                   "<!-- render:end -->\n")
        self.assertEqual(self.run_main()[0], 0)
        self.page = self.read("schedules.md")

    def test_each_pair_is_one_row_with_the_ratio_in_data_order(self):
        self.assertIn("| cnn | 100mbit | ps, colocated | 2 | 200 | 150 | 0.75 | 120 | 70 | 70 | "
                      "71 | 50%† |", self.page)
        self.assertLess(self.page.index("| cnn | 100mbit"), self.page.index("| cnn | 10mbit"))
        self.assertNotIn("| local", self.page)
        self.assertEqual(self.run_main("--check"), (0, ""))

    def test_a_pair_with_a_cpu_bound_point_is_marked(self):
        self.assertIn("| cnn | 10mbit | ps, colocated | 2 | 1400 | 1410 | 1.01 | 1380 | 1385 | "
                      "20 | 22 | 90%† **CPU-bound** |", self.page)


class TableKindsTest(Fixture):
    def setUp(self):
        super().setUp()
        self.write("data/run/other.csv", OTHER)
        self.write("data/run/other.manifest.json", OTHER_MANIFEST)
        self.write("data/run/crossover.json", CROSSOVER)
        self.write("data/run/accuracy.json", ACCURACY)
        self.write("kinds.md", KINDS_PAGE)
        self.assertEqual(self.run_main()[0], 0)
        self.page = self.read("kinds.md")

    def test_every_kind_renders_and_then_checks_clean(self):
        self.assertEqual(self.run_main("--check"), (0, ""))
        self.assertIn("**No data folder.**", self.page)
        self.assertIn("build 6d286d2, 2026-11-25, `bench/scaling.py --links=1gbit` (manifest "
                      "transcribed from the page's first text: the run did not write one)",
                      self.page)
        self.assertIn("Ring over PS: <!-- render:ratio data/run/other.csv strategy=ring,"
                      "compression=none strategy=ps,compression=none step_ms {:.2f} -->1.11<",
                      self.page)
        self.assertIn("step_ms {:.3f} -->0.611<", self.page)  # 132.07 / 216.092
        self.assertIn("step_ms:predicted_step_ms {:.2f} -->1.28<", self.page)  # 118.6 / 92.8
        self.assertIn("algorithm!=gradsync_allreduce -->6<!-- render:end --> points", self.page)
        self.assertIn("bytes>=65536 cpu_bound -->1<!-- render:end --> CPU-bound", self.page)
        self.assertIn("{:.0f} -->2500<!-- render:end --> µs", self.page)
        self.assertIn("time_us/1000 {:.1f} -->2.5<!-- render:end --> ms", self.page)

    def test_the_accuracy_table_reads_the_rows(self):
        self.assertIn("| model | method | seed 1 | seed 2 | mean | mean − none |", self.page)
        self.assertIn("| cnn | none | 86.19 | 88.14 | 87.17 | – |", self.page)
        self.assertIn("| cnn | fp16 | 86.49 | 88.29 | 87.39 | +0.23 |", self.page)

    def test_the_points_table_marks_cpu_bound_points_in_file_order(self):
        self.assertIn("| ring | none | 4 | – | 2 | 132.1 (131.3–132.8) | 125.8 | 15.00 | 130.4 | "
                      "1 (0) | 26%† |", self.page)
        self.assertIn("| ring | topk:0.01 | 4 | – | 2 | 68.1 (67.2–69.0) | 60.0 | 0.60 | 57.7 | "
                      "3 (0) | 84%† **CPU-bound** |", self.page)
        self.assertLess(self.page.index("| ring | none"), self.page.index("| ps, K=N | none"))

    def test_the_crossover_map_names_no_winner_in_a_cpu_bound_cell(self):
        self.assertIn("| 1 ms | 4 | PS 2.00× | CPU-bound |", self.page)
        self.assertIn("| 1 ms | 4 | 4 KiB | 7.00 (1.00) | 5.00 (1.25) | **2.50 (1.25)** | "
                      "5.10 (1.27) | PS | 1.02 |", self.page)
        self.assertIn("| 1 ms | 4 | 64 KiB | 9.00 (1.00) | 8.00 (1.00) | 6.00 (2.00)* | – | "
                      "CPU-bound | – |", self.page)

    def test_a_number_changed_in_a_json_source_fails_the_check(self):
        self.write("data/run/crossover.json", CROSSOVER.replace('"time_us": 2500', '"time_us": 2600'))
        code, stderr = self.run_main("--check")
        self.assertEqual(code, 1)
        self.assertIn("kinds.md differs from its data", stderr)
        self.assertIn("2600", stderr)

    def test_a_page_outside_the_results_folder_is_checked_too(self):
        other = os.path.join(self.results, "outside.md")
        with open(other, "w") as f:
            f.write("PS at 4 KiB: <!-- render:value data/run/crossover.json workers=4,bytes=4096,"
                    "algorithm=gradsync_ps time_us {:.0f} -->2400<!-- render:end --> µs\n")
        os.makedirs(os.path.join(self.results, "sub"))
        os.replace(other, os.path.join(self.results, "sub", "outside.md"))
        code, stderr = self.run_main("--check",
                                     "--other_page=" + os.path.join(self.results, "sub", "outside.md"))
        self.assertEqual(code, 1)
        self.assertIn("outside.md differs from its data", stderr)


SIMULATED = """model,link,gpus_per_host,oversubscription,strategy,workers,servers,placement,step_ms,samples_per_s,ideal_samples_per_s,efficiency,busiest_uplink_bytes,selector_picks,simulator_s,timed_out
m,25gbit,8,1,ring,16,0,-,100,1600,3200,0.5,0,,1.0,False
m,25gbit,8,1,allreduce,16,0,-,80,2000,3200,0.625,0,halving_doubling:3 ring:1,1.0,False
m,25gbit,8,1,ps,16,16,separate,,,,,,,150.2,True
m,25gbit,8,4,ring,16,0,-,150,1066,3200,0.333,2500000000,,1.0,False
"""


class SimulatedTablesTest(unittest.TestCase):
    """The simulator's tables of several ranks per host and of an oversubscribed
    switch, on made-up points."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(self.dir.name, "data", "sim"))
        with open(os.path.join(self.dir.name, "data", "sim", "points.csv"), "w") as f:
            f.write(SIMULATED)
        self.points = render_results.load_points(self.dir.name, "data/sim")

    def tearDown(self):
        self.dir.cleanup()

    def test_hosts_table_shows_picks_and_points_past_the_limit(self):
        full = [p for p in self.points if p["oversubscription"] == 1]
        table = render_results.simulated_hosts_table(full)
        self.assertIn("| model | link | N (hosts) | ideal | ring | selector | PS, K=N | "
                      "selector's picks |", table)
        self.assertIn("| m | 25gbit | 16 (2) | 3,200 | 1,600 (50%) | 2,000 (62%) | over 150 s | "
                      "h-d 3, ring 1 |", table)

    def test_crossover_table_counts_points_within_ten_percent(self):
        points = [
            {"latency_us": 20.0, "algorithm": "ring", "cpu_bound": "False",
             "wire_over_measured": 0.5, "probed_over_measured": 0.95},
            {"latency_us": 20.0, "algorithm": "ring", "cpu_bound": "False",
             "wire_over_measured": 0.92, "probed_over_measured": 1.2},
            {"latency_us": 20.0, "algorithm": "ring", "cpu_bound": "True",
             "wire_over_measured": 0.1, "probed_over_measured": 0.1}]
        table = render_results.simulated_crossover_table(points)
        self.assertIn("| 20 µs | ring | 3 | 1 | 1 | 0.71 (0.50–0.92) | 1 | 1.07 (0.95–1.20) |",
                      table)

    def test_crossover_table_adds_the_fitted_constants_where_the_data_has_them(self):
        points = [
            {"latency_us": 5000.0, "algorithm": "allreduce", "cpu_bound": "False",
             "wire_over_measured": 0.8, "probed_over_measured": 0.95,
             "fitted_over_measured": 1.05},
            {"latency_us": 5000.0, "algorithm": "allreduce", "cpu_bound": "False",
             "wire_over_measured": 0.9, "probed_over_measured": 1.0,
             "fitted_over_measured": 1.5}]
        table = render_results.simulated_crossover_table(points)
        self.assertIn("fitted constants: within 10 % |", table)
        self.assertIn("| 5 ms | selector | 2 | 0 | 1 | 0.85 (0.80–0.90) | 2 | 0.97 (0.95–1.00) "
                      "| 1 | 1.27 (1.05–1.50) |", table)

    def test_crossover_misses_lists_each_honest_miss_of_the_fitted_constants(self):
        base = {"latency_us": 20.0, "algorithm": "tree", "workers": 16.0, "bytes": 4096.0,
                "measured_us": 4000.0, "alpha_beta_us": 3000.0, "probed_over_measured": 0.5}
        points = [dict(base, cpu_bound="False", fitted_us=2000.0, fitted_over_measured=0.5),
                  dict(base, cpu_bound="True", fitted_us=2000.0, fitted_over_measured=0.5),
                  dict(base, cpu_bound="False", bytes=65536.0, fitted_us=4200.0,
                       fitted_over_measured=1.05)]
        table = render_results.simulated_crossover_misses_table(points)
        self.assertIn("| 20 µs | tree | 16 | 4,096 | 4,000 | 2,000 | 0.50 | 0.50 | 0.75 |", table)
        self.assertEqual(len(table.splitlines()), 3)

    def test_switch_table_divides_by_full_bisection(self):
        table = render_results.simulated_switch_table(self.points)
        self.assertIn("| m | 16 | ring | 100 | 150 | 1.50 | 2.50 |", table)
        self.assertIn("| m | 16 | PS, K=N | – | – | – | – |", table)


# sim/calibrate_crossover.py's points with the kinds of the fitted misses:
# one hit, two misses (CPU above, token bucket below), one CPU-bound point.
SIM_CROSSOVER = """latency_us,workers,bytes,algorithm,measured_us,alpha_beta_us,wire_us,wire_over_measured,probed_us,probed_over_measured,probed_alpha_us,fitted_us,fitted_over_measured,cpu_share,cpu_bound,retrans_segments,miss_kind
20.0,2,4096,ring,100,100,50,0.5,100,1.0,120,105,1.05,0.3,False,0,
20.0,4,4096,ring,200,200,50,0.25,190,0.95,120,260,1.3,0.6,False,0,CPU
20.0,4,65536,tree,400,300,350,0.875,500,1.25,120,300,0.75,0.2,False,0,token bucket
20.0,16,4096,tree,900,300,50,0.05,500,0.55,120,300,0.33,0.9,True,0,CPU
"""

SIM_CROSSOVER_PAGE = """<!-- render:table simulated_crossover data/sim -->
x
<!-- render:end -->
<!-- render:table simulated_crossover_misses data/sim -->
x
<!-- render:end -->
<!-- render:table simulated_crossover_miss_kinds data/sim -->
x
<!-- render:end -->
"""


class SimulatedCrossoverTest(Fixture):
    def test_misses_are_listed_and_counted_by_kind(self):
        os.makedirs(os.path.join(self.results, "data", "sim"))
        self.write("data/sim/points.csv", SIM_CROSSOVER)
        self.write("data/sim/sweep.json", SWEEP)
        self.write("sim.md", SIM_CROSSOVER_PAGE)
        self.assertEqual(self.run_main()[0], 0)
        page = self.read("sim.md")
        # The totals: 3 points not CPU-bound, 1 of them within 10 % fitted.
        self.assertIn("| all | all | 4 | 1 | **0** |", page)
        self.assertIn("fitted constants: within 10 %", page)
        self.assertIn("| **1** | 1.05 (0.75–1.30) |", page)
        # Each miss with its CPU share and kind; the CPU-bound point is out.
        self.assertIn("| 20 µs | ring | 4 | 4,096 | 200 | 260 | 1.30 | 0.95 | 1.00 | 0.60 | CPU |",
                      page)
        self.assertIn("| 0.20 | token bucket |", page)
        self.assertNotIn("| 0.90 |", page)
        self.assertIn("| CPU | 1 | 1 | 0 |", page)
        self.assertIn("| token bucket | 1 | 0 | 1 |", page)
        self.assertIn("| all | 2 of 3 | 1 | 1 |", page)
        self.assertEqual(self.run_main("--check"), (0, ""))

    def test_misses_of_merged_repeats_show_their_range(self):
        # sim/crossover_repeats.py's medians: each row has its repeats' range.
        lines = SIM_CROSSOVER.splitlines()
        rows = [lines[0] + ",repeats,measured_low_us,measured_high_us"]
        rows += [line + ",3,90,130" for line in lines[1:]]
        os.makedirs(os.path.join(self.results, "data", "sim"))
        self.write("data/sim/points.csv", "\n".join(rows) + "\n")
        self.write("data/sim/sweep.json", SWEEP)
        self.write("sim.md", SIM_CROSSOVER_PAGE)
        self.assertEqual(self.run_main()[0], 0)
        self.assertIn("| repeats µs |", self.read("sim.md"))
        self.assertIn("| 20 µs | ring | 4 | 4,096 | 200 | 90–130 | 260 | 1.30 |",
                      self.read("sim.md"))


# tools/gpu_results.py's speed.csv, as load_points reads it: two default
# points and a variant's run of one of them with --cudnn_graph.
GPU_SPEED = [
    {"status": "FAIL", "model": "resnet18", "batch": 128.0, "precision": "fp32",
     "variant": "", "gradsync_step_ms": 22.3, "gradsync_compute_ms": 21.7,
     "pytorch_step_ms": 16.28, "speed": 0.73},
    {"status": "PASS", "model": "resnet18", "batch": 128.0, "precision": "fp32",
     "variant": "--cudnn_graph", "gradsync_step_ms": 17.0, "gradsync_compute_ms": 16.5,
     "pytorch_step_ms": 16.28, "speed": 0.96, "bar": "under"},
    {"status": "PASS", "model": "resnet18", "batch": 128.0, "precision": "bf16",
     "variant": "", "gradsync_step_ms": 7.73, "gradsync_compute_ms": 7.22,
     "pytorch_step_ms": 9.02, "speed": 1.17},
]


class GpuSpeedTest(unittest.TestCase):
    def test_the_speed_table_keeps_to_the_defaults(self):
        table = render_results.gpu_speed_table(GPU_SPEED)
        self.assertIn("| resnet18 | 128 | 22.30 | 16.28 | 0.73× (FAIL) | 7.73 | 9.02 | 1.17× |",
                      table)
        self.assertNotIn("17.00", table)

    def test_a_variant_stands_beside_its_default(self):
        table = render_results.gpu_speed_variants_table(GPU_SPEED)
        self.assertIn("| resnet18 | 128 | fp32 | `--cudnn_graph` | 22.30 | 17.00 | 16.28 | "
                      "0.73× | 0.96× (under the bar) |", table)
        self.assertEqual(len(table.splitlines()), 3)


if __name__ == "__main__":
    unittest.main()
