//===- StepTensor.h - A step's arguments and results ------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The signature of a compiled training step, whatever it runs on: each
// argument and result with its role, dtype, shape and byte size, and an
// integer input's index bound. The compiler derives it from the step
// (mantissa/Conversion/StepSignature.h) and writes it into both step
// programs, `arguments` and `results` of step.gpu.json (GpuProgram.h) and
// of step.cpu.json; the runtime's CPU and GPU steps bind their buffers by
// it. The JSON of one entry is written here and read by StepTensorJson.h.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_STEPTENSOR_H
#define MANTISSA_FORMAT_STEPTENSOR_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/IndexBound.h"
#include "mantissa/Format/RandomDraw.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// One step argument or result.
struct StepTensor {
  enum class Role {
    Parameter,
    Buffer,
    UserInput,
    Random, // arguments
    Loss,
    Gradient,
    BufferMutation,
    UserOutput // results
  };
  std::string name;
  Role role = Role::Parameter;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Dense row-major bytes, at least 1.
  int64_t bytes = 1;
  /// For an integer user input that indexes a table: the bound of its ids
  /// (`index_bound`, `index_bound_what`, `index_ignored`; bound 0: none).
  IndexBound indexBound;
  /// For a `random` argument: what it draws (RandomDraw.h); the runtime
  /// fills it before each micro-batch (`random` in the JSON entry).
  std::optional<RandomDraw> random;
  int64_t numElements() const;
};

/// The role's name in the file ("parameter", "buffer_mutation", ...).
const char *stepTensorRoleName(StepTensor::Role role);

/// An `arguments` or `results` list as JSON text (an array of {"name",
/// "role", "dtype", "shape", "bytes"} and an argument's index bound), the
/// entries step.gpu.json and step.cpu.json share.
std::string writeStepTensors(const std::vector<StepTensor> &list);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_STEPTENSOR_H
