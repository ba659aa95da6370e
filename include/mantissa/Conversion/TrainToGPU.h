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
#include "mantissa/Format/GpuProgram.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class DialectRegistry;
class OpPassManager;
namespace gpu {
class GPUModuleOp;
} // namespace gpu
} // namespace mlir

namespace mlir::mantissa {

/// The program's file, defined once for the compiler that writes it and the
/// runtime that reads it (mantissa/Format/GpuProgram.h).
using StepTensor = rt::StepTensor;
using GpuStepBuffer = rt::GpuStepBuffer;
using GpuGemmOperand = rt::GpuGemmOperand;
using GpuStepOp = rt::GpuStepOp;

/// A step compiled for the GPU: its step.gpu.json (whose file names the
/// writer fills in) and what lies beside it.
struct GpuStepProgram : rt::GpuProgram {
  std::vector<uint8_t> constants;
  /// The PTX module (sm_90) with every kernel and the dtype conversions.
  std::string ptx;
  /// GEMMs whose output (the rounding to a narrow dtype, a bias) took in the
  /// elementwise op that followed them: kernels the program does not have.
  int64_t fusedEpilogues = 0;
};

/// Registers what compileTrainStepForGpu needs in `registry`.
void registerTrainToGPUDialects(DialectRegistry &registry);

/// Registers the GPU step's passes (mantissa/Transforms/GPU/Passes.td and
/// mantissa/Conversion/TrainToGPU/Buffers/Passes.td), the CPU pipeline's
/// and mantissa-train-gpu-pipeline, so that runPassPipeline can parse
/// pipelines naming them; once per process.
void registerTrainToGPUPasses();

/// The GPU step's passes in the order they run, up to the program writer
/// (docs/gpu-step.md): the train-level rewrites of the planned step
/// (buildTrainGpuRewritePipeline), then its bufferization with the
/// tensor-level passes and the buffer-level ones that shape its kernels
/// (buildTrainGpuBufferPipeline). compileTrainStepForGpu runs the two
/// halves and reads the step's signature between them; mantissa-opt runs
/// the whole as `--mantissa-train-gpu-pipeline` (buildTrainGpuPipeline).
void buildTrainGpuRewritePipeline(OpPassManager &pm);
void buildTrainGpuBufferPipeline(OpPassManager &pm);
void buildTrainGpuPipeline(OpPassManager &pm);

/// Called with the step's gpu.module once its kernels are complete, before
/// they are lowered to PTX (which rewrites them in place): the host
/// emulation of the tests (GpuHostEmulation.h) reads them here.
using GpuKernelsObserver = llvm::function_ref<LogicalResult(gpu::GPUModuleOp)>;

/// Compiles a copy of the planned `step` for the GPU. Every op of the
/// bufferized step becomes a kernel (its parallel loops spread over
/// threads, reductions in order within each thread) or, for matrix
/// products cuBLAS can express, a GEMM. Fails with diagnostics on `step`
/// naming an op the GPU program cannot express, or when `observeKernels`
/// (when given) fails.
FailureOr<GpuStepProgram>
compileTrainStepForGpu(train::StepOp step,
                       GpuKernelsObserver observeKernels = nullptr);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_H
