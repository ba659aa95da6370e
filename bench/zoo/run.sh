#!/usr/bin/env bash
# CPU training speed of every zoo model: Mantissa's compiled step against
# torch eager and torch.compile (inductor, CPU), fp32 and bf16 (torch's CPU
# autocast against Mantissa's compute: bf16), in one invocation, as ratios.
#
# usage: bench/zoo/run.sh [MODULE:FACTORY | corpus:NAME ...]
#        (default: every zoo factory and corpus:llama_medium)
# corpus:NAME is a model of the corpus (test/Inputs/corpus, or
# MANTISSA_CORPUS_DIR): Mantissa runs the corpus' own export, weights and
# batch, torch the same model from bench/zoo/corpus_models.py.
# Environment: STEPS (timed steps per run, 10), REPEATS (runs of each arm,
# 3; medians are reported), THREADS (torch's threads and Mantissa's
# OMP_NUM_THREADS, 1: on a loaded machine torch's OpenMP threads wait on
# each other, 0.96 ms per step of a small model at 1 thread, 27 ms at 2),
# COMPILE (1: include the torch.compile arms, whose
# compilation takes minutes per model here; 0 leaves them out), PYTHON
# (default .venv/bin/python3), BUILD_DIR (default build), BASE_BUILD_DIR
# (another build, e.g. main's, timed as the arms base and base-bf16 in the
# same runs: a second row, NAME@base, for a before/after comparison).
#
# Arms, eager and Mantissa interleaved run by run (the machine is shared):
#   eager      torch's step (forward, loss, backward, AdamW) as a user's loop
#              runs it (bench/zoo/torch_step.py), fp32
#   compile    the same with the model under torch.compile (one process per
#              mode: compiled in two untimed warm-up steps, then REPEATS
#              blocks of STEPS steps)
#   mantissa   mantissa-run M.pt2 --inputs --weights --steps STEPS+2: the
#              runtime's mean step time after the first two (the step library
#              is compiled once and cached), fused AdamW included
#   ... bf16   torch.autocast("cpu", bfloat16) over fp32 parameters, against
#              `compute: bf16` (bf16 products, fp32 accumulation)
# Rates are tokens (models fed input_ids) or samples per second; M/eager and
# M/compile are Mantissa's rate over torch's (above 1: Mantissa is faster).
# Nothing here is asserted: the figures go into the closing note.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python3}
build=${BUILD_DIR:-$root/build}
steps=${STEPS:-10}
repeats=${REPEATS:-3}
threads=${THREADS:-1}
compile=${COMPILE:-1}
base=${BASE_BUILD_DIR:-}
for tool in mantissa-compile mantissa-run; do
  [[ -x $build/bin/$tool ]] || { echo "build first: $build/bin/$tool is missing" >&2; exit 1; }
  [[ -z $base || -x $base/bin/$tool ]] || { echo "build first: $base/bin/$tool is missing" >&2; exit 1; }
done
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export MANTISSA_COMPILE=$build/bin/mantissa-compile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MANTISSA_CACHE_DIR=${MANTISSA_CACHE_DIR:-$work/cache}
printf 'compute: bf16\n' > "$work/compute-bf16.yaml"

factories=("$@")
if [[ ${#factories[@]} -eq 0 ]]; then
  mapfile -t factories < <("$python" -m mantissa.zoo.check --list)
  factories+=(corpus:llama_medium)
fi
corpus=${MANTISSA_CORPUS_DIR:-$root/test/Inputs/corpus}
export MANTISSA_CORPUS_DIR=$corpus

torch_step() { # FACTORY MODE REPEATS WEIGHTS -> the JSON line, or nothing
  OMP_NUM_THREADS=$threads "$python" -W ignore "$root/bench/zoo/torch_step.py" "$1" "$2" --steps "$steps" \
    --repeats "$3" --threads "$threads" --weights "$4" 2>> "$work/torch.log" | tail -1 || true
}
mantissa_ms() { # BUILD DIR NAME [mantissa-run flags] -> ms per step, or nothing
  OMP_NUM_THREADS=$threads "$1/bin/mantissa-run" "$2/$3.pt2" --inputs "$2/$3.inputs.safetensors" \
    --weights "$2/$3.init.safetensors" --steps $((steps + 2)) --no-memory-report "${@:4}" \
    2>> "$work/mantissa.log" | sed -nE 's/^trained .*; ([0-9.]+) ms per step.*$/\1/p' || true
}

echo "torch $("$python" -c 'import torch; print(torch.__version__)'), $threads threads, $steps steps x $repeats runs per arm; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-12s %-7s | %10s %10s %10s %8s %8s | %10s %10s %10s %8s %8s\n' model unit \
  eager compile mantissa M/eager M/compile eager-bf16 compile-bf16 mantissa-bf16 M/eager M/compile
results=$work/results.jsonl
for factory in "${factories[@]}"; do
  name=${factory##*:}
  if [[ $factory == corpus:* ]]; then
    dir=$corpus
    factory=$root/bench/zoo/corpus_models.py:$name
    [[ -f $dir/$name.pt2 ]] || { echo "$name: no $dir/$name.pt2"; continue; }
  else
    dir=$work/$name
    if ! "$python" -W ignore -m mantissa.export "$factory" "$dir" "$name" > "$work/$name.export.log" 2>&1; then
      echo "$name: export failed: $(tail -1 "$work/$name.export.log")"
      continue
    fi
  fi
  weights=$dir/$name.init.safetensors
  : > "$work/$name.runs"
  for ((i = 0; i < repeats; i++)); do
    echo "eager $(torch_step "$factory" eager 1 "$weights")" >> "$work/$name.runs"
    echo "mantissa {\"ms\": \"$(mantissa_ms "$build" "$dir" "$name")\"}" >> "$work/$name.runs"
    echo "autocast $(torch_step "$factory" autocast 1 "$weights")" >> "$work/$name.runs"
    echo "mantissa-bf16 {\"ms\": \"$(mantissa_ms "$build" "$dir" "$name" --precision "$work/compute-bf16.yaml")\"}" >> "$work/$name.runs"
    if [[ -n $base ]]; then
      echo "base {\"ms\": \"$(mantissa_ms "$base" "$dir" "$name")\"}" >> "$work/$name.runs"
      echo "base-bf16 {\"ms\": \"$(mantissa_ms "$base" "$dir" "$name" --precision "$work/compute-bf16.yaml")\"}" >> "$work/$name.runs"
    fi
  done
  if [[ $compile == 1 ]]; then
    echo "compile $(torch_step "$factory" compile "$repeats" "$weights")" >> "$work/$name.runs"
    echo "compile-autocast $(torch_step "$factory" compile-autocast "$repeats" "$weights")" >> "$work/$name.runs"
  fi
  "$python" - "$name" "$work/$name.runs" "$results" <<'EOF'
import json, statistics, sys
name, runs, results = sys.argv[1:4]
arms, items, unit = {}, None, "?"
for line in open(runs):
    arm, _, text = line.partition(" ")
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        continue
    if "ms" in record:
        times = [float(record["ms"])] if record["ms"] else []
    else:
        times = record.get("block_median_ms", [])
        items, unit = record["items_per_step"], record["unit"]
    arms.setdefault(arm, []).extend(times)
median = {arm: statistics.median(t) for arm, t in arms.items() if t}
rate = {arm: items / (ms / 1000) for arm, ms in median.items()} if items else {}
def show(arm):
    return f"{rate[arm]:10.0f}" if arm in rate else f"{'n/a':>10}"
def ratio(a, b):
    return f"{rate[a] / rate[b]:8.2f}" if a in rate and b in rate else f"{'n/a':>8}"
for label, arm in ((name, "mantissa"), (name + "@base", "base")):
    if label != name and arm not in rate:
        continue
    print(f"{label:12s} {unit:7s} | {show('eager')} {show('compile')} {show(arm)} {ratio(arm, 'eager')} "
          f"{ratio(arm, 'compile')} | {show('autocast')} {show('compile-autocast')} {show(arm + '-bf16')} "
          f"{ratio(arm + '-bf16', 'autocast')} {ratio(arm + '-bf16', 'compile-autocast')}")
with open(results, "a") as out:
    out.write(json.dumps({"model": name, "unit": unit, "items_per_step": items, "median_ms": median,
                          "runs_ms": arms}) + "\n")
EOF
  echo "$name runs (ms): $(tr '\n' ' ' < "$work/$name.runs" | sed -E 's/"(first_loss|warmup_s|torch|threads|model|unit|items_per_step|mode)": [^,}]*,? ?//g')" >&2
done
echo "rates in units per second (median over runs); M/eager, M/compile: Mantissa's rate over torch's"
if [[ -n ${BENCH_JSON:-} ]]; then cp "$results" "$BENCH_JSON"; fi
