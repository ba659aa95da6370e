#!/usr/bin/env bash
# Steps per second of a whole training step on the CPU, Mantissa against
# torch eager on the same model, weights and batch, in one invocation.
#
# usage: bench/step/run.sh [MODEL ...]   (default: llama llama_medium)
# Needs Debian's python3-torch for the baseline (torch_cpu_step.py, from
# ../shared/bench) and the corpus in ../shared/corpus.
#
# Mantissa compiles forward/backward for the CPU (train -> linalg -> LLVM,
# clang -O2 -march=native, one thread; the library is cached, so the timed
# steps never include compilation); the updates run in the compiled fused
# AdamW kernels.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${MANTISSA_CORPUS_DIR:-$root/../shared/corpus}
steps=${STEPS:-20}
threads=${THREADS:-2}
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(llama llama_medium)
run=$root/build/bin/mantissa-run
[[ -x "$run" ]] || { echo "build first: $run is missing" >&2; exit 1; }

printf '%-14s %14s %14s %8s\n' model mantissa_ms torch_ms speedup
for model in "${models[@]}"; do
  torch_json=$(/usr/bin/python3 "$root/bench/step/torch_cpu_step.py" "$corpus" "$model" "$steps" "$threads")
  torch_ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["median_step_ms"])' "$torch_json")
  rate=$("$run" "$corpus/$model.pt2" --inputs "$corpus/$model.inputs.safetensors" \
           --weights "$corpus/$model.init.safetensors" --steps "$steps" | tail -1 |
         sed -E 's/.*  ([0-9.]+) steps\/s.*/\1/')
  mantissa_ms=$(python3 -c "print(round(1000 / $rate, 2))")
  speedup=$(python3 -c "print(round($torch_ms / $mantissa_ms, 3))")
  printf '%-14s %14s %14s %8s\n' "$model" "$mantissa_ms" "$torch_ms" "$speedup"
done
