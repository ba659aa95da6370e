//===- mantissa-run.cpp - The Mantissa runner -----------------------------===//

#include "mantissa/Driver/RunMain.h"
#ifdef MANTISSA_INCLUDE_TESTS
#include "mantissa/Conversion/TrainToGPU/GpuHostEmulation.h"
#endif

int main(int argc, char **argv) {
#ifdef MANTISSA_INCLUDE_TESTS
  // Test support, as mlir-opt carries its test passes: the GPU kernels'
  // host emulation behind --gpu-host-kernels.
  return mlir::mantissa::runMain(argc, argv,
                                 &mlir::mantissa::getGpuHostEmulator());
#else
  return mlir::mantissa::runMain(argc, argv);
#endif
}
