//===- Kernels.h - The interpreter's operation families ---------*- C++ -*-===//
//
// The values of a running step, and one entry point per family of
// operations. Private to lib/Reference.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_REFERENCE_KERNELS_H
#define MANTISSA_LIB_REFERENCE_KERNELS_H

#include "mantissa/Reference/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include <memory>
#include <optional>

namespace mlir::mantissa::reference::kernels {

/// The tensors bound to the SSA values evaluated so far. Tensors live behind
/// pointers, so a reference from lookup() stays valid while other values are
/// bound.
class Environment {
public:
  const Tensor &lookup(Value value) const {
    auto it = tensors.find(value);
    assert(it != tensors.end() && "value used before it was evaluated");
    return *it->second;
  }
  void bind(Value value, Tensor tensor) {
    tensors[value] = std::make_unique<Tensor>(std::move(tensor));
  }
  /// Frees the tensor of a value that has no further uses.
  void release(Value value) { tensors.erase(value); }

private:
  llvm::DenseMap<Value, std::unique_ptr<Tensor>> tensors;
};

/// The shape and element type a kernel must produce for `value`.
inline RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Fails with an error on `op` unless `tensor` is floating-point.
inline LogicalResult requireFloat(Operation *op, const Tensor &tensor,
                                  StringRef what) {
  if (tensor.isFloatingPoint())
    return success();
  return op->emitOpError() << "needs a floating-point " << what << ", got "
                           << tensor.getType();
}

/// Each evaluates `op` and binds its results when `op` belongs to the family,
/// returning whether that succeeded (a failure has been emitted on `op`), or
/// returns std::nullopt when `op` is not one of the family's operations.
std::optional<LogicalResult> evaluateElementwiseOp(Operation *op,
                                                   Environment &env);
std::optional<LogicalResult> evaluateReductionOp(Operation *op,
                                                 Environment &env);
std::optional<LogicalResult> evaluateLinalgOp(Operation *op, Environment &env);
std::optional<LogicalResult> evaluateShapeOp(Operation *op, Environment &env);
std::optional<LogicalResult> evaluateIndexingOp(Operation *op,
                                                Environment &env);
std::optional<LogicalResult> evaluateCreationOp(Operation *op,
                                                Environment &env);

} // namespace mlir::mantissa::reference::kernels

#endif // MANTISSA_LIB_REFERENCE_KERNELS_H
