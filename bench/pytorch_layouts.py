#!/usr/bin/python3
"""PyTorch's ResNet-18 (CIFAR form) training step on a GPU per memory layout
and precision: is a gap between gradsync and PyTorch a matter of layout?

gradsync's activations are NHWC whatever the precision; PyTorch's default is
NCHW, and its users turn on channels_last for bf16. This times PyTorch's
step both ways, so that gradsync's step can be held against PyTorch in its
own layout. One line per point:

  torch batch B P LAYOUT: wall W ms, events E ms, queued Q ms/step

wall: median host time of a step that reads its loss back (as
bench/compute_vs_pytorch.py's rows); events: CUDA events around that step;
queued: --steps steps queued without reading the loss, over CUDA events,
per step (the GPU's pace when the host is not waiting). fp32 = TF32 off,
tf32 = TF32 on, bf16 = torch.autocast(bfloat16). cudnn.benchmark on.

  python3 bench/pytorch_layouts.py [--batches=128,256] [--csv=FILE]
"""
import argparse
import csv
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
POINTS = (("fp32", False), ("fp32", True), ("bf16", True), ("tf32", False))


def run(torch, reference, batch, precision, channels_last, steps, warmup):
    device = torch.device("cuda")
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = reference.build_resnet18(torch).to(device).to(memory_format=layout)
    x = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (batch,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(warmup):
        step().item()
    walls, events = [], []
    for _ in range(steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        loss = step()
        end.record()
        loss.item()
        walls.append((time.perf_counter() - began) * 1e3)
        events.append(start.elapsed_time(end))
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return {"batch": batch, "precision": precision,
            "layout": "channels_last" if channels_last else "NCHW",
            "wall_ms": round(statistics.median(walls), 3),
            "events_ms": round(statistics.median(events), 3),
            "queued_ms": round(start.elapsed_time(end) / steps, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="128,256")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--csv", help="also write the points here")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as error:
        print(f"pytorch_layouts: torch is not importable ({error})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("pytorch_layouts: torch sees no CUDA GPU", file=sys.stderr)
        return 3
    sys.path.insert(0, HERE)
    import pytorch_resnet18_reference as reference
    points = []
    for batch in (int(b) for b in args.batches.split(",")):
        for precision, channels_last in POINTS:
            p = run(torch, reference, batch, precision, channels_last, args.steps, args.warmup)
            points.append(p)
            print(f"torch batch {p['batch']} {p['precision']} {p['layout']}: wall "
                  f"{p['wall_ms']:.2f} ms, events {p['events_ms']:.2f} ms, queued "
                  f"{p['queued_ms']:.2f} ms/step", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(points[0]))
            writer.writeheader()
            writer.writerows(points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
