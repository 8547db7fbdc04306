#!/usr/bin/python3
"""Restates a sweep's step and exposed-communication figures from its step lines.

Step lines written with --overlap_next_forward before the trainer counted
every wait in exactly one step (core/train/trainer.cc; the rule is in
docs/metrics.md, `sync_wait_ms`) gave each step the wait made for its own
synchronization: in the next step's forward, or, for the last step of an
epoch, at the epoch's end, after its line had closed and before the next
step's began. Such a wait lay in no step's step_ms, so wherever an epoch
ended inside the measured steps the mean exposed time exceeded the mean step.

The lines hold what the rule needs. A step's wait, in their terms, is the
one its predecessor's line reported (the waits its forward made for it), and
a step that began an epoch also holds that wait in its step time (the drain
before it). This script applies that to every repeat of a sweep, from the
run folder's points/<label>/r<i>/worker*.jsonl, and rewrites step_ms,
exposed_ms and samples_per_s (median, min and max over the repeats) in a
data folder's sweep.json and points.csv; everything else stays as it was.

  bench/resummarize_overlap_steps.py RUN_FOLDER DATA_FOLDER

It refuses runs whose steps were not deferred (no --overlap_next_forward, or
a strategy that waits in Finish) and runs that drained for anything but an
epoch's end (--eval_every, --checkpoint_every, --check_params_every), whose
drains the lines do not mark.
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaling  # noqa: E402

MEASURES = ("step_ms", "exposed_ms", "samples_per_s")


def round3(x):
    """metrics.cc's Round3."""
    return int(x * 1000 + (0.5 if x >= 0 else -0.5)) / 1000.0


def restated_steps(records):
    """One rank's step lines (dicts, any order) restated: each step's
    sync_wait_ms is its predecessor's, and a step that began an epoch also
    holds that wait in its step_ms. Raises ValueError where a line's time
    cannot hold its predecessor's wait (its steps were not deferred)."""
    steps = sorted(records, key=lambda r: r["step"])
    restated = []
    for i, record in enumerate(steps):
        record = dict(record)
        previous = steps[i - 1] if i > 0 else None
        own_wait = record["sync_wait_ms"]
        wait = previous["sync_wait_ms"] if previous is not None else 0.0
        record["own_wait_ms"] = own_wait
        if previous is not None and previous["epoch"] != record["epoch"]:
            # Drained at the epoch's end: the wait lay between the two lines.
            record["step_ms"] += wait
        elif previous is not None and record["step_ms"] + 0.002 < wait:
            raise ValueError(
                f"rank {record['rank']} step {record['step']}: its line "
                f"({record['step_ms']} ms) cannot hold the previous step's wait "
                f"({wait} ms): its steps were not deferred")
        record["sync_wait_ms"] = wait
        restated.append(record)
    return restated


def rank_figures(records, warmup, summary_rank):
    """A rank's means over its measured steps, as RankSummaryJson gives them;
    `summary_rank` is its entry in the run's summary.json (the same samples
    over the restated time give its rate)."""
    measured = [r for r in restated_steps(records) if r["step"] >= warmup]
    if not measured:
        raise ValueError("no measured steps")
    n = len(measured)
    restated_ms = sum(r["step_ms"] for r in measured)
    written_ms = sum(r["own_step_ms"] for r in measured)
    return {"step_ms": round3(restated_ms / n),
            "sync_wait_ms": round3(sum(r["sync_wait_ms"] for r in measured) / n),
            "samples_per_s": round3(summary_rank["samples_per_s"] * written_ms / restated_ms)}


def read_steps(path):
    records = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "step":
                record["own_step_ms"] = record["step_ms"]
                records.append(record)
    return records


def run_figures(run_dir, warmup):
    """The run's step_ms, exposed_ms and samples_per_s as RunSummaryJson
    combines its ranks: means of the ranks' means, and the sum of rates."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary_ranks = {r["rank"]: r for r in json.load(f)["ranks"]}
    ranks = []
    for path in sorted(glob.glob(os.path.join(run_dir, "worker*.jsonl"))):
        records = read_steps(path)
        ranks.append(rank_figures(records, warmup, summary_ranks[records[0]["rank"]]))
    if not ranks:
        raise ValueError(f"{run_dir}: no worker*.jsonl")
    n = len(ranks)
    return {"step_ms": round3(sum(r["step_ms"] for r in ranks) / n),
            "exposed_ms": round3(sum(r["sync_wait_ms"] for r in ranks) / n),
            "samples_per_s": round3(sum(r["samples_per_s"] for r in ranks))}


def check_flags(flags):
    if flags.get("overlap_next_forward") != "true":
        raise ValueError("the run did not defer its steps (--overlap_next_forward)")
    for name in ("eval_every", "checkpoint_every", "check_params_every"):
        if flags.get(name, "0") != "0":
            raise ValueError(f"--{name}={flags[name]}: drains the lines do not mark")


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    run_folder, data_folder = argv[1], argv[2]
    with open(os.path.join(data_folder, "sweep.json")) as f:
        sweep = json.load(f)
    check_flags(sweep["manifest"]["run_manifest"]["flags"])
    warmup = int(sweep["manifest"]["arguments"]["warmup"])
    points = {scaling.label(p): p for p in sweep["points"]}
    for entry in sweep["repeats"]:
        point = points[entry["point"]]
        for r, figures in enumerate(entry["repeats"]):
            run_dir = os.path.join(run_folder, "points", entry["point"], f"r{r}")
            figures.update(run_figures(run_dir, warmup))
        for measure in MEASURES:
            values = [figures[measure] for figures in entry["repeats"]]
            point[measure] = statistics.median(values)
            point[measure + "_min"] = min(values)
            point[measure + "_max"] = max(values)
    scaling.write_csv(sweep["points"], os.path.join(data_folder, "points.csv"))
    with open(os.path.join(data_folder, "sweep.json"), "w") as f:
        json.dump(sweep, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
