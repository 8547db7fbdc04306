#!/usr/bin/python3
"""tools/gpu_check.sh --quick without a GPU: the dry run prints every command
under a timeout and one table with every check (parity, one speed point per
model x batch x precision, the three communication jobs), runs nothing and
exits 0; an exhausted time budget turns every check into a SKIP that says
so; --dry-run alone is refused; over stand-in programs in a bundle's layout,
every row carries its figures and a local job over the 2% bar fails. Also
the pieces of bench/compute_vs_pytorch.py
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
CHECKS = (["versions", "parity_layers", "parity_cudnn", "parity_bf16",
           "comm_local",
           "comm_ring2", "comm_ps2_1"] +
          ["layers_" + p for p in PRECISIONS] +
          ["layers_fp32_nhwc", "layers_fp32_graph", "layers_tf32_nchw",
           "layers_tf32_legacy"] +
          ["torch_layers_" + p for p in PRECISIONS] + ["hook"] +
          ["speed/%s/%d/%s" % (m, b, p)
           for m in MODELS for b in BATCHES for p in PRECISIONS] +
          # ResNet-18 at the bar's batches again with each flag the
          # defaults were chosen over, where it changes the default run.
          ["speed/resnet18/%d/%s/%s" % (b, p, v)
           for b in (128, 256) for p in PRECISIONS
           for v in ("cudnn_graph=true", "cudnn_layout=nhwc",
                     "cudnn_layout=nchw", "cudnn_graph=false")
           if p in compute_vs_pytorch.VARIANT_PRECISIONS[v]])
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
                if name == "hook":  # a checkout has no wheel beside it
                    self.assertEqual(status, "SKIP")
                    self.assertIn("the bundle carries them", detail)
                    continue
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
        # 3 parity, 3 comm jobs, 3 + 4 + 3 layer profiles (gradsync's with
        # the defaults in fp32, tf32 and bf16 and with the four flags they
        # were chosen over, PyTorch's in all three), the speed script; 9
        # PyTorch children (model x precision) and 27 + 10 gradsync runs
        # inside it (ResNet-18 at batch 128 and 256 again with
        # --cudnn_graph=true and --cudnn_layout=nhwc in fp32, --cudnn_layout=nchw
        # in tf32 and --cudnn_graph=false in tf32 and bf16).
        self.assertEqual(len(commands), 3 + 3 + 10 + 1 + 9 + 27 + 10)
        for flag, precisions in (("--cudnn_graph=true", ("fp32",)),
                                 ("--cudnn_layout=nhwc", ("fp32",)),
                                 ("--cudnn_layout=nchw", ("tf32",)),
                                 ("--cudnn_graph=false", ("tf32", "bf16"))):
            runs = [line for line in commands
                    if line.endswith(" " + flag) or (" %s " % flag) in line]
            # One layer profile and 2 speed points a precision.
            self.assertEqual(len(runs), 1 + 2 * len(precisions), flag)
            for line in runs:
                self.assertRegex(
                    line, r"--precision=(%s)\b" % "|".join(precisions))
        for line in commands:
            self.assertRegex(line, r"\(timeout [0-9]+ s\)")
        gradsync_runs = [line for line in commands
                         if " train --device=cuda --sync=local" in line]
        self.assertEqual(len(gradsync_runs), 27 + 10)
        # Each variant right after the default point it varies (or after
        # the variant before it): the same command, its own metrics
        # folder, the flag set.
        flags = ("cudnn_graph=true", "cudnn_layout=nhwc", "cudnn_layout=nchw",
                 "cudnn_graph=false")
        default = None
        for line in gradsync_runs:
            varied = [flag for flag in flags if " --" + flag in line]
            if not varied:
                default = line
                continue
            flag = varied[0]
            self.assertEqual(len(varied), 1, line)
            self.assertTrue(line.endswith(" --" + flag), line)
            self.assertEqual(
                line[:-len(" --" + flag)].replace("-" + flag, ""), default)
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
        for name in ("parity_layers", "parity_cudnn", "parity_bf16",
                     "comm_local",
                     "comm_ring2", "comm_ps2_1", "speed"):
            self.assertEqual(rows[name],
                             ("SKIP", "the quick check's time budget is spent"))

    def test_dry_run_needs_quick(self):
        with tempfile.TemporaryDirectory() as out:
            result = run_quick(out, args=("--dry-run",))
        self.assertEqual(result.returncode, 2)
        self.assertIn("--dry-run goes with --quick", result.stderr)


# A bundle's layout with stand-ins for its programs: gradsync (doctor, train,
# launch writing the summaries a real run writes), GoogleTest programs that
# write their XML, and a torch that cannot be imported (PyTorch's column then
# says why, and the check goes on).
FAKE_GRADSYNC = r"""#!/bin/bash
case "$1" in
  # The quick check's jobs make their data: a bundle without the data set
  # (tools/bundle.sh --no-data) must not fail its versions row.
  doctor) [[ "$2" == --data=synthetic ]] ||
            { echo "  fashion-mnist MISSING in /nowhere"; exit 1; }
          echo "  gpus        1 visible (fake)"; exit 0 ;;
esac
[[ "$1" == train && -n "${FAKE_TRAIN_SLEEP_S:-}" ]] && sleep "$FAKE_TRAIN_SLEEP_S"
dir=""
precision=fp32
step_ms=10.0
for arg in "$@"; do
  case "$arg" in
    --metrics_dir=*|--run_dir=*) dir="${arg#*=}" ;;
    --precision=*) precision="${arg#*=}" ;;
    --cudnn_graph=false) step_ms=8.0 ;;
    --cudnn_layout=nhwc) step_ms=7.0 ;;
  esac
done
if [[ "$precision" == bf16 && -n "${FAKE_REFUSE_BF16:-}" ]]; then
  echo "Error: --precision=bf16 (mixed precision) is not built yet" >&2
  exit 1
fi
mkdir -p "$dir"
if [[ "$1" == launch ]]; then
  echo '{"step_ms": 20.0, "compute_ms": 10.0, "sync_wait_ms": 10.0, "ranks": [{"step_ms": 1}]}' > "$dir/summary.json"
else
  echo "{\"step_ms\": $step_ms, \"compute_ms\": 9.5, \"sync_wait_ms\": ${FAKE_EXPOSED_MS:-0.1}}" > "$dir/summary.json"
fi
"""
FAKE_GTEST = r"""#!/bin/bash
for arg in "$@"; do
  case "$arg" in
    --gtest_output=xml:*) out="${arg#--gtest_output=xml:}" ;;
  esac
done
printf '<testsuites><testcase name="a"/><testcase name="b"/></testsuites>\n' > "$out"
"""
# bench/layer_profile's output, in its format (the category table's last two
# columns are ms/step and share).
FAKE_LAYER_PROFILE = r"""#!/bin/bash
for arg in "$@"; do
  case "$arg" in
    --out=*) echo '{"ops": []}' > "${arg#--out=}" ;;
  esac
done
cat <<'TABLE'
resnet18-3x32x32-10 on cuda:0, --precision=fp32, batch 128; last loss 2.3
unmarked step: 10.000 ms (median of 10; the device's clock at its start and end)
117 operations a step, 12.000 ms of device time (median of 10 steps)
the host's time to queue them: 11.000 ms a step (host ms: from the previous operation's mark to this one's)

category                                                    calls    ms/step   share
conv weight gradient                                           20      3.000   25.0%
conv forward                                                   20      3.000   25.0%
batch norm forward                                             20      2.400   20.0%
batch norm backward                                            20      1.200   10.0%
element-wise                                                   11      0.600    5.0%
optimizer                                                       1      1.800   15.0%

operation (kind and shape)                                  calls    ms/step   share
conv forward 3x3/1 64->64 at 32x32                              4      1.000    8.3%
batch norm forward 131072x64 +relu                              3      0.900    7.5%

convolutions, as the library runs them:
TABLE
layout=nhwc
for arg in "$@"; do
  case "$arg" in
    --cudnn_layout=*) layout="${arg#*=}" ;;
  esac
done
if [[ "$layout" == nchw ]]; then
  echo "  3x3/1 3->64 at 32x32: NCHW: forward IMPLICIT_GEMM (FMA, 0 bytes)"
  echo "  3x3/1 64->64 at 32x32: NCHW: forward graph engine 3 (0 bytes), legacy 2.000 ms"
else
  echo "  3x3/1 3->64 at 32x32: forward IMPLICIT_GEMM (FMA, 0 bytes)"
  echo "  3x3/1 64->64 at 32x32: forward IMPLICIT_GEMM (FMA, 0 bytes)"
fi
"""
PROGRAMS = ("cuda_device_test", "device_parity_test", "layer_reference_test",
            "bf16_precision_test", "host_staging_test", "nccl_test",
            "mlp_gpu_benchmark", "allreduce_benchmark")


def make_bundle(root):
    for folder in ("bin", "libexec", "bench", "fake_torch/torch"):
        os.makedirs(os.path.join(root, folder))

    def write(path, text, mode=0o755):
        with open(os.path.join(root, path), "w") as out:
            out.write(text)
        os.chmod(os.path.join(root, path), mode)

    with open(SCRIPT) as script:
        write("bin/gpu_check.sh", script.read())
    write("libexec/gradsync-env", "#!/bin/sh\n")
    write("bin/gradsync", FAKE_GRADSYNC)
    for program in PROGRAMS:
        write("bin/" + program, FAKE_GTEST)
    write("bin/layer_profile", FAKE_LAYER_PROFILE)
    for name in ("compute_vs_pytorch.py", "pytorch_resnet18_reference.py",
                 "pytorch_layer_profile.py"):
        with open(os.path.join(HERE, "..", "bench", name)) as source:
            write("bench/" + name, source.read(), 0o644)
    write("fake_torch/torch/__init__.py",
          "raise ImportError('torch left out of this test')\n", 0o644)


class QuickFakeBundleTest(unittest.TestCase):
    """The quick check's real path over stand-in programs."""

    def run_bundle(self, extra_env=None):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        make_bundle(root)
        env = dict(os.environ)
        env.pop("OUT", None)
        env["PYTHONPATH"] = os.path.join(root, "fake_torch")
        env["PYTHON"] = sys.executable
        env.update(extra_env or {})
        result = subprocess.run(
            ["bash", os.path.join(root, "bin", "gpu_check.sh"), "--quick",
             "--out=" + os.path.join(root, "out")],
            capture_output=True, text=True, env=env, timeout=300)
        return result, table(result.stdout)

    def test_every_check_reports_its_figures(self):
        result, rows = self.run_bundle()
        self.assertEqual(result.returncode, 0, result.stdout[-3000:])
        self.assertEqual(sorted(rows), sorted(CHECKS))
        self.assertEqual(rows["versions"][0], "PASS")
        self.assertEqual(rows["parity_layers"][0], "PASS")
        self.assertIn("2 cases", rows["parity_cudnn"][1])
        self.assertEqual(rows["comm_local"],
                         ("PASS", "step 10.0 ms, compute 9.5 ms, exposed 0.1 "
                                  "ms = 1.0% (bar 2%)"))
        # The run's own figures, not the per-rank ones after them.
        self.assertEqual(rows["comm_ring2"],
                         ("PASS", "step 20.0 ms, compute 10.0 ms, exposed "
                                  "10.0 ms = 50.0%"))
        self.assertEqual(rows["comm_ps2_1"][0], "PASS")
        # The category table's shares, not the operations' below it.
        self.assertEqual(
            rows["layers_fp32"],
            ("PASS", "unmarked step 10.000 ms; the host queued it in 11.000 "
                     "ms; profiled 12.00 ms/step: conv "
                     "50%, batch norm 30%, element-wise 5% (6.00, 3.60, 0.60 "
                     "ms); 0 of 2 shapes NCHW with no copies, 0 of 6 "
                     "directions on graph engines"))
        self.assertEqual(rows["layers_bf16"][0], "PASS")
        # The stand-in bundle's torch does not import: not measured.
        for precision in PRECISIONS:
            status, detail = rows["torch_layers_" + precision]
            self.assertEqual(status, "SKIP")
            self.assertIn("torch is not importable", detail)
        # This stand-in bundle has no wheel: the hook's row says what is
        # missing instead of failing.
        self.assertEqual(rows["hook"][0], "SKIP")
        self.assertIn("no wheel", rows["hook"][1])
        for model in MODELS:
            for batch in BATCHES:
                status, detail = rows["speed/%s/%d/fp32" % (model, batch)]
                self.assertEqual(status, "PASS")
                self.assertIn("gradsync 10.00 ms (compute 9.50)", detail)
                self.assertIn("torch left out of this test", detail)
                # bf16 runs gradsync with --precision=bf16, like the others.
                status, detail = rows["speed/%s/%d/bf16" % (model, batch)]
                self.assertEqual(status, "PASS")
                self.assertIn("gradsync 10.00 ms (compute 9.50)", detail)
        self.assertEqual(rows["parity_bf16"][0], "PASS")
        # The variant's rows come from runs with the flag set.
        for batch in (128, 256):
            status, detail = rows[
                "speed/resnet18/%d/tf32/cudnn_graph=false" % batch]
            self.assertEqual(status, "PASS")
            self.assertIn("gradsync 8.00 ms (compute 9.50)", detail)
            status, detail = rows[
                "speed/resnet18/%d/fp32/cudnn_layout=nhwc" % batch]
            self.assertEqual(status, "PASS")
            self.assertIn("gradsync 7.00 ms (compute 9.50)", detail)
        # A profile's row counts the shapes computed NCHW and the
        # directions graph engines won.
        self.assertIn("2 of 2 shapes NCHW with no copies, 1 of 6 directions "
                      "on graph engines", rows["layers_tf32_nchw"][1])

    def test_a_binary_that_refuses_bf16_fails_its_rows(self):
        result, rows = self.run_bundle({"FAKE_REFUSE_BF16": "1"})
        self.assertEqual(result.returncode, 1)
        for model in MODELS:
            status, detail = rows["speed/%s/128/bf16" % model]
            self.assertEqual(status, "FAIL")
            self.assertIn("gradsync refuses bf16", detail)
            self.assertEqual(rows["speed/%s/128/fp32" % model][0], "PASS")

    def test_exposed_communication_over_the_bar_fails(self):
        result, rows = self.run_bundle({"FAKE_EXPOSED_MS": "0.5"})
        self.assertEqual(result.returncode, 1)
        self.assertEqual(rows["comm_local"][0], "FAIL")
        self.assertIn("5.0% (over 2%)", rows["comm_local"][1])


class SpeedBudgetTest(unittest.TestCase):
    """compute_vs_pytorch.py --budget_s over the stand-in gradsync: the
    points the budget cannot reach are SKIP rows saying so, not failures."""

    def run_speed(self, budget_s, extra_env=None, precisions="fp32,tf32"):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        make_bundle(root)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(root, "fake_torch")
        env.update(extra_env or {})
        rows_file = os.path.join(root, "speed.tsv")
        result = subprocess.run(
            [sys.executable, os.path.join(root, "bench",
                                          "compute_vs_pytorch.py"),
             "--device=cuda", "--gradsync=" + os.path.join(root, "bin",
                                                          "gradsync"),
             "--models=resnet18", "--batches=128",
             "--precisions=" + precisions,
             "--steps=2", "--warmup=1", "--timeout_s=60",
             "--budget_s=%d" % budget_s, "--rows=" + rows_file,
             "--work_dir=" + os.path.join(root, "work")],
            capture_output=True, text=True, env=env, timeout=120)
        rows = {}
        if os.path.exists(rows_file):
            with open(rows_file) as f:
                for line in f:
                    status, name, detail = line.rstrip("\n").split("\t")
                    rows[name] = (status, detail)
        return result, rows

    def test_a_spent_budget_skips_every_point(self):
        result, rows = self.run_speed(budget_s=1)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(rows), ["speed/resnet18/128/fp32",
                                        "speed/resnet18/128/tf32"])
        for status, detail in rows.values():
            self.assertEqual((status, detail),
                             ("SKIP", compute_vs_pytorch.BUDGET_SPENT))

    def test_a_point_the_budget_cuts_short_is_skipped(self):
        # A budget some seconds over the margin: after the one PyTorch
        # child (which fails at once here) the point starts with more than
        # the margin left, its timeout cut to what is left, and the stand-in
        # runs past that.
        result, rows = self.run_speed(budget_s=25, precisions="fp32",
                                      extra_env={"FAKE_TRAIN_SLEEP_S": "60"})
        self.assertEqual(result.returncode, 0, result.stderr)
        status, detail = rows["speed/resnet18/128/fp32"]
        self.assertEqual(status, "SKIP")
        self.assertIn("ran past the end of the time budget", detail)

    def test_within_the_budget_points_are_measured(self):
        result, rows = self.run_speed(budget_s=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(rows["speed/resnet18/128/fp32"][0], "PASS")
        self.assertIn("gradsync 10.00 ms", rows["speed/resnet18/128/fp32"][1])


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

    def test_a_variant_under_the_bar_says_so_and_fails_nothing(self):
        status, note = compute_vs_pytorch.judge_gpu_point(
            "resnet18", 128, "fp32", 30.0, 16.5, "cudnn_graph=true")
        self.assertEqual(status, "PASS")
        self.assertIn("under the bar of 1.0x", note)
        self.assertIn("--cudnn_graph=true is not the default", note)
        self.assertEqual(compute_vs_pytorch.judge_gpu_point(
            "resnet18", 128, "fp32", 15.0, 16.5, "cudnn_graph=true"),
            ("PASS", "bar 1.0x met"))

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
