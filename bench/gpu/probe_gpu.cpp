//===- probe_gpu.cpp - The lent GPU's name, size and copy bandwidth -------===//
//
// What the device check needs to know of the GPU before it prices anything:
// its name (which cost-model profile it is), its multiprocessors and memory
// (whether the profile's figures hold), and the device-to-device copy
// bandwidth it reaches (which replaces the profile's where they differ: a
// PCIe H100's HBM2e is slower than the SXM's HBM3).
//
// It reaches libcuda.so.1 through dlopen with the runtime's declarations
// (lib/Runtime/CudaApi.h), as the runtime does, so it builds with a bare c++
// and no CUDA headers, and the device check's dry run drives it through the
// stand-in driver (unittests/Runtime/FakeCuda.cpp), which has no attributes
// and copies host memory: those lines then say `unknown` or measure the
// host.
//
//   probe_gpu [MIB]   copies MIB MiB (default 256) and prints, one per line,
//                     name=..., multiprocessors=N|unknown,
//                     memory_bytes=N|unknown, copy_gbs=X
//
// The bandwidth counts the bytes read and written, 2 x MIB MiB per copy, as
// bench/adamw/gpu/adamw_gpu_check.cpp and TOOLCHAIN.md's figures do; it is
// the median of 7 runs of 10 copies after one that warms up.
//
//===----------------------------------------------------------------------===//

#include "CudaApi.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace mlir::mantissa::rt::cudaapi;

namespace {
// Not in CudaApi.h: the runtime has no use for them. As declared in cuda.h.
using cuDeviceGetAttribute_t = CUresult (*)(int *value, int attribute,
                                            CUdevice device);
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
using cuDeviceTotalMem_t = CUresult (*)(size_t *bytes, CUdevice device); // _v2

[[noreturn]] void fail(const char *call, CUresult result) {
  std::fprintf(stderr, "probe_gpu: %s failed (%d)\n", call, result);
  std::exit(1);
}
} // namespace

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  if (mib == 0) {
    std::fprintf(stderr, "usage: probe_gpu [MIB > 0]\n");
    return 2;
  }
  std::string error;
  void *library = openLibrary("libcuda.so.1", "no CUDA driver", error);
  if (!library) {
    std::fprintf(stderr, "probe_gpu: %s\n", error.c_str());
    return 1;
  }
  cuInit_t init;
  cuDeviceGet_t deviceGet;
  cuDeviceGetName_t deviceGetName;
  cuDevicePrimaryCtxRetain_t primaryCtxRetain;
  cuCtxSetCurrent_t ctxSetCurrent;
  cuMemAlloc_t memAlloc;
  cuMemFree_t memFree;
  cuMemcpyDtoD_t memcpyDtoD;
  cuEventCreate_t eventCreate;
  cuEventRecord_t eventRecord;
  cuEventSynchronize_t eventSynchronize;
  cuEventElapsedTime_t eventElapsedTime;
  std::string missing;
  resolveSymbol(library, "cuInit", init, missing);
  resolveSymbol(library, "cuDeviceGet", deviceGet, missing);
  resolveSymbol(library, "cuDeviceGetName", deviceGetName, missing);
  resolveSymbol(library, "cuDevicePrimaryCtxRetain", primaryCtxRetain, missing);
  resolveSymbol(library, "cuCtxSetCurrent", ctxSetCurrent, missing);
  resolveSymbol(library, "cuMemAlloc_v2", memAlloc, missing);
  resolveSymbol(library, "cuMemFree_v2", memFree, missing);
  resolveSymbol(library, "cuMemcpyDtoD_v2", memcpyDtoD, missing);
  resolveSymbol(library, "cuEventCreate", eventCreate, missing);
  resolveSymbol(library, "cuEventRecord", eventRecord, missing);
  resolveSymbol(library, "cuEventSynchronize", eventSynchronize, missing);
  // cuEventElapsedTime_v2 since CUDA 12.8, as the runtime resolves it.
  std::string missingV2;
  resolveSymbol(library, "cuEventElapsedTime_v2", eventElapsedTime, missingV2);
  if (!eventElapsedTime)
    resolveSymbol(library, "cuEventElapsedTime", eventElapsedTime, missing);
  if (!missing.empty()) {
    std::fprintf(stderr, "probe_gpu: libcuda.so.1 lacks %s\n", missing.c_str());
    return 1;
  }
  // Optional: the stand-in driver has neither.
  std::string optional;
  cuDeviceGetAttribute_t deviceGetAttribute;
  cuDeviceTotalMem_t deviceTotalMem;
  resolveSymbol(library, "cuDeviceGetAttribute", deviceGetAttribute, optional);
  resolveSymbol(library, "cuDeviceTotalMem_v2", deviceTotalMem, optional);

  CUresult rc;
  CUdevice device;
  CUcontext context;
  char name[256] = {};
  if ((rc = init(0)) != CUDA_SUCCESS)
    fail("cuInit", rc);
  if ((rc = deviceGet(&device, 0)) != CUDA_SUCCESS)
    fail("cuDeviceGet", rc);
  if ((rc = deviceGetName(name, sizeof(name) - 1, device)) != CUDA_SUCCESS)
    fail("cuDeviceGetName", rc);
  std::printf("name=%s\n", name);
  int multiprocessors = 0;
  if (deviceGetAttribute &&
      deviceGetAttribute(&multiprocessors,
                         CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                         device) == CUDA_SUCCESS)
    std::printf("multiprocessors=%d\n", multiprocessors);
  else
    std::printf("multiprocessors=unknown\n");
  size_t memory = 0;
  if (deviceTotalMem && deviceTotalMem(&memory, device) == CUDA_SUCCESS)
    std::printf("memory_bytes=%zu\n", memory);
  else
    std::printf("memory_bytes=unknown\n");
  std::fflush(stdout);

  if ((rc = primaryCtxRetain(&context, device)) != CUDA_SUCCESS)
    fail("cuDevicePrimaryCtxRetain", rc);
  if ((rc = ctxSetCurrent(context)) != CUDA_SUCCESS)
    fail("cuCtxSetCurrent", rc);
  size_t bytes = mib << 20;
  CUdeviceptr source, destination;
  if ((rc = memAlloc(&source, bytes)) != CUDA_SUCCESS ||
      (rc = memAlloc(&destination, bytes)) != CUDA_SUCCESS)
    fail("cuMemAlloc", rc);
  CUevent start, stop;
  if ((rc = eventCreate(&start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
      (rc = eventCreate(&stop, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
    fail("cuEventCreate", rc);
  // Copies on the legacy default stream, between events on it: they run in
  // order, and the first run pays for the pages' first touch.
  constexpr int kCopies = 10, kRuns = 8;
  std::vector<double> seconds;
  for (int run = 0; run < kRuns; ++run) {
    if ((rc = eventRecord(start, nullptr)) != CUDA_SUCCESS)
      fail("cuEventRecord", rc);
    for (int copy = 0; copy < kCopies; ++copy)
      if ((rc = memcpyDtoD(destination, source, bytes)) != CUDA_SUCCESS)
        fail("cuMemcpyDtoD", rc);
    if ((rc = eventRecord(stop, nullptr)) != CUDA_SUCCESS ||
        (rc = eventSynchronize(stop)) != CUDA_SUCCESS)
      fail("cuEventRecord", rc);
    float ms = 0;
    if ((rc = eventElapsedTime(&ms, start, stop)) != CUDA_SUCCESS)
      fail("cuEventElapsedTime", rc);
    if (run > 0)
      seconds.push_back(double(ms) * 1e-3 / kCopies);
  }
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];
  std::printf("copy_gbs=%.1f\n", 2.0 * double(bytes) / median / 1e9);
  memFree(source);
  memFree(destination);
  return 0;
}
