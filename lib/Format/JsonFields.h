//===- JsonFields.h - Typed fields of the step programs' JSON ---*- C++ -*-===//
//
// Part of the Mantissa project. Internal to mantissa_format.
//
//===----------------------------------------------------------------------===//
//
// The readers of one typed field of a step program's JSON object, shared by
// the program's parser (GpuProgram.cpp) and its tensor entries'
// (StepTensor.cpp): each throws ProgramError saying what and where when the
// field is missing, of another type or out of range.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_JSONFIELDS_H
#define MANTISSA_FORMAT_JSONFIELDS_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/StepTensorJson.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdint>
#include <string>

namespace mlir::mantissa::rt::detail {

using json = nlohmann::json;

inline std::string dtypeText(DType dtype) {
  return std::string(safeTensorsDTypeName(dtype));
}

inline int64_t integer(const json &object, const char *key,
                       const std::string &what, int64_t min = 0,
                       int64_t max = INT64_MAX) {
  if (!object.is_object() || !object.contains(key) ||
      !object[key].is_number_integer())
    throw ProgramError{what + ": '" + key + "' is missing or not an integer"};
  int64_t value = object[key].get<int64_t>();
  if (value < min || value > max)
    throw ProgramError{what + ": '" + key + "' is " + std::to_string(value) +
                       ", out of range [" + std::to_string(min) + ", " +
                       std::to_string(max) + "]"};
  return value;
}

/// An optional integer (`fallback` when absent), for report-only fields.
inline int64_t optionalInteger(const json &object, const char *key,
                               const std::string &what, int64_t fallback,
                               int64_t min = 0) {
  return object.contains(key) ? integer(object, key, what, min) : fallback;
}

inline std::string string(const json &object, const char *key,
                          const std::string &what) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string())
    throw ProgramError{what + ": '" + key + "' is missing or not a string"};
  return object[key].get<std::string>();
}

inline bool boolean(const json &object, const char *key,
                    const std::string &what) {
  if (!object.contains(key) || !object[key].is_boolean())
    throw ProgramError{what + ": '" + key + "' is missing or not a boolean"};
  return object[key].get<bool>();
}

inline double number(const json &object, const char *key,
                     const std::string &what) {
  if (!object.contains(key) || !object[key].is_number())
    throw ProgramError{what + ": '" + key + "' is missing or not a number"};
  return object[key].get<double>();
}

inline DType dtype(const json &object, const std::string &what) {
  std::string name = string(object, "dtype", what);
  std::optional<DType> parsed = parseSafeTensorsDTypeName(name);
  if (!parsed)
    throw ProgramError{what + ": unknown dtype '" + name + "'"};
  return *parsed;
}

inline const json &array(const json &object, const char *key,
                         const std::string &what) {
  if (!object.contains(key) || !object[key].is_array())
    throw ProgramError{what + ": '" + key + "' is missing or not an array"};
  return object[key];
}

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_FORMAT_JSONFIELDS_H
