#!/usr/bin/python3
"""Writes docs/flags.md, the table of every gradsync flag, from the binary's
--helpfull, so the page cannot drift from the code.

  bazel build //tools:gradsync && /usr/bin/python3 tools/flags_doc.py
  /usr/bin/python3 tools/flags_doc.py --check   # exit 1 when docs/flags.md is stale

The table has one row per flag defined in gradsync's own sources (Abseil's
--flagfile and the like are left out): its name, default, the source file that
defines it, the commands that read it (from the file, below) and what to set
for a fair comparison of strategies (COMPARISON, below; empty where there is
nothing useful to say). Flags are listed as --helpfull lists them: by file,
then by name.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

REGENERATE = ("bazel build //tools:gradsync && "
              "/usr/bin/python3 tools/flags_doc.py")

# Which commands read the flags of a file. A file missing here gets an empty
# cell: add it when flags move.
COMMANDS_BY_FILE = {
    "tools/launch_command.cc": "launch",
    "tools/train_flags.cc": "train, run (and launch, after `--`)",
    "tools/cluster_flags.cc": "train, server, run",
    "tools/ps_flags.cc": "train, server, run",
    "allreduce/allreduce_flags.cc": "train, run",
}

# What to set when comparing strategies, by flag name.
COMPARISON = {
    "sync": "The strategy under test; compare every one on the same other flags.",
    "workers": "N. Sweep it (2, 4, 8): the ring's cost per link is flat in N, a PS with K = 1 grows ∝ N.",
    "servers": "K. For a PS, compare K = 1 and K = N; 0 for the all-reduces.",
    "netem": "Rate (and latency) of an emulated cluster (root): without it, loopback on a few cores measures the CPU.",
    "bucket_mb": "Keep equal across strategies. 1000 makes one bucket per step, to compare against the formulas.",
    "batch_size": "Per worker: keep equal across strategies (weak scaling).",
    "compute_ms": "Synthetic models: 0 makes a step its communication; a realistic value shows overlap with backward.",
    "model": "resnet50, vgg16, bert-base or custom have real networks' tensors without their arithmetic: communication studies on few cores.",
    "ps_chunk_kb": "Key size. The headline ran 64 (with the default 4096 every tensor under 4 MiB is one key); smaller keys cost CPU.",
    "ps_stream_window_kb": "The headline ran 32 at 100 Mbit/s; a window caps one stream at window/RTT, so scale it with the link.",
    "ps_colocate": "The colocated PS (K = N inside the workers): the same bytes per link as the ring.",
    "ps_colocated_servers": "BytePS's placement spectrum: c workers serve beside K − c separate servers.",
    "ps_partition": "balanced with --ps_colocated_servers: serving workers get smaller shares.",
    "ps_update": "worker does the all-reduce's arithmetic (comparable bit for bit); server is needed for ssp and asp.",
    "ps_consistency": "bsp to compare with an all-reduce; ssp and asp only in straggler studies.",
    "allreduce_eager_kb": "Leave the default; 0 brings back the incast it prevents (halving-doubling 1.25-1.53x slower on 16 MiB, docs/results/allreduce_family.md).",
    "allreduce_chunk_kb": "The all-reduces' pipeline chunk: leave the default unless the ring itself is tuned, and say so.",
    "ring_chunk_kb": "Old name of --allreduce_chunk_kb; prefer the new one.",
    "max_steps": "Short runs for timing (15 in the headline, with --warmup_steps=3).",
    "warmup_steps": "Steps left out of the means: keep equal across strategies.",
    "precision": "Keep equal across strategies; on GPUs tf32 is PyTorch's default for convolutions, bf16 what PyTorch users tuning for speed run (autocast), fp32 what parity checks use.",
    "cudnn_graph": "Leave at auto (the fastest measured on an H200, docs/results/gpu.md); keep equal across strategies.",
    "cudnn_layout": "Leave at auto (the fastest measured on an H200, docs/results/gpu.md); keep equal across strategies.",
    "threads": "BLAS threads per worker: N workers × threads should not exceed the cores, or the CPU is measured.",
    "straggler": "Slowness as an experiment parameter, the same for every strategy.",
    "straggler_jitter_ms": "Transient slowness, reproducible from --seed.",
    "lr_scaling": "linear keeps the global learning rate as N changes (the batch grows with N).",
    "seed": "Keep equal: every strategy then sees the same samples and initial parameters.",
    "trace": "A Perfetto timeline of the first --trace_steps steps, servers' spans included.",
}

FLAG_LINE = re.compile(r"^    --(\S+) \((.*)$")
FILE_LINE = re.compile(r"^  Flags from (.+):$")


def parse_helpfull(text):
    """[(file, name, description, default)] of every flag in --helpfull's
    text; Abseil prints '    --name (description); default: value;' with
    continuation lines indented further."""
    flags, current_file, entry = [], None, None

    def finish():
        if entry is None:
            return
        body = " ".join(entry["lines"])
        match = re.match(r"^(.*)\); default: (.*);$", body, re.S)
        if not match:
            sys.exit(f"flags_doc: cannot read the entry of --{entry['name']}: {body!r}")
        flags.append((entry["file"], entry["name"], match.group(1), match.group(2)))

    for line in text.splitlines():
        file_match = FILE_LINE.match(line)
        flag_match = FLAG_LINE.match(line)
        if file_match:
            finish()
            entry = None
            current_file = file_match.group(1).lstrip("./")
        elif flag_match and current_file is not None:
            finish()
            entry = {"file": current_file, "name": flag_match.group(1),
                     "lines": [flag_match.group(2)]}
        elif entry is not None and line.startswith("      "):
            entry["lines"].append(line.strip())
        elif entry is not None and not line.strip():
            finish()
            entry = None
    finish()
    return [f for f in flags if not f[0].startswith("absl/")]


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render(flags):
    lines = [
        "# gradsync flags",
        "",
        "Generated from `gradsync --helpfull` by `tools/flags_doc.py`; do not edit by hand.",
        f"After a flag changes, regenerate with `{REGENERATE}`;",
        "`bazel test //tools:flags_doc_test` fails while this page is stale.",
        "",
        "The one `gradsync` binary defines every flag below for all its commands; \"read by\" says",
        "which commands use it. \"For a comparison\" says what to set when comparing strategies",
        "(empty: the default is fine). Sizes in KiB and MiB are 1024-based.",
        "",
        "| flag | default | read by | what it does | for a comparison |",
        "| --- | --- | --- | --- | --- |",
    ]
    for file, name, description, default in flags:
        default = default if default not in ("", '""') else "(empty)"
        lines.append(f"| `--{name}` | `{cell(default)}` | {COMMANDS_BY_FILE.get(file, '')} "
                     f"(`{file}`) | {cell(description)} | {cell(COMPARISON.get(name, ''))} |")
    return "\n".join(lines) + "\n"


def helpfull(binary):
    # Abseil's --helpfull prints to stdout and exits 1.
    result = subprocess.run([binary, "train", "--helpfull"], capture_output=True, text=True)
    if "Flags from" not in result.stdout:
        sys.exit(f"flags_doc: `{binary} train --helpfull` printed no flags "
                 f"(exit {result.returncode}): {result.stderr[-2000:]}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradsync", default="bazel-bin/tools/gradsync")
    parser.add_argument("--out", default="docs/flags.md")
    parser.add_argument("--check", action="store_true",
                        help="compare with --out instead of writing it; exit 1 if it differs")
    args = parser.parse_args()
    if not os.access(args.gradsync, os.X_OK):
        sys.exit(f"flags_doc: {args.gradsync} is missing: bazel build //tools:gradsync")
    page = render(parse_helpfull(helpfull(args.gradsync)))
    if not args.check:
        with open(args.out, "w") as f:
            f.write(page)
        print(f"wrote {args.out}")
        return
    try:
        with open(args.out) as f:
            current = f.read()
    except OSError as error:
        current = ""
        print(f"flags_doc: cannot read {args.out}: {error}", file=sys.stderr)
    if current != page:
        diff = difflib.unified_diff(current.splitlines(), page.splitlines(), args.out,
                                    "generated", lineterm="", n=0)
        print("\n".join(list(diff)[:40]), file=sys.stderr)
        sys.exit(f"{args.out} is stale (the flags changed). Regenerate it from the "
                 f"repository root with:\n  {REGENERATE}")
    print(f"{args.out} is up to date")


if __name__ == "__main__":
    main()
