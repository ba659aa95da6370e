#!/usr/bin/env bash
# The whole training step on a GPU (an H200 when one is lent): Mantissa's
# compiled step (generated kernels and cuBLAS GEMMs, replayed as one CUDA
# graph per step, with the fused AdamW update on the device) against torch
# eager on the same model, weights and batch, in one invocation.
#
#   bench/step/gpu/run_step_h200.sh prepare [DIR]   here, where LLVM/MLIR
#       is: compiles artifacts with the GPU step (mantissa-compile -o) for
#       llama and llama_medium, fp32, bf16 + fp32 masters
#       (test/e2e/Inputs/bf16_master.yaml) and `compute: bf16` over fp32
#       masters (test/e2e/Inputs/compute_bf16.yaml), the cost model's
#       prediction of each (mantissa-compile --cost-report=json), and copies
#       the batches, torch's trajectories, the model definitions
#       (export_corpus.py) and the headers the runtime-only build needs;
#       with DRY_RUN=1 also each step's kernels for the host, so that `run`
#       can go through the stand-in driver here;
#   bench/step/gpu/run_step_h200.sh run [DIR]       on the GPU machine (no
#       LLVM): builds the runtime alone (bench/gpu/build_runtime.sh), then
#       for each model and arm trains $STEPS steps with `mantissa-run ART
#       --inputs BATCH --device cuda` (graphs on, then op by op), runs torch
#       eager (bench/step/gpu/torch_gpu_step.py; the compute arm against
#       torch.autocast), and prints ms per step of each (steps after the
#       first two: lazy loading, graph capture), the ratio, the cost model's
#       prediction, and the losses checked against torch's trajectory; the
#       op-by-op run times each op (--op-times), and
#       bench/step/gpu/compare_op_times.py prints measured against predicted
#       per cost class (docs/gpu-cost-model.md: calibration).
#       DRY_RUN=1 runs it here on the stand-in driver (unittests/Runtime/
#       FakeCuda.cpp, $FAKE_CUDA_DIR, default build/unittests/fake-cuda) and
#       torch on the CPU: a check of the script, not of speed.
#
# DIR defaults to build/step-gpu (ignored by git; carry it to the device).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
command="${1:-}"
dir="${2:-$repo/build/step-gpu}"
STEPS=${STEPS:-40}
models=${MODELS:-llama llama_medium}
arms=${ARMS:-fp32 master compute}
spec_of() {
  case "$1" in
  master) echo "$repo/test/e2e/Inputs/bf16_master.yaml" ;;
  compute) echo "$repo/test/e2e/Inputs/compute_bf16.yaml" ;;
  esac
}

case "$command" in
prepare)
  build="${BUILD_DIR:-$repo/build}"
  compile="$build/bin/mantissa-compile"
  corpus="${MANTISSA_CORPUS_DIR:-$repo/test/Inputs/corpus}"
  [[ -x "$compile" ]] || { echo "build first: $compile is missing" >&2; exit 1; }
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  for model in $models; do
    for arm in $arms; do
      spec=$(spec_of "$arm")
      precision=(${spec:+--precision "$spec"})
      art="$dir/$model.$arm"
      host=()
      [[ ${DRY_RUN:-0} == 1 ]] && host=(env MANTISSA_GPU_HOST_KERNELS="$art.host.so")
      "${host[@]}" "$compile" "$corpus/$model.pt2" "${precision[@]}" -o "$art"
      [[ -f "$art/step.gpu.json" ]] || { echo "$art: no GPU step (see its manifest)" >&2; exit 1; }
      "$compile" "$corpus/$model.pt2" "${precision[@]}" --cost-report=json > "$art.cost.json"
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
  runner=$("$repo/bench/gpu/build_runtime.sh" "${RUNTIME_BUILD_DIR:-$dir/build-runtime}" "$dir/deps" "$dir/cmake.log")
  check="$repo/test/Inputs/check_trajectory.py"
  python=${PYTHON:-python3}
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    export LD_LIBRARY_PATH="${FAKE_CUDA_DIR:-$repo/build/unittests/fake-cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export TORCH_DEVICE=cpu
    python=${PYTHON:-/usr/bin/python3}
  fi
  # The runtime's mean over the steps after the first two (lazy module
  # loading and the CUDA graph's capture happen in those), as torch's.
  ms_of() { sed -nE 's/^trained .*; ([0-9.]+) ms per step \(mean of steps after the first two\)$/\1/p' "$1"; }
  predicted_of() { "$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["predicted_step_ms"], 3))' "$1"; }
  status=0
  results=()
  for model in $models; do
    for arm in $arms; do
      name="$model.$arm" art="$dir/$model.$arm"
      batch="$dir/corpus/$model.inputs.safetensors" init="$dir/corpus/$model.init.safetensors"
      # compute: bf16 is checked against fp32 within bf16 noise (its own
      # fidelity test is test/e2e/compute-autocast.test).
      torch_arm=$([[ $arm == master ]] && echo bf16_master || echo fp32)
      tolerance=$([[ $arm == fp32 ]] && echo 1e-4 || echo 0.02)
      torch_script_arm=$([[ $arm == compute ]] && echo autocast || echo "$arm")
      echo "== $name"
      [[ ${DRY_RUN:-0} == 1 ]] && export MANTISSA_GPU_HOST_KERNELS="$art.host.so"
      "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.losses.json" > "$dir/$name.log" 2>&1 || { status=1; tail -5 "$dir/$name.log"; continue; }
      grep -E '^(device|time|kernels|memory):|CUDA graph|op by op' "$dir/$name.log" || true
      # Op by op, each op timed on the device (--op-times): the cost model's
      # calibration per class.
      "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.eager.losses.json" --op-times "$dir/$name.times.json" \
        > "$dir/$name.eager.log" 2>&1 || { status=1; tail -5 "$dir/$name.eager.log"; continue; }
      "$python" "$repo/bench/step/gpu/compare_op_times.py" "$art.cost.json" "$dir/$name.times.json" --top 5 \
        || status=1
      if cmp -s "$dir/$name.losses.json" "$dir/$name.eager.losses.json"; then
        echo "PASS $name: the graph's losses equal op-by-op's"
      else
        echo "DIFF $name: the graph's losses differ from op-by-op's"; status=1
      fi
      "$python" "$check" "$dir/$name.losses.json" "$dir/corpus/$model.traj.json" "$torch_arm" \
        --loss-tol "$tolerance" --first "$STEPS" | tail -2 || status=1
      "$python" "$repo/bench/step/gpu/torch_gpu_step.py" "$dir/corpus" "$model" "$torch_script_arm" "$STEPS" \
        "$dir/$name.torch.json" > "$dir/$name.torch.log" 2>&1 || { status=1; tail -5 "$dir/$name.torch.log"; continue; }
      "$python" "$check" "$dir/$name.torch.json" "$dir/corpus/$model.traj.json" "$torch_arm" \
        --loss-tol "$tolerance" --first "$STEPS" | tail -1 | sed 's/^/torch: /' || true
      ours=$(ms_of "$dir/$name.log") eager=$(ms_of "$dir/$name.eager.log")
      torch_ms=$("$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["mean_step_ms"], 3))' "$dir/$name.torch.json")
      predicted=$(predicted_of "$art.cost.json")
      results+=("$(printf '%-22s %12s %12s %12s %9s %13s' "$name" "$ours" "$eager" "$torch_ms" \
        "$("$python" -c "print(round($torch_ms / max($ours, 1e-9), 2))")" "$predicted")")
    done
  done
  echo
  printf '%-22s %12s %12s %12s %9s %13s\n' model.arm mantissa_ms op_by_op_ms torch_ms speedup predicted_ms
  printf '%s\n' "${results[@]}"
  echo "(mean ms per whole training step after the first two of $STEPS: forward, backward"
  echo " and AdamW, mantissa's from the runtime's report, torch eager's likewise; predicted:"
  echo " the cost model's step, docs/gpu-cost-model.md)"
  [[ $status == 0 ]] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
  exit $status
  ;;

*)
  echo "usage: $0 prepare|run [DIR]" >&2
  exit 2
  ;;
esac
