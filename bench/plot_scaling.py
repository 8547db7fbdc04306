#!/usr/bin/python3
"""Plots the scaling curves of a sweep (bench/scaling.py's points.csv).

One row of three panels per (model, link, bucket, compute) group (with a
single N, bars per strategy with the prediction marked on each, instead of
curves against N):
  - time per step against N, measured (median, bars from min to max over
    the repeats) and predicted by the α–β model (× markers);
  - throughput (samples/s over all workers) against N, measured and
    predicted, with the N = 1 reference's throughput scaled by N as the
    perfect-scaling line where it fits on the axes;
  - bytes per step through the busiest link (one direction) against N,
    measured and from the formulas (bench/cost_model.py).

A figure must say what produced it: the build, the date, the command and the
flags every job got are read from sweep.json beside points.csv (scaling.py
writes both) and printed under the panels. Nothing is put in a legend that
cannot be seen on the figure: a reference line that would lie on the axis, a
perfect-scaling line above the top, or a series hidden under another one is
left out or named in the legend entry of the series it lies under.

Usage: /usr/bin/python3 bench/plot_scaling.py runs/scaling-.../points.csv -o out.png
"""
import argparse
import csv
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402  (beside this file: compressed points' bytes)

# One colour and marker per series, the same in every panel; the colocated PS
# is drawn hollow and larger, so it stays visible where it lies on the ring.
STYLES = {"ring": ("tab:blue", "o", True), "ps K=1": ("tab:red", "s", True),
          "ps K=N": ("tab:green", "^", True), "ps-colocated": ("tab:purple", "D", False)}
# Two curves closer than this fraction of the axis' span at every N are drawn
# on top of each other.
COINCIDENT = 0.015


def read_points(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    numeric = lambda v: float(v) if v not in ("", None) else None  # noqa: E731
    for row in rows:
        for key, value in row.items():
            if key not in ("strategy", "compression", "model", "link", "sweep", "cpu_bound",
                           "partition"):
                row[key] = numeric(value)
        row["cpu_bound"] = row.get("cpu_bound") == "True"
        row["workers"] = int(row["workers"])
        row["servers"] = int(row["servers"])
    return rows


def read_provenance(csv_path):
    """Build, date, command and the flags every job got, from the sweep.json
    bench/scaling.py wrote beside points.csv; None without one."""
    path = os.path.join(os.path.dirname(os.path.abspath(csv_path)), "sweep.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        manifest = json.load(f).get("manifest", {})
    arguments = manifest.get("arguments", {})
    # The jobs' own manifest names the build they ran (GRADSYNC_GIT_COMMIT or
    # the checkout's HEAD when they started); the sweep's names the checkout
    # when it ended, which may have moved on.
    jobs = manifest.get("run_manifest") or {}
    commit = jobs.get("git_commit") or manifest.get("git_commit", "unknown")
    return {
        "build": commit[:7],
        "date": manifest.get("time", "unknown")[:10],
        "command": manifest.get("command", ""),
        "extra": " ".join(arguments.get("extra", []) or []),
    }


def provenance_text(provenance, note):
    lines = []
    if provenance is None:
        lines.append("build, date and flags unknown: no sweep.json beside points.csv")
    else:
        flags = provenance["extra"] or "none"
        lines.append(f"gradsync {provenance['build']}, {provenance['date']};  "
                     f"flags given to every job beyond the sweep's own: {flags}")
        command = provenance["command"]
        if command:
            lines += textwrap.wrap(command, 200, subsequent_indent="    ",
                                   break_on_hyphens=False)
    if note:
        lines.append(note)
    return "\n".join(lines)


def series_name(p):
    compression = p.get("compression") or "none"
    if compression != "none":
        return f"{series_name(dict(p, compression='none'))} {compression}"
    if p["strategy"] == "ps":
        return "ps K=N" if p["servers"] == p["workers"] else f"ps K={p['servers']}"
    if p["strategy"] == "ps-mixed":
        return f"ps K={p['servers']:.0f}, {p['colocated']:.0f} in workers"
    return p["strategy"]


# Series without a style of their own (ps-mixed points, K other than 1 and
# N) take these in turn, so a legend entry always matches its line.
EXTRA_STYLES = [("tab:orange", "v", True), ("tab:brown", "<", True), ("tab:pink", ">", True),
                ("tab:gray", "p", True), ("tab:olive", "h", True), ("tab:cyan", "*", True),
                ("black", "P", True), ("tab:orange", "X", False), ("tab:brown", "d", False)]
_assigned = {}


def style(name):
    if name in STYLES:
        return STYLES[name]
    if name not in _assigned:
        _assigned[name] = EXTRA_STYLES[len(_assigned) % len(EXTRA_STYLES)]
    return _assigned[name]


def predicted_busiest_bytes(p):
    """The busiest link's bytes per step, one direction, by the formulas."""
    s, n, k = p["model_bytes"], p["workers"], p["servers"]
    if (p.get("compression") or "none") != "none":  # (9)–(13), one bucket of S
        share = p.get("largest_server_share") or (1.0 / k if k else None)
        return cost_model.compressed_link_bytes(p["strategy"], p["compression"], n, s, share)
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


def hidden_under(curves, span):
    """{name: the earlier-drawn series it lies on}, for series whose curve
    is within COINCIDENT of the axis span of an earlier one at every N."""
    hidden, names = {}, list(curves)
    for i, name in enumerate(names):
        xs, ys = curves[name]
        for other in names[:i]:
            oxs, oys = curves[other]
            if xs == oxs and all(abs(a - b) <= COINCIDENT * span for a, b in zip(ys, oys)):
                hidden[name] = other
                break
    return hidden


def draw_panel(ax, curves, predictions, span):
    """Measured curves (with error bars where given) and prediction markers;
    returns the legend handles of what can be seen."""
    hidden = hidden_under({n: (c["x"], c["y"]) for n, c in curves.items()}, span)
    handles = []
    for name, c in curves.items():
        color, marker, filled = style(name)
        label = name
        under = [h for h, top in hidden.items() if top == name]
        if under:
            label += f" (= {', '.join(under)})"
        ax.errorbar(c["x"], c["y"], yerr=c.get("err"), marker=marker, color=color, capsize=3,
                    markersize=6 if filled else 9,
                    markerfacecolor=color if filled else "none",
                    linestyle="-" if filled else "--", zorder=3 if filled else 4)
        if name in hidden:
            continue  # named in the entry of the series it lies on
        handles.append(Line2D([], [], color=color, marker=marker,
                              markerfacecolor=color if filled else "none",
                              linestyle="-" if filled else "--", label=label))
    any_prediction = False
    for name, (xs, ys) in predictions.items():
        if not xs:
            continue
        any_prediction = True
        ax.plot(xs, ys, linestyle="none", marker="x", markersize=11, markeredgewidth=1.6,
                color="black", zorder=6)
    if any_prediction:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="none",
                              markersize=9, label="α–β prediction"))
    return handles


def draw_bars(ax, curves, predictions):
    """One N: a bar per series (min–max of the repeats as an error bar) with
    its prediction marked on it; returns the legend handles."""
    names = list(curves)
    for i, name in enumerate(names):
        color, _, filled = style(name)
        c = curves[name]
        err = None
        if c.get("err"):
            err = [[c["err"][0][0]], [c["err"][1][0]]]
        ax.bar(i, c["y"][0], yerr=err, color=color if filled else "white", edgecolor=color,
               hatch=None if filled else "//", capsize=4, width=0.7, zorder=3)
    any_prediction = False
    for i, name in enumerate(names):
        xs, ys = predictions.get(name, ([], []))
        if ys:
            any_prediction = True
            ax.plot([i], [ys[0]], linestyle="none", marker="_", markersize=28,
                    markeredgewidth=2.2, color="black", zorder=6)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    # Headroom above the tallest bar for the legend and the notes.
    tallest = max([c["y"][0] for c in curves.values()] +
                  [ys[0] for _, ys in predictions.values() if ys] + [0])
    ax.set_ylim(0, 1.3 * tallest or 1.0)
    handles = []
    if any_prediction:
        handles.append(Line2D([], [], color="black", marker="_", linestyle="none",
                              markersize=14, markeredgewidth=2.2, label="α–β prediction"))
    return handles


def plot_group(axes, points, reference):
    """Three panels against N; with a single N, bars per strategy instead
    (curves of one point each would stack on one x position)."""
    if len({p["workers"] for p in points}) == 1:
        plot_group_at_one_n(axes, points, reference)
        return

    by_series = {}
    for p in points:
        by_series.setdefault(series_name(p), []).append(p)
    order = sorted(by_series, key=lambda n: (list(STYLES).index(n) if n in STYLES else 99, n))
    steps, throughput, traffic = {}, {}, {}
    step_pred, throughput_pred, traffic_pred = {}, {}, {}
    busy = []
    for name in order:
        ps = sorted(by_series[name], key=lambda p: p["workers"])
        n = [p["workers"] for p in ps]
        steps[name] = {"x": n, "y": [p["step_ms"] / 1000 for p in ps],
                       "err": [[(p["step_ms"] - p["step_ms_min"]) / 1000 for p in ps],
                               [(p["step_ms_max"] - p["step_ms"]) / 1000 for p in ps]]}
        throughput[name] = {"x": n, "y": [p["samples_per_s"] for p in ps]}
        traffic[name] = {"x": n, "y": [p["busiest_link_bytes"] / 1e6 for p in ps]}
        predicted = [p.get("predicted_step_ms") for p in ps]
        known = [(p, v) for p, v in zip(ps, predicted) if v]
        step_pred[name] = ([p["workers"] for p, _ in known], [v / 1000 for _, v in known])
        throughput_pred[name] = ([p["workers"] for p, _ in known],
                                 [p["samples_per_s"] * p["step_ms"] / v for p, v in known])
        traffic_pred[name] = (n, [predicted_busiest_bytes(p) / 1e6 for p in ps])
        busy += [p for p in ps if p["cpu_bound"]]

    def span_of(curves, predictions, floor=0.0):
        values = [v for c in curves.values() for v in c["y"]]
        values += [v for _, ys in predictions.values() for v in ys]
        return max(values + [floor]) or 1.0

    all_n = sorted({p["workers"] for p in points})
    notes = []
    # Time per step.
    top = span_of(steps, step_pred) * 1.1
    handles = draw_panel(axes[0], steps, step_pred, top)
    if busy:
        axes[0].scatter([p["workers"] for p in busy], [p["step_ms"] / 1000 for p in busy],
                        s=220, facecolors="none", edgecolors="red", zorder=7)
        handles.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none",
                              markeredgecolor="red", linestyle="none",
                              label="CPU-bound (machine > 70% busy)"))
    if reference is not None:
        ref_s = reference["step_ms"] / 1000
        if ref_s >= 0.03 * top:
            axes[0].axhline(ref_s, color="gray", linestyle=":")
            handles.append(Line2D([], [], color="gray", linestyle=":",
                                  label="N=1, no communication"))
        else:
            notes.append((axes[0], f"N=1 (no communication): {reference['step_ms']:.1f} ms a step"))
    axes[0].set_ylim(0, top)
    axes[0].legend(handles=handles, fontsize=7, loc="upper left")
    # Throughput.
    top = span_of(throughput, throughput_pred) * 1.25
    handles = draw_panel(axes[1], throughput, throughput_pred, top)
    if reference is not None:
        perfect = [reference["samples_per_s"] * n for n in all_n]
        if min(perfect) <= top:
            axes[1].plot(all_n, perfect, ":", color="gray")
            handles.append(Line2D([], [], color="gray", linestyle=":",
                                  label="perfect scaling (N × N=1)"))
        else:
            notes.append((axes[1], "perfect scaling (N × N=1's "
                          f"{reference['samples_per_s']:.0f} samples/s) is above the axes"))
    axes[1].set_ylim(0, top)
    axes[1].legend(handles=handles, fontsize=7, loc="upper left")
    # Busiest link.
    top = span_of(traffic, traffic_pred) * 1.1
    handles = draw_panel(axes[2], traffic, traffic_pred, top)
    axes[2].set_ylim(0, top)
    axes[2].legend(handles=handles, fontsize=7, loc="upper left")
    axes[2].text(0.98, 0.03, "×: ring 2(N−1)/N·S,  ps N·S/K (≥ S),\ncolocated 2(N−1)/N·S",
                 transform=axes[2].transAxes, fontsize=7, va="bottom", ha="right")
    for ax, text in notes:
        ax.text(0.98, 0.03, text, transform=ax.transAxes, fontsize=7, va="bottom", ha="right",
                color="dimgray")
    for ax in axes:
        ax.set_xlabel("workers N")
        ax.set_xticks(all_n)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("s per step")
    axes[1].set_ylabel("samples/s (all workers)")
    axes[2].set_ylabel("MB per step, busiest link, one way")


def series_of(points):
    """{series name: its points sorted by N}, in STYLES' order."""
    by_series = {}
    for p in points:
        by_series.setdefault(series_name(p), []).append(p)
    order = sorted(by_series, key=lambda n: (list(STYLES).index(n) if n in STYLES else 99, n))
    return {name: sorted(by_series[name], key=lambda p: p["workers"]) for name in order}


def plot_group_at_one_n(axes, points, reference):
    series = series_of(points)
    n = points[0]["workers"]
    steps, throughput, traffic, step_pred, throughput_pred, traffic_pred = {}, {}, {}, {}, {}, {}
    for name, (p, *_) in series.items():
        steps[name] = {"x": [n], "y": [p["step_ms"] / 1000],
                       "err": [[(p["step_ms"] - p["step_ms_min"]) / 1000],
                               [(p["step_ms_max"] - p["step_ms"]) / 1000]]}
        throughput[name] = {"x": [n], "y": [p["samples_per_s"]]}
        traffic[name] = {"x": [n], "y": [p["busiest_link_bytes"] / 1e6]}
        predicted = p.get("predicted_step_ms")
        step_pred[name] = ([n], [predicted / 1000]) if predicted else ([], [])
        throughput_pred[name] = (([n], [p["samples_per_s"] * p["step_ms"] / predicted])
                                 if predicted else ([], []))
        traffic_pred[name] = ([n], [predicted_busiest_bytes(p) / 1e6])
    handles = draw_bars(axes[0], steps, step_pred)
    busy = [i for i, (name, (p, *_)) in enumerate(series.items()) if p["cpu_bound"]]
    for i in busy:
        axes[0].text(i, 0, "CPU-bound", rotation=90, ha="center", va="bottom", fontsize=7,
                     color="red", zorder=7)
    notes = []
    # As on the curves: a reference line that would lie on the axis or above
    # the top is a note instead.
    top = max(v for c in steps.values() for v in c["y"])
    if reference is not None:
        if reference["step_ms"] / 1000 >= 0.03 * top:
            axes[0].axhline(reference["step_ms"] / 1000, color="gray", linestyle=":")
            handles.append(Line2D([], [], color="gray", linestyle=":",
                                  label="N=1, no communication"))
        else:
            notes.append((axes[0], f"N=1 (no communication): {reference['step_ms']:.1f} ms a step"))
    axes[0].legend(handles=handles, fontsize=7, loc="upper left")
    handles = draw_bars(axes[1], throughput, throughput_pred)
    top = max(v for c in throughput.values() for v in c["y"])
    if reference is not None:
        perfect = reference["samples_per_s"] * n
        if perfect <= 1.25 * top:
            axes[1].axhline(perfect, color="gray", linestyle=":")
            handles.append(Line2D([], [], color="gray", linestyle=":",
                                  label=f"perfect scaling ({n} × N=1)"))
        else:
            notes.append((axes[1], f"perfect scaling ({n} × N=1's "
                          f"{reference['samples_per_s']:.0f} samples/s) is above the axes"))
    axes[1].legend(handles=handles, fontsize=7, loc="upper left")
    for ax, text in notes:
        ax.text(0.98, 0.97, "\n".join(textwrap.wrap(text, 34)), transform=ax.transAxes,
                fontsize=7, va="top", ha="right", color="dimgray")
    handles = draw_bars(axes[2], traffic, traffic_pred)
    axes[2].legend(handles=handles, fontsize=7, loc="upper left")
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_xlabel(f"strategy, N = {n}")
    axes[0].set_ylabel("s per step")
    axes[1].set_ylabel("samples/s (all workers)")
    axes[2].set_ylabel("MB per step, busiest link, one way")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="points.csv from bench/scaling.py")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--title", default="", help="figure title")
    parser.add_argument("--note", default="",
                        help="one more line under the panels (what bounded the run, say)")
    parser.add_argument("--command", default="",
                        help="the command to show under the panels instead of the sweep's "
                             "own (gradsync compare gives the one its user typed)")
    args = parser.parse_args()
    points = read_points(args.csv)
    groups = {}
    for p in points:
        groups.setdefault((p["model"], p["link"], p["bucket_mb"], p["compute_ms"]), []).append(p)
    if not groups:
        sys.exit(f"plot_scaling: no points in {args.csv}")
    provenance = read_provenance(args.csv)
    if provenance is not None and args.command:
        provenance["command"] = args.command
    footer = provenance_text(provenance, args.note)
    footer_lines = footer.count("\n") + 1
    height = 4.2 * len(groups) + 0.16 * footer_lines
    fig, axes = plt.subplots(len(groups), 3, figsize=(15, height), squeeze=False)
    for row, (key, group) in zip(axes, sorted(groups.items())):
        model, link, bucket, compute = key
        reference = next((p for p in group if p["strategy"] == "local"), None)
        plot_group(row, [p for p in group if p["strategy"] != "local"], reference)
        mb = group[0]["model_bytes"] / 1e6
        row[0].set_title(f"time per step: {model}, {mb:.3g} MB gradient, {link} links",
                         fontsize=10)
        row[1].set_title(f"throughput (bucket {bucket:g} MiB, compute {compute:g} ms)",
                         fontsize=10)
        row[2].set_title("traffic through the busiest link", fontsize=10)
    if args.title:
        fig.suptitle(args.title)
    fig.text(0.01, 0.005, footer, fontsize=7, va="bottom", ha="left", family="monospace")
    fig.tight_layout(rect=(0, 0.16 * footer_lines / height + 0.01, 1, 1))
    fig.savefig(args.output, dpi=90)
    print(f"plot: {args.output}")


if __name__ == "__main__":
    main()
