//===- StepSignature.cpp - A train.step's arguments and results -----------===//
//
// getStepArgumentTensor and getStepResultTensor (StepSignature.h), in the
// code generator's library: the GPU program's builder records them, and
// the CPU step's writer (lib/Driver) lists the same signature from here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/StepSignature.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Dialect/Train/IR/RandomDraws.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::mantissa;
using rt::StepTensor;

/// A step tensor of `type` as the step programs declare it.
static StepTensor makeStepTensor(Type type, StringRef name,
                                 StepTensor::Role role) {
  auto tensor = cast<RankedTensorType>(type);
  StepTensor result;
  result.name = name.str();
  result.role = role;
  result.dtype = getDType(tensor.getElementType());
  result.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  result.bytes = std::max<int64_t>(
      1, tensor.getNumElements() * getStorageBytes(tensor.getElementType()));
  return result;
}

StepTensor mlir::mantissa::getStepArgumentTensor(train::StepOp step,
                                                 unsigned index) {
  using Role = StepTensor::Role;
  train::TensorInfoAttr info = step.getTensorInfo(index);
  Role role = Role::Parameter;
  switch (info.getKind()) {
  case train::TensorKind::parameter:
    role = Role::Parameter;
    break;
  // Constants (lifted tensors, non-persistent buffers) are read-only model
  // state, as buffers without mutations.
  case train::TensorKind::buffer:
  case train::TensorKind::constant:
    role = Role::Buffer;
    break;
  case train::TensorKind::user_input:
    role = Role::UserInput;
    break;
  case train::TensorKind::random:
    role = Role::Random;
    break;
  }
  StepTensor tensor =
      makeStepTensor(step.getArgumentTypes()[index], info.getFqn(), role);
  // The step verified the draw.
  std::string error;
  if (role == Role::Random)
    tensor.random = train::getRandomDraw(step, index, error);
  return tensor;
}

StepTensor mlir::mantissa::getStepResultTensor(train::StepOp step,
                                               unsigned index) {
  using Role = StepTensor::Role;
  train::ResultInfoAttr info = step.getResultInfo(index);
  Role role = Role::Loss;
  switch (info.getKind()) {
  case train::ResultKind::loss:
    role = Role::Loss;
    break;
  case train::ResultKind::gradient:
    role = Role::Gradient;
    break;
  case train::ResultKind::buffer_mutation:
    role = Role::BufferMutation;
    break;
  case train::ResultKind::user_output:
    role = Role::UserOutput;
    break;
  }
  return makeStepTensor(step.getResultTypes()[index],
                        info.getFqn() ? info.getFqn().getValue() : "", role);
}
