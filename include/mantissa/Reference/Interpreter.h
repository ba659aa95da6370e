//===- Interpreter.h - Reference interpreter of train.step ------*- C++ -*-===//
//
// Evaluates a `train.step` exactly, in plain C++: the executable definition
// of every operation's semantics, which code generation is tested against.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_REFERENCE_INTERPRETER_H
#define MANTISSA_REFERENCE_INTERPRETER_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Reference/Tensor.h"
#include "mlir/Support/LogicalResult.h"

namespace mlir::mantissa::reference {

/// Evaluates `step` on `arguments` (one per step argument, in order, each of
/// exactly the argument's shape and element type) and returns its results in
/// the step's result order.
///
/// Numerics follow torch on CPU: fp32 operations compute in fp32, fp64 in
/// fp64, and bf16/fp16 operations compute in fp32 from their (already
/// rounded) inputs and round the result once; reductions and matrix products
/// accumulate in double and round once. `train.shard_group` is ignored.
///
/// On failure an error is emitted through the context's diagnostic engine at
/// the location of the step (bad arguments) or of the offending operation
/// (an operation the interpreter does not know, an index out of range, ...).
FailureOr<SmallVector<Tensor>> interpretStep(train::StepOp step,
                                             ArrayRef<Tensor> arguments);

} // namespace mlir::mantissa::reference

#endif // MANTISSA_REFERENCE_INTERPRETER_H
