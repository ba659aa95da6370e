#!/usr/bin/env bash
# Time per whole training step on the CPU, Mantissa against torch eager on
# the same model, weights and batch, in one invocation; and the GFLOP/s of
# the step's matrix products against oneDNN's own GEMM peak, measured in the
# same run.
#
# usage: bench/step/run.sh [MODEL ...]   (default: llama llama_medium)
# Environment: STEPS (20 per run), REPEATS (5 runs of each arm; medians are
# reported), THREADS (2: torch's and OpenBLAS's threads; Mantissa uses
# OMP_NUM_THREADS, all cores when unset), TORCH_LD_LIBRARY_PATH (run torch
# with another BLAS, e.g. an unpacked one, without installing it).
# Needs Debian's python3-torch for the baseline (bench/step/torch_cpu_step.py),
# the corpus in test/Inputs/corpus and a build with the compiler (build/bin).
#
# Arms, interleaved run by run (the machine is shared and noisy):
#   torch     torch 1.13 eager, fp32, its matrix products in the BLAS Debian's
#             alternatives pick for libblas.so.3 (OpenBLAS once any
#             libopenblas0 is installed, else the reference BLAS)
#   torch-ref the same with the reference BLAS (/usr/lib/x86_64-linux-gnu/blas),
#             when both are installed: the baseline of the earlier figures
#   loops     Mantissa with its products as generated loops
#             (MANTISSA_CPU_GEMM=loops, the interpreter's summation order)
#   library   Mantissa with its products through oneDNN (the default)
#   autocast  (AUTOCAST=1, the default) torch's forward under
#             torch.autocast("cpu", bfloat16) (bf16 products through oneDNN),
#             against Mantissa's `compute: bf16` (bf16 products through
#             oneDNN, fp32 accumulation; test/e2e/Inputs/compute_bf16.yaml)
# A Mantissa step time is the runtime's mean over the steps after the first
# two (compilation excluded: the library is cached); torch's is its median
# after two warm-up steps.
#
# The GEMM figures come from mantissa-bench-cpu-gemm: the products of the
# model's step (their descriptors, extracted from mantissa-train-cpu-pipeline
# after mantissa-call-gemm-library, each as often as the step calls it) run
# through the runtime's entry (the step's own tiles), against a 1024^3 oneDNN
# matmul with oneDNN's threading (fp32 and bf16) in the same process.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${MANTISSA_CORPUS_DIR:-$root/test/Inputs/corpus}
steps=${STEPS:-20}
repeats=${REPEATS:-5}
threads=${THREADS:-2}
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(llama llama_medium)
bin=$root/build/bin
for tool in mantissa-run mantissa-compile mantissa-opt mantissa-bench-cpu-gemm; do
  [[ -x "$bin/$tool" ]] || { echo "build first: $bin/$tool is missing" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MANTISSA_CACHE_DIR=${MANTISSA_CACHE_DIR:-$work/cache}

# torch's BLAS: what torch reports about its build, and the library it maps.
echo "torch config: $(/usr/bin/python3 -c 'import re, torch; c=torch.__config__.show(); print(torch.__version__, "|", " ".join(l.strip(" -") for l in c.splitlines() if "MKL-DNN" in l or "OpenMP" in l), "|", " ".join(re.findall(r"BLAS_INFO=\w+|USE_MKLDNN=\w+", c)))' 2>/dev/null || echo unknown)"
blas=$(LD_LIBRARY_PATH=${TORCH_LD_LIBRARY_PATH:-} /usr/bin/python3 -c \
  'import torch; torch.ones(4,4)@torch.ones(4,4); m=[l.split()[-1] for l in open("/proc/self/maps") if "blas" in l]; print(m[0] if m else "none")' 2>/dev/null || echo unknown)
echo "torch fp32 products: $blas, $threads threads; mantissa: OMP_NUM_THREADS=${OMP_NUM_THREADS:-all cores}"
refblas=/usr/lib/x86_64-linux-gnu/blas
[[ -f $refblas/libblas.so.3 && $blas == *openblas* && -z ${TORCH_LD_LIBRARY_PATH:-} ]] || refblas=""

median() { python3 -c 'import sys; v=sorted(float(x) for x in sys.argv[1:]); print(v[len(v)//2] if v else "n/a")' "$@"; }
torch_ms() { # LD_LIBRARY_PATH MODEL [MODE]
  LD_LIBRARY_PATH=$1 OPENBLAS_NUM_THREADS=$threads /usr/bin/python3 \
    "$root/bench/step/torch_cpu_step.py" "$corpus" "$2" "$steps" "$threads" "${3:-fp32}" 2>/dev/null |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["median_step_ms"])' 2>/dev/null || true
}
mantissa_ms() { # MODE MODEL [mantissa-run flags]
  MANTISSA_CPU_GEMM=$1 "$bin/mantissa-run" "$corpus/$2.pt2" --inputs "$corpus/$2.inputs.safetensors" \
    --weights "$corpus/$2.init.safetensors" --steps "$steps" --no-memory-report "${@:3}" 2>/dev/null |
    sed -nE 's/^trained .*; ([0-9.]+) ms per step.*$/\1/p'
}

printf '%-13s %9s %9s %9s %9s %8s %8s | %8s %9s %9s %9s %6s %6s\n' model torch torch-ref loops library lib/loop torch/lib \
  gemm_ms gemm_GF/s peak_f32 peak_bf16 %peak %step
for model in "${models[@]}"; do
  # The step's products, as mantissa-run compiles them (the default plan).
  "$bin/mantissa-compile" "$corpus/$model.pt2" --emit=train-mlir -o "$work/$model.mlir" 2>/dev/null
  "$bin/mantissa-opt" "$work/$model.mlir" --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline)' \
    --mlir-print-ir-after=mantissa-call-gemm-library -o /dev/null 2> "$work/$model.gemm.mlir"
  python3 - "$work/$model.gemm.mlir" > "$work/$model.products" <<'EOF'
import collections, re, sys
text = open(sys.argv[1]).read()
descriptors = dict(re.findall(r'memref\.global "private" constant @(__mantissa_gemm_\d+) : memref<\d+xi64> = dense<\[([^\]]*)\]>', text))
calls = collections.Counter(re.findall(r'memref\.get_global @(__mantissa_gemm_\d+)', text))
for name, values in descriptors.items():
    print(calls[name], values.replace(",", ""))
EOF
  t=(); r=(); l=(); g=(); ta=(); ma=()
  for ((i = 0; i < repeats; i++)); do
    t+=($(torch_ms "${TORCH_LD_LIBRARY_PATH:-}" "$model"))
    [[ -n $refblas ]] && r+=($(torch_ms "$refblas" "$model"))
    l+=($(mantissa_ms loops "$model"))
    g+=($(mantissa_ms library "$model"))
    if [[ ${AUTOCAST:-1} == 1 ]]; then
      ta+=($(torch_ms "${TORCH_LD_LIBRARY_PATH:-}" "$model" autocast))
      ma+=($(mantissa_ms library "$model" --precision "$root/test/e2e/Inputs/compute_bf16.yaml"))
    fi
  done
  echo "$model runs (ms): torch ${t[*]:-n/a} | torch-ref ${r[*]:-n/a} | loops ${l[*]} | library ${g[*]}" >&2
  if [[ ${AUTOCAST:-1} == 1 ]]; then
    tam=$(median "${ta[@]}"); mam=$(median "${ma[@]}")
    echo "$model autocast runs (ms): torch ${ta[*]:-n/a} | mantissa compute bf16 ${ma[*]:-n/a}" >&2
    autocast_line="$model autocast: torch $tam ms, mantissa compute: bf16 $mam ms, torch/mantissa $(python3 -c "import sys; a,b=sys.argv[1:]; print(round(float(a)/float(b),2) if a!='n/a' and b!='n/a' else 'n/a')" "$tam" "$mam")"
  fi
  tm=$(median "${t[@]}"); rm_=$(median "${r[@]}"); lm=$(median "${l[@]}"); gm=$(median "${g[@]}")
  if [[ -s "$work/$model.products" ]]; then
    gemm=$("$bin/mantissa-bench-cpu-gemm" "$work/$model.products" 30)
  else
    gemm='{}'
  fi
  echo "$model gemm: $gemm" >&2
  python3 - "$model" "$tm" "$rm_" "$lm" "$gm" "$gemm" <<'EOF'
import json, sys
model, tm, rm, lm, gm, gemm = sys.argv[1:7]
g = json.loads(gemm)
def num(x):
    try: return float(x)
    except ValueError: return None
tm, rm, lm, gm = map(num, (tm, rm, lm, gm))
ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
fmt = lambda x: f"{x:.2f}" if x else "n/a"
gms, gfs, pf, pb = (g.get(k) for k in ("step_gemm_ms", "step_gemm_gflops", "peak_f32_gflops", "peak_bf16_gflops"))
print(f"{model:13s} {fmt(tm):>9s} {fmt(rm):>9s} {fmt(lm):>9s} {fmt(gm):>9s} {ratio(lm, gm):>8s} {ratio(tm, gm):>8s} | "
      f"{fmt(gms):>8s} {fmt(gfs):>9s} {fmt(pf):>9s} {fmt(pb):>9s} "
      f"{(f'{100 * gfs / pf:.0f}' if gfs and pf else 'n/a'):>6s} {(f'{100 * gms / gm:.0f}' if gms and gm else 'n/a'):>6s}")
EOF
  [[ -n ${autocast_line:-} ]] && echo "$autocast_line"
  autocast_line=""
done
echo "lib/loop: library step speed-up over the loops; torch/lib: over torch; gemm_ms and gemm_GF/s: the step's products"
echo "alone through the runtime's entry; %peak: of oneDNN's fp32 1024^3 peak; %step: their share of the library step."
