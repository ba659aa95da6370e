//===- FakeCuda.cpp - A host-memory stand-in for libcuda and libnccl ------===//
//
// Part of the Mantissa project. Test-only.
//
//===----------------------------------------------------------------------===//
//
// Built twice, as libcuda.so.1 and libnccl.so.2 in a directory of their own,
// so that a test can put them first on LD_LIBRARY_PATH and drive the
// runtime's GPU path (--device cuda) on a machine without a GPU: the
// plumbing (dlopen and symbol names, device buffers, uploads and downloads,
// pointer biasing, the kernel's argument order and scalars, NCCL at world
// size 1, checkpoints from device state) is exercised for real, only the
// kernel is replaced. "Device" memory is host memory.
//
// A launch checks the PTX entry's parameter list (count of .u64 pointers and
// .f32 scalars) against the arguments it is given and then performs the
// AdamW update of one member of FAKE_CUDA_ELEMENTS elements: an fp32
// parameter without master (4 pointers: grad, param, exp_avg, exp_avg_sq),
// or a bf16 parameter with an fp32 master and bf16 gradients (5 pointers:
// grad, param, master, exp_avg, exp_avg_sq), following torch's
// single-tensor AdamW in fp32. It is not the generated kernel, so results
// agree with the CPU path closely rather than bit for bit.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CudaApi.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace mlir::mantissa::rt::cudaapi;

// The opaque handles of CudaApi.h, defined here. Every definition below uses
// the very types the runtime calls through (UBSan's function check compares
// them).
struct CUctx_st {};
struct CUfunc_st {
  std::string entry;
  int pointers = 0, scalars = 0;
};
/// A loaded module owns the functions resolved from it, as the driver's do.
struct CUmod_st {
  std::string ptx;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};
struct ncclComm {};

namespace {

using Function = CUfunc_st;

/// Counts the entry's .param declarations by type.
bool parseEntry(const std::string &ptx, const std::string &entry,
                Function &out) {
  size_t at = ptx.find(".entry " + entry + "(");
  if (at == std::string::npos)
    return false;
  size_t end = ptx.find(')', at);
  std::string params = ptx.substr(at, end - at);
  out.entry = entry;
  for (size_t p = params.find(".param"); p != std::string::npos;
       p = params.find(".param", p + 1)) {
    if (params.compare(p, 11, ".param .u64") == 0)
      ++out.pointers;
    else if (params.compare(p, 11, ".param .f32") == 0)
      ++out.scalars;
  }
  return true;
}

float bf16ToFloat(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}
uint16_t floatToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return 0x7FC0;
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// libcuda.so.1
//===----------------------------------------------------------------------===//

CUresult cuInit(unsigned) { return 0; }
CUresult cuDeviceGetCount(int *count) {
  *count = 1;
  return 0;
}
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? 0 : 101; // CUDA_ERROR_INVALID_DEVICE
}
CUresult cuDeviceGetName(char *name, int length, CUdevice) {
  std::strncpy(name, "fake GPU (host memory)", size_t(length));
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice) {
  static CUctx_st dummy;
  *context = &dummy;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return 0; }
CUresult cuCtxSetCurrent(CUcontext) { return 0; }
CUresult cuCtxSynchronize() { return 0; }
CUresult cuStreamSynchronize(CUstream) { return 0; }
CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = error == 0 ? "no error" : "fake CUDA error";
  return 0;
}
CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  const char *text = static_cast<const char *>(image);
  if (!std::strstr(text, ".entry"))
    return 218; // CUDA_ERROR_INVALID_PTX
  *module = new CUmod_st{text, {}};
  return 0;
}
CUresult cuModuleUnload(CUmodule module) {
  delete module;
  return 0;
}
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module,
                             const char *name) {
  Function parsed;
  if (!parseEntry(module->ptx, name, parsed))
    return 500; // CUDA_ERROR_NOT_FOUND
  module->functions.push_back(std::make_unique<Function>(parsed));
  *function = module->functions.back().get();
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes) {
  *pointer = reinterpret_cast<uintptr_t>(
      std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256));
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr pointer) {
  std::free(reinterpret_cast<void *>(uintptr_t(pointer)));
  return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr pointer, unsigned char value, size_t bytes) {
  std::memset(reinterpret_cast<void *>(uintptr_t(pointer)), value, bytes);
  return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr to, const void *from, size_t bytes) {
  std::memcpy(reinterpret_cast<void *>(uintptr_t(to)), from, bytes);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void *to, CUdeviceptr from, size_t bytes) {
  std::memcpy(to, reinterpret_cast<void *>(uintptr_t(from)), bytes);
  return 0;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr to, CUdeviceptr from, size_t bytes) {
  std::memmove(reinterpret_cast<void *>(uintptr_t(to)),
               reinterpret_cast<void *>(uintptr_t(from)), bytes);
  return 0;
}

CUresult cuLaunchKernel(CUfunction function, unsigned gridX, unsigned gridY,
                        unsigned gridZ, unsigned blockX, unsigned blockY,
                        unsigned blockZ, unsigned, CUstream, void **arguments,
                        void **extra) {
  const Function &kernel = *function;
  const char *elements = std::getenv("FAKE_CUDA_ELEMENTS");
  if (!elements || extra || gridY != 1 || gridZ != 1 || blockY != 1 ||
      blockZ != 1 || kernel.scalars != 7 ||
      (kernel.pointers != 4 && kernel.pointers != 5))
    return 1; // CUDA_ERROR_INVALID_VALUE
  int64_t n = std::atoll(elements);
  // The launch must cover every element once: one block per 8 * block.
  if (int64_t(gridX) * blockX * 8 < n)
    return 1;
  auto pointer = [&](int index) {
    return reinterpret_cast<uint8_t *>(
        uintptr_t(*static_cast<unsigned long long *>(arguments[index])));
  };
  float s[7];
  for (int i = 0; i < 7; ++i)
    s[i] = *static_cast<float *>(arguments[kernel.pointers + i]);
  float decay = s[0], lerpWeight = s[1], beta2 = s[2], oneMinusBeta2 = s[3],
        bc2Sqrt = s[4], eps = s[5], negStepSize = s[6];
  bool master = kernel.pointers == 5;
  uint8_t *grad = pointer(0), *param = pointer(1);
  float *m = reinterpret_cast<float *>(pointer(master ? 3 : 2));
  float *v = reinterpret_cast<float *>(pointer(master ? 4 : 3));
  float *weights = master ? reinterpret_cast<float *>(pointer(2))
                          : reinterpret_cast<float *>(param);
  for (int64_t i = 0; i < n; ++i) {
    float g = master ? bf16ToFloat(reinterpret_cast<uint16_t *>(grad)[i])
                     : reinterpret_cast<float *>(grad)[i];
    float w = weights[i] * decay;
    m[i] = m[i] + lerpWeight * (g - m[i]);
    v[i] = v[i] * beta2 + oneMinusBeta2 * g * g;
    float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
    w = w + negStepSize * (m[i] / denom);
    weights[i] = w;
    if (master)
      reinterpret_cast<uint16_t *>(param)[i] = floatToBF16(w);
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// libnccl.so.2 (one rank)
//===----------------------------------------------------------------------===//

ncclResult_t ncclGetVersion(int *version) {
  *version = 22809;
  return 0;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id->internal, 0x5A, sizeof(id->internal));
  return 0;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int ranks, ncclUniqueId id,
                              int rank) {
  if (ranks != 1 || rank != 0 || id.internal[0] != 0x5A)
    return 4; // ncclInvalidArgument
  static ncclComm dummy;
  *comm = &dummy;
  return 0;
}
ncclResult_t ncclCommDestroy(ncclComm_t) { return 0; }
const char *ncclGetErrorString(ncclResult_t result) {
  return result == 0 ? "no error" : "fake NCCL error";
}
static size_t ncclSize(ncclDataType_t type) {
  return type == ncclFloat32                           ? 4
         : type == ncclFloat16 || type == ncclBfloat16 ? 2
                                                       : 1;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t, CUstream) {
  if (send != recv)
    std::memmove(recv, send, count * ncclSize(type));
  return 0;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t,
                               CUstream) {
  if (op != ncclSum)
    return 4;
  std::memmove(recv, send, count * ncclSize(type));
  return 0;
}
}
