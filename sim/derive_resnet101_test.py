"""sim/derive_resnet101.py: ResNet-101's tensors and ready times from a
ResNet-50 profile, and one clear refusal for anything else."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import derive_resnet101  # noqa: E402

RESNET50 = os.path.join(HERE, "profiles", "resnet50-b64-fp32.json")


class DeriveTest(unittest.TestCase):
    def setUp(self):
        with open(RESNET50) as f:
            self.resnet50 = json.load(f)
        self.derived = derive_resnet101.derive(self.resnet50)

    def test_tensors_are_torchvision_resnet101s(self):
        params = self.derived["params"]
        # torchvision's resnet101: 44,549,160 parameters in 314 tensors.
        self.assertEqual(sum(p["numel"] for p in params), 44549160)
        self.assertEqual(len(params), 314)
        names = [p["name"] for p in params]
        self.assertEqual(len(set(names)), len(names))
        self.assertEqual(names[-2:], ["fc.weight", "fc.bias"])
        blocks = sorted({int(n.split(".")[1]) for n in names if n.startswith("layer3.")})
        self.assertEqual(blocks, list(range(23)))

    def test_ready_times_follow_backward_and_grow_by_the_extra_blocks(self):
        ready = {p["name"]: p["ready_ms"] for p in self.derived["params"]}
        measured = {p["name"]: p["ready_ms"] for p in self.resnet50["params"]}
        # Backward reaches layer3's blocks one after another, deepest first.
        firsts = [ready[f"layer3.{b}.conv1.weight"] for b in range(23)]
        self.assertTrue(all(a > b for a, b in zip(firsts, firsts[1:])))
        # layer4 as measured; the last five layer3 blocks as ResNet-50's last five.
        self.assertEqual(ready["layer4.0.conv1.weight"], measured["layer4.0.conv1.weight"])
        self.assertEqual(ready["layer3.22.conv1.weight"], measured["layer3.5.conv1.weight"])
        # Everything before layer3.1 later by the same 17 blocks' backward,
        # which is also what backward grew by.
        shift = self.derived["backward_ms"] - self.resnet50["backward_ms"]
        self.assertGreater(shift, 0)
        for name in ("conv1.weight", "layer2.3.conv3.weight", "layer3.0.downsample.0.weight"):
            self.assertAlmostEqual(ready[name] - measured[name], shift)
        self.assertAlmostEqual(self.derived["step_ms"], self.derived["forward_ms"] +
                               self.derived["backward_ms"] + self.derived["optimizer_ms"])
        self.assertIn("derive_resnet101", self.derived["derivation"])

    def test_checked_in_profile_is_this_derivation(self):
        with open(os.path.join(HERE, "profiles", "resnet101-b64-fp32.json")) as f:
            self.assertEqual(json.load(f), json.loads(json.dumps(self.derived)))

    def test_another_model_is_refused_in_one_line(self):
        with self.assertRaisesRegex(derive_resnet101.DeriveError, "not resnet50"):
            derive_resnet101.derive(dict(self.resnet50, model="vgg16"))
        done = subprocess.run([sys.executable, os.path.join(HERE, "derive_resnet101.py"),
                               os.path.join(HERE, "profiles", "vgg16-b64-fp32.json")],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stdout, "")
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("not resnet50", done.stderr)


if __name__ == "__main__":
    unittest.main()
