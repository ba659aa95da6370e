//===- StepEvaluator.h - Running a training step's forward/backward -*- C++
//-*-===//
//
// One training step's forward and backward, evaluated either by the
// reference interpreter (torch's exact CPU semantics) or by compiled CPU code
// (train -> linalg -> LLVM, JIT-compiled at -O3).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_STEPEVALUATOR_H
#define MANTISSA_DRIVER_STEPEVALUATOR_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Reference/Tensor.h"
#include "llvm/Support/Error.h"
#include <memory>

namespace mlir::mantissa {

/// Evaluates one step: arguments in the step's argument order and types,
/// results in its result order and types.
class StepEvaluator {
public:
  virtual ~StepEvaluator() = default;
  virtual llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) = 0;
  /// "reference" or "compiled (CPU)", for reports.
  virtual llvm::StringRef describe() const = 0;
};

/// The reference interpreter on `step` (which must outlive the evaluator).
std::unique_ptr<StepEvaluator> createReferenceEvaluator(train::StepOp step);

/// Compiles a copy of `step` for the CPU with the JIT; fails with the
/// lowering's diagnostics (e.g. an operation without a lowering).
llvm::Expected<std::unique_ptr<StepEvaluator>>
createCompiledEvaluator(train::StepOp step);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_STEPEVALUATOR_H
