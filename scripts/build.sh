#!/usr/bin/env bash
# Configures and builds Mantissa into BUILD_DIR (default: build) with the
# given extra CMake arguments. Used by the demo, the tests and CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build_dir" -G Ninja "$@" >/dev/null
cmake --build "$build_dir"
