#!/usr/bin/env bash
# Fails if the runtime library built in BUILD_DIR links any LLVM or MLIR
# library, directly or indirectly: the runtime must deploy without them.
set -euo pipefail
build_dir=${1:?usage: check-runtime-deps.sh BUILD_DIR}
library=$build_dir/lib/libmantissa_rt.so
[[ -f "$library" ]] || { echo "check-runtime-deps: $library not built" >&2; exit 1; }
if ldd "$library" | grep -Ei 'libLLVM|libMLIR'; then
  echo "check-runtime-deps: $library links LLVM/MLIR (above)" >&2
  exit 1
fi
if grep -rIlE '#include [<"](llvm|mlir)/' "$(dirname "$0")/../lib/Runtime" \
     "$(dirname "$0")/../include/mantissa/Runtime" 2>/dev/null; then
  echo "check-runtime-deps: runtime sources include LLVM/MLIR headers (above)" >&2
  exit 1
fi
echo "check-runtime-deps: $(basename "$library") links no LLVM or MLIR library"
