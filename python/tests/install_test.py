"""gradsync's wheel in a fresh virtual environment, used as a user would.

A virtual environment with --system-site-packages over this interpreter
(Debian's python3, whose torch 1.13 is then the environment's), the wheel
installed by one offline command, then from `/` with no PYTHONPATH:
`import gradsync.torch`; the DDP equivalence (python/tests/
ddp_equivalence_test.py: DDP on Gloo = ring = PS = PS colocated = one
process, within 1e-5, N = 2) run with that environment's python; and DDP's
hook started by torchrun itself (`python -m torch.distributed.run
--nproc_per_node=2`, no `gradsync launch`) with the ring, equal to DDP on
Gloo under torchrun.
"""

import os
import sys
import unittest

# Nothing written beside the sources (the runfiles link to them).
sys.dont_write_bytecode = True

import torch

import fresh_environments

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_worker.py")
EQUIVALENCE = os.path.join(HERE, "ddp_equivalence_test.py")
TOLERANCE = 1e-5


class InstallTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.python = fresh_environments.make_venv(sys.executable, "with-torch",
                                                  system_site_packages=True)
        cls.venv = os.path.realpath(os.path.dirname(os.path.dirname(cls.python)))
        command = fresh_environments.install_command(
            cls.python, fresh_environments.wheel())
        code, output = fresh_environments.run(command)
        if code != 0:
            raise AssertionError("%s failed (%d):\n%s" %
                                 (" ".join(command), code, output))

    def test_import_from_root_finds_the_installed_package(self):
        code, output = fresh_environments.run([
            self.python, "-c",
            "import gradsync.torch, gradsync; "
            "print(gradsync.__file__); print(gradsync.extension.library_path); "
            "print(','.join(gradsync.extension.strategies()))"], cwd="/")
        self.assertEqual(code, 0, output)
        lines = output.strip().splitlines()
        package, library, names = lines[-3:]
        self.assertTrue(os.path.realpath(package).startswith(self.venv + os.sep),
                        "gradsync imported from %s, not the environment %s" %
                        (package, self.venv))
        self.assertTrue(library.startswith(self.venv + os.sep), library)
        for name in ("ring", "ps", "local"):
            self.assertIn(name, names.split(","))

    def test_import_after_torch(self):
        # torch first (its OpenMP and other libraries loaded), then gradsync:
        # the wheel's libraries give way to the ones already loaded.
        code, output = fresh_environments.run([
            self.python, "-c",
            "import torch, torch.distributed; import gradsync.torch; "
            "print('ok', gradsync.extension.strategies())"], cwd="/")
        self.assertEqual(code, 0, output)
        self.assertIn("ok", output)

    def test_ddp_equivalence_with_the_environments_python(self):
        code, output = fresh_environments.run(
            [self.python, EQUIVALENCE, "--workers=2"], cwd="/")
        self.assertEqual(code, 0, output)
        self.assertRegex(output, r"Ran [1-9]\d* tests")
        self.assertIn("OK", output)

    def run_torchrun(self, name, args):
        out = fresh_environments.scratch("torchrun-" + name)
        prefix = os.path.join(out, "params")
        port = fresh_environments.free_port_pair()
        # --redirects/--tee=1 (the workers' stdout to a log file and the
        # console) where torchrun's default is 0: Debian's torch 1.13 under
        # Python 3.11 cannot parse "0" (IntFlag iteration skips the zero
        # member since 3.11) and fails before starting a worker. --log_dir
        # and TMPDIR keep its files in TEST_TMPDIR.
        command = [
            self.python, "-m", "torch.distributed.run", "--nnodes=1",
            "--nproc_per_node=2", "--master_addr=127.0.0.1",
            "--master_port=%d" % port, "--redirects=1", "--tee=1",
            "--log_dir=%s" % os.path.join(out, "logs"), WORKER,
            "--out=%s" % prefix
        ] + args
        code, output = fresh_environments.run(
            command, cwd=out,
            env=fresh_environments.clean_env(OMP_NUM_THREADS="1", TMPDIR=out))
        self.assertEqual(code, 0, "torchrun %s job failed (%d):\n%s" %
                         (name, code, output))
        return [torch.load("%s.rank%d.pt" % (prefix, rank)) for rank in range(2)]

    def test_torchrun_without_gradsync_launch(self):
        gloo = self.run_torchrun("gloo", ["--mode=gloo"])
        ring = self.run_torchrun("ring", ["--mode=gradsync", "--sync=ring"])
        for rank in range(2):
            difference = max((a - b).abs().max().item()
                             for a, b in zip(ring[rank], gloo[0]))
            self.assertLess(difference, TOLERANCE,
                            "rank %d under torchrun with the ring differs "
                            "from DDP on Gloo by %g" % (rank, difference))


if __name__ == "__main__":
    unittest.main()
