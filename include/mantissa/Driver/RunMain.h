//===- RunMain.h - The mantissa-run driver ----------------------*- C++ -*-===//

#ifndef MANTISSA_DRIVER_RUNMAIN_H
#define MANTISSA_DRIVER_RUNMAIN_H

namespace mlir::mantissa {

struct GpuHostEmulator;

/// Runs mantissa-run with the given command line; returns the exit code.
/// `emulator` (GpuHostEmulation.h), which only builds with tests hand over,
/// gives the tool --gpu-host-kernels.
int runMain(int argc, char **argv, const GpuHostEmulator *emulator = nullptr);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_RUNMAIN_H
