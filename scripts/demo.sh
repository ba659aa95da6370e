#!/usr/bin/env bash
# The main job on the embedded example: sets up, builds, and runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
bin=$root/build/bin
example=$root/examples/llama
out=$root/build/demo
rm -rf "$out" && mkdir -p "$out"

echo "== 1. Import $example/model.pt2 (a torch.export joint training graph)"
"$bin/mantissa-compile" "$example/model.pt2" --emit=train-mlir -o "$out/llama.mlir"
grep -o 'train\.[a-z_]*' "$out/llama.mlir" | sort | uniq -c | sort -rn | head -8

echo
echo "== 2. The precision plan of $example/precision.yaml"
"$bin/mantissa-compile" "$example/model.pt2" --precision "$example/precision.yaml" \
  --precision-report

echo
echo "== 3. Train on a small dataset ($example/data: a generated language,"
echo "      make_data.py) with that plan: 4 micro-batches per step, shuffled,"
echo "      cosine schedule with warm-up, clipping, validation every 20 steps"
train=(--data "$example/data/train.bin" --shuffle 1 --grad-accum 4
  --lr 3e-3 --lr-schedule cosine --warmup-steps 10 --min-lr-ratio 0.1
  --clip-grad-norm 1.0 --val-data "$example/data/val.bin" --eval-every 20
  --eval-batches 16)
"$bin/mantissa-run" "$example/model.pt2" --weights "$example/init.safetensors" \
  --precision "$example/precision.yaml" --steps 200 "${train[@]}" \
  --metrics "$out/metrics.jsonl" --losses "$out/losses.json" \
  --final-params "$out/final.safetensors" --no-memory-report |
  grep -E 'eval-loss|^trained'
echo "   metrics: $out/metrics.jsonl; training and validation loss: $out/losses.svg"

echo
echo "== 4. The same run on 2 ranks x 2 micro-batches (if mpirun is here):"
echo "      each rank evaluates its own micro-batches, the optimizer state is"
echo "      sharded, a checkpoint every 50 steps; it must end bit-identical"
if command -v mpirun >/dev/null; then
  rm -rf "$out/checkpoint"
  train[5]=2 # --grad-accum 2
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin/mantissa-run" "$example/model.pt2" \
    --weights "$example/init.safetensors" --precision "$example/precision.yaml" \
    --steps 200 "${train[@]}" --save-checkpoint "$out/checkpoint" --save-every 50 \
    --losses "$out/losses-2ranks.json" --final-params "$out/final-2ranks.safetensors" \
    2>/dev/null | grep -E 'memory: rank|^trained' | sort -u
  if cmp -s "$out/final.safetensors" "$out/final-2ranks.safetensors" &&
    cmp -s "$out/losses.json" "$out/losses-2ranks.json"; then
    echo "   losses and final parameters identical to the 1-rank run; checkpoint: $out/checkpoint"
  else
    echo "   error: the 2-rank run differs from the 1-rank run" >&2
    exit 1
  fi
fi

echo
echo "== 5. Compile the artifact the runtime loads (mantissa-compile -o DIR):"
echo "      manifest, fused AdamW kernels per shard group (CPU and PTX), the"
echo "      step compiled for this CPU and for the GPU, weights"
"$bin/mantissa-compile" "$example/model.pt2" --precision "$example/precision.yaml" \
  -o "$out/artifact"
ls "$out/artifact" | tr '\n' ' '
echo

echo
echo "== 6. Train from the artifact with the runtime alone (mantissa-run-runtime"
echo "      links no LLVM): the same run, the same bits"
train[5]=4 # --grad-accum 4, as in step 3
"$bin/mantissa-run-runtime" "$out/artifact" --weights "$example/init.safetensors" \
  --steps 200 "${train[@]}" --losses "$out/losses-runtime.json" \
  --final-params "$out/final-runtime.safetensors" --no-memory-report 2>/dev/null |
  grep -E '^trained'
if cmp -s "$out/final.safetensors" "$out/final-runtime.safetensors"; then
  echo "   final parameters identical to mantissa-run MODEL.pt2"
else
  echo "   error: the runtime-only run differs" >&2
  exit 1
fi
