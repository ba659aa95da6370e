//===- WeightsFile.cpp - A program's stored tensors as safetensors --------===//

#include "mantissa/Driver/WeightsFile.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir::mantissa;

static std::optional<rt::DType> toRuntimeDType(pt2::ScalarType type) {
  switch (type) {
  case pt2::ScalarType::Float32:
    return rt::DType::F32;
  case pt2::ScalarType::BFloat16:
    return rt::DType::BF16;
  case pt2::ScalarType::Float16:
    return rt::DType::F16;
  case pt2::ScalarType::Float64:
    return rt::DType::F64;
  case pt2::ScalarType::Int64:
    return rt::DType::I64;
  case pt2::ScalarType::Int32:
    return rt::DType::I32;
  case pt2::ScalarType::Int16:
    return rt::DType::I16;
  case pt2::ScalarType::Int8:
    return rt::DType::I8;
  case pt2::ScalarType::UInt8:
    return rt::DType::U8;
  case pt2::ScalarType::Bool:
    return rt::DType::Bool;
  default:
    return std::nullopt;
  }
}

llvm::Error mlir::mantissa::collectStoredTensors(
    const pt2::Program &program, std::vector<rt::HostTensor> &tensors,
    std::map<std::string, std::string> &tiedTo) {
  std::vector<const pt2::StoredTensor *> stored;
  for (const pt2::StoredTensor &tensor : program.weights)
    stored.push_back(&tensor);
  for (const pt2::StoredTensor &tensor : program.constants)
    stored.push_back(&tensor);
  std::vector<const pt2::StoredTensor *> kept;
  for (const pt2::StoredTensor *tensor : stored) {
    auto tied = llvm::find_if(kept, [&](const pt2::StoredTensor *other) {
      return tensor->isTiedTo(*other);
    });
    if (tied != kept.end()) {
      tiedTo[tensor->fqn] = (*tied)->fqn;
      continue;
    }
    if (tensor->isFake)
      return llvm::createStringError(llvm::formatv(
          "tensor '{0}' was exported as a fake tensor without data",
          tensor->fqn));
    std::optional<rt::DType> dtype = toRuntimeDType(tensor->meta.dtype);
    if (!dtype)
      return llvm::createStringError(llvm::formatv(
          "tensor '{0}' has dtype {1}, which cannot be stored", tensor->fqn,
          pt2::stringifyScalarType(tensor->meta.dtype)));
    kept.push_back(tensor);
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
