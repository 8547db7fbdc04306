"""One worker of python/'s tests: a few SGD steps of a small MLP under DDP.

Run by `gradsync launch` (torchrun's variables). --mode=gloo is plain DDP on
Gloo; --mode=gradsync registers gradsync's hook (--sync=ring|ps). Writes the
final parameters to --out.rank<r>.pt. --mode=reference runs one process on
the whole batch. Fault options make one rank die, differ or misuse the hook.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

GLOBAL_BATCH = 16
FEATURES = 32


def make_model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, 10))


def make_data(steps):
    generator = torch.Generator().manual_seed(11)
    inputs = torch.randn(steps, GLOBAL_BATCH, FEATURES, generator=generator)
    labels = torch.randint(0, 10, (steps, GLOBAL_BATCH), generator=generator)
    return inputs, labels


def train(model, inputs, labels, rank, world, steps, die_at=None, state=None,
          device="cpu", device_compute_ms=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    shard = GLOBAL_BATCH // world
    for step in range(steps):
        if die_at is not None and step == die_at:
            print("killing myself at step %d at %.3f" % (step, time.time()),
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x = inputs[step, rank * shard:(rank + 1) * shard].to(device)
        y = labels[step, rank * shard:(rank + 1) * shard].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        if state is not None:
            state.record_loss(loss.item())
            if device_compute_ms is not None:
                # What device_timing.py hands over on a GPU, here by hand.
                state._worker.set_device_compute_ms(device_compute_ms)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["gloo", "gradsync", "reference"])
    parser.add_argument("--sync", default="ring")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", default="")
    parser.add_argument("--first_bucket_bytes", type=int, default=4096)
    parser.add_argument("--bucket_cap_mb", type=float, default=0.01)
    parser.add_argument("--rank1_bucket_cap_mb", type=float, default=None)
    parser.add_argument("--rank1_sync", default=None)
    parser.add_argument("--die_rank", type=int, default=-1)
    parser.add_argument("--die_at_step", type=int, default=2)
    parser.add_argument("--two_models", action="store_true")
    # cuda: the model and batches on GPU LOCAL_RANK modulo the GPUs there
    # are (so two processes may share one GPU), DDP on Gloo over CUDA
    # tensors, the hook staging its buckets through pinned memory.
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--device_compute_ms", type=float, default=None)
    args = parser.parse_args()

    inputs, labels = make_data(args.steps)
    model = make_model()
    if args.mode == "reference":
        train(model, inputs, labels, 0, 1, args.steps)
        torch.save([p.detach() for p in model.parameters()], args.out)
        return 0

    device = "cpu"
    if args.device == "cuda":
        index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        device = "cuda:%d" % index
        torch.cuda.set_device(index)
        model = model.to(device)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # Several buckets for a small model: DDP reads this at construction.
    dist._DEFAULT_FIRST_BUCKET_BYTES = args.first_bucket_bytes
    cap = args.bucket_cap_mb
    if rank == 1 and args.rank1_bucket_cap_mb is not None:
        cap = args.rank1_bucket_cap_mb
    ddp = DistributedDataParallel(
        model, bucket_cap_mb=cap,
        device_ids=[torch.device(device).index] if args.device == "cuda" else None)
    state = None
    if args.mode == "gradsync":
        import gradsync.torch
        sync = args.sync
        if rank == 1 and args.rank1_sync is not None:
            sync = args.rank1_sync
        state = gradsync.torch.connect(sync=sync, timeout_s=30,
                                       batch_size=GLOBAL_BATCH // world,
                                       total_steps=args.steps)
        gradsync.torch.register(ddp, state)
        if args.two_models:
            other = DistributedDataParallel(make_model(), bucket_cap_mb=cap)
            gradsync.torch.register(other, state)  # refused
    die_at = args.die_at_step if rank == args.die_rank else None
    if state is not None and args.device_compute_ms is not None:
        try:
            state._worker.set_device_compute_ms(-1.0)
            raise AssertionError("a negative device time was taken")
        except RuntimeError as error:
            if "not a device time" not in str(error):
                raise
    train(ddp, inputs, labels, rank, world, args.steps, die_at, state, device,
          args.device_compute_ms)
    if args.out:
        torch.save([p.detach().cpu() for p in model.parameters()],
                   "%s.rank%d.pt" % (args.out, rank))
    if args.mode == "gradsync":
        print("gradsync buckets:\n" + state.layout, flush=True)
        state.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
