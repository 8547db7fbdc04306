"""PyTorch workers agree on their strategy at Join, or the job does not start.

Two workers under `gradsync launch`, each creating the hook's C++ half
(gradsync.extension.TorchWorker, what gradsync.torch.connect() creates)
directly, so no torch is needed: given the same strategy they join; given
"ring" and "halving_doubling" the job fails at Join naming both workers and
both values, instead of each waiting out its timeout for peers that never
connect. And a program that never calls connect() in a job with parameter
servers ends the job as soon as a worker exits, naming it, instead of the
servers waiting out their timeout for a coordinator that never comes; a
--trace path that cannot be written is refused at connect(), not at close().
"""

import os
import re
import subprocess
import sys
import time
import unittest

import launch_jobs


def run_worker(sync0, sync1):
    from gradsync import extension
    rank = int(os.environ["RANK"])
    sync = sync0 if rank == 0 else sync1
    if sync == "none":
        return run_without_connect()
    if sync.startswith("late:"):
        # After the other worker has ended: it exits first for sure.
        time.sleep(2)
        sync = sync[len("late:"):]
    try:
        worker = extension.TorchWorker(sync, 30.0, [])
    except RuntimeError as error:
        print("worker %d: %s" % (rank, error), flush=True)
        return 1
    worker.close()
    print("worker %d joined and closed" % rank, flush=True)
    return 0


def run_with_trace(path):
    from gradsync import extension
    rank = int(os.environ["RANK"])
    try:
        worker = extension.TorchWorker("ring", 30.0, [], trace_path=path)
    except RuntimeError as error:
        print("worker %d: %s" % (rank, error), flush=True)
        return 1
    worker.close()
    return 0


def run_without_connect():
    print("worker %s ends without connect()" % os.environ["RANK"], flush=True)
    return 0


def launch(name, sync0, sync1, servers=0):
    command = [
        launch_jobs.gradsync_binary(), "launch", "--workers=2",
        "--servers=%d" % servers,
        "--run_dir=%s" % launch_jobs.scratch(name), "--job_deadline_s=120",
        "--", sys.executable, os.path.abspath(__file__), "--worker", sync0,
        sync1
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=150)
    return done.returncode, done.stdout


class JobAgreementTest(unittest.TestCase):

    def test_same_strategy_joins(self):
        code, output = launch("same", "ring", "ring")
        self.assertEqual(code, 0, output)
        self.assertIn("worker 0 joined and closed", output)
        self.assertIn("worker 1 joined and closed", output)

    def test_different_strategies_fail_at_join_naming_both(self):
        code, output = launch("differ", "ring", "halving_doubling")
        self.assertNotEqual(code, 0, output)
        refusal = ("its --sync=halving_doubling differs from worker 0's "
                   "--sync=ring")
        self.assertIn("worker 1: worker 1 joining job", output)
        self.assertIn("worker 1 was refused at Join: " + refusal, output)
        # Worker 0 hears it at once: its coordinator refuses worker 1 and
        # logs the loss before worker 1 has its reply. (Whether worker 0 then
        # prints its own exit is a race with the launcher, which stops it
        # when worker 1 exits first.)
        worker0 = [line for line in output.splitlines()
                   if line.startswith("[worker 0]")]
        self.assertTrue(
            any("lost worker 1" in line and refusal in line
                for line in worker0), output)
        self.assertNotIn("did not connect", output)

    def test_program_that_never_connects_stops_the_servers_job(self):
        code, output = launch("never", "none", "none", servers=1)
        self.assertNotEqual(code, 0, output)
        self.assertRegex(
            output, r"failed: worker [01] exited with code 0 without calling "
            r"gradsync\.torch\.connect\(\), while the job's 1 parameter "
            r"server\(s\) wait for every worker")
        self.assertNotIn("no coordinator answered", output)

    def test_program_that_never_connects_stops_a_job_joined_later(self):
        # No servers, and worker 1 ends without connect() before worker 0
        # joins: nobody waits yet. Once worker 0 has joined it would wait
        # for worker 1 until its timeout (30 s); the launcher stops the job
        # as soon as it sees worker 0's record, naming worker 1.
        start = time.monotonic()
        code, output = launch("never_later", "late:ring", "none")
        self.assertNotEqual(code, 0, output)
        self.assertRegex(
            output, r"failed: worker 1 exited with code 0 without calling "
            r"gradsync\.torch\.connect\(\), while worker\(s\) 0 joined "
            r"the job and wait for it")
        self.assertNotIn("did not connect", output)
        self.assertLess(time.monotonic() - start, 20, output)

    def test_trace_path_that_cannot_be_written_fails_at_connect(self):
        # Written when the program closes gradsync: checked at connect().
        folder = launch_jobs.scratch("unwritable_trace")
        plain = os.path.join(folder, "plain")
        with open(plain, "w") as f:
            f.write("x")
        code, output = launch("trace", "trace", os.path.join(plain, "t.json"))
        self.assertNotEqual(code, 0, output)
        self.assertRegex(
            output, re.escape("--trace=%s/t.worker" % plain) +
            r"[01]\.json cannot be written: " +
            re.escape("%s is a file, not a folder" % plain))

    def test_program_that_uses_no_gradsync_and_no_servers_runs(self):
        # torch's own DDP under this launcher: nobody waits for a Join.
        # (A job whose workers do connect, with servers, is not stopped:
        # run_folder_test's and ddp_errors_test's jobs.)
        code, output = launch("plain", "none", "none")
        self.assertEqual(code, 0, output)
        self.assertIn("worker 1 ends without connect()", output)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        if sys.argv[2] == "none":
            sys.exit(run_without_connect())
        if sys.argv[2] == "trace":
            sys.exit(run_with_trace(sys.argv[3]))
        sys.exit(run_worker(sys.argv[2], sys.argv[3]))
    unittest.main()
