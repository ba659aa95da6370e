//===- WeightsFile.cpp - A program's stored tensors as safetensors --------===//

#include "mantissa/Driver/WeightsFile.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include <cmath>
#include <cstring>

using namespace mlir::mantissa;

/// Every stored tensor, weights before constants (the order that decides
/// which name of a tied group is kept).
static std::vector<const pt2::StoredTensor *>
storedTensors(const pt2::Program &program) {
  std::vector<const pt2::StoredTensor *> stored;
  for (const pt2::StoredTensor &tensor : program.weights)
    stored.push_back(&tensor);
  for (const pt2::StoredTensor &tensor : program.constants)
    stored.push_back(&tensor);
  return stored;
}

std::map<std::string, std::string>
mlir::mantissa::getTiedAliases(const pt2::Program &program) {
  std::map<std::string, std::string> tiedTo;
  std::vector<const pt2::StoredTensor *> kept;
  for (const pt2::StoredTensor *tensor : storedTensors(program)) {
    auto tied = llvm::find_if(kept, [&](const pt2::StoredTensor *other) {
      return tensor->isTiedTo(*other);
    });
    if (tied != kept.end())
      tiedTo[tensor->fqn] = (*tied)->fqn;
    else
      kept.push_back(tensor);
  }
  return tiedTo;
}

llvm::Error mlir::mantissa::collectStoredTensors(
    const pt2::Program &program, std::vector<rt::HostTensor> &tensors,
    std::map<std::string, std::string> &tiedTo) {
  tiedTo = getTiedAliases(program);
  for (const pt2::StoredTensor *tensor : storedTensors(program)) {
    if (tiedTo.count(tensor->fqn))
      continue;
    if (tensor->isFake)
      return llvm::createStringError(llvm::formatv(
          "tensor '{0}' was exported as a fake tensor without data",
          tensor->fqn));
    std::optional<rt::DType> dtype = pt2::getStoredDType(tensor->meta.dtype);
    if (!dtype)
      return llvm::createStringError(llvm::formatv(
          "tensor '{0}' has dtype {1}, which cannot be stored", tensor->fqn,
          pt2::stringifyScalarType(tensor->meta.dtype)));
    tensors.push_back(rt::HostTensor{tensor->fqn, *dtype, tensor->meta.sizes,
                                     tensor->contiguousBytes});
  }
  return llvm::Error::success();
}

llvm::Error mlir::mantissa::writeWeightsFile(const pt2::Program &program,
                                             llvm::StringRef path) {
  std::vector<rt::HostTensor> tensors;
  std::map<std::string, std::string> tiedTo;
  if (llvm::Error error = collectStoredTensors(program, tensors, tiedTo))
    return error;
  llvm::json::Object tied;
  for (const auto &[fqn, target] : tiedTo)
    tied[fqn] = target;
  std::map<std::string, std::string> metadata{
      {"format", "mantissa-weights"},
      {"tied", llvm::formatv("{0}", llvm::json::Value(std::move(tied)))}};
  std::string error;
  if (!rt::writeSafeTensors(path.str(), tensors, metadata, error))
    return llvm::createStringError(error);
  return llvm::Error::success();
}

/// The root-mean-square of a stored floating-point tensor, if it has data.
static std::optional<double> computeRms(const pt2::StoredTensor &tensor) {
  const std::vector<uint8_t> &bytes = tensor.contiguousBytes;
  unsigned width = pt2::getScalarTypeByteWidth(tensor.meta.dtype);
  if (tensor.isFake || bytes.empty() || width == 0)
    return std::nullopt;
  size_t count = bytes.size() / width;
  double sumOfSquares = 0;
  for (size_t index = 0; index < count; ++index) {
    const uint8_t *element = bytes.data() + index * width;
    double value;
    switch (tensor.meta.dtype) {
    case pt2::ScalarType::Float32: {
      float f;
      std::memcpy(&f, element, sizeof f);
      value = f;
      break;
    }
    case pt2::ScalarType::Float64:
      std::memcpy(&value, element, sizeof value);
      break;
    case pt2::ScalarType::BFloat16:
    case pt2::ScalarType::Float16: {
      uint16_t bits;
      std::memcpy(&bits, element, sizeof bits);
      value = tensor.meta.dtype == pt2::ScalarType::BFloat16
                  ? rt::bf16BitsToFloat(bits)
                  : rt::f16BitsToFloat(bits);
      break;
    }
    default:
      return std::nullopt;
    }
    sumOfSquares += value * value;
  }
  return count ? std::sqrt(sumOfSquares / double(count)) : 0.0;
}

void mlir::mantissa::attachInitialRms(train::StepOp step,
                                      const pt2::Program &program) {
  Builder builder(step.getContext());
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    if (!info || info.getKind() != train::TensorKind::parameter)
      continue;
    const pt2::StoredTensor *stored =
        program.findWeight(info.getFqn().getValue());
    if (!stored)
      continue;
    if (std::optional<double> rms = computeRms(*stored))
      step.setArgAttr(index, kInitRmsAttrName, builder.getF64FloatAttr(*rms));
  }
}
