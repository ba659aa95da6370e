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
echo "== 3. Train 30 AdamW steps on the example batch with that plan"
echo "      (forward/backward compiled for the CPU; updates by the fused kernels)"
"$bin/mantissa-run" "$example/model.pt2" \
  --inputs "$example/inputs.safetensors" --weights "$example/init.safetensors" \
  --precision "$example/precision.yaml" --steps 30 \
  --losses "$out/losses.json" --final-params "$out/final.safetensors" |
  awk 'NR == 1 || NR % 5 == 0'
echo "   losses: $out/losses.json, loss curve: $out/losses.svg (open it in a browser)"

echo
echo "== 4. The same training on 2 ranks (if mpirun is here): optimizer state"
echo "      sharded across them, a checkpoint every 10 steps"
if command -v mpirun >/dev/null; then
  rm -rf "$out/checkpoint"
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bin/mantissa-run" "$example/model.pt2" \
    --inputs "$example/inputs.safetensors" --weights "$example/init.safetensors" \
    --precision "$example/precision.yaml" --steps 30 \
    --save-checkpoint "$out/checkpoint" --save-every 10 \
    --final-params "$out/final-2ranks.safetensors" 2>/dev/null |
    tr '\r' '\n' | grep -oE 'memory: rank .*|step 30/30 +loss [0-9.]+' | sort -u
  cmp -s "$out/final.safetensors" "$out/final-2ranks.safetensors" &&
    echo "   final parameters identical to the single-rank run; checkpoint: $out/checkpoint"
fi

echo
echo "== 5. Compile the artifact the runtime loads (mantissa-compile -o DIR):"
echo "      manifest, fused AdamW kernels per shard group, PTX, weights"
"$bin/mantissa-compile" "$example/model.pt2" --precision "$example/precision.yaml" \
  -o "$out/artifact"
ls "$out/artifact"
