#!/usr/bin/env bash
# Fails if the runtime library built in BUILD_DIR links any LLVM or MLIR
# library, directly or indirectly: the runtime must deploy without them.
set -euo pipefail
build_dir=${1:?usage: check-runtime-deps.sh BUILD_DIR}
for binary in "$build_dir/lib/libmantissa_rt.so" "$build_dir/bin/mantissa-run"; do
  [[ -f "$binary" ]] || { echo "check-runtime-deps: $binary not built" >&2; exit 1; }
  if ldd "$binary" | grep -Ei 'libLLVM|libMLIR'; then
    echo "check-runtime-deps: $binary links LLVM/MLIR (above)" >&2
    exit 1
  fi
  # The CUDA driver, cuBLAS and NCCL are reached through dlopen only, so
  # that the runtime loads on machines without a GPU.
  if ldd "$binary" | grep -Ei 'libcuda\.|libnccl|libcudart|libcublas'; then
    echo "check-runtime-deps: $binary links CUDA, cuBLAS or NCCL (above)" >&2
    exit 1
  fi
done
# What the sources include (no LLVM, MLIR or compiler header in the runtime
# or the formats below it) has one check, which ctest runs too.
if ! python3 "$(dirname "$0")/check-layering.py" "$(dirname "$0")/.." >&2; then
  echo "check-runtime-deps: runtime or format sources include compiler headers (above)" >&2
  exit 1
fi
echo "check-runtime-deps: libmantissa_rt.so and mantissa-run link no LLVM, MLIR, CUDA, cuBLAS or NCCL library"
