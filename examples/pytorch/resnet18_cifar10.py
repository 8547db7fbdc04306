#!/usr/bin/env python3
"""ResNet-18 on CIFAR-10 under DDP, synchronized by gradsync.

The usual CIFAR-10 ResNet-18 (3x3 stem, no max-pool; defined here since
Debian's torch comes without torchvision) and a DDP training loop; the lines
marked "gradsync" are the only change. --random_data trains on random
images (for timing, without the data set); otherwise --data_dir holds
CIFAR-10's binary batches (data_batch_1.bin ... 5).

    PYTHONPATH=python bazel-bin/tools/gradsync launch --workers=2 \
        -- /usr/bin/python3 examples/pytorch/resnet18_cifar10.py \
        --random_data --steps=10 --sync=ring

--sync=gloo is plain DDP on Gloo and --sync=none trains without any
synchronization (each worker alone, under the same CPU sharing): the
baselines of docs/results/pytorch.md. Rank 0 prints the mean step time over
the steps after --warmup, and for gradsync the time blocked waiting for the
strategy (exposed communication).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradsync.torch  # gradsync


class BasicBlock(nn.Module):

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                nn.BatchNorm2d(outputs))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inputs = [], 64
        for outputs, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(inputs, outputs, stride),
                       BasicBlock(outputs, outputs, 1)]
            inputs = outputs
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def cifar10(data_dir):
    images, labels = [], []
    for i in range(1, 6):
        path = os.path.join(data_dir, "data_batch_%d.bin" % i)
        raw = torch.frombuffer(bytearray(open(path, "rb").read()),
                               dtype=torch.uint8).reshape(-1, 3073)
        labels.append(raw[:, 0].long())
        images.append(raw[:, 1:].reshape(-1, 3, 32, 32).float() / 255.0)
    return torch.cat(images), torch.cat(labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sync", default=os.environ.get("GRADSYNC_SYNC", "ring"),
                        help="gradsync strategy (ring, ps, ...), gloo for "
                        "plain DDP, none for no synchronization")
    parser.add_argument("--batch_size", type=int, default=32,
                        help="per worker")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--random_data", action="store_true")
    parser.add_argument("--data_dir", default="data/cifar-10-batches-bin")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch intra-op threads; 0: torch's default")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = ResNet18()
    if args.sync != "none":
        model = DDP(model)
    state = None
    if args.sync not in ("gloo", "none"):  # gradsync
        state = gradsync.torch.connect(sync=args.sync,  # gradsync
                                       batch_size=args.batch_size)  # gradsync
        gradsync.torch.register(model, state)  # gradsync
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    if args.random_data:
        generator = torch.Generator().manual_seed(rank)
        images = torch.randn(args.batch_size * 4, 3, 32, 32,
                             generator=generator)
        labels = torch.randint(0, 10, (args.batch_size * 4,),
                               generator=generator)
    else:
        images, labels = cifar10(args.data_dir)
        images, labels = images[rank::world], labels[rank::world]

    step_times, waits = [], []
    for step in range(args.steps):
        first = (step * args.batch_size) % (len(images) - args.batch_size + 1)
        x = images[first:first + args.batch_size]
        y = labels[first:first + args.batch_size]
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        if state is not None:  # gradsync
            state.record_loss(loss.item())  # gradsync
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            step_times.append(elapsed * 1000)
            if state is not None:
                waits.append(state.last_step()["sync_wait_ms"])
        if rank == 0:
            print("step %d loss %.4f %.1f ms" % (step, loss.item(),
                                                 elapsed * 1000), flush=True)
    if rank == 0 and step_times:
        line = ("resnet18 sync=%s workers=%d batch=%d: mean step %.1f ms "
                "over %d steps" % (args.sync, world, args.batch_size,
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
