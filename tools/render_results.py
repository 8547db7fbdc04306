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
column=value pairs and formats one column; `provenance` is the sweep's
build, date and command. Between a marker and its end, everything is the
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

MARKER = re.compile(r"<!-- render:(\w+)\s+(.*?)\s*-->(.*?)<!-- render:end -->", re.DOTALL)


class RenderError(Exception):
    """A marker or its data is wrong: one message naming the page and marker."""


def load_points(results_dir, folder):
    path = os.path.join(results_dir, folder, "points.csv")
    if not os.path.exists(path):
        raise RenderError(f"{folder}/points.csv does not exist")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            try:
                row[key] = float(value) if value not in ("", None) else None
            except ValueError:
                pass  # text columns: strategy, model, link, ...
    return rows


def load_manifest(results_dir, folder):
    path = os.path.join(results_dir, folder, "sweep.json")
    if not os.path.exists(path):
        raise RenderError(f"{folder}/sweep.json does not exist")
    with open(path) as f:
        return json.load(f).get("manifest", {})


def select(points, spec):
    """The one point whose columns equal spec's 'column=value,...'."""
    wanted = {}
    for pair in spec.split(","):
        key, _, value = pair.partition("=")
        if not value:
            raise RenderError(f"'{spec}': each selector is column=value")
        wanted[key.strip()] = value.strip()

    def matches(point):
        for key, value in wanted.items():
            have = point.get(key)
            if isinstance(have, float):
                try:
                    if have != float(value):
                        return False
                except ValueError:
                    return False
            elif have != value:
                return False
        return True

    found = [p for p in points if matches(p)]
    if len(found) != 1:
        raise RenderError(f"'{spec}' selects {len(found)} points; it must select exactly one")
    return found[0]


# --- Tables -------------------------------------------------------------------------------

def strategy_label(p):
    if p["strategy"] == "ps":
        return "ps, K=1" if p["servers"] == 1 else "ps, K=N"
    if p["strategy"] == "ps-colocated":
        return "ps, colocated"
    return p["strategy"]


def number(value, fmt="{:.0f}"):
    return "–" if value is None else fmt.format(value)


def sweep_table(points):
    """The table of a sweep of bench/scaling.py: one row per point but the
    reference, by N then strategy, as the headline page has it."""
    header = ("| strategy | N | K | step ms | predicted ms | measured / predicted | "
              "retrans. (RTOs) per job | drops | job CPU / machine busy |")
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
            f"{number(100 * (p.get('machine_busy_unniced_max') or 0))}% |")
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


def simulated_calibration_table(points):
    """The table of sim/calibrate.py: each measured point of the emulated
    cluster beside the simulator under CM02 and LV08 and bench's alpha-beta
    prediction."""
    lines = ["| strategy | N | K | measured ms (min–max) | α–β ms | CM02 ms | CM02 / measured | "
             "LV08 ms | LV08 / measured |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    order = {"ring": 0, "ps": 1, "ps-colocated": 2}
    for p in sorted(points, key=lambda p: (p["workers"], order.get(p["strategy"], 9),
                                           p["servers"])):
        k = "–" if p["strategy"] == "ring" else f"{p['servers']:.0f}"
        lines.append(
            f"| {strategy_label(p)} | {p['workers']:.0f} | {k} | "
            f"{p['measured_step_ms']:.0f} ({p['measured_step_ms_min']:.0f}–"
            f"{p['measured_step_ms_max']:.0f}) | {number(p.get('alpha_beta_step_ms'))} | "
            f"{p['cm02_step_ms']:.0f} | {p['cm02_over_measured']:.2f} | "
            f"{p['lv08_step_ms']:.0f} | {p['lv08_over_measured']:.2f} |")
    return "\n".join(lines)


TABLES = {"sweep": sweep_table, "simulated_scaling": simulated_scaling_table,
          "simulated_calibration": simulated_calibration_table}


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
        if point.get(column) is None:
            raise RenderError(f"value '{arguments}': the point has no {column}")
        return fmt.format(point[column])
    if kind == "provenance":
        manifest = load_manifest(results_dir, arguments.strip())
        jobs = manifest.get("run_manifest") or {}
        commit = (jobs.get("git_commit") or manifest.get("git_commit") or "unknown")[:7]
        return (f"\nbuild {commit}, {manifest.get('time', 'unknown')[:10]}, "
                f"`{manifest.get('command', '')}`\n")
    raise RenderError(f"unknown marker 'render:{kind}'")


def render_page(text, results_dir, page):
    """The page with every generated part rendered anew."""
    def replace(match):
        kind, arguments = match.group(1), match.group(2)
        try:
            body = render_marker(kind, arguments, results_dir)
        except RenderError as error:
            raise RenderError(f"{page}: {error}") from None
        return f"<!-- render:{kind} {arguments} -->{body}<!-- render:end -->"
    return MARKER.sub(replace, text)


def pages(results_dir):
    return sorted(os.path.join(results_dir, name) for name in os.listdir(results_dir)
                  if name.endswith(".md"))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a page differs from its data")
    parser.add_argument("--results_dir", default=RESULTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    differ = 0
    for path in pages(args.results_dir):
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
