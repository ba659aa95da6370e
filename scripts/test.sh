#!/usr/bin/env bash
# Every test: sets up, builds and runs the unit and lit tests; then the same
# under AddressSanitizer + UndefinedBehaviorSanitizer, with every reader's
# fuzzer run for a bounded time (scripts/fuzz.sh); then builds the
# runtime alone and checks that it links no LLVM or MLIR library.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

"$root/scripts/setup.sh"

echo "== build and test (Release)"
# The exporter's and the zoo's tests run with setup.sh's venv: named here so
# that a missing one fails the build instead of skipping them.
BUILD_DIR=$root/build "$root/scripts/build.sh" \
  -DMANTISSA_TORCH_PYTHON="$root/.venv/bin/python3"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

echo "== build and test with ASan + UBSan (unit tests and mantissa-opt's lit tests)"
BUILD_DIR=$root/build-sanitize "$root/scripts/build.sh" \
  -DCMAKE_BUILD_TYPE=Debug -DMANTISSA_ENABLE_SANITIZERS=ON -DMANTISSA_ENABLE_FUZZERS=ON
ctest --test-dir "$root/build-sanitize" --output-on-failure -j "$jobs"

echo "== fuzz every reader, 20 s each (about 3 minutes)"
"$root/scripts/fuzz.sh" "$root/build-sanitize" 20

echo "== runtime alone, without LLVM/MLIR"
BUILD_DIR=$root/build-runtime "$root/scripts/build.sh" -DMANTISSA_BUILD_COMPILER=OFF
"$root/scripts/check-runtime-deps.sh" "$root/build-runtime"
ctest --test-dir "$root/build-runtime" --output-on-failure -j "$jobs"
echo "== all tests passed"
