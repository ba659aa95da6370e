//===- CudaApi.h - The CUDA driver and NCCL entry points we use -*- C++ -*-===//
//
// Part of the Mantissa project. Private to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The runtime builds without CUDA headers and reaches libcuda.so.1 and
// libnccl.so.2 only through dlopen (as Triton's driver does), so the few
// types and prototypes it needs are declared here, copied from cuda.h (CUDA
// 13.0) and nccl.h (NCCL 2.28). The `_v2` entry points are the ones cuda.h's
// macros select for 64-bit device pointers. unittests/Runtime/CudaApiTest.cpp
// checks these declarations against the real headers where they exist.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_RUNTIME_CUDAAPI_H
#define MANTISSA_LIB_RUNTIME_CUDAAPI_H

#include <cstddef>
#include <dlfcn.h>
#include <string>

// Opaque handle types, at global scope as in cuda.h / nccl.h.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct ncclComm;

namespace mlir::mantissa::rt::cudaapi {

//===----------------------------------------------------------------------===//
// CUDA driver API (cuda.h)
//===----------------------------------------------------------------------===//

using CUresult = int; // enum cudaError_enum; 0 is CUDA_SUCCESS
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = CUctx_st *;
using CUmodule = CUmod_st *;
using CUfunction = CUfunc_st *;
using CUstream = CUstream_st *;
constexpr CUresult CUDA_SUCCESS = 0;

using cuInit_t = CUresult (*)(unsigned int flags);
using cuDeviceGetCount_t = CUresult (*)(int *count);
using cuDeviceGet_t = CUresult (*)(CUdevice *device, int ordinal);
using cuDeviceGetName_t = CUresult (*)(char *name, int len, CUdevice dev);
using cuDevicePrimaryCtxRetain_t = CUresult (*)(CUcontext *pctx, CUdevice dev);
using cuDevicePrimaryCtxRelease_t = CUresult (*)(CUdevice dev); // _v2
using cuCtxSetCurrent_t = CUresult (*)(CUcontext ctx);
using cuCtxSynchronize_t = CUresult (*)();
using cuModuleLoadData_t = CUresult (*)(CUmodule *module, const void *image);
using cuModuleUnload_t = CUresult (*)(CUmodule hmod);
using cuModuleGetFunction_t = CUresult (*)(CUfunction *hfunc, CUmodule hmod,
                                           const char *name);
using cuMemAlloc_t = CUresult (*)(CUdeviceptr *dptr, size_t bytesize); // _v2
using cuMemFree_t = CUresult (*)(CUdeviceptr dptr);                    // _v2
using cuMemsetD8_t = CUresult (*)(CUdeviceptr dstDevice, unsigned char uc,
                                  size_t n); // _v2
using cuMemcpyHtoD_t = CUresult (*)(CUdeviceptr dstDevice, const void *srcHost,
                                    size_t byteCount); // _v2
using cuMemcpyDtoH_t = CUresult (*)(void *dstHost, CUdeviceptr srcDevice,
                                    size_t byteCount); // _v2
using cuMemcpyDtoD_t = CUresult (*)(CUdeviceptr dstDevice,
                                    CUdeviceptr srcDevice,
                                    size_t byteCount); // _v2
using cuLaunchKernel_t = CUresult (*)(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void **kernelParams, void **extra);
using cuStreamSynchronize_t = CUresult (*)(CUstream hStream);
using cuGetErrorString_t = CUresult (*)(CUresult error, const char **pStr);

//===----------------------------------------------------------------------===//
// NCCL (nccl.h)
//===----------------------------------------------------------------------===//

using ncclResult_t = int; // 0 is ncclSuccess
using ncclComm_t = ncclComm *;
constexpr int NCCL_UNIQUE_ID_BYTES = 128;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};
/// ncclDataType_t and ncclRedOp_t values.
enum ncclDataType_t : int {
  ncclUint8 = 1,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclBfloat16 = 9
};
enum ncclRedOp_t : int { ncclSum = 0 };
constexpr ncclResult_t ncclSuccess = 0;

using ncclGetVersion_t = ncclResult_t (*)(int *version);
using ncclGetUniqueId_t = ncclResult_t (*)(ncclUniqueId *uniqueId);
using ncclCommInitRank_t = ncclResult_t (*)(ncclComm_t *comm, int nranks,
                                            ncclUniqueId commId, int rank);
using ncclCommDestroy_t = ncclResult_t (*)(ncclComm_t comm);
using ncclAllGather_t = ncclResult_t (*)(const void *sendbuff, void *recvbuff,
                                         size_t sendcount,
                                         ncclDataType_t datatype,
                                         ncclComm_t comm, CUstream stream);
using ncclReduceScatter_t = ncclResult_t (*)(const void *sendbuff,
                                             void *recvbuff, size_t recvcount,
                                             ncclDataType_t datatype,
                                             ncclRedOp_t op, ncclComm_t comm,
                                             CUstream stream);
using ncclGetErrorString_t = const char *(*)(ncclResult_t result);

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

/// dlopens `soname`; when it cannot, explains in `error` as
/// "`what`: `soname` could not be loaded (why)".
inline void *openLibrary(const char *soname, const char *what,
                         std::string &error) {
  void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    error = std::string(what) + ": " + soname + " could not be loaded (" +
            (why ? why : "not found") + ")";
  }
  return library;
}

/// Resolves `symbol` into `out`, appending its name to `missing` (a
/// comma-separated list) when the library lacks it.
template <typename Fn>
void resolveSymbol(void *library, const char *symbol, Fn &out,
                   std::string &missing) {
  out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (!out)
    missing += (missing.empty() ? "" : ", ") + std::string(symbol);
}

} // namespace mlir::mantissa::rt::cudaapi

#endif // MANTISSA_LIB_RUNTIME_CUDAAPI_H
