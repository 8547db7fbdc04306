#!/usr/bin/env bash
# Installs what is missing, then runs every test: `bazel test //...`.
# Where nvcc is present, the CUDA parts are also compiled and linked
# (--config=cuda); GPU tests skip with a message where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh

export GRADSYNC_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
BAZEL_FLAGS=(--color=no --curses=no)
bazel test "${BAZEL_FLAGS[@]}" --test_output=errors //... "$@"

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "== building the CUDA parts (--config=cuda)"
  bazel build "${BAZEL_FLAGS[@]}" --config=cuda //...
fi
