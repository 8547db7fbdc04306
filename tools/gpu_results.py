#!/usr/bin/python3
"""Turns the logs of one `gpu_check.sh --quick` run into a results data folder.

  tools/gpu_results.py --logs=DIR --out=docs/results/data/NAME \\
      --build=COMMIT --device="NVIDIA H200, driver ..., CUDA ..., cuDNN ..." \\
      [--time=2026-11-28T14:35Z] [--extra_layers=FILE.log,...]

DIR is the quick check's --out folder (its report.txt, speed.tsv and the
layer profiles' logs). What it writes, for tools/render_results.py:

  checks.csv   every row of the report's table: status, check, detail
  speed.csv    the speed rows parsed: model, batch, precision, the variant
               (the flag a variant's row set, "" for the defaults), gradsync's
               step and compute ms, PyTorch's step ms, the ratio, the status,
               and whether the row met issue 39's bar (met, under, "")
  layers.csv   one row per layer profile (gradsync's bench/layer_profile,
               PyTorch's bench/pytorch_layer_profile.py): the step's device
               time split into convolutions, batch norm, element-wise, other;
               gradsync's unmarked step and host time to queue the step
  manifest.json  build, time, command, device

Logs of the node's own paths stay out: a detail's "(log: PATH)" is dropped.
"""
import argparse
import csv
import json
import os
import re
import sys

ROW = re.compile(r"^(PASS|FAIL|SKIP)  (\S+) +(.*)$")
SPEED = re.compile(r"gradsync ([\d.]+) ms \(compute ([\d.]+)\); pytorch ([\d.]+) ms; "
                   r"([\d.]+)x PyTorch's speed")
HEADING = re.compile(r"--precision=(\w+)((?: \([^)]*\))*), batch (\d+)")
FIRST_NUMBER = re.compile(r"([\d.]+) ms")
HOST = re.compile(r"^the host's time to queue them: ([\d.]+) ms a step")


def report_rows(report):
    """The report's table: every PASS/FAIL/SKIP line, in the check's order."""
    rows = []
    with open(report) as f:
        for line in f:
            match = ROW.match(line.rstrip("\n"))
            if match:
                status, check, detail = match.groups()
                detail = re.sub(r" \(log: [^)]*\)", "", detail)
                rows.append({"status": status, "check": check, "detail": detail})
    return rows


def speed_points(rows):
    points = []
    for row in rows:
        if not row["check"].startswith("speed/"):
            continue
        # speed/MODEL/BATCH/PRECISION, and /FLAG for a variant's point
        # (the run with --FLAG set).
        parts = row["check"].split("/")
        match = SPEED.search(row["detail"])
        if len(parts) not in (4, 5) or not match:
            continue
        points.append({"status": row["status"], "model": parts[1], "batch": int(parts[2]),
                       "precision": parts[3],
                       "variant": "--" + parts[4] if len(parts) == 5 else "",
                       "gradsync_step_ms": float(match.group(1)),
                       "gradsync_compute_ms": float(match.group(2)),
                       "pytorch_step_ms": float(match.group(3)),
                       "speed": float(match.group(4)),
                       # Issue 39's bar where the point has one, as the row
                       # judged it: "met", "under", or "" (no bar).
                       "bar": ("under" if "under the bar" in row["detail"] else
                               "met" if re.search(r"bar [\d.]+x met", row["detail"])
                               else "")})
    return points


def layer_profile(path):
    """One layer profile's log as a row: whose, precision, batch, the step and
    its device time by group (the category table's ms/step column)."""
    with open(path) as f:
        lines = f.read().splitlines()
    source = "pytorch" if any(" in torch " in line for line in lines) else "gradsync"
    heading = next((HEADING.search(line) for line in lines if HEADING.search(line)), None)
    if heading is None:
        raise SystemExit(f"{path}: no '--precision=P, batch B' heading: not a layer profile")
    groups = {"conv_ms": 0.0, "batch_norm_ms": 0.0, "elementwise_ms": 0.0, "other_ms": 0.0}
    in_table = False
    for line in lines:
        if line.startswith("category "):
            in_table = True
            continue
        if in_table and not line.strip():
            break
        if in_table:
            ms = float(line.split()[-2])
            if line.startswith("conv "):
                groups["conv_ms"] += ms
            elif line.startswith("batch norm "):
                groups["batch_norm_ms"] += ms
            elif line.startswith("element-wise"):
                groups["elementwise_ms"] += ms
            else:
                groups["other_ms"] += ms
    # What ran differently from the default, as the heading says it:
    # "--cudnn_graph", "--bf16_operands=false".
    variant = " ".join(re.findall(r"\(([^)]*)\)", heading.group(2)))
    row = {"source": source, "precision": heading.group(1), "variant": variant,
           "batch": int(heading.group(3))}
    row["device_ms"] = round(sum(groups.values()), 3)
    row.update({k: round(v, 3) for k, v in groups.items()})
    # gradsync's "unmarked step" (the device's clock around a step without
    # profiling marks); PyTorch's profile has no such figure.
    unmarked = next((line for line in lines if line.startswith("unmarked step:")), None)
    row["unmarked_step_ms"] = float(FIRST_NUMBER.search(unmarked).group(1)) if unmarked else None
    # gradsync's host time to queue the profiled step's operations (a
    # profile from before that line, and PyTorch's, have none).
    host = next((HOST.search(line) for line in lines if HOST.search(line)), None)
    row["host_ms"] = float(host.group(1)) if host else None
    return row


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", required=True, help="gpu_check.sh --quick's --out folder")
    parser.add_argument("--out", required=True, help="the data folder to write")
    parser.add_argument("--build", required=True, help="the commit the bundle was built from")
    parser.add_argument("--device", required=True, help="GPU, driver and libraries, in words")
    parser.add_argument("--time", default="", help="when it ran (UTC, ISO 8601)")
    parser.add_argument("--command", default="bin/gpu_check.sh --quick --out=DIR")
    parser.add_argument("--extra_layers", default="",
                        help="more layer-profile logs (comma-separated) run beside the check")
    args = parser.parse_args()

    report = os.path.join(args.logs, "report.txt")
    if not os.path.exists(report):
        sys.exit(f"gpu_results: {report} does not exist: give --logs the quick check's "
                 "--out folder")
    rows = report_rows(report)
    if not rows:
        sys.exit(f"gpu_results: no PASS/FAIL/SKIP rows in {report}")
    layer_logs = sorted(os.path.join(args.logs, name) for name in os.listdir(args.logs)
                        if re.match(r"^(torch_)?layers_\w+\.log$", name))
    layer_logs += [path for path in args.extra_layers.split(",") if path]
    layer_logs = sorted(set(os.path.realpath(path) for path in layer_logs))
    time = args.time
    if not time:
        with open(report) as f:
            match = re.search(r"(\d{4}-\d\d-\d\dT[\d:]+Z)", f.readline())
        time = match.group(1) if match else "unknown"

    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "checks.csv"), rows)
    speed = speed_points(rows)
    if speed:
        write_csv(os.path.join(args.out, "speed.csv"), speed)
    if layer_logs:
        write_csv(os.path.join(args.out, "layers.csv"), [layer_profile(p) for p in layer_logs])
    manifest = {"git_commit": args.build, "time": time, "command": args.command,
                "device": args.device}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"manifest": manifest}, f, indent=1)
        f.write("\n")
    print(f"gpu_results: {len(rows)} checks, {len(speed)} speed points, "
          f"{len(layer_logs)} layer profiles -> {args.out}")


if __name__ == "__main__":
    main()
