#!/usr/bin/env python3
"""The DDP tutorial's ToyModel under mp.spawn, with gradsync's ring.

PyTorch's "Getting started with DDP" example; the lines marked "gradsync"
are the only change. No launcher and no servers: mp.spawn starts the ranks,
and gradsync's coordinator listens on MASTER_PORT + 1 beside torch's store.

    PYTHONPATH=python /usr/bin/python3 examples/pytorch/toy_mp_spawn.py \
        --world_size=2 --sync=ring
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import gradsync.torch  # gradsync


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # gradsync reads who it is from torchrun's variables.  # gradsync
    os.environ["RANK"] = str(rank)  # gradsync
    os.environ["WORLD_SIZE"] = str(world_size)  # gradsync
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


class ToyModel(nn.Module):

    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, port, sync, steps):
    setup(rank, world_size, port)
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    if sync != "gloo":  # gradsync
        state = gradsync.torch.connect(sync=sync)  # gradsync
        gradsync.torch.register(ddp_model, state)  # gradsync

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for step in range(steps):
        torch.manual_seed(100 * step + rank)
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        print("rank %d step %d loss %.6f" % (rank, step, loss.item()),
              flush=True)
    checksum = sum(p.detach().double().sum().item()
                   for p in model.parameters())
    print("rank %d parameter checksum %.9f" % (rank, checksum), flush=True)
    if sync != "gloo":  # gradsync
        state.close()  # gradsync
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--port", type=int, default=29530)
    parser.add_argument("--sync", default="ring",
                        help="gradsync strategy, or gloo for plain DDP")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    mp.spawn(demo_basic,
             args=(args.world_size, args.port, args.sync, args.steps),
             nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
