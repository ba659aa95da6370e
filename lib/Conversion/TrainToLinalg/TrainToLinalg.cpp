//===- TrainToLinalg.cpp - train.step to linalg on tensors ----------------===//
//
// Lowers a train.step to a func.func whose body is linalg on tensors. Each
// compute op becomes linalg.generic / named linalg ops / tensor reshapes and
// slices; bf16 and fp16 math happens in fp32 inside the generic bodies and is
// rounded once per op, as the reference interpreter does.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

namespace mlir::mantissa {
#define GEN_PASS_DEF_LOWERTRAINTOLINALGPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

//===----------------------------------------------------------------------===//
// Scalar helpers (used inside generic bodies)
//===----------------------------------------------------------------------===//

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

using BodyFn =
    function_ref<Value(OpBuilder &, Location, ArrayRef<Value> inputs)>;

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

//===----------------------------------------------------------------------===//
// The lowering of one step
//===----------------------------------------------------------------------===//

/// The arithmetic of the elementwise ops; the tensor-tensor and the
/// tensor-scalar forms share it (rsub is sub with its operands swapped).
enum class ArithKind { Add, Sub, Mul, Div, Pow, Maximum, Minimum };

static std::optional<ArithKind> getArithKind(Operation *op) {
  return TypeSwitch<Operation *, std::optional<ArithKind>>(op)
      .Case<train::AddOp, train::AddScalarOp>(
          [](auto) { return ArithKind::Add; })
      .Case<train::SubOp, train::SubScalarOp, train::RsubScalarOp>(
          [](auto) { return ArithKind::Sub; })
      .Case<train::MulOp, train::MulScalarOp>(
          [](auto) { return ArithKind::Mul; })
      .Case<train::DivOp, train::DivScalarOp>(
          [](auto) { return ArithKind::Div; })
      .Case<train::PowOp, train::PowScalarOp>(
          [](auto) { return ArithKind::Pow; })
      .Case([](train::MaximumOp) { return ArithKind::Maximum; })
      .Case([](train::MinimumOp) { return ArithKind::Minimum; })
      .Default([](Operation *) { return std::nullopt; });
}

/// `x kind y` in the compute type (float, or signed integer; Div and Pow have
/// no integer form and are rejected before this is called).
static Value buildArith(OpBuilder &b, Location loc, ArithKind kind, Value x,
                        Value y, bool isFloat) {
  switch (kind) {
  case ArithKind::Add:
    return isFloat ? b.create<arith::AddFOp>(loc, x, y).getResult()
                   : b.create<arith::AddIOp>(loc, x, y).getResult();
  case ArithKind::Sub:
    return isFloat ? b.create<arith::SubFOp>(loc, x, y).getResult()
                   : b.create<arith::SubIOp>(loc, x, y).getResult();
  case ArithKind::Mul:
    return isFloat ? b.create<arith::MulFOp>(loc, x, y).getResult()
                   : b.create<arith::MulIOp>(loc, x, y).getResult();
  case ArithKind::Div:
    return b.create<arith::DivFOp>(loc, x, y);
  case ArithKind::Pow:
    return b.create<math::PowFOp>(loc, x, y);
  case ArithKind::Maximum:
    return isFloat ? b.create<arith::MaximumFOp>(loc, x, y).getResult()
                   : b.create<arith::MaxSIOp>(loc, x, y).getResult();
  case ArithKind::Minimum:
    return isFloat ? b.create<arith::MinimumFOp>(loc, x, y).getResult()
                   : b.create<arith::MinSIOp>(loc, x, y).getResult();
  }
  llvm_unreachable("unknown arithmetic kind");
}

/// The float and integer predicates of a comparison, tensor or scalar form.
static std::optional<std::pair<arith::CmpFPredicate, arith::CmpIPredicate>>
getComparePredicates(Operation *op) {
  using CmpF = arith::CmpFPredicate;
  using CmpI = arith::CmpIPredicate;
  return TypeSwitch<Operation *, std::optional<std::pair<CmpF, CmpI>>>(op)
      .Case<train::EqOp, train::EqScalarOp>(
          [](auto) { return std::make_pair(CmpF::OEQ, CmpI::eq); })
      .Case<train::NeOp, train::NeScalarOp>(
          [](auto) { return std::make_pair(CmpF::UNE, CmpI::ne); })
      .Case<train::LtOp, train::LtScalarOp>(
          [](auto) { return std::make_pair(CmpF::OLT, CmpI::slt); })
      .Case<train::LeOp, train::LeScalarOp>(
          [](auto) { return std::make_pair(CmpF::OLE, CmpI::sle); })
      .Case<train::GtOp, train::GtScalarOp>(
          [](auto) { return std::make_pair(CmpF::OGT, CmpI::sgt); })
      .Case<train::GeOp, train::GeScalarOp>(
          [](auto) { return std::make_pair(CmpF::OGE, CmpI::sge); })
      .Default([](Operation *) { return std::nullopt; });
}

class StepLowering {
public:
  StepLowering(OpBuilder &b, IRMapping &mapping) : b(b), mapping(mapping) {}

  /// Emits the linalg form of `op`; fails (with an error on `op`) when there
  /// is no lowering for it.
  LogicalResult lower(Operation *op);

private:
  Value get(Value v) { return mapping.lookup(v); }
  RankedTensorType typeOf(Value v) {
    return cast<RankedTensorType>(v.getType());
  }

  LogicalResult lowerBinary(Operation *op);
  LogicalResult lowerCompare(Operation *op, arith::CmpFPredicate fpred,
                             arith::CmpIPredicate ipred, Value lhs, Value rhs);
  LogicalResult lowerScalar(Operation *op, Attribute scalar);
  LogicalResult lowerUnary(Operation *op);
  LogicalResult lowerReduce(Operation *op, Value input, ArrayRef<int64_t> dims,
                            StringRef kind);
  LogicalResult lowerSoftmax(Operation *op, Value input, int64_t dim,
                             bool logarithm);
  LogicalResult lowerMatmul(Operation *op, Value lhs, Value rhs, bool batched,
                            Value bias, double beta, double alpha);
  LogicalResult lowerSoftmaxBackward(Operation *op, Value grad, Value output,
                                     int64_t dim, bool logarithm);
  LogicalResult lowerGeluBackward(train::GeluBackwardOp op);
  LogicalResult lowerClamp(train::ClampOp op);
  LogicalResult lowerArange(train::ArangeOp op);
  LogicalResult lowerLayerNorm(train::LayerNormOp op);
  LogicalResult lowerLayerNormBackward(train::LayerNormBackwardOp op);
  LogicalResult lowerRmsNorm(train::RmsNormOp op);
  LogicalResult lowerRmsNormBackward(train::RmsNormBackwardOp op);

  void bind(Operation *op, Value value) {
    mapping.map(op->getResult(0), value);
  }

  OpBuilder &b;
  IRMapping &mapping;
};

/// Elementwise arithmetic: operands convert to the compute type of the
/// promoted result, the op happens there, the result rounds once.
LogicalResult StepLowering::lowerBinary(Operation *op) {
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  bool isFloat = isa<FloatType>(compute);
  if (!isFloat && isa<train::DivOp, train::PowOp>(op))
    return op->emitOpError() << "has no lowering for integer results";
  if (!isFloat && compute.isInteger(1))
    return op->emitOpError() << "has no lowering for boolean arithmetic";
  Value result = buildElementwise(
      b, loc, resultType, {get(op->getOperand(0)), get(op->getOperand(1))},
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value x = convertScalar(nb, l, args[0], compute);
        Value y = convertScalar(nb, l, args[1], compute);
        Value r = buildArith(nb, l, *getArithKind(op), x, y, isFloat);
        return convertScalar(nb, l, r, element);
      });
  bind(op, result);
  return success();
}

/// Comparisons: floats compare exactly in f64 (every f32/bf16 value is
/// representable), integers signed.
LogicalResult StepLowering::lowerCompare(Operation *op,
                                         arith::CmpFPredicate fpred,
                                         arith::CmpIPredicate ipred, Value lhs,
                                         Value rhs) {
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type lhsElement = typeOf(lhs).getElementType();
  Type rhsElement = typeOf(rhs).getElementType();
  bool anyFloat = isa<FloatType>(lhsElement) || isa<FloatType>(rhsElement);
  Value result = buildElementwise(
      b, loc, resultType, {get(lhs), get(rhs)},
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value x = args[0], y = args[1];
        if (anyFloat) {
          // An integer meets a float in the float's type first.
          if (!isa<FloatType>(x.getType()))
            x = convertScalar(nb, l, x, y.getType());
          if (!isa<FloatType>(y.getType()))
            y = convertScalar(nb, l, y, x.getType());
          x = convertScalar(nb, l, x, nb.getF64Type());
          y = convertScalar(nb, l, y, nb.getF64Type());
          return nb.create<arith::CmpFOp>(l, fpred, x, y);
        }
        x = convertScalar(nb, l, x, nb.getI64Type());
        y = convertScalar(nb, l, y, nb.getI64Type());
        return nb.create<arith::CmpIOp>(l, ipred, x, y);
      });
  bind(op, result);
  return success();
}

LogicalResult StepLowering::lowerScalar(Operation *op, Attribute scalar) {
  Location loc = op->getLoc();
  Value input = op->getOperand(0);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type inputElement = typeOf(input).getElementType();

  // Comparisons with a scalar: the scalar in the tensor's type (or fp32 for
  // an integer tensor against a float), compared exactly.
  std::optional<std::pair<arith::CmpFPredicate, arith::CmpIPredicate>> cmp =
      getComparePredicates(op);
  if (cmp) {
    Type type = inputElement;
    if (!isa<FloatType>(type) && isa<FloatAttr>(scalar))
      type = b.getF32Type();
    bool isFloat = isa<FloatType>(type);
    bind(op, buildElementwise(
                 b, loc, resultType, get(input),
                 [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                   Value x = convertScalar(nb, l, args[0], type);
                   Value s = scalarConstant(nb, l, scalar, type);
                   if (isFloat) {
                     x = convertScalar(nb, l, x, nb.getF64Type());
                     s = convertScalar(nb, l, s, nb.getF64Type());
                     return nb.create<arith::CmpFOp>(l, cmp->first, x, s);
                   }
                   x = convertScalar(nb, l, x, nb.getI64Type());
                   s = convertScalar(nb, l, s, nb.getI64Type());
                   return nb.create<arith::CmpIOp>(l, cmp->second, x, s);
                 }));
    return success();
  }

  Type compute = getComputeType(element);
  bool isFloat = isa<FloatType>(compute);
  if (!isFloat &&
      (isa<train::DivScalarOp, train::PowScalarOp>(op) || compute.isInteger(1)))
    return op->emitOpError()
           << "has no lowering for integer or boolean results";
  bind(op, buildElementwise(
               b, loc, resultType, get(input),
               [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                 Value x = convertScalar(nb, l, args[0], compute);
                 // torch wraps the scalar into a tensor of the result's type
                 // first: 1.7 becomes 1.703125 for a bf16 tensor.
                 Value s = convertScalar(
                     nb, l, scalarConstant(nb, l, scalar, element), compute);
                 bool swapped = isa<train::RsubScalarOp>(op);
                 Value r = buildArith(nb, l, *getArithKind(op), swapped ? s : x,
                                      swapped ? x : s, isFloat);
                 return convertScalar(nb, l, r, element);
               }));
  return success();
}

LogicalResult StepLowering::lowerUnary(Operation *op) {
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type inputElement = typeOf(op->getOperand(0)).getElementType();
  if (isa<train::LogicalNotOp>(op)) {
    bind(op, buildElementwise(
                 b, loc, resultType, get(op->getOperand(0)),
                 [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                   Value truth = convertScalar(nb, l, args[0], nb.getI1Type());
                   Value one =
                       nb.create<arith::ConstantOp>(l, nb.getBoolAttr(true));
                   return nb.create<arith::XOrIOp>(l, truth, one);
                 }));
    return success();
  }
  Type compute = getComputeType(element);
  bool isFloat = isa<FloatType>(compute);
  if (!isFloat && !isa<train::NegOp, train::AbsOp, train::ReluOp>(op))
    return op->emitOpError()
           << "has no lowering for " << inputElement << " inputs";
  if (!isFloat && compute.isInteger(1))
    return op->emitOpError() << "has no lowering for boolean inputs";
  StringRef approximate;
  if (auto gelu = dyn_cast<train::GeluOp>(op))
    approximate = gelu.getApproximate();
  bind(op,
       buildElementwise(
           b, loc, resultType, get(op->getOperand(0)),
           [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
             Value x = convertScalar(nb, l, args[0], compute);
             auto c = [&](double v) {
               return floatConstant(nb, l, compute, v);
             };
             Value r;
             if (!isFloat) {
               Value zero = nb.create<arith::ConstantOp>(
                   l, nb.getIntegerAttr(compute, 0));
               r = TypeSwitch<Operation *, Value>(op)
                       .Case([&](train::NegOp) {
                         return nb.create<arith::SubIOp>(l, zero, x);
                       })
                       .Case([&](train::AbsOp) {
                         return nb.create<math::AbsIOp>(l, x);
                       })
                       .Case([&](train::ReluOp) {
                         return nb.create<arith::MaxSIOp>(l, x, zero);
                       });
               return convertScalar(nb, l, r, element);
             }
             r = TypeSwitch<Operation *, Value>(op)
                     .Case([&](train::NegOp) {
                       return nb.create<arith::NegFOp>(l, x);
                     })
                     .Case([&](train::AbsOp) {
                       return nb.create<math::AbsFOp>(l, x);
                     })
                     .Case([&](train::ExpOp) {
                       return nb.create<math::ExpOp>(l, x);
                     })
                     .Case([&](train::LogOp) {
                       return nb.create<math::LogOp>(l, x);
                     })
                     .Case([&](train::SqrtOp) {
                       return nb.create<math::SqrtOp>(l, x);
                     })
                     .Case([&](train::RsqrtOp) -> Value {
                       return nb.create<arith::DivFOp>(
                           l, c(1.0), nb.create<math::SqrtOp>(l, x));
                     })
                     .Case([&](train::ReciprocalOp) {
                       return nb.create<arith::DivFOp>(l, c(1.0), x);
                     })
                     .Case([&](train::SigmoidOp) { return sigmoid(nb, l, x); })
                     .Case([&](train::TanhOp) {
                       return nb.create<math::TanhOp>(l, x);
                     })
                     .Case([&](train::ErfOp) {
                       return nb.create<math::ErfOp>(l, x);
                     })
                     .Case([&](train::SinOp) {
                       return nb.create<math::SinOp>(l, x);
                     })
                     .Case([&](train::CosOp) {
                       return nb.create<math::CosOp>(l, x);
                     })
                     .Case([&](train::ReluOp) {
                       return nb.create<arith::MaximumFOp>(l, x, c(0.0));
                     })
                     .Case([&](train::SiluOp) {
                       return nb.create<arith::MulFOp>(l, x, sigmoid(nb, l, x));
                     })
                     .Case([&](train::GeluOp) -> Value {
                       Value inner;
                       if (approximate == "tanh") {
                         Value cube = nb.create<arith::MulFOp>(
                             l, nb.create<arith::MulFOp>(l, x, x), x);
                         Value sum = nb.create<arith::AddFOp>(
                             l, x,
                             nb.create<arith::MulFOp>(l, c(0.044715), cube));
                         inner = nb.create<math::TanhOp>(
                             l, nb.create<arith::MulFOp>(
                                    l, c(0.7978845608028654), sum));
                       } else {
                         inner = nb.create<math::ErfOp>(
                             l, nb.create<arith::MulFOp>(
                                    l, x, c(0.7071067811865476)));
                       }
                       Value half = nb.create<arith::MulFOp>(l, c(0.5), x);
                       return nb.create<arith::MulFOp>(
                           l, half, nb.create<arith::AddFOp>(l, c(1.0), inner));
                     });
             return convertScalar(nb, l, r, element);
           }));
  return success();
}

/// sum / mean / amax: accumulate in fp32 (fp64 for fp64, i64 for integers),
/// then divide (mean) and round once to the result type.
LogicalResult StepLowering::lowerReduce(Operation *op, Value input,
                                        ArrayRef<int64_t> dims,
                                        StringRef kind) {
  Location loc = op->getLoc();
  auto inputType = typeOf(input);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  int64_t rank = inputType.getRank();
  SmallVector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims)
    reduced[d] = true;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d])
      count *= inputType.getDimSize(d);

  Type inputElement = inputType.getElementType();
  bool isFloat = isa<FloatType>(element) || isa<FloatType>(inputElement);
  if (kind == "mean" && !isa<FloatType>(element))
    return op->emitOpError() << "has no lowering for integer results";
  Type accumulator;
  if (isFloat)
    accumulator = (element.isF64() || inputElement.isF64())
                      ? Type(b.getF64Type())
                      : Type(b.getF32Type());
  else
    accumulator = b.getI64Type();
  bool isMax = kind == "amax";
  Value initValue;
  if (isFloat)
    initValue =
        floatConstant(b, loc, accumulator,
                      isMax ? -std::numeric_limits<double>::infinity() : 0.0);
  else
    initValue = b.create<arith::ConstantOp>(
        loc, b.getIntegerAttr(accumulator,
                              isMax ? std::numeric_limits<int64_t>::min() : 0));
  SmallVector<int64_t> shape = keptShape(inputType.getShape(), reduced);
  Value init = buildFilled(b, loc, shape, initValue);
  Value acc = buildReduction(
      b, loc, get(input), {b.getMultiDimIdentityMap(rank)}, reduced, init,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value x = convertScalar(nb, l, args[0], accumulator);
        if (isFloat)
          return isMax ? nb.create<arith::MaximumFOp>(l, x, args[1]).getResult()
                       : nb.create<arith::AddFOp>(l, x, args[1]).getResult();
        return isMax ? nb.create<arith::MaxSIOp>(l, x, args[1]).getResult()
                     : nb.create<arith::AddIOp>(l, x, args[1]).getResult();
      });
  Value out = buildElementwise(
      b, loc, RankedTensorType::get(shape, element), acc,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value v = args[0];
        if (kind == "mean")
          v = nb.create<arith::DivFOp>(
              l, v, floatConstant(nb, l, accumulator, double(count)));
        return convertScalar(nb, l, v, element);
      });
  bind(op, reshapeTensor(b, loc, out, resultType));
  return success();
}

/// softmax / log_softmax along `dim` in the compute type: the maximum, the
/// sum of the shifted exponentials, then one rounding per element.
LogicalResult StepLowering::lowerSoftmax(Operation *op, Value input,
                                         int64_t dim, bool logarithm) {
  Location loc = op->getLoc();
  MLIRContext *context = b.getContext();
  auto inputType = typeOf(input);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op->emitOpError() << "has no lowering for integer tensors";
  int64_t rank = inputType.getRank();
  SmallVector<bool> reduced(rank, false);
  reduced[dim] = true;
  SmallVector<int64_t> shape = keptShape(inputType.getShape(), reduced);
  AffineMap identity = b.getMultiDimIdentityMap(rank);
  AffineMap kept = keptMap(context, reduced);
  Value x = get(input);

  Value maxInit = buildFilled(
      b, loc, shape,
      floatConstant(b, loc, compute, -std::numeric_limits<double>::infinity()));
  Value maximum =
      buildReduction(b, loc, x, {identity}, reduced, maxInit,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       return nb.create<arith::MaximumFOp>(
                           l, convertScalar(nb, l, args[0], compute), args[1]);
                     });
  Value sumInit =
      buildFilled(b, loc, shape, floatConstant(b, loc, compute, 0.0));
  Value sum = buildReduction(
      b, loc, ValueRange{x, maximum}, {identity, kept}, reduced, sumInit,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value shifted = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        return nb.create<arith::AddFOp>(l, nb.create<math::ExpOp>(l, shifted),
                                        args[2]);
      });
  // Per line: log(sum) or 1 / sum.
  Value lineFactor = buildElementwise(
      b, loc, RankedTensorType::get(shape, compute), sum,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        if (logarithm)
          return nb.create<math::LogOp>(l, args[0]);
        return nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0),
                                        args[0]);
      });
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), element);
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, ValueRange{x, maximum, lineFactor},
      ValueRange{init}, ArrayRef<AffineMap>{identity, kept, kept, identity},
      iterators, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value shifted = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        Value r =
            logarithm
                ? nb.create<arith::SubFOp>(l, shifted, args[2]).getResult()
                : nb.create<arith::MulFOp>(
                        l, nb.create<math::ExpOp>(l, shifted), args[2])
                      .getResult();
        nb.create<linalg::YieldOp>(l, convertScalar(nb, l, r, element));
      });
  bind(op, generic.getResult(0));
  return success();
}

/// mm / bmm / addmm: a named linalg matmul accumulating in fp32 (the named
/// op extends bf16 operands), then bias and scaling, rounded once. Operands
/// that are both widened exactly from one narrower dtype (the products of
/// torch's kernels that read bf16 and keep fp32: train.fp32_accumulate)
/// are read in that dtype: the same products, without writing the widened
/// copies, and a bf16 GEMM on the GPU.
LogicalResult StepLowering::lowerMatmul(Operation *op, Value lhs, Value rhs,
                                        bool batched, Value bias, double beta,
                                        double alpha) {
  if (auto narrow = train::getWidenedSources(lhs, rhs))
    std::tie(lhs, rhs) = *narrow;
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute))
    return op->emitOpError() << "has no lowering for integer matrices";
  Value init = buildFilled(b, loc, resultType.getShape(),
                           floatConstant(b, loc, compute, 0.0));
  auto accType = RankedTensorType::get(resultType.getShape(), compute);
  Value acc;
  if (batched)
    acc = b.create<linalg::BatchMatmulOp>(loc, TypeRange{accType},
                                          ValueRange{get(lhs), get(rhs)},
                                          ValueRange{init})
              .getResult(0);
  else
    acc = b.create<linalg::MatmulOp>(loc, TypeRange{accType},
                                     ValueRange{get(lhs), get(rhs)},
                                     ValueRange{init})
              .getResult(0);
  if (!bias) {
    bind(op, convertTensor(b, loc, acc, element));
    return success();
  }
  bind(op, buildElementwise(
               b, loc, resultType, {acc, get(bias)},
               [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                 Value product = args[0];
                 Value addend = convertScalar(nb, l, args[1], compute);
                 if (alpha != 1.0)
                   product = nb.create<arith::MulFOp>(
                       l, floatConstant(nb, l, compute, alpha), product);
                 if (beta != 1.0)
                   addend = nb.create<arith::MulFOp>(
                       l, floatConstant(nb, l, compute, beta), addend);
                 Value r = nb.create<arith::AddFOp>(l, addend, product);
                 return convertScalar(nb, l, r, element);
               }));
  return success();
}

/// softmax_backward: `(grad - sum(grad * output)) * output`;
/// log_softmax_backward: `grad - exp(output) * sum(grad)`; the sums
/// accumulate in fp32 (fp64 for fp64), the rest in the compute type.
LogicalResult StepLowering::lowerSoftmaxBackward(Operation *op, Value grad,
                                                 Value output, int64_t dim,
                                                 bool logarithm) {
  Location loc = op->getLoc();
  MLIRContext *context = b.getContext();
  auto gradType = typeOf(grad);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute) || !isa<FloatType>(gradType.getElementType()) ||
      !isa<FloatType>(typeOf(output).getElementType()))
    return op->emitOpError() << "has no lowering for integer tensors";
  int64_t rank = gradType.getRank();
  SmallVector<bool> reduced(rank, false);
  reduced[dim] = true;
  SmallVector<int64_t> shape = keptShape(gradType.getShape(), reduced);
  AffineMap identity = b.getMultiDimIdentityMap(rank);
  AffineMap kept = keptMap(context, reduced);
  Value g = get(grad), y = get(output);
  Value sumInit =
      buildFilled(b, loc, shape, floatConstant(b, loc, compute, 0.0));
  Value sum = buildReduction(
      b, loc, ValueRange{g, y}, {identity, identity}, reduced, sumInit,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value gv = convertScalar(nb, l, args[0], compute);
        if (!logarithm)
          gv = nb.create<arith::MulFOp>(l, gv,
                                        convertScalar(nb, l, args[1], compute));
        return nb.create<arith::AddFOp>(l, gv, args[2]);
      });
  bind(op, buildMapped(
               b, loc, resultType, ValueRange{g, y, sum},
               {identity, identity, kept},
               [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                 Value gv = convertScalar(nb, l, args[0], compute);
                 Value yv = convertScalar(nb, l, args[1], compute);
                 Value r;
                 if (logarithm)
                   r = nb.create<arith::SubFOp>(
                       l, gv,
                       nb.create<arith::MulFOp>(
                           l, nb.create<math::ExpOp>(l, yv), args[2]));
                 else
                   r = nb.create<arith::MulFOp>(
                       l, nb.create<arith::SubFOp>(l, gv, args[2]), yv);
                 return convertScalar(nb, l, r, element);
               }));
  return success();
}

/// The gradient of GELU with ATen's constants and order of operations.
LogicalResult StepLowering::lowerGeluBackward(train::GeluBackwardOp op) {
  Location loc = op.getLoc();
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute))
    return op.emitOpError() << "has no lowering for integer tensors";
  bool useTanh = op.getApproximate() == "tanh";
  bind(op, buildElementwise(
               b, loc, resultType, {get(op.getGrad()), get(op.getInput())},
               [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                 Value g = convertScalar(nb, l, args[0], compute);
                 Value x = convertScalar(nb, l, args[1], compute);
                 auto c = [&](double v) {
                   return floatConstant(nb, l, compute, v);
                 };
                 auto mul = [&](Value a, Value bb) -> Value {
                   return nb.create<arith::MulFOp>(l, a, bb);
                 };
                 auto add = [&](Value a, Value bb) -> Value {
                   return nb.create<arith::AddFOp>(l, a, bb);
                 };
                 Value d;
                 if (!useTanh) {
                   Value cdf =
                       mul(c(0.5), add(c(1.0), nb.create<math::ErfOp>(
                                                   l, mul(x, c(M_SQRT1_2)))));
                   Value pdf =
                       mul(c(M_2_SQRTPI * M_SQRT1_2 * 0.5),
                           nb.create<math::ExpOp>(l, mul(mul(x, x), c(-0.5))));
                   d = add(cdf, mul(x, pdf));
                 } else {
                   Value beta = c(M_SQRT2 * M_2_SQRTPI * 0.5);
                   Value kappa = c(0.044715);
                   Value square = mul(x, x);
                   Value cube = mul(square, x);
                   Value inner = mul(beta, add(x, mul(kappa, cube)));
                   Value tanhInner = nb.create<math::TanhOp>(l, inner);
                   Value left = mul(c(0.5), x);
                   Value right = add(c(1.0), tanhInner);
                   Value leftDerivative = mul(c(0.5), right);
                   Value tanhDerivative = nb.create<arith::SubFOp>(
                       l, c(1.0), mul(tanhInner, tanhInner));
                   Value innerDerivative =
                       mul(beta, add(c(1.0), mul(mul(c(3.0), kappa), square)));
                   Value rightDerivative =
                       mul(mul(left, tanhDerivative), innerDerivative);
                   d = add(leftDerivative, rightDerivative);
                 }
                 return convertScalar(nb, l, mul(g, d), element);
               }));
  return success();
}

/// clamp: NaN stays NaN, else `min(max(x, lo), hi)` with the bounds in the
/// tensor's type.
LogicalResult StepLowering::lowerClamp(train::ClampOp op) {
  Location loc = op.getLoc();
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (compute.isInteger(1))
    return op.emitOpError() << "has no lowering for boolean tensors";
  bool isFloat = isa<FloatType>(compute);
  Attribute lower = op.getMinAttr(), upper = op.getMaxAttr();
  bind(op, buildElementwise(
               b, loc, resultType, get(op.getInput()),
               [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                 Value x = convertScalar(nb, l, args[0], compute);
                 auto bound = [&](Attribute a) {
                   return convertScalar(
                       nb, l, scalarConstant(nb, l, a, element), compute);
                 };
                 if (isFloat) {
                   if (lower) {
                     Value lo = bound(lower);
                     Value below = nb.create<arith::CmpFOp>(
                         l, arith::CmpFPredicate::OLT, x, lo);
                     x = nb.create<arith::SelectOp>(l, below, lo, x);
                   }
                   if (upper) {
                     Value hi = bound(upper);
                     Value above = nb.create<arith::CmpFOp>(
                         l, arith::CmpFPredicate::OGT, x, hi);
                     x = nb.create<arith::SelectOp>(l, above, hi, x);
                   }
                 } else {
                   if (lower)
                     x = nb.create<arith::MaxSIOp>(l, x, bound(lower));
                   if (upper)
                     x = nb.create<arith::MinSIOp>(l, x, bound(upper));
                 }
                 return convertScalar(nb, l, x, element);
               }));
  return success();
}

/// arange: `start + i * step`, in i64 (wrapping) for integer bounds and an
/// integer result, in f64 rounded once otherwise.
LogicalResult StepLowering::lowerArange(train::ArangeOp op) {
  Location loc = op.getLoc();
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  if (element.isInteger(1))
    return op.emitOpError() << "has no lowering for boolean results";
  auto isFloatAttr = [](Attribute a) { return isa<FloatAttr>(a); };
  bool integer = !isa<FloatType>(element) && !isFloatAttr(op.getStart()) &&
                 !isFloatAttr(op.getEnd()) && !isFloatAttr(op.getStep());
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), element);
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, ValueRange{}, ValueRange{init},
      ArrayRef<AffineMap>{b.getMultiDimIdentityMap(1)},
      ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
      [&](OpBuilder &nb, Location l, ValueRange) {
        Value i = nb.create<arith::IndexCastOp>(
            l, nb.getI64Type(), nb.create<linalg::IndexOp>(l, 0));
        Type type = integer ? Type(nb.getI64Type()) : Type(nb.getF64Type());
        Value start = scalarConstant(nb, l, op.getStart(), type);
        Value step = scalarConstant(nb, l, op.getStep(), type);
        Value r;
        if (integer) {
          r = nb.create<arith::AddIOp>(l, start,
                                       nb.create<arith::MulIOp>(l, i, step));
        } else {
          Value fi = nb.create<arith::SIToFPOp>(l, type, i);
          r = nb.create<arith::AddFOp>(l, start,
                                       nb.create<arith::MulFOp>(l, fi, step));
          // The CPU runtime has no f64 -> bf16/f16 truncation: go through
          // f32 (a double rounding only for values not exact in f32).
          if (isa<FloatType>(element) && element.getIntOrFloatBitWidth() < 32)
            r = nb.create<arith::TruncFOp>(l, nb.getF32Type(), r);
        }
        nb.create<linalg::YieldOp>(l, convertScalar(nb, l, r, element));
      });
  bind(op, generic.getResult(0));
  return success();
}

namespace {
/// Dimension bookkeeping of a norm over the trailing `normalizedRank`
/// dimensions of a tensor of `rank`.
struct NormDims {
  NormDims(MLIRContext *context, ArrayRef<int64_t> shape,
           int64_t normalizedRank)
      : rank(shape.size()), trailing(rank, false), leading(rank, false) {
    for (int64_t d = 0; d < rank; ++d)
      (d >= rank - normalizedRank ? trailing : leading)[d] = true;
    rowShape = keptShape(shape, trailing);
    columnShape = keptShape(shape, leading);
    identity = AffineMap::getMultiDimIdentityMap(rank, context);
    rowMap = keptMap(context, trailing);
    columnMap = keptMap(context, leading);
  }
  int64_t rank;
  /// Reduced-dimension flags: over each row / over the rows.
  SmallVector<bool> trailing, leading;
  SmallVector<int64_t> rowShape, columnShape;
  AffineMap identity, rowMap, columnMap;
};
} // namespace

/// layer_norm in the compute type: two-pass mean and variance per row, then
/// `(x - mean) * rstd * weight + bias` rounded once.
LogicalResult StepLowering::lowerLayerNorm(train::LayerNormOp op) {
  Location loc = op.getLoc();
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(inputType.getElementType());
  if (!isa<FloatType>(compute))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  double eps = op.getEps().convertToDouble();
  Value x = get(op.getInput());
  Value zero =
      buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
  Value sum =
      buildReduction(b, loc, x, {n.identity}, n.trailing, zero,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       return nb.create<arith::AddFOp>(
                           l, convertScalar(nb, l, args[0], compute), args[1]);
                     });
  auto rowType = RankedTensorType::get(n.rowShape, compute);
  Value mean = buildElementwise(
      b, loc, rowType, sum,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        return nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
      });
  Value squares = buildReduction(
      b, loc, ValueRange{x, mean}, {n.identity, n.rowMap}, n.trailing, zero,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value d = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, d, d),
                                        args[2]);
      });
  Value rstd = buildElementwise(
      b, loc, rowType, squares,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value variance = nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
        Value s = nb.create<math::SqrtOp>(
            l, nb.create<arith::AddFOp>(l, variance,
                                        floatConstant(nb, l, compute, eps)));
        return nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0),
                                        s);
      });
  SmallVector<Value> inputs{x, mean, rstd};
  SmallVector<AffineMap> maps{n.identity, n.rowMap, n.rowMap};
  Value weight = op.getWeight() ? get(op.getWeight()) : Value();
  Value bias = op.getBias() ? get(op.getBias()) : Value();
  if (weight) {
    inputs.push_back(reshapeTensor(
        b, loc, weight,
        RankedTensorType::get(n.columnShape, typeOf(weight).getElementType())));
    maps.push_back(n.columnMap);
  }
  if (bias) {
    inputs.push_back(reshapeTensor(
        b, loc, bias,
        RankedTensorType::get(n.columnShape, typeOf(bias).getElementType())));
    maps.push_back(n.columnMap);
  }
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Value result = buildMapped(
      b, loc, resultType, inputs, maps,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value v = nb.create<arith::MulFOp>(
            l,
            nb.create<arith::SubFOp>(l, convertScalar(nb, l, args[0], compute),
                                     args[1]),
            args[2]);
        size_t next = 3;
        if (weight)
          v = nb.create<arith::MulFOp>(
              l, v, convertScalar(nb, l, args[next++], compute));
        if (bias)
          v = nb.create<arith::AddFOp>(
              l, v, convertScalar(nb, l, args[next++], compute));
        return convertScalar(nb, l, v, element);
      });
  mapping.map(op.getResult(), result);
  auto meanType = typeOf(op.getMean());
  auto rstdType = typeOf(op.getRstd());
  mapping.map(
      op.getMean(),
      reshapeTensor(b, loc,
                    convertTensor(b, loc, mean, meanType.getElementType()),
                    meanType));
  mapping.map(
      op.getRstd(),
      reshapeTensor(b, loc,
                    convertTensor(b, loc, rstd, rstdType.getElementType()),
                    rstdType));
  return success();
}

/// rms_norm: `x * rstd * weight` with `rstd = 1 / sqrt(mean(x^2) + eps)`
/// rounded to rstd's type before use, as the interpreter does.
LogicalResult StepLowering::lowerRmsNorm(train::RmsNormOp op) {
  Location loc = op.getLoc();
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(inputType.getElementType());
  if (!isa<FloatType>(compute))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  double eps = op.getEps() ? op.getEps()->convertToDouble()
               : inputType.getElementType().isF64()
                   ? std::numeric_limits<double>::epsilon()
                   : double(std::numeric_limits<float>::epsilon());
  Value x = get(op.getInput());
  Value zero =
      buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
  Value squares =
      buildReduction(b, loc, x, {n.identity}, n.trailing, zero,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       Value v = convertScalar(nb, l, args[0], compute);
                       return nb.create<arith::AddFOp>(
                           l, nb.create<arith::MulFOp>(l, v, v), args[1]);
                     });
  auto rstdType = typeOf(op.getRstd());
  Type rstdElement = rstdType.getElementType();
  Value rstd = buildElementwise(
      b, loc, RankedTensorType::get(n.rowShape, rstdElement), squares,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value meanSquare = nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
        Value s = nb.create<math::SqrtOp>(
            l, nb.create<arith::AddFOp>(l, meanSquare,
                                        floatConstant(nb, l, compute, eps)));
        return convertScalar(
            nb, l,
            nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0), s),
            rstdElement);
      });
  SmallVector<Value> inputs{x, rstd};
  SmallVector<AffineMap> maps{n.identity, n.rowMap};
  Value weight = op.getWeight() ? get(op.getWeight()) : Value();
  if (weight) {
    inputs.push_back(reshapeTensor(
        b, loc, weight,
        RankedTensorType::get(n.columnShape, typeOf(weight).getElementType())));
    maps.push_back(n.columnMap);
  }
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  mapping.map(op.getResult(),
              buildMapped(b, loc, resultType, inputs, maps,
                          [&](OpBuilder &nb, Location l,
                              ArrayRef<Value> args) -> Value {
                            Value v = nb.create<arith::MulFOp>(
                                l, convertScalar(nb, l, args[0], compute),
                                convertScalar(nb, l, args[1], compute));
                            if (weight)
                              v = nb.create<arith::MulFOp>(
                                  l, v, convertScalar(nb, l, args[2], compute));
                            return convertScalar(nb, l, v, element);
                          }));
  mapping.map(op.getRstd(), reshapeTensor(b, loc, rstd, rstdType));
  return success();
}

namespace {
/// Shared backward of layer_norm (`mean` set) and rms_norm (no `mean`):
/// with `xhat = (x - mean) * rstd` and `g = grad * weight`,
/// `grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat))` (no `mean(g)`
/// term for rms_norm), `grad_weight = sum_rows(grad * xhat)`,
/// `grad_bias = sum_rows(grad)`; everything in the compute type, sums in
/// fp32 (fp64 for fp64).
struct NormBackward {
  OpBuilder &b;
  Location loc;
  NormDims n;
  Type compute;
  Value grad, x, mean, rstd, weight;
  int64_t length;

  /// xhat from the leading `args` (grad, x, mean?, rstd).
  Value xhat(OpBuilder &nb, Location l, ArrayRef<Value> args) {
    Value xv = convertScalar(nb, l, args[1], compute);
    if (mean)
      xv = nb.create<arith::SubFOp>(l, xv,
                                    convertScalar(nb, l, args[2], compute));
    return nb.create<arith::MulFOp>(
        l, xv, convertScalar(nb, l, args[mean ? 3 : 2], compute));
  }
  SmallVector<Value> rowInputs() {
    SmallVector<Value> v{grad, x};
    if (mean)
      v.push_back(mean);
    v.push_back(rstd);
    return v;
  }
  SmallVector<AffineMap> rowMaps() {
    SmallVector<AffineMap> m{n.identity, n.identity};
    if (mean)
      m.push_back(n.rowMap);
    m.push_back(n.rowMap);
    return m;
  }
  Value scaled(OpBuilder &nb, Location l, Value g, Value w) {
    Value gv = convertScalar(nb, l, g, compute);
    if (!w)
      return gv;
    return nb.create<arith::MulFOp>(l, gv, convertScalar(nb, l, w, compute));
  }

  /// Per-row sum of `g` (withXhat: of `g * xhat`).
  Value rowSum(bool withXhat) {
    SmallVector<Value> inputs = rowInputs();
    SmallVector<AffineMap> maps = rowMaps();
    if (weight) {
      inputs.push_back(weight);
      maps.push_back(n.columnMap);
    }
    Value zero =
        buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
    return buildReduction(
        b, loc, inputs, maps, n.trailing, zero,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          size_t count = inputs.size();
          Value g = scaled(nb, l, args[0], weight ? args[count - 1] : Value());
          if (withXhat)
            g = nb.create<arith::MulFOp>(l, g,
                                         xhat(nb, l, SmallVector<Value>(args)));
          return nb.create<arith::AddFOp>(l, g, args[count]);
        });
  }

  Value gradInput(RankedTensorType type) {
    Value sumGX = rowSum(true);
    Value sumG = mean ? rowSum(false) : Value();
    SmallVector<Value> inputs = rowInputs();
    SmallVector<AffineMap> maps = rowMaps();
    inputs.push_back(sumGX);
    maps.push_back(n.rowMap);
    if (sumG) {
      inputs.push_back(sumG);
      maps.push_back(n.rowMap);
    }
    if (weight) {
      inputs.push_back(weight);
      maps.push_back(n.columnMap);
    }
    Type element = type.getElementType();
    size_t base = mean ? 4 : 3;
    return buildMapped(
        b, loc, type, inputs, maps,
        [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
          Value len = floatConstant(nb, l, compute, double(length));
          Value g = scaled(nb, l, args[0], weight ? args.back() : Value());
          Value h = xhat(nb, l, args);
          Value v = nb.create<arith::SubFOp>(
              l, g,
              nb.create<arith::MulFOp>(
                  l, h, nb.create<arith::DivFOp>(l, args[base], len)));
          if (mean)
            v = nb.create<arith::SubFOp>(
                l, v, nb.create<arith::DivFOp>(l, args[base + 1], len));
          Value r = convertScalar(nb, l, args[mean ? 3 : 2], compute);
          return convertScalar(nb, l, nb.create<arith::MulFOp>(l, r, v),
                               element);
        });
  }

  /// Column sums over the rows of `grad` (withXhat: `grad * xhat`).
  Value columnSum(RankedTensorType type, bool withXhat) {
    Value zero =
        buildFilled(b, loc, n.columnShape, floatConstant(b, loc, compute, 0));
    Value acc = buildReduction(
        b, loc, rowInputs(), rowMaps(), n.leading, zero,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value g = convertScalar(nb, l, args[0], compute);
          if (withXhat)
            g = nb.create<arith::MulFOp>(l, g,
                                         xhat(nb, l, SmallVector<Value>(args)));
          return nb.create<arith::AddFOp>(l, g, args.back());
        });
    acc = convertTensor(b, loc, acc, type.getElementType());
    return reshapeTensor(b, loc, acc, type);
  }
};
} // namespace

LogicalResult
StepLowering::lowerLayerNormBackward(train::LayerNormBackwardOp op) {
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(typeOf(op.getGradInput()).getElementType());
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  Location loc = op.getLoc();
  auto rows = [&](Value v) {
    return reshapeTensor(
        b, loc, get(v),
        RankedTensorType::get(n.rowShape, typeOf(v).getElementType()));
  };
  Value weight;
  if (op.getWeight())
    weight = reshapeTensor(
        b, loc, get(op.getWeight()),
        RankedTensorType::get(n.columnShape,
                              typeOf(op.getWeight()).getElementType()));
  NormBackward nb{b,
                  loc,
                  n,
                  compute,
                  get(op.getGrad()),
                  get(op.getInput()),
                  rows(op.getMean()),
                  rows(op.getRstd()),
                  weight,
                  length};
  mapping.map(op.getGradInput(), nb.gradInput(typeOf(op.getGradInput())));
  mapping.map(op.getGradWeight(),
              nb.columnSum(typeOf(op.getGradWeight()), true));
  mapping.map(op.getGradBias(), nb.columnSum(typeOf(op.getGradBias()), false));
  return success();
}

LogicalResult StepLowering::lowerRmsNormBackward(train::RmsNormBackwardOp op) {
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(typeOf(op.getGradInput()).getElementType());
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  Location loc = op.getLoc();
  Value weight;
  if (op.getWeight())
    weight = reshapeTensor(
        b, loc, get(op.getWeight()),
        RankedTensorType::get(n.columnShape,
                              typeOf(op.getWeight()).getElementType()));
  Value rstd = reshapeTensor(
      b, loc, get(op.getRstd()),
      RankedTensorType::get(n.rowShape, typeOf(op.getRstd()).getElementType()));
  NormBackward nb{
      b,       loc,  n,      compute, get(op.getGrad()), get(op.getInput()),
      Value(), rstd, weight, length};
  mapping.map(op.getGradInput(), nb.gradInput(typeOf(op.getGradInput())));
  mapping.map(op.getGradWeight(),
              nb.columnSum(typeOf(op.getGradWeight()), true));
  return success();
}

LogicalResult StepLowering::lower(Operation *op) {
  Location loc = op->getLoc();
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<train::AddOp, train::SubOp, train::MulOp, train::DivOp,
            train::PowOp, train::MaximumOp, train::MinimumOp>(
          [&](Operation *op) { return lowerBinary(op); })
      .Case<train::EqOp, train::NeOp, train::LtOp, train::LeOp, train::GtOp,
            train::GeOp>([&](auto o) {
        auto [fpred, ipred] = *getComparePredicates(o);
        return lowerCompare(o, fpred, ipred, o.getLhs(), o.getRhs());
      })
      .Case<train::AddScalarOp, train::SubScalarOp, train::RsubScalarOp,
            train::MulScalarOp, train::DivScalarOp, train::PowScalarOp,
            train::EqScalarOp, train::NeScalarOp, train::LtScalarOp,
            train::LeScalarOp, train::GtScalarOp, train::GeScalarOp>(
          [&](auto o) { return lowerScalar(o, o.getScalar()); })
      .Case<train::NegOp, train::AbsOp, train::ExpOp, train::LogOp,
            train::SqrtOp, train::RsqrtOp, train::ReciprocalOp,
            train::SigmoidOp, train::TanhOp, train::ErfOp, train::SinOp,
            train::CosOp, train::ReluOp, train::SiluOp, train::LogicalNotOp,
            train::GeluOp>([&](Operation *op) { return lowerUnary(op); })
      .Case([&](train::WhereOp o) {
        auto resultType = typeOf(o.getResult());
        Type element = resultType.getElementType();
        bind(o,
             buildElementwise(
                 b, loc, resultType,
                 {get(o.getCondition()), get(o.getLhs()), get(o.getRhs())},
                 [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                   Value c = convertScalar(nb, l, args[0], nb.getI1Type());
                   return nb.create<arith::SelectOp>(
                       l, c, convertScalar(nb, l, args[1], element),
                       convertScalar(nb, l, args[2], element));
                 }));
        return success();
      })
      .Case([&](train::MaskedFillOp o) {
        auto resultType = typeOf(o.getResult());
        Type element = resultType.getElementType();
        bind(o,
             buildElementwise(
                 b, loc, resultType, {get(o.getInput()), get(o.getMask())},
                 [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                   Value c = convertScalar(nb, l, args[1], nb.getI1Type());
                   Value v = scalarConstant(nb, l, o.getValue(), element);
                   return nb.create<arith::SelectOp>(
                       l, c, v, convertScalar(nb, l, args[0], element));
                 }));
        return success();
      })
      .Case([&](train::CastOp o) {
        bind(o, convertTensor(b, loc, get(o.getInput()),
                              typeOf(o.getResult()).getElementType()));
        return success();
      })
      .Case([&](train::FullOp o) {
        auto type = typeOf(o.getResult());
        bind(o, buildFilled(b, loc, type.getShape(),
                            scalarConstant(b, loc, o.getValue(),
                                           type.getElementType())));
        return success();
      })
      .Case([&](train::ViewOp o) {
        bind(o,
             reshapeTensor(b, loc, get(o.getInput()), typeOf(o.getResult())));
        return success();
      })
      .Case([&](train::ExpandOp o) {
        bind(o,
             buildElementwise(b, loc, typeOf(o.getResult()), get(o.getInput()),
                              [](OpBuilder &, Location, ArrayRef<Value> args) {
                                return args[0];
                              }));
        return success();
      })
      .Case([&](train::PermuteOp o) {
        auto type = typeOf(o.getResult());
        Value init = b.create<tensor::EmptyOp>(loc, type.getShape(),
                                               type.getElementType());
        bind(o, b.create<linalg::TransposeOp>(loc, get(o.getInput()), init,
                                              o.getDims())
                    .getResult()[0]);
        return success();
      })
      .Case([&](train::SliceOp o) {
        auto inputType = typeOf(o.getInput());
        auto type = typeOf(o.getResult());
        int64_t dim = o.getDim();
        SmallVector<OpFoldResult> offsets(inputType.getRank(),
                                          b.getIndexAttr(0));
        SmallVector<OpFoldResult> sizes,
            strides(inputType.getRank(), b.getIndexAttr(1));
        for (int64_t size : type.getShape())
          sizes.push_back(b.getIndexAttr(size));
        offsets[dim] = b.getIndexAttr(train::normalizeSliceBound(
            o.getStart(), inputType.getDimSize(dim)));
        strides[dim] = b.getIndexAttr(o.getStep());
        bind(o, b.create<tensor::ExtractSliceOp>(loc, type, get(o.getInput()),
                                                 offsets, sizes, strides));
        return success();
      })
      .Case([&](train::SliceScatterOp o) {
        auto inputType = typeOf(o.getInput());
        auto sourceType = typeOf(o.getSource());
        int64_t dim = o.getDim();
        SmallVector<OpFoldResult> offsets(inputType.getRank(),
                                          b.getIndexAttr(0));
        SmallVector<OpFoldResult> sizes,
            strides(inputType.getRank(), b.getIndexAttr(1));
        for (int64_t size : sourceType.getShape())
          sizes.push_back(b.getIndexAttr(size));
        offsets[dim] = b.getIndexAttr(train::normalizeSliceBound(
            o.getStart(), inputType.getDimSize(dim)));
        strides[dim] = b.getIndexAttr(o.getStep());
        Type element = typeOf(o.getResult()).getElementType();
        Value source = convertTensor(b, loc, get(o.getSource()), element);
        Value dest = convertTensor(b, loc, get(o.getInput()), element);
        bind(o, b.create<tensor::InsertSliceOp>(loc, source, dest, offsets,
                                                sizes, strides));
        return success();
      })
      .Case([&](train::ConcatOp o) {
        auto type = typeOf(o.getResult());
        int64_t dim = o.getDim();
        Value result = b.create<tensor::EmptyOp>(loc, type.getShape(),
                                                 type.getElementType());
        int64_t offset = 0;
        for (Value input : o.getInputs()) {
          auto inputType = typeOf(input);
          SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
          SmallVector<OpFoldResult> sizes,
              strides(type.getRank(), b.getIndexAttr(1));
          for (int64_t size : inputType.getShape())
            sizes.push_back(b.getIndexAttr(size));
          offsets[dim] = b.getIndexAttr(offset);
          offset += inputType.getDimSize(dim);
          Value source =
              convertTensor(b, loc, get(input), type.getElementType());
          result = b.create<tensor::InsertSliceOp>(loc, source, result, offsets,
                                                   sizes, strides);
        }
        bind(o, result);
        return success();
      })
      .Case([&](train::SumOp o) {
        return lowerReduce(o, o.getInput(), o.getDims(), "sum");
      })
      .Case([&](train::MeanOp o) {
        return lowerReduce(o, o.getInput(), o.getDims(), "mean");
      })
      .Case([&](train::AmaxOp o) {
        return lowerReduce(o, o.getInput(), o.getDims(), "amax");
      })
      .Case([&](train::SoftmaxOp o) {
        return lowerSoftmax(o, o.getInput(), o.getDim(), /*logarithm=*/false);
      })
      .Case([&](train::LogSoftmaxOp o) {
        return lowerSoftmax(o, o.getInput(), o.getDim(), /*logarithm=*/true);
      })
      .Case([&](train::SoftmaxBackwardOp o) {
        return lowerSoftmaxBackward(o, o.getGrad(), o.getOutput(), o.getDim(),
                                    /*logarithm=*/false);
      })
      .Case([&](train::LogSoftmaxBackwardOp o) {
        return lowerSoftmaxBackward(o, o.getGrad(), o.getOutput(), o.getDim(),
                                    /*logarithm=*/true);
      })
      .Case([&](train::GeluBackwardOp o) { return lowerGeluBackward(o); })
      .Case([&](train::ClampOp o) { return lowerClamp(o); })
      .Case([&](train::ArangeOp o) { return lowerArange(o); })
      .Case([&](train::LayerNormOp o) { return lowerLayerNorm(o); })
      .Case([&](train::LayerNormBackwardOp o) {
        return lowerLayerNormBackward(o);
      })
      .Case([&](train::RmsNormOp o) { return lowerRmsNorm(o); })
      .Case([&](train::RmsNormBackwardOp o) { return lowerRmsNormBackward(o); })
      .Case([&](train::MatmulOp o) {
        return lowerMatmul(o, o.getLhs(), o.getRhs(), false, Value(), 1.0, 1.0);
      })
      .Case([&](train::BatchMatmulOp o) {
        return lowerMatmul(o, o.getLhs(), o.getRhs(), true, Value(), 1.0, 1.0);
      })
      .Case([&](train::AddmmOp o) {
        return lowerMatmul(o, o.getLhs(), o.getRhs(), false, o.getBias(),
                           o.getBeta().convertToDouble(),
                           o.getAlpha().convertToDouble());
      })
      .Case([&](train::EmbeddingOp o) {
        // result[i..., c] = weight[indices[i...], c]
        auto type = typeOf(o.getResult());
        int64_t rank = type.getRank();
        if (typeOf(o.getWeight()).getRank() != 2)
          return LogicalResult(o.emitOpError()
                               << "has no lowering for a weight of rank "
                               << typeOf(o.getWeight()).getRank());
        SmallVector<AffineExpr> exprs;
        for (int64_t d = 0; d + 1 < rank; ++d)
          exprs.push_back(b.getAffineDimExpr(d));
        bind(o,
             buildGather(b, loc, type, get(o.getWeight()), get(o.getIndices()),
                         AffineMap::get(rank, 0, exprs, b.getContext()),
                         [&](OpBuilder &nb, Location l, Value row) {
                           return SmallVector<Value>{
                               row, nb.create<linalg::IndexOp>(l, rank - 1)};
                         }));
        return success();
      })
      .Case([&](train::GatherOp o) {
        // result[i, j, k] = input[.., index[i, j, k] at dim, ..]
        auto type = typeOf(o.getResult());
        int64_t dim = o.getDim();
        bind(o, buildGather(
                    b, loc, type, get(o.getInput()), get(o.getIndex()),
                    b.getMultiDimIdentityMap(type.getRank()),
                    [&](OpBuilder &nb, Location l, Value at) {
                      SmallVector<Value> coordinates;
                      for (int64_t d = 0; d < type.getRank(); ++d)
                        coordinates.push_back(
                            d == dim ? at : nb.create<linalg::IndexOp>(l, d));
                      return coordinates;
                    }));
        return success();
      })
      .Case([&](train::IndexSelectOp o) {
        // result[.., i at dim, ..] = input[.., index[i], ..]
        auto type = typeOf(o.getResult());
        int64_t dim = o.getDim();
        AffineMap indexMap = AffineMap::get(
            type.getRank(), 0, b.getAffineDimExpr(dim), b.getContext());
        bind(o, buildGather(
                    b, loc, type, get(o.getInput()), get(o.getIndex()),
                    indexMap, [&](OpBuilder &nb, Location l, Value at) {
                      SmallVector<Value> coordinates;
                      for (int64_t d = 0; d < type.getRank(); ++d)
                        coordinates.push_back(
                            d == dim ? at : nb.create<linalg::IndexOp>(l, d));
                      return coordinates;
                    }));
        return success();
      })
      .Case<train::ScatterOp, train::ScatterValueOp>([&](Operation *op) {
        // result[.., index[i, j] at dim, ..] (+)= source[i, j]
        Value input = op->getOperand(0), index = op->getOperand(1);
        Type element = typeOf(op->getResult(0)).getElementType();
        auto scatter = dyn_cast<train::ScatterOp>(op);
        auto scatterValue = dyn_cast<train::ScatterValueOp>(op);
        int64_t dim = scatter ? int64_t(scatter.getDim())
                              : int64_t(scatterValue.getDim());
        bool accumulate = scatter && scatter.getReduce() == "add";
        Value dest = convertTensor(b, loc, get(input), element);
        bind(op,
             buildScatterLoops(
                 b, loc, dest, typeOf(index).getShape(), accumulate,
                 [&](OpBuilder &nb, Location l, ValueRange ivs) {
                   ScatterWrite w;
                   w.coordinates.assign(ivs.begin(), ivs.end());
                   w.coordinates[dim] = toIndex(
                       nb, l, nb.create<tensor::ExtractOp>(l, get(index), ivs));
                   w.value =
                       scatter ? convertScalar(
                                     nb, l,
                                     nb.create<tensor::ExtractOp>(
                                         l, get(scatter.getSource()), ivs),
                                     element)
                               : scalarConstant(nb, l, scatterValue.getValue(),
                                                element);
                   return w;
                 }));
        return success();
      })
      .Case([&](train::IndexPutOp o) {
        // result[indices[i...], rest...] (+)= values[i..., rest...]
        auto type = typeOf(o.getResult());
        auto indicesType = typeOf(o.getIndices());
        Type element = type.getElementType();
        SmallVector<int64_t> shape(indicesType.getShape());
        llvm::append_range(shape, type.getShape().drop_front());
        int64_t indexRank = indicesType.getRank();
        Value dest = convertTensor(b, loc, get(o.getInput()), element);
        bind(o,
             buildScatterLoops(
                 b, loc, dest, shape, o.getAccumulate(),
                 [&](OpBuilder &nb, Location l, ValueRange ivs) {
                   ScatterWrite w;
                   Value row = nb.create<tensor::ExtractOp>(
                       l, get(o.getIndices()), ivs.take_front(indexRank));
                   // Negative rows count from the end, as in torch.
                   Value r64 = convertScalar(nb, l, row, nb.getI64Type());
                   Value zero =
                       nb.create<arith::ConstantOp>(l, nb.getI64IntegerAttr(0));
                   Value size = nb.create<arith::ConstantOp>(
                       l, nb.getI64IntegerAttr(type.getDimSize(0)));
                   Value negative = nb.create<arith::CmpIOp>(
                       l, arith::CmpIPredicate::slt, r64, zero);
                   r64 = nb.create<arith::SelectOp>(
                       l, negative, nb.create<arith::AddIOp>(l, r64, size),
                       r64);
                   w.coordinates.push_back(toIndex(nb, l, r64));
                   llvm::append_range(w.coordinates, ivs.drop_front(indexRank));
                   w.value = convertScalar(
                       nb, l,
                       nb.create<tensor::ExtractOp>(
                           l, get(o.getValues()),
                           broadcastCoordinates(nb, l, typeOf(o.getValues()),
                                                shape, ivs)),
                       element);
                   return w;
                 }));
        return success();
      })
      .Case([&](train::EmbeddingBackwardOp o) {
        // zeros[num_weights, d]; row indices[i...] += grad[i..., :], except
        // the padding row.
        auto type = typeOf(o.getResult());
        auto indicesType = typeOf(o.getIndices());
        Type element = type.getElementType();
        Type compute = getComputeType(element);
        if (!isa<FloatType>(compute))
          return LogicalResult(o.emitOpError()
                               << "has no lowering for integer gradients");
        SmallVector<int64_t> shape(indicesType.getShape());
        shape.push_back(type.getDimSize(1));
        int64_t indexRank = indicesType.getRank();
        int64_t padding = o.getPaddingIdx();
        Value dest = buildFilled(b, loc, type.getShape(),
                                 floatConstant(b, loc, element, 0.0));
        bind(o,
             buildScatterLoops(
                 b, loc, dest, shape, /*accumulate=*/true,
                 [&](OpBuilder &nb, Location l, ValueRange ivs) {
                   ScatterWrite w;
                   Value row = convertScalar(
                       nb, l,
                       nb.create<tensor::ExtractOp>(l, get(o.getIndices()),
                                                    ivs.take_front(indexRank)),
                       nb.getI64Type());
                   w.coordinates = {toIndex(nb, l, row), ivs.back()};
                   Value g = convertScalar(
                       nb, l,
                       nb.create<tensor::ExtractOp>(l, get(o.getGrad()), ivs),
                       element);
                   if (padding >= 0) {
                     Value isPadding = nb.create<arith::CmpIOp>(
                         l, arith::CmpIPredicate::eq, row,
                         nb.create<arith::ConstantOp>(
                             l, nb.getI64IntegerAttr(padding)));
                     g = nb.create<arith::SelectOp>(
                         l, isPadding, floatConstant(nb, l, element, 0.0), g);
                   }
                   w.value = g;
                   return w;
                 }));
        return success();
      })
      // Formed for the GPU (mantissa-fuse-attention): already on tensors,
      // with their outputs' storage.
      .Case<tensor::EmptyOp, train::AttentionKernelOp>([&](Operation *op) {
        b.clone(*op, mapping);
        return success();
      })
      .Default([&](Operation *op) {
        return op->emitOpError()
               << "has no lowering to linalg (mantissa-lower-train-to-linalg)";
      });
}

/// Builds the func.func of `step` before it; fails without leaving a
/// partial function behind.
LogicalResult lowerStep(train::StepOp step) {
  OpBuilder b(step);
  auto func = b.create<func::FuncOp>(step.getLoc(), step.getSymName(),
                                     step.getFunctionType());
  Block *entry = func.addEntryBlock();
  IRMapping mapping;
  for (auto [from, to] :
       llvm::zip(step.getBody().front().getArguments(), entry->getArguments()))
    mapping.map(from, to);
  b.setInsertionPointToStart(entry);
  StepLowering lowering(b, mapping);
  for (Operation &op : step.getBody().front()) {
    if (auto ret = dyn_cast<train::ReturnOp>(op)) {
      SmallVector<Value> results;
      for (Value v : ret.getOperands())
        results.push_back(mapping.lookup(v));
      b.create<func::ReturnOp>(ret.getLoc(), results);
      continue;
    }
    // Shard groups describe the optimizer's layout, not computation.
    if (isa<train::ShardGroupOp>(op))
      continue;
    if (failed(lowering.lower(&op))) {
      func.erase();
      return failure();
    }
  }
  step.erase();
  return success();
}

struct LowerTrainToLinalgPass
    : public mantissa::impl::LowerTrainToLinalgPassBase<
          LowerTrainToLinalgPass> {
  void runOnOperation() override {
    SmallVector<train::StepOp> steps(getOperation().getOps<train::StepOp>());
    bool failedAny = false;
    for (train::StepOp step : steps)
      failedAny |= failed(lowerStep(step));
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
