//===- Passes.h - The GPU step's tensor and buffer passes -------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td: the GPU step's passes on
// linalg, before and after bufferization (lib/Conversion/TrainToGPU/Buffers).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_H
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_H
