#!/usr/bin/env bash
# Installs the Debian 12 packages gradsync builds, runs, benchmarks and tests
# with. Idempotent and quick when everything is there (one dpkg query, no
# network). As root it runs apt-get; otherwise it prints the one command to run.
#
#   tools/install_deps.sh                 # build and run: tools/demo.sh,
#                                         # `gradsync compare`, the emulated
#                                         # cluster
#   tools/install_deps.sh --bench         # also the benchmarks' libraries
#                                         # (Google Benchmark, Gloo)
#   tools/install_deps.sh --with-pytorch  # also Debian's PyTorch (python/,
#                                         # the PyTorch comparisons)
#   tools/install_deps.sh --sim           # also SimGrid (sim/, the simulator)
#   tools/install_deps.sh --test          # everything tools/test.sh needs:
#                                         # all of the above, GoogleTest,
#                                         # clang (fuzzing, thread-safety),
#                                         # Open MPI and Slurm
#
# Debian's PyTorch (CPU, python3-torch 1.13.1, about 570 MB installed) goes
# into Debian's python3, where python/'s tests run DDP beside gradsync's hook
# (the hook loads gradsync's C library with ctypes: no headers of Python or
# torch are needed to build it). libtorch-dev is only recommended by
# python3-torch, so it is named here.
# The demo needs none of the test-only packages, which are most of the
# download.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java bazel-platforms pkg-config git
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev zlib1g-dev libssl-dev libopenblas-dev libdnnl-dev
  nlohmann-json3-dev
  # data, plots, network emulation
  dataset-fashion-mnist python3 python3-matplotlib iproute2 iperf3
)
BENCH_PACKAGES=(
  libbenchmark-dev
  # benchmark-only comparison anchor
  libgloo-dev
)
PYTORCH_PACKAGES=(
  # PyTorch workers (python/): Debian's torch and its C++ headers
  python3-torch libtorch-dev
)
SIM_PACKAGES=(
  # the simulator's network engine (sim/)
  libsimgrid-dev
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev
  # fuzzing (fuzz/run.sh) and the thread-safety check: clang, its libFuzzer
  # and sanitizers
  clang-14 libclang-rt-14-dev
  # real cluster launchers for tests/mpirun_job_test and tests/slurm_job_test
  # (tools/cluster/): Open MPI's mpirun; Slurm's slurmctld, slurmd, srun and
  # sbatch (slurm-wlm), with munge, the authentication Debian's Slurm uses
  openmpi-bin slurm-wlm munge
)

for argument in "$@"; do
  case "$argument" in
    --bench) PACKAGES+=("${BENCH_PACKAGES[@]}") ;;
    --with-pytorch) PACKAGES+=("${PYTORCH_PACKAGES[@]}") ;;
    --sim) PACKAGES+=("${SIM_PACKAGES[@]}") ;;
    --test)
      PACKAGES+=("${BENCH_PACKAGES[@]}" "${PYTORCH_PACKAGES[@]}"
                 "${SIM_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
    *)
      echo "usage: $0 [--bench] [--with-pytorch] [--sim] [--test]" >&2
      exit 2
      ;;
  esac
done

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

command="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "gradsync needs Debian packages that are not installed. As root, run:" >&2
  echo "  $command" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
