"""bench/layer_profile end to end on the CPU.

The MLP and the CNN profiled for a few steps: the table names the categories
their steps run (matrix products, the CNN's convolution directions, pooling,
the loss, the optimizer), --out writes every operation in queue order with
shares that add up, ResNet-18's bf16 tensors between layers can be switched
off for comparison, and bad flags get one line and a non-zero exit.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

BINARY = None


def run(*flags):
    return subprocess.run([BINARY, *flags], capture_output=True, text=True,
                          timeout=300, check=False)


class LayerProfileTest(unittest.TestCase):

    def profile(self, model, batch):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "profile.json")
            done = run(f"--model={model}", f"--batch={batch}", "--warmup=1",
                       "--steps=3", "--threads=1", f"--out={out}")
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(out, encoding="utf-8") as f:
                return done.stdout, json.load(f)

    def test_mlp_operations_in_queue_order(self):
        text, profile = self.profile("mlp", 16)
        self.assertIn("unmarked step:", text)
        self.assertTrue(profile["model"].startswith("mlp"), profile["model"])
        self.assertEqual(profile["precision"], "fp32")
        self.assertEqual(profile["steps"], 3)
        ops = profile["ops"]
        categories = [op["category"] for op in ops]
        # Three layers: three products forward, the loss, then backward's
        # products (none for the first layer's input), the optimizer last.
        self.assertEqual(categories.count("loss"), 1)
        self.assertEqual(categories[-1], "optimizer")
        self.assertLess(categories.index("matrix product"),
                        categories.index("loss"))
        self.assertEqual(categories.count("matrix product"), 8)
        self.assertGreater(profile["total_ms"], 0)
        for row in profile["categories"] + profile["labels"]:
            self.assertAlmostEqual(row["share"],
                                   row["ms"] / profile["total_ms"], places=9)
        self.assertEqual(sum(row["calls"] for row in profile["labels"]),
                         len(ops))

    def test_cnn_convolutions_by_direction(self):
        text, profile = self.profile("cnn", 4)
        names = {row["name"] for row in profile["categories"]}
        for category in ("conv forward", "conv weight gradient",
                         "conv input gradient", "pooling", "element-wise"):
            self.assertIn(category, names)
            self.assertIn(category, text)
        # Each convolution's shape, with what oneDNN runs for it.
        self.assertIn("convolutions, as the library runs them:", text)
        self.assertEqual(len(profile["convolutions"]), 2)
        for conv in profile["convolutions"]:
            self.assertTrue(conv["library"], conv)
        # The first convolution's input gradient is not needed.
        conv_input = [op for op in profile["ops"]
                      if op["category"] == "conv input gradient"]
        self.assertEqual(len(conv_input), 1)

    def test_bf16_operands_can_be_switched_off_for_comparison(self):
        labels = {}
        for operands in ("true", "false"):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "profile.json")
                done = run("--model=resnet18", "--batch=2", "--warmup=0",
                           "--steps=1", "--threads=1", "--precision=bf16",
                           f"--bf16_operands={operands}", f"--out={out}")
                self.assertEqual(done.returncode, 0, done.stderr)
                with open(out, encoding="utf-8") as f:
                    profile = json.load(f)
            self.assertEqual(profile["bf16_operands"], operands == "true")
            labels[operands] = [op["label"] for op in profile["ops"]]
        # By default the blocks' batch norms read their convolutions' bf16
        # outputs; switched off, no operation handles bf16 tensors.
        self.assertTrue(any(" bf16 x" in label for label in labels["true"]))
        self.assertFalse(any("bf16" in label for label in labels["false"]))
        self.assertEqual(len(labels["true"]), len(labels["false"]))

    def test_bad_flags_are_refused_with_one_line(self):
        for flags, expected in (
                (["--model=vgg"], "--model=vgg"),
                (["--steps=0"], "--steps=0"),
                (["--device=tpu"], "tpu"),
                (["--cudnn_layout=wide"], "--cudnn_layout=wide"),
                (["--cudnn_graph=maybe"], "--cudnn_graph=maybe"),
                (["--max_ops=2", "--model=mlp", "--batch=2", "--warmup=0",
                  "--steps=1"], "at least"),
                (["stray"], "unexpected argument")):
            done = run(*flags)
            self.assertNotEqual(done.returncode, 0, flags)
            self.assertIn(expected, done.stderr, flags)
            self.assertEqual(len(done.stderr.strip().splitlines()), 1,
                             done.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    args, rest = parser.parse_known_args()
    BINARY = os.path.abspath(args.binary)
    unittest.main(argv=[sys.argv[0], *rest])
