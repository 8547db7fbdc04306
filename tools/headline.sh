#!/usr/bin/env bash
# The headline experiment in one command: on an emulated cluster of 100 Mbit/s
# full-duplex links (one network namespace per process, core/launch/netem.h,
# with its default switch model), synchronize a 2.5 MB gradient (32 tensors,
# like a small CNN) among N = 2, 4, 8 workers with
#   - the ring all-reduce                 (busiest link: 2(N−1)/N·S per step)
#   - a parameter server, K = 1           (its link: N·S per step, ∝ N)
#   - parameter servers, K = N separate   (every link: S per step)
#   - a parameter server colocated with every worker (2(N−1)/N·S, like the ring)
# three times each, beside the single-worker reference, and compare every
# point with the α–β cost model fed by α and B measured through the same
# link. Compute is 0 ms so a step is its communication. Every point also
# reports TCP retransmissions, RTO timeouts, queue drops and CPU use, and is
# marked CPU-bound when the machine was over 70% busy. About 6 minutes.
# Needs root (network namespaces, tc).
#
# Every strategy runs with its own defaults: the parameter servers size their
# keys from the gradient and K and their HTTP/2 stream windows from the link
# (ps/key_size_rule.h, ps/stream_window_rule.h; at 100 Mbit/s and N = K = 8
# that is 64 KiB keys and 32 KiB windows, what this script once passed by
# hand). --ps_flags="..." adds PS flags to every job, to compare by hand.
#
#   tools/headline.sh [--repeats=3] [--out=runs/headline-...] [--publish]
#                     [--link=100mbit --model=custom:2.5:32] [--ps_flags="..."]
# One call of `gradsync compare` (bench/compare.py): prints the verdict table
# and writes points.csv, sweep.json, verdict.txt and compare.png in the run
# folder; --publish also copies the plot to docs/headline.png. 100 Mbit/s
# and 2.5 MB give the same S/B (~0.2 s) as 1 Gbit/s and 25 MB with a tenth of
# the CPU per second: on 2 cores the 2N processes of K = N at 1 Gbit/s ran out
# of CPU before the links filled; at 100 Mbit/s the N = 8 job uses about a
# quarter of the 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEATS=3
OUT="runs/headline-$(date +%Y%m%d-%H%M%S)"
PUBLISH=0
LINK=100mbit
MODEL=custom:2.5:32
PS_FLAGS=""
for arg in "$@"; do
  case "$arg" in
    --repeats=*) REPEATS="${arg#*=}" ;;
    --out=*) OUT="${arg#*=}" ;;
    --publish) PUBLISH=1 ;;
    --link=*) LINK="${arg#*=}" ;;
    --model=*) MODEL="${arg#*=}" ;;
    --ps_flags=*) PS_FLAGS="${arg#*=}" ;;
    *) echo "usage: tools/headline.sh [--repeats=3] [--out=DIR] [--publish] [--link=100mbit]" \
            "[--model=custom:2.5:32] [--ps_flags=\"--ps_chunk_kb=64 ...\"]" >&2; exit 2 ;;
  esac
done
if [[ $(id -u) -ne 0 ]]; then
  echo "headline: the emulated cluster network needs root (network namespaces, tc)" >&2
  exit 1
fi
tools/install_deps.sh

mkdir -p "$(dirname "$OUT")"
export GRADSYNC_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
echo "== building gradsync and netem"
bazel build --color=no --curses=no //tools:gradsync //tools:netem >/dev/null 2>"$OUT.build.log" \
  || { cat "$OUT.build.log"; exit 1; }
rm -f "$OUT.build.log"

# The bucket cap is far above the model's size, so each step is one bucket: the
# curves are the formulas' S, not an artefact of bucketing.
# shellcheck disable=SC2086  # PS_FLAGS: several flags, word-split on purpose
bazel-bin/tools/gradsync compare --netem="$LINK" --workers=2,4,8 --model="$MODEL" \
  --bucket_mb=1000 --compute_ms=0 --steps=15 --warmup=3 --repeats="$REPEATS" --out="$OUT" \
  -- $PS_FLAGS
if [[ $PUBLISH -eq 1 ]]; then
  mkdir -p docs
  cp "$OUT/compare.png" docs/headline.png
  echo "published: docs/headline.png"
fi
