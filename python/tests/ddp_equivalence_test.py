"""gradsync's ring and PS behind DDP's hook give DDP-on-Gloo's parameters.

For N workers (argv: --workers=N): a few SGD steps of a small MLP with
several DDP buckets, under `gradsync launch`, as plain DDP on Gloo, with
gradsync's ring, with gradsync's PS (K = N servers) and with the PS
colocated with the workers (`gradsync launch --ps_colocate`). Every rank's final
parameters must equal the others', DDP's on Gloo and one process's trained on
the whole batch, within 1e-5.
"""

import os
import sys
import unittest

import torch

import launch_jobs

WORKERS = 2
TOLERANCE = 1e-5


def load_ranks(prefix, workers):
    return [torch.load("%s.rank%d.pt" % (prefix, r)) for r in range(workers)]


def max_difference(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


class DdpEquivalenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        out = launch_jobs.scratch("reference")
        cls.reference_path = os.path.join(out, "params.pt")
        code, output, _ = launch_jobs.launch("reference", 1, [
            "--mode=reference", "--out=%s" % cls.reference_path])
        assert code == 0, output
        cls.reference = torch.load(cls.reference_path)
        cls.gloo = cls.run_job("gloo", ["--mode=gloo"])

    @classmethod
    def run_job(cls, name, args, servers=0, launch_flags=()):
        folder = launch_jobs.scratch("%s-%d" % (name, WORKERS))
        prefix = os.path.join(folder, "params")
        code, output, _ = launch_jobs.launch("%s-%d-run" % (name, WORKERS),
                                             WORKERS,
                                             args + ["--out=%s" % prefix],
                                             servers=servers,
                                             launch_flags=launch_flags)
        if code != 0:
            raise AssertionError("%s job failed (%d):\n%s" %
                                 (name, code, output))
        return load_ranks(prefix, WORKERS), output

    def check(self, ranks):
        for r, params in enumerate(ranks):
            self.assertLess(max_difference(params, ranks[0]), TOLERANCE,
                            "rank %d differs from rank 0" % r)
            self.assertLess(max_difference(params, self.gloo[0][0]),
                            TOLERANCE, "rank %d differs from DDP on Gloo" % r)
            self.assertLess(max_difference(params, self.reference),
                            TOLERANCE,
                            "rank %d differs from one process" % r)
        # The parameters moved: a hook that did nothing would fail above,
        # but make the test's own premise explicit.
        self.assertGreater(max_difference(self.reference, self.initial()), 1e-3)

    def initial(self):
        sys.path.insert(0, os.path.dirname(launch_jobs.WORKER))
        import ddp_worker
        return [p.detach() for p in ddp_worker.make_model().parameters()]

    def test_gloo_matches_one_process(self):
        self.check(self.gloo[0])

    def test_ring(self):
        ranks, output = self.run_job("ring",
                                     ["--mode=gradsync", "--sync=ring"])
        self.assertIn("buckets as DDP builds them", output)
        self.check(ranks)

    def test_ps(self):
        ranks, output = self.run_job("ps", ["--mode=gradsync", "--sync=ps"],
                                     servers=WORKERS)
        self.check(ranks)

    def test_ps_colocated(self):
        # The launcher hands --ps_colocate to the workers' gradsync.torch.
        ranks, output = self.run_job("ps-colocated",
                                     ["--mode=gradsync", "--sync=ps"],
                                     launch_flags=["--ps_colocate"])
        self.check(ranks)


if __name__ == "__main__":
    for arg in list(sys.argv[1:]):
        if arg.startswith("--workers="):
            WORKERS = int(arg.split("=", 1)[1])
            sys.argv.remove(arg)
    unittest.main()
