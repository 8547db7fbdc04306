#!/usr/bin/env bash
# Installs the Debian 12 packages gradsync builds, tests and runs with.
# Idempotent and quick when everything is there (one dpkg query, no network).
# As root it runs apt-get; otherwise it prints the one command to run.
#
#   tools/install_deps.sh                 # what builds and tests need
#   tools/install_deps.sh --with-pytorch  # accepted for old scripts; PyTorch
#                                         # is now always installed
#
# Debian's PyTorch (CPU, python3-torch 1.13.1, about 570 MB installed) goes
# into Debian's python3: python/ builds gradsync's extension for that
# interpreter (pybind11-dev) and its tests run DDP beside gradsync's hook.
# libtorch-dev is only recommended by python3-torch, so it is named here.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java bazel-platforms pkg-config git
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libssl-dev
  libopenblas-dev libdnnl-dev nlohmann-json3-dev
  # data, plots, network emulation
  dataset-fashion-mnist python3 python3-matplotlib iproute2 iperf3
  # PyTorch workers (python/): Debian's torch, its C++ headers, pybind11
  python3-torch libtorch-dev pybind11-dev
  # fuzzing (fuzz/run.sh, from tools/test.sh): clang's libFuzzer and sanitizers
  clang-14 libclang-rt-14-dev
  # benchmark-only comparison anchor
  libgloo-dev
  # real cluster launchers for tests/mpirun_job_test and tests/slurm_job_test
  # (tools/cluster/): Open MPI's mpirun; Slurm's slurmctld, slurmd, srun and
  # sbatch (slurm-wlm), with munge, the authentication Debian's Slurm uses
  openmpi-bin slurm-wlm munge
)

for argument in "$@"; do
  case "$argument" in
    --with-pytorch) ;;
    *)
      echo "usage: $0 [--with-pytorch]" >&2
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
