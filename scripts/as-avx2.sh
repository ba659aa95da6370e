#!/usr/bin/env bash
# Runs a command as if this machine had AVX2 and FMA only (an AMD EPYC of the
# kind CI also gets): every library Mantissa compiles with clang
# (-march=native: the CPU step, the AdamW kernels, the GPU kernels' host
# emulation) is compiled for x86-64-v3 tuned for Zen 3 instead, oneDNN is
# held to AVX2 (ONEDNN_MAX_CPU_ISA), and the compile cache starts empty so
# that nothing compiled for this CPU is reused. It measures what the code
# generation and the tests cost on such a machine, not that machine's speed.
#
# Usage: scripts/as-avx2.sh COMMAND [ARGS...]   e.g.
#   scripts/as-avx2.sh ctest --test-dir build -j2
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
real_clang=$(command -v clang-19 || echo /usr/lib/llvm-19/bin/clang)
cat > "$work/clang-19" <<WRAP
#!/usr/bin/env bash
args=()
for arg in "\$@"; do
  if [[ \$arg == -march=native ]]; then
    args+=(-march=x86-64-v3 -mtune=znver3)
  else
    args+=("\$arg")
  fi
done
exec "$real_clang" "\${args[@]}"
WRAP
chmod +x "$work/clang-19"
mkdir "$work/cache"
PATH="$work:$PATH" ONEDNN_MAX_CPU_ISA=AVX2 MANTISSA_CACHE_DIR="$work/cache" "$@"
