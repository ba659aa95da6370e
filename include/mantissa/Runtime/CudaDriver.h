//===- CudaDriver.h - One GPU through the CUDA driver API -------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The runtime reaches the CUDA driver (libcuda.so.1) only through dlopen, as
// Triton's driver does, so it builds without CUDA headers and runs on
// machines without a GPU; asking for one there fails with a message that
// says which piece is missing. The update path uses the device for resident
// optimizer state and the generated PTX kernels (kernels.<group>.ptx); the
// training step on the GPU (GpuStep.h) adds one PTX module of many kernels
// and cuBLAS (libcublas.so.13) and cuBLASLt (libcublasLt.so.13), also
// through dlopen, for its matrix products.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CUDADRIVER_H
#define MANTISSA_RUNTIME_CUDADRIVER_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/GemmEpilogue.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// A device address (CUdeviceptr).
using DevicePtr = uint64_t;

/// One strided-batched GEMM, column-major as cuBLAS defines it: for each
/// i < batch, C_i = alpha * op(A_i) * op(B_i) + beta * C_i (+ the epilogue)
/// with fp32 accumulation and fp32 alpha/beta, rounded once into C's dtype.
/// `a`, `b`, `c` are the device addresses of batch 0's first elements;
/// leading dimensions and strides are in elements. A/B are F32, BF16 or F16
/// alike; C is F32 or A's dtype.
///
/// Which library runs it: cublasLtMatmul (CUBLAS_COMPUTE_32F) when A/B are
/// BF16 or F16 (the tensor cores, C written in its dtype directly) or there
/// is an epilogue; cublasGemmStridedBatchedEx otherwise. `tf32` (fp32
/// operands only) selects CUBLAS_COMPUTE_32F_FAST_TF32 instead: the library
/// may round A and B to TF32 first.
struct GemmCall {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  float alpha = 1, beta = 0;
  DevicePtr a = 0, b = 0, c = 0;
  DType aType = DType::F32, bType = DType::F32, cType = DType::F32;
  int64_t lda = 1, ldb = 1, ldc = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  GemmEpilogue epilogue = GemmEpilogue::None;
  DevicePtr bias = 0;
  bool tf32 = false;

  /// Whether the call goes to cuBLASLt (see above).
  bool usesLt() const {
    return aType != DType::F32 || epilogue != GemmEpilogue::None;
  }
};

/// One CUDA device with its primary context current on the calling thread,
/// and every allocation and module made through it (released with it).
class CudaDevice {
public:
  /// Loads libcuda.so.1, initialises the driver and makes device `ordinal`'s
  /// primary context current. On failure returns null with `error`: "no
  /// CUDA driver: libcuda.so.1 could not be loaded (...)", "no CUDA device",
  /// or the failing call and the driver's message.
  static std::unique_ptr<CudaDevice> open(int ordinal, std::string &error);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  int ordinal() const { return deviceOrdinal; }
  int deviceCount() const { return count; }
  const std::string &name() const { return deviceName; }

  /// Device memory, zero-filled. A size of 0 still returns a valid address.
  bool allocate(int64_t bytes, DevicePtr &out, std::string &error);
  void release(DevicePtr pointer);
  bool upload(DevicePtr to, const void *from, int64_t bytes,
              std::string &error);
  bool download(void *to, DevicePtr from, int64_t bytes, std::string &error);
  bool copy(DevicePtr to, DevicePtr from, int64_t bytes, std::string &error);

  /// Loads PTX text (JIT-compiled by the driver for this device) and
  /// resolves the kernel `entry` in it. `source` names the PTX in errors.
  bool loadKernel(const std::string &ptx, const std::string &entry,
                  const std::string &source, void *&function,
                  std::string &error);
  /// Loads PTX text once (the JIT compiles every kernel in it) so that
  /// `getFunction` can resolve many entries from it; the module lives as
  /// long as the device unless unloaded. `source` names the PTX in errors.
  bool loadModule(const std::string &ptx, const std::string &source,
                  void *&module, std::string &error);
  bool getFunction(void *module, const std::string &entry,
                   const std::string &source, void *&function,
                   std::string &error);
  void unloadModule(void *module);
  /// Launches `function` with a 1-D grid on `stream` (null: the default
  /// stream).
  bool launch(void *function, unsigned grid, unsigned block, void **arguments,
              std::string &error, void *stream = nullptr);

  /// A stream of its own, which synchronises with the default stream (so
  /// work queued on either runs in order); graphs are captured on such
  /// streams, since the legacy default stream cannot be. Fails when the
  /// driver lacks streams or graphs.
  bool createStream(void *&stream, std::string &error);
  void destroyStream(void *stream);
  bool synchronizeStream(void *stream, std::string &error);
  /// Starts recording what is queued on `stream` (launches, GEMMs) instead
  /// of running it, until endCapture turns the record into an executable
  /// graph that launchGraph replays with one call.
  bool beginCapture(void *stream, std::string &error);
  bool endCapture(void *stream, void *&graph, std::string &error);
  bool launchGraph(void *graph, void *stream, std::string &error);
  void destroyGraph(void *graph);
  /// Events, which time the device's work on a stream: recordEvent marks
  /// the point after what is queued so far, elapsedMilliseconds waits for
  /// `end` and gives the device time between the two. createEvent fails
  /// when the driver lacks events.
  bool createEvent(void *&event, std::string &error);
  bool recordEvent(void *event, void *stream, std::string &error);
  bool elapsedMilliseconds(void *start, void *end, float &ms,
                           std::string &error);
  void destroyEvent(void *event);
  /// Waits for everything queued on the device.
  bool synchronize(std::string &error);

  /// Loads cuBLAS (libcublas.so.13, else libcublas.so) and creates its handle
  /// on the default stream with the default math mode (no TF32), once; the
  /// handle is destroyed with the device. On failure: "no cuBLAS:
  /// libcublas.so.13 could not be loaded (...)" or the failing call.
  bool openBlas(std::string &error);
  /// Loads cuBLASLt (libcublasLt.so.13, else libcublasLt.so), creates its
  /// handle and a workspace, once; destroyed with the device. Messages as
  /// openBlas's ("no cuBLASLt: ...").
  bool openBlasLt(std::string &error);
  /// Queues one GEMM on `stream` (null: the default stream) through the
  /// library GemmCall names (openBlas or openBlasLt first). cuBLASLt's
  /// descriptors and algorithm are made once per distinct call shape and
  /// operand alignment, and kept with the device.
  bool gemm(const GemmCall &call, std::string &error, void *stream = nullptr);
  /// A cuBLAS call behind a failure: "call failed: CUBLAS_STATUS_... (text)".
  std::string describeBlas(const char *call, int status) const;

  int64_t bytesInUse() const { return inUse; }
  int64_t peakBytes() const { return peak; }

  /// The driver call behind a failure, with the driver's text, for the NCCL
  /// layer's messages.
  std::string describe(const char *call, int result) const;

private:
  CudaDevice() = default;
  struct Api;
  struct BlasApi;
  struct LtApi;
  struct LtPlan;
  bool gemmLt(const GemmCall &call, std::string &error, void *stream);
  std::unique_ptr<Api> api;
  std::unique_ptr<BlasApi> blas;
  void *blasHandle = nullptr;
  std::unique_ptr<LtApi> lt;
  void *ltHandle = nullptr;
  DevicePtr ltWorkspace = 0;
  /// Per call shape and alignment (a key of its fields), its descriptors.
  std::map<std::vector<int64_t>, std::unique_ptr<LtPlan>> ltPlans;
  /// The stream the cuBLAS handle queues on.
  void *blasStream = nullptr;
  /// The stream and graph entry points the driver lacks (then graphs are
  /// not used).
  std::string graphsMissing;
  /// The event entry points the driver lacks (empty: it has them all).
  std::string eventsMissing;
  void *library = nullptr;
  void *context = nullptr;
  int deviceOrdinal = 0, deviceHandle = 0, count = 0;
  std::string deviceName;
  std::map<DevicePtr, int64_t> allocations;
  std::vector<void *> modules;
  int64_t inUse = 0, peak = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_CUDADRIVER_H
