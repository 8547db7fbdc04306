#!/usr/bin/python3
"""Prints a side-by-side table of gradsync runs and plots them.

Each argument is a run folder holding summary.json (written by worker 0).
Columns: strategy, workers, servers, time per step, exposed communication
(time blocked in GradientSync::Finish), bytes per worker per step, throughput
and final test accuracy.
"""
import argparse
import json
import os
import sys


def load(run_dir):
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        sys.exit(f"compare_runs: cannot read {path}: {error}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders with summary.json")
    parser.add_argument("--plot", help="write a PNG bar chart here")
    args = parser.parse_args()
    summaries = [load(run) for run in args.runs]

    header = ("strategy", "N", "K", "step ms", "compute ms", "exposed comm ms",
              "bytes/worker/step", "samples/s", "test acc %")
    rows = []
    for s in summaries:
        accuracy = s.get("test_accuracy")
        rows.append((s["strategy"], str(s["workers"]), str(s["servers"]),
                     f"{s['step_ms']:.2f}", f"{s['compute_ms']:.2f}",
                     f"{s['sync_wait_ms']:.2f}",
                     f"{s['bytes_per_worker_per_step']:,}",
                     f"{s['samples_per_s']:,.0f}",
                     "-" if accuracy is None else f"{100 * accuracy:.2f}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [f"{s['strategy']}\nN={s['workers']} K={s['servers']}" for s in summaries]
        compute = [s["compute_ms"] for s in summaries]
        exposed = [s["sync_wait_ms"] for s in summaries]
        other = [max(0.0, s["step_ms"] - c - e) for s, c, e in zip(summaries, compute, exposed)]
        fig, ax = plt.subplots(figsize=(1.8 * len(names) + 2, 4))
        ax.bar(names, compute, label="compute (forward+backward)")
        ax.bar(names, exposed, bottom=compute, label="exposed communication")
        ax.bar(names, other, bottom=[c + e for c, e in zip(compute, exposed)],
               label="data + optimizer")
        ax.set_ylabel("ms per step (mean over workers)")
        ax.set_title("gradsync: time per step by strategy")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
