"""bench/pytorch_layer_profile.py without torch: aten operators into
bench/layer_profile's categories, the summary (self time of operators only,
kernels apart, per step, shares), the table gpu_check.sh parses, and exit
status 3 when torch does not import."""

import os
import subprocess
import sys
import unittest

import pytorch_layer_profile as p

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "pytorch_layer_profile.py")


class CategoryTest(unittest.TestCase):

    def test_operators_by_category(self):
        self.assertEqual(p.category_of("aten::cudnn_convolution"),
                         "conv forward")
        self.assertEqual(p.category_of("aten::convolution_backward"),
                         "conv backward")
        self.assertEqual(p.category_of("aten::cudnn_batch_norm"),
                         "batch norm forward")
        self.assertEqual(p.category_of("aten::native_batch_norm_backward"),
                         "batch norm backward")
        self.assertEqual(p.category_of("aten::threshold_backward"),
                         "element-wise")
        self.assertEqual(p.category_of("aten::_foreach_add_"), "optimizer")
        self.assertEqual(p.category_of("aten::_to_copy"), "copy")
        self.assertEqual(p.category_of("aten::addmm"), "matrix product")
        # Wrappers that launch nothing themselves are not a category's.
        self.assertEqual(p.category_of("aten::conv2d"), "other")


class SummaryTest(unittest.TestCase):

    def test_self_time_per_step_with_kernels_apart(self):
        events = [
            ("aten::cudnn_convolution", 8.0, 4, False),
            ("aten::convolution_backward", 12.0, 4, False),
            ("aten::relu_", 2.0, 6, False),
            ("aten::add_", 2.0, 2, False),
            ("aten::conv2d", 0.0, 4, False),  # no self time: left out
            ("void implicit_gemm_kernel", 19.0, 8, True),
            ("void elementwise_kernel", 4.0, 8, True),
        ]
        summary = p.summarize(events, steps=2)
        self.assertAlmostEqual(summary["total_ms"], 12.0)
        self.assertAlmostEqual(summary["kernel_ms"], 11.5)
        names = [row["name"] for row in summary["categories"]]
        self.assertEqual(names, ["conv backward", "conv forward",
                                 "element-wise"])
        elementwise = summary["categories"][2]
        self.assertAlmostEqual(elementwise["ms"], 2.0)
        self.assertAlmostEqual(elementwise["calls"], 4.0)
        self.assertAlmostEqual(elementwise["share"], 2.0 / 12.0)
        self.assertNotIn("aten::conv2d",
                         [row["name"] for row in summary["operators"]])
        self.assertRaises(ValueError, p.summarize, events, 0)

    def test_table_has_the_rows_gpu_check_parses(self):
        summary = p.summarize([("aten::cudnn_convolution", 3.0, 1, False),
                               ("aten::cudnn_batch_norm", 1.0, 1, False)], 1)
        lines = p.format_table(summary, top=1).splitlines()
        start = lines.index(next(l for l in lines if l.startswith("category")))
        rows = lines[start + 1:lines.index("", start)]
        self.assertEqual([r.split()[-2] for r in rows], ["3.000", "1.000"])
        self.assertTrue(rows[0].startswith("conv forward"))


class NoTorchTest(unittest.TestCase):

    def test_missing_torch_exits_3_with_one_line(self):
        code = ("import runpy, sys; sys.modules['torch'] = None; "
                "sys.argv = ['pytorch_layer_profile.py', '--device=cpu']; "
                "runpy.run_path(%r, run_name='__main__')" % SCRIPT)
        done = subprocess.run([sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=60,
                              check=False)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn("torch is not importable", done.stderr)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1)

    def test_bad_arguments_exit_2(self):
        for argv in (["--batch=0"], ["--device=cpu", "--precision=tf32"]):
            with self.assertRaises(SystemExit) as exited:
                p.main(argv)
            self.assertEqual(exited.exception.code, 2, argv)


if __name__ == "__main__":
    unittest.main()
