//===- StepTensorJson.h - A step program's tensor entries -------*- C++ -*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The `arguments` and `results` entries that step.gpu.json and step.cpu.json
// share (docs/gpu-step.md): {"name", "role", "dtype", "shape", "bytes"}.
// One parser for both programs.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_STEPTENSORJSON_H
#define MANTISSA_RUNTIME_STEPTENSORJSON_H

#include "mantissa/Runtime/GpuProgram.h"
#include "mantissa/Runtime/TokenData.h"

#include <nlohmann/json.hpp>

#include <string>

namespace mlir::mantissa::rt::detail {

/// Thrown by the program loaders' parsers, turned into their error message.
struct ProgramError {
  std::string message;
};

/// Entry `index` of a program's arguments (`isArgument`) or results; `where`
/// says which list, for messages. Throws ProgramError.
GpuStepTensor parseStepTensor(const nlohmann::json &entry, bool isArgument,
                              size_t index, const std::string &where);

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_STEPTENSORJSON_H
