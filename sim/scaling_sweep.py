#!/usr/bin/python3
"""The simulated scaling sweep behind docs/results/scaling.md: every model,
link, N and strategy one process of sim/simulate (SimGrid keeps one engine
per process), one row each in points.csv, the command and build in
sweep.json.

  bazel build //sim:simulate
  sim/scaling_sweep.py --out=docs/results/data/scaling-DATE

A point that does not finish in --timeout_s seconds is kept with its
strategy and N and an empty step, so the page says which ones are missing.
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLUMNS = ["model", "batch", "compute_scale", "link", "gpus_per_host", "intra_link",
           "oversubscription",
           "hosts_per_tor", "strategy", "workers", "servers", "placement",
           "step_ms", "compute_ms", "exposed_ms", "sync_ms", "alpha_beta_sync_ms",
           "samples_per_s", "ideal_samples_per_s", "efficiency", "busiest_link_bytes",
           "busiest_uplink_bytes", "selector_picks", "buckets", "ps_key_bytes",
           "worker_group", "messages", "actors", "simulator_s", "timed_out"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulate", default=os.path.join(ROOT, "bazel-bin", "sim", "simulate"))
    parser.add_argument("--profiles", default="resnet50-b128-bf16,vgg16-b64-bf16,bert-large-b32-bf16",
                        help="names under sim/profiles/")
    parser.add_argument("--links", default="10gbit,5us;25gbit,5us;100gbit,5us",
                        help="';'-separated RATE,LATENCY (one way)")
    parser.add_argument("--workers", default="16,64,256,1024")
    parser.add_argument("--strategies", default="ring,tree,halving_doubling,ps:N,ps:N/2",
                        help="an all-reduce (ring, tree, halving_doubling, hierarchical, "
                             "allreduce), ps:K with K a number, N or N/2, or ps:colocated")
    parser.add_argument("--gpus_per_host", type=int, default=1)
    parser.add_argument("--intra_link", default="800gbit,1us")
    parser.add_argument("--oversubscription", default="1",
                        help="','-separated ratios; 1 is one switch of full bisection")
    parser.add_argument("--hosts_per_tor", type=int, default=16)
    parser.add_argument("--compute_scale", default="1",
                        help="','-separated factors on the profile's compute (another GPU)")
    parser.add_argument("--max_workers", default="",
                        help="STRATEGY=N,...: skip larger N for that strategy (the colocated "
                             "PS simulates N^2 streams)")
    parser.add_argument("--bucket_mb", default="25")
    parser.add_argument("--timeout_s", type=float, default=180)
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def servers_of(strategy, n):
    """(strategy, K, placement) of a --strategies entry at N workers."""
    if not strategy.startswith("ps:"):
        return strategy, 0, "-"
    k = strategy[3:]
    if k == "colocated":
        return "ps", n, "colocated"
    return "ps", n if k == "N" else n // 2 if k == "N/2" else int(k), "separate"


def main(argv):
    args = parse_args(argv)
    if not os.access(args.simulate, os.X_OK):
        sys.exit(f"scaling_sweep: {args.simulate} is not built: bazel build //sim:simulate")
    os.makedirs(args.out, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    with open("/proc/loadavg") as f:
        load_at_start = " ".join(f.read().split()[:3])
    rows = []
    limits = {}
    for item in filter(None, args.max_workers.split(",")):
        name, _, most = item.partition("=")
        limits[name] = int(most)
    for scale, ratio, profile, link, n, strategy in [
            (c, r, p, l, int(w), s) for c in args.compute_scale.split(",")
            for r in args.oversubscription.split(",")
            for p in args.profiles.split(",") for l in args.links.split(";")
            for w in args.workers.split(",") for s in args.strategies.split(",")]:
        if n > limits.get(strategy, n) or n % args.gpus_per_host != 0:
            continue
        path = os.path.join(ROOT, "sim", "profiles", profile + ".json")
        with open(path) as f:
            batch = json.load(f)["batch"]
        name, k, placement = servers_of(strategy, n)
        command = [args.simulate, f"--strategy={name}", f"--workers={n}",
                   f"--link={link}", f"--profile={path}",
                   f"--bucket_mb={args.bucket_mb}",
                   f"--gpus_per_host={args.gpus_per_host}",
                   f"--intra_link={args.intra_link}",
                   f"--oversubscription={ratio}",
                   f"--hosts_per_tor={args.hosts_per_tor}",
                   f"--compute_scale={scale}"]
        if name == "ps":
            command += [f"--servers={k}", f"--placement={placement}"]
        row = {"model": profile, "batch": batch, "compute_scale": float(scale), "link": link,
               "gpus_per_host": args.gpus_per_host,
               "intra_link": args.intra_link if args.gpus_per_host > 1 else "-",
               "oversubscription": float(ratio),
               "hosts_per_tor": args.hosts_per_tor if float(ratio) > 1 else 0,
               "strategy": name, "workers": n, "servers": k,
               "placement": placement, "timed_out": False}
        began = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            row["timed_out"] = True
            row["simulator_s"] = round(time.monotonic() - began, 1)
            rows.append(row)
            print(f"{profile} {link} {strategy} N={n} x{ratio}: over "
                  f"{args.timeout_s} s",
                  flush=True)
            continue
        if done.returncode != 0:
            sys.exit(f"scaling_sweep: {' '.join(command)}: {done.stderr.strip()}")
        result = json.loads(done.stdout)
        for key in COLUMNS:
            if key in result and key not in row:
                row[key] = result[key]
        row["selector_picks"] = " ".join(
            f"{pick}:{count}" for pick, count in result["selector_picks"].items())
        row["samples_per_s"] = n * batch * 1e3 / result["step_ms"]
        row["ideal_samples_per_s"] = n * batch * 1e3 / result["compute_ms"]
        row["efficiency"] = result["compute_ms"] / result["step_ms"]
        rows.append(row)
        print(f"{profile} {link} {strategy} N={n} x{ratio}: "
              f"step {result['step_ms']:.1f} ms, "
              f"sync {result['sync_ms']:.1f} (alpha-beta "
              f"{result['alpha_beta_sync_ms']:.1f}), {result['simulator_s']:.1f} s",
              flush=True)
        with open(os.path.join(args.out, "points.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    manifest = {
        "command": "sim/scaling_sweep.py " + " ".join(
            a for a in argv if not a.startswith("--simulate")),
        "date": started.strftime("%Y-%m-%d"),
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "time": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": rev,
        "build": rev[:7],
        "simulator": "SimGrid 3.32 (Debian libsimgrid-dev), network/model CM02 without "
                     "cross-traffic, TCP-gamma unbounded",
        "machine": f"{os.cpu_count()} cores, load average at the start {load_at_start}, "
                   f"at the end {load}",
        "arguments": vars(args) | {"simulate": "bazel-bin/sim/simulate", "out": "..."},
    }
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"manifest": manifest}, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "points.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
