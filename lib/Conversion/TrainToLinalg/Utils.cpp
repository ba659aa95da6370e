//===- Utils.cpp - Shared pieces of the lowering to linalg ----------------===//
//
// Definitions of Utils.h.
//
//===----------------------------------------------------------------------===//

#include "Utils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace mlir::mantissa::train_to_linalg {

/// The type bf16/fp16 math happens in: fp32; every other type computes in
/// itself.
Type getComputeType(Type element) {
  if (element.isBF16() || element.isF16())
    return Float32Type::get(element.getContext());
  return element;
}

/// Converts a scalar between element types as torch's `to` does: floats
/// round to nearest even, floats truncate toward zero into integers, and
/// anything nonzero is true.
Value convertScalar(OpBuilder &b, Location loc, Value value, Type to) {
  Type from = value.getType();
  if (from == to)
    return value;
  auto fromFloat = dyn_cast<FloatType>(from);
  auto toFloat = dyn_cast<FloatType>(to);
  if (fromFloat && toFloat) {
    if (fromFloat.getWidth() == toFloat.getWidth()) // bf16 <-> f16
      value = b.create<arith::ExtFOp>(loc, b.getF32Type(), value);
    if (cast<FloatType>(value.getType()).getWidth() < toFloat.getWidth())
      return b.create<arith::ExtFOp>(loc, to, value);
    return b.create<arith::TruncFOp>(loc, to, value);
  }
  if (to.isInteger(1)) {
    if (fromFloat) {
      Value zero = b.create<arith::ConstantOp>(loc, b.getFloatAttr(from, 0.0));
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, value,
                                     zero);
    }
    Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(from, 0));
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, value, zero);
  }
  if (toFloat) {
    if (from.isInteger(1))
      return b.create<arith::UIToFPOp>(loc, to, value);
    return b.create<arith::SIToFPOp>(loc, to, value);
  }
  if (fromFloat)
    return b.create<arith::FPToSIOp>(loc, to, value);
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  unsigned toWidth = to.getIntOrFloatBitWidth();
  if (fromWidth < toWidth)
    return from.isInteger(1)
               ? b.create<arith::ExtUIOp>(loc, to, value).getResult()
               : b.create<arith::ExtSIOp>(loc, to, value).getResult();
  return b.create<arith::TruncIOp>(loc, to, value);
}

Value floatConstant(OpBuilder &b, Location loc, Type type, double value) {
  return b.create<arith::ConstantOp>(loc, b.getFloatAttr(type, value));
}

/// A constant of `type` holding a Python scalar attribute (i64, f64, bool).
Value scalarConstant(OpBuilder &b, Location loc, Attribute scalar, Type type) {
  if (isa<FloatType>(type)) {
    double value = 0;
    if (auto f = dyn_cast<FloatAttr>(scalar))
      value = f.getValueAsDouble();
    else if (auto i = dyn_cast<IntegerAttr>(scalar))
      value = i.getType().isInteger(1) ? double(i.getValue().getBoolValue())
                                       : double(i.getInt());
    return floatConstant(b, loc, type, value);
  }
  int64_t value = 0;
  if (auto f = dyn_cast<FloatAttr>(scalar))
    value = static_cast<int64_t>(f.getValueAsDouble());
  else if (auto i = dyn_cast<IntegerAttr>(scalar))
    value = i.getType().isInteger(1) ? int64_t(i.getValue().getBoolValue())
                                     : i.getInt();
  if (type.isInteger(1))
    value = value != 0;
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, value));
}

/// 1 / (1 + exp(-x)).
Value sigmoid(OpBuilder &b, Location loc, Value x) {
  Value one = floatConstant(b, loc, x.getType(), 1.0);
  Value e = b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, x));
  return b.create<arith::DivFOp>(loc, one,
                                 b.create<arith::AddFOp>(loc, one, e));
}

//===----------------------------------------------------------------------===//
// Tensor helpers
//===----------------------------------------------------------------------===//

/// Result dimension -> operand dimension map of torch broadcasting: trailing
/// dimensions align, size-1 operand dimensions read index 0.
AffineMap getBroadcastMap(MLIRContext *context, RankedTensorType operand,
                          ArrayRef<int64_t> resultShape) {
  int64_t rank = resultShape.size();
  int64_t offset = rank - operand.getRank();
  SmallVector<AffineExpr> exprs;
  for (int64_t d = 0; d < operand.getRank(); ++d) {
    if (operand.getDimSize(d) == 1 && resultShape[d + offset] != 1)
      exprs.push_back(getAffineConstantExpr(0, context));
    else
      exprs.push_back(getAffineDimExpr(d + offset, context));
  }
  return AffineMap::get(rank, 0, exprs, context);
}

/// An elementwise linalg.generic over `resultType` whose inputs broadcast to
/// it; `body` gets the input elements and returns the result element.
Value buildElementwise(OpBuilder &b, Location loc, RankedTensorType resultType,
                       ValueRange inputs, BodyFn body) {
  MLIRContext *context = b.getContext();
  SmallVector<AffineMap> maps;
  for (Value input : inputs)
    maps.push_back(getBroadcastMap(context,
                                   cast<RankedTensorType>(input.getType()),
                                   resultType.getShape()));
  maps.push_back(b.getMultiDimIdentityMap(resultType.getRank()));
  SmallVector<utils::IteratorType> iterators(resultType.getRank(),
                                             utils::IteratorType::parallel);
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(),
                                         resultType.getElementType());
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nested, Location nestedLoc, ValueRange args) {
        SmallVector<Value> elements(args.drop_back());
        Value result = body(nested, nestedLoc, elements);
        nested.create<linalg::YieldOp>(nestedLoc, result);
      });
  return generic.getResult(0);
}

/// A parallel linalg.generic over `resultType` reading `inputs` through
/// explicit `inputMaps`.
Value buildMapped(OpBuilder &b, Location loc, RankedTensorType resultType,
                  ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                  BodyFn body) {
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(b.getMultiDimIdentityMap(resultType.getRank()));
  SmallVector<utils::IteratorType> iterators(resultType.getRank(),
                                             utils::IteratorType::parallel);
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(),
                                         resultType.getElementType());
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nested, Location nestedLoc, ValueRange args) {
        SmallVector<Value> elements(args.drop_back());
        nested.create<linalg::YieldOp>(nestedLoc,
                                       body(nested, nestedLoc, elements));
      });
  return generic.getResult(0);
}

/// `value` converted elementwise to `elementType` (itself when it already is).
Value convertTensor(OpBuilder &b, Location loc, Value value, Type elementType) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getElementType() == elementType)
    return value;
  return buildElementwise(b, loc, type.clone(elementType), value,
                          [&](OpBuilder &nb, Location l, ArrayRef<Value> args) {
                            return convertScalar(nb, l, args[0], elementType);
                          });
}

/// `value` reshaped (same elements, row-major) to `type`, through a
/// collapse to one dimension and an expand.
Value reshapeTensor(OpBuilder &b, Location loc, Value value,
                    RankedTensorType type) {
  auto source = cast<RankedTensorType>(value.getType());
  if (source.getShape() == type.getShape())
    return value;
  int64_t count = type.getNumElements();
  auto flatType = RankedTensorType::get({count}, type.getElementType());
  Value flat = value;
  if (source.getRank() == 0) {
    flat = b.create<tensor::ExpandShapeOp>(loc, flatType, value,
                                           ArrayRef<ReassociationIndices>{});
  } else if (source.getRank() > 1) {
    ReassociationIndices all;
    for (int64_t d = 0; d < source.getRank(); ++d)
      all.push_back(d);
    flat = b.create<tensor::CollapseShapeOp>(
        loc, flatType, value, ArrayRef<ReassociationIndices>{all});
  }
  if (type.getRank() == 1)
    return flat;
  if (type.getRank() == 0)
    return b.create<tensor::CollapseShapeOp>(loc, type, flat,
                                             ArrayRef<ReassociationIndices>{});
  ReassociationIndices all;
  for (int64_t d = 0; d < type.getRank(); ++d)
    all.push_back(d);
  return b.create<tensor::ExpandShapeOp>(loc, type, flat,
                                         ArrayRef<ReassociationIndices>{all});
}

/// A tensor of `shape` filled with `scalar`.
Value buildFilled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                  Value scalar) {
  Value init = b.create<tensor::EmptyOp>(loc, shape, scalar.getType());
  return b.create<linalg::FillOp>(loc, scalar, init).getResult(0);
}

/// Reduces `input` over `reduced` dimensions into a tensor of the remaining
/// dimensions (rank-reduced, element type of `init`) with `combine(element,
/// accumulator)`.
Value buildReduction(
    OpBuilder &b, Location loc, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps, ArrayRef<bool> reduced, Value init,
    function_ref<Value(OpBuilder &, Location, ValueRange)> combine) {
  MLIRContext *context = b.getContext();
  int64_t rank = reduced.size();
  SmallVector<AffineExpr> outExprs;
  SmallVector<utils::IteratorType> iterators;
  for (int64_t d = 0; d < rank; ++d) {
    iterators.push_back(reduced[d] ? utils::IteratorType::reduction
                                   : utils::IteratorType::parallel);
    if (!reduced[d])
      outExprs.push_back(getAffineDimExpr(d, context));
  }
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(AffineMap::get(rank, 0, outExprs, context));
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{init.getType()}, inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nested, Location nestedLoc, ValueRange args) {
        nested.create<linalg::YieldOp>(nestedLoc,
                                       combine(nested, nestedLoc, args));
      });
  return generic.getResult(0);
}

SmallVector<int64_t> keptShape(ArrayRef<int64_t> shape,
                               ArrayRef<bool> reduced) {
  SmallVector<int64_t> kept;
  for (auto [size, isReduced] : llvm::zip(shape, reduced))
    if (!isReduced)
      kept.push_back(size);
  return kept;
}

/// The map from the full iteration space to the reduced (rank-dropped)
/// tensor.
AffineMap keptMap(MLIRContext *context, ArrayRef<bool> reduced) {
  SmallVector<AffineExpr> exprs;
  for (auto [d, isReduced] : llvm::enumerate(reduced))
    if (!isReduced)
      exprs.push_back(getAffineDimExpr(d, context));
  return AffineMap::get(reduced.size(), 0, exprs, context);
}

/// An index element (any integer type) as an `index` value.
Value toIndex(OpBuilder &b, Location loc, Value value) {
  return b.create<arith::IndexCastOp>(
      loc, b.getIndexType(), convertScalar(b, loc, value, b.getI64Type()));
}

/// A linalg.generic over `resultType` reading `indices` through `indexMap`,
/// whose body extracts from `source` at the coordinates `coordinates(b, loc,
/// index element)` returns. Gathers of every kind are this.
Value buildGather(OpBuilder &b, Location loc, RankedTensorType resultType,
                  Value source, Value indices, AffineMap indexMap,
                  function_ref<SmallVector<Value>(OpBuilder &, Location, Value)>
                      coordinates) {
  int64_t rank = resultType.getRank();
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(),
                                         resultType.getElementType());
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, ValueRange{indices}, ValueRange{init},
      ArrayRef<AffineMap>{indexMap, b.getMultiDimIdentityMap(rank)}, iterators,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value element = nb.create<tensor::ExtractOp>(
            l, source, coordinates(nb, l, toIndex(nb, l, args[0])));
        nb.create<linalg::YieldOp>(
            l, convertScalar(nb, l, element, resultType.getElementType()));
      });
  return generic.getResult(0);
}

/// A loop nest over `shape` that writes (or, with `accumulate`, adds in the
/// compute type and rounds once) into a copy of `dest`, in row-major order
/// so that repeated indices accumulate in the interpreter's order.
Value buildScatterLoops(
    OpBuilder &b, Location loc, Value dest, ArrayRef<int64_t> shape,
    bool accumulate,
    function_ref<ScatterWrite(OpBuilder &, Location, ValueRange)> write) {
  Type element = cast<RankedTensorType>(dest.getType()).getElementType();
  Type compute = getComputeType(element);
  SmallVector<Value> lbs, ubs, steps;
  for (int64_t size : shape) {
    lbs.push_back(b.create<arith::ConstantIndexOp>(loc, 0));
    ubs.push_back(b.create<arith::ConstantIndexOp>(loc, size));
    steps.push_back(b.create<arith::ConstantIndexOp>(loc, 1));
  }
  scf::LoopNest nest = scf::buildLoopNest(
      b, loc, lbs, ubs, steps, ValueRange{dest},
      [&](OpBuilder &nb, Location l, ValueRange ivs,
          ValueRange iterArgs) -> scf::ValueVector {
        ScatterWrite w = write(nb, l, ivs);
        Value value = w.value;
        if (accumulate) {
          Value old =
              nb.create<tensor::ExtractOp>(l, iterArgs[0], w.coordinates);
          Value sum = isa<FloatType>(compute)
                          ? nb.create<arith::AddFOp>(
                                  l, convertScalar(nb, l, old, compute),
                                  convertScalar(nb, l, value, compute))
                                .getResult()
                          : nb.create<arith::AddIOp>(l, old, value).getResult();
          value = convertScalar(nb, l, sum, element);
        }
        return {
            nb.create<tensor::InsertOp>(l, value, iterArgs[0], w.coordinates)};
      });
  if (shape.empty() || nest.results.empty())
    return dest;
  return nest.results[0];
}

/// Coordinates of `ivs` (over `iterShape`) in `operand` broadcast to it.
SmallVector<Value> broadcastCoordinates(OpBuilder &b, Location loc,
                                        RankedTensorType operand,
                                        ArrayRef<int64_t> iterShape,
                                        ValueRange ivs) {
  SmallVector<Value> coordinates;
  int64_t offset = iterShape.size() - operand.getRank();
  for (int64_t d = 0; d < operand.getRank(); ++d)
    coordinates.push_back(
        operand.getDimSize(d) == 1 && iterShape[d + offset] != 1
            ? b.create<arith::ConstantIndexOp>(loc, 0).getResult()
            : ivs[d + offset]);
  return coordinates;
}

} // namespace mlir::mantissa::train_to_linalg
