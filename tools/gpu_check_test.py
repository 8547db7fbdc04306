#!/usr/bin/python3
"""tools/gpu_check.sh --quick without a GPU: the dry run prints every command
under a timeout and one table with every check (parity, one speed point per
model x batch x precision, the three communication jobs), runs nothing and
exits 0; an exhausted time budget turns every check into a SKIP that says
so; --dry-run alone is refused. Also the pieces of bench/compute_vs_pytorch.py
that decide a GPU point's row."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "gpu_check.sh")
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import compute_vs_pytorch  # noqa: E402

MODELS = ("resnet18", "cnn", "mlp")
BATCHES = (32, 128, 256)
PRECISIONS = ("fp32", "tf32", "bf16")
CHECKS = (["versions", "parity_layers", "parity_cudnn", "comm_local",
           "comm_ring2", "comm_ps2_1"] +
          ["speed/%s/%d/%s" % (m, b, p)
           for m in MODELS for b in BATCHES for p in PRECISIONS])
ROW = re.compile(r"^(PASS|FAIL|SKIP)\s+(\S+)\s+(.*)$")


def run_quick(out, extra_env=None, args=("--quick", "--dry-run")):
    env = dict(os.environ)
    env.pop("OUT", None)
    env.update(extra_env or {})
    return subprocess.run(["bash", SCRIPT, *args, "--out=" + out],
                          capture_output=True, text=True, env=env,
                          timeout=120)


def table(stdout):
    """{check: (status, detail)} from the final table (after the blank line
    that ends the running log)."""
    rows = {}
    for line in stdout.split("\n\n")[-1].splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(2)] = (match.group(1), match.group(3))
    return rows


class QuickDryRunTest(unittest.TestCase):

    def test_one_table_with_every_check_and_nothing_run(self):
        with tempfile.TemporaryDirectory() as out:
            result = run_quick(out)
            self.assertEqual(result.returncode, 0, result.stderr)
            rows = table(result.stdout)
            self.assertEqual(sorted(rows), sorted(CHECKS))
            for name, (status, detail) in rows.items():
                self.assertEqual((status, detail), ("SKIP", "dry run"), name)
            with open(os.path.join(out, "report.txt")) as report:
                self.assertIn("dry run", report.read())
            # Nothing ran: no GoogleTest XML, no metrics folder.
            self.assertFalse(any(f.endswith(".xml") for f in os.listdir(out)))
            self.assertFalse(os.path.exists(os.path.join(out, "speed")))

    def test_every_command_has_a_timeout(self):
        with tempfile.TemporaryDirectory() as out:
            stdout = run_quick(out).stdout
        commands = [line for line in stdout.splitlines()
                    if line.startswith(("== ", "would run"))]
        # 2 parity, 3 comm jobs, the speed script; 9 PyTorch children
        # (model x precision) and 27 gradsync runs inside it.
        self.assertEqual(len(commands), 2 + 3 + 1 + 9 + 27)
        for line in commands:
            self.assertRegex(line, r"\(timeout [0-9]+ s\)")
        gradsync_runs = [line for line in commands
                         if " train --device=cuda --sync=local" in line]
        self.assertEqual(len(gradsync_runs), 27)
        for line in gradsync_runs:
            self.assertIn("--data=synthetic", line)
            self.assertRegex(line, r"--precision=(fp32|tf32|bf16) ")
        self.assertTrue(any("launch --workers=2 --servers=1" in line and
                            "--sync=ps" in line for line in commands))
        self.assertTrue(any("launch --workers=2 " in line and
                            "--sync=ring" in line for line in commands))

    def test_spent_budget_skips_with_its_reason(self):
        with tempfile.TemporaryDirectory() as out:
            result = run_quick(out, {"GPU_CHECK_QUICK_S": "0"})
            self.assertEqual(result.returncode, 0, result.stderr)
            rows = table(result.stdout)
        for name in ("parity_layers", "parity_cudnn", "comm_local",
                     "comm_ring2", "comm_ps2_1", "speed"):
            self.assertEqual(rows[name],
                             ("SKIP", "the quick check's time budget is spent"))

    def test_dry_run_needs_quick(self):
        with tempfile.TemporaryDirectory() as out:
            result = run_quick(out, args=("--dry-run",))
        self.assertEqual(result.returncode, 2)
        self.assertIn("--dry-run goes with --quick", result.stderr)


class GpuPointTest(unittest.TestCase):

    def test_resnet_bar_at_large_batches_only(self):
        judge = compute_vs_pytorch.judge_gpu_point
        self.assertEqual(judge("resnet18", 128, "fp32", 30.0, 16.5)[0], "FAIL")
        self.assertEqual(judge("resnet18", 256, "tf32", 14.0, 14.3)[0], "PASS")
        self.assertEqual(judge("resnet18", 256, "bf16", 8.0, 7.1)[0], "PASS")
        self.assertEqual(judge("resnet18", 256, "bf16", 10.0, 7.1)[0], "FAIL")
        self.assertEqual(judge("resnet18", 32, "fp32", 30.0, 9.4)[0], "PASS")
        self.assertEqual(judge("cnn", 256, "fp32", 30.0, 1.0)[0], "PASS")
        self.assertEqual(judge("resnet18", 256, "fp32", 30.0, None)[0],
                         "PASS")

    def test_refused_precision_is_recognised(self):
        # The wording of core/device/device.cc's refusal.
        stderr = ("Error: --precision=bf16 (mixed precision) is not built "
                  "yet: it needs bf16 activations")
        self.assertTrue(compute_vs_pytorch.refused_precision(stderr, "bf16"))
        self.assertFalse(compute_vs_pytorch.refused_precision(
            "cudaMalloc(1048576) on cuda:0: out of memory", "bf16"))

    def test_gradsync_command(self):
        command = compute_vs_pytorch.gradsync_gpu_command(
            "gradsync", "cnn", 128, "tf32", 20, 10, "m")
        self.assertIn("--max_steps=30", command)
        self.assertIn("--warmup_steps=10", command)
        self.assertIn("--precision=tf32", command)


if __name__ == "__main__":
    unittest.main()
