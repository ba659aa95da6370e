//===- CudaApiTest.cpp - The runtime's CUDA/NCCL declarations vs headers --===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// libmantissa_rt declares the CUDA driver, cuBLAS and NCCL entry points
// itself (lib/Runtime/CudaApi.h) so that it builds without CUDA. A wrong
// declaration would only show as a crash on a GPU machine; this test, built
// where cuda.h, cublas_api.h and nccl.h exist, compares each one with the
// real headers' prototype: the same arity, and per argument and result the
// same size and the same kind (pointer, floating-point or
// integer/enum/struct), and the enum values the runtime passes.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CudaApi.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>
#include <nccl.h>

#include "gtest/gtest.h"

#include <cstddef>
#include <type_traits>

namespace api = mlir::mantissa::rt::cudaapi;

namespace {

template <typename A, typename B> constexpr bool sameAbiType() {
  if constexpr (std::is_void_v<A> || std::is_void_v<B>)
    return std::is_void_v<A> && std::is_void_v<B>;
  else if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>)
    return std::is_pointer_v<A> && std::is_pointer_v<B>;
  else
    return sizeof(A) == sizeof(B) &&
           std::is_floating_point_v<A> == std::is_floating_point_v<B>;
}

template <typename F, typename G> struct SameAbi : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct SameAbi<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool arity = sizeof...(A1) == sizeof...(A2);
  template <typename... X> struct List {};
  template <typename L1, typename L2> struct Args : std::false_type {};
  template <typename... X1, typename... X2>
  struct Args<List<X1...>, List<X2...>> {
    static constexpr bool value = (sameAbiType<X1, X2>() && ...);
  };
  static constexpr bool args = [] {
    if constexpr (arity)
      return Args<List<A1...>, List<A2...>>::value;
    else
      return false;
  }();
  static constexpr bool value = arity && args && sameAbiType<R1, R2>();
};

#define EXPECT_SAME_ABI(ours, theirs)                                          \
  static_assert(SameAbi<api::ours##_t, decltype(&::theirs)>::value,            \
                #ours " does not match " #theirs " in the real header")

TEST(CudaApiTest, DriverDeclarationsMatchCudaH) {
  EXPECT_SAME_ABI(cuInit, cuInit);
  EXPECT_SAME_ABI(cuDeviceGetCount, cuDeviceGetCount);
  EXPECT_SAME_ABI(cuDeviceGet, cuDeviceGet);
  EXPECT_SAME_ABI(cuDeviceGetName, cuDeviceGetName);
  EXPECT_SAME_ABI(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  EXPECT_SAME_ABI(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
  EXPECT_SAME_ABI(cuCtxSetCurrent, cuCtxSetCurrent);
  EXPECT_SAME_ABI(cuCtxSynchronize, cuCtxSynchronize);
  EXPECT_SAME_ABI(cuModuleLoadData, cuModuleLoadData);
  EXPECT_SAME_ABI(cuModuleLoadDataEx, cuModuleLoadDataEx);
  EXPECT_EQ(int(api::CU_JIT_ERROR_LOG_BUFFER), int(CU_JIT_ERROR_LOG_BUFFER));
  EXPECT_EQ(int(api::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
            int(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES));
  EXPECT_SAME_ABI(cuModuleUnload, cuModuleUnload);
  EXPECT_SAME_ABI(cuModuleGetFunction, cuModuleGetFunction);
  EXPECT_SAME_ABI(cuMemAlloc, cuMemAlloc_v2);
  EXPECT_SAME_ABI(cuMemFree, cuMemFree_v2);
  EXPECT_SAME_ABI(cuMemsetD8, cuMemsetD8_v2);
  EXPECT_SAME_ABI(cuMemcpyHtoD, cuMemcpyHtoD_v2);
  EXPECT_SAME_ABI(cuMemcpyDtoH, cuMemcpyDtoH_v2);
  EXPECT_SAME_ABI(cuMemcpyDtoD, cuMemcpyDtoD_v2);
  EXPECT_SAME_ABI(cuLaunchKernel, cuLaunchKernel);
  EXPECT_SAME_ABI(cuStreamSynchronize, cuStreamSynchronize);
  EXPECT_SAME_ABI(cuGetErrorString, cuGetErrorString);
  EXPECT_SAME_ABI(cuStreamCreate, cuStreamCreate);
  EXPECT_SAME_ABI(cuStreamDestroy, cuStreamDestroy_v2);
  EXPECT_SAME_ABI(cuStreamBeginCapture, cuStreamBeginCapture_v2);
  EXPECT_SAME_ABI(cuStreamEndCapture, cuStreamEndCapture);
  EXPECT_SAME_ABI(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags);
  EXPECT_SAME_ABI(cuGraphLaunch, cuGraphLaunch);
  EXPECT_SAME_ABI(cuGraphExecDestroy, cuGraphExecDestroy);
  EXPECT_SAME_ABI(cuGraphDestroy, cuGraphDestroy);
  EXPECT_SAME_ABI(cuEventCreate, cuEventCreate);
  EXPECT_SAME_ABI(cuEventRecord, cuEventRecord);
  EXPECT_SAME_ABI(cuEventSynchronize, cuEventSynchronize);
  EXPECT_SAME_ABI(cuEventElapsedTime, cuEventElapsedTime_v2);
  EXPECT_SAME_ABI(cuEventDestroy, cuEventDestroy_v2);
  EXPECT_EQ(api::CU_EVENT_DEFAULT, unsigned(CU_EVENT_DEFAULT));
  EXPECT_TRUE((std::is_same_v<api::CUevent, CUevent>));
  EXPECT_EQ(api::CU_STREAM_DEFAULT, unsigned(CU_STREAM_DEFAULT));
  EXPECT_EQ(int(api::CU_STREAM_CAPTURE_MODE_RELAXED),
            int(CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_TRUE((std::is_same_v<api::CUgraph, CUgraph>));
  EXPECT_TRUE((std::is_same_v<api::CUgraphExec, CUgraphExec>));
  EXPECT_EQ(api::CUDA_SUCCESS, int(CUDA_SUCCESS));
  EXPECT_EQ(sizeof(api::CUdeviceptr), sizeof(CUdeviceptr));
  // The opaque handles are the same types, not only the same size.
  EXPECT_TRUE((std::is_same_v<api::CUcontext, CUcontext>));
  EXPECT_TRUE((std::is_same_v<api::CUstream, CUstream>));
}

TEST(CudaApiTest, CublasDeclarationsMatchCublasApiH) {
  EXPECT_SAME_ABI(cublasCreate, cublasCreate_v2);
  EXPECT_SAME_ABI(cublasDestroy, cublasDestroy_v2);
  EXPECT_SAME_ABI(cublasSetStream, cublasSetStream_v2);
  EXPECT_SAME_ABI(cublasSetMathMode, cublasSetMathMode);
  EXPECT_SAME_ABI(cublasGetStatusString, cublasGetStatusString);
  // C++ sees a second, inline overload (a cudaDataType compute type); the
  // cast picks the library's entry point, and fails to compile if the
  // header no longer declares it so.
  using RealGemm = cublasStatus_t (*)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
      const void *, const void *, cudaDataType, int, long long int,
      const void *, cudaDataType, int, long long int, const void *, void *,
      cudaDataType, int, long long int, int, cublasComputeType_t,
      cublasGemmAlgo_t);
  static_assert(SameAbi<api::cublasGemmStridedBatchedEx_t, RealGemm>::value,
                "cublasGemmStridedBatchedEx does not match the real header");
  static_assert(std::is_same_v<decltype(static_cast<RealGemm>(
                                   &::cublasGemmStridedBatchedEx)),
                               RealGemm>);
  EXPECT_TRUE((std::is_same_v<api::cublasHandle_t, cublasHandle_t>));
  EXPECT_EQ(sizeof(api::cublasOperation_t), sizeof(cublasOperation_t));
  EXPECT_EQ(int(api::CUBLAS_OP_N), int(CUBLAS_OP_N));
  EXPECT_EQ(int(api::CUBLAS_OP_T), int(CUBLAS_OP_T));
  EXPECT_EQ(int(api::CUBLAS_DEFAULT_MATH), int(CUBLAS_DEFAULT_MATH));
  EXPECT_EQ(int(api::CUBLAS_COMPUTE_32F), int(CUBLAS_COMPUTE_32F));
  EXPECT_EQ(int(api::CUBLAS_COMPUTE_32F_FAST_TF32),
            int(CUBLAS_COMPUTE_32F_FAST_TF32));
  EXPECT_EQ(int(api::CUBLAS_GEMM_DEFAULT), int(CUBLAS_GEMM_DEFAULT));
  EXPECT_EQ(int(api::CUDA_R_32F), int(CUDA_R_32F));
  EXPECT_EQ(int(api::CUDA_R_16F), int(CUDA_R_16F));
  EXPECT_EQ(int(api::CUDA_R_16BF), int(CUDA_R_16BF));
  // Every status the header names, by value and by name.
  std::pair<int, cublasStatus_t> statuses[] = {
      {api::CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS},
      {api::CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_NOT_INITIALIZED},
      {api::CUBLAS_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED},
      {api::CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_INVALID_VALUE},
      {api::CUBLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_ARCH_MISMATCH},
      {api::CUBLAS_STATUS_MAPPING_ERROR, CUBLAS_STATUS_MAPPING_ERROR},
      {api::CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_EXECUTION_FAILED},
      {api::CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_INTERNAL_ERROR},
      {api::CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED},
      {api::CUBLAS_STATUS_LICENSE_ERROR, CUBLAS_STATUS_LICENSE_ERROR}};
  for (auto [ours, theirs] : statuses)
    EXPECT_EQ(ours, int(theirs));
  EXPECT_STREQ(api::cublasStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(api::cublasStatusName(12345), nullptr);
}

TEST(CudaApiTest, CublasLtDeclarationsMatchCublasLtH) {
  EXPECT_SAME_ABI(cublasLtCreate, cublasLtCreate);
  EXPECT_SAME_ABI(cublasLtDestroy, cublasLtDestroy);
  EXPECT_SAME_ABI(cublasLtMatmulDescCreate, cublasLtMatmulDescCreate);
  EXPECT_SAME_ABI(cublasLtMatmulDescDestroy, cublasLtMatmulDescDestroy);
  EXPECT_SAME_ABI(cublasLtMatmulDescSetAttribute,
                  cublasLtMatmulDescSetAttribute);
  EXPECT_SAME_ABI(cublasLtMatrixLayoutCreate, cublasLtMatrixLayoutCreate);
  EXPECT_SAME_ABI(cublasLtMatrixLayoutDestroy, cublasLtMatrixLayoutDestroy);
  EXPECT_SAME_ABI(cublasLtMatrixLayoutSetAttribute,
                  cublasLtMatrixLayoutSetAttribute);
  EXPECT_SAME_ABI(cublasLtMatmulPreferenceCreate,
                  cublasLtMatmulPreferenceCreate);
  EXPECT_SAME_ABI(cublasLtMatmulPreferenceDestroy,
                  cublasLtMatmulPreferenceDestroy);
  EXPECT_SAME_ABI(cublasLtMatmulPreferenceSetAttribute,
                  cublasLtMatmulPreferenceSetAttribute);
  EXPECT_SAME_ABI(cublasLtMatmulAlgoGetHeuristic,
                  cublasLtMatmulAlgoGetHeuristic);
  EXPECT_SAME_ABI(cublasLtMatmul, cublasLtMatmul);
  EXPECT_SAME_ABI(cublasLtGetStatusString, cublasLtGetStatusString);
  EXPECT_TRUE((std::is_same_v<api::cublasLtHandle_t, cublasLtHandle_t>));
  // Passed by value or as arrays: the same size and layout.
  EXPECT_EQ(sizeof(api::cublasLtMatmulAlgo_t), sizeof(cublasLtMatmulAlgo_t));
  EXPECT_EQ(sizeof(api::cublasLtMatmulHeuristicResult_t),
            sizeof(cublasLtMatmulHeuristicResult_t));
  EXPECT_EQ(offsetof(api::cublasLtMatmulHeuristicResult_t, state),
            offsetof(cublasLtMatmulHeuristicResult_t, state));
  EXPECT_EQ(offsetof(api::cublasLtMatmulHeuristicResult_t, workspaceSize),
            offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_DESC_TRANSA),
            int(CUBLASLT_MATMUL_DESC_TRANSA));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_DESC_TRANSB),
            int(CUBLASLT_MATMUL_DESC_TRANSB));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_DESC_EPILOGUE),
            int(CUBLASLT_MATMUL_DESC_EPILOGUE));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_DESC_BIAS_POINTER),
            int(CUBLASLT_MATMUL_DESC_BIAS_POINTER));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE),
            int(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE));
  EXPECT_EQ(int(api::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT),
            int(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT));
  EXPECT_EQ(int(api::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET),
            int(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES),
            int(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES),
            int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES),
            int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES),
            int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES));
  EXPECT_EQ(int(api::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES),
            int(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES));
  EXPECT_EQ(unsigned(api::CUBLASLT_EPILOGUE_DEFAULT),
            unsigned(CUBLASLT_EPILOGUE_DEFAULT));
  EXPECT_EQ(unsigned(api::CUBLASLT_EPILOGUE_BIAS),
            unsigned(CUBLASLT_EPILOGUE_BIAS));
}

TEST(CudaApiTest, NcclDeclarationsMatchNcclH) {
  EXPECT_SAME_ABI(ncclGetVersion, ncclGetVersion);
  EXPECT_SAME_ABI(ncclGetUniqueId, ncclGetUniqueId);
  EXPECT_SAME_ABI(ncclCommInitRank, ncclCommInitRank);
  EXPECT_SAME_ABI(ncclCommDestroy, ncclCommDestroy);
  EXPECT_SAME_ABI(ncclAllGather, ncclAllGather);
  EXPECT_SAME_ABI(ncclReduceScatter, ncclReduceScatter);
  EXPECT_SAME_ABI(ncclGetErrorString, ncclGetErrorString);
  EXPECT_EQ(sizeof(api::ncclUniqueId), sizeof(ncclUniqueId));
  EXPECT_EQ(int(api::ncclUint8), int(ncclUint8));
  EXPECT_EQ(int(api::ncclFloat16), int(ncclFloat16));
  EXPECT_EQ(int(api::ncclFloat32), int(ncclFloat32));
  EXPECT_EQ(int(api::ncclBfloat16), int(ncclBfloat16));
  EXPECT_EQ(int(api::ncclSum), int(ncclSum));
  EXPECT_EQ(api::ncclSuccess, int(ncclSuccess));
  EXPECT_TRUE((std::is_same_v<api::ncclComm_t, ncclComm_t>));
}

} // namespace
