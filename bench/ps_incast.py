#!/usr/bin/env python3
"""Who waits on whom at the parameter servers: a step-by-step reading of the
servers' trace spans.

A job run with --sync=ps --trace=DIR/trace.json has, per server, key, worker
and step, a "push" span (the key's first part arriving to its last) and a
"result" span (the key's first result write to its last), written by the
servers (ps/server/server.cc) and merged by worker 0. Under BSP a key's results
leave only once every worker's push of it arrived, so the step is held by
the slowest push into each server: when TCP shares a server's port unevenly
among its N senders, the pushes end far apart and the results bunch up
behind the last.

For every server and traced step this prints, in ms from the first push of
that step arriving at any server (the step's origin, as the servers see it):
  - when this server's first push part arrived;
  - when the workers' pushes to it ended: earliest, median, latest (over
    workers, each worker's push = its last key's), and the spread latest −
    earliest;
  - when the server's last result write ended.
and, at the end, the medians over steps and servers. Compare the last push
with S/B: with equal shares every push ends together, at about S/B, and the
results follow within the tail N·b/B.

    /usr/bin/python3 bench/ps_incast.py runs/x/trace.json [--skip_steps=3]
"""

import argparse
import collections
import json
import re
import statistics
import sys

SPAN = re.compile(r"server (\d+): (push from|result to) worker (\d+), key (\d+), step (\d+)")


def spans(trace):
    """{(kind, server, worker, key, step): (start_us, end_us)} from the
    servers' nestable async events."""
    opened = {}
    found = {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") not in ("b", "e"):
            continue
        match = SPAN.fullmatch(event.get("name", ""))
        if not match:
            continue
        server, kind, worker, key, step = match.groups()
        ident = ("push" if kind == "push from" else "result", int(server), int(worker),
                 int(key), int(step))
        if event["ph"] == "b":
            opened[(ident, event.get("pid"), event.get("id"))] = event["ts"]
        else:
            start = opened.pop((ident, event.get("pid"), event.get("id")), None)
            if start is not None:
                found[ident] = (start, event["ts"])
    return found


def per_server_step(found):
    """{(server, step): {"first_push": us, "push_end": {worker: us},
    "last_result": us}}."""
    table = collections.defaultdict(lambda: {"first_push": None, "push_end": {},
                                             "last_result": None})
    for (kind, server, worker, _key, step), (start, end) in found.items():
        row = table[(server, step)]
        if kind == "push":
            row["first_push"] = start if row["first_push"] is None else min(row["first_push"],
                                                                            start)
            row["push_end"][worker] = max(row["push_end"].get(worker, end), end)
        else:
            row["last_result"] = end if row["last_result"] is None else max(row["last_result"],
                                                                             end)
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("trace", help="the merged trace.json of a --sync=ps job")
    parser.add_argument("--skip_steps", type=int, default=3,
                        help="leave out the first steps (connection set-up, warm-up)")
    args = parser.parse_args()
    with open(args.trace) as f:
        found = spans(json.load(f))
    if not found:
        sys.exit(f"ps_incast: {args.trace} has no server spans; run the job with --sync=ps "
                 "--trace=<dir>/trace.json (separate or colocated servers)")
    table = per_server_step(found)
    first_step = min(step for _, step in table)
    origin = {}
    for (_server, step), row in table.items():
        if row["first_push"] is not None:
            origin[step] = min(origin.get(step, row["first_push"]), row["first_push"])
    print("ms from the step's first arrival at any server\n"
          "server step  first arrival  pushes ended: earliest / median / latest (spread)"
          "   last result ended")
    firsts, spreads, latest, results = [], [], [], []
    for (server, step) in sorted(table, key=lambda k: (k[1], k[0])):
        if step < first_step + args.skip_steps:
            continue
        row = table[(server, step)]
        if not row["push_end"] or row["last_result"] is None:
            continue
        zero = origin[step]
        first = (row["first_push"] - zero) / 1000
        ends = sorted((end - zero) / 1000 for end in row["push_end"].values())
        result = (row["last_result"] - zero) / 1000
        firsts.append(first)
        spreads.append(ends[-1] - ends[0])
        latest.append(ends[-1])
        results.append(result)
        print(f"{server:6d} {step:4d}  {first:13.1f}  {ends[0]:7.1f} / "
              f"{statistics.median(ends):7.1f} / {ends[-1]:7.1f} ({ends[-1] - ends[0]:6.1f})"
              f"   {result:7.1f}")
    if not spreads:
        sys.exit(f"ps_incast: no complete step after the first {args.skip_steps}")
    print(f"\nmedian over {len(spreads)} server-steps: first arrival {statistics.median(firsts):.1f}"
          f" ms, pushes' spread {statistics.median(spreads):.1f} ms (max {max(spreads):.1f}), "
          f"last push {statistics.median(latest):.1f} ms (max {max(latest):.1f}), last result "
          f"{statistics.median(results):.1f} ms (max {max(results):.1f})")


if __name__ == "__main__":
    main()
