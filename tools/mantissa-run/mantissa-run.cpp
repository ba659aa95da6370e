//===- mantissa-run.cpp - The Mantissa runner -----------------------------===//

#include "mantissa/Driver/RunMain.h"

int main(int argc, char **argv) { return mlir::mantissa::runMain(argc, argv); }
