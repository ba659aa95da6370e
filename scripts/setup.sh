#!/usr/bin/env bash
# Installs every Debian package Mantissa needs to build and test. Idempotent:
# when everything is present it checks and exits quietly.
set -euo pipefail

packages=(
  cmake ninja-build ccache python3 libomp-19-dev
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools clang-19 libclang-rt-19-dev
  libzip-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libdnnl-dev
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
