//===- RunMain.cpp - The mantissa-run driver ------------------------------===//
//
// `mantissa-run MODEL.pt2 --reference --inputs INPUTS.safetensors
//  [--weights STATE.safetensors] --dump-grads OUT.safetensors` evaluates one
// training step with the reference interpreter and writes the loss and
// every parameter's gradient in the layout of torch's reference files
// (`loss` of shape [1], `grad.<fqn>`, fp32).
//
// `mantissa-run MODEL.pt2 --inputs INPUTS.safetensors [--weights W] --steps 0
//  --outputs OUT.safetensors` runs the forward-only step once and writes the
// loss and the step's user outputs (mantissa.export's outputs_fn) by name.
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
#include "mantissa/Dialect/Train/IR/RandomDraws.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/CpuStepWriter.h"
#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Driver/MicroBatchFlag.h"
#include "mantissa/Driver/PrecisionDriver.h"
#include "mantissa/Driver/PrecisionFlags.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Driver/TrainLoop.h"
#include "mantissa/Driver/WeightsFile.h"
#include "mantissa/Import/TorchImporter.h"
#include "mantissa/Runtime/CpuGemm.h"
#include "mantissa/Runtime/OpenMPEnvironment.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/StepInputs.h"
#include "mantissa/Runtime/StopSignals.h"
#include "mantissa/Runtime/TensorDataset.h"
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
  Type storedType = train::getStoredElementType(&context, stored.dtype);
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

/// A zero tensor of `type`: the place of an argument the runtime fills before
/// every micro-batch (token data, a random draw).
static llvm::Expected<reference::Tensor> zeroTensor(RankedTensorType type) {
  std::vector<uint8_t> zeros(
      type.getNumElements() *
      reference::Tensor::getStorageByteWidth(type.getElementType()));
  return reference::Tensor::fromBytes(type.getElementType(), type.getShape(),
                                      zeros);
}

/// The interpreter's arguments for `step`: model state from `weights` when
/// it has the tensor, else from the archive; the batch from `inputs`, by the
/// input's name or, as torch's reference files store it, as `input.<k>`.
static llvm::Expected<SmallVector<reference::Tensor>>
collectArguments(MLIRContext &context, train::StepOp step,
                 const pt2::Program &program, const rt::SafeTensorsFile *inputs,
                 llvm::StringRef inputsPath, const rt::SafeTensorsFile *weights,
                 llvm::StringRef weightsPath) {
  SmallVector<reference::Tensor> arguments;
  unsigned userInputIndex = 0;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    auto type = cast<RankedTensorType>(step.getArgument(index).getType());
    llvm::StringRef fqn = info.getFqn().getValue();
    // A random draw is filled before every micro-batch (RandomDraw.h).
    if (info.getKind() == TensorKind::random) {
      auto value = zeroTensor(type);
      if (!value)
        return value.takeError();
      arguments.push_back(std::move(*value));
      continue;
    }
    if (info.getKind() == TensorKind::user_input) {
      std::string positional = llvm::formatv("input.{0}", userInputIndex++);
      if (!inputs) {
        // Token data (--data) fills the batch before every micro-batch.
        auto value = zeroTensor(type);
        if (!value)
          return value.takeError();
        arguments.push_back(std::move(*value));
        continue;
      }
      const rt::HostTensor *tensor = inputs->find(fqn.str());
      if (!tensor)
        tensor = inputs->find(positional);
      if (!tensor)
        return llvm::createStringError(llvm::formatv(
            "{0}: no tensor for user input '{1}' (looked for '{1}' and "
            "'{2}')",
            inputsPath, fqn, positional));
      if (train::getStoredElementType(&context, tensor->dtype) !=
          type.getElementType())
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

namespace {
/// mantissa-run's llvm::cl flags, registered while the object lives. The
/// trainer's flags are not among them: the runtime parses those
/// (rt::parseTrainerFlag), as it does for `mantissa-run DIR`.
struct RunFlags {
  explicit RunFlags(const GpuHostEmulator *emulator)
      : gpuHostKernels(category, emulator) {
    cl::HideUnrelatedOptions({&category, &trainCategory});
  }

  cl::OptionCategory category{"mantissa-run options"};
  cl::opt<std::string> modelPath{cl::Positional, cl::desc("<model.pt2>"),
                                 cl::Required, cl::cat(category)};
  cl::opt<bool> useReference{
      "reference",
      cl::desc("Run forward/backward in the reference interpreter (torch's "
               "exact CPU semantics) instead of compiled CPU code"),
      cl::cat(category)};
  cl::opt<std::string> inputsPath{
      "inputs", cl::desc("The batch: user inputs by name or as input.<k>"),
      cl::value_desc("safetensors"), cl::cat(category)};
  cl::opt<std::string> weightsPath{
      "weights",
      cl::desc("Initial parameters and buffers by FQN (a state_dict); "
               "tensors it lacks come from the archive"),
      cl::value_desc("safetensors"), cl::cat(category)};
  cl::opt<std::string> gradsPath{
      "dump-grads",
      cl::desc("Write `loss` and `grad.<fqn>` (fp32) of the first step"),
      cl::value_desc("safetensors"), cl::cat(category)};
  cl::opt<std::string> outputsPath{
      "outputs",
      cl::desc("Without training (--steps 0): run the forward-only step once "
               "and write `loss` and every user output of the step, by the "
               "name mantissa.export gave it (else `output.<k>`), in its "
               "dtype"),
      cl::value_desc("safetensors"), cl::cat(category)};
  GpuHostKernelsFlag gpuHostKernels;
  cl::OptionCategory trainCategory{"training options"};
  PrecisionFlags precision{trainCategory, PrecisionFlagsHelp::Brief};
  MicroBatchFlag microBatch{trainCategory};
};
} // namespace

/// Prints `message` as the tool's error; for the steps of runMain, which
/// return failure and leave the exit code to it.
static LogicalResult fail(const llvm::Twine &message) {
  reportError(message);
  return failure();
}

/// Whether the step runs on the GPU: training with --device cuda.
static bool trainsOnGpu(const rt::TrainerOptions &trainer) {
  return trainer.schedule.steps > 0 && trainer.device.onGpu();
}

/// Whether the step is compiled for this CPU: neither the interpreter
/// (--reference) nor the GPU runs it.
static bool compilesForCpu(const RunFlags &flags,
                           const rt::TrainerOptions &trainer) {
  return !flags.useReference && !trainsOnGpu(trainer);
}

/// Parses the command line: the trainer's flags into `trainer` by their one
/// definition, the runtime's (the same flags `mantissa-run DIR` takes), and
/// the rest with llvm::cl into the registered RunFlags.
static LogicalResult parseCommandLine(int argc, char **argv,
                                      rt::TrainerOptions &trainer) {
  // -1: no --steps; the step is evaluated once instead of trained.
  trainer.schedule.steps = -1;
  std::vector<char *> compilerArgs = {argv[0]};
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string flagError;
    if (rt::parseTrainerFlag(argc, argv, i, trainer, given, flagError)) {
      if (!flagError.empty())
        return fail(flagError);
      continue;
    }
    compilerArgs.push_back(argv[i]);
  }
  cl::ParseCommandLineOptions(
      int(compilerArgs.size()), compilerArgs.data(),
      (std::string("Mantissa runner: trains a compiled step\n\n") +
       rt::trainerFlagsHelp())
          .c_str());
  return success();
}

/// Checks the options against each other, and when training every output
/// location, before the model is read. Without --steps,
/// `trainer.schedule.steps` becomes 0: the step is evaluated once.
static LogicalResult validateOptions(const RunFlags &flags,
                                     rt::TrainerOptions &trainer) {
  bool writesOutputs = !flags.outputsPath.empty();
  if (trainer.schedule.steps == 0 && !writesOutputs)
    return fail("--steps: expected N >= 1, or 0 with --outputs "
                "OUT.safetensors (without --steps, mantissa-run evaluates "
                "the step once)");
  // The outputs are those of the step's forward pass at the given weights:
  // to predict with trained weights, train with --final-params F, then run
  // --steps 0 --weights F --outputs.
  if (writesOutputs && trainer.schedule.steps > 0)
    return fail("--outputs runs the forward-only step once without "
                "training (--steps 0); it cannot be combined with --steps " +
                llvm::Twine(trainer.schedule.steps) +
                " (train with --final-params F.safetensors, then run "
                "--steps 0 --weights F.safetensors --outputs)");
  if (writesOutputs && !flags.gradsPath.empty())
    return fail("--outputs runs the forward-only step, --dump-grads the "
                "training step; give one of them");
  if (trainer.schedule.steps <= 0) {
    // Evaluating once writes none of the training outputs: refuse them
    // rather than ignore them.
    const char *once = trainer.schedule.steps == 0
                           ? "; --steps 0 runs the forward-only step once"
                           : "; without --steps, mantissa-run evaluates the "
                             "step once";
    for (auto [flag, given] :
         {std::pair<const char *, bool>{"--losses",
                                        !trainer.outputs.lossesPath.empty()},
          {"--final-params", !trainer.outputs.finalParamsPath.empty()},
          {"--metrics", !trainer.outputs.metricsPath.empty()},
          {"--op-times", !trainer.device.opTimesPath.empty()},
          {"--save-checkpoint", !trainer.checkpoints.saveDir.empty()},
          {"--resume", !trainer.checkpoints.resumeDir.empty()}})
      if (given)
        return fail(std::string(flag) + " needs --steps N (training)" + once);
    trainer.schedule.steps = 0;
  }
  trainer.model.inputsPath = flags.inputsPath;
  bool onData = !trainer.data.paths.empty();

  const char *dataFlag = trainer.data.flag();
  if (flags.inputsPath.empty() && !onData)
    return fail("--inputs BATCH.safetensors, --data TOKENS.bin or --dataset "
                "SAMPLES.safetensors is required");
  if (!flags.inputsPath.empty() && onData)
    return fail(llvm::Twine("--inputs and ") + dataFlag +
                " cannot be combined: --inputs trains on one fixed batch, " +
                dataFlag + " on data");
  if (onData && trainer.schedule.steps <= 0)
    return fail(llvm::Twine(dataFlag) + " needs --steps N (training)");
  if (trainer.schedule.steps > 0) {
    std::string optionsError;
    if (!rt::validateTrainerOptions(trainer, optionsError))
      return fail(optionsError);
    // Every output is checked before the step is compiled.
    rt::TrainerOptions locations = trainer;
    locations.model.weightsPath = flags.weightsPath;
    if (!rt::checkOutputLocations(locations, {flags.modelPath}, optionsError))
      return fail(optionsError);
  }
  if (writesOutputs) {
    std::string locationError;
    rt::TrainerOptions locations = trainer;
    locations.model.weightsPath = flags.weightsPath;
    if (!rt::checkOutputLocations(locations, {flags.modelPath}, locationError,
                                  {{"--outputs", flags.outputsPath}}))
      return fail(locationError);
  }
  return success();
}

/// Imports the model's training step into `context` and plans it with the
/// precision flags, if any are given.
static FailureOr<OwningOpRef<ModuleOp>>
buildStep(MLIRContext &context, const pt2::Program &program,
          const RunFlags &flags, const rt::TrainerOptions &trainer) {
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTrainingStep(context, program, flags.modelPath);
  if (!module)
    return fail(llvm::toString(module.takeError()));
  auto step = *(*module)->getOps<train::StepOp>().begin();

  bool precisionRequested = flags.precision.hasValues();
  // Without --steps the one evaluated step shows what the plan computes:
  // its loss and its gradients (--dump-grads) in the planned dtypes.
  if (precisionRequested && trainer.schedule.steps <= 0 &&
      flags.gradsPath.empty() && flags.outputsPath.empty())
    return fail("--precision needs --steps N (training), "
                "--dump-grads G (one step's loss and gradients under "
                "the plan) or --outputs O (its forward pass's outputs)");
  if (precisionRequested) {
    if (failed(applyPrecisionFromCommandLine(
            step, program, flags.precision.getSpecOptions(),
            trainer.optimizer.lr,
            /*warningsAsErrors=*/false, "mantissa-run")))
      return failure();
  }
  return std::move(*module);
}

/// The step's arguments: the batch from --inputs (zeros that token data
/// fills), the model state from --weights, which must cover the step unless
/// partial weights are allowed, and the archive for what it lacks.
static FailureOr<SmallVector<reference::Tensor>>
readStepArguments(MLIRContext &context, train::StepOp step,
                  const pt2::Program &program, const RunFlags &flags,
                  const rt::TrainerOptions &trainer) {
  bool onData = !trainer.data.paths.empty();
  const std::string &weightsPath = flags.weightsPath;
  rt::SafeTensorsFile inputs, weights;
  std::string error;
  if (!onData && !rt::SafeTensorsFile::read(flags.inputsPath, inputs, error))
    return fail("--inputs: " + error);
  if (!weightsPath.empty() &&
      !rt::SafeTensorsFile::read(weightsPath, weights, error))
    return fail("--weights: " + error);
  if (!weightsPath.empty()) {
    std::vector<std::string> parameters, buffers;
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
      train::TensorInfoAttr info = step.getTensorInfo(index);
      if (info.getKind() == TensorKind::parameter)
        parameters.push_back(info.getFqn().str());
      else if (info.getKind() != TensorKind::user_input &&
               info.getKind() != TensorKind::random)
        buffers.push_back(info.getFqn().str());
    }
    if (!rt::checkStateCoverage(weights, weightsPath, parameters, buffers,
                                trainer.model.allowPartialWeights, error,
                                getTiedAliases(program)))
      return fail(error);
    // A NaN or Inf would be noticed only after --max-skips skipped steps.
    // One evaluation (--dump-grads) may probe non-finite values on purpose
    // (test/Import/pooling-exact.test: max pooling's NaN propagation).
    if (trainer.schedule.steps > 0)
      for (const rt::HostTensor &tensor : weights.tensors())
        if (!rt::checkFiniteTensor(tensor, weightsPath, error))
          return fail(error);
  }

  auto arguments = collectArguments(
      context, step, program, onData ? nullptr : &inputs, flags.inputsPath,
      weightsPath.empty() ? nullptr : &weights, weightsPath);
  if (!arguments)
    return fail(llvm::toString(arguments.takeError()));
  return std::move(*arguments);
}

/// How the step runs against the flags that depend on it: checkpoints need
/// training, --dump-grads evaluating once on the CPU. Checked once the step
/// is built, so that errors keep the order in which they are reported.
static LogicalResult validateRunMode(const RunFlags &flags,
                                     const rt::TrainerOptions &trainer) {
  bool checkpointing = !trainer.checkpoints.saveDir.empty() ||
                       !trainer.checkpoints.resumeDir.empty();
  if (trainer.schedule.steps <= 0 && checkpointing)
    return fail("--save-checkpoint and --resume need --steps N");
  // One step's loss and gradients are the evaluation without --steps, on
  // the CPU: not something training writes.
  if (!flags.gradsPath.empty() && trainer.schedule.steps > 0)
    return fail("--dump-grads writes one step's loss and gradients "
                "without training; it cannot be combined with --steps");
  if (!flags.gradsPath.empty() && trainer.device.onGpu())
    return fail("--dump-grads evaluates the step on the CPU; it cannot "
                "be combined with --device " +
                trainer.device.kind);
  if (!flags.outputsPath.empty() && trainer.device.onGpu())
    return fail("--outputs runs the forward-only step on the CPU; it "
                "cannot be combined with --device " +
                trainer.device.kind);
  return success();
}

/// The name --outputs writes the step's result `index` under: "loss", or
/// for its k-th user output the name mantissa.export recorded
/// (mantissa.json's user_outputs), else `output.<k>`. Checked before the
/// step is compiled: a step without user outputs, or whose user outputs
/// the archive names differently, is refused.
static FailureOr<std::vector<std::string>>
nameForwardResults(train::StepOp step, const pt2::Program &program,
                   const RunFlags &flags) {
  std::vector<std::string> names;
  unsigned userOutput = 0;
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
    train::ResultKind kind = step.getResultInfo(index).getKind();
    if (kind == train::ResultKind::loss)
      names.push_back("loss");
    else if (kind != train::ResultKind::user_output)
      names.push_back("");
    else if (program.userOutputNames &&
             userOutput < program.userOutputNames->size())
      names.push_back((*program.userOutputNames)[userOutput++]);
    else
      names.push_back(llvm::formatv("output.{0}", userOutput++));
  }
  if (userOutput == 0)
    return fail("--outputs: " + flags.modelPath +
                " returns no user outputs beside the loss; export the model "
                "with outputs_fn(output, batch) naming the tensors to write "
                "(docs/export.md)");
  if (program.userOutputNames && program.userOutputNames->size() != userOutput)
    return fail(llvm::formatv("--outputs: {0}: mantissa.json names {1} user "
                              "outputs, but the step returns {2}",
                              flags.modelPath, program.userOutputNames->size(),
                              userOutput)
                    .str());
  return names;
}

/// Forward and backward: compiled CPU code, or with --reference the
/// interpreter that defines the semantics. Training on the GPU compiles the
/// step for it instead (TrainLoop.cpp), so the interpreter stands in here.
/// `reporting`: this rank says how the CPU step was compiled.
static FailureOr<std::unique_ptr<StepEvaluator>>
createEvaluator(train::StepOp step, const RunFlags &flags,
                const rt::TrainerOptions &trainer, bool reporting) {
  bool onGpu = trainsOnGpu(trainer);
  bool compileForCpu = compilesForCpu(flags, trainer);
  CompileCacheReport cacheReport;
  llvm::Expected<std::unique_ptr<StepEvaluator>> evaluator =
      !compileForCpu ? llvm::Expected<std::unique_ptr<StepEvaluator>>(
                           createReferenceEvaluator(step))
                     : createCompiledEvaluator(step, &cacheReport);
  if (!evaluator)
    return fail(flags.modelPath + ": " + llvm::toString(evaluator.takeError()));
  // The run's one line about bf16 products the compiler widened.
  if (compileForCpu)
    if (std::string warning = getWidenedBf16ProductsWarning(step);
        !warning.empty())
      rt::warnOfWidenedProductsOnce(warning);
  if (onGpu && flags.useReference)
    return fail("--reference runs the step in the interpreter on the "
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
  return std::move(*evaluator);
}

/// Opens the run's data (--data or --dataset) and checks it against the
/// step: before the step is compiled, so that data that does not fit costs
/// nothing and writes nothing. Null without data (a fixed batch).
static FailureOr<std::unique_ptr<rt::BatchSource>>
openRunData(train::StepOp step, const rt::TrainerOptions &trainer) {
  if (trainer.data.paths.empty())
    return std::unique_ptr<rt::BatchSource>();
  std::string error;
  std::unique_ptr<rt::BatchSource> batches =
      rt::openBatchSource(describeStepArguments(step), trainer, error);
  if (!batches)
    return fail(error);
  return std::move(batches);
}

/// Trains `trainer.schedule.steps` steps (TrainLoop.h); returns the exit code.
static int runTraining(ModuleOp module, train::StepOp step,
                       const pt2::Program &program,
                       SmallVector<reference::Tensor> arguments,
                       const RunFlags &flags, const rt::TrainerOptions &trainer,
                       std::unique_ptr<rt::BatchSource> batches,
                       StepEvaluator &evaluator,
                       rt::Communicator &communicator) {
  // Evaluation runs the step's forward pass alone (mantissa-forward-only
  // on a copy of the planned step): compiled into the run's artifact
  // (CpuStepWriter.h), or here for the interpreter.
  OwningOpRef<ModuleOp> forwardModule;
  std::unique_ptr<StepEvaluator> forwardEvaluator;
  ForwardStep forward;
  if (!trainer.data.validationPaths.empty() && !trainsOnGpu(trainer) &&
      !compilesForCpu(flags, trainer)) {
    llvm::Expected<OwningOpRef<ModuleOp>> derived = deriveForwardStep(step);
    if (!derived)
      return reportError(flags.modelPath + ": " +
                         llvm::toString(derived.takeError()));
    forwardModule = std::move(*derived);
    forward.step = *forwardModule->getOps<train::StepOp>().begin();
    forwardEvaluator = createReferenceEvaluator(forward.step);
    forward.evaluator = forwardEvaluator.get();
  }
  llvm::Expected<int> status = trainStep(
      module, step, program, std::move(arguments), trainer, std::move(batches),
      evaluator, forward, communicator, flags.gpuHostKernels.get());
  if (!status)
    return reportError(flags.modelPath + ": " +
                       llvm::toString(status.takeError()));
  return *status;
}

/// The random arguments of a single evaluation: micro-batch 0 of step 1
/// (docs/randomness.md), as training's first micro-batch draws them.
static llvm::Error storeRandomArguments(train::StepOp step,
                                        MutableArrayRef<reference::Tensor> args,
                                        uint64_t seed) {
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    if (step.getTensorInfo(index).getKind() != TensorKind::random)
      continue;
    reference::Tensor &slot = args[index];
    rt::StepTensor tensor;
    tensor.name = step.getTensorInfo(index).getFqn().str();
    tensor.role = rt::StepTensor::Role::Random;
    std::string error;
    tensor.random = train::getRandomDraw(step, index, error);
    std::optional<rt::DType> dtype =
        train::getStoredDType(slot.getElementType());
    if (!tensor.random || !dtype)
      return llvm::createStringError("random argument '" + tensor.name +
                                     "': " + error);
    tensor.dtype = *dtype;
    tensor.shape.assign(slot.getShape().begin(), slot.getShape().end());
    tensor.bytes = tensor.numElements() * int64_t(rt::elementSize(*dtype));
    std::vector<uint8_t> bytes(size_t(std::max<int64_t>(tensor.bytes, 1)));
    rt::storeRandomInput(tensor, seed, 0, 1, bytes.data());
    llvm::Expected<reference::Tensor> value = reference::Tensor::fromBytes(
        slot.getElementType(), slot.getShape(), bytes);
    if (!value)
      return value.takeError();
    slot = std::move(*value);
  }
  return llvm::Error::success();
}

/// Runs the forward-only step once (--outputs): prints its loss and writes
/// it and every user output, each under `names[index]` of the training
/// step's result (nameForwardResults) and in its own dtype, atomically.
/// Returns the exit code.
static int writeForwardOutputs(train::StepOp step, train::StepOp forward,
                               ArrayRef<std::string> names,
                               StepEvaluator &evaluator,
                               ArrayRef<reference::Tensor> arguments,
                               const RunFlags &flags) {
  llvm::Expected<SmallVector<reference::Tensor>> results =
      evaluator.evaluate(arguments);
  if (!results)
    return reportError(flags.modelPath + ": " +
                       llvm::toString(results.takeError()));
  // The forward step keeps the loss and the user outputs in the training
  // step's order (mantissa-forward-only).
  SmallVector<std::string> kept;
  for (auto [index, name] : llvm::enumerate(names)) {
    train::ResultKind kind = step.getResultInfo(index).getKind();
    if (kind == train::ResultKind::loss ||
        kind == train::ResultKind::user_output)
      kept.push_back(name);
  }
  if (kept.size() != results->size())
    return reportError(llvm::formatv("{0}: the forward-only step returns {1} "
                                     "results for {2} outputs",
                                     flags.modelPath, results->size(),
                                     kept.size())
                           .str());
  std::vector<rt::HostTensor> outputs;
  for (auto [index, result] : llvm::enumerate(*results)) {
    std::optional<rt::DType> dtype =
        train::getStoredDType(result.getElementType());
    if (!dtype)
      return reportError(llvm::formatv("{0}: output '{1}' has element type "
                                       "{2}, which safetensors cannot hold",
                                       flags.modelPath, kept[index],
                                       result.getElementType())
                             .str());
    if (forward.getResultInfo(index).getKind() == train::ResultKind::loss)
      llvm::outs() << llvm::formatv("loss {0:f6}\n", result.toFloats().front());
    outputs.push_back(
        rt::HostTensor{kept[index], *dtype,
                       std::vector<int64_t>(result.getShape().begin(),
                                            result.getShape().end()),
                       result.toBytes()});
  }
  std::string error;
  if (!rt::writeSafeTensors(flags.outputsPath, outputs, {{"format", "pt"}},
                            error))
    return reportError(error);
  return 0;
}

/// Evaluates the step once: prints its loss and with --dump-grads writes
/// the loss and every parameter's gradient (fp32). Returns the exit code.
static int evaluateOnce(train::StepOp step, StepEvaluator &evaluator,
                        ArrayRef<reference::Tensor> arguments,
                        const RunFlags &flags) {
  llvm::Expected<SmallVector<reference::Tensor>> results =
      evaluator.evaluate(arguments);
  if (!results)
    return reportError(flags.modelPath + ": " +
                       llvm::toString(results.takeError()));

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
  std::string error;
  if (!flags.gradsPath.empty() &&
      !rt::writeSafeTensors(flags.gradsPath, dump, {{"format", "pt"}}, error))
    return reportError(error);
  return 0;
}

int mlir::mantissa::runMain(int argc, char **argv,
                            const GpuHostEmulator *emulator) {
  // First: nothing may start an OpenMP thread team before it is checked.
  std::string environmentError;
  if (!rt::checkOpenMPEnvironment(environmentError))
    return reportError(environmentError);
  // `mantissa-run DIR ...`: a compiled artifact runs in the runtime alone.
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') {
      if (llvm::sys::fs::is_directory(argv[i]))
        return rt::runUpdateMain(argc, argv);
      break;
    }
  llvm::InitLLVM initLLVM(argc, argv);
  rt::ignoreFileSizeSignal();
  RunFlags flags(emulator);
  rt::TrainerOptions trainer;
  if (failed(parseCommandLine(argc, argv, trainer)) ||
      failed(validateOptions(flags, trainer)))
    return 1;

  llvm::Expected<pt2::ReadOptions> readOptions =
      flags.microBatch.getReadOptions();
  if (!readOptions)
    return reportError(llvm::toString(readOptions.takeError()));
  llvm::Expected<pt2::Program> program =
      pt2::readPt2Archive(flags.modelPath, *readOptions);
  if (!program)
    return reportError(llvm::toString(program.takeError()));
  MLIRContext context;
  context.loadDialect<train::TrainDialect>();
  FailureOr<OwningOpRef<ModuleOp>> module =
      buildStep(context, *program, flags, trainer);
  if (failed(module))
    return 1;
  auto step = *(*module)->getOps<train::StepOp>().begin();
  FailureOr<std::vector<std::string>> outputNames;
  if (!flags.outputsPath.empty()) {
    outputNames = nameForwardResults(step, *program, flags);
    if (failed(outputNames))
      return 1;
  }
  FailureOr<SmallVector<reference::Tensor>> arguments =
      readStepArguments(context, step, *program, flags, trainer);
  if (failed(arguments) || failed(validateRunMode(flags, trainer)))
    return 1;
  FailureOr<std::unique_ptr<rt::BatchSource>> batches =
      openRunData(step, trainer);
  if (failed(batches))
    return 1;

  // Ranks of an mpirun launch (else one).
  std::unique_ptr<rt::Communicator> communicator;
  if (trainer.schedule.steps > 0) {
    std::string error;
    communicator = rt::createLaunchCommunicator(trainer.device.threads, error);
    if (!communicator)
      return reportError(error);
  }
  // Every check of the data, the sizes and the schedule comes before the
  // step is compiled (which takes seconds to minutes).
  if (trainer.schedule.steps > 0)
    if (llvm::Error error = checkTrainingData(batches->get(), trainer,
                                              communicator->worldSize()))
      return reportError(llvm::toString(std::move(error)));
  bool reporting = !communicator || communicator->rank() == 0;
  // --outputs: the forward-only step is what is compiled and run.
  OwningOpRef<ModuleOp> forwardModule;
  train::StepOp forward;
  if (!flags.outputsPath.empty()) {
    llvm::Expected<OwningOpRef<ModuleOp>> derived = deriveForwardStep(step);
    if (!derived)
      return reportError(flags.modelPath + ": " +
                         llvm::toString(derived.takeError()));
    forwardModule = std::move(*derived);
    forward = *forwardModule->getOps<train::StepOp>().begin();
  }
  FailureOr<std::unique_ptr<StepEvaluator>> evaluator =
      createEvaluator(forward ? forward : step, flags, trainer, reporting);
  if (failed(evaluator))
    return 1;

  trainer.schedule.microBatch = program->batch.size;
  if (trainer.schedule.steps > 0)
    return runTraining(**module, step, *program, std::move(*arguments), flags,
                       trainer, std::move(*batches), **evaluator,
                       *communicator);
  if (llvm::Error error =
          storeRandomArguments(step, *arguments, trainer.random.seed))
    return reportError(flags.modelPath + ": " +
                       llvm::toString(std::move(error)));
  if (forward)
    return writeForwardOutputs(step, forward, *outputNames, **evaluator,
                               *arguments, flags);
  return evaluateOnce(step, **evaluator, *arguments, flags);
}
