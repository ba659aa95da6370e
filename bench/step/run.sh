#!/usr/bin/env bash
# Steps per second of a whole training step on the CPU, Mantissa against
# torch eager on the same model, weights and batch, in one invocation.
#
# usage: bench/step/run.sh [MODEL ...]   (default: llama llama_medium)
# Needs Debian's python3-torch for the baseline (bench/step/torch_cpu_step.py)
# and the corpus in test/Inputs/corpus.
#
# Mantissa compiles forward/backward for the CPU (train -> linalg -> LLVM,
# clang -O2 -march=native, OpenMP threads; the library is cached, so the timed
# steps never include compilation); the updates run in the compiled fused
# AdamW kernels.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${MANTISSA_CORPUS_DIR:-$root/test/Inputs/corpus}
steps=${STEPS:-20}
threads=${THREADS:-2}
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(llama llama_medium)
run=$root/build/bin/mantissa-run
[[ -x "$run" ]] || { echo "build first: $run is missing" >&2; exit 1; }

# torch's matrix products run in whichever BLAS Debian's alternatives pick
# (the reference BLAS unless e.g. libopenblas0-pthread is installed); say
# which, since it decides the baseline. TORCH_LD_LIBRARY_PATH runs torch
# with another one (e.g. an unpacked OpenBLAS) without installing it.
blas=$(LD_LIBRARY_PATH=${TORCH_LD_LIBRARY_PATH:-} /usr/bin/python3 -c \
  'import torch, re; print(open("/proc/self/maps").read().count("openblas") and "OpenBLAS" or "reference BLAS")' 2>/dev/null || echo unknown)
echo "torch baseline: $blas, $threads threads; mantissa: OMP_NUM_THREADS=${OMP_NUM_THREADS:-all cores}"
printf '%-14s %14s %14s %8s\n' model mantissa_ms torch_ms speedup
for model in "${models[@]}"; do
  torch_json=$(LD_LIBRARY_PATH=${TORCH_LD_LIBRARY_PATH:-} OPENBLAS_NUM_THREADS=$threads \
    /usr/bin/python3 "$root/bench/step/torch_cpu_step.py" "$corpus" "$model" "$steps" "$threads")
  torch_ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["median_step_ms"])' "$torch_json")
  # The runtime's report: the mean time of a whole training step
  # (forward/backward and the sharded update), compilation excluded.
  mantissa_ms=$("$run" "$corpus/$model.pt2" --inputs "$corpus/$model.inputs.safetensors" \
           --weights "$corpus/$model.init.safetensors" --steps "$steps" 2>/dev/null |
         sed -nE 's/^time: rank 0\/1 .*\(([0-9.]+) ms per step\)$/\1/p')
  speedup=$(python3 -c "print(round($torch_ms / $mantissa_ms, 3))")
  printf '%-14s %14s %14s %8s\n' "$model" "$mantissa_ms" "$torch_ms" "$speedup"
done
