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
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa {

struct GpuHostEmulator;

/// Test support: where to compile the run's GPU kernels for the host, and
/// the emulation that does it (GpuHostEmulation.h), which the tools hand
/// the driver only in builds with tests. Empty: no host kernels.
struct GpuHostKernels {
  std::string path;
  const GpuHostEmulator *emulator = nullptr;
  explicit operator bool() const { return !path.empty(); }
};

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

/// How writeGpuStep writes a step's program, beyond the step itself.
struct GpuStepWriterOptions {
  /// The update kernels' tile size (elements), for their host emulation.
  int64_t tileSize = 4096;
  /// Also write the forward-only step (deriveForwardStep) as its own
  /// program, step.gpu.forward.json, which step.gpu.json names under
  /// `forward` (evaluation runs it).
  bool withForward = false;
  /// Test support: when given, every GPU kernel of the run is also
  /// compiled for the CPU by its emulator into the shared library at its
  /// path, so that the GPU program runs without a GPU: the stand-in driver
  /// unittests/Runtime/FakeCuda.cpp runs `<entry>_host` from it in place of
  /// each PTX entry. Such runs bypass the compile cache. Set by
  /// --gpu-host-kernels (GpuHostKernelsFlag).
  GpuHostKernels hostKernels;
};

/// --gpu-host-kernels=PATH (GpuStepWriterOptions::hostKernels), defined
/// once for mantissa-compile and mantissa-run. Registered in `category`
/// while the object lives, and only when the tool was handed an emulator
/// (a build with tests): elsewhere the flag does not exist.
class GpuHostKernelsFlag {
public:
  GpuHostKernelsFlag(llvm::cl::OptionCategory &category,
                     const GpuHostEmulator *emulator);
  /// What the command line asks for (empty without the flag).
  GpuHostKernels get() const;

private:
  const GpuHostEmulator *emulator;
  std::optional<llvm::cl::opt<std::string>> path;
};

/// Compiles `step` for the GPU (or takes it from the compile cache) and
/// writes its program into `directory` (which exists). With
/// `options.hostKernels`, also compiles every GPU kernel of the run, the
/// step's and the update kernels of `updateGroups` (the artifact's groups,
/// in order, in tiles of `options.tileSize` elements), for the host into
/// that library.
llvm::Expected<GpuStepFiles>
writeGpuStep(train::StepOp step, llvm::StringRef directory,
             ArrayRef<AdamWGroup> updateGroups,
             const GpuStepWriterOptions &options = {});

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_GPUSTEPWRITER_H
