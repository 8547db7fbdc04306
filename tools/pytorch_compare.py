#!/usr/bin/env python3
"""gradsync's GPU training step next to PyTorch's, same model and batch.

Runs bench/mlp_gpu_benchmark (BM_GpuTrainingStep: the default MLP
784-512-256-10, SGD with momentum 0.9, softmax cross-entropy, the loss read
back every step) and then the same step in PyTorch eager mode, and prints one
table: time per step and samples/s for each, per batch size.

Both sides use FP32 matrix products (TF32 off: PyTorch's default for matmul,
and what gradsync's cuBLAS calls do), synthetic Fashion-MNIST-shaped inputs,
one fixed batch, and synchronize every step (gradsync's trainer copies the
loss to the host every step; here PyTorch calls loss.item()).

    tools/pytorch_compare.py                              # in the repository
    bin/pytorch_compare.py                                # in a bundle
    tools/pytorch_compare.py --batches=256,4096 --json=out.json

Without torch (or without a GPU for it) the gradsync column is printed alone.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

DEFAULT_BATCHES = [64, 128, 256, 512, 1024, 2048, 4096]
WIDTHS = [784, 512, 256, 10]


def find_benchmark(explicit):
    """The benchmark binary: --benchmark, a bundle's bin/, or bazel-bin."""
    here = os.path.dirname(os.path.realpath(__file__))
    candidates = [explicit] if explicit else [
        os.path.join(here, "mlp_gpu_benchmark"),              # bundle bin/
        os.path.join(here, "..", "bin", "mlp_gpu_benchmark"),  # bundle tools/
        os.path.join(here, "..", "bazel-bin", "bench", "mlp_gpu_benchmark"),
        shutil.which("mlp_gpu_benchmark"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


def run_gradsync(binary, batches, min_time):
    """{batch: (step_ms, samples_per_s, gemm_share)} from the benchmark's JSON."""
    pattern = "BM_GpuTrainingStep/batch:(%s)/" % "|".join(str(b) for b in batches)
    command = [binary, "--benchmark_filter=" + pattern,
               "--benchmark_format=json", "--benchmark_min_time=%g" % min_time]
    print("running:", " ".join(command), file=sys.stderr)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError("%s exited with %d" % (binary, done.returncode))
    results = {}
    for bench in json.loads(done.stdout)["benchmarks"]:
        if bench.get("error_occurred"):
            raise RuntimeError(bench["name"] + ": " + bench.get("error_message", ""))
        batch = int(bench["name"].split("batch:")[1].split("/")[0])
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[bench["time_unit"]]
        results[batch] = (bench["real_time"] * scale, bench["items_per_second"],
                          bench.get("gemm_share"))
    return results


def run_torch(batches, steps, warmup):
    """{batch: (step_ms, samples_per_s)}, or a string saying why not."""
    try:
        import torch
    except ImportError as error:
        return "torch is not installed (%s)" % error
    if not torch.cuda.is_available():
        return "torch %s sees no CUDA GPU" % torch.__version__
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    results = {}
    for batch in batches:
        torch.manual_seed(1)
        layers = []
        for i in range(1, len(WIDTHS)):
            layers.append(torch.nn.Linear(WIDTHS[i - 1], WIDTHS[i]))
            if i < len(WIDTHS) - 1:
                layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        inputs = torch.rand(batch, WIDTHS[0], device=device)
        labels = torch.randint(0, WIDTHS[-1], (batch,), device=device)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            return loss.item()  # the per-step synchronization

        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = (time.perf_counter() - start) / steps
        results[batch] = (seconds * 1e3, batch / seconds)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmark", help="path to mlp_gpu_benchmark")
    parser.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    parser.add_argument("--steps", type=int, default=200,
                        help="timed PyTorch steps per batch size")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--min_time", type=float, default=0.5,
                        help="--benchmark_min_time for gradsync")
    parser.add_argument("--json", help="also write the table as JSON here")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]

    gradsync, gradsync_note = {}, ""
    binary = find_benchmark(args.benchmark)
    if binary is None:
        gradsync_note = ("mlp_gpu_benchmark not found: bazel build --config=cuda "
                         "//bench:mlp_gpu_benchmark, or pass --benchmark")
    else:
        try:
            gradsync = run_gradsync(binary, batches, args.min_time)
        except (RuntimeError, ValueError, KeyError) as error:
            gradsync_note = "gradsync benchmark failed: %s" % error
    torch_results = run_torch(batches, args.steps, args.warmup)
    torch_note = torch_results if isinstance(torch_results, str) else ""
    if torch_note:
        torch_results = {}

    print("# MLP %s, SGD momentum 0.9, FP32, one synchronization per step"
          % "-".join(map(str, WIDTHS)))
    print("# sps = samples/s; speedup = torch_ms / gradsync_ms (> 1: gradsync "
          "is faster)")
    print("# %6s %12s %14s %10s %12s %14s %8s" % (
        "batch", "gradsync_ms", "gradsync_sps", "gemm_share",
        "torch_ms", "torch_sps", "speedup"))
    rows = []
    for batch in batches:
        g = gradsync.get(batch)
        t = torch_results.get(batch)
        speedup = t[0] / g[0] if g and t else None
        rows.append({"batch": batch,
                     "gradsync_step_ms": g[0] if g else None,
                     "gradsync_samples_per_s": g[1] if g else None,
                     "gradsync_gemm_share": g[2] if g else None,
                     "torch_step_ms": t[0] if t else None,
                     "torch_samples_per_s": t[1] if t else None,
                     "gradsync_speedup": speedup})
        fmt = lambda v, f: (f % v) if v is not None else "-"
        print("  %6d %12s %14s %10s %12s %14s %8s" % (
            batch, fmt(g and g[0], "%.3f"), fmt(g and g[1], "%.0f"),
            fmt(g and g[2], "%.2f"), fmt(t and t[0], "%.3f"),
            fmt(t and t[1], "%.0f"), fmt(speedup, "%.2fx")))
    for note in (gradsync_note, torch_note):
        if note:
            print("# " + note)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": rows, "gradsync_note": gradsync_note,
                       "torch_note": torch_note}, out, indent=2)
    return 0 if gradsync else 1


if __name__ == "__main__":
    sys.exit(main())
