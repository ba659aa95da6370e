#!/usr/bin/env bash
# The main job on the embedded example: sets up, builds, and runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
bin=$root/build/bin
example=$root/examples/llama
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== Importing $example/model.pt2 (torch.export joint training graph)"
"$bin/mantissa-compile" "$example/model.pt2" --emit=train-mlir -o "$out/llama.mlir"
grep -o 'train\.[a-z_]*' "$out/llama.mlir" | sort | uniq -c | sort -rn | head -12
echo "   ... written to train IR with its weights ($(du -h "$out/llama.weights.safetensors" | cut -f1))"

echo "== One training step with the reference interpreter (torch CPU semantics)"
"$bin/mantissa-run" "$example/model.pt2" --reference \
  --inputs "$example/inputs.safetensors" --weights "$example/init.safetensors" \
  --dump-grads "$out/grads.safetensors"
echo "   gradients of every parameter written as grad.<fqn> (torch's layout)"
