#!/usr/bin/env python3
"""Where PyTorch's ResNet-18 training step spends its device time, by the
categories bench/layer_profile gives gradsync's: the other half of the same
table, for the same model (bench/pytorch_resnet18_reference.py's CIFAR
ResNet-18), batch and precision, measured with torch.profiler.

One step is what bench/compute_vs_pytorch.py times on a GPU: zero_grad,
forward and loss (under bf16 autocast with channels_last for
--precision=bf16; TF32 allowed for tf32, off for fp32), backward, SGD with
momentum, the loss read back; cudnn.benchmark on. After --warmup steps,
--steps steps run under the profiler; each aten operator's *self* device
time (the kernels it launched itself, not its children's) is summed per
category and divided by the steps. On the CPU the self CPU time stands in.

Categories, from aten operator names (PyTorch's convolution backward runs
both gradients in one operator, so they are one row here, where gradsync's
profile has two; on the CPU, where SGD updates tensor by tensor, its adds
count as element-wise):

    conv forward, conv backward (weight + input gradient), batch norm
    forward, batch norm backward, element-wise, matrix product, pooling,
    loss, optimizer, copy (casts and copies: autocast's bf16 casts land
    here), other

    python3 bench/pytorch_layer_profile.py --device=cuda --batch=128 \\
        --precision=bf16 --out=torch_layers.json

Exit status: 0 with the table; 3 when torch (or, with --device=cuda, a GPU
it sees) is missing, so that a script can tell "not measured" from failure;
1 on any other error; 2 for bad arguments.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# aten operator name -> category; names not here fall to the patterns below.
CATEGORIES = {
    "aten::cudnn_convolution": "conv forward",
    "aten::mkldnn_convolution": "conv forward",
    "aten::convolution_backward": "conv backward",
    "aten::cudnn_convolution_backward": "conv backward",
    "aten::mkldnn_convolution_backward": "conv backward",
    "aten::cudnn_batch_norm": "batch norm forward",
    "aten::native_batch_norm": "batch norm forward",
    "aten::_native_batch_norm_legit": "batch norm forward",
    "aten::_native_batch_norm_legit_functional": "batch norm forward",
    "aten::cudnn_batch_norm_backward": "batch norm backward",
    "aten::native_batch_norm_backward": "batch norm backward",
    "aten::miopen_batch_norm_backward": "batch norm backward",
    "aten::mm": "matrix product",
    "aten::addmm": "matrix product",
    "aten::bmm": "matrix product",
    "aten::adaptive_avg_pool2d": "pooling",
    "aten::_adaptive_avg_pool2d": "pooling",
    "aten::_adaptive_avg_pool2d_backward": "pooling",
    "aten::mean": "pooling",
    "aten::_log_softmax": "loss",
    "aten::_log_softmax_backward_data": "loss",
    "aten::nll_loss_forward": "loss",
    "aten::nll_loss_backward": "loss",
    "aten::copy_": "copy",
    "aten::_to_copy": "copy",
    "aten::to": "copy",
    "aten::contiguous": "copy",
    "aten::clone": "copy",
}
ELEMENTWISE = ("aten::relu", "aten::relu_", "aten::threshold_backward",
               "aten::add", "aten::add_", "aten::mul", "aten::mul_",
               "aten::fill_", "aten::zero_", "aten::zeros_like", "aten::div",
               "aten::div_", "aten::sub", "aten::sub_", "aten::clamp_min",
               "aten::clamp_min_", "aten::where", "aten::sum")


def category_of(name):
    """The category of an aten operator (or profiler event) name."""
    if name in CATEGORIES:
        return CATEGORIES[name]
    if name.startswith("aten::_foreach") or name.startswith("Optimizer."):
        return "optimizer"
    if name in ELEMENTWISE:
        return "element-wise"
    return "other"


def summarize(events, steps):
    """Rows per category and per operator from (name, self ms in total,
    calls in total, is a kernel) tuples over `steps` steps: each row's calls
    a step, ms a step and share of the step's total. Operators' self device
    time is their kernels', so the kernels' own events (the profiler lists
    them too) are summed apart, as a check, not into the rows. Rows with no
    time are left out."""
    if steps < 1:
        raise ValueError("steps must be at least 1")
    by_category, by_op = {}, {}
    kernel_ms = 0.0
    for name, ms, calls, kernel in events:
        if kernel:
            kernel_ms += ms
            continue
        if ms <= 0:
            continue
        for table, key in ((by_category, category_of(name)), (by_op, name)):
            row = table.setdefault(key, [0.0, 0])
            row[0] += ms
            row[1] += calls
    total = sum(ms for ms, _ in by_category.values()) / steps

    def rows(table):
        out = [{"name": key, "calls": calls / steps, "ms": ms / steps,
                "share": (ms / steps) / total if total else 0.0}
               for key, (ms, calls) in table.items()]
        return sorted(out, key=lambda row: (-row["ms"], row["name"]))

    return {"total_ms": total, "kernel_ms": kernel_ms / steps,
            "categories": rows(by_category), "operators": rows(by_op)}


def format_table(summary, top):
    lines = ["%.3f ms of device time a step (self time of every operator)" %
             summary["total_ms"]]
    if summary["kernel_ms"] > 0:
        lines.append("%.3f ms a step in all kernels (the operators launched "
                     "%.1f%% of it)" % (summary["kernel_ms"], 100 *
                                        summary["total_ms"] /
                                        summary["kernel_ms"]))
    lines.append("")
    for heading, rows, limit in (("category", summary["categories"], None),
                                 ("operator", summary["operators"], top)):
        lines.append("%-46s %7s %10s %7s" % (heading, "calls", "ms/step",
                                             "share"))
        for row in rows[:limit]:
            lines.append("%-46s %7.1f %10.3f %6.1f%%" % (
                row["name"], row["calls"], row["ms"], 100 * row["share"]))
        lines.append("")
    return "\n".join(lines)


def is_kernel(event):
    """Whether an averaged event is a device-side one (a kernel or a copy on
    the GPU) rather than an operator that launched it."""
    return not str(getattr(event, "device_type", "CPU")).endswith("CPU")


def self_ms(event, cuda):
    """An averaged event's self time in ms: device time on CUDA (the name
    changed between torch 1.x and 2.x), CPU time otherwise."""
    if cuda:
        for attribute in ("self_device_time_total", "self_cuda_time_total"):
            value = getattr(event, attribute, None)
            if value is not None:
                return value / 1e3
        return 0.0
    return event.self_cpu_time_total / 1e3


def profile(torch, args):
    sys.path.insert(0, HERE)
    import pytorch_resnet18_reference as reference
    cuda = args.device == "cuda"
    device = torch.device(args.device)
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    model = reference.build_resnet18(torch).to(device)
    memory_format = torch.contiguous_format
    if args.precision == "bf16":
        memory_format = torch.channels_last
        model = model.to(memory_format=memory_format)
    inputs = torch.randn(args.batch, 3, 32, 32, device=device).contiguous(
        memory_format=memory_format)
    labels = torch.randint(0, 10, (args.batch,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            loss = step()
    events = [(e.key, self_ms(e, cuda), e.count, is_kernel(e))
              for e in prof.key_averages()]
    summary = summarize(events, args.steps)
    summary.update({"model": "resnet18", "device": args.device,
                    "precision": args.precision, "batch": args.batch,
                    "steps": args.steps, "warmup": args.warmup,
                    "torch": torch.__version__, "last_loss": loss})
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--precision", choices=("fp32", "tf32", "bf16"),
                        default="fp32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", help="also write the summary here (JSON)")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--batch and --steps must be at least 1, --warmup at "
                     "least 0")
    if args.device == "cpu" and args.precision == "tf32":
        parser.error("--precision=tf32 needs --device=cuda")
    try:
        import torch
    except ImportError as error:
        print("pytorch_layer_profile: torch is not importable by %s (%s)" %
              (sys.executable, error), file=sys.stderr)
        return 3
    if args.device == "cuda" and not torch.cuda.is_available():
        print("pytorch_layer_profile: torch %s sees no CUDA GPU" %
              torch.__version__, file=sys.stderr)
        return 3
    try:
        summary = profile(torch, args)
    except Exception as error:  # one line, whatever torch raised
        print("pytorch_layer_profile: %s: %s" % (type(error).__name__, error),
              file=sys.stderr)
        return 1
    print("resnet18 in torch %s on %s, --precision=%s, batch %d; last loss %g"
          % (summary["torch"], args.device, args.precision, args.batch,
             summary["last_loss"]))
    print(format_table(summary, args.top))
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=1)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
