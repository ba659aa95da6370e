//===- TrainToGPU.h - A train.step as a GPU program -------------*- C++ -*-===//
//
// The whole training step for the GPU: generated kernels in one PTX module
// and cuBLAS matrix products, as the straight-line program that
// docs/gpu-step.md describes and the runtime's GpuStep replays.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_H
#define MANTISSA_CONVERSION_TRAINTOGPU_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
namespace gpu {
class GPUModuleOp;
} // namespace gpu
} // namespace mlir

namespace mlir::mantissa {

/// One step argument or result as the program declares it.
struct GpuStepTensor {
  std::string name;
  /// The train.step role: parameter, buffer, constant, user_input, loss,
  /// gradient, buffer_mutation, user_output.
  std::string role;
  /// A safetensors dtype name (F32, BF16, I64, BOOL, ...).
  std::string dtype;
  SmallVector<int64_t> shape;
  int64_t bytes = 0;
  /// For an integer user input that indexes a table: the exclusive bound of
  /// its ids and what it indexes (0: none known). Written as `index_bound`
  /// and `index_bound_what`, so that the runtime validates token data.
  int64_t indexBound = 0;
  std::string indexBoundWhat;
  /// An id the step masks out before indexing (`index_ignored`).
  std::optional<int64_t> indexIgnored;
};

/// A device buffer that ops name by position.
struct GpuStepBuffer {
  enum class Kind { Argument, Result, Temporary, Constant };
  Kind kind = Kind::Temporary;
  /// The argument or result number (Argument, Result).
  int64_t index = 0;
  /// Offset in the arena or the constants (Temporary, Constant).
  int64_t offset = 0;
  int64_t bytes = 0;
};

/// One matrix operand of a GEMM, in cuBLAS's column-major terms.
struct GpuGemmOperand {
  int64_t buffer = 0;
  /// Elements from the buffer's start to the first batch's element (0, 0).
  int64_t offset = 0;
  int64_t ld = 1;
  /// Elements between consecutive batches (0: the same matrix for each).
  int64_t stride = 0;
  std::string dtype;
};

/// One op of the program: a generated kernel or a cuBLAS GEMM.
struct GpuStepOp {
  enum class Kind { Kernel, Gemm };
  Kind kind = Kind::Kernel;
  /// The op and location it came from, for messages.
  std::string source;
  // Kernel.
  std::string entry;
  int64_t grid = 1;
  SmallVector<int64_t> buffers;
  /// The ops one launch of `entry` runs (independent ops grouped into one
  /// launch), each on the launch's first `threads` threads, in order.
  struct Member {
    /// Its kernel function before grouping, and where it came from.
    std::string function, source;
    /// Its buffers, as indices into the launch's `buffers`.
    SmallVector<unsigned> buffers;
    int64_t threads = 1, serialIterations = 1;
  };
  SmallVector<Member> members;
  /// Threads that do work, and the loop iterations each runs in order (for
  /// reports: a reduction's length, one for elementwise kernels).
  int64_t threads = 1, serialIterations = 1;
  // Gemm: C = alpha * op(A) * op(B) + beta * C (+ bias), `batch` times,
  // accumulated in fp32 and rounded once into C's dtype.
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double alpha = 1.0, beta = 1.0;
  GpuGemmOperand a, b, c;
  /// The bias epilogue: `bias` (m contiguous elements in C's dtype) added to
  /// every column before rounding (cuBLASLt's CUBLASLT_EPILOGUE_BIAS).
  bool hasBias = false;
  GpuGemmOperand bias;
};

/// A step compiled for the GPU.
struct GpuStepProgram {
  std::string stepName;
  int64_t blockSize = 256;
  int64_t arenaBytes = 0;
  std::vector<GpuStepTensor> arguments, results;
  std::vector<GpuStepBuffer> buffers;
  std::vector<GpuStepOp> ops;
  std::vector<uint8_t> constants;
  /// The PTX module (sm_90) with every kernel and the dtype conversions.
  std::string ptx;
  /// With host kernels: every PTX entry emulated on the host
  /// (emulateGpuKernels), not yet lowered.
  OwningOpRef<ModuleOp> hostKernels;

  /// step.gpu.json naming `ptxFile` and `constantsFile` (docs/gpu-step.md).
  std::string toJSON(StringRef ptxFile, StringRef constantsFile) const;
  /// Counts for reports: kernels and GEMMs.
  int64_t countOps(GpuStepOp::Kind kind) const;
  /// GEMMs whose output (the rounding to a narrow dtype, a bias) took in the
  /// elementwise op that followed them: kernels the program does not have.
  int64_t fusedEpilogues = 0;
};

/// Adds to `hostModule`, for every kernel of `gpuModule` (1-D, no barriers
/// or shared memory), a func.func of the same name and arguments plus the
/// grid and block size (index) that runs every thread of that launch in
/// turn: the very code of the PTX, for testing GPU programs on the CPU.
LogicalResult emulateGpuKernels(gpu::GPUModuleOp gpuModule,
                                ModuleOp hostModule);

/// Lowers a module of emulated kernels for the CPU and gives each kernel
/// `E` the entry `void E_host(void **kernelParams, int64_t grid, int64_t
/// block)`: kernelParams[i] points at the value of the i-th parameter, as
/// cuLaunchKernel takes them.
LogicalResult lowerEmulatedKernelsToLLVM(ModuleOp hostModule);

/// Registers what compileTrainStepForGpu needs in `registry`.
void registerTrainToGPUDialects(DialectRegistry &registry);

/// Compiles a copy of the planned `step` for the GPU. Every op of the
/// bufferized step becomes a kernel (its parallel loops spread over
/// threads, reductions in order within each thread) or, for matrix
/// products cuBLAS can express, a GEMM. Fails with diagnostics on `step`
/// naming an op the GPU program cannot express.
FailureOr<GpuStepProgram> compileTrainStepForGpu(train::StepOp step,
                                                 bool withHostKernels = false);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_H
