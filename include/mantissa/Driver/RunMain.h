//===- RunMain.h - The mantissa-run driver ----------------------*- C++ -*-===//

#ifndef MANTISSA_DRIVER_RUNMAIN_H
#define MANTISSA_DRIVER_RUNMAIN_H

namespace mlir::mantissa {

/// Runs mantissa-run with the given command line; returns the exit code.
int runMain(int argc, char **argv);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_RUNMAIN_H
