#!/usr/bin/env python3
"""An MNIST-style MLP on Fashion-MNIST under DDP, synchronized by gradsync.

A usual DistributedDataParallel training script (DistributedSampler, SGD,
test accuracy on rank 0); the lines marked "gradsync" are the only change.
Reads the IDX gzip files Debian's dataset-fashion-mnist installs.

    PYTHONPATH=python bazel-bin/tools/gradsync launch --workers=2 \
        --servers=2 -- /usr/bin/python3 examples/pytorch/fashion_mnist_mlp.py \
        --sync=ps --epochs=1
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

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64,
                        help="per worker")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sync", default="ring",
                        help="gradsync strategy (ring, ps, ...), or gloo for "
                        "plain DDP")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    train_set = load(args.data_dir, "train")
    test_set = load(args.data_dir, "t10k")
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank,
                                 shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = DDP(Mlp())
    if args.sync != "gloo":  # gradsync
        state = gradsync.torch.connect(sync=args.sync)  # gradsync
        gradsync.torch.register(model, state)  # gradsync
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.time()
        total, steps = 0.0, 0
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1
        seconds = time.time() - start
        if rank == 0:
            with torch.no_grad():
                logits = model.module(test_set.tensors[0])
                accuracy = (logits.argmax(1) == test_set.tensors[1]).float()
            print("epoch %d: %d steps, mean loss %.4f, test accuracy %.2f%%, "
                  "%.1f s (%.1f ms/step)" %
                  (epoch, steps, total / steps, 100 * accuracy.mean().item(),
                   seconds, 1000 * seconds / steps), flush=True)
    if args.sync != "gloo":  # gradsync
        state.close()  # gradsync
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
