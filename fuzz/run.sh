#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/build.sh) and runs each for SECONDS (default
# 60), from the seeds in fuzz/seeds/<target> plus what earlier runs on this
# machine found ($GRADSYNC_FUZZ_OUT/corpus/<target>). Prints executions and
# corpus size per target; exits non-zero when any target found a crash, leak
# or check failure, leaving the input in $GRADSYNC_FUZZ_OUT/artifacts.
#
#   fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
OUT=${GRADSYNC_FUZZ_OUT:-/tmp/gradsync-fuzz}
fuzz/build.sh
mkdir -p "$OUT/artifacts"
# One target: name. Writes its line of the summary to $OUT/<target>.result
# and exits non-zero on a finding.
run_target() {
  local target=$1 corpus="$OUT/corpus/$1" log="$OUT/$1.log" seeds=()
  mkdir -p "$corpus"
  [[ -d fuzz/seeds/$target ]] && seeds=("fuzz/seeds/$target")
  if "$OUT/bin/$target" "$corpus" "${seeds[@]}" -max_total_time="$SECONDS_EACH" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$OUT/artifacts/$target-" >"$log" 2>&1; then
    local runs rate
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    echo "fuzz $target: $runs executions in ${SECONDS_EACH} s ($rate/s), corpus $(ls "$corpus" | wc -l) inputs" \
      >"$OUT/$target.result"
    return 0
  fi
  {
    echo "fuzz $target FAILED (log: $log):"
    # The sanitizer's or libFuzzer's report, not the target's own logging
    # (protobuf logs "ERROR" for inputs it refuses); the log's end when there
    # is none (the binary did not start, say).
    grep -E -A30 -m1 '^==[0-9]+== ?ERROR|runtime error:' "$log" ||
      tail -n 20 "$log"
    grep -E '^(artifact_prefix|Test unit written to)' "$log" || true
  } >"$OUT/$target.result"
  return 1
}

# The targets are single-threaded: as many run side by side as there are
# cores (GRADSYNC_FUZZ_JOBS), each for SECONDS of its own.
JOBS=${GRADSYNC_FUZZ_JOBS:-$(nproc)}
targets=($(cat "$OUT/targets"))
status=0
for target in "${targets[@]}"; do
  rm -f "$OUT/$target.result"
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || status=1; done
  run_target "$target" &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || status=1; done
wait || status=1
for target in "${targets[@]}"; do
  cat "$OUT/$target.result" 2>/dev/null ||
    { echo "fuzz $target: no result (the run was killed?)"; status=1; }
done
exit $status
