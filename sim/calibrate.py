#!/usr/bin/python3
"""The simulator beside the emulated cluster: every point of a measured
sweep of bench/scaling.py (a folder under docs/results/data/ with its
points.csv and sweep.json) simulated under SimGrid's CM02 (alpha-beta
sharing) and LV08 (its TCP corrections), one row each in points.csv with
the measured median, its spread and bench's alpha-beta prediction.

  bazel build //sim:simulate
  sim/calibrate.py --measured=docs/results/data/headline-2026-11-24 \\
      --out=docs/results/data/scaling-calibration-DATE

Only what the measured sweep's manifest and points state is used: its model
(custom:MB:TENSORS), bucket cap, link, --ps_chunk_kb as the key size, each
point's --compression, a --straggler=RANK:MS among its swept flags and its
--ranks_per_host (the simulator's --gpus_per_host).
--constants adds a third simulation per point under that constants file
(sim/constants.json: `fitted`).
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["strategy", "compression", "sweep", "ranks_per_host", "workers", "servers", "link",
           "model",
           "measured_step_ms",
           "measured_step_ms_min", "measured_step_ms_max", "alpha_beta_step_ms",
           "cm02_step_ms", "lv08_step_ms", "cm02_over_measured", "lv08_over_measured",
           "fitted_step_ms", "fitted_over_measured", "cpu_bound"]


def straggler_of(sweep):
    """RANK:MS of a --straggler=RANK:MS among a point's swept flags, or ''.
    Only the simulator's form (one rank, every step) is taken."""
    for flag in (sweep or "").split():
        if flag.startswith("--straggler="):
            value = flag.split("=", 1)[1]
            parts = value.split(":")
            if "," in value or len(parts) != 2:
                sys.exit(f"calibrate: {flag}: the simulator takes one RANK:MS straggler")
            return value
    return ""


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", default=os.path.join(ROOT, "bazel-bin", "sim", "simulate"))
    parser.add_argument("--measured", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--constants", default="",
                        help="a third simulation per point under these constants (CM02)")
    args = parser.parse_args(argv)
    with open(os.path.join(args.measured, "sweep.json")) as f:
        manifest = json.load(f)["manifest"]
    flags = manifest["run_manifest"]["flags"]
    sweep = manifest["arguments"]
    model = sweep["models"]
    if not model.startswith("custom:"):
        sys.exit(f"calibrate: {args.measured}: model {model}; only custom:MB:TENSORS is known")
    rows = []
    with open(os.path.join(args.measured, "points.csv"), newline="") as f:
        measured = [p for p in csv.DictReader(f) if p["strategy"] != "local"]
    for p in measured:
        n, k = int(p["workers"]), int(p["servers"] or 0)
        common = [f"--workers={n}", f"--link={p['link']}", f"--model={model}",
                  f"--bucket_mb={p['bucket_mb']}"]
        compression = p.get("compression") or "none"
        if compression != "none":
            common.append(f"--compression={compression}")
        straggler = straggler_of(p.get("sweep"))
        if straggler:
            common.append(f"--straggler={straggler}")
        ranks_per_host = int(float(p.get("ranks_per_host") or 1))
        if ranks_per_host > 1:
            common.append(f"--gpus_per_host={ranks_per_host}")
        if p["strategy"] == "ring":
            common.append("--strategy=ring")
        else:
            common += ["--strategy=ps", f"--servers={k}",
                       f"--ps_key_kb={flags['ps_chunk_kb']}"]
            if p["strategy"] == "ps-colocated":
                common.append("--placement=colocated")
        row = {"strategy": p["strategy"], "compression": compression,
               "sweep": p.get("sweep") or "", "ranks_per_host": ranks_per_host, "workers": n, "servers": k, "link": p["link"],
               "model": model, "measured_step_ms": float(p["step_ms"]),
               "measured_step_ms_min": float(p["step_ms_min"]),
               "measured_step_ms_max": float(p["step_ms_max"]),
               "alpha_beta_step_ms": float(p["predicted_step_ms"] or "nan"),
               "cpu_bound": p["cpu_bound"]}
        runs = [("cm02", ["--network_model=CM02"]), ("lv08", ["--network_model=LV08"])]
        if args.constants:
            runs.append(("fitted", ["--network_model=CM02", f"--constants={args.constants}"]))
        for name, extra in runs:
            done = subprocess.run([args.simulate, *common, *extra],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                sys.exit(f"calibrate: {' '.join(common + extra)}: {done.stderr.strip()}")
            step = json.loads(done.stdout)["step_ms"]
            row[f"{name}_step_ms"] = step
            row[f"{name}_over_measured"] = step / row["measured_step_ms"]
        rows.append(row)
        print(row, flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "points.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"manifest": {
            "command": "sim/calibrate.py " + " ".join(
                a for a in argv if not a.startswith("--simulate")),
            "date": now.strftime("%Y-%m-%d"),
            "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_commit": rev,
            "build": rev[:7],
            "measured": os.path.relpath(args.measured, os.path.join(ROOT, "docs", "results")),
            "measured_command": manifest["command"],
            "simulator": "SimGrid 3.32 (Debian libsimgrid-dev), CM02 without cross-traffic "
                         "and LV08 with SimGrid's default factors, TCP-gamma unbounded"}},
            f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
