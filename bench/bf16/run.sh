#!/usr/bin/env bash
# `compute: bf16` against fp32 step time on the CPU, where oneDNN has bf16
# matmuls (the native ISA) and where it has none (an AVX2 machine, emulated
# with ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN and MANTISSA_CPU_TARGET=znver3,
# or AVX2_CPU_TARGET, for the generated code; there the compiler makes bf16
# products fp32 GEMMs of operands widened by their producers:
# mantissa-widen-bf16-products, and the runtime widens any it is given:
# lib/Runtime/CpuGemm.cpp), for one or two builds in one invocation.
#
# usage: bench/bf16/run.sh [BUILD_BIN ...]   (default: build/bin)
#   e.g. bench/bf16/run.sh /work/main/build/bin build/bin   (before, after)
# Environment: MODEL (llama_medium), STEPS (20 per run), REPEATS (3 runs of
# each arm, interleaved: the machine is shared and noisy; medians reported).
# A step time is mantissa-run's mean over the steps after the first two
# (compilation, on the first run of each arm, is not in it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${MANTISSA_CORPUS_DIR:-$root/test/Inputs/corpus}
model=${MODEL:-llama_medium}
steps=${STEPS:-20}
repeats=${REPEATS:-3}
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/build/bin")
for bin in "${bins[@]}"; do
  [[ -x $bin/mantissa-run ]] || { echo "no mantissa-run in $bin" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step_ms() { # BIN ISA COMPUTE CACHE
  local isa=() precision=()
  [[ $2 == native ]] ||
    isa=(ONEDNN_MAX_CPU_ISA=$2 MANTISSA_CPU_TARGET=${AVX2_CPU_TARGET:-znver3})
  [[ $3 == fp32 ]] || precision=(--precision-compute "$3")
  env "${isa[@]}" MANTISSA_CACHE_DIR="$4" "$1/mantissa-run" "$corpus/$model.pt2" \
    --inputs "$corpus/$model.inputs.safetensors" \
    --weights "$corpus/$model.init.safetensors" --steps "$steps" \
    --no-memory-report "${precision[@]}" 2>"$work/stderr" |
    sed -nE 's/^trained .*; ([0-9.]+) ms per step.*$/\1/p'
  local warnings
  warnings=$(grep -c "widened operands" "$work/stderr" || true)
  echo "  $1 $2 $3: $(grep -c "plain loops" "$work/stderr" || true) plain-loops warnings, $warnings widening warnings" >&2
}

echo "model $model, $steps steps, $repeats runs per arm; OMP_NUM_THREADS=${OMP_NUM_THREADS:-all cores}; $(nproc) cores"
declare -A runs
for ((r = 0; r < repeats; ++r)); do
  echo "load before run $((r + 1)): $(uptime | sed 's/.*load/load/')"
  for i in "${!bins[@]}"; do
    for isa in native AVX2; do
      for compute in fp32 bf16; do
        key="$i $isa $compute"
        runs[$key]+="$(step_ms "${bins[$i]}" $isa $compute "$work/cache$i") "
      done
    done
  done
done
echo "load after: $(uptime | sed 's/.*load/load/')"
printf '%-40s %-7s %10s %10s %8s   %s\n' build ISA fp32_ms bf16_ms bf16/fp32 runs
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print NR ? v[int((NR + 1) / 2)] : "n/a"}'; }
for i in "${!bins[@]}"; do
  for isa in native AVX2; do
    f=$(echo "${runs[$i $isa fp32]}" | median)
    b=$(echo "${runs[$i $isa bf16]}" | median)
    ratio=$(python3 -c "import sys; a,b=sys.argv[1:]; print(f'{float(b)/float(a):.2f}' if 'n/a' not in (a,b) else 'n/a')" "$f" "$b")
    printf '%-40s %-7s %10s %10s %8s   fp32 %s| bf16 %s\n' "${bins[$i]}" $isa "$f" "$b" "$ratio" "${runs[$i $isa fp32]}" "${runs[$i $isa bf16]}"
  done
done
