//===- StepTensorJson.h - Reading a step program's tensor entries -*- C++
//-*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The `arguments` and `results` entries that step.gpu.json and step.cpu.json
// share (docs/gpu-step.md): {"name", "role", "dtype", "shape", "bytes"}.
// One parser for both programs, for their readers, which parse with
// nlohmann::json (GpuProgram.cpp here, the runtime's CpuStep.cpp); the
// compiler only writes entries (StepTensor.h's writeStepTensors).
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_STEPTENSORJSON_H
#define MANTISSA_FORMAT_STEPTENSORJSON_H

#include "mantissa/Format/StepTensor.h"

#include <nlohmann/json.hpp>

#include <string>

namespace mlir::mantissa::rt::detail {

/// Thrown by the program loaders' parsers, turned into their error message.
struct ProgramError {
  std::string message;
};

/// Entry `index` of a program's arguments (`isArgument`) or results; `where`
/// says which list, for messages. Throws ProgramError.
StepTensor parseStepTensor(const nlohmann::json &entry, bool isArgument,
                           size_t index, const std::string &where);

/// `tensor` as an entry of a program's `arguments` or `results`.
nlohmann::json stepTensorJson(const StepTensor &tensor);

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_FORMAT_STEPTENSORJSON_H
