//===- Passes.h - The GPU step's train rewrites -----------------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td: the rewrites of a planned
// train.step that the GPU pipeline runs before bufferization
// (lib/Transforms/GPU).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_GPU_PASSES_H
#define MANTISSA_TRANSFORMS_GPU_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Transforms/GPU/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Transforms/GPU/Passes.h.inc"

} // namespace mlir::mantissa

#endif // MANTISSA_TRANSFORMS_GPU_PASSES_H
