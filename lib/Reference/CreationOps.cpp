//===- CreationOps.cpp - Fills and ranges ---------------------------------===//
//
// train.full converts its value to the result type (infinities included);
// train.arange computes `start + i * step` in double for floating-point
// results (ATen's CPU accumulate type) and in int64 for integer results when
// the bounds are integers.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

static LogicalResult evaluateFull(train::FullOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  Tensor result(element, type.getShape());
  if (result.isFloatingPoint())
    std::fill(result.getFloats().begin(), result.getFloats().end(),
              scalarToFloat(op.getValue(), element));
  else
    std::fill(result.getIntegers().begin(), result.getIntegers().end(),
              scalarToInteger(op.getValue(), element));
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateArange(train::ArangeOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  Tensor result(element, type.getShape());
  bool integerBounds = !isFloatScalar(op.getStart()) &&
                       !isFloatScalar(op.getEnd()) &&
                       !isFloatScalar(op.getStep());
  if (!result.isFloatingPoint() && integerBounds) {
    int64_t start =
        scalarToInteger(op.getStart(), IntegerType::get(op.getContext(), 64));
    int64_t step =
        scalarToInteger(op.getStep(), IntegerType::get(op.getContext(), 64));
    for (int64_t i = 0, e = result.getNumElements(); i < e; ++i)
      result.getIntegers()[i] =
          wrapToInteger(static_cast<int64_t>(static_cast<uint64_t>(start) +
                                             static_cast<uint64_t>(i) *
                                                 static_cast<uint64_t>(step)),
                        element);
  } else {
    double start = scalarAsDouble(op.getStart());
    double step = scalarAsDouble(op.getStep());
    for (int64_t i = 0, e = result.getNumElements(); i < e; ++i) {
      double value = start + static_cast<double>(i) * step;
      if (result.isFloatingPoint())
        result.getFloats()[i] = roundToFloat(value, element);
      else
        result.getIntegers()[i] = floatToInteger(value, element);
    }
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

std::optional<LogicalResult> kernels::evaluateCreationOp(Operation *op,
                                                         Environment &env) {
  using namespace train;
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<FullOp>([&](FullOp op) { return evaluateFull(op, env); })
      .Case<ArangeOp>([&](ArangeOp op) { return evaluateArange(op, env); })
      .Default([](Operation *) { return std::nullopt; });
}
