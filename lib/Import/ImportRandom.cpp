//===- ImportRandom.cpp - Random numbers drawn inside the step ------------===//
//
// randn, randn_like, rand, rand_like, randint, randint_like, normal,
// uniform, bernoulli and native_dropout (torch.export's F.dropout), in the
// spellings torch's joint programs emit. Each draw becomes a `random` step
// argument (StepImporter::addRandomArgument) that the runtime fills before
// every micro-batch from the run's seed, the node's name and the sample's
// global index (mantissa/Format/RandomDraw.h, docs/randomness.md); what
// the operator computes from its draw (dropout's product, bernoulli's
// comparison) is ordinary `train` operations. The result's dtype and shape
// are torch's recorded ones; a dtype or parameter the generator cannot
// honour fails the node, naming it.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "mantissa/Dialect/Train/IR/RandomDraws.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;
using Distribution = rt::RandomDraw::Distribution;

Value StepImporter::addRandomArgument(RankedTensorType type,
                                      rt::RandomDraw draw) {
  draw.node = currentNode->name;
  std::optional<rt::DType> dtype = getStoredDType(type.getElementType());
  // The sample dimension rule (docs/randomness.md): a draw whose leading
  // dimension is the micro-batch's B is drawn per sample.
  draw.perSample =
      samples > 0 && type.getRank() > 0 && type.getDimSize(0) == samples;
  std::string problem =
      dtype ? rt::checkRandomDraw(draw, *dtype,
                                  std::vector<int64_t>(type.getShape().begin(),
                                                       type.getShape().end()))
            : "its dtype has no stored form";
  if (!problem.empty()) {
    (void)fail(problem);
    return {};
  }
  StringRef module =
      currentNode->moduleStackEntries.empty()
          ? StringRef()
          : StringRef(currentNode->moduleStackEntries.back().path);
  auto info = TensorInfoAttr::get(
      &context, TensorKind::random, builder.getStringAttr(draw.node),
      builder.getStringAttr(module),
      DenseI64ArrayAttr::get(&context, type.getShape()), type.getElementType(),
      true);
  randomTypes.push_back(type);
  randomAttrs.push_back(builder.getDictionaryAttr(
      {builder.getNamedAttr(StepOp::kTensorInfoAttrName, info),
       builder.getNamedAttr(kRandomDrawAttrName,
                            getRandomDrawAttr(&context, draw))}));
  return body->addArgument(type, location);
}

namespace {

rt::RandomDraw makeDraw(Distribution distribution, double low, double high) {
  rt::RandomDraw draw;
  draw.distribution = distribution;
  draw.low = low;
  draw.high = high;
  return draw;
}

/// Output 0 of torch's type, drawn from `draw`.
LogicalResult emitDraw(StepImporter &s, const rt::RandomDraw &draw) {
  FailureOr<RankedTensorType> type = s.outputType(0);
  if (failed(type))
    return failure();
  Value value = s.addRandomArgument(*type, draw);
  if (!value)
    return failure();
  return s.setOutput(0, value);
}

/// A generator argument other than None: the run's seed decides every draw.
LogicalResult refuseGenerator(StepImporter &s) {
  const pt2::Argument *generator = s.findArgument("generator");
  if (generator && generator->kind != pt2::ArgumentKind::None)
    return s.fail("an explicit torch.Generator is not supported (the run's "
                  "--seed decides every draw)");
  return success();
}

/// randint's bounds: `low` (0 when the overload has none) and `high`.
LogicalResult importRandint(StepImporter &s, bool hasLow) {
  FailureOr<int64_t> low =
      hasLow ? s.intArgument("low") : FailureOr<int64_t>(0);
  FailureOr<int64_t> high = s.intArgument("high");
  if (failed(low) || failed(high) || failed(refuseGenerator(s)))
    return failure();
  return emitDraw(s,
                  makeDraw(Distribution::Integer, double(*low), double(*high)));
}

/// native_dropout(input, p, train): the keep mask is a Bernoulli(1 - p) draw
/// and the output input * mask * (1 / (1 - p)), as ATen's CPU kernel
/// computes it (a scale of 0 for p = 1). At p = 0, or in eval mode, nothing
/// is drawn: the output is the input and the mask all true, so a model with
/// dropout 0 runs the same step as one without dropout.
LogicalResult importNativeDropout(StepImporter &s) {
  FailureOr<Value> input = s.tensorArgument("input");
  FailureOr<double> p = s.floatArgument("p");
  if (failed(input) || failed(p))
    return failure();
  const pt2::Argument *trainArgument = s.findArgument("train");
  bool training = !trainArgument ||
                  trainArgument->kind == pt2::ArgumentKind::None ||
                  s.boolArgument("train", true);
  if (!(*p >= 0 && *p <= 1))
    return s.fail(
        llvm::formatv("dropout probability {0} is outside [0, 1]", *p).str());
  FailureOr<RankedTensorType> outputType = s.outputType(0);
  FailureOr<RankedTensorType> maskType = s.outputType(1);
  if (failed(outputType) || failed(maskType))
    return failure();
  if (!training || *p == 0) {
    Value mask = s.builder.create<FullOp>(s.location, *maskType,
                                          s.builder.getBoolAttr(true));
    if (failed(s.setOutput(0, *input)))
      return failure();
    return s.setOutput(1, mask);
  }
  Value mask = s.addRandomArgument(
      *maskType, makeDraw(Distribution::Bernoulli, 1.0 - *p, 0.0));
  if (!mask)
    return failure();
  double keep = 1.0 - *p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  Value masked = s.builder.create<MulOp>(s.location, *outputType, *input, mask);
  Value output = s.builder.create<MulScalarOp>(
      s.location, *outputType, masked, s.builder.getF64FloatAttr(scale));
  if (failed(s.setOutput(0, output)))
    return failure();
  return s.setOutput(1, mask);
}

/// bernoulli(self): 1 where a uniform draw of self's dtype is below self's
/// probability, as ATen's CPU kernel compares.
LogicalResult importBernoulliTensor(StepImporter &s) {
  FailureOr<Value> probabilities = s.tensorArgument("self");
  FailureOr<RankedTensorType> type = s.outputType(0);
  if (failed(probabilities) || failed(type) || failed(refuseGenerator(s)))
    return failure();
  auto probabilityType = cast<RankedTensorType>(probabilities->getType());
  if (!isa<FloatType>(probabilityType.getElementType()))
    return s.fail("the probabilities must be a floating-point tensor");
  Value uniform = s.addRandomArgument(
      probabilityType, makeDraw(Distribution::Uniform, 0.0, 1.0));
  if (!uniform)
    return failure();
  auto boolType =
      RankedTensorType::get(probabilityType.getShape(), s.builder.getI1Type());
  Value below =
      s.builder.create<LtOp>(s.location, boolType, uniform, *probabilities);
  return s.setOutput(0, s.convert(below, type->getElementType()));
}

} // namespace

void mlir::mantissa::importer::addRandomHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  auto fixed = [](Distribution distribution, double low, double high) {
    return [=](StepImporter &s) -> LogicalResult {
      if (failed(refuseGenerator(s)))
        return failure();
      return emitDraw(s, makeDraw(distribution, low, high));
    };
  };
  for (StringRef name : {"randn.default", "randn_like.default"})
    add(name, fixed(Distribution::Normal, 0.0, 1.0));
  for (StringRef name : {"rand.default", "rand_like.default"})
    add(name, fixed(Distribution::Uniform, 0.0, 1.0));
  add("randint.default",
      [](StepImporter &s) { return importRandint(s, false); });
  add("randint.low", [](StepImporter &s) { return importRandint(s, true); });
  add("randint_like.default",
      [](StepImporter &s) { return importRandint(s, false); });
  add("randint_like.low_dtype",
      [](StepImporter &s) { return importRandint(s, true); });
  // normal(mean, std, size) and the functional x.normal_(mean, std).
  for (StringRef name : {"normal.float_float", "normal_functional.default"})
    add(name, [](StepImporter &s) -> LogicalResult {
      FailureOr<double> mean = s.floatArgument("mean", 0.0);
      FailureOr<double> std = s.floatArgument("std", 1.0);
      if (failed(mean) || failed(std) || failed(refuseGenerator(s)))
        return failure();
      return emitDraw(s, makeDraw(Distribution::Normal, *mean, *std));
    });
  // The functional x.uniform_(from, to).
  add("uniform.default", [](StepImporter &s) -> LogicalResult {
    FailureOr<double> from = s.floatArgument("from", 0.0);
    FailureOr<double> to = s.floatArgument("to", 1.0);
    if (failed(from) || failed(to) || failed(refuseGenerator(s)))
      return failure();
    return emitDraw(s, makeDraw(Distribution::Uniform, *from, *to));
  });
  add("bernoulli.default", importBernoulliTensor);
  add("bernoulli.p", [](StepImporter &s) -> LogicalResult {
    FailureOr<double> p = s.floatArgument("p", 0.5);
    if (failed(p) || failed(refuseGenerator(s)))
      return failure();
    return emitDraw(s, makeDraw(Distribution::Bernoulli, *p, 0.0));
  });
  add("native_dropout.default", importNativeDropout);
}
