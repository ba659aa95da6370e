//===- StepImporter.cpp - What the handlers of ATen operators use ---------===//
//
// The handler interface of StepImporter.h: a node's arguments read as
// tensors, numbers, lists and dimensions (with torch's defaults and
// wrapped numbers), torch's common dtype, and the node's outputs set to the
// values the handler built. Every failure names the argument (through
// StepImporter::fail, which TorchImporter.cpp reports).
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include <algorithm>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Argument access
//===----------------------------------------------------------------------===//

const pt2::Argument *StepImporter::findArgument(StringRef name) const {
  const pt2::NamedArgument *input = currentNode->findInput(name);
  if (!input || input->arg.isNone())
    return nullptr;
  return &input->arg;
}

FailureOr<Value> StepImporter::tensorArgument(StringRef name) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument)
    return fail("missing tensor argument '" + name + "'");
  if (!argument->isTensor())
    return fail("argument '" + name + "' is " +
                pt2::stringifyArgumentKind(argument->kind) +
                ", expected a tensor");
  auto it = values.find(argument->tensorName);
  if (it == values.end())
    return fail("argument '" + name + "' names the undefined tensor '" +
                argument->tensorName + "'");
  return it->second;
}

Value StepImporter::findTensor(StringRef tensorName) const {
  auto it = values.find(tensorName);
  return it == values.end() ? Value() : it->second;
}

FailureOr<Value> StepImporter::optionalTensorArgument(StringRef name) {
  if (!findArgument(name))
    return Value();
  return tensorArgument(name);
}

FailureOr<SmallVector<Value>> StepImporter::tensorListArgument(StringRef name) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument || argument->kind != pt2::ArgumentKind::Tensors)
    return fail("argument '" + name + "' must be a list of tensors");
  SmallVector<Value> result;
  for (const std::string &tensorName : argument->tensorNames) {
    auto it = values.find(tensorName);
    if (it == values.end())
      return fail("argument '" + name + "' names the undefined tensor '" +
                  tensorName + "'");
    result.push_back(it->second);
  }
  return result;
}

FailureOr<int64_t>
StepImporter::intArgument(StringRef name, std::optional<int64_t> defaultValue) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument) {
    if (defaultValue)
      return *defaultValue;
    return fail("missing integer argument '" + name + "'");
  }
  if (argument->kind == pt2::ArgumentKind::Int)
    return argument->intValue;
  if (argument->kind == pt2::ArgumentKind::SymInt &&
      !argument->symInt.isSymbolic())
    return argument->symInt.value;
  return fail("argument '" + name + "' is a " +
              pt2::stringifyArgumentKind(argument->kind) +
              ", not an integer (symbolic shapes are not supported)");
}

FailureOr<SmallVector<int64_t>> StepImporter::intsArgument(StringRef name) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument)
    return fail("missing integer list argument '" + name + "'");
  if (argument->kind == pt2::ArgumentKind::Ints)
    return SmallVector<int64_t>(argument->intValues.begin(),
                                argument->intValues.end());
  if (argument->kind == pt2::ArgumentKind::Int)
    return SmallVector<int64_t>{argument->intValue};
  if (argument->kind == pt2::ArgumentKind::SymInts) {
    SmallVector<int64_t> result;
    for (const pt2::SymIntArgument &value : argument->symInts) {
      if (value.isSymbolic())
        return fail("argument '" + name +
                    "' has a symbolic size; only static shapes are supported");
      result.push_back(value.value);
    }
    return result;
  }
  return fail("argument '" + name + "' is a " +
              pt2::stringifyArgumentKind(argument->kind) +
              ", not a list of integers");
}

FailureOr<double>
StepImporter::floatArgument(StringRef name,
                            std::optional<double> defaultValue) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument) {
    if (defaultValue)
      return *defaultValue;
    return fail("missing number argument '" + name + "'");
  }
  switch (argument->kind) {
  case pt2::ArgumentKind::Float:
    return argument->floatValue;
  case pt2::ArgumentKind::Int:
    return static_cast<double>(argument->intValue);
  case pt2::ArgumentKind::Bool:
    return argument->boolValue ? 1.0 : 0.0;
  default:
    return fail("argument '" + name + "' is a " +
                pt2::stringifyArgumentKind(argument->kind) + ", not a number");
  }
}

bool StepImporter::boolArgument(StringRef name, bool defaultValue) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument || argument->kind != pt2::ArgumentKind::Bool)
    return defaultValue;
  return argument->boolValue;
}

FailureOr<Attribute>
StepImporter::scalarArgument(StringRef name,
                             std::optional<double> defaultValue) {
  const pt2::Argument *argument = findArgument(name);
  if (!argument) {
    if (defaultValue)
      return Attribute(builder.getF64FloatAttr(*defaultValue));
    return fail("missing number argument '" + name + "'");
  }
  switch (argument->kind) {
  case pt2::ArgumentKind::Int:
    return Attribute(builder.getI64IntegerAttr(argument->intValue));
  case pt2::ArgumentKind::Float:
    return Attribute(builder.getF64FloatAttr(argument->floatValue));
  case pt2::ArgumentKind::Bool:
    return Attribute(builder.getBoolAttr(argument->boolValue));
  default:
    return fail("argument '" + name + "' is a " +
                pt2::stringifyArgumentKind(argument->kind) + ", not a number");
  }
}

FailureOr<int64_t>
StepImporter::dimArgument(StringRef name, int64_t rank,
                          std::optional<int64_t> defaultValue) {
  FailureOr<int64_t> dim = intArgument(name, defaultValue);
  if (failed(dim))
    return failure();
  int64_t bound = std::max<int64_t>(rank, 1);
  if (*dim < -bound || *dim >= bound)
    return fail(
        llvm::formatv("dimension {0} is out of range for rank {1}", *dim, rank)
            .str());
  return *dim < 0 ? *dim + bound : *dim;
}

FailureOr<SmallVector<int64_t>> StepImporter::dimsArgument(StringRef name,
                                                           int64_t rank) {
  SmallVector<int64_t> dims;
  if (!findArgument(name))
    return dims;
  FailureOr<SmallVector<int64_t>> given = intsArgument(name);
  if (failed(given))
    return failure();
  int64_t bound = std::max<int64_t>(rank, 1);
  for (int64_t dim : *given) {
    if (dim < -bound || dim >= bound)
      return fail(
          llvm::formatv("dimension {0} is out of range for rank {1}", dim, rank)
              .str());
    dims.push_back(dim < 0 ? dim + bound : dim);
  }
  llvm::sort(dims);
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

FailureOr<int64_t> StepImporter::indexArgument(StringRef name, int64_t size) {
  FailureOr<int64_t> index = intArgument(name);
  if (failed(index))
    return failure();
  if (*index < -size || *index >= size)
    return fail(
        llvm::formatv("index {0} is out of range for size {1}", *index, size)
            .str());
  return *index < 0 ? *index + size : *index;
}

FailureOr<StepImporter::Operand> StepImporter::operandArgument(StringRef name) {
  const pt2::Argument *argument = findArgument(name);
  if (argument && !argument->isTensor()) {
    FailureOr<Attribute> number = scalarArgument(name);
    if (failed(number))
      return failure();
    return Operand{Value(), *number};
  }
  FailureOr<Value> tensor = tensorArgument(name);
  if (failed(tensor))
    return failure();
  return Operand{*tensor, Attribute()};
}

Type StepImporter::commonType(ArrayRef<Operand> operands) const {
  SmallVector<train::PromotionOperand> promotion;
  for (const Operand &operand : operands) {
    if (operand.isNumber()) {
      promotion.push_back({train::scalarElementType(operand.number), false,
                           /*isScalar=*/true});
      continue;
    }
    auto type = cast<RankedTensorType>(operand.tensor.getType());
    promotion.push_back({type.getElementType(), type.getRank() == 0, false});
  }
  return train::resultType(&context, promotion);
}

Value StepImporter::materialize(const Operand &operand, Type elementType) {
  if (operand.isNumber())
    return builder.create<FullOp>(
        location, RankedTensorType::get({}, elementType), operand.number);
  return convert(operand.tensor, elementType);
}

Value StepImporter::asTensor(const Operand &operand, Type numberType) {
  return operand.isNumber() ? materialize(operand, numberType) : operand.tensor;
}

Value StepImporter::convert(Value value, Type elementType) {
  return TensorBuilder(builder, location).convert(value, elementType);
}

FailureOr<SmallVector<int64_t>>
StepImporter::spatialArgument(StringRef name, ArrayRef<int64_t> defaults) {
  SmallVector<int64_t> values;
  if (findArgument(name)) {
    FailureOr<SmallVector<int64_t>> given = intsArgument(name);
    if (failed(given))
      return failure();
    values = *given;
  }
  if (values.empty())
    values.assign(defaults.begin(), defaults.end());
  else if (values.size() == 1)
    values.assign(defaults.size(), values.front());
  if (values.size() != defaults.size())
    return fail(llvm::formatv("argument '{0}' has {1} values for {2} spatial "
                              "dimension(s)",
                              name, values.size(), defaults.size())
                    .str());
  return values;
}

SmallVector<std::string> StepImporter::outputNames() const {
  SmallVector<std::string> names;
  for (const pt2::Argument &output : currentNode->outputs) {
    if (output.kind == pt2::ArgumentKind::Tensors)
      llvm::append_range(names, output.tensorNames);
    else if (output.isTensor())
      names.push_back(output.tensorName);
    else
      names.push_back("");
  }
  return names;
}

FailureOr<RankedTensorType> StepImporter::outputType(unsigned index) {
  SmallVector<std::string> names = outputNames();
  if (index >= names.size() || names[index].empty())
    return fail(llvm::formatv("has no tensor output #{0}", index).str());
  size_t knownProblems = problems.size();
  RankedTensorType type = getTensorType(names[index], "tensor");
  if (!type) {
    // The metadata problem is this node's failure.
    std::string message = problems.back();
    problems.resize(knownProblems);
    return fail("its output " + message);
  }
  return type;
}

LogicalResult StepImporter::setOutput(unsigned index, Value value) {
  SmallVector<std::string> names = outputNames();
  if (index >= names.size())
    return fail(llvm::formatv("has no output #{0}", index).str());
  if (!names[index].empty())
    values[names[index]] = value;
  return success();
}

LogicalResult StepImporter::setConvertedOutput(unsigned index, Value value) {
  FailureOr<RankedTensorType> type = outputType(index);
  if (failed(type))
    return failure();
  return setOutput(index, convert(value, type->getElementType()));
}

bool StepImporter::hasOutput(unsigned index) const {
  SmallVector<std::string> names = outputNames();
  return index < names.size() && !names[index].empty();
}

FailureOr<SmallVector<bool, 3>> StepImporter::outputMaskArgument() {
  SmallVector<bool, 3> mask = {true, true, true};
  if (const pt2::Argument *given = findArgument("output_mask")) {
    if (given->kind != pt2::ArgumentKind::Bools ||
        given->boolValues.size() != 3)
      return fail("argument 'output_mask' must be a list of three bools");
    mask.assign(given->boolValues.begin(), given->boolValues.end());
  }
  return mask;
}

LogicalResult StepImporter::setOutputs(ValueRange results) {
  for (auto [index, value] : llvm::enumerate(results))
    if (failed(setOutput(index, value)))
      return failure();
  return success();
}
