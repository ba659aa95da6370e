//===- TrainLoop.cpp - Training a step with the reference semantics -------===//
//
// Each shard group's state lives in the flat byte buffers its fused AdamW
// kernel updates (the layout of appendAdamWMember, as in an artifact): the
// gather-dtype parameter copies, the fp32 masters and the moments. A step
// reads the parameters out of those buffers (the master where there is one,
// since the planned step takes parameters in their master dtype and casts
// them to the gather dtype itself), evaluates the step, packs the gradients
// (already in their reduce dtype) into the group's gradient buffer and runs
// the kernel.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/TrainLoop.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mlir/IR/Diagnostics.h"
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

namespace {

/// A 64-byte aligned, zero-initialised byte buffer (the kernels use 128-bit
/// accesses at 16-byte aligned offsets).
class AlignedBuffer {
public:
  explicit AlignedBuffer(int64_t bytes)
      : storage(static_cast<uint8_t *>(std::aligned_alloc(
            64, std::max<int64_t>(64, (bytes + 63) / 64 * 64)))) {
    std::memset(storage, 0, std::max<int64_t>(64, (bytes + 63) / 64 * 64));
  }
  ~AlignedBuffer() { std::free(storage); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  uint8_t *data() { return storage; }

private:
  uint8_t *storage;
};

/// One shard group: its layout, compiled kernel and state.
struct GroupState {
  AdamWGroup layout;
  std::unique_ptr<AdamWCpuKernel> kernel;
  std::vector<std::unique_ptr<AlignedBuffer>> buffers;

  uint8_t *buffer(AdamWBuffer role) {
    return buffers[static_cast<unsigned>(role)]->data();
  }
};

/// Where a parameter's state lives.
struct MemberRef {
  GroupState *group;
  const AdamWMember *member;
};

} // namespace

static Type elementTypeOf(MLIRContext *context, DType dtype) {
  return train::getElementType(context, dtype);
}

/// Copies `value` (converted to `dtype`) into `destination`.
static llvm::Error storeAs(const reference::Tensor &value, DType dtype,
                           uint8_t *destination) {
  Type type = elementTypeOf(value.getElementType().getContext(), dtype);
  reference::Tensor converted =
      value.getElementType() == type
          ? value
          : reference::Tensor::fromFloats(type, value.getShape(),
                                          value.toFloats());
  std::vector<uint8_t> bytes = converted.toBytes();
  std::memcpy(destination, bytes.data(), bytes.size());
  return llvm::Error::success();
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

llvm::Error mlir::mantissa::trainStep(ModuleOp module, train::StepOp step,
                                      const pt2::Program &program,
                                      SmallVector<reference::Tensor> arguments,
                                      const TrainOptions &options,
                                      StepEvaluator &evaluator) {
  MLIRContext *context = module.getContext();
  llvm::Expected<ArtifactSpec> spec = collectArtifactSpec(module, program);
  if (!spec)
    return spec.takeError();

  // Build and compile every group's kernel, and place each parameter.
  llvm::StringMap<const ArtifactTensorSpec *> planByFqn;
  for (const ArtifactTensorSpec &tensor : spec->tensors)
    planByFqn[tensor.fqn] = &tensor;
  std::vector<std::unique_ptr<GroupState>> groups;
  llvm::StringMap<MemberRef> memberByFqn;
  for (const ArtifactGroupSpec &groupSpec : spec->groups) {
    auto group = std::make_unique<GroupState>();
    for (const std::string &fqn : groupSpec.members) {
      const ArtifactTensorSpec *plan = planByFqn.lookup(fqn);
      if (!plan)
        return llvm::createStringError("group member '" + fqn +
                                       "' has no plan");
      AdamWMasterKind master = AdamWMasterKind::None;
      if (plan->master != plan->gather) {
        if (plan->master != DType::fp32)
          return llvm::createStringError(llvm::formatv(
              "parameter '{0}': a {1} master for a {2} parameter is not "
              "supported (masters are fp32)",
              fqn, train::stringifyDType(plan->master),
              train::stringifyDType(plan->gather)));
        master = AdamWMasterKind::FP32;
      }
      int64_t count = 1;
      for (int64_t size : plan->shape)
        count *= size;
      appendAdamWMember(group->layout, fqn, count, plan->reduce, plan->gather,
                        master, plan->moments);
    }
    std::string error;
    group->kernel = AdamWCpuKernel::compile(group->layout, error);
    if (!group->kernel)
      return llvm::createStringError("compiling the AdamW kernel of group '" +
                                     groupSpec.name + "': " + error);
    for (unsigned role = 0; role < kNumAdamWBuffers; ++role)
      group->buffers.push_back(std::make_unique<AlignedBuffer>(
          group->layout.getBufferBytes(static_cast<AdamWBuffer>(role))));
    for (const AdamWMember &member : group->layout.members)
      memberByFqn[member.name] = MemberRef{group.get(), &member};
    groups.push_back(std::move(group));
  }

  // Initial state: parameter copies in the gather dtype, masters in fp32.
  auto parameterRef = [&](unsigned index) -> std::optional<MemberRef> {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    if (info.getKind() != train::TensorKind::parameter)
      return std::nullopt;
    auto it = memberByFqn.find(info.getFqn().getValue());
    if (it == memberByFqn.end())
      return std::nullopt;
    return it->second;
  };
  // A parameter's current value as the planned step takes it: its fp32
  // master where it has one, else its copy in the gather dtype.
  auto readParameter =
      [&](const MemberRef &ref,
          ArrayRef<int64_t> shape) -> llvm::Expected<reference::Tensor> {
    const AdamWMember &member = *ref.member;
    bool hasMaster = member.master == AdamWMasterKind::FP32;
    const uint8_t *source =
        hasMaster ? ref.group->buffer(AdamWBuffer::Master) + member.masterOffset
                  : ref.group->buffer(AdamWBuffer::Param) + member.paramOffset;
    Type type = elementTypeOf(context, hasMaster ? DType::fp32 : member.param);
    size_t bytes = member.count * (type.getIntOrFloatBitWidth() / 8);
    return reference::Tensor::fromBytes(type, shape,
                                        ArrayRef<uint8_t>(source, bytes));
  };
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    std::optional<MemberRef> ref = parameterRef(index);
    if (!ref)
      continue;
    const AdamWMember &member = *ref->member;
    if (llvm::Error error = storeAs(arguments[index], member.param,
                                    ref->group->buffer(AdamWBuffer::Param) +
                                        member.paramOffset))
      return error;
    if (member.master == AdamWMasterKind::FP32)
      if (llvm::Error error = storeAs(arguments[index], DType::fp32,
                                      ref->group->buffer(AdamWBuffer::Master) +
                                          member.masterOffset))
        return error;
  }

  // Tokens per step: the elements of the first integer user input (the
  // token ids of a language model), if there is one.
  int64_t tokensPerStep = 0;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
    if (step.getTensorInfo(index).getKind() == train::TensorKind::user_input &&
        isa<IntegerType>(arguments[index].getElementType())) {
      tokensPerStep = arguments[index].getNumElements();
      break;
    }

  std::vector<double> losses;
  auto start = std::chrono::steady_clock::now();
  for (int64_t stepNumber = 1; stepNumber <= options.steps; ++stepNumber) {
    // Parameters as the planned step takes them: in the master dtype.
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
      std::optional<MemberRef> ref = parameterRef(index);
      if (!ref)
        continue;
      llvm::Expected<reference::Tensor> value =
          readParameter(*ref, arguments[index].getShape());
      if (!value)
        return value.takeError();
      arguments[index] = std::move(*value);
    }

    llvm::Expected<SmallVector<reference::Tensor>> results =
        evaluator.evaluate(arguments);
    if (!results)
      return llvm::createStringError(llvm::formatv(
          "step {0}: {1}", stepNumber, llvm::toString(results.takeError())));

    for (auto [index, result] : llvm::enumerate(*results)) {
      train::ResultInfoAttr info = step.getResultInfo(index);
      switch (info.getKind()) {
      case train::ResultKind::loss:
        losses.push_back(result.toFloats().front());
        break;
      case train::ResultKind::gradient: {
        const MemberRef &ref =
            memberByFqn.find(info.getFqn().getValue())->second;
        if (llvm::Error error = storeAs(result, ref.member->grad,
                                        ref.group->buffer(AdamWBuffer::Grad) +
                                            ref.member->gradOffset))
          return error;
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

    for (std::unique_ptr<GroupState> &group : groups)
      group->kernel->getFunction()(
          group->buffer(AdamWBuffer::Grad), group->buffer(AdamWBuffer::Param),
          group->buffer(AdamWBuffer::Master),
          group->buffer(AdamWBuffer::ExpAvg),
          group->buffer(AdamWBuffer::ExpAvgSq),
          group->buffer(AdamWBuffer::MaxExpAvgSq), options.lr, options.beta1,
          options.beta2, options.eps, options.weightDecay, stepNumber, 0, 1);

    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    reportProgress(stepNumber, options.steps, losses.back(),
                   stepNumber / std::max(seconds, 1e-9), tokensPerStep);
  }
  if (llvm::outs().is_displayed())
    llvm::outs() << "\n";

  if (!options.lossesPath.empty()) {
    llvm::SmallString<256> plotPath(options.lossesPath);
    llvm::sys::path::replace_extension(plotPath, ".svg");
    if (llvm::Error error = writeLossPlot(losses, plotPath))
      return error;
    llvm::json::Array values;
    for (double loss : losses)
      values.push_back(loss);
    std::string text = llvm::formatv(
        "{0:2}",
        llvm::json::Value(llvm::json::Object{{"losses", std::move(values)}}));
    if (llvm::Error error = llvm::writeToOutput(
            options.lossesPath, [&](llvm::raw_ostream &os) -> llvm::Error {
              os << text << "\n";
              return llvm::Error::success();
            }))
      return error;
  }

  if (!options.finalParamsPath.empty()) {
    std::vector<rt::HostTensor> finals;
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
      std::optional<MemberRef> ref = parameterRef(index);
      if (!ref)
        continue;
      llvm::Expected<reference::Tensor> value =
          readParameter(*ref, arguments[index].getShape());
      if (!value)
        return value.takeError();
      std::vector<float> floats = value->toFloats();
      finals.push_back(rt::fromFloat32(ref->member->name,
                                       std::vector<int64_t>(value->getShape()),
                                       floats.data(), rt::DType::F32));
    }
    std::string error;
    if (!rt::writeSafeTensors(options.finalParamsPath, finals, {}, error))
      return llvm::createStringError(error);
  }
  return llvm::Error::success();
}
