#!/usr/bin/env bash
# Runs every libFuzzer target of a build configured with
# MANTISSA_ENABLE_FUZZERS=ON for a bounded time, from its seeds in
# fuzz/corpus, under libFuzzer's memory limit (-rss_limit_mb, which also
# bounds a single allocation) and a per-input time limit (a hang is a
# finding). Prints each fuzzer's executions; exits non-zero on any finding,
# whose reproducer is copied to BUILD_DIR/fuzz-findings/. Once the bug is
# fixed, the reproducer goes into fuzz/corpus/<corpus>/, where the
# fuzz-replay-<corpus> test replays it from then on.
#
# usage: scripts/fuzz.sh BUILD_DIR [SECONDS_PER_FUZZER]   (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
seconds=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
findings=$build/fuzz-findings
status=0

# corpus, fuzzer, its options.
while read -r corpus fuzzer options; do
  mkdir -p "$work/$corpus"
  log=$work/$corpus.log
  # New inputs go to the scratch corpus (first), never to the seeds.
  # shellcheck disable=SC2086
  if "$build/bin/$fuzzer" $options -max_total_time="$seconds" \
      -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
      -artifact_prefix="$work/$corpus-" \
      "$work/$corpus" "$root/fuzz/corpus/$corpus" >"$log" 2>&1; then
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$fuzzer: ${executions:-?} executions in ${seconds} s, no finding"
  else
    echo "$fuzzer: FINDING"
    tail -n 60 "$log"
    mkdir -p "$findings"
    cp "$work/$corpus"-* "$findings/" 2>/dev/null || true
    status=1
  fi
done <<LIST
pt2 mantissa-pt2-fuzzer
model_json mantissa-model-json-fuzzer -dict=$root/fuzz/model_json.dict
artifact_manifest mantissa-artifact-manifest-fuzzer -dict=$root/fuzz/artifact_manifest.dict
gpu_step mantissa-gpu-step-fuzzer -dict=$root/fuzz/gpu_step.dict
cpu_step mantissa-cpu-step-fuzzer -dict=$root/fuzz/cpu_step.dict
token_data mantissa-token-data-fuzzer
checkpoint_index mantissa-checkpoint-index-fuzzer -dict=$root/fuzz/checkpoint_index.dict -close_fd_mask=3
safetensors mantissa-safetensors-fuzzer -dict=$root/fuzz/safetensors.dict
precision_spec mantissa-precision-spec-fuzzer -dict=$root/fuzz/precision_spec.dict
LIST
if [ "$status" -ne 0 ]; then
  echo "fuzzers found inputs that fail; reproducers in $findings"
fi
exit "$status"
