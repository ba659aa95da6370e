//===- Passes.h - Lowerings to CPU and GPU code -----------------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_PASSES_H
#define MANTISSA_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Conversion/Passes.h.inc"

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_PASSES_H
