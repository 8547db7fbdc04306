#!/usr/bin/python3
"""Tests of bench/resummarize_overlap_steps.py on canned step lines (run by
`bazel test //bench:all`)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resummarize_overlap_steps as resummarize  # noqa: E402


def line(step, epoch, step_ms, wait_ms, rows=8):
    return {"type": "step", "rank": 0, "step": step, "epoch": epoch, "step_ms": step_ms,
            "own_step_ms": step_ms, "sync_wait_ms": wait_ms,
            "samples_per_s": rows / (step_ms / 1000.0)}


class RestateTest(unittest.TestCase):
    # Four steps of 100 ms waits and 1 ms of compute, epochs of two steps, as
    # the trainer wrote them before: step 1 was drained at the epoch's end, so
    # step 2's line holds no wait while each line's wait is its own.
    WRITTEN = [line(0, 0, 1.0, 100.0), line(1, 0, 101.0, 100.0),
               line(2, 1, 1.0, 100.0), line(3, 1, 101.0, 100.0)]

    def test_written_lines_expose_more_than_their_steps(self):
        measured = self.WRITTEN[1:]
        self.assertGreater(sum(r["sync_wait_ms"] for r in measured),
                           sum(r["step_ms"] for r in measured))

    def test_every_step_holds_its_predecessors_wait_in_both_figures(self):
        restated = resummarize.restated_steps(self.WRITTEN)
        self.assertEqual([r["sync_wait_ms"] for r in restated], [0.0, 100.0, 100.0, 100.0])
        self.assertEqual([r["step_ms"] for r in restated], [1.0, 101.0, 101.0, 101.0])
        for r in restated:
            self.assertLessEqual(r["sync_wait_ms"], r["step_ms"])

    def test_rank_figures_keep_the_samples_over_the_restated_time(self):
        figures = resummarize.rank_figures(self.WRITTEN, warmup=1,
                                           summary_rank={"samples_per_s": 24 / 0.203})
        self.assertEqual(figures["step_ms"], 101.0)
        self.assertEqual(figures["sync_wait_ms"], 100.0)
        self.assertAlmostEqual(figures["samples_per_s"], 24 / 0.303, places=3)

    def test_lines_that_waited_in_finish_are_refused(self):
        # Without overlap a line holds its own wait, not its predecessor's:
        # the rule does not apply.
        in_finish = [line(0, 0, 50.0, 49.0), line(1, 0, 10.0, 9.0), line(2, 0, 10.0, 9.0)]
        with self.assertRaises(ValueError):
            resummarize.restated_steps(in_finish)

    def test_runs_with_other_drains_are_refused(self):
        with self.assertRaises(ValueError):
            resummarize.check_flags({"overlap_next_forward": "true", "eval_every": "5"})
        with self.assertRaises(ValueError):
            resummarize.check_flags({"overlap_next_forward": "false"})
        resummarize.check_flags({"overlap_next_forward": "true", "eval_every": "0"})


if __name__ == "__main__":
    unittest.main()
