//===- RandomDraws.cpp - A random step argument's draw in IR --------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/RandomDraws.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::mantissa;

DictionaryAttr train::getRandomDrawAttr(MLIRContext *context,
                                        const rt::RandomDraw &draw) {
  Builder builder(context);
  return builder.getDictionaryAttr(
      {builder.getNamedAttr("distribution",
                            builder.getStringAttr(
                                rt::randomDistributionName(draw.distribution))),
       builder.getNamedAttr("low", builder.getF64FloatAttr(draw.low)),
       builder.getNamedAttr("high", builder.getF64FloatAttr(draw.high)),
       builder.getNamedAttr("node", builder.getStringAttr(draw.node)),
       builder.getNamedAttr("per_sample",
                            builder.getBoolAttr(draw.perSample))});
}

std::optional<rt::RandomDraw> train::getRandomDraw(StepOp step, unsigned index,
                                                   std::string &error) {
  auto dictionary =
      step.getArgAttrOfType<DictionaryAttr>(index, kRandomDrawAttrName);
  if (!dictionary) {
    error = "has no '" + kRandomDrawAttrName.str() + "' dictionary";
    return std::nullopt;
  }
  auto distribution = dictionary.getAs<StringAttr>("distribution");
  auto low = dictionary.getAs<FloatAttr>("low");
  auto high = dictionary.getAs<FloatAttr>("high");
  auto node = dictionary.getAs<StringAttr>("node");
  auto perSample = dictionary.getAs<BoolAttr>("per_sample");
  if (!distribution || !low || !high || !node || !perSample) {
    error = "'" + kRandomDrawAttrName.str() +
            "' needs distribution, node (strings), low, high (floats) and "
            "per_sample (a bool)";
    return std::nullopt;
  }
  std::optional<rt::RandomDraw::Distribution> parsed =
      rt::parseRandomDistribution(distribution.getValue().str());
  if (!parsed) {
    error = "unknown distribution '" + distribution.getValue().str() + "'";
    return std::nullopt;
  }
  rt::RandomDraw draw;
  draw.distribution = *parsed;
  draw.low = low.getValueAsDouble();
  draw.high = high.getValueAsDouble();
  draw.node = node.getValue().str();
  draw.perSample = perSample.getValue();
  auto type = cast<RankedTensorType>(step.getArgument(index).getType());
  std::optional<rt::DType> dtype = getStoredDType(type.getElementType());
  std::string problem =
      dtype ? rt::checkRandomDraw(draw, *dtype,
                                  std::vector<int64_t>(type.getShape().begin(),
                                                       type.getShape().end()))
            : "its element type is not a stored dtype";
  if (!problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  return draw;
}
