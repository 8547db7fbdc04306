#!/usr/bin/python3
"""Repeats of the all-reduce crossover sweep (bench/allreduce_crossover.py,
the same command run several times on the same build) merged into one
points.json of the sweep's own form, whose every point is the median of its
repeats: what sim/calibrate_crossover.py and sim/fit_constants.py compare
the simulator with. Each merged point also keeps every repeat's time
(time_us_repeats), so a miss can be set beside the emulation's own spread.

  sim/crossover_repeats.py --out=MERGED/points.json \\
      R1/points.json R2/points.json R3/points.json

Per point: time_us, cpu_share and the probed α and B (per run) are the
medians over the repeats; retrans_segments is the largest any repeat saw
(a point whose timed loop retransmitted once did so in that measurement).
Every repeat must hold the same points and runs, measured with the same
settings; anything else is refused, naming the first difference.
"""
import argparse
import json
import os
import statistics
import sys

KEY = ("latency_us", "workers", "bytes", "algorithm")
RUN_KEY = ("latency_us", "workers")
# What every repeat of a run must share: the sweep's settings, not its
# measurements.
SETTINGS = ("iters", "warmup", "link_bits_per_s", "relay_latency_us", "workers",
            "allreduce_eager_kb", "ring_chunk_kb", "ring_socket_buffer_kb", "executable",
            "timed_after")
# The run's measurements, merged as their median.
PROBED = ("prediction_link_alpha_us", "prediction_link_bytes_per_s", "load_before")


class RepeatsError(Exception):
    pass


def key_of(record, names):
    return tuple(record[n] for n in names)


def merge(sweeps, names=None):
    """`sweeps`: the repeats' points.json documents; `names`: how to call
    each in an error (default: repeat 1, 2, ...)."""
    if len(sweeps) < 2:
        raise RepeatsError("merging repeats needs two sweeps or more")
    names = names or [f"repeat {i + 1}" for i in range(len(sweeps))]
    first = sweeps[0]
    point_keys = [key_of(p, KEY) for p in first["points"]]
    run_keys = [key_of(r, RUN_KEY) for r in first["runs"]]
    first_runs = {key_of(r, RUN_KEY): r for r in first["runs"]}
    by_sweep = []
    for sweep, name in zip(sweeps, names):
        points = {key_of(p, KEY): p for p in sweep["points"]}
        runs = {key_of(r, RUN_KEY): r for r in sweep["runs"]}
        if len(points) != len(sweep["points"]) or len(runs) != len(sweep["runs"]):
            raise RepeatsError(f"{name}: a point or run appears twice (an --append "
                               "sweep measured it again); merge single sweeps")
        if set(points) != set(point_keys):
            missing = sorted(set(point_keys) ^ set(points), key=str)[0]
            raise RepeatsError(f"{name} and {names[0]} hold different points "
                               f"(first: {dict(zip(KEY, missing))}); merge repeats of "
                               "one sweep command")
        if set(runs) != set(run_keys):
            raise RepeatsError(f"{name} and {names[0]} hold different runs")
        for k in run_keys:
            ours, theirs = runs[k]["context"], first_runs[k]["context"]
            for setting in SETTINGS:
                if ours.get(setting) != theirs.get(setting):
                    raise RepeatsError(
                        f"{name}: run {dict(zip(RUN_KEY, k))} has {setting}="
                        f"{ours.get(setting)}, {names[0]} {theirs.get(setting)}: "
                        "repeats must share their settings")
        by_sweep.append((points, runs))

    merged_points = []
    for k in point_keys:
        repeats = [points[k] for points, _ in by_sweep]
        point = dict(repeats[0])
        times = [p["time_us"] for p in repeats]
        point["time_us"] = statistics.median(times)
        point["time_us_repeats"] = times
        point["cpu_share"] = statistics.median(p["cpu_share"] for p in repeats)
        retrans = [p.get("retrans_segments") for p in repeats]
        point["retrans_segments"] = (None if any(r is None for r in retrans)
                                     else max(retrans))
        merged_points.append(point)
    merged_runs = []
    for k in run_keys:
        repeats = [runs[k] for _, runs in by_sweep]
        run = json.loads(json.dumps(repeats[0]))
        for name in PROBED:
            values = [r["context"][name] for r in repeats if name in r["context"]]
            if values:
                run["context"][name] = statistics.median(values)
        run["context"]["dates"] = [r["context"].get("date") for r in repeats]
        merged_runs.append(run)
    return {"points": merged_points, "runs": merged_runs, "repeats": len(sweeps)}


def reproducibility(merged):
    """How often the emulation agrees with itself: of every repeat of every
    point, the share within 10 % of its point's median."""
    ratios = [t / p["time_us"] for p in merged["points"] for t in p["time_us_repeats"]]
    return sum(abs(r - 1) <= 0.1 for r in ratios), len(ratios)


def load(paths, tool, advice=""):
    """The points.json documents at `paths`; a file that cannot be read
    ends `tool` with one line naming it (and `advice`)."""
    documents = []
    for path in paths:
        try:
            with open(path) as f:
                documents.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"{tool}: {path}: {e}{advice}")
    return documents


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the merged points.json to write")
    parser.add_argument("sweeps", nargs="+", help="each repeat's points.json")
    args = parser.parse_args(argv)
    documents = load(args.sweeps, "crossover_repeats")
    try:
        merged = merge(documents, args.sweeps)
    except (RepeatsError, KeyError) as e:
        sys.exit(f"crossover_repeats: {e}")
    within, total = reproducibility(merged)
    temporary = args.out + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(temporary, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    os.replace(temporary, args.out)
    print(f"{len(merged['points'])} points, {len(documents)} repeats each; "
          f"{within} of {total} repeats within 10 % of their point's median")


if __name__ == "__main__":
    main(sys.argv[1:])
