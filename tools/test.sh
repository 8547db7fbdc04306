#!/usr/bin/env bash
# Installs what is missing, then runs every test, in stages that each compile
# only what they need:
#
#   default      `bazel test //...`: every unit, integration, multi-process and
#                PyTorch test in the normal (-O2) build.
#   thread-safety  tools/thread_safety_check.sh: clang -Wthread-safety as an
#                error over every file that uses absl::Mutex (gcc ignores
#                ABSL_GUARDED_BY and friends); parses, compiles nothing.
#   results      tools/render_results.py --check: the generated parts of
#                docs/results/ against their data folders.
#   cuda         where nvcc is present: only what --config=cuda changes (the
#                CUDA device and kernels, NCCL, the programs tools/bundle.sh
#                carries) and the CUDA-facing tests. --config=cuda shares the
#                default build's output tree, so every object it does not
#                change is the default stage's; GPU cases skip with a
#                message where no GPU is visible.
#   asan         AddressSanitizer + UBSan over the code that parses bytes from
#                peers and files or indexes buffers by what it was sent: the
#                transports and the step engine, the all-reduce algorithms, the
#                PS shard, server and wire, the coordinator, the codecs, the
#                data and checkpoint readers, the launcher.
#   tsan         ThreadSanitizer over the code with threads of its own: the
#                peer transport and step engine, the all-reduce sync layer and
#                its multi-process check, the coordinator and its loss
#                listeners, the launcher.
#   fuzz         libFuzzer (clang, ASan + UBSan) on the wire formats,
#                GRADSYNC_FUZZ_SECONDS (default 30) per target.
#
# What the sanitizer stages no longer run (the models' long trainings, the
# whole `gradsync` binary in multi-process jobs) runs in the default stage;
# docs/design.md ("Tests") lists where each test runs and why.
#
# Every stage runs even when an earlier one failed; the end prints one table:
# per stage its compile and test seconds and its result, then the slowest
# tests. Exit status: 0 when every stage passed.
#
# Environment:
#   GRADSYNC_ASAN=0, GRADSYNC_TSAN=0, GRADSYNC_CUDA=0 skip a stage;
#   GRADSYNC_FUZZ_SECONDS=0 skips fuzzing;
#   GRADSYNC_BAZEL_DISK_CACHE  Bazel's --disk_cache (default .cache/bazel-disk
#                in the checkout, ignored by git and Bazel): a second run, or a
#                switch between configurations, fetches what it compiled.
# Arguments go to the default stage's `bazel build` and `bazel test`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh --test

export GRADSYNC_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
disk_cache=${GRADSYNC_BAZEL_DISK_CACHE:-$PWD/.cache/bazel-disk}
mkdir -p "$disk_cache"
BAZEL_FLAGS=(--color=no --curses=no --disk_cache="$disk_cache")

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
table=()    # one "name|compile s|test s|result" line per stage
failed=0

# CPU seconds (user + system) the Bazel server's finished children have used:
# the compilers, linkers and tests it ran. A stage's difference is what it
# would take on an idle machine (divided by the cores it could use), however
# loaded this one was. "pid seconds".
bazel_cpu() {
  local pid ticks
  pid=$(bazel info "${BAZEL_FLAGS[@]}" server_pid 2>/dev/null) || { echo "0 0"; return; }
  # Fields 16 and 17 of /proc/PID/stat: cutime and cstime, in clock ticks
  # (the command name, field 2, is the server's, without spaces).
  ticks=$(awk '{print $16 + $17}' "/proc/$pid/stat" 2>/dev/null || echo 0)
  echo "$pid $((ticks / $(getconf CLK_TCK)))"
}
# CPU seconds between two bazel_cpu readings ("-" when the server changed).
cpu_between() {
  local pid0 s0 pid1 s1
  read -r pid0 s0 <<<"$1"
  read -r pid1 s1 <<<"$2"
  if [[ $pid0 == "$pid1" && $pid0 != 0 ]]; then echo $((s1 - s0)); else echo -; fi
}

# Runs one Bazel stage: `bazel build` of the targets (compile time), then
# `bazel test` of the same targets (test time; the build is then a no-op).
# name, log file, then Bazel options and targets as one list.
bazel_stage() {
  local name=$1 log=$2
  shift 2
  echo "== $name"
  local start=$SECONDS result=passed build_s test_s=0 cpu0 cpu1 build_cpu=- test_cpu=-
  cpu0=$(bazel_cpu)
  if bazel build "${BAZEL_FLAGS[@]}" "$@" 2>&1 | tee "$logs/$log.build"; then
    build_s=$((SECONDS - start))
    cpu1=$(bazel_cpu)
    build_cpu=$(cpu_between "$cpu0" "$cpu1")
    start=$SECONDS
    bazel test "${BAZEL_FLAGS[@]}" --test_output=errors "$@" 2>&1 |
      tee "$logs/$log.test" || result=FAILED
    test_s=$((SECONDS - start))
    test_cpu=$(cpu_between "$cpu1" "$(bazel_cpu)")
  else
    build_s=$((SECONDS - start))
    result="FAILED (build)"
  fi
  [[ $result == passed ]] || failed=1
  table+=("$name|$build_s|$test_s|$build_cpu|$test_cpu|$result")
  echo "== $name: compile $build_s s (CPU $build_cpu s), tests $test_s s (CPU $test_cpu s), $result"
}

# Runs a stage that is one command: name, command...
command_stage() {
  local name=$1 start=$SECONDS result=passed
  shift
  echo "== $name"
  "$@" || result=FAILED
  [[ $result == passed ]] || failed=1
  table+=("$name|-|$((SECONDS - start))|-|-|$result")
  echo "== $name: $((SECONDS - start)) s, $result"
}

bazel_stage "default: bazel test //..." default //... "$@"

command_stage "thread-safety annotations (clang)" tools/thread_safety_check.sh

# Every generated table and number in docs/results/ against its data
# (tools/render_results.py: a page cannot say what its data does not).
command_stage "results pages match their data" /usr/bin/python3 \
  tools/render_results.py --check

# What --config=cuda changes: the targets below select CUDA sources or
# GRADSYNC_CUDA (grep '//:cuda_enabled' in the BUILD files), and the programs
# tools/bundle.sh carries to a GPU node, so the bundle is known to link.
CUDA_TEST_TARGETS=(
  //core/device:kernel_math_test //core/device:launch_config_test
  //core/device:cudnn_convolution_plan_test
  //core/device:cudnn_algorithm_choice_test
  //core/device:cpu_device_test //core/device:cuda_device_test
  //core/model:device_parity_test //core/model:layer_reference_test
  //core/model:bf16_precision_test
  //core/device:device_clock_test //core/train:trainer_device_clock_test
  //core/sync:host_staging_test //allreduce/nccl:nccl_test
)
CUDA_PROGRAMS=(
  //tools:gradsync //bench:mlp_gpu_benchmark //bench:mlp_benchmark
  //bench:allreduce_benchmark //bench:layer_profile
)
# Each CUDA-facing test's cases and skips: a target whose cases all skip
# passes, so the count is the check.
cuda_skips() {
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
    printf '   %-40s %3d cases, %3d skipped%s\n' "$target" "$total" \
      "$skipped" "${reason:+ ($reason)}"
  done
}
if [[ -x /usr/local/cuda/bin/nvcc && "${GRADSYNC_CUDA:-1}" != 0 ]]; then
  # The programs are built, not tested: `bazel test` skips non-test targets.
  bazel_stage "cuda: what --config=cuda changes" cuda --config=cuda \
    "${CUDA_TEST_TARGETS[@]}" "${CUDA_PROGRAMS[@]}"
  cuda_skips
fi

ASAN_TARGETS=(
  # transports, the step engine, the algorithms and the sync layer
  //allreduce/transport:all //allreduce/algorithms:all //allreduce:all
  //tests:ring_handshake_bad_input_test
  # the parameter server: wire, keys, shard, server, client
  //ps:all
  # the coordinator, rendezvous, job tokens, TLS, a member's loss
  //core/cluster:all //tests:coordinator_bad_input_test //tests:tls_test
  //tests:member_loss_test
  # codecs, buckets and layouts; readers of files; the launcher
  //core/sync:all //core/data:all //core/optim:all //core/base:all
  //core/launch:all
)
if [[ "${GRADSYNC_ASAN:-1}" != 0 ]]; then
  bazel_stage "asan: AddressSanitizer + UBSan" asan --config=asan \
    --test_env=LSAN_OPTIONS=suppressions=$PWD/tools/lsan_suppressions.txt \
    "${ASAN_TARGETS[@]}"
fi

# What absl::Mutex guards is invisible to TSan here (Debian's Abseil is not
# instrumented; tools/tsan_suppressions.txt): the thread-safety stage checks
# those locks statically. TSan checks the rest: the ring and the step engine
# (their communication threads against the trainer's, std::mutex), the
# multi-process ring, the coordinator's loss listeners (called from its watch
# thread), the launcher's process threads.
TSAN_TARGETS=(
  //allreduce/transport:peer_transport_test
  //allreduce/algorithms:peer_exchange_test
  //allreduce/algorithms:ring_allreduce_test
  //allreduce/algorithms:allreduce_family_test
  //allreduce:allreduce_sync_test //allreduce:compressed_allreduce_sync_test
  //allreduce:allreduce_sync_priority_test
  //allreduce:ring_multiprocess_test
  //core/launch:launcher_test //tests:coordinator_bad_input_test
  //tests:member_loss_test
)
if [[ "${GRADSYNC_TSAN:-1}" != 0 ]]; then
  bazel_stage "tsan: ThreadSanitizer" tsan --config=tsan \
    --test_env=TSAN_OPTIONS=halt_on_error=1:suppressions=$PWD/tools/tsan_suppressions.txt \
    "${TSAN_TARGETS[@]}"
fi

fuzz_seconds=${GRADSYNC_FUZZ_SECONDS:-30}
if [[ "$fuzz_seconds" != 0 ]]; then
  command_stage "fuzz: libFuzzer, $fuzz_seconds s per target" \
    fuzz/run.sh "$fuzz_seconds"
fi

echo
echo "== where the time went, in seconds (compile: bazel build; tests: bazel"
echo "   test, or the whole command for a stage that is not Bazel's; CPU: the"
echo "   user + system time of what Bazel ran, the same on a loaded machine)"
printf '   %-44s %8s %8s %8s %8s  %s\n' stage compile tests "CPU c" "CPU t" result
total=0
for row in "${table[@]}"; do
  IFS='|' read -r name build_s test_s build_cpu test_cpu result <<<"$row"
  printf '   %-44s %8s %8s %8s %8s  %s\n' "$name" "$build_s" "$test_s" \
    "$build_cpu" "$test_cpu" "$result"
  total=$((total + ${build_s/-/0} + test_s))
done
printf '   %-44s %17s s, load average now %s\n' "all stages" "$total" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
echo "== the slowest tests (seconds, stage; results Bazel had cached left out)"
# Bazel's summary line per test: "//pkg:target   PASSED in 12.3s", with
# "(cached)" before the status for a result it did not run again.
for log in "$logs"/*.test; do
  [[ -f "$log" ]] || continue
  stage_name=$(basename "$log" .test)
  sed -n 's/^\(\/\/[^ ]*\) \+\(PASSED\|FAILED\|TIMEOUT\|FLAKY\) in \([0-9.]*\)s$/\3 \1 \2/p' \
    "$log" | sed "s/\$/ $stage_name/"
# sed, not head: head exits after its lines while sort may still be writing,
# and under pipefail sort's SIGPIPE would end this script with 141.
done | sort -rn | sed -n 1,15p |
  while read -r seconds target status stage_name; do
    printf '   %8s  %-6s %s %s\n' "$seconds" "$stage_name" "$target" "$status"
  done
exit $failed
