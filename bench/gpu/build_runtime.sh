#!/usr/bin/env bash
# Builds the runtime alone (no LLVM or MLIR) on a GPU machine and prints the
# path of its mantissa-run: cmake -DMANTISSA_BUILD_COMPILER=OFF, or, if cmake
# cannot configure, the runtime's sources with c++ directly.
#
# usage: bench/gpu/build_runtime.sh BUILD_DIR DEPS_DIR LOG
#   DEPS_DIR holds headers the machine may lack (nlohmann_json, carried by the
#   benchmarks' prepare steps); LOG receives the build output.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build=${1:?usage: build_runtime.sh BUILD_DIR DEPS_DIR LOG}
deps=${2:?}
log=${3:?}
export CMAKE_PREFIX_PATH="$deps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DMANTISSA_BUILD_COMPILER=OFF > "$log" 2>&1 &&
   cmake --build "$build" --target mantissa-run -j "$(nproc)" >> "$log" 2>&1; then
  echo "build: cmake -DMANTISSA_BUILD_COMPILER=OFF (log in $log)" >&2
  runner="$build/bin/mantissa-run"
else
  echo "build: cmake failed (tail of $log below); building the runtime sources with c++ directly" >&2
  tail -5 "$log" >&2 || true
  mkdir -p "$build"
  # Every runtime source but the MPI transport (which needs mpi.h).
  # oneDNN where the machine has it, else the runtime without it.
  skip=CpuGemm.cpp libs=()
  if [[ -f /usr/include/oneapi/dnnl/dnnl.hpp ]]; then
    skip=CpuGemmUnavailable.cpp libs=(-fopenmp -ldnnl)
  fi
  sources=()
  for source in "$repo"/lib/Runtime/*.cpp; do
    case $(basename "$source") in
    CommunicatorMPI.cpp | "$skip") ;;
    *) sources+=("$source") ;;
    esac
  done
  c++ -O2 -std=c++17 -fexceptions -I"$repo/include" -I"$deps/include" \
    "${sources[@]}" "$repo/tools/mantissa-run/mantissa-run-runtime.cpp" \
    -ldl "${libs[@]}" -o "$build/mantissa-run-direct" >> "$log" 2>&1
  runner="$build/mantissa-run-direct"
fi
if ldd "$runner" | grep -Ei 'libcuda\.|libnccl|libcublas|libLLVM|libMLIR' >&2; then
  echo "FAIL: $runner links CUDA, cuBLAS, NCCL or LLVM directly (above)" >&2
  exit 1
fi
echo "$runner"
