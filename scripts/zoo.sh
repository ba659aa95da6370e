#!/usr/bin/env bash
# Checks every zoo model (python/mantissa/zoo) with python -m mantissa.zoo.check
# and regenerates docs/models.md from the results.
#
# usage: scripts/zoo.sh [MODULE:FACTORY ...]   (default: every zoo factory)
# Environment: ZOO_OUT (results, default build/zoo: one folder per model with
# its export and runs, NAME.json with every figure, NAME.log with the lines),
# PYTHON (default .venv/bin/python3, scripts/setup.sh's venv), BUILD_DIR
# (default build: its bin/ holds mantissa-compile and mantissa-run).
# docs/models.md is written from every NAME.json in ZOO_OUT, so a run over a
# few models keeps the others' last results. Exits 1 when a model fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python3}
build=${BUILD_DIR:-$root/build}
out=${ZOO_OUT:-$build/zoo}
[[ -x $python ]] || { echo "zoo.sh: no python at $python (run scripts/setup.sh)" >&2; exit 1; }
for tool in mantissa-compile mantissa-run; do
  [[ -x $build/bin/$tool ]] || { echo "zoo.sh: build first: $build/bin/$tool is missing" >&2; exit 1; }
done
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export MANTISSA_COMPILE=$build/bin/mantissa-compile
export MANTISSA_CACHE_DIR=${MANTISSA_CACHE_DIR:-$out/step-cache}
mkdir -p "$out"

factories=("$@")
if [[ ${#factories[@]} -eq 0 ]]; then
  mapfile -t factories < <("$python" -m mantissa.zoo.check --list)
fi
failed=()
for factory in "${factories[@]}"; do
  name=${factory##*:}
  echo "== $factory"
  start=$(date +%s)
  if "$python" -W ignore -m mantissa.zoo.check "$factory" --out "$out/$name" --json \
      > "$out/$name.json.partial" 2> >(tee "$out/$name.log" >&2); then
    :
  else
    failed+=("$name")
  fi
  # A checker that crashed before its JSON leaves the last complete result.
  if [[ -s $out/$name.json.partial ]]; then
    mv "$out/$name.json.partial" "$out/$name.json"
  else
    rm -f "$out/$name.json.partial"
  fi
  echo "   $(( $(date +%s) - start )) s"
done
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
ZOO_COMMIT=$commit "$python" "$root/scripts/zoo-models-doc.py" "$out" > "$root/docs/models.md.partial"
mv "$root/docs/models.md.partial" "$root/docs/models.md"
echo "zoo.sh: docs/models.md regenerated from $out"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "zoo.sh: failed: ${failed[*]}" >&2
  exit 1
fi
