//===- Passes.h - The AdamW update lowered ----------------------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td: the fused AdamW update
// (lib/Conversion/AdamWToLoops).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_H
#define MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Conversion/AdamWToLoops/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Conversion/AdamWToLoops/Passes.h.inc"

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_H
