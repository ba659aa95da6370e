//===- CudaDriver.cpp - One GPU through the CUDA driver API ---------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CudaDriver.h"

#include "CudaApi.h"

#include <algorithm>
#include <cstring>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::cudaapi;

/// The driver entry points, resolved once from the loaded library.
struct CudaDevice::Api {
  cuInit_t init = nullptr;
  cuDeviceGetCount_t deviceGetCount = nullptr;
  cuDeviceGet_t deviceGet = nullptr;
  cuDeviceGetName_t deviceGetName = nullptr;
  cuDevicePrimaryCtxRetain_t primaryCtxRetain = nullptr;
  cuDevicePrimaryCtxRelease_t primaryCtxRelease = nullptr;
  cuCtxSetCurrent_t ctxSetCurrent = nullptr;
  cuCtxSynchronize_t ctxSynchronize = nullptr;
  cuModuleLoadData_t moduleLoadData = nullptr;
  cuModuleLoadDataEx_t moduleLoadDataEx = nullptr;
  cuModuleUnload_t moduleUnload = nullptr;
  cuModuleGetFunction_t moduleGetFunction = nullptr;
  cuMemAlloc_t memAlloc = nullptr;
  cuMemFree_t memFree = nullptr;
  cuMemsetD8_t memsetD8 = nullptr;
  cuMemcpyHtoD_t memcpyHtoD = nullptr;
  cuMemcpyDtoH_t memcpyDtoH = nullptr;
  cuMemcpyDtoD_t memcpyDtoD = nullptr;
  cuLaunchKernel_t launchKernel = nullptr;
  cuGetErrorString_t getErrorString = nullptr;
  // Streams and graphs (optional: without them steps run op by op).
  cuStreamCreate_t streamCreate = nullptr;
  cuStreamDestroy_t streamDestroy = nullptr;
  cuStreamSynchronize_t streamSynchronize = nullptr;
  cuStreamBeginCapture_t streamBeginCapture = nullptr;
  cuStreamEndCapture_t streamEndCapture = nullptr;
  cuGraphInstantiateWithFlags_t graphInstantiate = nullptr;
  cuGraphLaunch_t graphLaunch = nullptr;
  cuGraphExecDestroy_t graphExecDestroy = nullptr;
  cuGraphDestroy_t graphDestroy = nullptr;
  // Events (optional: without them the step's ops are not timed).
  cuEventCreate_t eventCreate = nullptr;
  cuEventRecord_t eventRecord = nullptr;
  cuEventSynchronize_t eventSynchronize = nullptr;
  cuEventElapsedTime_t eventElapsedTime = nullptr;
  cuEventDestroy_t eventDestroy = nullptr;
};

/// The cuBLAS entry points, resolved once from the loaded library.
struct CudaDevice::BlasApi {
  cublasCreate_t create = nullptr;
  cublasDestroy_t destroy = nullptr;
  cublasSetStream_t setStream = nullptr;
  cublasSetMathMode_t setMathMode = nullptr;
  cublasGemmStridedBatchedEx_t gemmStridedBatchedEx = nullptr;
  /// Optional: only for the library's own wording of a status.
  cublasGetStatusString_t getStatusString = nullptr;
};

/// The cuBLASLt entry points, resolved once from the loaded library.
struct CudaDevice::LtApi {
  cublasLtCreate_t create = nullptr;
  cublasLtDestroy_t destroy = nullptr;
  cublasLtMatmulDescCreate_t descCreate = nullptr;
  cublasLtMatmulDescDestroy_t descDestroy = nullptr;
  cublasLtMatmulDescSetAttribute_t descSetAttribute = nullptr;
  cublasLtMatrixLayoutCreate_t layoutCreate = nullptr;
  cublasLtMatrixLayoutDestroy_t layoutDestroy = nullptr;
  cublasLtMatrixLayoutSetAttribute_t layoutSetAttribute = nullptr;
  cublasLtMatmulPreferenceCreate_t preferenceCreate = nullptr;
  cublasLtMatmulPreferenceDestroy_t preferenceDestroy = nullptr;
  cublasLtMatmulPreferenceSetAttribute_t preferenceSetAttribute = nullptr;
  cublasLtMatmulAlgoGetHeuristic_t algoGetHeuristic = nullptr;
  cublasLtMatmul_t matmul = nullptr;
};

/// One cuBLASLt call shape: its descriptors (A, B, and C = D in place) and
/// the algorithm the heuristic chose for it.
struct CudaDevice::LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::string CudaDevice::describe(const char *call, int result) const {
  const char *text = nullptr;
  if (api && api->getErrorString)
    api->getErrorString(result, &text);
  return std::string(call) + " failed: " + (text ? text : "CUDA error") + " (" +
         std::to_string(result) + ")";
}

std::unique_ptr<CudaDevice> CudaDevice::open(int ordinal, std::string &error) {
  void *library = openLibrary("libcuda.so.1", "no CUDA driver", error);
  if (!library)
    return nullptr;
  std::unique_ptr<CudaDevice> device(new CudaDevice());
  device->library = library;
  device->api = std::make_unique<Api>();
  Api &api = *device->api;
  std::string missing;
  resolveSymbol(library, "cuInit", api.init, missing);
  resolveSymbol(library, "cuDeviceGetCount", api.deviceGetCount, missing);
  resolveSymbol(library, "cuDeviceGet", api.deviceGet, missing);
  resolveSymbol(library, "cuDeviceGetName", api.deviceGetName, missing);
  resolveSymbol(library, "cuDevicePrimaryCtxRetain", api.primaryCtxRetain,
                missing);
  resolveSymbol(library, "cuDevicePrimaryCtxRelease_v2", api.primaryCtxRelease,
                missing);
  resolveSymbol(library, "cuCtxSetCurrent", api.ctxSetCurrent, missing);
  resolveSymbol(library, "cuCtxSynchronize", api.ctxSynchronize, missing);
  resolveSymbol(library, "cuModuleLoadData", api.moduleLoadData, missing);
  resolveSymbol(library, "cuModuleLoadDataEx", api.moduleLoadDataEx, missing);
  resolveSymbol(library, "cuModuleUnload", api.moduleUnload, missing);
  resolveSymbol(library, "cuModuleGetFunction", api.moduleGetFunction, missing);
  resolveSymbol(library, "cuMemAlloc_v2", api.memAlloc, missing);
  resolveSymbol(library, "cuMemFree_v2", api.memFree, missing);
  resolveSymbol(library, "cuMemsetD8_v2", api.memsetD8, missing);
  resolveSymbol(library, "cuMemcpyHtoD_v2", api.memcpyHtoD, missing);
  resolveSymbol(library, "cuMemcpyDtoH_v2", api.memcpyDtoH, missing);
  resolveSymbol(library, "cuMemcpyDtoD_v2", api.memcpyDtoD, missing);
  resolveSymbol(library, "cuLaunchKernel", api.launchKernel, missing);
  resolveSymbol(library, "cuGetErrorString", api.getErrorString, missing);
  if (!missing.empty()) {
    error = "no usable CUDA driver: libcuda.so.1 lacks " + missing;
    return nullptr;
  }
  std::string missingGraphs;
  resolveSymbol(library, "cuStreamCreate", api.streamCreate, missingGraphs);
  resolveSymbol(library, "cuStreamDestroy_v2", api.streamDestroy,
                missingGraphs);
  resolveSymbol(library, "cuStreamSynchronize", api.streamSynchronize,
                missingGraphs);
  resolveSymbol(library, "cuStreamBeginCapture_v2", api.streamBeginCapture,
                missingGraphs);
  resolveSymbol(library, "cuStreamEndCapture", api.streamEndCapture,
                missingGraphs);
  resolveSymbol(library, "cuGraphInstantiateWithFlags", api.graphInstantiate,
                missingGraphs);
  resolveSymbol(library, "cuGraphLaunch", api.graphLaunch, missingGraphs);
  resolveSymbol(library, "cuGraphExecDestroy", api.graphExecDestroy,
                missingGraphs);
  resolveSymbol(library, "cuGraphDestroy", api.graphDestroy, missingGraphs);
  device->graphsMissing = missingGraphs;
  std::string missingEvents;
  resolveSymbol(library, "cuEventCreate", api.eventCreate, missingEvents);
  resolveSymbol(library, "cuEventRecord", api.eventRecord, missingEvents);
  resolveSymbol(library, "cuEventSynchronize", api.eventSynchronize,
                missingEvents);
  // cuEventElapsedTime_v2 since CUDA 12.8 (cuda.h maps the name to it).
  std::string missingElapsed;
  resolveSymbol(library, "cuEventElapsedTime_v2", api.eventElapsedTime,
                missingElapsed);
  if (!api.eventElapsedTime)
    resolveSymbol(library, "cuEventElapsedTime", api.eventElapsedTime,
                  missingEvents);
  resolveSymbol(library, "cuEventDestroy_v2", api.eventDestroy, missingEvents);
  device->eventsMissing = missingEvents;
  if (CUresult rc = api.init(0); rc != CUDA_SUCCESS) {
    error = "no CUDA driver: " + device->describe("cuInit", rc);
    return nullptr;
  }
  if (CUresult rc = api.deviceGetCount(&device->count); rc != CUDA_SUCCESS) {
    error = device->describe("cuDeviceGetCount", rc);
    return nullptr;
  }
  if (device->count == 0) {
    error = "no CUDA device (the driver loaded but sees no GPU)";
    return nullptr;
  }
  if (ordinal < 0 || ordinal >= device->count) {
    error = "no CUDA device " + std::to_string(ordinal) + " (" +
            std::to_string(device->count) + " visible)";
    return nullptr;
  }
  device->deviceOrdinal = ordinal;
  if (CUresult rc = api.deviceGet(&device->deviceHandle, ordinal);
      rc != CUDA_SUCCESS) {
    error = device->describe("cuDeviceGet", rc);
    return nullptr;
  }
  char name[256] = {0};
  if (api.deviceGetName(name, sizeof(name) - 1, device->deviceHandle) ==
      CUDA_SUCCESS)
    device->deviceName = name;
  CUcontext context = nullptr;
  if (CUresult rc = api.primaryCtxRetain(&context, device->deviceHandle);
      rc != CUDA_SUCCESS) {
    error = device->describe("cuDevicePrimaryCtxRetain", rc);
    return nullptr;
  }
  device->context = context;
  if (CUresult rc = api.ctxSetCurrent(context); rc != CUDA_SUCCESS) {
    error = device->describe("cuCtxSetCurrent", rc);
    return nullptr;
  }
  return device;
}

CudaDevice::~CudaDevice() {
  if (!api)
    return;
  if (context) {
    api->ctxSynchronize();
    // cuBLAS holds device memory of its own in the context.
    if (blasHandle)
      blas->destroy(static_cast<cublasHandle_t>(blasHandle));
    for (auto &[key, plan] : ltPlans) {
      lt->layoutDestroy(plan->a);
      lt->layoutDestroy(plan->b);
      lt->layoutDestroy(plan->c);
      lt->descDestroy(plan->desc);
    }
    if (ltHandle)
      lt->destroy(static_cast<cublasLtHandle_t>(ltHandle));
    for (auto &[pointer, bytes] : allocations)
      api->memFree(pointer);
    for (void *module : modules)
      api->moduleUnload(static_cast<CUmodule>(module));
    api->primaryCtxRelease(deviceHandle);
  }
  // The driver stays loaded: NCCL and the CUDA runtime inside it may still
  // hold it until process exit.
}

bool CudaDevice::allocate(int64_t bytes, DevicePtr &out, std::string &error) {
  CUdeviceptr pointer = 0;
  // The driver rejects zero-byte allocations; keep every buffer addressable.
  size_t size = size_t(bytes > 0 ? bytes : 16);
  if (CUresult rc = api->memAlloc(&pointer, size); rc != CUDA_SUCCESS) {
    error = describe("cuMemAlloc", rc) + " for " + std::to_string(size) +
            " bytes (" + std::to_string(inUse) + " bytes in use)";
    return false;
  }
  if (CUresult rc = api->memsetD8(pointer, 0, size); rc != CUDA_SUCCESS) {
    api->memFree(pointer);
    error = describe("cuMemsetD8", rc);
    return false;
  }
  allocations[pointer] = int64_t(size);
  inUse += int64_t(size);
  peak = std::max(peak, inUse);
  out = pointer;
  return true;
}

void CudaDevice::release(DevicePtr pointer) {
  auto it = allocations.find(pointer);
  if (it == allocations.end())
    return;
  api->memFree(pointer);
  inUse -= it->second;
  allocations.erase(it);
}

bool CudaDevice::upload(DevicePtr to, const void *from, int64_t bytes,
                        std::string &error) {
  if (bytes <= 0)
    return true;
  CUresult rc = api->memcpyHtoD(to, from, size_t(bytes));
  return rc == CUDA_SUCCESS || (error = describe("cuMemcpyHtoD", rc), false);
}

bool CudaDevice::download(void *to, DevicePtr from, int64_t bytes,
                          std::string &error) {
  if (bytes <= 0)
    return true;
  CUresult rc = api->memcpyDtoH(to, from, size_t(bytes));
  return rc == CUDA_SUCCESS || (error = describe("cuMemcpyDtoH", rc), false);
}

bool CudaDevice::copy(DevicePtr to, DevicePtr from, int64_t bytes,
                      std::string &error) {
  if (bytes <= 0 || to == from)
    return true;
  CUresult rc = api->memcpyDtoD(to, from, size_t(bytes));
  return rc == CUDA_SUCCESS || (error = describe("cuMemcpyDtoD", rc), false);
}

bool CudaDevice::loadKernel(const std::string &ptx, const std::string &entry,
                            const std::string &source, void *&function,
                            std::string &error) {
  void *module = nullptr;
  return loadModule(ptx, source, module, error) &&
         getFunction(module, entry, source, function, error);
}

bool CudaDevice::loadModule(const std::string &ptx, const std::string &source,
                            void *&module, std::string &error) {
  CUmodule loaded = nullptr;
  // The JIT's own log says which line of the PTX it rejects; the driver's
  // error alone ("a PTX JIT compilation failed") does not.
  std::string log(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size())};
  // cuModuleLoadDataEx reads a NUL-terminated PTX image.
  if (CUresult rc =
          api->moduleLoadDataEx(&loaded, ptx.c_str(), 2, options, values);
      rc != CUDA_SUCCESS) {
    log.resize(std::strlen(log.c_str()));
    while (!log.empty() && (log.back() == '\n' || log.back() == ' '))
      log.pop_back();
    error = source + ": " + describe("cuModuleLoadDataEx", rc) +
            (log.empty() ? "" : ": " + log);
    return false;
  }
  modules.push_back(loaded);
  module = loaded;
  return true;
}

bool CudaDevice::getFunction(void *module, const std::string &entry,
                             const std::string &source, void *&function,
                             std::string &error) {
  CUfunction kernel = nullptr;
  if (CUresult rc = api->moduleGetFunction(
          &kernel, static_cast<CUmodule>(module), entry.c_str());
      rc != CUDA_SUCCESS) {
    error = source + ": has no kernel '" + entry +
            "': " + describe("cuModuleGetFunction", rc);
    return false;
  }
  function = kernel;
  return true;
}

void CudaDevice::unloadModule(void *module) {
  auto it = std::find(modules.begin(), modules.end(), module);
  if (it == modules.end())
    return;
  api->moduleUnload(static_cast<CUmodule>(module));
  modules.erase(it);
}

bool CudaDevice::launch(void *function, unsigned grid, unsigned block,
                        void **arguments, std::string &error, void *stream) {
  CUresult rc = api->launchKernel(static_cast<CUfunction>(function), grid, 1, 1,
                                  block, 1, 1, /*sharedMemBytes=*/0,
                                  static_cast<CUstream>(stream), arguments,
                                  /*extra=*/nullptr);
  return rc == CUDA_SUCCESS || (error = describe("cuLaunchKernel", rc), false);
}

//===----------------------------------------------------------------------===//
// Streams and graphs
//===----------------------------------------------------------------------===//

bool CudaDevice::createStream(void *&stream, std::string &error) {
  if (!graphsMissing.empty()) {
    error = "the CUDA driver lacks " + graphsMissing;
    return false;
  }
  CUstream created = nullptr;
  if (CUresult rc = api->streamCreate(&created, CU_STREAM_DEFAULT);
      rc != CUDA_SUCCESS) {
    error = describe("cuStreamCreate", rc);
    return false;
  }
  stream = created;
  return true;
}

void CudaDevice::destroyStream(void *stream) {
  if (stream)
    api->streamDestroy(static_cast<CUstream>(stream));
}

bool CudaDevice::synchronizeStream(void *stream, std::string &error) {
  CUresult rc = api->streamSynchronize(static_cast<CUstream>(stream));
  return rc == CUDA_SUCCESS ||
         (error = describe("cuStreamSynchronize", rc), false);
}

bool CudaDevice::beginCapture(void *stream, std::string &error) {
  CUresult rc = api->streamBeginCapture(static_cast<CUstream>(stream),
                                        CU_STREAM_CAPTURE_MODE_RELAXED);
  return rc == CUDA_SUCCESS ||
         (error = describe("cuStreamBeginCapture", rc), false);
}

bool CudaDevice::endCapture(void *stream, void *&graph, std::string &error) {
  CUgraph captured = nullptr;
  CUresult rc = api->streamEndCapture(static_cast<CUstream>(stream), &captured);
  if (rc != CUDA_SUCCESS) {
    error = describe("cuStreamEndCapture", rc);
    return false;
  }
  CUgraphExec executable = nullptr;
  rc = api->graphInstantiate(&executable, captured, 0);
  // The executable graph is independent of the one it was made from.
  api->graphDestroy(captured);
  if (rc != CUDA_SUCCESS) {
    error = describe("cuGraphInstantiate", rc);
    return false;
  }
  graph = executable;
  return true;
}

bool CudaDevice::launchGraph(void *graph, void *stream, std::string &error) {
  CUresult rc = api->graphLaunch(static_cast<CUgraphExec>(graph),
                                 static_cast<CUstream>(stream));
  return rc == CUDA_SUCCESS || (error = describe("cuGraphLaunch", rc), false);
}

void CudaDevice::destroyGraph(void *graph) {
  if (graph)
    api->graphExecDestroy(static_cast<CUgraphExec>(graph));
}

bool CudaDevice::createEvent(void *&event, std::string &error) {
  if (!eventsMissing.empty()) {
    error = "the CUDA driver lacks " + eventsMissing;
    return false;
  }
  CUevent created = nullptr;
  if (CUresult rc = api->eventCreate(&created, CU_EVENT_DEFAULT);
      rc != CUDA_SUCCESS) {
    error = describe("cuEventCreate", rc);
    return false;
  }
  event = created;
  return true;
}

bool CudaDevice::recordEvent(void *event, void *stream, std::string &error) {
  CUresult rc = api->eventRecord(static_cast<CUevent>(event),
                                 static_cast<CUstream>(stream));
  return rc == CUDA_SUCCESS || (error = describe("cuEventRecord", rc), false);
}

bool CudaDevice::elapsedMilliseconds(void *start, void *end, float &ms,
                                     std::string &error) {
  if (CUresult rc = api->eventSynchronize(static_cast<CUevent>(end));
      rc != CUDA_SUCCESS) {
    error = describe("cuEventSynchronize", rc);
    return false;
  }
  CUresult rc = api->eventElapsedTime(&ms, static_cast<CUevent>(start),
                                      static_cast<CUevent>(end));
  return rc == CUDA_SUCCESS ||
         (error = describe("cuEventElapsedTime", rc), false);
}

void CudaDevice::destroyEvent(void *event) {
  if (event)
    api->eventDestroy(static_cast<CUevent>(event));
}

bool CudaDevice::synchronize(std::string &error) {
  CUresult rc = api->ctxSynchronize();
  return rc == CUDA_SUCCESS ||
         (error = describe("cuCtxSynchronize", rc), false);
}

//===----------------------------------------------------------------------===//
// cuBLAS
//===----------------------------------------------------------------------===//

std::string CudaDevice::describeBlas(const char *call, int status) const {
  const char *name = cublasStatusName(status);
  const char *text =
      blas && blas->getStatusString ? blas->getStatusString(status) : nullptr;
  std::string message = std::string(call) +
                        " failed: " + (name ? name : "cuBLAS error") + " (" +
                        std::to_string(status) + ")";
  if (text && *text)
    message += ": " + std::string(text);
  return message;
}

bool CudaDevice::openBlas(std::string &error) {
  if (blasHandle)
    return true;
  // libcublas.so.13 is the library this runtime's declarations are checked
  // against; the unversioned name (a development install) is a fallback, and
  // when neither loads the message names the versioned one.
  void *library = openLibrary("libcublas.so.13", "no cuBLAS", error);
  if (!library) {
    std::string ignored;
    library = openLibrary("libcublas.so", "no cuBLAS", ignored);
    if (!library)
      return false;
    error.clear();
  }
  auto loaded = std::make_unique<BlasApi>();
  std::string missing;
  resolveSymbol(library, "cublasCreate_v2", loaded->create, missing);
  resolveSymbol(library, "cublasDestroy_v2", loaded->destroy, missing);
  resolveSymbol(library, "cublasSetStream_v2", loaded->setStream, missing);
  resolveSymbol(library, "cublasSetMathMode", loaded->setMathMode, missing);
  resolveSymbol(library, "cublasGemmStridedBatchedEx",
                loaded->gemmStridedBatchedEx, missing);
  if (!missing.empty()) {
    error = "no usable cuBLAS: libcublas lacks " + missing;
    return false;
  }
  std::string optional;
  resolveSymbol(library, "cublasGetStatusString", loaded->getStatusString,
                optional);
  blas = std::move(loaded);
  cublasHandle_t handle = nullptr;
  // cuBLAS attaches to the context current on this thread (the primary
  // context, which open made current).
  if (cublasStatus_t rc = blas->create(&handle); rc != CUBLAS_STATUS_SUCCESS) {
    error = describeBlas("cublasCreate", rc);
    return false;
  }
  // The default stream, where the driver launches kernels, so that products
  // and kernels run in program order; the default math mode, so fp32
  // products are not computed in TF32.
  cublasStatus_t rc = blas->setStream(handle, nullptr);
  const char *call = "cublasSetStream";
  if (rc == CUBLAS_STATUS_SUCCESS) {
    rc = blas->setMathMode(handle, CUBLAS_DEFAULT_MATH);
    call = "cublasSetMathMode";
  }
  if (rc != CUBLAS_STATUS_SUCCESS) {
    error = describeBlas(call, rc);
    blas->destroy(handle);
    return false;
  }
  blasHandle = handle;
  return true;
}

namespace {
bool blasDataType(DType dtype, cudaDataType &out) {
  switch (dtype) {
  case DType::F32:
    out = CUDA_R_32F;
    return true;
  case DType::BF16:
    out = CUDA_R_16BF;
    return true;
  case DType::F16:
    out = CUDA_R_16F;
    return true;
  default:
    return false;
  }
}
} // namespace

bool CudaDevice::gemm(const GemmCall &call, std::string &error, void *stream) {
  if (call.tf32 && call.aType != DType::F32) {
    error = "GEMM: TF32 applies to fp32 operands only";
    return false;
  }
  if (call.usesLt())
    return gemmLt(call, error, stream);
  if (!blasHandle) {
    error = "cublasGemmStridedBatchedEx: cuBLAS is not open";
    return false;
  }
  if (stream != blasStream) {
    if (cublasStatus_t rc =
            blas->setStream(static_cast<cublasHandle_t>(blasHandle),
                            static_cast<CUstream>(stream));
        rc != CUBLAS_STATUS_SUCCESS) {
      error = describeBlas("cublasSetStream", rc);
      return false;
    }
    blasStream = stream;
  }
  cudaDataType aType, bType, cType;
  if (!blasDataType(call.aType, aType) || !blasDataType(call.bType, bType) ||
      !blasDataType(call.cType, cType)) {
    error = "cublasGemmStridedBatchedEx: unsupported dtypes " +
            std::string(safeTensorsDTypeName(call.aType)) + " x " +
            std::string(safeTensorsDTypeName(call.bType)) + " -> " +
            std::string(safeTensorsDTypeName(call.cType));
    return false;
  }
  // cuBLAS takes 32-bit sizes here; GpuStep checks the ranges when it loads.
  cublasStatus_t rc = blas->gemmStridedBatchedEx(
      static_cast<cublasHandle_t>(blasHandle),
      call.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
      call.transb ? CUBLAS_OP_T : CUBLAS_OP_N, int(call.m), int(call.n),
      int(call.k), &call.alpha,
      reinterpret_cast<const void *>(uintptr_t(call.a)), aType, int(call.lda),
      (long long)call.strideA,
      reinterpret_cast<const void *>(uintptr_t(call.b)), bType, int(call.ldb),
      (long long)call.strideB, &call.beta,
      reinterpret_cast<void *>(uintptr_t(call.c)), cType, int(call.ldc),
      (long long)call.strideC, int(call.batch),
      call.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  return rc == CUBLAS_STATUS_SUCCESS ||
         (error = describeBlas("cublasGemmStridedBatchedEx", rc), false);
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

/// cuBLASLt's workspace: what NVIDIA suggests for Hopper, so that the
/// heuristic may pick split-K and stream-K kernels.
static constexpr int64_t kLtWorkspaceBytes = 32 << 20;

bool CudaDevice::openBlasLt(std::string &error) {
  if (ltHandle)
    return true;
  void *library = openLibrary("libcublasLt.so.13", "no cuBLASLt", error);
  if (!library) {
    std::string ignored;
    library = openLibrary("libcublasLt.so", "no cuBLASLt", ignored);
    if (!library)
      return false;
    error.clear();
  }
  auto loaded = std::make_unique<LtApi>();
  std::string missing;
  resolveSymbol(library, "cublasLtCreate", loaded->create, missing);
  resolveSymbol(library, "cublasLtDestroy", loaded->destroy, missing);
  resolveSymbol(library, "cublasLtMatmulDescCreate", loaded->descCreate,
                missing);
  resolveSymbol(library, "cublasLtMatmulDescDestroy", loaded->descDestroy,
                missing);
  resolveSymbol(library, "cublasLtMatmulDescSetAttribute",
                loaded->descSetAttribute, missing);
  resolveSymbol(library, "cublasLtMatrixLayoutCreate", loaded->layoutCreate,
                missing);
  resolveSymbol(library, "cublasLtMatrixLayoutDestroy", loaded->layoutDestroy,
                missing);
  resolveSymbol(library, "cublasLtMatrixLayoutSetAttribute",
                loaded->layoutSetAttribute, missing);
  resolveSymbol(library, "cublasLtMatmulPreferenceCreate",
                loaded->preferenceCreate, missing);
  resolveSymbol(library, "cublasLtMatmulPreferenceDestroy",
                loaded->preferenceDestroy, missing);
  resolveSymbol(library, "cublasLtMatmulPreferenceSetAttribute",
                loaded->preferenceSetAttribute, missing);
  resolveSymbol(library, "cublasLtMatmulAlgoGetHeuristic",
                loaded->algoGetHeuristic, missing);
  resolveSymbol(library, "cublasLtMatmul", loaded->matmul, missing);
  if (!missing.empty()) {
    error = "no usable cuBLASLt: libcublasLt lacks " + missing;
    return false;
  }
  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t rc = loaded->create(&handle);
      rc != CUBLAS_STATUS_SUCCESS) {
    error = describeBlas("cublasLtCreate", rc);
    return false;
  }
  if (!allocate(kLtWorkspaceBytes, ltWorkspace, error)) {
    loaded->destroy(handle);
    error = "cuBLASLt's workspace: " + error;
    return false;
  }
  lt = std::move(loaded);
  ltHandle = handle;
  return true;
}

namespace {
/// The alignment cuBLASLt may assume of an operand at `address` (its
/// largest power-of-two divisor, at most 256 bytes).
uint32_t alignmentOf(DevicePtr address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}
} // namespace

bool CudaDevice::gemmLt(const GemmCall &call, std::string &error,
                        void *stream) {
  if (!ltHandle) {
    error = "cublasLtMatmul: cuBLASLt is not open";
    return false;
  }
  cudaDataType aType, bType, cType;
  if (!blasDataType(call.aType, aType) || !blasDataType(call.bType, bType) ||
      !blasDataType(call.cType, cType)) {
    error = "cublasLtMatmul: unsupported dtypes " +
            std::string(safeTensorsDTypeName(call.aType)) + " x " +
            std::string(safeTensorsDTypeName(call.bType)) + " -> " +
            std::string(safeTensorsDTypeName(call.cType));
    return false;
  }
  bool bias = call.epilogue == GemmEpilogue::Bias;
  // The heuristic's choice depends on the operands' alignment (the bias's
  // too), so that is part of the key; the addresses themselves are not
  // (they are arguments of each call, the bias pointer set before each).
  std::vector<int64_t> key = {call.transa,
                              call.transb,
                              call.m,
                              call.n,
                              call.k,
                              call.batch,
                              int64_t(aType),
                              int64_t(cType),
                              call.lda,
                              call.ldb,
                              call.ldc,
                              call.strideA,
                              call.strideB,
                              call.strideC,
                              int64_t(call.epilogue),
                              call.tf32,
                              call.beta != 0,
                              alignmentOf(call.a),
                              alignmentOf(call.b),
                              alignmentOf(call.c),
                              bias ? alignmentOf(call.bias) : 0};
  std::unique_ptr<LtPlan> &plan = ltPlans[key];
  auto check = [&](const char *what, cublasStatus_t rc) {
    if (rc == CUBLAS_STATUS_SUCCESS)
      return true;
    error = describeBlas(what, rc);
    return false;
  };
  if (!plan) {
    auto made = std::make_unique<LtPlan>();
    auto destroy = [&] {
      if (made->a)
        lt->layoutDestroy(made->a);
      if (made->b)
        lt->layoutDestroy(made->b);
      if (made->c)
        lt->layoutDestroy(made->c);
      if (made->desc)
        lt->descDestroy(made->desc);
    };
    int32_t transa = call.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t transb = call.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epilogue =
        bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int32_t biasType = cType;
    int32_t batch = int32_t(call.batch);
    void *biasPointer = reinterpret_cast<void *>(uintptr_t(call.bias));
    // The stored (untransposed) shapes: op(A) is m x k, op(B) k x n.
    auto layout = [&](cublasLtMatrixLayout_t &out, cudaDataType type,
                      int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      return check("cublasLtMatrixLayoutCreate",
                   lt->layoutCreate(&out, type, (unsigned long long)rows,
                                    (unsigned long long)cols, ld)) &&
             check("cublasLtMatrixLayoutSetAttribute",
                   lt->layoutSetAttribute(out,
                                          CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                          &batch, sizeof(batch))) &&
             check("cublasLtMatrixLayoutSetAttribute",
                   lt->layoutSetAttribute(
                       out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                       &stride, sizeof(stride)));
    };
    bool ok =
        check("cublasLtMatmulDescCreate",
              lt->descCreate(&made->desc,
                             call.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                       : CUBLAS_COMPUTE_32F,
                             CUDA_R_32F)) &&
        check("cublasLtMatmulDescSetAttribute",
              lt->descSetAttribute(made->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                   &transa, sizeof(transa))) &&
        check("cublasLtMatmulDescSetAttribute",
              lt->descSetAttribute(made->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                   &transb, sizeof(transb))) &&
        check("cublasLtMatmulDescSetAttribute",
              lt->descSetAttribute(made->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                   &epilogue, sizeof(epilogue))) &&
        (!bias || check("cublasLtMatmulDescSetAttribute",
                        lt->descSetAttribute(
                            made->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                            &biasType, sizeof(biasType)))) &&
        // The heuristic reads the bias pointer's alignment (not its data).
        (!bias || check("cublasLtMatmulDescSetAttribute",
                        lt->descSetAttribute(
                            made->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                            &biasPointer, sizeof(biasPointer)))) &&
        layout(made->a, aType, call.transa ? call.k : call.m,
               call.transa ? call.m : call.k, call.lda, call.strideA) &&
        layout(made->b, bType, call.transb ? call.n : call.k,
               call.transb ? call.k : call.n, call.ldb, call.strideB) &&
        layout(made->c, cType, call.m, call.n, call.ldc, call.strideC);
    cublasLtMatmulPreference_t preference = nullptr;
    if (ok) {
      uint64_t workspace = uint64_t(kLtWorkspaceBytes);
      uint32_t alignments[4] = {alignmentOf(call.a), alignmentOf(call.b),
                                alignmentOf(call.c), alignmentOf(call.c)};
      cublasLtMatmulPreferenceAttributes_t alignmentAttributes[4] = {
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
      ok = check("cublasLtMatmulPreferenceCreate",
                 lt->preferenceCreate(&preference)) &&
           check("cublasLtMatmulPreferenceSetAttribute",
                 lt->preferenceSetAttribute(
                     preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                     &workspace, sizeof(workspace)));
      for (int i = 0; ok && i < 4; ++i)
        ok = check(
            "cublasLtMatmulPreferenceSetAttribute",
            lt->preferenceSetAttribute(preference, alignmentAttributes[i],
                                       &alignments[i], sizeof(alignments[i])));
    }
    if (ok) {
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      ok = check("cublasLtMatmulAlgoGetHeuristic",
                 lt->algoGetHeuristic(static_cast<cublasLtHandle_t>(ltHandle),
                                      made->desc, made->a, made->b, made->c,
                                      made->c, preference, 1, &result, &found));
      if (ok && (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)) {
        error = "cublasLtMatmulAlgoGetHeuristic found no algorithm for " +
                std::string(safeTensorsDTypeName(call.aType)) + " x " +
                std::string(safeTensorsDTypeName(call.bType)) + " -> " +
                std::string(safeTensorsDTypeName(call.cType)) + " (m " +
                std::to_string(call.m) + ", n " + std::to_string(call.n) +
                ", k " + std::to_string(call.k) + ", batch " +
                std::to_string(call.batch) + ")";
        ok = false;
      }
      made->algo = result.algo;
    }
    if (preference)
      lt->preferenceDestroy(preference);
    if (!ok) {
      destroy();
      ltPlans.erase(key);
      return false;
    }
    plan = std::move(made);
  }
  if (bias) {
    void *pointer = reinterpret_cast<void *>(uintptr_t(call.bias));
    if (!check("cublasLtMatmulDescSetAttribute",
               lt->descSetAttribute(plan->desc,
                                    CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pointer,
                                    sizeof(pointer))))
      return false;
  }
  void *c = reinterpret_cast<void *>(uintptr_t(call.c));
  return check(
      "cublasLtMatmul",
      lt->matmul(static_cast<cublasLtHandle_t>(ltHandle), plan->desc,
                 &call.alpha, reinterpret_cast<const void *>(uintptr_t(call.a)),
                 plan->a, reinterpret_cast<const void *>(uintptr_t(call.b)),
                 plan->b, &call.beta, c, plan->c, c, plan->c, &plan->algo,
                 reinterpret_cast<void *>(uintptr_t(ltWorkspace)),
                 size_t(kLtWorkspaceBytes), static_cast<CUstream>(stream)));
}
