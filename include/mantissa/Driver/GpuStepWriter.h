//===- GpuStepWriter.h - Writing a step's GPU program -----------*- C++ -*-===//
//
// step.gpu.json, step.ptx and step.constants.bin (docs/gpu-step.md) for a
// planned train.step, written into an artifact directory.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_GPUSTEPWRITER_H
#define MANTISSA_DRIVER_GPUSTEPWRITER_H

#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::mantissa {

/// What writeGpuStep wrote.
struct GpuStepFiles {
  /// File names in the directory.
  std::vector<std::string> files;
  int64_t kernels = 0, gemms = 0, arenaBytes = 0;
  /// Whether the files came from the compile cache, and the cache entry
  /// (empty when nothing was cached).
  bool cached = false;
  std::string cachePath;
};

/// The environment variable naming a shared library into which the GPU
/// run's kernels are also compiled for the CPU (lowerEmulatedKernelsToLLVM),
/// for running the GPU program without a
/// GPU: the stand-in driver unittests/Runtime/FakeCuda.cpp runs
/// `<entry>_host` from this library in place of each PTX entry.
constexpr const char *kGpuHostKernelsVariable = "MANTISSA_GPU_HOST_KERNELS";

/// Compiles `step` for the GPU (or takes it from the compile cache) and
/// writes its program into `directory` (which exists). When
/// `$MANTISSA_GPU_HOST_KERNELS` is set, also compiles every GPU kernel of the
/// run, the step's and the update kernels of `updateGroups` (the artifact's
/// groups, in order, in tiles of `tileSize` elements), for the host into
/// that library. With `withForward`, also writes the forward-only step
/// (deriveForwardStep) as its own program, step.gpu.forward.json, which
/// step.gpu.json names under `forward` (evaluation runs it).
llvm::Expected<GpuStepFiles> writeGpuStep(train::StepOp step,
                                          llvm::StringRef directory,
                                          ArrayRef<AdamWGroup> updateGroups,
                                          int64_t tileSize,
                                          bool withForward = false);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_GPUSTEPWRITER_H
