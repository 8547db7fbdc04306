#!/usr/bin/python3
"""tools/render_results.py on made-up pages and data: a page that agrees with
its data passes --check; a number changed in the data or in the page fails
it; rendering rewrites only the marked parts; bad markers are one error."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_results  # noqa: E402

POINTS = """strategy,workers,servers,step_ms,step_ms_min,step_ms_max,predicted_step_ms,retrans_segments,rto_timeouts,port_drops,job_cpu_fraction,machine_busy_unniced_max
local,1,0,2.609,2.1,4.5,,0,0,0,0.01,0.3
ring,2,0,209.443,209.404,210.634,211.742,0,0,0,0.04,0.34
ps,2,2,216.092,211.394,233.187,222.706,2,0,0,0.11,0.40
"""
SWEEP = '{"manifest": {"git_commit": "abcdef0123", "time": "2026-11-24T23:20:23", "command": "bench/scaling.py --links=100mbit"}}'
PAGE = """# A page

Hand-written prose stays as it is.

<!-- render:table sweep data/run -->
{table}
<!-- render:end -->

The reference stepped in <!-- render:value data/run strategy=local,workers=1 step_ms {{:.1f}} -->{value}<!-- render:end --> ms.
"""
TABLE = """| strategy | N | K | step ms | predicted ms | measured / predicted | retrans. (RTOs) per job | drops | job CPU / machine busy |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| ring | 2 | – | 209 (209–211) | 212 | 0.99 | 0 (0) | 0 | 4% / 34% |
| ps, K=N | 2 | 2 | 216 (211–233) | 223 | 0.97 | 2 (0) | 0 | 11% / 40% |"""


class RenderResultsTest(unittest.TestCase):
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
                 "data/missing/points.csv does not exist"),
                ("<!-- render:chart data/run -->x<!-- render:end -->", "unknown marker")):
            self.write("page.md", marker)
            code, stderr = self.run_main("--check")
            self.assertEqual(code, 2, marker)
            self.assertEqual(len(stderr.strip().splitlines()), 1, marker)
            self.assertIn("page.md: ", stderr)
            self.assertIn(words, stderr, marker)


if __name__ == "__main__":
    unittest.main()
