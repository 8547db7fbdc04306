#!/usr/bin/python3
"""Stragglers: time to accuracy of ring, PS-BSP, PS-SSP and PS-ASP.

Every run is a real `gradsync launch` job on loopback: the Fashion-MNIST MLP,
--workers workers and, for the PS modes, one server running the optimizer
(--ps_update=server, which SSP and ASP need; BSP runs the same way so the
modes differ only in when a pull is answered). First a ring run without a
straggler measures a worker's step time T; then every mode runs without a
straggler and with worker N-1 sleeping (f - 1)·T before each step's compute,
for each factor f of --factors (its step takes about f times as long). With
--every=K the straggler sleeps K times as long on every K-th step only: the
same mean slowness, in bursts a staleness bound of K can absorb.

Worker 0 evaluates the first --eval_samples test images every --eval_every
steps on its own parameters; the time to --target is that of the first
evaluation where the mean of it and the two before (a subset's accuracy
jitters by about a point) is at or above the target, on worker 0's clock
from the first step, less the time worker 0 spent evaluating. The final accuracy is the whole test set
after the last step, which is a barrier in every mode (ps/server/shard.h).

Writes <out>/runs.csv, <out>/table.md, <out>/accuracy_vs_time.png (when
matplotlib is there) and keeps each run's folder (metrics, logs, summary).

Example (README's table):
  /usr/bin/python3 bench/straggler_experiment.py --out=runs/stragglers
"""
import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time

GRADSYNC = "bazel-bin/tools/gradsync"

# name -> flags of `gradsync train`.
MODES = {
    "ring": ["--sync=ring"],
    "ps-bsp": ["--sync=ps", "--ps_update=server"],
    "ps-ssp1": ["--sync=ps", "--ps_update=server", "--ps_consistency=ssp",
                "--ps_staleness=1"],
    "ps-ssp4": ["--sync=ps", "--ps_update=server", "--ps_consistency=ssp",
                "--ps_staleness=4"],
    "ps-asp": ["--sync=ps", "--ps_update=server", "--ps_consistency=asp"],
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/stragglers")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--factors", default="2,4",
                   help="the straggler's step as a multiple of T")
    p.add_argument("--every", type=int, default=1,
                   help="the straggler sleeps on every K-th step only")
    p.add_argument("--baseline", default="all", choices=["all", "ring"],
                   help="without a straggler, run every mode or only the ring")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--eval_every", type=int, default=25)
    p.add_argument("--eval_samples", type=int, default=5000)
    p.add_argument("--momentum", type=float, default=0.5,
                   help="SGD momentum of every run (asynchrony adds momentum "
                        "of its own: ASP diverged at 0.9 here)")
    p.add_argument("--extra", default="",
                   help="more training flags for every run, space-separated")
    p.add_argument("--bin", default=GRADSYNC)
    p.add_argument("--reanalyze", action="store_true",
                   help="no runs: rebuild table, CSV and plot from --out")
    args = p.parse_args(argv)
    for mode in args.modes.split(","):
        if mode not in MODES:
            p.error(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    try:
        args.factor_list = [float(f) for f in args.factors.split(",")]
    except ValueError:
        p.error(f"--factors={args.factors} is not a list of numbers")
    if any(f < 1 for f in args.factor_list):
        p.error("--factors must be >= 1 (1: no straggler)")
    if not os.access(args.bin, os.X_OK):
        p.error(f"{args.bin} is missing: bazel build //tools:gradsync")
    return args


def run_job(args, name, mode, straggle_ms):
    """Runs one job; returns its folder and the CPU it used."""
    folder = os.path.join(args.out, name)
    servers = 1 if mode.startswith("ps") else 0
    train = MODES[mode] + [
        f"--epochs={args.epochs}", "--batch_size=64", "--lr=0.05",
        "--lr_scaling=linear", "--bucket_mb=1", "--progress=false",
        f"--eval_every={args.eval_every}",
        f"--eval_samples={args.eval_samples}",
        f"--momentum={args.momentum}"] + args.extra.split()
    if straggle_ms > 0:
        train.append(f"--straggler={args.workers - 1}:"
                     f"{straggle_ms * args.every:.1f}:{args.every}")
    command = [args.bin, "launch", f"--workers={args.workers}",
               f"--servers={servers}", f"--run_dir={folder}", "--"] + train
    print("==", name, " ".join(command[1:]), flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{name} failed (exit {result.returncode}):\n"
                 + result.stdout[-4000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return folder, cpu / (wall * os.cpu_count())


def step_lines(folder, rank):
    with open(os.path.join(folder, f"worker{rank}.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("type") == "step"]


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def read_run(folder):
    """Worker 0's evaluations and the run's summary."""
    evals = []
    with open(os.path.join(folder, "worker0.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "eval":
                evals.append(record)
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    return evals, summary


def time_to(evals, target, window=3):
    for i in range(window - 1, len(evals)):
        recent = evals[i - window + 1:i + 1]
        if sum(e["test_accuracy"] for e in recent) / window >= target:
            return evals[i]["seconds"] - evals[i]["eval_seconds"]
    return None


def row_of(args, mode, factor, straggle_ms, folder, cpu_busy):
    evals, summary = read_run(folder)
    ranks = {r["rank"]: r for r in summary["ranks"]}
    sync0 = ranks[0].get("sync", {})
    # Medians: under SSP and ASP a fast worker's last step waits for the
    # straggler's whole remainder (the run's last step is a barrier), which
    # would dominate a mean.
    steps0 = step_lines(folder, 0)
    last = evals[-5:]
    return {
        "mode": mode,
        "factor": factor,
        "straggle_ms": round(straggle_ms, 1),
        "wall_s": summary["wall_seconds"],
        "step_ms_worker0": median([r["step_ms"] for r in steps0]),
        "step_ms_straggler": median(
            [r["step_ms"] for r in step_lines(folder, args.workers - 1)]),
        "sync_wait_ms_worker0": median([r["sync_wait_ms"] for r in steps0]),
        "time_to_target_s": time_to(evals, args.target),
        "final_accuracy": summary["test_accuracy"],
        "last5_accuracy": (sum(e["test_accuracy"] for e in last) / len(last)
                           if last else float("nan")),
        "staleness_max_worker0": sync0.get("staleness_max", ""),
        "cpu_busy": round(cpu_busy, 2),
        "folder": folder,
        "evals": evals,
    }


def write_outputs(args, rows):
    fields = [k for k in rows[0] if k != "evals"]
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row[k] for k in fields})
    target = f"{100 * args.target:g} %"
    lines = [
        f"| straggler | mode | worker 0 step ms | straggler step ms | "
        f"time to {target} (s) | wall (s) | final accuracy | last 5 evals "
        f"| max staleness | CPU busy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        straggler = ("none" if r["factor"] == 1 else
                     f"{r['factor']:g}× (+{r['straggle_ms']:g} ms)" if args.every == 1
                     else f"{r['factor']:g}× (+{r['straggle_ms'] * args.every:g} ms "
                          f"every {args.every}th step)")
        reached = ("not reached" if r["time_to_target_s"] is None
                   else f"{r['time_to_target_s']:.1f}")
        lines.append(
            f"| {straggler} | {r['mode']} | {r['step_ms_worker0']:.1f} | "
            f"{r['step_ms_straggler']:.1f} | {reached} | {r['wall_s']:.1f} | "
            f"{100 * r['final_accuracy']:.2f} % | "
            f"{100 * r['last5_accuracy']:.2f} % | "
            f"{r['staleness_max_worker0']} | {100 * r['cpu_busy']:.0f} % |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    plot(args, rows)


def rolling_mean(evals, window=3):
    """(time, mean of the last `window` accuracies) from the window-th
    evaluation on: the curve time_to() reads the target from."""
    points = []
    for i in range(window - 1, len(evals)):
        recent = evals[i - window + 1:i + 1]
        points.append((evals[i]["seconds"] - evals[i]["eval_seconds"],
                       sum(e["test_accuracy"] for e in recent) / window))
    return points


def provenance(args, rows):
    """Build, date and command of the runs, from the first run's manifest and
    the command experiment.json recorded."""
    try:
        with open(os.path.join(rows[0]["folder"], "summary.json")) as f:
            manifest = json.load(f).get("manifest", {})
        with open(os.path.join(args.out, "experiment.json")) as f:
            argv = json.load(f).get("argv", [])
    except (OSError, ValueError, IndexError):
        return "build, date and command unknown"
    return (f"gradsync {manifest.get('git_commit', 'unknown')[:7]}, "
            f"{manifest.get('time', 'unknown')[:10]}; "
            f"{' '.join(argv)}")


def plot(args, rows):
    """One panel per straggler factor, on shared axes (the same seconds and
    accuracy everywhere, so panels compare by eye): each mode's evaluations
    (dots, thin), the rolling mean of three that decides the time to the
    target (thick), and where that mean first reaches it (a star)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot; apt install python3-matplotlib)")
        return
    factors = sorted({r["factor"] for r in rows})
    fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4.4),
                             sharex=True, sharey=True, squeeze=False)
    colors = {}
    for ax, factor in zip(axes[0], factors):
        for r in (r for r in rows if r["factor"] == factor):
            color = colors.setdefault(r["mode"], f"C{len(colors)}")
            xs = [e["seconds"] - e["eval_seconds"] for e in r["evals"]]
            ys = [100 * e["test_accuracy"] for e in r["evals"]]
            ax.plot(xs, ys, marker=".", markersize=3, linewidth=0.5,
                    alpha=0.5, color=color)
            mean = rolling_mean(r["evals"])
            ax.plot([t for t, _ in mean], [100 * a for _, a in mean],
                    linewidth=1.8, color=color, label=r["mode"])
            reached = r["time_to_target_s"]
            if reached is not None:
                ax.plot([reached], [100 * args.target], marker="*",
                        markersize=12, color=color, markeredgecolor="black",
                        zorder=5)
        ax.axhline(100 * args.target, color="grey", linestyle=":",
                   linewidth=1)
        ax.set_title("no straggler" if factor == 1
                     else f"worker {args.workers - 1} at {factor:g}× step time")
        ax.set_xlabel("training time on worker 0 (s)")
        ax.grid(alpha=0.3)
    # Set once all panels are drawn: a limit set on one of the shared axes
    # fixes them all and stops them growing to the later panels' runs.
    axes[0][0].set_ylim(60, 90)
    axes[0][0].set_xlim(0, 1.03 * max(
        [e["seconds"] - e["eval_seconds"] for r in rows for e in r["evals"]] + [1]))
    axes[0][0].set_ylabel(
        f"test accuracy, first {args.eval_samples} images (%)")
    axes[0][-1].legend(loc="lower right", fontsize=8)
    fig.text(0.01, 0.01,
             f"thin: every evaluation; thick: mean of the last three, which "
             f"decides the time to {100 * args.target:g} % (star)\n"
             + provenance(args, rows), fontsize=7, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = os.path.join(args.out, "accuracy_vs_time.png")
    fig.savefig(path, dpi=110)
    print("plot:", path)


def reanalyze(args):
    """Rebuilds the outputs from a finished experiment's folders."""
    with open(os.path.join(args.out, "experiment.json")) as f:
        done = json.load(f)
    rows = [row_of(args, r["mode"], r["factor"], r["straggle_ms"], r["folder"],
                   r["cpu_busy"]) for r in done["rows"]]
    done["rows"] = rows
    with open(os.path.join(args.out, "experiment.json"), "w") as f:
        json.dump(done, f, indent=1)
    write_outputs(args, rows)


def main(argv):
    args = parse_args(argv)
    if args.reanalyze:
        reanalyze(args)
        return
    os.makedirs(args.out, exist_ok=True)
    # T: a worker's step time with nobody sleeping, from the ring.
    folder, busy = run_job(args, "ring-x1", "ring", 0)
    _, summary = read_run(folder)
    step_ms = summary["step_ms"]
    print(f"step time without a straggler (ring): {step_ms:.1f} ms",
          flush=True)
    rows = []
    for factor in [1.0] + [f for f in args.factor_list if f != 1]:
        for mode in args.modes.split(","):
            straggle_ms = (factor - 1) * step_ms
            name = f"{mode}-x{factor:g}"
            if args.every > 1 and factor != 1:
                name += f"-every{args.every}"
            if name == "ring-x1":
                rows.append(row_of(args, mode, factor, 0, folder, busy))
                continue
            if factor == 1 and args.baseline == "ring":
                continue
            run_folder, run_busy = run_job(args, name, mode, straggle_ms)
            rows.append(row_of(args, mode, factor, straggle_ms, run_folder,
                               run_busy))
    with open(os.path.join(args.out, "experiment.json"), "w") as f:
        json.dump({"argv": sys.argv, "step_ms": step_ms,
                   "rows": [{k: v for k, v in r.items()} for r in rows]},
                  f, indent=1)
    write_outputs(args, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
