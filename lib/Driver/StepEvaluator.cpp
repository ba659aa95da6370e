//===- StepEvaluator.cpp - Running a training step's forward/backward -----===//

#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Reference/Interpreter.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Collects the diagnostics emitted while it lives, as one line.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *context)
      : handler(context, [this](Diagnostic &diagnostic) {
          llvm::raw_string_ostream os(text);
          os << (text.empty() ? "" : "; ") << diagnostic.getLocation() << ": "
             << diagnostic.str();
          return success();
        }) {}
  const std::string &str() const { return text; }

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

class ReferenceEvaluator : public StepEvaluator {
public:
  explicit ReferenceEvaluator(train::StepOp step) : step(step) {}

  llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) override {
    DiagnosticCollector diagnostics(step.getContext());
    FailureOr<SmallVector<reference::Tensor>> results =
        reference::interpretStep(step, arguments);
    if (failed(results))
      return llvm::createStringError("evaluation failed: " + diagnostics.str());
    return std::move(*results);
  }
  llvm::StringRef describe() const override { return "reference"; }

private:
  train::StepOp step;
};

/// The step compiled to a JIT function taking one pointer per argument, then
/// one per result, each a dense row-major buffer.
class CompiledEvaluator : public StepEvaluator {
public:
  CompiledEvaluator(std::unique_ptr<ExecutionEngine> engine, std::string name,
                    SmallVector<RankedTensorType> resultTypes)
      : engine(std::move(engine)), name(std::move(name)),
        resultTypes(std::move(resultTypes)) {}

  llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) override {
    std::vector<std::vector<uint8_t>> buffers;
    for (const reference::Tensor &argument : arguments)
      buffers.push_back(argument.toBytes());
    for (RankedTensorType type : resultTypes)
      buffers.emplace_back(std::max<int64_t>(
          1, type.getNumElements() * reference::Tensor::getStorageByteWidth(
                                         type.getElementType())));
    SmallVector<void *> pointers;
    for (std::vector<uint8_t> &buffer : buffers)
      pointers.push_back(buffer.data());
    SmallVector<void *> packed;
    for (void *&pointer : pointers)
      packed.push_back(&pointer);
    if (llvm::Error error = engine->invokePacked(name, packed))
      return std::move(error);

    SmallVector<reference::Tensor> results;
    for (auto [index, type] : llvm::enumerate(resultTypes)) {
      std::vector<uint8_t> &bytes = buffers[arguments.size() + index];
      bytes.resize(
          type.getNumElements() *
          reference::Tensor::getStorageByteWidth(type.getElementType()));
      llvm::Expected<reference::Tensor> result = reference::Tensor::fromBytes(
          type.getElementType(), type.getShape(), bytes);
      if (!result)
        return result.takeError();
      results.push_back(std::move(*result));
    }
    return results;
  }
  llvm::StringRef describe() const override { return "compiled (CPU)"; }

private:
  std::unique_ptr<ExecutionEngine> engine;
  std::string name;
  SmallVector<RankedTensorType> resultTypes;
};

} // namespace

std::unique_ptr<StepEvaluator>
mlir::mantissa::createReferenceEvaluator(train::StepOp step) {
  return std::make_unique<ReferenceEvaluator>(step);
}

llvm::Expected<std::unique_ptr<StepEvaluator>>
mlir::mantissa::createCompiledEvaluator(train::StepOp step) {
  static bool nativeTargetReady = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)nativeTargetReady;

  MLIRContext *context = step.getContext();
  DialectRegistry registry;
  registerTrainToLLVMDialects(registry);
  context->appendDialectRegistry(registry);

  SmallVector<RankedTensorType> resultTypes;
  for (Type type : step.getResultTypes())
    resultTypes.push_back(cast<RankedTensorType>(type));
  std::string name = step.getSymName().str();

  // Lower a copy: the caller keeps the step's metadata (roles, plans).
  OwningOpRef<ModuleOp> module = ModuleOp::create(step.getLoc());
  module->push_back(step->clone());
  DiagnosticCollector diagnostics(context);
  if (failed(lowerTrainStepsToLLVM(*module)))
    return llvm::createStringError(
        "compiling the step failed: " + diagnostics.str() +
        " (--reference runs the step in the interpreter instead)");
  // The options hold a function_ref: the transformer must outlive create().
  std::function<llvm::Error(llvm::Module *)> optimize =
      makeOptimizingTransformer(/*optLevel=*/1, /*sizeLevel=*/0,
                                /*targetMachine=*/nullptr);
  ExecutionEngineOptions options;
  options.transformer = optimize;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Less;
  auto engine = ExecutionEngine::create(*module, options);
  if (!engine)
    return engine.takeError();
  // Compile now rather than inside the first step, so that step times
  // measure the step.
  if (auto function = (*engine)->lookupPacked(name); !function)
    return function.takeError();
  return std::make_unique<CompiledEvaluator>(std::move(*engine), name,
                                             std::move(resultTypes));
}
