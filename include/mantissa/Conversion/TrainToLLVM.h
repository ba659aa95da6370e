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

/// Registers the dialects, bufferization models and LLVM IR translations
/// that lowerTrainStepsToLLVM needs.
void registerTrainToLLVMDialects(DialectRegistry &registry);

/// Lowers every train.step of `module` to an LLVM-dialect function of the
/// same name with the bare-pointer calling convention: one pointer per
/// argument (row-major, dense), then one pointer per result, which the
/// function fills. bf16 rounds to nearest even without runtime calls.
LogicalResult lowerTrainStepsToLLVM(ModuleOp module);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOLLVM_H
