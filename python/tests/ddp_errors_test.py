"""One clear error, and the whole job ended, when a PyTorch job goes wrong.

Two workers under `gradsync launch`: a worker killed mid-training ends the
job within 15 s, naming it; one gradsync state given to two models, DDP
buckets or strategies that differ across workers, and --sync=ps without
servers each fail with one message saying what to do.
"""

import re
import unittest

import launch_jobs


class DdpErrorsTest(unittest.TestCase):

    def test_killed_worker_ends_the_job_naming_it(self):
        code, output, _ = launch_jobs.launch("killed", 2, [
            "--mode=gradsync", "--sync=ring", "--steps=100000",
            "--die_rank=1", "--die_at_step=3"
        ])
        import time
        ended = time.time()
        self.assertNotEqual(code, 0, output)
        killed = re.search(r"killing myself at step 3 at ([0-9.]+)", output)
        self.assertIsNotNone(killed, output)
        self.assertLess(ended - float(killed.group(1)), 15.0, output)
        self.assertRegex(output, r"failed: worker 1 .*(signal|killed|SIGKILL)")

    def test_one_state_for_two_models(self):
        code, output, _ = launch_jobs.launch(
            "two-models", 2, ["--mode=gradsync", "--two_models"])
        self.assertNotEqual(code, 0, output)
        self.assertIn("this state is already the hook of another model",
                      output)

    def test_buckets_that_differ_across_workers(self):
        code, output, _ = launch_jobs.launch("differ", 2, [
            "--mode=gradsync", "--sync=ring", "--rank1_bucket_cap_mb=0.0001"
        ])
        self.assertNotEqual(code, 0, output)
        self.assertIn("DDP's buckets differ across workers", output)
        self.assertIn("same bucket_cap_mb", output)

    def test_strategies_that_differ_across_workers(self):
        # Refused at Join by worker 0's coordinator, naming both workers and
        # both strategies, rather than each waiting out its timeout for
        # peers that never connect to it.
        code, output, _ = launch_jobs.launch("sync-differs", 2, [
            "--mode=gradsync", "--sync=ring",
            "--rank1_sync=halving_doubling"
        ])
        self.assertNotEqual(code, 0, output)
        self.assertIn(
            "worker 1 was refused at Join: its --sync=halving_doubling "
            "differs from worker 0's --sync=ring", output)
        self.assertNotIn("did not connect", output)

    def test_parameter_server_missing(self):
        code, output, _ = launch_jobs.launch(
            "no-server", 2, ["--mode=gradsync", "--sync=ps"], servers=0)
        self.assertNotEqual(code, 0, output)
        self.assertIn("--sync=ps needs parameter servers", output)


if __name__ == "__main__":
    unittest.main()
