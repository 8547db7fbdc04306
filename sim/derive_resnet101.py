#!/usr/bin/python3
"""A ResNet-101 step profile derived from a measured ResNet-50 one
(sim/profiles/resnet50-*.json), for the simulator's Horovod anchor: no GPU
here measured ResNet-101.

  sim/derive_resnet101.py sim/profiles/resnet50-b64-fp32.json \\
      > sim/profiles/resnet101-b64-fp32.json

ResNet-101 is ResNet-50 with 23 bottleneck blocks in layer3 instead of 6;
every other tensor, and the shape of every layer3 block after the first,
is the same (torchvision's resnet50 and resnet101). So the derived profile
keeps ResNet-50's tensors and inserts 17 more layer3 blocks shaped like
its layer3.1-5. Times, from the measured backward:
  - one layer3 block's backward (delta) is the median gap between the
    ready times of consecutive layer3 blocks after the first (layer3.1-5);
  - layer4 and the fc layer are ready when they were; the last five
    layer3 blocks (layer3.18-22) take the ready times of ResNet-50's
    layer3.1-5, and every block before them one delta earlier in backward
    than the next, on layer3.1's offsets;
  - layer3.0 and everything before it are ready 17 deltas later;
  - backward grows by 17 deltas, forward in the same proportion (an
    assumption: no forward time per block was measured), the optimizer in
    the proportion of the parameters.
The result says so in "derived_from" and "derivation".
"""
import json
import re
import statistics
import sys

EXTRA_BLOCKS = 17  # layer3: 23 blocks in ResNet-101, 6 in ResNet-50
LAST_BLOCK = 22
BLOCK = re.compile(r"^layer3\.(\d+)\.(.*)$")


class DeriveError(Exception):
    pass


def derive(profile):
    """The ResNet-101 profile (a dict of the same form) from ResNet-50's."""
    if profile.get("model") != "resnet50":
        raise DeriveError(f"the profile is of {profile.get('model')!r}, not resnet50")
    params = profile["params"]
    blocks = {}
    for p in params:
        found = BLOCK.match(p["name"])
        if found:
            blocks.setdefault(int(found.group(1)), []).append(dict(p, part=found.group(2)))
    if sorted(blocks) != list(range(6)):
        raise DeriveError("the profile's layer3 does not hold blocks 0-5 (torchvision's "
                          "resnet50)")
    firsts = [blocks[b][0]["ready_ms"] for b in range(1, 6)]
    delta = statistics.median(firsts[i] - firsts[i + 1] for i in range(4))
    if not delta > 0:
        raise DeriveError("layer3's blocks are not ready one after another in backward")
    shift = EXTRA_BLOCKS * delta

    def block(number, source, offset):
        return [{"name": f"layer3.{number}.{p['part']}", "numel": p["numel"],
                 "ready_ms": p["ready_ms"] + offset} for p in blocks[source]]

    derived = []
    inserted = False
    for p in params:
        found = BLOCK.match(p["name"])
        if found and int(found.group(1)) >= 1:
            if not inserted:
                # ResNet-101's layer3.1-22, in registration order.
                for number in range(1, LAST_BLOCK + 1):
                    from_end = LAST_BLOCK - number
                    source = 5 - min(from_end, 4)
                    derived += block(number, source, (from_end - min(from_end, 4)) * delta)
                inserted = True
            continue
        before = not p["name"].startswith(("layer4", "fc"))
        derived.append({"name": p["name"], "numel": p["numel"],
                        "ready_ms": p["ready_ms"] + (shift if before else 0)})
    numel_50 = sum(p["numel"] for p in params)
    numel_101 = sum(p["numel"] for p in derived)
    backward = profile["backward_ms"] + shift
    forward = profile["forward_ms"] * backward / profile["backward_ms"]
    optimizer = profile["optimizer_ms"] * numel_101 / numel_50
    out = {k: v for k, v in profile.items() if k not in ("params",)}
    out.update(model="resnet101", forward_ms=forward, backward_ms=backward,
               optimizer_ms=optimizer, step_ms=forward + backward + optimizer,
               derived_from=f"{profile['model']}-b{profile['batch']}-{profile['precision']} "
                            f"measured on {profile.get('device', 'a GPU')}",
               derivation=f"sim/derive_resnet101.py: {EXTRA_BLOCKS} more layer3 blocks shaped "
                          f"like layer3.1-5, each {delta:.3f} ms of backward (the median gap "
                          "of the measured layer3 blocks); forward scaled with backward, "
                          "the optimizer with the parameters",
               params=derived)
    return out


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: sim/derive_resnet101.py RESNET50_PROFILE.json > OUT.json")
    try:
        with open(argv[0]) as f:
            profile = json.load(f)
        derived = derive(profile)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"derive_resnet101: {argv[0]}: {e!r}; give a ResNet-50 profile of "
                 "sim/profiles/")
    except DeriveError as e:
        sys.exit(f"derive_resnet101: {argv[0]}: {e}; give a ResNet-50 profile of sim/profiles/")
    json.dump(derived, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
