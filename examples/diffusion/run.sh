#!/usr/bin/env bash
# The diffusion example end to end (README.md beside this file): makes the
# digits dataset, exports the training step and the denoiser, trains, and
# samples a grid of digits with the forward-only step.
#
#   bash examples/diffusion/run.sh [OUT_DIR]      (default build/diffusion-example)
#
# Needs the build (build/bin, or MANTISSA_BIN) and the venv of
# scripts/setup.sh (.venv, or PYTHON). STEPS (default 400) sets the length
# of training (with a warm-up of STEPS / 20 steps); WORLD (default 1) runs
# it on that many mpirun ranks, with the same global batch of 32
# (micro-batches of 32 / WORLD samples), so the same samples and draws in
# every step.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/diffusion-example}
python=${PYTHON:-$root/.venv/bin/python3}
bin=${MANTISSA_BIN:-$root/build/bin}
steps=${STEPS:-400}
world=${WORLD:-1}
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export MANTISSA_COMPILE="$bin/mantissa-compile"
example="$root/examples/diffusion"

if [[ ! $world =~ ^[1-9][0-9]*$ ]] || (( 32 % world )); then
  echo "run.sh: WORLD=$world is not a divisor of the global batch of 32 (1, 2, 4, 8, 16, 32)" >&2
  exit 1
fi
mkdir -p "$out/data"
"$python" "$example/make_dataset.py" "$out/data"
"$python" -m mantissa.export "$example/model.py:train" "$out/model" train
"$python" -m mantissa.export "$example/model.py:denoiser" "$out/model" denoiser

launch=()
if (( world > 1 )); then
  launch=(mpirun --allow-run-as-root --oversubscribe -np "$world")
fi
# Global batch 32 = micro-batch 32 / WORLD x WORLD ranks; the validation
# loss is the mean over the first 192 of the 197 validation digits, with
# the same noise and timesteps at every evaluation.
"${launch[@]}" "$bin/mantissa-run" "$out/model/train.pt2" \
  --weights "$out/model/train.init.safetensors" \
  --dataset "$out/data/train.safetensors" --val-dataset "$out/data/val.safetensors" \
  --micro-batch $((32 / world)) --steps "$steps" --shuffle 1 --seed 1 \
  --lr 2e-3 --lr-schedule cosine --warmup-steps $((steps / 20)) --min-lr-ratio 0.1 --clip-grad-norm 1.0 \
  --eval-every 25 --eval-batches $((6 * world)) \
  --save-checkpoint "$out/checkpoints" --save-every 100 --overwrite-checkpoints \
  --losses "$out/losses.json" --metrics "$out/metrics.jsonl" \
  --final-params "$out/final.safetensors"

"$python" "$example/sample.py" "$out/model/denoiser.pt2" "$out/final.safetensors" \
  "$out/samples.png" --mantissa-run "$bin/mantissa-run" --eager-check
echo "run.sh: the loss plot is $out/losses.svg, the samples $out/samples.png"
