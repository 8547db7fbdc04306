#!/usr/bin/python3
"""Scaling sweep: real gradsync jobs over strategy × N × K × model × link × bucket.

Every point is a real job started with `gradsync launch` (on an emulated
cluster network with --links=RATE[,LATENCY], which needs root, or on
loopback), repeated --repeats times; the table reports medians and the spread
(min–max) of the repeats. Each (model, link, bucket, compute) group also runs
the single-worker reference (--sync=local, N = 1), from which scaling
efficiency is computed: step time at N = 1 over step time at N (per-worker
batch fixed, so 100% means perfect weak scaling).

Beside each point stands the α–β prediction (bench/cost_model.py) from α and
B measured through the same link just before the sweep.

Writes <out>/points.csv (one row per point), <out>/sweep.json (the manifest —
command line, git commit, versions, host, every flag of a run — the link
probes, and every repeat's figures) and prints the table.

Training flags after `--` go to every job; or, when the first word after
`--` is not a flag, a training command (a PyTorch program using
gradsync.torch, examples/pytorch/) that every job runs as its workers: the
strategy reaches it as GRADSYNC_SYNC, --warmup as GRADSYNC_WARMUP_STEPS,
--sweep's flags through the launcher (to its workers and servers alike:
tools/launch_command.cc), and its own arguments set its model,
batch and steps (--models, --bucket_mb, --compute_ms, --batch_size and
--steps do not apply). Its workers write summary.json like native ones
(python/torch_run_record.h). --sweep runs every strategy point
once per flag set (sets separated by ';', flags in a set by spaces): the knob
PS papers tune (--ps_chunk_kb), consistency modes, stragglers. For example
  bench/scaling.py --strategies=ps --workers=4 --servers=1 \
      --sweep='--ps_consistency=bsp;--ps_consistency=ssp --ps_staleness=2;
               --ps_consistency=asp' -- --ps_update=server --straggler=3:40
The N = 1 reference of a group runs without the swept flags.

Example (the headline experiment, tools/headline.sh):
  /usr/bin/python3 bench/scaling.py --strategies=ring,ps --workers=2,4,8 \\
      --servers=1,N --models=custom:100:32 --links=1gbit --repeats=3
"""
import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402  (beside this file)
import cpu_bound  # noqa: E402

# Where the binaries are; --bin_dir changes it (bazel-bin follows the last
# build's configuration, so a copy keeps a long sweep on one build).
GRADSYNC = "bazel-bin/tools/gradsync"
NETEM = "bazel-bin/tools/netem"


# --- What to run -------------------------------------------------------------------

# Models that really compute (forward and backward on the worker's Device, on
# synthetic images of the model's input shape): their gradients' bytes.
# --compute_ms does not apply to them.
REAL_MODEL_BYTES = {
    "mlp": 535_818 * 4,  # gradsync's default model, 784-512-256-10
    "resnet18": 11_173_962 * 4,
    "cnn": 421_642 * 4,
}


def parse_model(spec):
    """'resnet50' | 'vgg16' | 'bert-base' | 'custom:MB[:TENSORS]' (sleeping
    models of that gradient layout) | 'mlp' | 'resnet18' | 'cnn' (real compute)
    -> (label, bytes, flags)."""
    if spec in cost_model.MODEL_BYTES:
        return spec, cost_model.MODEL_BYTES[spec], [f"--model={spec}"]
    if spec in REAL_MODEL_BYTES:
        return spec, REAL_MODEL_BYTES[spec], [f"--model={spec}"]
    parts = spec.split(":")
    if parts[0] == "embedding" and len(parts) == 3:
        # The embedding model over Zipf bags (real compute): a V x D table
        # with a row-sparse gradient, and its 64-wide two-class head.
        rows, dim = int(parts[1]), int(parts[2])
        params = rows * dim + 64 * dim + 64 + 2 * 64 + 2
        return (f"embedding-{rows}x{dim}", params * 4,
                ["--model=embedding", f"--embedding_rows={rows}", f"--embedding_dim={dim}"])
    if parts[0] != "custom" or len(parts) not in (2, 3):
        sys.exit(f"scaling: model '{spec}' is not resnet50, vgg16, bert-base, "
                 "custom:MB[:TENSORS], mlp, resnet18, cnn or embedding:ROWS:DIM")
    params = int(float(parts[1]) * 1e6 / 4)
    tensors = int(parts[2]) if len(parts) == 3 else 32
    return (f"custom-{parts[1]}MB", params * 4,
            ["--model=custom", f"--custom_params={params}", f"--custom_tensors={tensors}"])


# The strategies a training command can run: gradsync.torch's hook takes any
# --sync name, and the launcher hands --ps_colocate to its workers; a mixed
# placement's --ps_colocated_servers and hierarchical's ranks per node are
# not offered (untested behind the hook).
COMMAND_STRATEGIES = ("local", "ring", "halving_doubling", "tree", "allreduce", "ps",
                      "ps-colocated")


def worker_command(extra):
    """The training command after `--` (its first word is not a flag), or
    None when `--` gave gradsync training flags."""
    if extra and not extra[0].startswith("-"):
        return list(extra)
    return None


def command_model(command):
    """A training command's model label: its script's name."""
    script = next((a for a in command[1:] if a.endswith(".py")), command[0])
    name = os.path.splitext(os.path.basename(script))[0]
    return "pytorch-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def check_command(command, strategies, compressions="none"):
    """One message for what a training command cannot do here, else None."""
    if any(c.strip() not in ("", "none") for c in (compressions or "none").split(",")):
        return ("--compressions is not built behind gradsync.torch's hook: a training "
                "command runs with float32 buckets only; leave --compressions out")
    if any(a == "--sync" or a.startswith("--sync=") for a in command):
        return ("the training command chooses --sync itself; leave it out: each job "
                "sets the strategy (GRADSYNC_SYNC, which gradsync.torch.connect() reads)")
    unsupported = [s for s in strategies if s not in COMMAND_STRATEGIES]
    if unsupported:
        return (f"strategies {', '.join(unsupported)} are not offered for a training "
                f"command (untested behind gradsync.torch's hook); use some of "
                f"{', '.join(COMMAND_STRATEGIES[1:])}")
    return None


def enumerate_points(args):
    """Every job of the sweep, N = 1 references first in each group."""
    points = []
    command = worker_command(getattr(args, "extra", []))
    for model in args.models.split(","):
        if command:
            label, model_bytes, model_flags = command_model(command), 0, []
        else:
            label, model_bytes, model_flags = parse_model(model)
        for link in split_links(args.links):
            # A command's buckets are its DDP's (bucket_cap_mb): 0 in the label.
            buckets = [0.0] if command else [float(b) for b in args.bucket_mb.split(",")]
            for bucket_mb in buckets:
                compute_values = [float(c) for c in args.compute_ms.split(",")]
                if label in REAL_MODEL_BYTES or command or label.startswith("embedding-"):
                    compute_values = [0.0]  # they compute for real
                for compute_ms in compute_values:
                    group = dict(model=label, model_bytes=model_bytes, model_flags=model_flags,
                                 link=link, bucket_mb=bucket_mb, compute_ms=compute_ms,
                                 ranks_per_host=getattr(args, "ranks_per_host", 1))
                    points.append(dict(group, strategy="local", workers=1, servers=0,
                                       sweep=""))
                    for n in [int(w) for w in args.workers.split(",")]:
                        for strategy in args.strategies.split(","):
                            for flags in sweep_sets(args.sweep):
                                for compression in compressions_of(
                                        getattr(args, "compressions", "none")):
                                    points.extend(
                                        dict(p, sweep=flags, compression=compression)
                                        for p in strategy_points(group, strategy, n,
                                                                 args.servers,
                                                                 getattr(args, "colocated", ""))
                                        if compression_built(p["strategy"], compression))
        if command:
            break  # the command is the model: one group per link
    return points


RATE_UNITS = ("bit", "kbit", "mbit", "gbit", "tbit")


def split_links(spec):
    """'100mbit,1ms,1gbit,loopback' -> ['100mbit,1ms', '1gbit', 'loopback']:
    a link is a rate (or 'loopback') followed by its latency and options
    (RATE[,LATENCY][,OPTION...], as `gradsync launch --netem` takes it)."""
    links = []
    for token in spec.split(","):
        lowered = token.strip().lower()
        starts_link = (lowered in ("loopback", "none")
                       or (lowered[:1].isdigit() and lowered.endswith(RATE_UNITS)))
        if starts_link or not links:
            links.append(token.strip())
        else:
            links[-1] += "," + token.strip()
    return links


def compressions_of(spec):
    """'none,fp16,topk:0.01' -> ['none', 'fp16', 'topk:0.01'], each checked
    by the cost model's parser (the trainer checks again)."""
    values = [c.strip() for c in (spec or "none").split(",") if c.strip()] or ["none"]
    for value in values:
        try:
            cost_model.parse_compression(value)
        except ValueError as error:
            sys.exit(f"scaling: --compressions: {error}")
    return values


def compression_refused(strategy, compression):
    """Why `strategy` cannot run with `compression`, or None when it can: its
    factory refuses 16-bit values outside the ring and the PS
    (allreduce/allreduce_sync.h). gradsync compare decides its points with it."""
    method, _ = cost_model.parse_compression(compression)
    if (method in ("fp16", "bf16") and strategy in cost_model.ALLREDUCE_FAMILY
            and strategy != "ring"):
        return f"is not built ({method} values are summed by the ring and the PS only)"
    return None


def compression_built(strategy, compression):
    """False, saying so, where the strategy cannot run the compression."""
    reason = compression_refused(strategy, compression)
    if reason:
        print(f"scaling: skipping {strategy} with --compression={compression}: it {reason}",
              flush=True)
        return False
    return True


def strategy_text(point):
    """'ring', or 'ring topk:0.01' for a compressed point."""
    compression = point.get("compression") or "none"
    return point["strategy"] + ("" if compression == "none" else f" {compression}")


def sweep_sets(spec):
    """'--a=1;--a=2 --b=3' -> ['--a=1', '--a=2 --b=3']; '' -> ['']."""
    if not spec.strip():
        return [""]
    sets = [" ".join(s.split()) for s in spec.split(";")]
    for flags in sets:
        if not flags or any(not f.startswith("--") for f in flags.split()):
            sys.exit(f"scaling: --sweep set '{flags}' must be flags like --ps_chunk_kb=128")
    return sets


def count_spec(value, n):
    """'N' -> n, 'N/2' -> n // 2, '3' -> 3."""
    if value == "N":
        return n
    if value.startswith("N/"):
        return n // int(value[2:])
    return int(value)


def strategy_points(group, strategy, n, servers_spec, colocated_spec=""):
    if strategy == "ps-mixed":
        # BytePS's placement spectrum: c of the N workers serve, K − c
        # separate servers, K servers in all (--servers). c = 0 is "ps".
        points = []
        for c in sorted({count_spec(c, n) for c in (colocated_spec or "1,N/2,N").split(",")}):
            for k in sorted({count_spec(k, n) for k in servers_spec.split(",")}):
                if 1 <= c <= n and k >= c:
                    points.append(dict(group, strategy="ps-mixed", workers=n, servers=k,
                                       colocated=c))
        return points
    if strategy == "ring":
        return [dict(group, strategy="ring", workers=n, servers=0)] if n > 1 else []
    if strategy in ("halving_doubling", "tree", "allreduce"):
        return [dict(group, strategy=strategy, workers=n, servers=0)] if n > 1 else []
    if strategy == "hierarchical":
        # Two ranks per emulated node (--allreduce_ranks_per_node=2).
        return ([dict(group, strategy=strategy, workers=n, servers=0, ranks_per_node=2)]
                if n > 2 and n % 2 == 0 else [])
    if strategy == "ps-colocated":
        return [dict(group, strategy="ps-colocated", workers=n, servers=n)]
    if strategy in ("ps", "hybrid"):
        # hybrid: the row-sparse tensors on K servers, the rest on the ring.
        ks = sorted({n if k == "N" else int(k) for k in servers_spec.split(",")})
        return [dict(group, strategy=strategy, workers=n, servers=k) for k in ks if k >= 1]
    sys.exit(f"scaling: unknown strategy '{strategy}' "
             f"({', '.join(cost_model.ALLREDUCE_FAMILY)}, ps, ps-colocated, ps-mixed, hybrid)")


def memory_estimate_gb(point):
    """Parameters, gradients and momentum per worker, plus the servers' sums
    and the strategies' buffers: about 4 copies of the model per worker and
    3 per server share."""
    s = point["model_bytes"]
    return (4 * s * point["workers"] + 3 * s * (1 if point["servers"] else 0)) / 1e9


def label(point):
    name = (f"{point['model']}_{point['link'].replace(',', '-')}_b{point['bucket_mb']:g}"
            f"_c{point['compute_ms']:g}_{point['strategy']}_n{point['workers']}_k{point['servers']}")
    if point["strategy"] == "ps-mixed":
        name += f"_colocated{point['colocated']}"
    if (point.get("compression") or "none") != "none":
        name += "_" + point["compression"].replace(":", "")
    if point.get("ranks_per_host", 1) > 1 and point["workers"] > 1:
        name += f"_rph{point['ranks_per_host']}"
    flags = point.get("sweep", "")
    if flags:
        name += "_" + "".join(c if c.isalnum() or c in "=.-" else "_"
                              for c in flags.replace("--", "").replace(" ", "_"))
    return name


# --- Running one job -----------------------------------------------------------------

def run_job(point, run_dir, args):
    """Runs one repeat; returns its summary.json (dict) or None on failure."""
    launch = [GRADSYNC, "launch", f"--workers={point['workers']}", f"--run_dir={run_dir}",
              f"--job_deadline_s={args.deadline_s}"]
    if point["strategy"] in ("ps", "hybrid"):
        launch.append(f"--servers={point['servers']}")
    if point["strategy"] == "ps-mixed" and point["servers"] > point["colocated"]:
        launch.append(f"--servers={point['servers'] - point['colocated']}")
    if point["link"] != "loopback":
        launch.append(f"--netem={point['link']}")
        if point.get("ranks_per_host", 1) > 1 and point["workers"] > 1:
            launch.append(f"--ranks_per_host={point['ranks_per_host']}")
    sync = {"local": "local", "ps": "ps", "ps-colocated": "ps", "ps-mixed": "ps",
            "hybrid": "hybrid", **{name: name for name in cost_model.ALLREDUCE_FAMILY}
            }[point["strategy"]]
    command = worker_command(args.extra)
    env = None
    if command:
        # Swept flags go to the launcher, which hands them to the command's
        # gradsync.torch and to the servers alike.
        launch += point.get("sweep", "").split()
        if (point.get("compression") or "none") != "none":
            launch.append(f"--compression={point['compression']}")
        if point["strategy"] == "ps-colocated":
            launch.append("--ps_colocate")
        training, env = command_job(command, sync, args)
    else:
        training = training_flags(sync, point, args)
    with open(os.path.join(run_dir, "launch.log"), "w") as log:
        if env:
            log.write(" ".join(f"{k}={v}" for k, v in sorted(env.items())
                               if k.startswith("GRADSYNC_")) + " ")
        log.write(" ".join(launch + training) + "\n")
        log.flush()
        usage = CpuUsage()
        # A command's program decides its own number of steps: no window.
        window = (None if command else
                  MeasuredStepsWindow(run_dir, args.warmup, args.steps))
        result = subprocess.run(launch + training, stdout=log, stderr=subprocess.STDOUT,
                                timeout=args.deadline_s + 60,
                                env=dict(os.environ, **env) if env else None)
        cpu = usage.finish()
        if window is not None:
            cpu.update(window.finish())
    if result.returncode != 0:
        print(f"  FAILED (exit {result.returncode}): see {run_dir}/launch.log", flush=True)
        return None
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["cpu"] = cpu
    with open(os.path.join(run_dir, "cpu.json"), "w") as f:
        json.dump(cpu, f)
    counters = os.path.join(run_dir, "network_counters.json")
    if os.path.exists(counters):
        with open(counters) as f:
            summary["network_counters"] = json.load(f)
    return summary


def command_job(command, sync, args):
    """`-- COMMAND` and the variables gradsync.torch.connect() reads."""
    env = {"GRADSYNC_SYNC": sync, "GRADSYNC_WARMUP_STEPS": str(args.warmup),
           "GRADSYNC_TIMEOUT_S": "120"}
    return ["--", *command], env


def training_flags(sync, point, args):
    """`-- FLAGS` of a `gradsync train` job."""
    # The embedding model reads bags of ids (--data=zipf), not features.
    data = "--data=zipf" if point["model"].startswith("embedding-") else "--data=synthetic"
    training = ["--", f"--sync={sync}", *point["model_flags"],
                f"--compute_ms={point['compute_ms']:g}", f"--bucket_mb={point['bucket_mb']:g}",
                data, f"--synthetic_size={args.batch_size * 64}",
                f"--batch_size={args.batch_size}", "--epochs=100000",
                f"--max_steps={args.steps}", f"--warmup_steps={args.warmup}",
                "--progress=false", "--timeout_s=120"]
    if (point.get("compression") or "none") != "none":
        training.append(f"--compression={point['compression']}")
    if point["strategy"] == "ps-colocated":
        training.append("--ps_colocate")
    if point["strategy"] == "ps-mixed":
        training.append(f"--ps_colocated_servers={point['colocated']}")
    if point["strategy"] == "hierarchical":
        training.append(f"--allreduce_ranks_per_node={point['ranks_per_node']}")
    training += point.get("sweep", "").split() + args.extra
    return training


def machine_cpu_ticks(stat_text):
    """(total, idle, niced) jiffies from /proc/stat's first line; idle
    includes iowait, niced is the user time of processes at nice > 0."""
    fields = [int(v) for v in stat_text.splitlines()[0].split()[1:]]
    return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0), fields[1]


class CpuUsage:
    """The job's CPU seconds (every process it started: `gradsync launch`
    waits for its children, so their time is in ours once it exits) and how
    busy the whole machine was meanwhile, others' work included, both all of
    it and without the work at nice > 0 (builds under `nice -n 15` yield to
    an un-niced job: CFS gives nice 15 a weight of 36 against 1024). A point
    is marked CPU-bound when the machine was more than CPU_BOUND busy with
    un-niced work (the job's own included)."""

    def __init__(self):
        self.children = os.times()
        self.wall = time.monotonic()
        with open("/proc/stat") as f:
            self.ticks = machine_cpu_ticks(f.read())

    def finish(self):
        children = os.times()
        wall = time.monotonic() - self.wall
        with open("/proc/stat") as f:
            total, idle, niced = machine_cpu_ticks(f.read())
        cpu_s = ((children.children_user - self.children.children_user)
                 + (children.children_system - self.children.children_system))
        cores = os.cpu_count() or 1
        elapsed = max(1, total - self.ticks[0])
        with open("/proc/loadavg") as f:
            load = float(f.read().split()[0])
        return {"job_cpu_s": cpu_s, "wall_s": wall, "cores": cores,
                "job_cpu_fraction": cpu_s / max(wall, 1e-9) / cores,
                "machine_busy": 1 - (idle - self.ticks[1]) / elapsed,
                "machine_busy_unniced": 1 - (idle - self.ticks[1] + niced - self.ticks[2]) / elapsed,
                "loadavg_1m_end": load}


class MeasuredStepsWindow:
    """How busy the machine was over a job's measured steps alone, start-up,
    warm-up and shut-down left out: a thread counts worker 0's step lines
    (<run_dir>/worker0.jsonl, one line as each step is final) and reads
    /proc/stat when the warm-up's last line appears and when the last step's
    does. A job's start-up (processes, the emulated network, connections)
    can keep the machine busier than its steps do; the CPU-bound rule is
    about the steps. Empty where the lines never reached the window's ends
    (a failed job, a program that writes no step lines)."""

    POLL_S = 0.02

    def __init__(self, run_dir, warmup, steps):
        self.path = os.path.join(run_dir, "worker0.jsonl")
        self.first = max(1, warmup)  # step lines seen when the window opens
        self.last = steps
        self.offset = 0
        self.lines = 0
        self.start = self.end = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _count(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        self.lines += sum(1 for line in complete.splitlines() if '"type":"step"' in line)

    def _watch(self):
        while not self.stop.is_set():
            self._count()
            if self.start is None and self.lines >= self.first:
                self.start = self._snapshot()
            if self.start is not None and self.lines >= self.last:
                self.end = self._snapshot()
                return
            self.stop.wait(self.POLL_S)

    @staticmethod
    def _snapshot():
        with open("/proc/stat") as f:
            return time.monotonic(), machine_cpu_ticks(f.read())

    def finish(self):
        self.stop.set()
        self.thread.join()
        if self.start is None or self.end is None:
            return {}
        (t0, (total0, idle0, niced0)), (t1, (total1, idle1, niced1)) = self.start, self.end
        elapsed = total1 - total0
        if elapsed <= 0:
            return {}
        return {"measured_steps_wall_s": t1 - t0,
                "machine_busy_timed": 1 - (idle1 - idle0) / elapsed,
                "machine_busy_unniced_timed":
                    1 - (idle1 - idle0 + niced1 - niced0) / elapsed}


def colocated_servers(sync):
    """How many of the job's servers run inside workers (servers 0..c−1, in
    workers 0..c−1): all of them under --ps_colocate, --ps_colocated_servers
    otherwise (summaries from before that flag have only "colocate")."""
    if sync.get("colocate"):
        return len(sync.get("server_summaries", [])) or sync.get("servers", 0)
    return sync.get("colocated_servers", 0)


def busiest_link_bytes(summary):
    """Bytes per step through the busiest link, one direction (links are full
    duplex): the max over every node's bytes out and bytes in."""
    sync0 = summary["ranks"][0].get("sync", {})
    servers = sync0.get("server_summaries", [])
    colocated = colocated_servers(sync0)
    candidates = []
    for rank in summary["ranks"]:
        out, into = rank["bytes_sent_per_step"], rank["bytes_recv_per_step"]
        sync = rank.get("sync", {})
        r = rank["rank"]
        if r < colocated and r < len(servers):
            # Worker r hosts server r: its pushes to and pulls from its own
            # server stay inside the node, while its server's traffic with
            # the other workers crosses the node's link.
            steps = max(1, sync.get("steps", 1))
            own_push = sync["bytes_to_server"][r] / steps
            own_pull = sync["bytes_from_server"][r] / steps
            server_steps = max(1, servers[r].get("steps", 1))
            out += servers[r]["bytes_out"] / server_steps - own_push - own_pull
            into += servers[r]["bytes_in"] / server_steps - own_push - own_pull
        candidates += [out, into]
    for server in servers[colocated:]:  # the separate servers' own links
        steps = max(1, server.get("steps", 1))
        candidates += [server["bytes_in"] / steps, server["bytes_out"] / steps]
    return max(candidates)


def largest_server_share(summary):
    shares = summary["ranks"][0].get("sync", {}).get("server_key_bytes")
    return max(shares) / sum(shares) if shares else None


def server_shares_by_kind(summary):
    """The partition the job ran (--ps_partition; "equal" before the flag)
    and the largest share of the bytes held by a server inside a worker and
    by a separate server (None where the job has no server of that kind)."""
    sync = summary["ranks"][0].get("sync", {})
    key_bytes = sync.get("server_key_bytes")
    if not key_bytes:
        return None, None, None
    total, colocated = sum(key_bytes), colocated_servers(sync)
    inside, separate = key_bytes[:colocated], key_bytes[colocated:]
    return (sync.get("partition", "equal"),
            max(inside) / total if inside else None,
            max(separate) / total if separate else None)


def tcp_totals(summary):
    """Retransmitted segments and RTO timeouts of the job, summed over its
    processes' network namespaces (separate servers included; a colocated
    server shares its worker's namespace, so it is counted once)."""
    processes = [rank.get("process", {}) for rank in summary["ranks"]]
    sync0 = summary["ranks"][0].get("sync", {})
    separate = sync0.get("server_summaries", [])[colocated_servers(sync0):]
    processes += [s.get("process", {}) for s in separate]
    tcp = [p["tcp"] for p in processes if "tcp" in p]
    return (sum(t["retrans_segments"] for t in tcp), sum(t["timeouts"] for t in tcp),
            sum(t["out_segments"] for t in tcp))


def figures(summary, point, args):
    """The figures of one repeat."""
    retrans, timeouts, out_segments = tcp_totals(summary)
    if point["link"] == "loopback":
        # Every process shares the host's namespace: its counters are the
        # whole machine's, not the job's.
        retrans = timeouts = out_segments = None
    network = summary.get("network_counters", {})
    cpu = summary.get("cpu", {})
    return {
        "retrans_segments": retrans,
        "rto_timeouts": timeouts,
        "retrans_percent": (100 * retrans / out_segments if out_segments else
                            None if out_segments is None else 0),
        "port_drops": sum(network.get("port_drops", [])) + sum(network.get("uplink_drops", [])),
        "job_cpu_fraction": cpu.get("job_cpu_fraction", 0),
        "machine_busy": cpu.get("machine_busy", 0),
        "machine_busy_unniced": cpu.get("machine_busy_unniced", 0),
        # Over the measured steps alone (None where not recorded): the
        # CPU-bound rule's input where present (bench/cpu_bound.py).
        "machine_busy_unniced_timed": cpu.get("machine_busy_unniced_timed"),
        "step_ms": summary["step_ms"],
        # The configured --compute_ms is the point's "compute_ms"; this is what
        # forward+backward took, gradient writing and CPU contention included.
        "measured_compute_ms": summary["compute_ms"],
        "exposed_ms": summary["sync_wait_ms"],
        "samples_per_s": summary["samples_per_s"],
        "bytes_per_rank": summary["bytes_per_worker_per_step"],
        "busiest_link_bytes": busiest_link_bytes(summary),
        "largest_server_share": largest_server_share(summary),
        # The key size the job ran with (auto by default: ps/key_size_rule.h).
        "ps_chunk_bytes": summary["ranks"][0].get("sync", {}).get("chunk_bytes"),
        # The servers' block, their result messages (auto by default:
        # ps/stream_window_rule.h).
        "ps_message_bytes": summary["ranks"][0].get("sync", {}).get("pull_message_bytes"),
        **dict(zip(("partition", "colocated_server_share", "separate_server_share"),
                   server_shares_by_kind(summary))),
    }


# --- Aggregation -----------------------------------------------------------------------

MEASURES = ["step_ms", "measured_compute_ms", "exposed_ms", "samples_per_s", "bytes_per_rank",
            "busiest_link_bytes", "retrans_segments", "rto_timeouts", "retrans_percent",
            "port_drops", "job_cpu_fraction", "machine_busy", "machine_busy_unniced",
            "machine_busy_unniced_timed"]
# A point measured while the machine (every core, others' work included) was
# busier than this is marked CPU-bound: its step times may be the CPU's. The
# rule is bench/cpu_bound.py's, shared with the crossover sweep and the pages.
CPU_BOUND = cpu_bound.CPU_BOUND_SHARE


def aggregate(point, repeats):
    point = dict(point)
    point["repeats"] = len(repeats)
    for measure in MEASURES:
        values = [r.get(measure) for r in repeats]
        if any(v is None for v in values):  # not measured (loopback's TCP)
            point[measure] = point[measure + "_min"] = point[measure + "_max"] = None
            continue
        point[measure] = statistics.median(values)
        point[measure + "_min"] = min(values)
        point[measure + "_max"] = max(values)
    # The partition is computed, not measured: the same in every repeat.
    for name in ("largest_server_share", "partition", "colocated_server_share",
                 "separate_server_share", "ps_chunk_bytes", "ps_message_bytes"):
        point[name] = repeats[0].get(name)
    point["cpu_bound"] = cpu_bound.is_cpu_bound(
        machine_busy_unniced=cpu_bound.machine_busy_of(point))
    # Every job of a sweep runs on this one machine: its N workers share
    # these cores (the cost model divides the codecs' compute by them).
    point["host_cores"] = os.cpu_count()
    return point


def add_references_and_predictions(points, links, layouts, extra_flags=()):
    """Scaling efficiency against the group's N = 1 run, and the cost model's
    prediction from that run's compute and step times."""
    references = {}
    for p in points:
        if p["strategy"] == "local":
            references[group_key(p)] = p
    for p in points:
        ref = references.get(group_key(p))
        if ref is None:
            continue
        # Without compute (--compute_ms=0) the reference step is ~0 ms and
        # weak-scaling efficiency means nothing: leave it out.
        if ref["step_ms"] >= 1:
            p["efficiency"] = ref["step_ms"] / p["step_ms"]
        link = links.get(p["link"])
        layout = layouts.get(group_key(p))
        # hybrid has no α–β formula yet (bench/cost_model.py), nor has a link
        # shared by several ranks of a host (--ranks_per_host; the simulator
        # has one, sim/calibrate.py): no prediction.
        if link is None or layout is None or p["strategy"] in ("local", "hybrid") or (
                p.get("ranks_per_host", 1) > 1):
            continue
        p.update(cost_model.predict(p, link, layout["bucket_bytes"], ref["measured_compute_ms"],
                                    ref["step_ms"], layout["last_tensor_bytes"],
                                    extra_flags=" ".join(extra_flags)))


def group_key(p):
    return (p["model"], p["link"], p["bucket_mb"], p["compute_ms"])


def read_layout(run_dir):
    """Bucket sizes in hand-off order, and the size of the last tensor handed
    off, from the layout.json worker 0 wrote."""
    with open(os.path.join(run_dir, "layout.json")) as f:
        layout = json.load(f)
    last_param = layout["buckets"][-1]["params"][-1]
    return {"bucket_bytes": [b["bytes"] for b in layout["buckets"]],
            "last_tensor_bytes": 4 * layout["params"][last_param]["numel"]}


def reanalyze(out):
    """Recomputes efficiencies and predictions of a finished sweep (after a
    change to the cost model) and rewrites its CSV and JSON."""
    with open(os.path.join(out, "sweep.json")) as f:
        sweep = json.load(f)
    links = {name: cost_model.Link(l["alpha_us"] / 1e6, l["bandwidth_bytes_per_s"])
             for name, l in sweep["links"].items()}
    layouts = {}
    for p in sweep["points"]:
        run_dir = os.path.join(out, "points", label(p), "r0")
        if os.path.exists(os.path.join(run_dir, "layout.json")):
            layouts.setdefault(group_key(p), read_layout(run_dir))
    extra = sweep["manifest"]["arguments"].get("extra", [])
    add_references_and_predictions(sweep["points"], links, layouts,
                                   [] if worker_command(extra) else extra)
    write_csv(sweep["points"], os.path.join(out, "points.csv"))
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump(sweep, f, indent=1)
    return sweep["points"]


# --- Output -------------------------------------------------------------------------------

COLUMNS = ["strategy", "compression", "sweep", "workers", "servers", "colocated", "model", "model_bytes", "link",
           "bucket_mb", "compute_ms", "repeats"] + [m + s for m in MEASURES for s in ("", "_min", "_max")] + [
           "efficiency", "largest_server_share", "partition", "colocated_server_share",
           "separate_server_share", "ps_chunk_bytes", "ps_message_bytes", "cpu_bound",
           "predicted_comm_ms",
           "predicted_exposed_ms", "predicted_step_ms", "byteps_optimum_comm_ms",
           "ranks_per_host"]


def write_csv(points, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for p in points:
            writer.writerow({k: p.get(k, "") for k in COLUMNS})


def spread(p, measure, scale=1.0, digits=0):
    return (f"{p[measure] * scale:.{digits}f} "
            f"({p[measure + '_min'] * scale:.{digits}f}–{p[measure + '_max'] * scale:.{digits}f})")


def print_points(points):
    header = ("strategy", "flags", "N", "K", "model", "link", "step ms (min–max)",
              "exposed comm ms",
              "samples/s", "efficiency", "MB/rank/step", "busiest link MB", "predicted step",
              "err %", "retrans (RTOs)", "drops", "CPU job / machine")
    rows = []
    for p in points:
        predicted = p.get("predicted_step_ms")
        servers = str(p["servers"])
        if p["strategy"] == "ps-mixed":  # K (of which c in workers)
            servers += f" ({p['colocated']} in workers)"
        rows.append((strategy_text(p), p.get("sweep", "") or "-", str(p["workers"]),
                     servers, p["model"], p["link"],
                     spread(p, "step_ms"), spread(p, "exposed_ms"), f"{p['samples_per_s']:.1f}",
                     f"{100 * p['efficiency']:.0f}%" if "efficiency" in p else "-",
                     f"{p['bytes_per_rank'] / 1e6:.1f}", f"{p['busiest_link_bytes'] / 1e6:.1f}",
                     f"{predicted:.0f}" if predicted else "-",
                     cost_model.format_error(cost_model.error_percent(p["step_ms"], predicted)),
                     "-" if p.get("retrans_segments") is None else
                     f"{p['retrans_segments']:.0f} ({p.get('rto_timeouts', 0):.0f})",
                     f"{p.get('port_drops', 0):.0f}",
                     f"{100 * p.get('job_cpu_fraction', 0):.0f}% / "
                     f"{100 * (cpu_bound.machine_busy_of(p) or 0):.0f}% "
                     f"({100 * p.get('machine_busy_max', 0):.0f}%)"
                     + (" CPU-BOUND" if p.get("cpu_bound") else "")))
    print("Medians over repeats, (min–max); MB = 1e6 bytes; efficiency = step(N=1)/step(N);\n"
          "retrans: TCP segments retransmitted per job, all processes (RTO timeouts); drops:\n"
          "packets the emulated queues dropped per job; CPU: the job's share of all cores / the\n"
          "busiest the machine was with un-niced work during a repeat (others' included; in\n"
          f"parentheses with niced work too), CPU-BOUND over {100 * CPU_BOUND:.0f}%")
    cost_model.print_table(header, rows)


def manifest(args, first_summary):
    def command(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            return ""
    return {
        "command": " ".join(sys.argv),
        "arguments": vars(args),
        "git_commit": command(["git", "rev-parse", "HEAD"]) or "unknown",
        "git_dirty_files": len(command(["git", "status", "--porcelain"]).splitlines()),
        "host": platform.node(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # Flags, compiler, library versions and machine as the jobs saw them.
        "run_manifest": first_summary.get("manifest") if first_summary else None,
    }


# --- Main -----------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--strategies", default="ring,ps",
                        help="ring, ps, ps-colocated, ps-mixed (c workers serve beside K − c "
                             "separate servers; K from --servers, c from --colocated), hybrid "
                             "(embedding tables on K servers, the rest on the ring)")
    parser.add_argument("--workers", default="2,4", help="values of N")
    parser.add_argument("--servers", default="1,N",
                        help="values of K for ps; N means as many as workers")
    parser.add_argument("--colocated", default="1,N/2,N",
                        help="values of c for ps-mixed: how many of the N workers also serve "
                             "(N, N/2 allowed); points with c > K are left out")
    parser.add_argument("--models", default="custom:25:32",
                        help="resnet50, vgg16, bert-base, custom:MB[:TENSORS] (they sleep "
                             "--compute_ms), mlp, resnet18, cnn, embedding:ROWS:DIM (real "
                             "forward and backward; the last on --data=zipf)")
    parser.add_argument("--links", default="1gbit",
                        help="RATE[,LATENCY] per link (emulated, root) or 'loopback'")
    parser.add_argument("--bucket_mb", default="25")
    parser.add_argument("--compressions", default="none",
                        help="--compression values, each strategy × method a point: "
                             "none,fp16,topk:0.01 (none, fp16, bf16, topk:R, randomk:R, onebit)")
    parser.add_argument("--compute_ms", default="0", help="emulated compute per step")
    parser.add_argument("--ranks_per_host", type=int, default=1,
                        help="workers sharing one emulated host and its link (gradsync "
                             "launch --ranks_per_host; servers keep a host each); no α–β "
                             "prediction for more than 1")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12, help="steps per job")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the means")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--deadline_s", type=int, default=300, help="per job")
    parser.add_argument("--memory_gb", type=float, default=16,
                        help="skip points whose estimated memory exceeds this")
    parser.add_argument("--out", default=None, help="default runs/scaling-<time>")
    parser.add_argument("--no_probe", action="store_true", help="no α/B probe, no predictions")
    parser.add_argument("--bin_dir", default="bazel-bin/tools",
                        help="folder with the gradsync and netem binaries")
    parser.add_argument("--reanalyze", metavar="DIR",
                        help="no runs: recompute a finished sweep's predictions")
    parser.add_argument("--sweep", default="",
                        help="flag sets, ';'-separated, each run at every strategy point")
    parser.add_argument("extra", nargs="*", help="after --: more training flags")
    args = parser.parse_args()
    if args.ranks_per_host < 1:
        sys.exit(f"scaling: --ranks_per_host={args.ranks_per_host}: give 1 or more")
    if args.ranks_per_host > 1 and "loopback" in split_links(args.links):
        sys.exit("scaling: --ranks_per_host shares an emulated host's link; it needs "
                 "--links with a rate, not loopback")
    if args.reanalyze:
        points = reanalyze(args.reanalyze)
        print_points(points)
        print()
        cost_model.print_comparison(points)
        return
    command = worker_command(args.extra)
    if command:
        problem = check_command(command, args.strategies.split(","),
                                getattr(args, "compressions", "none"))
        if problem:
            sys.exit(f"scaling: {problem}")
    global GRADSYNC, NETEM
    GRADSYNC = os.path.join(args.bin_dir, "gradsync")
    NETEM = os.path.join(args.bin_dir, "netem")
    if not os.access(GRADSYNC, os.X_OK):
        sys.exit(f"scaling: {GRADSYNC} missing; run `bazel build //tools:gradsync //tools:netem`")
    cost_model.use_binary(GRADSYNC)  # the predictions from the jobs' own build
    out = args.out or time.strftime("runs/scaling-%Y%m%d-%H%M%S")
    os.makedirs(out, exist_ok=True)

    links, probes = {}, {}
    if not args.no_probe:
        for link in split_links(args.links):
            spec = "loopback" if link == "loopback" else link
            print(f"== probing α and B through {spec}", flush=True)
            links[link], probes[link] = cost_model.probe(spec, NETEM)
            print(f"   {links[link].describe()}", flush=True)

    points, layouts, raw, first_summary = [], {}, [], None
    todo = enumerate_points(args)
    started = time.time()
    for i, point in enumerate(todo):
        name = label(point)
        if memory_estimate_gb(point) > args.memory_gb:
            print(f"[{i + 1}/{len(todo)}] {name}: skipped, needs ~{memory_estimate_gb(point):.1f} GB"
                  f" > --memory_gb={args.memory_gb:g}", flush=True)
            continue
        repeats = []
        for r in range(args.repeats):
            run_dir = os.path.join(out, "points", name, f"r{r}")
            os.makedirs(run_dir, exist_ok=True)
            summary = run_job(point, run_dir, args)
            if summary is None:
                continue
            first_summary = first_summary or summary
            repeats.append(figures(summary, point, args))
            layouts.setdefault(group_key(point), read_layout(run_dir))
        if not repeats:
            continue
        done = aggregate(point, repeats)
        if worker_command(args.extra) and group_key(point) in layouts:
            # A command's model is known once its worker 0 wrote layout.json.
            done["model_bytes"] = sum(layouts[group_key(point)]["bucket_bytes"])
        points.append(done)
        raw.append({"point": name, "repeats": repeats})
        print(f"[{i + 1}/{len(todo)}] {name}: step {spread(done, 'step_ms')} ms, exposed "
              f"{spread(done, 'exposed_ms')} ms  ({time.time() - started:.0f} s so far)", flush=True)

    add_references_and_predictions(points, links, layouts,
                                   [] if worker_command(args.extra) else args.extra)
    for p in points:
        p.pop("model_flags", None)
    write_csv(points, os.path.join(out, "points.csv"))
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump({"manifest": manifest(args, first_summary),
                   "links": {k: dataclasses_dict(v) for k, v in links.items()},
                   "probes": probes, "points": points, "repeats": raw}, f, indent=1)
    print()
    print_points(points)
    print()
    print("Measured against the α–β model (bench/cost_model.py):")
    cost_model.print_comparison(points)
    print(f"\nresults: {out}/points.csv, {out}/sweep.json")


def dataclasses_dict(link):
    return {"alpha_us": link.alpha_s * 1e6, "bandwidth_bytes_per_s": link.bandwidth}


if __name__ == "__main__":
    main()
