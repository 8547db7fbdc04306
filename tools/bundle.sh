#!/usr/bin/env bash
# Builds gradsync with CUDA and packs a relocatable bundle for a GPU node:
#
#   tools/bundle.sh                 # -> dist/gradsync-<commit>.tar.gz
#   tools/bundle.sh --no-data       # without the Fashion-MNIST files (-30 MB)
#   tools/bundle.sh --no-build      # pack what bazel-bin already holds
#
# On the node (any directory; no apt, no Bazel):
#   tar xzf gradsync-<commit>.tar.gz
#   gradsync-<commit>/bin/gpu_check.sh    # first: every GPU check, one report
#   gradsync-<commit>/bin/gradsync doctor
#   gradsync-<commit>/bin/cuda_device_test
#   gradsync-<commit>/bin/gradsync train --device=cuda --epochs=1
#   gradsync-<commit>/bin/pytorch_compare.py
#   python3 -m pip install --no-index gradsync-<commit>/python/gradsync-*.whl
#                                         # gradsync.torch in that python3, with
#   GRADSYNC_LIBS_DIR=gradsync-<commit>/lib # (the wheel's libraries are there)
#
# What the node needs (the run prints the values it measured, and the
# bundle's wrapper checks them before starting any program, with one clear
# error instead of a loader failure):
#   - x86_64 Linux with glibc 2.36 or newer. Measured on the Debian 12 build
#     with `objdump -T` (the highest GLIBC_ symbol version any bundled file
#     asks for): the programs need 2.34 (__libc_start_main), the bundled
#     libgcc_s 2.35 (_dl_find_object) and libstdc++ 2.36 (arc4random). So
#     Debian 12+, Ubuntu 23.04+ and Fedora 37+ run it; Ubuntu 22.04 (2.35) and
#     RHEL/Rocky 9 (2.34) do not: build there instead.
#   - An NVIDIA driver for CUDA 13: R580 or newer (CUDA 13.x minimum, minor
#     version compatibility). An older driver on a data-center GPU works only
#     through CUDA 13's forward-compatibility package (cuda-compat-13-0), whose
#     libcuda the wrapper loads from $GRADSYNC_CUDA_COMPAT, $CUDA_HOME/compat,
#     /usr/local/cuda/compat, /usr/local/cuda-13*/compat or
#     $CONDA_PREFIX/cuda-compat when the driver is too old.
#   - CUDA 13's libcudart, libcublas/libcublasLt, cuDNN 9 and NCCL 2 (below).
#   - A GPU of compute capability 8.0 (A100) or 9.0 (H100/H200), for which the
#     kernels carry machine code; newer GPUs JIT the compute_90 PTX.
#
# What goes in: the programs (libexec/), every shared library they need that
# the node cannot be assumed to have (gRPC, Protobuf, Abseil, OpenBLAS, re2,
# c-ares, OpenSSL, libstdc++, ... found with ldd; lib/), a wrapper per program
# (bin/), the Fashion-MNIST files when this machine has them (data/), and
# tools/pytorch_compare.py. What stays out: glibc's own libraries (libc, libm,
# libpthread, libdl, librt, ld-linux: they must match the node's kernel
# interface and loader) and CUDA's (libcuda is the node's driver; libcudart,
# cuBLAS, cuDNN and NCCL are hundreds of MB, and libcudnn.so.9 loads its
# sub-libraries from its own folder at run time; the node has them in
# /usr/local/cuda or in a Python environment's nvidia/*/lib folders, where the
# wrapper looks). The wrapper checks glibc and the driver, sets LD_LIBRARY_PATH
# to lib/ plus the CUDA folders it found, and points gradsync at the bundled
# data.
#
# The tarball is kept small enough to copy to a node in seconds: the script
# prints its size and fails above 60 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

with_data=1
build=1
for arg in "$@"; do
  case "$arg" in
    --no-data) with_data=0 ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,52p' "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# Programs worth running on a GPU node: target, then the name in the bundle.
TARGETS=(
  //tools:gradsync
  //core/device:cuda_device_test
  //core/model:device_parity_test
  //core/model:layer_reference_test
  //core/model:bf16_precision_test
  //core/sync:host_staging_test
  //allreduce/nccl:nccl_test
  //bench:mlp_gpu_benchmark
  //bench:mlp_benchmark
  //bench:allreduce_benchmark
  //bench:layer_profile
)
MAX_BYTES=$((60 * 1024 * 1024))
DATA_DIR=/usr/share/datasets/fashion-mnist

commit_full=$(git rev-parse HEAD 2>/dev/null || echo unknown)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="${commit}-dirty"
fi
name="gradsync-${commit}"

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "bundle.sh: /usr/local/cuda/bin/nvcc not found; the bundle is the CUDA build" >&2
  exit 1
fi
# The oldest driver the CUDA runtime the programs link can use (NVIDIA's CUDA
# compatibility guide: minor version compatibility within a major release).
cuda_version=$(/usr/local/cuda/bin/nvcc --version |
               sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
case "${cuda_version%%.*}" in
  13) driver_needed=580 ;;
  12) driver_needed=525 ;;
  *) echo "bundle.sh: no minimum driver known for CUDA '$cuda_version'; add it here" >&2
     exit 1 ;;
esac
# --config=cuda shares bazel-out/k8-opt with the default build (.bazelrc), so
# only what it changes is recompiled; the programs are copied out right after
# the build, and --symlink_prefix=/ leaves the bazel-bin link as it was.
BAZEL_CUDA=(--config=cuda --symlink_prefix=/)
if ((build)); then
  echo "== bazel build ${BAZEL_CUDA[*]} ${TARGETS[*]}"
  bazel build --color=no --curses=no "${BAZEL_CUDA[@]}" "${TARGETS[@]}"
fi
bazel_bin=$(bazel info "${BAZEL_CUDA[@]}" bazel-bin 2>/dev/null)

stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage="$stage_root/$name"
mkdir -p "$stage"/{bin,libexec,lib}

# --- programs ----------------------------------------------------------------
programs=()
declare -A built=()  # program -> its path in bazel-bin
for target in "${TARGETS[@]}"; do
  package=${target#//}; package=${package%%:*}
  program=${target##*:}
  cp -L "$bazel_bin/$package/$program" "$stage/libexec/$program"
  chmod 755 "$stage/libexec/$program"
  # Bazel builds both configurations into the same output folder: make sure
  # nobody's default build replaced ours between the build and the copy.
  # ldd on the original: a cc_test finds its own libraries (Bazel's _solib_k8
  # folder, which may be what links CUDA) through a RUNPATH relative to it.
  # ldd's output is read whole first: grep -q stops at the first match, and
  # under pipefail the SIGPIPE that ldd then gets would read as "no match".
  if ! grep -q 'libcudart\.so' <<< "$(ldd "$bazel_bin/$package/$program")"; then
    echo "bundle.sh: $package/$program does not link libcudart: not a --config=cuda build" >&2
    [[ "$program" == mlp_benchmark ]] || exit 1
  fi
  programs+=("$program")
  built[$program]="$bazel_bin/$package/$program"
done

# --- shared libraries --------------------------------------------------------
# Left to the node: glibc's pieces, the kernel's vDSO, and CUDA's libraries.
is_system() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|\
    libresolv.so*|libutil.so*|libanl.so*|libnsl.so*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case "$1" in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*|libnccl.so*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}
declare -A cuda_sonames=()
for program in "${programs[@]}"; do
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if is_cuda "$soname"; then cuda_sonames[$soname]=1; continue; fi
    is_system "$soname" && continue
    if [[ "$path" == "not" ]]; then
      echo "bundle.sh: $program needs $soname, which ldd cannot find here" >&2
      exit 1
    fi
    [[ -e "$stage/lib/$soname" ]] || cp -L "$path" "$stage/lib/$soname"
  done < <(ldd "${built[$program]}")  # the original, as above
done
chmod 644 "$stage"/lib/*
printf '%s\n' "${!cuda_sonames[@]}" | sort > "$stage/libexec/cuda-sonames"

# The newest glibc symbol version anything in the bundle asks for: the node's
# glibc must be at least that (the loader checks every versioned reference
# when it loads a library, used or not). Also which file and symbol ask for it.
glibc_needed=""
glibc_needed_by=""
for file in "$stage"/libexec/* "$stage"/lib/*; do
  [[ -f "$file" ]] || continue
  # || true: a text file (cuda-sonames) or a library without versioned
  # references has no match, which pipefail would make fatal.
  newest=$( (objdump -T "$file" 2>/dev/null || true) |
           grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1 || true)
  [[ -n "$newest" ]] || continue
  if [[ -z "$glibc_needed" ||
        "$(printf '%s\n%s\n' "$glibc_needed" "$newest" | sort -V | tail -n 1)" != "$glibc_needed" ]]; then
    symbol=$(objdump -T "$file" | grep -F "(GLIBC_$newest)" | awk '{print $NF}' | head -n 1 || true)
    glibc_needed=$newest
    glibc_needed_by="${file##*/} ($symbol)"
  fi
done
echo "${glibc_needed:-2.17}" > "$stage/libexec/glibc-needed"
echo "$cuda_version $driver_needed" > "$stage/libexec/cuda-needed"
echo "$commit_full" > "$stage/libexec/commit"

# --- data, tools, wrappers ---------------------------------------------------
if ((with_data)) && [[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ]]; then
  mkdir -p "$stage/data/fashion-mnist"
  cp "$DATA_DIR"/*-ubyte.gz "$stage/data/fashion-mnist/"
elif ((with_data)); then
  echo "bundle.sh: no Fashion-MNIST in $DATA_DIR; bundling without it (use --data=synthetic on the node)" >&2
fi
# --- the Python package ------------------------------------------------------
# gradsync's wheel (python/make_wheel.py): `python3 -m pip install` on the
# node puts gradsync.torch into whichever Python trains there, offline, with
# no Bazel. Built in the default (CPU) configuration after the programs were
# copied out: the hook's strategies work on host memory and stage GPU buckets
# themselves, so the wheel needs no CUDA library. This wheel leaves its
# shared libraries to the bundle's lib/ (--libraries=beside; the full wheel
# would carry the same ones again and double the bundle): the node's Python
# finds them through GRADSYNC_LIBS_DIR=<bundle>/lib.
if ((build)); then
  bazel build --color=no --curses=no //python:libgradsync_c.so
fi
c_library="$(bazel info bazel-bin 2>/dev/null)/python/libgradsync_c.so"
if [[ ! -f "$c_library" ]]; then
  echo "bundle.sh: no $c_library; run without --no-build" >&2
  exit 1
fi
mkdir -p "$stage/python"
wheel_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' python/gradsync/__init__.py)
/usr/bin/python3 python/make_wheel.py --libraries=beside --library "$c_library" \
  --out "$stage/python/gradsync-$wheel_version-py3-none-linux_x86_64.whl" \
  python/gradsync/*.py
# What the library needs that lib/ does not have yet (the programs needed
# most of the same).
while read -r soname arrow path _; do
  [[ "$arrow" == "=>" ]] || continue
  is_cuda "$soname" && continue
  is_system "$soname" && continue
  if [[ "$path" == "not" ]]; then
    echo "bundle.sh: libgradsync_c.so needs $soname, which ldd cannot find here" >&2
    exit 1
  fi
  [[ -e "$stage/lib/$soname" ]] || cp -L "$path" "$stage/lib/$soname"
done < <(ldd "$c_library")
chmod 644 "$stage"/lib/*
# The hook's GPU check (python/README.md): DDP on Gloo over CUDA tensors =
# ring = PS behind the hook, two processes on one GPU.
cp python/tests/cuda_hook_check.py python/tests/ddp_worker.py "$stage/python/"
chmod 644 "$stage"/python/*

cp tools/pytorch_compare.py "$stage/bin/pytorch_compare.py"
cp tools/gpu_check.sh "$stage/bin/gpu_check.sh"
chmod 755 "$stage/bin/pytorch_compare.py" "$stage/bin/gpu_check.sh"
# gpu_check.sh --quick times gradsync against PyTorch with these.
mkdir -p "$stage/bench"
cp bench/compute_vs_pytorch.py bench/pytorch_resnet18_reference.py \
  bench/pytorch_layer_profile.py bench/pytorch_layouts.py "$stage/bench/"

cat > "$stage/libexec/gradsync-env" <<'WRAPPER'
#!/usr/bin/env bash
# Runs one of this bundle's programs: LD_LIBRARY_PATH = the bundle's lib/ plus
# the folders holding the CUDA libraries the programs were linked against
# (libexec/cuda-sonames), looked for on this node in order:
#   $GRADSYNC_CUDA_LIBS (colon-separated, to force a choice), $CUDA_HOME/lib64,
#   /usr/local/cuda/lib64, /usr/local/cuda-*/lib64, the nvidia/*/lib folders of
#   python3's site-packages (pip's nvidia-* wheels, as PyTorch installs them),
#   /usr/lib/x86_64-linux-gnu.
# Before that, two checks that would otherwise end in a loader failure or a
# CUDA error far from its cause: glibc (libexec/glibc-needed) and the NVIDIA
# driver (libexec/cuda-needed: the CUDA version and the oldest driver branch
# for it). A driver older than that is used through CUDA's forward-
# compatibility libraries where a compat folder has them; otherwise every
# program but doctor (which reports it) stops with one clear error.
# GRADSYNC_BUNDLE_DEBUG=1 prints what it chose.
set -euo pipefail
root="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
program="$1"
shift
debug() { [[ "${GRADSYNC_BUNDLE_DEBUG:-0}" == 0 ]] || echo "gradsync bundle: $*" >&2; }

# --- glibc -------------------------------------------------------------------
needed=$(cat "$root/libexec/glibc-needed")
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)
if [[ -n "$have" && "$(printf '%s\n%s\n' "$needed" "$have" | sort -V | head -n 1)" != "$needed" ]]; then
  echo "gradsync bundle: this node has glibc $have; the bundle needs glibc $needed or newer (it was built on Debian 12: build gradsync on this node instead)" >&2
  exit 127
fi

# --- NVIDIA driver -----------------------------------------------------------
read -r cuda_version driver_needed < "$root/libexec/cuda-needed"
# The kernel module's version ("... Kernel Module  580.65.06  ..."), else
# nvidia-smi's; empty where no driver is installed (CPU work still runs).
driver=""
if [[ -r /proc/driver/nvidia/version ]]; then
  driver=$(awk 'NR == 1 { for (i = 1; i <= NF; ++i)
                 if ($i ~ /^[0-9]+\.[0-9]+(\.[0-9]+)?$/) { print $i; exit } }' \
           /proc/driver/nvidia/version)
fi
if [[ -z "$driver" ]] && command -v nvidia-smi > /dev/null; then
  driver=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null |
           head -n 1 || true)
fi
compat=""
if [[ "$driver" =~ ^[0-9]+\. && "${driver%%.*}" -lt "$driver_needed" ]]; then
  for dir in ${GRADSYNC_CUDA_COMPAT:-} ${CUDA_HOME:+$CUDA_HOME/compat} \
             /usr/local/cuda/compat \
             $(ls -d /usr/local/cuda-"${cuda_version%%.*}"*/compat 2>/dev/null | sort -rV) \
             ${CONDA_PREFIX:+$CONDA_PREFIX/cuda-compat}; do
    if [[ -e "$dir/libcuda.so.1" ]]; then compat="$dir"; break; fi
  done
  if [[ -n "$compat" ]]; then
    debug "driver $driver is older than R$driver_needed: CUDA forward compatibility from $compat"
  elif [[ "$program" == gradsync && "${1:-}" == doctor ]]; then
    echo "gradsync bundle: warning: NVIDIA driver $driver is older than R$driver_needed, which CUDA $cuda_version needs; doctor runs to report the rest" >&2
  else
    echo "gradsync bundle: this node's NVIDIA driver is $driver; the bundle's CUDA $cuda_version needs driver R$driver_needed or newer, or CUDA's forward-compatibility package (cuda-compat-${cuda_version/./-}, data-center GPUs) in /usr/local/cuda/compat or \$GRADSYNC_CUDA_COMPAT" >&2
    exit 127
  fi
fi

candidates=()
[[ -n "${GRADSYNC_CUDA_LIBS:-}" ]] && IFS=: read -r -a candidates <<< "$GRADSYNC_CUDA_LIBS"
[[ -n "${CUDA_HOME:-}" ]] && candidates+=("$CUDA_HOME/lib64" "$CUDA_HOME/lib")
candidates+=(/usr/local/cuda/lib64)
for dir in $(ls -d /usr/local/cuda-*/lib64 2>/dev/null | sort -rV); do candidates+=("$dir"); done
python="${GRADSYNC_PYTHON:-$(command -v python3 || true)}"
if [[ -n "$python" ]]; then
  while read -r dir; do [[ -n "$dir" ]] && candidates+=("$dir"); done < <(
    "$python" - 2>/dev/null <<'PY' || true
import os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    import site
    roots = [os.path.join(p, "nvidia") for p in site.getsitepackages()]
for root in roots:
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            lib = os.path.join(root, name, "lib")
            if os.path.isdir(lib):
                print(lib)
PY
  )
fi
candidates+=(/usr/lib/x86_64-linux-gnu /usr/lib64)

cuda_path=""
missing=()
while read -r soname; do
  [[ -n "$soname" ]] || continue
  found=""
  for dir in "${candidates[@]}"; do
    if [[ -e "$dir/$soname" ]]; then found="$dir"; break; fi
  done
  if [[ -z "$found" ]]; then
    missing+=("$soname")
  elif [[ ":$cuda_path:" != *":$found:"* ]]; then
    cuda_path="${cuda_path:+$cuda_path:}$found"
  fi
done < "$root/libexec/cuda-sonames"
if ((${#missing[@]})); then
  {
    echo "gradsync bundle: this node lacks ${missing[*]} (the build used CUDA $cuda_version, NCCL 2.x)."
    echo "  looked in: ${candidates[*]}"
    echo "  fix: install CUDA 13 in /usr/local/cuda, or"
    echo "       pip install nvidia-cuda-runtime nvidia-cublas nvidia-cudnn-cu13 nvidia-nccl-cu13  (13.x wheels),"
    echo "       or point GRADSYNC_CUDA_LIBS at folders that hold them."
  } >&2
  exit 127
fi

# The compat folder first: its libcuda.so.1 must win over the driver's.
export LD_LIBRARY_PATH="${compat:+$compat:}$root/lib${cuda_path:+:$cuda_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GRADSYNC_BUNDLE="$root"
# The manifest's commit: there is no git checkout on the node.
export GRADSYNC_GIT_COMMIT="${GRADSYNC_GIT_COMMIT:-$(cat "$root/libexec/commit")}"
debug "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

args=("$@")
# Point gradsync at the bundled Fashion-MNIST when the node has none in the
# default place and the command line names no --data_dir of its own.
data="$root/data/fashion-mnist"
if [[ "$program" == gradsync && -d "$data" && ${#args[@]} -gt 0 &&
      ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz &&
      " ${args[*]} " != *" --data_dir="* ]]; then
  case "${args[0]}" in
    train|doctor) args+=("--data_dir=$data") ;;
    launch)
      # Training flags come after "--"; add one if there is none.
      separator=-1
      for i in "${!args[@]}"; do [[ "${args[$i]}" == "--" ]] && { separator=$i; break; }; done
      if ((separator < 0)); then
        args+=("--" "--data_dir=$data")
      else
        args=("${args[@]:0:$((separator + 1))}" "--data_dir=$data" "${args[@]:$((separator + 1))}")
      fi
      ;;
  esac
fi
exec "$root/libexec/$program" "${args[@]}"
WRAPPER
chmod 755 "$stage/libexec/gradsync-env"

for program in "${programs[@]}"; do
  cat > "$stage/bin/$program" <<STUB
#!/usr/bin/env bash
# $program from the gradsync bundle (see ../README.txt).
exec "\$(dirname "\$(readlink -f "\$0")")/../libexec/gradsync-env" $program "\$@"
STUB
  chmod 755 "$stage/bin/$program"
done

# What the node needs, for README.txt and the end of this run.
node_needs() {
  cat <<NEEDS
Needs on the node (the wrapper checks the first two before every program):
  - x86_64 Linux with glibc ${glibc_needed:-2.17} or newer (the newest glibc symbol
    version in the bundle: ${glibc_needed_by:-none}).
  - NVIDIA driver R${driver_needed} or newer (CUDA ${cuda_version}); an older driver
    only with cuda-compat-${cuda_version/./-} on a data-center GPU (forward
    compatibility: /usr/local/cuda/compat or GRADSYNC_CUDA_COMPAT=dir).
  - CUDA ${cuda_version%%.*}'s $(paste -s -d ' ' "$stage/libexec/cuda-sonames" | sed 's/ /, /g')
    in /usr/local/cuda/lib64 or python3's nvidia/*/lib (pip's
    nvidia-cuda-runtime, nvidia-cublas, nvidia-cudnn-cu${cuda_version%%.*},
    nvidia-nccl-cu${cuda_version%%.*}).
  - A GPU of compute capability 8.0 or 9.0 (A100, H100, H200; newer ones JIT
    the compute_90 PTX).
NEEDS
}

cat > "$stage/README.txt" <<README
gradsync ${commit} (${commit_full}), CUDA ${cuda_version} build for sm_80 (A100)
and sm_90 (H100/H200), plus compute_90 PTX, made $(date -u +%Y-%m-%dT%H:%MZ) on
$(. /etc/os-release && echo "$PRETTY_NAME").

  bin/gpu_check.sh --quick --out=DIR   run first: parity, gradsync vs PyTorch, exposed
                                       communication; one table in at most 8 minutes
  bin/gpu_check.sh                     every GPU check below, sanitizers too, one report
  bin/gradsync doctor                  GPUs, driver, CUDA, NCCL, cuBLAS, cuDNN, a GEMM check
  bin/cuda_device_test                 CUDA backend vs the CPU backend, kernel by kernel
  bin/device_parity_test               cuDNN convolutions, the MLP, CNN and ResNet-18
                                       on CPU and GPU agree
  bin/layer_reference_test             every layer at ResNet-18's shapes against float64
  bin/bf16_precision_test              --precision=bf16's layers against float64, its
                                       MLP and CNN steps on the GPU against the CPU's
  bin/host_staging_test                pinned staging for the ring and ps strategies
  bin/nccl_test                        --sync=nccl on one GPU
  bin/mlp_gpu_benchmark                step time and GEMM efficiency, batch 64..4096
  bin/layer_profile --device=cuda --model=resnet18 --batch=128 [--precision=bf16]
                                       where the step's GPU time goes, operation by
                                       operation (--out=FILE: all of them as JSON)
  bin/allreduce_benchmark --algorithms=nccl,gradsync_ring --workers=4
                                       NCCL vs the TCP ring, nccl-tests style
  bin/pytorch_compare.py               the same step in PyTorch, side by side
  python3 bench/pytorch_layer_profile.py --batch=128 [--precision=bf16]
                                       PyTorch's ResNet-18 step by layer_profile's
                                       categories (torch.profiler)
  python3 -m pip install --no-index python/gradsync-*.whl  (then GRADSYNC_LIBS_DIR=\$PWD/lib)
                                       gradsync.torch (DDP's hook) in that python3,
                                       offline (CPython 3.9-3.13, torch >= 1.13)
  GRADSYNC_LIBS_DIR=\$PWD/lib python3 python/cuda_hook_check.py --gradsync bin/gradsync
                                       the hook on CUDA tensors: DDP on Gloo = ring = PS
  bin/gradsync train --device=cuda     train (add --sync=..., see --help)

$(node_needs)
GRADSYNC_CUDA_LIBS=dir1:dir2 overrides where the CUDA libraries are looked for,
GRADSYNC_CUDA_COMPAT=dir where the forward-compatibility libcuda is;
GRADSYNC_BUNDLE_DEBUG=1 shows the library path chosen.
README

# --- pack and check ----------------------------------------------------------
mkdir -p dist
tarball="dist/${name}.tar.gz"
tar -C "$stage_root" -cf - "$name" | gzip -9 > "$tarball"
bytes=$(stat -c %s "$tarball")
echo "== $tarball: $((bytes / 1024 / 1024)) MiB ($bytes bytes), $(ls "$stage/lib" | wc -l) libraries"
if ((bytes > MAX_BYTES)); then
  echo "bundle.sh: $tarball is over $((MAX_BYTES / 1024 / 1024)) MiB; leave out the data set with --no-data" >&2
  exit 1
fi

# Unpack elsewhere and run from yet another directory: every non-glibc,
# non-CUDA library must come from the bundle, and doctor must run (on a
# machine without a GPU it reports that and exits 1).
check=$(mktemp -d)
trap 'rm -rf "$stage_root" "$check"' EXIT
tar -C "$check" -xzf "$tarball"
unpacked="$check/$name"
for program in "${programs[@]}"; do
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if is_system "$soname" || is_cuda "$soname"; then continue; fi
    if [[ "$path" != "$unpacked/lib/"* ]]; then
      echo "bundle.sh: check failed: $program resolves $soname to $path, not the bundle" >&2
      exit 1
    fi
  done < <(LD_LIBRARY_PATH="$unpacked/lib" ldd "$unpacked/libexec/$program")
done
doctor_rc=0
doctor_out=$(cd / && "$unpacked/bin/gradsync" doctor 2>&1) || doctor_rc=$?
echo "$doctor_out" | sed 's/^/   | /'
if ! grep -q 'CUDA (built with --config=cuda' <<< "$doctor_out"; then
  echo "bundle.sh: check failed: bin/gradsync doctor did not run as a CUDA build (exit $doctor_rc)" >&2
  exit 1
fi
echo "== ok: $tarball unpacks and bin/gradsync doctor runs from another directory"
node_needs
