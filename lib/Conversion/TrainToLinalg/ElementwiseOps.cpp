//===- ElementwiseOps.cpp - Elementwise ops to linalg.generic -------------===//
//
// The elementwise family (train::ElementwiseOpInterface): one pattern lowers
// every member to one linalg.generic whose operands broadcast to the result
// and whose body is the op's scalar function, computed in fp32 for bf16 and
// fp16 and rounded once (train.cast is a conversion, nothing when the types
// agree). A new elementwise op is one case in lowerElementwise.
//
//===----------------------------------------------------------------------===//

#include "PopulatePatterns.h"
#include "Utils.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train_to_linalg;

namespace {

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

/// Elementwise arithmetic: operands convert to the compute type of the
/// promoted result, the op happens there, the result rounds once.
static LogicalResult lowerBinary(Operation *op, ValueRange operands,
                                 ConversionPatternRewriter &b) {
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
      b, loc, resultType, {operands[0], operands[1]},
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value x = convertScalar(nb, l, args[0], compute);
        Value y = convertScalar(nb, l, args[1], compute);
        Value r = buildArith(nb, l, *getArithKind(op), x, y, isFloat);
        return convertScalar(nb, l, r, element);
      });
  b.replaceOp(op, result);
  return success();
}

/// Comparisons: floats compare exactly in f64 (every f32/bf16 value is
/// representable), integers signed.
static LogicalResult lowerCompare(Operation *op, ValueRange operands,
                                  ConversionPatternRewriter &b) {
  auto predicates = *getComparePredicates(op);
  arith::CmpFPredicate fpred = predicates.first;
  arith::CmpIPredicate ipred = predicates.second;
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type lhsElement = typeOf(lhs).getElementType();
  Type rhsElement = typeOf(rhs).getElementType();
  bool anyFloat = isa<FloatType>(lhsElement) || isa<FloatType>(rhsElement);
  Value result = buildElementwise(
      b, loc, resultType, {operands[0], operands[1]},
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
  b.replaceOp(op, result);
  return success();
}

static LogicalResult lowerScalar(Operation *op, Attribute scalar,
                                 ValueRange operands,
                                 ConversionPatternRewriter &b) {
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
    b.replaceOp(
        op, buildElementwise(
                b, loc, resultType, operands[0],
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
  b.replaceOp(
      op, buildElementwise(
              b, loc, resultType, operands[0],
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

static LogicalResult lowerUnary(Operation *op, ValueRange operands,
                                ConversionPatternRewriter &b) {
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type inputElement = typeOf(op->getOperand(0)).getElementType();
  if (isa<train::LogicalNotOp>(op)) {
    b.replaceOp(
        op, buildElementwise(
                b, loc, resultType, operands[0],
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
  b.replaceOp(
      op,
      buildElementwise(
          b, loc, resultType, operands[0],
          [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
            Value x = convertScalar(nb, l, args[0], compute);
            auto c = [&](double v) { return floatConstant(nb, l, compute, v); };
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
                            l, nb.create<arith::MulFOp>(l, x,
                                                        c(0.7071067811865476)));
                      }
                      Value half = nb.create<arith::MulFOp>(l, c(0.5), x);
                      return nb.create<arith::MulFOp>(
                          l, half, nb.create<arith::AddFOp>(l, c(1.0), inner));
                    });
            return convertScalar(nb, l, r, element);
          }));
  return success();
}

/// An activation's gradient: one generic over `grad` and `input` whose
/// body is `derivative(builder, loc, grad, input, compute type)` (the
/// product with the gradient included), computed in fp32 for bf16 and fp16
/// and rounded once, as eager torch's one kernel computes it.
static LogicalResult lowerActivationGradient(
    Operation *op, ValueRange operands, ConversionPatternRewriter &b,
    function_ref<Value(OpBuilder &, Location, Value, Value, Type)> derivative) {
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute))
    return op->emitOpError() << "has no lowering for integer tensors";
  b.replaceOp(
      op, buildElementwise(
              b, loc, resultType, {operands[0], operands[1]},
              [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                Value g = convertScalar(nb, l, args[0], compute);
                Value x = convertScalar(nb, l, args[1], compute);
                return convertScalar(nb, l, derivative(nb, l, g, x, compute),
                                     element);
              }));
  return success();
}

/// The gradient of GELU with ATen's constants and order of operations.
static LogicalResult lowerGeluBackward(train::GeluBackwardOp op,
                                       ValueRange operands,
                                       ConversionPatternRewriter &b) {
  bool useTanh = op.getApproximate() == "tanh";
  return lowerActivationGradient(
      op, operands, b,
      [&](OpBuilder &nb, Location l, Value g, Value x, Type compute) -> Value {
        auto c = [&](double v) { return floatConstant(nb, l, compute, v); };
        auto mul = [&](Value a, Value bb) -> Value {
          return nb.create<arith::MulFOp>(l, a, bb);
        };
        auto add = [&](Value a, Value bb) -> Value {
          return nb.create<arith::AddFOp>(l, a, bb);
        };
        Value d;
        if (!useTanh) {
          Value cdf =
              mul(c(0.5),
                  add(c(1.0), nb.create<math::ErfOp>(l, mul(x, c(M_SQRT1_2)))));
          Value pdf = mul(c(M_2_SQRTPI * M_SQRT1_2 * 0.5),
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
          Value tanhDerivative =
              nb.create<arith::SubFOp>(l, c(1.0), mul(tanhInner, tanhInner));
          Value innerDerivative =
              mul(beta, add(c(1.0), mul(mul(c(3.0), kappa), square)));
          Value rightDerivative =
              mul(mul(left, tanhDerivative), innerDerivative);
          d = add(leftDerivative, rightDerivative);
        }
        return mul(g, d);
      });
}

/// The gradient of SiLU in the order of ATen's silu_backward kernel:
/// `grad * sigmoid * (1 + x * (1 - sigmoid))`, sigmoid `1 / (1 + exp(-x))`.
static LogicalResult lowerSiluBackward(train::SiluBackwardOp op,
                                       ValueRange operands,
                                       ConversionPatternRewriter &b) {
  return lowerActivationGradient(
      op, operands, b,
      [](OpBuilder &nb, Location l, Value g, Value x, Type compute) -> Value {
        Value one = floatConstant(nb, l, compute, 1.0);
        Value s = sigmoid(nb, l, x);
        Value oneMinus = nb.create<arith::SubFOp>(l, one, s);
        Value onePlus = nb.create<arith::AddFOp>(
            l, one, nb.create<arith::MulFOp>(l, x, oneMinus));
        return nb.create<arith::MulFOp>(l, nb.create<arith::MulFOp>(l, g, s),
                                        onePlus);
      });
}

/// clamp: NaN stays NaN, else `min(max(x, lo), hi)` with the bounds in the
/// tensor's type.
static LogicalResult lowerClamp(train::ClampOp op, ValueRange operands,
                                ConversionPatternRewriter &b) {
  Location loc = op.getLoc();
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (compute.isInteger(1))
    return op.emitOpError() << "has no lowering for boolean tensors";
  bool isFloat = isa<FloatType>(compute);
  Attribute lower = op.getMinAttr(), upper = op.getMaxAttr();
  b.replaceOp(
      op, buildElementwise(
              b, loc, resultType, operands[0],
              [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                Value x = convertScalar(nb, l, args[0], compute);
                auto bound = [&](Attribute a) {
                  return convertScalar(nb, l, scalarConstant(nb, l, a, element),
                                       compute);
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

/// `condition ? lhs : rhs`, both converted to the result's type.
static LogicalResult lowerWhere(train::WhereOp o, ValueRange operands,
                                ConversionPatternRewriter &b) {
  auto resultType = typeOf(o.getResult());
  Type element = resultType.getElementType();
  b.replaceOp(
      o, buildElementwise(
             b, o.getLoc(), resultType, {operands[0], operands[1], operands[2]},
             [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
               Value c = convertScalar(nb, l, args[0], nb.getI1Type());
               return nb.create<arith::SelectOp>(
                   l, c, convertScalar(nb, l, args[1], element),
                   convertScalar(nb, l, args[2], element));
             }));
  return success();
}

/// `mask ? value : input`, the scalar in the result's type.
static LogicalResult lowerMaskedFill(train::MaskedFillOp o, ValueRange operands,
                                     ConversionPatternRewriter &b) {
  auto resultType = typeOf(o.getResult());
  Type element = resultType.getElementType();
  b.replaceOp(
      o, buildElementwise(
             b, o.getLoc(), resultType, {operands[0], operands[1]},
             [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
               Value c = convertScalar(nb, l, args[1], nb.getI1Type());
               Value v = scalarConstant(nb, l, o.getValue(), element);
               return nb.create<arith::SelectOp>(
                   l, c, v, convertScalar(nb, l, args[0], element));
             }));
  return success();
}

/// Emits the linalg form of the elementwise `op` (its lowered operands
/// `operands`) and replaces it; the one place that names the family's ops.
static LogicalResult lowerElementwise(Operation *op, ValueRange operands,
                                      ConversionPatternRewriter &b) {
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<train::AddOp, train::SubOp, train::MulOp, train::DivOp,
            train::PowOp, train::MaximumOp, train::MinimumOp>(
          [&](Operation *op) { return lowerBinary(op, operands, b); })
      .Case<train::EqOp, train::NeOp, train::LtOp, train::LeOp, train::GtOp,
            train::GeOp>(
          [&](Operation *op) { return lowerCompare(op, operands, b); })
      .Case<train::AddScalarOp, train::SubScalarOp, train::RsubScalarOp,
            train::MulScalarOp, train::DivScalarOp, train::PowScalarOp,
            train::EqScalarOp, train::NeScalarOp, train::LtScalarOp,
            train::LeScalarOp, train::GtScalarOp, train::GeScalarOp>(
          [&](auto o) { return lowerScalar(o, o.getScalar(), operands, b); })
      .Case<train::NegOp, train::AbsOp, train::ExpOp, train::LogOp,
            train::SqrtOp, train::RsqrtOp, train::ReciprocalOp,
            train::SigmoidOp, train::TanhOp, train::ErfOp, train::SinOp,
            train::CosOp, train::ReluOp, train::SiluOp, train::LogicalNotOp,
            train::GeluOp>(
          [&](Operation *op) { return lowerUnary(op, operands, b); })
      .Case([&](train::WhereOp o) { return lowerWhere(o, operands, b); })
      .Case([&](train::MaskedFillOp o) {
        return lowerMaskedFill(o, operands, b);
      })
      .Case([&](train::GeluBackwardOp o) {
        return lowerGeluBackward(o, operands, b);
      })
      .Case([&](train::SiluBackwardOp o) {
        return lowerSiluBackward(o, operands, b);
      })
      .Case([&](train::ClampOp o) { return lowerClamp(o, operands, b); })
      .Case([&](train::CastOp o) {
        b.replaceOp(o, convertTensor(b, o.getLoc(), operands[0],
                                     typeOf(o.getResult()).getElementType()));
        return success();
      })
      .Default([&](Operation *op) {
        return op->emitOpError()
               << "is elementwise but has no lowering to linalg";
      });
}

/// Lowers every op of the elementwise family.
struct ElementwiseOpLowering
    : OpInterfaceConversionPattern<train::ElementwiseOpInterface> {
  using OpInterfaceConversionPattern::OpInterfaceConversionPattern;

  LogicalResult
  matchAndRewrite(train::ElementwiseOpInterface op, ArrayRef<Value> operands,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerElementwise(op, operands, rewriter);
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateElementwisePatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  patterns.add<ElementwiseOpLowering>(typeConverter, patterns.getContext());
}
