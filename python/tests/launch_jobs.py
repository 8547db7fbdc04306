"""Runs python/tests/ddp_worker.py jobs under `gradsync launch` for the tests."""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_worker.py")


def gradsync_binary():
    runfiles = os.environ.get("TEST_SRCDIR", "")
    path = os.path.join(runfiles, "gradsync", "tools", "gradsync")
    if not os.path.exists(path):
        raise RuntimeError("gradsync binary not in the test's runfiles: %s" %
                           path)
    return path


def scratch(name):
    root = os.environ.get("TEST_TMPDIR", "/tmp")
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def launch(name, workers, worker_args, servers=0, deadline_s=120,
           launch_flags=()):
    """Runs one job in scratch(name); returns (exit code, console output,
    seconds)."""
    run_dir = scratch(name)
    command = [
        gradsync_binary(), "launch",
        "--workers=%d" % workers, "--servers=%d" % servers,
        "--run_dir=%s" % run_dir, "--job_deadline_s=%d" % deadline_s,
        *launch_flags, "--", sys.executable, WORKER
    ] + worker_args
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          timeout=deadline_s + 30)
    return done.returncode, done.stdout, time.time() - start
