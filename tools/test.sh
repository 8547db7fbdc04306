#!/usr/bin/env bash
# Installs what is missing, then runs every test: `bazel test //...`.
# Where nvcc is present, the CUDA parts are also compiled and linked
# (--config=cuda) and the CUDA-facing tests run in that configuration; GPU
# cases skip with a message where no GPU is visible.
#
# Then the lock annotations are enforced: tools/thread_safety_check.sh parses
# every file that uses absl::Mutex with clang's -Wthread-safety as an error
# (gcc ignores ABSL_GUARDED_BY and friends); under a minute on 2 cores.
#
# Then, unless turned off, the reliability steps (each prints its time):
#   AddressSanitizer + UBSan over the unit, fault, security and multi-process
#     tests (GRADSYNC_ASAN=0 skips);
#   ThreadSanitizer over the targets it can check with Debian's uninstrumented
#     Abseil and gRPC (tools/tsan_suppressions.txt says why; GRADSYNC_TSAN=0
#     skips);
#   libFuzzer, GRADSYNC_FUZZ_SECONDS (default 60) per target (0 skips).
# Arguments go to the first `bazel test` only.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh

export GRADSYNC_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
BAZEL_FLAGS=(--color=no --curses=no)

stage() {  # name, command...
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: $((SECONDS - start)) s"
}

stage "bazel test //..." bazel test "${BAZEL_FLAGS[@]}" --test_output=errors //... "$@"

stage "thread-safety annotations (clang -Wthread-safety)" \
  tools/thread_safety_check.sh

# The CUDA configuration is built, then its CUDA-facing tests run: the
# kernels' shared math and launch shapes, and the CUDA programs' error paths,
# run here; their GPU cases skip where no GPU is visible, and the table below
# shows each target's skips and why (a target whose cases all skip passes, so
# the count is the check). The build above made these binaries: running them
# adds seconds.
CUDA_TEST_TARGETS=(
  //core/device:kernel_math_test //core/device:launch_config_test
  //core/device:cudnn_convolution_plan_test
  //core/device:cudnn_algorithm_choice_test
  //core/device:cuda_device_test //core/model:device_parity_test
  //core/sync:host_staging_test //allreduce:nccl_test
)
cuda_build_and_test() {
  bazel build "${BAZEL_FLAGS[@]}" --config=cuda //...
  local rc=0
  bazel test "${BAZEL_FLAGS[@]}" --config=cuda --test_output=errors \
    "${CUDA_TEST_TARGETS[@]}" || rc=$?
  local testlogs target xml total skipped reason
  testlogs=$(bazel info "${BAZEL_FLAGS[@]}" --config=cuda bazel-testlogs)
  echo "   CUDA-facing tests: cases, skipped (first reason)"
  for target in "${CUDA_TEST_TARGETS[@]}"; do
    xml="$testlogs/${target#//}"
    xml="${xml/://}/test.xml"
    # || true: no match is not an error under set -e and pipefail.
    total=$(grep -o '<testcase ' "$xml" 2>/dev/null | wc -l || true)
    skipped=$(grep -o 'result="skipped"' "$xml" 2>/dev/null | wc -l || true)
    reason=$(grep -o -m 1 '<skipped message="[^"]*"' "$xml" 2>/dev/null |
             sed 's/.*&#x0A;//; s/"$//' || true)
    printf '   %-34s %3d cases, %3d skipped%s\n' "$target" "$total" \
      "$skipped" "${reason:+ ($reason)}"
  done
  return "$rc"
}
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  stage "building the CUDA parts (--config=cuda) and running their tests" \
    cuda_build_and_test
fi

# Everything but the long training runs (Fashion-MNIST accuracy, strategy
# equivalence, synthetic models) and the network-namespace job, which
# exercise no code these do not, at a few times the cost under ASan.
ASAN_TARGETS=(
  //core/... //allreduce:all //ps:all //fuzz:all //core/launch:launcher_test
  //tests:job_test //tests:fault_test //tests:job_token_test //tests:tls_test
  //tests:coordinator_bad_input_test //tests:ring_handshake_bad_input_test
  //tests:member_loss_test //tests:cli_test //tests:cifar10_job_test
  //tests:two_jobs_test //tests:start_up_checks_test
)
if [[ "${GRADSYNC_ASAN:-1}" != 0 ]]; then
  stage "AddressSanitizer + UBSan (--config=asan)" \
    bazel test "${BAZEL_FLAGS[@]}" --config=asan \
      --test_env=LSAN_OPTIONS=suppressions=$PWD/tools/lsan_suppressions.txt \
      "${ASAN_TARGETS[@]}"
fi

# What absl::Mutex guards is invisible to TSan here (Debian's Abseil is not
# instrumented; tools/tsan_suppressions.txt): the thread-safety stage above
# checks those locks statically. TSan checks the rest:
# the ring (its communication thread against the trainer's, std::mutex),
# the trainer and launcher in real multi-process jobs, the coordinator's loss
# listeners (called from its watch thread), and the fuzz targets.
TSAN_TARGETS=(
  //allreduce:ring_allreduce_test //allreduce:ring_transport_test
  //allreduce:ring_sync_test //allreduce:ring_multiprocess_test
  //allreduce:allreduce_family_test //allreduce:compressed_ring_sync_test
  //allreduce:peer_exchange_test
  //core/launch:launcher_test //tests:job_test //tests:coordinator_bad_input_test
  //tests:member_loss_test //fuzz:all
)
if [[ "${GRADSYNC_TSAN:-1}" != 0 ]]; then
  stage "ThreadSanitizer (--config=tsan)" \
    bazel test "${BAZEL_FLAGS[@]}" --config=tsan \
      --test_env=TSAN_OPTIONS=halt_on_error=1:suppressions=$PWD/tools/tsan_suppressions.txt \
      "${TSAN_TARGETS[@]}"
fi

if [[ "${GRADSYNC_FUZZ_SECONDS:-60}" != 0 ]]; then
  stage "libFuzzer, ${GRADSYNC_FUZZ_SECONDS:-60} s per target" \
    fuzz/run.sh "${GRADSYNC_FUZZ_SECONDS:-60}"
fi
