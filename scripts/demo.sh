#!/usr/bin/env bash
# The main job on the embedded example: sets up, builds, and runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
bin=$root/build/bin

echo "== A training step with parameters, buffers, casts and nested shard groups"
echo "   ($root/examples/block.mlir), verified and canonicalised by mantissa-opt:"
"$bin/mantissa-opt" "$root/examples/block.mlir" --canonicalize
