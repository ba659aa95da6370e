#!/usr/bin/env bash
# The whole training step on a GPU (an H100 or H200 when one is lent): Mantissa's
# compiled step (generated kernels and cuBLAS GEMMs, replayed as one CUDA
# graph per step, with the fused AdamW update on the device) against torch
# eager on the same model, weights and batch, in one invocation.
#
#   bench/step/gpu/run_step_h200.sh prepare [DIR]   here, where LLVM/MLIR
#       is: compiles artifacts with the GPU step (mantissa-compile -o) for
#       llama and llama_medium, fp32, bf16 + fp32 masters
#       (test/e2e/Inputs/bf16_master.yaml) and `compute: bf16` over fp32
#       masters (test/e2e/Inputs/compute_bf16.yaml), the cost model's
#       prediction of each on every device it knows (mantissa-compile
#       --cost-report=json --cost-device D into MODEL.ARM.cost.D.json: the
#       GPU is known only on the device machine, which has no LLVM to run
#       the model), and copies
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
#       prediction for the GPU found ($COST_DEVICE as the device check
#       detected it, else bench/gpu/detect_gpu.sh's choice), and the losses
#       checked against torch's trajectory; the
#       op-by-op run times each op (--op-times), and
#       bench/step/gpu/compare_op_times.py prints measured against predicted
#       per cost class (docs/gpu-cost-model.md: calibration).
#       DRY_RUN=1 runs it here on the stand-in driver (unittests/Runtime/
#       FakeCuda.cpp, $FAKE_CUDA_DIR, default build/unittests/fake-cuda) and
#       torch on the CPU: a check of the script, not of speed.
#   bench/step/gpu/run_step_h200.sh reprice [DIR]   here again, after a run:
#       the cost model's prediction of each artifact on $COST_DEVICE with
#       the copy bandwidth the device measured ($COPY_BANDWIDTH_GBS, GB/s;
#       both from the run's gpu.env or summary.txt) into
#       MODEL.ARM.cost.measured.json, beside the profile's, for the
#       measured steps the run printed.
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

build="${BUILD_DIR:-$repo/build}"
compile="$build/bin/mantissa-compile"
corpus="${MANTISSA_CORPUS_DIR:-$repo/test/Inputs/corpus}"
# price MODEL ARM OUT [COST OPTIONS...]: the cost model's prediction of the
# model's step under the arm's precision, as JSON.
price() {
  local model=$1 arm=$2 out=$3
  shift 3
  local spec
  spec=$(spec_of "$arm")
  "$compile" "$corpus/$model.pt2" ${spec:+--precision "$spec"} --cost-report=json "$@" > "$out"
}
predicted_of() { "${python:-python3}" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["predicted_step_ms"], 3))' "$1"; }

case "$command" in
prepare)
  [[ -x "$compile" ]] || { echo "build first: $compile is missing" >&2; exit 1; }
  # Every device the cost model knows, as its --help lists them.
  devices=$("$compile" --help | sed -nE 's/.*--cost-device=.* \(([^)]*)\)$/\1/p' | tr ',' ' ')
  [[ -n $devices ]] || { echo "$compile --help names no --cost-device devices" >&2; exit 1; }
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  for model in $models; do
    for arm in $arms; do
      spec=$(spec_of "$arm")
      precision=(${spec:+--precision "$spec"})
      art="$dir/$model.$arm"
      host=()
      [[ ${DRY_RUN:-0} == 1 ]] && host=(--gpu-host-kernels="$art.host.so")
      "$compile" "${host[@]}" "$corpus/$model.pt2" "${precision[@]}" -o "$art"
      [[ -f "$art/step.gpu.json" ]] || { echo "$art: no GPU step (see its manifest)" >&2; exit 1; }
      for device in $devices; do
        price "$model" "$arm" "$art.cost.$device.json" --cost-device "$device"
      done
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
  # The device check detects the GPU once for every stage; alone, this
  # script does.
  if [[ -z ${COST_DEVICE:-} ]]; then
    [[ ${DRY_RUN:-0} == 1 ]] && export PROBE_MIB=${PROBE_MIB:-16}
    bash "$repo/bench/gpu/detect_gpu.sh" "$dir/gpu.env" "$dir"
    # shellcheck source=/dev/null
    source "$dir/gpu.env"
  fi
  echo "cost model: --cost-device $COST_DEVICE (MODEL.ARM.cost.$COST_DEVICE.json)"
  # The runtime's mean over the steps after the first two (lazy module
  # loading and the CUDA graph's capture happen in those), as torch's.
  ms_of() { sed -nE 's/^trained .*; ([0-9.]+) ms per step \(mean of steps after the first two\)$/\1/p' "$1"; }
  status=0
  results=()
  for model in $models; do
    for arm in $arms; do
      name="$model.$arm" art="$dir/$model.$arm"
      cost="$art.cost.$COST_DEVICE.json"
      [[ -f $cost ]] || { echo "$cost is missing: prepare again with this script"; status=1; continue; }
      batch="$dir/corpus/$model.inputs.safetensors" init="$dir/corpus/$model.init.safetensors"
      # compute: bf16 is checked against fp32 within bf16 noise (its own
      # fidelity test is test/e2e/compute-autocast.test).
      torch_arm=$([[ $arm == master ]] && echo bf16_master || echo fp32)
      tolerance=$([[ $arm == fp32 ]] && echo 1e-4 || echo 0.02)
      torch_script_arm=$([[ $arm == compute ]] && echo autocast || echo "$arm")
      echo "== $name"
      [[ ${DRY_RUN:-0} == 1 ]] && export FAKE_CUDA_HOST_KERNELS="$art.host.so"
      "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.losses.json" > "$dir/$name.log" 2>&1 || { status=1; tail -5 "$dir/$name.log"; continue; }
      grep -E '^(device|time|kernels|memory):|CUDA graph|op by op' "$dir/$name.log" || true
      # Op by op, each op timed on the device (--op-times): the cost model's
      # calibration per class.
      "$runner" "$art" --inputs "$batch" --weights "$init" --steps "$STEPS" --device cuda \
        --losses "$dir/$name.eager.losses.json" --op-times "$dir/$name.times.json" \
        > "$dir/$name.eager.log" 2>&1 || { status=1; tail -5 "$dir/$name.eager.log"; continue; }
      "$python" "$repo/bench/step/gpu/compare_op_times.py" "$cost" "$dir/$name.times.json" --top 5 \
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
      predicted=$(predicted_of "$cost")
      results+=("$(printf '%-22s %12s %12s %12s %9s %13s' "$name" "$ours" "$eager" "$torch_ms" \
        "$("$python" -c "print(round($torch_ms / max($ours, 1e-9), 2))")" "$predicted")")
    done
  done
  echo
  printf '%-22s %12s %12s %12s %9s %13s\n' model.arm mantissa_ms op_by_op_ms torch_ms speedup predicted_ms
  printf '%s\n' "${results[@]}"
  echo "(mean ms per whole training step after the first two of $STEPS: forward, backward"
  echo " and AdamW, mantissa's from the runtime's report, torch eager's likewise; predicted:"
  echo " the cost model's step on --cost-device $COST_DEVICE, docs/gpu-cost-model.md; with the"
  echo " copy bandwidth measured, ${COPY_BANDWIDTH_GBS:-not measured} GB/s: run_step_h200.sh reprice, here)"
  [[ $status == 0 ]] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
  exit $status
  ;;

reprice)
  [[ ${COST_DEVICE:-} =~ ^[a-z0-9]+$ && ${COPY_BANDWIDTH_GBS:-} =~ ^[0-9]+(\.[0-9]+)?$ ]] || {
    echo "reprice needs COST_DEVICE and COPY_BANDWIDTH_GBS as a run measured them (its gpu.env)," \
      "not '${COST_DEVICE:-}' and '${COPY_BANDWIDTH_GBS:-}'" >&2
    exit 2
  }
  [[ -x "$compile" ]] || { echo "build first: $compile is missing" >&2; exit 1; }
  printf '%-22s %16s %22s\n' model.arm "${COST_DEVICE}_ms" "at_${COPY_BANDWIDTH_GBS}_GBs_ms"
  for model in $models; do
    for arm in $arms; do
      art="$dir/$model.$arm"
      price "$model" "$arm" "$art.cost.measured.json" --cost-device "$COST_DEVICE" \
        --cost-bandwidth-gbs "$COPY_BANDWIDTH_GBS"
      profile=$([[ -f $art.cost.$COST_DEVICE.json ]] && predicted_of "$art.cost.$COST_DEVICE.json" || echo '?')
      printf '%-22s %16s %22s\n' "$model.$arm" "$profile" "$(predicted_of "$art.cost.measured.json")"
    done
  done
  echo "(the cost model's step in ms: the $COST_DEVICE profile's, and with its copy bandwidth"
  echo " replaced by the measured one: $dir/MODEL.ARM.cost.measured.json)"
  ;;

*)
  echo "usage: $0 prepare|run|reprice [DIR]" >&2
  exit 2
  ;;
esac
