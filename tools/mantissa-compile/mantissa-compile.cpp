//===- mantissa-compile.cpp - The Mantissa compiler driver ----------------===//

#include "mantissa/Driver/CompileMain.h"

int main(int argc, char **argv) {
  return mlir::mantissa::compileMain(argc, argv);
}
