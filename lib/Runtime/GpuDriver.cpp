//===- GpuDriver.cpp - The CUDA driver and NCCL, loaded at run time -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GpuDriver.h"

#include <dlfcn.h>

using namespace mlir::mantissa::rt;

GpuProbe mlir::mantissa::rt::probeGpu() {
  GpuProbe probe;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    const char *why = dlerror();
    probe.problem = std::string("no CUDA driver (libcuda.so.1: ") +
                    (why ? why : "not found") + ")";
    return probe;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int *);
  auto init = reinterpret_cast<InitFn>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(cuda, "cuDeviceGetCount"));
  if (!init || !count || init(0) != 0) {
    probe.problem = "no CUDA driver (cuInit failed)";
    return probe;
  }
  probe.driver = true;
  if (count(&probe.deviceCount) != 0 || probe.deviceCount == 0) {
    probe.problem = "no CUDA device";
    return probe;
  }
  void *nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!nccl) {
    const char *why = dlerror();
    probe.problem = std::string("no NCCL (libnccl.so.2: ") +
                    (why ? why : "not found") + ")";
    return probe;
  }
  using VersionFn = int (*)(int *);
  if (auto version = reinterpret_cast<VersionFn>(dlsym(nccl, "ncclGetVersion")))
    version(&probe.ncclVersion);
  probe.nccl = true;
  return probe;
}
