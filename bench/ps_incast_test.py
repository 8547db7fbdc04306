#!/usr/bin/python3
"""Tests of bench/ps_incast.py's reading of the servers' trace spans (run by
`bazel test //bench:all`)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ps_incast  # noqa: E402


def span(events, ident, name, start, end, pid=1000):
    events.append({"ph": "b", "name": name, "pid": pid, "id": ident, "ts": start})
    events.append({"ph": "e", "name": name, "pid": pid, "id": ident, "ts": end})


class PsIncastTest(unittest.TestCase):
    def test_spans_pair_begin_and_end_and_skip_other_events(self):
        events = [{"ph": "X", "name": "step 0", "pid": 0, "ts": 0, "dur": 5}]
        span(events, 1, "server 0: push from worker 1, key 3, step 2", 100, 250)
        span(events, 2, "server 0: result to worker 1, key 3, step 2", 260, 300)
        events.append({"ph": "b", "name": "server 0: push from worker 0, key 3, step 2",
                       "pid": 1000, "id": 3, "ts": 10})  # never ended: ignored
        found = ps_incast.spans({"traceEvents": events})
        self.assertEqual(found, {("push", 0, 1, 3, 2): (100, 250),
                                 ("result", 0, 1, 3, 2): (260, 300)})

    def test_a_workers_push_ends_with_its_last_key_and_results_with_the_last_write(self):
        events = []
        # Server 1, step 4: worker 0 pushes keys 5 and 7, worker 1 key 5 only.
        span(events, 1, "server 1: push from worker 0, key 5, step 4", 1000, 2000)
        span(events, 2, "server 1: push from worker 0, key 7, step 4", 1500, 2600)
        span(events, 3, "server 1: push from worker 1, key 5, step 4", 1200, 2300)
        span(events, 4, "server 1: result to worker 0, key 5, step 4", 2400, 2900)
        span(events, 5, "server 1: result to worker 1, key 7, step 4", 2700, 3100)
        table = ps_incast.per_server_step(ps_incast.spans({"traceEvents": events}))
        row = table[(1, 4)]
        self.assertEqual(row["first_push"], 1000)
        self.assertEqual(row["push_end"], {0: 2600, 1: 2300})
        self.assertEqual(row["last_result"], 3100)


if __name__ == "__main__":
    unittest.main()
