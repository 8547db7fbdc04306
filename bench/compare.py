#!/usr/bin/python3
"""gradsync compare: which strategy wins on this model and this network?

Runs the single-worker reference and every strategy of STRATEGIES (ring,
PS with K = 1 and K = N separate servers, PS colocated with the workers) on
the same model with their own defaults (the PS sizes its keys and windows for
the job: ps/settings.h), through bench/scaling.py — one job per point and
repeat, on an emulated cluster (--netem=RATE[,LATENCY], root) or on loopback
— and prints one verdict table: step time (median and min–max of the
repeats), exposed communication, bytes through the busiest link, the α–β
prediction beside each (bench/cost_model.py, α and B probed through the same
link) and what bounded each point (the link, the CPU, latency,
retransmissions), then a one-line answer. Writes verdict.txt, verdict.json,
the sweep's points.csv/sweep.json and compare.png (bench/plot_scaling.py)
into --out.

  gradsync compare --netem=100mbit --workers=4
  gradsync compare --netem=1gbit,1ms --workers=8 --model=custom:2.5:32
  gradsync compare --workers=4            # loopback: measures the CPU
  gradsync compare --netem=100mbit --workers=4 --strategies=ring,ps-kn -- \
      /usr/bin/python3 examples/pytorch/resnet18_cifar10.py --random_data --steps=12

--schedules=fifo,priority runs every strategy point under each send order
(--schedule= passed to its jobs; core/sync/schedule.h) and puts them side
by side: step time, exposed communication and the α–β prediction of each,
and what priority changed in the answer. What a job ran is read from its
summary: a strategy that ran fifo when asked priority is shown so.

  gradsync compare --netem=100mbit --workers=4 --model=cnn --schedules=fifo,priority

Training flags after `--` go to every job; or a training command, a PyTorch
program using gradsync.torch (its first word is not a flag): every job runs it
as its workers, with the strategy in GRADSYNC_SYNC (the command must not pass
--sync) and --warmup in GRADSYNC_WARMUP_STEPS. Its own arguments then set the
model, batch and steps (--model, --bucket_mb, --compute_ms and --steps do not
apply), and its workers' summary.json is read like a native job's. Set
PYTHONPATH so that the program finds gradsync (python/ in a checkout).
"""
import argparse
import collections
import csv
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cost_model  # noqa: E402  (beside this file)
import cpu_bound  # noqa: E402
import scaling  # noqa: E402

# --- The strategies compared: the one list to extend ------------------------------
#
# name -> (bench/scaling.py's strategy, its K: "1", "N" or None, label).
# A strategy added to scaling.py (and cost_model.sync_time) is one line here.
Strategy = collections.namedtuple("Strategy", "scaling servers label")
STRATEGIES = collections.OrderedDict([
    ("ring", Strategy("ring", None, "ring all-reduce")),
    ("halving_doubling", Strategy("halving_doubling", None, "halving-doubling")),
    ("tree", Strategy("tree", None, "double binary tree")),
    ("allreduce", Strategy("allreduce", None, "all-reduce picked by α–β")),
    ("ps-k1", Strategy("ps", "1", "PS K=1")),
    ("ps-kn", Strategy("ps", "N", "PS K=N")),
    ("ps-colocated", Strategy("ps-colocated", None, "PS colocated")),
    ("hybrid-kn", Strategy("hybrid", "N", "hybrid: row-sparse to PS K=N, dense ring")),
])
REFERENCE = "local"  # always run: the single-worker reference

# A point is "link-bound" when it ran within this of its α–β prediction.
MODEL_TOLERANCE = 0.25
# ... "latency-bound" when the α terms are at least this part of the prediction.
LATENCY_SHARE = 0.5
# ... "retransmission-bound" above this share of segments retransmitted.
RETRANS_PERCENT = 1.0


class UsageError(Exception):
    """Bad input: one message saying what, where and what to do."""


# --- Parsing ---------------------------------------------------------------------------

RATE = re.compile(r"^(\d+(\.\d+)?)(bit|kbit|mbit|gbit|tbit)$", re.IGNORECASE)
LATENCY = re.compile(r"^(0|\d+(\.\d+)?(ns|us|ms|s))$", re.IGNORECASE)
OPTION = re.compile(r"^(buffer|rto_min|cc)=\S+$|^ecn$", re.IGNORECASE)


def parse_netem(spec):
    """'' -> 'loopback'; 'RATE[,LATENCY][,OPTION...]' checked as
    core/launch/netem.h parses it (the launcher checks again)."""
    if not spec:
        return "loopback"
    parts = spec.split(",")
    if not RATE.match(parts[0]):
        raise UsageError(
            f"--netem={spec}: the rate '{parts[0]}' is not like 100mbit, 1gbit, 2.5gbit or "
            "500kbit (RATE[,LATENCY], e.g. --netem=1gbit,200us)")
    for i, part in enumerate(parts[1:]):
        if i == 0 and LATENCY.match(part):
            continue
        if not OPTION.match(part):
            raise UsageError(
                f"--netem={spec}: '{part}' is neither a latency (200us, 1ms) nor an option "
                "(buffer=1mb, rto_min=5ms, cc=cubic, ecn)")
    return spec


def parse_strategies(spec, model=None):
    """'ring,ps-kn' -> ['ring', 'ps-kn'], in STRATEGIES' order; 'all' is all
    that apply to `model`: hybrid only to a model with an embedding table."""
    if spec.strip() == "all":
        if model is not None and not model.startswith("embedding"):
            return [s for s in STRATEGIES if STRATEGIES[s].scaling != "hybrid"]
        return list(STRATEGIES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise UsageError("--strategies is empty; give some of " + ", ".join(STRATEGIES))
    for name in names:
        if name not in STRATEGIES:
            raise UsageError(f"--strategies: unknown strategy '{name}'; choose from "
                             f"{', '.join(STRATEGIES)} (or all)")
    return [s for s in STRATEGIES if s in names]


def parse_workers(spec):
    try:
        workers = [int(w) for w in spec.split(",")]
    except ValueError:
        workers = []
    if not workers or any(w < 2 for w in workers):
        raise UsageError(f"--workers={spec}: give numbers of workers of at least 2, "
                         "like 4 or 2,4,8")
    return workers


def check_root(link):
    if link != "loopback" and os.geteuid() != 0:
        raise UsageError(f"--netem={link} emulates the network with namespaces and tc, which "
                         "needs root: run `sudo gradsync compare ...`, or leave out --netem to "
                         "compare on loopback (which measures the CPU, not a network)")


def scaling_command(args, strategies, workers, out):
    """bench/scaling.py's command line for this comparison."""
    by_scaling = []
    servers = []
    for name in strategies:
        strategy = STRATEGIES[name]
        if strategy.scaling not in by_scaling:
            by_scaling.append(strategy.scaling)
        if strategy.servers:
            servers.append(strategy.servers)
    command = [sys.executable, os.path.join(HERE, "scaling.py"),
               f"--strategies={','.join(by_scaling)}",
               f"--workers={','.join(str(w) for w in workers)}",
               f"--servers={','.join(servers) or '1'}",
               f"--models={args.model or DEFAULT_MODEL}", f"--links={args.link}",
               f"--bucket_mb={args.bucket_mb}", f"--compute_ms={args.compute_ms}",
               f"--steps={args.steps}", f"--warmup={args.warmup}",
               f"--repeats={args.repeats}", f"--deadline_s={args.deadline_s}",
               f"--out={out}", f"--bin_dir={args.bin_dir}",
               f"--compressions={args.compressions}"]
    schedules = getattr(args, "schedule_list", [])
    if schedules:
        command.append("--sweep=" + ";".join(f"--schedule={s}" for s in schedules))
    if args.extra:
        command += ["--", *args.extra]
    return command


# --- The verdict ---------------------------------------------------------------------------

def strategy_name(point):
    """The STRATEGIES name of a sweep point (None for the reference)."""
    if point["strategy"] == REFERENCE:
        return None
    for name, strategy in STRATEGIES.items():
        if strategy.scaling != point["strategy"]:
            continue
        if strategy.servers is None:
            return name
        k = point["workers"] if strategy.servers == "N" else int(strategy.servers)
        if k == point["servers"]:
            return name
    return None


def label(point):
    name = strategy_name(point)
    if name is None:
        return "local (reference)" if point["strategy"] == REFERENCE else point["strategy"]
    text = STRATEGIES[name].label.replace("K=N", f"K={point['servers']}")
    compression = point.get("compression") or "none"
    if compression != "none":
        text += f", {compression}"
    asked = schedule_asked(point)
    if asked:
        text += f", {asked}"
        if point.get("schedule") and point["schedule"] != asked:
            text += f" (ran {point['schedule']})"
    return text


def schedule_asked(point):
    """The --schedule= the comparison gave the point's jobs, or None."""
    return cost_model.training_flags(point.get("sweep", "")).get("schedule")


def latency_ms(point, link, num_buckets):
    """The α terms of the point's prediction: its time on a link of infinite
    bandwidth, one synchronization per bucket."""
    # hybrid has no α–β formula yet (bench/cost_model.py).
    if link is None or point["strategy"] in (REFERENCE, "hybrid"):
        return 0.0
    fast = cost_model.Link(link.alpha_s, 1e30)
    per_bucket = cost_model.sync_time(point["strategy"], point["workers"], point["servers"],
                                      1.0, fast, largest_share=1.0)
    return 1000 * per_bucket * max(1, num_buckets)


def bounded_by(point, link_name, latency_part_ms=0.0):
    """What bounded a point, in a few words."""
    if point["strategy"] == REFERENCE:
        return "compute (no communication)"
    if point.get("cpu_bound"):
        return (f"CPU (machine {100 * (cpu_bound.machine_busy_of(point) or 0):.0f}% busy: "
                "the network did not set this time)")
    if link_name == "loopback":
        return "CPU (loopback has no link limit)"
    rtos = point.get("rto_timeouts") or 0
    retrans = point.get("retrans_percent") or 0
    if rtos > 0 or retrans > RETRANS_PERCENT:
        return (f"retransmissions ({point.get('retrans_segments', 0):.0f} segments, "
                f"{rtos:.0f} RTO timeouts)")
    predicted = point.get("predicted_comm_ms")
    if predicted and latency_part_ms >= LATENCY_SHARE * predicted:
        return f"latency ({latency_part_ms:.0f} of {predicted:.0f} ms predicted are α terms)"
    predicted_step = point.get("predicted_step_ms")
    if predicted_step:
        error = point["step_ms"] / predicted_step - 1
        if error <= MODEL_TOLERANCE:
            return f"link (within {100 * MODEL_TOLERANCE:.0f}% of the α–β model)"
        return f"link, and {100 * error:.0f}% slower than the α–β model (not explained by it)"
    return "link (no prediction: --no_probe)"


def verdict_rows(points, link_name, link, num_buckets):
    rows = []
    for p in points:
        rows.append({
            "strategy": label(p), "name": strategy_name(p) or REFERENCE,
            "compression": p.get("compression") or "none",
            "workers": p["workers"], "servers": p["servers"],
            "step_ms": p["step_ms"], "step_ms_min": p["step_ms_min"],
            "step_ms_max": p["step_ms_max"], "exposed_ms": p["exposed_ms"],
            "busiest_link_mb": p["busiest_link_bytes"] / 1e6,
            "predicted_step_ms": p.get("predicted_step_ms"),
            "error_percent": cost_model.error_percent(p["step_ms"], p.get("predicted_step_ms")),
            "bounded_by": bounded_by(p, link_name, latency_ms(p, link, num_buckets)),
            "ps_chunk_kb": (p.get("ps_chunk_bytes") or 0) / 1024 or None,
            "schedule": p.get("schedule"), "schedule_asked": schedule_asked(p),
            "schedule_note": p.get("schedule_note"),
            "predicted_exposed_ms": p.get("predicted_exposed_ms"),
            "predicted_schedule": p.get("predicted_schedule"),
            **{f"predicted_{s}_{m}_ms": p.get(f"predicted_{s}_{m}_ms")
               for s in cost_model.SCHEDULES for m in ("step", "exposed")},
        })
    return rows


def answer(rows, link_name):
    """The one-line answer for the largest N: the fastest strategy against
    the ring (or against the runner-up when the ring wins), and why."""
    distributed = [r for r in rows if r["name"] != REFERENCE]
    if not distributed:
        return "nothing to compare: no distributed point ran"
    n = max(r["workers"] for r in distributed)
    at_n = sorted((r for r in distributed if r["workers"] == n), key=lambda r: r["step_ms"])
    best = at_n[0]
    # The dense ring: what compression and every other strategy are against.
    ring = next((r for r in at_n if r["name"] == "ring" and r.get("compression", "none") == "none"),
                None)
    other = ring if ring is not None and ring is not best else (at_n[1] if len(at_n) > 1 else None)
    where = f"at N={n} on {link_name}"
    if other is None:
        return f"{best['strategy']} is the only strategy that ran {where}"
    ratio = other["step_ms"] / best["step_ms"]
    opponent = "the ring" if other["name"] == "ring" else other["strategy"]
    head = (f"{best['strategy']} is {ratio:.2f}x faster than {opponent} {where} "
            f"({best['step_ms']:.0f} vs {other['step_ms']:.0f} ms a step)")
    if ratio < 1.05:
        return head + ": within 5%, a tie on this network"
    if best["bounded_by"].startswith("CPU") or other["bounded_by"].startswith("CPU"):
        advice = ("use --netem, a slower link or fewer workers" if link_name == "loopback"
                  else "run again on an idle machine, or with a slower link or fewer workers")
        return head + (" but the CPU bounded the run: this measures the machine's cores, not "
                       f"the network ({advice})")
    if best["bounded_by"].startswith("latency") or other["bounded_by"].startswith("latency"):
        return head + (" because latency dominates: the ring pays 2(N-1) latencies per bucket, "
                       "a parameter server 2")
    if best["busiest_link_mb"] < other["busiest_link_mb"] * 0.95:
        return head + (f" because its busiest link carries {best['busiest_link_mb']:.2f} MB a "
                       f"step against {other['busiest_link_mb']:.2f} MB, and both are "
                       "bound by the link")
    return head + (f" with the same bytes through the busiest link "
                   f"({best['busiest_link_mb']:.2f} vs {other['busiest_link_mb']:.2f} MB): "
                   "the difference is how well each overlaps and pipelines")


def ms(value):
    """Milliseconds with the digits that matter: a step of a model that only
    sleeps --compute_ms=0 takes a fraction of one, which "0" would hide."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def format_table(rows):
    header = ("strategy", "N", "K", "step ms (min–max)", "exposed comm ms",
              "busiest link MB", "α–β step ms", "err %", "bounded by")
    lines = []
    for r in rows:
        lines.append((r["strategy"], str(r["workers"]), str(r["servers"] or "-"),
                      f"{ms(r['step_ms'])} ({ms(r['step_ms_min'])}–{ms(r['step_ms_max'])})",
                      f"{r['exposed_ms']:.0f}", f"{r['busiest_link_mb']:.2f}",
                      f"{r['predicted_step_ms']:.0f}" if r["predicted_step_ms"] else "-",
                      cost_model.format_error(r["error_percent"]), r["bounded_by"]))
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


# --- Schedules side by side (--schedules) -------------------------------------------

def schedule_pairs(rows, schedules):
    """One entry per strategy point (strategy, N, K, compression) with a row
    per schedule asked: {"strategy" (its label, compression included),
    "name", "workers", "servers", "compression", "<schedule>": that row or
    None}, in the rows' order."""
    pairs = collections.OrderedDict()
    for r in rows:
        if r["name"] == REFERENCE or r.get("schedule_asked") not in schedules:
            continue
        key = (r["name"], r["workers"], r["servers"], r["compression"])
        if key not in pairs:
            pairs[key] = {"strategy": label_without_schedule(r), "name": r["name"],
                          "workers": r["workers"], "servers": r["servers"],
                          "compression": r["compression"], **{s: None for s in schedules}}
        pairs[key][r["schedule_asked"]] = r
    return list(pairs.values())


def label_without_schedule(row):
    """The row's strategy label without ", <schedule> (ran ...)"."""
    asked = row.get("schedule_asked")
    return row["strategy"].split(f", {asked}")[0] if asked else row["strategy"]


def predicted_for(row, schedule):
    """The row's α–β step and exposed time under `schedule` (what ran): both
    None where the model did not time that schedule (a compressed point's
    prediction is fifo's queue only)."""
    step = row.get(f"predicted_{schedule}_step_ms")
    exposed = row.get(f"predicted_{schedule}_exposed_ms")
    if step is None and row.get("predicted_schedule") == schedule:
        step, exposed = row.get("predicted_step_ms"), row.get("predicted_exposed_ms")
    return {"predicted_step_ms": step, "predicted_exposed_ms": exposed}


def change_percent(base, other):
    if base is None or other is None or base <= 0:
        return None
    return 100.0 * (other / base - 1)


def schedule_summary(pairs, schedules):
    """verdict.json's "schedules": per strategy point, each schedule's step,
    exposed communication and prediction, and the change against the first
    schedule asked (the baseline)."""
    base = schedules[0]
    out = []
    for pair in pairs:
        entry = {k: pair[k] for k in ("strategy", "name", "workers", "servers", "compression")}
        for s in schedules:
            r = pair[s]
            entry[s] = None if r is None else {
                "ran": r.get("schedule"), "note": r.get("schedule_note"),
                "step_ms": r["step_ms"], "step_ms_min": r.get("step_ms_min"),
                "step_ms_max": r.get("step_ms_max"), "exposed_ms": r["exposed_ms"],
                **predicted_for(r, r.get("schedule") or s)}
        for s in schedules[1:]:
            b, o = entry[base], entry[s]
            entry[f"{s}_vs_{base}_step_percent"] = change_percent(
                b and b["step_ms"], o and o["step_ms"])
            entry[f"{s}_vs_{base}_predicted_step_percent"] = change_percent(
                b and b["predicted_step_ms"], o and o["predicted_step_ms"])
        out.append(entry)
    return out


def format_schedule_table(summary, schedules):
    """The schedules beside each other: per strategy point, each one's step,
    exposed communication and α–β step, then the change of the step time."""
    base = schedules[0]
    header = ["strategy", "N", "K"]
    for s in schedules:
        header += [f"{s} step ms", f"{s} exposed ms", f"{s} α–β step/exposed"]
    header += [f"{s} vs {base}" for s in schedules[1:]]
    lines = []
    for e in summary:
        line = [e["strategy"], str(e["workers"]), str(e["servers"] or "-")]
        for s in schedules:
            r = e[s]
            if r is None:
                line += ["no run", "-", "-"]
                continue
            ran = "" if r["ran"] in (None, s) else f" (ran {r['ran']})"
            predicted = ("-" if r["predicted_step_ms"] is None else
                         f"{ms(r['predicted_step_ms'])}/{ms(r['predicted_exposed_ms'])}")
            line += [ms(r["step_ms"]) + ran, ms(r["exposed_ms"]), predicted]
        for s in schedules[1:]:
            measured = e[f"{s}_vs_{base}_step_percent"]
            predicted = e[f"{s}_vs_{base}_predicted_step_percent"]
            line.append("-" if measured is None else
                        f"{measured:+.0f}%" + ("" if predicted is None else
                                               f" (α–β {predicted:+.0f}%)"))
        lines.append(line)
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


def overlapping(a, b):
    """Whether two runs' min–max step times overlap: a change between them
    is within the repeats' own spread."""
    if None in (a.get("step_ms_min"), a.get("step_ms_max"), b.get("step_ms_min"),
                b.get("step_ms_max")):
        return False
    return a["step_ms_min"] <= b["step_ms_max"] and b["step_ms_min"] <= a["step_ms_max"]


# Within this of the baseline's step time, a schedule changed nothing.
SCHEDULE_TIE_PERCENT = 5.0


def schedule_answer(summary, schedules, link_name):
    """What each schedule after the first changed, at the largest N: the
    strategies by their change of step time, largest gain first, with the
    exposed communication and the α–β model's change; runs that did not
    happen or ran another schedule said so."""
    if len(schedules) < 2 or not summary:
        return None
    base = schedules[0]
    n = max(e["workers"] for e in summary)
    at_n = [e for e in summary if e["workers"] == n]
    sentences = []
    for s in schedules[1:]:
        changed, missing = [], []
        for e in at_n:
            b, o = e[base], e[s]
            name = e["strategy"]
            if b is None or o is None:
                missing.append(f"{name} has no {base if b is None else s} run")
                continue
            if o["ran"] not in (None, s):
                missing.append(f"{name} ran {o['ran']} when asked {s}"
                               + (f" ({o['note']})" if o.get("note") else ""))
                continue
            percent = e[f"{s}_vs_{base}_step_percent"]
            predicted = e[f"{s}_vs_{base}_predicted_step_percent"]
            changed.append((percent, f"{name} {percent:+.0f}% ({ms(b['step_ms'])} vs "
                                     f"{ms(o['step_ms'])} ms a step, exposed "
                                     f"{ms(b['exposed_ms'])} vs {ms(o['exposed_ms'])} ms"
                                     + ("" if predicted is None else
                                        f"; α–β {predicted:+.0f}%")
                                     + ("; the repeats' ranges overlap" if overlapping(b, o)
                                        else "") + ")"))
        changed.sort(key=lambda c: c[0])
        text = f"{s} against {base} at N={n} on {link_name}: "
        if changed:
            text += ", ".join(c[1] for c in changed)
            if all(abs(c[0]) < SCHEDULE_TIE_PERCENT for c in changed):
                text += f"; all within {SCHEDULE_TIE_PERCENT:.0f}%: {s} changed nothing here"
        if missing:
            text += ("; " if changed else "") + "; ".join(missing)
        sentences.append(text)
    return "; ".join(sentences)


def verdict_answer(rows, schedules, link_name):
    """(the one-line answer, the schedules' table or None, verdict.json's
    schedule comparison or None). With several schedules the strategies are
    ranked under the first (the baseline) and the line goes on with what
    each other schedule changed."""
    if len(schedules) < 2:
        return answer(rows, link_name), None, None
    baseline = [dict(r, strategy=label_without_schedule(r)) for r in rows
                if r["name"] == REFERENCE or r["schedule_asked"] == schedules[0]]
    summary = schedule_summary(schedule_pairs(rows, schedules), schedules)
    line = f"under {schedules[0]}, " + answer(baseline, link_name)
    changed = schedule_answer(summary, schedules, link_name)
    if changed:
        line += "; " + changed
    return line, format_schedule_table(summary, schedules), summary


def read_schedules_ran(points, out):
    """Puts into each distributed point what its job ran, from the first
    repeat's summary: "schedule" (the strategy's own record, rank 0's
    sync summary, else the --schedule its manifest echoes; fifo where the
    strategy recorded --schedule as ignored, "schedule_note" its reason),
    and the partition and credit it used ("partition_bytes",
    "credit_bytes": its sync summary, else its recorded settings), which
    the prediction then uses. Points whose job wrote no such record (a
    build before --schedule, a training command) keep none."""
    for p in points:
        if p["strategy"] == REFERENCE:
            continue
        path = os.path.join(out, "points", scaling.label(p), "r0", "summary.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            summary = json.load(f)
        manifest = summary.get("manifest") or {}
        flags = manifest.get("flags") or {}
        ignored = manifest.get("ignored_flags") or {}
        settings = manifest.get("settings") or {}
        ranks = summary.get("ranks") or [{}]
        sync = ranks[0].get("sync") or {}
        ran = sync.get("schedule") or flags.get("schedule")
        if ran:
            p["schedule"] = ran
        if "schedule" in ignored:
            p["schedule"] = "fifo"
            p["schedule_note"] = ignored["schedule"]
        for name, recorded in (("partition", ("partition_bytes",)),
                               ("credit", ("credit_bytes", "push_credit_bytes"))):
            value = next((sync[k] for k in recorded if sync.get(k)), None)
            if value is None:
                kb = (settings.get(f"{name}_kb") or {}).get("value")
                value = kb * 1024 if kb else None
            if value:
                p[f"{name}_bytes"] = int(value)


def predict_what_ran(points, out, link_name, link, extra_flags):
    """The sweep's predictions again, now that each point says which
    schedule ran and with which partition and credit."""
    layouts = {}
    for p in points:
        run_dir = os.path.join(out, "points", scaling.label(p), "r0")
        if os.path.exists(os.path.join(run_dir, "layout.json")):
            layouts.setdefault(scaling.group_key(p), scaling.read_layout(run_dir))
    if layouts:
        scaling.add_references_and_predictions(points, {link_name: link}, layouts, extra_flags)


def plot_input(out, schedule=None):
    """points.csv without the columns bench/plot_scaling.py cannot read as
    numbers (its reader takes every column but a few as a float; "partition"
    is text): written beside it as plot_points.csv. With `schedule`, only the
    reference and the points run under it (the plot draws one bar per
    strategy), as plot_points_<schedule>.csv."""
    name = "plot_points.csv" if schedule is None else f"plot_points_{schedule}.csv"
    source, target = os.path.join(out, "points.csv"), os.path.join(out, name)
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        fields = [c for c in reader.fieldnames if c not in TEXT_COLUMNS]
        rows = list(reader)
    if schedule is not None:
        rows = [r for r in rows if r.get("strategy") == REFERENCE
                or schedule_asked(r) == schedule]
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return target


TEXT_COLUMNS = ("partition",)


# --- Main ----------------------------------------------------------------------------------

def parse_args(argv):
    parser = OneLineParser(
        prog="gradsync compare", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--netem", default="",
                        help="RATE[,LATENCY] of every emulated link (root); empty: loopback")
    parser.add_argument("--workers", default="4", help="N, or several: 2,4,8")
    parser.add_argument("--model", default=None,
                        help="mlp (the default), cnn, resnet18 (they compute), "
                             "custom:MB[:TENSORS], resnet50, vgg16, bert-base (they sleep "
                             "--compute_ms); not with a training command")
    parser.add_argument("--strategies", default="all",
                        help=f"some of {', '.join(STRATEGIES)}, or all; the single-worker "
                             "reference always runs")
    parser.add_argument("--bucket_mb", default="0",
                        help="gradient bucket cap; 0 = each job's own default (a quarter of "
                             "the model within [1, 25] MiB, core/sync/bucket_size_rule.h)")
    parser.add_argument("--compute_ms", default="0",
                        help="emulated compute per step, for the models that sleep")
    parser.add_argument("--compressions", default="none",
                        help="--compression values: every strategy with each, e.g. "
                             "none,fp16,topk:0.01")
    parser.add_argument("--schedules", default="",
                        help="send orders, each strategy point under each: fifo, priority or "
                             "fifo,priority (--schedule= to the jobs; the first is the "
                             "baseline); default: the worker's default only, nothing passed")
    parser.add_argument("--steps", type=counted(1), default=15)
    parser.add_argument("--warmup", type=counted(0), default=3)
    parser.add_argument("--repeats", type=counted(1), default=2)
    parser.add_argument("--deadline_s", type=counted(1), default=300,
                        help="per job")
    parser.add_argument("--out", default=None, help="default runs/compare-<time>")
    parser.add_argument("--bin_dir", default=os.environ.get("GRADSYNC_BIN_DIR",
                                                            "bazel-bin/tools"),
                        help="folder with the gradsync and netem binaries")
    parser.add_argument("extra", nargs="*",
                        help="after --: training flags for every job, or a training command")
    args = parser.parse_args(argv)
    args.link = parse_netem(args.netem)
    args.command = scaling.worker_command(args.extra)
    # Without a command the model is --model or the default; a command's
    # strategies are narrowed by check_command below.
    args.strategy_names = parse_strategies(
        args.strategies, args.model if args.command else (args.model or DEFAULT_MODEL))
    args.worker_counts = parse_workers(args.workers)
    args.compression_list = parse_compressions(args.compressions)
    args.schedule_list = parse_schedules(args.schedules, args.extra)
    if args.command:
        check_command(args)
        args.model_label = scaling.command_model(args.command)
    else:
        args.model = args.model or DEFAULT_MODEL
        check_model(args.model)
        args.model_label = args.model
    args.skipped = plan(args)
    return args


class OneLineParser(argparse.ArgumentParser):
    """argparse's refusals as one line (UsageError), not usage and a line."""

    def error(self, message):
        raise UsageError(message)


def counted(least):
    """An argparse type: an integer of at least `least`, else one line."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(
                f"give a whole number of at least {least}, not '{text}'")
        return value
    return parse


def parse_compressions(spec):
    """'none,fp16,topk:0.01' -> its list, each checked as the trainer checks
    it, before anything runs."""
    values = [c.strip() for c in (spec or "none").split(",") if c.strip()] or ["none"]
    for value in values:
        try:
            cost_model.parse_compression(value)
        except ValueError as error:
            raise UsageError(f"--compressions: {error}") from None
    return values


def parse_schedules(spec, extra=()):
    """'fifo,priority' -> ['fifo', 'priority'] (the order given: the first is
    the baseline); '' -> [] (the worker's default, nothing passed). An
    unknown or repeated schedule, or a --schedule among the training flags
    as well, is refused."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if spec.strip() and not names:
        raise UsageError(f"--schedules={spec}: give some of {', '.join(cost_model.SCHEDULES)}")
    for name in names:
        if name not in cost_model.SCHEDULES:
            raise UsageError(f"--schedules: unknown schedule '{name}'; choose from "
                             f"{', '.join(cost_model.SCHEDULES)}")
    if len(set(names)) != len(names):
        raise UsageError(f"--schedules={spec} names a schedule twice")
    if names and any(a.startswith("--schedule=") or a == "--schedule" for a in extra):
        raise UsageError("--schedules and a --schedule training flag after -- both set the "
                         "schedule; drop one")
    return names


def check_model(model):
    """scaling.parse_model's refusal as one line, not an exit or a traceback."""
    try:
        scaling.parse_model(model)
    except SystemExit as refusal:
        raise UsageError(str(refusal.code).replace("scaling: ", "--")) from None
    except ValueError:
        raise UsageError(f"--model={model}: embedding takes whole numbers, "
                         "embedding:ROWS:DIM, and custom a size in MB, custom:MB[:TENSORS]"
                         ) from None


def plan(args):
    """Which of the asked strategy x compression points can run, decided
    before the jobs start: drops the others from args.strategy_names and
    returns (point, reason) for each dropped one. Refuses the comparison
    when no distributed point is left."""
    embedding = bool(args.model) and args.model.startswith("embedding")
    skipped, kept = [], []
    for name in args.strategy_names:
        strategy = STRATEGIES[name]
        if strategy.scaling == "hybrid" and not embedding:
            skipped.append((name, "needs a model with an embedding table "
                                  "(--model=embedding:ROWS:DIM)"))
            continue
        runnable = [c for c in args.compression_list
                    if not scaling.compression_refused(strategy.scaling, c)]
        for c in args.compression_list:
            if c not in runnable:
                skipped.append((f"{name} with --compression={c}",
                                scaling.compression_refused(strategy.scaling, c)))
        if runnable:
            kept.append(name)
    if not kept:
        raise UsageError("nothing to compare: " + "; ".join(
            f"{point} {reason}" for point, reason in skipped) + "; choose other "
            "--strategies or --compressions")
    args.strategy_names = kept
    return skipped



DEFAULT_MODEL = "mlp"


def check_command(args):
    """A training command after `--`: what compare cannot do with one. With
    --strategies=all, the strategies a command can run."""
    if args.model is not None:
        raise UsageError(f"--model={args.model} and a training command both name the model; "
                         "the command after -- is the model: drop --model")
    problem = scaling.check_command(args.command, [], args.compressions)
    if problem:
        raise UsageError(problem)
    runnable = [n for n in STRATEGIES if STRATEGIES[n].scaling in scaling.COMMAND_STRATEGIES]
    if args.strategies.strip() == "all":
        args.strategy_names = [n for n in args.strategy_names if n in runnable]
    unsupported = [n for n in args.strategy_names if n not in runnable]
    if unsupported:
        raise UsageError(f"--strategies: {', '.join(unsupported)} cannot run a training "
                         "command yet; choose from " + ", ".join(runnable))
    if "/" in args.command[0] and not os.access(args.command[0], os.X_OK):
        raise UsageError(f"the training command's program {args.command[0]} is not an "
                         "executable; give its path, like /usr/bin/python3 train.py ...")


def main(argv):
    try:
        args = parse_args(argv)
        check_root(args.link)
    except UsageError as error:
        print(f"gradsync compare: {error}", file=sys.stderr)
        return 2
    for binary in ("gradsync", "netem"):
        if not os.access(os.path.join(args.bin_dir, binary), os.X_OK):
            print(f"gradsync compare: {args.bin_dir}/{binary} is missing; build it with "
                  "`bazel build //tools:gradsync //tools:netem`", file=sys.stderr)
            return 1
    cost_model.use_binary(os.path.join(args.bin_dir, "gradsync"))
    for point, reason in args.skipped:
        print(f"gradsync compare: skipping {point}: it {reason}", flush=True)
    out = args.out or time.strftime("runs/compare-%Y%m%d-%H%M%S")
    os.makedirs(out, exist_ok=True)
    started = time.time()
    command = scaling_command(args, args.strategy_names, args.worker_counts, out)
    print("== " + " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        print(f"gradsync compare: the sweep failed; see {out}", file=sys.stderr)
        return 1
    with open(os.path.join(out, "sweep.json")) as f:
        sweep = json.load(f)
    links = sweep.get("links", {})
    link = (cost_model.Link(links[args.link]["alpha_us"] / 1e6,
                            links[args.link]["bandwidth_bytes_per_s"])
            if args.link in links else None)
    points = [p for p in sweep["points"]
              if p["strategy"] == REFERENCE or strategy_name(p) in args.strategy_names]
    num_buckets = 1
    for p in points:
        layout = os.path.join(out, "points", scaling.label(p), "r0")
        if os.path.exists(os.path.join(layout, "layout.json")):
            num_buckets = len(scaling.read_layout(layout)["bucket_bytes"])
            break
    read_schedules_ran(points, out)
    if link is not None:
        predict_what_ran(points, out, args.link, link, [] if args.command else args.extra)
    rows = verdict_rows(points, args.link, link, num_buckets)
    if not any(r["name"] != REFERENCE for r in rows):
        print(f"gradsync compare: no distributed point ran, so there is nothing to compare; "
              f"each job's log is under {out}/points", file=sys.stderr)
        return 1
    line, schedule_table, schedule_entries = verdict_answer(rows, args.schedule_list, args.link)
    text = [f"gradsync compare: model {args.model_label}, link {args.link}"
            + (f" ({link.describe()} probed)" if link else "")
            + (f", {args.repeats} repeats of the command's steps ({args.warmup} warm-up), "
               if args.command else
               f", {args.repeats} repeats of {args.steps} steps ({args.warmup} warm-up), ")
            +
            f"{num_buckets} bucket(s)", "", format_table(rows), "",
            *([schedule_table, ""] if schedule_table else []),
            ("Steps and data are the training command's own (" + " ".join(args.command) + ")."
             if args.command else
             "No accuracy is shown: the jobs train on synthetic data (`tools/demo.sh "
             "--loopback` trains to accuracy, with the run-to-run spread)."), "", line]
    print("\n".join(text))
    with open(os.path.join(out, "verdict.txt"), "w") as f:
        f.write("\n".join(text) + "\n")
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump({"rows": rows, "answer": line, "link": args.link, "model": args.model_label,
                   "command": args.command, "schedules": args.schedule_list,
                   "schedule_comparison": schedule_entries,
                   "git_commit": sweep["manifest"].get("git_commit")}, f, indent=1)
    # One plot per schedule: the plot draws one bar per strategy.
    plots = []
    for schedule in args.schedule_list or [None]:
        png = os.path.join(out, "compare.png" if schedule is None else f"compare_{schedule}.png")
        title = f"gradsync compare: {args.model_label} on {args.link}"
        plotted = subprocess.run([sys.executable, os.path.join(HERE, "plot_scaling.py"),
                                  plot_input(out, schedule), "-o", png, "--title",
                                  title + (f", --schedule={schedule}" if schedule else ""),
                                  "--command", " ".join(["gradsync compare", *argv])])
        plots.append(png if plotted.returncode == 0 else f"{png} (the plot failed)")
    print(f"\nresults: {out}/verdict.txt, {out}/verdict.json, {out}/points.csv, "
          + ", ".join(plots) + f"  ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
