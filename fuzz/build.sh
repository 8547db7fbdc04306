#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined)
# straight from the sources, into $GRADSYNC_FUZZ_OUT (default
# /tmp/gradsync-fuzz/bin). Not through Bazel: pointing Bazel 4's C++
# toolchain at clang (CC=clang) re-configures @local_config_cc, which would
# rebuild every target of the shared output base for everyone on every
# switch; the fuzzers need a handful of files, and the system libraries
# (gRPC, protobuf, Abseil) link as they are, uninstrumented.
#
# Needs clang-14 and libclang-rt-14-dev (tools/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${GRADSYNC_FUZZ_OUT:-/tmp/gradsync-fuzz}
mkdir -p "$OUT/bin" "$OUT/gen/proto" "$OUT/obj"
CXX=${CXX_FUZZ:-clang++-14}

# The coordinator's and the parameter server's messages, generated as Bazel
# would; a file replaces the previous one only when it changed, so objects
# that include it are rebuilt only then.
rm -rf "$OUT/gen.new" && mkdir -p "$OUT/gen.new"
protoc -Iproto --cpp_out="$OUT/gen.new" --grpc_out="$OUT/gen.new" \
  --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" \
  proto/coordinator.proto proto/parameter_server.proto
for generated in "$OUT"/gen.new/*; do
  target="$OUT/gen/proto/$(basename "$generated")"
  cmp -s "$generated" "$target" || cp "$generated" "$target"
done
rm -rf "$OUT/gen.new"

FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I. -I"$OUT/gen" -Wno-unused-command-line-argument)
LIBS=($(pkg-config --libs grpc++ protobuf absl_flags absl_flags_parse absl_status \
        absl_statusor absl_str_format absl_synchronization absl_time) -lopenblas -ldnnl -lgomp -lz)

object_of() { echo "$OUT/obj/$(echo "$1" | tr / _).o"; }
# Recompiles when the source or any header it included (the compiler's own
# dependency list, <obj>.d) is newer than the object: a header that changed
# a struct's layout must not leave objects built against the old one.
compile() {
  local src=$1 obj dep
  obj=$(object_of "$1")
  local stale=0
  if [[ ! -f "$obj" || ! -f "$obj.d" ]]; then
    stale=1
  else
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$obj.d"); do
      if [[ "$dep" -nt "$obj" ]]; then stale=1; break; fi
    done
  fi
  if (( stale )); then
    "$CXX" "${FLAGS[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj"
  fi
}

COMMON=(core/base/logging.cc core/cluster/job_token.cc)
COORDINATOR=(core/cluster/coordinator.cc core/cluster/coordinator_service.cc core/cluster/grpc_job_token.cc
             core/cluster/rendezvous.cc core/cluster/job_id.cc core/cluster/listen_port.cc
             core/cluster/tls_config.cc
             "$OUT/gen/proto/coordinator.pb.cc" "$OUT/gen/proto/coordinator.grpc.pb.cc")
PS_SHARD=(ps/shard.cc ps/consistency.cc ps/shard_key.cc ps/bsp_key.cc ps/async_key.cc
          ps/key_parameters.cc ps/shard_checkpoint.cc ps/shard_statistics.cc
          core/device/device.cc core/device/cpu_device.cc core/device/dnnl_context.cc
          core/device/dnnl_convolution.cc core/device/dnnl_batch_norm.cc
          core/optim/optimizer.cc
          core/optim/checkpoint.cc core/telemetry/metrics.cc core/telemetry/process_counters.cc
          core/base/files.cc
          "$OUT/gen/proto/parameter_server.pb.cc")
PS_WIRE=(ps/wire.cc "$OUT/gen/proto/parameter_server.pb.cc")
RING=(allreduce/ring_handshake.cc allreduce/tcp_connection.cc allreduce/socket_address.cc)

# name, then its sources.
build() {
  local name=$1; shift
  echo "== $name"
  local objects=()
  for src in "$@"; do
    compile "$src"
    objects+=("$(object_of "$src")")
  done
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "${objects[@]}" "${LIBS[@]}" -o "$OUT/bin/$name"
}

build coordinator_service_fuzzer fuzz/coordinator_service_fuzzer.cc "${COORDINATOR[@]}" "${COMMON[@]}"
build ring_handshake_fuzzer fuzz/ring_handshake_fuzzer.cc "${RING[@]}" "${COMMON[@]}"
build ps_shard_fuzzer fuzz/ps_shard_fuzzer.cc "${PS_SHARD[@]}" "${COMMON[@]}"
build ps_wire_fuzzer fuzz/ps_wire_fuzzer.cc "${PS_WIRE[@]}"
