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

On a GPU (--device=cuda): `gradsync train --device=cuda --sync=local
--data=synthetic` (the --gradsync binary: a bundle's bin/gradsync or
bazel-bin/tools/gradsync of a --config=cuda build) beside the same model in
PyTorch on the GPU, per model (resnet18, cnn, mlp), batch and precision:

    python3 bench/compute_vs_pytorch.py --device=cuda \
        --gradsync=bazel-bin/tools/gradsync --models=resnet18,cnn,mlp \
        --batches=32,128,256 --precisions=fp32,tf32,bf16 --rows=rows.tsv

gradsync's figure is its run summary's mean step_ms after --warmup steps
(compute_ms beside it: forward and backward on the GPU's own clock).
PyTorch's is the median of --steps steps after --warmup, each ending in
loss.item() as gradsync's trainer reads its loss every step, SGD momentum
0.9, torch.backends.cudnn.benchmark on (convolution algorithms chosen by
measurement, as a user tuning for speed runs). Precisions, PyTorch side: fp32
= TF32 off for cuDNN and matrix products; tf32 = TF32 on for both; bf16 =
torch.autocast(bfloat16) with channels_last tensors for the convolutional
models; gradsync's row runs with --precision set to the same name (its bf16
is mixed precision as autocast's), and gradsync refusing a precision is a
FAIL (every precision is built: a refusal means a binary from before it). --rows=FILE writes one "STATUS<TAB>name<TAB>detail"
line per point for tools/gpu_check.sh's table; --dry_run prints the commands
and runs nothing (tested without a GPU by tools/gpu_check_test.sh). A
ResNet-18 point at batch 128 or more under issue 39's bar (gradsync at least
as fast as PyTorch in fp32 and tf32, 0.8x in bf16) is a FAIL row.
--variants=FLAG,... also measures gradsync with each of those flags set
(a boolean's name, or NAME=VALUE, e.g. cudnn_layout=nhwc or
cudnn_graph=false), on --variant_models at --variant_batches, each right
after the default point it varies and
against the same PyTorch figure, as
rows speed/MODEL/BATCH/PRECISION/FLAG; a variant's row says whether it meets
the bar but fails only if it does not run (the bar is the defaults'). A
variant runs only at the precisions where it changes the default run
(VARIANT_PRECISIONS): e.g. cudnn_layout=nchw in tf32 alone, since fp32
computes ResNet-18 in NCHW by default and bf16 in NHWC whatever the flag.
--budget_s=S bounds the whole GPU comparison: each child's timeout is cut
to what is left of S, a point that cannot start (under BUDGET_MARGIN_S
left) or that the cut timeout ends is a SKIP row saying so, and the script
ends within S (tools/gpu_check.sh's 8 minutes).

Needs Debian's python3-torch (tools/install_deps.sh --with-pytorch); run it
with /usr/bin/python3, the interpreter that package installs into.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

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


# --- on a GPU ------------------------------------------------------------------
GPU_MODELS = ("resnet18", "cnn", "mlp")
PRECISIONS = ("fp32", "tf32", "bf16")
# Issue 39's bar for ResNet-18 at these batches and above: gradsync's speed
# over PyTorch's (PyTorch's step time / gradsync's) at least this, per
# precision. Other points are reported, not judged.
RESNET_BAR_BATCH = 128
RESNET_BAR = {"fp32": 1.0, "tf32": 1.0, "bf16": 0.8}

PYTORCH_GPU_CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, %(here)r)
import torch
import compute_vs_pytorch as c
import pytorch_resnet18_reference as r
if not torch.cuda.is_available():
    sys.exit("torch %%s sees no CUDA GPU" %% torch.__version__)
precision = %(precision)r
tf32 = precision == "tf32"
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
torch.backends.cudnn.benchmark = True
for batch in %(batches)r:
    torch.manual_seed(1)
    model, shape = c.build_gpu_model(torch, r, %(model)r)
    model = model.cuda()
    memory_format = torch.contiguous_format
    if precision == "bf16" and len(shape) == 3:
        memory_format = torch.channels_last
        model = model.to(memory_format=memory_format)
    inputs = torch.randn(batch, *shape, device="cuda")
    if len(shape) == 3:
        inputs = inputs.contiguous(memory_format=memory_format)
    labels = torch.randint(0, 10, (batch,), device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for step in range(%(warmup)d + %(steps)d):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16,
                            enabled=precision == "bf16"):
            loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        loss.item()
        if step >= %(warmup)d:
            times.append(time.perf_counter() - start)
    print(json.dumps({"batch": batch, "ms": statistics.median(times) * 1e3,
                      "torch": torch.__version__}))
    sys.stdout.flush()
"""


def build_gpu_model(torch, reference, model_name):
    """(model, input shape without the batch) for gradsync's model of that
    name at its defaults."""
    if model_name == "resnet18":
        return reference.build_resnet18(torch), (3, 32, 32)
    if model_name == "cnn":
        return build_cnn(torch), (1, 28, 28)
    nn = torch.nn  # gradsync's default MLP, 784-512-256-10
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 10)), (784,)


def gradsync_gpu_command(gradsync, model, batch, precision, steps, warmup,
                         metrics_dir):
    return [gradsync, "train", "--device=cuda", "--sync=local",
            "--data=synthetic", "--model=" + model,
            "--batch_size=%d" % batch, "--precision=" + precision,
            "--max_steps=%d" % (warmup + steps), "--warmup_steps=%d" % warmup,
            "--eval=false", "--progress=false", "--metrics_dir=" + metrics_dir]


def pytorch_gpu_command(model, batches, precision, steps, warmup):
    code = PYTORCH_GPU_CHILD % {"here": HERE, "model": model,
                                "batches": list(batches),
                                "precision": precision, "steps": steps,
                                "warmup": warmup}
    return [sys.executable, "-c", code]


def refused_precision(stderr, precision):
    """Whether gradsync's error says it does not build this precision (a
    binary from before that precision was built)."""
    text = stderr.lower()
    return "precision" in text and precision in text and (
        "not built" in text or "refus" in text or "unsupported" in text or
        "not supported" in text)


def judge_gpu_point(model, batch, precision, ours, theirs, variant=""):
    """(status, note) of one measured point: FAIL only where issue 39 sets a
    bar (ResNet-18, batch >= RESNET_BAR_BATCH) and the ratio is under it. A
    variant's point (a flag the default run does not set) is measured
    against the same bar and says so, but fails nothing: the bar is the
    defaults'."""
    if theirs is None:
        return "PASS", ""
    ratio = theirs / ours
    bar = RESNET_BAR.get(precision)
    if model == "resnet18" and batch >= RESNET_BAR_BATCH and bar is not None:
        if ratio < bar:
            if variant:
                return "PASS", ("under the bar of %.1fx; --%s is not the "
                                "default, so not judged" % (bar, variant))
            return "FAIL", "under the bar of %.1fx" % bar
        return "PASS", "bar %.1fx met" % bar
    return "PASS", ""


# The precisions where a variant's flag changes what the default run does
# (--cudnn_layout=auto: fp32 on NCHW activations and the legacy algorithms,
# tf32 and bf16 on NHWC and the graph API's engines; bf16 computes NHWC
# whatever the layout); a flag not listed changes every precision.
VARIANT_PRECISIONS = {
    "cudnn_graph=true": ("fp32",),
    "cudnn_graph=false": ("tf32", "bf16"),
    "cudnn_layout=nhwc": ("fp32",),
    "cudnn_layout=nchw": ("tf32",),
    "cudnn_layout=fastest": ("fp32", "tf32"),
}


def variant_applies(variant, precision):
    """Whether gradsync's --`variant` changes a ResNet-18 run at
    `precision` (VARIANT_PRECISIONS)."""
    return precision in VARIANT_PRECISIONS.get(variant, (precision,))


# Under --budget_s, a child starts only with this many seconds left.
BUDGET_MARGIN_S = 15
BUDGET_SPENT = "the time budget (--budget_s) is spent"


class Budget:
    """What is left of --budget_s (none: no limit), and the timeout a child
    gets from it."""

    def __init__(self, budget_s, timeout_s):
        self.deadline = (time.monotonic() + budget_s) if budget_s else None
        self.timeout_s = timeout_s

    def spent(self):
        return (self.deadline is not None and
                self.deadline - time.monotonic() < BUDGET_MARGIN_S)

    def child_timeout(self):
        """(seconds, cut): the child's timeout, and whether the budget cut
        it below --timeout_s."""
        if self.deadline is None:
            return self.timeout_s, False
        left = int(self.deadline - time.monotonic())
        return min(self.timeout_s, left), left < self.timeout_s


def run_gpu(args, models, batches, precisions, variants):
    """The GPU comparison; returns the number of failed points. Each
    default point is followed by its variants' (`variants`: (model, batch)
    -> gradsync flags to set), so that the two run minutes apart and meet
    the same PyTorch figure."""
    work = args.work_dir or os.path.join(os.getcwd(), "compute_vs_pytorch.gpu")
    rows_out = []
    failures = 0
    budget = Budget(0 if args.dry_run else args.budget_s, args.timeout_s)

    def emit(status, name, detail):
        rows_out.append("%s\t%s\t%s" % (status, name, detail))
        print("%-5s %-24s %s" % (status, name, detail))
        sys.stdout.flush()
        if args.rows:
            with open(args.rows, "w") as out:
                out.write("\n".join(rows_out) + "\n")

    pytorch = {}  # (model, precision) -> {batch: ms} or an error string

    def measure_pytorch(model, precision):
        """Runs PyTorch's points of (model, precision), every batch in one
        child, into `pytorch`."""
        command = pytorch_gpu_command(model, batches, precision,
                                      args.steps, args.warmup)
        if args.dry_run:
            print("would run (timeout %d s): %s -c <PyTorch %s %s, "
                  "batches %s>" % (args.timeout_s, command[0], model,
                                   precision, ",".join(map(str, batches))))
            pytorch[(model, precision)] = "dry run"
            return
        if budget.spent():
            pytorch[(model, precision)] = "not run: " + BUDGET_SPENT
            return
        timeout_s, cut = budget.child_timeout()
        try:
            result = subprocess.run(command, capture_output=True,
                                    text=True, timeout=timeout_s)
            found = {}
            for line in result.stdout.splitlines():
                if line.startswith("{"):
                    point = json.loads(line)
                    found[point["batch"]] = point["ms"]
            if result.returncode != 0 and not found:
                tail = " | ".join(result.stderr.strip().splitlines()[-2:])
                found = "PyTorch exited %d: %s" % (result.returncode,
                                                   tail or "no stderr")
            pytorch[(model, precision)] = found
        except subprocess.TimeoutExpired:
            pytorch[(model, precision)] = (
                "PyTorch timed out after %d s%s" %
                (timeout_s, " (cut by --budget_s)" if cut else ""))

    def measure(model, batch, precision, variant):
        """Runs one gradsync point (with --`variant` where it is not "") and
        emits its row; returns 1 if it failed, else 0."""
        name = "speed/%s/%d/%s" % (model, batch, precision)
        if variant:
            name += "/" + variant
        metrics_dir = os.path.join(work, name.replace("/", "-"))
        command = gradsync_gpu_command(args.gradsync, model, batch, precision,
                                       args.steps, args.warmup, metrics_dir)
        if variant:
            command.append("--" + variant)
        if args.dry_run:
            print("would run (timeout %d s): %s" %
                  (args.timeout_s, " ".join(command)))
            emit("SKIP", name, "dry run")
            return 0
        theirs = pytorch[(model, precision)]
        theirs_ms = theirs.get(batch) if isinstance(theirs, dict) else None
        theirs_text = ("pytorch %.2f ms" % theirs_ms if theirs_ms is not None
                       else "pytorch: %s" % (theirs or "no figure"))
        if budget.spent():
            emit("SKIP", name, BUDGET_SPENT)
            return 0
        os.makedirs(metrics_dir, exist_ok=True)
        timeout_s, cut = budget.child_timeout()
        try:
            result = subprocess.run(command, capture_output=True, text=True,
                                    timeout=timeout_s)
        except subprocess.TimeoutExpired:
            if cut:
                emit("SKIP", name, "gradsync ran past the end of the time "
                     "budget (--budget_s, %d s left for it); %s" %
                     (timeout_s, theirs_text))
                return 0
            emit("FAIL", name, "gradsync timed out after %d s; %s" %
                 (timeout_s, theirs_text))
            return 1
        with open(os.path.join(metrics_dir, "stderr.log"), "w") as log:
            log.write(result.stderr)
        if result.returncode != 0:
            tail = " | ".join(result.stderr.strip().splitlines()[-2:])
            if refused_precision(result.stderr, precision):
                emit("FAIL", name, "gradsync refuses %s (%s): a binary from "
                     "before --precision=%s; %s" %
                     (precision, tail, precision, theirs_text))
            else:
                emit("FAIL", name, "gradsync exited %d: %s; %s" %
                     (result.returncode, tail, theirs_text))
            return 1
        try:
            with open(os.path.join(metrics_dir, "summary.json")) as f:
                summary = json.load(f)
            ours = float(summary["step_ms"])
            compute = float(summary["compute_ms"])
        except (OSError, ValueError, KeyError) as error:
            emit("FAIL", name, "no step_ms/compute_ms in %s/summary.json (%s)"
                 % (metrics_dir, error))
            return 1
        status, note = judge_gpu_point(model, batch, precision, ours,
                                       theirs_ms, variant)
        detail = "gradsync %.2f ms (compute %.2f); %s" % (ours, compute,
                                                          theirs_text)
        if theirs_ms is not None:
            detail += "; %.2fx PyTorch's speed" % (theirs_ms / ours)
        if note:
            detail += " (%s)" % note
        emit(status, name, detail)
        return 1 if status == "FAIL" else 0

    # Model by model, PyTorch's points first: each model's two libraries
    # run minutes apart, and a budget that runs out leaves the first
    # models (ResNet-18, the bar's) whole rather than every model's
    # PyTorch figures and no gradsync point.
    for model in models:
        for precision in precisions:
            measure_pytorch(model, precision)
        for batch in batches:
            for precision in precisions:
                failures += measure(model, batch, precision, "")
                for variant in variants.get((model, batch), ()):
                    if variant_applies(variant, precision):
                        failures += measure(model, batch, precision, variant)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--models", default="resnet18,cnn",
                        help="cpu: resnet18 and/or cnn; cuda: also mlp")
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
    parser.add_argument("--precisions", default="fp32,tf32,bf16",
                        help="cuda: comma-separated fp32, tf32, bf16")
    parser.add_argument("--gradsync", default=os.path.join(
        HERE, "..", "bazel-bin", "tools", "gradsync"),
                        help="cuda: the gradsync binary (a --config=cuda build)")
    parser.add_argument("--steps", type=int, default=30,
                        help="cuda: timed steps per point (after --warmup)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="cuda: untimed steps first")
    parser.add_argument("--timeout_s", type=int, default=120,
                        help="cuda: limit of each child process")
    parser.add_argument("--work_dir", default="",
                        help="cuda: where gradsync's metrics folders go")
    parser.add_argument("--budget_s", type=int, default=0,
                        help="cuda: seconds for the whole comparison (0: no "
                             "limit); points it cannot reach are SKIP rows")
    parser.add_argument("--rows", default="",
                        help="cuda: write STATUS<TAB>name<TAB>detail rows here")
    parser.add_argument("--dry_run", action="store_true",
                        help="cuda: print the commands, run nothing")
    parser.add_argument("--variants", default="",
                        help="cuda: comma-separated gradsync flags (boolean, "
                             "without --) each also measured set, right "
                             "after the default point, as rows "
                             "speed/MODEL/BATCH/PRECISION/FLAG")
    parser.add_argument("--variant_models", default="resnet18",
                        help="cuda: the models --variants are measured on")
    parser.add_argument("--variant_batches", default="128,256",
                        help="cuda: the batches --variants are measured at")
    args = parser.parse_args()
    models = args.models.split(",")
    if args.device == "cuda":
        if any(m not in GPU_MODELS for m in models):
            parser.error("--models takes resnet18, cnn and/or mlp")
        precisions = args.precisions.split(",")
        if any(p not in PRECISIONS for p in precisions):
            parser.error("--precisions takes fp32, tf32 and/or bf16")
        try:
            batches = [int(b) for b in args.batches.split(",")]
        except ValueError:
            parser.error("--batches takes comma-separated integers")
        if min(batches) < 1 or args.steps < 1 or args.warmup < 0:
            parser.error("batches and --steps must be >= 1, --warmup >= 0")
        if not args.dry_run and not os.access(args.gradsync, os.X_OK):
            sys.exit("%s is not an executable gradsync: pass --gradsync" %
                     args.gradsync)
        flags = [v for v in args.variants.split(",") if v]
        if any(not re.fullmatch(r"[a-z][a-z0-9_]*(=[a-z0-9_.]+)?", v)
               for v in flags):
            parser.error("--variants takes gradsync flags without their "
                         "dashes, e.g. cudnn_graph=true or cudnn_layout=fastest")
        try:
            variant_batches = {int(b) for b in
                               args.variant_batches.split(",") if b}
        except ValueError:
            parser.error("--variant_batches takes comma-separated integers")
        variant_models = set(args.variant_models.split(","))
        variants = {(m, b): flags for m in models for b in batches
                    if m in variant_models and b in variant_batches}
        failures = run_gpu(args, models, batches, precisions, variants)
        if failures:
            sys.exit("%d point(s) failed (FAIL rows above)" % failures)
        return
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
