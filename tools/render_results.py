#!/usr/bin/python3
"""Renders the generated parts of the results pages from their data.

A page under docs/results/ marks what a program must write, and names the
data it comes from (a folder under docs/results/data/ holding the sweep's
points.csv and sweep.json):

  <!-- render:table headline data/headline-2026-11-24 -->
  | ... the table, written by this script ... |
  <!-- render:end -->

  ... PS K = N took <!-- render:value data/headline-2026-11-24
  strategy=ps,workers=8,servers=8 step_ms {:.0f} -->283<!-- render:end --> ms ...

  <!-- render:provenance data/headline-2026-11-24 -->
  build 2e3b0c6, 2026-11-24, `bench/scaling.py ...`
  <!-- render:end -->

`table NAME` is one of TABLES below; `value` selects exactly one point by
column=value pairs and formats one column (COLUMN/DIVISOR to change its
unit: time_us/1000 in ms); `ratio` divides one column of
one point by the same column of another (`ratio SOURCE A B COLUMN FORMAT`,
where B may be SOURCE@column=value,... to take it from another file, and
COLUMN may be A:B to divide A of the first by B of the second);
`count SOURCE SPEC [cpu_bound]` counts the points SPEC selects (it may
use >=, <= and != too), or only those of them that are CPU-bound;
`provenance` is the run's build, date and command. A SOURCE is a data
folder (its points.csv) or one file in it (a .csv of points, or a .json
whose "points" or "rows" list holds them). A folder without the sweep's sweep.json
may keep a manifest.json ({"manifest": {...}}), and one points file X.csv
an X.manifest.json, transcribed from the text that first reported the run;
its provenance line says so.

A page whose figures have no data says so with

  <!-- render:nodata -->
  ... the sentence this script writes ...
  <!-- render:end -->

and a page with no marker at all fails --check: every page either renders
something from data or says that it cannot. CPU-bound points (the rule of
bench/cpu_bound.py) are marked in every table, in the order the data has
them, never ranked. Between a marker and its end, everything is the
renderer's: hand edits there are what --check exists to catch.

  tools/render_results.py            # rewrite every page's generated parts
  tools/render_results.py --check    # exit 1 naming each part that differs
                                     # from its data (tools/test.sh runs it)
"""
import argparse
import csv
import difflib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
# Pages outside docs/results/ whose numbers come from its data (their
# markers name folders relative to docs/results/ all the same).
OTHER_PAGES = [os.path.join(ROOT, "docs", "compare.md"), os.path.join(ROOT, "README.md")]

sys.path.insert(0, os.path.join(ROOT, "bench"))
from cpu_bound import describe as describe_cpu_bound, is_cpu_bound, machine_busy_of  # noqa: E402

NO_DATA = ("**No data folder.** This page's own runs kept no points: no folder under "
           "docs/results/data/ holds them, and `tools/render_results.py --check` cannot verify "
           "their figures. Read them as a record of what was seen, with the build each names.")

MARKER = re.compile(r"<!-- render:(\w+)\s+(.*?)\s*-->(.*?)<!-- render:end -->", re.DOTALL)


class RenderError(Exception):
    """A marker or its data is wrong: one message naming the page and marker."""


def load_points(results_dir, source):
    """The points of a data folder (its points.csv) or of one file in it."""
    path = os.path.join(results_dir, source)
    if os.path.isdir(path):
        path, source = os.path.join(path, "points.csv"), source + "/points.csv"
    if not os.path.exists(path):
        raise RenderError(f"{source} does not exist")
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, list):
            return data
        # A sweep's "points"; bench/compression_accuracy.py's "rows".
        return data["points"] if "points" in data else data["rows"]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            try:
                row[key] = float(value) if value not in ("", None) else None
            except ValueError:
                pass  # text columns: strategy, model, link, ...
    return rows


def load_manifest(results_dir, source):
    """The sweep's own manifest (sweep.json), else a transcribed one: for one
    points file X.csv, X.manifest.json beside it; for a folder, its
    manifest.json."""
    path = os.path.join(results_dir, source)
    if os.path.isdir(path):
        candidates = [os.path.join(path, "sweep.json"), os.path.join(path, "manifest.json")]
    else:
        candidates = [os.path.splitext(path)[0] + ".manifest.json"]
    for candidate in candidates:
        if os.path.exists(candidate):
            with open(candidate) as f:
                return json.load(f).get("manifest", {})
    raise RenderError(f"{source} has no manifest ("
                      + ", ".join(os.path.basename(c) for c in candidates) + ")")


# "column=" (nothing after it) selects the points whose column is empty.
CONDITION = re.compile(r"^([\w.]+)(>=|<=|!=|=)(.*)$")


def matching(points, spec):
    """The points whose columns meet spec's 'column=value,...'; a count's
    spec may also use >=, <= and != (workers>=4,algorithm!=gradsync_ps)."""
    conditions = []
    for pair in spec.split(","):
        found = CONDITION.match(pair.strip())
        if not found:
            raise RenderError(f"'{spec}': each selector is column=value (or >=, <=, !=)")
        conditions.append(found.groups())

    def meets(point, key, op, value):
        have = point.get(key)
        if have is None or (isinstance(have, float) and have != have):
            have = ""  # an empty cell
        if isinstance(have, (int, float)) and not isinstance(have, bool):
            try:
                have, value = float(have), float(value)
            except ValueError:
                return False
        elif op in (">=", "<="):
            return False
        return {"=": have == value, "!=": have != value,
                ">=": op == ">=" and have >= value, "<=": op == "<=" and have <= value}[op]

    return [p for p in points if all(meets(p, *c) for c in conditions)]


def select(points, spec):
    """The one point whose columns equal spec's 'column=value,...'."""
    found = matching(points, spec)
    if len(found) != 1:
        raise RenderError(f"'{spec}' selects {len(found)} points; it must select exactly one")
    return found[0]


def point_is_cpu_bound(p):
    return is_cpu_bound(machine_busy_unniced=machine_busy_of(p),
                        job_cpu_share=p.get("cpu_share", p.get("job_cpu_fraction")))


# --- Tables -------------------------------------------------------------------------------

def strategy_label(p):
    if p["strategy"] == "ps":
        return "ps, K=1" if p["servers"] == 1 else "ps, K=N"
    if p["strategy"] == "ps-colocated":
        return "ps, colocated"
    return p["strategy"]


def number(value, fmt="{:.0f}"):
    """'–' for a figure that was not measured or predicted (None, NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return fmt.format(value)


def busy_window_mark(p):
    """'' where the machine's busy share is over the measured steps alone,
    '†' where it is over the whole job (a run from before bench/scaling.py
    recorded the steps' window)."""
    if p.get("machine_busy_unniced_timed_max") is not None:
        return ""
    return "†" if p.get("machine_busy_unniced_max") is not None else ""


def busy_window_footer(points):
    """What the busy columns measured over, for a table's footer."""
    whole = any(busy_window_mark(p) for p in points)
    timed = any(p.get("machine_busy_unniced_timed_max") is not None for p in points)
    parts = []
    if timed:
        parts.append("machine busy over the measured steps (warm-up and start-up left out)")
    if whole:
        parts.append("† machine busy over the whole job, start-up included (a run from "
                     "before the measured steps' window was recorded)")
    return "; ".join(parts)


def cpu_footer(points):
    footer = busy_window_footer(points)
    return f"*{describe_cpu_bound()} (bench/cpu_bound.py){'; ' + footer if footer else ''}.*"


def sweep_table(points):
    """The table of a sweep of bench/scaling.py: one row per point but the
    reference, by N then strategy, as the headline page has it. Job CPU is
    over the whole job; machine busy over the measured steps where the run
    recorded them, else the whole job (marked †): the footer says which."""
    header = ("| strategy | N | K | step ms | predicted ms | measured / predicted | "
              "retrans. (RTOs) per job | drops | job CPU (whole job) / machine busy |")
    lines = [header, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    order = {"ring": 0, "ps": 1, "ps-colocated": 2}
    rows = sorted((p for p in points if p["strategy"] != "local"),
                  key=lambda p: (p["workers"], order.get(p["strategy"], 9), p["servers"]))
    for p in rows:
        predicted = p.get("predicted_step_ms")
        ratio = p["step_ms"] / predicted if predicted else None
        k = "–" if p["strategy"] == "ring" else f"{p['servers']:.0f}"
        lines.append(
            f"| {strategy_label(p)} | {p['workers']:.0f} | {k} | "
            f"{p['step_ms']:.0f} ({p['step_ms_min']:.0f}–{p['step_ms_max']:.0f}) | "
            f"{number(predicted)} | {number(ratio, '{:.2f}')} | "
            f"{number(p.get('retrans_segments'))} ({number(p.get('rto_timeouts'))}) | "
            f"{number(p.get('port_drops'))} | "
            f"{number(100 * (p.get('job_cpu_fraction') or 0))}% / "
            f"{number(100 * (machine_busy_of(p) or 0))}%{busy_window_mark(p)}"
            f"{cpu_mark(p)} |")
    footer = busy_window_footer(rows)
    if footer:
        lines += ["", f"*Job CPU: the job's processes over the whole job; {footer}.*"]
    return "\n".join(lines)


def simulated_scaling_table(points):
    """The table of a sweep of sim/scaling_sweep.py: per model, link and N,
    each strategy's samples per second and scaling efficiency (compute over
    step), the ideal beside them; '–' where the point ran past the sweep's
    time limit or was not asked for."""
    columns = [("ring", 0, "ring"), ("tree", 0, "tree"),
               ("halving_doubling", 0, "halving-doubling"),
               ("ps", 1, "PS, K=N"), ("ps", 2, "PS, K=N/2")]

    def column_of(p):
        if p["strategy"] != "ps":
            return (p["strategy"], 0)
        return ("ps", 1 if p["servers"] == p["workers"] else 2)

    present = {column_of(p) for p in points}
    columns = [c for c in columns if (c[0], c[1]) in present]
    header = "| model | link | N | ideal | " + " | ".join(c[2] for c in columns) + " |"
    lines = [header, "| --- | --- | ---: | ---: |" + " ---: |" * len(columns)]
    cells = {}
    ideal = {}
    for p in points:
        key = (p["model"], p["link"], p["workers"])
        cells[key + column_of(p)] = p
        if p.get("ideal_samples_per_s") is not None:
            ideal[key] = p["ideal_samples_per_s"]
    for key in sorted({(p["model"], p["link"], p["workers"]) for p in points},
                      key=lambda k: (k[0], float(k[1].split("gbit")[0]), k[2])):
        row = []
        for strategy, kind, _ in columns:
            p = cells.get(key + (strategy, kind))
            if p is None or p.get("samples_per_s") is None:
                row.append("–")
            else:
                row.append(f"{p['samples_per_s']:,.0f} ({100 * p['efficiency']:.0f}%)")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]:.0f} | {number(ideal.get(key), '{:,.0f}')} | "
                     + " | ".join(row) + " |")
    return "\n".join(lines)


def simulated_hosts_table(points):
    """The table of a sweep of sim/scaling_sweep.py with several ranks per host:
    per model, link and N, each strategy's samples per second and scaling
    efficiency, the ideal beside them, and what the selector picked for how
    many buckets; '–' where the point was not asked for, 'over T s' where it
    ran past the sweep's time limit."""
    columns = [("ring", "-", "ring"), ("tree", "-", "tree"),
               ("hierarchical", "-", "hierarchical"), ("allreduce", "-", "selector"),
               ("ps", "N", "PS, K=N"), ("ps", "N/2", "PS, K=N/2"),
               ("ps", "colocated", "PS, colocated")]
    short = {"ring": "ring", "tree": "tree", "halving_doubling": "h-d"}

    def column_of(p):
        if p["strategy"] != "ps":
            return (p["strategy"], "-")
        if p["placement"] == "colocated":
            return ("ps", "colocated")
        return ("ps", "N" if p["servers"] == p["workers"] else "N/2")

    present = {column_of(p) for p in points}
    columns = [c for c in columns if c[:2] in present]
    lines = ["| model | link | N (hosts) | ideal | " + " | ".join(c[2] for c in columns)
             + " | selector's picks |",
             "| --- | --- | ---: | ---: |" + " ---: |" * len(columns) + " --- |"]
    cells, ideal, picks = {}, {}, {}
    for p in points:
        key = (p["model"], p["link"], p["workers"])
        cells[key + column_of(p)] = p
        if p.get("ideal_samples_per_s") is not None:
            ideal[key] = p["ideal_samples_per_s"]
        if p["strategy"] == "allreduce" and p.get("selector_picks"):
            picks[key] = ", ".join(
                f"{short.get(name, name)} {count}" for name, count in
                (item.split(":") for item in p["selector_picks"].split()))
    for key in sorted({(p["model"], p["link"], p["workers"]) for p in points},
                      key=lambda k: (k[0], float(k[1].split("gbit")[0]), k[2])):
        row = []
        for strategy, kind, _ in columns:
            p = cells.get(key + (strategy, kind))
            if p is None:
                row.append("–")
            elif p.get("samples_per_s") is None:
                row.append(f"over {p['simulator_s']:.0f} s")
            else:
                row.append(f"{p['samples_per_s']:,.0f} ({100 * p['efficiency']:.0f}%)")
        hosts = key[2] / next(p["gpus_per_host"] for p in points)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]:.0f} ({hosts:.0f}) | "
                     f"{number(ideal.get(key), '{:,.0f}')} | " + " | ".join(row)
                     + f" | {picks.get(key, '–')} |")
    return "\n".join(lines)


def simulated_switch_table(points):
    """A sweep of sim/scaling_sweep.py over --oversubscription: per model, N and
    strategy, the step under one switch of full bisection and under each ratio,
    with the busiest ToR uplink's bytes (GB, one direction) and the slowdown."""
    ratios = sorted({p["oversubscription"] for p in points if p["oversubscription"] > 1})
    lines = ["| model | N | strategy | full bisection ms | "
             + " | ".join(f"{r:g}:1 ms | {r:g}:1 / full | busiest uplink GB" for r in ratios)
             + " |",
             "| --- | ---: | --- | ---: |" + " ---: | ---: | ---: |" * len(ratios)]
    label = {"allreduce": "selector"}
    cells = {}
    for p in points:
        name = label.get(p["strategy"], p["strategy"])
        if p["strategy"] == "ps":
            name = "PS, colocated" if p["placement"] == "colocated" else (
                "PS, K=N" if p["servers"] == p["workers"] else f"PS, K={p['servers']:.0f}")
        cells[(p["model"], p["workers"], name, p["oversubscription"])] = p
    order = ["ring", "tree", "hierarchical", "selector"]
    for model, n, name in sorted({k[:3] for k in cells},
                                 key=lambda k: (k[0], k[1], order.index(k[2])
                                                if k[2] in order else 9, k[2])):
        full = cells.get((model, n, name, 1.0))
        row = [number(full and full.get("step_ms"))]
        for r in ratios:
            over = cells.get((model, n, name, r))
            step = over and over.get("step_ms")
            row += [number(step),
                    number(step / full["step_ms"] if step and full and full.get("step_ms")
                           else None, "{:.2f}"),
                    number(over["busiest_uplink_bytes"] / 1e9 if step else None, "{:.2f}")]
        lines.append(f"| {model} | {n:.0f} | {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def simulated_anchors_table(points):
    """A sweep of sim/scaling_sweep.py set up like a published run: one row per
    point, with the compute scale that stands for the other GPU, the step, its
    compute and the scaling efficiency (compute over step)."""
    lines = ["| model | compute × | link | N (hosts) | strategy | step ms | compute ms | "
             "efficiency |",
             "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: |"]
    for p in sorted(points, key=lambda p: (p["model"], p["compute_scale"], p["link"],
                                           p["workers"], p["strategy"], p["servers"])):
        name = p["strategy"]
        if name == "ps":
            name = f"PS, K={p['servers']:.0f} {p['placement']}"
        hosts = p["workers"] / p["gpus_per_host"]
        step = (f"{p['step_ms']:.0f}" if p.get("step_ms") is not None
                else f"over {p['simulator_s']:.0f} s")
        lines.append(f"| {p['model']} | {p['compute_scale']:g} | {p['link']} | "
                     f"{p['workers']:.0f} ({hosts:.0f}) | {name} | {step} | "
                     f"{number(p.get('compute_ms'))} | "
                     f"{number(100 * p['efficiency'] if p.get('efficiency') else None)}% |")
    return "\n".join(lines)


def ratio_summary(ratios):
    """Median (min–max) of simulated over measured ratios."""
    if not ratios:
        return "–"
    ratios = sorted(ratios)
    middle = ratios[len(ratios) // 2] if len(ratios) % 2 else (
        ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    return f"{middle:.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"


def crossover_honest(points):
    return [p for p in points if p["cpu_bound"] not in (True, "True")]


CROSSOVER_ORDER = ["ring", "halving_doubling", "tree", "allreduce"]


def crossover_label(latency):
    return f"{latency / 1000:g} ms" if latency >= 1000 else f"{latency:g} µs"


def simulated_crossover_table(points):
    """sim/calibrate_crossover.py's points summed up per latency and algorithm:
    how many points were not CPU-bound, how many of those the simulator put
    within 10 % of the measurement with the wire's latency, with the probed
    α and (where the data has them) with the fitted constants, and the
    median and range of simulated over measured."""
    columns = [("wire", "wire_over_measured"), ("probed", "probed_over_measured")]
    if any(p.get("fitted_over_measured") not in (None, "") for p in points):
        columns.append(("fitted", "fitted_over_measured"))
    header = "| latency | algorithm | points | CPU-bound |"
    for name, _ in columns:
        label = f"{name} α" if name != "fitted" else "fitted constants"
        header += f" {label}: within 10 % | {label}: sim / measured |"
    lines = [header, "| ---: | --- | ---: | ---: |" + " ---: | ---: |" * len(columns)]
    keys = sorted({(p["latency_us"], p["algorithm"]) for p in points},
                  key=lambda k: (k[0], CROSSOVER_ORDER.index(k[1])
                                 if k[1] in CROSSOVER_ORDER else 9))
    for latency, algorithm in keys:
        group = [p for p in points if (p["latency_us"], p["algorithm"]) == (latency, algorithm)]
        honest = crossover_honest(group)
        name = "selector" if algorithm == "allreduce" else algorithm
        line = f"| {crossover_label(latency)} | {name} | {len(group)} | {len(group) - len(honest)} |"
        for _, column in columns:
            ratios = [p[column] for p in honest]
            line += f" {sum(abs(r - 1) <= 0.1 for r in ratios)} | {ratio_summary(ratios)} |"
        lines.append(line)
    if points and "miss_kind" in points[0]:
        # Data with the per-point kinds also gets the sweep's totals.
        honest = crossover_honest(points)
        line = f"| all | all | {len(points)} | {len(points) - len(honest)} |"
        for _, column in columns:
            ratios = [p[column] for p in honest]
            line += (f" **{sum(abs(r - 1) <= 0.1 for r in ratios)}** | "
                     f"{ratio_summary(ratios)} |")
        lines.append(line)
    return "\n".join(lines)


def simulated_crossover_misses_table(points):
    """Every point of sim/calibrate_crossover.py that is not CPU-bound and
    that the fitted constants miss by more than 10 %, with the probed α's
    and bench's α–β ratios beside it, so that a miss is named per point."""
    kinds = bool(points) and "miss_kind" in points[0]
    # Data merged from repeats (sim/crossover_repeats.py): measured is their
    # median, and the range of the repeats stands beside it.
    spread = any((p.get("repeats") or 1) > 1 for p in points)
    lines = ["| latency | algorithm | N | bytes | measured µs |"
             + (" repeats µs |" if spread else "") + " fitted µs | fitted / measured | "
             "probed / measured | α–β / measured |" + (" CPU share | kind |" if kinds else ""),
             "| ---: | --- | ---: | ---: | ---: |" + (" ---: |" if spread else "")
             + " ---: | ---: | ---: | ---: |" + (" ---: | --- |" if kinds else "")]
    misses = [p for p in crossover_honest(points) if abs(p["fitted_over_measured"] - 1) > 0.1]
    for p in sorted(misses, key=lambda p: (
            p["latency_us"], CROSSOVER_ORDER.index(p["algorithm"])
            if p["algorithm"] in CROSSOVER_ORDER else 9, p["workers"], p["bytes"])):
        name = "selector" if p["algorithm"] == "allreduce" else p["algorithm"]
        lines.append(
            f"| {crossover_label(p['latency_us'])} | {name} | {p['workers']:.0f} | "
            f"{p['bytes']:,.0f} | {p['measured_us']:,.0f} | "
            + (f"{p['measured_low_us']:,.0f}–{p['measured_high_us']:,.0f} | " if spread else "")
            + f"{p['fitted_us']:,.0f} | "
            f"{p['fitted_over_measured']:.2f} | {p['probed_over_measured']:.2f} | "
            f"{p['alpha_beta_us'] / p['measured_us']:.2f} |"
            + (f" {p['cpu_share']:.2f} | {p['miss_kind']} |" if kinds else ""))
    return "\n".join(lines)


def simulated_crossover_miss_kinds_table(points):
    """The misses of simulated_crossover_misses_table counted by kind
    (sim/calibrate_crossover.py's miss_kind), over and under."""
    misses = [p for p in crossover_honest(points) if abs(p["fitted_over_measured"] - 1) > 0.1]
    honest = len(crossover_honest(points))
    lines = ["| kind | misses | simulator above | simulator below |",
             "| --- | ---: | ---: | ---: |"]
    # Most misses first; ties by name, so that the page renders the same
    # every time (a set's order changes with the interpreter's hash seed).
    for kind in sorted({p["miss_kind"] for p in misses},
                       key=lambda k: (-sum(p["miss_kind"] == k for p in misses), k)):
        group = [p for p in misses if p["miss_kind"] == kind]
        above = sum(p["fitted_over_measured"] > 1 for p in group)
        lines.append(f"| {kind} | {len(group)} | {above} | {len(group) - above} |")
    lines.append(f"| all | {len(misses)} of {honest} | "
                 f"{sum(p['fitted_over_measured'] > 1 for p in misses)} | "
                 f"{sum(p['fitted_over_measured'] < 1 for p in misses)} |")
    return "\n".join(lines)


def simulated_calibration_table(points):
    """The table of sim/calibrate.py: each measured point of the emulated
    cluster beside the simulator under CM02 and LV08 (and the fitted
    constants, where the run had them) and bench's alpha-beta prediction.
    A case column (compression, swept flags) where any point has one;
    CPU-bound points marked: what the simulator misses there is CPU."""
    cases = any((p.get("compression") or "none") != "none" or p.get("sweep") or
                (p.get("ranks_per_host") or 1) > 1 for p in points)
    fitted = any(p.get("fitted_step_ms") is not None for p in points)
    header = ["strategy"] + (["case"] if cases else []) + [
        "N", "K", "measured ms (min–max)", "α–β ms", "CM02 ms", "CM02 / measured",
        "LV08 ms", "LV08 / measured"] + (["fitted ms", "fitted / measured"] if fitted else [])
    lines = ["| " + " | ".join(header) + " |",
             "| --- | " + ("--- | " if cases else "") +
             " | ".join("---:" for _ in header[(2 if cases else 1):]) + " |"]
    order = {"ring": 0, "ps": 1, "ps-colocated": 2}

    def case(p):
        parts = [c for c in [p.get("compression") if (p.get("compression") or "none") != "none"
                             else "", f"`{p['sweep']}`" if p.get("sweep") else "",
                             f"{p['ranks_per_host']:.0f} per host"
                             if (p.get("ranks_per_host") or 1) > 1 else ""] if c]
        return ", ".join(parts) or "–"

    def bound(p):
        value = p.get("cpu_bound")
        return value is True or str(value).lower() in ("true", "1", "yes")

    for p in sorted(points, key=lambda p: (p["workers"], order.get(p["strategy"], 9),
                                           p["servers"], case(p))):
        k = "–" if p["strategy"] == "ring" else f"{p['servers']:.0f}"
        cells = [strategy_label(p)] + ([case(p)] if cases else []) + [
            f"{p['workers']:.0f}", k,
            f"{p['measured_step_ms']:.0f} ({p['measured_step_ms_min']:.0f}–"
            f"{p['measured_step_ms_max']:.0f}){' **CPU-bound**' if bound(p) else ''}",
            number(p.get('alpha_beta_step_ms')),
            f"{p['cm02_step_ms']:.0f}", f"{p['cm02_over_measured']:.2f}",
            f"{p['lv08_step_ms']:.0f}", f"{p['lv08_over_measured']:.2f}"]
        if fitted:
            cells += [number(p.get("fitted_step_ms")),
                      number(p.get("fitted_over_measured"), "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_mark(p):
    return " **CPU-bound**" if point_is_cpu_bound(p) else ""


def megabytes(value):
    return "–" if value is None else f"{value / 1e6:.2f}"


def points_table(points):
    """Any bench/scaling.py points file, in the file's order: what ran, its
    step (median, min–max), the exposed communication, the busiest link's
    bytes, the prediction and how busy the machine was. CPU-bound points
    are marked in the last column; the rows are not ranked."""
    columns = [("strategy", lambda p: strategy_label(p) if p.get("servers") is not None
                else p["strategy"])]
    if any(p.get("compression") for p in points):
        columns.append(("compression", lambda p: p.get("compression") or "–"))
    if any(p.get("sweep") for p in points):
        columns.append(("flags", lambda p: f"`{p['sweep']}`" if p.get("sweep") else "–"))
    columns += [
        ("N", lambda p: f"{p['workers']:.0f}"),
        ("K", lambda p: "–" if p["strategy"] in ("ring", "local") else
         number(p.get("servers"))),
        ("repeats", lambda p: number(p.get("repeats"))),
        ("step ms", lambda p: f"{p['step_ms']:.1f} ({p['step_ms_min']:.1f}–"
                              f"{p['step_ms_max']:.1f})"),
        ("exposed ms", lambda p: number(p.get("exposed_ms"), "{:.1f}")),
        ("busiest link MB", lambda p: megabytes(p.get("busiest_link_bytes"))),
        ("predicted ms", lambda p: number(p.get("predicted_step_ms"), "{:.1f}")),
        ("retrans. (drops)", lambda p: f"{number(p.get('retrans_segments'))} "
                                       f"({number(p.get('port_drops'))})"),
        ("machine busy (un-niced, max)",
         lambda p: f"{number(100 * machine_busy_of(p))}%{busy_window_mark(p)}{cpu_mark(p)}"
         if machine_busy_of(p) is not None else "–"),
    ]
    lines = ["| " + " | ".join(name for name, _ in columns) + " |",
             "| " + " | ".join("---" if i < 2 else "---:" for i in range(len(columns))) + " |"]
    for p in points:
        lines.append("| " + " | ".join(cell(p) for _, cell in columns) + " |")
    lines.append("")
    lines.append(cpu_footer(points))
    return "\n".join(lines)


ALGORITHMS = {"gradsync_ring": "ring", "gradsync_halving_doubling": "halving-doubling",
              "gradsync_tree": "tree", "gradsync_ps": "PS", "gradsync_allreduce": "selector"}


def size_label(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.0f} {unit}"
    return f"{size:.0f} B"


def crossover_table(points):
    """A bench/allreduce_crossover.py sweep as its map: the fastest single
    algorithm (the selector is not one) per link latency, N and size, with
    the runner-up's time over its time. A cell where any algorithm was
    CPU-bound says so and names no winner: it would rank the machine."""
    cells = {}
    for p in points:
        if p["algorithm"] == "gradsync_allreduce":
            continue
        cells.setdefault((p["latency_us"], p["workers"], p["bytes"]), []).append(p)
    sizes = sorted({key[2] for key in cells})
    lines = ["| latency | N | " + " | ".join(size_label(s) for s in sizes) + " |",
             "| ---: | ---: | " + " | ".join("---" for _ in sizes) + " |"]
    for latency, workers in sorted({key[:2] for key in cells}):
        row = []
        for size in sizes:
            cell = sorted(cells.get((latency, workers, size), []), key=lambda p: p["time_us"])
            if not cell:
                row.append("–")
                continue
            if any(is_cpu_bound(job_cpu_share=p.get("cpu_share")) for p in cell):
                row.append("CPU-bound")  # marked, not ranked
                continue
            margin = (f" {cell[1]['time_us'] / cell[0]['time_us']:.2f}×"
                      if len(cell) > 1 else "")
            row.append(ALGORITHMS.get(cell[0]["algorithm"], cell[0]["algorithm"]) + margin)
        latency_label = (f"{latency / 1000:g} ms" if latency >= 1000 else f"{latency:g} µs")
        lines.append(f"| {latency_label} | {workers} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("*Each cell: the fastest algorithm and the runner-up's time over its time. "
                 f"{describe_cpu_bound()} (bench/cpu_bound.py) for some algorithm of the cell: "
                 "no winner is named there, the CPU and not the network set its times.*")
    return "\n".join(lines)


def crossover_points_table(points):
    """Every point of a bench/allreduce_crossover.py sweep: per latency, N and
    size, each algorithm's milliseconds (the slowest rank's mean) and in
    brackets its time over the α–β prediction; the fastest single algorithm
    in bold, `*` on a CPU-bound point; the selector's time over the best
    single all-reduce's."""
    algorithms = [a for a in ALGORITHMS if any(p["algorithm"] == a for p in points)]
    cells = {}
    for p in points:
        cells.setdefault((p["latency_us"], p["workers"], p["bytes"]), {})[p["algorithm"]] = p
    lines = ["| latency | N | size | " + " | ".join(ALGORITHMS[a] for a in algorithms)
             + " | fastest | selector / best all-reduce |",
             "| ---: | ---: | ---: | " + " | ".join("---:" for _ in algorithms) + " | --- | ---: |"]
    for (latency, workers, size), cell in sorted(cells.items()):
        singles = {a: p for a, p in cell.items() if a != "gradsync_allreduce"}
        bound = any(is_cpu_bound(job_cpu_share=p.get("cpu_share")) for p in cell.values())
        fastest = None if bound else min(singles, key=lambda a: singles[a]["time_us"])
        allreduces = [p["time_us"] for a, p in singles.items() if a != "gradsync_ps"]
        selector = cell.get("gradsync_allreduce")
        row = []
        for a in algorithms:
            p = cell.get(a)
            if p is None:
                row.append("–")
                continue
            text = f"{p['time_us'] / 1000:.2f}"
            if p.get("predicted_us"):
                text += f" ({p['time_us'] / p['predicted_us']:.2f})"
            if is_cpu_bound(job_cpu_share=p.get("cpu_share")):
                text += "*"
            row.append(f"**{text}**" if a == fastest else text)
        ratio = (f"{selector['time_us'] / min(allreduces):.2f}"
                 if selector and allreduces else "–")
        latency_label = (f"{latency / 1000:g} ms" if latency >= 1000 else f"{latency:g} µs")
        lines.append(f"| {latency_label} | {workers} | {size_label(size)} | " + " | ".join(row)
                     + f" | {ALGORITHMS.get(fastest, 'CPU-bound') if fastest else 'CPU-bound'}"
                     f" | {ratio} |")
    lines.append("")
    lines.append("*Cells: milliseconds per all-reduce, the slowest rank's mean; in brackets the "
                 "measured time over the α–β prediction; bold the fastest single algorithm "
                 f"(the selector is not one); `*` {describe_cpu_bound()} (bench/cpu_bound.py): "
                 "a row with such a point names no fastest, its times rank the CPU, not the "
                 "network.*")
    return "\n".join(lines)


def accuracy_table(rows):
    """bench/compression_accuracy.py's rows: final test accuracy per seed, the
    mean, and the mean's difference from the uncompressed run's."""
    seeds = max(len(r["accuracy"]) for r in rows)
    lines = ["| model | method | " + " | ".join(f"seed {i + 1}" for i in range(seeds))
             + " | mean | mean − none |",
             "| --- | --- | " + " | ".join("---:" for _ in range(seeds)) + " | ---: | ---: |"]
    for r in rows:
        accuracy = [f"{a:.2f}" for a in r["accuracy"]] + ["–"] * (seeds - len(r["accuracy"]))
        difference = "–" if r["method"] == "none" else f"{r['difference']:+.2f}"
        lines.append(f"| {r['model']} | {r['method']} | " + " | ".join(accuracy)
                     + f" | {r['mean']:.2f} | {difference} |")
    return "\n".join(lines)


def schedule_of(p):
    """'fifo' or 'priority' from a point's swept --schedule, else None."""
    for flag in (p.get("sweep") or "").split():
        if flag.startswith("--schedule="):
            return flag.split("=", 1)[1]
    return None


def schedule_pairs_table(points):
    """fifo beside priority (a bench/scaling.py sweep over
    --sweep="--schedule=fifo;--schedule=priority"): one row per model, link
    and job shape, in the data's order, with each schedule's step, exposed
    communication and compute, priority's step over fifo's, and how busy
    the machine was during the pair (the larger of the two). A pair with
    either point CPU-bound is marked, and its ratio is not a verdict."""
    pairs = {}
    order = []
    for p in points:
        schedule = schedule_of(p)
        if schedule not in ("fifo", "priority"):
            continue
        key = (p["model"], p["link"], strategy_label(p), p["workers"], p.get("servers"))
        if key not in pairs:
            pairs[key] = {}
            order.append(key)
        pairs[key][schedule] = p
    lines = ["| model | link | strategy | N | step ms fifo | step ms priority | priority / fifo | "
             "exposed ms fifo | exposed ms priority | compute ms fifo | compute ms priority | "
             "machine busy (un-niced, max) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in order:
        fifo, priority = pairs[key].get("fifo"), pairs[key].get("priority")
        if fifo is None or priority is None:
            continue
        busy = max(machine_busy_of(fifo) or 0, machine_busy_of(priority) or 0)
        mark = (busy_window_mark(fifo) or busy_window_mark(priority)) + (
            cpu_mark(fifo) or cpu_mark(priority))
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]:.0f} | {fifo['step_ms']:.0f} | "
            f"{priority['step_ms']:.0f} | {priority['step_ms'] / fifo['step_ms']:.2f} | "
            f"{number(fifo.get('exposed_ms'))} | {number(priority.get('exposed_ms'))} | "
            f"{number(fifo.get('measured_compute_ms'))} | "
            f"{number(priority.get('measured_compute_ms'))} | {100 * busy:.0f}%{mark} |")
    lines.append("")
    lines.append(cpu_footer([p for pair in pairs.values() for p in pair.values()]))
    return "\n".join(lines)


def quick_check_table(points):
    """gpu_check.sh --quick's table as tools/gpu_results.py keeps it
    (checks.csv): each check's status and what it measured, in the order the
    check ran them."""
    lines = ["| status | check | what it measured |", "| --- | --- | --- |"]
    for p in points:
        detail = str(p["detail"]).replace("|", "\\|")
        lines.append(f"| {p['status']} | `{p['check']}` | {detail} |")
    return "\n".join(lines)


def gpu_speed_table(points):
    """tools/gpu_results.py's speed.csv: per model and batch, gradsync's
    training step beside PyTorch's in each precision, and gradsync's speed as
    a multiple of PyTorch's (over 1: gradsync is faster). A FAIL is a point
    under issue 39's bar. The defaults' points only: a variant's (a row run
    with a flag set) is in gpu_speed_variants."""
    points = [p for p in points if not p.get("variant")]
    precisions = [p for p in ("fp32", "tf32", "bf16") if any(q["precision"] == p for q in points)]
    cells, rows = {}, []
    for p in points:
        key = (p["model"], p["batch"])
        if key not in rows:
            rows.append(key)
        cells[key + (p["precision"],)] = p
    header = ["model", "batch"]
    for precision in precisions:
        header += [f"{precision}: gradsync ms", "PyTorch ms", "speed"]
    lines = ["| " + " | ".join(header) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in header[2:]) + " |"]
    for model, batch in rows:
        row = [model, f"{batch:.0f}"]
        for precision in precisions:
            p = cells.get((model, batch, precision))
            if p is None:
                row += ["–", "–", "–"]
                continue
            mark = " (FAIL)" if p["status"] == "FAIL" else ""
            row += [f"{p['gradsync_step_ms']:.2f}", f"{p['pytorch_step_ms']:.2f}",
                    f"{p['speed']:.2f}×{mark}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def gpu_speed_variants_table(points):
    """tools/gpu_results.py's speed.csv: each variant's point (gradsync run
    with a flag set, right after the default point) beside the default's,
    against the same PyTorch step; a variant's ratio is marked where its row
    says it is under issue 39's bar (the variant is not judged, the default
    is)."""
    defaults = {(p["model"], p["batch"], p["precision"]): p
                for p in points if not p.get("variant")}
    lines = ["| model | batch | precision | flag | gradsync ms, default | with the flag | "
             "PyTorch ms | speed, default | with the flag |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for p in points:
        if not p.get("variant"):
            continue
        default = defaults.get((p["model"], p["batch"], p["precision"]), {})
        mark = " (under the bar)" if p.get("bar") == "under" else ""
        lines.append(
            f"| {p['model']} | {p['batch']:.0f} | {p['precision']} | `{p['variant']}` | "
            f"{number(default.get('gradsync_step_ms'), '{:.2f}')} | "
            f"{p['gradsync_step_ms']:.2f} | {p['pytorch_step_ms']:.2f} | "
            f"{number(default.get('speed'), '{:.2f}×')} | {p['speed']:.2f}×{mark} |")
    return "\n".join(lines)


def gpu_layers_table(points):
    """tools/gpu_results.py's layers.csv: one ResNet-18 step's device time by
    kind of operation, gradsync's (bench/layer_profile) and PyTorch's
    (bench/pytorch_layer_profile.py), ms per step; gradsync's unmarked step
    and the host's time to queue the profiled step's operations ('–' where
    the profile did not measure it)."""
    lines = ["| whose | precision | batch | device ms | conv | batch norm | element-wise | "
             "other | unmarked step ms | host ms |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in points:
        whose = p["source"] + (f" (`{p['variant']}`)" if p.get("variant") else "")
        lines.append(
            f"| {whose} | {p['precision']} | {p['batch']:.0f} | {p['device_ms']:.2f} | "
            f"{p['conv_ms']:.2f} | {p['batch_norm_ms']:.2f} | {p['elementwise_ms']:.2f} | "
            f"{p['other_ms']:.2f} | {number(p.get('unmarked_step_ms'), '{:.2f}')} | "
            f"{number(p.get('host_ms'), '{:.2f}')} |")
    return "\n".join(lines)


def pytorch_layouts_table(points):
    """bench/pytorch_layouts.py's points: PyTorch's ResNet-18 step per
    layout and precision (wall: the loss read back each step; queued: steps
    queued back to back, the GPU's own pace)."""
    lines = ["| batch | precision | layout | wall ms | events ms | queued ms/step |",
             "| ---: | --- | --- | ---: | ---: | ---: |"]
    for p in points:
        lines.append(f"| {p['batch']:.0f} | {p['precision']} | {p['layout']} | "
                     f"{p['wall_ms']:.2f} | {p['events_ms']:.2f} | {p['queued_ms']:.2f} |")
    return "\n".join(lines)


TABLES = {"accuracy": accuracy_table, "sweep": sweep_table, "points": points_table,
          "crossover": crossover_table, "crossover_points": crossover_points_table,
          "simulated_scaling": simulated_scaling_table,
          "simulated_hosts": simulated_hosts_table,
          "simulated_switch": simulated_switch_table,
          "simulated_anchors": simulated_anchors_table,
          "simulated_crossover": simulated_crossover_table,
          "simulated_crossover_misses": simulated_crossover_misses_table,
          "simulated_crossover_miss_kinds": simulated_crossover_miss_kinds_table,
          "simulated_calibration": simulated_calibration_table,
          "schedule_pairs": schedule_pairs_table,
          "quick_check": quick_check_table, "gpu_speed": gpu_speed_table,
          "gpu_speed_variants": gpu_speed_variants_table,
          "gpu_layers": gpu_layers_table, "pytorch_layouts": pytorch_layouts_table}


# --- Rendering ----------------------------------------------------------------------------

def render_marker(kind, arguments, results_dir):
    words = arguments.split()
    if kind == "table":
        if len(words) != 2 or words[0] not in TABLES:
            raise RenderError(f"table '{arguments}': give one of {', '.join(TABLES)} and "
                              "a data folder")
        return "\n" + TABLES[words[0]](load_points(results_dir, words[1])) + "\n"
    if kind == "value":
        if len(words) != 4:
            raise RenderError(f"value '{arguments}': give a data folder, column=value,..., "
                              "a column and a format like {:.0f}")
        folder, spec, column, fmt = words
        point = select(load_points(results_dir, folder), spec)
        # COLUMN/DIVISOR changes the unit: time_us/1000 is milliseconds.
        column, _, divisor = column.partition("/")
        if point.get(column) is None:
            raise RenderError(f"value '{arguments}': the point has no {column}")
        if isinstance(point[column], str):  # a text column, as it is
            if divisor:
                raise RenderError(f"value '{arguments}': {column} is text")
            return fmt.format(point[column])
        return fmt.format(point[column] / float(divisor or 1))
    if kind == "ratio":
        if len(words) != 5:
            raise RenderError(f"ratio '{arguments}': give a data folder, two column=value,... "
                              "selectors, a column and a format like {:.2f}")
        folder, spec_a, spec_b, column, fmt = words
        a = select(load_points(results_dir, folder), spec_a)
        # B may name its own source: SOURCE@column=value,... (another file's point).
        other, _, spec_b = spec_b.rpartition("@")
        b = select(load_points(results_dir, other or folder), spec_b)
        # COLUMN_A:COLUMN_B divides different columns (a step by its prediction).
        column_a, _, column_b = column.partition(":")
        column_b = column_b or column_a
        if not a.get(column_a) or not b.get(column_b):
            raise RenderError(f"ratio '{arguments}': a point has no {column}")
        return fmt.format(a[column_a] / b[column_b])
    if kind == "count":
        if len(words) not in (2, 3) or (len(words) == 3 and words[2] != "cpu_bound"):
            raise RenderError(f"count '{arguments}': give a data folder, column=value,... "
                              "and optionally cpu_bound")
        found = matching(load_points(results_dir, words[0]), words[1])
        if len(words) == 3:
            found = [p for p in found if point_is_cpu_bound(p)]
        return str(len(found))
    if kind == "nodata":
        if arguments.strip():
            raise RenderError("nodata takes no arguments")
        return "\n" + NO_DATA + "\n"
    if kind == "provenance":
        manifest = load_manifest(results_dir, arguments.strip())
        jobs = manifest.get("run_manifest") or {}
        commit = (jobs.get("git_commit") or manifest.get("git_commit") or "unknown")[:7]
        line = (f"build {commit}, {manifest.get('time', 'unknown')[:10]}, "
                f"`{manifest.get('command', '')}`")
        if manifest.get("transcribed_from"):
            line += (f" (manifest transcribed from {manifest['transcribed_from']}: the run did "
                     "not write one)")
        return "\n" + line + "\n"
    raise RenderError(f"unknown marker 'render:{kind}'")


def render_page(text, results_dir, page):
    """The page with every generated part rendered anew."""
    def replace(match):
        kind, arguments = match.group(1), match.group(2)
        try:
            body = render_marker(kind, arguments, results_dir)
        except RenderError as error:
            raise RenderError(f"{page}: {error}") from None
        return f"<!-- render:{kind}{' ' + arguments if arguments else ''} -->{body}<!-- render:end -->"
    if not MARKER.search(text):
        raise RenderError(f"{page}: renders nothing from data and has no render:nodata notice")
    return MARKER.sub(replace, text)


def pages(results_dir, other_pages):
    return sorted(os.path.join(results_dir, name) for name in os.listdir(results_dir)
                  if name.endswith(".md")) + list(other_pages)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a page differs from its data")
    parser.add_argument("--results_dir", default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument("--other_page", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    other_pages = args.other_page or (OTHER_PAGES if args.results_dir == RESULTS else [])
    differ = 0
    for path in pages(args.results_dir, other_pages):
        with open(path) as f:
            text = f.read()
        name = os.path.relpath(path, args.results_dir)
        try:
            rendered = render_page(text, args.results_dir, name)
        except RenderError as error:
            print(f"render_results: {error}", file=sys.stderr)
            return 2
        if rendered == text:
            continue
        if args.check:
            differ += 1
            print(f"render_results: {name} differs from its data "
                  "(tools/render_results.py rewrites it):", file=sys.stderr)
            sys.stderr.writelines(difflib.unified_diff(
                text.splitlines(True), rendered.splitlines(True), name, name + " (rendered)"))
        else:
            with open(path + ".tmp.render", "w") as f:
                f.write(rendered)
            os.replace(path + ".tmp.render", path)
            print(f"render_results: rewrote {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
