#!/usr/bin/env bash
# The fused AdamW kernel on an H200: numerics against torch's golden vectors
# and the benchmark (N = 2^28 as 1 and as 256 members, each mode next to a
# device-to-device copy).
#
#   bench/adamw/gpu/run_h200.sh prepare [DIR]  here, where LLVM/MLIR is:
#       generates the PTX + .meta of every kernel with mantissa-adamw-gen
#       (from $BUILD_DIR, default build) and copies the golden vectors;
#   bench/adamw/gpu/run_h200.sh run [DIR]      on the GPU machine (no LLVM):
#       builds the host program with nvcc and runs `check` then `bench`.
#
# DIR defaults to build/adamw-gpu (ignored by git; carry it to the device).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
command="${1:-}"
dir="${2:-$repo/build/adamw-gpu}"

case "$command" in
prepare)
  gen="${BUILD_DIR:-$repo/build}/bin/mantissa-adamw-gen"
  corpus="${MANTISSA_CORPUS_DIR:-$repo/test/Inputs/corpus}"
  mkdir -p "$dir"
  "$gen" --mode mixed --members 4 --n 16396 --emit gpu -o "$dir/check_mixed"
  "$gen" --mode fp32 --amsgrad --n 4099 --emit gpu -o "$dir/check_amsgrad"
  "$gen" --mode fp32 --maximize --n 4099 --emit gpu -o "$dir/check_maximize"
  for mode in fp32 master remainder; do
    for members in 1 256; do
      "$gen" --mode "$mode" --members "$members" --n $((1 << 28)) \
        --emit gpu -o "$dir/bench_${mode}_${members}"
    done
  done
  install -m 644 "$corpus/adamw_golden.safetensors" "$dir/"
  ls -la "$dir"
  ;;
run)
  nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv || true
  cuda="${CUDA_HOME:-/usr/local/cuda}"
  "$cuda/bin/nvcc" -O2 -std=c++17 -I"$repo/include" \
    "$repo/bench/adamw/gpu/adamw_gpu_check.cpp" -o "$dir/adamw_gpu_check" \
    -L"$cuda/lib64" -L"$cuda/lib64/stubs" -lcuda
  "$dir/adamw_gpu_check" check "$dir"
  "$dir/adamw_gpu_check" bench "$dir"
  ;;
*)
  echo "usage: $0 prepare|run [DIR]" >&2
  exit 2
  ;;
esac
