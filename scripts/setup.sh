#!/usr/bin/env bash
# Installs every Debian package Mantissa needs to build and test, and the
# Python venv of the exporter and its tests (python/requirements.lock: torch,
# transformers, diffusers, safetensors from PyPI), linked as .venv in the
# checkout. Idempotent: when everything is present it checks and exits
# quietly.
set -euo pipefail

packages=(
  cmake ninja-build ccache python3 libomp-19-dev
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools clang-19 libclang-rt-19-dev
  libzip-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  python3-venv
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: done"
fi

# The venv lives in the user's cache, keyed by the lock file's hash, so that
# every clone on the machine shares one (a few GB: torch's wheel is a CUDA
# build). It is built in place under a lock and marked complete last, so
# that an interrupted install is never taken for a finished one, and two
# clones set up at once build it once. (Not built elsewhere and moved: a
# venv's scripts name the folder they were made in.)
root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/python/requirements.lock"
key=$(sha256sum "$lock" | cut -c1-16)
venvs="${XDG_CACHE_HOME:-$HOME/.cache}/mantissa/python"
venv="$venvs/venv-$key"
mkdir -p "$venvs"
(
  flock 9
  if [[ ! -f "$venv/.complete" ]]; then
    echo "setup: installing python/requirements.lock into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check \
      -r "$lock"
    touch "$venv/.complete"
  fi
) 9>"$venv.lock"
ln -sfn "$venv" "$root/.venv"
