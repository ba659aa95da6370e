//===- GpuDriver.h - The CUDA driver and NCCL, loaded at run time -*- C++ -*-=//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The runtime reaches the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2)
// only through dlopen, as Triton's driver does, so it builds and runs on
// machines without either and says clearly which one is missing when a GPU
// is asked for.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_GPUDRIVER_H
#define MANTISSA_RUNTIME_GPUDRIVER_H

#include <string>

namespace mlir::mantissa::rt {

/// What the GPU probe found.
struct GpuProbe {
  bool driver = false; // libcuda.so.1 loaded and cuInit(0) succeeded
  int deviceCount = 0;
  bool nccl = false; // libnccl.so.2 loaded
  int ncclVersion = 0;
  /// Why the GPU path cannot run: "no CUDA driver (...)", "no CUDA device",
  /// "no NCCL (...)"; empty when everything was found.
  std::string problem;
};

/// Loads the CUDA driver and NCCL (once) and reports what is there.
GpuProbe probeGpu();

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_GPUDRIVER_H
