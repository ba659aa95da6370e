#!/usr/bin/env bash
# Every device check in one script, for a session that is lent a GPU (an
# H100 first, an H200 second) for 15 minutes (start-up included): each stage
# runs under its own time limit and the whole run under $BUDGET_S (default
# 300 s), so that a failed first run leaves room for a rerun.
#
#   bench/device/check_gpu.sh prepare [DIR]  here, where LLVM/MLIR is:
#       the artifacts, PTX, batches, torch's numbers and the cost model's
#       predictions on every device it knows (h100, h200) that the stages
#       need, into DIR (default build/device-check; carry it: run --carry
#       build/device-check);
#   bench/device/check_gpu.sh run [DIR]      on the device machine (no
#       LLVM, cmake and ninja only in /opt/torch/.venv/bin, cuBLAS in
#       /usr/local/cuda/lib64, NCCL in the system's libraries, GoogleTest
#       perhaps missing): first detects the GPU (bench/gpu/detect_gpu.sh:
#       its name and memory from nvidia-smi, its multiprocessors and
#       device-to-device copy bandwidth from a probe of the CUDA driver),
#       which picks the cost model's device (h100 or h200 by the name, h200
#       with a warning for another GPU) whose predictions the step stage
#       prints, and writes what it found at the end of summary.txt; then
#       builds the runtime alone once, then the stages
#         step    the whole training step of llama and llama_medium (fp32,
#                 bf16 + fp32 masters, compute: bf16) against torch eager,
#                 with the cost model's prediction beside the measurement
#                 (bench/step/gpu/run_step_h200.sh);
#         adamw   the fused AdamW kernels against torch's golden vectors and
#                 their bandwidth (bench/adamw/gpu/run_h200.sh);
#         update  the runtime's GPU update path against the CPU's bits,
#                 checkpoints across devices (bench/adamw/gpu/run_update_h200.sh);
#         exports torch 2.11's joint graphs of models that call
#                 F.scaled_dot_product_attention, with torch's numbers
#                 (tools/pt2-export/export_sdpa_models.py; this machine's
#                 torch cannot export), packed with its log into
#                 $OUT/exports.tar.gz (the device tool returns at most 8
#                 files of 16 MiB, and $OUT holds 7 with it: the
#                 joint graphs, graph texts, batches, initial weights,
#                 torch's gradients and trajectories, not the final
#                 parameters): on one CPU core beside the other stages, from
#                 the start, so it spends none of their budget;
#       and prints one line per stage (PASS, FAIL or TIMEOUT, seconds) and
#       writes the logs into $OUT (the device tool's returned folder) when
#       it is set;
#   bench/device/check_gpu.sh reprice SUMMARY [DIR]  here again, with the
#       summary.txt a run returned (or its DIR/gpu.env): the cost model's
#       step for each artifact on the detected device with the copy
#       bandwidth the run measured (mantissa-compile --cost-bandwidth-gbs;
#       the device machine has no LLVM to run the model), beside the
#       profile's prediction, to set against the measured steps: a PCIe
#       H100's memory is slower than the SXM profile's;
#   bench/device/check_gpu.sh dry-run [DIR]  here: prepare and run the step
#       stage on the stand-in driver (unittests/Runtime/FakeCuda.cpp) and
#       torch on the CPU, for llama and 6 steps, then reprice with what the
#       detection measured, to check the script itself (not speed: the
#       stand-in runs kernels thread by thread and its "GPU" is host memory,
#       priced as the default h200 with a warning); the adamw and update
#       stages need a GPU (nvcc-built host program, real kernels) and are
#       listed as skipped.
#
# STAGES (default "step adamw update") and STEPS (default 20) select less.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
command="${1:-}"
dir="${2:-$repo/build/device-check}"
stages=${STAGES:-step adamw update exports}
export STEPS=${STEPS:-20}
budget=${BUDGET_S:-300}

prepare() {
  rm -rf "$dir"
  mkdir -p "$dir"
  for stage in $stages; do
    case "$stage" in
    step) bash "$repo/bench/step/gpu/run_step_h200.sh" prepare "$dir/step" ;;
    adamw) bash "$repo/bench/adamw/gpu/run_h200.sh" prepare "$dir/adamw" ;;
    update) bash "$repo/bench/adamw/gpu/run_update_h200.sh" prepare "$dir/update" ;;
    exports) ;;
    *) echo "unknown stage '$stage' (step, adamw, update, exports)" >&2; exit 2 ;;
    esac
  done
  "$repo/bench/gpu/carry_deps.sh" "$dir/deps"
  du -sh "$dir"
}

# run_stage NAME LIMIT COMMAND...: one line of the summary.
summary=()
status=0
started=0
run_stage() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - started)))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    summary+=("$(printf '%-8s SKIPPED (the budget of %s s is spent)' "$name" "$budget")")
    status=1
    return
  fi
  local begin log=${OUT:-$dir}/$name.log
  begin=$(date +%s)
  echo "== $name (at most $limit s)"
  local rc=0
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1 || rc=$?
  local took=$(($(date +%s) - begin))
  tail -20 "$log"
  if ((rc == 0)); then
    summary+=("$(printf '%-8s PASS     %4d s' "$name" "$took")")
  elif ((rc == 124 || rc == 137)); then
    summary+=("$(printf '%-8s TIMEOUT  %4d s (limit %s s; log %s)' "$name" "$took" "$limit" "$log")")
    status=1
  else
    summary+=("$(printf '%-8s FAIL     %4d s (exit %d; log %s)' "$name" "$took" "$rc" "$log")")
    status=1
  fi
}

# run_gpu_stage NAME LIMIT SCRIPT: a stage that needs a GPU (an nvcc-built
# host program, real kernels): `SCRIPT run $dir/NAME`, listed as skipped in a
# dry run (the caller's $dry).
run_gpu_stage() {
  if [[ $dry == 1 ]]; then
    summary+=("$(printf '%-8s SKIPPED (dry run: needs a GPU)' "$1")")
  else
    run_stage "$1" "$2" bash "$3" run "$dir/$1"
  fi
}

run() {
  started=$(date +%s)
  local dry=${DRY_RUN:-0}
  local detect_env=()
  if [[ $dry != 1 ]]; then
    export PATH="/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH"
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  else
    # The probe copies host memory through the stand-in: a few MiB.
    detect_env=(env LD_LIBRARY_PATH="${FAKE_CUDA_DIR:-$repo/build/unittests/fake-cuda}" PROBE_MIB=16)
  fi
  # Which GPU this is, before anything prices or measures it: every stage
  # reads COST_DEVICE (and COPY_BANDWIDTH_GBS) from here. Its log stays in
  # DIR: $OUT returns at most 8 files, and summary.txt carries the result.
  echo "== detect"
  "${detect_env[@]}" bash "$repo/bench/gpu/detect_gpu.sh" "$dir/gpu.env" "$dir/detect" \
    2>&1 | tee "$dir/detect.log" || true
  if [[ -f $dir/gpu.env ]]; then
    # shellcheck source=/dev/null
    source "$dir/gpu.env"
  else
    COST_DEVICE=h200 COPY_BANDWIDTH_GBS=''
    echo "COST_DEVICE=h200" > "$dir/gpu.env"
  fi
  export COST_DEVICE COPY_BANDWIDTH_GBS
  local copy="copy not measured"
  [[ -n ${COPY_BANDWIDTH_GBS:-} ]] && copy="copy $COPY_BANDWIDTH_GBS GB/s measured"
  summary+=("$(printf '%-8s %s, %s SMs: --cost-device %s, %s' gpu "${GPU_NAME:-unknown GPU}" \
    "${GPU_MULTIPROCESSORS:-?}" "$COST_DEVICE" "$copy")")
  # The exports run on one core from the start, beside everything else.
  local exports_pid=
  if [[ " $stages " == *" exports "* && $dry != 1 ]]; then
    local exports_started
    exports_started=$(date +%s)
    (
      rc=0
      rm -rf "$dir/exports"
      mkdir -p "$dir/exports"
      timeout --kill-after=10 240 python3 "$repo/tools/pt2-export/export_sdpa_models.py" \
        "$dir/exports" > "$dir/exports.log" 2>&1 || rc=$?
      # One file back (log included), whatever the export managed.
      cp "$dir/exports.log" "$dir/exports/"
      tar -czf "${OUT:-$dir}/exports.tar.gz" -C "$dir/exports" --exclude='*.finals.safetensors' \
        --exclude='*.fwd.pt2' --exclude='*.joint.json' . >> "$dir/exports.log" 2>&1 || rc=1
      echo "$rc $(($(date +%s) - exports_started))" > "$dir/exports.status"
    ) &
    exports_pid=$!
  fi
  # One runtime build serves every stage (the stages' scripts reuse it).
  export RUNTIME_BUILD_DIR="${RUNTIME_BUILD_DIR:-$dir/build-runtime}"
  run_stage build 150 "$repo/bench/gpu/build_runtime.sh" "$RUNTIME_BUILD_DIR" "$dir/deps" \
    "${OUT:-$dir}/cmake.log"
  for stage in $stages; do
    case "$stage" in
    step) run_stage step 120 bash "$repo/bench/step/gpu/run_step_h200.sh" run "$dir/step" ;;
    adamw) run_gpu_stage adamw 60 "$repo/bench/adamw/gpu/run_h200.sh" ;;
    update) run_gpu_stage update 90 "$repo/bench/adamw/gpu/run_update_h200.sh" ;;
    exports)
      if [[ $dry == 1 ]]; then
        summary+=("$(printf '%-8s SKIPPED (dry run: needs torch >= 2.9)' exports)")
      else
        wait "$exports_pid" || true
        local rc took
        read -r rc took < "$dir/exports.status" || rc=1 took=0
        tail -8 "$dir/exports.log"
        if ((rc == 0)); then
          summary+=("$(printf '%-8s PASS     %4d s (beside the others)' exports "$took")")
        else
          summary+=("$(printf '%-8s FAIL     %4d s (exit %d; log exports.log in %s)' exports \
            "$took" "$rc" "${OUT:-$dir}/exports.tar.gz")")
          status=1
        fi
      fi ;;
    esac
  done
  echo
  echo "== summary ($(($(date +%s) - started)) s of a $budget s budget)"
  printf '%s\n' "${summary[@]}" | tee "${OUT:-$dir}/summary.txt"
  # What `reprice` reads, here, from the returned summary.
  tee -a "${OUT:-$dir}/summary.txt" < "$dir/gpu.env"
  if [[ $dry == 1 ]]; then
    # Here, where the cost model runs: the reprice a session does after a
    # device run, with the stand-in's host-memory bandwidth.
    echo
    echo "== reprice"
    reprice "$dir/gpu.env" || status=1
  else
    echo "(here: bench/device/check_gpu.sh reprice SUMMARY.txt prices the steps with this copy bandwidth)"
  fi
  return $status
}

# reprice FILE: the step stage's artifacts priced with the bandwidth a run
# measured on the device it detected (FILE: its summary.txt or gpu.env).
# Read with sed, not sourced: the file came back from another machine.
reprice() {
  local file=${1:?usage: $0 reprice SUMMARY.txt|gpu.env [DIR]}
  local device bandwidth
  device=$(sed -n 's/^COST_DEVICE=//p' "$file" | tail -1)
  bandwidth=$(sed -n 's/^COPY_BANDWIDTH_GBS=//p' "$file" | tail -1)
  if [[ -z $bandwidth || $bandwidth == "''" ]]; then
    echo "$file: the run measured no copy bandwidth (see its detect lines); nothing to reprice" >&2
    return 1
  fi
  COST_DEVICE=$device COPY_BANDWIDTH_GBS=$bandwidth \
    bash "$repo/bench/step/gpu/run_step_h200.sh" reprice "$dir/step"
}

case "$command" in
prepare) prepare ;;
run) run ;;
reprice)
  dir="${3:-$repo/build/device-check}"
  reprice "${2:-}"
  ;;
dry-run)
  # The stand-in runs every kernel thread by thread on the host: llama only,
  # a few steps.
  export DRY_RUN=1 MODELS=${MODELS:-llama} STEPS=${DRY_STEPS:-6}
  stages=step
  prepare
  stages="step adamw update exports"
  run
  ;;
*)
  echo "usage: $0 prepare|run|dry-run [DIR] | reprice SUMMARY [DIR]" >&2
  exit 2
  ;;
esac
