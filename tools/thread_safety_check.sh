#!/usr/bin/env bash
# Enforces the thread-safety annotations (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...) on absl::Mutex: gcc ignores them, so
# every project .cc that uses absl::Mutex, directly or through its own header,
# is parsed by clang with -Wthread-safety as an error. -fsyntax-only: nothing
# is compiled or linked, so the gcc builds and their caches are untouched.
#
# Usage: tools/thread_safety_check.sh [file.cc ...]   (default: every such file)
# Prints one line per file; exits non-zero if any file has a finding.
# GRADSYNC_CHECK_JOBS (default 2) files are parsed at a time.
#
# Include paths: the workspace root (the project's own includes), Bazel's
# bazel-bin for the generated Protobuf/gRPC headers (`bazel build //proto:all`
# makes them), Debian's system headers, and /usr/local/cuda/include for the
# CUDA backend's sources (skipped, with a line saying so, without CUDA).
# -Wthread-safety-beta stays off: its checks are still changing in clang.
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG=${CLANG:-clang++-14}
if ! command -v "$CLANG" >/dev/null; then
  echo "thread_safety_check: $CLANG not found; tools/install_deps.sh installs clang-14" >&2
  exit 1
fi

if (($# > 0)); then
  files=("$@")
else
  # A .cc that includes absl's mutex header, and the .cc beside every header
  # that does (its annotations are checked where its methods are defined).
  mapfile -t files < <(
    git ls-files '*.cc' '*.h' |
      xargs grep -l '#include "absl/synchronization/mutex.h"' |
      sed 's/\.h$/.cc/' | sort -u |
      while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
fi

if ! build_log=$(nice -n 5 bazel build --color=no --curses=no --jobs=2 \
                   //proto:all 2>&1); then
  echo "$build_log" >&2
  echo "thread_safety_check: bazel build //proto:all failed (above)" >&2
  exit 1
fi
BAZEL_BIN=$(bazel info --color=no --curses=no bazel-bin 2>/dev/null)

export CLANG BAZEL_BIN
check_one() {  # file.cc: prints "ok", "skipped" or "FAIL" and the findings
  local file=$1 extra=() start=$SECONDS out
  # The CUDA backend (cuda_*, and cudnn_* beside it), and the CUDA branches
  # of files that have one (their locks are there), are parsed as a
  # --config=cuda build compiles them.
  local cuda_only=0
  [[ "$file" == */cuda_* || "$file" == */cudnn_* ]] && cuda_only=1
  if ((cuda_only)) || grep -q GRADSYNC_CUDA "$file"; then
    if [[ -d /usr/local/cuda/include ]]; then
      extra=(-isystem /usr/local/cuda/include -DGRADSYNC_CUDA=1)
    elif ((cuda_only)); then
      echo "skipped $file (no /usr/local/cuda/include)"
      return 0
    fi
  fi
  if out=$("$CLANG" -fsyntax-only -std=c++17 -Wthread-safety \
             -Wno-thread-safety-beta -Werror=thread-safety \
             -I. -I"$BAZEL_BIN" "${extra[@]}" "$file" 2>&1) &&
     ! grep -q 'warning:' <<<"$out"; then
    echo "ok      $file ($((SECONDS - start)) s)"
  else
    echo "FAIL    $file"
    sed 's/^/    /' <<<"$out"
    return 1
  fi
}
export -f check_one

start=$SECONDS
rc=0
printf '%s\n' "${files[@]}" |
  xargs -P "${GRADSYNC_CHECK_JOBS:-2}" -I{} bash -c 'check_one "$1"' _ {} || rc=$?
echo "thread_safety_check: ${#files[@]} files, $((SECONDS - start)) s"
if ((rc != 0)); then
  echo "thread_safety_check: findings above; fix the locking or the annotation" >&2
  exit 1
fi
