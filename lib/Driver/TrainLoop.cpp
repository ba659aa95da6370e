//===- TrainLoop.cpp - Training a step through the runtime ---------------===//
//
// The runtime's trainer (libmantissa_rt's runUpdate: data, exact gradient
// combination, schedule, clipping, the sharded update, checkpoints, metrics)
// with a gradient source in front of it. The artifact the runtime loads is
// written for the run into a temporary directory, with the step compiled
// for the CPU (CpuStep.h) or the GPU (GpuStep.h), whose runtime sources are
// the ones `mantissa-run DIR` uses; only the reference interpreter
// (--reference) is this file's own source.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/TrainLoop.h"
#include "mantissa/Dialect/Train/IR/RandomDraws.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Driver/CpuStepWriter.h"
#include "mantissa/Format/DType.h"
#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/StepInputs.h"
#include "mantissa/Runtime/TokenData.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <chrono>
#include <cstring>

using namespace mlir;
using namespace mlir::mantissa;
using train::DType;

/// `value` converted to `type` (rounded to nearest even), or itself.
static reference::Tensor convertTo(const reference::Tensor &value, Type type) {
  if (value.getElementType() == type)
    return value;
  return reference::Tensor::fromFloats(type, value.getShape(),
                                       value.toFloats());
}

std::vector<rt::StepTensor>
mlir::mantissa::describeStepArguments(train::StepOp step) {
  std::vector<rt::StepTensor> arguments;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    auto type = cast<RankedTensorType>(step.getArgument(index).getType());
    rt::StepTensor argument;
    argument.name = step.getTensorInfo(index).getFqn().str();
    train::TensorKind kind = step.getTensorInfo(index).getKind();
    bool input = kind == train::TensorKind::user_input;
    argument.role =
        input ? rt::StepTensor::Role::UserInput : rt::StepTensor::Role::Buffer;
    if (kind == train::TensorKind::random) {
      // The step verified the draw.
      std::string error;
      argument.role = rt::StepTensor::Role::Random;
      argument.random = train::getRandomDraw(step, index, error);
    }
    argument.dtype =
        train::getStoredDType(type.getElementType()).value_or(rt::DType::F32);
    argument.shape.assign(type.getShape().begin(), type.getShape().end());
    argument.bytes =
        argument.numElements() * int64_t(rt::elementSize(argument.dtype));
    if (input)
      argument.indexBound = getIndexBound(step, index);
    arguments.push_back(std::move(argument));
  }
  return arguments;
}

namespace {

/// Forward and backward by the reference interpreter, in front of the
/// runtime's trainer.
class ReferenceGradients : public rt::GradientSource {
public:
  ReferenceGradients(train::StepOp step,
                     SmallVector<reference::Tensor> arguments,
                     StepEvaluator &evaluator,
                     std::unique_ptr<rt::BatchSource> batches,
                     const ForwardStep &forward)
      : step(step), arguments(std::move(arguments)), evaluator(evaluator),
        batches(std::move(batches)), forward(forward),
        signature(describeStepArguments(step)) {
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
      if (step.getTensorInfo(index).getKind() == train::TensorKind::user_input)
        inputs.push_back(index);
    // Tokens per micro-batch: the elements of the first integer user input
    // (the token ids of a language model), if there is one.
    if (!inputs.empty() &&
        isa<IntegerType>(this->arguments[inputs[0]].getElementType()))
      tokens = this->arguments[inputs[0]].getNumElements();
  }

  bool splitsSteps() const override { return batches != nullptr; }
  int64_t tokensPerMicroBatch() const override { return tokens; }
  double lastLoss() const override { return loss; }
  int64_t validationMicroBatches() const override {
    return batches && forward.evaluator ? batches->validationMicroBatches() : 0;
  }

  bool selectMicroBatch(const MicroBatch &microBatch,
                        std::string &error) override {
    if (batches &&
        !loadInputs(rt::DataSplit::Training, microBatch.global, error))
      return false;
    return storeRandomInputs(microBatch.global, microBatch.step, error);
  }

  bool evaluateValidation(int64_t index, const std::vector<Member> &members,
                          double &value, std::string &error) override {
    if (!loadInputs(rt::DataSplit::Validation, index, error) ||
        !storeRandomInputs(index, 0, error) || !loadParameters(members, error))
      return false;
    llvm::Expected<SmallVector<reference::Tensor>> results =
        forward.evaluator->evaluate(arguments);
    if (!results) {
      error = "evaluation: " + llvm::toString(results.takeError());
      return false;
    }
    for (auto [i, result] : llvm::enumerate(*results))
      if (forward.step.getResultInfo(i).getKind() == train::ResultKind::loss)
        value = result.toFloats().front();
    return true;
  }

  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override {
    MLIRContext *context = step.getContext();
    if (!loadParameters(members, error))
      return false;
    llvm::StringMap<const Member *> memberByFqn;
    for (const Member &member : members)
      memberByFqn[*member.fqn] = &member;
    llvm::Expected<SmallVector<reference::Tensor>> results =
        evaluator.evaluate(arguments);
    if (!results) {
      error = llvm::formatv("step {0}: {1}", stepNumber,
                            llvm::toString(results.takeError()));
      return false;
    }
    for (auto [index, result] : llvm::enumerate(*results)) {
      train::ResultInfoAttr info = step.getResultInfo(index);
      switch (info.getKind()) {
      case train::ResultKind::loss:
        loss = result.toFloats().front();
        break;
      case train::ResultKind::gradient: {
        const Member *member = memberByFqn.lookup(info.getFqn().getValue());
        if (!member)
          break; // A parameter the runtime does not update (none today).
        std::vector<uint8_t> bytes =
            convertTo(result,
                      train::getStoredElementType(context, member->gradDtype))
                .toBytes();
        std::memcpy(member->grad, bytes.data(), bytes.size());
        break;
      }
      case train::ResultKind::buffer_mutation: {
        BlockArgument buffer = step.lookupArgument(info.getFqn().getValue());
        arguments[buffer.getArgNumber()] = result;
        break;
      }
      case train::ResultKind::user_output:
        break;
      }
    }
    return true;
  }

private:
  /// Parameters as the planned step takes them (its argument dtype, the
  /// master's): widening the gather-dtype copy loses nothing, since the
  /// step rounds every parameter to its gather dtype before using it.
  bool loadParameters(const std::vector<Member> &members, std::string &error) {
    MLIRContext *context = step.getContext();
    for (const Member &member : members) {
      BlockArgument argument = step.lookupArgument(*member.fqn);
      if (!argument) {
        error = "the step has no parameter '" + *member.fqn + "'";
        return false;
      }
      reference::Tensor &slot = arguments[argument.getArgNumber()];
      int64_t count = slot.getNumElements();
      auto value = reference::Tensor::fromBytes(
          train::getStoredElementType(context, member.paramDtype),
          slot.getShape(),
          ArrayRef<uint8_t>(member.param,
                            count * rt::elementSize(member.paramDtype)));
      if (!value) {
        error = "parameter '" + *member.fqn +
                "': " + llvm::toString(value.takeError());
        return false;
      }
      slot = convertTo(*value, slot.getElementType());
    }
    return true;
  }

  /// Loads micro-batch `index` of `split` (a global micro-batch count for
  /// training) into the user inputs, each in its own element type.
  bool loadInputs(rt::DataSplit split, int64_t index, std::string &error) {
    if (!batches->loadMicroBatch(split, batches->firstSample(index),
                                 batchTensors, error))
      return false;
    for (unsigned argument : inputs) {
      reference::Tensor &slot = arguments[argument];
      std::vector<uint8_t> bytes(size_t(signature[argument].bytes));
      if (!rt::storeStepInput(batchTensors, signature[argument], bytes.data(),
                              error) ||
          !replaceBytes(slot, bytes, error))
        return false;
    }
    return true;
  }

  /// Makes `slot` hold `bytes`, in its element type and shape.
  static bool replaceBytes(reference::Tensor &slot,
                           const std::vector<uint8_t> &bytes,
                           std::string &error) {
    llvm::Expected<reference::Tensor> value = reference::Tensor::fromBytes(
        slot.getElementType(), slot.getShape(), bytes);
    if (!value) {
      error = llvm::toString(value.takeError());
      return false;
    }
    slot = std::move(*value);
    return true;
  }

  /// Fills the random arguments (rt::storeRandomInput), as the CPU and GPU
  /// steps do.
  bool storeRandomInputs(int64_t globalMicroBatch, int64_t stepNumber,
                         std::string &error) {
    for (auto [index, argument] : llvm::enumerate(signature)) {
      if (argument.role != rt::StepTensor::Role::Random)
        continue;
      reference::Tensor &slot = arguments[index];
      std::vector<uint8_t> bytes(size_t(argument.bytes));
      rt::storeRandomInput(argument, randomSeed, globalMicroBatch, stepNumber,
                           bytes.data());
      if (!replaceBytes(slot, bytes, error))
        return false;
    }
    return true;
  }

  train::StepOp step;
  SmallVector<reference::Tensor> arguments;
  StepEvaluator &evaluator;
  std::unique_ptr<rt::BatchSource> batches;
  ForwardStep forward;
  /// The arguments as the runtime describes them (describeArguments).
  std::vector<rt::StepTensor> signature;
  SmallVector<unsigned> inputs;
  /// The last micro-batch read (BatchSource::loadMicroBatch).
  std::vector<rt::HostTensor> batchTensors;
  int64_t tokens = 0;
  double loss = std::nan("");
};

} // namespace

llvm::Error mlir::mantissa::checkTrainingData(const rt::BatchSource *batches,
                                              const rt::TrainerOptions &options,
                                              int worldSize) {
  if (!batches)
    return llvm::Error::success();
  std::string error;
  if (!rt::checkDataPositions(options, worldSize,
                              batches->samplesPerMicroBatch(), error))
    return llvm::createStringError(error);
  return llvm::Error::success();
}

llvm::Expected<int> mlir::mantissa::trainStep(
    ModuleOp module, train::StepOp step, const pt2::Program &program,
    SmallVector<reference::Tensor> arguments, const rt::TrainerOptions &options,
    std::unique_ptr<rt::BatchSource> batches, StepEvaluator &evaluator,
    const ForwardStep &forward, rt::Communicator &communicator,
    const GpuHostKernels &gpuHostKernels) {
  llvm::Expected<ArtifactSpec> spec = collectArtifactSpec(module, program);
  if (!spec)
    return spec.takeError();
  // The run starts from the given arguments (e.g. --weights), not from the
  // archive's weights.
  for (ArtifactTensorSpec &tensor : spec->tensors) {
    if (!tensor.isParameter)
      continue;
    BlockArgument argument = step.lookupArgument(tensor.fqn);
    if (!argument)
      return llvm::createStringError("the step has no parameter '" +
                                     tensor.fqn + "'");
    std::vector<float> values = arguments[argument.getArgNumber()].toFloats();
    tensor.initial = rt::fromFloat32(tensor.fqn, tensor.shape, values.data(),
                                     tensor.initial.dtype);
  }

  llvm::SmallString<128> directory;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("mantissa-run", directory))
    return llvm::createStringError("cannot create a temporary directory: " +
                                   ec.message());
  auto cleanup = llvm::make_scope_exit(
      [&] { llvm::sys::fs::remove_directories(directory); });
  llvm::SmallString<128> artifactDir(directory);
  llvm::sys::path::append(artifactDir, "artifact");
  // On the GPU the artifact also holds the update kernels' PTX and the
  // step's own program (docs/gpu-step.md).
  bool onGpu = options.device.onGpu();
  ArtifactOptions artifactOptions;
  artifactOptions.emitPtx = onGpu;
  GpuStepFiles gpuStepFiles;
  bool compiledForCpu = !onGpu && evaluator.hasRawEntry();
  if (onGpu) {
    artifactOptions.gpuStep = step;
    artifactOptions.gpuStepFiles = &gpuStepFiles;
    // The forward-only program is compiled only for a run that evaluates.
    artifactOptions.gpuForward = !options.data.validationPaths.empty();
    artifactOptions.gpuHostKernels = gpuHostKernels;
  } else if (compiledForCpu) {
    artifactOptions.cpuStep = step;
    // The forward-only step is compiled only for a run that evaluates.
    artifactOptions.cpuForward = !options.data.validationPaths.empty();
  }
  auto compileStart = std::chrono::steady_clock::now();
  if (llvm::Error error =
          writeArtifactSpec(*spec, artifactDir, artifactOptions))
    return std::move(error);

  // Parameters come from the runtime; everything else starts as given.
  std::vector<std::vector<uint8_t>> hostArguments;
  int64_t tokens = 0;
  for (auto [index, argument] : llvm::enumerate(arguments)) {
    train::TensorKind kind = step.getTensorInfo(index).getKind();
    hostArguments.push_back(kind == train::TensorKind::parameter
                                ? std::vector<uint8_t>()
                                : argument.toBytes());
    if (kind == train::TensorKind::user_input && !tokens &&
        isa<IntegerType>(argument.getElementType()))
      tokens = argument.getNumElements();
  }
  std::unique_ptr<rt::GradientSource> source;
  std::unique_ptr<rt::GpuStepGradients> gpuGradients;
  if (compiledForCpu) {
    llvm::SmallString<128> programPath(artifactDir);
    llvm::sys::path::append(programPath, "step.cpu.json");
    std::string error;
    std::unique_ptr<rt::CpuStep> program =
        rt::CpuStep::load(std::string(programPath), error);
    if (!program)
      return llvm::createStringError(error);
    if (!options.data.validationPaths.empty() && program->forward() &&
        communicator.rank() == 0)
      llvm::errs() << "mantissa-run: evaluation runs the forward-only step ("
                   << program->forward()->results.size() << " of "
                   << program->joint().results.size()
                   << " results: the loss without its backward)\n";
    source = rt::CpuStepGradients::create(
        std::move(program), std::move(hostArguments), std::move(batches), error,
        options.model.inputsPath);
    if (!source)
      return llvm::createStringError(error);
  } else if (!onGpu) {
    source = std::make_unique<ReferenceGradients>(
        step, std::move(arguments), evaluator, std::move(batches), forward);
  }
  if (onGpu) {
    llvm::SmallString<128> programPath(artifactDir);
    llvm::sys::path::append(programPath, "step.gpu.json");
    std::string error;
    gpuGradients = rt::GpuStepGradients::load(std::string(programPath),
                                              std::move(hostArguments), error,
                                              options.model.inputsPath);
    if (!gpuGradients)
      return llvm::createStringError(error);
    gpuGradients->setTf32(options.device.tf32);
    gpuGradients->setTimeOps(!options.device.opTimesPath.empty());
    const rt::GpuStep &program = gpuGradients->program();
    if (communicator.rank() == 0 && gpuGradients->forwardProgram() &&
        !options.data.validationPaths.empty())
      llvm::errs()
          << "mantissa-run: evaluation runs the forward-only GPU step ("
          << gpuGradients->forwardProgram()->results().size() << " of "
          << program.results().size()
          << " results: the loss without its backward)\n";
    if (communicator.rank() == 0) {
      int64_t kernels = 0, gemms = 0;
      for (const rt::GpuStepOp &op : program.ops())
        ++(op.kind == rt::GpuStepOp::Kind::Gemm ? gemms : kernels);
      llvm::errs() << llvm::formatv(
          "mantissa-run: {0} the step for the GPU in {1:f1} s: {2} "
          "kernels, {3} cuBLAS GEMMs, {4:f1} MiB of temporaries",
          gpuStepFiles.cached ? "loaded" : "compiled",
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        compileStart)
              .count(),
          kernels, gemms, program.arenaBytes() / 1048576.0);
      if (!gpuStepFiles.cachePath.empty())
        llvm::errs() << (gpuStepFiles.cached ? " (from the cache: "
                                             : " (cached as ")
                     << gpuStepFiles.cachePath << ")";
      llvm::errs() << "\n";
    }
  }

  if (gpuGradients) {
    gpuGradients->setTokensPerMicroBatch(tokens);
    if (batches)
      gpuGradients->setBatchSource(std::move(batches));
  }
  rt::TrainerOptions update = options;
  update.model.artifactDir = std::string(artifactDir);
  update.gradientSource =
      gpuGradients ? static_cast<rt::GradientSource *>(gpuGradients.get())
                   : source.get();
  int status = rt::runUpdate(update, communicator);
  if (gpuGradients && status == 0 && communicator.rank() == 0)
    if (std::string use = gpuGradients->describeGraphUse(); !use.empty())
      llvm::errs() << "mantissa-run: " << use << "\n";
  std::string timesError;
  if (gpuGradients && status == 0 && communicator.rank() == 0 &&
      !options.device.opTimesPath.empty() &&
      !gpuGradients->writeOpTimes(options.device.opTimesPath, timesError)) {
    llvm::errs() << "mantissa-run: error: " << timesError << "\n";
    status = 1;
  }
  return status;
}
