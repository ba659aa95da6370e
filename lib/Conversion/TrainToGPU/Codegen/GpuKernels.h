//===- GpuKernels.h - The gpu.funcs of a GPU step's launches ---*- C++ -*-===//
//
// Shared by the GPU program's builder (TrainToGPU.cpp) and the construction
// of its kernels (GpuKernels.cpp): the marks the builder leaves on each
// member's kernel function, and the function that makes a launch's
// gpu.func from them.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUKERNELS_H
#define MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUKERNELS_H

#include "mantissa/Conversion/TrainToGPU.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::mantissa {

/// Threads per block of every kernel.
constexpr int64_t kBlockSize = 256;
/// Marks a kernel function whose outermost N loops run one iteration per
/// thread.
constexpr llvm::StringLiteral kThreadLoops = "mantissa.thread_loops";
/// Marks a kernel function (a scatter's loop nest) whose loops that cannot
/// collide run one iteration per thread (findSpreadableLoops).
constexpr llvm::StringLiteral kThreadScatterLoops =
    "mantissa.thread_scatter_loops";
/// A kernel function that folds a split reduction's partials with a
/// combiner a warp can apply by shuffles carries kGpuFoldPartsAttr.

/// The gpu.func of kernel op `op` (its `entry`, one flat memref argument
/// per buffer) that runs each of its members (lowered kernel functions in
/// `kernels`), in order, each on its threads; sets each member's and the
/// launch's thread counts, serial iterations and grid.
LogicalResult buildGpuKernel(GpuStepOp &op, ModuleOp kernels,
                             gpu::GPUModuleOp gpuModule);

/// The PTX of the gpu.module `gpuModule` inside `container` (a
/// gpu.container_module): lowered to NVVM for sm_90 with libdevice linked,
/// as the step's kernels are.
FailureOr<std::string> compileGpuModuleToPtx(ModuleOp container,
                                             gpu::GPUModuleOp gpuModule);

/// The thread's global index (block * blockDim + thread) as an index.
Value buildThreadIndex(OpBuilder &builder, Location loc);

/// An insertion point at the end of a gpu.module's body (before its
/// terminator, if it has one).
OpBuilder getModuleEndBuilder(gpu::GPUModuleOp gpuModule);

} // namespace mlir::mantissa

#endif // MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUKERNELS_H
