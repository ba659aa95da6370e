#!/usr/bin/env bash
# Which GPU the device machine lent, and which of the cost model's devices
# (mantissa-compile --cost-device; docs/gpu-cost-model.md) prices it: an H100
# is lent first now, an H200 second, and their memory differs (3.35 against
# 4.8 TB/s nominal), so a prediction for the wrong one misleads the
# calibration. The name and memory come from nvidia-smi, the multiprocessors
# and the device-to-device copy bandwidth from bench/gpu/probe_gpu.cpp
# (built here with c++, no CUDA headers: it loads libcuda.so.1 as the runtime
# does, so the dry run drives it through the stand-in driver).
#
# usage: bench/gpu/detect_gpu.sh ENV_FILE WORK_DIR
#   writes ENV_FILE, shell assignments the device check reads:
#     GPU_NAME, GPU_MULTIPROCESSORS, GPU_MEMORY_MIB (empty when unknown),
#     COPY_BANDWIDTH_GBS (measured, bytes read plus written; empty when the
#     probe could not run), COST_DEVICE (h100 or h200);
#   prints what it found and why it chose, and warns where the choice is a
#   guess. It fails only when it cannot write ENV_FILE: a GPU it cannot
#   name is priced as the default h200, with a warning.
#   PROBE_MIB (default 256) sizes the copy the bandwidth is measured on.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
env_file=${1:?usage: detect_gpu.sh ENV_FILE WORK_DIR}
work=${2:?usage: detect_gpu.sh ENV_FILE WORK_DIR}
mkdir -p "$work"
warn() { echo "detect: warning: $*"; }

name='' memory_mib='' multiprocessors='' copy_gbs=''
if command -v nvidia-smi > /dev/null; then
  line=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits -i 0 2> /dev/null | head -1)
  if [[ -n $line ]]; then
    name=$(echo "${line%%,*}" | xargs)
    memory_mib=$(echo "${line#*,}" | xargs)
  fi
else
  echo "detect: no nvidia-smi; the probe alone names the GPU"
fi

probe="$work/probe_gpu"
if c++ -O2 -std=c++17 -I"$repo/lib/Runtime" "$repo/bench/gpu/probe_gpu.cpp" -ldl -o "$probe" \
  > "$work/probe_gpu.build.log" 2>&1; then
  if report=$("$probe" "${PROBE_MIB:-256}" 2> "$work/probe_gpu.err"); then
    value() { sed -n "s/^$1=//p" <<< "$report" | head -1; }
    [[ -z $name ]] && name=$(value name)
    multiprocessors=$(value multiprocessors)
    [[ $multiprocessors == unknown ]] && multiprocessors=''
    bytes=$(value memory_bytes)
    [[ -z $memory_mib && $bytes =~ ^[0-9]+$ ]] && memory_mib=$((bytes >> 20))
    copy_gbs=$(value copy_gbs)
  else
    warn "the probe failed ($(tail -1 "$work/probe_gpu.err")): no multiprocessor count, no measured bandwidth"
  fi
else
  warn "the probe did not build (log $work/probe_gpu.build.log): no multiprocessor count, no measured bandwidth"
fi

# The cost model's devices are SXM parts; a PCIe or NVL card shares the
# name and not the memory or the multiprocessors.
case "$name" in
*H100*) device=h100 ;;
*H200*) device=h200 ;;
*)
  device=h200
  warn "'${name:-no GPU found}' is neither an H100 nor an H200: the cost model prices it as an h200, the default"
  ;;
esac
case "$name" in
*PCIe* | *NVL*)
  warn "'$name' is not the SXM part the $device profile describes: its measured copy bandwidth replaces the profile's, its other figures stand"
  ;;
esac
if [[ -n $multiprocessors && $multiprocessors != 132 ]]; then
  warn "$multiprocessors multiprocessors, where the $device profile has 132: compute-bound predictions are that much optimistic"
fi

{
  printf 'GPU_NAME=%q\n' "$name"
  printf 'GPU_MULTIPROCESSORS=%q\n' "$multiprocessors"
  printf 'GPU_MEMORY_MIB=%q\n' "$memory_mib"
  printf 'COPY_BANDWIDTH_GBS=%q\n' "$copy_gbs"
  printf 'COST_DEVICE=%q\n' "$device"
} > "$env_file" || exit 1
echo "detect: ${name:-unknown GPU}, ${multiprocessors:-?} multiprocessors, ${memory_mib:-?} MiB," \
  "copy ${copy_gbs:-not measured} GB/s: the cost model prices it as --cost-device $device"
