//===- Passes.h - The lowerings to CPU code and the update ------*- C++ -*-===//
//
// Registers the passes of lib/Conversion's lowerings in one call, for tools
// that offer them all (mantissa-opt): the CPU lowering of `train` steps
// (TrainToLinalg/Passes.td) and the AdamW update (AdamWToLoops/Passes.td).
// The GPU step's passes register with registerTrainToGPUPasses
// (TrainToGPU.h).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_PASSES_H
#define MANTISSA_CONVERSION_PASSES_H

#include "mantissa/Conversion/AdamWToLoops/Passes.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"

namespace mlir::mantissa {

inline void registerConversionPasses() {
  registerTrainToLinalgPasses();
  registerAdamWToLoopsPasses();
}

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_PASSES_H
