#!/usr/bin/python3
"""Fits the simulator's model constants (sim/model_constants.h) once,
against emulated sweeps already in docs/results/data/, and writes them with
how they were measured to sim/constants.json.

  bazel build //sim:simulate
  nice -n 19 sim/fit_constants.py \\
      --crossover=docs/results/data/allreduce-crossover-six-repeats-2026-11-28/points.json \\
      --headline=docs/results/data/headline-2026-11-24 --out=sim/constants.json

What fits what:
  bandwidth_factor, latency_factor, tcp_message_overhead_us, message_cpu_us,
  message_wake_us, ring_message_cpu_us, ring_step_overhead_us:
    every point of the all-reduce crossover sweep that is not CPU-bound
    (bench/cpu_bound.py; gradsync's ring, halving-doubling, tree and
    selector, one all-reduce of 4 KiB to 64 MiB over N = 2-16 at 20 us-5 ms
    one way, 1 Gbit/s), simulated on the wire's rate and latency with the
    constants applied: first the bandwidth factor on the points of 1 MiB and
    more (the others held at their start values), then together on all of
    them the overhead (a message's time that no core is busy for: the
    relays' hop, the poll's wake-up), a peer exchange's CPU time per message
    (run on the emulated machine's cores, which every rank shares:
    cpu_cores, a fact of the machine, not fitted) and its wake-up per rank
    per core, the bandwidth factor held and the ring's loop at its start
    values; then the ring's loop (its own CPU time per step and what it adds
    to a step's latency: ring_allreduce.cc's poll loop is not
    peer_exchange.h's) on the ring's and the selector's points, the others
    held. The grids are small (each cell simulates every point on a 2-core
    machine); the latency factor's holds 1 alone, so it is recorded, not
    fitted (docs/results/scaling.md says what the earlier grids found).
  grpc_message_overhead_us: the PS points of the headline sweep (100 Mbit/s,
    64 KiB keys), with the bandwidth factor above held.
Each crossover point is simulated as the benchmark timed it: its timed
iterations (8) back to back after its warm-up (where the sweep's runs say
the warm-up follows the barrier: timed_after), averaged, on links with the
emulation's token bucket (link_burst_bytes, a fact of core/launch/netem.cc,
not fitted), which starts full after the benchmark's barrier and drains.
The objective is the mean |log(simulated / measured)| over the points: one
number for all of them, symmetric in over- and under-estimates and not
pulled by the few points that are off by several times. Nothing is chosen
per point. As a hold-out check, the latency factor and overhead are refitted
leaving each latency out in turn, and the points of the latency left out
are scored with those constants (the file records each).
"""
import argparse
import concurrent.futures
import csv
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "sim"))
import cpu_bound  # noqa: E402
import calibrate_crossover  # noqa: E402

# Small grids: each cell simulates every point, and the machine has 2 cores.
# The defaults are the grid sim/constants.json was fitted on; how the fit
# arrived at it is in docs/results/scaling.md.
BANDWIDTH_FACTORS = [0.93, 0.94]
LATENCY_FACTORS = [1.0]
TCP_OVERHEADS_US = [160.0, 180.0, 200.0]
MESSAGE_CPU_US = [15.0, 25.0, 35.0]
MESSAGE_WAKE_US = [30.0, 40.0, 50.0]
# The emulated cluster's machine (docs/results/data/allreduce-crossover-*:
# "AMD EPYC, 2 cores"): every rank and relay runs on it.
CPU_CORES = 2
# The emulated 1 Gbit/s links' tbf burst (core/launch/netem.cc: 128 KiB, or
# 1 ms of the rate above that; bench/allreduce_crossover.py's
# token_bucket_bytes), which the headline's 100 Mbit/s links share.
LINK_BURST_BYTES = 128 << 10
GRPC_OVERHEADS_US = [100.0 * i for i in range(6)]
# The bandwidth factor is fitted on the buffers of 1 MiB and more, where
# the bytes, not the latencies, make most of the time, with the overhead
# held at the middle of its grid.
BANDWIDTH_POINTS_BYTES = 1 << 20
START_TCP_OVERHEAD_US = 180.0
START_MESSAGE_CPU_US = 25.0
START_MESSAGE_WAKE_US = 40.0
# The ring's loop: its CPU time per step's message and what it adds to a
# step's latency (sim/model_constants.h), fitted on the points whose
# all-reduce may run it.
RING_MESSAGE_CPU_US = [15.0, 25.0, 35.0]
RING_STEP_OVERHEADS_US = [20.0, 40.0, 60.0]
START_RING_MESSAGE_CPU_US = 25.0
START_RING_STEP_OVERHEAD_US = 40.0
RING_STRATEGIES = ("ring", "allreduce")


def constants_file(directory, bandwidth, latency=1.0, tcp_us=0.0, grpc_us=0.0, cpu_us=0.0,
                   ring=(0.0, 0.0), wake_us=0.0, burst=LINK_BURST_BYTES):
    """`ring`: the ring's loop's CPU time per step and step overhead (us)."""
    path = os.path.join(directory, f"c-{bandwidth:.4f}-{latency:.4f}-{tcp_us:g}-{grpc_us:g}"
                                   f"-{cpu_us:g}-{wake_us:g}-{ring[0]:g}-{ring[1]:g}.json")
    with open(path, "w") as f:
        json.dump({"constants": {"bandwidth_factor": bandwidth, "latency_factor": latency,
                                 "tcp_message_overhead_us": tcp_us,
                                 "grpc_message_overhead_us": grpc_us,
                                 "message_cpu_us": cpu_us, "cpu_cores": CPU_CORES,
                                 "message_wake_us": wake_us,
                                 "ring_message_cpu_us": ring[0],
                                 "ring_step_overhead_us": ring[1],
                                 "link_burst_bytes": burst}}, f)
    return path


def crossover_points(path):
    with open(path) as f:
        measured = json.load(f)
    runs = {(r["latency_us"], r["workers"]): r["context"] for r in measured["runs"]}
    points = []
    for p in measured["points"]:
        strategy = calibrate_crossover.STRATEGIES.get(p["algorithm"])
        if strategy is None or cpu_bound.is_cpu_bound(job_cpu_share=p["cpu_share"]):
            continue
        context = runs[(p["latency_us"], p["workers"])]
        points.append({"strategy": strategy, "workers": p["workers"], "bytes": p["bytes"],
                       "latency_us": p["latency_us"], "measured_us": p["time_us"],
                       "rate_bits": context["link_bits_per_s"],
                       "iterations": context["iters"],
                       "warmup": calibrate_crossover.timed_warmup(context)})
    return points


def headline_points(folder):
    with open(os.path.join(folder, "sweep.json")) as f:
        manifest = json.load(f)["manifest"]
    model = manifest["arguments"]["models"]
    key_kb = manifest["run_manifest"]["flags"]["ps_chunk_kb"]
    points = []
    with open(os.path.join(folder, "points.csv"), newline="") as f:
        for p in csv.DictReader(f):
            if p["strategy"] not in ("ps", "ps-colocated"):
                continue
            if p["cpu_bound"] in ("True", "true", "1"):
                continue
            args = [f"--workers={p['workers']}", f"--link={p['link']}", f"--model={model}",
                    f"--bucket_mb={p['bucket_mb']}", "--strategy=ps",
                    f"--servers={int(p['servers'])}", f"--ps_key_kb={key_kb}"]
            if p["strategy"] == "ps-colocated":
                args.append("--placement=colocated")
            points.append({"args": args, "measured_ms": float(p["step_ms"])})
    return points


def score(ratios):
    return sum(abs(math.log(r)) for r in ratios) / len(ratios)


def within(ratios):
    return sum(abs(r - 1) <= 0.1 for r in ratios)


class Fitter:
    def __init__(self, simulate, directory, jobs):
        self.simulate = simulate
        self.directory = directory
        self.pool = concurrent.futures.ThreadPoolExecutor(jobs)
        self.runs = 0

    def crossover(self, points, bandwidth, latency, tcp_us, cpu_us, wake_us, ring):
        """simulated / measured per point."""
        path = constants_file(self.directory, bandwidth, latency, tcp_us, cpu_us=cpu_us,
                              ring=ring, wake_us=wake_us)
        futures = [self.pool.submit(
            calibrate_crossover.simulate, self.simulate, p["strategy"], p["workers"],
            p["bytes"], p["rate_bits"], p["latency_us"], path, p["iterations"], p["warmup"])
            for p in points]
        self.runs += len(points)
        return [f.result() / p["measured_us"] for f, p in zip(futures, points)]

    def headline(self, points, bandwidth, grpc_us):
        path = constants_file(self.directory, bandwidth, grpc_us=grpc_us)

        def one(p):
            done = subprocess.run([self.simulate, *p["args"], f"--constants={path}"],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                sys.exit(f"fit_constants: {' '.join(p['args'])}: {done.stderr.strip()}")
            return json.loads(done.stdout)["step_ms"] / p["measured_ms"]
        self.runs += len(points)
        return list(self.pool.map(one, points))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", default=os.path.join(ROOT, "bazel-bin", "sim", "simulate"))
    parser.add_argument("--crossover", required=True)
    parser.add_argument("--headline", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--summary", default="",
                        help="a data folder for docs/results/ (points.json: the fit's figures "
                             "as points for tools/render_results.py; manifest.json)")
    parser.add_argument("--tcp_overheads_us", default=",".join(f"{v:g}" for v in TCP_OVERHEADS_US),
                        help="the per-message overhead's grid (comma-separated)")
    parser.add_argument("--message_cpu_us", default=",".join(f"{v:g}" for v in MESSAGE_CPU_US),
                        help="the CPU time per message's grid (comma-separated)")
    parser.add_argument("--message_wake_us", default=",".join(f"{v:g}" for v in MESSAGE_WAKE_US),
                        help="the wake-up per rank per core's grid (comma-separated)")
    parser.add_argument("--ring_message_cpu_us",
                        default=",".join(f"{v:g}" for v in RING_MESSAGE_CPU_US),
                        help="the ring loop's CPU time per step's grid (comma-separated)")
    parser.add_argument("--ring_step_overheads_us",
                        default=",".join(f"{v:g}" for v in RING_STEP_OVERHEADS_US),
                        help="the ring loop's step overhead's grid (comma-separated)")
    args = parser.parse_args(argv)
    try:
        tcp_grid = [float(v) for v in args.tcp_overheads_us.split(",")]
        cpu_grid = [float(v) for v in args.message_cpu_us.split(",")]
        wake_grid = [float(v) for v in args.message_wake_us.split(",")]
        ring_cpu_grid = [float(v) for v in args.ring_message_cpu_us.split(",")]
        ring_overhead_grid = [float(v) for v in args.ring_step_overheads_us.split(",")]
    except ValueError:
        sys.exit("fit_constants: --tcp_overheads_us, --message_cpu_us, --message_wake_us, "
                 "--ring_message_cpu_us and --ring_step_overheads_us take numbers separated "
                 "by commas (microseconds)")
    points = crossover_points(args.crossover)
    ps_points = headline_points(args.headline)
    with tempfile.TemporaryDirectory() as directory:
        fitter = Fitter(args.simulate, directory, args.jobs)
        large = [p for p in points if p["bytes"] >= BANDWIDTH_POINTS_BYTES]
        start_ring = (START_RING_MESSAGE_CPU_US, START_RING_STEP_OVERHEAD_US)
        results = {b: fitter.crossover(large, b, 1.0, START_TCP_OVERHEAD_US,
                                       START_MESSAGE_CPU_US, START_MESSAGE_WAKE_US,
                                       start_ring)
                   for b in BANDWIDTH_FACTORS}
        bandwidth = min(results, key=lambda b: score(results[b]))
        print(f"bandwidth factor {bandwidth:.2f} on {len(large)} points", flush=True)
        grid = {(lf, c, u, w): fitter.crossover(points, bandwidth, lf, c, u, w, start_ring)
                for lf in LATENCY_FACTORS for c in tcp_grid for u in cpu_grid
                for w in wake_grid}
        for key in sorted(grid):
            print(f"  latency factor {key[0]:g}, tcp {key[1]:g} us, cpu {key[2]:g} us, "
                  f"wake {key[3]:g} us: "
                  f"score {score(grid[key]):.4f}, within 10 %: {within(grid[key])}", flush=True)
        best = min(grid, key=lambda k: score(grid[k]))
        latency, tcp_us, cpu_us, wake_us = best
        print(f"latency factor {latency:.2f}, tcp {tcp_us:g} us, cpu {cpu_us:g} us, "
              f"wake {wake_us:g} us, "
              f"score {score(grid[best]):.4f}, "
              f"within 10 %: {within(grid[best])} of {len(points)}", flush=True)
        # The ring's loop, on the points that may run it, the rest held.
        ring_indices = [i for i, p in enumerate(points) if p["strategy"] in RING_STRATEGIES]
        ring_points = [points[i] for i in ring_indices]
        ring_grid = {(rc, ro): fitter.crossover(ring_points, bandwidth, latency, tcp_us,
                                                cpu_us, wake_us, (rc, ro))
                     for rc in ring_cpu_grid for ro in ring_overhead_grid}
        for key in sorted(ring_grid):
            print(f"  ring cpu {key[0]:g} us, step overhead {key[1]:g} us: "
                  f"score {score(ring_grid[key]):.4f}, within 10 %: {within(ring_grid[key])} "
                  f"of {len(ring_points)}", flush=True)
        ring = min(ring_grid, key=lambda k: score(ring_grid[k]))

        def with_ring(ratios, ring_ratios):
            merged = list(ratios)
            for i, r in zip(ring_indices, ring_ratios):
                merged[i] = r
            return merged
        fitted = with_ring(grid[best], ring_grid[ring])
        print(f"ring cpu {ring[0]:g} us, step overhead {ring[1]:g} us: score "
              f"{score(fitted):.4f}, within 10 %: {within(fitted)} of {len(points)}",
              flush=True)
        # Leave one latency out: the other three fit, the one left out scores.
        held_out = {}
        for left_out in sorted({p["latency_us"] for p in points}):
            keep = [i for i, p in enumerate(points) if p["latency_us"] != left_out]
            test = [i for i, p in enumerate(points) if p["latency_us"] == left_out]
            # The ring's grid was simulated with all points' transport
            # constants; it scores the kept points only.
            lf, c, u, w = min(grid, key=lambda k: score([grid[k][i] for i in keep]))
            rk = [j for j, i in enumerate(ring_indices) if points[i]["latency_us"] != left_out]
            rc, ro = min(ring_grid, key=lambda k: score([ring_grid[k][j] for j in rk]))
            ratios = with_ring(grid[(lf, c, u, w)], ring_grid[(rc, ro)])
            held_out[f"{left_out:g}us"] = {
                "latency_factor": lf, "tcp_message_overhead_us": c, "message_cpu_us": u,
                "message_wake_us": w,
                "ring_message_cpu_us": rc, "ring_step_overhead_us": ro,
                "points": len(test),
                "within_10_percent": within([ratios[i] for i in test]),
                "within_10_percent_with_all_fitted": within([fitted[i] for i in test])}
        grpc = {c: fitter.headline(ps_points, bandwidth, c) for c in GRPC_OVERHEADS_US}
        grpc_us = min(grpc, key=lambda c: score(grpc[c]))
        runs = fitter.runs

    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    crossover = os.path.relpath(args.crossover, os.path.join(ROOT, "docs", "results"))
    headline = os.path.relpath(args.headline, os.path.join(ROOT, "docs", "results"))
    def size(b):
        return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
    sweep = (f"{crossover}: {len(points)} points that are not CPU-bound (gradsync's ring, "
             f"halving_doubling, tree, selector; {size(min(p['bytes'] for p in points))}-"
             f"{size(max(p['bytes'] for p in points))}, N = 2-16, 1 Gbit/s, "
             "20 us-5 ms one way through userspace relays)")
    document = {
        "about": "The simulator's model constants (sim/model_constants.h says how each enters "
                 "the platform), fitted once by sim/fit_constants.py; `gradsync simulate "
                 "--constants=fitted` uses them. They describe gradsync's transports on the "
                 "emulated cluster (2-core machine, namespaces, tc, userspace relays), not a "
                 "data centre's.",
        "constants": {
            "bandwidth_factor": {
                "value": round(bandwidth, 4),
                "what": "the share of a link's rate TCP/IP and the transport's framing leave to "
                        "payload",
                "fitted_on": f"{crossover}: its {len(large)} points of 1 MiB and more that are "
                             "not CPU-bound, the TCP overhead held at "
                             f"{START_TCP_OVERHEAD_US:g} us",
                "grid": BANDWIDTH_FACTORS},
            "latency_factor": {
                "value": latency,
                "what": "one-way latency of a message over the wire's, before the overhead",
                "fitted_on": sweep, "grid": LATENCY_FACTORS},
            "tcp_message_overhead_us": {
                "value": tcp_us,
                "what": "what the all-reduces' TCP transport adds to every message's "
                        "latency with no core busy for it (the relays' hop, poll's wake-up)",
                "fitted_on": sweep, "grid": tcp_grid},
            "message_cpu_us": {
                "value": cpu_us,
                "what": "the CPU time of each message a peer exchange (halving-doubling, the "
                        "tree) takes in (receive, reduce, send on, the relay's copy), run on "
                        "cpu_cores shared by every rank, so that N ranks' rounds contend for "
                        "them",
                "fitted_on": sweep, "grid": cpu_grid},
            "message_wake_us": {
                "value": wake_us,
                "what": "what each message a peer exchange takes in then waits for its rank's "
                        "thread, per rank per core of the machine (N / cpu_cores times this), "
                        "busy or not: a tree's hop costs what a halving-doubling round does at "
                        "N = 8 and 16 with about half the messages in flight",
                "fitted_on": sweep, "grid": wake_grid},
            "ring_message_cpu_us": {
                "value": ring[0],
                "what": "the CPU time of each step's message in the ring's own loop "
                        "(ring_allreduce.cc: one poll loop over its two neighbours, where the "
                        "other all-reduces run peer_exchange.h's rounds), on the same cores",
                "fitted_on": f"{crossover}: its {len(ring_points)} ring and selector points of "
                             "the sweep above, the other constants held",
                "grid": ring_cpu_grid},
            "ring_step_overhead_us": {
                "value": ring[1],
                "what": "what the ring's loop adds to each step's latency beyond the "
                        "transport's per-message overhead, with no core busy for it",
                "fitted_on": f"{crossover}: its {len(ring_points)} ring and selector points of "
                             "the sweep above, the other constants held",
                "grid": ring_overhead_grid},
            "link_burst_bytes": {
                "value": LINK_BURST_BYTES,
                "what": "the token bucket of every emulated link (tc's tbf burst): bytes a NIC "
                        "lets out faster than its rate after an idle spell, refilled at the "
                        "rate",
                "fitted_on": "not fitted: core/launch/netem.cc's burst at 1 Gbit/s and below "
                             "(128 KiB)"},
            "cpu_cores": {
                "value": CPU_CORES,
                "what": "the cores of the emulated cluster's one machine, which all its ranks "
                        "and relays share",
                "fitted_on": "not fitted: the machine the sweep ran on (its context's "
                             "\"machine\": AMD EPYC, 2 cores)"},
            "grpc_message_overhead_us": {
                "value": grpc_us,
                "what": "what a PS key's push or answer over gRPC adds to its message",
                "fitted_on": f"{headline}: its {len(ps_points)} PS points (100 Mbit/s, "
                             "2.5 MB in 32 tensors, 64 KiB keys, K = 1, N, colocated), "
                             "the bandwidth factor held",
                "grid": GRPC_OVERHEADS_US},
        },
        "fit": {
            "command": "sim/fit_constants.py " + " ".join(
                a for a in argv if not a.startswith("--simulate")),
            "date": now.strftime("%Y-%m-%d"),
            "build": rev[:7],
            "objective": "mean |log(simulated / measured)| over the points",
            "simulations": runs,
            "crossover_points": len(points),
            "crossover_within_10_percent": within(fitted),
            "grid_within_10_percent": {
                f"latency factor {k[0]:g}, tcp {k[1]:g} us, cpu {k[2]:g} us, "
                f"wake {k[3]:g} us": within(v)
                for k, v in sorted(grid.items())},
            "ring_grid_within_10_percent": {
                f"ring cpu {k[0]:g} us, step overhead {k[1]:g} us": within(v)
                for k, v in sorted(ring_grid.items())},
            "ring_points": len(ring_points),
            "crossover_mean_abs_log_ratio": round(score(fitted), 4),
            "leave_one_latency_out": held_out,
            "headline_ps_points": len(ps_points),
            "headline_ps_within_10_percent": within(grpc[grpc_us]),
        },
    }
    with open(args.out, "w") as f:
        json.dump(document, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(json.dumps(document["fit"], indent=1))
    if args.summary:
        write_summary(args.summary, document, argv, rev, now)


def write_summary(folder, document, argv, rev, now):
    """The fit's figures as points for tools/render_results.py."""
    values = {k: v["value"] for k, v in document["constants"].items()}
    fit = document["fit"]
    points = [dict({"set": "crossover", "constants": "fitted",
                    "points": fit["crossover_points"],
                    "within_10_percent": fit["crossover_within_10_percent"],
                    "mean_abs_log_ratio": fit["crossover_mean_abs_log_ratio"]}, **values),
              {"set": "headline-ps", "constants": "fitted",
               "points": fit["headline_ps_points"],
               "within_10_percent": fit["headline_ps_within_10_percent"]}]
    for latency, held in fit["leave_one_latency_out"].items():
        points.append({"set": f"held-out-{latency}", "constants": "fitted-without",
                       "points": held["points"],
                       "within_10_percent": held["within_10_percent"]})
    for cell, count in fit["grid_within_10_percent"].items():
        points.append({"set": "grid", "cell": cell, "within_10_percent": count})
    for cell, count in fit.get("ring_grid_within_10_percent", {}).items():
        points.append({"set": "ring-grid", "cell": cell, "points": fit["ring_points"],
                       "within_10_percent": count})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "points.json"), "w") as f:
        json.dump({"points": points}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"manifest": {"command": fit["command"], "git_commit": rev[:7],
                                "time": now.strftime("%Y-%m-%d"),
                                "about": "the fit summary of sim/constants.json, as points "
                                         "for the renderer"}}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
