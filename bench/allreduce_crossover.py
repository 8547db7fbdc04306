#!/usr/bin/python3
"""The crossover map of the all-reduce family and the parameter server: which
strategy is fastest at which message size, number of ranks and link latency,
each point beside its α–β prediction (cost_model.py).

For every latency L and every N it runs bench/allreduce_benchmark once with
--netem=RATE (every rank in its own network namespace behind a link of that
rate) and, when L > 0, --relay_latency_us=L (userspace relays: the kernels
this was built on lack sch_netem, see bench/delay_line.h), and once more
for sizes above 16 MiB. The benchmark probes α and B on the job's own
connections (allreduce/algorithms/peer_link_probe.h); the predictions here use the
same figures, so they are what --sync=allreduce decides by.

A point is CPU-bound when the ranks' processes (relays included) used more
than --cpu_bound_share of the machine's cores during it (bench/cpu_bound.py's
rule, which the other sweeps and the pages share): there the CPU, not
the link, sets the time, and neither the map nor the model speaks for a
network. The table says so per point.

    sudo bench/allreduce_crossover.py --out=/tmp/crossover \\
        --latencies_us=20,200,1000,5000 --workers=2,4,8,16

writes points.json (every measurement), crossover.md (the tables) and
crossover.png (the map) under --out. Needs root (network namespaces).
"""
import argparse
import json
import math
import os
import subprocess
import sys

import cost_model
from cpu_bound import CPU_BOUND_SHARE, is_cpu_bound

NAMES = {
    "gradsync_ring": "ring",
    "gradsync_halving_doubling": "halving-doubling",
    "gradsync_tree": "tree",
    "gradsync_hierarchical": "hierarchical",
    "gradsync_allreduce": "allreduce",
    "gradsync_ps": "ps",
}
DEFAULT_ALGORITHMS = ("gradsync_ring,gradsync_halving_doubling,gradsync_tree,"
                      "gradsync_allreduce,gradsync_ps")
GRID_LARGEST = 16 << 20  # sizes up to here in one run, ×step apart
# The bars of the issue that asked for this map: each algorithm within this
# factor of its α–β prediction, the selector within SELECTOR_BAR of the best.
MODEL_BAR = 0.15
SELECTOR_BAR = 0.05


def token_bucket_bytes(link_bits_per_s):
    """The emulated link's tbf bucket (core/launch/netem.cc: at least 128 KiB,
    1 ms of the rate above that): a buffer no larger can leave a rank at the
    veth's speed after a pause, faster than the rate the model charges."""
    return max(128 << 10, int(link_bits_per_s / 8 * 1e-3))


def parse_list(text, kind=int):
    return [kind(x) for x in text.split(",") if x.strip()]


def size_label(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def latency_label(us):
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us:g} µs"


def ps_predicted_seconds(n, size, link, row):
    """(3) of cost_model.py for the benchmark's gradsync_ps row, with the key
    size and the busiest server's share the strategy chose (the JSON row)."""
    key = row.get("ps_key_bytes") or min(size, cost_model.PS_CHUNK_BYTES)
    share = row.get("ps_largest_share") or cost_model.balanced_share(size, n, key)
    return cost_model.colocated_ps_time(n, size, link, last_key=min(key, size),
                                        message_bytes=row.get("ps_message_bytes")
                                        or cost_model.PS_MESSAGE_BYTES,
                                        largest_share=share)


def points_from_run(document, latency_us, cores):
    """One point per (size, algorithm) of one benchmark JSON document. The
    all-reduce family's predictions are the benchmark's own (allreduce/
    cost_model.cc with the α the selector measured for each algorithm); the
    PS's is (3) of cost_model.py with the probed link."""
    context = document["context"]
    n = context["workers"]
    alpha = context.get("prediction_link_alpha_us", 0) * 1e-6
    bandwidth = context.get("prediction_link_bytes_per_s", 0)
    link = cost_model.Link(alpha, bandwidth) if alpha > 0 and bandwidth > 0 else None
    rate = context.get("link_bits_per_s", 0)
    burst = token_bucket_bytes(rate) if rate > 0 else 0
    points = []
    for row in document["benchmarks"]:
        algorithm, _ = row["name"].split("/")
        size = row["bytes"]
        predicted = row.get("predicted_us") or None
        if algorithm == "gradsync_ps" and link is not None:
            predicted = ps_predicted_seconds(n, size, link, row) * 1e6
        points.append({
            "latency_us": latency_us, "workers": n, "bytes": size,
            "algorithm": algorithm, "time_us": row["real_time"],
            "predicted_us": predicted, "wrong": row["wrong"],
            "cpu_share": row["cpu_us_all_ranks"] / row["real_time"] / cores,
            "alpha_us": alpha * 1e6, "bandwidth_GBps": bandwidth / 1e9,
            "predicted_alpha_us": row.get("predicted_alpha_us"),
            "retrans_segments": row.get("retrans_segments"),
            # The busiest link's measured share of its line rate (None
            # before the benchmark measured it).
            "busiest_link_share": row.get("busiest_link_share"),
            "burst_bytes": burst,
        })
    return points


def cells(points):
    """{(latency, N, size): {algorithm: point}}"""
    grid = {}
    for p in points:
        grid.setdefault((p["latency_us"], p["workers"], p["bytes"]), {})[p["algorithm"]] = p
    return grid


def selector_pick(row):
    """The candidate --sync=allreduce ran: the one whose prediction its own
    equals (the benchmark predicts each with the selector's figures)."""
    selector = row.get("gradsync_allreduce")
    if not selector or not selector["predicted_us"]:
        return None
    for algorithm in ("gradsync_ring", "gradsync_halving_doubling", "gradsync_tree"):
        p = row.get(algorithm)
        if p and p["predicted_us"] and abs(p["predicted_us"] - selector["predicted_us"]) \
                <= 1e-6 * selector["predicted_us"]:
            return algorithm
    return None


def verdict(row, cpu_bound_share):
    """Fastest strategy of one cell; the selector's time over the fastest
    single all-reduce's; its pick's own row over the fastest's (a wrong pick
    shows here, the noise of running the same algorithm twice does not); and
    whether the cell was CPU-bound."""
    singles = {a: p for a, p in row.items() if a != "gradsync_allreduce"}
    fastest = min(singles, key=lambda a: singles[a]["time_us"])
    best_allreduce = min((a for a in singles if a != "gradsync_ps"),
                         key=lambda a: singles[a]["time_us"], default=None)
    selector = row.get("gradsync_allreduce")
    ratio = (selector["time_us"] / singles[best_allreduce]["time_us"]
             if selector and best_allreduce else None)
    pick = selector_pick(row)
    pick_ratio = (row[pick]["time_us"] / singles[best_allreduce]["time_us"]
                  if pick and best_allreduce else None)
    cpu_bound = is_cpu_bound(
        job_cpu_share=max(p["cpu_share"] for p in row.values()), share=cpu_bound_share)
    return fastest, ratio, pick, pick_ratio, cpu_bound


def in_burst(point):
    return point["bytes"] <= point.get("burst_bytes", 0)


def bar_counts(points, cpu_bound_share):
    """Per algorithm: [within MODEL_BAR of its prediction, points counted]
    over the points that are neither CPU-bound nor inside the link's token
    bucket, and the same over the bucket's points; and the selector's
    [pick within SELECTOR_BAR, own row within SELECTOR_BAR, cells] over all
    cells and over the cells larger than the bucket."""
    model, model_burst = {}, {}
    for p in points:
        if not p["predicted_us"] or is_cpu_bound(job_cpu_share=p["cpu_share"],
                                                 share=cpu_bound_share):
            continue
        target = model_burst if in_burst(p) else model
        entry = target.setdefault(p["algorithm"], [0, 0])
        entry[0] += abs(p["time_us"] / p["predicted_us"] - 1) <= MODEL_BAR
        entry[1] += 1
    selector = {"all": [0, 0, 0], "outside": [0, 0, 0]}
    for cell in cells(points).values():
        _, ratio, _, pick_ratio, _ = verdict(cell, cpu_bound_share)
        if ratio is None:
            continue
        groups = ["all"] if any(in_burst(p) for p in cell.values()) else ["all", "outside"]
        for group in groups:
            counts = selector[group]
            counts[0] += pick_ratio is not None and pick_ratio <= 1 + SELECTOR_BAR
            counts[1] += ratio <= 1 + SELECTOR_BAR
            counts[2] += 1
    return model, model_burst, selector


def markdown(points, algorithms, cpu_bound_share, header):
    grid = cells(points)
    lines = [header, ""]
    model, model_burst, selector = bar_counts(points, cpu_bound_share)
    lines.append(f"### The bars: within {MODEL_BAR:.0%} of α–β, the selector within "
                 f"{SELECTOR_BAR:.0%} of the best all-reduce")
    lines.append("")
    lines.append("| strategy | within the bar (points not CPU-bound, larger than the link's "
                 "token bucket) | within the bar (points inside the bucket, ‡) |")
    lines.append("| --- | ---: | ---: |")
    for a in algorithms:
        if a in model or a in model_burst:
            ok, total = model.get(a, [0, 0])
            ok_b, total_b = model_burst.get(a, [0, 0])
            lines.append(f"| {NAMES.get(a, a)} | {ok} of {total} | {ok_b} of {total_b} |")
    lines.append("")
    every, outside = selector["all"], selector["outside"]
    lines.append(f"The selector's pick within {SELECTOR_BAR:.0%} of the best all-reduce at "
                 f"{every[0]} of {every[2]} points ({outside[0]} of the {outside[2]} outside "
                 f"the token bucket); its own timed row at {every[1]} ({outside[1]}).")
    lines.append("")
    latencies = sorted({k[0] for k in grid})
    workers = sorted({k[1] for k in grid})
    sizes = sorted({k[2] for k in grid})
    lines.append("### Map: the fastest strategy (`*`: CPU-bound)")
    lines.append("")
    lines.append("| one-way latency | N | " + " | ".join(size_label(s) for s in sizes) + " |")
    lines.append("| --- | --- |" + " --- |" * len(sizes))
    for latency in latencies:
        for n in workers:
            row = []
            for size in sizes:
                cell = grid.get((latency, n, size))
                if not cell:
                    row.append("–")
                    continue
                fastest, _, _, _, cpu_bound = verdict(cell, cpu_bound_share)
                row.append(NAMES.get(fastest, fastest) + ("*" if cpu_bound else ""))
            lines.append(f"| {latency_label(latency)} | {n} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("### Every point: ms per all-reduce (measured / α–β prediction)")
    lines.append("")
    shown = [a for a in algorithms if any(p["algorithm"] == a for p in points)]
    lines.append("| latency | N | size | " + " | ".join(NAMES.get(a, a) for a in shown)
                 + " | fastest | allreduce / best all-reduce | its pick (that row / best) "
                 "| CPU share | retransmitted segments | α (µs), B (GB/s) |")
    lines.append("| --- | --- | --- |" + " ---: |" * len(shown)
                 + " --- | ---: | --- | ---: | --- | --- |")
    for key in sorted(grid):
        latency, n, size = key
        cell = grid[key]
        fastest, ratio, pick, pick_ratio, cpu_bound = verdict(cell, cpu_bound_share)
        entries = []
        for a in shown:
            p = cell.get(a)
            if p is None:
                entries.append("–")
                continue
            text = f"{p['time_us'] / 1000:.2f}"
            if p["predicted_us"]:
                text += f" ({p['time_us'] / p['predicted_us']:.2f})"
            if is_cpu_bound(job_cpu_share=p["cpu_share"], share=cpu_bound_share):
                text += "†"
            elif p["predicted_us"] and in_burst(p):
                text += "‡"
            if p["wrong"]:
                text += f" {p['wrong']} wrong"
            entries.append(("**" + text + "**") if a == fastest else text)
        share = max(p["cpu_share"] for p in cell.values())
        any_point = next(iter(cell.values()))
        lost = ", ".join(f"{NAMES.get(a, a)} {cell[a]['retrans_segments']}" for a in shown
                         if a in cell and (cell[a].get("retrans_segments") or 0) > 0)
        if all(cell[a].get("retrans_segments") is None for a in cell):
            lost = "–"
        lines.append(
            f"| {latency_label(latency)} | {n} | {size_label(size)} | " + " | ".join(entries)
            + f" | {NAMES.get(fastest, fastest)} | "
            + (f"{ratio:.2f}" if ratio else "–")
            + f" | {NAMES.get(pick, '–')}"
            + (f" ({pick_ratio:.2f})" if pick_ratio else "")
            + f" | {share:.0%}"
            + f" | {lost or 'none'}"
            + f" | {any_point['alpha_us']:.0f}, {any_point['bandwidth_GBps']:.3f} |")
    lines.append("")
    lines.append("Cells: milliseconds per all-reduce, the slowest rank's mean; in brackets the "
                 "measured time over the α–β prediction from the α and B probed in the same run "
                 "(allreduce/algorithms/cost_model.cc, bench/cost_model.py); † CPU-bound; ‡ the buffer fits "
                 "the emulated link's token bucket (it may leave at the veth's speed, faster than "
                 "the rate the model charges; a real NIC does not burst). Bold: the fastest. "
                 "Retransmitted segments: over the timed runs, summed over the ranks' "
                 "namespaces, per strategy (none: zero for all). "
                 "The selector's pick is the candidate whose prediction its own equals; the "
                 "pick's own row over the best all-reduce's separates a wrong pick from the "
                 "noise of timing the same algorithm twice. CPU share: user+system time of all ranks (relays included) over the wall time "
                 "and the machine's cores, the highest of the cell's strategies. A failed run's "
                 "points are missing (–).")
    return "\n".join(lines) + "\n"


def plot(points, cpu_bound_share, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    grid = cells(points)
    workers = sorted({k[1] for k in grid})
    latencies = sorted({k[0] for k in grid})
    sizes = sorted({k[2] for k in grid})
    colours = {"gradsync_ring": "#4477aa", "gradsync_halving_doubling": "#ee6677",
               "gradsync_tree": "#228833", "gradsync_hierarchical": "#ccbb44",
               "gradsync_ps": "#aa3377"}
    fig, axes = plt.subplots(1, len(workers), figsize=(3.2 * len(workers), 3.4),
                             sharey=True, squeeze=False)
    for ax, n in zip(axes[0], workers):
        for y, latency in enumerate(latencies):
            for x, size in enumerate(sizes):
                cell = grid.get((latency, n, size))
                if not cell:
                    continue
                fastest, _, _, _, cpu_bound = verdict(cell, cpu_bound_share)
                ring = cell.get("gradsync_ring")
                ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1,
                                           color=colours.get(fastest, "#bbbbbb"),
                                           alpha=0.35 if cpu_bound else 0.9,
                                           hatch="//" if cpu_bound else None, lw=0))
                if ring:
                    speedup = ring["time_us"] / cell[fastest]["time_us"]
                    ax.text(x, y, f"{speedup:.1f}×", ha="center", va="center", fontsize=7)
        ax.set_xlim(-0.5, len(sizes) - 0.5)
        ax.set_ylim(-0.5, len(latencies) - 0.5)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([size_label(s).replace(" ", "") for s in sizes],
                           rotation=45, fontsize=7)
        ax.set_yticks(range(len(latencies)))
        ax.set_yticklabels([latency_label(l) for l in latencies], fontsize=7)
        ax.set_title(f"N = {n}", fontsize=9)
    axes[0][0].set_ylabel("one-way latency")
    handles = [Patch(color=c, label=NAMES[a]) for a, c in colours.items()
               if any(p["algorithm"] == a for p in points)]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//",
                         label="CPU-bound (faded)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7,
               frameon=False)
    fig.suptitle("Fastest strategy per size (text: ring's time over the fastest's)",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=130)


def run_benchmark(args, latency_us, n, min_bytes, max_bytes, json_path):
    command = [args.benchmark, f"--workers={n}", f"--netem={args.rate}",
               f"--min_bytes={min_bytes}", f"--max_bytes={max_bytes}",
               f"--step_factor={args.step_factor}", f"--iters={args.iters}",
               f"--warmup={args.warmup}", f"--algorithms={args.algorithms}",
               f"--json={json_path}"]
    if latency_us > 0:
        command.append(f"--relay_latency_us={latency_us}")
    print("+", " ".join(command), flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    completed = subprocess.run(command, timeout=args.timeout_s, capture_output=True, text=True)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-4000:] + completed.stderr[-4000:])
        sys.stderr.write(f"allreduce_crossover: the benchmark failed at latency {latency_us} us, "
                         f"N = {n} (exit {completed.returncode}); its output is above; "
                         "going on without this run\n")
        return None
    with open(json_path) as f:
        document = json.load(f)
    document["context"]["load_before"] = float(load)
    return document


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="bazel-bin/bench/allreduce_benchmark")
    parser.add_argument("--out", required=True, help="directory for the results")
    parser.add_argument("--latencies_us", default="20,200,1000,5000")
    parser.add_argument("--workers", default="2,4,8,16")
    parser.add_argument("--min_bytes", type=int, default=4096)
    parser.add_argument("--max_bytes", type=int, default=64 << 20)
    parser.add_argument("--step_factor", type=int, default=16)
    parser.add_argument("--large_workers_max", type=int, default=8,
                        help="sizes above 16 MiB only up to this N (time)")
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--algorithms", default=DEFAULT_ALGORITHMS)
    parser.add_argument("--cpu_bound_share", type=float, default=CPU_BOUND_SHARE)
    parser.add_argument("--timeout_s", type=int, default=900)
    parser.add_argument("--replot", action="store_true",
                        help="only redraw crossover.md/png from --out/points.json")
    parser.add_argument("--append", action="store_true",
                        help="add these runs to --out/points.json instead of starting over")
    args = parser.parse_args()
    # The map is drawn after the sweep: a missing matplotlib is said before
    # minutes of measuring, not as a traceback after them.
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("allreduce_crossover: drawing the map needs matplotlib: install "
                 "python3-matplotlib (tools/install_deps.sh does)")
    os.makedirs(args.out, exist_ok=True)
    points_path = os.path.join(args.out, "points.json")
    cores = os.cpu_count() or 1
    if args.replot:
        with open(points_path) as f:
            saved = json.load(f)
        points, runs = saved["points"], saved["runs"]
    else:
        points, runs = [], []
        if args.append and os.path.exists(points_path):
            with open(points_path) as f:
                saved = json.load(f)
            points, runs = saved["points"], saved["runs"]
        for latency in parse_list(args.latencies_us, float):
            for n in parse_list(args.workers):
                spans = []
                if args.min_bytes <= GRID_LARGEST:
                    spans.append((args.min_bytes, min(args.max_bytes, GRID_LARGEST)))
                if args.max_bytes > GRID_LARGEST and n <= args.large_workers_max:
                    spans.append((args.max_bytes, args.max_bytes))
                for low, high in spans:
                    json_path = os.path.join(args.out, f"run_{latency:g}us_n{n}_{low}.json")
                    document = run_benchmark(args, latency, n, low, high, json_path)
                    if document is None:
                        runs.append({"latency_us": latency, "workers": n, "failed": True,
                                     "context": {"min_bytes": low, "max_bytes": high}})
                        continue
                    runs.append({"latency_us": latency, "workers": n,
                                 "context": document["context"]})
                    points += points_from_run(document, latency, cores)
                    with open(points_path, "w") as f:
                        json.dump({"points": points, "runs": runs}, f, indent=1)
    algorithms = args.algorithms.split(",")
    failed = [r for r in runs if r.get("failed")]
    header = (f"Links: {args.rate} per rank (tbf, one namespace per rank); latency: userspace "
              f"relays; timed all-reduces per point after untimed ones: "
              + ", ".join(sorted({f"{r['context']['iters']} after {r['context']['warmup']}"
                                  for r in runs if not r.get("failed")}))
              + "; "
              f"CPU-bound: ranks used > {args.cpu_bound_share:.0%} of {cores} cores. "
              f"Load average before each run: "
              + ", ".join(f"{r['context'].get('load_before', float('nan')):.1f}" for r in runs
                          if not r.get("failed"))
              + "".join(f"; the run at {latency_label(r['latency_us'])}, N = {r['workers']} "
                        f"failed" for r in failed))
    with open(os.path.join(args.out, "crossover.md"), "w") as f:
        f.write(markdown(points, algorithms, args.cpu_bound_share, header))
    plot(points, args.cpu_bound_share, os.path.join(args.out, "crossover.png"))
    print(f"wrote {args.out}/points.json, crossover.md, crossover.png")


if __name__ == "__main__":
    main()
