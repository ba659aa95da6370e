//===- ImportLosses.cpp - Loss kernels torch keeps whole ------------------===//
//
// torch.export decomposes the losses, but graphs traced without that
// decomposition (make_fx, torch.compile's pre-dispatch graphs) keep ATen's
// loss kernels: nll_loss_forward / nll_loss_backward (cross-entropy after
// log_softmax) and mse_loss / mse_loss_backward. They become gathers,
// scatters and reductions in the order of ATen's CPU kernels (Loss.cpp,
// LossNLL.cpp): the loss of a row is `-weight[t] * self[t]`, rows whose
// target is `ignore_index` weigh 0, and `mean` divides by the total weight.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::importer;

namespace {
/// at::Reduction.
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };

/// The parts of an NLL loss: per row, the target made safe to gather with
/// (ignored rows point at class 0) and the row's weight (0 where ignored).
struct NllRows {
  Value safeTarget; // [N, 1], i64
  Value rowWeight;  // [N], the input's dtype
  int64_t rows = 1;
  bool batched = true;
};
} // namespace

static FailureOr<Reduction> readReduction(StepImporter &s) {
  FailureOr<int64_t> reduction = s.intArgument("reduction", 1);
  if (failed(reduction))
    return failure();
  if (*reduction < 0 || *reduction > 2)
    return s.fail(llvm::formatv("reduction {0} is not 0 (none), 1 (mean) or "
                                "2 (sum)",
                                *reduction)
                      .str());
  return static_cast<Reduction>(*reduction);
}

static FailureOr<NllRows> readNllRows(StepImporter &s, TensorBuilder &b,
                                      Value self, Value target) {
  ArrayRef<int64_t> shape = TensorBuilder::shapeOf(self);
  ArrayRef<int64_t> targetShape = TensorBuilder::shapeOf(target);
  NllRows rows;
  rows.batched = shape.size() == 2;
  if (shape.size() < 1 || shape.size() > 2 ||
      targetShape.size() != shape.size() - 1 ||
      (rows.batched && targetShape[0] != shape[0]))
    return s.fail(llvm::formatv("self {0} and target {1} are not [N, C] and "
                                "[N] (or [C] and [])",
                                train::formatShape(shape),
                                train::formatShape(targetShape))
                      .str());
  if (!TensorBuilder::typeOf(target).getElementType().isInteger(64))
    return s.fail("target must hold int64 class indices");
  rows.rows = rows.batched ? shape[0] : 1;
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<int64_t> ignoreIndex = s.intArgument("ignore_index", -100);
  if (failed(ignoreIndex))
    return failure();
  OpBuilder &builder = s.builder;
  Location loc = s.location;
  Type element = TensorBuilder::typeOf(self).getElementType();
  Value flatTarget = b.view(target, {rows.rows});
  Value ignored = builder.create<train::EqScalarOp>(
      loc, flatTarget, builder.getI64IntegerAttr(*ignoreIndex));
  Value safe = builder.create<train::MaskedFillOp>(
      loc, flatTarget, ignored, builder.getI64IntegerAttr(0));
  rows.safeTarget = b.view(safe, {rows.rows, 1});
  Value rowWeight = b.full({rows.rows}, element, 1.0);
  if (*weight)
    rowWeight = b.convert(builder.create<train::IndexSelectOp>(
                              loc, *weight, safe, builder.getI64IntegerAttr(0)),
                          element);
  rows.rowWeight = builder.create<train::MaskedFillOp>(
      loc, rowWeight, ignored, builder.getI64IntegerAttr(0));
  return rows;
}

/// nll_loss_forward(self, target, weight?, reduction, ignore_index) ->
/// (output, total_weight).
static LogicalResult importNllLossForward(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Value> target = s.tensorArgument("target");
  if (failed(target))
    return failure();
  FailureOr<Reduction> reduction = readReduction(s);
  if (failed(reduction))
    return failure();
  TensorBuilder b(s.builder, s.location);
  FailureOr<NllRows> rows = readNllRows(s, b, *self, *target);
  if (failed(rows))
    return failure();
  FailureOr<RankedTensorType> outputType = s.outputType(0);
  FailureOr<RankedTensorType> totalType =
      succeeded(outputType) ? s.outputType(1) : FailureOr<RankedTensorType>();
  if (failed(outputType) || failed(totalType))
    return failure();
  int64_t classes = TensorBuilder::shapeOf(*self).back();
  Value logits = b.view(*self, {rows->rows, classes});
  Value picked = b.view(
      s.builder.create<train::GatherOp>(s.location, logits, rows->safeTarget,
                                        s.builder.getI64IntegerAttr(1)),
      {rows->rows});
  Value losses = s.builder.create<train::NegOp>(s.location,
                                                b.mul(picked, rows->rowWeight));
  Value output, total;
  if (*reduction == Reduction::None) {
    output = b.view(losses, outputType->getShape());
    total = b.full({}, totalType->getElementType(), 0.0);
  } else {
    total = b.sum(rows->rowWeight, {0}, false);
    output = b.sum(losses, {0}, false);
    if (*reduction == Reduction::Mean)
      output = b.div(output, total);
  }
  if (failed(s.setOutput(0, output)))
    return failure();
  return s.setOutput(1, b.convert(total, totalType->getElementType()));
}

/// nll_loss_backward(grad_output, self, target, weight?, reduction,
/// ignore_index, total_weight) -> grad_input: `-weight[t] * grad` at each
/// row's target (divided by total_weight for `mean`), zeros elsewhere.
static LogicalResult importNllLossBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Value> target = s.tensorArgument("target");
  if (failed(target))
    return failure();
  FailureOr<Value> totalWeight = s.tensorArgument("total_weight");
  if (failed(totalWeight))
    return failure();
  FailureOr<Reduction> reduction = readReduction(s);
  if (failed(reduction))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  TensorBuilder b(s.builder, s.location);
  FailureOr<NllRows> rows = readNllRows(s, b, *self, *target);
  if (failed(rows))
    return failure();
  Type element = type->getElementType();
  Value rowGrad = *reduction == Reduction::None ? b.view(*grad, {rows->rows})
                                                : b.view(*grad, {1});
  if (*reduction == Reduction::Mean)
    rowGrad = b.div(rowGrad, b.view(b.convert(*totalWeight, element), {1}));
  Value values = s.builder.create<train::NegOp>(
      s.location, b.mul(rows->rowWeight, rowGrad));
  int64_t classes = TensorBuilder::shapeOf(*self).back();
  Value gradInput = s.builder.create<train::ScatterOp>(
      s.location, b.full({rows->rows, classes}, element, 0.0), rows->safeTarget,
      b.view(values, {rows->rows, 1}), s.builder.getI64IntegerAttr(1),
      s.builder.getStringAttr("none"));
  return s.setOutput(0, b.view(gradInput, type->getShape()));
}

/// mse_loss(self, target, reduction): `(self - target)^2`, reduced.
static LogicalResult importMseLoss(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Value> target = s.tensorArgument("target");
  if (failed(target))
    return failure();
  FailureOr<Reduction> reduction = readReduction(s);
  if (failed(reduction))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value diff = b.sub(*self, *target);
  Value squared = b.mul(diff, diff);
  SmallVector<int64_t> all;
  for (int64_t d = 0, e = TensorBuilder::shapeOf(squared).size(); d < e; ++d)
    all.push_back(d);
  Value result = squared;
  if (*reduction == Reduction::Mean)
    result = b.mean(squared, all, false);
  else if (*reduction == Reduction::Sum)
    result = b.sum(squared, all, false);
  return s.setOutput(0, result);
}

/// mse_loss_backward(grad_output, self, target, reduction):
/// `norm * (self - target) * grad_output`, norm = 2 (sum) or 2 / numel.
static LogicalResult importMseLossBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<Value> target = s.tensorArgument("target");
  if (failed(target))
    return failure();
  FailureOr<Reduction> reduction = readReduction(s);
  if (failed(reduction))
    return failure();
  TensorBuilder b(s.builder, s.location);
  int64_t count = TensorBuilder::typeOf(*self).getNumElements();
  double norm = *reduction == Reduction::Mean ? 2.0 / double(count) : 2.0;
  return s.setOutput(0, b.mul(b.mulScalar(b.sub(*self, *target), norm), *grad));
}

void mlir::mantissa::importer::addLossHandlers(HandlerTable &table) {
  addAtenHandler(table, "nll_loss_forward.default", importNllLossForward);
  addAtenHandler(table, "nll_loss_backward.default", importNllLossBackward);
  addAtenHandler(table, "mse_loss.default", importMseLoss);
  addAtenHandler(table, "mse_loss_backward.default", importMseLossBackward);
}
