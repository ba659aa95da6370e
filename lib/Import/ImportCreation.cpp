//===- ImportCreation.cpp - Tensors made from numbers ---------------------===//
//
// full, zeros, ones, empty (as zeros), fill, scalar_tensor and arange, in
// every spelling torch emits. Shapes and
// dtypes come from torch's metadata of the result.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include <optional>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;
using Operand = StepImporter::Operand;

/// `fill(self, value)` with a zero-dimensional tensor `value`: self's shape
/// and dtype, every element the value converted.
static LogicalResult importFillTensor(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Operand> value =
      succeeded(self) ? s.operandArgument("value") : FailureOr<Operand>();
  FailureOr<RankedTensorType> type =
      succeeded(value) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(value) || failed(type))
    return failure();
  if (value->isNumber())
    return s.setOutput(
        0, s.builder.create<FullOp>(s.location, *type, value->number));
  if (s.rankOf(value->tensor) != 0)
    return s.fail("argument 'value' has rank " +
                  Twine(s.rankOf(value->tensor)) +
                  ", expected a zero-dimensional tensor");
  Value converted = s.materialize(*value, type->getElementType());
  return s.setOutput(0,
                     s.builder.create<ExpandOp>(s.location, *type, converted));
}

static LogicalResult importFull(StepImporter &s,
                                std::optional<double> fixedValue,
                                StringRef valueArgument) {
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  FailureOr<Attribute> value =
      fixedValue ? FailureOr<Attribute>(Attribute(
                       isIntegral(type->getElementType())
                           ? Attribute(s.builder.getI64IntegerAttr(
                                 static_cast<int64_t>(*fixedValue)))
                           : Attribute(s.builder.getF64FloatAttr(*fixedValue))))
                 : s.scalarArgument(valueArgument);
  if (failed(value))
    return failure();
  return s.setOutput(0, s.builder.create<FullOp>(s.location, *type, *value));
}

static LogicalResult importArange(StepImporter &s) {
  FailureOr<RankedTensorType> type = s.outputType();
  FailureOr<Attribute> start =
      s.findArgument("start")
          ? s.scalarArgument("start")
          : FailureOr<Attribute>(Attribute(s.builder.getI64IntegerAttr(0)));
  FailureOr<Attribute> end = s.scalarArgument("end");
  FailureOr<Attribute> step =
      s.findArgument("step")
          ? s.scalarArgument("step")
          : FailureOr<Attribute>(Attribute(s.builder.getI64IntegerAttr(1)));
  if (failed(type) || failed(start) || failed(end) || failed(step))
    return failure();
  return s.setOutput(
      0, s.builder.create<ArangeOp>(s.location, *type, *start, *end, *step));
}

void mlir::mantissa::importer::addCreationHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Creation. Shapes and dtypes come from torch's metadata of the result.
  add("full.default",
      [](StepImporter &s) { return importFull(s, {}, "fill_value"); });
  add("full_like.default",
      [](StepImporter &s) { return importFull(s, {}, "fill_value"); });
  add("new_full.default",
      [](StepImporter &s) { return importFull(s, {}, "fill_value"); });
  add("scalar_tensor.default",
      [](StepImporter &s) { return importFull(s, {}, "s"); });
  // fill(self, value): self's shape and dtype, every element `value`.
  add("fill.Scalar",
      [](StepImporter &s) { return importFull(s, {}, "value"); });
  add("fill.Tensor", importFillTensor);
  for (StringRef name :
       {"zeros.default", "zeros_like.default", "new_zeros.default",
        "empty.memory_format", "empty_like.default", "new_empty.default",
        "empty_permuted.default", "empty_strided.default"})
    add(name, [](StepImporter &s) { return importFull(s, 0.0, ""); });
  for (StringRef name :
       {"ones.default", "ones_like.default", "new_ones.default"})
    add(name, [](StepImporter &s) { return importFull(s, 1.0, ""); });
  for (StringRef name : {"arange.default", "arange.start", "arange.start_step"})
    add(name, importArange);
}
