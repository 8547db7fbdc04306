#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined)
# straight from the sources Bazel lists for them, into $GRADSYNC_FUZZ_OUT (default
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
  proto/*.proto
for generated in "$OUT"/gen.new/*; do
  target="$OUT/gen/proto/$(basename "$generated")"
  cmp -s "$generated" "$target" || cp "$generated" "$target"
done
rm -rf "$OUT/gen.new"

# -g1 (line tables) is what a sanitizer's report needs for file and line.
FLAGS=(-std=c++17 -O1 -g1 -fno-omit-frame-pointer
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

# Each target's sources are those of its replay test in fuzz/BUILD
# (`<target>_replay`), as Bazel resolves them in the default configuration:
# the project's .cc files, and a proto's generated code for each .proto.
# So a file a library gains is linked here without editing this script.
BAZEL_FLAGS=(--color=no --curses=no)
sources_of() {  # fuzz target name
  local label path
  bazel cquery "${BAZEL_FLAGS[@]}" \
      "kind('source file', deps(//fuzz:$1_replay))" 2>/dev/null |
    sed -n 's/^\(\/\/[^ ]*\) .*/\1/p' | sort | while read -r label; do
      path=${label#//}
      path=${path/://}
      path=${path#/}
      case "$path" in
        fuzz/replay_main.cc) ;;
        *.cc) echo "$path" ;;
        proto/*.proto)
          echo "$OUT/gen/proto/$(basename "$path" .proto).pb.cc"
          echo "$OUT/gen/proto/$(basename "$path" .proto).grpc.pb.cc" ;;
      esac
    done
}

# Runs "$@" in the background, at most JOBS at a time; a failure is
# remembered in pool_failed and reported by pool_wait.
JOBS=${GRADSYNC_FUZZ_JOBS:-$(nproc)}
pool_failed=0
pool_run() {
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || pool_failed=1; done
  "$@" &
}
pool_wait() {
  while (( $(jobs -rp | wc -l) > 0 )); do wait -n || pool_failed=1; done
  wait || pool_failed=1
  (( pool_failed == 0 ))
}

link() {  # name, then its sources
  local name=$1; shift
  local objects=() src
  for src in "$@"; do objects+=("$(object_of "$src")"); done
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "${objects[@]}" "${LIBS[@]}" -o "$OUT/bin/$name"
}

# Every target with a replay test; run.sh reads the list.
TARGETS=($(sed -n 's/^ *name = "\(.*_fuzzer\)_replay",$/\1/p' fuzz/BUILD))
if (( ${#TARGETS[@]} == 0 )); then
  echo "fuzz/build.sh: no <target>_replay tests found in fuzz/BUILD" >&2
  exit 1
fi
declare -A sources_of_target
for target in "${TARGETS[@]}"; do
  sources=($(sources_of "$target"))
  if (( ${#sources[@]} < 2 )); then
    echo "fuzz/build.sh: bazel cquery found no sources for //fuzz:${target}_replay;" \
         "run it by hand to see why" >&2
    exit 1
  fi
  sources_of_target[$target]="${sources[*]}"
done

# Each source once, however many targets share it, JOBS compiles at a time;
# then the links, also side by side.
echo "== compiling $(printf '%s\n' ${sources_of_target[@]} | sort -u | wc -l) sources, $JOBS at a time"
for src in $(printf '%s\n' ${sources_of_target[@]} | sort -u); do
  pool_run compile "$src"
done
if ! pool_wait; then
  echo "fuzz/build.sh: a compile failed (its error is above)" >&2
  exit 1
fi
for target in "${TARGETS[@]}"; do
  echo "== linking $target"
  pool_run link "$target" ${sources_of_target[$target]}
done
if ! pool_wait; then
  echo "fuzz/build.sh: a link failed (its error is above)" >&2
  exit 1
fi
printf '%s\n' "${TARGETS[@]}" >"$OUT/targets"
