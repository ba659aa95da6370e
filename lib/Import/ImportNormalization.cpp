//===- ImportNormalization.cpp - The norms and their backward -------------===//
//
// Layer and RMS norms (aten.native_layer_norm, aten._fused_rms_norm and their
// backward ops) are `train` operations of their own. The normalisations of
// convolutional nets and diffusion transformers (aten.native_group_norm, the
// batch norms of every spelling torch emits, and their backward ops) become
// reductions and elementwise operations: statistics are means over a view of
// the input (`[N, groups, C / groups * HxW]` for group norm, `[N, C, HxW]`
// reduced over N and HxW for batch norm), and the normalisation is one
// multiply-add with per-channel coefficients. Every backend then runs them with
// the numerics the interpreter defines for those operations.
//
// The formulas are those of ATen's CPU kernels (GroupNormKernel.cpp,
// batch_norm_kernel.cpp, Normalization.cpp): the variance is the mean of
// the squared deviations from the mean (biased; the running variance gets
// the unbiased `sum / (n - 1)`), the output is `x * scale + shift` with
// `scale = rstd * weight` and `shift = bias - mean * scale` per channel, and
// the input gradients are the kernels' `c1 * dy + c2 * x + c3` (group norm)
// and `(dy - mean(dy) - (x - mean) * k) * invstd * weight` (batch norm). As
// those kernels do for bf16/fp16, everything is computed in fp32 and each
// result is rounded once to the dtype torch recorded.
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

//===----------------------------------------------------------------------===//
// Shared
//===----------------------------------------------------------------------===//

/// Sets output `index` to `value` rounded to torch's recorded dtype, after
/// checking that the computed shape is the recorded one.
static LogicalResult setCheckedOutput(StepImporter &s, unsigned index,
                                      Value value) {
  FailureOr<RankedTensorType> type = s.outputType(index);
  if (failed(type))
    return failure();
  ArrayRef<int64_t> shape = TensorBuilder::shapeOf(value);
  if (type->getShape() != shape)
    return s.fail(llvm::formatv("output #{0}: computes shape {1} where torch "
                                "recorded {2}",
                                index, train::formatShape(shape),
                                train::formatShape(type->getShape()))
                      .str());
  return s.setConvertedOutput(index, value);
}

//===----------------------------------------------------------------------===//
// Group norm
//===----------------------------------------------------------------------===//

namespace {

/// The shape arguments of a group norm: the input is `[N, C, ...]` with
/// `HxW` elements per channel, in `groups` groups of `C / groups` channels.
struct GroupNormShape {
  int64_t batch = 0, channels = 0, inner = 0, groups = 1;

  int64_t groupChannels() const { return channels / groups; }
  /// The elements each statistic is taken over.
  int64_t groupElements() const { return groupChannels() * inner; }
};

} // namespace

/// Reads `N`, `C`, `HxW` and `group` and checks them against the input.
static FailureOr<GroupNormShape> readGroupNorm(StepImporter &s, Value input) {
  GroupNormShape shape;
  for (auto [name, field] : {std::pair<StringRef, int64_t *>{"N", &shape.batch},
                             {"C", &shape.channels},
                             {"HxW", &shape.inner},
                             {"group", &shape.groups}}) {
    FailureOr<int64_t> value = s.intArgument(name);
    if (failed(value))
      return failure();
    *field = *value;
  }
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(input);
  if (inputShape.size() < 2 || inputShape[0] != shape.batch ||
      inputShape[1] != shape.channels ||
      ShapedType::getNumElements(inputShape) !=
          shape.batch * shape.channels * shape.inner)
    return s.fail(llvm::formatv("the input has shape {0}, not N = {1}, C = {2} "
                                "and HxW = {3} elements per channel",
                                train::formatShape(inputShape), shape.batch,
                                shape.channels, shape.inner)
                      .str());
  if (shape.groups < 1 || shape.channels % shape.groups != 0)
    return s.fail(llvm::formatv("group = {0} does not divide the {1} channels",
                                shape.groups, shape.channels)
                      .str());
  return shape;
}

/// Checks that an optional per-channel tensor (weight, bias) has `[C]`.
static LogicalResult checkPerChannel(StepImporter &s, Value value,
                                     StringRef name, int64_t channels) {
  if (!value || TensorBuilder::shapeOf(value) == ArrayRef<int64_t>{channels})
    return success();
  return s.fail(llvm::formatv("{0} has shape {1}, expected [{2}]", name,
                              train::formatShape(TensorBuilder::shapeOf(value)),
                              channels)
                    .str());
}

/// `[N, G]` statistics broadcast to every channel of their group: `[N, C]`.
static Value perChannel(TensorBuilder &b, Value statistic,
                        const GroupNormShape &shape) {
  Value grouped = b.view(statistic, {shape.batch, shape.groups, 1});
  return b.view(
      b.expand(grouped, {shape.batch, shape.groups, shape.groupChannels()}),
      {shape.batch, shape.channels});
}

/// aten.native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) ->
/// (out, mean [N, group], rstd [N, group]).
static LogicalResult importGroupNorm(StepImporter &s) {
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<Value> bias = s.optionalTensorArgument("bias");
  if (failed(bias))
    return failure();
  FailureOr<double> eps = s.floatArgument("eps");
  if (failed(eps))
    return failure();
  FailureOr<GroupNormShape> shape = readGroupNorm(s, *input);
  if (failed(shape) ||
      failed(checkPerChannel(s, *weight, "weight", shape->channels)) ||
      failed(checkPerChannel(s, *bias, "bias", shape->channels)))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type compute =
      train::computeType(TensorBuilder::typeOf(*input).getElementType());
  Value x = b.convert(*input, compute);
  Value grouped =
      b.view(x, {shape->batch, shape->groups, shape->groupElements()});
  Value mean = b.mean(grouped, {2}, /*keepdim=*/true);
  Value centered = b.sub(grouped, mean);
  Value variance = b.mean(b.mul(centered, centered), {2}, /*keepdim=*/true);
  Value rstd = b.rsqrt(b.addScalar(variance, *eps));
  SmallVector<int64_t> statisticShape = {shape->batch, shape->groups};
  mean = b.view(mean, statisticShape);
  rstd = b.view(rstd, statisticShape);

  // `x * scale + shift` with `[N, C]` coefficients, as torch's kernel.
  Value scale = perChannel(b, rstd, *shape);
  if (*weight)
    scale =
        b.mul(scale, b.view(b.convert(*weight, compute), {1, shape->channels}));
  Value meanScale = b.mul(perChannel(b, mean, *shape), scale);
  Value shift =
      *bias ? b.sub(b.view(b.convert(*bias, compute), {1, shape->channels}),
                    meanScale)
            : b.mulScalar(meanScale, -1.0);
  SmallVector<int64_t> channelShape = {shape->batch, shape->channels, 1};
  Value rows = b.view(x, {shape->batch, shape->channels, shape->inner});
  Value out = b.add(b.mul(rows, b.view(scale, channelShape)),
                    b.view(shift, channelShape));
  out = b.view(out, TensorBuilder::shapeOf(*input));

  Value results[] = {out, mean, rstd};
  for (unsigned index = 0; index < 3; ++index)
    if (s.hasOutput(index) &&
        failed(setCheckedOutput(s, index, results[index])))
      return failure();
  return success();
}

/// aten.native_group_norm_backward(grad_out, input, mean, rstd, weight?, N,
/// C, HxW, group, output_mask) -> (grad_input?, grad_weight?, grad_bias?).
static LogicalResult importGroupNormBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_out");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> meanArgument = s.tensorArgument("mean");
  if (failed(meanArgument))
    return failure();
  FailureOr<Value> rstdArgument = s.tensorArgument("rstd");
  if (failed(rstdArgument))
    return failure();
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<GroupNormShape> shape = readGroupNorm(s, *input);
  if (failed(shape) ||
      failed(checkPerChannel(s, *weight, "weight", shape->channels)))
    return failure();
  FailureOr<SmallVector<bool, 3>> mask = s.outputMaskArgument();
  if (failed(mask))
    return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(*input);
  if (TensorBuilder::shapeOf(*grad) != inputShape)
    return s.fail(
        llvm::formatv("grad_out has shape {0}, the input {1}",
                      train::formatShape(TensorBuilder::shapeOf(*grad)),
                      train::formatShape(inputShape))
            .str());
  SmallVector<int64_t> statisticShape = {shape->batch, shape->groups};
  for (auto [name, value] : {std::pair<StringRef, Value>{"mean", *meanArgument},
                             {"rstd", *rstdArgument}})
    if (ShapedType::getNumElements(TensorBuilder::shapeOf(value)) !=
        shape->batch * shape->groups)
      return s.fail(
          llvm::formatv("{0} has shape {1}, expected {2}", name,
                        train::formatShape(TensorBuilder::shapeOf(value)),
                        train::formatShape(statisticShape))
              .str());

  TensorBuilder b(s.builder, s.location);
  Type compute =
      train::computeType(TensorBuilder::typeOf(*input).getElementType());
  SmallVector<int64_t> rowShape = {shape->batch, shape->channels, shape->inner};
  Value x = b.view(b.convert(*input, compute), rowShape);
  Value dy = b.view(b.convert(*grad, compute), rowShape);
  Value mean = b.view(b.convert(*meanArgument, compute), statisticShape);
  Value rstd = b.view(b.convert(*rstdArgument, compute), statisticShape);
  // Per (n, c): ds = sum(dy * x), db = sum(dy) over the channel's elements.
  Value ds = b.sum(b.mul(dy, x), {2}, /*keepdim=*/false);
  Value db = b.sum(dy, {2}, /*keepdim=*/false);
  Value gamma;
  if (*weight)
    gamma = b.view(b.convert(*weight, compute), {1, shape->channels});

  if ((*mask)[0] && s.hasOutput(0)) {
    SmallVector<int64_t> groupShape = {shape->batch, shape->groups,
                                       shape->groupChannels()};
    auto groupSum = [&](Value perChannelValue) {
      if (gamma)
        perChannelValue = b.mul(perChannelValue, gamma);
      return b.sum(b.view(perChannelValue, groupShape), {2},
                   /*keepdim=*/false);
    };
    Value dsGroup = groupSum(ds);
    Value dbGroup = groupSum(db);
    double inverseCount = 1.0 / static_cast<double>(shape->groupElements());
    // With s = 1 / (C / group * HxW): c1 = rstd * gamma,
    // c2 = (db * mean - ds) * rstd^3 * s, c3 = -c2 * mean - db * rstd * s.
    Value c1 = b.view(rstd, {shape->batch, shape->groups, 1});
    if (gamma)
      c1 = b.mul(c1, b.view(gamma, {shape->groups, shape->groupChannels()}));
    Value c2 = b.sub(b.mul(dbGroup, mean), dsGroup);
    c2 = b.mulScalar(b.mul(b.mul(b.mul(c2, rstd), rstd), rstd), inverseCount);
    Value c3 = b.sub(b.mulScalar(b.mul(c2, mean), -1.0),
                     b.mulScalar(b.mul(dbGroup, rstd), inverseCount));
    SmallVector<int64_t> elementShape = {shape->batch, shape->groups,
                                         shape->groupChannels(), shape->inner};
    SmallVector<int64_t> coefficientShape = {shape->batch, shape->groups, 1, 1};
    Value gradInput = b.mul(b.view(dy, elementShape),
                            b.view(c1, {shape->batch, shape->groups,
                                        TensorBuilder::shapeOf(c1).back(), 1}));
    gradInput = b.add(gradInput, b.mul(b.view(x, elementShape),
                                       b.view(c2, coefficientShape)));
    gradInput = b.add(gradInput, b.view(c3, coefficientShape));
    if (failed(setCheckedOutput(s, 0, b.view(gradInput, inputShape))))
      return failure();
  }
  if ((*mask)[1] && s.hasOutput(1)) {
    // sum over n of (ds - db * mean) * rstd.
    Value centered = b.sub(ds, b.mul(db, perChannel(b, mean, *shape)));
    Value gradWeight = b.sum(b.mul(centered, perChannel(b, rstd, *shape)), {0},
                             /*keepdim=*/false);
    if (failed(setCheckedOutput(s, 1, gradWeight)))
      return failure();
  }
  if ((*mask)[2] && s.hasOutput(2) &&
      failed(setCheckedOutput(s, 2, b.sum(db, {0}, /*keepdim=*/false))))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

namespace {

/// How a spelling of batch norm takes its arguments and what it returns.
struct BatchNormForm {
  /// The `training` flag is an argument (else the form is evaluation only:
  /// `_native_batch_norm_legit_no_training`).
  bool hasTrainingArgument = true;
  /// Outputs 3 and 4 are the updated running statistics
  /// (`_native_batch_norm_legit_functional`).
  bool returnsRunningStats = false;
};

/// The input `[N, C, ...]` as `[N, C, HxW]`, reduced over dimensions 0 and 2.
struct BatchNormShape {
  int64_t batch = 0, channels = 0, inner = 1;

  SmallVector<int64_t> rows() const { return {batch, channels, inner}; }
  /// The elements each channel's statistics are taken over.
  int64_t count() const { return batch * inner; }
};

} // namespace

/// The input's batch, channels and elements per channel (`[N, C, ...]`).
static FailureOr<BatchNormShape> readBatchNorm(StepImporter &s, Value input) {
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(input);
  if (inputShape.size() < 2)
    return s.fail(llvm::formatv("the input has shape {0}; batch norm needs "
                                "[N, C, ...]",
                                train::formatShape(inputShape))
                      .str());
  BatchNormShape shape;
  shape.batch = inputShape[0];
  shape.channels = inputShape[1];
  shape.inner = ShapedType::getNumElements(inputShape.drop_front(2));
  return shape;
}

/// `value` (`[C]`) shaped to broadcast over `[N, C, HxW]`.
static Value channelColumn(TensorBuilder &b, Value value,
                           const BatchNormShape &shape) {
  return b.view(value, {shape.channels, 1});
}

/// The batch norms: aten.native_batch_norm(input, weight?, bias?,
/// running_mean?, running_var?, training, momentum, eps) and the
/// `_native_batch_norm_legit*` spellings of torch >= 2.0 -> (out, save_mean,
/// save_invstd) and, for the functional form, (new_running_mean,
/// new_running_var). In training mode the statistics are the batch's and
/// the running ones move towards them by `momentum` (the variance unbiased);
/// in evaluation mode the running statistics normalise. native_batch_norm
/// and `_native_batch_norm_legit` in training mode update running statistics
/// in place, which no output of theirs carries: a functionalised program
/// has `_native_batch_norm_legit_functional` instead, whose new statistics
/// are buffer_mutation outputs, so only the three outputs are imported.
static LogicalResult importBatchNorm(StepImporter &s, BatchNormForm form) {
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<Value> bias = s.optionalTensorArgument("bias");
  if (failed(bias))
    return failure();
  FailureOr<Value> runningMean = s.optionalTensorArgument("running_mean");
  if (failed(runningMean))
    return failure();
  FailureOr<Value> runningVar = s.optionalTensorArgument("running_var");
  if (failed(runningVar))
    return failure();
  bool training = false;
  if (form.hasTrainingArgument) {
    const pt2::Argument *given = s.findArgument("training");
    if (!given || given->kind != pt2::ArgumentKind::Bool)
      return s.fail("argument 'training' must be a bool");
    training = given->boolValue;
  }
  FailureOr<double> momentum = s.floatArgument("momentum");
  if (failed(momentum))
    return failure();
  FailureOr<double> eps = s.floatArgument("eps");
  if (failed(eps))
    return failure();
  FailureOr<BatchNormShape> shape = readBatchNorm(s, *input);
  if (failed(shape))
    return failure();
  for (auto [name, value] : {std::pair<StringRef, Value>{"weight", *weight},
                             {"bias", *bias},
                             {"running_mean", *runningMean},
                             {"running_var", *runningVar}})
    if (failed(checkPerChannel(s, value, name, shape->channels)))
      return failure();
  bool hasRunningStats = *runningMean && *runningVar;
  if (!training && !hasRunningStats)
    return s.fail("evaluation mode (training = False) needs running_mean and "
                  "running_var");
  bool updatesRunningStats = training && form.returnsRunningStats;
  if (updatesRunningStats && shape->count() < 2)
    return s.fail(
        llvm::formatv("training mode needs more than one value per "
                      "channel for the running variance, the input "
                      "{0} has {1}",
                      train::formatShape(TensorBuilder::shapeOf(*input)),
                      shape->count())
            .str());

  TensorBuilder b(s.builder, s.location);
  Type compute =
      train::computeType(TensorBuilder::typeOf(*input).getElementType());
  Value x = b.view(b.convert(*input, compute), shape->rows());
  Value mean, invstd, varianceSum;
  if (training) {
    mean = b.view(b.mean(x, {0, 2}, /*keepdim=*/true), {shape->channels});
    Value centered = b.sub(x, channelColumn(b, mean, *shape));
    varianceSum = b.sum(b.mul(centered, centered), {0, 2}, /*keepdim=*/false);
    Value variance =
        b.divScalar(varianceSum, static_cast<double>(shape->count()));
    invstd = b.rsqrt(b.addScalar(variance, *eps));
  } else {
    mean = b.convert(*runningMean, compute);
    invstd = b.rsqrt(b.addScalar(b.convert(*runningVar, compute), *eps));
  }

  // `x * scale + shift` with per-channel coefficients, as torch's kernel.
  Value scale = invstd;
  if (*weight)
    scale = b.mul(scale, b.convert(*weight, compute));
  Value meanScale = b.mul(mean, scale);
  Value shift = *bias ? b.sub(b.convert(*bias, compute), meanScale)
                      : b.mulScalar(meanScale, -1.0);
  Value out = b.add(b.mul(x, channelColumn(b, scale, *shape)),
                    channelColumn(b, shift, *shape));

  if (s.hasOutput(0) && failed(setCheckedOutput(
                            s, 0, b.view(out, TensorBuilder::shapeOf(*input)))))
    return failure();
  // In evaluation mode torch's CPU kernels return empty saved statistics.
  Value saved[] = {mean, invstd};
  for (unsigned index : {1u, 2u}) {
    if (!s.hasOutput(index))
      continue;
    FailureOr<RankedTensorType> type = s.outputType(index);
    if (failed(type))
      return failure();
    Value value = saved[index - 1];
    if (!training && type->getNumElements() == 0)
      value = b.full(type->getShape(), compute, 0.0);
    if (failed(setCheckedOutput(s, index, value)))
      return failure();
  }
  if (!form.returnsRunningStats)
    return success();
  // new = (1 - momentum) * running + momentum * batch, with the unbiased
  // variance; evaluation mode returns the running statistics unchanged.
  Value newMean = b.convert(*runningMean, compute);
  Value newVar = b.convert(*runningVar, compute);
  if (updatesRunningStats) {
    Value unbiased =
        b.divScalar(varianceSum, static_cast<double>(shape->count() - 1));
    newMean = b.add(b.mulScalar(mean, *momentum),
                    b.mulScalar(newMean, 1.0 - *momentum));
    newVar = b.add(b.mulScalar(unbiased, *momentum),
                   b.mulScalar(newVar, 1.0 - *momentum));
  }
  if (s.hasOutput(3) && failed(setCheckedOutput(s, 3, newMean)))
    return failure();
  if (s.hasOutput(4) && failed(setCheckedOutput(s, 4, newVar)))
    return failure();
  return success();
}

/// aten.native_batch_norm_backward(grad_out, input, weight?, running_mean?,
/// running_var?, save_mean?, save_invstd?, train, eps, output_mask) ->
/// (grad_input?, grad_weight?, grad_bias?). Training mode differentiates
/// through the batch statistics saved by the forward; evaluation mode
/// normalised with the running ones, which are constants.
static LogicalResult importBatchNormBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_out");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(weight))
    return failure();
  const pt2::Argument *trainArgument = s.findArgument("train");
  if (!trainArgument || trainArgument->kind != pt2::ArgumentKind::Bool)
    return s.fail("argument 'train' must be a bool");
  bool training = trainArgument->boolValue;
  StringRef meanName = training ? "save_mean" : "running_mean";
  StringRef spreadName = training ? "save_invstd" : "running_var";
  FailureOr<Value> meanArgument = s.optionalTensorArgument(meanName);
  if (failed(meanArgument))
    return failure();
  FailureOr<Value> spreadArgument = s.optionalTensorArgument(spreadName);
  if (failed(spreadArgument))
    return failure();
  if (!*meanArgument || !*spreadArgument)
    return s.fail(llvm::formatv("{0} mode (train = {1}) needs {2} and {3}",
                                training ? "training" : "evaluation",
                                training ? "True" : "False", meanName,
                                spreadName)
                      .str());
  FailureOr<double> eps = s.floatArgument("eps");
  if (failed(eps))
    return failure();
  FailureOr<SmallVector<bool, 3>> mask = s.outputMaskArgument();
  if (failed(mask))
    return failure();
  FailureOr<BatchNormShape> shape = readBatchNorm(s, *input);
  if (failed(shape))
    return failure();
  for (auto [name, value] : {std::pair<StringRef, Value>{"weight", *weight},
                             {meanName, *meanArgument},
                             {spreadName, *spreadArgument}})
    if (failed(checkPerChannel(s, value, name, shape->channels)))
      return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(*input);
  if (TensorBuilder::shapeOf(*grad) != inputShape)
    return s.fail(
        llvm::formatv("grad_out has shape {0}, the input {1}",
                      train::formatShape(TensorBuilder::shapeOf(*grad)),
                      train::formatShape(inputShape))
            .str());

  TensorBuilder b(s.builder, s.location);
  Type compute =
      train::computeType(TensorBuilder::typeOf(*input).getElementType());
  Value x = b.view(b.convert(*input, compute), shape->rows());
  Value dy = b.view(b.convert(*grad, compute), shape->rows());
  Value mean = b.convert(*meanArgument, compute);
  Value invstd = b.convert(*spreadArgument, compute);
  if (!training)
    invstd = b.rsqrt(b.addScalar(invstd, *eps));
  // Per channel: sum(dy) and the dot product of (x - mean) with dy.
  Value gradSum = b.sum(dy, {0, 2}, /*keepdim=*/false);
  Value centered = b.sub(x, channelColumn(b, mean, *shape));
  Value dotProduct = b.sum(b.mul(centered, dy), {0, 2}, /*keepdim=*/false);

  if ((*mask)[0] && s.hasOutput(0)) {
    Value scale = invstd;
    if (*weight)
      scale = b.mul(scale, b.convert(*weight, compute));
    Value gradInput;
    if (training) {
      // (dy - sum(dy) / n - (x - mean) * k) * invstd * weight with
      // k = dot * invstd^2 / n.
      double count = static_cast<double>(shape->count());
      Value k = b.divScalar(b.mul(b.mul(dotProduct, invstd), invstd), count);
      Value projection = b.mul(centered, channelColumn(b, k, *shape));
      Value gradMean = b.divScalar(gradSum, count);
      gradInput =
          b.sub(b.sub(dy, channelColumn(b, gradMean, *shape)), projection);
      gradInput = b.mul(gradInput, channelColumn(b, scale, *shape));
    } else {
      gradInput = b.mul(dy, channelColumn(b, scale, *shape));
    }
    if (failed(setCheckedOutput(s, 0, b.view(gradInput, inputShape))))
      return failure();
  }
  if ((*mask)[1] && s.hasOutput(1) &&
      failed(setCheckedOutput(s, 1, b.mul(dotProduct, invstd))))
    return failure();
  if ((*mask)[2] && s.hasOutput(2) && failed(setCheckedOutput(s, 2, gradSum)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Layer and RMS norms
//===----------------------------------------------------------------------===//

/// The number of trailing dimensions named by `normalized_shape`, checked
/// against the input's shape.
static FailureOr<int64_t> normalizedRank(ArrayRef<int64_t> normalizedShape,
                                         Value input) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(input.getType()).getShape();
  if (normalizedShape.empty() || normalizedShape.size() > shape.size() ||
      shape.take_back(normalizedShape.size()) != normalizedShape)
    return failure();
  return static_cast<int64_t>(normalizedShape.size());
}

static LogicalResult importLayerNorm(StepImporter &s) {
  FailureOr<Value> input = s.tensorArgument("input");
  FailureOr<SmallVector<int64_t>> shape = s.intsArgument("normalized_shape");
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  FailureOr<Value> bias = s.optionalTensorArgument("bias");
  FailureOr<double> eps = s.floatArgument("eps");
  if (failed(input) || failed(shape) || failed(weight) || failed(bias) ||
      failed(eps))
    return failure();
  FailureOr<int64_t> rank = normalizedRank(*shape, *input);
  if (failed(rank))
    return s.fail("normalized_shape does not match the input's trailing shape");
  SmallVector<Type> types;
  for (unsigned i = 0; i < 3; ++i) {
    FailureOr<RankedTensorType> type = s.outputType(i);
    if (failed(type))
      return failure();
    types.push_back(*type);
  }
  auto op = s.builder.create<train::LayerNormOp>(
      s.location, types, *input, *weight, *bias,
      s.builder.getI64IntegerAttr(*rank), s.builder.getF64FloatAttr(*eps));
  return s.setOutputs(op.getResults());
}

static LogicalResult importLayerNormBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_out");
  FailureOr<Value> input = s.tensorArgument("input");
  FailureOr<SmallVector<int64_t>> shape = s.intsArgument("normalized_shape");
  FailureOr<Value> mean = s.tensorArgument("mean");
  FailureOr<Value> rstd = s.tensorArgument("rstd");
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  FailureOr<Value> bias = s.optionalTensorArgument("bias");
  if (failed(grad) || failed(input) || failed(shape) || failed(mean) ||
      failed(rstd) || failed(weight) || failed(bias))
    return failure();
  FailureOr<int64_t> rank = normalizedRank(*shape, *input);
  if (failed(rank))
    return s.fail("normalized_shape does not match the input's trailing shape");
  auto op = s.builder.create<train::LayerNormBackwardOp>(
      s.location, *grad, *input, *mean, *rstd, *weight, *bias, *rank);
  // Outputs that torch's output_mask turned off are None and stay unused.
  return s.setOutputs(op.getResults());
}

static LogicalResult importRmsNorm(StepImporter &s) {
  FailureOr<Value> input = s.tensorArgument("input");
  FailureOr<SmallVector<int64_t>> shape = s.intsArgument("normalized_shape");
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(input) || failed(shape) || failed(weight))
    return failure();
  FailureOr<int64_t> rank = normalizedRank(*shape, *input);
  if (failed(rank))
    return s.fail("normalized_shape does not match the input's trailing shape");
  FloatAttr eps;
  if (s.findArgument("eps")) {
    FailureOr<double> value = s.floatArgument("eps");
    if (failed(value))
      return failure();
    eps = s.builder.getF64FloatAttr(*value);
  }
  auto op = s.builder.create<train::RmsNormOp>(
      s.location, *input, *weight, s.builder.getI64IntegerAttr(*rank), eps);
  return s.setOutputs(op.getResults());
}

static LogicalResult importRmsNormBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_out");
  FailureOr<Value> input = s.tensorArgument("input");
  FailureOr<SmallVector<int64_t>> shape = s.intsArgument("normalized_shape");
  FailureOr<Value> rstd = s.tensorArgument("rstd");
  FailureOr<Value> weight = s.optionalTensorArgument("weight");
  if (failed(grad) || failed(input) || failed(shape) || failed(rstd) ||
      failed(weight))
    return failure();
  FailureOr<int64_t> rank = normalizedRank(*shape, *input);
  if (failed(rank))
    return s.fail("normalized_shape does not match the input's trailing shape");
  auto op = s.builder.create<train::RmsNormBackwardOp>(
      s.location, *grad, *input, *rstd, *weight, *rank);
  return s.setOutputs(op.getResults());
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

void mlir::mantissa::importer::addNormalizationHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  add("native_layer_norm.default", importLayerNorm);
  add("native_layer_norm_backward.default", importLayerNormBackward);
  add("_fused_rms_norm.default", importRmsNorm);
  add("_fused_rms_norm_backward.default", importRmsNormBackward);
  add("native_group_norm.default", importGroupNorm);
  add("native_group_norm_backward.default", importGroupNormBackward);
  BatchNormForm training, evaluation, functional;
  evaluation.hasTrainingArgument = false;
  functional.returnsRunningStats = true;
  auto batchNorm = [](BatchNormForm form) {
    return [form](StepImporter &s) { return importBatchNorm(s, form); };
  };
  for (StringRef name :
       {"native_batch_norm.default", "_native_batch_norm_legit.default",
        "_native_batch_norm_legit.no_stats"})
    add(name, batchNorm(training));
  add("_native_batch_norm_legit_no_training.default", batchNorm(evaluation));
  add("_native_batch_norm_legit_functional.default", batchNorm(functional));
  add("native_batch_norm_backward.default", importBatchNormBackward);
}
