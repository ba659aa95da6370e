//===- Passes.h - The CPU lowering of train steps ---------------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td: the CPU lowering of `train`
// steps (lib/Conversion/TrainToLinalg).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_H
#define MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_H
