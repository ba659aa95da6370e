#!/usr/bin/env bash
# The trainer's data parallelism on this machine, in one invocation:
#   1. tokens/s of llama_medium on token data, W = 2 ranks against W = 1 with
#      the same global batch: (W, K) = (1, 2) against (2, 1), the scaling
#      issue 42 asks for, and (1, 4) against (2, 2); REPEAT times each,
#      interleaved, with the 1-minute load average beside each figure (the
#      losses of each pair compared: they must be equal);
#   2. where a W = 2 step's time goes on each rank (mantissa-run --profile:
#      the micro-batches, waiting for the other rank, the exact combination
#      with its all-to-all, the mean and norm, the update with its
#      all-gather), for K = 1 and K = 2;
#   3. the exact gradient combination against a plain reduce-scatter on the
#      same buffers (mantissa-bench-combine), at W = 2 and K = 1, 2, 3.
# The step is compiled once (mantissa-compile -o), so that no run compiles.
# Each rank runs its share of the CPUs (docs/training.md, "Threads per
# rank"): 1 OpenMP thread per rank at W = 2 on 2 CPUs, 2 at W = 1.
#
# On a machine that others load, the figures measure the share of the CPUs
# this script gets, not the trainer: Linux's autogroup scheduler gives one
# terminal session one share, however many processes it runs, so W = 2 gets
# no more CPU than W = 1 there; and every collective waits for both ranks to
# be scheduled at once. The --profile breakdown shows how much of a step
# that waiting is.
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
"$build/bin/mantissa-compile" "$corpus/llama_medium.pt2" -o "$out/art" >/dev/null
train=("$out/art" --weights "$corpus/llama_medium.init.safetensors"
  --data "$root/examples/llama/data/train.bin" --shuffle 1 --steps "$steps"
  --lr 1e-3 --clip-grad-norm 1 --no-memory-report)
load() { cut -d' ' -f1 /proc/loadavg; }
ms() { grep -o '[0-9.]* ms per step' "$1" | cut -d' ' -f1; }

# One W = 1 run with K = 2K1 and one W = 2 run with K = K1, same global batch.
pair() {
  local k1=$1 i=$2
  "$build/bin/mantissa-run" "${train[@]}" --grad-accum $((2 * k1)) \
    --losses "$out/w1.json" >"$out/w1.log" 2>/dev/null
  local l1; l1=$(load)
  "${mpirun[@]}" -np 2 "$build/bin/mantissa-run" "${train[@]}" \
    --grad-accum "$k1" --losses "$out/w2.json" >"$out/w2.log" 2>/dev/null
  local l2; l2=$(load)
  cmp -s "$out/w1.json" "$out/w2.json" || { echo "the losses differ" >&2; exit 1; }
  awk -v a="$(ms "$out/w1.log")" -v b="$(ms "$out/w2.log")" -v k="$k1" \
    -v i="$i" -v la="$l1" -v lb="$l2" 'BEGIN { t = 2 * k * 4 * 32;
    printf "run %d: W=1 K=%d %.1f ms/step (%.0f tokens/s, load %s), W=2 K=%d %.1f ms/step (%.0f tokens/s, load %s): %.2fx\n",
      i, 2 * k, a, 1000 * t / a, la, k, b, 1000 * t / b, lb, a / b }'
}

for k1 in 1 2; do
  echo "== tokens/s, llama_medium, $((2 * k1)) micro-batches of 4x32 tokens per step, $steps steps"
  for i in $(seq 1 "$repeat"); do pair "$k1" "$i"; done
  echo
done

echo "== where a W = 2 step's time goes (mantissa-run --profile, load $(load))"
for k1 in 1 2; do
  echo "K=$k1:"
  "${mpirun[@]}" -np 2 "$build/bin/mantissa-run" "${train[@]}" \
    --grad-accum "$k1" --profile 2>/dev/null | grep '^profile:' | sort
done

echo
echo "== the exact combination against a plain reduce-scatter (fp32)"
for k in 1 2 3; do
  "${mpirun[@]}" -np 2 "$build/bin/mantissa-bench-combine" --accum "$k" --reps 15
done
