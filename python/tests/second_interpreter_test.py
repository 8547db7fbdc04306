"""gradsync's wheel under a second CPython: installed offline into a fresh
virtual environment of another interpreter (no torch there), its library
loads through ctypes and runs a CPU strategy step on plain buffers: `local`
with one worker, and `ring` with two workers started as torchrun starts them
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no `gradsync launch`).

The interpreter is found by fresh_environments.second_interpreter_candidates'
rule (GRADSYNC_TEST_PYTHON, pyenv's versions, python3.X on PATH), a CPython
3.9-3.13 of another version than the one running this test. Where none is
found the test is skipped, saying where it looked.
"""

import os
import subprocess
import sys
import unittest

# Nothing written beside the sources (the runfiles link to them).
sys.dont_write_bytecode = True

import fresh_environments

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "plain_buffers_worker.py")
STEPS = 3


class SecondInterpreterTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.base, found = fresh_environments.find_second_interpreter()
        if cls.base is None:
            cls.skip_reason = (
                "no second CPython 3.9-3.13 (other than %d.%d) found; looked "
                "at: %s. Install one with pyenv, or name one with "
                "--test_env=GRADSYNC_TEST_PYTHON=/path/to/python3.X" %
                (sys.version_info[:2] + ("; ".join(found) or "nothing",)))
            print("SKIPPED: " + cls.skip_reason, flush=True)
            raise unittest.SkipTest(cls.skip_reason)
        cls.version = found
        print("second interpreter: %s (%d.%d)" % ((cls.base,) + found),
              flush=True)
        cls.python = fresh_environments.make_venv(
            cls.base, "python%d.%d" % found, system_site_packages=False)
        code, output = fresh_environments.run(
            fresh_environments.install_command(cls.python,
                                               fresh_environments.wheel()))
        if code != 0:
            raise AssertionError("installing the wheel into %s failed (%d):\n%s"
                                 % (cls.python, code, output))

    def test_one_worker_local_step(self):
        code, output = fresh_environments.run(
            [self.python, WORKER, "local", str(STEPS)])
        self.assertEqual(code, 0, output)
        # The library the wheel installed, not a checkout's.
        venv = os.path.realpath(os.path.dirname(os.path.dirname(self.python)))
        self.assertIn("python %d.%d, library %s%s" %
                      (self.version + (venv, os.sep)), output)
        self.assertIn("worker 0: %d steps of local over 1 workers OK" % STEPS,
                      output)

    def test_two_workers_ring_as_torchrun_starts_them(self):
        port = fresh_environments.free_port_pair()
        workers = []
        for rank in range(2):
            env = fresh_environments.clean_env(
                RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port))
            workers.append(subprocess.Popen(
                [self.python, WORKER, "ring", str(STEPS)], cwd="/", env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = []
        try:
            for rank, worker in enumerate(workers):
                try:
                    output, _ = worker.communicate(
                        timeout=fresh_environments.COMMAND_DEADLINE_S)
                except subprocess.TimeoutExpired:
                    self.fail("ring worker %d did not end within %d s" %
                              (rank, fresh_environments.COMMAND_DEADLINE_S))
                outputs.append(output)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        everything = "\n".join(outputs)
        for rank, worker in enumerate(workers):
            self.assertEqual(worker.returncode, 0,
                             "ring worker %d failed:\n%s" % (rank, everything))
            self.assertIn("worker %d: %d steps of ring over 2 workers OK" %
                          (rank, STEPS), everything)


if __name__ == "__main__":
    unittest.main()
