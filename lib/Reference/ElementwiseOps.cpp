//===- ElementwiseOps.cpp - Elementwise operations and casts --------------===//
//
// Arithmetic, comparisons, math functions, selection and train.cast, with
// torch's CPU numerics: the operands are converted to the promoted type the
// result carries, floating-point math runs in the compute type (fp32 for
// bf16/fp16, see TrainTypeRules.h) and every result is rounded once. As in
// ATen's kernels, a Python scalar (or a one-element right operand) of a
// reduced-precision `mul` or `div` is read in fp32 without first being
// rounded to bf16/fp16, while `add`, `sub` and the comparisons round it to
// the common type first.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

namespace {
enum class Arith { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class Compare { Eq, Ne, Lt, Le, Gt, Ge };
enum class Unary {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Sigmoid,
  Tanh,
  Erf,
  Sin,
  Cos,
  Relu,
  Silu,
};
} // namespace

//===----------------------------------------------------------------------===//
// Scalar semantics
//===----------------------------------------------------------------------===//

template <typename T> static T applyArith(Arith kind, T lhs, T rhs) {
  switch (kind) {
  case Arith::Add:
    return lhs + rhs;
  case Arith::Sub:
    return lhs - rhs;
  case Arith::Mul:
    return lhs * rhs;
  case Arith::Div:
    return lhs / rhs;
  case Arith::Pow:
    return std::pow(lhs, rhs);
  case Arith::Maximum:
  case Arith::Minimum:
    if (std::isnan(lhs) || std::isnan(rhs))
      return std::numeric_limits<T>::quiet_NaN();
    return kind == Arith::Maximum ? std::max(lhs, rhs) : std::min(lhs, rhs);
  }
  llvm_unreachable("unknown arithmetic kind");
}

/// torch's `powi`: integer powers by squaring, wrapping; negative exponents
/// give 1 for a base of 1, +-1 for -1 and 0 otherwise.
static int64_t integerPower(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (-exponent) % 2 ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, factor = static_cast<uint64_t>(base);
  for (auto e = static_cast<uint64_t>(exponent); e != 0; e >>= 1) {
    if (e & 1)
      result *= factor;
    factor *= factor;
  }
  return static_cast<int64_t>(result);
}

/// Integer arithmetic wraps: it is done on uint64 and wrapped to the type.
static int64_t applyIntegerArith(Arith kind, int64_t lhs, int64_t rhs) {
  auto l = static_cast<uint64_t>(lhs), r = static_cast<uint64_t>(rhs);
  switch (kind) {
  case Arith::Add:
    return static_cast<int64_t>(l + r);
  case Arith::Sub:
    return static_cast<int64_t>(l - r);
  case Arith::Mul:
    return static_cast<int64_t>(l * r);
  case Arith::Pow:
    return integerPower(lhs, rhs);
  case Arith::Maximum:
    return std::max(lhs, rhs);
  case Arith::Minimum:
    return std::min(lhs, rhs);
  case Arith::Div:
    break;
  }
  llvm_unreachable("true division never has an integer result");
}

template <typename T> static bool applyCompare(Compare kind, T lhs, T rhs) {
  switch (kind) {
  case Compare::Eq:
    return lhs == rhs;
  case Compare::Ne:
    return lhs != rhs;
  case Compare::Lt:
    return lhs < rhs;
  case Compare::Le:
    return lhs <= rhs;
  case Compare::Gt:
    return lhs > rhs;
  case Compare::Ge:
    return lhs >= rhs;
  }
  llvm_unreachable("unknown comparison");
}

/// The formulas of ATen's CPU kernels (UnaryOpsKernel.cpp, Activation.cpp).
template <typename T> static T applyUnary(Unary kind, T x) {
  switch (kind) {
  case Unary::Neg:
    return -x;
  case Unary::Abs:
    return std::abs(x);
  case Unary::Exp:
    return std::exp(x);
  case Unary::Log:
    return std::log(x);
  case Unary::Sqrt:
    return std::sqrt(x);
  case Unary::Rsqrt:
    return T(1) / std::sqrt(x);
  case Unary::Reciprocal:
    return T(1) / x;
  case Unary::Sigmoid:
    return T(1) / (T(1) + std::exp(-x));
  case Unary::Tanh:
    return std::tanh(x);
  case Unary::Erf:
    return std::erf(x);
  case Unary::Sin:
    return std::sin(x);
  case Unary::Cos:
    return std::cos(x);
  case Unary::Relu:
    // clamp_min(x, 0): NaN stays, -0 stays.
    return x < T(0) ? T(0) : x;
  case Unary::Silu:
    return x / (T(1) + std::exp(-x));
  }
  llvm_unreachable("unknown unary kind");
}

static int64_t applyIntegerUnary(Unary kind, int64_t x) {
  switch (kind) {
  case Unary::Neg:
    return static_cast<int64_t>(0 - static_cast<uint64_t>(x));
  case Unary::Abs:
    return x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x;
  case Unary::Relu:
    return std::max<int64_t>(x, 0);
  default:
    llvm_unreachable("floating-point math on an integer tensor");
  }
}

//===----------------------------------------------------------------------===//
// Tensor kernels
//===----------------------------------------------------------------------===//

/// `lhs op rhs` elementwise; both have the result's shape, `lhs` the result's
/// element type, and `rhs` the result's or (for a float result) any float
/// type whose values are read as they are.
static Tensor arithmetic(Arith kind, const Tensor &lhs, const Tensor &rhs,
                         RankedTensorType type) {
  Type element = type.getElementType();
  Tensor result(element, type.getShape());
  int64_t count = result.getNumElements();
  if (!result.isFloatingPoint()) {
    for (int64_t i = 0; i < count; ++i)
      result.getIntegers()[i] = wrapToInteger(
          applyIntegerArith(kind, lhs.getIntegers()[i], rhs.getIntegers()[i]),
          element);
    return result;
  }
  withComputeType(element, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < count; ++i)
      result.getFloats()[i] =
          roundToFloat(applyArith<T>(kind, static_cast<T>(lhs.getFloats()[i]),
                                     static_cast<T>(rhs.getFloats()[i])),
                       element);
  });
  return result;
}

/// A comparison of two tensors of the same shape and element type.
static Tensor comparison(Compare kind, const Tensor &lhs, const Tensor &rhs,
                         RankedTensorType type) {
  Tensor result(type.getElementType(), type.getShape());
  for (int64_t i = 0, e = result.getNumElements(); i < e; ++i)
    result.getIntegers()[i] =
        lhs.isFloatingPoint()
            ? applyCompare(kind, lhs.getFloats()[i], rhs.getFloats()[i])
            : applyCompare(kind, lhs.getIntegers()[i], rhs.getIntegers()[i]);
  return result;
}

/// A tensor of `shape` and `elementType` holding `scalar` converted to it.
static Tensor filledWithScalar(Attribute scalar, Type elementType,
                               ArrayRef<int64_t> shape) {
  Tensor result(elementType, shape);
  if (result.isFloatingPoint())
    std::fill(result.getFloats().begin(), result.getFloats().end(),
              scalarToFloat(scalar, elementType));
  else
    std::fill(result.getIntegers().begin(), result.getIntegers().end(),
              scalarToInteger(scalar, elementType));
  return result;
}

/// Whether `type` is bf16 or fp16, the types ATen's reduced-float kernels
/// special-case.
static bool isReducedFloat(Type type) { return type.isBF16() || type.isF16(); }

static LogicalResult evaluateBinary(Operation *op, Arith kind,
                                    Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  Type element = type.getElementType();
  const Tensor &lhs = env.lookup(op->getOperand(0));
  const Tensor &rhs = env.lookup(op->getOperand(1));
  // ATen's mul and div read a one-element right operand of a bf16/fp16
  // product at its original precision (TensorIterator's
  // original_scalar_value), not rounded to the common type.
  Type rhsType = element;
  if ((kind == Arith::Mul || kind == Arith::Div) && isReducedFloat(element) &&
      rhs.getNumElements() == 1 && rhs.getElementType() != element)
    rhsType = Float32Type::get(op->getContext());
  Tensor result = arithmetic(
      kind, convertTensor(broadcastTensor(lhs, type.getShape()), element),
      convertTensor(broadcastTensor(rhs, type.getShape()), rhsType), type);
  env.bind(op->getResult(0), std::move(result));
  return success();
}

static LogicalResult evaluateCompare(Operation *op, Compare kind,
                                     Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  const Tensor &lhs = env.lookup(op->getOperand(0));
  const Tensor &rhs = env.lookup(op->getOperand(1));
  Type promoted = train::resultType(
      op->getContext(), {{lhs.getElementType(), lhs.getRank() == 0},
                         {rhs.getElementType(), rhs.getRank() == 0}});
  env.bind(
      op->getResult(0),
      comparison(kind,
                 convertTensor(broadcastTensor(lhs, type.getShape()), promoted),
                 convertTensor(broadcastTensor(rhs, type.getShape()), promoted),
                 type));
  return success();
}

/// `input op scalar` (or `scalar op input` when `reversed`).
static LogicalResult evaluateScalarArith(Operation *op, Arith kind,
                                         Attribute scalar, bool reversed,
                                         Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  Type element = type.getElementType();
  Tensor input = convertTensor(env.lookup(op->getOperand(0)), element);
  Tensor constant;
  if ((kind == Arith::Mul || kind == Arith::Div) && isReducedFloat(element))
    constant = filledWithScalar(scalar, Float32Type::get(op->getContext()),
                                type.getShape());
  else
    constant = filledWithScalar(scalar, element, type.getShape());
  env.bind(op->getResult(0), reversed
                                 ? arithmetic(kind, constant, input, type)
                                 : arithmetic(kind, input, constant, type));
  return success();
}

static LogicalResult evaluateScalarCompare(Operation *op, Compare kind,
                                           Attribute scalar, Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  const Tensor &input = env.lookup(op->getOperand(0));
  Type promoted = train::resultType(
      op->getContext(),
      {{input.getElementType(), input.getRank() == 0},
       {train::scalarElementType(scalar), false, /*isScalar=*/true}});
  env.bind(op->getResult(0),
           comparison(kind, convertTensor(input, promoted),
                      filledWithScalar(scalar, promoted, type.getShape()),
                      type));
  return success();
}

/// torch's pow(Tensor, Scalar) (PowKernel.cpp): exponents 0.5, -0.5 and -1
/// are sqrt, rsqrt and reciprocal; 2, 3 and -2 are products, rounded after
/// each step in bf16/fp16 as their operators do; other exponents call pow in
/// double for fp32/fp64 and in fp32 with the exponent rounded to the tensor's
/// type for bf16/fp16.
static LogicalResult evaluatePowScalar(train::PowScalarOp op,
                                       Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  Tensor input = convertTensor(env.lookup(op.getInput()), element);
  Tensor result(element, type.getShape());
  int64_t count = result.getNumElements();
  if (!result.isFloatingPoint()) {
    int64_t exponent = scalarToInteger(op.getScalar(), element);
    if (exponent < 0)
      return op.emitOpError()
             << "integers cannot be raised to the negative integer power "
             << exponent;
    for (int64_t i = 0; i < count; ++i)
      result.getIntegers()[i] = wrapToInteger(
          integerPower(input.getIntegers()[i], exponent), element);
    env.bind(op.getResult(), std::move(result));
    return success();
  }
  double exponent = scalarAsDouble(op.getScalar());
  auto round = [&](double value) { return roundToFloat(value, element); };
  for (int64_t i = 0; i < count; ++i) {
    double x = input.getFloats()[i];
    double value;
    if (element.isF64()) {
      value = exponent == 2      ? x * x
              : exponent == 3    ? x * x * x
              : exponent == -2   ? 1.0 / (x * x)
              : exponent == 0.5  ? std::sqrt(x)
              : exponent == -0.5 ? 1.0 / std::sqrt(x)
              : exponent == -1   ? 1.0 / x
                                 : std::pow(x, exponent);
    } else {
      auto xf = static_cast<float>(x);
      if (exponent == 2)
        value = xf * xf;
      else if (exponent == 3)
        value = static_cast<float>(round(xf * xf)) * xf;
      else if (exponent == -2)
        value = 1.0f / static_cast<float>(round(xf * xf));
      else if (exponent == 0.5)
        value = std::sqrt(xf);
      else if (exponent == -0.5)
        value = 1.0f / std::sqrt(xf);
      else if (exponent == -1)
        value = 1.0f / xf;
      else if (element.isF32())
        value = static_cast<float>(std::pow(x, exponent));
      else
        value = std::pow(xf, static_cast<float>(round(exponent)));
    }
    result.getFloats()[i] = round(value);
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateUnary(Operation *op, Unary kind,
                                   Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  Type element = type.getElementType();
  Tensor input = convertTensor(env.lookup(op->getOperand(0)), element);
  Tensor result(element, type.getShape());
  int64_t count = result.getNumElements();
  if (!result.isFloatingPoint()) {
    for (int64_t i = 0; i < count; ++i)
      result.getIntegers()[i] = wrapToInteger(
          applyIntegerUnary(kind, input.getIntegers()[i]), element);
  } else {
    withComputeType(element, [&](auto zero) {
      using T = decltype(zero);
      for (int64_t i = 0; i < count; ++i)
        result.getFloats()[i] = roundToFloat(
            applyUnary<T>(kind, static_cast<T>(input.getFloats()[i])), element);
    });
  }
  env.bind(op->getResult(0), std::move(result));
  return success();
}

static LogicalResult evaluateLogicalNot(train::LogicalNotOp op,
                                        Environment &env) {
  const Tensor &input = env.lookup(op.getInput());
  Tensor result(typeOf(op.getResult()).getElementType(), input.getShape());
  for (int64_t i = 0, e = input.getNumElements(); i < e; ++i)
    result.getIntegers()[i] = input.getAsDouble(i) == 0;
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// GELU and its gradient with the constants and the order of operations of
/// ATen's GeluKernelImpl / GeluBackwardKernelImpl.
template <typename T> static T gelu(T x, bool tanhApproximation) {
  if (!tanhApproximation) {
    const T alpha = static_cast<T>(M_SQRT1_2);
    return x * T(0.5) * (T(1) + std::erf(x * alpha));
  }
  const T beta = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const T kappa = static_cast<T>(0.044715);
  T cube = x * x * x;
  T inner = beta * (x + kappa * cube);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}

template <typename T>
static T geluBackward(T grad, T x, bool tanhApproximation) {
  if (!tanhApproximation) {
    const T alpha = static_cast<T>(M_SQRT1_2);
    const T beta = static_cast<T>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    T cdf = T(0.5) * (T(1) + std::erf(x * alpha));
    T pdf = beta * std::exp(x * x * T(-0.5));
    return grad * (cdf + x * pdf);
  }
  const T beta = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const T kappa = static_cast<T>(0.044715);
  T square = x * x;
  T cube = square * x;
  T inner = beta * (x + kappa * cube);
  T tanhInner = std::tanh(inner);
  T left = T(0.5) * x;
  T right = T(1) + tanhInner;
  T leftDerivative = T(0.5) * right;
  T tanhDerivative = T(1) - tanhInner * tanhInner;
  T innerDerivative = beta * (T(1) + T(3) * kappa * square);
  T rightDerivative = left * tanhDerivative * innerDerivative;
  return grad * (leftDerivative + rightDerivative);
}

static LogicalResult evaluateGelu(train::GeluOp op, Environment &env) {
  const Tensor &input = env.lookup(op.getInput());
  Type element = input.getElementType();
  if (failed(requireFloat(op, input, "input")))
    return failure();
  bool useTanh = op.getApproximate() == "tanh";
  Tensor result(element, input.getShape());
  withComputeType(element, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0, e = input.getNumElements(); i < e; ++i)
      result.getFloats()[i] = roundToFloat(
          gelu(static_cast<T>(input.getFloats()[i]), useTanh), element);
  });
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// SiLU's gradient as ATen's silu_backward kernel computes it.
template <typename T> static T siluBackward(T grad, T x) {
  T sigmoid = applyUnary(Unary::Sigmoid, x);
  return grad * sigmoid * (T(1) + x * (T(1) - sigmoid));
}

/// An activation's gradient `derivative(grad, input)` (a generic lambda,
/// called in the compute type), rounded once to the tensors' type.
template <typename Derivative>
static LogicalResult
evaluateActivationGradient(Operation *op, Value gradValue, Value inputValue,
                           Environment &env, Derivative derivative) {
  const Tensor &grad = env.lookup(gradValue);
  const Tensor &input = env.lookup(inputValue);
  Type element = input.getElementType();
  if (failed(requireFloat(op, input, "input")) ||
      failed(requireFloat(op, grad, "gradient")))
    return failure();
  Tensor result(element, input.getShape());
  withComputeType(element, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0, e = input.getNumElements(); i < e; ++i)
      result.getFloats()[i] =
          roundToFloat(derivative(static_cast<T>(grad.getFloats()[i]),
                                  static_cast<T>(input.getFloats()[i])),
                       element);
  });
  env.bind(op->getResult(0), std::move(result));
  return success();
}

static LogicalResult evaluateSiluBackward(train::SiluBackwardOp op,
                                          Environment &env) {
  return evaluateActivationGradient(
      op, op.getGrad(), op.getInput(), env,
      [](auto grad, auto x) { return siluBackward(grad, x); });
}

static LogicalResult evaluateGeluBackward(train::GeluBackwardOp op,
                                          Environment &env) {
  bool useTanh = op.getApproximate() == "tanh";
  return evaluateActivationGradient(
      op, op.getGrad(), op.getInput(), env,
      [useTanh](auto grad, auto x) { return geluBackward(grad, x, useTanh); });
}

static LogicalResult evaluateWhere(train::WhereOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  Tensor condition =
      broadcastTensor(env.lookup(op.getCondition()), type.getShape());
  Tensor lhs = convertTensor(
      broadcastTensor(env.lookup(op.getLhs()), type.getShape()), element);
  Tensor rhs = convertTensor(
      broadcastTensor(env.lookup(op.getRhs()), type.getShape()), element);
  Tensor result = rhs;
  for (int64_t i = 0, e = result.getNumElements(); i < e; ++i) {
    if (!condition.getIntegers()[i])
      continue;
    if (result.isFloatingPoint())
      result.getFloats()[i] = lhs.getFloats()[i];
    else
      result.getIntegers()[i] = lhs.getIntegers()[i];
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateMaskedFill(train::MaskedFillOp op,
                                        Environment &env) {
  Tensor result = env.lookup(op.getInput());
  Tensor mask = broadcastTensor(env.lookup(op.getMask()), result.getShape());
  Type element = result.getElementType();
  for (int64_t i = 0, e = result.getNumElements(); i < e; ++i) {
    if (!mask.getIntegers()[i])
      continue;
    if (result.isFloatingPoint())
      result.getFloats()[i] = scalarToFloat(op.getValue(), element);
    else
      result.getIntegers()[i] = scalarToInteger(op.getValue(), element);
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// clamp: NaN stays NaN; otherwise `min(max(x, lo), hi)`, the bounds
/// converted to the tensor's type first (so hi wins when lo > hi).
static LogicalResult evaluateClamp(train::ClampOp op, Environment &env) {
  Tensor result = env.lookup(op.getInput());
  Type element = result.getElementType();
  std::optional<Attribute> lower, upper;
  if (op.getMinAttr())
    lower = op.getMinAttr();
  if (op.getMaxAttr())
    upper = op.getMaxAttr();
  for (int64_t i = 0, e = result.getNumElements(); i < e; ++i) {
    if (result.isFloatingPoint()) {
      double &x = result.getFloats()[i];
      if (std::isnan(x))
        continue;
      if (lower)
        x = std::max(x, scalarToFloat(*lower, element));
      if (upper)
        x = std::min(x, scalarToFloat(*upper, element));
    } else {
      int64_t &x = result.getIntegers()[i];
      if (lower)
        x = std::max(x, scalarToInteger(*lower, element));
      if (upper)
        x = std::min(x, scalarToInteger(*upper, element));
    }
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateCast(train::CastOp op, Environment &env) {
  env.bind(op.getResult(),
           convertTensor(env.lookup(op.getInput()),
                         typeOf(op.getResult()).getElementType()));
  return success();
}

std::optional<LogicalResult> kernels::evaluateElementwiseOp(Operation *op,
                                                            Environment &env) {
  using namespace train;
  // The family is the dialect's (ElementwiseOpInterface); each of its
  // operations has one case below.
  if (!isa<ElementwiseOpInterface>(op))
    return std::nullopt;
  auto binary = [&](Arith kind) {
    return
        [&env, kind](Operation *op) { return evaluateBinary(op, kind, env); };
  };
  auto compare = [&](Compare kind) {
    return
        [&env, kind](Operation *op) { return evaluateCompare(op, kind, env); };
  };
  auto unary = [&](Unary kind) {
    return [&env, kind](Operation *op) { return evaluateUnary(op, kind, env); };
  };
  auto scalarArith = [&](Arith kind, bool reversed = false) {
    return [&env, kind, reversed](auto op) {
      return evaluateScalarArith(op, kind, op.getScalar(), reversed, env);
    };
  };
  auto scalarCompare = [&](Compare kind) {
    return [&env, kind](auto op) {
      return evaluateScalarCompare(op, kind, op.getScalar(), env);
    };
  };
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<AddOp>(binary(Arith::Add))
      .Case<SubOp>(binary(Arith::Sub))
      .Case<MulOp>(binary(Arith::Mul))
      .Case<DivOp>(binary(Arith::Div))
      .Case<PowOp>(binary(Arith::Pow))
      .Case<MaximumOp>(binary(Arith::Maximum))
      .Case<MinimumOp>(binary(Arith::Minimum))
      .Case<EqOp>(compare(Compare::Eq))
      .Case<NeOp>(compare(Compare::Ne))
      .Case<LtOp>(compare(Compare::Lt))
      .Case<LeOp>(compare(Compare::Le))
      .Case<GtOp>(compare(Compare::Gt))
      .Case<GeOp>(compare(Compare::Ge))
      .Case<AddScalarOp>(scalarArith(Arith::Add))
      .Case<SubScalarOp>(scalarArith(Arith::Sub))
      .Case<RsubScalarOp>(scalarArith(Arith::Sub, /*reversed=*/true))
      .Case<MulScalarOp>(scalarArith(Arith::Mul))
      .Case<DivScalarOp>(scalarArith(Arith::Div))
      .Case<PowScalarOp>(
          [&](PowScalarOp op) { return evaluatePowScalar(op, env); })
      .Case<EqScalarOp>(scalarCompare(Compare::Eq))
      .Case<NeScalarOp>(scalarCompare(Compare::Ne))
      .Case<LtScalarOp>(scalarCompare(Compare::Lt))
      .Case<LeScalarOp>(scalarCompare(Compare::Le))
      .Case<GtScalarOp>(scalarCompare(Compare::Gt))
      .Case<GeScalarOp>(scalarCompare(Compare::Ge))
      .Case<NegOp>(unary(Unary::Neg))
      .Case<AbsOp>(unary(Unary::Abs))
      .Case<ExpOp>(unary(Unary::Exp))
      .Case<LogOp>(unary(Unary::Log))
      .Case<SqrtOp>(unary(Unary::Sqrt))
      .Case<RsqrtOp>(unary(Unary::Rsqrt))
      .Case<ReciprocalOp>(unary(Unary::Reciprocal))
      .Case<SigmoidOp>(unary(Unary::Sigmoid))
      .Case<TanhOp>(unary(Unary::Tanh))
      .Case<ErfOp>(unary(Unary::Erf))
      .Case<SinOp>(unary(Unary::Sin))
      .Case<CosOp>(unary(Unary::Cos))
      .Case<ReluOp>(unary(Unary::Relu))
      .Case<SiluOp>(unary(Unary::Silu))
      .Case<LogicalNotOp>(
          [&](LogicalNotOp op) { return evaluateLogicalNot(op, env); })
      .Case<GeluOp>([&](GeluOp op) { return evaluateGelu(op, env); })
      .Case<GeluBackwardOp>(
          [&](GeluBackwardOp op) { return evaluateGeluBackward(op, env); })
      .Case<SiluBackwardOp>(
          [&](SiluBackwardOp op) { return evaluateSiluBackward(op, env); })
      .Case<WhereOp>([&](WhereOp op) { return evaluateWhere(op, env); })
      .Case<MaskedFillOp>(
          [&](MaskedFillOp op) { return evaluateMaskedFill(op, env); })
      .Case<ClampOp>([&](ClampOp op) { return evaluateClamp(op, env); })
      .Case<CastOp>([&](CastOp op) { return evaluateCast(op, env); })
      .Default([](Operation *op) -> std::optional<LogicalResult> {
        return op->emitOpError()
               << "is elementwise but has no reference semantics";
      });
}
