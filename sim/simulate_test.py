#!/usr/bin/python3
"""sim/simulate on tiny clusters against hand-computed bytes and times, and
its refusals of bad input. One process per case: SimGrid keeps one engine
per process.

The cluster of every case: 4 workers, 1 Gbit/s links (125e6 bytes/s) with
100 us one way, one bucket of 4e6 bytes and no compute. Under CM02 (max-min
sharing, no TCP correction) a step is its alpha-beta time exactly."""
import json
import os
import subprocess
import unittest

SIMULATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulate")
B, ALPHA, S, N = 125e6, 100e-6, 4e6, 4
TINY = ["--workers=4", "--link=1gbit,100us", "--model=custom:4:1", "--bucket_mb=100"]


def simulate(*args):
    done = subprocess.run([SIMULATE, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def step(*args):
    code, out, err = simulate(*args)
    if code != 0:
        raise AssertionError(f"simulate {args} exited {code}: {err}")
    return json.loads(out)


class SimulateTest(unittest.TestCase):
    def assertMs(self, result, seconds):
        self.assertAlmostEqual(result["step_ms"], 1e3 * seconds, delta=1e-3 * 1e3 * seconds)
        self.assertAlmostEqual(result["alpha_beta_sync_ms"], 1e3 * seconds,
                               delta=1e-6 * 1e3 * seconds)

    def test_ring(self):
        # 2(N-1) steps of S/N each: every link carries 6 MB one way.
        result = step("--strategy=ring", *TINY)
        self.assertMs(result, 2 * (N - 1) * (ALPHA + S / N / B))
        self.assertEqual(result["busiest_link_bytes"], 2 * (N - 1) * S / N)
        self.assertEqual(result["messages"], 2 * (N - 1) * N)
        self.assertEqual(result["exposed_ms"], result["step_ms"])

    def test_ps_with_one_server(self):
        # The server's link takes N gradients, then gives N answers.
        result = step("--strategy=ps", "--servers=1", *TINY)
        self.assertMs(result, 2 * (ALPHA + N * S / B))
        self.assertEqual(result["busiest_link_bytes"], N * S)

    def test_ps_with_as_many_servers_as_workers(self):
        result = step("--strategy=ps", "--servers=4", *TINY)
        self.assertMs(result, 2 * (ALPHA + S / B))
        self.assertEqual(result["busiest_link_bytes"], S)
        self.assertEqual(result["messages"], 2 * N * N)

    def test_colocated_ps(self):
        # A host's own share stays inside it: (N-1)/N of S each way, twice.
        result = step("--strategy=ps", "--placement=colocated", *TINY)
        self.assertMs(result, 2 * (ALPHA + (N - 1) * S / N / B))
        self.assertEqual(result["busiest_link_bytes"], 2 * (N - 1) * S / N)

    def test_compute_hides_what_overlaps_it(self):
        # ResNet-50's measured profile: exposed communication is the step
        # beyond forward + backward + optimizer, never negative.
        profile = os.path.join(os.path.dirname(SIMULATE), "profiles",
                               "resnet50-b64-fp32.json")
        result = step("--strategy=ring", "--workers=4", "--link=100gbit,5us",
                      f"--profile={profile}")
        self.assertGreater(result["buckets"], 1)
        self.assertGreaterEqual(result["exposed_ms"], 0)
        self.assertAlmostEqual(result["step_ms"] - result["exposed_ms"], result["compute_ms"])
        self.assertEqual(result["gradient_bytes"], 4 * 25557032)

    def test_bad_input_is_one_line_and_exit_2(self):
        for args, words in (
                (["--strategy=allgather", *TINY], "--strategy=allgather: ring or ps"),
                (["--workers=0", "--model=custom:4"], "--workers=0: give at least 1 worker"),
                (["--link=fast", "--model=custom:4"], "--link=fast"),
                (["--model=custom:x"], "--model=custom:x: give custom:MB"),
                (["--profile=/nonexistent.json"], "cannot read the profile"),
                (["--strategy=ps", "--placement=colocated", "--servers=2", *TINY],
                 "give --servers=4 (N), not 2")):
            code, out, err = simulate(*args)
            self.assertEqual(code, 2, args)
            self.assertEqual(out, "", args)
            self.assertEqual(len(err.strip().splitlines()), 1, (args, err))
            self.assertIn(words, err, args)


if __name__ == "__main__":
    unittest.main()
