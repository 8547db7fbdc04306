#!/usr/bin/python3
"""Plots the scaling curves of a sweep (bench/scaling.py's points.csv).

One row of three panels per (model, link, bucket, compute) group:
  - time per step against N, measured (median, bars from min to max over
    the repeats) and predicted by the α–β model (dashed);
  - throughput (samples/s over all workers) against N, measured and
    predicted, with the N = 1 reference's throughput scaled by N (dotted) as
    the perfect-scaling line;
  - bytes per step through the busiest link (one direction) against N,
    measured and from the formulas (bench/cost_model.py).

Usage: /usr/bin/python3 bench/plot_scaling.py runs/scaling-.../points.csv -o out.png
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import cost_model  # noqa: E402

# One colour per series, the same in every panel.
COLORS = {"ring": "tab:blue", "ps K=1": "tab:red", "ps K=N": "tab:green",
          "ps-colocated": "tab:purple"}


def read_points(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    numeric = lambda v: float(v) if v not in ("", None) else None  # noqa: E731
    for row in rows:
        for key, value in row.items():
            if key not in ("strategy", "model", "link", "sweep", "cpu_bound"):
                row[key] = numeric(value)
        row["cpu_bound"] = row.get("cpu_bound") == "True"
        row["workers"] = int(row["workers"])
        row["servers"] = int(row["servers"])
    return rows


def series_name(p):
    if p["strategy"] == "ps":
        return "ps K=N" if p["servers"] == p["workers"] else f"ps K={p['servers']}"
    if p["strategy"] == "ps-mixed":
        return f"ps K={p['servers']:.0f}, {p['colocated']:.0f} in workers"
    return p["strategy"]


def predicted_busiest_bytes(p):
    """The busiest link's bytes per step, one direction, by the formulas."""
    s, n, k = p["model_bytes"], p["workers"], p["servers"]
    if p["strategy"] in ("ring", "ps-colocated"):
        return 2 * (n - 1) / n * s
    if p["strategy"] == "ps":
        share = p.get("largest_server_share") or 1.0 / k
        return max(s, n * share * s)
    if p["strategy"] == "ps-mixed":  # cost_model.py's (5)
        share = p.get("largest_server_share") or 1.0 / k
        separate = n * share * s if k > p["colocated"] else 0.0
        return max(s + (n - 2) * share * s, separate, s)
    return 0.0


def plot_group(axes, points, reference):
    by_series = {}
    for p in points:
        by_series.setdefault(series_name(p), []).append(p)
    for name, ps in sorted(by_series.items()):
        ps.sort(key=lambda p: p["workers"])
        color = COLORS.get(name)
        n = [p["workers"] for p in ps]
        step = [p["step_ms"] / 1000 for p in ps]
        low = [(p["step_ms"] - p["step_ms_min"]) / 1000 for p in ps]
        high = [(p["step_ms_max"] - p["step_ms"]) / 1000 for p in ps]
        axes[0].errorbar(n, step, yerr=[low, high], marker="o", color=color, capsize=3,
                         label=f"{name} measured")
        # A point measured on a busy machine may show the CPU, not the links.
        busy = [p for p in ps if p["cpu_bound"]]
        if busy:
            axes[0].scatter([p["workers"] for p in busy], [p["step_ms"] / 1000 for p in busy],
                            s=160, facecolors="none", edgecolors="red", zorder=5,
                            label=f"{name}: CPU-bound (machine > 70% busy)")
        predicted = [p.get("predicted_step_ms") for p in ps]
        if all(v is not None for v in predicted):
            axes[0].plot(n, [v / 1000 for v in predicted], "--", color=color,
                         label=f"{name} predicted")
        axes[1].plot(n, [p["samples_per_s"] for p in ps], marker="o", color=color, label=name)
        if all(v is not None for v in predicted):
            axes[1].plot(n, [p["samples_per_s"] * p["step_ms"] / v for p, v in zip(ps, predicted)],
                         "--", color=color)
        axes[2].plot(n, [p["busiest_link_bytes"] / 1e6 for p in ps], marker="o", color=color,
                     label=f"{name} measured")
        axes[2].plot(n, [predicted_busiest_bytes(p) / 1e6 for p in ps], "--", color=color)
    all_n = sorted({p["workers"] for p in points})
    # Keep the measured curves readable: perfect scaling may run far above
    # them when communication dominates, and is then clipped.
    top = max(max(p["samples_per_s"], p["samples_per_s"] * p["step_ms"] /
                  (p.get("predicted_step_ms") or p["step_ms"])) for p in points)
    axes[1].set_ylim(0, 1.3 * top)
    if reference is not None:
        axes[0].axhline(reference["step_ms"] / 1000, color="gray", linestyle=":",
                        label="N=1, no communication")
        axes[1].plot(all_n, [reference["samples_per_s"] * n for n in all_n], ":", color="gray",
                     label="perfect scaling")
    for ax in axes:
        ax.set_xlabel("workers N")
        ax.set_xticks(all_n)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("s per step")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("samples/s (all workers)")
    axes[2].set_ylabel("MB per step, busiest link, one way")
    axes[2].set_ylim(bottom=0)
    axes[2].text(0.98, 0.03, "dashed: ring 2(N−1)/N·S,  ps N·S/K (≥ S),\ncolocated 2(N−1)/N·S",
                 transform=axes[2].transAxes, fontsize=7, va="bottom", ha="right")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    axes[2].legend(fontsize=7)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="points.csv from bench/scaling.py")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="", help="figure title")
    args = parser.parse_args()
    points = read_points(args.csv)
    groups = {}
    for p in points:
        groups.setdefault((p["model"], p["link"], p["bucket_mb"], p["compute_ms"]), []).append(p)
    if not groups:
        sys.exit(f"plot_scaling: no points in {args.csv}")
    fig, axes = plt.subplots(len(groups), 3, figsize=(15, 4.2 * len(groups)), squeeze=False)
    for row, (key, group) in zip(axes, sorted(groups.items())):
        model, link, bucket, compute = key
        reference = next((p for p in group if p["strategy"] == "local"), None)
        plot_group(row, [p for p in group if p["strategy"] != "local"], reference)
        mb = group[0]["model_bytes"] / 1e6
        row[0].set_title(f"time per step — {model} ({mb:.0f} MB), {link} links")
        row[1].set_title(f"throughput (bucket {bucket:g} MiB, compute {compute:g} ms)")
        row[2].set_title("traffic through the busiest link")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=90)
    print(f"plot: {args.output}")


if __name__ == "__main__":
    main()
