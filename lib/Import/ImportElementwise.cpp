//===- ImportElementwise.cpp - Elementwise ATen operators -----------------===//
//
// Arithmetic, comparisons, logical operators and functions applied element by
// element, and the backward ops of activations. Most map to one `train`
// operation each; those `train` has no operation for (the activations'
// backward, sign, lerp, addcmul) are built from others in ATen's order of
// operations. Every tensor operand of the arithmetic may also be a Python
// number: torch's wrapped number, a zero-dimensional tensor that takes part in
// type promotion below every tensor.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include <cmath>
#include <optional>
#include <type_traits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;
using Operand = StepImporter::Operand;

namespace {
/// The `ScalarOpTy` of importBinary for operators without a form that takes
/// the right operand as an attribute: a number there becomes a tensor.
struct NoScalarForm {};

enum class Logical { And, Or, Xor };
} // namespace

/// `lhs op rhs`. A number on the right of an operator with a scalar form
/// becomes that form, whose semantics are ATen's for a wrapped number there
/// (mul and div of bf16/fp16 read it unrounded). Any other number is
/// converted to the common dtype first, as TensorIterator does, and the
/// tensor form computes with it.
template <typename TensorOpTy, typename ScalarOpTy = NoScalarForm>
static LogicalResult importBinary(StepImporter &s, StringRef lhsName = "self",
                                  StringRef rhsName = "other") {
  FailureOr<Operand> lhs = s.operandArgument(lhsName);
  if (failed(lhs))
    return failure();
  FailureOr<Operand> rhs = s.operandArgument(rhsName);
  if (failed(rhs))
    return failure();
  if constexpr (!std::is_same_v<ScalarOpTy, NoScalarForm>)
    if (!lhs->isNumber() && rhs->isNumber())
      return s.emitSingle<ScalarOpTy>(lhs->tensor, rhs->number);
  // Tensors keep their own dtypes (the operation promotes them); only
  // numbers take the common one.
  Type common = s.commonType({*lhs, *rhs});
  return s.emitSingle<TensorOpTy>(s.asTensor(*lhs, common),
                                  s.asTensor(*rhs, common));
}

/// `lhs + alpha * rhs` (add), `lhs - alpha * rhs` (sub), and rsub, which is
/// sub with its operands exchanged. A tensor right operand scaled by an alpha
/// other than 1 gets its own multiplication, as torch's kernel computes
/// `other * alpha` before adding.
static LogicalResult importAddOrSub(StepImporter &s, bool isSub,
                                    bool reversed = false) {
  FailureOr<Operand> self = s.operandArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Operand> other = s.operandArgument("other");
  if (failed(other))
    return failure();
  FailureOr<Attribute> alpha = s.scalarArgument("alpha", 1.0);
  if (failed(alpha))
    return failure();
  Operand lhs = reversed ? *other : *self, rhs = reversed ? *self : *other;
  auto isOne = [](Attribute attr) {
    if (auto f = dyn_cast<FloatAttr>(attr))
      return f.getValueAsDouble() == 1.0;
    if (auto i = dyn_cast<IntegerAttr>(attr))
      return i.getValue().getSExtValue() == 1;
    return false;
  };
  if (!lhs.isNumber() && rhs.isNumber()) {
    Attribute scalar = rhs.number;
    if (!isOne(*alpha)) {
      FailureOr<double> value = s.floatArgument(reversed ? "self" : "other");
      FailureOr<double> alphaValue = s.floatArgument("alpha", 1.0);
      if (failed(value) || failed(alphaValue))
        return failure();
      scalar = s.builder.getF64FloatAttr(*value * *alphaValue);
    }
    return isSub ? s.emitSingle<SubScalarOp>(lhs.tensor, scalar)
                 : s.emitSingle<AddScalarOp>(lhs.tensor, scalar);
  }
  Type common = s.commonType({lhs, rhs});
  Value left = s.asTensor(lhs, common), right = s.asTensor(rhs, common);
  if (!isOne(*alpha))
    right = s.builder.create<MulScalarOp>(s.location, right, *alpha);
  return isSub ? s.emitSingle<SubOp>(left, right)
               : s.emitSingle<AddOp>(left, right);
}

template <typename OpTy> static LogicalResult importUnary(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  return s.emitSingle<OpTy>(*self);
}

static FailureOr<StringAttr> approximateMode(OpBuilder &builder,
                                             const pt2::Argument *argument) {
  if (!argument)
    return builder.getStringAttr("none");
  if (argument->kind != pt2::ArgumentKind::String ||
      (argument->stringValue != "none" && argument->stringValue != "tanh"))
    return failure();
  return builder.getStringAttr(argument->stringValue);
}

static LogicalResult importGelu(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<StringAttr> mode =
      approximateMode(s.builder, s.findArgument("approximate"));
  if (failed(self))
    return failure();
  if (failed(mode))
    return s.fail("approximate must be 'none' or 'tanh'");
  return s.emitSingle<GeluOp>(*self, *mode);
}

static LogicalResult importGeluBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<StringAttr> mode =
      approximateMode(s.builder, s.findArgument("approximate"));
  if (failed(grad) || failed(self))
    return failure();
  if (failed(mode))
    return s.fail("approximate must be 'none' or 'tanh'");
  return s.emitSingle<GeluBackwardOp>(*grad, *self, *mode);
}

/// `grad * output * (1 - output)`, decomposed into `train` operations.
static LogicalResult importSigmoidBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> output = s.tensorArgument("output");
  if (failed(grad) || failed(output))
    return failure();
  Value oneMinus = s.builder.create<RsubScalarOp>(
      s.location, *output, s.builder.getI64IntegerAttr(1));
  Value derivative = s.builder.create<MulOp>(s.location, *output, oneMinus);
  return s.emitSingle<MulOp>(*grad, derivative);
}

/// `grad * (1 - output^2)`.
static LogicalResult importTanhBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> output = s.tensorArgument("output");
  if (failed(grad) || failed(output))
    return failure();
  Value squared = s.builder.create<MulOp>(s.location, *output, *output);
  Value derivative = s.builder.create<RsubScalarOp>(
      s.location, squared, s.builder.getI64IntegerAttr(1));
  return s.emitSingle<MulOp>(*grad, derivative);
}

/// One op (train.silu_backward), as eager torch computes it in one kernel.
static LogicalResult importSiluBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(grad) || failed(self))
    return failure();
  return s.emitSingle<SiluBackwardOp>(*grad, *self);
}

/// `self <= threshold ? 0 : grad` (ReLU's backward).
static LogicalResult importThresholdBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Attribute> threshold = s.scalarArgument("threshold");
  if (failed(grad) || failed(self) || failed(threshold))
    return failure();
  Value mask = s.builder.create<LeScalarOp>(s.location, *self, *threshold);
  return s.emitSingle<MaskedFillOp>(*grad, mask,
                                    s.builder.getI64IntegerAttr(0));
}

/// sign / sgn of a real tensor: `(x > 0) - (x < 0)` in x's dtype, as ATen's
/// kernel computes it (so NaN gives 0).
static LogicalResult importSign(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type =
      succeeded(self) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(type))
    return failure();
  Type element = type->getElementType();
  if (element.isInteger(1))
    return s.setOutput(0, *self);
  Attribute zero = s.builder.getI64IntegerAttr(0);
  Value positive =
      s.convert(s.builder.create<GtScalarOp>(s.location, *self, zero), element);
  Value negative =
      s.convert(s.builder.create<LtScalarOp>(s.location, *self, zero), element);
  return s.emitSingle<SubOp>(positive, negative);
}

/// logical_and / logical_or / logical_xor: every operand is true where it is
/// non-zero; the result is bool. `a and b` is `where(a, b, false)`, `a or
/// b` is `where(a, true, b)` and `a xor b` is `a != b`.
static LogicalResult importLogical(StepImporter &s, Logical kind) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> other =
      succeeded(self) ? s.tensorArgument("other") : FailureOr<Value>();
  FailureOr<RankedTensorType> type =
      succeeded(other) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(other) || failed(type))
    return failure();
  if (!type->getElementType().isInteger(1))
    return s.fail("only bool results are supported");
  auto truth = [&](Value value) -> Value {
    if (getElementTypeOrSelf(value.getType()).isInteger(1))
      return value;
    return s.builder.create<NeScalarOp>(s.location, value,
                                        s.builder.getI64IntegerAttr(0));
  };
  Value lhs = truth(*self), rhs = truth(*other);
  Value result;
  if (kind == Logical::Xor) {
    result = s.builder.create<NeOp>(s.location, lhs, rhs);
  } else {
    bool isAnd = kind == Logical::And;
    Value constant = s.builder.create<FullOp>(
        s.location, RankedTensorType::get({}, s.builder.getI1Type()),
        s.builder.getBoolAttr(!isAnd));
    result = isAnd ? s.builder.create<WhereOp>(s.location, lhs, rhs, constant)
                   : s.builder.create<WhereOp>(s.location, lhs, constant, rhs);
  }
  if (result.getType() != *type)
    result = s.builder.create<ExpandOp>(s.location, *type, result);
  return s.setOutput(0, result);
}

/// bitwise_and / bitwise_or / bitwise_xor / bitwise_not of bool tensors, as
/// masks are combined in Python (`a & b`, `~mask`): on bools they are the
/// logical operators. Integer bit arithmetic has no `train` operation.
static LogicalResult importBitwise(StepImporter &s,
                                   std::optional<Logical> kind) {
  SmallVector<StringRef, 2> names = {"self"};
  if (kind)
    names.push_back("other");
  SmallVector<Value, 2> operands;
  for (StringRef name : names) {
    FailureOr<Value> operand = s.tensorArgument(name);
    if (failed(operand))
      return failure();
    Type element = getElementTypeOrSelf(operand->getType());
    if (!element.isInteger(1)) {
      std::string type;
      llvm::raw_string_ostream os(type);
      os << element;
      return s.fail("argument '" + name + "' is " + type +
                    ": bitwise operators are supported on bool tensors only");
    }
    operands.push_back(*operand);
  }
  if (!kind)
    return s.emitSingle<LogicalNotOp>(operands.front());
  return importLogical(s, *kind);
}

/// `where(condition, self, other)`; either value may be a number, which
/// takes the dtype torch promotes the two to.
static LogicalResult importWhere(StepImporter &s) {
  FailureOr<Value> condition = s.tensorArgument("condition");
  if (failed(condition))
    return failure();
  FailureOr<Operand> self = s.operandArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Operand> other = s.operandArgument("other");
  if (failed(other))
    return failure();
  Type common = s.commonType({*self, *other});
  return s.emitSingle<WhereOp>(*condition, s.asTensor(*self, common),
                               s.asTensor(*other, common));
}

/// `masked_fill(self, mask, value)`: a number, or a zero-dimensional tensor
/// whose value is converted to self's dtype (the result's).
static LogicalResult importMaskedFill(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Value> mask = s.tensorArgument("mask");
  if (failed(mask))
    return failure();
  FailureOr<Operand> value = s.operandArgument("value");
  if (failed(value))
    return failure();
  if (value->isNumber())
    return s.emitSingle<MaskedFillOp>(*self, *mask, value->number);
  if (s.rankOf(value->tensor) != 0)
    return s.fail("argument 'value' has rank " +
                  Twine(s.rankOf(value->tensor)) +
                  ", expected a zero-dimensional tensor");
  Value fill = s.materialize(*value, getElementTypeOrSelf(self->getType()));
  return s.emitSingle<WhereOp>(*mask, fill, *self);
}

/// clamp, clamp_min and clamp_max. Number bounds are the operation's
/// attributes; tensor bounds (the `.Tensor` overloads) become maximum and
/// minimum, whose NaN propagation is clamp's.
static LogicalResult importClamp(StepImporter &s, bool hasMin, bool hasMax) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  std::optional<Operand> bounds[2];
  StringRef names[2] = {"min", "max"};
  for (int i = 0; i < 2; ++i) {
    if (!(i == 0 ? hasMin : hasMax) || !s.findArgument(names[i]))
      continue;
    FailureOr<Operand> bound = s.operandArgument(names[i]);
    if (failed(bound))
      return failure();
    bounds[i] = *bound;
  }
  bool tensorBound = llvm::any_of(bounds, [](const std::optional<Operand> &b) {
    return b && !b->isNumber();
  });
  if (!tensorBound)
    return s.emitSingle<ClampOp>(*self, bounds[0] ? bounds[0]->number : nullptr,
                                 bounds[1] ? bounds[1]->number : nullptr);
  SmallVector<Operand> operands = {Operand{*self, Attribute()}};
  for (const std::optional<Operand> &bound : bounds)
    if (bound)
      operands.push_back(*bound);
  Type common = s.commonType(operands);
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  Value result = s.materialize(operands[0], common);
  if (bounds[0])
    result = s.builder.create<MaximumOp>(s.location, result,
                                         s.materialize(*bounds[0], common));
  if (bounds[1])
    result = s.builder.create<MinimumOp>(s.location, result,
                                         s.materialize(*bounds[1], common));
  if (result.getType() != *type)
    return s.fail("the clamped tensor does not have torch's result type");
  return s.setOutput(0, result);
}

/// `lerp(self, end, weight)` as ATen's CPU kernel computes it (Lerp.h), in
/// the compute type (fp32 for bf16/fp16) and rounded once:
/// `self + weight * (end - self)` where |weight| < 0.5, else
/// `end - (end - self) * (1 - weight)`. ATen's vectorised loop fuses the
/// last multiply-add, so an fp32 result may differ from it by one ulp.
static LogicalResult importLerp(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> end =
      succeeded(self) ? s.tensorArgument("end") : FailureOr<Value>();
  if (failed(self) || failed(end))
    return failure();
  FailureOr<Operand> weight = s.operandArgument("weight");
  FailureOr<RankedTensorType> type =
      succeeded(weight) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(weight) || failed(type))
    return failure();
  Type compute = train::computeType(type->getElementType());
  Value start = s.convert(*self, compute), stop = s.convert(*end, compute);
  Value diff = s.builder.create<SubOp>(s.location, stop, start);
  Value result;
  if (weight->isNumber()) {
    double w = *s.floatArgument("weight");
    if (std::abs(w) < 0.5)
      result = s.builder.create<AddOp>(
          s.location, start,
          s.builder.create<MulScalarOp>(s.location, diff,
                                        s.builder.getF64FloatAttr(w)));
    else
      result = s.builder.create<SubOp>(
          s.location, stop,
          s.builder.create<MulScalarOp>(s.location, diff,
                                        s.builder.getF64FloatAttr(1.0 - w)));
  } else {
    Value w = s.convert(weight->tensor, compute);
    Value low = s.builder.create<AddOp>(
        s.location, start, s.builder.create<MulOp>(s.location, w, diff));
    Value oneMinus = s.builder.create<RsubScalarOp>(
        s.location, w, s.builder.getI64IntegerAttr(1));
    Value high = s.builder.create<SubOp>(
        s.location, stop, s.builder.create<MulOp>(s.location, diff, oneMinus));
    Value small = s.builder.create<LtScalarOp>(
        s.location, s.builder.create<AbsOp>(s.location, w),
        s.builder.getF64FloatAttr(0.5));
    result = s.builder.create<WhereOp>(s.location, small, low, high);
  }
  return s.setOutput(0, s.convert(result, type->getElementType()));
}

/// `self + value * tensor1 * tensor2` (addcmul) and
/// `self + value * (tensor1 / tensor2)` (addcdiv), in ATen's order of
/// operations (PointwiseOpsKernel.cpp), in the compute type and rounded once.
static LogicalResult importAddcmulOrAddcdiv(StepImporter &s, bool isDiv) {
  SmallVector<Operand> operands;
  for (StringRef name : {"self", "tensor1", "tensor2"}) {
    FailureOr<Operand> operand = s.operandArgument(name);
    if (failed(operand))
      return failure();
    operands.push_back(*operand);
  }
  FailureOr<Attribute> value = s.scalarArgument("value", 1.0);
  FailureOr<RankedTensorType> type =
      succeeded(value) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(value) || failed(type))
    return failure();
  Type compute = train::computeType(s.commonType(operands));
  Value self = s.materialize(operands[0], compute);
  Value t1 = s.materialize(operands[1], compute);
  Value t2 = s.materialize(operands[2], compute);
  Value product;
  if (isDiv)
    product = s.builder.create<MulScalarOp>(
        s.location, s.builder.create<DivOp>(s.location, t1, t2), *value);
  else
    product = s.builder.create<MulOp>(
        s.location, s.builder.create<MulScalarOp>(s.location, t1, *value), t2);
  Value sum = s.builder.create<AddOp>(s.location, self, product);
  return s.setOutput(0, s.convert(sum, type->getElementType()));
}

void mlir::mantissa::importer::addElementwiseHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Elementwise arithmetic and comparisons. Every tensor operand of these
  // may also be a Python number (torch's wrapped numbers): `.Tensor`
  // overloads receive one in `self` (`sub.Tensor(1, x)`, as decompositions
  // write `1 - x`) or `other`, and the `.Scalar` overloads are the same
  // operator with a number in `other` (or, for pow.Scalar, in `self`).
  for (StringRef name : {"add.Tensor", "add.Scalar"})
    add(name, [](StepImporter &s) { return importAddOrSub(s, false); });
  for (StringRef name : {"sub.Tensor", "sub.Scalar"})
    add(name, [](StepImporter &s) { return importAddOrSub(s, true); });
  for (StringRef name : {"rsub.Tensor", "rsub.Scalar"})
    add(name, [](StepImporter &s) { return importAddOrSub(s, true, true); });
  for (StringRef name : {"mul.Tensor", "mul.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<MulOp, MulScalarOp>(s); });
  for (StringRef name : {"div.Tensor", "div.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<DivOp, DivScalarOp>(s); });
  for (StringRef name :
       {"pow.Tensor_Tensor", "pow.Tensor_Scalar", "pow.Scalar"})
    add(name, [](StepImporter &s) {
      return importBinary<PowOp, PowScalarOp>(s, "self", "exponent");
    });
  add("maximum.default",
      [](StepImporter &s) { return importBinary<MaximumOp>(s); });
  add("minimum.default",
      [](StepImporter &s) { return importBinary<MinimumOp>(s); });
  for (StringRef name : {"eq.Tensor", "eq.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<EqOp, EqScalarOp>(s); });
  for (StringRef name : {"ne.Tensor", "ne.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<NeOp, NeScalarOp>(s); });
  for (StringRef name : {"lt.Tensor", "lt.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<LtOp, LtScalarOp>(s); });
  for (StringRef name : {"le.Tensor", "le.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<LeOp, LeScalarOp>(s); });
  for (StringRef name : {"gt.Tensor", "gt.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<GtOp, GtScalarOp>(s); });
  for (StringRef name : {"ge.Tensor", "ge.Scalar"})
    add(name,
        [](StepImporter &s) { return importBinary<GeOp, GeScalarOp>(s); });
  for (StringRef name : {"lerp.Scalar", "lerp.Tensor"})
    add(name, importLerp);
  add("addcmul.default",
      [](StepImporter &s) { return importAddcmulOrAddcdiv(s, false); });
  add("addcdiv.default",
      [](StepImporter &s) { return importAddcmulOrAddcdiv(s, true); });
  // Elementwise functions.
  add("neg.default", importUnary<NegOp>);
  add("abs.default", importUnary<AbsOp>);
  add("exp.default", importUnary<ExpOp>);
  add("log.default", importUnary<LogOp>);
  add("sqrt.default", importUnary<SqrtOp>);
  add("rsqrt.default", importUnary<RsqrtOp>);
  add("reciprocal.default", importUnary<ReciprocalOp>);
  add("sigmoid.default", importUnary<SigmoidOp>);
  add("tanh.default", importUnary<TanhOp>);
  add("erf.default", importUnary<ErfOp>);
  add("sin.default", importUnary<SinOp>);
  add("cos.default", importUnary<CosOp>);
  add("relu.default", importUnary<ReluOp>);
  add("silu.default", importUnary<SiluOp>);
  add("logical_not.default", importUnary<LogicalNotOp>);
  for (StringRef name : {"sgn.default", "sign.default"})
    add(name, importSign);
  add("logical_and.default",
      [](StepImporter &s) { return importLogical(s, Logical::And); });
  add("logical_or.default",
      [](StepImporter &s) { return importLogical(s, Logical::Or); });
  add("logical_xor.default",
      [](StepImporter &s) { return importLogical(s, Logical::Xor); });
  add("bitwise_and.Tensor",
      [](StepImporter &s) { return importBitwise(s, Logical::And); });
  add("bitwise_or.Tensor",
      [](StepImporter &s) { return importBitwise(s, Logical::Or); });
  add("bitwise_xor.Tensor",
      [](StepImporter &s) { return importBitwise(s, Logical::Xor); });
  add("bitwise_not.default",
      [](StepImporter &s) { return importBitwise(s, std::nullopt); });
  add("gelu.default", importGelu);
  add("gelu_backward.default", importGeluBackward);
  add("sigmoid_backward.default", importSigmoidBackward);
  add("tanh_backward.default", importTanhBackward);
  add("silu_backward.default", importSiluBackward);
  add("threshold_backward.default", importThresholdBackward);
  for (StringRef name :
       {"where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar"})
    add(name, importWhere);
  for (StringRef name : {"masked_fill.Scalar", "masked_fill.Tensor"})
    add(name, importMaskedFill);
  for (StringRef name : {"clamp.default", "clamp.Tensor"})
    add(name, [](StepImporter &s) { return importClamp(s, true, true); });
  for (StringRef name : {"clamp_min.default", "clamp_min.Tensor"})
    add(name, [](StepImporter &s) { return importClamp(s, true, false); });
  for (StringRef name : {"clamp_max.default", "clamp_max.Tensor"})
    add(name, [](StepImporter &s) { return importClamp(s, false, true); });
}
