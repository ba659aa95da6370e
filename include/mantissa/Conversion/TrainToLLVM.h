//===- TrainToLLVM.h - train.step to LLVM-dialect CPU code ------*- C++ -*-===//
//
// The CPU pipeline after mantissa-lower-train-to-linalg: bufferization,
// loops, math approximations and the LLVM dialect, for the JIT and for AOT.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOLLVM_H
#define MANTISSA_CONVERSION_TRAINTOLLVM_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::mantissa {

/// Runs a textual pass pipeline ("builtin.module(...)") on `module`,
/// registering the upstream passes it may name (conversions, bufferization,
/// linalg, GPU) once per process.
LogicalResult runPassPipeline(ModuleOp module, StringRef pipeline);

/// Registers the dialects, bufferization models and LLVM IR translations
/// that lowerTrainStepsToLLVM needs.
void registerTrainToLLVMDialects(DialectRegistry &registry);

/// Lowers every train.step of `module` to an LLVM-dialect function of the
/// same name with the bare-pointer calling convention: one pointer per
/// argument (row-major, dense), then one pointer per result, which the
/// function fills. bf16 rounds to nearest even without runtime calls.
LogicalResult lowerTrainStepsToLLVM(ModuleOp module);

/// The first half of lowerTrainStepsToLLVM, shared with the GPU: lowers
/// every train.step to a func.func on memrefs (linalg ops on buffers,
/// results as out-parameters after the arguments, every temporary freed by
/// a memref.dealloc, copies as linalg.copy).
LogicalResult bufferizeTrainSteps(ModuleOp module);

/// The second half: linalg to loops, math approximations and the LLVM
/// dialect (bare-pointer calling convention) for the functions of a
/// bufferized module.
LogicalResult lowerBufferizedToLLVM(ModuleOp module);

/// Adds `void entryName(void **values, ...)`, which calls the LLVM function
/// `callee` with its i-th parameter taken from values[i] (each slot holds a
/// pointer-sized value), or with `indirect` from what values[i] points at
/// (as cuLaunchKernel's kernelParams give each parameter). The callee's
/// last `passThrough` parameters are the entry's own after `values`: a
/// fixed C signature for any function.
void addPackedEntry(ModuleOp module, StringRef callee, StringRef entryName,
                    bool indirect = false, unsigned passThrough = 0);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOLLVM_H
