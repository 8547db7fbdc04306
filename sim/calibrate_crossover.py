#!/usr/bin/python3
"""The simulator beside the emulated all-reduce family: every point of a
bench/allreduce_crossover.py sweep (a points.json under docs/results/data/:
one all-reduce of B bytes over N ranks, 1 Gbit/s links, one-way latencies of
20 us to 5 ms through userspace relays) simulated under CM02 twice: with the
wire's latency alone, with the α the benchmark probed on the job's own
connections (prediction_link_alpha_us, its B too), which holds what the TCP
transport and the relays add per message, and with the wire's rate and
latency through the model constants fitted once (sim/constants.json,
sim/fit_constants.py), timed as the benchmark times it (its timed
all-reduces back to back after its untimed ones, averaged: the links'
token buckets start full and drain). One row each in points.csv with the
measured time, bench's α–β prediction, whether the point was CPU-bound
(bench/cpu_bound.py), its TCP retransmissions and, where the fitted
simulator misses it by more than 10 %, the kind of miss (miss_kind below). Given repeats of the sweep merged
by sim/crossover_repeats.py, "measured" is a point's median over them and
its row also holds the lowest and highest repeat; a single sweep has no
spread of repeats to judge a miss against.

  bazel build //sim:simulate
  sim/crossover_repeats.py --out=MERGED/points.json R1/points.json ...
  sim/calibrate_crossover.py --measured=MERGED/points.json \\
      --out=docs/results/data/scaling-calibration-crossover-DATE

The PS rows of the sweep are left out: the benchmark's PS is one bucket of
its own key layout, not a step of the family.
"""
import argparse
import concurrent.futures
import csv
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cpu_bound  # noqa: E402

STRATEGIES = {"gradsync_ring": "ring", "gradsync_halving_doubling": "halving_doubling",
              "gradsync_tree": "tree", "gradsync_allreduce": "allreduce"}
COLUMNS = ["latency_us", "workers", "bytes", "algorithm", "measured_us", "alpha_beta_us",
           "wire_us", "wire_over_measured", "probed_us", "probed_over_measured",
           "probed_alpha_us", "fitted_us", "fitted_over_measured", "cpu_share", "cpu_bound",
           "retrans_segments", "repeats", "measured_low_us", "measured_high_us", "miss_kind"]
# A rank's job above this share of the machine's cores is busy enough that
# its scheduling, not the per-message CPU time's mean, sets its rounds
# (bench/cpu_bound.py's line for "CPU-bound" is 0.7).
BUSY_CPU_SHARE = 0.5
# The emulated links' token bucket (core/launch/netem.cc at 1 Gbit/s): a
# buffer of at most a few of them is moved mostly by bursts.
TOKEN_BUCKET_BYTES = 128 << 10


def miss_kind(point, ratio):
    """What a point the fitted simulator misses by more than 10 % shows,
    from the measurement alone (the first that applies), or "" for a hit:
      repeats' spread  the simulated time lies between the emulation's own
                       lowest and highest repeat of the point: the
                       measurement disagrees with itself by that much;
      retransmissions  TCP retransmitted segments during the timed loop,
                       which the flow model has none of;
      CPU              the job used at least half the machine's cores;
      round delay      a latency-bound halving-doubling, tree or selector
                       point at 1 ms or more measured slower than its
                       rounds' latencies (in sweeps timed after a ring
                       barrier, the barrier's lag: docs/results/scaling.md);
      message time     a 4 KiB buffer, whose time is its messages' latency
                       and software time: one mean per message does not
                       hold N = 2 (fewer processes than cores) and N = 16;
      token bucket     a buffer of at most 8 token buckets (1 MiB), which
                       the bursts move for the most part: the simulator's
                       bucket is a fluid one, refilled as if the link idled;
      other            none of these."""
    if abs(ratio - 1) <= 0.1:
        return ""
    repeats = point.get("time_us_repeats") or []
    if repeats and min(repeats) <= ratio * point["time_us"] <= max(repeats):
        return "repeats' spread"
    if (point.get("retrans_segments") or 0) > 0:
        return "retransmissions"
    if point["cpu_share"] >= BUSY_CPU_SHARE:
        return "CPU"
    if (ratio < 1 and point["latency_us"] >= 1000
            and point["algorithm"] != "gradsync_ring"
            and point["bytes"] <= TOKEN_BUCKET_BYTES):
        return "round delay"
    if point["bytes"] <= 4096:
        return "message time"
    if point["bytes"] <= 8 * TOKEN_BUCKET_BYTES:
        return "token bucket"
    return "other"


def simulate(simulate_path, strategy, n, size, rate_bits, latency_us, constants="none",
             iterations=1, warmup=0):
    """One all-reduce's simulated time in us, timed as the benchmark times
    it: the mean of `iterations` of them back to back, after `warmup`
    untimed ones (the links' token buckets start full after the barrier and
    drain). The simulator gives a step's total, so the warm-up's own total
    is simulated apart and taken off."""
    def total_ms(count):
        link = f"{rate_bits / 1e6:g}mbit,{latency_us:g}us"
        command = [simulate_path, f"--strategy={strategy}", f"--workers={n}",
                   f"--link={link}", f"--model=custom:{count * size / 1e6:.6f}:{count}",
                   f"--bucket_mb={size / 2**20:.10f}", f"--constants={constants}"]
        # A run takes well under a second; a niced one on a busy machine may
        # wait its turn for minutes, so one that overruns is run once more.
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"calibrate_crossover: {' '.join(command)}: {done.stderr.strip()}")
        result = json.loads(done.stdout)
        if result["buckets"] != count:
            sys.exit(f"calibrate_crossover: {' '.join(command)}: {result['buckets']} "
                     f"buckets, not {count}")
        return result["sync_ms"]
    timed = total_ms(warmup + iterations) - (total_ms(warmup) if warmup > 0 else 0)
    return timed * 1e3 / iterations


def timed_warmup(context):
    """The untimed runs between the barrier and a run's timed loop: the
    warm-up in files that say so (timed_after), none in older files, whose
    warm-up came before the barrier."""
    return context.get("warmup", 0) if context.get("timed_after") else 0


def constants_provenance(path=None):
    """The fitted constants' values and fit: sim/constants.json as the
    simulator had it, or the file given instead."""
    with open(path or os.path.join(ROOT, "sim", "constants.json")) as f:
        document = json.load(f)
    values = {k: v["value"] for k, v in document["constants"].items()}
    return {"values": values, "fit": document.get("fit", {}).get("command", "")}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", default=os.path.join(ROOT, "bazel-bin", "sim", "simulate"))
    parser.add_argument("--measured", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=1, help="simulations at once")
    parser.add_argument("--constants", default="fitted",
                        help="the fitted column's constants: the simulator's own "
                             "(sim/constants.json), or a file of its form, such as a fit on "
                             "other repeats (a hold-out)")
    args = parser.parse_args(argv)
    constants = "fitted" if args.constants == "fitted" else os.path.abspath(args.constants)
    if constants != "fitted" and not os.path.isfile(constants):
        sys.exit(f"calibrate_crossover: --constants={args.constants}: no such file; give "
                 "fitted or a file like sim/constants.json")
    with open(args.measured) as f:
        measured = json.load(f)
    runs = {(r["latency_us"], r["workers"]): r["context"] for r in measured["runs"]}
    def row(p):
        strategy = STRATEGIES[p["algorithm"]]
        context = runs[(p["latency_us"], p["workers"])]
        rate = context["link_bits_per_s"]
        wire = simulate(args.simulate, strategy, p["workers"], p["bytes"], rate,
                        p["latency_us"])
        # The probed link: its α (software and relays included) and its B.
        probed_alpha = context["prediction_link_alpha_us"]
        probed = simulate(args.simulate, strategy, p["workers"], p["bytes"],
                          8 * context["prediction_link_bytes_per_s"], probed_alpha)
        # The wire's rate and latency through the fitted constants
        # (sim/constants.json, or --constants): no probe of the job's own.
        fitted = simulate(args.simulate, strategy, p["workers"], p["bytes"], rate,
                          p["latency_us"], constants, context["iters"], timed_warmup(context))
        done = {
            "latency_us": p["latency_us"], "workers": p["workers"], "bytes": p["bytes"],
            "algorithm": strategy, "measured_us": p["time_us"],
            "alpha_beta_us": p["predicted_us"], "wire_us": wire,
            "wire_over_measured": wire / p["time_us"], "probed_us": probed,
            "probed_over_measured": probed / p["time_us"], "probed_alpha_us": probed_alpha,
            "fitted_us": fitted, "fitted_over_measured": fitted / p["time_us"],
            "cpu_share": p["cpu_share"],
            "cpu_bound": cpu_bound.is_cpu_bound(job_cpu_share=p["cpu_share"]),
            "retrans_segments": p.get("retrans_segments"),
            "repeats": len(p.get("time_us_repeats") or [p["time_us"]]),
            "measured_low_us": min(p.get("time_us_repeats") or [p["time_us"]]),
            "measured_high_us": max(p.get("time_us_repeats") or [p["time_us"]]),
            "miss_kind": miss_kind(p, fitted / p["time_us"])}
        print(done, flush=True)
        return done

    chosen = [p for p in measured["points"] if p["algorithm"] in STRATEGIES]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(row, chosen))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "points.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if "repeats" in measured:
        # How often the emulation agrees with itself, over the points that
        # are not CPU-bound: the ceiling of any model's share within 10 %.
        honest = [p for p, r in zip(chosen, rows) if not r["cpu_bound"]]
        ratios = [t / p["time_us"] for p in honest for t in p["time_us_repeats"]]
        points_within = sum(all(abs(t / p["time_us"] - 1) <= 0.1 for t in p["time_us_repeats"])
                            for p in honest)
        with open(os.path.join(args.out, "repeats.json"), "w") as f:
            json.dump([{"set": "not-cpu-bound", "repeats": measured["repeats"],
                        "points": len(honest), "points_all_repeats_within_10_percent":
                        points_within, "repeat_measurements": len(ratios),
                        "repeats_within_10_percent": sum(abs(r - 1) <= 0.1 for r in ratios)}],
                      f, indent=1)
            f.write("\n")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"manifest": {
            "command": "sim/calibrate_crossover.py " + " ".join(
                a for a in argv if not a.startswith("--simulate")),
            "date": now.strftime("%Y-%m-%d"),
            "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_commit": rev,
            "build": rev[:7],
            "measured": os.path.relpath(args.measured, os.path.join(ROOT, "docs", "results")),
            "simulator": "SimGrid 3.32 (Debian libsimgrid-dev), CM02 without cross-traffic, "
                         "TCP-gamma unbounded",
            "constants": constants_provenance(
                None if constants == "fitted" else constants)}}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
