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
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
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
    addRandomHandlers(map);
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
  llvm::StringSet<> trained;
  for (const pt2::OutputSpec &spec : program.signature.outputSpecs)
    if (spec.kind == pt2::OutputSpec::Kind::GradientToParameter)
      trained.insert(spec.fqn);
  for (const pt2::InputSpec &spec : program.signature.inputSpecs) {
    TensorKind kind;
    std::string fqn = spec.fqn;
    switch (spec.kind) {
    case pt2::InputSpec::Kind::Parameter:
      // A parameter the program gives no gradient (requires_grad=False, or
      // one the loss never reads) is frozen: torch's AdamW skips a
      // parameter whose grad is None, weight decay included. It is kept,
      // loaded and saved as a persistent buffer, so nothing updates it.
      kind = trained.contains(fqn) ? TensorKind::parameter : TensorKind::buffer;
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
        spec.kind == pt2::InputSpec::Kind::Buffer ? spec.persistent : true);
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
  body = builder.createBlock(&step.getBody());
  // B: the leading dimension all user inputs share (RandomDraw.h's sample
  // dimension rule).
  samples = -1;
  for (auto [attr, type] : llvm::zip(argumentAttrs, argumentTypes)) {
    auto info = attr.getAs<TensorInfoAttr>(StepOp::kTensorInfoAttrName);
    auto shaped = cast<RankedTensorType>(type);
    if (!info || info.getKind() != TensorKind::user_input)
      continue;
    int64_t leading = shaped.getRank() ? shaped.getDimSize(0) : 0;
    samples = samples == -1 || samples == leading ? leading : 0;
  }
  samples = std::max<int64_t>(samples, 0);
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

  // Random draws are arguments after the signature's.
  if (!randomTypes.empty()) {
    argumentTypes.append(randomTypes.begin(), randomTypes.end());
    argumentAttrs.append(randomAttrs.begin(), randomAttrs.end());
    step.setFunctionTypeAttr(
        TypeAttr::get(builder.getFunctionType(argumentTypes, resultTypes)));
    step.setArgAttrsAttr(builder.getArrayAttr(
        SmallVector<Attribute>(argumentAttrs.begin(), argumentAttrs.end())));
  }

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
// Entry points
//===----------------------------------------------------------------------===//

std::vector<std::string> mlir::mantissa::getSupportedOperators() {
  std::vector<std::string> names;
  for (const auto &entry : StepImporter::handlers())
    names.push_back(entry.getKey().str());
  // Evaluated by the reader at the bound micro-batch (Pt2Specialization).
  for (StringRef name : pt2::getSymbolicShapeOperators())
    names.push_back(name.str());
  llvm::sort(names);
  return names;
}

llvm::Expected<OwningOpRef<ModuleOp>> mlir::mantissa::importTrainingStep(
    MLIRContext &context, const pt2::Program &program, StringRef fileName) {
  context.getOrLoadDialect<TrainDialect>();
  return StepImporter(context, program, fileName).run();
}
