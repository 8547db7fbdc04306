#!/usr/bin/env python3
"""An MNIST-style MLP on Fashion-MNIST under DDP, synchronized by gradsync.

A usual DistributedDataParallel training script (DistributedSampler, SGD,
test accuracy on rank 0); the lines marked "gradsync" are the only change.
Reads the IDX gzip files Debian's dataset-fashion-mnist installs.

    PYTHONPATH=python bazel-bin/tools/gradsync launch --workers=2 \
        --servers=2 -- /usr/bin/python3 examples/pytorch/fashion_mnist_mlp.py \
        --sync=ps --epochs=1

--hidden sets the hidden layers' widths (784-512-256-10 by default):
--hidden=2048,2048 makes a 23 MB model whose step is bound by the network
rather than the CPU, for comparing strategies on an emulated link
(--max_steps bounds the run; the last line gives the mean step time after
--warmup and the time blocked on gradsync). --sync defaults to
GRADSYNC_SYNC (as `gradsync compare` sets it), else ring.
"""

import argparse
import gzip
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import gradsync.torch  # gradsync


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]),
                            dtype=torch.uint8).reshape(shape)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    images = images.reshape(len(images), -1).float() / 255.0
    return TensorDataset((images - 0.2860) / 0.3530, labels.long())


class Mlp(nn.Module):

    def __init__(self, hidden):
        super().__init__()
        widths = [784] + hidden + [10]
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64,
                        help="per worker")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sync", default=os.environ.get("GRADSYNC_SYNC", "ring"),
                        help="gradsync strategy (ring, ps, ...), or gloo for "
                        "plain DDP")
    parser.add_argument("--hidden", default="512,256",
                        help="hidden layers' widths, comma-separated")
    parser.add_argument("--max_steps", type=int, default=0,
                        help="stop after this many steps; 0: whole epochs")
    parser.add_argument("--warmup", type=int, default=3,
                        help="steps left out of the mean step time")
    args = parser.parse_args()
    hidden = [int(w) for w in args.hidden.split(",") if w]

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    train_set = load(args.data_dir, "train")
    test_set = load(args.data_dir, "t10k")
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank,
                                 shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = DDP(Mlp(hidden))
    state = None
    if args.sync != "gloo":  # gradsync
        total = args.epochs * len(loader)  # gradsync: for the progress line
        if args.max_steps > 0:  # gradsync
            total = min(total, args.max_steps)  # gradsync
        state = gradsync.torch.connect(sync=args.sync,  # gradsync
                                       batch_size=args.batch_size,  # gradsync
                                       total_steps=total)  # gradsync
        gradsync.torch.register(model, state)  # gradsync
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step_times, waits, done = [], [], 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.time()
        total, steps = 0.0, 0
        step_start = time.perf_counter()
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            if state is not None:  # gradsync
                state.record_loss(loss.item())  # gradsync
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1
            now = time.perf_counter()
            if done >= args.warmup:
                step_times.append(1000 * (now - step_start))
                if state is not None:
                    waits.append(state.last_step()["sync_wait_ms"])
            step_start = now
            done += 1
            if done == args.max_steps:
                break
        seconds = time.time() - start
        if rank == 0:
            with torch.no_grad():
                logits = model.module(test_set.tensors[0])
                accuracy = (logits.argmax(1) == test_set.tensors[1]).float()
            print("epoch %d: %d steps, mean loss %.4f, test accuracy %.2f%%, "
                  "%.1f s (%.1f ms/step)" %
                  (epoch, steps, total / steps, 100 * accuracy.mean().item(),
                   seconds, 1000 * seconds / steps), flush=True)
        if done == args.max_steps:
            break
    if rank == 0 and step_times:
        line = ("mlp %s sync=%s workers=%d batch=%d: mean step %.1f ms over "
                "%d steps" % ("-".join(str(w) for w in [784] + hidden + [10]),
                              args.sync, world, args.batch_size,
                              sum(step_times) / len(step_times),
                              len(step_times)))
        if waits:
            line += ", blocked on gradsync %.1f ms/step" % (sum(waits) /
                                                           len(waits))
        print(line, flush=True)
    if state is not None:  # gradsync
        state.close()  # gradsync
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
