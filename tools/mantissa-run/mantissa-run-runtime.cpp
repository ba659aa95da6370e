//===- mantissa-run-runtime.cpp - mantissa-run without the compiler -------===//
//
// The runner of the runtime-only build: it runs compiled artifacts and links
// only the runtime (no LLVM or MLIR), as deployments want it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/UpdateRunner.h"

int main(int argc, char **argv) {
  return mlir::mantissa::rt::runUpdateMain(argc, argv);
}
