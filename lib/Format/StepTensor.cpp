//===- StepTensor.cpp - A step's arguments and results -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/StepTensor.h"
#include "JsonFields.h"
#include "mantissa/Format/StepTensorJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

int64_t StepTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

namespace {

/// Each role, its name in the file and whether it is an argument's.
const struct {
  const char *text;
  StepTensor::Role role;
  bool argument;
} kRoles[] = {{"parameter", StepTensor::Role::Parameter, true},
              {"buffer", StepTensor::Role::Buffer, true},
              {"user_input", StepTensor::Role::UserInput, true},
              {"random", StepTensor::Role::Random, true},
              {"loss", StepTensor::Role::Loss, false},
              {"gradient", StepTensor::Role::Gradient, false},
              {"buffer_mutation", StepTensor::Role::BufferMutation, false},
              {"user_output", StepTensor::Role::UserOutput, false}};

/// An argument's optional `index_bound`, `index_bound_what` and
/// `index_ignored` (bound 0 when absent).
IndexBound parseIndexBound(const json &entry, size_t index) {
  IndexBound bound;
  if (!entry.contains("index_bound"))
    return bound;
  if (!entry["index_bound"].is_number_integer() ||
      entry["index_bound"].get<int64_t>() < 1)
    throw ProgramError{"argument " + std::to_string(index) +
                       ": 'index_bound' is not a positive integer"};
  bound.bound = entry["index_bound"].get<int64_t>();
  bound.what = entry.value("index_bound_what", "");
  if (entry.contains("index_ignored")) {
    if (!entry["index_ignored"].is_number_integer())
      throw ProgramError{"argument " + std::to_string(index) +
                         ": 'index_ignored' is not an integer"};
    bound.ignored = entry["index_ignored"].get<int64_t>();
  }
  return bound;
}

/// A `random` argument's draw: {"distribution", "low", "high", "node",
/// "per_sample"}, checked as the runtime will generate it.
RandomDraw parseRandomDraw(const json &entry, const StepTensor &tensor,
                           const std::string &what) {
  if (!entry.contains("random") || !entry["random"].is_object())
    throw ProgramError{what + ": a random argument without its 'random' draw"};
  const json &object = entry["random"];
  RandomDraw draw;
  std::string name = string(object, "distribution", what);
  std::optional<RandomDraw::Distribution> distribution =
      parseRandomDistribution(name);
  if (!distribution)
    throw ProgramError{what + ": unknown distribution '" + name + "'"};
  draw.distribution = *distribution;
  for (const char *key : {"low", "high"})
    if (!object.contains(key) || !object[key].is_number())
      throw ProgramError{what + ": 'random." + key +
                         "' is missing or not a number"};
  draw.low = object["low"].get<double>();
  draw.high = object["high"].get<double>();
  draw.node = string(object, "node", what);
  if (!object.contains("per_sample") || !object["per_sample"].is_boolean())
    throw ProgramError{what + ": 'random.per_sample' is missing or not a bool"};
  draw.perSample = object["per_sample"].get<bool>();
  std::string problem = checkRandomDraw(draw, tensor.dtype, tensor.shape);
  if (!problem.empty())
    throw ProgramError{what + ": " + problem};
  return draw;
}

} // namespace

const char *mlir::mantissa::rt::stepTensorRoleName(StepTensor::Role role) {
  for (const auto &entry : kRoles)
    if (entry.role == role)
      return entry.text;
  return "?";
}

json detail::stepTensorJson(const StepTensor &tensor) {
  json entry = {{"name", tensor.name},
                {"role", stepTensorRoleName(tensor.role)},
                {"dtype", dtypeText(tensor.dtype)},
                {"shape", tensor.shape},
                {"bytes", tensor.bytes}};
  if (tensor.indexBound.bound > 0) {
    entry["index_bound"] = tensor.indexBound.bound;
    entry["index_bound_what"] = tensor.indexBound.what;
    if (tensor.indexBound.ignored)
      entry["index_ignored"] = *tensor.indexBound.ignored;
  }
  if (tensor.random)
    entry["random"] = {
        {"distribution", randomDistributionName(tensor.random->distribution)},
        {"low", tensor.random->low},
        {"high", tensor.random->high},
        {"node", tensor.random->node},
        {"per_sample", tensor.random->perSample}};
  return entry;
}

StepTensor detail::parseStepTensor(const json &entry, bool isArgument,
                                   size_t index, const std::string &where) {
  std::string what = where + " " + std::to_string(index);
  if (!entry.is_object())
    throw ProgramError{what + " is not an object"};
  StepTensor tensor;
  tensor.name = string(entry, "name", what);
  what += " '" + tensor.name + "'";
  std::string role = string(entry, "role", what);
  bool known = false;
  for (const auto &candidate : kRoles)
    if (candidate.argument == isArgument && role == candidate.text) {
      tensor.role = candidate.role;
      known = true;
    }
  if (!known)
    throw ProgramError{what + ": unknown role '" + role + "'"};
  tensor.dtype = dtype(entry, what);
  for (const json &dim : array(entry, "shape", what)) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
      throw ProgramError{what + ": 'shape' has a bad dimension"};
    tensor.shape.push_back(dim.get<int64_t>());
  }
  tensor.bytes = integer(entry, "bytes", what, 1);
  // The shape comes from the file: its element and byte counts must fit in
  // int64_t, so that numElements() never overflows once it is accepted.
  int64_t elements = 1, dense = 0;
  for (int64_t dim : tensor.shape)
    if (__builtin_mul_overflow(elements, dim, &elements))
      throw ProgramError{what + ": 'shape' has more than 2^63 elements"};
  if (__builtin_mul_overflow(elements, int64_t(elementSize(tensor.dtype)),
                             &dense))
    throw ProgramError{what + ": 'shape' takes more than 2^63 bytes"};
  dense = std::max<int64_t>(1, dense);
  if (tensor.bytes != dense)
    throw ProgramError{what + ": 'bytes' is " + std::to_string(tensor.bytes) +
                       ", its shape and dtype take " + std::to_string(dense)};
  if (isArgument)
    tensor.indexBound = parseIndexBound(entry, index);
  if (tensor.role == StepTensor::Role::Random)
    tensor.random = parseRandomDraw(entry, tensor, what);
  return tensor;
}

std::string
mlir::mantissa::rt::writeStepTensors(const std::vector<StepTensor> &list) {
  json array = json::array();
  for (const StepTensor &tensor : list)
    array.push_back(stepTensorJson(tensor));
  return array.dump(2);
}
