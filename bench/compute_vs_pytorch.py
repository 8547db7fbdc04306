#!/usr/bin/env python3
"""gradsync's CPU compute beside PyTorch's, in the same run: ResNet-18 (CIFAR
form) and the CNN (Fashion-MNIST form), at each batch size and thread count,
and the ratio of their speeds (PyTorch's step time over gradsync's: above 1.0
means gradsync is faster).

For every (model, batch, threads) the two run one after the other, each in a
process of its own with that many threads, so both see the same moment's
load; the 1-minute load average is printed with each pair. On a machine
shared with other work the wall times grow with the load; the ratio of two
neighbouring measurements is the figure to read, and the CPU time of a step
summed over its threads (gradsync_cpu, pytorch_cpu, in ms, and their ratio
cpu_ratio) is a second reading that the load moves less.

    bazel build -c opt //bench:resnet_benchmark //bench:cnn_benchmark
    /usr/bin/python3 bench/compute_vs_pytorch.py
    /usr/bin/python3 bench/compute_vs_pytorch.py --models=resnet18 \\
        --batches=32 --threads=2 --repetitions=5 --json=compute.json

What is timed. gradsync: one ForwardBackward of the model on the CPU device
(bench/resnet_benchmark, bench/cnn_benchmark; median of --repetitions
repetitions of at least --min_time seconds each). PyTorch: forward, loss,
backward and an SGD step (momentum 0.9) in training mode
(bench/pytorch_resnet18_reference.py's loop; median of --repetitions steps
after one warm-up). PyTorch's step thus includes an optimizer step that
gradsync's does not (an element-wise pass over the parameters: about 1 % of
ResNet-18's step): the comparison leans towards PyTorch.

The MLP (--mlp_baseline_bin_dir=DIR): bench/mlp_benchmark's training step of
this build beside the same benchmark of another build (the baseline, built in
a checkout of its own), alternately per (batch, threads), with the ratio
baseline/this (above 1.0: this build is faster). The issue's bar is "no
slower than before"; PyTorch has no part in it.

    bazel build -c opt //bench:mlp_benchmark
    git worktree add ../gradsync-baseline 2e3b0c6
    (cd ../gradsync-baseline && bazel build -c opt //bench:mlp_benchmark)
    /usr/bin/python3 bench/compute_vs_pytorch.py \
        --mlp_baseline_bin_dir=../gradsync-baseline/bazel-bin/bench

A point that fails (a benchmark that crashes or is missing) is printed as
FAILED with its error and the run goes on to the next; the exit status is 1
if any failed. --json is rewritten after every point, so an interrupted run
keeps what it measured.

Needs Debian's python3-torch (tools/install_deps.sh --with-pytorch); run it
with /usr/bin/python3, the interpreter that package installs into.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BINARIES = {"resnet18": ("resnet_benchmark", "BM_ResNet18ForwardBackward"),
            "cnn": ("cnn_benchmark", "BM_CnnForwardBackward"),
            "mlp": ("mlp_benchmark", "BM_MlpTrainingStep")}
# The MLP points: the batches and threads mlp_benchmark registers.
MLP_BATCHES = (32, 64, 128, 256)


class PointFailed(Exception):
    """One measurement could not be taken; the run goes on without it."""


def build_cnn(torch):
    """The CNN of core/model/cnn.cc at its defaults: 1x28x28 inputs, conv 3x3
    (32, bias) -> ReLU -> max-pool 2 -> conv 3x3 (64, bias) -> ReLU -> max-pool
    2 -> fc 128 -> ReLU -> fc 10."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10))


def pytorch_step_ms(model_name, batch, threads, repetitions):
    """Runs PyTorch in a child process with `threads` threads; returns the
    median step (ms) and the median CPU time of a step (ms)."""
    code = r"""
import json, statistics, sys, time
sys.path.insert(0, %(here)r)
import torch
import compute_vs_pytorch as c
import pytorch_resnet18_reference as r
torch.manual_seed(1)
torch.set_num_threads(%(threads)d)
torch.set_num_interop_threads(1)
if %(model)r == "resnet18":
    model, shape = r.build_resnet18(torch), (3, 32, 32)
else:
    model, shape = c.build_cnn(torch), (1, 28, 28)
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(%(batch)d, *shape, generator=generator)
labels = torch.randint(0, 10, (%(batch)d,), generator=generator)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
times, cpu = [], []
for step in range(1 + %(steps)d):
    start, cpu_start = time.perf_counter(), time.process_time()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    loss.item()
    if step >= 1:
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
print(json.dumps({"ms": statistics.median(times) * 1e3,
                  "cpu_ms": statistics.median(cpu) * 1e3}))
""" % {"here": HERE, "threads": threads, "model": model_name, "batch": batch,
       "steps": repetitions}
    out = run_child([sys.executable, "-c", code], "PyTorch %s" % model_name)
    result = json.loads(out.strip().splitlines()[-1])
    return result["ms"], result["cpu_ms"]


def run_child(command, what):
    """stdout of `command`, or PointFailed naming `what` and the end of its
    stderr."""
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise PointFailed("%s exited with status %d: %s" %
                          (what, result.returncode, tail or "no stderr"))
    return result.stdout


def gradsync_step_ms(bin_dir, model_name, batch, threads, repetitions,
                     min_time):
    binary, name = BINARIES[model_name]
    path = os.path.join(bin_dir, binary)
    if not os.access(path, os.X_OK):
        raise PointFailed("%s is missing: build it first (bazel build -c opt "
                          "//bench:%s) or point --bin_dir at it" %
                          (path, binary))
    command = [path,
               "--benchmark_filter=%s/batch:%d/threads:%d/" % (name, batch,
                                                                threads),
               "--benchmark_repetitions=%d" % repetitions,
               "--benchmark_min_time=%g" % min_time,
               "--benchmark_format=json"]
    out = run_child(command, path)
    runs = [b for b in json.loads(out)["benchmarks"]
            if b.get("run_type") == "iteration" and not b.get("error_occurred")]
    if not runs:
        raise PointFailed("%s ran no benchmark for batch %d, %d threads" %
                          (path, batch, threads))
    # Real time and the process's CPU time (all threads: the model
    # benchmarks measure process CPU time) per iteration, in ms whatever unit
    # the benchmark reports in (mlp_benchmark's is microseconds).
    to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    scale = to_ms[runs[0].get("time_unit", "ns")]
    return (statistics.median(b["real_time"] for b in runs) * scale,
            statistics.median(b["cpu_time"] for b in runs) * scale)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,cnn")
    parser.add_argument("--batches", default="32,64")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="timed repetitions (gradsync) and steps "
                             "(PyTorch) per point; the median is reported")
    parser.add_argument("--min_time", type=float, default=0.5,
                        help="gradsync: minimum seconds per repetition")
    parser.add_argument("--bin_dir",
                        default=os.path.join(HERE, "..", "bazel-bin", "bench"))
    parser.add_argument("--json", default="", help="also write results here")
    parser.add_argument("--mlp_baseline_bin_dir", default="",
                        help="also time bench/mlp_benchmark of this build "
                             "beside the one in this folder (another build's "
                             "bazel-bin/bench)")
    args = parser.parse_args()
    models = args.models.split(",")
    if any(m not in BINARIES for m in models):
        parser.error("--models takes resnet18 and/or cnn")
    try:
        batches = [int(b) for b in args.batches.split(",")]
        thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        parser.error("--batches and --threads take comma-separated integers")
    if args.repetitions < 1 or min(batches + thread_counts) < 1:
        parser.error("--repetitions, batches and threads must be >= 1")
    try:
        import torch
    except ImportError as error:
        sys.exit("torch is not importable (%s): install Debian's python3-torch "
                 "and run this script with /usr/bin/python3" % error)
    print("torch %s; gradsync binaries in %s" % (torch.__version__,
                                                  args.bin_dir))
    print("%-9s %5s %7s %6s %12s %12s %7s %12s %12s %9s" % (
        "model", "batch", "threads", "load", "gradsync_ms", "pytorch_ms",
        "ratio", "gradsync_cpu", "pytorch_cpu", "cpu_ratio"))
    rows = []
    failures = 0

    def save():
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"torch": torch.__version__, "results": rows}, out,
                          indent=1)
                out.write("\n")

    for model in models:
        for batch in batches:
            for threads in thread_counts:
                load = os.getloadavg()[0]
                try:
                    ours, ours_cpu = gradsync_step_ms(
                        args.bin_dir, model, batch, threads, args.repetitions,
                        args.min_time)
                    theirs, theirs_cpu = pytorch_step_ms(
                        model, batch, threads, args.repetitions)
                except PointFailed as error:
                    failures += 1
                    rows.append({"model": model, "batch": batch,
                                 "threads": threads,
                                 "load_average_1min": load,
                                 "error": str(error)})
                    print("%-9s %5d %7d %6.1f FAILED: %s" %
                          (model, batch, threads, load, error))
                    save()
                    continue
                row = {"model": model, "batch": batch, "threads": threads,
                       "load_average_1min": load, "gradsync_ms": ours,
                       "gradsync_cpu_ms": ours_cpu,
                       "pytorch_ms": theirs, "pytorch_cpu_ms": theirs_cpu,
                       "ratio": theirs / ours,
                       "cpu_ratio": theirs_cpu / ours_cpu}
                rows.append(row)
                print("%-9s %5d %7d %6.1f %12.1f %12.1f %6.2fx %12.1f %12.1f "
                      "%8.2fx" % (model, batch, threads, load, ours, theirs,
                                  row["ratio"], ours_cpu, theirs_cpu,
                                  row["cpu_ratio"]))
                sys.stdout.flush()
                save()
    if args.mlp_baseline_bin_dir:
        print()
        print("%-9s %5s %7s %6s %12s %12s %7s" % (
            "mlp", "batch", "threads", "load", "this_ms", "baseline_ms",
            "ratio"))
        for batch in MLP_BATCHES:
            for threads in thread_counts:
                load = os.getloadavg()[0]
                try:
                    ours, _ = gradsync_step_ms(args.bin_dir, "mlp", batch,
                                               threads, args.repetitions,
                                               args.min_time)
                    base, _ = gradsync_step_ms(args.mlp_baseline_bin_dir,
                                               "mlp", batch, threads,
                                               args.repetitions,
                                               args.min_time)
                except PointFailed as error:
                    failures += 1
                    rows.append({"model": "mlp", "batch": batch,
                                 "threads": threads,
                                 "load_average_1min": load,
                                 "error": str(error)})
                    print("%-9s %5d %7d %6.1f FAILED: %s" %
                          ("mlp", batch, threads, load, error))
                    save()
                    continue
                rows.append({"model": "mlp", "batch": batch,
                             "threads": threads, "load_average_1min": load,
                             "gradsync_ms": ours, "baseline_ms": base,
                             "baseline_ratio": base / ours})
                print("%-9s %5d %7d %6.1f %12.3f %12.3f %6.2fx" %
                      ("mlp", batch, threads, load, ours, base, base / ours))
                sys.stdout.flush()
                save()
    if failures:
        sys.exit("%d point(s) failed (rows marked FAILED above)" % failures)


if __name__ == "__main__":
    main()
