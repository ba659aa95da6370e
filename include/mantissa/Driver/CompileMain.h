//===- CompileMain.h - The mantissa-compile driver --------------*- C++ -*-===//

#ifndef MANTISSA_DRIVER_COMPILEMAIN_H
#define MANTISSA_DRIVER_COMPILEMAIN_H

namespace mlir::mantissa {

struct GpuHostEmulator;

/// Runs mantissa-compile with the given command line; returns the exit code.
/// `emulator` (GpuHostEmulation.h), which only builds with tests hand over,
/// gives the tool --gpu-host-kernels.
int compileMain(int argc, char **argv,
                const GpuHostEmulator *emulator = nullptr);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_COMPILEMAIN_H
