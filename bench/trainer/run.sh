#!/usr/bin/env bash
# The trainer's data parallelism on this machine, in one invocation:
#   1. tokens/s of llama_medium on token data with the same global batch of
#      4 micro-batches, as (W, K) = (1, 4) and (2, 2), REPEAT times each,
#      interleaved (and the two runs' losses compared: they must be equal);
#   2. the exact gradient combination against a plain reduce-scatter on the
#      same buffers (mantissa-bench-combine), at W = 2 and K = 1, 2, 3.
# Usage: bash bench/trainer/run.sh [BUILD_DIR]   (REPEAT=3 STEPS=30 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
corpus=${CORPUS:-$root/test/Inputs/corpus}
repeat=${REPEAT:-3}
steps=${STEPS:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe)
train=("$corpus/llama_medium.pt2" --weights "$corpus/llama_medium.init.safetensors"
  --data "$root/examples/llama/data/train.bin" --shuffle 1 --steps "$steps"
  --lr 1e-3 --clip-grad-norm 1 --no-memory-report)

echo "== tokens/s, llama_medium, 4 micro-batches of 4x32 tokens per step, $steps steps"
for i in $(seq 1 "$repeat"); do
  "$build/bin/mantissa-run" "${train[@]}" --grad-accum 4 --losses "$out/w1.json" \
    >"$out/w1.log" 2>/dev/null
  "${mpirun[@]}" -np 2 "$build/bin/mantissa-run" "${train[@]}" --grad-accum 2 \
    --losses "$out/w2.json" >"$out/w2.log" 2>/dev/null
  cmp -s "$out/w1.json" "$out/w2.json" || { echo "the losses differ" >&2; exit 1; }
  w1=$(grep -o '[0-9.]* ms per step' "$out/w1.log" | cut -d' ' -f1)
  w2=$(grep -o '[0-9.]* ms per step' "$out/w2.log" | cut -d' ' -f1)
  awk -v a="$w1" -v b="$w2" 'BEGIN { t = 4 * 4 * 32;
    printf "run %d: W=1 K=4 %.1f ms/step (%.0f tokens/s), W=2 K=2 %.1f ms/step (%.0f tokens/s): %.2fx\n",
      '"$i"', a, 1000 * t / a, b, 1000 * t / b, a / b }'
done

echo
echo "== the exact combination against a plain reduce-scatter (fp32)"
for k in 1 2 3; do
  "${mpirun[@]}" -np 2 "$build/bin/mantissa-bench-combine" --accum "$k" --reps 15
done
