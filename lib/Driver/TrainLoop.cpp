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
#include "mantissa/Runtime/TokenData.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallPtrSet.h"
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

/// The token data a run trains on (--data, --val-data): which step
/// arguments take the tokens and targets, and the bounds their ids must
/// respect.
struct TokenBatches {
  std::unique_ptr<rt::TokenStream> train, validation;
  std::unique_ptr<rt::SampleOrder> order, validationOrder;
  unsigned tokensArgument = 0, targetsArgument = 0;
  int64_t batch = 0, seqLen = 0;
  int64_t tokenVocab = 0, targetVocab = 0;
  std::string tokenVocabWhat, targetVocabWhat;
  int64_t validationSamples = 0;
};

/// Forward and backward in front of the runtime's update path.
class StepGradients : public rt::GradientSource {
public:
  StepGradients(train::StepOp step, SmallVector<reference::Tensor> arguments,
                StepEvaluator &evaluator, TokenBatches *data,
                const ForwardStep &forward)
      : step(step), arguments(std::move(arguments)), evaluator(evaluator),
        data(data), forward(forward) {
    // Tokens per micro-batch: the elements of the first integer user input
    // (the token ids of a language model), if there is one.
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
      if (step.getTensorInfo(index).getKind() ==
              train::TensorKind::user_input &&
          isa<IntegerType>(this->arguments[index].getElementType())) {
        tokens = this->arguments[index].getNumElements();
        break;
      }
  }

  bool splitsSteps() const override { return data != nullptr; }
  int64_t tokensPerMicroBatch() const override { return tokens; }
  double lastLoss() const override {
    return losses.empty() ? std::nan("") : losses.back();
  }
  int64_t validationMicroBatches() const override {
    return data && data->validation ? data->validationSamples / data->batch : 0;
  }

  bool selectMicroBatch(const MicroBatch &microBatch,
                        std::string &error) override {
    if (!data)
      return true;
    return loadBatch(*data->train, *data->order,
                     microBatch.global * data->batch, error);
  }

  bool evaluateValidation(int64_t index, const std::vector<Member> &members,
                          double &loss, std::string &error) override {
    if (!loadBatch(*data->validation, *data->validationOrder,
                   index * data->batch, error))
      return false;
    if (forward.evaluator)
      return evaluateForward(members, loss, error);
    // Without a forward-only step, the joint one, its gradients discarded.
    evaluating = true;
    bool ok = computeGradients(0, members, error);
    evaluating = false;
    if (!ok)
      return false;
    loss = losses.back();
    losses.pop_back();
    return true;
  }

  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override {
    if (evaluator.hasRawEntry())
      return computeRaw(stepNumber, members, error);
    MLIRContext *context = step.getContext();
    llvm::StringMap<const Member *> memberByFqn;
    if (!loadParameters(members, memberByFqn, error))
      return false;

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
        if (!member || evaluating)
          break; // A parameter the runtime does not update (none today).
        std::vector<uint8_t> bytes =
            convertTo(result, elementTypeOf(context, member->gradDtype))
                .toBytes();
        std::memcpy(member->grad, bytes.data(), bytes.size());
        break;
      }
      case train::ResultKind::buffer_mutation: {
        // Evaluation leaves the model's buffers as training left them.
        if (evaluating)
          break;
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
  /// master's), into the interpreter's arguments: widening the gather-dtype
  /// copy loses nothing, since the step rounds every parameter to its
  /// gather dtype before using it.
  bool loadParameters(const std::vector<Member> &members,
                      llvm::StringMap<const Member *> &memberByFqn,
                      std::string &error) {
    MLIRContext *context = step.getContext();
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
    return true;
  }

  /// Points `pointers` (one per argument) at the raw argument buffers, the
  /// parameters where the runtime holds them when the dtypes agree.
  bool bindRawArguments(const std::vector<Member> &members,
                        SmallVectorImpl<void *> &pointers,
                        llvm::StringMap<const Member *> &memberByFqn,
                        std::string &error) {
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
      pointers.push_back(rawBuffers[index].data());
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
    return true;
  }

  /// The loss of the forward-only step on the current arguments.
  bool evaluateForward(const std::vector<Member> &members, double &loss,
                       std::string &error) {
    train::StepOp forwardStep = forward.step;
    unsigned lossIndex = 0;
    for (unsigned index = 0, e = forwardStep.getNumResults(); index < e;
         ++index)
      if (forwardStep.getResultInfo(index).getKind() == train::ResultKind::loss)
        lossIndex = index;
    auto lossType =
        cast<RankedTensorType>(forwardStep.getResultTypes()[lossIndex]);
    llvm::StringMap<const Member *> memberByFqn;
    if (forward.evaluator->hasRawEntry() && !rawBuffers.empty()) {
      SmallVector<void *> pointers;
      if (!bindRawArguments(members, pointers, memberByFqn, error))
        return false;
      if (forwardResults.empty())
        for (Type type : forwardStep.getResultTypes()) {
          auto tensorType = cast<RankedTensorType>(type);
          forwardResults.emplace_back(
              std::max<int64_t>(1, tensorType.getNumElements() *
                                       reference::Tensor::getStorageByteWidth(
                                           tensorType.getElementType())));
        }
      for (std::vector<uint8_t> &buffer : forwardResults)
        pointers.push_back(buffer.data());
      forward.evaluator->evaluateRaw(pointers.data());
      loss = rt::loadFloatElement(forwardResults[lossIndex].data(), 0,
                                  runtimeDTypeOf(lossType.getElementType()));
      return true;
    }
    if (!loadParameters(members, memberByFqn, error))
      return false;
    llvm::Expected<SmallVector<reference::Tensor>> results =
        forward.evaluator->evaluate(arguments);
    if (!results) {
      error = "evaluation: " + llvm::toString(results.takeError());
      return false;
    }
    loss = (*results)[lossIndex].toFloats().front();
    return true;
  }

  /// Loads the `data->batch` samples from global index `first` of `order`
  /// into the tokens and targets arguments.
  bool loadBatch(const rt::TokenStream &stream, rt::SampleOrder &order,
                 int64_t first, std::string &error) {
    int64_t count = data->batch * data->seqLen;
    std::vector<int64_t> tokenIds(count), targetIds(count);
    if (!rt::loadSamples(stream, order, first, data->batch, data->seqLen,
                         data->tokenVocab, data->tokenVocabWhat,
                         data->targetVocab, data->targetVocabWhat,
                         tokenIds.data(), targetIds.data(), error))
      return false;
    setIds(data->tokensArgument, tokenIds);
    setIds(data->targetsArgument, targetIds);
    return true;
  }

  /// Replaces an integer argument's value (in its own element type).
  void setIds(unsigned index, ArrayRef<int64_t> ids) {
    reference::Tensor &slot = arguments[index];
    unsigned width = slot.getElementType().getIntOrFloatBitWidth();
    std::vector<uint8_t> bytes(ids.size() * width / 8);
    for (auto [i, id] : llvm::enumerate(ids)) {
      if (width == 64)
        std::memcpy(&bytes[i * 8], &id, 8);
      else {
        int32_t narrow = int32_t(id);
        std::memcpy(&bytes[i * 4], &narrow, 4);
      }
    }
    llvm::Expected<reference::Tensor> value = reference::Tensor::fromBytes(
        slot.getElementType(), slot.getShape(), bytes);
    if (value)
      slot = std::move(*value);
    else
      llvm::consumeError(value.takeError());
    if (!rawBuffers.empty())
      rawBuffers[index] = std::move(bytes);
  }

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
    llvm::StringMap<const Member *> memberByFqn;
    if (!bindRawArguments(members, pointers, memberByFqn, error))
      return false;
    for (unsigned index = numArguments; index < rawBuffers.size(); ++index)
      pointers.push_back(rawBuffers[index].data());
    auto resultDType = [&](unsigned index) {
      return runtimeDTypeOf(cast<RankedTensorType>(step.getResultTypes()[index])
                                .getElementType());
    };
    for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
      train::ResultInfoAttr info = step.getResultInfo(index);
      if (info.getKind() != train::ResultKind::gradient)
        continue;
      const Member *member = memberByFqn.lookup(info.getFqn().getValue());
      if (member && !evaluating && member->gradDtype == resultDType(index))
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
        if (member && !evaluating && result != member->grad)
          rt::convertFloatElements(result, resultDType(index), member->grad,
                                   member->gradDtype,
                                   resultType.getNumElements());
        break;
      }
      case train::ResultKind::buffer_mutation: {
        if (evaluating)
          break;
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
    return true;
  }

  /// Argument buffers, then result buffers, of the raw path.
  std::vector<std::vector<uint8_t>> rawBuffers;
  train::StepOp step;
  SmallVector<reference::Tensor> arguments;
  StepEvaluator &evaluator;
  TokenBatches *data;
  ForwardStep forward;
  /// The forward-only step's result buffers (raw path).
  std::vector<std::vector<uint8_t>> forwardResults;
  int64_t tokens = 0;
  bool evaluating = false;
  std::vector<double> losses;
};

} // namespace

/// The bound integer ids fed to step argument `index` must respect: the
/// smallest table any of its uses indexes (the rows of an embedding, the
/// size of a gathered dimension, e.g. the classes of a cross-entropy),
/// followed through the views and reshapes in between. 0 when no use
/// indexes anything.
static int64_t indexBound(train::StepOp step, unsigned index,
                          std::string &what) {
  int64_t bound = 0;
  auto tighten = [&](int64_t value, std::string description) {
    if (value > 0 && (bound == 0 || value < bound)) {
      bound = value;
      what = std::move(description);
    }
  };
  auto nameOf = [&](Value table) -> std::string {
    if (auto argument = dyn_cast<BlockArgument>(table))
      if (argument.getOwner()->getParentOp() == step.getOperation())
        return "'" +
               step.getTensorInfo(argument.getArgNumber()).getFqn().str() + "'";
    return "of the step";
  };
  SmallVector<Value> work = {step.getArgument(index)};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (!seen.insert(user).second)
        continue;
      if (auto embedding = dyn_cast<train::EmbeddingOp>(user)) {
        if (use.getOperandNumber() == 1)
          tighten(cast<RankedTensorType>(embedding.getWeight().getType())
                      .getDimSize(0),
                  "the rows of embedding " + nameOf(embedding.getWeight()));
        continue;
      }
      if (auto gather = dyn_cast<train::GatherOp>(user)) {
        auto type = cast<RankedTensorType>(gather.getInput().getType());
        int64_t dim = gather.getDim();
        if (dim < 0)
          dim += type.getRank();
        if (use.getOperandNumber() == 1 && dim >= 0 && dim < type.getRank())
          tighten(type.getDimSize(dim),
                  llvm::formatv("the {0} classes the loss gathers from",
                                type.getDimSize(dim)));
        continue;
      }
      // Views, reshapes and copies pass the ids on unchanged.
      if (user->getNumResults() == 1 && user->getNumOperands() == 1)
        if (auto type =
                dyn_cast<RankedTensorType>(user->getResult(0).getType()))
          if (type.getElementType().isInteger(64) ||
              type.getElementType().isInteger(32))
            work.push_back(user->getResult(0));
    }
  }
  return bound;
}

/// Opens --data (and --val-data) for `step`, whose two user inputs must be
/// integer tensors of one shape [B, T] (tokens, then targets).
static llvm::Expected<std::unique_ptr<TokenBatches>>
openTokenData(train::StepOp step, const rt::UpdateOptions &options) {
  auto data = std::make_unique<TokenBatches>();
  SmallVector<unsigned> inputs;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
    if (step.getTensorInfo(index).getKind() == train::TensorKind::user_input)
      inputs.push_back(index);
  auto shapeOf = [&](unsigned index) {
    return cast<RankedTensorType>(step.getArgument(index).getType());
  };
  if (inputs.size() != 2 || shapeOf(inputs[0]) != shapeOf(inputs[1]) ||
      shapeOf(inputs[0]).getRank() != 2 ||
      !isa<IntegerType>(shapeOf(inputs[0]).getElementType()) ||
      shapeOf(inputs[0]).getElementType().isInteger(1))
    return llvm::createStringError(
        "--data trains a step whose two user inputs are integer tensors of "
        "one shape [B, T] (tokens, targets); this step's user inputs are " +
        [&] {
          std::string list;
          for (unsigned index : inputs)
            list += (list.empty() ? "" : ", ") +
                    step.getTensorInfo(index).getFqn().str() + " " +
                    llvm::formatv("{0}", shapeOf(index)).str();
          return list.empty() ? std::string("none") : list;
        }());
  data->tokensArgument = inputs[0];
  data->targetsArgument = inputs[1];
  data->batch = shapeOf(inputs[0]).getDimSize(0);
  data->seqLen = shapeOf(inputs[0]).getDimSize(1);
  data->tokenVocab =
      indexBound(step, data->tokensArgument, data->tokenVocabWhat);
  data->targetVocab =
      indexBound(step, data->targetsArgument, data->targetVocabWhat);
  // An input nothing indexes still has to fit the graph's integer type.
  auto widest = [&](unsigned index) {
    return shapeOf(index).getElementType().isInteger(64) ? int64_t(1) << 62
                                                         : int64_t(1) << 31;
  };
  if (!data->tokenVocab) {
    data->tokenVocab = widest(data->tokensArgument);
    data->tokenVocabWhat = "the input's integer type";
  }
  if (!data->targetVocab) {
    data->targetVocab = widest(data->targetsArgument);
    data->targetVocabWhat = "the input's integer type";
  }
  rt::TokenFormat format;
  std::string error;
  if (!rt::parseTokenFormat(options.dataFormat, format, error))
    return llvm::createStringError("--data-format: " + error);
  int64_t samples = 0;
  data->train = rt::TokenStream::open(options.dataPaths, format, error);
  if (!data->train ||
      !rt::countSamples(*data->train, data->seqLen, samples, error))
    return llvm::createStringError("--data: " + error);
  data->order = std::make_unique<rt::SampleOrder>(samples, options.shuffleSeed);
  if (!options.valDataPaths.empty()) {
    data->validation =
        rt::TokenStream::open(options.valDataPaths, format, error);
    if (!data->validation || !rt::countSamples(*data->validation, data->seqLen,
                                               data->validationSamples, error))
      return llvm::createStringError("--val-data: " + error);
    if (data->validationSamples < options.evalBatches * data->batch)
      return llvm::createStringError(llvm::formatv(
          "--eval-batches {0}: the validation data holds {1} samples of {2} "
          "tokens, fewer than {0} micro-batches of {3}",
          options.evalBatches, data->validationSamples, data->seqLen,
          data->batch));
    data->validationOrder = std::make_unique<rt::SampleOrder>(
        data->validationSamples, std::nullopt);
  }
  return data;
}

llvm::Expected<int> mlir::mantissa::trainStep(
    ModuleOp module, train::StepOp step, const pt2::Program &program,
    SmallVector<reference::Tensor> arguments, const rt::UpdateOptions &options,
    StepEvaluator &evaluator, const ForwardStep &forward,
    rt::Communicator &communicator) {
  std::unique_ptr<TokenBatches> data;
  if (!options.dataPaths.empty()) {
    llvm::Expected<std::unique_ptr<TokenBatches>> opened =
        openTokenData(step, options);
    if (!opened)
      return opened.takeError();
    data = std::move(*opened);
  }
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
  }

  StepGradients gradients(step, std::move(arguments), evaluator, data.get(),
                          forward);
  if (gpuGradients)
    gpuGradients->setTokensPerMicroBatch(gradients.tokensPerMicroBatch());
  rt::UpdateOptions update = options;
  update.artifactDir = std::string(artifactDir);
  update.gradientSource =
      gpuGradients ? static_cast<rt::GradientSource *>(gpuGradients.get())
                   : &gradients;
  int status = rt::runUpdate(update, communicator);
  if (gpuGradients && status == 0 && communicator.rank() == 0)
    if (std::string use = gpuGradients->describeGraphUse(); !use.empty())
      llvm::errs() << "mantissa-run: " << use << "\n";
  return status;
}
