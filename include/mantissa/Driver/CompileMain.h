//===- CompileMain.h - The mantissa-compile driver --------------*- C++ -*-===//

#ifndef MANTISSA_DRIVER_COMPILEMAIN_H
#define MANTISSA_DRIVER_COMPILEMAIN_H

namespace mlir::mantissa {

/// Runs mantissa-compile with the given command line; returns the exit code.
int compileMain(int argc, char **argv);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_COMPILEMAIN_H
