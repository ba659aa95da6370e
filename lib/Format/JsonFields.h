//===- JsonFields.h - Typed fields of the step programs' JSON ---*- C++ -*-===//
//
// Part of the Mantissa project. Internal to mantissa_format.
//
//===----------------------------------------------------------------------===//
//
// The readers of one typed field of a Format file's JSON object, shared by
// the parsers of the programs (GpuProgram.cpp, CpuProgram.cpp), their tensor
// entries (StepTensor.cpp) and the manifest (ArtifactManifest.cpp): each
// throws ProgramError saying what and where when the field is missing, of
// another type or out of range.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_JSONFIELDS_H
#define MANTISSA_FORMAT_JSONFIELDS_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/StepTensorJson.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

/// The `target_features` compiled code records (the /proc/cpuinfo names of
/// the extensions it may use, for rt::checkCompiledFor), none when absent;
/// `where` prefixes the key in messages ("kernels." for the manifest's).
inline std::optional<std::vector<std::string>>
targetFeatures(const json &object, const std::string &where) {
  if (!object.contains("target_features"))
    return std::nullopt;
  const json &features = object["target_features"];
  if (!features.is_array())
    throw ProgramError{"'" + where + "target_features' is not an array"};
  std::vector<std::string> names;
  for (const json &feature : features) {
    if (!feature.is_string())
      throw ProgramError{"'" + where + "target_features' holds a non-string"};
    names.push_back(feature.get<std::string>());
  }
  return names;
}

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_FORMAT_JSONFIELDS_H
