#!/usr/bin/env bash
# The first command to run on a GPU node: does gradsync's CUDA build work here?
# No GPU is lent to the machines gradsync is developed on, so this is where
# the CUDA code first meets one.
#
#   tools/gpu_check.sh               # from a checkout: builds --config=cuda
#   tools/gpu_check.sh --no-build    # from a checkout, with what is built
#   gradsync-<commit>/bin/gpu_check.sh   # from tools/bundle.sh's bundle
#   ... --report=FILE                # where the report goes (default:
#                                    # ./gpu_check-<host>-<UTC time>.txt)
#   ... --quick [--out=DIR]          # the one-table check below, <= 8 minutes
#   ... --quick --dry-run            # prints its commands, runs nothing
#
# --quick (logs and report.txt in --out=DIR, else $OUT, else
# ./gpu_check-<host>-<time>): versions (doctor), then
#   parity_layers   layer_reference_test: every layer at ResNet-18's shapes
#                   against loops in double, on the CPU and the GPU
#   parity_cudnn    device_parity_test's cuDNN cases: each convolution against
#                   a direct convolution in double; the fused batch-norm
#                   epilogues against the unfused kernels, bit for bit; and
#                   the CNN's and ResNet-18's step with the defaults against
#                   the CPU's
#   parity_bf16     bf16_precision_test: --precision=bf16's convolutions and
#                   products on the GPU against float64 of the bf16-rounded
#                   inputs, and the MLP's and CNN's bf16 steps on the GPU
#                   against the CPU's bf16 path (the GPU's reference)
#   comm_*          exposed communication of ResNet-18 jobs on this GPU:
#                   local (must be at most 2% of the step), ring2 (2
#                   workers), ps2_1 (2 workers, 1 server)
#   hook            the PyTorch hook (bundle only): the wheel unpacked for the
#                   node's python (PYTHONPATH), python/cuda_hook_check.py
#   speed/M/B/P     bench/compute_vs_pytorch.py --device=cuda: gradsync's step
#                   beside PyTorch's on this GPU, model M (resnet18, cnn,
#                   mlp) x batch B (32, 128, 256) x precision P (fp32, tf32,
#                   bf16, each gradsync row run with --precision=P, a refusal
#                   a FAIL; ResNet-18 at 128 and 256 under issue 39's bar is
#                   a FAIL)
#   speed/resnet18/B/P/FLAG
#                   the same point with a flag the defaults were chosen
#                   over (B 128 and 256; each where it changes the default
#                   run): cudnn_graph=true and cudnn_layout=nhwc in fp32,
#                   cudnn_layout=nchw in tf32, cudnn_graph=false in tf32 and
#                   bf16; run right after the default one, not judged (the
#                   default is)
#   layers_P        bench/layer_profile: ResNet-18's step at batch 128 and
#                   precision P (fp32, tf32, bf16), operation by operation on the
#                   GPU's clock: the share of convolutions, batch norm and
#                   element-wise kernels here, how many shapes computed NCHW
#                   and how many directions ran graph engines, every
#                   operation in layers_P.json and the tables in layers_P.log
#   layers_P_FLAG   the same with a flag the defaults were chosen over:
#                   fp32_nhwc, fp32_graph, tf32_nchw, tf32_legacy
#                   (--cudnn_graph=false)
#   torch_layers_P  bench/pytorch_layer_profile.py: PyTorch's ResNet-18 step
#                   (the speed rows' settings) by the same categories, from
#                   torch.profiler (SKIP where the node's python has no torch)
# and prints one table of every check. The speed rows leave the layer
# profiles a reserve (GPU_CHECK_LAYERS_S seconds, else 75), and the profiles
# run the defaults first. Each command runs under a timeout cut
# to what is left of the 8 minutes; a check the budget cannot reach is a
# SKIP saying so. Sanitizers and benchmarks are in the full check only.
#
# In order, each bounded by `timeout`:
#   versions      nvidia-smi, nvcc (checkout), glibc, `gradsync doctor`
#                 (driver, CUDA runtime, NCCL, cuBLAS, cuDNN, a GEMM per GPU).
#                 With no GPU visible it stops here: "no GPU visible", exit 3.
#   unit          cuda_device_test: every kernel against the CPU backend
#   nccl_1gpu     nccl_test: --sync=nccl on one GPU
#   cudnn         device_parity_test's convolution cases: cuDNN's forward and
#                 both gradients against a direct convolution (odd shapes,
#                 strides, padding, batch 1, NCHW input), whole CNN and
#                 ResNet-18 steps against the CPU's oneDNN
#   parity        device_parity_test's other cases: the MLP on CPU and GPU,
#                 step by step, and the convolutional layers' other kernels
#   layers        layer_reference_test: every layer at ResNet-18's shapes on
#                 the GPU against loops in double, within a float32 rounding
#                 bound
#   bf16          bf16_precision_test: --precision=bf16's layers against
#                 float64 of the rounded inputs, the MLP's and CNN's bf16
#                 steps on the GPU against the CPU's
#   staging       host_staging_test: pinned host staging (ring, ps on GPU)
#   nccl_2rank    `gradsync launch --workers=2 -- --sync=nccl --device=cuda`,
#                 parameters checked identical across ranks (2+ GPUs only)
#   mlp_cuda      the MLP trained on CUDA and on the CPU, same seed: final
#                 losses must agree
#   timing_local  ResNet-18 on CUDA under --sync=local: the step's exposed
#                 communication (sync_wait_ms, timed on the GPU's clock) must
#                 stay under 2% of the step, and compute_ms is reported
#                 beside step_ms
#   bench_mlp     mlp_gpu_benchmark (step time, GEMM efficiency)
#   bench_nccl    allreduce_benchmark --algorithms=nccl, one rank per GPU,
#                 every element checked (2+ GPUs only)
#   sanitizer_*   compute-sanitizer memcheck over cuda_device_test (but for its
#                 deliberate failures), the cuDNN convolution cases, the
#                 layer reference cases and the bf16 layer cases, racecheck and synccheck over
#                 cuda_device_test's kernel tests (where compute-sanitizer is
#                 installed)
# The report has one line per check, PASS, FAIL or SKIP with the reason, the
# version output, and the end of every failing check's log; full logs are in
# the folder beside it. Its path is printed at the end.
#
# Exit status: 0 every check passed or was skipped for a stated reason;
# 1 a check failed; 2 could not start (bad argument, build failed, programs
# missing); 3 no GPU visible: only the versions were checked.
set -uo pipefail

here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
report=""
build=1
quick=0
dry=0
out_dir="${OUT:-}"
for arg in "$@"; do
  case "$arg" in
    --report=*) report="${arg#*=}" ;;
    --no-build) build=0 ;;
    --quick) quick=1 ;;
    --dry-run) dry=1 ;;
    --out=*) out_dir="${arg#*=}" ;;
    -h|--help) sed -n '2,70p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

if ((dry && !quick)); then
  echo "gpu_check.sh: --dry-run goes with --quick" >&2
  exit 2
fi
stamp=$(date -u +%Y%m%dT%H%M%SZ)
host=$(hostname -s 2>/dev/null || echo host)
if ((quick)); then
  logs="${out_dir:-$PWD/gpu_check-$host-$stamp}"
  report="${report:-$logs/report.txt}"
else
  report="${report:-$PWD/gpu_check-$host-$stamp.txt}"
  logs="${report%.txt}.logs"
fi
mkdir -p "$logs" || exit 2
: > "$report" || exit 2
deadline=$((SECONDS + 1000000))  # --quick sets its 8 minutes below
results=()  # "STATUS name reason", in order
failed=0

log() { echo "$*" | tee -a "$report"; }
# record STATUS name reason...
record() {
  local status=$1 name=$2
  shift 2
  results+=("$(printf '%-5s %-24s %s' "$status" "$name" "$*")")
  [[ "$status" == FAIL ]] && failed=1
  printf '   -> %s %s: %s\n' "$status" "$name" "$*"
}
# run NAME SECONDS command...: output to $logs/NAME.log; sets $rc.
run() {
  local name=$1 seconds=$2
  shift 2
  if ((quick)); then  # the quick check's 8 minutes bound every command
    local left=$((deadline - SECONDS))
    ((seconds > left)) && seconds=$left
  fi
  echo "== $name (timeout ${seconds} s): $*"
  if ((dry)); then
    echo "dry run: not run" > "$logs/$name.log"
    rc=0
    return 0
  fi
  timeout --kill-after=30 "$seconds" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "(timed out after ${seconds} s)" >> "$logs/$name.log"
  fi
  return 0
}
why_failed() {  # name: the exit status in words
  if ((rc == 124 || rc == 137)); then
    echo "timed out after $1 s"
  else
    echo "exit $rc (log: $logs/$2.log)"
  fi
}

finish() {  # exit status
  {
    echo
    echo "== checks"
    printf '%s\n' "${results[@]}"
    for line in "${results[@]}"; do
      [[ "$line" == FAIL* ]] || continue
      name=$(awk '{print $2}' <<< "$line")
      [[ -f "$logs/$name.log" ]] || continue
      echo
      echo "== end of $name's log ($logs/$name.log)"
      tail -n 40 "$logs/$name.log"
    done
  } >> "$report"
  echo
  printf '%s\n' "${results[@]}"
  echo "gpu_check: report $report (logs in $logs/)"
  exit "$1"
}

# --- where the programs are ---------------------------------------------------
if [[ -x "$here/../libexec/gradsync-env" ]]; then
  mode="bundle $(cd "$here/.." && pwd)"
  bin="$here"
  program() { echo "$bin/$1"; }
else
  mode="checkout $(cd "$here/.." && pwd)"
  cd "$here/.." || exit 2
  targets=(//tools:gradsync //core/device:cuda_device_test
           //core/model:device_parity_test //core/model:layer_reference_test
           //core/model:bf16_precision_test
           //core/sync:host_staging_test
           //allreduce/nccl:nccl_test //bench:mlp_gpu_benchmark
           //bench:allreduce_benchmark //bench:layer_profile)
  # Outputs of their own and no bazel-bin link: a default build elsewhere in
  # this checkout neither replaces these binaries nor is replaced by them.
  bazel_cuda=(--color=no --curses=no --config=cuda --symlink_prefix=/)
  if ((build && !dry)); then
    run build 3600 bazel build "${bazel_cuda[@]}" "${targets[@]}"
    if ((rc != 0)); then
      record FAIL build "$(why_failed 3600 build)"
      finish 2
    fi
  fi
  if ((dry)); then
    bin="bazel-bin"
  else
    bin=$(bazel info "${bazel_cuda[@]}" bazel-bin 2>/dev/null)
  fi
  program() {
    case "$1" in
      gradsync) echo "$bin/tools/gradsync" ;;
      cuda_device_test) echo "$bin/core/device/cuda_device_test" ;;
      device_parity_test) echo "$bin/core/model/device_parity_test" ;;
      layer_reference_test) echo "$bin/core/model/layer_reference_test" ;;
      bf16_precision_test) echo "$bin/core/model/bf16_precision_test" ;;
      host_staging_test) echo "$bin/core/sync/host_staging_test" ;;
      nccl_test) echo "$bin/allreduce/nccl/nccl_test" ;;
      mlp_gpu_benchmark) echo "$bin/bench/mlp_gpu_benchmark" ;;
      allreduce_benchmark) echo "$bin/bench/allreduce_benchmark" ;;
      layer_profile) echo "$bin/bench/layer_profile" ;;
    esac
  }
fi
for name in gradsync cuda_device_test device_parity_test layer_reference_test \
            bf16_precision_test host_staging_test nccl_test mlp_gpu_benchmark \
            allreduce_benchmark layer_profile; do
  if ((!dry)) && [[ ! -x "$(program "$name")" ]]; then
    log "gpu_check: $name not found at $(program "$name") (build with --config=cuda, or use the bundle)"
    record FAIL setup "$name missing"
    finish 2
  fi
done
gradsync=$(program gradsync)

# --- the quick check: one table in at most 8 minutes ---------------------------
if ((quick)); then
  deadline=$((SECONDS + ${GPU_CHECK_QUICK_S:-480}))  # the variable: tests
  {
    echo "gradsync gpu_check --quick, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null)"
    echo "from: $mode"
    ((dry)) && echo "dry run: commands are printed, nothing runs"
  } | tee -a "$report"
  # budget_left NAME: false (and a SKIP row) when under 15 s of the 8 minutes
  # are left, too few to start a CUDA program and read its result.
  budget_left() {
    if ((deadline - SECONDS < 15)); then
      record SKIP "$1" "the quick check's time budget is spent"
      return 1
    fi
  }
  python=${PYTHON:-python3}  # the node's, with torch for the speed rows
  gpus=1
  if ((!dry)); then
    # --data=synthetic: every job below makes its data in memory, so a
    # bundle without the data set (tools/bundle.sh --no-data) is complete.
    run doctor 60 "$gradsync" doctor --data=synthetic
    { echo "== gradsync doctor (exit $rc)"; cat "$logs/doctor.log"; } >> "$report"
    # doctor's "gpus  N visible"; nvidia-smi's count where doctor could not say.
    gpus=$(sed -n 's/^  gpus *\([0-9][0-9]*\) visible.*/\1/p' "$logs/doctor.log" | head -n 1)
    if [[ -z "$gpus" ]] && ! grep -q '^  gpus *NONE VISIBLE' "$logs/doctor.log"; then
      gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    fi
    gpus=${gpus:-0}
    if ((rc == 0)); then
      record PASS versions "doctor: nothing missing, $gpus GPU(s)"
    else
      record FAIL versions "doctor exit $rc: $(grep -E 'MISSING|TOO OLD|NONE VISIBLE|FAILED|WRONG|UNSUPPORTED' "$logs/doctor.log" |
        head -n 2 | sed 's/^ *//; s/   */: /' | paste -s -d ';')"
    fi
    if ((gpus == 0)); then
      record SKIP parity/speed/comm "no GPU visible to gradsync"
      finish 3
    fi
  else
    record SKIP versions "dry run"
  fi

  # quick_gtest NAME SECONDS program [args]: PASS when every case passed and
  # none was skipped for want of a GPU.
  quick_gtest() {
    local name=$1 seconds=$2 prog=$3
    shift 3
    budget_left "$name" || return 0
    run "$name" "$seconds" "$(program "$prog")" "$@" \
      "--gtest_output=xml:$logs/$name.xml"
    if ((dry)); then
      record SKIP "$name" "dry run"
      return 0
    fi
    local total failures
    total=$(grep -o '<testcase ' "$logs/$name.xml" 2>/dev/null | wc -l)
    failures=$(grep -c '<failure' "$logs/$name.xml" 2>/dev/null)
    if ((rc != 0)); then
      record FAIL "$name" "$prog: ${total:-0} cases, ${failures:-0} failed; $(why_failed "$seconds" "$name")"
    elif grep -q -e 'no CUDA GPU visible' -e 'no CUDA device to check' \
           "$logs/$name.xml" 2>/dev/null; then
      record FAIL "$name" "$prog skipped its GPU cases although a GPU is visible"
    else
      record PASS "$name" "$prog: ${total:-0} cases against float64 references"
    fi
  }
  quick_gtest parity_layers 150 layer_reference_test
  quick_gtest parity_cudnn 120 device_parity_test \
    '--gtest_filter=*Cudnn*:*FusedBatchNorm*:*OneStep*auto'
  quick_gtest parity_bf16 120 bf16_precision_test

  # Exposed communication on this GPU: ResNet-18, batch 64 per worker, fp32.
  job_flags=(--device=cuda --model=resnet18 --data=synthetic --batch_size=64
             --max_steps=30 --warmup_steps=10 --eval=false --progress=false
             --timeout_s=90)
  # summary_field summary.json FIELD: the run's top-level figure (JSON read
  # by Python: the per-rank objects carry the same names).
  summary_field() {
    "$python" -c 'import json, sys
print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2" 2>/dev/null
  }
  # comm_row NAME SUMMARY LIMIT_PERCENT: a row from a run's summary.json;
  # FAIL when LIMIT_PERCENT is set and the exposed share is over it.
  comm_row() {
    local name=$1 summary=$2 limit=${3:-}
    local step compute wait
    step=$(summary_field "$summary" step_ms)
    compute=$(summary_field "$summary" compute_ms)
    wait=$(summary_field "$summary" sync_wait_ms)
    if [[ -z "$step" || -z "$compute" || -z "$wait" ]]; then
      record FAIL "$name" "no step_ms/compute_ms/sync_wait_ms in $summary"
      return
    fi
    local share verdict=PASS note=""
    share=$(awk -v s="$step" -v w="$wait" 'BEGIN { printf "%.1f", (s > 0 ? 100 * w / s : 0) }')
    if [[ -n "$limit" ]]; then
      if awk -v p="$share" -v l="$limit" 'BEGIN { exit !(p > l) }'; then
        verdict=FAIL note=" (over $limit%)"
      else
        note=" (bar $limit%)"
      fi
    fi
    record "$verdict" "$name" "step $step ms, compute $compute ms, exposed $wait ms = $share%$note"
  }
  comm_job() {  # NAME LIMIT_PERCENT command...
    local name=$1 limit=$2
    shift 2
    budget_left "$name" || return 0
    run "$name" 120 "$@"
    if ((dry)); then
      record SKIP "$name" "dry run"
    elif ((rc != 0)); then
      record FAIL "$name" "$(why_failed 120 "$name")"
    else
      comm_row "$name" "$logs/$name.run/summary.json" "$limit"
    fi
  }
  mkdir -p "$logs/comm_local.run"
  comm_job comm_local 2 "$gradsync" train --sync=local \
    "--metrics_dir=$logs/comm_local.run" "${job_flags[@]}"
  comm_job comm_ring2 "" "$gradsync" launch --workers=2 \
    "--run_dir=$logs/comm_ring2.run" -- --sync=ring "${job_flags[@]}"
  comm_job comm_ps2_1 "" "$gradsync" launch --workers=2 --servers=1 \
    "--run_dir=$logs/comm_ps2_1.run" -- --sync=ps "${job_flags[@]}"
  # The PyTorch hook on this GPU (issue 41): DDP on Gloo over CUDA tensors
  # against gradsync's ring and PS behind the hook, two processes sharing the
  # GPU. The bundle's wheel is unpacked into a folder of the logs that the
  # node's own python reads through PYTHONPATH, so that the hook meets the
  # node's torch wherever it is installed (a venv made from a venv's python
  # does not see the first venv's packages) and the node's Python is left as
  # it was. A wheel is a zip archive; unpacking it is all pip would do here.
  wheel=$(ls "$here"/../python/gradsync-*.whl 2>/dev/null | head -n 1)
  hook_check="$here/../python/cuda_hook_check.py"
  if [[ -z "$wheel" || ! -f "$hook_check" ]]; then
    record SKIP hook "no wheel and cuda_hook_check.py beside this script (the bundle carries them in python/)"
  elif budget_left hook; then
    site="$logs/hook-site"
    run hook_install 60 "$python" -m zipfile -e "$wheel" "$site"
    if ((dry)); then
      record SKIP hook "dry run"
    elif ((rc != 0)); then
      record FAIL hook "the wheel did not unpack: $(tail -n 1 "$logs/hook_install.log")"
    else
      PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
        GRADSYNC_LIBS_DIR="$here/../lib" run hook 150 "$python" \
        "$hook_check" --gradsync "$gradsync" --python "$python"
      if ((rc == 0)); then
        record PASS hook "ring and PS behind the hook equal DDP on Gloo on CUDA tensors: $(grep -c . "$logs/hook.log") lines in hook.log"
      else
        record FAIL hook "cuda_hook_check exit $rc: $(tail -n 1 "$logs/hook.log")"
      fi
    fi
  fi

  # gradsync against PyTorch: one row per (model, batch, precision), and
  # ResNet-18's points at the bar's batches again with each flag the
  # defaults were chosen over, where it changes the default run.
  compare="$here/../bench/compute_vs_pytorch.py"
  if ! command -v "$python" > /dev/null; then
    record SKIP speed "no $python on PATH (set PYTHON=)"
  elif [[ ! -f "$compare" ]]; then
    record FAIL speed "$compare missing (the bundle carries bench/)"
  elif budget_left speed; then
    : > "$logs/speed.tsv"
    dry_flag=()
    ((dry)) && dry_flag=(--dry_run)
    # Not through run(): the script prints its own commands in a dry run.
    # The speed rows are the verdict; the layer profiles after them only
    # explain it, so they get what the speed rows leave of a reserve.
    speed_s=$((deadline - SECONDS))
    reserve_s=${GPU_CHECK_LAYERS_S:-75}
    ((speed_s > reserve_s + 60)) && speed_s=$((speed_s - reserve_s))
    # The script's own budget ends its points, as SKIP rows, before the
    # timeout below would kill it (0 would mean no limit: at least 1).
    speed_budget_s=$((speed_s > 11 ? speed_s - 10 : 1))
    echo "== speed (timeout ${speed_s} s): $python $compare --device=cuda ..."
    timeout --kill-after=10 "$speed_s" "$python" "$compare" --device=cuda \
      "--gradsync=$gradsync" --models=resnet18,cnn,mlp --batches=32,128,256 \
      --precisions=fp32,tf32,bf16 --steps=20 --warmup=10 --timeout_s=60 \
      "--budget_s=$speed_budget_s" \
      --variants=cudnn_graph=true,cudnn_layout=nhwc,cudnn_layout=nchw,cudnn_graph=false \
      --variant_models=resnet18 \
      --variant_batches=128,256 "--work_dir=$logs/speed" "--rows=$logs/speed.tsv" "${dry_flag[@]}" \
      > "$logs/speed.log" 2>&1
    rc=$?
    ((dry)) && cat "$logs/speed.log"
    while IFS=$'\t' read -r status name detail; do
      [[ -n "$status" ]] && record "$status" "$name" "$detail"
    done < "$logs/speed.tsv"
    if ((rc == 124 || rc == 137)); then
      record FAIL speed "timed out after $speed_s s; the points above were measured"
    elif [[ ! -s "$logs/speed.tsv" ]]; then
      record FAIL speed "no points measured: exit $rc, $(tail -n 1 "$logs/speed.log")"
    fi
  fi

  # shares LOG: the conv, batch norm and element-wise shares of a category
  # table (bench/layer_profile's or bench/pytorch_layer_profile.py's: the
  # rows between the "category" heading and the blank line, ms/step the
  # second-last column).
  shares() {
    awk '
      /^category / { categories = 1; next }
      /^$/ { categories = 0 }
      categories { total += $(NF - 1) }
      categories && /^conv / { conv += $(NF - 1) }
      categories && /^batch norm / { norm += $(NF - 1) }
      categories && /^element-wise / { elementwise += $(NF - 1) }
      END {
        if (total <= 0) { print "no category table"; exit }
        printf "%.2f ms/step: conv %.0f%%, batch norm %.0f%%, element-wise %.0f%% (%.2f, %.2f, %.2f ms)",
          total, 100 * conv / total, 100 * norm / total,
          100 * elementwise / total, conv, norm, elementwise
      }' "$1"
  }
  # Where ResNet-18's step goes on this GPU, operation by operation (issue
  # 39's "find where the time goes first"): batch 128, gradsync's
  # (bench/layer_profile) with the defaults in fp32, tf32 and bf16, then
  # the alternatives the defaults were chosen over: fp32 on NHWC (graph
  # engines on) and on NCHW with graph engines tried, tf32 on NCHW and with
  # the legacy algorithms alone; then PyTorch's by the same categories
  # (bench/pytorch_layer_profile.py, torch.profiler).
  for name in layers_fp32 layers_tf32 layers_bf16 layers_fp32_nhwc \
    layers_fp32_graph layers_tf32_nchw layers_tf32_legacy; do
    precision=${name#layers_}
    precision=${precision%%_*}
    flag=()
    case "$name" in
      *_nhwc) flag=(--cudnn_layout=nhwc) ;;
      *_nchw) flag=(--cudnn_layout=nchw) ;;
      *_graph) flag=(--cudnn_graph=true) ;;
      *_legacy) flag=(--cudnn_graph=false) ;;
    esac
    budget_left "$name" || continue
    run "$name" 60 "$(program layer_profile)" --device=cuda --model=resnet18 \
      --batch=128 "--precision=$precision" --warmup=3 --steps=5 --top=40 \
      "${flag[@]}" "--out=$logs/$name.json"
    if ((dry)); then
      record SKIP "$name" "dry run"
    elif ((rc != 0)); then
      record FAIL "$name" "$(why_failed 60 "$name")"
    else
      # The convolutions' shapes (one line each, three directions a shape):
      # how many computed NCHW, and on how many directions a graph engine
      # won.
      shapes=$(grep -cE '^  [0-9]+x[0-9]+/[0-9]+ ' "$logs/$name.log")
      record PASS "$name" "unmarked step $(awk '/^unmarked step:/ { print $3 }' \
        "$logs/$name.log") ms$(awk '/^the host.s time to queue them:/ {
          printf "; the host queued it in %s ms", $7 }' "$logs/$name.log"
        ); profiled $(shares "$logs/$name.log"); $(
        grep -cE '^  [0-9]+x[0-9]+/[0-9]+ .*: NCHW: ' "$logs/$name.log"
        ) of $shapes shapes NCHW with no copies, $(
        grep -o 'graph engine' "$logs/$name.log" | wc -l
        ) of $((3 * shapes)) directions on graph engines"
    fi
  done
  torch_profile="$here/../bench/pytorch_layer_profile.py"
  for precision in fp32 tf32 bf16; do
    name=torch_layers_$precision
    if ! command -v "$python" > /dev/null 2>&1; then
      record SKIP "$name" "no $python on PATH (set PYTHON=)"
      continue
    elif [[ ! -f "$torch_profile" ]]; then
      record FAIL "$name" "$torch_profile missing (the bundle carries bench/)"
      continue
    fi
    budget_left "$name" || continue
    run "$name" 60 "$python" "$torch_profile" --device=cuda --batch=128 \
      "--precision=$precision" --warmup=3 --steps=5 --top=40 \
      "--out=$logs/$name.json"
    if ((dry)); then
      record SKIP "$name" "dry run"
    elif ((rc == 3)); then  # no torch, or torch sees no GPU: not measured
      record SKIP "$name" "$(tail -n 1 "$logs/$name.log")"
    elif ((rc != 0)); then
      record FAIL "$name" "$(why_failed 60 "$name")"
    else
      # The heading line (torch's profiler may warn before it).
      record PASS "$name" "$(grep -m 1 ' on cuda' "$logs/$name.log" | sed 's/ on cuda.*//'): $(shares "$logs/$name.log")"
    fi
  done
  finish "$failed"
fi

# --- versions -----------------------------------------------------------------
{
  echo "gradsync gpu_check, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null)"
  echo "from: $mode"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
} | tee -a "$report"
smi_gpus=""
if command -v nvidia-smi > /dev/null; then
  run nvidia_smi 60 nvidia-smi
  if ((rc == 0)); then
    smi_gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  fi
  { echo "== nvidia-smi (exit $rc)"; cat "$logs/nvidia_smi.log"; } >> "$report"
else
  log "== nvidia-smi: not installed (no NVIDIA driver on this node?)"
fi
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ -n "$nvcc" ]]; then
  log "== nvcc: $("$nvcc" --version 2>&1 | tail -n 2 | head -n 1)"
fi
run doctor 180 "$gradsync" doctor
doctor_rc=$rc
{ echo "== gradsync doctor (exit $doctor_rc)"; cat "$logs/doctor.log"; } >> "$report"
cat "$logs/doctor.log"
# The GPUs gradsync itself sees (CUDA_VISIBLE_DEVICES applied): doctor's row
# "gpus  N visible"; nvidia-smi's count only where doctor could not say.
gpus=$(sed -n 's/^  gpus *\([0-9][0-9]*\) visible.*/\1/p' "$logs/doctor.log" | head -n 1)
if [[ -z "$gpus" ]]; then
  if grep -q '^  gpus *NONE VISIBLE' "$logs/doctor.log"; then
    gpus=0
  else
    gpus=${smi_gpus:-0}
  fi
fi
if ((doctor_rc == 0)); then
  record PASS versions "doctor: nothing missing, $gpus GPU(s)"
else
  record FAIL versions "doctor exit $doctor_rc: $(grep -E 'MISSING|TOO OLD|NONE VISIBLE|FAILED|WRONG|UNSUPPORTED' "$logs/doctor.log" |
    head -n 3 | sed 's/^ *//; s/   */: /' | paste -s -d ';' | sed 's/;/; /g')"
fi
if ((gpus == 0)); then
  log "gpu_check: no GPU visible; stopping after the versions (exit 3)."
  for name in unit nccl_1gpu cudnn parity layers staging nccl_2rank mlp_cuda \
              timing_local bench_mlp bench_nccl sanitizer; do
    record SKIP "$name" "no GPU visible"
  done
  finish 3
fi

# --- GoogleTest programs -------------------------------------------------------
# check_gtest NAME SECONDS program [args]: PASS when it exits 0 and no case was
# skipped for want of a GPU (a GPU is visible, so such a skip means this
# program cannot use it).
check_gtest() {
  local name=$1 seconds=$2 prog=$3
  shift 3
  run "$name" "$seconds" "$(program "$prog")" "$@" \
    "--gtest_output=xml:$logs/$name.xml"
  local total skipped reason
  total=$(grep -o '<testcase ' "$logs/$name.xml" 2>/dev/null | wc -l)
  skipped=$(grep -o 'result="skipped"' "$logs/$name.xml" 2>/dev/null | wc -l)
  reason=$(grep -o -m 1 '<skipped message="[^"]*"' "$logs/$name.xml" 2>/dev/null |
           sed 's/.*&#x0A;//; s/"$//')
  local summary="$prog: ${total:-0} cases, ${skipped:-0} skipped${reason:+ (e.g. $reason)}"
  if ((rc != 0)); then
    record FAIL "$name" "$summary; $(why_failed "$seconds" "$name")"
  elif grep -q -e 'no CUDA GPU visible' -e 'no CUDA device to check' \
         "$logs/$name.xml" 2>/dev/null; then
    record FAIL "$name" "$summary: skipped GPU cases although $gpus GPU(s) are visible"
  else
    record PASS "$name" "$summary"
  fi
}

check_gtest unit 900 cuda_device_test
check_gtest nccl_1gpu 600 nccl_test
# The cuDNN convolutions first: the code most likely to differ on a new GPU.
cudnn_cases='*Cudnn*:*ConvolutionalModelParity*'
check_gtest cudnn 900 device_parity_test "--gtest_filter=$cudnn_cases"
check_gtest parity 900 device_parity_test "--gtest_filter=-$cudnn_cases"
check_gtest layers 900 layer_reference_test
check_gtest bf16 600 bf16_precision_test
check_gtest staging 600 host_staging_test

# --- a 2-rank NCCL job -----------------------------------------------------------
# One rank per GPU (NCCL 2.28 does not support two ranks on one GPU).
train_flags=(--data=synthetic --model=mlp --seed=1 --epochs=1 --max_steps=100
             --eval=false --progress=false --timeout_s=120)
if ((gpus >= 2)); then
  run nccl_2rank 900 "$gradsync" launch --workers=2 \
    --run_dir="$logs/nccl_2rank.run" -- --sync=nccl --device=cuda \
    --check_params_every=10 "${train_flags[@]}"
  if ((rc == 0)); then
    record PASS nccl_2rank "2 workers, --sync=nccl, 100 steps, parameters identical every 10 steps"
  else
    record FAIL nccl_2rank "$(why_failed 900 nccl_2rank); rank logs in $logs/nccl_2rank.run"
  fi
else
  record SKIP nccl_2rank "needs 2 GPUs, $gpus visible"
fi

# --- the MLP on CUDA against the CPU ------------------------------------------------
# Same seed, data and steps; the devices differ only in rounding (cuBLAS and
# OpenBLAS sum in different orders, expf/log differ by an ulp), which 100
# steps of SGD grow to ~1e-4 relative: 1e-3 leaves room without hiding a
# wrong kernel, which shows at the first steps as a difference of 1e-1 or more.
final_loss() {  # metrics dir -> worker 0's last step loss, full precision
  grep '"type":"step"' "$1/worker0.jsonl" 2>/dev/null | tail -n 1 |
    sed -n 's/.*"loss":\([^,}]*\).*/\1/p'
}
run mlp_cpu 900 "$gradsync" train --device=cpu --metrics_dir="$logs/mlp_cpu" \
  "${train_flags[@]}"
cpu_rc=$rc
run mlp_cuda 900 "$gradsync" train --device=cuda \
  --metrics_dir="$logs/mlp_cuda" "${train_flags[@]}"
if ((cpu_rc != 0)); then
  record FAIL mlp_cuda "the CPU reference run failed (exit $cpu_rc, log: $logs/mlp_cpu.log)"
elif ((rc != 0)); then
  record FAIL mlp_cuda "$(why_failed 900 mlp_cuda)"
else
  cpu_loss=$(final_loss "$logs/mlp_cpu")
  cuda_loss=$(final_loss "$logs/mlp_cuda")
  if [[ -z "$cpu_loss" || -z "$cuda_loss" ]]; then
    record FAIL mlp_cuda "no step losses in $logs/mlp_{cpu,cuda}/worker0.jsonl"
  elif awk -v a="$cpu_loss" -v b="$cuda_loss" 'BEGIN {
         d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); if (m < 1) m = 1
         exit !(d <= 1e-3 * m) }'; then
    record PASS mlp_cuda "final loss after 100 steps: cuda $cuda_loss, cpu $cpu_loss"
  else
    record FAIL mlp_cuda "final loss after 100 steps: cuda $cuda_loss, cpu $cpu_loss (differ by more than 1e-3 relative)"
  fi
fi

# --- GPU time measured on the GPU ------------------------------------------------
# One worker has nothing to synchronize, so everything between the GPU's end
# of backward and the step's synchronization is measurement error: with the
# device's clock (docs/metrics.md) it is about 0, where timing on the host
# put the GPU's whole forward and backward there.
summary_value() {  # summary.json, field -> the run's mean (the first match)
  grep -m 1 "\"$2\":" "$1" 2>/dev/null | sed 's/.*: *\([0-9.eE+-]*\).*/\1/'
}
run timing_local 900 "$gradsync" train --device=cuda --sync=local \
  --model=resnet18 --data=synthetic --batch_size=128 --max_steps=40 \
  --warmup_steps=10 --eval=false --progress=false \
  --metrics_dir="$logs/timing_local"
if ((rc != 0)); then
  record FAIL timing_local "$(why_failed 900 timing_local)"
else
  step_ms=$(summary_value "$logs/timing_local/summary.json" step_ms)
  compute_ms=$(summary_value "$logs/timing_local/summary.json" compute_ms)
  wait_ms=$(summary_value "$logs/timing_local/summary.json" sync_wait_ms)
  if [[ -z "$step_ms" || -z "$compute_ms" || -z "$wait_ms" ]]; then
    record FAIL timing_local "no step_ms/compute_ms/sync_wait_ms in $logs/timing_local/summary.json"
  elif awk -v s="$step_ms" -v w="$wait_ms" 'BEGIN { exit !(w <= 0.02 * s) }'; then
    record PASS timing_local "resnet18 batch 128: step $step_ms ms, compute $compute_ms ms, exposed $wait_ms ms"
  else
    record FAIL timing_local "resnet18 batch 128: exposed $wait_ms ms of a $step_ms ms step (over 2%), compute $compute_ms ms"
  fi
fi

# --- benchmarks -------------------------------------------------------------------
run bench_mlp 900 "$(program mlp_gpu_benchmark)" --benchmark_min_time=0.2 \
  "--benchmark_out=$logs/bench_mlp.json" --benchmark_out_format=json
if ((rc != 0)); then
  record FAIL bench_mlp "$(why_failed 900 bench_mlp)"
elif grep -q 'ERROR OCCURRED' "$logs/bench_mlp.log"; then
  record FAIL bench_mlp "$(grep -m 1 'ERROR OCCURRED' "$logs/bench_mlp.log" | sed 's/  */ /g')"
else
  record PASS bench_mlp "table in $logs/bench_mlp.log, JSON in $logs/bench_mlp.json"
fi
if ((gpus >= 2)); then
  run bench_nccl 900 "$(program allreduce_benchmark)" --algorithms=nccl \
    --workers="$gpus" --max_bytes=$((256 << 20)) "--json=$logs/bench_nccl.json"
  wrong=$(grep -o '"wrong": [0-9]*' "$logs/bench_nccl.json" 2>/dev/null |
          awk '{s += $2} END {print s + 0}')
  if ((rc != 0)); then
    record FAIL bench_nccl "$(why_failed 900 bench_nccl)"
  elif [[ ! -s "$logs/bench_nccl.json" ]]; then
    record FAIL bench_nccl "no results in $logs/bench_nccl.json"
  elif ((wrong > 0)); then
    record FAIL bench_nccl "$wrong wrong elements (table in $logs/bench_nccl.log)"
  else
    record PASS bench_nccl "$gpus ranks, every element right (table in $logs/bench_nccl.log)"
  fi
else
  record SKIP bench_nccl "needs 2 GPUs (one rank per GPU), $gpus visible"
fi

# --- compute-sanitizer ---------------------------------------------------------------
sanitizer=$(command -v compute-sanitizer || true)
for candidate in "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" \
                 /usr/local/cuda/bin/compute-sanitizer \
                 /usr/local/cuda-*/bin/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer=$candidate
done
if [[ -z "$sanitizer" ]]; then
  record SKIP sanitizer "compute-sanitizer not installed (it comes with the CUDA toolkit)"
else
  # memcheck over everything but the cases that make a CUDA call fail on
  # purpose: memcheck reports every failing API call as an error, so
  # ImpossibleAllocationNamesTheCallAndDevice (a 1 PiB cudaMalloc, out of
  # memory, then the error cleared) counts as errors although the test passes
  # by getting that failure. Left out by name rather than by
  # --check-api-memory-access or --report-api-errors=no, which would hide
  # unexpected API errors everywhere else. The shared-memory checkers run over
  # the kernels that use shared memory and warp synchronization (SumRows, the
  # softmax).
  deliberate_failures='CudaDeviceTest.ImpossibleAllocationNamesTheCallAndDevice'
  for tool in memcheck racecheck synccheck; do
    filter="*-$deliberate_failures"
    [[ "$tool" != memcheck ]] && filter='CudaDeviceTest.*Kernels*:CudaDeviceTest.Softmax*'
    # --target-processes all: in the bundle the program runs behind a wrapper.
    run "sanitizer_$tool" 1800 "$sanitizer" --tool "$tool" --error-exitcode 86 \
      --target-processes all "$(program cuda_device_test)" "--gtest_filter=$filter"
    if ((rc == 0)); then
      record PASS "sanitizer_$tool" "cuda_device_test --gtest_filter=$filter: no errors"
    elif ((rc == 86)); then
      record FAIL "sanitizer_$tool" "$(grep -m 1 'ERROR SUMMARY' "$logs/sanitizer_$tool.log")"
    else
      record FAIL "sanitizer_$tool" "$(why_failed 1800 "sanitizer_$tool")"
    fi
  done
  # memcheck over the cuDNN convolutions' own calls (scratch, copies, the
  # workspace given to cuDNN).
  run sanitizer_memcheck_cudnn 1800 "$sanitizer" --tool memcheck \
    --error-exitcode 86 --target-processes all \
    "$(program device_parity_test)" '--gtest_filter=*Cudnn*'
  if ((rc == 0)); then
    record PASS sanitizer_memcheck_cudnn "device_parity_test --gtest_filter=*Cudnn*: no errors"
  elif ((rc == 86)); then
    record FAIL sanitizer_memcheck_cudnn "$(grep -m 1 'ERROR SUMMARY' "$logs/sanitizer_memcheck_cudnn.log")"
  else
    record FAIL sanitizer_memcheck_cudnn "$(why_failed 1800 sanitizer_memcheck_cudnn)"
  fi
  # memcheck over every layer on the GPU at ResNet-18's shapes (the batch norm
  # kernels over more rows and channels than one block covers among them).
  run sanitizer_memcheck_layers 1800 "$sanitizer" --tool memcheck \
    --error-exitcode 86 --target-processes all \
    "$(program layer_reference_test)" '--gtest_filter=*/cuda'
  if ((rc == 0)); then
    record PASS sanitizer_memcheck_layers "layer_reference_test --gtest_filter=*/cuda: no errors"
  elif ((rc == 86)); then
    record FAIL sanitizer_memcheck_layers "$(grep -m 1 'ERROR SUMMARY' "$logs/sanitizer_memcheck_layers.log")"
  else
    record FAIL sanitizer_memcheck_layers "$(why_failed 1800 sanitizer_memcheck_layers)"
  fi
  # memcheck over --precision=bf16's casts, cuBLAS and cuDNN calls on the GPU
  # (the layer cases; the training cases repeat the same calls).
  run sanitizer_memcheck_bf16 1800 "$sanitizer" --tool memcheck \
    --error-exitcode 86 --target-processes all \
    "$(program bf16_precision_test)" '--gtest_filter=*/cuda'
  if ((rc == 0)); then
    record PASS sanitizer_memcheck_bf16 "bf16_precision_test --gtest_filter=*/cuda: no errors"
  elif ((rc == 86)); then
    record FAIL sanitizer_memcheck_bf16 "$(grep -m 1 'ERROR SUMMARY' "$logs/sanitizer_memcheck_bf16.log")"
  else
    record FAIL sanitizer_memcheck_bf16 "$(why_failed 1800 sanitizer_memcheck_bf16)"
  fi
fi

finish "$failed"
