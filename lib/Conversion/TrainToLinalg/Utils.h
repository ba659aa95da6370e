//===- Utils.h - Shared pieces of the lowering to linalg --------*- C++ -*-===//
//
// The scalar and tensor builders every family of TrainToLinalg's patterns
// uses: torch's conversions between element types, the compute type of
// bf16/fp16 math, broadcasting maps, and the linalg.generic shapes
// (elementwise, mapped, reductions, gathers, scatter loops). Private to
// lib/Conversion/TrainToLinalg.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_CONVERSION_TRAINTOLINALG_UTILS_H
#define MANTISSA_LIB_CONVERSION_TRAINTOLINALG_UTILS_H

#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::mantissa::train_to_linalg {

/// The type bf16/fp16 math happens in: fp32; every other type computes in
/// itself.
Type getComputeType(Type element);

/// Converts a scalar between element types as torch's `to` does: floats
/// round to nearest even, floats truncate toward zero into integers, and
/// anything nonzero is true.
Value convertScalar(OpBuilder &b, Location loc, Value value, Type to);

/// A constant of float `type`.
Value floatConstant(OpBuilder &b, Location loc, Type type, double value);

/// A constant of `type` holding a Python scalar attribute (i64, f64, bool).
Value scalarConstant(OpBuilder &b, Location loc, Attribute scalar, Type type);

/// 1 / (1 + exp(-x)).
Value sigmoid(OpBuilder &b, Location loc, Value x);

/// Result dimension -> operand dimension map of torch broadcasting: trailing
/// dimensions align, size-1 operand dimensions read index 0.
AffineMap getBroadcastMap(MLIRContext *context, RankedTensorType operand,
                          ArrayRef<int64_t> resultShape);

using BodyFn =
    function_ref<Value(OpBuilder &, Location, ArrayRef<Value> inputs)>;

/// An elementwise linalg.generic over `resultType` whose inputs broadcast to
/// it; `body` gets the input elements and returns the result element.
Value buildElementwise(OpBuilder &b, Location loc, RankedTensorType resultType,
                       ValueRange inputs, BodyFn body);

/// A parallel linalg.generic over `resultType` reading `inputs` through
/// explicit `inputMaps`.
Value buildMapped(OpBuilder &b, Location loc, RankedTensorType resultType,
                  ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                  BodyFn body);

/// `value` converted elementwise to `elementType` (itself when it already is).
Value convertTensor(OpBuilder &b, Location loc, Value value, Type elementType);

/// `value` reshaped (same elements, row-major) to `type`, through a
/// collapse to one dimension and an expand.
Value reshapeTensor(OpBuilder &b, Location loc, Value value,
                    RankedTensorType type);

/// A tensor of `shape` filled with `scalar`.
Value buildFilled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                  Value scalar);

/// Reduces `input` over `reduced` dimensions into a tensor of the remaining
/// dimensions (rank-reduced, element type of `init`) with `combine(element,
/// accumulator)`.
Value buildReduction(
    OpBuilder &b, Location loc, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps, ArrayRef<bool> reduced, Value init,
    function_ref<Value(OpBuilder &, Location, ValueRange)> combine);

/// `shape` without its `reduced` dimensions.
SmallVector<int64_t> keptShape(ArrayRef<int64_t> shape, ArrayRef<bool> reduced);

/// The map from the full iteration space to the reduced (rank-dropped)
/// tensor.
AffineMap keptMap(MLIRContext *context, ArrayRef<bool> reduced);

/// An index element (any integer type) as an `index` value.
Value toIndex(OpBuilder &b, Location loc, Value value);

/// A linalg.generic over `resultType` reading `indices` through `indexMap`,
/// whose body extracts from `source` at the coordinates `coordinates(b, loc,
/// index element)` returns. Gathers of every kind are this.
Value buildGather(
    OpBuilder &b, Location loc, RankedTensorType resultType, Value source,
    Value indices, AffineMap indexMap,
    function_ref<SmallVector<Value>(OpBuilder &, Location, Value)> coordinates);

/// What one iteration of a scatter writes: the destination coordinates and
/// the value (already of the destination's element type).
struct ScatterWrite {
  SmallVector<Value> coordinates;
  Value value;
};

/// A loop nest over `shape` that writes (or, with `accumulate`, adds in the
/// compute type and rounds once) into a copy of `dest`, in row-major order
/// so that repeated indices accumulate in the interpreter's order.
Value buildScatterLoops(
    OpBuilder &b, Location loc, Value dest, ArrayRef<int64_t> shape,
    bool accumulate,
    function_ref<ScatterWrite(OpBuilder &, Location, ValueRange)> write);

/// Coordinates of `ivs` (over `iterShape`) in `operand` broadcast to it.
SmallVector<Value> broadcastCoordinates(OpBuilder &b, Location loc,
                                        RankedTensorType operand,
                                        ArrayRef<int64_t> iterShape,
                                        ValueRange ivs);

/// The ranked tensor type of `value`.
inline RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

} // namespace mlir::mantissa::train_to_linalg

#endif // MANTISSA_LIB_CONVERSION_TRAINTOLINALG_UTILS_H
