//===- StepInputs.cpp - A micro-batch into the step's user inputs ---------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StepInputs.h"
#include "mantissa/Runtime/TokenData.h"

#include <cstring>

namespace mlir::mantissa::rt {

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

bool storeStepInput(const std::vector<HostTensor> &microBatch,
                    const StepTensor &argument, uint8_t *out,
                    std::string &error) {
  const HostTensor *tensor = nullptr;
  for (const HostTensor &candidate : microBatch)
    if (candidate.name == argument.name)
      tensor = &candidate;
  std::string what = "user input '" + argument.name + "'";
  if (!tensor) {
    error = what + ": the micro-batch has no tensor of that name";
    return false;
  }
  if (tensor->shape != argument.shape) {
    error = what + ": the micro-batch holds " + shapeText(tensor->shape) +
            ", the step takes " + shapeText(argument.shape);
    return false;
  }
  auto isId = [](DType dtype) {
    return dtype == DType::I64 || dtype == DType::I32;
  };
  size_t count = size_t(argument.numElements());
  if (tensor->dtype == argument.dtype &&
      tensor->bytes.size() == size_t(argument.bytes)) {
    std::memcpy(out, tensor->bytes.data(), tensor->bytes.size());
    return true;
  }
  if (tensor->dtype == DType::I64 && isId(argument.dtype) &&
      tensor->bytes.size() == count * sizeof(int64_t)) {
    std::vector<int64_t> ids(count);
    std::memcpy(ids.data(), tensor->bytes.data(), tensor->bytes.size());
    storeTokenIds(ids.data(), count, argument.dtype, out);
    return true;
  }
  error = what + ": the micro-batch holds " +
          std::string(safeTensorsDTypeName(tensor->dtype)) +
          ", the step takes " +
          std::string(safeTensorsDTypeName(argument.dtype));
  return false;
}

void storeRandomInput(const StepTensor &argument, uint64_t seed,
                      int64_t globalMicroBatch, int64_t step, uint8_t *out) {
  RandomPosition position;
  position.seed = seed;
  position.step = step;
  position.firstSample =
      argument.random->perSample ? globalMicroBatch * argument.shape[0] : 0;
  fillRandomDraw(*argument.random, argument.dtype, argument.shape, position,
                 out);
}

} // namespace mlir::mantissa::rt
