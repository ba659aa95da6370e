//===- TorchImporter.cpp - torch.export programs to `train` IR ------------===//
//
// Builds one `train.step` from an exported joint program: the signature
// becomes the step's arguments and results with their metadata, and each
// ATen node becomes `train` operations. Result types are torch's own (from
// the graph's tensor metadata); the operations' type inference must agree,
// which the final verification checks. The handlers of the ATen operators
// live in one file per family (Import<Family>.cpp), each adding its own to
// the one handler table built here; this file drives the signature and the
// nodes through them and reports what could not be imported.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/TorchImporter.h"
#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using llvm::StringRef;

Type mlir::mantissa::getElementType(MLIRContext &context,
                                    pt2::ScalarType dtype) {
  std::optional<rt::DType> stored = pt2::getStoredDType(dtype);
  // train's tensors have no 8- or 16-bit integers.
  if (!stored || *stored == rt::DType::I16 || *stored == rt::DType::I8 ||
      *stored == rt::DType::U8)
    return {};
  return train::getStoredElementType(&context, *stored);
}

StringRef mlir::mantissa::getOwningModulePath(StringRef fqn) {
  size_t dot = fqn.rfind('.');
  return dot == StringRef::npos ? StringRef() : fqn.take_front(dot);
}

using namespace mlir::mantissa::importer;

//===----------------------------------------------------------------------===//
// Handler table
//===----------------------------------------------------------------------===//

const HandlerTable &StepImporter::handlers() {
  static const HandlerTable table = [] {
    HandlerTable map;
    addElementwiseHandlers(map);
    addReductionHandlers(map);
    addLinearHandlers(map);
    addShapeHandlers(map);
    addIndexingHandlers(map);
    addCreationHandlers(map);
    addConvolutionHandlers(map);
    addLossHandlers(map);
    addAttentionHandlers(map);
    addPoolingHandlers(map);
    addNormalizationHandlers(map);
    return map;
  }();
  return table;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

RankedTensorType StepImporter::getTensorType(StringRef tensorName,
                                             StringRef what) {
  const pt2::TensorMeta *meta = program.graph.findTensor(tensorName);
  if (!meta) {
    problems.push_back(
        llvm::formatv("{0} '{1}' has no tensor metadata", what, tensorName));
    return {};
  }
  Type element = mlir::mantissa::getElementType(context, meta->dtype);
  if (!element) {
    problems.push_back(llvm::formatv("{0} '{1}' has dtype {2}, which is not "
                                     "supported (float32, bfloat16, float16, "
                                     "float64, int64, int32, bool are)",
                                     what, tensorName,
                                     pt2::stringifyScalarType(meta->dtype)));
    return {};
  }
  return RankedTensorType::get(meta->sizes, element);
}

void StepImporter::importSignature(
    SmallVectorImpl<Type> &argumentTypes,
    SmallVectorImpl<DictionaryAttr> &argumentAttrs,
    SmallVectorImpl<Type> &resultTypes,
    SmallVectorImpl<DictionaryAttr> &resultAttrs) {
  for (const pt2::InputSpec &spec : program.signature.inputSpecs) {
    TensorKind kind;
    std::string fqn = spec.fqn;
    switch (spec.kind) {
    case pt2::InputSpec::Kind::Parameter:
      kind = TensorKind::parameter;
      break;
    case pt2::InputSpec::Kind::Buffer:
      kind = TensorKind::buffer;
      break;
    case pt2::InputSpec::Kind::TensorConstant:
      kind = TensorKind::constant;
      break;
    case pt2::InputSpec::Kind::UserInput:
      kind = TensorKind::user_input;
      fqn = spec.argName;
      if (!spec.arg.isTensor()) {
        problems.push_back(llvm::formatv(
            "user input '{0}' is a {1}, not a tensor; only tensor inputs are "
            "supported",
            spec.argName, pt2::stringifyArgumentKind(spec.arg.kind)));
        continue;
      }
      break;
    case pt2::InputSpec::Kind::ConstantInput:
      problems.push_back(llvm::formatv(
          "input '{0}' is a Python constant baked into the graph, which is "
          "not supported",
          spec.argName));
      continue;
    }
    RankedTensorType type = getTensorType(spec.argName, "input");
    if (!type)
      continue;
    StringRef module =
        kind == TensorKind::user_input ? StringRef() : getOwningModulePath(fqn);
    auto info = TensorInfoAttr::get(
        &context, kind, builder.getStringAttr(fqn),
        builder.getStringAttr(module),
        DenseI64ArrayAttr::get(&context, type.getShape()),
        type.getElementType(),
        kind == TensorKind::buffer ? spec.persistent : true);
    argumentTypes.push_back(type);
    argumentAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(StepOp::kTensorInfoAttrName, info)));
  }

  bool hasGradient = false, hasLoss = false;
  for (const pt2::OutputSpec &spec : program.signature.outputSpecs) {
    ResultInfoAttr info;
    switch (spec.kind) {
    case pt2::OutputSpec::Kind::LossOutput:
      hasLoss = true;
      info = ResultInfoAttr::get(&context, ResultKind::loss, nullptr);
      break;
    case pt2::OutputSpec::Kind::GradientToParameter:
      hasGradient = true;
      info = ResultInfoAttr::get(&context, ResultKind::gradient,
                                 builder.getStringAttr(spec.fqn));
      break;
    case pt2::OutputSpec::Kind::BufferMutation:
      info = ResultInfoAttr::get(&context, ResultKind::buffer_mutation,
                                 builder.getStringAttr(spec.fqn));
      break;
    case pt2::OutputSpec::Kind::UserOutput:
      info = ResultInfoAttr::get(&context, ResultKind::user_output, nullptr);
      break;
    default:
      problems.push_back(
          llvm::formatv("output '{0}' is a {1}, which is not supported",
                        spec.argName, pt2::stringifyOutputKind(spec.kind)));
      continue;
    }
    if (spec.argName.empty()) {
      problems.push_back(llvm::formatv("{0} output is not a tensor",
                                       pt2::stringifyOutputKind(spec.kind)));
      continue;
    }
    RankedTensorType type = getTensorType(spec.argName, "output");
    if (!type)
      continue;
    resultTypes.push_back(type);
    resultAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr(StepOp::kResultInfoAttrName, info)));
  }
  if (!hasGradient || !hasLoss)
    problems.push_back(
        "this is a forward-only graph (no loss and gradient outputs); export "
        "the joint training program instead: "
        "torch.export.save(torch.export.experimental._export_forward_backward("
        "torch.export.export(model, inputs)), 'model.pt2') for a model whose "
        "forward returns the loss");
}

llvm::Expected<OwningOpRef<ModuleOp>> StepImporter::run() {
  Location fileLocation = FileLineColLoc::get(&context, fileName, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLocation);

  SmallVector<Type> argumentTypes, resultTypes;
  SmallVector<DictionaryAttr> argumentAttrs, resultAttrs;
  importSignature(argumentTypes, argumentAttrs, resultTypes, resultAttrs);
  if (!problems.empty())
    return llvm::createStringError(
        llvm::formatv("{0}: {1}", fileName, llvm::join(problems, "; ")).str());

  // The step is named after the file: `llama_medium.pt2` -> @llama_medium.
  StringRef stem = llvm::sys::path::stem(fileName);
  builder.setInsertionPointToEnd(module->getBody());
  auto step = builder.create<StepOp>(
      fileLocation, builder.getStringAttr(stem.empty() ? "step" : stem),
      TypeAttr::get(builder.getFunctionType(argumentTypes, resultTypes)),
      builder.getArrayAttr(
          SmallVector<Attribute>(argumentAttrs.begin(), argumentAttrs.end())),
      builder.getArrayAttr(
          SmallVector<Attribute>(resultAttrs.begin(), resultAttrs.end())));
  Block *body = builder.createBlock(&step.getBody());
  for (auto [spec, type] :
       llvm::zip(program.signature.inputSpecs, argumentTypes)) {
    Location argumentLocation = NameLoc::get(
        builder.getStringAttr(spec.fqn.empty() ? spec.argName : spec.fqn),
        fileLocation);
    values[spec.argName] = body->addArgument(type, argumentLocation);
  }

  builder.setInsertionPointToEnd(body);
  for (const pt2::Node &node : program.graph.nodes)
    importNode(node);

  if (!problems.empty() || !nodeFailures.empty())
    return llvm::createStringError(describeProblems());

  SmallVector<Value> results;
  for (const pt2::OutputSpec &spec : program.signature.outputSpecs) {
    auto it = values.find(spec.argName);
    if (it == values.end())
      return llvm::createStringError(
          llvm::formatv("{0}: output '{1}' is not computed by the graph",
                        fileName, spec.argName)
              .str());
    results.push_back(it->second);
  }
  builder.create<ReturnOp>(fileLocation, results);

  // torch's result types must agree with every operation's own inference;
  // a disagreement is a bug in the importer or in an operation's rules.
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
      if (!diagnostics.empty())
        diagnostics += "; ";
      llvm::raw_string_ostream os(diagnostics);
      os << diagnostic.getLocation() << ": " << diagnostic.str();
      return success();
    });
    if (failed(mlir::verify(*module)))
      return llvm::createStringError(
          llvm::formatv("{0}: the imported step does not verify: {1}", fileName,
                        diagnostics)
              .str());
  }
  return std::move(module);
}

void StepImporter::importNode(const pt2::Node &node) {
  currentNode = &node;
  std::string nodeName = node.name.empty() ? node.target : node.name;
  location = NameLoc::get(builder.getStringAttr(nodeName),
                          FileLineColLoc::get(&context, fileName, 0, 0));
  // Every unsupported operator is a cause of its own, wherever it is, so
  // that one run lists them all.
  const auto &table = handlers();
  auto handler = table.find(node.target);
  if (handler == table.end()) {
    recordNodeFailure(node, {describeNode(node), /*unsupportedOperator=*/true});
    return;
  }
  // A node consuming a tensor that a failed node left undefined cannot be
  // imported, and reporting it would only repeat the cause.
  if (std::optional<unsigned> cause = failedInputCause(node)) {
    ++nodeFailures[*cause].skippedDependents;
    markOutputsFailed(*cause);
    return;
  }
  currentFailure.reset();
  if (succeeded(handler->second(*this)) && !currentFailure)
    return;
  recordNodeFailure(
      node, {currentFailure ? *currentFailure
                            : describeNode(node) + ": could not be imported"});
}

std::optional<unsigned>
StepImporter::failedInputCause(const pt2::Node &node) const {
  auto causeOf = [&](StringRef name) -> std::optional<unsigned> {
    auto it = failedTensors.find(name);
    if (it == failedTensors.end())
      return std::nullopt;
    return it->second;
  };
  for (const pt2::NamedArgument &input : node.inputs) {
    const pt2::Argument &arg = input.arg;
    if (arg.isTensor())
      if (std::optional<unsigned> cause = causeOf(arg.tensorName))
        return cause;
    if (arg.kind == pt2::ArgumentKind::OptionalTensor && arg.optionalTensorName)
      if (std::optional<unsigned> cause = causeOf(*arg.optionalTensorName))
        return cause;
    for (const std::string &name : arg.tensorNames)
      if (std::optional<unsigned> cause = causeOf(name))
        return cause;
    for (const std::optional<std::string> &name : arg.optionalTensorNames)
      if (name)
        if (std::optional<unsigned> cause = causeOf(*name))
          return cause;
  }
  return std::nullopt;
}

void StepImporter::recordNodeFailure(const pt2::Node &node,
                                     NodeFailure failure) {
  auto cause = static_cast<unsigned>(nodeFailures.size());
  nodeFailures.push_back(std::move(failure));
  markOutputsFailed(cause);
}

/// Outputs a handler defined before failing are dropped too: they may be
/// half-built.
void StepImporter::markOutputsFailed(unsigned cause) {
  for (const std::string &name : outputNames())
    if (!name.empty()) {
      values.erase(name);
      failedTensors[name] = cause;
    }
}

std::string StepImporter::describeProblems() const {
  auto skipped = [](const NodeFailure &failure) -> std::string {
    if (failure.skippedDependents == 0)
      return "";
    return llvm::formatv(" ({0} dependent node{1} skipped)",
                         failure.skippedDependents,
                         failure.skippedDependents == 1 ? "" : "s");
  };
  std::vector<std::string> messages = problems, unsupported;
  for (const NodeFailure &failure : nodeFailures)
    (failure.unsupportedOperator ? unsupported : messages)
        .push_back(failure.message + skipped(failure));
  if (!unsupported.empty())
    messages.insert(messages.begin(),
                    llvm::formatv("{0} unsupported operator{1}: {2}",
                                  unsupported.size(),
                                  unsupported.size() == 1 ? "" : "s",
                                  llvm::join(unsupported, ", "))
                        .str());
  return llvm::formatv("{0}: {1}", fileName, llvm::join(messages, "; ")).str();
}

std::string StepImporter::describeNode(const pt2::Node &node) const {
  std::string text = llvm::formatv("{0} (node '{1}'", node.target, node.name);
  if (!node.moduleStackEntries.empty())
    text +=
        llvm::formatv(", module '{0}'", node.moduleStackEntries.back().path);
  else
    text += ", module unknown: the graph has no nn_module_stack";
  return text + ")";
}

/// Only the first failure of a node is kept: what follows it in the same
/// handler is usually a consequence.
LogicalResult StepImporter::fail(const Twine &message) {
  if (!currentFailure)
    currentFailure = describeNode(*currentNode) + ": " + message.str();
  return failure();
}

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

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

std::vector<std::string> mlir::mantissa::getSupportedOperators() {
  std::vector<std::string> names;
  for (const auto &entry : StepImporter::handlers())
    names.push_back(entry.getKey().str());
  llvm::sort(names);
  return names;
}

llvm::Expected<OwningOpRef<ModuleOp>> mlir::mantissa::importTrainingStep(
    MLIRContext &context, const pt2::Program &program, StringRef fileName) {
  context.getOrLoadDialect<TrainDialect>();
  return StepImporter(context, program, fileName).run();
}
