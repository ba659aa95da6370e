#!/usr/bin/env bash
# Copies what the runtime-only build needs and a GPU machine may lack
# (nlohmann_json: header-only, with its CMake package) into DEPS_DIR, for
# bench/gpu/build_runtime.sh there.
#
# usage: bench/gpu/carry_deps.sh DEPS_DIR
set -euo pipefail
deps=${1:?usage: carry_deps.sh DEPS_DIR}
mkdir -p "$deps/include" "$deps/share/cmake"
cp -r /usr/include/nlohmann "$deps/include/"
cp -r /usr/share/cmake/nlohmann_json "$deps/share/cmake/"
