//===- RunMain.cpp - The mantissa-run driver ------------------------------===//
//
// `mantissa-run MODEL.pt2 --reference --inputs INPUTS.safetensors
//  [--weights STATE.safetensors] --dump-grads OUT.safetensors` evaluates one
// training step with the reference interpreter and writes the loss and
// every parameter's gradient in the layout of torch's reference files
// (`loss` of shape [1], `grad.<fqn>`, fp32).
//
// `mantissa-run MODEL.pt2 --inputs INPUTS.safetensors --steps N ...` trains
// (TrainLoop.h): the step compiled for the CPU, or with `--device cuda` for
// the GPU (docs/gpu-step.md).
//
// `mantissa-run DIR --grads GRADS.safetensors --steps N ...` runs the update
// path of a compiled artifact (mantissa/Runtime/UpdateRunner.h), and
// `mantissa-run DIR --inputs INPUTS.safetensors [--weights W.safetensors]
// --steps N --device cuda ...` trains with the artifact's GPU step, in the
// runtime alone (no LLVM: a GPU machine needs only the runtime).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/RunMain.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/PrecisionDriver.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Driver/TrainLoop.h"
#include "mantissa/Import/TorchImporter.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;
using train::TensorKind;
namespace cl = llvm::cl;

static int reportError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "mantissa-run") << message << "\n";
  return 1;
}

/// The MLIR element type a safetensors dtype stores.
static Type elementTypeOf(MLIRContext &context, rt::DType dtype) {
  switch (dtype) {
  case rt::DType::F32:
    return Float32Type::get(&context);
  case rt::DType::BF16:
    return BFloat16Type::get(&context);
  case rt::DType::F16:
    return Float16Type::get(&context);
  case rt::DType::F64:
    return Float64Type::get(&context);
  case rt::DType::I64:
    return IntegerType::get(&context, 64);
  case rt::DType::I32:
    return IntegerType::get(&context, 32);
  case rt::DType::I16:
    return IntegerType::get(&context, 16);
  case rt::DType::I8:
    return IntegerType::get(&context, 8);
  case rt::DType::U8:
    return IntegerType::get(&context, 8, IntegerType::Unsigned);
  case rt::DType::Bool:
    return IntegerType::get(&context, 1);
  }
  return {};
}

/// Converts a stored tensor to the reference interpreter's value of `type`.
/// Floating-point data may change width (as torch's load_state_dict copies
/// do); shapes and the integer/float kind must match exactly.
static llvm::Expected<reference::Tensor>
toReferenceTensor(MLIRContext &context, const rt::HostTensor &stored,
                  RankedTensorType type, llvm::StringRef source) {
  if (ArrayRef<int64_t>(stored.shape) != type.getShape())
    return llvm::createStringError(llvm::formatv(
        "{0}: tensor '{1}' has shape {2}, expected {3}", source, stored.name,
        train::formatShape(stored.shape), train::formatShape(type.getShape())));
  Type storedType = elementTypeOf(context, stored.dtype);
  Type wanted = type.getElementType();
  if (storedType == wanted)
    return reference::Tensor::fromBytes(wanted, type.getShape(), stored.bytes);
  if (isa<FloatType>(storedType) && isa<FloatType>(wanted)) {
    std::vector<float> values = rt::toFloat32(stored);
    return reference::Tensor::fromFloats(wanted, type.getShape(), values);
  }
  return llvm::createStringError(llvm::formatv(
      "{0}: tensor '{1}' has dtype {2}, expected {3}", source, stored.name,
      rt::safeTensorsDTypeName(stored.dtype), wanted));
}

/// The interpreter's arguments for `step`: model state from `weights` when
/// it has the tensor, else from the archive; the batch from `inputs`, by the
/// input's name or, as torch's reference files store it, as `input.<k>`.
static llvm::Expected<SmallVector<reference::Tensor>>
collectArguments(MLIRContext &context, train::StepOp step,
                 const pt2::Program &program, const rt::SafeTensorsFile &inputs,
                 llvm::StringRef inputsPath, const rt::SafeTensorsFile *weights,
                 llvm::StringRef weightsPath) {
  SmallVector<reference::Tensor> arguments;
  unsigned userInputIndex = 0;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    auto type = cast<RankedTensorType>(step.getArgument(index).getType());
    llvm::StringRef fqn = info.getFqn().getValue();
    if (info.getKind() == TensorKind::user_input) {
      std::string positional = llvm::formatv("input.{0}", userInputIndex++);
      const rt::HostTensor *tensor = inputs.find(fqn.str());
      if (!tensor)
        tensor = inputs.find(positional);
      if (!tensor)
        return llvm::createStringError(llvm::formatv(
            "{0}: no tensor for user input '{1}' (looked for '{1}' and "
            "'{2}')",
            inputsPath, fqn, positional));
      if (elementTypeOf(context, tensor->dtype) != type.getElementType())
        return llvm::createStringError(llvm::formatv(
            "{0}: tensor '{1}' (user input '{2}') has dtype {3}, expected {4}",
            inputsPath, tensor->name, fqn,
            rt::safeTensorsDTypeName(tensor->dtype), type.getElementType()));
      auto value = toReferenceTensor(context, *tensor, type, inputsPath);
      if (!value)
        return value.takeError();
      arguments.push_back(std::move(*value));
      continue;
    }
    if (const rt::HostTensor *tensor =
            weights ? weights->find(fqn.str()) : nullptr) {
      auto value = toReferenceTensor(context, *tensor, type, weightsPath);
      if (!value)
        return value.takeError();
      arguments.push_back(std::move(*value));
      continue;
    }
    const pt2::StoredTensor *stored = program.findWeight(fqn);
    if (!stored)
      stored = program.findConstant(fqn);
    if (!stored || stored->isFake)
      return llvm::createStringError(llvm::formatv(
          "no data for {0} '{1}': the archive has none{2}",
          train::stringifyTensorKind(info.getKind()), fqn,
          weights ? " and neither has " + weightsPath.str() : std::string()));
    // A planned step takes parameters in their master dtype, which may
    // differ from the dtype the archive stores.
    Type storedType =
        mlir::mantissa::getElementType(context, stored->meta.dtype);
    auto value = reference::Tensor::fromBytes(storedType, type.getShape(),
                                              stored->contiguousBytes);
    if (!value)
      return value.takeError();
    if (storedType != type.getElementType())
      *value = reference::Tensor::fromFloats(
          type.getElementType(), type.getShape(), value->toFloats());
    arguments.push_back(std::move(*value));
  }
  return arguments;
}

int mlir::mantissa::runMain(int argc, char **argv) {
  // `mantissa-run DIR ...`: a compiled artifact runs in the runtime alone.
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') {
      if (llvm::sys::fs::is_directory(argv[i]))
        return rt::runUpdateMain(argc, argv);
      break;
    }
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory category("mantissa-run options");
  cl::opt<std::string> modelPath(cl::Positional, cl::desc("<model.pt2>"),
                                 cl::Required, cl::cat(category));
  cl::opt<bool> useReference(
      "reference",
      cl::desc("Run forward/backward in the reference interpreter (torch's "
               "exact CPU semantics) instead of compiled CPU code"),
      cl::cat(category));
  cl::opt<std::string> inputsPath(
      "inputs", cl::desc("The batch: user inputs by name or as input.<k>"),
      cl::value_desc("safetensors"), cl::cat(category));
  cl::opt<std::string> weightsPath(
      "weights",
      cl::desc("Initial parameters and buffers by FQN (a state_dict); "
               "tensors it lacks come from the archive"),
      cl::value_desc("safetensors"), cl::cat(category));
  cl::opt<std::string> gradsPath(
      "dump-grads",
      cl::desc("Write `loss` and `grad.<fqn>` (fp32) of the first step"),
      cl::value_desc("safetensors"), cl::cat(category));
  cl::OptionCategory trainCategory("training options");
  cl::opt<int64_t> steps(
      "steps",
      cl::desc("Train this many AdamW steps on the batch (forward/backward by "
               "the reference interpreter, updates by the fused kernels)"),
      cl::init(0), cl::cat(trainCategory));
  cl::opt<double> lr("lr", cl::desc("Learning rate"), cl::init(1e-3),
                     cl::cat(trainCategory));
  cl::opt<double> weightDecay("weight-decay", cl::desc("AdamW weight decay"),
                              cl::init(0.01), cl::cat(trainCategory));
  cl::opt<std::string> betas("betas", cl::desc("AdamW betas as B1,B2"),
                             cl::init("0.9,0.999"), cl::cat(trainCategory));
  cl::opt<double> eps("eps", cl::desc("AdamW epsilon"), cl::init(1e-8),
                      cl::cat(trainCategory));
  cl::opt<std::string> lossesPath(
      "losses", cl::desc("Write {\"losses\": [...]} of every step"),
      cl::value_desc("json"), cl::cat(trainCategory));
  cl::opt<std::string> finalParamsPath(
      "final-params",
      cl::desc("Write the final parameters by FQN (fp32; the master where "
               "there is one)"),
      cl::value_desc("safetensors"), cl::cat(trainCategory));
  cl::opt<std::string> specPath(
      "precision", cl::desc("YAML precision spec to train with"),
      cl::value_desc("spec.yaml"), cl::cat(trainCategory));
  cl::list<std::string> flagRules(
      "precision-rule", cl::desc("A rule applied after the spec's"),
      cl::value_desc("rule"), cl::cat(trainCategory));
  cl::opt<std::string> defaultDtype(
      "precision-default-dtype",
      cl::desc("Gather dtype of parameters no rule sets"),
      cl::value_desc("dtype"), cl::cat(trainCategory));
  cl::opt<std::string> saveCheckpointDir(
      "save-checkpoint",
      cl::desc("Write checkpoints (one safetensors file per rank and an "
               "index) into this directory"),
      cl::value_desc("dir"), cl::cat(trainCategory));
  cl::opt<int64_t> saveEvery(
      "save-every", cl::desc("Checkpoint every K steps (and at the last)"),
      cl::init(0), cl::cat(trainCategory));
  cl::opt<std::string> resumeDir(
      "resume",
      cl::desc("Resume from a checkpoint directory; --steps is the step to "
               "reach"),
      cl::value_desc("dir"), cl::cat(trainCategory));
  cl::opt<std::string> device(
      "device",
      cl::desc("Where the step runs: cpu, or cuda (the whole step and the "
               "update on one GPU)"),
      cl::init("cpu"), cl::cat(trainCategory));
  cl::opt<bool> noMemoryReport(
      "no-memory-report", cl::desc("Do not print the per-rank memory report"),
      cl::cat(trainCategory));
  cl::HideUnrelatedOptions({&category, &trainCategory});
  cl::ParseCommandLineOptions(argc, argv,
                              "Mantissa runner: trains a compiled step\n");

  if (inputsPath.empty())
    return reportError("--inputs is required");

  llvm::Expected<pt2::Program> program = pt2::readPt2Archive(modelPath);
  if (!program)
    return reportError(llvm::toString(program.takeError()));
  MLIRContext context;
  context.loadDialect<train::TrainDialect>();
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTrainingStep(context, *program, modelPath);
  if (!module)
    return reportError(llvm::toString(module.takeError()));
  auto step = *(*module)->getOps<train::StepOp>().begin();

  bool precisionRequested =
      !specPath.empty() || !flagRules.empty() || !defaultDtype.empty();
  if (precisionRequested && steps <= 0)
    return reportError("--precision needs --steps N (training)");
  if (precisionRequested) {
    precision::SpecOptions specOptions;
    specOptions.specPath = specPath;
    specOptions.flagRules.assign(flagRules.begin(), flagRules.end());
    specOptions.defaultDtype = defaultDtype;
    if (failed(applyPrecisionFromCommandLine(step, *program, specOptions, lr,
                                             /*warningsAsErrors=*/false,
                                             "mantissa-run")))
      return 1;
  }

  rt::SafeTensorsFile inputs, weights;
  std::string error;
  if (!rt::SafeTensorsFile::read(inputsPath, inputs, error))
    return reportError(error);
  if (!weightsPath.empty() &&
      !rt::SafeTensorsFile::read(weightsPath, weights, error))
    return reportError(error);

  auto arguments =
      collectArguments(context, step, *program, inputs, inputsPath,
                       weightsPath.empty() ? nullptr : &weights, weightsPath);
  if (!arguments)
    return reportError(llvm::toString(arguments.takeError()));

  bool checkpointing = !saveCheckpointDir.empty() || !resumeDir.empty();
  if (steps <= 0 && checkpointing)
    return reportError("--save-checkpoint and --resume need --steps N");
  if (!saveCheckpointDir.empty() && saveEvery <= 0)
    return reportError("--save-checkpoint needs --save-every K (K > 0)");
  // Ranks of an mpirun launch (else one).
  std::unique_ptr<rt::Communicator> communicator;
  if (steps > 0) {
    std::string error;
    communicator = rt::createLaunchCommunicator(error);
    if (!communicator)
      return reportError(error);
  }
  bool reporting = !communicator || communicator->rank() == 0;

  // Forward and backward: compiled CPU code, or with --reference the
  // interpreter that defines the semantics.
  // Training on the GPU compiles the step for it instead (TrainLoop.cpp).
  bool onGpu = steps > 0 && (device == "cuda" || device == "gpu");
  bool compileForCpu = !useReference && !onGpu;
  CompileCacheReport cacheReport;
  llvm::Expected<std::unique_ptr<StepEvaluator>> evaluator =
      !compileForCpu ? llvm::Expected<std::unique_ptr<StepEvaluator>>(
                           createReferenceEvaluator(step))
                     : createCompiledEvaluator(step, &cacheReport);
  if (!evaluator)
    return reportError(modelPath + ": " +
                       llvm::toString(evaluator.takeError()));
  if (onGpu && useReference)
    return reportError("--reference runs the step in the interpreter on the "
                       "CPU; it cannot be combined with --device cuda");
  if (compileForCpu && reporting) {
    llvm::errs() << "mantissa-run: "
                 << (cacheReport.cached ? "loaded the compiled step"
                                        : "compiled the step")
                 << llvm::formatv(" in {0:f1} s", cacheReport.seconds);
    if (!cacheReport.libraryPath.empty())
      llvm::errs() << (cacheReport.cached ? " (from the cache: "
                                          : " (cached as ")
                   << cacheReport.libraryPath << ")";
    llvm::errs() << "\n";
  }

  if (steps > 0) {
    TrainOptions options;
    options.steps = steps;
    options.lr = lr;
    options.weightDecay = weightDecay;
    options.eps = eps;
    llvm::StringRef first, second;
    std::tie(first, second) = llvm::StringRef(betas).split(',');
    if (first.trim().getAsDouble(options.beta1) ||
        second.trim().getAsDouble(options.beta2))
      return reportError("--betas must be B1,B2, got '" + betas + "'");
    options.lossesPath = lossesPath;
    options.finalParamsPath = finalParamsPath;
    options.saveCheckpointDir = saveCheckpointDir;
    options.saveEvery = saveEvery;
    options.resumeDir = resumeDir;
    options.device = device;
    options.memoryReport = !noMemoryReport;
    llvm::Expected<int> status =
        trainStep(**module, step, *program, std::move(*arguments), options,
                  **evaluator, *communicator);
    if (!status)
      return reportError(modelPath + ": " + llvm::toString(status.takeError()));
    return *status;
  }

  llvm::Expected<SmallVector<reference::Tensor>> results =
      (*evaluator)->evaluate(*arguments);
  if (!results)
    return reportError(modelPath + ": " + llvm::toString(results.takeError()));

  std::vector<rt::HostTensor> dump;
  for (auto [index, result] : llvm::enumerate(*results)) {
    train::ResultInfoAttr info = step.getResultInfo(index);
    std::vector<float> values = result.toFloats();
    if (info.getKind() == train::ResultKind::loss) {
      llvm::outs() << llvm::formatv("loss {0:f6}\n", values.front());
      dump.push_back(
          rt::fromFloat32("loss", {1}, values.data(), rt::DType::F32));
    } else if (info.getKind() == train::ResultKind::gradient) {
      dump.push_back(rt::fromFloat32("grad." + info.getFqn().str(),
                                     std::vector<int64_t>(result.getShape()),
                                     values.data(), rt::DType::F32));
    }
  }
  if (!gradsPath.empty() &&
      !rt::writeSafeTensors(gradsPath, dump, {{"format", "pt"}}, error))
    return reportError(error);
  return 0;
}
