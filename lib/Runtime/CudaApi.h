//===- CudaApi.h - The CUDA driver and NCCL entry points we use -*- C++ -*-===//
//
// Part of the Mantissa project. Private to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The runtime builds without CUDA headers and reaches libcuda.so.1,
// libcublas.so.13, libcublasLt.so.13 and libnccl.so.2 only through dlopen
// (as Triton's driver does), so the few types and prototypes it needs are
// declared here, copied from cuda.h (CUDA 13.0), cublas_api.h /
// library_types.h / cublasLt.h (cuBLAS 13.1) and nccl.h (NCCL 2.28). The `_v2`
// entry points are the ones the headers' macros select for 64-bit device
// pointers. unittests/Runtime/CudaApiTest.cpp checks these declarations against
// the real headers where they exist.
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
struct CUgraph_st;
struct CUevent_st;
struct CUgraphExec_st;
struct cublasContext;
struct cublasLtContext;
// cuBLASLt's descriptors are semi-opaque structs its Create calls allocate;
// the runtime only passes their pointers (the stand-in defines them).
struct cublasLtMatmulDescOpaque;
struct cublasLtMatrixLayoutOpaque;
struct cublasLtMatmulPreferenceOpaque;
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
/// CUjit_option: the JIT's error log, so a PTX that does not compile says why.
enum CUjit_option : int {
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
};
using cuModuleLoadDataEx_t = CUresult (*)(CUmodule *module, const void *image,
                                          unsigned int numOptions,
                                          CUjit_option *options,
                                          void **optionValues);
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
/// CU_STREAM_DEFAULT: a stream that synchronises with the legacy default
/// stream (work queued on either runs in order).
constexpr unsigned CU_STREAM_DEFAULT = 0;
/// CUstreamCaptureMode: the capturing thread may still make calls that are
/// unsafe during capture (cuBLAS's own setup), which are not captured.
enum CUstreamCaptureMode : int { CU_STREAM_CAPTURE_MODE_RELAXED = 2 };
using CUgraph = CUgraph_st *;
using CUgraphExec = CUgraphExec_st *;
using cuStreamCreate_t = CUresult (*)(CUstream *phStream, unsigned int Flags);
using cuStreamDestroy_t = CUresult (*)(CUstream hStream); // _v2
using cuStreamBeginCapture_t = CUresult (*)(CUstream hStream,
                                            CUstreamCaptureMode mode); // _v2
using cuStreamEndCapture_t = CUresult (*)(CUstream hStream, CUgraph *phGraph);
using cuGraphInstantiateWithFlags_t = CUresult (*)(CUgraphExec *phGraphExec,
                                                   CUgraph hGraph,
                                                   unsigned long long flags);
using cuGraphLaunch_t = CUresult (*)(CUgraphExec hGraphExec, CUstream hStream);
using cuGraphExecDestroy_t = CUresult (*)(CUgraphExec hGraphExec);
using cuGraphDestroy_t = CUresult (*)(CUgraph hGraph);
using cuGetErrorString_t = CUresult (*)(CUresult error, const char **pStr);
/// Events (optional: without them the step's ops are not timed).
using CUevent = CUevent_st *;
/// CUevent_flags: CU_EVENT_DEFAULT records timing.
constexpr unsigned CU_EVENT_DEFAULT = 0;
using cuEventCreate_t = CUresult (*)(CUevent *phEvent, unsigned int Flags);
using cuEventRecord_t = CUresult (*)(CUevent hEvent, CUstream hStream);
using cuEventSynchronize_t = CUresult (*)(CUevent hEvent);
using cuEventElapsedTime_t = CUresult (*)(float *pMilliseconds, CUevent hStart,
                                          CUevent hEnd); // _v2
using cuEventDestroy_t = CUresult (*)(CUevent hEvent);   // _v2

//===----------------------------------------------------------------------===//
// cuBLAS (cublas_api.h, library_types.h)
//===----------------------------------------------------------------------===//

using cublasStatus_t = int; // 0 is CUBLAS_STATUS_SUCCESS
using cublasHandle_t = cublasContext *;
/// cublasStatus_t values (for messages: the library may be missing).
enum cublasStatusValue : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
};
/// cublasOperation_t.
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
/// cublasMath_t: the default math mode uses no TF32 for fp32 products.
enum cublasMath_t : int { CUBLAS_DEFAULT_MATH = 0 };
/// cublasComputeType_t: fp32 accumulation; FAST_TF32 lets the library
/// round fp32 inputs to TF32 (10-bit mantissas) for the tensor cores.
enum cublasComputeType_t : int {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77
};
/// cublasGemmAlgo_t.
enum cublasGemmAlgo_t : int { CUBLAS_GEMM_DEFAULT = -1 };
/// cudaDataType (library_types.h).
enum cudaDataType : int { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };

using cublasCreate_t = cublasStatus_t (*)(cublasHandle_t *handle); // _v2
using cublasDestroy_t = cublasStatus_t (*)(cublasHandle_t handle); // _v2
using cublasSetStream_t = cublasStatus_t (*)(cublasHandle_t handle,
                                             CUstream streamId); // _v2
using cublasSetMathMode_t = cublasStatus_t (*)(cublasHandle_t handle,
                                               cublasMath_t mode);
using cublasGetStatusString_t = const char *(*)(cublasStatus_t status);
using cublasGemmStridedBatchedEx_t = cublasStatus_t (*)(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);

//===----------------------------------------------------------------------===//
// cuBLASLt (cublasLt.h)
//===----------------------------------------------------------------------===//

using cublasLtHandle_t = cublasLtContext *;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque *;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque *;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque *;
/// cublasLtMatmulAlgo_t and cublasLtMatmulHeuristicResult_t, by value.
struct cublasLtMatmulAlgo_t {
  unsigned long long data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};
/// cublasLtMatmulDescAttributes_t (the ones the runtime sets).
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,         // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,         // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,       // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,   // void *
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26 // int32_t (cudaDataType)
};
/// cublasLtMatrixLayoutAttribute_t.
enum cublasLtMatrixLayoutAttribute_t : int {
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,         // int32_t
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 // int64_t, in elements
};
/// cublasLtMatmulPreferenceAttributes_t.
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   // uint64_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
};
/// cublasLtEpilogue_t: DEFAULT is none; BIAS adds a vector of m elements
/// (in the bias data type, by default D's) to every column of the product
/// before D is rounded.
enum cublasLtEpilogue_t : unsigned {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4
};

using cublasLtCreate_t = cublasStatus_t (*)(cublasLtHandle_t *lightHandle);
using cublasLtDestroy_t = cublasStatus_t (*)(cublasLtHandle_t lightHandle);
using cublasLtMatmulDescCreate_t =
    cublasStatus_t (*)(cublasLtMatmulDesc_t *matmulDesc,
                       cublasComputeType_t computeType, cudaDataType scaleType);
using cublasLtMatmulDescDestroy_t =
    cublasStatus_t (*)(cublasLtMatmulDesc_t matmulDesc);
using cublasLtMatmulDescSetAttribute_t = cublasStatus_t (*)(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
    const void *buf, size_t sizeInBytes);
using cublasLtMatrixLayoutCreate_t = cublasStatus_t (*)(
    cublasLtMatrixLayout_t *matLayout, cudaDataType type,
    unsigned long long rows, unsigned long long cols, long long ld);
using cublasLtMatrixLayoutDestroy_t =
    cublasStatus_t (*)(cublasLtMatrixLayout_t matLayout);
using cublasLtMatrixLayoutSetAttribute_t = cublasStatus_t (*)(
    cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
    const void *buf, size_t sizeInBytes);
using cublasLtMatmulPreferenceCreate_t =
    cublasStatus_t (*)(cublasLtMatmulPreference_t *pref);
using cublasLtMatmulPreferenceDestroy_t =
    cublasStatus_t (*)(cublasLtMatmulPreference_t pref);
using cublasLtMatmulPreferenceSetAttribute_t = cublasStatus_t (*)(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
    const void *buf, size_t sizeInBytes);
using cublasLtMatmulAlgoGetHeuristic_t = cublasStatus_t (*)(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount);
using cublasLtMatmul_t = cublasStatus_t (*)(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
    const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
    const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
    const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
    void *workspace, size_t workspaceSizeInBytes, CUstream stream);
using cublasLtGetStatusString_t = const char *(*)(cublasStatus_t status);

/// The name of a cublasStatus_t ("CUBLAS_STATUS_INVALID_VALUE"), or null.
inline const char *cublasStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "CUBLAS_STATUS_LICENSE_ERROR";
  default:
    return nullptr;
  }
}

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
