//===- FakeCuda.cpp - A host-memory stand-in for libcuda and libnccl ------===//
//
// Part of the Mantissa project. Test-only.
//
//===----------------------------------------------------------------------===//
//
// Built four times, as libcuda.so.1, libcublas.so.13, libcublasLt.so.13 and
// libnccl.so.2 in a directory of their own, so that a test can put them first
// on LD_LIBRARY_PATH and drive the runtime's GPU path (--device cuda) on a
// machine without a GPU: the plumbing (dlopen and symbol names, device
// buffers, uploads and downloads, pointer biasing, the kernel's argument
// order and scalars, NCCL, checkpoints from device state) is
// exercised for real, only the kernels are replaced. "Device" memory is host
// memory, so device addresses are host addresses.
//
// A launch checks the PTX entry's parameter list (count of .u64 pointers and
// .f32 scalars) against the arguments it is given. Then:
// - When FAKE_CUDA_HOST_KERNELS names a shared library that defines
//   `void <entry>_host(void **kernelParams, int64_t grid, int64_t block)`,
//   that function runs the whole launch (every block and thread) with
//   cuLaunchKernel's own kernelParams (kernelParams[i] points at the value
//   of the entry's i-th parameter: a device address, which is a host
//   address here, or a scalar) and the 1-D grid and block sizes. The
//   compiler writes such a library from the same gpu.func as the PTX when
//   it is given `--gpu-host-kernels=PATH` (mantissa-compile, mantissa-run;
//   GpuHostEmulation.h), so a whole GPU step runs on the host: a test
//   passes the same path to the compiler's flag and to this variable.
//   The stand-in is configured through its environment (as
//   FAKE_CUDA_ELEMENTS below) because it is loaded in place of libcuda
//   and reached only through the CUDA driver API, which has no way to say
//   it; the compiler and the runtime read no such variable, and the
//   program (its PTX) is the same with or without host kernels.
// - Otherwise it performs the AdamW update of one member of
//   FAKE_CUDA_ELEMENTS elements: an fp32 parameter without master (4
//   buffers: grad, param, exp_avg, exp_avg_sq), or a bf16 parameter with an
//   fp32 master and bf16 gradients (5 buffers: grad, param, master,
//   exp_avg, exp_avg_sq), then the eight scalars and the tile range (which
//   must start at tile 0: the whole member), following torch's
//   single-tensor AdamW in fp32. It is not the generated kernel, so results
//   agree with the CPU path closely rather than bit for bit.
//
// libnccl.so.2 at world size 1 copies; at world size W > 1 (one process per
// rank under mpirun, built with MPI) its collectives are MPI's on a
// communicator duplicated from MPI_COMM_WORLD, so that the GPU path's
// sharded update runs across processes: the all-gather gathers, and the
// reduce-scatter sums the ranks' parts in rank order in the dtype (each
// addition rounded, as NCCL's bf16 sums round).
//
// Streams run what is queued on them at once, except while capturing
// (cuStreamBeginCapture_v2): launches and GEMMs queued on a capturing stream
// are recorded with copies of their parameters, and the instantiated graph
// replays them on cuGraphLaunch (counted by fakeCudaGraphLaunches), as the
// driver's graphs do. The legacy default stream cannot capture. An event
// records the host's time when it is recorded (what was queued before it
// has run by then), so elapsed times are the host's.
//
// cuBLAS's cublasGemmStridedBatchedEx is implemented exactly as cuBLAS
// defines it (column-major, transposes, leading dimensions, strides, batch,
// alpha and beta, C not read when beta is 0) for F32, BF16 and F16 inputs
// with F32 or same-dtype outputs, accumulating in fp32 in increasing k order
// and rounding bf16/fp16 results to nearest even, so tests can compare
// against their own reference exactly. It refuses any math mode but
// CUBLAS_DEFAULT_MATH; CUBLAS_COMPUTE_32F_FAST_TF32 (fp32 inputs only)
// rounds each input to TF32 first (10 mantissa bits, to nearest with ties
// away from zero, as cvt.rna.tf32.f32 does), so that the choice shows in the
// numbers.
//
// cuBLASLt's cublasLtMatmul is implemented by the same definition from its
// descriptors: the matmul descriptor's compute and scale types (32F or
// 32F_FAST_TF32, fp32 scalars), TRANSA/TRANSB, the epilogue (DEFAULT, or BIAS:
// bias[row] added after alpha * product + beta * C, in fp32, before the one
// rounding into D) with its bias pointer and type (D's), and each matrix
// layout's type, rows, columns, leading dimension, batch count and strided
// batch offset. Shapes must agree (op(A) m x k, op(B) k x n, C = D m x n,
// one batch count), so that a wrong transpose, stride or dtype in the
// runtime's descriptors fails or computes something else. The heuristic
// returns one algorithm that records the alignments the preference allowed
// and the bias pointer's (the heuristic reads the pointer's alignment);
// cublasLtMatmul refuses operands less aligned than that, as the library's
// kernels would. Attribute sizes are checked as the library checks them.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Runtime/CudaApi.h"
#include "mantissa/Format/DType.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#ifdef FAKE_NCCL_WITH_MPI
#include <mpi.h>
#endif

using namespace mlir::mantissa::rt::cudaapi;

// The opaque handles of CudaApi.h, defined here. Every definition below uses
// the very types the runtime calls through (UBSan's function check compares
// them).
struct CUctx_st {};
struct CUfunc_st {
  std::string entry;
  int pointers = 0, scalars = 0;
  /// Bytes of each parameter in order (8 for .u64, 4 for .f32).
  std::vector<int> paramBytes;
  /// `<entry>_host` from FAKE_CUDA_HOST_KERNELS, looked up once.
  void (*host)(void **, int64_t, int64_t) = nullptr;
  bool hostResolved = false;
};
/// A loaded module owns the functions resolved from it, as the driver's do.
struct CUmod_st {
  std::string ptx;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};
struct ncclComm {
  int ranks = 1, rank = 0;
#ifdef FAKE_NCCL_WITH_MPI
  MPI_Comm mpi = MPI_COMM_NULL;
#endif
};
struct cublasContext {
  cublasMath_t mathMode = CUBLAS_DEFAULT_MATH;
  CUstream stream = nullptr;
};
struct cublasLtContext {};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1; // D's
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque {
  uint64_t workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};
};
/// A stream runs what is queued on it at once (host memory, one thread),
/// unless it is capturing: then each launch and GEMM is recorded, with
/// copies of its arguments, for the graph that endCapture makes.
struct CUstream_st {
  bool capturing = false;
  std::vector<std::function<int()>> recorded;
};
/// An event is the host time at which it was recorded: streams run what
/// is queued at once, so that is when the work before it finished (a
/// captured event is not supported).
struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
  bool done = false;
};
struct CUgraph_st {
  std::vector<std::function<int()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<int()>> ops;
};

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
    if (params.compare(p, 11, ".param .u64") == 0) {
      ++out.pointers;
      out.paramBytes.push_back(8);
    } else if (params.compare(p, 11, ".param .f32") == 0) {
      ++out.scalars;
      out.paramBytes.push_back(4);
    }
  }
  return true;
}

/// The library FAKE_CUDA_HOST_KERNELS names, loaded once; null when the
/// variable is unset. `failed` is set when it is set but does not load.
void *hostKernelLibrary(bool &failed) {
  static bool loadFailed = false;
  static void *library = [] {
    const char *path = std::getenv("FAKE_CUDA_HOST_KERNELS");
    if (!path || !*path)
      return static_cast<void *>(nullptr);
    void *loaded = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!loaded) {
      const char *why = dlerror();
      std::fprintf(stderr, "fake CUDA: FAKE_CUDA_HOST_KERNELS: %s\n",
                   why ? why : path);
      loadFailed = true;
    }
    return loaded;
  }();
  failed = loadFailed;
  return library;
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
float halfToFloat(uint16_t bits) {
  return mlir::mantissa::rt::f16BitsToFloat(bits);
}
uint16_t floatToHalf(float value) {
  return mlir::mantissa::rt::floatToF16Bits(value);
}
/// Copies a cuBLASLt attribute's value when its size is the attribute's own.
template <typename T>
cublasStatus_t setAttribute(T &field, const void *buf, size_t size) {
  if (!buf || size != sizeof(T))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

/// `value` rounded to TF32 as cvt.rna.tf32.f32 does: 10 mantissa bits, to
/// nearest, ties away from zero.
float roundToTf32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7F800000u) != 0x7F800000u) {
    bits += 0x1000u;
    bits &= ~0x1FFFu;
  }
  std::memcpy(&value, &bits, 4);
  return value;
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
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                            unsigned int count, CUjit_option *options,
                            void **values) {
  CUresult rc = cuModuleLoadData(module, image);
  if (rc == 0)
    return 0;
  // The error log, as the driver's JIT writes it.
  char *log = nullptr;
  size_t size = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
      log = static_cast<char *>(values[i]);
    else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      size = reinterpret_cast<uintptr_t>(values[i]);
  }
  if (log && size)
    std::snprintf(log, size, "ptxas fatal   : fake: no .entry in the PTX\n");
  return rc;
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

namespace {
/// Graph launches so far (for tests, through fakeCudaGraphLaunches).
int64_t graphLaunches = 0;

CUresult launchNow(Function &kernel, unsigned gridX, unsigned blockX,
                   void **arguments);
} // namespace

/// How many graphs were launched, for tests that check that a step was
/// replayed as a graph.
int64_t fakeCudaGraphLaunches() { return graphLaunches; }

CUresult cuLaunchKernel(CUfunction function, unsigned gridX, unsigned gridY,
                        unsigned gridZ, unsigned blockX, unsigned blockY,
                        unsigned blockZ, unsigned, CUstream stream,
                        void **arguments, void **extra) {
  Function &kernel = *function;
  if (extra || gridY != 1 || gridZ != 1 || blockY != 1 || blockZ != 1 ||
      gridX == 0 || blockX == 0 || blockX > 1024)
    return 1; // CUDA_ERROR_INVALID_VALUE
  if (stream && stream->capturing) {
    // The parameter values as they are now, as the driver copies them.
    auto values = std::make_shared<std::vector<uint64_t>>();
    for (size_t i = 0; i < kernel.paramBytes.size(); ++i) {
      uint64_t value = 0;
      std::memcpy(&value, arguments[i], size_t(kernel.paramBytes[i]));
      values->push_back(value);
    }
    stream->recorded.push_back([&kernel, gridX, blockX, values] {
      std::vector<void *> pointers;
      for (uint64_t &value : *values)
        pointers.push_back(&value);
      return launchNow(kernel, gridX, blockX, pointers.data());
    });
    return 0;
  }
  return launchNow(kernel, gridX, blockX, arguments);
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  if (flags != 0 && flags != 1)
    return 1;
  *stream = new CUstream_st();
  return 0;
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  delete stream;
  return 0;
}
CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode) {
  if (!stream)
    return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the legacy stream)
  if (stream->capturing)
    return 901; // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  stream->capturing = true;
  stream->recorded.clear();
  return 0;
}
CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  if (!stream || !stream->capturing)
    return 1;
  stream->capturing = false;
  *graph = new CUgraph_st{std::move(stream->recorded)};
  stream->recorded.clear();
  return 0;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                     unsigned long long) {
  *exec = new CUgraphExec_st{graph->ops};
  return 0;
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  if (stream && stream->capturing)
    return 1;
  ++graphLaunches;
  for (std::function<int()> &op : exec->ops)
    if (int rc = op())
      return rc;
  return 0;
}
CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  if (flags != 0)
    return 1;
  *event = new CUevent_st();
  return 0;
}
CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (!event || (stream && stream->capturing))
    return 1;
  event->recorded = std::chrono::steady_clock::now();
  event->done = true;
  return 0;
}
CUresult cuEventSynchronize(CUevent event) { return event ? 0 : 1; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
  if (!start || !end || !start->done || !end->done)
    return 600; // CUDA_ERROR_NOT_READY
  *ms =
      std::chrono::duration<float, std::milli>(end->recorded - start->recorded)
          .count();
  return 0;
}
CUresult cuEventDestroy_v2(CUevent event) {
  delete event;
  return 0;
}
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete exec;
  return 0;
}
CUresult cuGraphDestroy(CUgraph graph) {
  delete graph;
  return 0;
}

namespace {
CUresult launchNow(Function &kernel, unsigned gridX, unsigned blockX,
                   void **arguments) {
  bool failed = false;
  void *library = hostKernelLibrary(failed);
  if (failed)
    return 1;
  if (library && !kernel.hostResolved) {
    kernel.host = reinterpret_cast<void (*)(void **, int64_t, int64_t)>(
        dlsym(library, (kernel.entry + "_host").c_str()));
    kernel.hostResolved = true;
  }
  if (kernel.host) {
    kernel.host(arguments, int64_t(gridX), int64_t(blockX));
    return 0;
  }
  const char *elements = std::getenv("FAKE_CUDA_ELEMENTS");
  // The buffers, then 8 scalars, then the tile range (two .u64).
  int buffers = kernel.pointers - 2;
  if (!elements || kernel.scalars != 8 || (buffers != 4 && buffers != 5))
    return 1; // CUDA_ERROR_INVALID_VALUE
  int64_t n = std::atoll(elements);
  int64_t firstTile = *static_cast<int64_t *>(arguments[buffers + 8]);
  int64_t endTile = *static_cast<int64_t *>(arguments[buffers + 9]);
  // The launch must cover the whole member, one block per tile.
  if (firstTile != 0 || endTile < 1 || int64_t(gridX) != endTile)
    return 1;
  auto pointer = [&](int index) {
    return reinterpret_cast<uint8_t *>(
        uintptr_t(*static_cast<unsigned long long *>(arguments[index])));
  };
  float s[8];
  for (int i = 0; i < 8; ++i)
    s[i] = *static_cast<float *>(arguments[buffers + i]);
  float decay = s[0], lerpWeight = s[1], beta2 = s[2], oneMinusBeta2 = s[3],
        bc2Sqrt = s[4], eps = s[5], negStepSize = s[6], gradScale = s[7];
  bool master = buffers == 5;
  uint8_t *grad = pointer(0), *param = pointer(1);
  float *m = reinterpret_cast<float *>(pointer(master ? 3 : 2));
  float *v = reinterpret_cast<float *>(pointer(master ? 4 : 3));
  float *weights = master ? reinterpret_cast<float *>(pointer(2))
                          : reinterpret_cast<float *>(param);
  for (int64_t i = 0; i < n; ++i) {
    float g = master ? bf16ToFloat(reinterpret_cast<uint16_t *>(grad)[i])
                     : reinterpret_cast<float *>(grad)[i];
    g *= gradScale;
    if (master)
      g = bf16ToFloat(floatToBF16(g));
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
} // namespace

//===----------------------------------------------------------------------===//
// libcublas.so.13
//===----------------------------------------------------------------------===//

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, CUstream stream) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->mathMode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "fake cuBLAS error";
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType aType,
    int lda, long long int strideA, const void *B, cudaDataType bType, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType cType,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  auto isOp = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T;
  };
  bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  // cuBLAS's argument checks.
  if (!isOp(transa) || !isOp(transb) || m < 0 || n < 0 || k < 0 ||
      batchCount < 0 || lda < std::max(1, ta ? k : m) ||
      ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto isFloat = [](cudaDataType type) {
    return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
  };
  bool tf32 = computeType == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (handle->mathMode != CUBLAS_DEFAULT_MATH ||
      (computeType != CUBLAS_COMPUTE_32F && !(tf32 && aType == CUDA_R_32F)) ||
      algo != CUBLAS_GEMM_DEFAULT || !isFloat(aType) || bType != aType ||
      (cType != CUDA_R_32F && cType != aType))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (handle->stream && handle->stream->capturing) {
    // Recorded with the scalars' values, as cuBLAS reads host scalars when
    // the call is made.
    float alphaValue = *static_cast<const float *>(alpha);
    float betaValue = *static_cast<const float *>(beta);
    handle->stream->recorded.push_back([=] {
      cublasContext replay;
      return cublasGemmStridedBatchedEx(
          &replay, transa, transb, m, n, k, &alphaValue, A, aType, lda, strideA,
          B, bType, ldb, strideB, &betaValue, C, cType, ldc, strideC,
          batchCount, computeType, algo);
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  using mlir::mantissa::rt::DType;
  auto dtype = [](cudaDataType type) {
    return type == CUDA_R_32F    ? DType::F32
           : type == CUDA_R_16BF ? DType::BF16
                                 : DType::F16;
  };
  auto load = [&](const void *base, cudaDataType type, int64_t index) {
    return mlir::mantissa::rt::loadFloatElement(
        static_cast<const uint8_t *>(base), index, dtype(type));
  };
  float a = *static_cast<const float *>(alpha);
  float b = *static_cast<const float *>(beta);
  for (int64_t i = 0; i < batchCount; ++i)
    for (int64_t col = 0; col < n; ++col)
      for (int64_t row = 0; row < m; ++row) {
        // Separate statements: no fused multiply-add may change a rounding.
        float sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          // op(A)(row, p) and op(B)(p, col) of the stored column-major
          // matrices.
          float x = load(A, aType,
                         i * strideA + (ta ? p + row * lda : row + p * lda));
          float y = load(B, bType,
                         i * strideB + (tb ? col + p * ldb : p + col * ldb));
          if (tf32) {
            x = roundToTf32(x);
            y = roundToTf32(y);
          }
          float product = x * y;
          sum = sum + product;
        }
        int64_t at = i * strideC + row + col * ldc;
        float value = a * sum;
        if (b != 0) {
          float scaled = b * load(C, cType, at);
          value = value + scaled;
        }
        mlir::mantissa::rt::storeFloatElement(static_cast<uint8_t *>(C), at,
                                              dtype(cType), value);
      }
  return CUBLAS_STATUS_SUCCESS;
}

//===----------------------------------------------------------------------===//
// libcublasLt.so.13
//===----------------------------------------------------------------------===//

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                        cublasComputeType_t compute,
                                        cudaDataType scale) {
  *desc = new cublasLtMatmulDescOpaque();
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                               cublasLtMatmulDescAttributes_t attr,
                               const void *buf, size_t size) {
  if (!desc)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return setAttribute(desc->transa, buf, size);
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return setAttribute(desc->transb, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return setAttribute(desc->epilogue, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return setAttribute(desc->bias, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return setAttribute(desc->biasType, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                          cudaDataType type,
                                          unsigned long long rows,
                                          unsigned long long cols,
                                          long long ld) {
  *layout = new cublasLtMatrixLayoutOpaque();
  (*layout)->type = type;
  (*layout)->rows = rows;
  (*layout)->cols = cols;
  (*layout)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                 cublasLtMatrixLayoutAttribute_t attr,
                                 const void *buf, size_t size) {
  if (!layout)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return setAttribute(layout->batch, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return setAttribute(layout->stride, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *preference) {
  *preference = new cublasLtMatmulPreferenceOpaque();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                     cublasLtMatmulPreferenceAttributes_t attr,
                                     const void *buf, size_t size) {
  if (!preference)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return setAttribute(preference->workspace, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return setAttribute(
        preference
            ->alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES],
        buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

namespace {
/// The algorithm the stand-in's heuristic returns: a tag, then the
/// alignments it may assume of A, B, C and D.
constexpr unsigned long long kFakeAlgoTag = 0x4641'4b45'4c54ull; // "FAKELT"

/// Whether the descriptors describe a problem the stand-in (and cuBLASLt)
/// accepts: m x n x k from D and A, B agreeing, one batch count, dtypes and
/// compute type as documented.
cublasStatus_t checkLtProblem(const cublasLtMatmulDescOpaque &desc,
                              const cublasLtMatrixLayoutOpaque &a,
                              const cublasLtMatrixLayoutOpaque &b,
                              const cublasLtMatrixLayoutOpaque &c,
                              const cublasLtMatrixLayoutOpaque &d) {
  auto isOp = [](int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; };
  auto isFloat = [](cudaDataType type) {
    return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
  };
  if (!isOp(desc.transa) || !isOp(desc.transb) || desc.scale != CUDA_R_32F)
    return CUBLAS_STATUS_INVALID_VALUE;
  bool ta = desc.transa == CUBLAS_OP_T, tb = desc.transb == CUBLAS_OP_T;
  uint64_t m = d.rows, n = d.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.rows : b.cols) != n ||
      (tb ? b.cols : b.rows) != k || c.rows != m || c.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const cublasLtMatrixLayoutOpaque *layout : {&a, &b, &c, &d})
    if (layout->ld < int64_t(std::max<uint64_t>(1, layout->rows)) ||
        layout->batch < 1 || layout->batch != d.batch)
      return CUBLAS_STATUS_INVALID_VALUE;
  if (!isFloat(a.type) || b.type != a.type || c.type != d.type ||
      (d.type != CUDA_R_32F && d.type != a.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.compute != CUBLAS_COMPUTE_32F &&
      !(desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type == CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      desc.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.epilogue == CUBLASLT_EPILOGUE_BIAS && desc.biasType != -1 &&
      desc.biasType != d.type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
    cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int *count) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !preference || requested < 1 ||
      !results || !count)
    return CUBLAS_STATUS_INVALID_VALUE;
  *count = 0;
  if (cublasStatus_t rc = checkLtProblem(*desc, *a, *b, *c, *d))
    return rc;
  cublasLtMatmulHeuristicResult_t result{};
  result.algo.data[0] = kFakeAlgoTag;
  for (int i = 0; i < 4; ++i)
    result.algo.data[1 + i] = preference->alignment[i];
  // The bias pointer is not read here, but its alignment is (as the
  // library's heuristic does): a null one allows none but the strictest.
  uintptr_t bias = reinterpret_cast<uintptr_t>(desc->bias);
  unsigned long long biasAlignment = 256;
  while (biasAlignment > 1 && bias % biasAlignment != 0)
    biasAlignment /= 2;
  result.algo.data[5] = biasAlignment;
  result.workspaceSize = 0;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  results[0] = result;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t descHandle,
               const void *alpha, const void *A, cublasLtMatrixLayout_t aHandle,
               const void *B, cublasLtMatrixLayout_t bHandle, const void *beta,
               const void *C, cublasLtMatrixLayout_t cHandle, void *D,
               cublasLtMatrixLayout_t dHandle, const cublasLtMatmulAlgo_t *algo,
               void *workspace, size_t workspaceBytes, CUstream stream) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!descHandle || !aHandle || !bHandle || !cHandle || !dHandle || !alpha ||
      !beta || !algo || algo->data[0] != kFakeAlgoTag ||
      (workspaceBytes > 0 && !workspace))
    return CUBLAS_STATUS_INVALID_VALUE;
  // The descriptors as they are now: the library reads them at the call.
  cublasLtMatmulDescOpaque desc = *descHandle;
  cublasLtMatrixLayoutOpaque a = *aHandle, b = *bHandle, c = *cHandle,
                             d = *dHandle;
  if (cublasStatus_t rc = checkLtProblem(desc, a, b, c, d))
    return rc;
  bool withBias = desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (withBias && !desc.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  const void *pointers[5] = {A, B, C, D, withBias ? desc.bias : nullptr};
  for (int i = 0; i < 5; ++i)
    if (reinterpret_cast<uintptr_t>(pointers[i]) % algo->data[1 + i] != 0)
      return CUBLAS_STATUS_INVALID_VALUE; // the algorithm's alignment
  float alphaValue = *static_cast<const float *>(alpha);
  float betaValue = *static_cast<const float *>(beta);
  auto run = [=]() -> int {
    using mlir::mantissa::rt::DType;
    auto dtype = [](cudaDataType type) {
      return type == CUDA_R_32F    ? DType::F32
             : type == CUDA_R_16BF ? DType::BF16
                                   : DType::F16;
    };
    auto load = [&](const void *base, cudaDataType type, int64_t index) {
      return mlir::mantissa::rt::loadFloatElement(
          static_cast<const uint8_t *>(base), index, dtype(type));
    };
    bool ta = desc.transa == CUBLAS_OP_T, tb = desc.transb == CUBLAS_OP_T;
    bool tf32 = desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    int64_t m = int64_t(d.rows), n = int64_t(d.cols),
            k = int64_t(ta ? a.rows : a.cols);
    for (int64_t i = 0; i < d.batch; ++i)
      for (int64_t col = 0; col < n; ++col)
        for (int64_t row = 0; row < m; ++row) {
          // Separate statements: no fused multiply-add may change a
          // rounding.
          float sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            float x =
                load(A, a.type,
                     i * a.stride + (ta ? p + row * a.ld : row + p * a.ld));
            float y =
                load(B, b.type,
                     i * b.stride + (tb ? col + p * b.ld : p + col * b.ld));
            if (tf32) {
              x = roundToTf32(x);
              y = roundToTf32(y);
            }
            float product = x * y;
            sum = sum + product;
          }
          float value = alphaValue * sum;
          if (betaValue != 0) {
            float scaled =
                betaValue * load(C, c.type, i * c.stride + row + col * c.ld);
            value = value + scaled;
          }
          if (withBias) {
            float addend = load(desc.bias, d.type, row);
            value = value + addend;
          }
          mlir::mantissa::rt::storeFloatElement(static_cast<uint8_t *>(D),
                                                i * d.stride + row + col * d.ld,
                                                dtype(d.type), value);
        }
    return CUBLAS_STATUS_SUCCESS;
  };
  if (stream && stream->capturing) {
    stream->recorded.push_back(run);
    return CUBLAS_STATUS_SUCCESS;
  }
  return run();
}
const char *cublasLtGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "fake cuBLASLt error";
}

//===----------------------------------------------------------------------===//
// libnccl.so.2
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
  if (ranks < 1 || rank < 0 || rank >= ranks || id.internal[0] != 0x5A)
    return 4; // ncclInvalidArgument
  auto created = std::make_unique<ncclComm>();
  created->ranks = ranks;
  created->rank = rank;
  if (ranks > 1) {
#ifdef FAKE_NCCL_WITH_MPI
    int initialised = 0, size = 0, me = 0;
    MPI_Initialized(&initialised);
    if (!initialised)
      return 5; // ncclInvalidUsage: more than one rank needs mpirun
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != ranks || me != rank)
      return 4;
    MPI_Comm_dup(MPI_COMM_WORLD, &created->mpi);
#else
    return 5; // built without MPI: one rank only
#endif
  }
  *comm = created.release();
  return 0;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#ifdef FAKE_NCCL_WITH_MPI
  if (comm && comm->ranks > 1)
    MPI_Comm_free(&comm->mpi);
#endif
  delete comm;
  return 0;
}
const char *ncclGetErrorString(ncclResult_t result) {
  return result == 0 ? "no error" : "fake NCCL error";
}
static size_t ncclSize(ncclDataType_t type) {
  return type == ncclFloat32                           ? 4
         : type == ncclFloat16 || type == ncclBfloat16 ? 2
                                                       : 1;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t comm, CUstream) {
  size_t bytes = count * ncclSize(type);
  if (!comm)
    return 4;
  if (comm->ranks == 1) {
    if (send != recv)
      std::memmove(recv, send, bytes);
    return 0;
  }
#ifdef FAKE_NCCL_WITH_MPI
  // In place when the send buffer is this rank's part of the receive one.
  uint8_t *out = static_cast<uint8_t *>(recv);
  const void *from =
      send == out + size_t(comm->rank) * bytes ? MPI_IN_PLACE : send;
  return MPI_Allgather(from, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE,
                       comm->mpi) == MPI_SUCCESS
             ? 0
             : 2; // ncclSystemError
#else
  return 5;
#endif
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, CUstream) {
  if (op != ncclSum || !comm)
    return 4;
  size_t width = ncclSize(type), bytes = count * width;
  if (comm->ranks == 1) {
    std::memmove(recv, send, bytes);
    return 0;
  }
#ifdef FAKE_NCCL_WITH_MPI
  // Every rank's whole send buffer, then this rank's part summed in rank
  // order.
  std::vector<uint8_t> all(bytes * size_t(comm->ranks) * size_t(comm->ranks));
  if (MPI_Allgather(send, int(bytes * size_t(comm->ranks)), MPI_BYTE,
                    all.data(), int(bytes * size_t(comm->ranks)), MPI_BYTE,
                    comm->mpi) != MPI_SUCCESS)
    return 2;
  std::vector<float> sum(count, 0.0f);
  auto element = [&](int r, size_t i) -> float {
    const uint8_t *at = all.data() + size_t(r) * bytes * size_t(comm->ranks) +
                        size_t(comm->rank) * bytes + i * width;
    if (type == ncclFloat32) {
      float value;
      std::memcpy(&value, at, 4);
      return value;
    }
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    return type == ncclBfloat16 ? bf16ToFloat(bits) : halfToFloat(bits);
  };
  for (size_t i = 0; i < count; ++i) {
    float total = element(0, i);
    for (int r = 1; r < comm->ranks; ++r) {
      total += element(r, i);
      if (type == ncclBfloat16)
        total = bf16ToFloat(floatToBF16(total));
      else if (type == ncclFloat16)
        total = halfToFloat(floatToHalf(total));
    }
    uint8_t *to = static_cast<uint8_t *>(recv) + i * width;
    if (type == ncclFloat32) {
      std::memcpy(to, &total, 4);
    } else {
      uint16_t bits =
          type == ncclBfloat16 ? floatToBF16(total) : floatToHalf(total);
      std::memcpy(to, &bits, 2);
    }
  }
  return 0;
#else
  return 5;
#endif
}
}
