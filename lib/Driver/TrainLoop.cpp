//===- TrainLoop.cpp - Training a step through the runtime ---------------===//
//
// The runtime's update path (libmantissa_rt's runUpdate: sharded state,
// reduce-scatter, fused AdamW kernels, all-gather, checkpoints, resume,
// tripwire) with this file's GradientSource in front of it: each step it
// reads the all-gathered parameters, evaluates forward and backward with a
// StepEvaluator and hands back the gradients in their reduce dtype. The
// artifact the runtime loads is written for the run into a temporary
// directory.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/TrainLoop.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Runtime/DType.h"
#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <algorithm>
#include <chrono>
#include <cstring>

using namespace mlir;
using namespace mlir::mantissa;
using train::DType;

static Type elementTypeOf(MLIRContext *context, rt::DType dtype) {
  switch (dtype) {
  case rt::DType::BF16:
    return BFloat16Type::get(context);
  case rt::DType::F16:
    return Float16Type::get(context);
  case rt::DType::F64:
    return Float64Type::get(context);
  default:
    return Float32Type::get(context);
  }
}

/// `value` converted to `type` (rounded to nearest even), or itself.
static reference::Tensor convertTo(const reference::Tensor &value, Type type) {
  if (value.getElementType() == type)
    return value;
  return reference::Tensor::fromFloats(type, value.getShape(),
                                       value.toFloats());
}

/// One progress report: a bar redrawn in place on a terminal, a plain line
/// otherwise (logs, pipes, CI).
static void reportProgress(int64_t stepNumber, int64_t steps, double loss,
                           double stepsPerSecond, int64_t tokensPerStep) {
  llvm::raw_ostream &os = llvm::outs();
  std::string rate = llvm::formatv("{0:f2} steps/s", stepsPerSecond);
  if (tokensPerStep)
    rate += llvm::formatv(", {0:f0} tokens/s", stepsPerSecond * tokensPerStep);
  if (!os.is_displayed()) {
    os << llvm::formatv("step {0}/{1}  loss {2:f6}  {3}\n", stepNumber, steps,
                        loss, rate);
    // The runtime's own reports go through C stdio.
    os.flush();
    return;
  }
  constexpr int kWidth = 30;
  int filled =
      static_cast<int>(kWidth * stepNumber / std::max<int64_t>(steps, 1));
  os << llvm::formatv(
      "\r[{0}{1}] step {2}/{3}  loss {4:f6}  {5}  ", std::string(filled, '#'),
      std::string(kWidth - filled, ' '), stepNumber, steps, loss, rate);
  os.flush();
}

/// Writes the loss curve as a self-contained SVG that a browser opens.
static llvm::Error writeLossPlot(llvm::ArrayRef<double> losses,
                                 llvm::StringRef path) {
  if (losses.empty())
    return llvm::Error::success();
  constexpr double kWidth = 640, kHeight = 400, kLeft = 70, kRight = 20,
                   kTop = 40, kBottom = 50;
  double low = *std::min_element(losses.begin(), losses.end());
  double high = *std::max_element(losses.begin(), losses.end());
  if (high - low < 1e-12)
    high = low + 1;
  auto x = [&](size_t index) {
    return kLeft + (kWidth - kLeft - kRight) * index /
                       std::max<double>(1, losses.size() - 1);
  };
  auto y = [&](double loss) {
    return kTop + (kHeight - kTop - kBottom) * (high - loss) / (high - low);
  };
  std::string svg;
  llvm::raw_string_ostream os(svg);
  os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
                      "height=\"{1}\" font-family=\"sans-serif\" "
                      "font-size=\"12\">\n",
                      kWidth, kHeight);
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << llvm::formatv(
      "<text x=\"{0}\" y=\"22\" font-size=\"15\">Training loss, "
      "{1} steps</text>\n",
      kLeft, losses.size());
  // Axes, labelled with the loss range and the step range at their ends.
  os << llvm::formatv("<path d=\"M{0},{1} V{2} H{3}\" stroke=\"black\" "
                      "fill=\"none\"/>\n",
                      kLeft, kTop, kHeight - kBottom, kWidth - kRight);
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">{2:f4}"
                      "</text>\n",
                      kLeft - 6, y(high) + 4, high);
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">{2:f4}"
                      "</text>\n",
                      kLeft - 6, y(low) + 4, low);
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\">1</text>\n", kLeft,
                      kHeight - kBottom + 18);
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">{2}"
                      "</text>\n",
                      kWidth - kRight, kHeight - kBottom + 18, losses.size());
  os << llvm::formatv("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\">step"
                      "</text>\n",
                      (kWidth + kLeft) / 2, kHeight - 12);
  os << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" "
        "points=\"";
  for (auto [index, loss] : llvm::enumerate(losses))
    os << llvm::formatv("{0:f1},{1:f1} ", x(index), y(loss));
  os << "\"/>\n</svg>\n";
  return llvm::writeToOutput(path, [&](llvm::raw_ostream &out) -> llvm::Error {
    out << svg;
    return llvm::Error::success();
  });
}

/// The runtime dtype of a floating-point element type (F32 for others,
/// which the raw path never converts).
static rt::DType runtimeDTypeOf(Type type) {
  if (type.isBF16())
    return rt::DType::BF16;
  if (type.isF16())
    return rt::DType::F16;
  if (type.isF64())
    return rt::DType::F64;
  return rt::DType::F32;
}

namespace {

/// Reports each step's loss with the rates since the first step.
class ProgressReporter {
public:
  ProgressReporter(train::StepOp step, ArrayRef<reference::Tensor> arguments,
                   int64_t steps)
      : steps(steps), start(std::chrono::steady_clock::now()) {
    // Tokens per step: the elements of the first integer user input (the
    // token ids of a language model), if there is one.
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
      if (step.getTensorInfo(index).getKind() ==
              train::TensorKind::user_input &&
          isa<IntegerType>(arguments[index].getElementType())) {
        tokensPerStep = arguments[index].getNumElements();
        break;
      }
  }

  void report(int64_t stepNumber, double loss) {
    ++stepsRun;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    reportProgress(stepNumber, steps, loss, stepsRun / std::max(seconds, 1e-9),
                   tokensPerStep);
  }

private:
  int64_t steps, stepsRun = 0, tokensPerStep = 0;
  std::chrono::steady_clock::time_point start;
};

/// Forward and backward in front of the runtime's update path.
class StepGradients : public rt::GradientSource {
public:
  StepGradients(train::StepOp step, SmallVector<reference::Tensor> arguments,
                StepEvaluator &evaluator, int64_t steps)
      : step(step), arguments(std::move(arguments)), evaluator(evaluator),
        progress(step, this->arguments, steps) {}

  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override {
    if (evaluator.hasRawEntry())
      return computeRaw(stepNumber, members, error);
    MLIRContext *context = step.getContext();
    // Parameters as the planned step takes them (its argument dtype, the
    // master's): widening the gather-dtype copy loses nothing, since the
    // step rounds every parameter to its gather dtype before using it.
    llvm::StringMap<const Member *> memberByFqn;
    SmallVector<unsigned> argumentOf;
    if (!resolveMembers(members, memberByFqn, argumentOf, error))
      return false;
    for (auto [member, index] : llvm::zip_equal(members, argumentOf)) {
      reference::Tensor &slot = arguments[index];
      int64_t count = slot.getNumElements();
      auto value = reference::Tensor::fromBytes(
          elementTypeOf(context, member.paramDtype), slot.getShape(),
          ArrayRef<uint8_t>(member.param,
                            count * rt::elementSize(member.paramDtype)));
      if (!value) {
        error = "parameter '" + *member.fqn +
                "': " + llvm::toString(value.takeError());
        return false;
      }
      slot = convertTo(*value, slot.getElementType());
    }

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
        losses.push_back(result.toFloats().front());
        break;
      case train::ResultKind::gradient: {
        const Member *member = memberByFqn.lookup(info.getFqn().getValue());
        if (!member)
          break; // A parameter the runtime does not update (none today).
        std::vector<uint8_t> bytes =
            convertTo(result, elementTypeOf(context, member->gradDtype))
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
    return finishStep(stepNumber);
  }

  ArrayRef<double> getLosses() const { return losses; }

private:
  /// Each member by FQN, and the step argument it is.
  bool resolveMembers(const std::vector<Member> &members,
                      llvm::StringMap<const Member *> &memberByFqn,
                      SmallVectorImpl<unsigned> &argumentOf,
                      std::string &error) {
    for (const Member &member : members) {
      memberByFqn[*member.fqn] = &member;
      BlockArgument argument = step.lookupArgument(*member.fqn);
      if (!argument) {
        error = "the step has no parameter '" + *member.fqn + "'";
        return false;
      }
      argumentOf.push_back(argument.getArgNumber());
    }
    return true;
  }

  /// Compiled code reads the parameters where the runtime holds them and
  /// writes the gradients where it reduces them, whenever the dtypes agree
  /// (converting through a scratch buffer otherwise): no per-step copies.
  bool computeRaw(int64_t stepNumber, const std::vector<Member> &members,
                  std::string &error) {
    unsigned numArguments = step.getNumArguments();
    if (rawBuffers.empty()) {
      for (const reference::Tensor &argument : arguments)
        rawBuffers.push_back(argument.toBytes());
      for (Type type : step.getResultTypes()) {
        auto tensorType = cast<RankedTensorType>(type);
        rawBuffers.emplace_back(
            std::max<int64_t>(1, tensorType.getNumElements() *
                                     reference::Tensor::getStorageByteWidth(
                                         tensorType.getElementType())));
      }
    }
    SmallVector<void *> pointers;
    for (std::vector<uint8_t> &buffer : rawBuffers)
      pointers.push_back(buffer.data());

    llvm::StringMap<const Member *> memberByFqn;
    SmallVector<unsigned> argumentOf;
    if (!resolveMembers(members, memberByFqn, argumentOf, error))
      return false;
    for (auto [member, index] : llvm::zip_equal(members, argumentOf)) {
      rt::DType wanted = runtimeDTypeOf(arguments[index].getElementType());
      if (wanted == member.paramDtype)
        // The step only reads its arguments.
        pointers[index] = const_cast<uint8_t *>(member.param);
      else
        rt::convertFloatElements(member.param, member.paramDtype,
                                 rawBuffers[index].data(), wanted,
                                 arguments[index].getNumElements());
    }
    auto resultDType = [&](unsigned index) {
      return runtimeDTypeOf(cast<RankedTensorType>(step.getResultTypes()[index])
                                .getElementType());
    };
    for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
      train::ResultInfoAttr info = step.getResultInfo(index);
      if (info.getKind() != train::ResultKind::gradient)
        continue;
      const Member *member = memberByFqn.lookup(info.getFqn().getValue());
      if (member && member->gradDtype == resultDType(index))
        pointers[numArguments + index] = member->grad;
    }

    evaluator.evaluateRaw(pointers.data());

    for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
      train::ResultInfoAttr info = step.getResultInfo(index);
      const uint8_t *result =
          static_cast<const uint8_t *>(pointers[numArguments + index]);
      auto resultType = cast<RankedTensorType>(step.getResultTypes()[index]);
      switch (info.getKind()) {
      case train::ResultKind::loss:
        losses.push_back(rt::loadFloatElement(result, 0, resultDType(index)));
        break;
      case train::ResultKind::gradient: {
        const Member *member = memberByFqn.lookup(info.getFqn().getValue());
        if (member && result != member->grad)
          rt::convertFloatElements(result, resultDType(index), member->grad,
                                   member->gradDtype,
                                   resultType.getNumElements());
        break;
      }
      case train::ResultKind::buffer_mutation: {
        // The next step reads the buffer's new value.
        BlockArgument buffer = step.lookupArgument(info.getFqn().getValue());
        std::vector<uint8_t> &target = rawBuffers[buffer.getArgNumber()];
        const std::vector<uint8_t> &value = rawBuffers[numArguments + index];
        if (target.size() != value.size()) {
          error = "buffer '" + info.getFqn().getValue().str() +
                  "' changes size in the step";
          return false;
        }
        std::memcpy(target.data(), value.data(), value.size());
        break;
      }
      case train::ResultKind::user_output:
        break;
      }
    }
    return finishStep(stepNumber);
  }

  bool finishStep(int64_t stepNumber) {
    progress.report(stepNumber, losses.back());
    return true;
  }

  /// Argument buffers, then result buffers, of the raw path.
  std::vector<std::vector<uint8_t>> rawBuffers;
  train::StepOp step;
  SmallVector<reference::Tensor> arguments;
  StepEvaluator &evaluator;
  ProgressReporter progress;
  std::vector<double> losses;
};

} // namespace

static llvm::Error writeLosses(ArrayRef<double> losses, StringRef path) {
  llvm::SmallString<256> plotPath(path);
  llvm::sys::path::replace_extension(plotPath, ".svg");
  if (llvm::Error error = writeLossPlot(losses, plotPath))
    return error;
  llvm::json::Array values;
  for (double loss : losses)
    values.push_back(loss);
  std::string text = llvm::formatv(
      "{0:2}",
      llvm::json::Value(llvm::json::Object{{"losses", std::move(values)}}));
  return llvm::writeToOutput(path, [&](llvm::raw_ostream &os) -> llvm::Error {
    os << text << "\n";
    return llvm::Error::success();
  });
}

llvm::Expected<int> mlir::mantissa::trainStep(
    ModuleOp module, train::StepOp step, const pt2::Program &program,
    SmallVector<reference::Tensor> arguments, const TrainOptions &options,
    StepEvaluator &evaluator, rt::Communicator &communicator) {
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
  bool onGpu = options.device == "cuda" || options.device == "gpu";
  ArtifactOptions artifactOptions;
  artifactOptions.emitPtx = onGpu;
  GpuStepFiles gpuStepFiles;
  if (onGpu) {
    artifactOptions.gpuStep = step;
    artifactOptions.gpuStepFiles = &gpuStepFiles;
  }
  auto compileStart = std::chrono::steady_clock::now();
  if (llvm::Error error =
          writeArtifactSpec(*spec, artifactDir, artifactOptions))
    return std::move(error);

  ProgressReporter gpuProgress(step, arguments, options.steps);
  std::unique_ptr<rt::GpuStepGradients> gpuGradients;
  if (onGpu) {
    // Parameters come from the runtime; everything else is uploaded once.
    std::vector<std::vector<uint8_t>> hostArguments;
    for (auto [index, argument] : llvm::enumerate(arguments))
      hostArguments.push_back(step.getTensorInfo(index).getKind() ==
                                      train::TensorKind::parameter
                                  ? std::vector<uint8_t>()
                                  : argument.toBytes());
    llvm::SmallString<128> programPath(artifactDir);
    llvm::sys::path::append(programPath, "step.gpu.json");
    std::string error;
    gpuGradients = rt::GpuStepGradients::load(std::string(programPath),
                                              std::move(hostArguments), error);
    if (!gpuGradients)
      return llvm::createStringError(error);
    const rt::GpuStep &program = gpuGradients->program();
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
    gpuGradients->setStepCallback([&](int64_t stepNumber, double loss) {
      gpuProgress.report(stepNumber, loss);
    });
  }

  StepGradients gradients(step, std::move(arguments), evaluator, options.steps);
  rt::UpdateOptions update;
  update.artifactDir = std::string(artifactDir);
  update.gradientSource =
      gpuGradients ? static_cast<rt::GradientSource *>(gpuGradients.get())
                   : &gradients;
  update.steps = options.steps;
  update.lr = options.lr;
  update.beta1 = options.beta1;
  update.beta2 = options.beta2;
  update.eps = options.eps;
  update.weightDecay = options.weightDecay;
  update.finalParamsPath = options.finalParamsPath;
  update.saveCheckpointDir = options.saveCheckpointDir;
  update.saveEvery = options.saveEvery;
  update.resumeDir = options.resumeDir;
  update.device = options.device;
  update.memoryReport = options.memoryReport;
  int status = rt::runUpdate(update, communicator);
  if (gpuGradients && status == 0 && communicator.rank() == 0)
    if (std::string use = gpuGradients->describeGraphUse(); !use.empty())
      llvm::errs() << "mantissa-run: " << use << "\n";
  ArrayRef<double> losses = gpuGradients
                                ? ArrayRef<double>(gpuGradients->losses())
                                : gradients.getLosses();
  if (llvm::outs().is_displayed() && !losses.empty())
    llvm::outs() << "\n";
  llvm::outs().flush();
  if (status != 0 || communicator.rank() != 0 || options.lossesPath.empty())
    return status;
  if (llvm::Error error = writeLosses(losses, options.lossesPath))
    return std::move(error);
  return 0;
}
