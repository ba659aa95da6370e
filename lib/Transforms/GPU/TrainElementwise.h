//===- TrainElementwise.h - Which train ops are elementwise -----*- C++ -*-===//
//
// The train ops whose every result element is a function of the operands'
// elements at the same position, and tensors of zeros, for the GPU
// program's rewrites on train ops (mantissa-elementwise-through-concats,
// mantissa-log-softmax-as-differences, mantissa-add-into-slices,
// mantissa-scatters-as-comparisons).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_TRANSFORMS_GPU_TRAINELEMENTWISE_H
#define MANTISSA_LIB_TRANSFORMS_GPU_TRAINELEMENTWISE_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"

namespace mlir::mantissa {

/// Whether each element of `op`'s one result is a function of the
/// elements of its operands at the same position (operands broadcast as
/// in torch, right-aligned): the dialect's elementwise family
/// (train::ElementwiseOpInterface). gelu_backward, silu_backward,
/// masked_fill and clamp belong to the family but have not been taken
/// through these rewrites yet; they stay where they are, as before the
/// family was first-class.
inline bool isTrainElementwise(Operation *op) {
  return isa<train::ElementwiseOpInterface>(op) &&
         !isa<train::GeluBackwardOp, train::SiluBackwardOp, train::MaskedFillOp,
              train::ClampOp>(op);
}

/// Whether `value` is a train.full of zero (an integer or a float 0).
inline bool isZeros(Value value) {
  auto full = value.getDefiningOp<train::FullOp>();
  if (!full)
    return false;
  Attribute fill = full.getValue();
  if (auto integer = dyn_cast<IntegerAttr>(fill))
    return integer.getValue().isZero();
  if (auto real = dyn_cast<FloatAttr>(fill))
    return real.getValue().isZero();
  return false;
}

} // namespace mlir::mantissa

#endif // MANTISSA_LIB_TRANSFORMS_GPU_TRAINELEMENTWISE_H
