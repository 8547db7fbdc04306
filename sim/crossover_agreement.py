#!/usr/bin/python3
"""How well the emulated cluster reproduces itself: two merged sets of
repeats of the all-reduce crossover sweep (sim/crossover_repeats.py's
points.json, measured on the same build at different times), point by
point, as the calibration compares the simulator with the first.

  sim/crossover_agreement.py --out=FOLDER A/points.json B/points.json

A point counts where it is one of the all-reduces the calibration
simulates and the first set says it is not CPU-bound (bench/cpu_bound.py):
the points sim/calibrate_crossover.py scores. Its
ratio is B's median over A's. The share of points whose ratio lies within
10 % is what a model that predicted A's medians exactly would score
against B: where it is below the calibration's bar, the bar asks more than
the emulation can repeat. FOLDER gets points.json (the agreement per
latency and algorithm, and for all, as points for tools/render_results.py;
every point's ratio under "pairs") and manifest.json.
"""
import argparse
import collections
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "sim"))
import calibrate_crossover  # noqa: E402
import cpu_bound  # noqa: E402
import crossover_repeats  # noqa: E402

KEY = ("latency_us", "workers", "bytes", "algorithm")
WITHIN = 0.1


class AgreementError(Exception):
    pass


def pairs(first, second):
    """Every point of `first` that the calibration scores (an all-reduce it
    simulates, not CPU-bound), with its median in both sets. Refuses sets of
    different points."""
    a = {tuple(p[k] for k in KEY): p for p in first["points"]}
    b = {tuple(p[k] for k in KEY): p for p in second["points"]}
    if set(a) != set(b):
        missing = sorted(set(a) ^ set(b))[0]
        raise AgreementError(
            "the two sets hold different points (first difference: latency "
            f"{missing[0]} us, N = {missing[1]}, {missing[2]} bytes, {missing[3]}); "
            "compare sweeps of the same command")
    out = []
    for key, p in a.items():
        if (p["algorithm"] not in calibrate_crossover.STRATEGIES or
                cpu_bound.is_cpu_bound(job_cpu_share=p["cpu_share"])):
            continue
        q = b[key]
        out.append(dict(zip(KEY, key), first_us=p["time_us"], second_us=q["time_us"],
                        ratio=q["time_us"] / p["time_us"],
                        second_cpu_bound=cpu_bound.is_cpu_bound(
                            job_cpu_share=q["cpu_share"])))
    return out


def summarize(matched):
    """Points within 10 %, per latency and algorithm, per latency, and for
    all."""
    groups = collections.defaultdict(list)
    for p in matched:
        groups[(p["latency_us"], p["algorithm"])].append(p)
        groups[(p["latency_us"], "all")].append(p)
        groups[("all", "all")].append(p)
    rows = []
    for (latency, algorithm), members in sorted(
            groups.items(), key=lambda g: (g[0][0] == "all", str(g[0][0]).zfill(8), g[0][1])):
        ratios = sorted(p["ratio"] for p in members)
        rows.append({"latency_us": latency, "algorithm": algorithm, "points": len(members),
                     "within_10_percent": sum(abs(r - 1) <= WITHIN for r in ratios),
                     "lowest_ratio": round(ratios[0], 4),
                     "median_ratio": round(ratios[len(ratios) // 2], 4),
                     "highest_ratio": round(ratios[-1], 4)})
    return rows


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the data folder to write")
    parser.add_argument("sets", nargs=2, help="two merged points.json files")
    args = parser.parse_args(argv)
    documents = crossover_repeats.load(
        args.sets, "crossover_agreement",
        "; give two points.json files that sim/crossover_repeats.py wrote")
    try:
        matched = pairs(*documents)
    except AgreementError as e:
        sys.exit(f"crossover_agreement: {e}")
    if not matched:
        sys.exit("crossover_agreement: no point of the first set is free of CPU-bound runs")
    rows = summarize(matched)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()[:7]
    results = os.path.join(ROOT, "docs", "results")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "points.json"), "w") as f:
        json.dump({"points": rows, "pairs": matched}, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"manifest": {
            "command": "sim/crossover_agreement.py " + " ".join(
                os.path.relpath(a, ROOT) if os.path.exists(a) else a for a in argv),
            "git_commit": rev,
            "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "sets": [os.path.relpath(os.path.abspath(s), results) for s in args.sets],
            "about": "the second set's median over the first's, per point that is not "
                     "CPU-bound in the first"}}, f, indent=1)
        f.write("\n")
    total = rows[-1]
    print(f"{total['within_10_percent']} of {total['points']} points within 10 % "
          f"(ratio {total['lowest_ratio']}-{total['highest_ratio']})")


if __name__ == "__main__":
    main(sys.argv[1:])
