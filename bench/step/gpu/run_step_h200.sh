#!/usr/bin/env bash
# The whole training step on a GPU (an H200 when one is lent): Mantissa's
# compiled step (generated kernels and cuBLAS GEMMs, replayed as one CUDA
# graph per step, with the fused AdamW update on the device) against torch
# eager on the same model, weights and batch, in one invocation.
#
#   bench/step/gpu/run_step_h200.sh prepare [DIR]   here, where LLVM/MLIR
#       is: compiles artifacts with the GPU step (mantissa-compile -o) for
#       llama and llama_medium, fp32 and bf16 + fp32 masters
#       (test/e2e/Inputs/bf16_master.yaml), and copies the batches, torch's
#       trajectories, the model definitions (export_corpus.py) and the
#       headers the runtime-only build needs;
#   bench/step/gpu/run_step_h200.sh run [DIR]       on the GPU machine (no
#       LLVM): builds the runtime alone (bench/gpu/build_runtime.sh), then
#       for each model and arm trains $STEPS steps with `mantissa-run ART
#       --inputs BATCH --device cuda` (graphs on, then op by op), runs torch
#       eager (bench/step/gpu/torch_gpu_step.py), and prints ms per step of
#       each, the ratio, and the losses checked against torch's trajectory.
#
# DIR defaults to build/step-gpu (ignored by git; carry it to the device).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
command="${1:-}"
dir="${2:-$repo/build/step-gpu}"
STEPS=${STEPS:-40}
models=${MODELS:-llama llama_medium}
arms=${ARMS:-fp32 master}

case "$command" in
prepare)
  build="${BUILD_DIR:-$repo/build}"
  compile="$build/bin/mantissa-compile"
  corpus="${MANTISSA_CORPUS_DIR:-$repo/test/Inputs/corpus}"
  [[ -x "$compile" ]] || { echo "build first: $compile is missing" >&2; exit 1; }
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  for model in $models; do
    "$compile" "$corpus/$model.pt2" -o "$dir/$model.fp32"
    "$compile" "$corpus/$model.pt2" --precision "$repo/test/e2e/Inputs/bf16_master.yaml" \
      -o "$dir/$model.master"
    for art in "$dir/$model.fp32" "$dir/$model.master"; do
      [[ -f "$art/step.gpu.json" ]] || { echo "$art: no GPU step (see its manifest)" >&2; exit 1; }
    done
    cp "$corpus/$model.inputs.safetensors" "$corpus/$model.init.safetensors" \
      "$corpus/$model.traj.json" "$dir/corpus/"
  done
  cp "$corpus/export_corpus.py" "$dir/corpus/"
  "$repo/bench/gpu/carry_deps.sh" "$dir/deps"
  du -sh "$dir"
  ;;

run)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  runner=$("$repo/bench/gpu/build_runtime.sh" "$dir/build-runtime" "$dir/deps" "$dir/cmake.log")
  check="$repo/test/Inputs/check_trajectory.py"
  ms_of() { sed -nE 's/^time: rank 0\/1 .*\(([0-9.]+) ms per step\)$/\1/p' "$1"; }
  status=0
  results=()
  for model in $models; do
    for arm in $arms; do
      name="$model.$arm" art="$dir/$model.$arm"
      batch="$dir/corpus/$model.inputs.safetensors" init="$dir/corpus/$model.init.safetensors"
      torch_arm=$([[ $arm == fp32 ]] && echo fp32 || echo bf16_master)
      tolerance=$([[ $arm == fp32 ]] && echo 1e-4 || echo 0.02)
      echo "== $name"
      "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.losses.json" > "$dir/$name.log" 2>&1 || { status=1; tail -5 "$dir/$name.log"; continue; }
      grep -E '^(device|time|kernels|memory):|CUDA graph|op by op' "$dir/$name.log" || true
      MANTISSA_GPU_STEP_GRAPH=0 "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.eager.losses.json" > "$dir/$name.eager.log" 2>&1 || { status=1; tail -5 "$dir/$name.eager.log"; continue; }
      if cmp -s "$dir/$name.losses.json" "$dir/$name.eager.losses.json"; then
        echo "PASS $name: the graph's losses equal op-by-op's"
      else
        echo "DIFF $name: the graph's losses differ from op-by-op's"; status=1
      fi
      python3 "$check" "$dir/$name.losses.json" "$dir/corpus/$model.traj.json" "$torch_arm" \
        --loss-tol "$tolerance" | tail -2 || status=1
      python3 "$repo/bench/step/gpu/torch_gpu_step.py" "$dir/corpus" "$model" "$arm" "$STEPS" \
        "$dir/$name.torch.json" > "$dir/$name.torch.log" 2>&1 || { status=1; tail -5 "$dir/$name.torch.log"; continue; }
      python3 "$check" "$dir/$name.torch.json" "$dir/corpus/$model.traj.json" "$torch_arm" \
        --loss-tol "$tolerance" | tail -1 | sed 's/^/torch: /' || true
      ours=$(ms_of "$dir/$name.log") eager=$(ms_of "$dir/$name.eager.log")
      torch_ms=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["mean_step_ms"], 3))' "$dir/$name.torch.json")
      results+=("$(printf '%-20s %12s %12s %12s %9s' "$name" "$ours" "$eager" "$torch_ms" \
        "$(python3 -c "print(round($torch_ms / $ours, 2))")")")
    done
  done
  echo
  printf '%-20s %12s %12s %12s %9s\n' model.arm mantissa_ms op_by_op_ms torch_ms speedup
  printf '%s\n' "${results[@]}"
  echo "(mean ms per whole training step over $STEPS steps: forward, backward and AdamW;"
  echo " mantissa's from the runtime's time line, torch eager's after 2 warm-up steps)"
  [[ $status == 0 ]] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
  exit $status
  ;;

*)
  echo "usage: $0 prepare|run [DIR]" >&2
  exit 2
  ;;
esac
