"""tools/gpu_results.py over a quick check's logs as gpu_check.sh writes them:
the report's table becomes checks.csv (each row once, no node paths), the
speed rows speed.csv, the layer profiles layers.csv by group."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "gpu_results.py")

REPORT = """gradsync gpu_check --quick, 2026-11-28T14:35:33Z on node
   -> PASS versions: doctor: nothing missing, 1 GPU(s)
   -> FAIL parity_bf16: bf16_precision_test: 10 cases, 2 failed; exit 1 (log: /tmp/q/parity_bf16.log)

PASS  versions                 doctor: nothing missing, 1 GPU(s)
FAIL  parity_bf16              bf16_precision_test: 10 cases, 2 failed; exit 1 (log: /tmp/q/parity_bf16.log)
FAIL  speed/resnet18/128/fp32  gradsync 22.30 ms (compute 21.68); pytorch 16.28 ms; 0.73x PyTorch's speed (under the bar of 1.0x)
PASS  speed/mlp/32/bf16        gradsync 0.27 ms (compute 0.21); pytorch 1.48 ms; 5.53x PyTorch's speed
PASS  speed/resnet18/128/fp32/cudnn_graph gradsync 15.00 ms (compute 14.50); pytorch 16.28 ms; 1.09x PyTorch's speed (bar 1.0x met)
PASS  speed/resnet18/128/fp32/cudnn_layout=fastest gradsync 17.00 ms (compute 16.50); pytorch 16.28 ms; 0.96x PyTorch's speed (under the bar of 1.0x; --cudnn_layout=fastest is not the default, so not judged)
"""
GRADSYNC_LAYERS = """resnet18-3x32x32-10 on cuda:0, --precision=bf16, batch 128; last loss 0.49
unmarked step: 4.458 ms (median of 5; the device's clock at its start and end)
117 operations a step, 4.747 ms of device time (median of 5 steps)
the host's time to queue them: 6.900 ms a step (host ms: from the previous operation's mark to this one's)

category                                                    calls  host ms    ms/step   share
conv weight gradient                                           20    1.291      0.922   19.4%
conv forward                                                   20    1.249      0.892   18.8%
batch norm backward                                            20    1.543      1.102   23.2%
element-wise                                                   11    0.253      0.181    3.8%
optimizer                                                       1    0.083      0.059    1.2%

operation (kind and shape)                                  calls  host ms    ms/step   share
conv forward 3x3/1 64->64 at 32x32                              4    0.700      0.500    9.0%
"""
GRAPH_LAYERS = """resnet18-3x32x32-10 on cuda:0, --precision=fp32 (--cudnn_graph), batch 128; last loss 2
unmarked step: 14.000 ms (median of 5; the device's clock at its start and end)

category                                                    calls    ms/step   share
conv forward                                                   20      10.000   70.0%
batch norm forward                                             20      4.000   30.0%
"""
LAYOUT_LAYERS = """resnet18-3x32x32-10 on cuda:0, --precision=tf32 (--cudnn_layout=fastest), batch 128; last loss 2
unmarked step: 9.000 ms (median of 5; the device's clock at its start and end)

category                                                    calls    ms/step   share
conv forward                                                   20      6.000   75.0%
batch norm forward                                             20      2.000   25.0%
"""
TORCH_LAYERS = """UserWarning: Profiler clears events at the end of each cycle.
resnet18 in torch 2.11.0+cu130 on cuda, --precision=fp32, batch 256; last loss 0.2
15.630 ms of device time a step (self time of every operator)

category                                         calls    ms/step   share
conv backward                                     20.0      9.166   58.6%
batch norm forward                                20.0      0.493    3.2%
copy                                              48.0      0.133    4.7%
"""


class GpuResultsTest(unittest.TestCase):

    def run_script(self, logs, out):
        return subprocess.run(
            [sys.executable, SCRIPT, "--logs=" + logs, "--out=" + out, "--build=abc1234",
             "--device=one GPU"], capture_output=True, text=True, timeout=60)

    def test_logs_become_the_data_folder(self):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        logs = os.path.join(root, "logs")
        os.makedirs(logs)
        for name, text in (("report.txt", REPORT), ("layers_bf16.log", GRADSYNC_LAYERS),
                           ("torch_layers_fp32.log", TORCH_LAYERS),
                           ("layers_fp32_graph.log", GRAPH_LAYERS),
                           ("layers_tf32_fastest.log", LAYOUT_LAYERS)):
            with open(os.path.join(logs, name), "w") as f:
                f.write(text)
        out = os.path.join(root, "data")
        result = self.run_script(logs, out)
        self.assertEqual(result.returncode, 0, result.stderr)

        with open(os.path.join(out, "checks.csv")) as f:
            checks = list(csv.DictReader(f))
        self.assertEqual([c["check"] for c in checks],
                         ["versions", "parity_bf16", "speed/resnet18/128/fp32",
                          "speed/mlp/32/bf16", "speed/resnet18/128/fp32/cudnn_graph",
                          "speed/resnet18/128/fp32/cudnn_layout=fastest"])
        self.assertEqual(checks[1]["status"], "FAIL")
        self.assertNotIn("/tmp/", checks[1]["detail"])

        with open(os.path.join(out, "speed.csv")) as f:
            speed = list(csv.DictReader(f))
        self.assertEqual(len(speed), 4)
        self.assertEqual((speed[0]["model"], speed[0]["batch"], speed[0]["precision"],
                          speed[0]["variant"]), ("resnet18", "128", "fp32", ""))
        # A variant's row: the same point with the flag it set.
        self.assertEqual((speed[2]["model"], speed[2]["batch"], speed[2]["precision"],
                          speed[2]["variant"]),
                         ("resnet18", "128", "fp32", "--cudnn_graph"))
        self.assertEqual(float(speed[2]["gradsync_step_ms"]), 15.00)
        # Whether each row met its bar, as the row said.
        self.assertEqual([s["bar"] for s in speed], ["under", "", "met", "under"])
        # A variant flag with a value keeps it.
        self.assertEqual(speed[3]["variant"], "--cudnn_layout=fastest")
        self.assertEqual(float(speed[3]["speed"]), 0.96)
        self.assertEqual(float(speed[0]["gradsync_step_ms"]), 22.30)
        self.assertEqual(float(speed[0]["pytorch_step_ms"]), 16.28)
        self.assertEqual(float(speed[1]["speed"]), 5.53)

        with open(os.path.join(out, "layers.csv")) as f:
            layers = {row["source"] + row["variant"]: row for row in csv.DictReader(f)}
        layout = layers["gradsync--cudnn_layout=fastest"]
        self.assertEqual((layout["precision"], layout["batch"]), ("tf32", "128"))
        self.assertAlmostEqual(float(layout["conv_ms"]), 6.0)
        graph = layers["gradsync--cudnn_graph"]
        self.assertEqual((graph["precision"], graph["batch"]), ("fp32", "128"))
        self.assertAlmostEqual(float(graph["conv_ms"]), 10.0)
        ours = layers["gradsync"]
        self.assertEqual((ours["precision"], ours["batch"]), ("bf16", "128"))
        # The category table only, not the operations after it.
        self.assertAlmostEqual(float(ours["conv_ms"]), 1.814)
        self.assertAlmostEqual(float(ours["batch_norm_ms"]), 1.102)
        self.assertAlmostEqual(float(ours["other_ms"]), 0.059)
        self.assertEqual(float(ours["unmarked_step_ms"]), 4.458)
        # The host's time to queue the step; a profile without that line
        # (the graph one's, from before it was printed) has none.
        self.assertEqual(float(ours["host_ms"]), 6.9)
        self.assertEqual(layers["gradsync--cudnn_graph"]["host_ms"], "")
        theirs = layers["pytorch"]
        self.assertEqual((theirs["precision"], theirs["batch"]), ("fp32", "256"))
        self.assertAlmostEqual(float(theirs["device_ms"]), 9.792)
        self.assertEqual(theirs["unmarked_step_ms"], "")

        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)["manifest"]
        self.assertEqual(manifest["git_commit"], "abc1234")
        self.assertEqual(manifest["time"], "2026-11-28T14:35:33Z")

    def test_a_folder_without_a_report_is_one_clear_error(self):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", root])
        result = self.run_script(root, os.path.join(root, "data"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("report.txt does not exist", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(root, "data")))


if __name__ == "__main__":
    unittest.main()
