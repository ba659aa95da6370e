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
/// in torch, right-aligned).
inline bool isTrainElementwise(Operation *op) {
  return op->getNumResults() == 1 && op->getNumRegions() == 0 &&
         isa<train::AddOp, train::SubOp, train::MulOp, train::DivOp,
             train::PowOp, train::MaximumOp, train::MinimumOp, train::EqOp,
             train::NeOp, train::LtOp, train::LeOp, train::GtOp, train::GeOp,
             train::AddScalarOp, train::SubScalarOp, train::RsubScalarOp,
             train::MulScalarOp, train::DivScalarOp, train::PowScalarOp,
             train::EqScalarOp, train::NeScalarOp, train::LtScalarOp,
             train::LeScalarOp, train::GtScalarOp, train::GeScalarOp,
             train::NegOp, train::AbsOp, train::ExpOp, train::LogOp,
             train::SqrtOp, train::RsqrtOp, train::ReciprocalOp,
             train::SigmoidOp, train::TanhOp, train::ErfOp, train::SinOp,
             train::CosOp, train::ReluOp, train::SiluOp, train::LogicalNotOp,
             train::GeluOp, train::WhereOp, train::CastOp>(op);
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
