#!/usr/bin/env python3
"""PyTorch's CPU training step of ResNet-18 (CIFAR variant): the reference
next to which gradsync's own ResNet-18 compute benchmark is read.

The model is the CIFAR-10 ResNet-18 most DDP examples train (as in
kuangliu/pytorch-cifar): a 3x3 stride-1 stem convolution to 64 channels with
no max-pool, BasicBlocks [2, 2, 2, 2] at 64/128/256/512 channels (stride 2 at
the first block of the last three stages, 1x1 convolution + batch norm
shortcuts there), global average pooling and a 10-way linear layer:
11,173,962 parameters, checked at start-up.

One step = forward, softmax cross-entropy, backward, and an SGD step (momentum
0.9, weight decay 5e-4), batch norm in training mode, on one fixed batch of
random 3x32x32 inputs and labels. Each batch size is warmed up, then every
step is timed on its own; the table shows the median (and the fastest and
slowest) step, images per second, the rate in GFLOP/s from the counted
multiply-adds (2 FLOPs each; backward counted as twice forward, the usual
estimate: one product for the input gradient and one for the weight gradient
per layer), and the median CPU time of a step over all threads (cpu_ms): on a
machine shared with other work, wall time grows with the load while cpu_ms
stays near threads x the unloaded step time (a little above it when OpenMP
threads spin while waiting).

    python3 bench/pytorch_resnet18_reference.py --threads=2
    python3 bench/pytorch_resnet18_reference.py --threads=2 --batches=32,64 \\
        --steps=10 --json=resnet18_pytorch.json

torch comes from Debian's python3-torch (tools/install_deps.sh --with-pytorch
installs it; about 570 MB, so CI does not); run the script with Debian's
python3, the one that package installs into.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

EXPECTED_PARAMETERS = 11_173_962


def build_resnet18(torch):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, in_channels, channels, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)
            self.shortcut = nn.Sequential()
            if stride != 1 or in_channels != channels:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_channels, channels, 1, stride, bias=False),
                    nn.BatchNorm2d(channels))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + self.shortcut(x))

    class ResNet18(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            stages = []
            in_channels = 64
            for channels, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
                stages.append(nn.Sequential(
                    BasicBlock(in_channels, channels, stride),
                    BasicBlock(channels, channels, 1)))
                in_channels = channels
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.linear = nn.Linear(512, classes)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
            out = torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1)
            return self.linear(out)

    return ResNet18()


def forward_macs_per_image(torch, model):
    """Multiply-adds of one image's forward pass in convolutions and the
    linear layer (batch norm, ReLU, pooling and additions are left out: under
    1 % of the total)."""
    macs = []

    def conv_hook(module, inputs, output):
        kernel = module.kernel_size[0] * module.kernel_size[1]
        per_output = module.in_channels // module.groups * kernel
        macs.append(output[0].numel() * per_output)

    def linear_hook(module, inputs, output):
        macs.append(module.in_features * module.out_features)

    handles = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_hook(linear_hook))
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, 32, 32))
    model.train()
    for handle in handles:
        handle.remove()
    return sum(macs)


def time_steps(torch, model, batch, warmup, steps, seed):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                                weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    cpu_times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        cpu_start = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # as gradsync's trainer reads the loss
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        if step >= warmup:
            times.append(elapsed)
            cpu_times.append(cpu)
    if not loss_value == loss_value:  # NaN
        raise RuntimeError("loss became NaN at batch %d" % batch)
    return times, cpu_times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2,
                        help="intra-op threads (torch.set_num_threads)")
    parser.add_argument("--batches", default="32,64",
                        help="comma-separated batch sizes")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps per batch size")
    parser.add_argument("--steps", type=int, default=10,
                        help="timed steps per batch size (median reported)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="", help="also write results here")
    args = parser.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--threads and --steps must be >= 1, --warmup >= 0")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error("--batches must be comma-separated integers")
    if any(b < 1 for b in batches):
        parser.error("--batches must be positive")

    try:
        import torch
    except ImportError as error:
        sys.exit("torch is not importable (%s): install Debian's python3-torch "
                 "(tools/install_deps.sh --with-pytorch) and run this script "
                 "with Debian's python3" % error)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    model = build_resnet18(torch)
    parameters = sum(p.numel() for p in model.parameters())
    tensors = sum(1 for _ in model.parameters())
    print("ResNet-18 (CIFAR variant): %d parameters in %d tensors"
          % (parameters, tensors))
    if parameters != EXPECTED_PARAMETERS:
        sys.exit("expected %d parameters, built %d: the model is not the "
                 "CIFAR ResNet-18" % (EXPECTED_PARAMETERS, parameters))
    macs = forward_macs_per_image(torch, model)
    flops_per_image = 3 * 2 * macs  # forward + backward (2x forward)
    print("forward: %.3f G multiply-adds per image; forward+backward: "
          "%.3f GFLOP per image" % (macs / 1e9, flops_per_image / 1e9))
    print("torch %s, %d thread(s), %s" % (torch.__version__, args.threads,
                                          platform.processor() or
                                          platform.machine()))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("1-minute load average before the run: %.2f" % load)
    print("convolutions: oneDNN %s; ATen parallel backend threads: %d"
          % ("available" if torch.backends.mkldnn.is_available() else "absent",
             torch.get_num_threads()))
    print()
    header = "%6s %10s %10s %10s %10s %9s %10s" % (
        "batch", "median_ms", "min_ms", "max_ms", "images/s", "GFLOP/s",
        "cpu_ms")
    print(header)
    rows = []
    for batch in batches:
        times, cpu_times = time_steps(torch, model, batch, args.warmup,
                                      args.steps, args.seed)
        median = statistics.median(times)
        row = {
            "batch": batch,
            "median_ms": median * 1e3,
            "min_ms": min(times) * 1e3,
            "max_ms": max(times) * 1e3,
            "images_per_s": batch / median,
            "gflop_per_s": flops_per_image * batch / median / 1e9,
            "cpu_ms": statistics.median(cpu_times) * 1e3,
            "steps": len(times),
        }
        rows.append(row)
        print("%6d %10.1f %10.1f %10.1f %10.1f %9.1f %10.1f" % (
            batch, row["median_ms"], row["min_ms"], row["max_ms"],
            row["images_per_s"], row["gflop_per_s"], row["cpu_ms"]))
        sys.stdout.flush()
    if args.json:
        result = {
            "model": "resnet18-cifar",
            "parameters": parameters,
            "tensors": tensors,
            "forward_macs_per_image": macs,
            "train_flops_per_image": flops_per_image,
            "torch": torch.__version__,
            "threads": args.threads,
            "warmup": args.warmup,
            "load_average_1min": load,
            "load_average_1min_after": (os.getloadavg()[0]
                                        if hasattr(os, "getloadavg")
                                        else float("nan")),
            "onednn": torch.backends.mkldnn.is_available(),
            "machine": platform.machine(),
            "results": rows,
        }
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
            out.write("\n")


if __name__ == "__main__":
    main()
